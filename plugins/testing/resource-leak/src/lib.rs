//! Misbehaves: the policy hook creates WASI timers and never drops them, growing the
//! host's resource table (host memory the memory cap does not see). The host's table
//! limit must stop it.

use wasip2::clocks::monotonic_clock::subscribe_duration;
use weft_plugin_sdk::{export_plugin, Decision, Plugin, RegenerationRequest};

struct ResourceLeak;

impl Plugin for ResourceLeak {
    fn regeneration_policy(_request: RegenerationRequest) -> Decision {
        for _ in 0..10_000_000u64 {
            std::mem::forget(subscribe_duration(u64::MAX));
        }
        Decision::Proceed
    }
}

export_plugin!(ResourceLeak);
