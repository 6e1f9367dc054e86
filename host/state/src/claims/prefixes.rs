//! Remote clusters' ipcache entries, admitted to the ipcache only while their cluster
//! may speak for them.

use super::{foreign_holder, node_space, NodeIdText, PrefixIndex, Refusal, Refusals};
use crate::ipcache::{Fact, IpCache, Owner, Prefix, Source};
use crate::node::{NodeId, NodeListener};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use weft_model::Node;

/// The gate between remote clusters' ipcache entries and the ipcache.
///
/// An entry is admitted when its identity is its cluster's, its prefix overlaps no
/// other cluster's node space, its tunnel endpoint is in no other cluster's node space,
/// and no other remote cluster holds its prefix. Otherwise it is held back, counted in
/// [`Refusals`], and checked again when what blocked it goes away. It follows the
/// nodes as a [`NodeListener`]: a node's new space evicts the entries of other clusters
/// inside it, whichever arrived first.
///
/// # Example
/// ```
/// use std::sync::Arc;
/// use weft_state::claims::{Refusals, RemotePrefixes};
/// use weft_state::ipcache::{Fact, IpCache};
/// let ipcache = Arc::new(IpCache::default());
/// let gate = RemotePrefixes::new(ipcache.clone(), Arc::new(Refusals::default()));
/// let fact = |id| Fact { identity: Some(id), ..Fact::default() };
/// let pod = "10.2.0.7".parse().unwrap();
/// let key: Arc<str> = "ip/10.2.0.7".into();
/// gate.upsert("c2", Some(2), &key, pod, fact(0x2_0005), None);
/// // Cluster 3 claims cluster 2's pod: refused, cluster 2 keeps it.
/// gate.upsert("c3", Some(3), &key, pod, fact(0x3_0009), None);
/// assert_eq!(ipcache.lookup(pod).unwrap().identity, 0x2_0005);
/// assert_eq!(gate.held_back()["c3"], 1);
/// ```
pub struct RemotePrefixes {
    ipcache: Arc<IpCache>,
    refusals: Arc<Refusals>,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Every admitted node's space.
    nodes: PrefixIndex<BTreeSet<NodeId>>,
    /// The remote cluster holding each admitted prefix, and its entries there.
    held: PrefixIndex<Holder>,
    /// Held-back entries by owner.
    parked: HashMap<Owner, Parked>,
    /// Held-back entries by prefix.
    parked_at: PrefixIndex<BTreeSet<Owner>>,
    /// Each cluster's name (shared by its entries), its ID when it announced one, and
    /// the scope of its owners.
    clusters: BTreeMap<Arc<str>, Known>,
}

/// A remote cluster the gate has heard of.
#[derive(Clone, Copy)]
struct Known {
    id: Option<u32>,
    /// Its entries' owners are `Owner { source: ClusterMesh, scope, resource: key }`:
    /// the etcd key is shared with the cluster's store, the scope tells clusters apart.
    scope: u32,
}

struct Holder {
    cluster: Arc<str>,
    /// The owners of its entries at the prefix.
    owners: Owners,
}

/// A holder's owners at one prefix: almost always one, kept inline (one per remote
/// entry: a `Vec` would cost an allocation each).
enum Owners {
    One(Owner),
    Many(Vec<Owner>),
}

impl Owners {
    fn as_slice(&self) -> &[Owner] {
        match self {
            Owners::One(o) => std::slice::from_ref(o),
            Owners::Many(v) => v,
        }
    }

    fn push(&mut self, owner: Owner) {
        match self {
            Owners::One(first) => *self = Owners::Many(vec![first.clone(), owner]),
            Owners::Many(v) => v.push(owner),
        }
    }

    /// Takes `owner` out: `None` when it is not there, else whether none is left.
    fn remove(&mut self, owner: &Owner) -> Option<bool> {
        match self {
            Owners::One(o) => (o == owner).then_some(true),
            Owners::Many(v) => {
                let at = v.iter().position(|o| o == owner)?;
                v.swap_remove(at);
                if let [last] = &v[..] {
                    *self = Owners::One(last.clone());
                }
                Some(false)
            }
        }
    }
}

#[derive(Clone)]
struct Parked {
    cluster: Arc<str>,
    prefix: Prefix,
    fact: Fact,
}

