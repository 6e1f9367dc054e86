//! A node record: `cilium/state/nodes/v1/<cluster>/<node name>`.

use super::net::{opt_ip, IpNet};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::IpAddr;

/// A node as the established implementation writes it (Go field names, no renaming).
///
/// # Example
/// ```
/// let node: weft_model::Node = serde_json::from_str(
///     r#"{"Name":"node-2","Cluster":"cluster3","ClusterID":3,
///         "IPAddresses":[{"Type":"InternalIP","IP":"172.18.0.3"}]}"#,
/// ).unwrap();
/// assert_eq!(node.ip_addresses[0].ip.to_string(), "172.18.0.3");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Node {
    /// The node's name, unique within its cluster.
    #[serde(rename = "Name")]
    pub name: String,
    /// The name of the cluster the node belongs to.
    #[serde(rename = "Cluster")]
    pub cluster: String,
    /// The node's addresses, each with its type (`InternalIP`, `CiliumInternalIP`, ...).
    #[serde(rename = "IPAddresses", default)]
    pub ip_addresses: Vec<NodeAddress>,
    /// The IPv4 pod CIDR allocated to the node.
    #[serde(rename = "IPv4AllocCIDR", default)]
    pub ipv4_alloc_cidr: Option<IpNet>,
    /// The IPv6 pod CIDR allocated to the node.
    #[serde(rename = "IPv6AllocCIDR", default)]
    pub ipv6_alloc_cidr: Option<IpNet>,
    /// The IPv4 address of the node's health endpoint.
    #[serde(rename = "IPv4HealthIP", default, with = "opt_ip")]
    pub ipv4_health_ip: Option<IpAddr>,
    /// The IPv6 address of the node's health endpoint.
    #[serde(rename = "IPv6HealthIP", default, with = "opt_ip")]
    pub ipv6_health_ip: Option<IpAddr>,
    /// The IPv4 ingress address, written by newer agents only.
    #[serde(
        rename = "IPv4IngressIP",
        default,
        with = "opt_ip",
        skip_serializing_if = "Option::is_none"
    )]
    pub ipv4_ingress_ip: Option<IpAddr>,
    /// The IPv6 ingress address, written by newer agents only.
    #[serde(
        rename = "IPv6IngressIP",
        default,
        with = "opt_ip",
        skip_serializing_if = "Option::is_none"
    )]
    pub ipv6_ingress_ip: Option<IpAddr>,
    /// The numeric ID of the node's cluster.
    #[serde(rename = "ClusterID", default)]
    pub cluster_id: u32,
    /// Which source wrote the record (`custom-resource`, `kvstore`, ...).
    #[serde(rename = "Source", default)]
    pub source: String,
    /// The IPsec key index (0 = none).
    #[serde(rename = "EncryptionKey", default)]
    pub encryption_key: u8,
    /// The node's labels.
    #[serde(rename = "Labels", default)]
    pub labels: Option<BTreeMap<String, String>>,
    /// The node's annotations.
    #[serde(rename = "Annotations", default)]
    pub annotations: Option<BTreeMap<String, String>>,
    /// The node's identity, written by newer agents only.
    #[serde(
        rename = "NodeIdentity",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub node_identity: Option<u32>,
    /// The node's WireGuard public key (base64), empty without WireGuard.
    #[serde(rename = "WireguardPubKey", default)]
    pub wireguard_pub_key: String,
    /// The node's boot ID.
    #[serde(rename = "BootID", default)]
    pub boot_id: String,
}

/// One address of a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeAddress {
    /// `InternalIP`, `ExternalIP`, `CiliumInternalIP`, ...
    #[serde(rename = "Type")]
    pub kind: String,
    /// The address.
    #[serde(rename = "IP")]
    pub ip: IpAddr,
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"{"Name":"node-2","Cluster":"cluster3",
 "IPAddresses":[{"Type":"InternalIP","IP":"172.18.0.3"},{"Type":"CiliumInternalIP","IP":"10.244.1.130"}],
 "IPv4AllocCIDR":{"IP":"10.244.1.0","Mask":"////AA=="},"IPv6AllocCIDR":null,
 "IPv4HealthIP":"10.244.1.153","IPv6HealthIP":"","ClusterID":3,"Source":"custom-resource",
 "EncryptionKey":7,"Labels":{},"Annotations":null,"WireguardPubKey":"<base64>","BootID":"..."}"#;

    #[test]
    fn example_round_trips_to_equal_json() {
        let node: Node = serde_json::from_str(EXAMPLE).unwrap();
        assert_eq!(
            node.ipv4_alloc_cidr.as_ref().unwrap().prefix_len(),
            Some(24)
        );
        assert_eq!(node.ipv6_health_ip, None);
        assert_eq!(node.encryption_key, 7);
        let again = serde_json::to_value(&node).unwrap();
        let original: serde_json::Value = serde_json::from_str(EXAMPLE).unwrap();
        assert_eq!(again, original);
    }

    #[test]
    fn unknown_fields_ignored_and_optional_ones_may_be_missing() {
        let node: Node =
            serde_json::from_str(r#"{"Name":"n","Cluster":"c","FutureField":[1,2]}"#).unwrap();
        assert_eq!(node.name, "n");
        assert!(node.ip_addresses.is_empty());
        assert_eq!(node.cluster_id, 0);
    }

    #[test]
    fn a_bad_address_is_an_error() {
        let r: Result<Node, _> = serde_json::from_str(
            r#"{"Name":"n","Cluster":"c","IPAddresses":[{"Type":"InternalIP","IP":"nope"}]}"#,
        );
        assert!(r.is_err());
    }
}
