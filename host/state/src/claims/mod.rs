//! What a remote cluster may speak for, and what it was refused.
//!
//! A remote cluster is a separate trust domain. It speaks for its own nodes, its own
//! identities (its cluster ID in bits 16–23) and its own prefixes, never for another
//! cluster's. The rules, each order-independent unless it says otherwise:
//! - **Identities.** A remote ipcache entry's identity is one of its cluster's
//!   ([`crate::identity::check_remote`]): never reserved, local-scope or another
//!   cluster's.
//! - **Node space.** A node's space is its addresses (node, health, ingress) and its
//!   pod CIDRs ([`node_space`]). A remote node whose space overlaps a node of another
//!   cluster is refused: this cluster's nodes always win (a remote node holding the
//!   space is evicted when one of ours claims it); between two remote clusters the
//!   node that holds the space keeps it (`node::NodeManager`).
//! - **Prefixes.** A remote ipcache entry whose prefix overlaps another cluster's node
//!   space is refused, whenever either arrives: an entry already held is evicted when
//!   the node space arrives ([`RemotePrefixes`]). Its tunnel endpoint may not be in
//!   another cluster's node space (checked when the entry arrives). A prefix held by
//!   one remote cluster is refused to another until the holder lets it go.
//! - **Precedence.** A fact of this cluster (any source stronger than `clustermesh`)
//!   decides a prefix alone: a remote cluster's fact supplies neither the tunnel
//!   endpoint nor the key of it (`ipcache::resolve`).
//!
//! A refused claim is held back, not forgotten: when what blocked it goes away, it is
//! checked again and takes effect. Every refusal is counted per cluster with its last
//! reason ([`Refusals`]); `weftd status` and the metrics show them.

mod index;
mod prefixes;

pub use index::PrefixIndex;
pub use prefixes::RemotePrefixes;

use crate::ipcache::Prefix;
use crate::node::NodeId;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Mutex;
use weft_model::Node;
use weft_sys::loglimit::LogLimit;

/// Why a remote cluster's claim was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// An ipcache entry's identity is not the cluster's.
    #[error("{key}: {error}")]
    Identity {
        /// The etcd key.
        key: String,
        /// What is wrong with the identity.
        error: crate::identity::Error,
    },
    /// A node or an ipcache entry claims space of another cluster's node.
    #[error("{what} claims {prefix}, which overlaps {held} of node {holder}")]
    NodeSpace {
        /// The claim: `node NAME` or an etcd key.
        what: String,
        /// The prefix it claims.
        prefix: Prefix,
        /// The overlapping space of the other node.
        held: Prefix,
        /// The node that holds it.
        holder: NodeIdText,
    },
    /// An ipcache entry tunnels to another cluster's node.
    #[error("{key}: tunnel endpoint {endpoint} is in {held} of node {holder}")]
    Tunnel {
        /// The etcd key.
        key: String,
        /// The tunnel endpoint it gives.
        endpoint: IpAddr,
        /// The other node's space it is in.
        held: Prefix,
        /// The node that holds it.
        holder: NodeIdText,
    },
    /// An ipcache entry's prefix is held by another remote cluster.
    #[error("{key}: {prefix} is held by cluster {holder}")]
    Held {
        /// The etcd key.
        key: String,
        /// The prefix.
        prefix: Prefix,
        /// The cluster that holds it.
        holder: String,
    },
}

/// A node named as `cluster/name` in a refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeIdText(pub NodeId);

impl std::fmt::Display for NodeIdText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.0.cluster, self.0.name)
    }
}

/// What one remote cluster was refused, for `weftd status`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterRefusals {
    /// Claims refused since the agent started (each refusal once, also a claim refused
    /// again after a change).
    pub refused: u64,
    /// Claims held back now: they take effect when what blocks them goes away.
    pub held_back: usize,
    /// The last refusal's reason.
    pub last: Option<String>,
}

/// The refusals of every remote cluster.
#[derive(Debug)]
pub struct Refusals {
    by_cluster: Mutex<BTreeMap<String, ClusterRefusals>>,
    log_limit: LogLimit,
}

impl Default for Refusals {
    fn default() -> Self {
        Self {
            by_cluster: Mutex::default(),
            log_limit: LogLimit::per_second("refused claims"),
        }
    }
}

impl Refusals {
    /// Counts `why` against `cluster` and logs it (at a bounded rate).
    pub fn refuse(&self, cluster: &str, why: &Refusal) {
        if self.log_limit.allow() {
            tracing::warn!(cluster, reason = %why, "refused a remote cluster's claim");
        }
        let mut by = self.by_cluster.lock().expect("refusals lock poisoned");
        let entry = by.entry(cluster.to_owned()).or_default();
        entry.refused = entry.refused.saturating_add(1);
        entry.last = Some(why.to_string());
    }

    /// Every cluster's refusals, with `held_back` (claims held back now, by cluster)
    /// filled in.
    pub fn snapshot(
        &self,
        held_back: &BTreeMap<String, usize>,
    ) -> BTreeMap<String, ClusterRefusals> {
        let mut by = self
            .by_cluster
            .lock()
            .expect("refusals lock poisoned")
            .clone();
        for (cluster, n) in held_back {
            by.entry(cluster.clone()).or_default().held_back = *n;
        }
        by
    }
}

/// A node's space: its addresses (node, health, ingress) as host prefixes and its pod
/// CIDRs. Sorted, without duplicates.
pub fn node_space(node: &Node) -> Vec<Prefix> {
    let addresses = node
        .ip_addresses
        .iter()
        .map(|a| a.ip)
        .chain(node.ipv4_health_ip)
        .chain(node.ipv6_health_ip)
        .chain(node.ipv4_ingress_ip)
        .chain(node.ipv6_ingress_ip)
        .map(Prefix::host);
    let cidrs = [&node.ipv4_alloc_cidr, &node.ipv6_alloc_cidr]
        .into_iter()
        .flatten()
        .filter_map(|net| Prefix::new(net.ip, net.prefix_len()?));
    let all: BTreeSet<Prefix> = addresses.chain(cidrs).collect();
    all.into_iter().collect()
}

/// The first node of another cluster than `cluster` whose space in `space` overlaps
/// `prefix`: the overlapping space and the node.
pub(crate) fn foreign_holder(
    space: &PrefixIndex<BTreeSet<NodeId>>,
    cluster: &str,
    prefix: Prefix,
) -> Option<(Prefix, NodeId)> {
    space.overlapping(prefix).find_map(|(held, ids)| {
        ids.iter()
            .find(|id| id.cluster != cluster)
            .map(|id| (held, id.clone()))
    })
}

#[cfg(test)]
mod tests;
