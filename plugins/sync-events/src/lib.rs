//! Logs and counts every sync hook: `sync_events_<resource>` and
//! `sync_events_disconnected` counters, one log line per event.

use weft_plugin_sdk::{export_plugin, log, metrics, Cluster, Plugin};

struct SyncEvents;

fn record(what: &str, cluster: &Cluster) {
    let c = &cluster.counts;
    let counts = format!(
        "nodes={} ipcache={} identities={} services={}",
        c.nodes, c.ipcache, c.identities, c.services
    );
    let id = cluster.id.map_or("-".to_string(), |i| i.to_string());
    log::with_fields(
        log::Level::Info,
        &format!("{what} synced"),
        &[("cluster", &cluster.name), ("id", &id), ("counts", &counts)],
    );
    metrics::counter_add(&format!("sync_events_{what}"), 1);
}

impl Plugin for SyncEvents {
    fn on_identities_synced(cluster: Cluster) {
        record("identities", &cluster);
    }
    fn on_nodes_synced(cluster: Cluster) {
        record("nodes", &cluster);
    }
    fn on_ipcache_synced(cluster: Cluster) {
        record("ipcache", &cluster);
    }
    fn on_services_synced(cluster: Cluster) {
        record("services", &cluster);
    }
    fn on_cluster_disconnected(cluster: Cluster) {
        log::with_fields(
            log::Level::Warn,
            "cluster disconnected",
            &[("cluster", &cluster.name)],
        );
        metrics::counter_add("sync_events_disconnected", 1);
    }
}

export_plugin!(SyncEvents);
