//! A change to a remote cluster's state, as the mesh hands it to the next stage: the
//! decoded [`Value`], what a store [`Kept`] of it, the [`ClusterEvent`] and the
//! [`Observer`] that receives it.
//!
//! These are the words the cluster mesh (which reads etcd) and the state stage (which
//! knows no etcd) share; both depend on this crate and neither on the other.

use crate::{ClusterService, Identity, IpIdentityPair, Node, Prefix, Resource};
use std::sync::Arc;

/// A decoded value from a remote cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// A node record, boxed: it is more than twice the size of an ipcache entry, and
    /// every value of a cluster (ipcache entries by the hundred thousand) would be as
    /// large as the largest variant.
    Node(Box<Node>),
    /// An IP → identity entry.
    IpIdentity(IpIdentityPair),
    /// An identity.
    Identity(Identity),
    /// A global service.
    Service(ClusterService),
}

/// What a remote cluster's store keeps of a value: all of it for nodes, identities and
/// services (a few thousand), and for an ipcache entry (hundreds of thousands) only
/// what withdrawing it needs — its prefix — and a digest that tells a changed value
/// from a rewritten one. The state stage keeps the entry itself, as a fact.
///
/// # Example
/// ```
/// use weft_model::remote::{Kept, Value};
/// let pair: weft_model::IpIdentityPair =
///     serde_json::from_str(r#"{"IP":"10.2.0.7","ID":131077}"#).unwrap();
/// let kept = Kept::of(&Value::IpIdentity(pair), |_| 7);
/// assert_eq!(kept.ip_prefix(), Some("10.2.0.7/32".parse().unwrap()));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kept {
    /// The whole value.
    Value(Arc<Value>),
    /// An ipcache entry: its prefix, and a digest of the decoded value.
    IpCache {
        /// The entry's prefix.
        prefix: Prefix,
        /// A hash of the decoded entry.
        digest: u64,
    },
}

impl Kept {
    /// What a store keeps of `value`; `digest` hashes an ipcache entry (the store
    /// chooses the hash: the mesh seeds it per process, so that a remote cluster cannot
    /// aim two values at one digest).
    pub fn of(value: &Value, digest: impl FnOnce(&IpIdentityPair) -> u64) -> Kept {
        if let Value::IpIdentity(pair) = value {
            if let Some(prefix) = pair.prefix_len().and_then(|len| Prefix::new(pair.ip, len)) {
                return Kept::IpCache {
                    prefix,
                    digest: digest(pair),
                };
            }
        }
        Kept::Value(Arc::new(value.clone()))
    }

    /// The ipcache prefix it stated, when it is an ipcache entry.
    pub fn ip_prefix(&self) -> Option<Prefix> {
        match self {
            Kept::IpCache { prefix, .. } => Some(*prefix),
            Kept::Value(v) => match &**v {
                Value::IpIdentity(pair) => Prefix::new(pair.ip, pair.prefix_len()?),
                _ => None,
            },
        }
    }

    /// The whole value, when it is kept.
    pub fn value(&self) -> Option<&Value> {
        match self {
            Kept::Value(v) => Some(v),
            Kept::IpCache { .. } => None,
        }
    }
}

/// A change to a remote cluster's state, handed to the [`Observer`].
#[derive(Debug, Clone, Copy)]
pub enum ClusterEvent<'a> {
    /// A value was added or changed.
    Upsert {
        /// The remote cluster.
        cluster: &'a str,
        /// Its ID, when it announced one.
        cluster_id: Option<u32>,
        /// The etcd key (shared: an owner of what the value states may keep it).
        key: &'a Arc<str>,
        /// The new value.
        value: &'a Value,
        /// What was kept of the value it replaced, `None` for a new key.
        old: Option<&'a Kept>,
    },
    /// The cluster will hold about `keys` values of `resource`: a hint to size for
    /// them. Sent when a list starts (etcd's count of the range, at most the cluster's
    /// key limit) and with 0 when the cluster is removed.
    Expect {
        /// The remote cluster.
        cluster: &'a str,
        /// The resource being listed.
        resource: Resource,
        /// How many values the list holds.
        keys: usize,
    },
    /// A value was deleted, vanished during a disconnect, or its cluster was removed.
    Delete {
        /// The remote cluster.
        cluster: &'a str,
        /// The etcd key.
        key: &'a Arc<str>,
        /// What was kept of the value it had.
        old: &'a Kept,
    },
}

/// The next stage: receives every change, in order per resource. Called from the
/// cluster's task, never under a mesh lock; it should not block.
pub trait Observer: Send + Sync + 'static {
    /// One change.
    fn on_event(&self, event: ClusterEvent<'_>);

    /// A value of `cluster` was refused (malformed, too large, past the cluster's key
    /// limit); `error` names its key. What the key held was withdrawn first, by a
    /// [`ClusterEvent::Delete`]. The mesh counts a remote cluster's refusals in its
    /// status, so an observer need not; this cluster's own kvstore has no status of
    /// its own, and its observer counts them.
    fn on_refused(&self, cluster: &str, error: &str) {
        let _ = (cluster, error);
    }
}

/// An observer that ignores everything.
#[derive(Debug, Default)]
pub struct NoObserver;

impl Observer for NoObserver {
    fn on_event(&self, _: ClusterEvent<'_>) {}
}
