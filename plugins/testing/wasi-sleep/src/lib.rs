//! Misbehaves: the policy hook sleeps 30 s through WASI (`std::thread::sleep`, which
//! blocks inside a host call, where the epoch deadline does not reach). The host's
//! bounded poll must end it at the call's deadline.

use std::time::Duration;
use weft_plugin_sdk::{export_plugin, Decision, Plugin, RegenerationRequest};

struct WasiSleep;

impl Plugin for WasiSleep {
    fn regeneration_policy(_request: RegenerationRequest) -> Decision {
        std::thread::sleep(Duration::from_secs(30));
        Decision::Proceed
    }
}

export_plugin!(WasiSleep);
