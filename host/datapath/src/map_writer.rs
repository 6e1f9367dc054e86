//! The ipcache map writer: an ipcache listener whose changes are coalesced per prefix
//! and written to the BPF map by a thread of its own, so the ipcache's lock is never
//! held across a syscall.

use super::layout::{ipcache_key, IpcacheKey, IpcacheKeyData, RemoteEndpointInfo};
use aya::maps::{HashMap, LpmTrie, MapData, MapError};
use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex};
use weft_state::ipcache::{Change, Listener, Prefix};

/// A generation's ipcache: host prefixes in a hash map, the others in the LPM trie
/// (see `bpf/include/weft/datapath.h` for why).
pub struct IpcacheMaps {
    /// `weft_ipcache_hosts`: /32 and /128.
    pub hosts: HashMap<MapData, IpcacheKey, RemoteEndpointInfo>,
    /// `weft_ipcache`: every other prefix.
    pub prefixes: LpmTrie<MapData, IpcacheKeyData, RemoteEndpointInfo>,
}

impl IpcacheMaps {
    /// Writes the entry of `prefix` to the map it belongs in.
    ///
    /// # Errors
    /// The kernel's refusal (a full map, say).
    pub fn insert(&mut self, prefix: &Prefix, value: RemoteEndpointInfo) -> Result<(), MapError> {
        let key = ipcache_key(prefix);
        if prefix.is_host() {
            self.hosts.insert(key, value, 0)
        } else {
            self.prefixes.insert(&key, value, 0)
        }
    }

    /// Removes the entry of `prefix`; `Ok(false)` when it was not there.
    ///
    /// # Errors
    /// The kernel's refusal.
    pub fn remove(&mut self, prefix: &Prefix) -> Result<bool, MapError> {
        let key = ipcache_key(prefix);
        let result = if prefix.is_host() {
            self.hosts.remove(&key)
        } else {
            self.prefixes.remove(&key)
        };
        match result {
            Ok(()) => Ok(true),
            Err(MapError::KeyNotFound) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// A generation's ipcache maps, shared with its writer.
pub type IpcacheMap = Arc<Mutex<IpcacheMaps>>;

/// What the writer has done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Entries written (inserted or updated).
    pub written: u64,
    /// Entries deleted.
    pub deleted: u64,
    /// Writes the kernel refused (a full map, say); logged at a bounded rate.
    pub failed: u64,
    /// Batches taken from the queue.
    pub batches: u64,
    /// Entries in the map now, as written by this writer (it fills its generation's
    /// map from empty).
    pub entries: u64,
}

#[derive(Default)]
struct Queue {
    /// The latest state per prefix: `None` to delete. Ordered, because the kernel's
    /// trie inserts neighbouring keys faster in order (measured: 100,000 inserts in
    /// hash order took about a quarter longer).
    pending: BTreeMap<Prefix, Option<RemoteEndpointInfo>>,
    /// Changes queued so far, and written so far (for `flush`).
    queued: u64,
    done: u64,
    stats: WriterStats,
    stop: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    changed: Condvar,
}

/// Writes ipcache changes to a map. Add it to the ipcache as a listener (the ipcache
/// replays its entries to a new listener, which fills an empty map).
pub struct MapWriter {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl MapWriter {
    /// Starts the writer thread for `map`.
    ///
    /// # Panics
    /// When the OS cannot start a thread.
    pub fn start(map: IpcacheMap) -> Arc<Self> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            changed: Condvar::new(),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("weft-map-writer".into())
            .spawn(move || write_loop(&s, &map))
            .expect("the map writer thread starts");
        Arc::new(Self {
            shared,
            thread: Some(thread),
        })
    }

    /// Waits until every change queued before the call is in the map.
    pub fn flush(&self) {
        let mut q = self.shared.queue.lock().expect("map writer lock");
        let target = q.queued;
        while q.done < target && !q.stop {
            q = self.shared.changed.wait(q).expect("map writer lock");
        }
    }

    /// What the writer has done so far.
    pub fn stats(&self) -> WriterStats {
        self.shared.queue.lock().expect("map writer lock").stats
    }
}

impl Listener for MapWriter {
    fn on_change(&self, change: &Change<'_>) {
        let mut q = self.shared.queue.lock().expect("map writer lock");
        let was_empty = q.pending.is_empty();
        q.pending
            .insert(change.prefix, change.new.map(RemoteEndpointInfo::from));
        q.queued += 1;
        drop(q);
        // A notification is a syscall: only the first change of a batch can find the
        // writer waiting.
        if was_empty {
            self.shared.changed.notify_all();
        }
    }
}

impl Drop for MapWriter {
    fn drop(&mut self) {
        self.shared.queue.lock().expect("map writer lock").stop = true;
        self.shared.changed.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn write_loop(shared: &Shared, map: &IpcacheMap) {
    // The prefixes in the map: its entry count without walking it.
    let mut present = std::collections::HashSet::new();
    // A full map fails every write after it: the log says so at a bounded rate.
    let log_limit = weft_sys::loglimit::LogLimit::per_second("ipcache map write failures");
    loop {
        let (batch, upto) = {
            let mut q = shared.queue.lock().expect("map writer lock");
            while q.pending.is_empty() && !q.stop {
                q = shared.changed.wait(q).expect("map writer lock");
            }
            if q.stop {
                return;
            }
            q.stats.batches += 1;
            (std::mem::take(&mut q.pending), q.queued)
        };
        let (mut written, mut deleted, mut failed) = (0, 0, 0);
        {
            let mut map = map.lock().expect("ipcache map lock");
            for (prefix, value) in batch {
                let result = match value {
                    Some(v) => map.insert(&prefix, v).map(|()| {
                        written += 1;
                        present.insert(prefix);
                    }),
                    // Absent is fine: never written, say, when a replay raced a delete.
                    None => map.remove(&prefix).map(|found| {
                        deleted += u64::from(found);
                        present.remove(&prefix);
                    }),
                };
                if let Err(e) = result {
                    failed += 1;
                    if log_limit.allow() {
                        tracing::warn!(%prefix, error = %e, "ipcache map write failed");
                    }
                }
            }
        }
        let mut q = shared.queue.lock().expect("map writer lock");
        q.stats.written += written;
        q.stats.deleted += deleted;
        q.stats.failed += failed;
        q.stats.entries = present.len() as u64;
        q.done = upto;
        drop(q);
        shared.changed.notify_all();
    }
}
