//! The four resources every remote cluster syncs, and counts of each.

use std::fmt;

/// The four resources read from every remote cluster, each with its own barrier.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Resource {
    /// `cilium/state/nodes/v1/<cluster>/`
    Nodes,
    /// `cilium/state/ip/v1/default/`
    IpCache,
    /// `cilium/state/identities/v1/id/`
    Identities,
    /// `cilium/state/services/v1/<cluster>/`
    Services,
}

impl Resource {
    /// Every resource, in a fixed order (the index order of per-resource arrays).
    pub const ALL: [Resource; 4] = [
        Resource::Nodes,
        Resource::IpCache,
        Resource::Identities,
        Resource::Services,
    ];

    /// The resource's name in status and logs.
    pub fn name(self) -> &'static str {
        match self {
            Resource::Nodes => "nodes",
            Resource::IpCache => "ipcache",
            Resource::Identities => "identities",
            Resource::Services => "services",
        }
    }

    /// The position of the resource in [`Resource::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Per-resource counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, Default)]
pub struct Counts {
    /// Nodes held.
    pub nodes: usize,
    /// ipcache entries held.
    pub ipcache: usize,
    /// Identities held.
    pub identities: usize,
    /// Services held.
    pub services: usize,
}

impl Counts {
    /// Builds counts from per-resource values in [`Resource::ALL`] order.
    pub fn from_array(c: [usize; 4]) -> Self {
        Self {
            nodes: c[0],
            ipcache: c[1],
            identities: c[2],
            services: c[3],
        }
    }
}
