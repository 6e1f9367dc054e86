//! The keys this node keeps in its own cluster's etcd on its lease (its endpoints'
//! ipcache entries, its share of their identities): they vanish when the node does,
//! and are written again whenever the lease is replaced (etcd restarted without its
//! data, or the lease expired during an outage).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use weft_kvstore::{Client, Error};

/// How long a write waits for the node's lease before failing.
const LEASE_WAIT: Duration = Duration::from_secs(10);

/// The node's leased keys: what should exist, and the lease they live on.
#[derive(Clone)]
pub struct LeasedKeys {
    client: Client,
    lease: watch::Receiver<Option<i64>>,
    wanted: Arc<Mutex<BTreeMap<String, Vec<u8>>>>,
}

impl std::fmt::Debug for LeasedKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeasedKeys")
            .field("lease", &*self.lease.borrow())
            .finish_non_exhaustive()
    }
}

/// Why a leased key could not be written.
#[derive(Debug, thiserror::Error)]
pub enum PutError {
    /// The node has no lease (its etcd is unreachable).
    #[error("the node has no lease in its etcd after {0:?}")]
    NoLease(Duration),
    /// etcd refused or timed out.
    #[error(transparent)]
    Kvstore(#[from] Error),
}

impl LeasedKeys {
    /// Keys on the lease that `lease` names (from [`super::run_registration`]).
    pub fn new(client: Client, lease: watch::Receiver<Option<i64>>) -> Self {
        Self {
            client,
            lease,
            wanted: Arc::default(),
        }
    }

    /// Writes `key` on the node's lease and keeps it there.
    ///
    /// # Errors
    /// [`PutError`]; the key is still wanted, and written with the next lease.
    pub async fn put(&self, key: &str, value: Vec<u8>) -> Result<(), PutError> {
        self.wanted
            .lock()
            .expect("leased keys lock")
            .insert(key.to_owned(), value.clone());
        let lease = self.current_lease().await?;
        Ok(self.client.put(key, value, lease).await?)
    }

    /// Deletes `key` and stops keeping it.
    ///
    /// # Errors
    /// [`Error`] when etcd refuses; the key is no longer wanted either way, and goes
    /// with the lease.
    pub async fn delete(&self, key: &str) -> Result<(), Error> {
        self.wanted.lock().expect("leased keys lock").remove(key);
        self.client.delete(key).await
    }

    /// The keys kept, with their values.
    pub fn wanted(&self) -> BTreeMap<String, Vec<u8>> {
        self.wanted.lock().expect("leased keys lock").clone()
    }

    /// The node's lease once there is one, waiting at most 10 s.
    ///
    /// # Errors
    /// [`PutError::NoLease`] when there is none by then.
    pub async fn current_lease(&self) -> Result<i64, PutError> {
        let mut rx = self.lease.clone();
        let waited = tokio::time::timeout(LEASE_WAIT, rx.wait_for(Option::is_some)).await;
        match waited {
            Ok(Ok(lease)) => Ok(lease.expect("waited for some")),
            _ => Err(PutError::NoLease(LEASE_WAIT)),
        }
    }

    /// Writes every wanted key again on each new lease until dropped; a failed round
    /// is retried a second later.
    pub async fn run(self) {
        let mut rx = self.lease.clone();
        loop {
            let lease = *rx.borrow_and_update();
            if let Some(lease) = lease {
                let mut failed = false;
                for (key, value) in self.wanted() {
                    if let Err(e) = self.client.put(&key, value, lease).await {
                        tracing::warn!(%key, error = %e, "cannot write a leased key again");
                        failed = true;
                        break;
                    }
                }
                if failed {
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                        changed = rx.changed() => if changed.is_err() { return },
                    }
                    continue;
                }
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    }
}
