//! The ipcache: facts per prefix, resolved entries, ordered listener events.

use super::resolve::{resolve, sort_key, IdentitySpec};
use super::{Entry, Fact, Owner, Prefix, Source};
use crate::identity::LocalAllocator;
use std::sync::{Arc, Mutex, MutexGuard};
use weft_model::Labels;
use weft_sys::seeded::HashMap;

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

/// One prefix's facts, sorted by [`sort_key`]. Its entry is not kept: it is resolved
/// again when asked (a pure function of the facts and the prefix's local identity).
/// At half a million prefixes the map has a million slots, half of them empty, so
/// every byte of a slot counts twice: a boxed slice (no capacity) and no entry make a
/// slot 40 bytes rather than 88. Not inline either: a slot holding the fact costs
/// more than the allocation.
type Facts = Box<[(Owner, Fact)]>;

#[derive(Default)]
struct Inner {
    prefixes: HashMap<Prefix, Facts>,
    /// The local identity each prefix with a label-derived identity holds a reference
    /// to. Tracked apart from the entry: an explicit identity from a remote cluster may
    /// have the same number. Few prefixes have one, hence a map of its own.
    local_ids: HashMap<Prefix, u32>,
    /// How many prefixes have a resolved entry, by the source of its strongest fact
    /// (indexed as [`Source::ALL`]): kept as entries change, since entries are not.
    resolved: [usize; Source::ALL.len()],
    local: LocalAllocator,
    listeners: Vec<Arc<dyn Listener>>,
}

/// The IP cache: per prefix, facts from many owners, resolved by source precedence so
/// that the order in which facts arrive never changes the result.
///
/// # Example
/// ```
/// use weft_state::ipcache::{Fact, IpCache, Owner, Source};
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
        let mut shadowed_by = None;
        self.lock().change(prefix, |facts| {
            shadowed_by = facts
                .first()
                .map(|(o, _)| o.source)
                .filter(|s| *s > owner.source);
            match facts.binary_search_by(|(o, _)| sort_key(o).cmp(&sort_key(&owner))) {
                Ok(i) if facts[i].1 == fact => None,
                Ok(i) => {
                    facts[i].1 = fact;
                    Some(())
                }
                Err(i) => {
                    // Exactly one more: the slice is boxed again without a reallocation.
                    facts.reserve_exact(1);
                    facts.insert(i, (owner, fact));
                    Some(())
                }
            }
        });
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
        // `change` makes a slot for an unknown prefix: a withdrawal must not grow the map.
        if !inner.prefixes.contains_key(&prefix) {
            return None;
        }
        inner.change(prefix, |facts| {
            let i = facts
                .binary_search_by(|(o, _)| sort_key(o).cmp(&sort_key(owner)))
                .ok()?;
            Some(facts.remove(i).1)
        })
    }

    /// The resolved entry of exactly `prefix`.
    pub fn lookup(&self, prefix: Prefix) -> Option<Entry> {
        self.lock().entry(prefix)
    }

    /// Every resolved entry, sorted by prefix.
    pub fn entries(&self) -> Vec<(Prefix, Entry)> {
        let inner = self.lock();
        let mut all: Vec<(Prefix, Entry)> = inner
            .prefixes
            .iter()
            .filter_map(|(p, facts)| Some((*p, entry_of(*p, facts, &inner.local_ids)?)))
            .collect();
        all.sort_by_key(|(p, _)| *p);
        all
    }

    /// Makes room for `prefixes` prefixes in all: remote clusters' lists announced
    /// that many entries. Ten clusters listing at once would otherwise grow the map
    /// step by step, hashing every prefix again at each step, with the old and the new
    /// table both held at the largest.
    pub fn reserve(&self, prefixes: usize) {
        let mut inner = self.lock();
        let more = prefixes.saturating_sub(inner.prefixes.len());
        inner.prefixes.reserve(more);
    }

    /// How many prefixes the cache holds room for without growing.
    pub fn capacity(&self) -> usize {
        self.lock().prefixes.capacity()
    }

    /// The number of resolved entries.
    pub fn len(&self) -> usize {
        self.lock().resolved.iter().sum()
    }

    /// The number of resolved entries by the source of their strongest fact.
    pub fn len_by_source(&self) -> std::collections::BTreeMap<Source, usize> {
        let resolved = self.lock().resolved;
        Source::ALL
            .into_iter()
            .zip(resolved)
            .filter(|(_, n)| *n > 0)
            .collect()
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
    for (prefix, facts) in &inner.prefixes {
        if let Some(entry) = entry_of(*prefix, facts, &inner.local_ids) {
            listener.on_change(&Change {
                prefix: *prefix,
                old: None,
                new: Some(&entry),
            });
        }
    }
}

/// The entry of `prefix`, resolved from its `facts` and, for a label-derived identity,
/// the local identity it holds (in `local_ids`).
fn entry_of(
    prefix: Prefix,
    facts: &[(Owner, Fact)],
    local_ids: &HashMap<Prefix, u32>,
) -> Option<Entry> {
    let (spec, mut entry) = resolve(facts)?;
    if let IdentitySpec::Local(_) = spec {
        entry.identity = *local_ids.get(&prefix)?;
    }
    Some(entry)
}

impl Inner {
    /// The entry of `prefix`, resolved from its facts now.
    fn entry(&self, prefix: Prefix) -> Option<Entry> {
        entry_of(prefix, self.prefixes.get(&prefix)?, &self.local_ids)
    }

    /// Changes the facts of `prefix` with `f` (given none when there are none; `None`
    /// from it means nothing changed), then resolves the prefix again and tells the
    /// listeners when its entry changed. One lookup of the prefix: this is every
    /// remote entry's way in.
    fn change<R>(
        &mut self,
        prefix: Prefix,
        f: impl FnOnce(&mut Vec<(Owner, Fact)>) -> Option<R>,
    ) -> Option<R> {
        let Inner {
            prefixes,
            local_ids,
            resolved,
            local,
            listeners,
        } = self;
        let facts = prefixes.entry(prefix).or_default();
        let old = entry_of(prefix, facts, local_ids);
        let mut changed = Vec::from(std::mem::take(facts));
        let result = f(&mut changed);
        *facts = changed.into_boxed_slice();
        let empty = facts.is_empty();
        if result.is_some() {
            let next = resolve(facts);
            // Acquire before releasing, so an unchanged label set keeps its number.
            let old_local = if local_ids.is_empty() {
                None
            } else {
                local_ids.remove(&prefix)
            };
            let new = next.map(|(spec, mut entry)| {
                if let IdentitySpec::Local(labels) = &spec {
                    entry.identity = local.acquire(labels);
                    local_ids.insert(prefix, entry.identity);
                }
                entry
            });
            if let Some(id) = old_local {
                local.release(id);
            }
            if let Some(e) = &new {
                resolved[e.source.index()] += 1;
            }
            if let Some(e) = &old {
                resolved[e.source.index()] -= 1;
            }
            if old != new {
                let change = Change {
                    prefix,
                    old: old.as_ref(),
                    new: new.as_ref(),
                };
                for l in listeners.iter() {
                    l.on_change(&change);
                }
            }
        }
        if empty {
            prefixes.remove(&prefix);
        }
        result
    }
}
