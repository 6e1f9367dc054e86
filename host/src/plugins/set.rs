//! The loaded plugins, called in priority order, each failure isolated.
//!
//! The rules:
//! - plugins run in priority order, highest first (ties by name);
//! - "synced" hooks go to every plugin;
//! - for the policy hook, the first plugin with an opinion decides; with none, the
//!   built-in default ([`default_verdict`]) decides;
//! - a call that traps, runs out of time or memory, or answers outside the contract
//!   fails that call only: it is logged and counted, and the built-in default answers
//!   the policy hook; the instance is replaced before the plugin's next call;
//! - after `failure_threshold` consecutive failures a plugin is quarantined, and is
//!   tried again after a back-off that doubles with each quarantine.

use super::contract::{default_verdict, enforce, Verdict};
use super::host_state::MeshView;
use super::runtime::{CallError, Instance, Prepared, Runtime};
use super::{Cluster, EndpointKind, RegenerationRequest};
use crate::clustermesh::Resource;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use wasmtime::component::Component;

/// A plugin ready to run: its compiled component and its manifest's facts.
pub struct LoadedPlugin {
    /// The plugin's name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// The sha256 of its `.wasm`, hex.
    pub digest: String,
    /// Higher runs first.
    pub priority: i32,
    /// The config string handed to `init`.
    pub config: String,
    /// The compiled component.
    pub component: Component,
}

/// What `weftd status` shows of a plugin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginStatus {
    /// The plugin's name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// The sha256 of its `.wasm`.
    pub digest: String,
    /// Its priority.
    pub priority: i32,
    /// Hook calls made.
    pub calls: u64,
    /// Hook calls that failed.
    pub failures: u64,
    /// `active` or `quarantined`.
    pub state: String,
    /// The last failure.
    pub last_error: Option<String>,
    /// Counters the plugin reported (through `weft:plugin/metrics`).
    pub counters: BTreeMap<String, u64>,
}

/// How a policy question was answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// What the agent does.
    pub verdict: Verdict,
    /// The plugin that decided, `None` for the built-in default.
    pub decided_by: Option<String>,
}

/// Failure isolation settings.
#[derive(Debug, Clone)]
pub struct Isolation {
    /// Consecutive failures before a quarantine.
    pub failure_threshold: u32,
    /// The first quarantine's length; doubles each time, up to `max_quarantine`.
    pub quarantine: Duration,
    /// The longest quarantine.
    pub max_quarantine: Duration,
}

impl Default for Isolation {
    fn default() -> Self {
        Self {
            failure_threshold: 3,
            quarantine: Duration::from_secs(1),
            max_quarantine: Duration::from_secs(300),
        }
    }
}

struct Slot {
    plugin: LoadedPlugin,
    prepared: Prepared,
    instance: Option<Instance>,
    calls: u64,
    failures: u64,
    consecutive: u32,
    next_quarantine: Duration,
    quarantined_until: Option<Instant>,
    last_error: Option<String>,
    /// Counters of instances replaced after a failure, so status keeps counting.
    saved_counters: BTreeMap<String, u64>,
}

/// The loaded plugins of an agent.
pub struct PluginSet {
    runtime: Arc<Runtime>,
    mesh: MeshView,
    isolation: Isolation,
    slots: Vec<Slot>,
}

