//! A cluster's configuration: `cilium/cluster-config/<cluster>`.

use serde::{Deserialize, Serialize};

/// What a cluster announces about itself to the readers of its etcd.
///
/// # Example
/// ```
/// let c: weft_model::ClusterConfig =
///     serde_json::from_str(r#"{"id":3,"capabilities":{"syncedCanaries":true}}"#).unwrap();
/// assert!(c.capabilities.synced_canaries);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ClusterConfig {
    /// The cluster's numeric ID (1–255).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub id: u32,
    /// What the cluster's writers support.
    #[serde(default)]
    pub capabilities: Capabilities,
}

/// The capabilities announced in a cluster config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Capabilities {
    /// The writers put a sync canary after each resource's initial state.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub synced_canaries: bool,
    /// The state is mirrored under `cilium/cache/...` (the cached layout).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cached: bool,
    /// The largest number of clusters in the mesh (255 by default).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub max_connected_clusters: u32,
    /// Whether services are exported only on request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_exports_enabled: Option<bool>,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_round_trips_to_equal_json() {
        let text = r#"{"id":3,"capabilities":{"syncedCanaries":true,"maxConnectedClusters":255}}"#;
        let c: ClusterConfig = serde_json::from_str(text).unwrap();
        assert_eq!(c.id, 3);
        assert_eq!(c.capabilities.max_connected_clusters, 255);
        let original: serde_json::Value = serde_json::from_str(text).unwrap();
        assert_eq!(serde_json::to_value(&c).unwrap(), original);
    }

    #[test]
    fn cached_and_service_exports() {
        let c: ClusterConfig = serde_json::from_str(
            r#"{"id":9,"capabilities":{"cached":true,"serviceExportsEnabled":false,"new":1}}"#,
        )
        .unwrap();
        assert!(c.capabilities.cached && !c.capabilities.synced_canaries);
        assert_eq!(c.capabilities.service_exports_enabled, Some(false));
    }
}
