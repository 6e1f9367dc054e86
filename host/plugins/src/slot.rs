//! One loaded plugin: its instance, made again after a failure, and its record of calls,
//! failures and quarantine. The unit both [`super::PluginSet`] (in the caller's
//! thread) and [`super::PluginHost`] (one thread per plugin) run.
//!
//! The rules:
//! - a call that traps, runs out of time or memory, goes past a host bound, or answers
//!   outside the contract fails that call only: it is logged and counted, and the
//!   instance is replaced before the plugin's next call;
//! - after `failure_threshold` consecutive failures a plugin is quarantined (not
//!   called), and is tried again after a back-off that doubles with each quarantine;
//!   a success resets both.

use super::contract::{enforce, enforce_peer_gc};
use super::host_state::MeshView;
use super::instance::{CallError, Instance};
use super::runtime::{Prepared, Runtime};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use wasmtime::component::Component;
use weft_hooks::{
    ClusterInfo, PeerGcRequest, PeerGcVerdict, RegenerationRequest, Resource, Verdict,
};

/// A plugin ready to run: its compiled component and its manifest's facts.
#[derive(Clone)]
pub struct LoadedPlugin {
    /// The plugin's name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// The sha256 of its `.wasm`, hex.
    pub digest: String,
    /// The `weft:plugin` version it exports.
    pub wit: String,
    /// Higher runs first.
    pub priority: i32,
    /// The config string handed to `init`.
    pub config: String,
    /// Runs beside the live plugin of the same name; never acted on.
    pub shadow: bool,
    /// The trusted key that signed its manifest; `None` when loaded unsigned.
    pub signed_by: Option<String>,
    /// The compiled component.
    pub component: Component,
}

impl LoadedPlugin {
    /// Plugin `name` from `component`, with the defaults of a manifest that sets only
    /// name and component: version 0.0.0, priority 0, empty config, live, unsigned,
    /// digest unknown (`-`); its WIT version is read from the instance when it starts.
    pub fn new(name: &str, component: Component) -> Self {
        Self {
            name: name.into(),
            version: "0.0.0".into(),
            digest: "-".into(),
            wit: String::new(),
            priority: 0,
            config: String::new(),
            shadow: false,
            signed_by: None,
            component,
        }
    }
}

/// Every cause a failed call is counted under: a call's [`CallError::cause`], and
/// `instantiate` and `stall`. Metrics show each at 0 from a plugin's load on.
///
/// [`CallError::cause`]: super::CallError::cause
pub const FAILURE_CAUSES: [&str; 7] = [
    "deadline",
    "memory",
    "limit",
    "contract",
    "trap",
    "instantiate",
    "stall",
];

/// What `weftd status` shows of a plugin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginStatus {
    /// The plugin's name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// The sha256 of its `.wasm`.
    pub digest: String,
    /// The `weft:plugin` version it exports.
    #[serde(default)]
    pub wit: String,
    /// The trusted key that signed it; `None` when loaded unsigned.
    #[serde(default)]
    pub signed_by: Option<String>,
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
    /// Failed calls by cause: `deadline`, `memory`, `limit`, `contract`, `trap`,
    /// `instantiate` (a new instance could not be made) or `stall` (its thread did not
    /// answer within the stall bound): [`FAILURE_CAUSES`]. Only causes seen are listed.
    #[serde(default)]
    pub failure_causes: BTreeMap<String, u64>,
    /// Times it was quarantined.
    #[serde(default)]
    pub quarantines: u64,
    /// How long its calls took inside the instance.
    #[serde(default)]
    pub latency: weft_hooks::Latency,
}

/// One plugin's answer to a call: `None` when it was not called (quarantined),
/// `Some(Err(reason))` when the call failed (already recorded and counted).
pub type Outcome<V> = Option<Result<V, String>>;

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

/// A plugin's calls, failures and quarantine: what outlives its instances (and, in
/// the plugin host, its thread).
#[derive(Debug, Clone)]
pub struct Record {
    calls: u64,
    failures: u64,
    consecutive: u32,
    next_quarantine: Duration,
    quarantined_until: Option<Instant>,
    last_error: Option<String>,
    /// Counters of instances replaced after a failure, so status keeps counting.
    saved_counters: BTreeMap<String, u64>,
    /// The live instance's counters, as of the last call.
    live_counters: BTreeMap<String, u64>,
    failure_causes: BTreeMap<&'static str, u64>,
    quarantines: u64,
    latency: weft_hooks::Latency,
}

