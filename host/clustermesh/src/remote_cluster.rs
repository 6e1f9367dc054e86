//! One remote cluster: its barriers, its stores and its status, shared between its
//! connection task and the mesh.

use super::barrier::SyncBarrier;
use super::reflector::{tell_deletes, Change, Reflector};
use super::resource::Owner;
use super::status::{ClusterStatus, Counts, Synced, SyncedAfter};
use super::{BarrierState, ClusterEvent, ClusterInfo, Observer, Resource, SyncCallbacks};
use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};
use weft_kvstore::{self as kvstore, Event};
pub(crate) use weft_sys::error_chain;

/// Which of a connection's streams an event or error came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum StreamKey {
    /// The cluster's config key.
    Config,
    /// The cluster's sync canaries.
    Canaries,
    /// One resource.
    Resource(Resource),
}

/// A remote cluster for as long as its file exists. Reconnects keep it (and so its
/// barriers and callbacks-run-once guarantee); removing the file drops it.
pub(crate) struct RemoteCluster {
    pub name: Arc<str>,
    barriers: [SyncBarrier; 4],
    inner: Mutex<Inner>,
    observer: Arc<dyn Observer>,
    callbacks: SyncCallbacks,
    /// When the cluster was added: barriers' release times count from here.
    added: std::time::Instant,
    /// Skipped values are logged at a bounded rate: they are the remote's doing.
    log_limit: weft_sys::loglimit::LogLimit,
}

struct Inner {
    /// The ID the cluster was accepted with, when it announced one.
    id: Option<u32>,
    accepted: bool,
    /// Accepted since the last disconnection callback: the next refusal or removal
    /// runs it.
    announce_disconnect: bool,
    failing: HashSet<StreamKey>,
    last_error: Option<String>,
    malformed: u64,
    reflector: Reflector,
    /// A failure happened since the connection was last healthy.
    broken: bool,
    reconnects: u64,
    last_failure_unix: Option<u64>,
    synced_after_ms: [Option<u64>; 4],
}

impl Inner {
    /// Something failed: the next healthy moment counts as a reconnect.
    fn failed(&mut self, error: String) {
        self.last_error = Some(error);
        self.broken = true;
        self.last_failure_unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .ok()
            .map(|d| d.as_secs());
    }

    /// Healthy again (accepted, no stream failing) after a failure: a reconnect.
    fn healed(&mut self) {
        if self.broken && self.accepted && self.failing.is_empty() {
            self.broken = false;
            self.reconnects = self.reconnects.saturating_add(1);
        }
    }
}

