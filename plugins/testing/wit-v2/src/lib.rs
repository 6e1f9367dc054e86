//! Built against `weft:plugin@0.2.0` (a copy of the contract with another version):
//! the agent, which speaks 0.1.0, must refuse it and say why.

wit_bindgen::generate!({ path: "wit", world: "plugin" });

use exports::weft::plugin::hooks::{Cluster, Decision, Guest, RegenerationRequest};

struct V2;

impl Guest for V2 {
    fn init(_config: String) -> Result<(), String> {
        Ok(())
    }
    fn on_identities_synced(_cluster: Cluster) {}
    fn on_nodes_synced(_cluster: Cluster) {}
    fn on_ipcache_synced(_cluster: Cluster) {}
    fn on_services_synced(_cluster: Cluster) {}
    fn on_cluster_disconnected(_cluster: Cluster) {}
    fn regeneration_policy(_request: RegenerationRequest) -> Decision {
        Decision::Proceed
    }
}

export!(V2);
