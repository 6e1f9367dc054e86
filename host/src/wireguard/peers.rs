//! Which peers the device should have, as pure state: one per remote node with a
//! usable public key; its endpoint is the node's first IP at port 51871; its
//! AllowedIPs are the node's IPs plus every ipcache prefix tunnelled to one of them.
//! Every event returns the incremental changes, peer by peer, for the caller to send
//! over UAPI: there is never a rewrite of the whole device.
//!
//! After a restart the device's existing peers are *restored*: they are kept, and
//! their AllowedIPs too, until [`PeerTable::collect_garbage`]. The caller calls that
//! only once local nodes are synced and the mesh's `nodes_synced` and
//! `ip_identities_synced` have returned. Removing them earlier is the outage the seed
//! note describes: every cross-cluster connection cut because the remote nodes had
//! not been received yet.

use super::LISTEN_PORT;
use crate::ipcache::Prefix;
use crate::node::NodeId;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, SocketAddr};
use wireguard_control::Key;

/// A change to send to the device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerChange {
    /// Add the peer, or update it: its endpoint, and its AllowedIPs replaced by these.
    Upsert {
        /// The peer's public key.
        key: Key,
        /// Where to send its packets.
        endpoint: Option<SocketAddr>,
        /// Its AllowedIPs, all of them.
        allowed_ips: BTreeSet<Prefix>,
    },
    /// Remove the peer.
    Remove {
        /// The peer's public key.
        key: Key,
    },
}

/// Why a node gets no peer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The key is not base64 of 32 bytes.
    #[error("malformed WireGuard key")]
    Malformed,
    /// The all-zero key.
    #[error("zero WireGuard key")]
    Zero,
    /// Another node already has this key.
    #[error("WireGuard key already used by node {other}")]
    Duplicate {
        /// The node that has it.
        other: String,
    },
}

#[derive(Debug, Clone)]
struct NodePeer {
    key: Key,
    ips: Vec<IpAddr>,
}

/// The peers the device should have.
#[derive(Debug, Default)]
pub struct PeerTable {
    nodes: BTreeMap<NodeId, NodePeer>,
    by_key: HashMap<Key, NodeId>,
    by_ip: HashMap<IpAddr, NodeId>,
    /// ipcache prefixes per tunnel endpoint.
    tunnelled: HashMap<IpAddr, BTreeSet<Prefix>>,
    tunnel_of: HashMap<Prefix, IpAddr>,
    /// What the device had at start and nobody has claimed for removal yet.
    restored: HashMap<Key, BTreeSet<Prefix>>,
    refused: BTreeMap<NodeId, Refusal>,
}

impl PeerTable {
    /// A table that keeps the device's existing peers (key and AllowedIPs) until
    /// [`Self::collect_garbage`].
    pub fn restoring(existing: impl IntoIterator<Item = (Key, BTreeSet<Prefix>)>) -> Self {
        Self {
            restored: existing.into_iter().collect(),
            ..Self::default()
        }
    }

    /// Nodes refused a peer, and why.
    pub fn refused(&self) -> &BTreeMap<NodeId, Refusal> {
        &self.refused
    }

    /// The remote node `id` with its IPs and its published key (base64; empty when it
    /// has none) was added or changed.
    pub fn upsert_node(&mut self, id: &NodeId, ips: &[IpAddr], key: &str) -> Vec<PeerChange> {
        let mut changes = Vec::new();
        let parsed = parse_key(key);
        let old = self.nodes.get(id).cloned();
        // What this node had goes first: its key may change or become unusable.
        if let Some(old) = &old {
            let same_key = parsed.as_ref().is_ok_and(|k| *k == old.key);
            if !same_key {
                changes.extend(self.remove_node(id));
            }
        }
        self.refused.remove(id);
        let key = match parsed {
            Ok(k) => k,
            Err(Refusal::Malformed) if key.is_empty() => return changes, // no WireGuard
            Err(refusal) => return self.refuse(id, refusal, changes),
        };
        if let Some(other) = self.by_key.get(&key).filter(|o| *o != id) {
            let other = format!("{}/{}", other.cluster, other.name);
            return self.refuse(id, Refusal::Duplicate { other }, changes);
        }
        let before = self
            .nodes
            .get(id)
            .map(|n| n.ips.clone())
            .unwrap_or_default();
        for ip in &before {
            self.by_ip.remove(ip);
        }
        for ip in ips {
            self.by_ip.insert(*ip, id.clone());
        }
        self.by_key.insert(key.clone(), id.clone());
        self.nodes.insert(
            id.clone(),
            NodePeer {
                key: key.clone(),
                ips: ips.to_vec(),
            },
        );
        changes.push(self.desired(&key));
        changes
    }

