//! Security identities of this cluster's endpoints, allocated in the cluster's etcd in
//! the established allocator layout, so that every agent of the mesh — weft's or the
//! established Go agent — reads them:
//!
//! - `cilium/state/identities/v1/id/<id>` holds the labels (the master key, on no
//!   lease: the identity outlives any one node);
//! - `cilium/state/identities/v1/value/<labels>/<node>` holds the id, on the node's
//!   lease: one per node that uses it;
//! - an existing id is reused for the same labels; when the last node stops using
//!   it, the master key is deleted.
//!
//! Allocations of the same labels are serialised across nodes by the established
//! agent's lock: an etcd mutex on `cilium/state/identities/v1/locks/<labels>/`. Each
//! contender creates `<prefix><lease, hex>` on its node's lease; the key created first
//! holds the lock, the others wait until it is gone (released, or gone with a crashed
//! holder's lease). weft nodes and Go nodes of one cluster exclude each other.
//!
//! Ids are cluster-scoped: the cluster ID in bits 16–23, and 256–65535 below.

use crate::leased_keys::{LeasedKeys, PutError};
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;
use weft_kvstore::{Client, Error as KvError};
use weft_model::layout::{self, allocator};
use weft_model::Labels;

/// The allocator's prefix, master keys included.
pub const PREFIX: &str = layout::allocator::ALL;

/// The lowest and highest id below the cluster bits.
pub const ID_RANGE: std::ops::RangeInclusive<u32> = 256..=65535;

/// How long an allocation waits for another node's lock on the same labels: longer
/// than the node lease (15 s), so a crashed holder's lock has expired by then.
const LOCK_WAIT: Duration = Duration::from_secs(20);

/// What allocating or releasing can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// etcd refused or timed out.
    #[error("identity of {labels}: {source}")]
    Kvstore {
        /// The labels.
        labels: String,
        /// Why.
        #[source]
        source: KvError,
    },
    /// The node's lease is missing.
    #[error("identity of {labels}: {source}")]
    Lease {
        /// The labels.
        labels: String,
        /// Why.
        #[source]
        source: PutError,
    },
    /// Another node holds the labels' lock too long.
    #[error("identity of {labels}: its lock is held by another node for more than {waited:?}")]
    Locked {
        /// The labels.
        labels: String,
        /// How long this node waited.
        waited: Duration,
    },
    /// Every id of this cluster is taken.
    #[error("identity of {labels}: all {} cluster ids are in use", ID_RANGE.count())]
    Exhausted {
        /// The labels.
        labels: String,
    },
}

/// Allocates this cluster's identities for this node's endpoints.
#[derive(Debug)]
pub struct GlobalAllocator {
    client: Client,
    keys: LeasedKeys,
    node: String,
    cluster_id: u32,
    /// Labels → (id, endpoints of this node using it).
    held: tokio::sync::Mutex<HashMap<String, (u32, usize)>>,
}

impl GlobalAllocator {
    /// An allocator for node `node` of the cluster with id `cluster_id`.
    pub fn new(client: Client, keys: LeasedKeys, node: &str, cluster_id: u32) -> Self {
        Self {
            client,
            keys,
            node: node.to_owned(),
            cluster_id,
            held: Default::default(),
        }
    }

    /// The id of `labels`: the one the cluster already has, or a new one. Each call
    /// takes a reference, returned by [`Self::release`].
    ///
    /// # Errors
    /// [`Error`] naming the labels; nothing is held then.
    pub async fn acquire(&self, labels: &Labels) -> Result<u32, Error> {
        let text = labels.to_string();
        let mut held = self.held.lock().await;
        if let Some((id, refs)) = held.get_mut(&text) {
            *refs += 1;
            return Ok(*id);
        }
        let lock = self.lock(&text).await?;
        let result = self.allocate(&text).await;
        self.unlock(&lock).await;
        let id = result?;
        let value_key = allocator::value(&text, &self.node);
        self.keys
            .put(&value_key, id.to_string().into_bytes())
            .await
            .map_err(|source| Error::Lease {
                labels: text.clone(),
                source,
            })?;
        held.insert(text, (id, 1));
        Ok(id)
    }

    /// Returns a reference to `labels`' id; the last one withdraws this node's use,
    /// and when no node uses the id any more, the id itself.
    ///
    /// # Errors
    /// [`Error`] when etcd refuses; the node's key goes with its lease regardless.
    pub async fn release(&self, labels: &Labels) -> Result<(), Error> {
        let text = labels.to_string();
        let mut held = self.held.lock().await;
        let Some((id, refs)) = held.get_mut(&text) else {
            return Ok(());
        };
        *refs -= 1;
        if *refs > 0 {
            return Ok(());
        }
        let id = *id;
        held.remove(&text);
        let kv = |source| Error::Kvstore {
            labels: text.clone(),
            source,
        };
        self.keys
            .delete(&allocator::value(&text, &self.node))
            .await
            .map_err(kv)?;
        self.collect_if_unused(&text, &master(id)).await.map(drop)
    }

