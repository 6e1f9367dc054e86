//! Every etcd key weft reads or writes, in the established layout
//! (`shared/reference/kvstore-format.md`, "Keys"): a remote cluster's resources under
//! either of its layouts, the sync canaries, the cluster config, and what this cluster's
//! agents write to their own etcd (nodes, ipcache entries, identities and the
//! allocator's helpers). No `"cilium/…"` literal lives anywhere else; the tests below
//! pin each key against the reference's table.

use crate::{ClusterConfig, Resource};
use std::fmt::Display;

/// The key whose presence means a reader must find the cluster config.
pub const HAS_CLUSTER_CONFIG: &str = "cilium/.has-cluster-config";

/// The key of `cluster`'s config.
pub fn cluster_config(cluster: &str) -> String {
    format!("cilium/cluster-config/{cluster}")
}

/// The key of node `name` of `cluster`.
pub fn node(cluster: &str, name: &str) -> String {
    format!("{}{name}", Layout::PLAIN.prefix(Resource::Nodes, cluster))
}

/// The key of the ipcache entry of `prefix` (an address, or `address/len` for a CIDR).
/// The plain layout keeps every cluster's entries under one prefix, `default/`.
pub fn ip(prefix: impl Display) -> String {
    format!("{}{prefix}", Layout::PLAIN.prefix(Resource::IpCache, ""))
}

/// The master key of identity `id`: its labels, on no lease.
pub fn identity(id: u32) -> String {
    format!("{}{id}", Layout::PLAIN.prefix(Resource::Identities, ""))
}

/// The key of global service `namespace/name` exported by `cluster`.
pub fn service(cluster: &str, namespace: &str, name: &str) -> String {
    format!(
        "{}{namespace}/{name}",
        Layout::PLAIN.prefix(Resource::Services, cluster)
    )
}

/// The identity allocator's helper keys, beside the master keys (`id/`): which nodes
/// use an identity, and the lock that serialises allocations of the same labels.
pub mod allocator {
    const BASE: &str = "cilium/state/identities/v1/";

    /// Every key of the allocator, master keys included.
    pub const ALL: &str = BASE;

    /// The prefix of every identity's master key ([`super::identity`]).
    pub fn masters() -> String {
        super::Layout::PLAIN.prefix(crate::Resource::Identities, "")
    }

    /// The key that says `node` uses the identity of `labels` (its value is the id).
    pub fn value(labels: &str, node: &str) -> String {
        format!("{}{node}", value_prefix(labels))
    }

    /// The prefix of every node's use of the identity of `labels`.
    pub fn value_prefix(labels: &str) -> String {
        format!("{BASE}value/{labels}/")
    }

    /// The prefix under which contenders for `labels`' lock create their keys.
    pub fn locks_prefix(labels: &str) -> String {
        format!("{BASE}locks/{labels}/")
    }
}

/// How a remote cluster's etcd is read, derived from its cluster config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// State mirrored under `cilium/cache/...` instead of `cilium/state/...`.
    pub cached: bool,
    /// Each resource is watched only once its sync canary exists.
    pub canaries: bool,
}

impl Layout {
    /// The plain state layout, every resource watched at once: what a cluster without
    /// a config announces, and where this cluster's agents write.
    pub const PLAIN: Layout = Layout {
        cached: false,
        canaries: false,
    };

    /// The layout a cluster config announces; no config means [`Layout::PLAIN`].
    pub fn of(config: Option<&ClusterConfig>) -> Self {
        let caps = config.map(|c| &c.capabilities);
        Self {
            cached: caps.is_some_and(|c| c.cached),
            canaries: caps.is_some_and(|c| c.synced_canaries),
        }
    }

