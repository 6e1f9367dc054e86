//! Which peers the device should have, as pure state: one per remote node with a
//! usable public key; its endpoint is the node's first IP at port 51871; its
//! AllowedIPs are the node's IPs plus every ipcache prefix tunnelled to one of them.
//!
//! The table also keeps a view of what the device holds. Events only mark peers
//! dirty; [`PeerTable::changes`] then gives one change per dirty peer, as small as
//! the UAPI allows: the new AllowedIPs alone when the peer only gained some, its
//! whole set with `replace_allowed_ips` only when it lost one (UAPI cannot remove a
//! single AllowedIP), the endpoint only when it moved. A burst of events becomes one
//! update, and there is never a rewrite of the whole device.
//!
//! After a restart the device's existing peers are *restored*: they are kept, and
//! their AllowedIPs too, until [`PeerTable::collect_garbage`]. The caller calls that
//! only once local nodes are synced and the mesh's `nodes_synced` and
//! `ip_identities_synced` have returned. Removing them earlier is the outage the seed
//! note describes: every cross-cluster connection cut because the remote nodes had
//! not been received yet.

use super::LISTEN_PORT;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use weft_state::ipcache::Prefix;
use weft_state::node::NodeId;
use wireguard_control::Key;

/// A change to send to the device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerChange {
    /// Add the peer or change it.
    Upsert {
        /// The peer's public key.
        key: Key,
        /// Where to send its packets; `None` leaves it as it is.
        endpoint: Option<SocketAddr>,
        /// AllowedIPs to add, or with `replace_allowed_ips` all of them.
        allowed_ips: BTreeSet<Prefix>,
        /// Whether `allowed_ips` replaces the peer's set instead of adding to it.
        replace_allowed_ips: bool,
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

/// What garbage collection did with the restored peers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Collected {
    /// Restored peers a node claims.
    pub kept: Vec<Key>,
    /// Restored peers no node claims: removed.
    pub removed: Vec<Key>,
    /// Restored AllowedIPs of kept peers that nothing claims: removed.
    pub trimmed: Vec<Prefix>,
}

#[derive(Debug, Clone)]
struct NodePeer {
    key: Key,
    ips: Vec<IpAddr>,
}

/// A peer as the device has it (or should have it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct DevicePeer {
    endpoint: Option<SocketAddr>,
    allowed_ips: BTreeSet<Prefix>,
}

/// The peers the device should have, and what it has.
///
/// # Example
/// ```
/// use weft_state::node::NodeId;
/// use weft_wireguard::{PeerChange, PeerTable};
///
/// let mut table = PeerTable::default();
/// let node = NodeId { cluster: "c2".into(), name: "n1".into() };
/// let key = wireguard_control::Key([1; 32]);
/// table.upsert_node(&node, &["192.0.2.2".parse().unwrap()], &key.to_base64());
/// table.tunnel_changed("10.2.0.7/32".parse().unwrap(), Some("192.0.2.2".parse().unwrap()));
/// // Both events make one new peer, with the node IP and the tunnelled prefix.
/// let changes = table.changes();
/// assert!(matches!(&changes[..], [PeerChange::Upsert { allowed_ips, .. }] if allowed_ips.len() == 2));
/// assert!(table.changes().is_empty(), "nothing is sent twice");
/// ```
#[derive(Debug, Default)]
pub struct PeerTable {
    nodes: BTreeMap<NodeId, NodePeer>,
    by_key: HashMap<Key, NodeId>,
    by_ip: HashMap<IpAddr, NodeId>,
    /// ipcache prefixes per tunnel endpoint.
    tunnelled: HashMap<IpAddr, BTreeSet<Prefix>>,
    tunnel_of: HashMap<Prefix, IpAddr>,
    /// What the device had at start, kept until garbage collection.
    restored: HashMap<Key, BTreeSet<Prefix>>,
    refused: BTreeMap<NodeId, Refusal>,
    /// Nodes refused for a key another node has, with their IPs: one gets the peer
    /// when that key is free again.
    waiting: BTreeMap<NodeId, (Vec<IpAddr>, Key)>,
    /// What the device holds, as far as the changes given out say.
    device: HashMap<Key, DevicePeer>,
    dirty: HashSet<Key>,
}

impl PeerTable {
    /// A table for a device that has `existing` peers (key and AllowedIPs): they are
    /// kept until [`Self::collect_garbage`].
    pub fn restoring(existing: impl IntoIterator<Item = (Key, BTreeSet<Prefix>)>) -> Self {
        let restored: HashMap<Key, BTreeSet<Prefix>> = existing.into_iter().collect();
        Self {
            device: device_view(restored.clone()),
            restored,
            ..Self::default()
        }
    }

