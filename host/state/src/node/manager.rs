//! The node manager: every known node, its IPs as ipcache facts, and a subscription for
//! the stages that act per node (WireGuard, datapath).

use crate::claims::{foreign_holder, node_space, NodeIdText, PrefixIndex, Refusal, Refusals};
use crate::identity::Reserved;
use crate::ipcache::{Fact, IpCache, Owner, Prefix, Source};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use weft_model::{Labels, Node};

/// A node's identity in the manager: its cluster and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId {
    /// The node's cluster.
    pub cluster: String,
    /// The node's name.
    pub name: String,
}

impl NodeId {
    /// The identity of `node`.
    pub fn of(node: &Node) -> Self {
        Self {
            cluster: node.cluster.clone(),
            name: node.name.clone(),
        }
    }
}

/// A consumer of node changes. Called in order, outside the manager's lock.
pub trait NodeListener: Send + Sync {
    /// A node was added or changed; `old` is its previous record.
    fn on_upsert(&self, node: &Node, old: Option<&Node>);
    /// A node went away.
    fn on_delete(&self, node: &Node);
}

struct Known {
    node: Node,
    source: Source,
    prefixes: BTreeSet<Prefix>,
    space: Vec<Prefix>,
}

#[derive(Default)]
struct Inner {
    /// Admitted nodes.
    nodes: BTreeMap<NodeId, Known>,
    /// Every admitted node's space ([`node_space`]).
    space: PrefixIndex<BTreeSet<NodeId>>,
    /// Remote nodes held back: their space overlaps another cluster's node.
    held_back: BTreeMap<NodeId, Node>,
}

/// A change to tell the listeners, once the lock is released.
enum Told {
    Upsert(Node, Option<Box<Node>>),
    Delete(Node),
}

/// Every known node: its own (source `local`), its cluster's (`kvstore`) and remote
/// clusters' (`clustermesh`).
///
/// A remote node speaks for its own space only (see [`crate::claims`]): one whose
/// space overlaps a node of another cluster is held back, counted in [`Refusals`],
/// and admitted when the overlap goes. This cluster's nodes always win: a remote node
/// holding space one of them claims is evicted. Between remote clusters the node
/// that holds the space keeps it.
pub struct NodeManager {
    ipcache: Arc<IpCache>,
    /// This node: its IPs get the `host` label instead of `remote-node`.
    local: NodeId,
    refusals: Arc<Refusals>,
    inner: Mutex<Inner>,
    listeners: Mutex<Vec<Arc<dyn NodeListener>>>,
}

