//! An IP → identity pair: `cilium/state/ip/v1/default/<ip>[/<len>]`.

use super::net::{mask, opt_ip, prefix_len};
use serde::{Deserialize, Serialize};
use std::net::IpAddr;

/// The identity, host and encryption key of one IP or CIDR.
///
/// # Example
/// ```
/// let pair: weft_model::IpIdentityPair =
///     serde_json::from_str(r#"{"IP":"10.0.0.0","Mask":"/wAAAA==","ID":16777217,"Key":0}"#).unwrap();
/// assert_eq!(pair.prefix_len(), Some(8));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct IpIdentityPair {
    /// The address (or the network address of a CIDR).
    #[serde(rename = "IP")]
    pub ip: IpAddr,
    /// The CIDR mask in base64, `null` for a single address.
    #[serde(rename = "Mask", default, with = "mask::option")]
    pub mask: Option<Vec<u8>>,
    /// The node hosting the address (the tunnel endpoint), empty when none.
    #[serde(rename = "HostIP", default, with = "opt_ip")]
    pub host_ip: Option<IpAddr>,
    /// The numeric security identity.
    #[serde(rename = "ID")]
    pub id: u32,
    /// The encryption key index: 0 = none, 0xFF = WireGuard.
    #[serde(rename = "Key", default)]
    pub key: u8,
    /// Free-form metadata of the writer.
    #[serde(rename = "Metadata", default)]
    pub metadata: String,
    /// The pod's namespace, when the address is a pod's.
    #[serde(
        rename = "K8sNamespace",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub k8s_namespace: String,
    /// The pod's name, when the address is a pod's.
    #[serde(
        rename = "K8sPodName",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub k8s_pod_name: String,
    /// The pod's named ports.
    #[serde(rename = "NamedPorts", default, skip_serializing_if = "Vec::is_empty")]
    pub named_ports: Vec<NamedPort>,
}

impl IpIdentityPair {
    /// The prefix length: the mask's for a CIDR, the full length for a single address.
    /// `None` when the mask is malformed.
    pub fn prefix_len(&self) -> Option<u8> {
        match &self.mask {
            Some(m) => prefix_len(m, &self.ip),
            None => Some(if self.ip.is_ipv4() { 32 } else { 128 }),
        }
    }
}

/// A named port of a pod.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NamedPort {
    /// The port's name.
    #[serde(rename = "Name")]
    pub name: String,
    /// The port number.
    #[serde(rename = "Port")]
    pub port: u16,
    /// `TCP`, `UDP` or `SCTP`.
    #[serde(rename = "Protocol")]
    pub protocol: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"{"IP":"10.244.2.74","Mask":null,"HostIP":"172.18.0.2","ID":199475,"Key":5,"Metadata":"",
 "K8sNamespace":"bar","K8sPodName":"cep-002","NamedPorts":[{"Name":"http","Port":8080,"Protocol":"TCP"}]}"#;

    #[test]
    fn example_round_trips_to_equal_json() {
        let pair: IpIdentityPair = serde_json::from_str(EXAMPLE).unwrap();
        assert_eq!(pair.id, 199475);
        assert_eq!(pair.prefix_len(), Some(32));
        let original: serde_json::Value = serde_json::from_str(EXAMPLE).unwrap();
        assert_eq!(serde_json::to_value(&pair).unwrap(), original);
    }

    #[test]
    fn cidr_entry_has_its_mask() {
        let pair: IpIdentityPair = serde_json::from_str(
            r#"{"IP":"f00d::","Mask":"//////////8AAAAAAAAAAA==","HostIP":"","ID":2,"Key":0,"Metadata":""}"#,
        )
        .unwrap();
        assert_eq!(pair.prefix_len(), Some(64));
        assert_eq!(pair.host_ip, None);
    }

    #[test]
    fn missing_id_is_an_error() {
        assert!(serde_json::from_str::<IpIdentityPair>(r#"{"IP":"10.0.0.1"}"#).is_err());
    }
}
