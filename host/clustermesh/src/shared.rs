//! What the mesh and each cluster's connection task share: the mesh's configuration,
//! its members and the cluster IDs they claim. Its own file so that the mesh (which
//! starts connections) and a connection (which reads the configuration and claims its
//! cluster's ID) both depend on it and not on each other.

use super::cluster_ids::{ClusterIds, IdError};
use super::remote_cluster::RemoteCluster;
use super::{Config, Observer, SyncCallbacks};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tokio::task::JoinHandle;

pub(crate) struct Shared {
    pub(crate) config: Config,
    pub(crate) observer: Arc<dyn Observer>,
    pub(crate) callbacks: SyncCallbacks,
    pub(crate) ids: Mutex<ClusterIds>,
    pub(crate) clusters: Mutex<BTreeMap<String, Member>>,
    /// Serialises add/change/remove/stop; never held by a wait.
    pub(crate) changes: tokio::sync::Mutex<bool>,
    /// Set once the clusters present in the config directory at start were added.
    pub(crate) dir_synced: tokio::sync::watch::Sender<bool>,
    /// Set when the mesh stops: from then on no wait ends (see [`crate::ClusterMesh::stop`]).
    pub(crate) stopping: tokio::sync::watch::Sender<bool>,
}

pub(crate) struct Member {
    pub(crate) cluster: Arc<RemoteCluster>,
    pub(crate) task: Option<JoinHandle<()>>,
}

impl Shared {
    pub(crate) fn claim_id(&self, cluster: &str, id: u32) -> Result<(), IdError> {
        self.ids
            .lock()
            .expect("ids lock poisoned")
            .claim(cluster, id)
    }
}
