//! One Kubernetes resource followed, shaped like the kvstore's list-watch: kube-runtime's
//! watcher (initial list → init-done → events, a new list after `410 Gone` or a watch
//! that ends) into a reflector store, with the source's status beside it and a change
//! feed for the stages that consume it.
//!
//! The store is the truth: a consumer reads it whole when the source (re-)lists or
//! when it fell behind on the feed ([`Change::Resync`]), and by key otherwise, so that
//! nothing is lost or applied twice however the events arrive.

use futures::StreamExt as _;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::utils::Backoff;
use kube::runtime::{watcher, WatchStreamExt as _};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{broadcast, watch};

/// What a source's status shows (`weftd status`, `/readyz`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceStatus {
    /// The source's name (`pods`, `namespaces`, `ciliumnetworkpolicies`, …).
    pub name: &'static str,
    /// The initial list has arrived (stays true through later re-lists, during which
    /// the store keeps the previous list's objects).
    pub synced: bool,
    /// The objects in the store.
    pub objects: usize,
    /// Completed lists (1 after the initial one; more after `410 Gone` or errors).
    pub lists: u64,
    /// Watch or list errors so far.
    pub errors: u64,
    /// The last error, as the client reported it.
    pub last_error: Option<String>,
}

/// A change, for the stages that consume a source.
#[derive(Debug, Clone)]
pub enum Change<K> {
    /// A list completed, or the consumer fell behind: read the whole store.
    Resync,
    /// An object was added or modified.
    Applied(Arc<K>),
    /// An object was deleted (as it was last seen).
    Deleted(Arc<K>),
}

/// How a source retries after an error: exponential back-off between `min` and `max`
/// with jitter, reset once a watch has run for a while (kube-runtime's default is
/// 0.8 s to 30 s; tests want a smaller `max`).
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    /// The first delay.
    pub min: Duration,
    /// The largest delay.
    pub max: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Retry {
            min: Duration::from_millis(800),
            max: Duration::from_secs(30),
        }
    }
}

struct RetryBackoff {
    retry: Retry,
    next: Duration,
    /// When the last delay was handed out: a quiet two minutes resets the delay.
    last: Option<Instant>,
}

impl Iterator for RetryBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        if self
            .last
            .is_some_and(|t| t.elapsed() > Duration::from_secs(120))
        {
            self.next = self.retry.min;
        }
        self.last = Some(Instant::now());
        let delay = self.next;
        self.next = (self.next * 2).min(self.retry.max);
        // Up to a quarter more, so that a node's sources (and a cluster's agents) do
        // not retry in step.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .subsec_nanos();
        let jitter = delay.mul_f64(f64::from(nanos % 1000) / 4000.0);
        Some((delay + jitter).min(self.retry.max))
    }
}

impl Backoff for RetryBackoff {
    fn reset(&mut self) {
        self.next = self.retry.min;
        self.last = None;
    }
}

/// A followed resource: its store, status and change feed. Cheap to clone.
#[derive(Clone)]
pub struct Source<K>
where
    K: Resource + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    reader: reflector::Store<K>,
    status: watch::Receiver<SourceStatus>,
    changes: broadcast::Sender<Change<K>>,
}

