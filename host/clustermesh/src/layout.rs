//! Where a remote cluster's resources and canaries live in its etcd.

use super::Resource;
use weft_model::ClusterConfig;

/// How a remote cluster's etcd is read, derived from its cluster config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// State mirrored under `cilium/cache/...` instead of `cilium/state/...`.
    pub cached: bool,
    /// Each resource is watched only once its sync canary exists.
    pub canaries: bool,
}

impl Layout {
    /// The layout a cluster config announces; no config means the plain state layout,
    /// every resource watched at once.
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

    /// The resource a canary key announces, if any.
    pub fn canary_resource(self, cluster: &str, key: &str) -> Option<Resource> {
        let rest = key.strip_prefix(&Self::canaries_prefix(cluster))?;
        Resource::ALL.into_iter().find(|r| self.base(*r) == rest)
    }
}

/// The key of `cluster`'s config.
pub fn cluster_config_key(cluster: &str) -> String {
    format!("cilium/cluster-config/{cluster}")
}

/// The key whose presence means a cluster config is required.
pub const HAS_CLUSTER_CONFIG_KEY: &str = "cilium/.has-cluster-config";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_of_the_state_and_cached_layouts() {
        let state = Layout::of(None);
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
    }
}
