//! An in-memory stand-in for the Kubernetes API server, for weft's lab and tests:
//! no API server can run on these machines. Never linked into the agent.
//!
//! It serves the real API's JSON and semantics for the resources weft watches
//! ([`resources::RESOURCES`]): discovery (`/api`, `/apis`, each group version), list
//! with `resourceVersion`, watch (`?watch=1`, bookmarks, `sendInitialEvents`, `410
//! Gone` once its history is compacted, objects that leave a selection seen as
//! deleted), label and field selectors, create / replace / delete / merge patch, the
//! `status` subresource, `Status` errors and the `Table` form, so that the agent's
//! kube-rs client and kubectl (1.32) both work against it. What it does not model:
//! authentication, admission beyond the defaults weft reads, graceful deletion
//! (objects go at once), strategic merge of lists, protobuf (refused with `415`: kubectl's
//! generators such as `create namespace` send it; `create -f` sends JSON), schemas (the
//! OpenAPI v3 documents only tell kubectl that the server validates fields itself).
//!
//! Start one with [`KubeApi::start`], hand its [`KubeApi::kubeconfig`] to a client,
//! change objects through HTTP or [`KubeApi::store`]; [`Store::compact`] makes older
//! watches `410`, [`KubeApi::stop`] ends every connection (the API "down"), and
//! [`KubeApi::start_with`] brings the same objects back on the same address.

pub mod patch;
pub mod resources;
pub mod selector;
mod server;
pub mod store;

pub use store::{ApiError, Store};

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How many changes a store keeps for watches to replay.
pub const DEFAULT_HISTORY: usize = 10_000;

/// A running stand-in API server on loopback.
pub struct KubeApi {
    store: Arc<Store>,
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

/// How a stand-in runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where to listen (port 0: any free port on loopback).
    pub addr: SocketAddr,
    /// How often a watch that asked for bookmarks gets one (the real server: about
    /// a minute; tests want them sooner).
    pub bookmark_interval: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            bookmark_interval: Duration::from_secs(1),
        }
    }
}

impl KubeApi {
    /// Starts an empty stand-in on a free loopback port.
    ///
    /// # Errors
    /// The listening socket's error.
    pub async fn start() -> std::io::Result<Self> {
        Self::start_with(Arc::new(Store::new(DEFAULT_HISTORY)), Options::default()).await
    }

    /// Starts a stand-in serving `store`.
    ///
    /// # Errors
    /// The listening socket's error (`AddrInUse` when the address is taken).
    pub async fn start_with(store: Arc<Store>, options: Options) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(options.addr).await?;
        let addr = listener.local_addr()?;
        let (stop, stopping) = watch::channel(false);
        let shared = server::Shared {
            store: store.clone(),
            stopping: stopping.clone(),
            bookmark_interval: options.bookmark_interval,
        };
        let app = axum::Router::new()
            .fallback(server::handle)
            .with_state(shared);
        let mut until = stopping;
        let task = tokio::spawn(async move {
            let serve = axum::serve(listener, app).with_graceful_shutdown(async move {
                let _ = until.wait_for(|s| *s).await;
            });
            if let Err(e) = serve.await {
                tracing::warn!(error = %e, "the stand-in API server stopped");
            }
        });
        Ok(KubeApi {
            store,
            addr,
            stop,
            task,
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The objects it serves.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// A kubeconfig naming this server as cluster, context and (anonymous) user `name`.
    pub fn kubeconfig(&self, name: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: {url}\n\
             users:\n- name: {name}\n  user: {{}}\ncontexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: {name}\n\
             current-context: {name}\n",
            url = self.url()
        )
    }

    /// Writes [`KubeApi::kubeconfig`] to `path`.
    ///
    /// # Errors
    /// The write's error.
    pub fn write_kubeconfig(&self, path: &Path, name: &str) -> std::io::Result<()> {
        std::fs::write(path, self.kubeconfig(name))
    }

    /// Stops serving: open watches end, connections close, the port is free. Returns
    /// the store, to serve again with [`KubeApi::start_with`].
    pub async fn stop(self) -> Arc<Store> {
        let _ = self.stop.send(true);
        // Graceful shutdown waits for open connections; watches end on the flag.
        if tokio::time::timeout(Duration::from_secs(5), self.task)
            .await
            .is_err()
        {
            tracing::warn!("the stand-in API server did not stop within 5 s");
        }
        self.store
    }
}
