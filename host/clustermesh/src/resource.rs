//! Decoding a remote cluster's values, and the per-resource store of what it holds.

use super::Resource;
use std::net::IpAddr;
use std::sync::Arc;
use weft_model::remote::{Kept, Value};
use weft_model::{decode_json, ClusterService, DecodeError, Identity, IpIdentityPair, Node};
use weft_sys::seeded::HashMap;

/// Who a value must belong to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Owner<'a> {
    pub name: &'a str,
    pub id: Option<u32>,
}

/// Decodes the value at `key` (under `prefix`) as `resource` of cluster `owner`.
pub(crate) fn decode(
    resource: Resource,
    owner: Owner<'_>,
    prefix: &str,
    key: &str,
    value: &[u8],
) -> Result<Value, DecodeError> {
    let suffix = key.strip_prefix(prefix).unwrap_or(key);
    match resource {
        Resource::Nodes => {
            let node: Node = decode_json(key, value)?;
            check_owner(key, "node", &node.cluster, node.cluster_id, owner)?;
            Ok(Value::Node(Box::new(node)))
        }
        Resource::IpCache => {
            let pair: IpIdentityPair = decode_json(key, value)?;
            let len = pair
                .prefix_len()
                .ok_or_else(|| DecodeError::new(key, "mask does not fit the address"))?;
            let key_ip = suffix.split('/').next().unwrap_or_default();
            if key_ip.parse::<IpAddr>().ok() != Some(pair.ip) {
                return Err(DecodeError::new(
                    key,
                    format_args!("value's IP {}/{len} does not match the key", pair.ip),
                ));
            }
            Ok(Value::IpIdentity(pair))
        }
        Resource::Identities => Identity::decode(key, suffix, value).map(Value::Identity),
        Resource::Services => {
            let svc: ClusterService = decode_json(key, value)?;
            check_owner(key, "service", &svc.cluster, svc.cluster_id, owner)?;
            Ok(Value::Service(svc))
        }
    }
}

fn check_owner(
    key: &str,
    what: &str,
    cluster: &str,
    id: u32,
    owner: Owner<'_>,
) -> Result<(), DecodeError> {
    if cluster != owner.name {
        return Err(DecodeError::new(
            key,
            format_args!(
                "{what} belongs to cluster {cluster:?}, not {:?}",
                owner.name
            ),
        ));
    }
    match owner.id {
        Some(expected) if id != 0 && id != expected => Err(DecodeError::new(
            key,
            format_args!("{what} has cluster ID {id}, the cluster's is {expected}"),
        )),
        _ => Ok(()),
    }
}

/// What [`Store::upsert`] did.
#[derive(Debug)]
pub(crate) enum Stored {
    /// The key already had this value.
    Unchanged,
    /// The key has a new value; `old` is what was kept of the one it replaced.
    Changed {
        /// What was kept of the previous value, `None` for a new key.
        old: Option<Kept>,
    },
}

/// One key's value, the mod revision it was read at, and the list generation that
/// last delivered it.
#[derive(Debug)]
struct Held {
    kept: Kept,
    revision: i64,
    generation: u32,
}

/// The values of one resource of one remote cluster, by key: the one record of the
/// keys (the stream is [`weft_kvstore::list_watch_raw`], which keeps none). Each list
/// is a new generation; what a complete list did not deliver again is drained.
#[derive(Debug, Default)]
pub(crate) struct Store {
    /// By key: shared with the state stage, whose facts are owned by the key.
    entries: HashMap<Arc<str>, Held>,
    /// The generation of the list in progress, or of the last one.
    generation: u32,
    /// A list is in progress: [`Store::finish_listing`] drains what it did not deliver.
    listing: bool,
}

impl Store {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// A list starts (a new connection, or a re-list after compaction).
    pub fn begin_listing(&mut self) {
        self.generation = self.generation.wrapping_add(1);
        self.listing = true;
    }

    /// Whether `key` holds the value read at `revision` already (a re-list delivering
    /// it again): it is kept, and need not be decoded again.
    pub fn unchanged_at(&mut self, key: &str, revision: i64) -> bool {
        match self.entries.get_mut(key) {
            Some(held) if held.revision == revision => {
                held.generation = self.generation;
                true
            }
            _ => false,
        }
    }

    /// Stores `value`, read at `revision`; returns the key as stored and what changed
    /// (nothing to tell observers when the value is the same).
    pub fn upsert(&mut self, key: &str, revision: i64, kept: Kept) -> (Arc<str>, Stored) {
        let generation = self.generation;
        match self.entries.get_key_value(key) {
            Some((shared, _)) => {
                let shared = shared.clone();
                let held = self.entries.get_mut(key).expect("just found");
                (held.revision, held.generation) = (revision, generation);
                let stored = if held.kept == kept {
                    Stored::Unchanged
                } else {
                    Stored::Changed {
                        old: Some(std::mem::replace(&mut held.kept, kept)),
                    }
                };
                (shared, stored)
            }
            None => {
                let shared: Arc<str> = key.into();
                self.entries.insert(
                    shared.clone(),
                    Held {
                        kept,
                        revision,
                        generation,
                    },
                );
                (shared, Stored::Changed { old: None })
            }
        }
    }

    /// Makes room for `keys` keys in all (a list announced them), so that the map is
    /// not grown, and every key hashed again, step by step as they come.
    pub fn reserve(&mut self, keys: usize) {
        self.entries
            .reserve(keys.saturating_sub(self.entries.len()));
    }

