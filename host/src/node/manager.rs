//! The node manager: every known node, its IPs as ipcache facts, and a subscription for
//! the stages that act per node (WireGuard, datapath).

use crate::identity::Reserved;
use crate::ipcache::{Fact, IpCache, Owner, Prefix, Source};
use crate::model::{Labels, Node};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

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
}

/// Every node this agent knows: its own (source `local`), its cluster's (`kvstore`)
/// and remote clusters' (`clustermesh`).
pub struct NodeManager {
    ipcache: Arc<IpCache>,
    /// This node: its IPs get the `host` label instead of `remote-node`.
    local: NodeId,
    nodes: Mutex<BTreeMap<NodeId, Known>>,
    listeners: Mutex<Vec<Arc<dyn NodeListener>>>,
}

impl NodeManager {
    /// A manager writing node IPs to `ipcache`; `local` names this node.
    pub fn new(ipcache: Arc<IpCache>, local: NodeId) -> Self {
        Self {
            ipcache,
            local,
            nodes: Mutex::new(BTreeMap::new()),
            listeners: Mutex::new(Vec::new()),
        }
    }

    /// Subscribes `listener`; it first receives every known node.
    pub fn subscribe(&self, listener: Arc<dyn NodeListener>) {
        let nodes = self.nodes.lock().expect("node lock poisoned");
        for known in nodes.values() {
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
        let id = NodeId::of(&node);
        let owner = Self::owner(source, &id);
        let facts = self.facts(&id, &node);
        let prefixes: BTreeSet<Prefix> = facts.iter().map(|(p, _)| *p).collect();
        let old = {
            let mut nodes = self.nodes.lock().expect("node lock poisoned");
            for (prefix, fact) in facts {
                self.ipcache.upsert(prefix, owner.clone(), fact);
            }
            let old = nodes.insert(
                id,
                Known {
                    node: node.clone(),
                    source,
                    prefixes: prefixes.clone(),
                },
            );
            if let Some(old) = &old {
                let old_owner = Self::owner(old.source, &NodeId::of(&node));
                for gone in old
                    .prefixes
                    .iter()
                    .filter(|p| old.source != source || !prefixes.contains(*p))
                {
                    self.ipcache.remove(*gone, &old_owner);
                }
            }
            old
        };
        for l in self.listeners() {
            l.on_upsert(&node, old.as_ref().map(|k| &k.node));
        }
    }

    /// Removes a node and its ipcache facts.
    pub fn delete(&self, cluster: &str, name: &str) {
        let id = NodeId {
            cluster: cluster.into(),
            name: name.into(),
        };
        let Some(known) = self.nodes.lock().expect("node lock poisoned").remove(&id) else {
            return;
        };
        let owner = Self::owner(known.source, &id);
        for prefix in &known.prefixes {
            self.ipcache.remove(*prefix, &owner);
        }
        for l in self.listeners() {
            l.on_delete(&known.node);
        }
    }

    fn listeners(&self) -> Vec<Arc<dyn NodeListener>> {
        self.listeners
            .lock()
            .expect("listener lock poisoned")
            .clone()
    }

    /// Every known node.
    pub fn nodes(&self) -> Vec<Node> {
        let nodes = self.nodes.lock().expect("node lock poisoned");
        nodes.values().map(|k| k.node.clone()).collect()
    }

    /// How many nodes are known.
    pub fn len(&self) -> usize {
        self.nodes.lock().expect("node lock poisoned").len()
    }

    /// Whether no node is known.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::NodeAddress;

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
        let m = NodeManager::new(ipcache.clone(), local);
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

        m.upsert(Source::Local, node("c1", "me", &["172.18.0.2"], 0));
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