impl NodeManager {
    /// A manager writing node IPs to `ipcache`; `local` names this node; refused
    /// remote nodes are counted in `refusals`.
    pub fn new(ipcache: Arc<IpCache>, local: NodeId, refusals: Arc<Refusals>) -> Self {
        Self {
            ipcache,
            local,
            refusals,
            inner: Mutex::new(Inner::default()),
            listeners: Mutex::new(Vec::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().expect("node lock poisoned")
    }

    /// Subscribes `listener`; it first receives every known node.
    pub fn subscribe(&self, listener: Arc<dyn NodeListener>) {
        let inner = self.lock();
        for known in inner.nodes.values() {
            listener.on_upsert(&known.node, None);
        }
        self.listeners
            .lock()
            .expect("listener lock poisoned")
            .push(listener);
    }

    fn owner(source: Source, id: &NodeId) -> Owner {
        Owner::new(source, format!("node/{}/{}", id.cluster, id.name))
    }

    /// The ipcache facts of `node`: its addresses (`host` for this node, `remote-node`
    /// for others) and health IPs (`health`), each with the node as tunnel endpoint (for
    /// other nodes) and its encryption key.
    fn facts(&self, id: &NodeId, node: &Node) -> Vec<(Prefix, Fact)> {
        let local = *id == self.local;
        let node_label = if local {
            Reserved::Host
        } else {
            Reserved::RemoteNode
        };
        let node_labels: Arc<Labels> = node_label.labels();
        let health_labels: Arc<Labels> = Reserved::Health.labels();
        let endpoint = node
            .ip_addresses
            .iter()
            .find(|a| a.kind == "InternalIP")
            .or_else(|| node.ip_addresses.first())
            .map(|a| a.ip)
            .filter(|_| !local);
        let fact = |labels: &Arc<Labels>| Fact {
            labels: Some(labels.clone()),
            tunnel_peer: endpoint,
            encrypt_key: node.encryption_key,
            ..Fact::default()
        };
        let health: Vec<IpAddr> = node
            .ipv4_health_ip
            .into_iter()
            .chain(node.ipv6_health_ip)
            .collect();
        node.ip_addresses
            .iter()
            .map(|a| (Prefix::host(a.ip), fact(&node_labels)))
            .chain(
                health
                    .into_iter()
                    .map(|ip| (Prefix::host(ip), fact(&health_labels))),
            )
            .collect()
    }

    /// Adds or updates a node stated by `source`.
    pub fn upsert(&self, source: Source, node: Node) {
        let mut told = Vec::new();
        {
            let mut inner = self.lock();
            self.upsert_locked(&mut inner, source, node, &mut told);
        }
        self.tell(told);
    }

    fn upsert_locked(&self, inner: &mut Inner, source: Source, node: Node, told: &mut Vec<Told>) {
        let id = NodeId::of(&node);
        let space = node_space(&node);
        if source == Source::ClusterMesh {
            let overlap = space
                .iter()
                .find_map(|p| foreign_holder(&inner.space, &id.cluster, *p).map(|h| (*p, h)));
            if let Some((prefix, (held, holder))) = overlap {
                let why = Refusal::NodeSpace {
                    what: format!("node {}", id.name),
                    prefix,
                    held,
                    holder: NodeIdText(holder),
                };
                self.refusals.refuse(&id.cluster, &why);
                let freed = self.withdraw(inner, &id, told).map(|(_, freed)| freed);
                inner.held_back.insert(id, node);
                self.retry(inner, freed.unwrap_or_default(), told);
                return;
            }
        }
        let mut freed = Vec::new();
        if source != Source::ClusterMesh {
            // This cluster's node wins: remote nodes in its space are evicted.
            let evicted: BTreeSet<(NodeId, Prefix, Prefix)> = space
                .iter()
                .flat_map(|p| {
                    inner.space.overlapping(*p).flat_map(move |(held, ids)| {
                        ids.iter().map(move |other| (other.clone(), held, *p))
                    })
                })
                .filter(|(other, _, _)| {
                    other.cluster != id.cluster
                        && inner
                            .nodes
                            .get(other)
                            .is_some_and(|k| k.source == Source::ClusterMesh)
                })
                .collect();
            for (other, held, prefix) in evicted {
                if !inner.nodes.contains_key(&other) {
                    continue; // evicted for an earlier overlap
                }
                let why = Refusal::NodeSpace {
                    what: format!("node {}", other.name),
                    prefix: held,
                    held: prefix,
                    holder: NodeIdText(id.clone()),
                };
                self.refusals.refuse(&other.cluster, &why);
                if let Some((node, space)) = self.withdraw(inner, &other, told) {
                    inner.held_back.insert(other, node);
                    freed.extend(space);
                }
            }
        }
        inner.held_back.remove(&id);
        self.admit(inner, source, node, space, told);
        // The rest of an evicted node's space may unblock another.
        self.retry(inner, freed, told);
    }

    /// Admits `node`: its facts into the ipcache, its space into the index.
    fn admit(
        &self,
        inner: &mut Inner,
        source: Source,
        node: Node,
        space: Vec<Prefix>,
        told: &mut Vec<Told>,
    ) {
        let id = NodeId::of(&node);
        let owner = Self::owner(source, &id);
        let facts = self.facts(&id, &node);
        let prefixes: BTreeSet<Prefix> = facts.iter().map(|(p, _)| *p).collect();
        for (prefix, fact) in facts {
            self.ipcache.upsert(prefix, owner.clone(), fact);
        }
        inner.space.insert_member(&space, &id);
        let old = inner.nodes.insert(
            id.clone(),
            Known {
                node: node.clone(),
                source,
                prefixes: prefixes.clone(),
                space: space.clone(),
            },
        );
        let mut freed = Vec::new();
        if let Some(old) = &old {
            let old_owner = Self::owner(old.source, &id);
            for gone in old
                .prefixes
                .iter()
                .filter(|p| old.source != source || !prefixes.contains(*p))
            {
                self.ipcache.remove(*gone, &old_owner);
            }
            freed = old
                .space
                .iter()
                .filter(|p| !space.contains(p))
                .copied()
                .collect();
            inner.space.remove_member(&freed, &id);
        }
        told.push(Told::Upsert(node, old.map(|k| Box::new(k.node))));
        self.retry(inner, freed, told);
    }

    /// Takes an admitted node out: its facts, its space. Returns it and the space it
    /// freed.
    fn withdraw(
        &self,
        inner: &mut Inner,
        id: &NodeId,
        told: &mut Vec<Told>,
    ) -> Option<(Node, Vec<Prefix>)> {
        let known = inner.nodes.remove(id)?;
        let owner = Self::owner(known.source, id);
        for prefix in &known.prefixes {
            self.ipcache.remove(*prefix, &owner);
        }
        inner.space.remove_member(&known.space, id);
        told.push(Told::Delete(known.node.clone()));
        Some((known.node, known.space))
    }

    /// Admits the held-back nodes that `freed` space may have blocked and that nothing
    /// blocks now.
    fn retry(&self, inner: &mut Inner, freed: Vec<Prefix>, told: &mut Vec<Told>) {
        if freed.is_empty() || inner.held_back.is_empty() {
            return;
        }
        let waiting: Vec<NodeId> = inner
            .held_back
            .iter()
            .filter(|(_, n)| {
                node_space(n)
                    .iter()
                    .any(|p| freed.iter().any(|f| f.overlaps(p)))
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in waiting {
            let Some(node) = inner.held_back.get(&id) else {
                continue;
            };
            let space = node_space(node);
            let blocked = space
                .iter()
                .any(|p| foreign_holder(&inner.space, &id.cluster, *p).is_some());
            if !blocked {
                let node = inner.held_back.remove(&id).expect("held back");
                self.admit(inner, Source::ClusterMesh, node, space, told);
            }
        }
    }

    /// Removes a node and its ipcache facts.
    pub fn delete(&self, cluster: &str, name: &str) {
        let id = NodeId {
            cluster: cluster.into(),
            name: name.into(),
        };
        let mut told = Vec::new();
        {
            let mut inner = self.lock();
            if inner.held_back.remove(&id).is_none() {
                if let Some((_, freed)) = self.withdraw(&mut inner, &id, &mut told) {
                    self.retry(&mut inner, freed, &mut told);
                }
            }
        }
        self.tell(told);
    }

    fn tell(&self, told: Vec<Told>) {
        if told.is_empty() {
            return;
        }
        let listeners = self.listeners();
        for t in &told {
            for l in &listeners {
                match t {
                    Told::Upsert(node, old) => l.on_upsert(node, old.as_deref()),
                    Told::Delete(node) => l.on_delete(node),
                }
            }
        }
    }

    fn listeners(&self) -> Vec<Arc<dyn NodeListener>> {
        self.listeners
            .lock()
            .expect("listener lock poisoned")
            .clone()
    }

    /// The remote nodes held back now, by cluster.
    pub fn held_back(&self) -> BTreeMap<String, usize> {
        let mut by = BTreeMap::new();
        for id in self.lock().held_back.keys() {
            *by.entry(id.cluster.clone()).or_default() += 1;
        }
        by
    }

    /// Every known node.
    pub fn nodes(&self) -> Vec<Node> {
        self.lock().nodes.values().map(|k| k.node.clone()).collect()
    }

    /// How many nodes are known.
    pub fn len(&self) -> usize {
        self.lock().nodes.len()
    }

    /// Whether no node is known.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_model::NodeAddress;

    fn node(cluster: &str, name: &str, ips: &[&str], key: u8) -> Node {
        Node {
            name: name.into(),
            cluster: cluster.into(),
            ip_addresses: ips
                .iter()
                .map(|ip| NodeAddress {
                    kind: "InternalIP".into(),
                    ip: ip.parse().unwrap(),
                })
                .collect(),
            ipv4_health_ip: Some("10.244.1.153".parse().unwrap()),
            encryption_key: key,
            ..Node::default()
        }
    }

    #[derive(Default)]
    struct Seen(Mutex<Vec<String>>);

    impl NodeListener for Seen {
        fn on_upsert(&self, node: &Node, old: Option<&Node>) {
            self.0
                .lock()
                .unwrap()
                .push(format!("upsert {} (had {})", node.name, old.is_some()));
        }
        fn on_delete(&self, node: &Node) {
            self.0.lock().unwrap().push(format!("delete {}", node.name));
        }
    }

    #[test]
    fn node_ips_become_ipcache_entries_and_follow_updates_and_deletes() {
        let ipcache = Arc::new(IpCache::default());
        let local = NodeId {
            cluster: "c1".into(),
            name: "me".into(),
        };
        let m = NodeManager::new(ipcache.clone(), local, Arc::default());
        let seen = Arc::new(Seen::default());
        m.subscribe(seen.clone());

        m.upsert(
            Source::ClusterMesh,
            node("c2", "n2", &["172.18.0.3", "172.18.0.4"], 7),
        );
        let e = ipcache.lookup("172.18.0.3".parse().unwrap()).unwrap();
        assert_eq!((e.identity, e.encrypt_key), (6, 7));
        assert_eq!(e.tunnel_endpoint, Some("172.18.0.3".parse().unwrap()));
        let health = ipcache.lookup("10.244.1.153".parse().unwrap()).unwrap();
        assert_eq!(health.identity, 4);

        m.upsert(Source::ClusterMesh, node("c2", "n2", &["172.18.0.3"], 8));
        assert!(
            ipcache.lookup("172.18.0.4".parse().unwrap()).is_none(),
            "a dropped IP goes"
        );
        assert_eq!(
            ipcache
                .lookup("172.18.0.3".parse().unwrap())
                .unwrap()
                .encrypt_key,
            8
        );

        let mut me = node("c1", "me", &["172.18.0.2"], 0);
        me.ipv4_health_ip = Some("10.244.0.153".parse().unwrap());
        m.upsert(Source::Local, me);
        let me = ipcache.lookup("172.18.0.2".parse().unwrap()).unwrap();
        assert_eq!(
            (me.identity, me.tunnel_endpoint),
            (1, None),
            "our own node is the host"
        );

        m.delete("c2", "n2");
        assert!(ipcache.lookup("172.18.0.3".parse().unwrap()).is_none());
        assert_eq!(m.len(), 1);
        assert_eq!(
            seen.0.lock().unwrap().clone(),
            [
                "upsert n2 (had false)",
                "upsert n2 (had true)",
                "upsert me (had false)",
                "delete n2"
            ]
        );
    }
}
