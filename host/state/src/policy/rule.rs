//! Policies as files: the core of a `CiliumNetworkPolicy` (and its cluster-wide form)
//! and of a Kubernetes `NetworkPolicy`, turned into one [`Policy`]: which endpoints it
//! selects, and for ingress and egress, which peers on which ports.
//!
//! A namespaced policy selects endpoints of its namespace only, and its peer selectors
//! match endpoints of its namespace unless they name a namespace themselves, as in the
//! established agent. A peer selector without the cluster label matches endpoints of
//! every cluster; with it, `io.cilium.k8s.policy.cluster`, only that cluster's.

use super::selector::{Expression, Selector};
use serde::Deserialize;
use std::collections::BTreeMap;
use weft_model::{NAMESPACE_LABEL, NAMESPACE_LABELS_PREFIX};

/// A policy, whatever file it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// `namespace/name` (or `name` when cluster-wide).
    pub name: String,
    /// The endpoints it applies to.
    pub subject: Selector,
    /// Allowed ingress; `None` leaves ingress alone, `Some(empty)` denies it all.
    pub ingress: Option<Vec<PeerRule>>,
    /// Allowed egress, likewise.
    pub egress: Option<Vec<PeerRule>>,
}

/// Peers and ports allowed in one direction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerRule {
    /// The peers; empty allows every peer.
    pub peers: Vec<Peer>,
    /// The ports; empty allows every port.
    pub ports: Vec<PortRange>,
}

/// A peer: endpoints (local or remote) by label, or a reserved identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peer {
    /// Endpoints whose identity's labels match.
    Endpoints(Selector),
    /// A reserved identity (`host`, `remote-node`, `world`).
    Entity(u32),
    /// Every identity.
    All,
}

/// A port range of one protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct PortRange {
    /// IP protocol number: 6 TCP, 17 UDP, 132 SCTP; 0 any.
    pub protocol: u8,
    /// First port.
    pub first: u16,
    /// Last port (inclusive).
    pub last: u16,
}

