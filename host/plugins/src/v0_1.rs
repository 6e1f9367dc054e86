//! The adapter that keeps `weft:plugin@0.1.0` plugins working (N−1): their imports are
//! served by the 0.2.0 host functions, their questions are asked in 0.1.0 terms and
//! their answers read back into 0.2.0 ones.
//!
//! What 0.1.0 cannot say: the endpoint's identity, namespace, labels and the reason
//! are dropped (`restoring` is set for a restore); a barrier name that is not one of
//! the four is a contract violation; there is no `peer-gc-policy`, so such a plugin
//! has no opinion on it.

use super::bindings::v0_1::weft::plugin as old;
use super::bindings::weft::plugin as new;
use super::contract::Violation;
use super::host_state::HostState;

// === impl HostState: the 0.1.0 imports ===

impl old::types::Host for HostState {}

impl old::log::Host for HostState {
    fn log(
        &mut self,
        level: old::log::Level,
        message: String,
        fields: Vec<(String, String)>,
    ) -> wasmtime::Result<()> {
        let level = match level {
            old::log::Level::Debug => new::log::Level::Debug,
            old::log::Level::Info => new::log::Level::Info,
            old::log::Level::Warn => new::log::Level::Warn,
            old::log::Level::Error => new::log::Level::Error,
        };
        new::log::Host::log(self, level, message, fields)
    }
}

impl old::metrics::Host for HostState {
    fn counter_add(&mut self, name: String, delta: u64) -> wasmtime::Result<()> {
        new::metrics::Host::counter_add(self, name, delta)
    }

    fn gauge_set(&mut self, name: String, value: i64) -> wasmtime::Result<()> {
        new::metrics::Host::gauge_set(self, name, value)
    }
}

impl old::mesh::Host for HostState {
    fn status(&mut self) -> wasmtime::Result<Vec<old::types::ClusterSync>> {
        Ok(new::mesh::Host::status(self)?
            .into_iter()
            .map(cluster_sync)
            .collect())
    }
}

impl old::clock::Host for HostState {
    fn now_ns(&mut self) -> wasmtime::Result<u64> {
        new::clock::Host::now_ns(self)
    }
}

// === conversions ===

fn cluster_sync(c: new::types::ClusterSync) -> old::types::ClusterSync {
    old::types::ClusterSync {
        name: c.name,
        connected: c.connected,
        nodes_synced: c.nodes_synced,
        ipcache_synced: c.ipcache_synced,
        identities_synced: c.identities_synced,
        services_synced: c.services_synced,
    }
}

/// A cluster, as a 0.1.0 sync hook sees it.
pub fn cluster(c: &weft_hooks::ClusterInfo) -> old::types::Cluster {
    let c = new::types::Cluster::from(c);
    old::types::Cluster {
        name: c.name,
        id: c.id,
        counts: old::types::ResourceCounts {
            nodes: c.counts.nodes,
            ipcache: c.counts.ipcache,
            identities: c.counts.identities,
            services: c.counts.services,
        },
    }
}

/// The regeneration question in 0.1.0 terms.
pub fn request(r: &weft_hooks::RegenerationRequest) -> old::types::RegenerationRequest {
    use weft_hooks::{EndpointKind, RegenerationReason};
    old::types::RegenerationRequest {
        endpoint: match r.endpoint.kind {
            EndpointKind::Host => old::types::EndpointKind::Host,
            EndpointKind::Workload => old::types::EndpointKind::Workload,
        },
        restoring: r.reason == RegenerationReason::Restore,
        ipsec: r.ipsec,
        wireguard: r.wireguard,
        default_timeout_ms: r.default_timeout_ms,
        clusters: r
            .clusters
            .iter()
            .cloned()
            .map(|c| cluster_sync(c.into()))
            .collect(),
    }
}

/// A 0.1.0 answer in 0.2.0 terms.
///
/// # Errors
/// [`Violation::UnknownBarrier`] for a barrier name that is none of the four.
pub fn decision(d: old::types::Decision) -> Result<new::types::Decision, Violation> {
    Ok(match d {
        old::types::Decision::Proceed => new::types::Decision::Proceed,
        old::types::Decision::NoOpinion => new::types::Decision::NoOpinion,
        old::types::Decision::Wait(w) => new::types::Decision::Wait(new::types::Wait {
            timeout_ms: w.timeout_ms,
            barriers: w
                .barriers
                .into_iter()
                .map(|name| barrier(&name).ok_or(Violation::UnknownBarrier { name }))
                .collect::<Result<_, _>>()?,
            clusters: w.clusters,
        }),
    })
}

fn barrier(name: &str) -> Option<new::types::Barrier> {
    use new::types::Barrier;
    Some(match name {
        "nodes" => Barrier::Nodes,
        "ipcache" => Barrier::Ipcache,
        "identities" => Barrier::Identities,
        "services" => Barrier::Services,
        _ => return None,
    })
}
