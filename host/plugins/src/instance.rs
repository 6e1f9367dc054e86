//! A live plugin instance, whichever contract version it speaks: one `Store`, one
//! component instance, a deadline per call; and how a call can fail.

use super::bindings::v0_1;
use super::bindings::weft::plugin::types::{self as wit, Decision, PeerGcDecision};
use super::bindings::Plugin as Current;
use super::contract::Violation;
use super::host_state::{ticks, HostState, LimitExceeded};
use super::wasi::BlockedPastDeadline;
use std::time::Duration;
use wasmtime::Store;
use weft_hooks::{ClusterInfo, PeerGcRequest, RegenerationRequest, Resource};

/// How one call failed. The instance that failed is not used again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// The call ran past its deadline.
    #[error("deadline exceeded")]
    Deadline,
    /// The plugin hit its memory cap.
    #[error("memory cap exceeded")]
    MemoryCap,
    /// The plugin went past a host-side bound (log bytes, metric names, host
    /// resources, table elements).
    #[error("limit exceeded: {what}")]
    Limit {
        /// Which bound, and its value.
        what: String,
    },
    /// The plugin answered outside the contract (a 0.1.0 plugin naming an unknown
    /// barrier).
    #[error("contract: {0}")]
    Contract(Violation),
    /// The plugin trapped.
    #[error("trap: {reason}")]
    Trap {
        /// wasmtime's description.
        reason: String,
    },
}

impl CallError {
    /// The cause as metrics and status name it: `deadline`, `memory`, `limit`,
    /// `contract` or `trap`.
    pub fn cause(&self) -> &'static str {
        match self {
            CallError::Deadline => "deadline",
            CallError::MemoryCap => "memory",
            CallError::Limit { .. } => "limit",
            CallError::Contract(_) => "contract",
            CallError::Trap { .. } => "trap",
        }
    }
}

impl CallError {
    pub(crate) fn from_wasmtime(e: &wasmtime::Error) -> Self {
        if matches!(e.downcast_ref(), Some(wasmtime::Trap::Interrupt))
            || e.downcast_ref::<BlockedPastDeadline>().is_some()
        {
            return CallError::Deadline;
        }
        if let Some(limit) = e.downcast_ref::<LimitExceeded>() {
            return CallError::Limit {
                what: limit.to_string(),
            };
        }
        if let Some(wasmtime::component::ResourceTableError::Full) = e.downcast_ref() {
            return CallError::Limit {
                what: "host resources (WASI handles) over their limit".into(),
            };
        }
        // wasmtime says these in words only (`StoreLimits` with trap_on_grow_failure).
        let text = format!("{e:#}");
        if text.contains("forcing trap when growing memory") {
            CallError::MemoryCap
        } else if text.contains("forcing trap when growing table") {
            CallError::Limit {
                what: "table elements over their limit".into(),
            }
        } else {
            CallError::Trap { reason: text }
        }
    }
}

/// The instantiated hooks, of the contract version the plugin speaks.
pub(crate) enum Hooks {
    Current(Current),
    V0_1(v0_1::Plugin),
}

/// A live plugin instance: one `Store`, one component instance.
pub struct Instance {
    store: Store<HostState>,
    hooks: Hooks,
    deadline: Duration,
}

fn failed(e: wasmtime::Error) -> CallError {
    CallError::from_wasmtime(&e)
}

impl Instance {
    pub(crate) fn new(store: Store<HostState>, hooks: Hooks, deadline: Duration) -> Self {
        Self {
            store,
            hooks,
            deadline,
        }
    }

    fn prepare(&mut self) {
        self.store.set_epoch_deadline(ticks(self.deadline));
        self.store.data_mut().begin_call(ticks(self.deadline));
    }

