//! One source's facts about one prefix, and the entry resolved from all of them.

use super::Source;
use std::net::IpAddr;
use std::sync::Arc;
use weft_model::Labels;

/// Who stated a fact: a source and the resource within it (an etcd key, a node, an
/// endpoint slice). Two owners with the same source are distinct facts.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Owner {
    /// The source; decides precedence.
    pub source: Source,
    /// Which of the source's domains the resource is named in: a remote cluster's
    /// number for clustermesh owners (two clusters' etcd keys can be the same text), 0
    /// otherwise. It lets a remote entry's owner share its etcd key's allocation with
    /// the cluster's store rather than carry one of its own.
    pub scope: u32,
    /// The resource, e.g. `cilium/state/ip/v1/default/10.0.0.1`.
    pub resource: Arc<str>,
}

impl Owner {
    /// An owner from `source` and `resource`.
    pub fn new(source: Source, resource: impl Into<Arc<str>>) -> Self {
        Self::scoped(source, 0, resource)
    }

    /// An owner from `source`, its domain `scope` and `resource`.
    pub fn scoped(source: Source, scope: u32, resource: impl Into<Arc<str>>) -> Self {
        Self {
            source,
            scope,
            resource: resource.into(),
        }
    }
}

/// The Kubernetes metadata of an address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct K8sMeta {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub pod: String,
}

/// What one owner says about one prefix. Every part is optional: a node says "this IP is
/// a remote node, tunnel to it, encrypt with key 7"; the kube-apiserver source says only
/// "this IP runs the kube-apiserver".
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Fact {
    /// Labels (merged over every owner of the prefix).
    pub labels: Option<Arc<Labels>>,
    /// An explicit numeric identity.
    pub identity: Option<u32>,
    /// The node to tunnel to.
    pub tunnel_peer: Option<IpAddr>,
    /// The encryption key index (0 = none).
    pub encrypt_key: u8,
    /// Kubernetes metadata.
    pub k8s: Option<Arc<K8sMeta>>,
}

/// What the ipcache says about a prefix: the resolution of all its facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The security identity.
    pub identity: u32,
    /// The node to tunnel to: from the strongest owner that gives one.
    pub tunnel_endpoint: Option<IpAddr>,
    /// The encryption key: from the strongest owner that gives a non-zero one.
    pub encrypt_key: u8,
    /// The strongest source with a fact about the prefix.
    pub source: Source,
    /// Kubernetes metadata: from the strongest owner that gives it.
    pub k8s: Option<Arc<K8sMeta>>,
}
