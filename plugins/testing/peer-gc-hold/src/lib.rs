//! Holds the removal of restored WireGuard peers for as many milliseconds as its
//! config says, and counts what it was asked about (`peer_gc_asked`,
//! `peer_gc_peers`).

use std::sync::OnceLock;
use weft_plugin_sdk::{export_plugin, metrics, PeerGcDecision, PeerGcRequest, Plugin};

static HOLD_MS: OnceLock<u64> = OnceLock::new();

struct PeerGcHold;

impl Plugin for PeerGcHold {
    fn init(config: String) -> Result<(), String> {
        let ms = config
            .trim()
            .parse()
            .map_err(|e| format!("config must be milliseconds: {e}"))?;
        HOLD_MS.set(ms).map_err(|_| "init called twice".to_string())
    }

    fn peer_gc_policy(request: PeerGcRequest) -> PeerGcDecision {
        metrics::counter_add("peer_gc_asked", 1);
        metrics::counter_add("peer_gc_peers", request.peers.len() as u64);
        PeerGcDecision::Hold(HOLD_MS.get().copied().unwrap_or(0))
    }
}

export_plugin!(PeerGcHold);