    /// The `weft:plugin` version the plugin speaks.
    pub fn wit(&self) -> &'static str {
        match self.hooks {
            Hooks::Current(_) => super::bindings::VERSION,
            Hooks::V0_1(_) => v0_1::VERSION,
        }
    }

    /// Calls `init`: `Ok(Err(reason))` when the plugin refuses its config.
    pub(crate) fn init(&mut self, config: &str) -> Result<Result<(), String>, CallError> {
        self.prepare();
        let store = &mut self.store;
        match &self.hooks {
            Hooks::Current(b) => b.weft_plugin_hooks().call_init(store, config),
            Hooks::V0_1(b) => b.weft_plugin_hooks().call_init(store, config),
        }
        .map_err(failed)
    }

    /// Log lines beyond the budget in the last call (dropped, not logged).
    pub fn dropped_logs(&self) -> u32 {
        self.store.data().dropped_logs()
    }

    /// Counters the plugin reported.
    pub fn counters(&self) -> &std::collections::BTreeMap<String, u64> {
        &self.store.data().counters
    }

    /// The counters, when they changed since the last time this was asked.
    pub fn counters_if_changed(&mut self) -> Option<&std::collections::BTreeMap<String, u64>> {
        let state = self.store.data_mut();
        std::mem::take(&mut state.counters_changed).then_some(&state.counters)
    }

    /// Calls the policy hook (through the adapter for a 0.1.0 plugin).
    ///
    /// # Errors
    /// [`CallError`] when the call trapped, ran out of time or memory, or answered
    /// outside the contract.
    pub fn regeneration_policy(
        &mut self,
        request: &RegenerationRequest,
    ) -> Result<Decision, CallError> {
        self.prepare();
        let store = &mut self.store;
        match &self.hooks {
            Hooks::Current(b) => b
                .weft_plugin_hooks()
                .call_regeneration_policy(store, &request.into())
                .map_err(failed),
            Hooks::V0_1(b) => {
                let old = super::v0_1::request(request);
                let d = b
                    .weft_plugin_hooks()
                    .call_regeneration_policy(store, &old)
                    .map_err(failed)?;
                super::v0_1::decision(d).map_err(CallError::Contract)
            }
        }
    }

    /// Calls the peer-gc-policy hook; a 0.1.0 plugin has no opinion.
    ///
    /// # Errors
    /// [`CallError`] when the call trapped, ran out of time or memory.
    pub fn peer_gc_policy(&mut self, request: &PeerGcRequest) -> Result<PeerGcDecision, CallError> {
        self.prepare();
        match &self.hooks {
            Hooks::Current(b) => b
                .weft_plugin_hooks()
                .call_peer_gc_policy(&mut self.store, &request.into())
                .map_err(failed),
            Hooks::V0_1(_) => Ok(PeerGcDecision::NoOpinion),
        }
    }

    /// Calls the "synced" hook of `resource`.
    ///
    /// # Errors
    /// [`CallError`] when the call trapped, ran out of time or memory.
    pub fn on_synced(
        &mut self,
        resource: Resource,
        cluster: &ClusterInfo,
    ) -> Result<(), CallError> {
        self.prepare();
        let store = &mut self.store;
        match &self.hooks {
            Hooks::Current(b) => {
                let (h, cluster) = (b.weft_plugin_hooks(), &wit::Cluster::from(cluster));
                match resource {
                    Resource::Nodes => h.call_on_nodes_synced(store, cluster),
                    Resource::IpCache => h.call_on_ipcache_synced(store, cluster),
                    Resource::Identities => h.call_on_identities_synced(store, cluster),
                    Resource::Services => h.call_on_services_synced(store, cluster),
                }
            }
            Hooks::V0_1(b) => {
                let (h, cluster) = (b.weft_plugin_hooks(), &super::v0_1::cluster(cluster));
                match resource {
                    Resource::Nodes => h.call_on_nodes_synced(store, cluster),
                    Resource::IpCache => h.call_on_ipcache_synced(store, cluster),
                    Resource::Identities => h.call_on_identities_synced(store, cluster),
                    Resource::Services => h.call_on_services_synced(store, cluster),
                }
            }
        }
        .map_err(failed)
    }

    /// Calls the "cluster disconnected" hook.
    ///
    /// # Errors
    /// [`CallError`] when the call trapped, ran out of time or memory.
    pub fn on_cluster_disconnected(&mut self, cluster: &ClusterInfo) -> Result<(), CallError> {
        self.prepare();
        let store = &mut self.store;
        match &self.hooks {
            Hooks::Current(b) => b
                .weft_plugin_hooks()
                .call_on_cluster_disconnected(store, &cluster.into()),
            Hooks::V0_1(b) => b
                .weft_plugin_hooks()
                .call_on_cluster_disconnected(store, &super::v0_1::cluster(cluster)),
        }
        .map_err(failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cause_a_call_can_fail_with_is_one_metrics_show_from_the_start() {
        let errors = [
            CallError::Deadline,
            CallError::MemoryCap,
            CallError::Limit { what: "x".into() },
            CallError::Contract(Violation::UnknownBarrier { name: "x".into() }),
            CallError::Trap { reason: "x".into() },
        ];
        for e in errors {
            assert!(crate::FAILURE_CAUSES.contains(&e.cause()), "{}", e.cause());
        }
    }
}
