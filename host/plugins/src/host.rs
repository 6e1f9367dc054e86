//! The plugin host: a thread per plugin, so that no cluster task, no policy question
//! and no other plugin ever waits on a plugin past a bound.
//!
//! Sync hooks are queued to every plugin's thread. The policy hook asks the plugins in
//! priority order (the rules of [`super::PluginSet`]), each for at most the stall
//! bound ([`super::Config::stall`]). A plugin whose thread does not answer within it,
//! or whose hook runs longer (a watchdog looks), is counted as failed and quarantined,
//! and its thread is replaced: the old one is abandoned, never waited for. Installs are
//! bounded the same way. Status is read from what each thread published, never asked.
//!
//! Shadows ([`super::shadow`]) get the same hooks and questions as their live plugin,
//! and their answers are compared off the question's path. With a [`Recorder`], every
//! hook's input and every answer is recorded for `weftd plugin test`.

use super::record::{Answered, Event, HookInput, Recorder, Said};
use super::set::{by_priority, step, Opinion, Step};
use super::shadow::{Shadow, ShadowStatus};
use super::slot::{Context, Isolation, LoadedPlugin, Outcome, PluginStatus};
use super::worker::{Job, Start, Worker};
use super::{Error, MeshView, Runtime};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use weft_hooks::{
    Answer, ClusterInfo, PeerGcPolicy, PeerGcRequest, PeerGcVerdict, RegenerationPolicy,
    RegenerationRequest, Resource, SyncCallbacks,
};

/// A manifest the plugin directory holds but that is not loaded as it stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    /// The manifest.
    pub manifest: PathBuf,
    /// The error, naming the check that failed.
    pub error: String,
    /// The plugin still running from an earlier version of this manifest, if any.
    pub kept: Option<String>,
}

/// What `weftd status` shows of the plugins.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginsReport {
    /// The loaded plugins, in priority order.
    pub loaded: Vec<PluginStatus>,
    /// Manifests refused as they stand.
    pub refused: Vec<Refusal>,
    /// Loads (first loads and reloads) that succeeded.
    pub loads: u64,
    /// Loads that failed.
    pub failed_loads: u64,
    /// How plugins are trusted: signatures required (with how many keys), or unsigned
    /// plugins allowed.
    #[serde(default)]
    pub trust: String,
    /// Plugin threads given up on (a hook or an install that did not return within
    /// the stall bound) and replaced.
    #[serde(default)]
    pub stalls: u64,
    /// Hooks dropped because a plugin's queue was full.
    #[serde(default)]
    pub dropped_hooks: u64,
    /// Shadow plugins, by name.
    #[serde(default)]
    pub shadows: Vec<ShadowStatus>,
    /// Where hooks are recorded (`--plugin-record`), and how many events were dropped.
    #[serde(default)]
    pub recording: Option<RecordingStatus>,
}

/// What `weftd status` shows of the recording.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordingStatus {
    /// The directory.
    pub dir: PathBuf,
    /// Events dropped because the writer was behind.
    pub dropped: u64,
}

struct State {
    /// The running plugins, in priority order.
    workers: Vec<Arc<Worker>>,
    /// The shadows, at most one per name.
    shadows: Vec<Arc<Shadow>>,
    /// The "synced" hooks so far per cluster, replayed to a plugin loaded later:
    /// every plugin learns of every synced cluster once.
    history: BTreeMap<String, Vec<(Resource, ClusterInfo)>>,
    /// The loader's part of the report, and the stalls.
    report: PluginsReport,
}

struct Inner {
    cx: Context,
    stall: Duration,
    state: Mutex<State>,
    recorder: OnceLock<Arc<Recorder>>,
}

/// A handle to the plugin host; cheap to clone. Its watchdog ends with the last handle.
#[derive(Clone)]
pub struct PluginHost {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PluginHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginHost").finish_non_exhaustive()
    }
}

impl PluginHost {
    /// A host with no plugins, on `runtime`; plugins see the mesh through `mesh`.
    ///
    /// # Panics
    /// When the OS cannot start the watchdog thread.
    pub fn new(runtime: Arc<Runtime>, mesh: MeshView, isolation: Isolation) -> Self {
        let stall = runtime.config().stall;
        let inner = Arc::new(Inner {
            cx: Context {
                runtime,
                mesh,
                isolation,
            },
            stall,
            state: Mutex::new(State {
                workers: Vec::new(),
                shadows: Vec::new(),
                history: BTreeMap::new(),
                report: PluginsReport::default(),
            }),
            recorder: OnceLock::new(),
        });
        let weak = Arc::downgrade(&inner);
        std::thread::Builder::new()
            .name("weft-plugin-watchdog".into())
            .spawn(move || watchdog(weak, stall))
            .expect("the plugin watchdog starts");
        Self { inner }
    }

