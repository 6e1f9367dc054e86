//! Misbehaves: asks to wait for ever, and to hold restored WireGuard peers for ever.
//! The host must clamp both. (A barrier that does not exist cannot be said in 0.2.0;
//! the 0.1.0 plugin under `testing/v0-1` says one.)

use weft_plugin_sdk::{
    export_plugin, Barrier, Decision, PeerGcDecision, PeerGcRequest, Plugin, RegenerationRequest,
    Wait,
};

struct OutOfBounds;

impl Plugin for OutOfBounds {
    fn regeneration_policy(_request: RegenerationRequest) -> Decision {
        Decision::Wait(Wait {
            timeout_ms: u64::MAX,
            barriers: vec![Barrier::Ipcache],
            clusters: vec![],
        })
    }

    fn peer_gc_policy(_request: PeerGcRequest) -> PeerGcDecision {
        PeerGcDecision::Hold(u64::MAX)
    }
}

export_plugin!(OutOfBounds);
