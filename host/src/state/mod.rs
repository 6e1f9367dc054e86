//! The state stage: identities, nodes and the ipcache, fed by the cluster mesh (as its
//! [`Observer`]) and by this cluster's own kvstore.
//!
//! Remote facts enter the ipcache with source `clustermesh`, this cluster's with
//! `kvstore`, this node's with `local`.

mod local_kvstore;

pub use local_kvstore::run_local_kvstore;

use crate::clustermesh::{ClusterEvent, Observer, Value};
use crate::identity::{IdentityCache, Totals as IdentityTotals, LOCAL_SCOPE};
use crate::ipcache::{Fact, IpCache, K8sMeta, Owner, Prefix, Source};
use crate::model::IpIdentityPair;
use crate::node::{NodeId, NodeManager};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Identities, nodes and the ipcache of one agent.
pub struct State {
    /// Every known identity.
    pub identities: Mutex<IdentityCache>,
    /// Every known node.
    pub nodes: NodeManager,
    /// The IP cache.
    pub ipcache: Arc<IpCache>,
    rejected: AtomicU64,
}

/// Totals for `weftd status`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Totals {
    /// Resolved ipcache entries.
    pub ipcache: usize,
    /// Of those, by the source of their strongest fact (`local`, `kvstore`,
    /// `clustermesh`, …).
    #[serde(default)]
    pub ipcache_by_source: std::collections::BTreeMap<String, usize>,
    /// Known nodes (this one included).
    pub nodes: usize,
    /// Known identities by kind.
    pub identities: IdentityTotals,
    /// Local (CIDR) identities allocated by the ipcache.
    pub local_identities: usize,
    /// Values refused by the state stage (e.g. an identity of the wrong cluster).
    pub rejected: u64,
}

impl State {
    /// Empty state for the node `local`.
    pub fn new(local: NodeId) -> Self {
        let ipcache = Arc::new(IpCache::default());
        Self {
            identities: Mutex::new(IdentityCache::default()),
            nodes: NodeManager::new(ipcache.clone(), local),
            ipcache,
            rejected: AtomicU64::new(0),
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
        }
    }

    fn reject(&self, what: &dyn std::fmt::Display) {
        self.rejected.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(error = %what, "state refused a value");
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
            } => match value {
                Value::Node(node) => self.nodes.upsert(Source::ClusterMesh, node.clone()),
                Value::IpIdentity(pair) if pair.id & LOCAL_SCOPE != 0 => {
                    // A remote cluster's local (CIDR) identity means nothing here and
                    // could clash with ours.
                    self.reject(&format_args!(
                        "{key}: local-scope identity {} from cluster {cluster}",
                        pair.id
                    ));
                }
                Value::IpIdentity(pair) => match pair_fact(pair) {
                    Some((prefix, fact)) => {
                        let owner = Owner::new(Source::ClusterMesh, format!("{cluster}/{key}"));
                        self.ipcache.upsert(prefix, owner, fact);
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
            ClusterEvent::Delete { cluster, key, old } => match old {
                Value::Node(node) => self.nodes.delete(&node.cluster, &node.name),
                Value::IpIdentity(pair) => {
                    if let Some((prefix, _)) = pair_fact(pair) {
                        self.ipcache.remove(
                            prefix,
                            &Owner::new(Source::ClusterMesh, format!("{cluster}/{key}")),
                        );
                    }
                }
                Value::Identity(identity) => self
                    .identities
                    .lock()
                    .expect("identity lock poisoned")
                    .remove_remote(cluster, identity.id),
                Value::Service(_) => {}
            },
        }
    }
}
