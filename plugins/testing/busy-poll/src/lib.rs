//! Misbehaves: the policy hook polls a zero-length WASI timer in a loop for 30 s: many
//! short host calls, none of which blocks. The epoch deadline must end it.

use std::time::{Duration, Instant};
use wasip2::clocks::monotonic_clock::subscribe_duration;
use wasip2::io::poll::poll;
use weft_plugin_sdk::{export_plugin, Decision, Plugin, RegenerationRequest};

struct BusyPoll;

impl Plugin for BusyPoll {
    fn regeneration_policy(_request: RegenerationRequest) -> Decision {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(30) {
            let timer = subscribe_duration(0);
            std::hint::black_box(poll(&[&timer]));
        }
        Decision::Proceed
    }
}

export_plugin!(BusyPoll);