/// Why a policy file is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
#[error("policy {file}: {reason}")]
pub struct Refused {
    /// The file.
    pub file: String,
    /// What is wrong, naming the field.
    pub reason: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Head {
    api_version: String,
    kind: String,
    #[serde(default)]
    metadata: Meta,
}

#[derive(Deserialize, Default)]
struct Meta {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CnpSpec {
    endpoint_selector: Selector,
    #[serde(default)]
    ingress: Option<Vec<CnpIngress>>,
    #[serde(default)]
    egress: Option<Vec<CnpEgress>>,
    #[serde(default)]
    description: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CnpIngress {
    #[serde(default)]
    from_endpoints: Option<Vec<Selector>>,
    #[serde(default)]
    from_entities: Option<Vec<String>>,
    #[serde(default)]
    to_ports: Vec<CnpPorts>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CnpEgress {
    #[serde(default)]
    to_endpoints: Option<Vec<Selector>>,
    #[serde(default)]
    to_entities: Option<Vec<String>>,
    #[serde(default)]
    to_ports: Vec<CnpPorts>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CnpPorts {
    ports: Vec<CnpPort>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CnpPort {
    port: serde_yaml::Value,
    #[serde(default)]
    end_port: Option<u16>,
    #[serde(default)]
    protocol: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct NpSpec {
    pod_selector: Selector,
    #[serde(default)]
    policy_types: Option<Vec<String>>,
    #[serde(default)]
    ingress: Option<Vec<NpIngress>>,
    #[serde(default)]
    egress: Option<Vec<NpEgress>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NpIngress {
    #[serde(default)]
    from: Vec<NpPeer>,
    #[serde(default)]
    ports: Vec<NpPort>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NpEgress {
    #[serde(default)]
    to: Vec<NpPeer>,
    #[serde(default)]
    ports: Vec<NpPort>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct NpPeer {
    #[serde(default)]
    pod_selector: Option<Selector>,
    #[serde(default)]
    namespace_selector: Option<Selector>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct NpPort {
    #[serde(default)]
    port: Option<serde_yaml::Value>,
    #[serde(default)]
    end_port: Option<u16>,
    #[serde(default)]
    protocol: Option<String>,
}

/// The namespace label that Kubernetes puts on every namespace.
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Parses one policy file's text; `file` names it in errors.
///
/// # Errors
/// [`Refused`] naming what is wrong: unknown kinds and fields are refused rather than
/// ignored, so a policy never allows more (or less) than it says.
pub fn parse(file: &str, text: &str) -> Result<Policy, Refused> {
    let refuse = |reason: String| Refused {
        file: file.to_owned(),
        reason,
    };
    let head: Head = serde_yaml::from_str(text).map_err(|e| refuse(e.to_string()))?;
    let value: serde_yaml::Value = serde_yaml::from_str(text).map_err(|e| refuse(e.to_string()))?;
    let spec = value
        .get("spec")
        .cloned()
        .ok_or_else(|| refuse("no spec".into()))?;
    let ns = head.metadata.namespace.clone();
    let name = match &ns {
        Some(ns) => format!("{ns}/{}", head.metadata.name),
        None => head.metadata.name.clone(),
    };
    match (head.api_version.as_str(), head.kind.as_str()) {
        ("cilium.io/v2", "CiliumNetworkPolicy" | "CiliumClusterwideNetworkPolicy") => {
            let ns = if head.kind == "CiliumNetworkPolicy" {
                Some(ns.unwrap_or_else(|| "default".into()))
            } else {
                None
            };
            let spec: CnpSpec =
                serde_yaml::from_value(spec).map_err(|e| refuse(format!("spec: {e}")))?;
            let _ = spec.description;
            cnp(name, ns.as_deref(), spec).map_err(|e| refuse(e.to_string()))
        }
        ("networking.k8s.io/v1", "NetworkPolicy") => {
            let ns = ns.unwrap_or_else(|| "default".into());
            let spec: NpSpec =
                serde_yaml::from_value(spec).map_err(|e| refuse(format!("spec: {e}")))?;
            np(name, &ns, spec).map_err(|e| refuse(e.to_string()))
        }
        (api, kind) => Err(refuse(format!("unsupported kind {kind} of {api}"))),
    }
}

/// Why a rule of a policy cannot be enforced as written: the thing at fault, typed.
/// Its text is what the policy's refusal says.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    /// An entity weft does not know.
    #[error("unsupported entity {0:?}")]
    Entity(String),
    /// A protocol other than TCP, UDP, SCTP or ANY.
    #[error("unsupported protocol {0:?}")]
    Protocol(String),
    /// A port number past 65535.
    #[error("port {0} out of range")]
    PortOutOfRange(String),
    /// A named port (`http`), which needs the pods' container ports.
    #[error("port {0:?}: named ports are not supported")]
    NamedPort(String),
    /// A port that is neither a number nor a name (as YAML wrote it).
    #[error("port {0} is not a number")]
    NotAPort(String),
    /// An `endPort` below its `port`.
    #[error("endPort {end} below port {first}")]
    EndPortBelow {
        /// `port`.
        first: u16,
        /// `endPort`.
        end: u16,
    },
}

/// A peer selector narrowed to the namespaces a `namespaceSelector` selects, as the
/// established agent reads one: each namespace label `key` is the identity label
/// `io.cilium.k8s.namespace.labels.<key>`. The namespace's name
/// (`kubernetes.io/metadata.name`) is read from the namespace label every identity has
/// (`io.kubernetes.pod.namespace`), so that it also selects endpoints made without the
/// Kubernetes API (whose identities carry no namespace labels). `{}` selects every
/// namespace.
fn within_namespaces(mut selector: Selector, namespaces: Selector) -> Selector {
    let key = |k: &str| {
        if k == NAMESPACE_NAME_LABEL {
            format!("k8s:{NAMESPACE_LABEL}")
        } else {
            format!("k8s:{NAMESPACE_LABELS_PREFIX}.{k}")
        }
    };
    for (k, v) in namespaces.match_labels {
        selector.match_labels.insert(key(&k), v);
    }
    for e in namespaces.match_expressions {
        selector.match_expressions.push(Expression {
            key: key(&e.key),
            ..e
        });
    }
    selector
}

/// A selector of `ns`'s endpoints when the policy is namespaced and the selector does
/// not name a namespace itself.
fn scoped(selector: Selector, ns: Option<&str>) -> Selector {
    match ns {
        Some(ns) if !selector.mentions(NAMESPACE_LABEL) => selector.and(NAMESPACE_LABEL, ns),
        _ => selector,
    }
}

/// A CiliumNetworkPolicy rule's peers and ports, whichever direction it names them for.
type CnpParts = (Option<Vec<Selector>>, Option<Vec<String>>, Vec<CnpPorts>);

impl CnpIngress {
    fn parts(self) -> CnpParts {
        (self.from_endpoints, self.from_entities, self.to_ports)
    }
}

impl CnpEgress {
    fn parts(self) -> CnpParts {
        (self.to_endpoints, self.to_entities, self.to_ports)
    }
}

fn cnp(name: String, ns: Option<&str>, spec: CnpSpec) -> Result<Policy, RuleError> {
    let rule = |(endpoints, entities, ports): CnpParts| -> Result<PeerRule, RuleError> {
        let mut peers: Vec<Peer> = endpoints
            .into_iter()
            .flatten()
            .map(|s| Peer::Endpoints(scoped(s, ns)))
            .collect();
        for e in entities.into_iter().flatten() {
            peers.push(entity(&e)?);
        }
        let ports = ports
            .into_iter()
            .flat_map(|p| p.ports)
            .map(|p| port_range(Some(&p.port), p.end_port, p.protocol.as_deref()))
            .collect::<Result<_, RuleError>>()?;
        Ok(PeerRule { peers, ports })
    };
    let ingress = spec
        .ingress
        .map(|rules| rules.into_iter().map(|r| rule(r.parts())).collect())
        .transpose()?;
    let egress = spec
        .egress
        .map(|rules| rules.into_iter().map(|r| rule(r.parts())).collect())
        .transpose()?;
    Ok(Policy {
        name,
        subject: scoped(spec.endpoint_selector, ns),
        ingress,
        egress,
    })
}

fn np(name: String, ns: &str, spec: NpSpec) -> Result<Policy, RuleError> {
    let types = spec.policy_types.clone().unwrap_or_else(|| {
        let mut t = vec!["Ingress".to_owned()];
        if spec.egress.is_some() {
            t.push("Egress".into());
        }
        t
    });
    let peer = |p: NpPeer| -> Result<Peer, RuleError> {
        let mut selector = p.pod_selector.unwrap_or_default();
        match p.namespace_selector {
            None => selector = selector.and(NAMESPACE_LABEL, ns),
            Some(nss) => selector = within_namespaces(selector, nss),
        }
        Ok(Peer::Endpoints(selector))
    };
    // The rules of a direction the policy types name, each as its peers and ports.
    let direction = |kind: &str, rules: Vec<(Vec<NpPeer>, Vec<NpPort>)>| {
        types
            .iter()
            .any(|t| t == kind)
            .then(|| {
                rules
                    .into_iter()
                    .map(|(peers, ports)| {
                        Ok(PeerRule {
                            peers: peers
                                .into_iter()
                                .map(peer)
                                .collect::<Result<_, RuleError>>()?,
                            ports: ports
                                .into_iter()
                                .map(|p| {
                                    port_range(p.port.as_ref(), p.end_port, p.protocol.as_deref())
                                })
                                .collect::<Result<_, RuleError>>()?,
                        })
                    })
                    .collect::<Result<Vec<_>, RuleError>>()
            })
            .transpose()
    };
    let ingress = spec.ingress.unwrap_or_default().into_iter();
    let egress = spec.egress.unwrap_or_default().into_iter();
    Ok(Policy {
        name,
        subject: spec.pod_selector.and(NAMESPACE_LABEL, ns),
        ingress: direction("Ingress", ingress.map(|r| (r.from, r.ports)).collect())?,
        egress: direction("Egress", egress.map(|r| (r.to, r.ports)).collect())?,
    })
}

fn entity(name: &str) -> Result<Peer, RuleError> {
    use crate::identity::Reserved;
    Ok(match name {
        "host" => Peer::Entity(Reserved::Host.id()),
        "remote-node" => Peer::Entity(Reserved::RemoteNode.id()),
        "world" => Peer::Entity(Reserved::World.id()),
        "health" => Peer::Entity(Reserved::Health.id()),
        "all" => Peer::All,
        other => return Err(RuleError::Entity(other.to_owned())),
    })
}

fn port_range(
    port: Option<&serde_yaml::Value>,
    end: Option<u16>,
    protocol: Option<&str>,
) -> Result<PortRange, RuleError> {
    let protocol = match protocol.map(str::to_ascii_uppercase).as_deref() {
        None | Some("TCP") => 6,
        Some("UDP") => 17,
        Some("SCTP") => 132,
        Some("ANY") => 0,
        Some(p) => return Err(RuleError::Protocol(p.to_owned())),
    };
    let first = match port {
        None => 0,
        Some(serde_yaml::Value::Number(n)) => n
            .as_u64()
            .and_then(|n| u16::try_from(n).ok())
            .ok_or_else(|| RuleError::PortOutOfRange(n.to_string()))?,
        Some(serde_yaml::Value::String(s)) => {
            s.parse().map_err(|_| RuleError::NamedPort(s.clone()))?
        }
        Some(other) => return Err(RuleError::NotAPort(format!("{other:?}"))),
    };
    let last = match (first, end) {
        (0, _) => u16::MAX,
        (_, Some(e)) if e < first => return Err(RuleError::EndPortBelow { first, end: e }),
        (_, Some(e)) => e,
        (f, None) => f,
    };
    Ok(PortRange {
        protocol,
        first,
        last,
    })
}

/// The policies of a directory's files, by file name: each file parsed alone, so one
/// bad file is refused without touching the others.
pub fn parse_all(files: &BTreeMap<String, String>) -> (Vec<Policy>, Vec<Refused>) {
    let (mut ok, mut refused) = (Vec::new(), Vec::new());
    for (file, text) in files {
        match parse(file, text) {
            Ok(p) => ok.push(p),
            Err(r) => refused.push(r),
        }
    }
    (ok, refused)
}