impl RemotePrefixes {
    /// A gate in front of `ipcache`, counting refusals in `refusals`.
    pub fn new(ipcache: Arc<IpCache>, refusals: Arc<Refusals>) -> Self {
        Self {
            ipcache,
            refusals,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().expect("remote prefixes lock poisoned")
    }

    /// Remote `cluster` (ID `cluster_id`, when announced) states `fact` about `prefix`
    /// at etcd `key`; `old_prefix` is the prefix the key stated before, if any.
    pub fn upsert(
        &self,
        cluster: &str,
        cluster_id: Option<u32>,
        key: &Arc<str>,
        prefix: Prefix,
        fact: Fact,
        old_prefix: Option<Prefix>,
    ) {
        let mut inner = self.lock();
        let (name, scope) = inner.cluster(cluster, cluster_id);
        let owner = Owner::scoped(Source::ClusterMesh, scope, key.clone());
        if let Some(old) = old_prefix.filter(|old| *old != prefix) {
            self.release(&mut inner, &owner, old);
        }
        let claim = Parked {
            cluster: name,
            prefix,
            fact,
        };
        if let Err(why) = self.admit(&mut inner, &owner, claim) {
            self.refusals.refuse(cluster, &why);
        }
    }

    /// Remote `cluster`'s etcd `key`, which stated something about `prefix`, is gone.
    pub fn delete(&self, cluster: &str, key: &Arc<str>, prefix: Prefix) {
        let mut inner = self.lock();
        let Some(known) = inner.clusters.get(cluster).copied() else {
            return;
        };
        let owner = Owner::scoped(Source::ClusterMesh, known.scope, key.clone());
        self.release(&mut inner, &owner, prefix);
    }

    /// The entries held back now, by cluster.
    pub fn held_back(&self) -> BTreeMap<String, usize> {
        let mut by = BTreeMap::new();
        for parked in self.lock().parked.values() {
            *by.entry(parked.cluster.to_string()).or_default() += 1;
        }
        by
    }

    /// Admits `claim` for `owner`, or holds it back with the reason.
    fn admit(&self, inner: &mut Inner, owner: &Owner, claim: Parked) -> Result<(), Refusal> {
        match inner
            .check(owner, &claim)
            .and_then(|()| inner.hold(owner, &claim))
        {
            Ok(()) => {
                inner.unpark(owner);
                self.ipcache.upsert(claim.prefix, owner.clone(), claim.fact);
                Ok(())
            }
            Err(why) => {
                // An entry admitted before and refused now (it changed) goes.
                self.withdraw(inner, owner, claim.prefix);
                inner.park(owner, claim);
                Err(why)
            }
        }
    }

    /// Takes `owner`'s entry at `prefix` out of the ipcache, if admitted, and lets the
    /// next claimant of the prefix in when it was the last of its holder.
    fn withdraw(&self, inner: &mut Inner, owner: &Owner, prefix: Prefix) -> Option<Fact> {
        let holder = inner.held.get_mut(&prefix)?;
        let last = holder.owners.remove(owner)?;
        let fact = self.ipcache.take(prefix, owner);
        if last {
            inner.held.remove(&prefix);
            self.promote(inner, prefix);
        }
        fact
    }

    /// Forgets `owner`'s entry at `prefix`, held back or admitted.
    fn release(&self, inner: &mut Inner, owner: &Owner, prefix: Prefix) {
        if !inner.unpark(owner) {
            self.withdraw(inner, owner, prefix);
        }
    }

    /// Checks again the entries held back at exactly `prefix`.
    fn promote(&self, inner: &mut Inner, prefix: Prefix) {
        let waiting: Vec<Owner> = inner
            .parked_at
            .get(&prefix)
            .map(|owners| owners.iter().cloned().collect())
            .unwrap_or_default();
        for owner in waiting {
            self.recheck(inner, &owner);
        }
    }

    /// Checks a held-back entry again; admits it when nothing blocks it now. A refusal
    /// again is not counted again.
    fn recheck(&self, inner: &mut Inner, owner: &Owner) {
        if let Some(claim) = inner.parked.get(owner).cloned() {
            let _still_refused = self.admit(inner, owner, claim);
        }
    }

    /// Checks again every held-back entry that `freed` space (or a freed tunnel
    /// endpoint) may have blocked.
    fn retry(&self, inner: &mut Inner, freed: &[Prefix]) {
        let blocked_by = |p: &Parked| {
            freed.iter().any(|f| {
                f.overlaps(&p.prefix)
                    || p.fact
                        .tunnel_peer
                        .is_some_and(|t| f.contains(&Prefix::host(t)))
            })
        };
        let waiting: Vec<Owner> = inner
            .parked
            .iter()
            .filter(|(_, p)| blocked_by(p))
            .map(|(o, _)| o.clone())
            .collect();
        for owner in waiting {
            self.recheck(inner, &owner);
        }
    }

    /// Moves the entries of clusters other than `node`'s that overlap `space` (the
    /// node's new space) out of the ipcache, and lets the next claimants in.
    fn evict(&self, inner: &mut Inner, node: &NodeId, space: Prefix) {
        let inside: Vec<Prefix> = inner
            .held
            .overlapping(space)
            .filter(|(_, h)| *h.cluster != *node.cluster)
            .map(|(p, _)| p)
            .collect();
        for prefix in inside {
            let Some(holder) = inner.held.remove(&prefix) else {
                continue;
            };
            for owner in holder.owners.as_slice() {
                let Some(fact) = self.ipcache.take(prefix, owner) else {
                    continue;
                };
                let why = Refusal::NodeSpace {
                    what: owner.resource.to_string(),
                    prefix,
                    held: space,
                    holder: NodeIdText(node.clone()),
                };
                self.refusals.refuse(&holder.cluster, &why);
                let claim = Parked {
                    cluster: holder.cluster.clone(),
                    prefix,
                    fact,
                };
                inner.park(owner, claim);
            }
            self.promote(inner, prefix);
        }
    }
}

impl Inner {
    /// The shared name of `cluster` and its owners' scope, noting its ID.
    fn cluster(&mut self, cluster: &str, id: Option<u32>) -> (Arc<str>, u32) {
        if let Some((name, known)) = self.clusters.get_key_value(cluster) {
            let (name, scope) = (name.clone(), known.scope);
            // Every remote entry comes this way: the map is written only when the ID
            // is news.
            if known.id != id {
                self.clusters.insert(name.clone(), Known { id, scope });
            }
            return (name, scope);
        }
        // Scope 0 is the other sources'; a cluster's scope is never reused, so an
        // owner of a cluster removed and added again cannot be mistaken for another's.
        let scope = u32::try_from(self.clusters.len() + 1).unwrap_or(u32::MAX);
        let name: Arc<str> = cluster.into();
        self.clusters.insert(name.clone(), Known { id, scope });
        (name, scope)
    }