    /// The resource's base prefix, as named in its canary key (no trailing slash).
    pub fn base(self, resource: Resource) -> &'static str {
        match (self.cached, resource) {
            (false, Resource::Nodes) => "cilium/state/nodes/v1",
            (false, Resource::IpCache) => "cilium/state/ip/v1",
            (false, Resource::Identities) => "cilium/state/identities/v1",
            (false, Resource::Services) => "cilium/state/services/v1",
            (true, Resource::Nodes) => "cilium/cache/nodes/v1",
            (true, Resource::IpCache) => "cilium/cache/ip/v1",
            (true, Resource::Identities) => "cilium/cache/identities/v1",
            (true, Resource::Services) => "cilium/cache/services/v1",
        }
    }

    /// The prefix watched for `resource` of `cluster`, with a trailing slash.
    pub fn prefix(self, resource: Resource, cluster: &str) -> String {
        let base = self.base(resource);
        match (self.cached, resource) {
            (false, Resource::IpCache) => format!("{base}/default/"),
            (false, Resource::Identities) => format!("{base}/id/"),
            (true, Resource::Identities) => format!("{base}/{cluster}/id/"),
            _ => format!("{base}/{cluster}/"),
        }
    }

    /// The prefix of every canary of `cluster`.
    pub fn canaries_prefix(cluster: &str) -> String {
        format!("cilium/synced/{cluster}/")
    }

    /// The canary that announces `resource` of `cluster` is fully written.
    pub fn canary(self, resource: Resource, cluster: &str) -> String {
        format!("{}{}", Self::canaries_prefix(cluster), self.base(resource))
    }

    /// The resource a canary key announces, if any.
    pub fn canary_resource(self, cluster: &str, key: &str) -> Option<Resource> {
        let rest = key.strip_prefix(&Self::canaries_prefix(cluster))?;
        Resource::ALL.into_iter().find(|r| self.base(*r) == rest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rows of the reference's key table, with its placeholders filled in.
    #[test]
    fn every_key_is_the_reference_tables() {
        let rows = [
            (identity(196_865), "cilium/state/identities/v1/id/196865"),
            (ip("10.1.0.7"), "cilium/state/ip/v1/default/10.1.0.7"),
            (ip("10.9.0.0/16"), "cilium/state/ip/v1/default/10.9.0.0/16"),
            (ip("fd00::7"), "cilium/state/ip/v1/default/fd00::7"),
            (node("cluster3", "n1"), "cilium/state/nodes/v1/cluster3/n1"),
            (
                service("cluster3", "bar", "web"),
                "cilium/state/services/v1/cluster3/bar/web",
            ),
            (cluster_config("cluster3"), "cilium/cluster-config/cluster3"),
            (HAS_CLUSTER_CONFIG.to_owned(), "cilium/.has-cluster-config"),
            (
                Layout::PLAIN.canary(Resource::Nodes, "cluster3"),
                "cilium/synced/cluster3/cilium/state/nodes/v1",
            ),
            (
                allocator::value("k8s:a=b;", "n1"),
                "cilium/state/identities/v1/value/k8s:a=b;/n1",
            ),
            (
                allocator::locks_prefix("k8s:a=b;"),
                "cilium/state/identities/v1/locks/k8s:a=b;/",
            ),
        ];
        for (key, want) in rows {
            assert_eq!(key, want);
        }
        assert!(identity(1).starts_with(allocator::ALL));
    }

    #[test]
    fn prefixes_of_the_state_and_cached_layouts() {
        let state = Layout::of(None);
        assert_eq!(state, Layout::PLAIN);
        assert_eq!(
            state.prefix(Resource::IpCache, "c3"),
            "cilium/state/ip/v1/default/"
        );
        assert_eq!(
            state.prefix(Resource::Identities, "c3"),
            "cilium/state/identities/v1/id/"
        );
        assert_eq!(
            state.prefix(Resource::Nodes, "c3"),
            "cilium/state/nodes/v1/c3/"
        );
        assert_eq!(
            state.prefix(Resource::Services, "c3"),
            "cilium/state/services/v1/c3/"
        );
        let cached = Layout {
            cached: true,
            canaries: true,
        };
        assert_eq!(
            cached.prefix(Resource::Identities, "c3"),
            "cilium/cache/identities/v1/c3/id/"
        );
        assert_eq!(
            cached.prefix(Resource::IpCache, "c3"),
            "cilium/cache/ip/v1/c3/"
        );
        assert_eq!(
            cached.canary(Resource::IpCache, "c3"),
            "cilium/synced/c3/cilium/cache/ip/v1"
        );
    }

    #[test]
    fn canary_keys_name_their_resource() {
        let l = Layout {
            cached: false,
            canaries: true,
        };
        assert_eq!(
            l.canary_resource("c3", "cilium/synced/c3/cilium/state/nodes/v1"),
            Some(Resource::Nodes)
        );
        assert_eq!(
            l.canary_resource("c3", "cilium/synced/c4/cilium/state/nodes/v1"),
            None
        );
        assert_eq!(
            l.canary_resource("c3", "cilium/synced/c3/cilium/cache/nodes/v1"),
            None
        );
        for r in Resource::ALL {
            assert_eq!(l.canary_resource("c3", &l.canary(r, "c3")), Some(r));
        }
    }
}
