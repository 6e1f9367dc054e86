//! Built against the previous contract, `weft:plugin@0.1.0` (`plugin-sdk/wit-0.1.0`),
//! as a vendor's plugin built before 0.2.0 was: the agent must keep loading it through
//! its adapter. It uses every 0.1.0 import and answers in 0.1.0 terms:
//! - its policy waits for the named barriers (config: comma-separated names,
//!   "ipcache,identities" when empty), up to the default timeout, for the clusters the
//!   mesh view says are not synced; a restore of the host endpoint is counted;
//! - every sync hook is counted (`v0_1_<resource>`, `v0_1_disconnected`).

wit_bindgen::generate!({ path: "../../../plugin-sdk/wit-0.1.0", world: "plugin" });

use exports::weft::plugin::hooks::{Cluster, Decision, Guest, RegenerationRequest};
use std::sync::OnceLock;
use weft::plugin::types::{EndpointKind, Wait};
use weft::plugin::{clock, log, mesh, metrics};

static BARRIERS: OnceLock<Vec<String>> = OnceLock::new();

struct V01;

fn count(what: &str, cluster: &Cluster) {
    metrics::counter_add(&format!("v0_1_{what}"), 1);
    log::log(
        log::Level::Info,
        &format!("{what} synced"),
        &[("cluster".into(), cluster.name.clone())],
    );
}

impl Guest for V01 {
    fn init(config: String) -> Result<(), String> {
        let names: Vec<String> = config
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(String::from)
            .collect();
        let names = if names.is_empty() {
            vec!["ipcache".into(), "identities".into()]
        } else {
            names
        };
        BARRIERS.set(names).map_err(|_| "init called twice".into())
    }
    fn on_identities_synced(cluster: Cluster) {
        count("identities", &cluster);
    }
    fn on_nodes_synced(cluster: Cluster) {
        count("nodes", &cluster);
    }
    fn on_ipcache_synced(cluster: Cluster) {
        count("ipcache", &cluster);
    }
    fn on_services_synced(cluster: Cluster) {
        count("services", &cluster);
    }
    fn on_cluster_disconnected(cluster: Cluster) {
        count("disconnected", &cluster);
    }
    fn regeneration_policy(request: RegenerationRequest) -> Decision {
        if request.restoring && request.endpoint == EndpointKind::Host {
            metrics::counter_add("v0_1_host_restores", 1);
        }
        metrics::gauge_set("v0_1_asked_at", clock::now_ns() as i64);
        let pending: Vec<String> = mesh::status()
            .into_iter()
            .filter(|c| !(c.ipcache_synced && c.identities_synced))
            .map(|c| c.name)
            .collect();
        Decision::Wait(Wait {
            timeout_ms: request.default_timeout_ms,
            barriers: BARRIERS.get().cloned().unwrap_or_default(),
            clusters: pending,
        })
    }
}

export!(V01);