    /// Records every hook's input and every answer with `recorder` from now on (the
    /// first recorder given stays).
    pub fn record_to(&self, recorder: Arc<Recorder>) {
        let _ = self.inner.recorder.set(recorder);
    }

    fn record(&self, event: impl FnOnce() -> Event) {
        if let Some(r) = self.inner.recorder.get() {
            r.record(event());
        }
    }

    /// Queues the "synced" hook of `resource` for `cluster` to every plugin and shadow.
    pub fn synced(&self, resource: Resource, cluster: ClusterInfo) {
        self.record(|| {
            Event::now(HookInput::Synced {
                resource,
                cluster: cluster.clone(),
            })
        });
        let mut state = self.inner.lock();
        for w in state.all_workers() {
            w.push(Job::Synced(resource, cluster.clone()), false);
        }
        let history = state.history.entry(cluster.name.clone()).or_default();
        history.push((resource, cluster));
    }

    /// Queues the "cluster disconnected" hook to every plugin and shadow.
    pub fn disconnected(&self, cluster: ClusterInfo) {
        self.record(|| {
            Event::now(HookInput::ClusterDisconnected {
                cluster: cluster.clone(),
            })
        });
        let mut state = self.inner.lock();
        state.history.remove(&cluster.name);
        for w in state.all_workers() {
            w.push(Job::Disconnected(cluster.clone()), false);
        }
    }

    /// Asks the policy hook, plugin by plugin in priority order, each for at most the
    /// stall bound (see [`super::PluginSet`] for the rule). A plugin that does not
    /// answer in time counts as failed, and the built-in default answers.
    pub async fn regeneration_policy(&self, request: RegenerationRequest) -> Answer {
        let default = || Answer::default_for(&request);
        let input = || HookInput::RegenerationPolicy {
            request: request.clone(),
        };
        self.ask(input, default, "regeneration-policy", |reply| {
            Job::Policy(Box::new(request.clone()), reply)
        })
        .await
    }

    /// Asks the peer-gc-policy hook, as [`Self::regeneration_policy`]; the built-in
    /// default collects.
    pub async fn peer_gc_policy(&self, request: PeerGcRequest) -> Answer<PeerGcVerdict> {
        let input = || HookInput::PeerGcPolicy {
            request: request.clone(),
        };
        self.ask(input, Answer::default_peer_gc, "peer-gc-policy", |reply| {
            Job::PeerGc(Box::new(request.clone()), reply)
        })
        .await
    }

    /// The chain of a policy hook over the running plugins, each asked with `job` ahead
    /// of its queued hooks and waited for at most the stall bound. A plugin's shadow is
    /// asked the same, beside it, and compared off this path. `input` is made only for
    /// the recording and the shadows.
    async fn ask<V: Opinion>(
        &self,
        input: impl Fn() -> HookInput,
        default: impl Fn() -> Answer<V>,
        hook: &str,
        job: impl Fn(oneshot::Sender<Outcome<V>>) -> Job,
    ) -> Answer<V> {
        let (workers, shadows) = {
            let state = self.inner.lock();
            (state.workers.clone(), state.shadows.clone())
        };
        let mut event = self.inner.recorder.get().map(|_| Event {
            mesh: (self.inner.cx.mesh)(),
            ..Event::now(input())
        });
        let mut answer = None;
        for w in workers {
            if w.quarantined(Instant::now()) {
                continue;
            }
            let (reply, live) = oneshot::channel();
            if !w.push(job(reply), true) {
                continue; // removed or replaced meanwhile
            }
            let shadow = shadows
                .iter()
                .find(|s| s.worker.plugin.name == w.plugin.name)
                .and_then(|s| {
                    let (reply, said) = oneshot::channel();
                    s.worker.push(job(reply), true).then(|| (s.clone(), said))
                });
            let outcome = match tokio::time::timeout(self.inner.stall, live).await {
                Ok(Ok(outcome)) => outcome,
                // Its thread was replaced while the question waited.
                Ok(Err(_)) => Some(Err("its thread was replaced".into())),
                Err(_) => {
                    self.inner.stalled(&w, hook);
                    Some(Err(format!(
                        "stalled: no answer within {:?}",
                        self.inner.stall
                    )))
                }
            };
            let said = said_of(&outcome);
            if let (Some(e), Some(said)) = (&mut event, &said) {
                e.answers.push(answered(&w.plugin, false, said.clone()));
            }
            if let (Some((shadow, reply)), Some(live)) = (shadow, said) {
                self.compare_later(shadow, reply, input(), live, hook);
            }
            if let Step::Done(a) = step(&default, &w.plugin.name, outcome) {
                answer = Some(a);
                break;
            }
        }
        let answer = answer.unwrap_or_else(default);
        if let (Some(mut e), Some(r)) = (event, self.inner.recorder.get()) {
            e.decided = Some((answer.verdict.said(), answer.decided_by.clone()));
            r.record(e);
        }
        answer
    }