impl PluginSet {
    /// An empty set on `runtime`; plugins see the mesh through `mesh`.
    pub fn new(runtime: Arc<Runtime>, mesh: MeshView, isolation: Isolation) -> Self {
        Self {
            runtime,
            mesh,
            isolation,
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
        let prepared = self.runtime.prepare(&plugin.name, &plugin.component)?;
        let instance =
            self.runtime
                .instantiate_prepared(&prepared, &plugin.config, self.mesh.clone())?;
        self.slots.retain(|s| s.plugin.name != plugin.name);
        self.slots.push(Slot {
            plugin,
            prepared,
            instance: Some(instance),
            calls: 0,
            failures: 0,
            consecutive: 0,
            next_quarantine: self.isolation.quarantine,
            quarantined_until: None,
            last_error: None,
            saved_counters: BTreeMap::new(),
        });
        self.slots.sort_by(|a, b| {
            b.plugin
                .priority
                .cmp(&a.plugin.priority)
                .then(a.plugin.name.cmp(&b.plugin.name))
        });
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
        let max_wait = self.runtime.config().max_wait;
        let default = || Self::default_answer(request);
        for i in 0..self.slots.len() {
            let outcome = self.call(i, now, |instance| instance.regeneration_policy(request));
            let Some(outcome) = outcome else { continue };
            let decision = match outcome {
                Ok(d) => d,
                Err(()) => return default(),
            };
            match enforce(decision, max_wait) {
                Ok(Verdict::NoOpinion) => continue,
                Ok(verdict) => {
                    return Answer {
                        verdict,
                        decided_by: Some(self.slots[i].plugin.name.clone()),
                    }
                }
                Err(violation) => {
                    self.failed(i, now, violation.to_string());
                    return default();
                }
            }
        }
        default()
    }

    /// The built-in default's answer to `request` ([`default_verdict`]).
    pub fn default_answer(request: &RegenerationRequest) -> Answer {
        Answer {
            verdict: default_verdict(
                request.endpoint == EndpointKind::Host,
                request.ipsec,
                Duration::from_millis(request.default_timeout_ms),
            ),
            decided_by: None,
        }
    }

    /// Calls the "synced" hook of `resource` on every plugin.
    pub fn on_synced(&mut self, resource: Resource, cluster: &Cluster) {
        let now = Instant::now();
        for i in 0..self.slots.len() {
            let _ = self.call(i, now, |instance| instance.on_synced(resource, cluster));
        }
    }

    /// Calls the "synced" hook of `resource` on plugin `name` only.
    pub fn on_synced_of(&mut self, name: &str, resource: Resource, cluster: &Cluster) {
        let now = Instant::now();
        if let Some(i) = self.slots.iter().position(|s| s.plugin.name == name) {
            let _ = self.call(i, now, |instance| instance.on_synced(resource, cluster));
        }
    }

    /// Calls the "cluster disconnected" hook on every plugin.
    pub fn on_cluster_disconnected(&mut self, cluster: &Cluster) {
        let now = Instant::now();
        for i in 0..self.slots.len() {
            let _ = self.call(i, now, |instance| instance.on_cluster_disconnected(cluster));
        }
    }

    /// One call on slot `i`: `None` when the plugin is quarantined (not called),
    /// `Some(Err(()))` when it failed (already recorded).
    fn call<T>(
        &mut self,
        i: usize,
        now: Instant,
        f: impl FnOnce(&mut Instance) -> Result<T, CallError>,
    ) -> Option<Result<T, ()>> {
        let slot = &mut self.slots[i];
        if slot.quarantined_until.is_some_and(|until| now < until) {
            return None;
        }
        slot.calls += 1;
        if slot.instance.is_none() {
            match self.runtime.instantiate_prepared(
                &slot.prepared,
                &slot.plugin.config,
                self.mesh.clone(),
            ) {
                Ok(instance) => self.slots[i].instance = Some(instance),
                Err(e) => {
                    self.failed(i, now, e.to_string());
                    return Some(Err(()));
                }
            }
        }
        let slot = &mut self.slots[i];
        let result = f(slot.instance.as_mut().expect("instantiated above"));
        if let Some(dropped) = slot
            .instance
            .as_ref()
            .map(Instance::dropped_logs)
            .filter(|d| *d > 0)
        {
            tracing::warn!(plugin = %slot.plugin.name, dropped, "plugin log flood cut");
        }
        match result {
            Ok(v) => {
                let slot = &mut self.slots[i];
                slot.consecutive = 0;
                slot.quarantined_until = None;
                slot.next_quarantine = self.isolation.quarantine;
                Some(Ok(v))
            }
            Err(e) => {
                // A trapped instance is not entered again; what it counted is kept.
                let slot = &mut self.slots[i];
                if let Some(old) = slot.instance.take() {
                    for (name, n) in old.counters() {
                        *slot.saved_counters.entry(name.clone()).or_default() += n;
                    }
                }
                self.failed(i, now, e.to_string());
                Some(Err(()))
            }
        }
    }

    fn failed(&mut self, i: usize, now: Instant, error: String) {
        let isolation = &self.isolation;
        let slot = &mut self.slots[i];
        tracing::warn!(plugin = %slot.plugin.name, %error, "plugin call failed; the built-in default answers");
        slot.failures += 1;
        slot.consecutive += 1;
        slot.last_error = Some(error);
        if slot.consecutive >= isolation.failure_threshold {
            slot.quarantined_until = Some(now + slot.next_quarantine);
            tracing::warn!(plugin = %slot.plugin.name, for_ = ?slot.next_quarantine, "plugin quarantined");
            // The count is kept: one more failure after the quarantine quarantines
            // again, for twice as long. A success resets both.
            slot.next_quarantine = (slot.next_quarantine * 2).min(isolation.max_quarantine);
        }
    }

    /// Every plugin's status, in priority order.
    pub fn statuses(&self) -> Vec<PluginStatus> {
        self.statuses_at(Instant::now())
    }

    /// [`Self::statuses`] at a given time.
    pub fn statuses_at(&self, now: Instant) -> Vec<PluginStatus> {
        self.slots
            .iter()
            .map(|s| PluginStatus {
                name: s.plugin.name.clone(),
                version: s.plugin.version.clone(),
                digest: s.plugin.digest.clone(),
                priority: s.plugin.priority,
                calls: s.calls,
                failures: s.failures,
                state: if s.quarantined_until.is_some_and(|u| now < u) {
                    "quarantined"
                } else {
                    "active"
                }
                .into(),
                last_error: s.last_error.clone(),
                counters: {
                    let mut c = s.saved_counters.clone();
                    for (name, n) in s.instance.iter().flat_map(|i| i.counters()) {
                        *c.entry(name.clone()).or_default() += n;
                    }
                    c
                },
            })
            .collect()
    }
}
