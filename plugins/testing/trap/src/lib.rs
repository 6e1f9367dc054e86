//! Misbehaves: every hook panics, which traps.

use weft_plugin_sdk::{export_plugin, Cluster, Decision, Plugin, RegenerationRequest};

struct Trap;

impl Plugin for Trap {
    fn on_identities_synced(cluster: Cluster) {
        panic!("no identities for {}", cluster.name);
    }

    fn regeneration_policy(_request: RegenerationRequest) -> Decision {
        panic!("no policy");
    }
}

export_plugin!(Trap);