    /// Whether `owner`'s cluster may state `claim` (its identity, its prefix and tunnel
    /// endpoint outside other clusters' node space); [`Inner::hold`] checks the holder.
    fn check(&self, owner: &Owner, claim: &Parked) -> Result<(), Refusal> {
        let cluster = &*claim.cluster;
        let key = || owner.resource.to_string();
        if let Some(id) = claim.fact.identity {
            let cluster_id = self.clusters.get(cluster).and_then(|k| k.id);
            crate::identity::check_remote(cluster, cluster_id, id)
                .map_err(|error| Refusal::Identity { key: key(), error })?;
        }
        if let Some((held, holder)) = foreign_holder(&self.nodes, cluster, claim.prefix) {
            return Err(Refusal::NodeSpace {
                what: key(),
                prefix: claim.prefix,
                held,
                holder: NodeIdText(holder),
            });
        }
        if let Some(endpoint) = claim.fact.tunnel_peer {
            if let Some((held, holder)) =
                foreign_holder(&self.nodes, cluster, Prefix::host(endpoint))
            {
                return Err(Refusal::Tunnel {
                    key: key(),
                    endpoint,
                    held,
                    holder: NodeIdText(holder),
                });
            }
        }
        Ok(())
    }

    /// Makes `owner` a holder of `claim`'s prefix, unless another remote cluster holds
    /// it: the check and the insertion are one search of the index (every remote entry
    /// comes this way).
    fn hold(&mut self, owner: &Owner, claim: &Parked) -> Result<(), Refusal> {
        let holder = self.held.get_or_insert_with(claim.prefix, || Holder {
            cluster: claim.cluster.clone(),
            owners: Owners::One(owner.clone()),
        });
        if holder.cluster != claim.cluster {
            return Err(Refusal::Held {
                key: owner.resource.to_string(),
                prefix: claim.prefix,
                holder: holder.cluster.to_string(),
            });
        }
        if !holder.owners.as_slice().contains(owner) {
            holder.owners.push(owner.clone());
        }
        Ok(())
    }

    fn park(&mut self, owner: &Owner, claim: Parked) {
        let prefix = claim.prefix;
        if let Some(before) = self.parked.insert(owner.clone(), claim) {
            self.unindex_parked(owner, before.prefix);
        }
        self.parked_at.get_or_default(prefix).insert(owner.clone());
    }

    /// Forgets a held-back entry; whether there was one.
    fn unpark(&mut self, owner: &Owner) -> bool {
        // Every admitted entry comes this way, and almost nothing is held back: an
        // empty map is not hashed into.
        if self.parked.is_empty() {
            return false;
        }
        match self.parked.remove(owner) {
            Some(before) => {
                self.unindex_parked(owner, before.prefix);
                true
            }
            None => false,
        }
    }

    fn unindex_parked(&mut self, owner: &Owner, prefix: Prefix) {
        self.parked_at.remove_member(&[prefix], owner);
    }
}

impl NodeListener for RemotePrefixes {
    fn on_upsert(&self, node: &Node, old: Option<&Node>) {
        let id = NodeId::of(node);
        let new: BTreeSet<Prefix> = node_space(node).into_iter().collect();
        let before: BTreeSet<Prefix> = old
            .map(node_space)
            .unwrap_or_default()
            .into_iter()
            .collect();
        let mut inner = self.lock();
        let freed: Vec<Prefix> = before.difference(&new).copied().collect();
        inner.nodes.remove_member(&freed, &id);
        for p in new.difference(&before) {
            inner.nodes.get_or_default(*p).insert(id.clone());
            self.evict(&mut inner, &id, *p);
        }
        if !freed.is_empty() {
            self.retry(&mut inner, &freed);
        }
    }

    fn on_delete(&self, node: &Node) {
        let id = NodeId::of(node);
        let freed = node_space(node);
        let mut inner = self.lock();
        inner.nodes.remove_member(&freed, &id);
        self.retry(&mut inner, &freed);
    }
}