    /// Deletes master key `key` of `labels` when no node uses the labels, under their
    /// lock; `true` when it did.
    async fn collect_if_unused(&self, labels: &str, key: &str) -> Result<bool, Error> {
        let lock = self.lock(labels).await?;
        let users = self
            .client
            .list_prefix(&allocator::value_prefix(labels))
            .await;
        let result = match users {
            Ok(users) if users.is_empty() => self.client.delete(key).await.map(|()| true),
            Ok(_) => Ok(false),
            Err(e) => Err(e),
        };
        self.unlock(&lock).await;
        result.map_err(|source| Error::Kvstore {
            labels: labels.to_owned(),
            source,
        })
    }

    /// The ids this node holds, with their labels.
    pub async fn held(&self) -> Vec<(u32, String)> {
        let held = self.held.lock().await;
        held.iter().map(|(l, (id, _))| (*id, l.clone())).collect()
    }

    /// Deletes every master key no node uses (their users' leases expired: nodes that
    /// crashed); returns how many.
    ///
    /// # Errors
    /// [`Error`] when etcd refuses.
    pub async fn collect_unused(&self) -> Result<usize, Error> {
        let kv = |source| Error::Kvstore {
            labels: "(all)".into(),
            source,
        };
        let masters = self
            .client
            .list_prefix(&allocator::masters())
            .await
            .map_err(kv)?;
        let mut collected = 0;
        for (key, labels) in masters {
            let labels = String::from_utf8_lossy(&labels);
            if self.collect_if_unused(&labels, &key).await? {
                collected += 1;
            }
        }
        Ok(collected)
    }

    /// The id for `labels` under its lock: one a node uses, else a master key with the
    /// same labels, else the lowest free id.
    async fn allocate(&self, labels: &str) -> Result<u32, Error> {
        let kv = |source| Error::Kvstore {
            labels: labels.to_owned(),
            source,
        };
        let users = self
            .client
            .list_prefix(&allocator::value_prefix(labels))
            .await
            .map_err(kv)?;
        let in_use: BTreeSet<u32> = users
            .iter()
            .filter_map(|(_, v)| std::str::from_utf8(v).ok()?.parse().ok())
            .collect();
        if let Some(&id) = in_use.first() {
            // Its master key may have been collected meanwhile: written again.
            self.client
                .create(&master(id), labels.as_bytes().to_vec(), 0)
                .await
                .map_err(kv)?;
            return Ok(id);
        }
        let masters = self
            .client
            .list_prefix(&allocator::masters())
            .await
            .map_err(kv)?;
        let mut used = BTreeSet::new();
        for (key, value) in &masters {
            let Some(id) = key.rsplit('/').next().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            if value.as_slice() == labels.as_bytes() {
                return Ok(id);
            }
            used.insert(id);
        }
        let base = self.cluster_id << 16;
        for n in ID_RANGE {
            let id = base | n;
            if used.contains(&id) {
                continue;
            }
            // Created only if absent: another node may take the same id for other
            // labels at the same moment.
            if self
                .client
                .create(&master(id), labels.as_bytes().to_vec(), 0)
                .await
                .map_err(kv)?
            {
                return Ok(id);
            }
        }
        Err(Error::Exhausted {
            labels: labels.to_owned(),
        })
    }

    /// Takes the labels' lock (the etcd mutex recipe: our key created, then held once
    /// it is the first created under the prefix); returns our key, to delete.
    async fn lock(&self, labels: &str) -> Result<String, Error> {
        let prefix = allocator::locks_prefix(labels);
        let lease = self
            .keys
            .current_lease()
            .await
            .map_err(|source| Error::Lease {
                labels: labels.to_owned(),
                source,
            })?;
        let key = format!("{prefix}{lease:x}");
        let kv = |source| Error::Kvstore {
            labels: labels.to_owned(),
            source,
        };
        // Already there when this lease took it before and did not give it back.
        self.client
            .create(&key, self.node.clone().into_bytes(), lease)
            .await
            .map_err(kv)?;
        let deadline = tokio::time::Instant::now() + LOCK_WAIT;
        let mut pause = Duration::from_millis(20);
        loop {
            match self.client.first_created(&prefix).await.map_err(kv)? {
                Some(first) if first != key => {}
                // Ours first; or none, when ours went with a lost lease: the caller's
                // writes then fail on that lease.
                _ => return Ok(key),
            }
            // Polled with back-off rather than watched: a watch opened now could miss
            // a release made between the read and its start.
            if tokio::time::Instant::now() + pause > deadline {
                self.unlock(&key).await;
                return Err(Error::Locked {
                    labels: labels.to_owned(),
                    waited: LOCK_WAIT,
                });
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(500));
        }
    }

    async fn unlock(&self, key: &str) {
        if let Err(e) = self.client.delete(key).await {
            // It goes with the lease otherwise.
            tracing::warn!(key, error = %e, "cannot release an identity lock");
        }
    }
}

fn master(id: u32) -> String {
    layout::identity(id)
}