    /// Compares a shadow's answer, when it comes (within the stall bound), with the
    /// live plugin's: off the question's path, never acted on.
    fn compare_later<V: Opinion>(
        &self,
        shadow: Arc<Shadow>,
        reply: oneshot::Receiver<Outcome<V>>,
        input: HookInput,
        live: Said,
        hook: &str,
    ) {
        let inner = self.inner.clone();
        let hook = hook.to_owned();
        tokio::spawn(async move {
            let said = match tokio::time::timeout(inner.stall, reply).await {
                Ok(Ok(outcome)) => said_of(&outcome),
                Ok(Err(_)) => None,
                Err(_) => {
                    inner.stalled(&shadow.worker, &hook);
                    Some(Said::Failed(format!(
                        "stalled: no answer within {:?}",
                        inner.stall
                    )))
                }
            };
            if let Some(said) = said {
                shadow.compare(input, live, said);
            }
        });
    }

    /// Starts `plugin` on a thread of its own, instantiates it and calls its `init`,
    /// and only then replaces the plugin of the same name. The new plugin is then told
    /// of every cluster already synced, as its "synced" hooks would have been called
    /// had it been there.
    ///
    /// # Errors
    /// [`Error`] when instantiation or `init` fails or does not return within the
    /// stall bound; the running plugin is kept.
    /// A plugin marked `shadow` becomes the shadow of the live plugin of its name,
    /// replacing an earlier shadow of that name.
    pub async fn install(&self, plugin: LoadedPlugin) -> Result<(), Error> {
        let name = plugin.name.clone();
        let shadow = plugin.shadow;
        let (reply, started) = oneshot::channel();
        let worker = Worker::start(self.inner.cx.clone(), plugin, Start::Fresh(reply))?;
        match tokio::time::timeout(self.inner.stall, started).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => return Err(e),
            Ok(Err(_)) => return Err(Error::ThreadEnded { plugin: name }),
            Err(_) => {
                worker.close();
                self.inner.lock().report.stalls += 1;
                return Err(Error::InitStalled {
                    plugin: name,
                    after: self.inner.stall,
                });
            }
        }
        let mut state = self.inner.lock();
        state.remove(&name, shadow);
        for (r, cluster) in state.history.values().flatten() {
            worker.push(Job::Synced(*r, cluster.clone()), false);
        }
        if shadow {
            state.shadows.push(Shadow::new(worker));
        } else {
            state.workers.push(worker);
            state
                .workers
                .sort_by(|a, b| by_priority(&a.plugin, &b.plugin));
        }
        Ok(())
    }

    /// Removes plugin `name` (its shadow when `shadow`); whether it was there. Never
    /// waits on its thread.
    pub fn remove(&self, name: &str, shadow: bool) -> bool {
        self.inner.lock().remove(name, shadow)
    }

    /// Waits until every hook queued before the call has run, for at most `bound`;
    /// whether they all did.
    pub async fn flush_within(&self, bound: Duration) -> bool {
        let workers = self.inner.lock().all_workers();
        let waits: Vec<_> = workers
            .iter()
            .filter_map(|w| {
                let (reply, done) = oneshot::channel();
                w.push(Job::Flush(reply), false).then_some(done)
            })
            .collect();
        tokio::time::timeout(bound, futures::future::join_all(waits))
            .await
            .is_ok()
    }

    /// [`Self::flush_within`] 30 seconds.
    pub async fn flush(&self) {
        self.flush_within(Duration::from_secs(30)).await;
    }

    /// The plugins as each thread last published them, and the loader's counts.
    pub fn report(&self) -> PluginsReport {
        let now = Instant::now();
        let state = self.inner.lock();
        let mut report = state.report.clone();
        report.loaded = state
            .workers
            .iter()
            .filter_map(|w| w.record().map(|r| r.status(&w.plugin, now)))
            .collect();
        report.shadows = state.shadows.iter().map(|s| s.status(now)).collect();
        report.dropped_hooks += state.all_workers().iter().map(|w| w.dropped()).sum::<u64>();
        report.recording = self.inner.recorder.get().map(|r| RecordingStatus {
            dir: r.dir().into(),
            dropped: r.dropped(),
        });
        report
    }

    /// Updates the loader's part of the report.
    pub(crate) fn update_report(&self, f: impl FnOnce(&mut PluginsReport)) {
        f(&mut self.inner.lock().report);
    }

    /// The cluster mesh's callbacks that call the hooks: each resource's "synced" and
    /// the cluster's disconnection.
    pub fn sync_callbacks(&self) -> SyncCallbacks {
        let mut callbacks = SyncCallbacks::default();
        for resource in Resource::ALL {
            let host = self.clone();
            callbacks = callbacks.on(resource, move |r, info| host.synced(r, info.clone()));
        }
        let host = self.clone();
        callbacks.on_disconnected(move |info| host.disconnected(info.clone()))
    }
}

