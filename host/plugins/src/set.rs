//! Plugins called in priority order, in the caller's thread: the synchronous set that
//! offline tools and benchmarks use. The agent runs [`super::PluginHost`] instead, the
//! same rules with a thread per plugin, so that no plugin can hold up the agent.
//!
//! The rules (failure isolation is [`super::slot`]'s):
//! - plugins run in priority order, highest first (ties by name);
//! - "synced" hooks go to every plugin;
//! - for the policy hook, the first plugin with an opinion decides; with none, the
//!   built-in default ([`weft_hooks::default_verdict`]) decides; a plugin whose call fails makes
//!   the built-in default answer.

use super::host_state::MeshView;
use super::record::Said;
use super::runtime::Runtime;
use super::slot::{Context, Isolation, LoadedPlugin, Outcome, PluginStatus, Slot};
use std::sync::Arc;
use std::time::Instant;
use weft_hooks::{
    Answer, ClusterInfo, PeerGcRequest, PeerGcVerdict, RegenerationRequest, Resource, Verdict,
};

/// A verdict that can mean "ask the next plugin".
pub(crate) trait Opinion: Send + 'static {
    /// Whether this is "no opinion".
    fn is_none(&self) -> bool;
    /// The verdict as recorded and compared.
    fn said(&self) -> Said;
}

impl Opinion for Verdict {
    fn is_none(&self) -> bool {
        *self == Verdict::NoOpinion
    }
    fn said(&self) -> Said {
        Said::Regeneration(self.clone())
    }
}

impl Opinion for PeerGcVerdict {
    fn is_none(&self) -> bool {
        *self == PeerGcVerdict::NoOpinion
    }
    fn said(&self) -> Said {
        Said::PeerGc(*self)
    }
}

/// What one plugin's policy call means for the chain.
pub(crate) enum Step<V> {
    /// Ask the next plugin.
    Next,
    /// The answer.
    Done(Answer<V>),
}

/// The chain's rule for one plugin's outcome (see the module rules): skipped or no
/// opinion asks the next, a failure makes the default answer, anything else decides.
pub(crate) fn step<V: Opinion>(
    default: impl FnOnce() -> Answer<V>,
    plugin: &str,
    outcome: Outcome<V>,
) -> Step<V> {
    match outcome {
        None => Step::Next,
        Some(Ok(v)) if v.is_none() => Step::Next,
        Some(Err(_)) => Step::Done(default()),
        Some(Ok(verdict)) => Step::Done(Answer {
            verdict,
            decided_by: Some(plugin.to_owned()),
        }),
    }
}

/// Priority order: highest first, ties by name.
pub(crate) fn by_priority(a: &LoadedPlugin, b: &LoadedPlugin) -> std::cmp::Ordering {
    b.priority.cmp(&a.priority).then(a.name.cmp(&b.name))
}

/// The loaded plugins, called in the caller's thread.
pub struct PluginSet {
    cx: Context,
    slots: Vec<Slot>,
}

impl PluginSet {
    /// An empty set on `runtime`; plugins see the mesh through `mesh`.
    pub fn new(runtime: Arc<Runtime>, mesh: MeshView, isolation: Isolation) -> Self {
        Self {
            cx: Context {
                runtime,
                mesh,
                isolation,
            },
            slots: Vec::new(),
        }
    }

    /// Instantiates `plugin` (calling its `init`) and adds it, replacing a plugin of
    /// the same name only once the new one is up.
    ///
    /// # Errors
    /// [`super::Error`] when it cannot be instantiated or its `init` fails; the set is
    /// then unchanged.
    pub fn insert(&mut self, plugin: LoadedPlugin) -> Result<(), super::Error> {
        let slot = Slot::start(&self.cx, plugin)?;
        self.slots.retain(|s| s.plugin.name != slot.plugin.name);
        self.slots.push(slot);
        self.slots.sort_by(|a, b| by_priority(&a.plugin, &b.plugin));
        Ok(())
    }

    /// Removes the plugin `name`.
    pub fn remove(&mut self, name: &str) -> bool {
        let before = self.slots.len();
        self.slots.retain(|s| s.plugin.name != name);
        self.slots.len() != before
    }

    /// Asks the policy hook of each plugin in priority order; see the module rules.
    pub fn regeneration_policy(&mut self, request: &RegenerationRequest) -> Answer {
        self.regeneration_policy_at(request, Instant::now())
    }

    /// [`Self::regeneration_policy`] at a given time (for tests of the back-off).
    pub fn regeneration_policy_at(
        &mut self,
        request: &RegenerationRequest,
        now: Instant,
    ) -> Answer {
        for slot in &mut self.slots {
            let outcome = slot.regeneration_policy(&self.cx, request, now);
            let default = || Answer::default_for(request);
            if let Step::Done(answer) = step(default, &slot.plugin.name, outcome) {
                return answer;
            }
        }
        Answer::default_for(request)
    }

    /// Asks the peer-gc-policy hook of each plugin in priority order, as the policy.
    pub fn peer_gc_policy(&mut self, request: &PeerGcRequest) -> Answer<PeerGcVerdict> {
        let now = Instant::now();
        for slot in &mut self.slots {
            let outcome = slot.peer_gc_policy(&self.cx, request, now);
            if let Step::Done(answer) = step(Answer::default_peer_gc, &slot.plugin.name, outcome) {
                return answer;
            }
        }
        Answer::default_peer_gc()
    }

    /// The built-in default's answer to `request` ([`weft_hooks::default_verdict`]).
    pub fn default_answer(request: &RegenerationRequest) -> Answer {
        Answer::default_for(request)
    }

    /// Calls the "synced" hook of `resource` on every plugin.
    pub fn on_synced(&mut self, resource: Resource, cluster: &ClusterInfo) {
        for slot in &mut self.slots {
            slot.on_synced(&self.cx, resource, cluster);
        }
    }

    /// Calls the "cluster disconnected" hook on every plugin.
    pub fn on_cluster_disconnected(&mut self, cluster: &ClusterInfo) {
        for slot in &mut self.slots {
            slot.on_cluster_disconnected(&self.cx, cluster);
        }
    }

    /// Every plugin's status, in priority order.
    pub fn statuses(&self) -> Vec<PluginStatus> {
        self.statuses_at(Instant::now())
    }

    /// [`Self::statuses`] at a given time.
    pub fn statuses_at(&self, now: Instant) -> Vec<PluginStatus> {
        self.slots.iter().map(|s| s.status(now)).collect()
    }
}
