//! Built against a copy of `weft:plugin@0.1.0` whose `hooks` lack
//! `regeneration-policy`: the agent must refuse it and name the missing export.

wit_bindgen::generate!({ path: "wit", world: "plugin" });

use exports::weft::plugin::hooks::{Cluster, Guest};

struct MissingExport;

impl Guest for MissingExport {
    fn init(_config: String) -> Result<(), String> {
        Ok(())
    }
    fn on_identities_synced(_cluster: Cluster) {}
    fn on_nodes_synced(_cluster: Cluster) {}
    fn on_ipcache_synced(_cluster: Cluster) {}
    fn on_services_synced(_cluster: Cluster) {}
    fn on_cluster_disconnected(_cluster: Cluster) {}
}

export!(MissingExport);