impl RegenerationPolicy for PluginHost {
    async fn regeneration_policy(&self, request: RegenerationRequest) -> Answer {
        PluginHost::regeneration_policy(self, request).await
    }
}

impl PeerGcPolicy for PluginHost {
    async fn peer_gc_policy(&self, request: PeerGcRequest) -> Answer<PeerGcVerdict> {
        PluginHost::peer_gc_policy(self, request).await
    }
}

impl State {
    /// The live plugins' threads and the shadows'.
    fn all_workers(&self) -> Vec<Arc<Worker>> {
        let shadows = self.shadows.iter().map(|s| s.worker.clone());
        self.workers.iter().cloned().chain(shadows).collect()
    }

    fn remove(&mut self, name: &str, shadow: bool) -> bool {
        let before = self.workers.len() + self.shadows.len();
        let keep = |w: &Arc<Worker>| {
            let same = w.plugin.name == name;
            if same {
                w.close();
            }
            !same
        };
        if shadow {
            self.shadows.retain(|s| keep(&s.worker));
        } else {
            self.workers.retain(keep);
        }
        self.workers.len() + self.shadows.len() != before
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("plugin host lock")
    }

    /// Gives up on `worker`'s thread, stuck in `hook`: the failure is counted, the
    /// plugin (or shadow) quarantined, and a new thread carries on its record. A worker
    /// already replaced or removed is left alone.
    fn stalled(&self, worker: &Arc<Worker>, hook: &str) {
        let mut state = self.lock();
        let live = state.workers.iter().position(|w| Arc::ptr_eq(w, worker));
        let shadow = state
            .shadows
            .iter()
            .position(|s| Arc::ptr_eq(&s.worker, worker));
        if live.is_none() && shadow.is_none() {
            return;
        }
        let plugin = worker.plugin.clone();
        let Some(mut record) = worker.record() else {
            return;
        };
        record.stalled(
            &plugin.name,
            &self.cx.isolation,
            Instant::now(),
            format!(
                "stalled: {hook} did not return within {:?}; its thread was replaced",
                self.stall
            ),
        );
        worker.close();
        state.report.stalls += 1;
        let replacement = Worker::start(self.cx.clone(), plugin, Start::Resume(Box::new(record)))
            .inspect_err(|e| tracing::error!(plugin = %worker.plugin.name, error = %weft_sys::error_chain(e), "plugin removed: no thread to replace its stalled one"))
            .ok();
        match (live, shadow, replacement) {
            (Some(i), _, Some(r)) => state.workers[i] = r,
            (Some(i), _, None) => drop(state.workers.remove(i)),
            (None, Some(i), Some(r)) => state.shadows[i] = state.shadows[i].with_worker(r),
            (None, Some(i), None) => drop(state.shadows.remove(i)),
            (None, None, _) => {}
        }
    }
}

/// Looks for hooks running past the stall bound (a sync hook has nobody waiting for
/// its answer to notice) until the host is dropped.
fn watchdog(inner: Weak<Inner>, stall: Duration) {
    let period = (stall / 4).max(Duration::from_millis(10));
    loop {
        std::thread::sleep(period);
        let Some(inner) = inner.upgrade() else { return };
        let workers = inner.lock().all_workers();
        for w in workers {
            if let Some(hook) = w.stuck(stall) {
                inner.stalled(&w, hook);
            }
        }
    }
}

/// What a plugin's outcome says, for the recording and the shadows (`None`: it was not
/// asked).
fn said_of<V: Opinion>(outcome: &Outcome<V>) -> Option<Said> {
    match outcome {
        None => None,
        Some(Ok(v)) => Some(v.said()),
        Some(Err(reason)) => Some(Said::Failed(reason.clone())),
    }
}

fn answered(plugin: &LoadedPlugin, shadow: bool, said: Said) -> Answered {
    Answered {
        plugin: plugin.name.clone(),
        version: plugin.version.clone(),
        digest: plugin.digest.clone(),
        shadow,
        said,
    }
}
