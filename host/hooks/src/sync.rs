//! The "initial list of X from cluster Y is in" moment, as callbacks.

use crate::{Counts, Resource};
use std::sync::Arc;

/// What a "synced" callback learns about the cluster.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ClusterInfo {
    /// The cluster's name.
    pub name: String,
    /// Its ID, when it announced one.
    pub id: Option<u32>,
    /// How many values of each resource it holds now.
    pub counts: Counts,
}

/// A callback run once per remote cluster when one resource's initial list is in.
pub type SyncCallback = Arc<dyn Fn(Resource, &ClusterInfo) + Send + Sync>;

/// A callback run when a remote cluster is disconnected for good.
pub type DisconnectCallback = Arc<dyn Fn(&ClusterInfo) + Send + Sync>;

/// Callbacks per resource, and on disconnection, registered before the mesh starts.
#[derive(Clone, Default)]
pub struct SyncCallbacks {
    by_resource: [Vec<SyncCallback>; 4],
    disconnected: Vec<DisconnectCallback>,
}

impl SyncCallbacks {
    /// Runs `f` once per remote cluster when `resource`'s initial list is in (e.g.
    /// "identities synced"), never again on a reconnect.
    #[must_use]
    pub fn on(
        mut self,
        resource: Resource,
        f: impl Fn(Resource, &ClusterInfo) + Send + Sync + 'static,
    ) -> Self {
        self.by_resource[resource.index()].push(Arc::new(f));
        self
    }

    /// Runs `f` when a remote cluster that was accepted is disconnected in the sense
    /// of the barriers: removed, or refused (bad config, ID clash, required config
    /// missing). Not on a transient etcd outage, which keeps waiters pending, and not
    /// when the agent stops. Runs again after the cluster is accepted again.
    #[must_use]
    pub fn on_disconnected(mut self, f: impl Fn(&ClusterInfo) + Send + Sync + 'static) -> Self {
        self.disconnected.push(Arc::new(f));
        self
    }

    /// Runs the disconnection callbacks (the mesh calls it).
    pub fn run_disconnected(&self, info: &ClusterInfo) {
        for f in &self.disconnected {
            f(info);
        }
    }

    /// Runs `resource`'s callbacks (the mesh calls it, once per cluster).
    pub fn run(&self, resource: Resource, info: &ClusterInfo) {
        for f in &self.by_resource[resource.index()] {
            f(resource, info);
        }
    }
}

impl std::fmt::Debug for SyncCallbacks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let counts: Vec<usize> = self.by_resource.iter().map(Vec::len).collect();
        f.debug_struct("SyncCallbacks")
            .field("per_resource", &counts)
            .field("disconnected", &self.disconnected.len())
            .finish()
    }
}
