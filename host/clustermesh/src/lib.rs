//! The cluster mesh: one `RemoteCluster` (`remote_cluster.rs`) per file in the config
//! directory, each read from its etcd, each with four sync barriers.
//!
//! Data flows one way: etcd → [`weft_kvstore::list_watch_raw`] → the reflector
//! (`reflector.rs`: decode → the cluster's stores, the one record of its keys; each
//! list drains what it did not deliver again) → the [`Observer`] (the state stage).
//! This cluster's own kvstore goes through the same reflector
//! ([`run_local_cluster`]). Barriers are released from the same
//! task that applies the events, after the last event of the initial list, so an
//! observer has seen the whole list when anyone learns it is synced.
//!
//! Owns: the remote clusters (config directory, connections, decoding, stores), their
//! barriers and the waits on them (under the keys of `weft_model::layout`), and this
//! cluster's writes to its own etcd: the node's registration ([`registration`]) and the
//! identities it allocates ([`identity_allocator`]), both under leases.
//! Must not know: the ipcache, identities' resolution, the datapath, plugins or the
//! agent. What it reads goes to an [`Observer`] in the words of `weft_model::remote`;
//! the hook moments it fires are `weft_hooks`' callbacks.

#![deny(unsafe_code)]
#![warn(missing_docs)]

mod barrier;
mod cluster_config;
mod cluster_ids;
mod config_dir;
mod config_file;
mod connection;
pub mod identity_allocator;
mod leased_keys;
mod local_cluster;
mod mesh;
mod reflector;
pub mod registration;
mod remote_cluster;
mod resource;
mod shared;
mod status;
mod wait;

pub use barrier::{BarrierState, Outcome, Resource, SyncBarrier, Waiter};
pub use cluster_config::write_cluster_config;
pub use config_dir::{watch_dir, DirEvent};
pub use config_file::{parse_config_file, ConfigError};
pub use identity_allocator::GlobalAllocator;
pub use leased_keys::{LeasedKeys, PutError};
pub use local_cluster::{run_local_cluster, LocalCluster, LOCAL_RESOURCES};
pub use mesh::ClusterMesh;
pub use registration::{run_registration, Registration};
pub use status::{ClusterStatus, Counts, Synced, SyncedAfter};
pub use wait::{PendingCluster, SyncReport, SyncTimeout, SyncWait};
pub use weft_model::remote::{ClusterEvent, Kept, NoObserver, Observer, Value};

use std::time::Duration;

/// The largest valid cluster ID unless configured otherwise (`--max-connected-clusters`;
/// 511 is the extended mode), as the agents check it and the cluster config announces it.
pub const DEFAULT_MAX_CONNECTED_CLUSTERS: u32 = 255;

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
    pub kvstore: weft_kvstore::Config,
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
            max_connected_clusters: DEFAULT_MAX_CONNECTED_CLUSTERS,
            max_keys_per_cluster: 1_000_000,
            kvstore: weft_kvstore::Config::default(),
            cluster_config_timeout: Duration::from_secs(180),
            retry: (Duration::from_millis(500), Duration::from_secs(30)),
        }
    }
}

pub use weft_hooks::{ClusterInfo, DisconnectCallback, SyncCallback, SyncCallbacks};