    fn refuse(
        &mut self,
        id: &NodeId,
        refusal: Refusal,
        changes: Vec<PeerChange>,
    ) -> Vec<PeerChange> {
        tracing::warn!(node = %id.name, cluster = %id.cluster, %refusal, "no WireGuard peer for node");
        self.refused.insert(id.clone(), refusal);
        changes
    }

    /// The remote node `id` went away.
    pub fn delete_node(&mut self, id: &NodeId) -> Vec<PeerChange> {
        self.refused.remove(id);
        self.remove_node(id)
    }

    fn remove_node(&mut self, id: &NodeId) -> Vec<PeerChange> {
        let Some(old) = self.nodes.remove(id) else {
            return Vec::new();
        };
        self.by_key.remove(&old.key);
        for ip in &old.ips {
            if self.by_ip.get(ip) == Some(id) {
                self.by_ip.remove(ip);
            }
        }
        // A restored peer stays until garbage collection, with what it had.
        if self.restored.contains_key(&old.key) {
            vec![self.desired(&old.key)]
        } else {
            vec![PeerChange::Remove { key: old.key }]
        }
    }

    /// An ipcache entry's tunnel endpoint changed (`None`: none, or the entry is gone).
    pub fn tunnel_changed(&mut self, prefix: Prefix, endpoint: Option<IpAddr>) -> Vec<PeerChange> {
        let old = self.tunnel_of.get(&prefix).copied();
        if old == endpoint {
            return Vec::new();
        }
        let owner = |t: &Self, ip: Option<IpAddr>| {
            ip.and_then(|ip| t.by_ip.get(&ip))
                .and_then(|id| t.nodes.get(id))
                .map(|n| n.key.clone())
        };
        let before = owner(self, old);
        if let Some(old) = old {
            if let Some(set) = self.tunnelled.get_mut(&old) {
                set.remove(&prefix);
            }
        }
        match endpoint {
            Some(ip) => {
                self.tunnel_of.insert(prefix, ip);
                self.tunnelled.entry(ip).or_default().insert(prefix);
            }
            None => {
                self.tunnel_of.remove(&prefix);
            }
        }
        let after = owner(self, endpoint);
        let mut keys: Vec<Key> = before.into_iter().chain(after).collect();
        keys.dedup();
        keys.iter().map(|k| self.desired(k)).collect()
    }

    /// Removes what was restored and nobody claims: peers of no node, and AllowedIPs
    /// no node or ipcache entry gives. Call only once the remote nodes and their
    /// ipcache entries are synced (a disconnected or removed cluster counts as done).
    pub fn collect_garbage(&mut self) -> Vec<PeerChange> {
        let restored: Vec<Key> = self.restored.drain().map(|(k, _)| k).collect();
        restored
            .into_iter()
            .map(|key| {
                if self.by_key.contains_key(&key) {
                    self.desired(&key)
                } else {
                    PeerChange::Remove { key }
                }
            })
            .collect()
    }

    /// Whether restored peers are still kept.
    pub fn restoring_pending(&self) -> bool {
        !self.restored.is_empty()
    }

    /// The peer `key` should be now.
    fn desired(&self, key: &Key) -> PeerChange {
        let node = self.by_key.get(key).and_then(|id| self.nodes.get(id));
        let mut allowed_ips: BTreeSet<Prefix> = self.restored.get(key).cloned().unwrap_or_default();
        let mut endpoint = None;
        if let Some(node) = node {
            endpoint = node.ips.first().map(|ip| SocketAddr::new(*ip, LISTEN_PORT));
            for ip in &node.ips {
                allowed_ips.insert(Prefix::host(*ip));
                if let Some(set) = self.tunnelled.get(ip) {
                    allowed_ips.extend(set.iter().copied());
                }
            }
        }
        PeerChange::Upsert {
            key: key.clone(),
            endpoint,
            allowed_ips,
        }
    }
}