    pub fn contains(&self, key: &str) -> bool {
        self.entries.contains_key(key)
    }

    pub fn remove(&mut self, key: &str) -> Option<(Arc<str>, Kept)> {
        self.entries
            .remove_entry(key)
            .map(|(key, held)| (key, held.kept))
    }

    /// A complete list is in: removes what it did not deliver.
    pub fn finish_listing(&mut self) -> Vec<(Arc<str>, Kept)> {
        if !std::mem::take(&mut self.listing) {
            return Vec::new();
        }
        let generation = self.generation;
        let mut stale = Vec::new();
        self.entries.retain(|key, held| {
            let keep = held.generation == generation;
            if !keep {
                stale.push((key.clone(), held.kept.clone()));
            }
            keep
        });
        stale
    }

    /// Removes everything (the cluster was removed).
    pub fn drain(&mut self) -> Vec<(Arc<str>, Kept)> {
        self.listing = false;
        self.entries
            .drain()
            .map(|(k, held)| (k, held.kept))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(v: &Value) -> Kept {
        Kept::of(v, weft_sys::seeded::digest)
    }

    const OWNER: Owner<'static> = Owner {
        name: "c3",
        id: Some(3),
    };

    #[test]
    fn nodes_of_another_cluster_are_malformed() {
        let ok = br#"{"Name":"n1","Cluster":"c3","ClusterID":3}"#;
        assert!(decode(Resource::Nodes, OWNER, "p/", "p/n1", ok).is_ok());
        let other = br#"{"Name":"n1","Cluster":"c4","ClusterID":3}"#;
        let e = decode(Resource::Nodes, OWNER, "p/", "p/n1", other).unwrap_err();
        assert!(e.to_string().contains("c4"), "{e}");
        let wrong_id = br#"{"Name":"n1","Cluster":"c3","ClusterID":4}"#;
        assert!(decode(Resource::Nodes, OWNER, "p/", "p/n1", wrong_id).is_err());
    }

    #[test]
    fn ipcache_key_must_match_the_value() {
        let v = br#"{"IP":"10.0.0.1","ID":5}"#;
        assert!(decode(Resource::IpCache, OWNER, "p/", "p/10.0.0.1", v).is_ok());
        assert!(decode(Resource::IpCache, OWNER, "p/", "p/10.0.0.2", v).is_err());
    }

    #[test]
    fn a_complete_list_drains_what_it_did_not_deliver_again() {
        let mut s = Store::default();
        let v = |id| {
            kept(&Value::Identity(Identity {
                id,
                labels: Default::default(),
            }))
        };
        s.begin_listing();
        assert!(matches!(
            s.upsert("a", 1, v(1)).1,
            Stored::Changed { old: None }
        ));
        assert!(matches!(
            s.upsert("b", 2, v(2)).1,
            Stored::Changed { old: None }
        ));
        assert!(
            s.finish_listing().is_empty(),
            "the first list drains nothing"
        );
        assert!(
            matches!(s.upsert("b", 3, v(3)).1, Stored::Changed { old: Some(old) } if old == v(2)),
            "a change carries the value it replaced"
        );
        s.begin_listing();
        assert!(
            s.unchanged_at("a", 1),
            "the same revision is kept undecoded"
        );
        assert!(!s.unchanged_at("b", 2), "a newer revision is held");
        assert!(
            matches!(s.upsert("c", 5, v(1)).1, Stored::Changed { old: None }),
            "a new key"
        );
        let drained = s.finish_listing();
        assert_eq!(drained.len(), 1);
        assert_eq!(&*drained[0].0, "b");
        assert_eq!(s.len(), 2);
        assert!(
            s.finish_listing().is_empty(),
            "no list in progress: no drain"
        );
    }

    #[test]
    fn an_ipcache_entry_is_kept_as_its_prefix_and_a_digest() {
        let pair = |json: &str| Value::IpIdentity(serde_json::from_str(json).unwrap());
        let a = kept(&pair(r#"{"IP":"10.0.0.0","Mask":"//8AAA==","ID":5}"#));
        assert_eq!(a.ip_prefix(), Some("10.0.0.0/16".parse().unwrap()));
        assert!(a.value().is_none(), "the entry itself is the state stage's");
        let rewritten = kept(&pair(r#"{"ID":5,"Mask":"//8AAA==","IP":"10.0.0.0"}"#));
        assert_eq!(a, rewritten, "the same entry, written again");
        let changed = kept(&pair(r#"{"IP":"10.0.0.0","Mask":"//8AAA==","ID":6}"#));
        assert_ne!(a, changed, "another identity");
    }

    #[test]
    fn a_list_started_over_drains_only_at_its_own_end() {
        let mut s = Store::default();
        s.begin_listing();
        let v = kept(&Value::Identity(Identity {
            id: 1,
            labels: Default::default(),
        }));
        s.upsert("a", 1, v.clone());
        s.upsert("b", 1, v.clone());
        s.finish_listing();
        // A list broken half-way, then started again: "a" is delivered by the second.
        s.begin_listing();
        assert!(s.unchanged_at("b", 1));
        s.begin_listing();
        assert!(s.unchanged_at("a", 1));
        let drained: Vec<String> = s
            .finish_listing()
            .into_iter()
            .map(|(k, _)| k.to_string())
            .collect();
        assert_eq!(drained, ["b"]);
    }
}
