//! The ipcache: facts per prefix, resolved entries, ordered listener events.

use super::resolve::{resolve, sort_key, IdentitySpec};
use super::{Entry, Fact, Owner, Prefix, Source};
use crate::identity::LocalAllocator;
use crate::model::Labels;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// A change of one prefix's resolved entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change<'a> {
    /// The prefix.
    pub prefix: Prefix,
    /// The entry before, `None` when the prefix is new.
    pub old: Option<&'a Entry>,
    /// The entry after, `None` when the prefix went away.
    pub new: Option<&'a Entry>,
}

/// A consumer of ipcache changes (the datapath map writer, WireGuard).
///
/// Called under the ipcache's lock, in the order of the changes: it must be quick
/// and must not call back into the ipcache.
pub trait Listener: Send + Sync {
    /// One change; `old` and `new` are never equal.
    fn on_change(&self, change: &Change<'_>);
}

/// What an upsert did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Upserted {
    /// A stronger source has facts about this prefix: this fact is kept (it is the
    /// fallback, and its tunnel peer or key are used when no stronger owner has one)
    /// but does not decide the identity.
    pub shadowed_by: Option<Source>,
}

#[derive(Debug, Default)]
struct PrefixState {
    /// Sorted by [`sort_key`]. Not inline: a map of half a million prefixes has a
    /// million slots, and a slot holding the fact costs more than the allocation.
    facts: Vec<(Owner, Fact)>,
    resolved: Option<Entry>,
    /// The local identity this prefix holds a reference to. Tracked apart from the
    /// entry: an explicit identity from a remote cluster may have the same number.
    local_id: Option<u32>,
}

#[derive(Default)]
struct Inner {
    prefixes: HashMap<Prefix, PrefixState>,
    /// How many prefixes have a resolved entry.
    resolved: usize,
    local: LocalAllocator,
    listeners: Vec<Arc<dyn Listener>>,
}

/// The IP cache: per prefix, facts from many owners, resolved by source precedence so
/// that the order in which facts arrive never changes the result.
///
/// # Example
/// ```
/// use weft::ipcache::{Fact, IpCache, Owner, Source};
/// let cache = IpCache::default();
/// let ip = "10.0.0.1".parse().unwrap();
/// cache.upsert(ip, Owner::new(Source::ClusterMesh, "c2/pod"), Fact { identity: Some(0x20001), ..Fact::default() });
/// assert_eq!(cache.lookup(ip).unwrap().identity, 0x20001);
/// ```
#[derive(Default)]
pub struct IpCache {
    inner: Mutex<Inner>,
}

