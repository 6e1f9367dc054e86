//! One plugin's thread: it owns the plugin's [`Slot`] and runs its jobs in order, a
//! policy question ahead of queued hooks. What the plugin host needs to know without
//! asking the thread (its record, whether it is busy and since when) is published
//! after each job.

use super::slot::{Context, LoadedPlugin, Outcome, Record, Slot};
use super::Error;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use weft_hooks::{
    ClusterInfo, PeerGcRequest, PeerGcVerdict, RegenerationRequest, Resource, Verdict,
};

/// Jobs a worker holds at most; hooks past it are dropped and counted (a plugin that
/// stalls is replaced long before, so this bounds memory only).
const QUEUE_CAP: usize = 4_096;

/// What a worker is asked to do.
pub(crate) enum Job {
    Synced(Resource, ClusterInfo),
    Disconnected(ClusterInfo),
    Policy(Box<RegenerationRequest>, oneshot::Sender<Outcome<Verdict>>),
    PeerGc(Box<PeerGcRequest>, oneshot::Sender<Outcome<PeerGcVerdict>>),
    Flush(oneshot::Sender<()>),
}

impl Job {
    fn hook(&self) -> &'static str {
        match self {
            Job::Synced(r, _) => match r {
                Resource::Nodes => "on-nodes-synced",
                Resource::IpCache => "on-ipcache-synced",
                Resource::Identities => "on-identities-synced",
                Resource::Services => "on-services-synced",
            },
            Job::Disconnected(_) => "on-cluster-disconnected",
            Job::Policy(..) => "regeneration-policy",
            Job::PeerGc(..) => "peer-gc-policy",
            Job::Flush(_) => "flush",
        }
    }
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    closed: bool,
}

/// How a worker starts.
pub(crate) enum Start {
    /// Instantiate and `init`, answering whether that worked.
    Fresh(oneshot::Sender<Result<(), Error>>),
    /// Carry on a stalled worker's record; instantiate at the first call.
    Resume(Box<Record>),
}

/// A handle to one plugin's thread.
pub(crate) struct Worker {
    /// The plugin it runs.
    pub plugin: LoadedPlugin,
    queue: Mutex<Queue>,
    wake: Condvar,
    /// The record as of the last job.
    record: Mutex<Option<Record>>,
    /// The job running, and since when.
    busy: Mutex<Option<(Instant, &'static str)>>,
    /// Hooks dropped because the queue was full.
    dropped: Mutex<u64>,
}

impl Worker {
    /// Starts the thread for `plugin`.
    ///
    /// # Errors
    /// [`Error::Thread`] when the OS cannot start a thread.
    pub fn start(cx: Context, plugin: LoadedPlugin, start: Start) -> Result<Arc<Self>, Error> {
        // A resumed plugin shows its record at once, not from its thread's first job.
        let record = match &start {
            Start::Resume(record) => Some((**record).clone()),
            Start::Fresh(_) => None,
        };
        let worker = Arc::new(Worker {
            plugin: plugin.clone(),
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            record: Mutex::new(record),
            busy: Mutex::new(None),
            dropped: Mutex::new(0),
        });
        let w = worker.clone();
        let plugin_name = plugin.name.clone();
        std::thread::Builder::new()
            .name(format!("weft-plugin-{}", plugin.name))
            .spawn(move || w.run(cx, plugin, start))
            .map_err(|e| Error::Thread {
                plugin: plugin_name,
                source: Arc::new(e),
            })?;
        Ok(worker)
    }

    fn run(&self, cx: Context, plugin: LoadedPlugin, start: Start) {
        *self.busy.lock().expect("busy lock") = Some((Instant::now(), "init"));
        let slot = match start {
            Start::Fresh(reply) => match Slot::start(&cx, plugin) {
                Ok(slot) => {
                    self.publish(&slot);
                    let _ = reply.send(Ok(()));
                    Some(slot)
                }
                Err(e) => {
                    let _ = reply.send(Err(e));
                    None
                }
            },
            Start::Resume(record) => Slot::resume(&cx, plugin, *record)
                .inspect_err(|e| tracing::error!(error = %e, "plugin not resumed"))
                .ok(),
        };
        *self.busy.lock().expect("busy lock") = None;
        let Some(mut slot) = slot else { return };
        self.publish(&slot);
        while let Some(job) = self.next() {
            *self.busy.lock().expect("busy lock") = Some((Instant::now(), job.hook()));
            match job {
                Job::Synced(r, cluster) => slot.on_synced(&cx, r, &cluster),
                Job::Disconnected(cluster) => slot.on_cluster_disconnected(&cx, &cluster),
                Job::Policy(request, reply) => {
                    let outcome = slot.regeneration_policy(&cx, &request, Instant::now());
                    // Published before the answer, so whoever got it sees its effect.
                    self.publish(&slot);
                    let _ = reply.send(outcome);
                }
                Job::PeerGc(request, reply) => {
                    let outcome = slot.peer_gc_policy(&cx, &request, Instant::now());
                    self.publish(&slot);
                    let _ = reply.send(outcome);
                }
                Job::Flush(reply) => {
                    let _ = reply.send(());
                }
            }
            *self.busy.lock().expect("busy lock") = None;
            self.publish(&slot);
        }
    }

    fn publish(&self, slot: &Slot) {
        *self.record.lock().expect("record lock") = Some(slot.record.clone());
    }

    fn next(&self) -> Option<Job> {
        let mut q = self.queue.lock().expect("queue lock");
        loop {
            if q.closed {
                return None;
            }
            if let Some(job) = q.jobs.pop_front() {
                return Some(job);
            }
            q = self.wake.wait(q).expect("queue lock");
        }
    }

    /// Queues `job`, ahead of the queued hooks when `urgent`. False when the worker
    /// is closed or its queue is full (the job is dropped).
    pub fn push(&self, job: Job, urgent: bool) -> bool {
        let mut q = self.queue.lock().expect("queue lock");
        if q.closed {
            return false;
        }
        if q.jobs.len() >= QUEUE_CAP && !urgent {
            *self.dropped.lock().expect("dropped lock") += 1;
            return false;
        }
        if urgent {
            q.jobs.push_front(job);
        } else {
            q.jobs.push_back(job);
        }
        self.wake.notify_one();
        true
    }

    /// Stops the thread after its current job; queued jobs are dropped (their reply
    /// channels close).
    pub fn close(&self) {
        let mut q = self.queue.lock().expect("queue lock");
        q.closed = true;
        q.jobs.clear();
        self.wake.notify_one();
    }

    /// The record as of the last job (`None` before the plugin started).
    pub fn record(&self) -> Option<Record> {
        self.record.lock().expect("record lock").clone()
    }

    /// Whether the plugin is quarantined at `now`.
    pub fn quarantined(&self, now: Instant) -> bool {
        self.record
            .lock()
            .expect("record lock")
            .as_ref()
            .is_some_and(|r| r.quarantined(now))
    }

    /// The hook running for longer than `bound`, if any.
    pub fn stuck(&self, bound: Duration) -> Option<&'static str> {
        self.busy
            .lock()
            .expect("busy lock")
            .filter(|(since, _)| since.elapsed() > bound)
            .map(|(_, hook)| hook)
    }

    /// Hooks dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        *self.dropped.lock().expect("dropped lock")
    }
}