impl Record {
    fn new(isolation: &Isolation) -> Self {
        Self {
            calls: 0,
            failures: 0,
            consecutive: 0,
            next_quarantine: isolation.quarantine,
            quarantined_until: None,
            last_error: None,
            saved_counters: BTreeMap::new(),
            live_counters: BTreeMap::new(),
            failure_causes: BTreeMap::new(),
            quarantines: 0,
            latency: weft_hooks::Latency::new(weft_hooks::CALL_BOUNDS_US),
        }
    }

    /// Calls that failed.
    pub fn failures(&self) -> u64 {
        self.failures
    }

    /// Whether the plugin is in quarantine at `now`.
    pub fn quarantined(&self, now: Instant) -> bool {
        self.quarantined_until.is_some_and(|until| now < until)
    }

    /// Records a failure of `cause` ([`PluginStatus::failure_causes`]); the
    /// threshold-th in a row starts a quarantine.
    pub fn failed(
        &mut self,
        plugin: &str,
        isolation: &Isolation,
        now: Instant,
        cause: &'static str,
        error: String,
    ) {
        tracing::warn!(plugin, cause, %error, "plugin call failed; the built-in default answers");
        self.failures += 1;
        *self.failure_causes.entry(cause).or_default() += 1;
        self.consecutive += 1;
        self.last_error = Some(error);
        if self.consecutive >= isolation.failure_threshold {
            self.quarantine(plugin, isolation, now);
        }
    }

    /// Quarantines the plugin now, for the current back-off, and doubles it. The
    /// consecutive count is kept: one more failure after the quarantine quarantines
    /// again. A success resets both.
    pub fn quarantine(&mut self, plugin: &str, isolation: &Isolation, now: Instant) {
        self.quarantined_until = Some(now + self.next_quarantine);
        self.quarantines += 1;
        tracing::warn!(plugin, for_ = ?self.next_quarantine, "plugin quarantined");
        self.next_quarantine = (self.next_quarantine * 2).min(isolation.max_quarantine);
    }

    /// A call that failed outside the instance (it never answered): counted, and the
    /// plugin quarantined at once.
    pub fn stalled(&mut self, plugin: &str, isolation: &Isolation, now: Instant, error: String) {
        self.calls += 1;
        self.failures += 1;
        *self.failure_causes.entry("stall").or_default() += 1;
        self.consecutive = self.consecutive.max(isolation.failure_threshold);
        tracing::error!(plugin, %error, "plugin stalled; the built-in default answers");
        self.last_error = Some(error);
        self.quarantine(plugin, isolation, now);
    }

    /// Keeps what a replaced instance counted.
    fn retire_counters(&mut self) {
        // A plugin chooses its counters' values: sums saturate rather than wrap.
        for (name, n) in std::mem::take(&mut self.live_counters) {
            let saved = self.saved_counters.entry(name).or_default();
            *saved = saved.saturating_add(n);
        }
    }

    /// The plugin's status at `now`.
    pub fn status(&self, plugin: &LoadedPlugin, now: Instant) -> PluginStatus {
        let mut counters = self.saved_counters.clone();
        for (name, n) in &self.live_counters {
            let sum = counters.entry(name.clone()).or_default();
            *sum = sum.saturating_add(*n);
        }
        PluginStatus {
            name: plugin.name.clone(),
            version: plugin.version.clone(),
            digest: plugin.digest.clone(),
            wit: plugin.wit.clone(),
            signed_by: plugin.signed_by.clone(),
            priority: plugin.priority,
            calls: self.calls,
            failures: self.failures,
            state: if self.quarantined(now) {
                "quarantined"
            } else {
                "active"
            }
            .into(),
            last_error: self.last_error.clone(),
            counters,
            failure_causes: self
                .failure_causes
                .iter()
                .map(|(c, n)| ((*c).to_owned(), *n))
                .collect(),
            quarantines: self.quarantines,
            latency: self.latency.clone(),
        }
    }
}

/// One plugin and its live instance.
pub struct Slot {
    pub(crate) plugin: LoadedPlugin,
    prepared: Prepared,
    instance: Option<Instance>,
    pub(crate) record: Record,
}

/// Who runs a slot's calls: the runtime, what plugins see of the mesh, and the
/// isolation rules.
#[derive(Clone)]
pub struct Context {
    pub runtime: Arc<Runtime>,
    pub mesh: MeshView,
    pub isolation: Isolation,
}

