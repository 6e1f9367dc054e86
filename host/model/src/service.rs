//! A global service: `cilium/state/services/v1/<cluster>/<namespace>/<name>`.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Port name → L4 address, Go's `PortConfiguration`.
pub type PortConfiguration = BTreeMap<String, L4Addr>;

/// A service shared across clusters, with this cluster's frontends and backends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterService {
    /// The cluster that exports the service.
    pub cluster: String,
    /// The service's namespace.
    pub namespace: String,
    /// The service's name.
    pub name: String,
    /// Frontend IP → its ports.
    #[serde(default)]
    pub frontends: BTreeMap<String, PortConfiguration>,
    /// Backend IP → its ports.
    #[serde(default)]
    pub backends: BTreeMap<String, PortConfiguration>,
    /// The service's labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The service's selector.
    #[serde(default)]
    pub selector: BTreeMap<String, String>,
    /// Whether remote backends are included.
    #[serde(default)]
    pub include_external: bool,
    /// Whether the service is shared with other clusters.
    #[serde(default)]
    pub shared: bool,
    /// The numeric ID of the exporting cluster.
    #[serde(rename = "clusterID", default)]
    pub cluster_id: u32,
}

/// A protocol and port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct L4Addr {
    /// `TCP`, `UDP`, ...
    #[serde(rename = "Protocol")]
    pub protocol: String,
    /// The port number.
    #[serde(rename = "Port")]
    pub port: u16,
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"{"cluster":"cluster3","namespace":"ns","name":"echo","frontends":{"10.96.0.10":{"http":{"Protocol":"TCP","Port":80}}},
 "backends":{"10.244.1.10":{"http":{"Protocol":"TCP","Port":8080}}},"labels":{},"selector":{"app":"echo"},
 "includeExternal":true,"shared":true,"clusterID":3}"#;

    #[test]
    fn example_round_trips_to_equal_json() {
        let svc: ClusterService = serde_json::from_str(EXAMPLE).unwrap();
        assert_eq!(svc.backends["10.244.1.10"]["http"].port, 8080);
        let original: serde_json::Value = serde_json::from_str(EXAMPLE).unwrap();
        assert_eq!(serde_json::to_value(&svc).unwrap(), original);
    }

    #[test]
    fn unknown_fields_are_ignored() {
        let svc: ClusterService =
            serde_json::from_str(r#"{"cluster":"c","namespace":"n","name":"s","hostnames":["x"]}"#)
                .unwrap();
        assert!(svc.frontends.is_empty());
    }
}