impl RemoteCluster {
    pub fn new(
        name: &str,
        observer: Arc<dyn Observer>,
        callbacks: SyncCallbacks,
        max_keys: usize,
    ) -> Self {
        Self {
            name: name.into(),
            barriers: Default::default(),
            inner: Mutex::new(Inner {
                id: None,
                accepted: false,
                announce_disconnect: false,
                failing: HashSet::new(),
                last_error: None,
                malformed: 0,
                reflector: Reflector::new(max_keys),
                broken: false,
                reconnects: 0,
                last_failure_unix: None,
                synced_after_ms: [None; 4],
            }),
            observer,
            callbacks,
            added: std::time::Instant::now(),
            log_limit: weft_sys::loglimit::LogLimit::per_second("malformed values"),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().expect("remote cluster lock poisoned")
    }

    pub fn barrier(&self, r: Resource) -> &SyncBarrier {
        &self.barriers[r.index()]
    }

    pub fn accepted_id(&self) -> Option<u32> {
        self.lock().id
    }

    /// The cluster was refused (bad config file, bad cluster config, ID clash): it is
    /// not connected, and waiters are released as disconnected.
    pub fn refuse(&self, reason: String) {
        tracing::warn!(cluster = %self.name, %reason, "remote cluster refused");
        let mut inner = self.lock();
        inner.accepted = false;
        inner.failed(reason);
        drop(inner);
        self.disconnect();
        self.announce_disconnect();
    }

    /// Runs the disconnection callbacks once per acceptance (refusal, removal).
    pub fn announce_disconnect(&self) {
        let announce = std::mem::take(&mut self.lock().announce_disconnect);
        if announce {
            self.callbacks.run_disconnected(&self.info());
        }
    }

    /// A transient problem (etcd unreachable, config not there yet): barriers stay
    /// pending, because the state may still come.
    pub fn note_error(&self, error: String) {
        tracing::warn!(cluster = %self.name, %error, "remote cluster not connected");
        let mut inner = self.lock();
        inner.accepted = false;
        inner.failed(error);
    }

    /// The cluster config was accepted: watching starts.
    pub fn accept(&self, id: Option<u32>) {
        let mut inner = self.lock();
        inner.accepted = true;
        inner.announce_disconnect = true;
        inner.id = id.or(inner.id);
        inner.failing.clear();
        inner.healed();
        drop(inner);
        for b in &self.barriers {
            b.rearm();
        }
    }

    /// Releases every waiter as disconnected (removal, refusal).
    pub fn disconnect(&self) {
        self.lock().accepted = false;
        for b in &self.barriers {
            b.disconnect();
        }
    }

    pub fn stream_error(&self, key: StreamKey, error: &kvstore::Error) {
        tracing::warn!(cluster = %self.name, ?key, error = %error_chain(error), "remote cluster stream error");
        let mut inner = self.lock();
        inner.failing.insert(key);
        inner.failed(error_chain(error));
    }

    pub fn stream_ok(&self, key: StreamKey) {
        let mut inner = self.lock();
        inner.failing.remove(&key);
        inner.healed();
    }

    /// Applies one event of resource `r` watched under `prefix`.
    pub fn apply(&self, r: Resource, prefix: &str, event: Event) {
        let cluster = &*self.name;
        let mut inner = self.lock();
        if let Event::Upsert { .. } = event {
            // Values flow again: the stream is not failing (the set is empty but
            // after a failure).
            if !inner.failing.is_empty() {
                inner.failing.remove(&StreamKey::Resource(r));
            }
            inner.healed();
        }
        let owner = Owner {
            name: cluster,
            id: inner.id,
        };
        let change = inner.reflector.apply(r, owner, prefix, event);
        if let Change::Refused { error, .. } = &change {
            if self.log_limit.allow() {
                tracing::warn!(cluster, resource = %r, %error, "skipping malformed value");
            }
            inner.malformed = inner.malformed.saturating_add(1);
            inner.last_error = Some(error.clone());
        }
        let cluster_id = inner.id;
        drop(inner);
        change.tell(&*self.observer, cluster, cluster_id, r);
        match change {
            Change::Watching => self.stream_ok(StreamKey::Resource(r)),
            Change::Listed { .. } if self.barriers[r.index()].release() => {
                let after = u64::try_from(self.added.elapsed().as_millis()).unwrap_or(u64::MAX);
                self.lock().synced_after_ms[r.index()] = Some(after);
                tracing::info!(cluster, resource = %r, "initial list in: barrier released");
                self.callbacks.run(r, &self.info());
            }
            _ => {}
        }
    }

    /// Removes all state, telling the observer about every key. Only for removal:
    /// stopping the agent drains nothing.
    pub fn drain(&self) {
        let gone = self.lock().reflector.drain();
        tell_deletes(&*self.observer, &self.name, &gone);
        for resource in Resource::ALL {
            self.observer.on_event(ClusterEvent::Expect {
                cluster: &self.name,
                resource,
                keys: 0,
            });
        }
    }

    fn counts(inner: &Inner) -> Counts {
        Counts::from_array(Resource::ALL.map(|r| inner.reflector.len(r)))
    }

    pub fn info(&self) -> ClusterInfo {
        let inner = self.lock();
        ClusterInfo {
            name: self.name.to_string(),
            id: inner.id,
            counts: Self::counts(&inner),
        }
    }

    pub fn status(&self) -> ClusterStatus {
        let synced = Synced::from_array(std::array::from_fn(|i| {
            self.barriers[i].state() == BarrierState::Synced
        }));
        let inner = self.lock();
        ClusterStatus {
            name: self.name.to_string(),
            id: inner.id,
            connected: inner.accepted && inner.failing.is_empty(),
            ready: synced.all(),
            synced,
            counts: Self::counts(&inner),
            malformed: inner.malformed,
            last_error: inner.last_error.clone(),
            last_failure_unix: inner.last_failure_unix,
            reconnects: inner.reconnects,
            synced_after_ms: SyncedAfter::from_array(inner.synced_after_ms),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sizes the observer was told.
    #[derive(Default)]
    struct Expected(Mutex<Vec<(Resource, usize)>>);

    impl Observer for Expected {
        fn on_event(&self, event: ClusterEvent<'_>) {
            if let ClusterEvent::Expect { resource, keys, .. } = event {
                self.0.lock().unwrap().push((resource, keys));
            }
        }
    }

    #[test]
    fn a_list_size_is_passed_on_within_the_clusters_key_limit() {
        let observer = Arc::new(Expected::default());
        let cluster = RemoteCluster::new("c2", observer.clone(), SyncCallbacks::default(), 1_000);
        let r = Resource::IpCache;
        cluster.apply(r, "p/", Event::Listing);
        cluster.apply(r, "p/", Event::ListSize { keys: 300 });
        // A remote etcd's count is the remote's word: never more than it may hold.
        cluster.apply(r, "p/", Event::ListSize { keys: u64::MAX });
        cluster.drain();
        let seen = observer.0.lock().unwrap().clone();
        assert_eq!(seen[..2], [(r, 300), (r, 1_000)]);
        assert!(
            seen[2..].iter().all(|(_, keys)| *keys == 0) && seen.len() == 2 + Resource::ALL.len(),
            "a removed cluster expects nothing of any resource: {seen:?}"
        );
    }
}
