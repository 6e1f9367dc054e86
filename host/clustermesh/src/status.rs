//! What an operator sees of each remote cluster (the `weftd status` contract).

use serde::{Deserialize, Serialize};

/// One remote cluster's status; its JSON form is a stable contract.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterStatus {
    /// The cluster's name.
    pub name: String,
    /// Its ID, once its cluster config was accepted.
    pub id: Option<u32>,
    /// Whether its etcd is reachable and every watch healthy.
    pub connected: bool,
    /// Whether all four barriers are released as synced.
    pub ready: bool,
    /// Per resource: is the initial list in?
    pub synced: Synced,
    /// Per resource: how many values are held.
    pub counts: Counts,
    /// How many malformed values were skipped.
    pub malformed: u64,
    /// The last error, or the reason the cluster is refused.
    pub last_error: Option<String>,
    /// When the last failure (refusal, unreachable etcd, broken watch) happened, in
    /// seconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure_unix: Option<u64>,
    /// Times a broken connection (a failed connect, a broken watch) was healthy again.
    #[serde(default)]
    pub reconnects: u64,
    /// Per resource, how long after the cluster was added its barrier was released,
    /// in milliseconds; `None` while pending.
    #[serde(default)]
    pub synced_after_ms: SyncedAfter,
}

impl ClusterStatus {
    /// The hooks' view of this cluster: what a plugin is told of it.
    pub fn hook_view(&self) -> weft_hooks::ClusterSync {
        weft_hooks::ClusterSync {
            name: self.name.clone(),
            connected: self.connected,
            nodes_synced: self.synced.nodes,
            ipcache_synced: self.synced.ipcache,
            identities_synced: self.synced.identities,
            services_synced: self.synced.services,
        }
    }
}

/// Per resource, milliseconds from the cluster's addition to its barrier's release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct SyncedAfter {
    /// Nodes.
    pub nodes: Option<u64>,
    /// ipcache entries.
    pub ipcache: Option<u64>,
    /// Identities.
    pub identities: Option<u64>,
    /// Services.
    pub services: Option<u64>,
}

impl SyncedAfter {
    /// Builds the values from per-resource ones in [`super::Resource::ALL`] order.
    pub fn from_array(s: [Option<u64>; 4]) -> Self {
        Self {
            nodes: s[0],
            ipcache: s[1],
            identities: s[2],
            services: s[3],
        }
    }

    /// The values in [`super::Resource::ALL`] order.
    pub fn to_array(self) -> [Option<u64>; 4] {
        [self.nodes, self.ipcache, self.identities, self.services]
    }
}

/// Per-resource sync state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Synced {
    /// Nodes' initial list is in.
    pub nodes: bool,
    /// The ipcache's initial list is in.
    pub ipcache: bool,
    /// Identities' initial list is in.
    pub identities: bool,
    /// Services' initial list is in.
    pub services: bool,
}

pub use weft_hooks::Counts;

impl Synced {
    /// Builds the flags from per-resource values in [`super::Resource::ALL`] order.
    pub fn from_array(s: [bool; 4]) -> Self {
        Self {
            nodes: s[0],
            ipcache: s[1],
            identities: s[2],
            services: s[3],
        }
    }

    /// All four are in.
    pub fn all(&self) -> bool {
        self.nodes && self.ipcache && self.identities && self.services
    }
}
