//! Misbehaves: the policy hook logs one 10 MiB line. The host's limit on log bytes per
//! call must stop it.

use weft_plugin_sdk::{export_plugin, log, Decision, Plugin, RegenerationRequest};

struct HugeLog;

impl Plugin for HugeLog {
    fn regeneration_policy(_request: RegenerationRequest) -> Decision {
        log::info(&"x".repeat(10 << 20));
        Decision::Proceed
    }
}

export_plugin!(HugeLog);