fn parse_key(text: &str) -> Result<Key, Refusal> {
    let key = Key::from_base64(text.trim()).map_err(|_| Refusal::Malformed)?;
    if key.as_bytes().iter().all(|b| *b == 0) {
        return Err(Refusal::Zero);
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(name: &str) -> NodeId {
        NodeId {
            cluster: "c2".into(),
            name: name.into(),
        }
    }

    fn key(n: u8) -> Key {
        Key::from_base64(&Key([n; 32]).to_base64()).unwrap()
    }

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    fn prefixes(list: &[&str]) -> BTreeSet<Prefix> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    fn upsert(key: &Key, endpoint: &str, allowed: &[&str]) -> PeerChange {
        PeerChange::Upsert {
            key: key.clone(),
            endpoint: Some(endpoint.parse().unwrap()),
            allowed_ips: prefixes(allowed),
        }
    }

    #[test]
    fn a_node_becomes_a_peer_with_its_ips_and_the_prefixes_tunnelled_to_it() {
        let mut t = PeerTable::default();
        let k = key(1);
        assert_eq!(
            t.upsert_node(&id("n1"), &ips(&["192.0.2.2"]), &k.to_base64()),
            [upsert(&k, "192.0.2.2:51871", &["192.0.2.2/32"])]
        );
        let pod: Prefix = "10.2.0.7/32".parse().unwrap();
        assert_eq!(
            t.tunnel_changed(pod, Some("192.0.2.2".parse().unwrap())),
            [upsert(
                &k,
                "192.0.2.2:51871",
                &["192.0.2.2/32", "10.2.0.7/32"]
            )]
        );
        // Moving the prefix to an unknown endpoint takes it off the peer.
        assert_eq!(
            t.tunnel_changed(pod, Some("192.0.2.9".parse().unwrap())),
            [upsert(&k, "192.0.2.2:51871", &["192.0.2.2/32"])]
        );
        assert_eq!(t.tunnel_changed(pod, None), []);
        assert_eq!(t.delete_node(&id("n1")), [PeerChange::Remove { key: k }]);
    }

    #[test]
    fn zero_duplicate_and_malformed_keys_are_refused_and_a_changed_key_replaces_the_peer() {
        let mut t = PeerTable::default();
        let zero = Key([0; 32]).to_base64();
        assert_eq!(t.upsert_node(&id("z"), &ips(&["192.0.2.3"]), &zero), []);
        assert_eq!(t.refused()[&id("z")], Refusal::Zero);
        assert_eq!(
            t.upsert_node(&id("m"), &ips(&["192.0.2.4"]), "not-a-key"),
            []
        );
        assert_eq!(t.refused()[&id("m")], Refusal::Malformed);
        assert_eq!(t.upsert_node(&id("none"), &ips(&["192.0.2.5"]), ""), []);
        assert!(
            !t.refused().contains_key(&id("none")),
            "no key: no WireGuard"
        );

        let k = key(1);
        t.upsert_node(&id("n1"), &ips(&["192.0.2.2"]), &k.to_base64());
        assert_eq!(
            t.upsert_node(&id("n2"), &ips(&["192.0.2.6"]), &k.to_base64()),
            []
        );
        assert!(matches!(t.refused()[&id("n2")], Refusal::Duplicate { .. }));

        let k2 = key(2);
        assert_eq!(
            t.upsert_node(&id("n1"), &ips(&["192.0.2.2"]), &k2.to_base64()),
            [
                PeerChange::Remove { key: k.clone() },
                upsert(&k2, "192.0.2.2:51871", &["192.0.2.2/32"])
            ]
        );
        // The old key is free again.
        assert_eq!(
            t.upsert_node(&id("n2"), &ips(&["192.0.2.6"]), &k.to_base64()),
            [upsert(&k, "192.0.2.6:51871", &["192.0.2.6/32"])]
        );
        assert!(!t.refused().contains_key(&id("n2")));
    }

    #[test]
    fn restored_peers_and_allowed_ips_stay_until_garbage_collection() {
        let (kept, stale) = (key(1), key(9));
        let mut t = PeerTable::restoring([
            (kept.clone(), prefixes(&["192.0.2.2/32", "10.2.0.0/24"])),
            (stale.clone(), prefixes(&["192.0.2.99/32"])),
        ]);
        // The node comes back without its prefix yet: nothing restored is dropped.
        assert_eq!(
            t.upsert_node(&id("n1"), &ips(&["192.0.2.2"]), &kept.to_base64()),
            [upsert(
                &kept,
                "192.0.2.2:51871",
                &["192.0.2.2/32", "10.2.0.0/24"]
            )]
        );
        // Even a delete keeps a restored peer as it was.
        let again = t.delete_node(&id("n1"));
        assert!(
            matches!(&again[..], [PeerChange::Upsert { allowed_ips, .. }] if allowed_ips.len() == 2)
        );
        t.upsert_node(&id("n1"), &ips(&["192.0.2.2"]), &kept.to_base64());
        assert!(t.restoring_pending());

        let mut gc = t.collect_garbage();
        gc.sort_by_key(|c| matches!(c, PeerChange::Remove { .. }));
        assert_eq!(
            gc,
            [
                upsert(&kept, "192.0.2.2:51871", &["192.0.2.2/32"]),
                PeerChange::Remove { key: stale }
            ]
        );
        assert!(!t.restoring_pending());
        assert_eq!(t.delete_node(&id("n1")), [PeerChange::Remove { key: kept }]);
    }
}
