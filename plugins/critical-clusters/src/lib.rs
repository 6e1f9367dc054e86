//! An example vendor plugin: endpoint regeneration waits only for the clusters listed
//! in its config (comma-separated names), and lets the others go.

use std::sync::OnceLock;
use weft_plugin_sdk::{export_plugin, Barrier, Decision, Plugin, RegenerationRequest, Wait};

static CRITICAL: OnceLock<Vec<String>> = OnceLock::new();

struct CriticalClusters;

impl Plugin for CriticalClusters {
    fn init(config: String) -> Result<(), String> {
        let names: Vec<String> = config
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(String::from)
            .collect();
        if names.is_empty() {
            return Err("config must name at least one cluster, comma-separated".into());
        }
        CRITICAL
            .set(names)
            .map_err(|_| "init called twice".to_string())
    }

    fn regeneration_policy(request: RegenerationRequest) -> Decision {
        let critical = CRITICAL.get().cloned().unwrap_or_default();
        let pending = request
            .clusters
            .iter()
            .any(|c| critical.contains(&c.name) && !(c.ipcache_synced && c.identities_synced));
        if !pending {
            return Decision::Proceed;
        }
        Decision::Wait(Wait {
            timeout_ms: request.default_timeout_ms,
            barriers: vec![Barrier::Ipcache, Barrier::Identities],
            clusters: critical,
        })
    }
}

export_plugin!(CriticalClusters);
