//! The state stage: identities, nodes, the ipcache, the claims gate in front of it and
//! the policy, fed by the cluster mesh (as its [`Observer`]) and by this cluster's own
//! kvstore.
//!
//! Remote facts enter the ipcache with source `clustermesh`, this cluster's with
//! `kvstore`, this node's with `local`.
//!
//! Owns: [`ipcache`] (order-independent resolution of facts), [`identity`] (the cache
//! of every known identity, local CIDR identities), [`node`] (the node manager),
//! [`claims`] (what a remote cluster may speak for), [`policy`] (rules and their
//! computation), [`State`], which applies a remote cluster's changes to them, and
//! [`LocalKvStore`], which applies this cluster's own.
//! Must not know: etcd (it reads no key: the mesh hands it decoded values in the words
//! of `weft_model::remote`), the datapath, WireGuard, plugins or the agent.

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod claims;
pub mod identity;
pub mod ipcache;
mod local;
pub mod node;
pub mod policy;

use crate::claims::{ClusterRefusals, Refusals, RemotePrefixes};
use crate::identity::{IdentityCache, Totals as IdentityTotals};
use crate::ipcache::{Fact, IpCache, K8sMeta, Prefix, Source};
use crate::node::{NodeId, NodeManager};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use weft_model::remote::{ClusterEvent, Kept, Observer, Value};
use weft_model::IpIdentityPair;
use weft_model::Resource;
use weft_sys::loglimit::LogLimit;

pub use local::LocalKvStore;

/// Identities, nodes and the ipcache of one agent.
pub struct State {
    /// Every known identity.
    pub identities: Mutex<IdentityCache>,
    /// Every known node.
    pub nodes: NodeManager,
    /// The IP cache.
    pub ipcache: Arc<IpCache>,
    /// The gate in front of the ipcache for remote clusters' entries.
    remote_prefixes: Arc<RemotePrefixes>,
    /// What remote clusters were refused.
    refusals: Arc<Refusals>,
    rejected: AtomicU64,
    /// The ipcache entries each remote cluster's last list announced: the ipcache is
    /// sized for all of them at once, rather than grown step by step while ten
    /// clusters' lists come in together.
    expected_entries: Mutex<BTreeMap<String, usize>>,
    /// Refused values are the remote's doing: logged at a bounded rate.
    log_limit: LogLimit,
}

/// Totals for `weftd status`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Totals {
    /// Resolved ipcache entries.
    pub ipcache: usize,
    /// Of those, by the source of their strongest fact (`local`, `kvstore`,
    /// `clustermesh`, …).
    #[serde(default)]
    pub ipcache_by_source: BTreeMap<String, usize>,
    /// Known nodes (this one included).
    pub nodes: usize,
    /// Known identities by kind.
    pub identities: IdentityTotals,
    /// Local (CIDR) identities allocated by the ipcache.
    pub local_identities: usize,
    /// Values refused by the state stage (an identity value of the wrong cluster, an
    /// entry without a valid prefix).
    pub rejected: u64,
    /// Per remote cluster, the claims refused because it may not speak for them
    /// (another cluster's node space, prefix or identity): see [`crate::claims`].
    #[serde(default)]
    pub refused_claims: BTreeMap<String, ClusterRefusals>,
}

impl State {
    /// Empty state for the node `local`.
    pub fn new(local: NodeId) -> Self {
        let ipcache = Arc::new(IpCache::default());
        let refusals = Arc::new(Refusals::default());
        let remote_prefixes = Arc::new(RemotePrefixes::new(ipcache.clone(), refusals.clone()));
        let nodes = NodeManager::new(ipcache.clone(), local, refusals.clone());
        nodes.subscribe(remote_prefixes.clone());
        Self {
            identities: Mutex::new(IdentityCache::default()),
            nodes,
            ipcache,
            remote_prefixes,
            refusals,
            rejected: AtomicU64::new(0),
            expected_entries: Mutex::default(),
            log_limit: LogLimit::per_second("refused values"),
        }
    }

    /// Current totals.
    pub fn totals(&self) -> Totals {
        let by_source = self.ipcache.len_by_source();
        Totals {
            ipcache: by_source.values().sum(),
            ipcache_by_source: by_source
                .into_iter()
                .map(|(s, n)| (s.name().to_owned(), n))
                .collect(),
            nodes: self.nodes.len(),
            identities: self
                .identities
                .lock()
                .expect("identity lock poisoned")
                .totals(),
            local_identities: self.ipcache.local_identities(),
            rejected: self.rejected.load(Ordering::Relaxed),
            refused_claims: self.refused_claims(),
        }
    }

