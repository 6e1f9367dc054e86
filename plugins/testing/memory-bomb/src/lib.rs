//! Misbehaves: the policy hook allocates until memory runs out. The host's memory cap
//! must stop it.

use weft_plugin_sdk::{export_plugin, Decision, Plugin, RegenerationRequest};

struct MemoryBomb;

impl Plugin for MemoryBomb {
    fn regeneration_policy(_request: RegenerationRequest) -> Decision {
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        loop {
            hoard.push(vec![1u8; 1 << 20]);
            std::hint::black_box(&hoard);
        }
    }
}

export_plugin!(MemoryBomb);
