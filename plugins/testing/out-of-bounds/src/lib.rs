//! Misbehaves: asks to wait for ever, or for a barrier that does not exist, depending
//! on its config ("forever" or "unknown-barrier").

use std::sync::OnceLock;
use weft_plugin_sdk::{export_plugin, Decision, Plugin, RegenerationRequest, Wait};

static MODE: OnceLock<String> = OnceLock::new();

struct OutOfBounds;

impl Plugin for OutOfBounds {
    fn init(config: String) -> Result<(), String> {
        MODE.set(config)
            .map_err(|_| "init called twice".to_string())
    }

    fn regeneration_policy(_request: RegenerationRequest) -> Decision {
        let unknown = MODE.get().is_some_and(|m| m == "unknown-barrier");
        Decision::Wait(Wait {
            timeout_ms: u64::MAX,
            barriers: vec![if unknown {
                "pods".into()
            } else {
                "ipcache".into()
            }],
            clusters: vec![],
        })
    }
}

export_plugin!(OutOfBounds);