    /// Forgets the device view for `actual`, what the device really holds (after an
    /// update it refused, say): the next [`Self::changes`] brings every peer back in
    /// step with it.
    pub fn resync(&mut self, actual: impl IntoIterator<Item = (Key, BTreeSet<Prefix>)>) {
        self.device = device_view(actual);
        let wanted = self.by_key.keys().chain(self.restored.keys());
        self.dirty = wanted.chain(self.device.keys()).cloned().collect();
    }

    /// Nodes refused a peer, and why.
    pub fn refused(&self) -> &BTreeMap<NodeId, Refusal> {
        &self.refused
    }

    /// The node whose peer has `key`.
    pub fn node_of(&self, key: &Key) -> Option<&NodeId> {
        self.by_key.get(key)
    }

    /// Each peer's key with its node.
    pub fn owners(&self) -> impl Iterator<Item = (&Key, &NodeId)> {
        self.by_key.iter()
    }

    /// The remote node `id` with its IPs and its published key (base64; empty when it
    /// has none) was added or changed.
    pub fn upsert_node(&mut self, id: &NodeId, ips: &[IpAddr], key: &str) {
        let parsed = parse_key(key);
        // What this node had goes first: its key may change or become unusable.
        if let Some(old) = self.nodes.get(id) {
            if parsed.as_ref().ok() != Some(&old.key) {
                self.remove_node(id);
            }
        }
        self.refused.remove(id);
        self.waiting.remove(id);
        let key = match parsed {
            Ok(k) => k,
            Err(Refusal::Malformed) if key.is_empty() => return, // no WireGuard
            Err(refusal) => return self.refuse(id, refusal),
        };
        if let Some(other) = self.by_key.get(&key).filter(|o| *o != id) {
            let other = format!("{}/{}", other.cluster, other.name);
            self.waiting.insert(id.clone(), (ips.to_vec(), key));
            return self.refuse(id, Refusal::Duplicate { other });
        }
        if let Some(before) = self.nodes.get(id) {
            for ip in &before.ips {
                self.by_ip.remove(ip);
            }
        }
        for ip in ips {
            self.by_ip.insert(*ip, id.clone());
        }
        self.by_key.insert(key.clone(), id.clone());
        self.dirty.insert(key.clone());
        let ips = ips.to_vec();
        self.nodes.insert(id.clone(), NodePeer { key, ips });
    }

    fn refuse(&mut self, id: &NodeId, refusal: Refusal) {
        tracing::warn!(node = %id.name, cluster = %id.cluster, %refusal, "no WireGuard peer for node");
        self.refused.insert(id.clone(), refusal);
    }

    /// The remote node `id` went away.
    pub fn delete_node(&mut self, id: &NodeId) {
        self.refused.remove(id);
        self.waiting.remove(id);
        self.remove_node(id);
    }

    fn remove_node(&mut self, id: &NodeId) {
        let Some(old) = self.nodes.remove(id) else {
            return;
        };
        self.by_key.remove(&old.key);
        for ip in &old.ips {
            if self.by_ip.get(ip) == Some(id) {
                self.by_ip.remove(ip);
            }
        }
        // A node refused for this key may have it now.
        let heir = self
            .waiting
            .iter()
            .find(|(_, (_, k))| *k == old.key)
            .map(|(id, (ips, _))| (id.clone(), ips.clone()));
        if let Some((heir, ips)) = heir {
            self.upsert_node(&heir, &ips, &old.key.to_base64());
        }
        self.dirty.insert(old.key);
    }

    /// An ipcache entry's tunnel endpoint changed (`None`: none, or the entry is gone).
    pub fn tunnel_changed(&mut self, prefix: Prefix, endpoint: Option<IpAddr>) {
        let old = self.tunnel_of.get(&prefix).copied();
        if old == endpoint {
            return;
        }
        if let Some(old) = old {
            if let Some(set) = self.tunnelled.get_mut(&old) {
                set.remove(&prefix);
                if set.is_empty() {
                    self.tunnelled.remove(&old);
                }
            }
            self.mark_owner(old);
        }
        match endpoint {
            Some(ip) => {
                self.tunnel_of.insert(prefix, ip);
                self.tunnelled.entry(ip).or_default().insert(prefix);
                self.mark_owner(ip);
            }
            None => {
                self.tunnel_of.remove(&prefix);
            }
        }
    }

