//! The set of remote clusters, driven by the config directory.

use super::cluster_ids::ClusterIds;
use super::config_dir::{watch_dir, DirEvent};
use super::config_file::ConfigError;
use super::remote_cluster::{error_chain, RemoteCluster};
use super::shared::{Member, Shared};
use super::{ClusterStatus, Config, Observer, SyncCallbacks};
use futures::StreamExt;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::task::JoinHandle;
use weft_kvstore::Endpoints;

/// The cluster mesh: add, reconnect and remove remote clusters; wait for their barriers.
///
/// Cheap to clone; all clones are the same mesh.
#[derive(Clone)]
pub struct ClusterMesh {
    pub(crate) shared: Arc<Shared>,
}

impl ClusterMesh {
    /// A mesh with no remote cluster yet.
    pub fn new(config: Config, observer: Arc<dyn Observer>, callbacks: SyncCallbacks) -> Self {
        let ids = ClusterIds::new(config.cluster_id, config.max_connected_clusters);
        Self {
            shared: Arc::new(Shared {
                config,
                observer,
                callbacks,
                ids: Mutex::new(ids),
                clusters: Mutex::new(BTreeMap::new()),
                changes: tokio::sync::Mutex::new(false),
                dir_synced: tokio::sync::watch::Sender::new(false),
                stopping: tokio::sync::watch::Sender::new(false),
            }),
        }
    }

    /// Adds cluster `name`, or reconnects it with a new configuration. A config error
    /// keeps the cluster listed, refused, with the error as its reason.
    pub async fn upsert_cluster(&self, name: &str, config: Result<Endpoints, ConfigError>) {
        let stopped = self.shared.changes.lock().await;
        if *stopped {
            return;
        }
        let (cluster, old_task) = {
            let mut clusters = self.shared.clusters.lock().expect("clusters lock poisoned");
            let member = clusters.entry(name.to_owned()).or_insert_with(|| Member {
                cluster: Arc::new(RemoteCluster::new(
                    name,
                    self.shared.observer.clone(),
                    self.shared.callbacks.clone(),
                    self.shared.config.max_keys_per_cluster,
                )),
                task: None,
            });
            (member.cluster.clone(), member.task.take())
        };
        stop_task(old_task).await;
        let endpoints = match config {
            Ok(_) if name == self.shared.config.cluster_name => {
                cluster.refuse(format!("{name:?} is this cluster's own name"));
                return;
            }
            Ok(e) => e,
            Err(e) => {
                cluster.refuse(error_chain(&e));
                return;
            }
        };
        tracing::info!(cluster = name, endpoints = ?endpoints.urls, "connecting remote cluster");
        let task = tokio::spawn(super::connection::run(
            cluster,
            self.shared.clone(),
            endpoints,
        ));
        if let Some(m) = self
            .shared
            .clusters
            .lock()
            .expect("clusters lock poisoned")
            .get_mut(name)
        {
            m.task = Some(task);
        }
    }

    /// Removes cluster `name`: its waiters are released as disconnected, every value it
    /// held is deleted (the observer sees each delete) and its cluster ID is freed.
    pub async fn remove_cluster(&self, name: &str) {
        let _guard = self.shared.changes.lock().await;
        let member = self
            .shared
            .clusters
            .lock()
            .expect("clusters lock poisoned")
            .remove(name);
        let Some(member) = member else { return };
        stop_task(member.task).await;
        member.cluster.disconnect();
        self.shared
            .ids
            .lock()
            .expect("ids lock poisoned")
            .release(name);
        // Before the drain, so the hook still sees what the cluster held.
        member.cluster.announce_disconnect();
        member.cluster.drain();
        tracing::info!(cluster = name, "remote cluster removed and drained");
    }

    /// Stops every connection; no state is drained, since the agent is going away,
    /// not the clusters. Waiters are not released: a stop is no news about a cluster,
    /// and a waiter that took it for "disconnected" would act as if the cluster were
    /// gone (collect its restored WireGuard peers, switch endpoints without its
    /// identities) just before the agent exits. Every wait on the mesh, begun or not,
    /// stays pending from here on; the process ends them.
    pub async fn stop(&self) {
        // First, so that no wait can end on what the stop does below.
        self.shared.stopping.send_replace(true);
        let mut stopped = self.shared.changes.lock().await;
        *stopped = true;
        let tasks: Vec<_> = {
            let mut clusters = self.shared.clusters.lock().expect("clusters lock poisoned");
            clusters.values_mut().map(|m| m.task.take()).collect()
        };
        for task in tasks {
            stop_task(task).await;
        }
    }

    /// Follows the config directory until the mesh is stopped: one cluster per file.
    pub async fn run_config_dir(&self, dir: PathBuf) {
        let mut events = watch_dir(dir);
        while let Some(event) = events.next().await {
            match event {
                DirEvent::Upsert { name, config } => self.upsert_cluster(&name, config).await,
                DirEvent::Remove { name } => self.remove_cluster(&name).await,
                DirEvent::InitDone => {
                    self.shared.dir_synced.send_replace(true);
                }
            }
            if *self.shared.changes.lock().await {
                return;
            }
        }
    }

    /// Returns once the clusters whose files were in the config directory at start
    /// have been added, so that a mesh-wide wait started then includes them.
    pub async fn config_dir_synced(&self) {
        let mut rx = self.shared.dir_synced.subscribe();
        // The sender lives as long as the mesh: this only ends when it is set.
        let _ = rx.wait_for(|synced| *synced).await;
    }

    /// Every remote cluster's status, by name.
    pub fn status(&self) -> Vec<ClusterStatus> {
        self.members().iter().map(|c| c.status()).collect()
    }

    /// A snapshot of the clusters, taken under the lock and used outside it.
    pub(crate) fn members(&self) -> Vec<Arc<RemoteCluster>> {
        let clusters = self.shared.clusters.lock().expect("clusters lock poisoned");
        clusters.values().map(|m| m.cluster.clone()).collect()
    }

    /// This mesh's configuration.
    pub fn config(&self) -> &Config {
        &self.shared.config
    }
}

async fn stop_task(task: Option<JoinHandle<()>>) {
    if let Some(task) = task {
        task.abort();
        let _ = task.await;
    }
}
