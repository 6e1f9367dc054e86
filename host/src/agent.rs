//! The running agent: wires kvstore, node registration, cluster mesh and the API.

use crate::api::{self, StatusReport};
use crate::clustermesh::{self, ClusterMesh, SyncCallbacks};
use crate::ipcache::Source;
use crate::kvstore::{self, Endpoints};
use crate::model::{Node, NodeAddress};
use crate::node::{run_registration, NodeId, Registration};
use crate::state::{run_local_kvstore, State};
use std::future::Future;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Everything the agent needs, parsed once at the edge.
#[derive(Debug, Clone)]
pub struct Config {
    /// The cluster mesh's configuration (own name and ID, remote etcd limits).
    pub mesh: clustermesh::Config,
    /// This cluster's etcd, where the node record is published (kvstore mode).
    pub kvstore_endpoints: Vec<String>,
    /// The clustermesh config directory, one file per remote cluster.
    pub clustermesh_config: Option<PathBuf>,
    /// Where the API socket lives.
    pub state_dir: PathBuf,
    /// How long start-up waits for remote ipcache entries and identities.
    pub ip_identities_sync_timeout: Duration,
    /// This node's name.
    pub node_name: String,
    /// This node's addresses.
    pub node_ips: Vec<IpAddr>,
}

/// What stops the agent from starting.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The state directory cannot be created.
    #[error("cannot create state directory {path}")]
    StateDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The API could not start.
    #[error(transparent)]
    Api(#[from] api::Error),
    /// The local etcd client could not be built.
    #[error(transparent)]
    Kvstore(#[from] kvstore::Error),
}

/// Runs the agent until `shutdown` completes, then stops the mesh without draining.
///
/// # Errors
/// [`Error`] when start-up fails; once running, problems are reported, not fatal.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), Error> {
    std::fs::create_dir_all(&config.state_dir).map_err(|source| Error::StateDir {
        path: config.state_dir.clone(),
        source,
    })?;
    let own_cluster = config.mesh.cluster_name.clone();
    let state = Arc::new(State::new(NodeId {
        cluster: own_cluster.clone(),
        name: config.node_name.clone(),
    }));
    state.nodes.upsert(Source::Local, own_node(&config));
    let callbacks = SyncCallbacks::default();
    let mesh = ClusterMesh::new(config.mesh.clone(), state.clone(), callbacks);
    let mut tasks = tokio::task::JoinSet::new();

    let api_state = api::Handlers {
        status: {
            let (mesh, state) = (mesh.clone(), state.clone());
            Box::new(move || StatusReport {
                cluster: own_cluster.clone(),
                clusters: mesh.status(),
                totals: Some(state.totals()),
            })
        },
        ipcache: {
            let state = state.clone();
            Box::new(move || {
                state
                    .ipcache
                    .entries()
                    .into_iter()
                    .map(Into::into)
                    .collect()
            })
        },
    };
    tasks.spawn(api::serve(&config.state_dir, api_state)?);

    if !config.kvstore_endpoints.is_empty() {
        let endpoints = Endpoints {
            urls: config.kvstore_endpoints.clone(),
            ..Endpoints::default()
        };
        let client = kvstore::Client::connect(&endpoints, &config.mesh.kvstore).await?;
        tasks.spawn(run_local_kvstore(
            client.clone(),
            state.clone(),
            config.mesh.cluster_name.clone(),
            config.node_name.clone(),
        ));
        tasks.spawn(run_registration(
            client,
            Registration {
                node: own_node(&config),
                lease_ttl: Duration::from_secs(15),
            },
        ));
    }
    if let Some(dir) = config.clustermesh_config.clone() {
        let m = mesh.clone();
        tasks.spawn(async move { m.run_config_dir(dir).await });
        let m = mesh.clone();
        let timeout = config.ip_identities_sync_timeout;
        tasks.spawn(async move {
            // Wait as endpoint regeneration will, for the clusters present at start.
            m.config_dir_synced().await;
            let deadline = tokio::time::Instant::now() + timeout;
            match m.ip_identities_synced(deadline).await {
                Ok(r) => tracing::info!(synced = ?r.synced, disconnected = ?r.disconnected, "remote ipcache and identities synced"),
                Err(e) => tracing::warn!(error = %e, "proceeding without full remote state"),
            }
        });
    }
    if let Some(client) = crate::k8s::client_if_configured().await {
        tasks.spawn(crate::k8s::run_kube_apiserver_source(
            client,
            state.ipcache.clone(),
        ));
    }
    tracing::info!(cluster = %config.mesh.cluster_name, node = %config.node_name, "weftd running");
    shutdown.await;
    tracing::info!("stopping: connections closed, no state drained");
    mesh.stop().await;
    tasks.shutdown().await;
    let _ = std::fs::remove_file(api::socket_path(&config.state_dir));
    Ok(())
}

/// This node's record, as published and as stated to the node manager.
fn own_node(config: &Config) -> Node {
    Node {
        name: config.node_name.clone(),
        cluster: config.mesh.cluster_name.clone(),
        cluster_id: config.mesh.cluster_id,
        ip_addresses: config
            .node_ips
            .iter()
            .map(|ip| NodeAddress {
                kind: "InternalIP".into(),
                ip: *ip,
            })
            .collect(),
        source: "kvstore".into(),
        labels: Some(Default::default()),
        ..Node::default()
    }
}