impl IpCache {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().expect("ipcache lock poisoned")
    }

    /// States `fact` about `prefix` for `owner`, replacing what that owner said before.
    pub fn upsert(&self, prefix: Prefix, owner: Owner, fact: Fact) -> Upserted {
        let mut inner = self.lock();
        let state = inner.prefixes.entry(prefix).or_default();
        let shadowed_by = state
            .facts
            .first()
            .map(|(o, _)| o.source)
            .filter(|s| *s > owner.source);
        match state
            .facts
            .binary_search_by(|(o, _)| sort_key(o).cmp(&sort_key(&owner)))
        {
            Ok(i) if state.facts[i].1 == fact => return Upserted { shadowed_by },
            Ok(i) => state.facts[i].1 = fact,
            Err(i) => {
                // A second owner and more: grow one slot at a time rather than by
                // doubling.
                state.facts.reserve_exact(1);
                state.facts.insert(i, (owner, fact));
            }
        }
        inner.re_resolve(prefix);
        Upserted { shadowed_by }
    }

    /// Withdraws what `owner` said about `prefix`; the next strongest facts take over.
    /// Returns whether there was anything.
    pub fn remove(&self, prefix: Prefix, owner: &Owner) -> bool {
        self.take(prefix, owner).is_some()
    }

    /// Withdraws what `owner` said about `prefix`, like [`IpCache::remove`], and
    /// returns it.
    pub fn take(&self, prefix: Prefix, owner: &Owner) -> Option<Fact> {
        let mut inner = self.lock();
        let state = inner.prefixes.get_mut(&prefix)?;
        let i = state
            .facts
            .binary_search_by(|(o, _)| sort_key(o).cmp(&sort_key(owner)))
            .ok()?;
        let (_, fact) = state.facts.remove(i);
        inner.re_resolve(prefix);
        Some(fact)
    }

    /// The resolved entry of exactly `prefix`.
    pub fn lookup(&self, prefix: Prefix) -> Option<Entry> {
        self.lock().prefixes.get(&prefix)?.resolved.clone()
    }

    /// Every resolved entry, sorted by prefix.
    pub fn entries(&self) -> Vec<(Prefix, Entry)> {
        let inner = self.lock();
        let mut all: Vec<(Prefix, Entry)> = inner
            .prefixes
            .iter()
            .filter_map(|(p, s)| s.resolved.clone().map(|e| (*p, e)))
            .collect();
        all.sort_by_key(|(p, _)| *p);
        all
    }

    /// The number of resolved entries.
    pub fn len(&self) -> usize {
        self.lock()
            .prefixes
            .values()
            .filter(|s| s.resolved.is_some())
            .count()
    }

    /// The number of resolved entries by the source of their strongest fact.
    pub fn len_by_source(&self) -> std::collections::BTreeMap<Source, usize> {
        let mut by = std::collections::BTreeMap::new();
        for e in self
            .lock()
            .prefixes
            .values()
            .filter_map(|s| s.resolved.as_ref())
        {
            *by.entry(e.source).or_default() += 1;
        }
        by
    }

    /// Whether there is no resolved entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The labels of a local (CIDR) identity allocated by this cache.
    pub fn local_identity_labels(&self, id: u32) -> Option<Arc<Labels>> {
        self.lock().local.labels(id).cloned()
    }

    /// How many local (CIDR) identities are allocated.
    pub fn local_identities(&self) -> usize {
        self.lock().local.len()
    }

    /// Adds a listener; it first receives every current entry as an insert.
    pub fn add_listener(&self, listener: Arc<dyn Listener>) {
        let mut inner = self.lock();
        replay(&inner, &*listener);
        inner.listeners.push(listener);
    }

    /// Sends every current entry to `listener` as an insert (after a restart, when its
    /// target was rebuilt from scratch).
    pub fn replay(&self, listener: &dyn Listener) {
        replay(&self.lock(), listener);
    }
}

fn replay(inner: &Inner, listener: &dyn Listener) {
    for (prefix, state) in &inner.prefixes {
        if let Some(entry) = &state.resolved {
            listener.on_change(&Change {
                prefix: *prefix,
                old: None,
                new: Some(entry),
            });
        }
    }
}

impl Inner {
    /// Resolves `prefix` again and tells the listeners when the entry changed.
    fn re_resolve(&mut self, prefix: Prefix) {
        let state = self.prefixes.get_mut(&prefix).expect("prefix present");
        let mut next = resolve(&state.facts);
        // Acquire before releasing, so an unchanged label set keeps its number.
        let old_local = state.local_id.take();
        if let Some((IdentitySpec::Local(labels), entry)) = &mut next {
            entry.identity = self.local.acquire(labels);
            state.local_id = Some(entry.identity);
        }
        if let Some(id) = old_local {
            self.local.release(id);
        }
        let new = next.map(|(_, e)| e);
        let old = std::mem::replace(&mut state.resolved, new);
        let empty = state.facts.is_empty();
        let new = state.resolved.as_ref();
        self.resolved = self.resolved + usize::from(new.is_some()) - usize::from(old.is_some());
        if old.as_ref() != new {
            let change = Change {
                prefix,
                old: old.as_ref(),
                new,
            };
            for l in &self.listeners {
                l.on_change(&change);
            }
        }
        if empty {
            self.prefixes.remove(&prefix);
        }
    }
}
