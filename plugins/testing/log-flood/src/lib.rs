//! Misbehaves: logs 100,000 lines per hook call. The host must cut the flood.

use weft_plugin_sdk::{export_plugin, log, Decision, Plugin, RegenerationRequest};

struct LogFlood;

impl Plugin for LogFlood {
    fn regeneration_policy(_request: RegenerationRequest) -> Decision {
        for i in 0..100_000 {
            log::info(&format!("line {i}"));
        }
        Decision::Proceed
    }
}

export_plugin!(LogFlood);
