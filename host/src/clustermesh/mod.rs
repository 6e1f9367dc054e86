//! The cluster mesh: one `RemoteCluster` (`remote_cluster.rs`) per file in the config
//! directory, each read from its etcd, each with four sync barriers.
//!
//! Data flows one way: etcd → [`crate::kvstore::list_watch_raw`] → decode → the
//! cluster's stores (the one record of its keys; each list drains what it did not
//! deliver again) → the [`Observer`] (the state stage). Barriers are released from the same
//! task that applies the events, after the last event of the initial list, so an
//! observer has seen the whole list when anyone learns it is synced.

mod barrier;
mod cluster_ids;
mod config_dir;
mod config_file;
mod connection;
mod layout;
mod mesh;
mod remote_cluster;
mod resource;
mod status;
mod wait;

pub use barrier::{BarrierState, Outcome, Resource, SyncBarrier, Waiter};
pub use config_dir::{watch_dir, DirEvent};
pub use config_file::{parse_config_file, ConfigError};
pub use layout::{cluster_config_key, Layout, HAS_CLUSTER_CONFIG_KEY};
pub use mesh::ClusterMesh;
pub use resource::{Kept, Value};
pub use status::{ClusterStatus, Counts, Synced, SyncedAfter};
pub use wait::{PendingCluster, SyncReport, SyncTimeout, SyncWait};

use std::sync::Arc;
use std::time::Duration;

/// The mesh's configuration, parsed once at the edge.
#[derive(Debug, Clone)]
pub struct Config {
    /// This cluster's name: a remote cluster may not use it.
    pub cluster_name: String,
    /// This cluster's ID: a remote cluster may not use it.
    pub cluster_id: u32,
    /// The largest valid cluster ID (255; 511 in the extended mode).
    pub max_connected_clusters: u32,
    /// The most keys one remote cluster may hold, all resources together: a new key
    /// past it is refused as malformed, naming the limit.
    pub max_keys_per_cluster: usize,
    /// Limits of each remote cluster's etcd client.
    pub kvstore: crate::kvstore::Config,
    /// How long to wait for a required cluster config before refusing the cluster.
    pub cluster_config_timeout: Duration,
    /// Back-off between connection attempts of a refused or unreachable cluster.
    pub retry: (Duration, Duration),
}

impl Default for Config {
    fn default() -> Self {
        Self {
            cluster_name: "default".into(),
            cluster_id: 0,
            max_connected_clusters: 255,
            max_keys_per_cluster: 1_000_000,
            kvstore: crate::kvstore::Config::default(),
            cluster_config_timeout: Duration::from_secs(180),
            retry: (Duration::from_millis(500), Duration::from_secs(30)),
        }
    }
}

/// A change to a remote cluster's state, handed to the [`Observer`].
#[derive(Debug, Clone, Copy)]
pub enum ClusterEvent<'a> {
    /// A value was added or changed.
    Upsert {
        /// The remote cluster.
        cluster: &'a str,
        /// Its ID, when it announced one.
        cluster_id: Option<u32>,
        /// The etcd key (shared: an owner of what the value states may keep it).
        key: &'a Arc<str>,
        /// The new value.
        value: &'a Value,
        /// What was kept of the value it replaced, `None` for a new key.
        old: Option<&'a Kept>,
    },
    /// The cluster will hold about `keys` values of `resource`: a hint to size for
    /// them. Sent when a list starts (etcd's count of the range, at most the cluster's
    /// key limit) and with 0 when the cluster is removed.
    Expect {
        /// The remote cluster.
        cluster: &'a str,
        /// The resource being listed.
        resource: Resource,
        /// How many values the list holds.
        keys: usize,
    },
    /// A value was deleted, vanished during a disconnect, or its cluster was removed.
    Delete {
        /// The remote cluster.
        cluster: &'a str,
        /// The etcd key.
        key: &'a Arc<str>,
        /// What was kept of the value it had.
        old: &'a Kept,
    },
}

/// The next stage: receives every change, in order per resource. Called from the
/// cluster's task, never under a mesh lock; it should not block.
pub trait Observer: Send + Sync + 'static {
    /// One change.
    fn on_event(&self, event: ClusterEvent<'_>);
}

/// An observer that ignores everything.
#[derive(Debug, Default)]
pub struct NoObserver;

impl Observer for NoObserver {
    fn on_event(&self, _: ClusterEvent<'_>) {}
}

pub use weft_hooks::{ClusterInfo, DisconnectCallback, SyncCallback, SyncCallbacks};
