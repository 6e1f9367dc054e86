//! The plugin host: one thread owns the [`PluginSet`] and runs every hook, so no
//! cluster task ever waits on a plugin. Sync hooks are queued; the policy hook and
//! installs answer through a reply channel.

use super::set::{Answer, LoadedPlugin, PluginSet, PluginStatus};
use super::{Cluster, Error, RegenerationRequest};
use crate::clustermesh::{ClusterInfo, Resource, SyncCallbacks};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

enum Message {
    Synced(Resource, Cluster),
    Disconnected(Cluster),
    Policy(RegenerationRequest, oneshot::Sender<Answer>),
    Install(LoadedPlugin, oneshot::Sender<Result<(), Error>>),
    Remove(String, oneshot::Sender<bool>),
    Flush(oneshot::Sender<()>),
}

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
}

/// A handle to the plugin thread; cheap to clone. The thread ends when the last handle
/// is dropped.
#[derive(Clone)]
pub struct PluginHost {
    tx: mpsc::Sender<Message>,
    report: Arc<Mutex<PluginsReport>>,
}

impl std::fmt::Debug for PluginHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginHost").finish_non_exhaustive()
    }
}

impl PluginHost {
    /// Starts the thread that owns `set`.
    ///
    /// # Panics
    /// When the OS cannot start a thread.
    pub fn start(mut set: PluginSet) -> Self {
        let (tx, rx) = mpsc::channel::<Message>();
        let report = Arc::new(Mutex::new(PluginsReport::default()));
        let shared = report.clone();
        std::thread::Builder::new()
            .name("weft-plugins".into())
            .spawn(move || {
                // The report is updated before a reply is sent, so whoever awaited
                // the reply sees its effect in the report.
                let publish = |set: &PluginSet| {
                    shared.lock().expect("plugins report lock").loaded = set.statuses();
                };
                // The "synced" hooks run so far per cluster, replayed to a plugin
                // loaded later: every plugin learns of every synced cluster once.
                let mut history: BTreeMap<String, Vec<(Resource, Cluster)>> = BTreeMap::new();
                for message in rx {
                    match message {
                        Message::Synced(r, cluster) => {
                            set.on_synced(r, &cluster);
                            let h = history.entry(cluster.name.clone()).or_default();
                            h.push((r, cluster));
                            publish(&set);
                        }
                        Message::Disconnected(cluster) => {
                            history.remove(&cluster.name);
                            set.on_cluster_disconnected(&cluster);
                            publish(&set);
                        }
                        Message::Policy(request, reply) => {
                            let answer = set.regeneration_policy(&request);
                            publish(&set);
                            let _ = reply.send(answer);
                        }
                        Message::Install(plugin, reply) => {
                            let name = plugin.name.clone();
                            let result = set.insert(plugin);
                            if result.is_ok() {
                                for (r, cluster) in history.values().flatten() {
                                    set.on_synced_of(&name, *r, cluster);
                                }
                            }
                            publish(&set);
                            let _ = reply.send(result);
                        }
                        Message::Remove(name, reply) => {
                            let removed = set.remove(&name);
                            publish(&set);
                            let _ = reply.send(removed);
                        }
                        Message::Flush(reply) => {
                            let _ = reply.send(());
                        }
                    }
                }
            })
            .expect("the plugin thread starts");
        Self { tx, report }
    }

    /// Queues the "synced" hook of `resource` for `cluster`.
    pub fn synced(&self, resource: Resource, cluster: Cluster) {
        let _ = self.tx.send(Message::Synced(resource, cluster));
    }

    /// Queues the "cluster disconnected" hook.
    pub fn disconnected(&self, cluster: Cluster) {
        let _ = self.tx.send(Message::Disconnected(cluster));
    }

    /// Asks the policy hook (see [`PluginSet::regeneration_policy`] for the rule).
    pub async fn regeneration_policy(&self, request: RegenerationRequest) -> Answer {
        let (reply, answer) = oneshot::channel();
        let default = PluginSet::default_answer(&request);
        if self.tx.send(Message::Policy(request, reply)).is_err() {
            return default;
        }
        answer.await.unwrap_or(default)
    }

    /// Instantiates `plugin`, calls its `init`, and only then replaces the plugin of
    /// the same name. The new plugin is then told of every cluster already synced,
    /// as its "synced" hooks would have been called had it been there.
    ///
    /// # Errors
    /// [`Error`] when instantiation or `init` fails; the running plugin is kept.
    pub async fn install(&self, plugin: LoadedPlugin) -> Result<(), Error> {
        let (reply, answer) = oneshot::channel();
        let gone = || Error::Engine {
            reason: "the plugin thread stopped".into(),
        };
        self.tx
            .send(Message::Install(plugin, reply))
            .map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }

    /// Removes plugin `name`; whether it was there.
    pub async fn remove(&self, name: &str) -> bool {
        let (reply, answer) = oneshot::channel();
        if self.tx.send(Message::Remove(name.into(), reply)).is_err() {
            return false;
        }
        answer.await.unwrap_or(false)
    }

    /// Waits until every hook queued before the call has run.
    pub async fn flush(&self) {
        let (reply, answer) = oneshot::channel();
        if self.tx.send(Message::Flush(reply)).is_ok() {
            let _ = answer.await;
        }
    }

    /// The plugins as of the last handled message.
    pub fn report(&self) -> PluginsReport {
        self.report.lock().expect("plugins report lock").clone()
    }

    /// Updates the loader's part of the report.
    pub(crate) fn update_report(&self, f: impl FnOnce(&mut PluginsReport)) {
        f(&mut self.report.lock().expect("plugins report lock"));
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
