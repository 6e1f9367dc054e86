//! Misbehaves: the policy hook never returns. The host's deadline must stop it.

use weft_plugin_sdk::{export_plugin, Decision, Plugin, RegenerationRequest};

struct Spin;

impl Plugin for Spin {
    fn regeneration_policy(_request: RegenerationRequest) -> Decision {
        let mut n: u64 = 0;
        loop {
            n = std::hint::black_box(n.wrapping_add(1));
        }
    }
}

export_plugin!(Spin);
