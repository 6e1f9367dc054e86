//! Decoding a remote cluster's values, and the per-resource store of what it holds.

use super::Resource;
use crate::model::{decode_json, ClusterService, DecodeError, Identity, IpIdentityPair, Node};
use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

/// A decoded value from a remote cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
// Values are stored behind an `Arc`, one allocation each: boxing the large variant
// would add a second.
#[allow(clippy::large_enum_variant)]
pub enum Value {
    /// A node record.
    Node(Node),
    /// An IP → identity entry.
    IpIdentity(IpIdentityPair),
    /// An identity.
    Identity(Identity),
    /// A global service.
    Service(ClusterService),
}

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
            Ok(Value::Node(node))
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
    /// The key has a new value; `old` is the one it replaced.
    Changed {
        /// The previous value, `None` for a new key.
        old: Option<Arc<Value>>,
    },
}

/// The values of one resource of one remote cluster, by key.
#[derive(Debug, Default)]
pub(crate) struct Store {
    entries: HashMap<String, Arc<Value>>,
    /// Keys seen since a new connection started listing; `Some` until its first
    /// complete list, when keys not seen again are drained.
    resync: Option<HashSet<String>>,
}

impl Store {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// A new connection starts listing this resource.
    pub fn begin_resync(&mut self) {
        self.resync = Some(HashSet::new());
    }

    /// Stores `value`; returns what changed (nothing to tell observers when the
    /// value is the same).
    pub fn upsert(&mut self, key: &str, value: Arc<Value>) -> Stored {
        if let Some(seen) = &mut self.resync {
            seen.insert(key.to_owned());
        }
        match self.entries.get(key) {
            Some(old) if *old == value => Stored::Unchanged,
            _ => Stored::Changed {
                old: self.entries.insert(key.to_owned(), value),
            },
        }
    }

    /// Marks `key` as present though its value was not accepted (malformed), so a
    /// resync does not count it as vanished twice.
    pub fn seen(&mut self, key: &str) {
        if let Some(seen) = &mut self.resync {
            seen.insert(key.to_owned());
        }
    }

    pub fn contains(&self, key: &str) -> bool {
        self.entries.contains_key(key)
    }

    pub fn remove(&mut self, key: &str) -> Option<Arc<Value>> {
        self.entries.remove(key)
    }

    /// The initial list of a new connection is in: removes what it did not contain.
    pub fn finish_resync(&mut self) -> Vec<(String, Arc<Value>)> {
        let Some(seen) = self.resync.take() else {
            return Vec::new();
        };
        let stale: Vec<String> = self
            .entries
            .keys()
            .filter(|k| !seen.contains(*k))
            .cloned()
            .collect();
        stale
            .into_iter()
            .filter_map(|k| self.entries.remove(&k).map(|v| (k, v)))
            .collect()
    }

    /// Removes everything (the cluster was removed).
    pub fn drain(&mut self) -> Vec<(String, Arc<Value>)> {
        self.resync = None;
        self.entries.drain().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn resync_drains_what_was_not_seen_again() {
        let mut s = Store::default();
        let v = |id| {
            Arc::new(Value::Identity(Identity {
                id,
                labels: Default::default(),
            }))
        };
        assert!(matches!(s.upsert("a", v(1)), Stored::Changed { old: None }));
        assert!(matches!(s.upsert("b", v(2)), Stored::Changed { old: None }));
        assert!(
            matches!(s.upsert("b", v(3)), Stored::Changed { old: Some(old) } if *old == *v(2)),
            "a change carries the value it replaced"
        );
        s.begin_resync();
        assert!(
            matches!(s.upsert("a", v(1)), Stored::Unchanged),
            "unchanged values are not news"
        );
        let drained = s.finish_resync();
        assert_eq!(drained.len(), 1);
        assert_eq!(drained[0].0, "b");
        assert_eq!(s.len(), 1);
    }
}
