//! Misbehaves: reads a file of the node. The sandbox links no filesystem, so the host
//! must refuse the plugin at load, naming the import.

use weft_plugin_sdk::{export_plugin, Decision, Plugin, RegenerationRequest};

struct FsReader;

impl Plugin for FsReader {
    fn regeneration_policy(_request: RegenerationRequest) -> Decision {
        match std::fs::read("/etc/shadow") {
            Ok(_) => Decision::Proceed,
            Err(_) => Decision::NoOpinion,
        }
    }
}

export_plugin!(FsReader);
