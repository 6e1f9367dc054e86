//! The identity cache: reserved, local and remote identities by number.

use super::{Error, Reserved};
use std::collections::HashMap;
use std::sync::Arc;
use weft_model::Labels;

/// Every identity this node knows, by number.
#[derive(Debug)]
pub struct IdentityCache {
    /// Identities allocated by the local kvstore (this cluster's).
    local_cluster: HashMap<u32, Arc<Labels>>,
    /// Per remote cluster: its identities.
    remote: HashMap<String, HashMap<u32, Arc<Labels>>>,
    /// Counts the changes: what depends on the identities (endpoints' policies)
    /// watches it instead of polling.
    changes: tokio::sync::watch::Sender<u64>,
}

impl Default for IdentityCache {
    fn default() -> Self {
        Self {
            local_cluster: HashMap::new(),
            remote: HashMap::new(),
            changes: tokio::sync::watch::Sender::new(0),
        }
    }
}

/// How many identities of each kind are known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Totals {
    /// This cluster's identities.
    pub cluster: usize,
    /// All remote clusters' identities.
    pub remote: usize,
}

impl IdentityCache {
    /// The labels of a reserved, this cluster's or a remote identity. Local-scope
    /// (CIDR) identities belong to the ipcache that allocated them.
    pub fn labels(&self, id: u32) -> Option<Arc<Labels>> {
        if let Some(r) = Reserved::from_id(id) {
            return Some(r.labels());
        }
        self.local_cluster
            .get(&id)
            .or_else(|| self.remote.values().find_map(|ids| ids.get(&id)))
            .cloned()
    }

    /// Every identity known, reserved ones included, with its labels (shared, not
    /// copied).
    pub fn all(&self) -> std::collections::BTreeMap<u32, Arc<Labels>> {
        Reserved::ALL
            .iter()
            .map(|r| (r.id(), r.labels()))
            .chain(self.local_cluster.iter().map(|(id, l)| (*id, l.clone())))
            .chain(
                self.remote
                    .values()
                    .flat_map(|ids| ids.iter().map(|(id, l)| (*id, l.clone()))),
            )
            .collect()
    }

    /// A receiver that sees a new value after every change to the identities.
    ///
    /// # Example
    /// ```
    /// use weft_state::identity::IdentityCache;
    ///
    /// let mut cache = IdentityCache::default();
    /// let mut changes = cache.subscribe();
    /// cache.upsert_local_cluster(65_800, "k8s:app=web;".parse().unwrap());
    /// assert!(changes.has_changed().unwrap());
    /// ```
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// How many changes the identities have seen: equal values, equal identities.
    pub fn version(&self) -> u64 {
        *self.changes.borrow()
    }

    fn changed(&self) {
        self.changes.send_modify(|n| *n += 1);
    }

    /// Adds or replaces an identity of this cluster.
    pub fn upsert_local_cluster(&mut self, id: u32, labels: Labels) {
        let labels = Arc::new(labels);
        if self.local_cluster.insert(id, labels.clone()) != Some(labels) {
            self.changed();
        }
    }

    /// Removes an identity of this cluster.
    pub fn remove_local_cluster(&mut self, id: u32) {
        if self.local_cluster.remove(&id).is_some() {
            self.changed();
        }
    }

    /// Adds or replaces an identity of remote `cluster`, whose ID is `cluster_id` when
    /// it announced one.
    ///
    /// # Errors
    /// [`Error::NotClusterScoped`] for reserved or local-scope numbers,
    /// [`Error::WrongCluster`] when bits 16–23 are not the cluster's ID.
    pub fn upsert_remote(
        &mut self,
        cluster: &str,
        cluster_id: Option<u32>,
        id: u32,
        labels: Labels,
    ) -> Result<(), Error> {
        super::check_remote(cluster, cluster_id, id)?;
        let labels = Arc::new(labels);
        let old = self
            .remote
            .entry(cluster.to_owned())
            .or_default()
            .insert(id, labels.clone());
        if old != Some(labels) {
            self.changed();
        }
        Ok(())
    }

    /// Removes an identity of remote `cluster`.
    pub fn remove_remote(&mut self, cluster: &str, id: u32) {
        let Some(ids) = self.remote.get_mut(cluster) else {
            return;
        };
        let removed = ids.remove(&id).is_some();
        if ids.is_empty() {
            self.remote.remove(cluster);
        }
        if removed {
            self.changed();
        }
    }

    /// Removes every identity of remote `cluster`; returns how many.
    pub fn remove_cluster(&mut self, cluster: &str) -> usize {
        let removed = self.remote.remove(cluster).map_or(0, |ids| ids.len());
        if removed > 0 {
            self.changed();
        }
        removed
    }

    /// How many identities of each kind are known.
    pub fn totals(&self) -> Totals {
        Totals {
            cluster: self.local_cluster.len(),
            remote: self.remote.values().map(HashMap::len).sum(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::LOCAL_SCOPE;

    fn labels(s: &str) -> Labels {
        s.parse().unwrap()
    }

    #[test]
    fn reserved_identities_are_always_known() {
        let c = IdentityCache::default();
        assert_eq!(
            c.labels(7).unwrap().to_string(),
            "reserved:kube-apiserver=;"
        );
        assert_eq!(c.labels(1).unwrap().to_string(), "reserved:host=;");
        assert!(c.labels(8).is_none());
    }

    #[test]
    fn remote_identities_must_carry_their_cluster_id() {
        let mut c = IdentityCache::default();
        c.upsert_remote("c3", Some(3), 0x0003_0010, labels("k8s:a=b;"))
            .unwrap();
        assert_eq!(c.labels(0x0003_0010).unwrap().to_string(), "k8s:a=b;");
        let e = c
            .upsert_remote("c3", Some(3), 0x0004_0010, labels("k8s:a=b;"))
            .unwrap_err();
        assert_eq!(
            e,
            Error::WrongCluster {
                id: 0x0004_0010,
                cluster: "c3".into(),
                found: 4,
                expected: 3
            }
        );
        for id in [6, LOCAL_SCOPE | 0x0003_0001, 0x10] {
            assert!(matches!(
                c.upsert_remote("c3", Some(3), id, labels("k8s:a=b;")),
                Err(Error::NotClusterScoped { .. })
            ));
        }
    }

    #[test]
    fn removing_a_cluster_removes_its_identities_only() {
        let mut c = IdentityCache::default();
        c.upsert_remote("c3", Some(3), 0x0003_0001, labels("k8s:a=1;"))
            .unwrap();
        c.upsert_remote("c3", Some(3), 0x0003_0002, labels("k8s:a=2;"))
            .unwrap();
        c.upsert_remote("c4", Some(4), 0x0004_0001, labels("k8s:a=3;"))
            .unwrap();
        assert_eq!(c.remove_cluster("c3"), 2);
        assert!(c.labels(0x0003_0001).is_none());
        assert!(c.labels(0x0004_0001).is_some());
        assert_eq!(c.totals().remote, 1);
    }
}
