//! Local identities for label sets seen only here (CIDR identities), reference counted.

use super::LOCAL_SCOPE;
use std::collections::HashMap;
use std::sync::Arc;
use weft_model::Labels;

/// Allocates local-scope identities (bit 24 set) for label sets, one per distinct set,
/// released when the last user goes.
#[derive(Debug, Default)]
pub struct LocalAllocator {
    by_labels: HashMap<Arc<Labels>, (u32, usize)>,
    by_id: HashMap<u32, Arc<Labels>>,
    next: u32,
}

impl LocalAllocator {
    /// The identity of `labels`, allocated on first use; each call takes a reference.
    pub fn acquire(&mut self, labels: &Arc<Labels>) -> u32 {
        if let Some((id, refs)) = self.by_labels.get_mut(labels) {
            *refs += 1;
            return *id;
        }
        // Numbers freed by `release` are used again once the 24 bits run out: an
        // agent up for years must not wrap into other identity ranges.
        let id = loop {
            self.next = self.next % (LOCAL_SCOPE - 1) + 1;
            let id = LOCAL_SCOPE | self.next;
            if !self.by_id.contains_key(&id) {
                break id;
            }
        };
        self.by_labels.insert(labels.clone(), (id, 1));
        self.by_id.insert(id, labels.clone());
        id
    }

    /// Drops one reference to `id`; frees it with the last.
    pub fn release(&mut self, id: u32) {
        let Some(labels) = self.by_id.get(&id).cloned() else {
            return;
        };
        if let Some((_, refs)) = self.by_labels.get_mut(&labels) {
            *refs -= 1;
            if *refs == 0 {
                self.by_labels.remove(&labels);
                self.by_id.remove(&id);
            }
        }
    }

    /// The labels of a local identity.
    pub fn labels(&self, id: u32) -> Option<&Arc<Labels>> {
        self.by_id.get(&id)
    }

    /// How many local identities are allocated.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether none is allocated.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_identity_per_label_set_freed_with_the_last_reference() {
        let mut a = LocalAllocator::default();
        let l1: Arc<Labels> = Arc::new("cidr:10.0.0.0/8=;".parse().unwrap());
        let l2: Arc<Labels> = Arc::new("cidr:10.1.0.0/16=;".parse().unwrap());
        let id1 = a.acquire(&l1);
        assert_eq!(a.acquire(&l1.clone()), id1);
        let id2 = a.acquire(&l2);
        assert_ne!(id1, id2);
        assert!(id1 & LOCAL_SCOPE != 0);
        a.release(id1);
        assert_eq!(a.labels(id1), Some(&l1));
        a.release(id1);
        assert_eq!(a.labels(id1), None);
        assert_eq!(a.len(), 1);
    }

    #[test]
    fn past_the_last_number_freed_ones_are_used_again_never_another_range() {
        let mut a = LocalAllocator {
            next: LOCAL_SCOPE - 2, // as after 16.7 million allocations
            ..LocalAllocator::default()
        };
        let first = a.acquire(&Arc::new("cidr:10.9.0.0/16=;".parse().unwrap()));
        assert_eq!(first, LOCAL_SCOPE | (LOCAL_SCOPE - 1), "the last number");
        let l2: Arc<Labels> = Arc::new("cidr:10.2.0.0/16=;".parse().unwrap());
        assert_eq!(
            a.acquire(&l2),
            LOCAL_SCOPE | 1,
            "the first again, still local-scope"
        );
        // Number 2 is in use: the next one skips it.
        a.by_id.insert(LOCAL_SCOPE | 2, l2.clone());
        let l3: Arc<Labels> = Arc::new("cidr:10.3.0.0/16=;".parse().unwrap());
        assert_eq!(a.acquire(&l3), LOCAL_SCOPE | 3);
    }
}
