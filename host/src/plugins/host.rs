//! The plugin host: a thread per plugin, so that no cluster task, no policy question
//! and no other plugin ever waits on a plugin past a bound.
//!
//! Sync hooks are queued to every plugin's thread. The policy hook asks the plugins in
//! priority order (the rules of [`super::PluginSet`]), each for at most the stall
//! bound ([`super::Config::stall`]). A plugin whose thread does not answer within it,
//! or whose hook runs longer (a watchdog looks), is counted as failed and quarantined,
//! and its thread is replaced: the old one is abandoned, never waited for. Installs are
//! bounded the same way. Status is read from what each thread published, never asked.

use super::contract::PeerGcVerdict;
use super::set::{by_priority, step, Answer, Opinion, Step};
use super::slot::{Context, Isolation, LoadedPlugin, PluginStatus};
use super::worker::{Job, Start, Worker};
use super::{Cluster, Error, MeshView, PeerGcRequest, RegenerationRequest, Runtime};
use crate::clustermesh::{ClusterInfo, Resource, SyncCallbacks};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

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
}

struct State {
    /// The running plugins, in priority order.
    workers: Vec<Arc<Worker>>,
    /// The "synced" hooks so far per cluster, replayed to a plugin loaded later:
    /// every plugin learns of every synced cluster once.
    history: BTreeMap<String, Vec<(Resource, Cluster)>>,
    /// The loader's part of the report, and the stalls.
    report: PluginsReport,
}

