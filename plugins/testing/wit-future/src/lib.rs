//! Built against `weft:plugin@0.99.0` (a copy of the contract with a future version):
//! the agent, which does not speak it, must refuse it and say why.

wit_bindgen::generate!({ path: "wit", world: "plugin" });

use exports::weft::plugin::hooks::{Cluster, Decision, Guest, RegenerationRequest};

struct Future;

impl Guest for Future {
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

export!(Future);
