//! Values by prefix, with the query the claim checks need: every stored prefix that
//! shares an address with a given one.

use crate::ipcache::Prefix;
use std::collections::BTreeMap;

/// Values by prefix, ordered, answering [`PrefixIndex::overlapping`] without a scan:
/// the prefixes a query contains are one range of the order, the ones that contain it
/// are at most one per shorter length.
///
/// # Example
/// ```
/// use weft_state::claims::PrefixIndex;
/// let mut index = PrefixIndex::default();
/// index.insert("10.2.0.0/16".parse().unwrap(), "cluster2's pods");
/// index.insert("10.3.0.7".parse().unwrap(), "a cluster3 pod");
/// let hits: Vec<_> = index.overlapping("10.2.1.0/24".parse().unwrap()).collect();
/// assert_eq!(hits.len(), 1, "inside cluster2's pod CIDR");
/// assert_eq!(index.overlapping("10.0.0.0/8".parse().unwrap()).count(), 2);
/// ```
#[derive(Debug, Clone)]
pub struct PrefixIndex<V> {
    map: BTreeMap<Prefix, V>,
    /// Per family (IPv4, IPv6), how many stored prefixes have each length: a query
    /// looks up only the shorter lengths that are there (an index of node addresses
    /// and pod CIDRs has two), not every one.
    lengths: [[u32; 129]; 2],
}

impl<V> Default for PrefixIndex<V> {
    fn default() -> Self {
        Self {
            map: BTreeMap::new(),
            lengths: [[0; 129]; 2],
        }
    }
}

fn family(prefix: &Prefix) -> usize {
    usize::from(prefix.addr().is_ipv6())
}

impl<V> PrefixIndex<V> {
    /// The value at exactly `prefix`.
    pub fn get(&self, prefix: &Prefix) -> Option<&V> {
        self.map.get(prefix)
    }

    /// The value at exactly `prefix`, to change.
    pub fn get_mut(&mut self, prefix: &Prefix) -> Option<&mut V> {
        self.map.get_mut(prefix)
    }

    /// The value at `prefix`, made with `V::default()` when there is none.
    pub fn get_or_default(&mut self, prefix: Prefix) -> &mut V
    where
        V: Default,
    {
        self.get_or_insert_with(prefix, V::default)
    }

    /// The value at `prefix`, made with `make` when there is none: one search of the
    /// map either way.
    pub fn get_or_insert_with(&mut self, prefix: Prefix, make: impl FnOnce() -> V) -> &mut V {
        match self.map.entry(prefix) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                self.lengths[family(&prefix)][usize::from(prefix.prefix_len())] += 1;
                e.insert(make())
            }
        }
    }

    /// Stores `value` at `prefix`; returns what was there.
    pub fn insert(&mut self, prefix: Prefix, value: V) -> Option<V> {
        let old = self.map.insert(prefix, value);
        if old.is_none() {
            self.lengths[family(&prefix)][usize::from(prefix.prefix_len())] += 1;
        }
        old
    }

    /// Removes what is at exactly `prefix`.
    pub fn remove(&mut self, prefix: &Prefix) -> Option<V> {
        let old = self.map.remove(prefix);
        if old.is_some() {
            self.lengths[family(prefix)][usize::from(prefix.prefix_len())] -= 1;
        }
        old
    }

    /// Every stored prefix that shares an address with `prefix` (it contains
    /// `prefix`, or `prefix` contains it), with its value.
    pub fn overlapping(&self, prefix: Prefix) -> impl Iterator<Item = (Prefix, &V)> + '_ {
        // The shorter prefixes with the same network address are in the range; the
        // others that contain `prefix` are looked up one stored length at a time.
        let lengths = &self.lengths[family(&prefix)];
        let wider = (0..prefix.prefix_len())
            .filter(move |len| lengths[usize::from(*len)] > 0)
            .filter_map(move |len| Prefix::new(prefix.addr(), len))
            .filter(move |s| s.addr() != prefix.addr())
            .filter_map(|s| self.map.get_key_value(&s));
        let within = self.map.range(prefix.address_range());
        wider.chain(within).map(|(p, v)| (*p, v))
    }

    /// How many prefixes are stored.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

impl<T: Ord> PrefixIndex<std::collections::BTreeSet<T>> {
    /// Adds `member` to the set at each of `prefixes`.
    pub fn insert_member(&mut self, prefixes: &[Prefix], member: &T)
    where
        T: Clone,
    {
        for p in prefixes {
            self.get_or_default(*p).insert(member.clone());
        }
    }

    /// Takes `member` out of the sets at `prefixes`; a set left empty goes.
    pub fn remove_member(&mut self, prefixes: &[Prefix], member: &T) {
        for p in prefixes {
            if let Some(set) = self.map.get_mut(p) {
                set.remove(member);
                if set.is_empty() {
                    self.remove(p);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::{IpAddr, Ipv4Addr};

    /// Prefixes in a small space, so that overlaps are common.
    fn prefix() -> impl Strategy<Value = Prefix> {
        (0u32..64, 26u8..=32).prop_map(|(host, len)| {
            let addr = IpAddr::V4(Ipv4Addr::from(0x0A00_0000 | host));
            Prefix::new(addr, len).expect("a valid length")
        })
    }

    fn wide_prefix() -> impl Strategy<Value = Prefix> {
        prop_oneof![
            prefix(),
            (0u8..=8).prop_map(|len| Prefix::new("10.0.0.0".parse().unwrap(), len).unwrap()),
            Just("f00d::1".parse().unwrap()),
        ]
    }

    proptest! {
        #[test]
        fn overlapping_is_the_brute_force_answer(
            stored in proptest::collection::vec(wide_prefix(), 0..40),
            query in wide_prefix(),
        ) {
            let mut index = PrefixIndex::default();
            for p in &stored {
                index.insert(*p, ());
            }
            // Removals keep the lengths' counts true: take the first few out again.
            let (gone, stored) = stored.split_at(stored.len() / 4);
            for p in gone {
                if !stored.contains(p) {
                    index.remove(p);
                }
            }
            let mut found: Vec<Prefix> = index.overlapping(query).map(|(p, _)| p).collect();
            found.sort();
            let mut want: Vec<Prefix> = stored.iter().copied().filter(|p| p.overlaps(&query)).collect();
            want.sort();
            want.dedup();
            prop_assert_eq!(found, want);
        }
    }
}
