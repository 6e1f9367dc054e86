//! Reads the host's mesh view in every hook: its policy waits for the nodes of the
//! clusters that are not synced yet, and it counts the "nodes synced" calls. Used to
//! test a host import that does not return (the plugin host must give up on it).

use weft_plugin_sdk::{
    export_plugin, host, metrics, Barrier, Cluster, Decision, Plugin, RegenerationRequest, Wait,
};

struct MeshReader;

impl Plugin for MeshReader {
    fn init(config: String) -> Result<(), String> {
        if config == "read-mesh-in-init" {
            host::mesh_status();
        }
        Ok(())
    }

    fn on_nodes_synced(_cluster: Cluster) {
        let pending = host::mesh_status()
            .iter()
            .filter(|c| !c.nodes_synced)
            .count();
        metrics::counter_add("mesh_reader_nodes_synced", 1);
        metrics::gauge_set("mesh_reader_pending", pending as i64);
    }

    fn regeneration_policy(request: RegenerationRequest) -> Decision {
        let clusters: Vec<String> = host::mesh_status()
            .into_iter()
            .filter(|c| !c.nodes_synced)
            .map(|c| c.name)
            .collect();
        if clusters.is_empty() {
            return Decision::Proceed;
        }
        Decision::Wait(Wait {
            timeout_ms: request.default_timeout_ms,
            barriers: vec![Barrier::Nodes],
            clusters,
        })
    }
}

export_plugin!(MeshReader);