    fn mark_owner(&mut self, ip: IpAddr) {
        if let Some(node) = self.by_ip.get(&ip).and_then(|id| self.nodes.get(id)) {
            self.dirty.insert(node.key.clone());
        }
    }

    /// Stops keeping what was restored: peers no node claims are removed, and so are
    /// AllowedIPs no node or ipcache entry gives. Call only once the remote nodes and
    /// their ipcache entries are synced (a disconnected or removed cluster counts as
    /// done); [`Self::changes`] then gives the removals.
    pub fn collect_garbage(&mut self) -> Collected {
        let mut collected = Collected::default();
        for (key, ips) in std::mem::take(&mut self.restored) {
            match self.desired(&key) {
                Some(want) => {
                    collected
                        .trimmed
                        .extend(ips.difference(&want.allowed_ips).copied());
                    collected.kept.push(key.clone());
                }
                None => collected.removed.push(key.clone()),
            }
            self.dirty.insert(key);
        }
        collected.kept.sort_by_key(|k| k.0);
        collected.removed.sort_by_key(|k| k.0);
        collected
    }

    /// The restored peers [`Self::collect_garbage`] would remove now (no node claims
    /// their key), with their AllowedIPs, by key.
    pub fn garbage(&self) -> Vec<(Key, BTreeSet<Prefix>)> {
        let mut garbage: Vec<(Key, BTreeSet<Prefix>)> = self
            .restored
            .iter()
            .filter(|(key, _)| !self.by_key.contains_key(*key))
            .map(|(key, ips)| (key.clone(), ips.clone()))
            .collect();
        garbage.sort_by_key(|(k, _)| k.0);
        garbage
    }

    /// Whether restored peers are still kept.
    pub fn restoring_pending(&self) -> bool {
        !self.restored.is_empty()
    }

    /// The changes that bring the device in step, one per dirty peer: removals first,
    /// then by key. The device view assumes they are applied.
    pub fn changes(&mut self) -> Vec<PeerChange> {
        let mut dirty: Vec<Key> = self.dirty.drain().collect();
        dirty.sort_by_key(|k| k.0);
        let mut removals = Vec::new();
        let mut upserts = Vec::new();
        for key in dirty {
            let want = self.desired(&key);
            match (want, self.device.get(&key)) {
                (None, None) => {}
                (None, Some(_)) => {
                    self.device.remove(&key);
                    removals.push(PeerChange::Remove { key });
                }
                (Some(want), None) => {
                    upserts.push(PeerChange::Upsert {
                        key: key.clone(),
                        endpoint: want.endpoint,
                        allowed_ips: want.allowed_ips.clone(),
                        replace_allowed_ips: false,
                    });
                    self.device.insert(key, want);
                }
                (Some(want), Some(have)) => {
                    let moved = want.endpoint.is_some() && want.endpoint != have.endpoint;
                    let lost = !have.allowed_ips.is_subset(&want.allowed_ips);
                    let gained: BTreeSet<Prefix> = want
                        .allowed_ips
                        .difference(&have.allowed_ips)
                        .copied()
                        .collect();
                    if moved || lost || !gained.is_empty() {
                        upserts.push(PeerChange::Upsert {
                            key: key.clone(),
                            endpoint: want.endpoint.filter(|_| moved),
                            allowed_ips: if lost {
                                want.allowed_ips.clone()
                            } else {
                                gained
                            },
                            replace_allowed_ips: lost,
                        });
                    }
                    // A restored peer's endpoint is unknown until its node says it.
                    let endpoint = want.endpoint.or(have.endpoint);
                    let allowed_ips = want.allowed_ips;
                    self.device.insert(
                        key,
                        DevicePeer {
                            endpoint,
                            allowed_ips,
                        },
                    );
                }
            }
        }
        removals.extend(upserts);
        removals
    }

    /// The peer `key` should be now, if any.
    fn desired(&self, key: &Key) -> Option<DevicePeer> {
        let node = self.by_key.get(key).and_then(|id| self.nodes.get(id));
        let restored = self.restored.get(key);
        if node.is_none() && restored.is_none() {
            return None;
        }
        let mut peer = DevicePeer {
            endpoint: None,
            allowed_ips: restored.cloned().unwrap_or_default(),
        };
        if let Some(node) = node {
            peer.endpoint = node.ips.first().map(|ip| SocketAddr::new(*ip, LISTEN_PORT));
            let id = self.by_key.get(key);
            for ip in &node.ips {
                peer.allowed_ips.insert(Prefix::host(*ip));
                // Two nodes claiming one IP: its prefixes go to the latest.
                if self.by_ip.get(ip) != id {
                    continue;
                }
                if let Some(set) = self.tunnelled.get(ip) {
                    peer.allowed_ips.extend(set.iter().copied());
                }
            }
        }
        Some(peer)
    }
}