impl<K> Source<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Default,
{
    /// Follows `api` with `config` until the returned future is dropped. Run the
    /// future on a task; the source is usable at once (empty, not synced).
    pub fn follow(
        name: &'static str,
        api: Api<K>,
        config: watcher::Config,
        retry: Retry,
    ) -> (Self, impl std::future::Future<Output = ()> + Send + 'static) {
        let (reader, mut writer) = reflector::store();
        let (status_tx, status) = watch::channel(SourceStatus {
            name,
            ..SourceStatus::default()
        });
        let (changes, _) = broadcast::channel(1024);
        let feed = changes.clone();
        let count = reader.clone();
        let run = async move {
            let backoff = RetryBackoff {
                retry,
                next: retry.min,
                last: None,
            };
            let mut events = watcher(api, config).backoff(backoff).boxed();
            while let Some(event) = events.next().await {
                let event = match event {
                    Ok(e) => e,
                    Err(e) => {
                        tracing::warn!(source = name, error = %e, "Kubernetes source: list or watch failed; retrying");
                        status_tx.send_modify(|s| {
                            s.errors += 1;
                            s.last_error = Some(e.to_string());
                        });
                        continue;
                    }
                };
                writer.apply_watcher_event(&event);
                // No receiver is fine: nobody consumes this source yet.
                let _ = match &event {
                    watcher::Event::InitDone => feed.send(Change::Resync),
                    watcher::Event::Apply(o) => feed.send(Change::Applied(Arc::new(o.clone()))),
                    watcher::Event::Delete(o) => feed.send(Change::Deleted(Arc::new(o.clone()))),
                    watcher::Event::Init | watcher::Event::InitApply(_) => Ok(0),
                };
                status_tx.send_modify(|s| {
                    s.objects = count.len();
                    if matches!(event, watcher::Event::InitDone) {
                        s.synced = true;
                        s.lists += 1;
                    }
                });
            }
        };
        (
            Source {
                reader,
                status,
                changes,
            },
            run,
        )
    }

    /// The store (readable at any time; empty until the initial list).
    pub fn store(&self) -> &reflector::Store<K> {
        &self.reader
    }

    /// The source's status now.
    pub fn status(&self) -> SourceStatus {
        self.status.borrow().clone()
    }

    /// Changes from now on. A receiver that lags gets `RecvError::Lagged`: treat it
    /// as [`Change::Resync`].
    pub fn subscribe(&self) -> broadcast::Receiver<Change<K>> {
        self.changes.subscribe()
    }

    /// Waits until the initial list has arrived, at most `bound`; whether it has.
    pub async fn wait_synced(&self, bound: Duration) -> bool {
        let mut status = self.status.clone();
        tokio::time::timeout(bound, status.wait_for(|s| s.synced))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// The object at `key` once the store has it (and `accept` takes it), waiting at
    /// most `bound`: for a CNI ADD whose Pod event has not arrived yet.
    pub async fn wait_for(
        &self,
        key: &ObjectRef<K>,
        bound: Duration,
        accept: impl Fn(&K) -> bool,
    ) -> Option<Arc<K>> {
        // Subscribed before the first look: an event between the two is not missed.
        let mut changes = self.subscribe();
        let found = |s: &Self| s.reader.get(key).filter(|o| accept(o));
        if let Some(o) = found(self) {
            return Some(o);
        }
        tokio::time::timeout(bound, async {
            loop {
                match changes.recv().await {
                    Ok(Change::Applied(o)) if accept(&o) && key_of(o.as_ref()) == *key => {
                        return Some(o)
                    }
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {
                        if let Some(o) = found(self) {
                            return Some(o);
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        })
        .await
        .ok()
        .flatten()
    }
}

fn key_of<K>(o: &K) -> ObjectRef<K>
where
    K: Resource,
    K::DynamicType: Eq + Hash + Clone + Default,
{
    ObjectRef::from_obj(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_doubles_to_its_bound_and_resets() {
        let retry = Retry {
            min: Duration::from_millis(100),
            max: Duration::from_secs(1),
        };
        let mut b = RetryBackoff {
            retry,
            next: retry.min,
            last: None,
        };
        let delays: Vec<Duration> = (0..6).map(|_| b.next().unwrap()).collect();
        assert!(delays[0] >= Duration::from_millis(100) && delays[0] <= Duration::from_millis(125));
        assert!(delays[1] >= Duration::from_millis(200));
        assert!(delays.iter().all(|d| *d <= retry.max), "{delays:?}");
        assert_eq!(delays[5], retry.max);
        b.reset();
        assert!(b.next().unwrap() <= Duration::from_millis(125));
    }
}