    /// Per remote cluster, the claims refused and held back now.
    pub fn refused_claims(&self) -> BTreeMap<String, ClusterRefusals> {
        let mut held_back = self.nodes.held_back();
        for (cluster, n) in self.remote_prefixes.held_back() {
            *held_back.entry(cluster).or_default() += n;
        }
        self.refusals.snapshot(&held_back)
    }

    /// Counts a value the state refused (malformed, too large) and logs it,
    /// rate limited.
    pub(crate) fn reject(&self, what: &dyn std::fmt::Display) {
        self.rejected.fetch_add(1, Ordering::Relaxed);
        if self.log_limit.allow() {
            tracing::warn!(error = %what, "state refused a value");
        }
    }
}

/// The ipcache prefix and fact of an IP-identity pair.
pub fn pair_fact(pair: &IpIdentityPair) -> Option<(Prefix, Fact)> {
    let prefix = Prefix::new(pair.ip, pair.prefix_len()?)?;
    let k8s = (!pair.k8s_pod_name.is_empty()).then(|| {
        Arc::new(K8sMeta {
            namespace: pair.k8s_namespace.clone(),
            pod: pair.k8s_pod_name.clone(),
        })
    });
    let fact = Fact {
        identity: Some(pair.id),
        tunnel_peer: pair.host_ip,
        encrypt_key: pair.key,
        k8s,
        ..Fact::default()
    };
    Some((prefix, fact))
}

impl Observer for State {
    fn on_event(&self, event: ClusterEvent<'_>) {
        match event {
            ClusterEvent::Upsert {
                cluster,
                cluster_id,
                key,
                value,
                old,
            } => match value {
                Value::Node(node) => self.nodes.upsert(Source::ClusterMesh, (**node).clone()),
                Value::IpIdentity(pair) => match pair_fact(pair) {
                    Some((prefix, fact)) => {
                        let old_prefix = old.and_then(Kept::ip_prefix);
                        self.remote_prefixes
                            .upsert(cluster, cluster_id, key, prefix, fact, old_prefix);
                    }
                    None => self.reject(&format_args!("{key}: no valid prefix")),
                },
                Value::Identity(identity) => {
                    let mut ids = self.identities.lock().expect("identity lock poisoned");
                    if let Err(e) =
                        ids.upsert_remote(cluster, cluster_id, identity.id, identity.labels.clone())
                    {
                        drop(ids);
                        self.reject(&e);
                    }
                }
                Value::Service(_) => {} // Services are consumed by a later stage.
            },
            ClusterEvent::Expect {
                cluster,
                resource: Resource::IpCache,
                keys,
            } => {
                let mut expected = self
                    .expected_entries
                    .lock()
                    .expect("expected lock poisoned");
                if keys == 0 {
                    expected.remove(cluster);
                } else {
                    expected.insert(cluster.to_owned(), keys);
                }
                let all = expected.values().sum();
                drop(expected);
                self.ipcache.reserve(all);
            }
            ClusterEvent::Expect { .. } => {}
            ClusterEvent::Delete { cluster, key, old } => match old.value() {
                Some(Value::Node(node)) => self.nodes.delete(&node.cluster, &node.name),
                Some(Value::Identity(identity)) => self
                    .identities
                    .lock()
                    .expect("identity lock poisoned")
                    .remove_remote(cluster, identity.id),
                Some(Value::Service(_)) => {}
                Some(Value::IpIdentity(_)) | None => {
                    if let Some(prefix) = old.ip_prefix() {
                        self.remote_prefixes.delete(cluster, key, prefix);
                    }
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ipcache_is_sized_for_every_clusters_list_at_once() {
        let state = State::new(NodeId {
            cluster: "local".into(),
            name: "me".into(),
        });
        let expect = |cluster, resource, keys| {
            state.on_event(ClusterEvent::Expect {
                cluster,
                resource,
                keys,
            });
        };
        expect("c4", Resource::Nodes, 1_000_000);
        assert!(
            state.ipcache.capacity() < 1_000_000,
            "only ipcache entries size the ipcache"
        );
        expect("c2", Resource::IpCache, 50_000);
        expect("c3", Resource::IpCache, 40_000);
        assert!(
            state.ipcache.capacity() >= 90_000,
            "both lists' entries together, not each alone: {}",
            state.ipcache.capacity()
        );
        // c2 lists again, smaller; c3 goes: only c2's new count is expected now.
        expect("c2", Resource::IpCache, 10_000);
        expect("c3", Resource::IpCache, 0);
        assert_eq!(
            *state.expected_entries.lock().unwrap(),
            BTreeMap::from([("c2".to_owned(), 10_000)])
        );
    }
}