/// The device view of peers read from a device; an endpoint stays unknown until a
/// node gives one.
fn device_view(
    peers: impl IntoIterator<Item = (Key, BTreeSet<Prefix>)>,
) -> HashMap<Key, DevicePeer> {
    peers
        .into_iter()
        .map(|(key, allowed_ips)| {
            let peer = DevicePeer {
                endpoint: None,
                allowed_ips,
            };
            (key, peer)
        })
        .collect()
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
        Key([n; 32])
    }

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    fn prefixes(list: &[&str]) -> BTreeSet<Prefix> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    fn upsert(key: &Key, endpoint: Option<&str>, allowed: &[&str], replace: bool) -> PeerChange {
        PeerChange::Upsert {
            key: key.clone(),
            endpoint: endpoint.map(|e| e.parse().unwrap()),
            allowed_ips: prefixes(allowed),
            replace_allowed_ips: replace,
        }
    }

    fn endpoint(ip: &str) -> Option<IpAddr> {
        Some(ip.parse().unwrap())
    }

    #[test]
    fn a_node_becomes_a_peer_and_its_prefixes_are_sent_as_they_change() {
        let mut t = PeerTable::default();
        let k = key(1);
        t.upsert_node(&id("n1"), &ips(&["192.0.2.2"]), &k.to_base64());
        assert_eq!(
            t.changes(),
            [upsert(
                &k,
                Some("192.0.2.2:51871"),
                &["192.0.2.2/32"],
                false
            )]
        );
        assert_eq!(t.changes(), [], "nothing dirty, nothing sent");
        // A gained prefix is sent alone, without the endpoint that did not move.
        let pod: Prefix = "10.2.0.7/32".parse().unwrap();
        t.tunnel_changed(pod, endpoint("192.0.2.2"));
        assert_eq!(t.changes(), [upsert(&k, None, &["10.2.0.7/32"], false)]);
        // A burst of changes to one peer is one change.
        for n in 1..=3 {
            t.tunnel_changed(
                format!("10.2.1.{n}/32").parse().unwrap(),
                endpoint("192.0.2.2"),
            );
        }
        assert_eq!(
            t.changes(),
            [upsert(
                &k,
                None,
                &["10.2.1.1/32", "10.2.1.2/32", "10.2.1.3/32"],
                false
            )]
        );
        // Losing a prefix replaces the set: UAPI cannot remove one AllowedIP.
        t.tunnel_changed(pod, endpoint("192.0.2.9"));
        assert_eq!(
            t.changes(),
            [upsert(
                &k,
                None,
                &["192.0.2.2/32", "10.2.1.1/32", "10.2.1.2/32", "10.2.1.3/32"],
                true
            )]
        );
        t.tunnel_changed(pod, None);
        assert_eq!(t.changes(), []);
        // The node moves: only the endpoint and the new IP.
        t.upsert_node(
            &id("n1"),
            &ips(&["192.0.2.2", "198.51.100.2"]),
            &k.to_base64(),
        );
        assert_eq!(t.changes(), [upsert(&k, None, &["198.51.100.2/32"], false)]);
        t.delete_node(&id("n1"));
        assert_eq!(t.changes(), [PeerChange::Remove { key: k }]);
    }

    #[test]
    fn a_prefix_moving_between_nodes_leaves_one_and_joins_the_other() {
        let mut t = PeerTable::default();
        let (k1, k2) = (key(1), key(2));
        t.upsert_node(&id("n1"), &ips(&["192.0.2.1"]), &k1.to_base64());
        t.upsert_node(&id("n2"), &ips(&["192.0.2.2"]), &k2.to_base64());
        let pod: Prefix = "10.2.0.7/32".parse().unwrap();
        t.tunnel_changed(pod, endpoint("192.0.2.1"));
        t.changes();
        t.tunnel_changed(pod, endpoint("192.0.2.2"));
        assert_eq!(
            t.changes(),
            [
                upsert(&k1, None, &["192.0.2.1/32"], true),
                upsert(&k2, None, &["10.2.0.7/32"], false)
            ]
        );
    }

    #[test]
    fn zero_duplicate_and_malformed_keys_are_refused_and_a_changed_key_replaces_the_peer() {
        let mut t = PeerTable::default();
        let zero = Key([0; 32]).to_base64();
        t.upsert_node(&id("z"), &ips(&["192.0.2.3"]), &zero);
        assert_eq!(t.refused()[&id("z")], Refusal::Zero);
        t.upsert_node(&id("m"), &ips(&["192.0.2.4"]), "not-a-key");
        assert_eq!(t.refused()[&id("m")], Refusal::Malformed);
        t.upsert_node(&id("none"), &ips(&["192.0.2.5"]), "");
        assert!(
            !t.refused().contains_key(&id("none")),
            "no key: no WireGuard"
        );
        assert_eq!(t.changes(), []);

        let k = key(1);
        t.upsert_node(&id("n1"), &ips(&["192.0.2.2"]), &k.to_base64());
        t.changes();
        t.upsert_node(&id("n2"), &ips(&["192.0.2.6"]), &k.to_base64());
        assert_eq!(t.changes(), []);
        assert!(matches!(t.refused()[&id("n2")], Refusal::Duplicate { .. }));
        assert_eq!(t.node_of(&k), Some(&id("n1")), "the first keeps its peer");

        let k2 = key(2);
        t.upsert_node(&id("n1"), &ips(&["192.0.2.2"]), &k2.to_base64());
        assert_eq!(
            t.changes(),
            [
                // Key 1 goes to n2, which waited for it: same key, other node.
                upsert(&k, Some("192.0.2.6:51871"), &["192.0.2.6/32"], true),
                upsert(&k2, Some("192.0.2.2:51871"), &["192.0.2.2/32"], false)
            ]
        );
        // The old key is free again: the node refused for it has it now.
        assert!(!t.refused().contains_key(&id("n2")));
        assert_eq!(t.node_of(&k), Some(&id("n2")));
        // A node whose key becomes zero loses its peer.
        t.upsert_node(&id("n2"), &ips(&["192.0.2.6"]), &zero);
        assert_eq!(t.changes(), [PeerChange::Remove { key: k }]);
    }

    #[test]
    fn restored_peers_and_allowed_ips_stay_until_garbage_collection() {
        let (kept, stale) = (key(1), key(9));
        let mut t = PeerTable::restoring([
            (kept.clone(), prefixes(&["192.0.2.2/32", "10.2.0.0/24"])),
            (stale.clone(), prefixes(&["192.0.2.99/32"])),
        ]);
        // The node comes back without its prefix yet: nothing restored is dropped,
        // only the endpoint is said.
        t.upsert_node(&id("n1"), &ips(&["192.0.2.2"]), &kept.to_base64());
        assert_eq!(
            t.changes(),
            [upsert(&kept, Some("192.0.2.2:51871"), &[], false)]
        );
        // Even a delete keeps a restored peer as it was.
        t.delete_node(&id("n1"));
        assert_eq!(t.changes(), []);
        t.upsert_node(&id("n1"), &ips(&["192.0.2.2"]), &kept.to_base64());
        t.changes();
        assert!(t.restoring_pending());
        // What collection would remove, asked before: the peer no node claims.
        assert_eq!(t.garbage(), [(stale.clone(), prefixes(&["192.0.2.99/32"]))]);

        let collected = t.collect_garbage();
        assert_eq!(
            collected,
            Collected {
                kept: vec![kept.clone()],
                removed: vec![stale.clone()],
                trimmed: vec!["10.2.0.0/24".parse().unwrap()],
            }
        );
        assert_eq!(
            t.changes(),
            [
                PeerChange::Remove { key: stale },
                upsert(&kept, None, &["192.0.2.2/32"], true)
            ]
        );
        assert!(!t.restoring_pending());
        assert!(t.garbage().is_empty());
        t.delete_node(&id("n1"));
        assert_eq!(t.changes(), [PeerChange::Remove { key: kept }]);
    }

    #[test]
    fn resync_brings_the_device_back_in_step_after_a_refused_update() {
        let mut t = PeerTable::default();
        let (k1, k9) = (key(1), key(9));
        t.upsert_node(&id("n1"), &ips(&["192.0.2.2"]), &k1.to_base64());
        t.changes();
        // The device really holds a stranger and lost n1's peer.
        t.resync([(k9.clone(), prefixes(&["10.9.0.0/16"]))]);
        assert_eq!(
            t.changes(),
            [
                PeerChange::Remove { key: k9 },
                upsert(&k1, Some("192.0.2.2:51871"), &["192.0.2.2/32"], false)
            ]
        );
    }
}