struct Inner {
    cx: Context,
    stall: Duration,
    state: Mutex<State>,
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
                history: BTreeMap::new(),
                report: PluginsReport::default(),
            }),
        });
        let weak = Arc::downgrade(&inner);
        std::thread::Builder::new()
            .name("weft-plugin-watchdog".into())
            .spawn(move || watchdog(weak, stall))
            .expect("the plugin watchdog starts");
        Self { inner }
    }

    /// Queues the "synced" hook of `resource` for `cluster` to every plugin.
    pub fn synced(&self, resource: Resource, cluster: Cluster) {
        let mut state = self.inner.lock();
        for w in &state.workers {
            w.push(Job::Synced(resource, cluster.clone()), false);
        }
        let history = state.history.entry(cluster.name.clone()).or_default();
        history.push((resource, cluster));
    }

    /// Queues the "cluster disconnected" hook to every plugin.
    pub fn disconnected(&self, cluster: Cluster) {
        let mut state = self.inner.lock();
        state.history.remove(&cluster.name);
        for w in &state.workers {
            w.push(Job::Disconnected(cluster.clone()), false);
        }
    }

    /// Asks the policy hook, plugin by plugin in priority order, each for at most the
    /// stall bound (see [`super::PluginSet`] for the rule). A plugin that does not
    /// answer in time counts as failed, and the built-in default answers.
    pub async fn regeneration_policy(&self, request: RegenerationRequest) -> Answer {
        let default = || Answer::default_for(&request);
        self.ask(default, "regeneration-policy", |reply| {
            Job::Policy(Box::new(request.clone()), reply)
        })
        .await
    }

    /// Asks the peer-gc-policy hook, as [`Self::regeneration_policy`]; the built-in
    /// default collects.
    pub async fn peer_gc_policy(&self, request: PeerGcRequest) -> Answer<PeerGcVerdict> {
        self.ask(Answer::default_peer_gc, "peer-gc-policy", |reply| {
            Job::PeerGc(Box::new(request.clone()), reply)
        })
        .await
    }

    /// The chain of a policy hook over the running plugins, each asked with `job` ahead
    /// of its queued hooks and waited for at most the stall bound.
    async fn ask<V: Opinion>(
        &self,
        default: impl Fn() -> Answer<V>,
        hook: &str,
        job: impl Fn(oneshot::Sender<Option<Result<V, ()>>>) -> Job,
    ) -> Answer<V> {
        let workers = self.inner.lock().workers.clone();
        for w in workers {
            if w.quarantined(Instant::now()) {
                continue;
            }
            let (reply, answer) = oneshot::channel();
            if !w.push(job(reply), true) {
                continue; // removed or replaced meanwhile
            }
            let outcome = match tokio::time::timeout(self.inner.stall, answer).await {
                Ok(Ok(outcome)) => outcome,
                // Its thread was replaced while the question waited.
                Ok(Err(_)) => Some(Err(())),
                Err(_) => {
                    self.inner.stalled(&w, hook);
                    Some(Err(()))
                }
            };
            if let Step::Done(answer) = step(&default, &w.plugin.name, outcome) {
                return answer;
            }
        }
        default()
    }

    /// Starts `plugin` on a thread of its own, instantiates it and calls its `init`,
    /// and only then replaces the plugin of the same name. The new plugin is then told
    /// of every cluster already synced, as its "synced" hooks would have been called
    /// had it been there.
    ///
    /// # Errors
    /// [`Error`] when instantiation or `init` fails or does not return within the
    /// stall bound; the running plugin is kept.
    pub async fn install(&self, plugin: LoadedPlugin) -> Result<(), Error> {
        let name = plugin.name.clone();
        let (reply, started) = oneshot::channel();
        let worker = Worker::start(self.inner.cx.clone(), plugin, Start::Fresh(reply))?;
        match tokio::time::timeout(self.inner.stall, started).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => return Err(e),
            Ok(Err(_)) => {
                return Err(Error::Engine {
                    reason: format!("the thread of plugin {name:?} ended during start-up"),
                })
            }
            Err(_) => {
                worker.close();
                self.inner.lock().report.stalls += 1;
                return Err(Error::Init {
                    plugin: name,
                    reason: format!(
                        "instantiation and init did not return within {:?}; its thread is abandoned",
                        self.inner.stall
                    ),
                });
            }
        }
        let mut state = self.inner.lock();
        state.workers.retain(|w| {
            let same = w.plugin.name == name;
            if same {
                w.close();
            }
            !same
        });
        for (r, cluster) in state.history.values().flatten() {
            worker.push(Job::Synced(*r, cluster.clone()), false);
        }
        state.workers.push(worker);
        state
            .workers
            .sort_by(|a, b| by_priority(&a.plugin, &b.plugin));
        Ok(())
    }

    /// Removes plugin `name`; whether it was there. Never waits on its thread.
    pub fn remove(&self, name: &str) -> bool {
        let mut state = self.inner.lock();
        let before = state.workers.len();
        state.workers.retain(|w| {
            let same = w.plugin.name == name;
            if same {
                w.close();
            }
            !same
        });
        state.workers.len() != before
    }

    /// Waits until every hook queued before the call has run, for at most `bound`;
    /// whether they all did.
    pub async fn flush_within(&self, bound: Duration) -> bool {
        let workers = self.inner.lock().workers.clone();
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
        report.dropped_hooks += state.workers.iter().map(|w| w.dropped()).sum::<u64>();
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
            callbacks = callbacks.on(resource, move |r, info| host.synced(r, cluster(info)));
        }
        let host = self.clone();
        callbacks.on_disconnected(move |info| host.disconnected(cluster(info)))
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("plugin host lock")
    }

    /// Gives up on `worker`'s thread, stuck in `hook`: the failure is counted, the
    /// plugin quarantined, and a new thread carries on its record. A worker already
    /// replaced or removed is left alone.
    fn stalled(&self, worker: &Arc<Worker>, hook: &str) {
        let mut state = self.lock();
        let Some(i) = state.workers.iter().position(|w| Arc::ptr_eq(w, worker)) else {
            return;
        };
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
        match Worker::start(self.cx.clone(), plugin, Start::Resume(record)) {
            Ok(replacement) => state.workers[i] = replacement,
            Err(e) => {
                tracing::error!(plugin = %worker.plugin.name, error = %e, "plugin removed: no thread to replace its stalled one");
                state.workers.remove(i);
            }
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
        let workers = inner.lock().workers.clone();
        for w in workers {
            if let Some(hook) = w.stuck(stall) {
                inner.stalled(&w, hook);
            }
        }
    }
}

/// A cluster as the hooks see it.
pub fn cluster(info: &ClusterInfo) -> Cluster {
    let n = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
    Cluster {
        name: info.name.clone(),
        id: info.id,
        counts: super::ResourceCounts {
            nodes: n(info.counts.nodes),
            ipcache: n(info.counts.ipcache),
            identities: n(info.counts.identities),
            services: n(info.counts.services),
        },
    }
}
