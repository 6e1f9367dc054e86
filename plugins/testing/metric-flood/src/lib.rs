//! Misbehaves: the policy hook reports a million counter and gauge names, each new, to
//! grow the host's metric maps. The host's limit on names must stop it.

use weft_plugin_sdk::{export_plugin, metrics, Decision, Plugin, RegenerationRequest};

struct MetricFlood;

impl Plugin for MetricFlood {
    fn regeneration_policy(_request: RegenerationRequest) -> Decision {
        for i in 0..1_000_000u32 {
            metrics::counter_add(&format!("flood_{i}"), 1);
            metrics::gauge_set(&format!("flood_gauge_{i}"), 1);
        }
        Decision::Proceed
    }
}

export_plugin!(MetricFlood);