impl Slot {
    /// Checks `plugin` against the contract, instantiates it and calls its `init`.
    ///
    /// # Errors
    /// [`super::Error`] when it cannot be instantiated or its `init` fails.
    pub fn start(cx: &Context, mut plugin: LoadedPlugin) -> Result<Self, super::Error> {
        let prepared = cx.runtime.prepare(&plugin.name, &plugin.component)?;
        let instance =
            cx.runtime
                .instantiate_prepared(&prepared, &plugin.config, cx.mesh.clone())?;
        if plugin.wit.is_empty() {
            plugin.wit = instance.wit().into();
        }
        Ok(Self {
            plugin,
            prepared,
            instance: Some(instance),
            record: Record::new(&cx.isolation),
        })
    }

    /// A slot for `plugin` with no instance yet (made at its first call), carrying on
    /// `record`: the plugin host's replacement for a slot whose thread stalled.
    ///
    /// # Errors
    /// [`super::Error::Instantiate`] when the component does not fit the contract.
    pub fn resume(
        cx: &Context,
        plugin: LoadedPlugin,
        record: Record,
    ) -> Result<Self, super::Error> {
        let prepared = cx.runtime.prepare(&plugin.name, &plugin.component)?;
        Ok(Self {
            plugin,
            prepared,
            instance: None,
            record,
        })
    }

    /// The plugin's status at `now`.
    pub fn status(&self, now: Instant) -> PluginStatus {
        self.record.status(&self.plugin, now)
    }

    /// The policy hook, bounded by the contract ([`Outcome`]).
    pub fn regeneration_policy(
        &mut self,
        cx: &Context,
        request: &RegenerationRequest,
        now: Instant,
    ) -> Outcome<Verdict> {
        let max_wait = cx.runtime.config().max_wait;
        let decision = self.call(cx, now, |i| i.regeneration_policy(request))?;
        Some(decision.map(|d| enforce(d, max_wait)))
    }

    /// The peer-gc-policy hook, bounded by the contract; as [`Self::regeneration_policy`].
    pub fn peer_gc_policy(
        &mut self,
        cx: &Context,
        request: &PeerGcRequest,
        now: Instant,
    ) -> Outcome<PeerGcVerdict> {
        let max_wait = cx.runtime.config().max_wait;
        let decision = self.call(cx, now, |i| i.peer_gc_policy(request))?;
        Some(decision.map(|d| enforce_peer_gc(d, max_wait)))
    }

    /// The "synced" hook of `resource`.
    pub fn on_synced(&mut self, cx: &Context, resource: Resource, cluster: &ClusterInfo) {
        let _ = self.call(cx, Instant::now(), |i| i.on_synced(resource, cluster));
    }

    /// The "cluster disconnected" hook.
    pub fn on_cluster_disconnected(&mut self, cx: &Context, cluster: &ClusterInfo) {
        let _ = self.call(cx, Instant::now(), |i| i.on_cluster_disconnected(cluster));
    }

    /// One call ([`Outcome`]).
    fn call<T>(
        &mut self,
        cx: &Context,
        now: Instant,
        f: impl FnOnce(&mut Instance) -> Result<T, CallError>,
    ) -> Outcome<T> {
        if self.record.quarantined(now) {
            return None;
        }
        self.record.calls += 1;
        let name = self.plugin.name.clone();
        if self.instance.is_none() {
            match cx.runtime.instantiate_prepared(
                &self.prepared,
                &self.plugin.config,
                cx.mesh.clone(),
            ) {
                Ok(instance) => self.instance = Some(instance),
                Err(e) => {
                    let reason = weft_sys::error_chain(&e);
                    self.record
                        .failed(&name, &cx.isolation, now, "instantiate", reason.clone());
                    return Some(Err(reason));
                }
            }
        }
        let instance = self.instance.as_mut().expect("instantiated above");
        let started = std::time::Instant::now();
        let result = f(instance);
        self.record.latency.observe(started.elapsed());
        let dropped = instance.dropped_logs();
        if dropped > 0 {
            tracing::warn!(plugin = %name, dropped, "plugin log flood cut");
        }
        if let Some(counters) = instance.counters_if_changed() {
            self.record.live_counters.clone_from(counters);
        }
        match result {
            Ok(v) => {
                let r = &mut self.record;
                r.consecutive = 0;
                r.quarantined_until = None;
                r.next_quarantine = cx.isolation.quarantine;
                Some(Ok(v))
            }
            Err(e) => {
                // A failed instance is not entered again; what it counted is kept.
                self.instance = None;
                self.record.retire_counters();
                let reason = e.to_string();
                self.record
                    .failed(&name, &cx.isolation, now, e.cause(), reason.clone());
                Some(Err(reason))
            }
        }
    }
}
