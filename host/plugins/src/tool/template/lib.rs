//! {{name}}: a weft plugin. Start from the policy below, keep the decision logic in
//! plain functions (they are unit-tested natively with `cargo test`), and let the
//! hooks call them.

use weft_plugin_sdk::{
    export_plugin, log, metrics, Barrier, Cluster, Decision, EndpointKind, Plugin,
    RegenerationRequest, Wait,
};

/// The plugin: its hooks call the plain functions.
pub struct Policy;

/// The decision, as a plain function: wait for the remote ipcache entries and
/// identities up to the agent's default timeout, at most 5 s for the host endpoint.
pub fn decide(request: &RegenerationRequest) -> Decision {
    let mut timeout_ms = request.default_timeout_ms;
    if request.endpoint.kind == EndpointKind::Host {
        timeout_ms = timeout_ms.min(5_000);
    }
    Decision::Wait(Wait {
        timeout_ms,
        barriers: vec![Barrier::Ipcache, Barrier::Identities],
        clusters: vec![],
    })
}

impl Plugin for Policy {
    fn on_identities_synced(cluster: Cluster) {
        log::info(&format!("identities of {} synced", cluster.name));
        metrics::counter_add("identities_synced", 1);
    }

    fn regeneration_policy(request: RegenerationRequest) -> Decision {
        decide(&request)
    }
}

export_plugin!(Policy);

#[cfg(test)]
mod tests {
    use super::*;
    use weft_plugin_sdk::{Endpoint, RegenerationReason};

    fn request(kind: EndpointKind) -> RegenerationRequest {
        RegenerationRequest {
            endpoint: Endpoint {
                kind,
                identity: 1,
                namespace: String::new(),
                name: String::new(),
                labels: vec![],
            },
            reason: RegenerationReason::Restore,
            ipsec: false,
            wireguard: true,
            default_timeout_ms: 60_000,
            clusters: vec![],
        }
    }

    #[test]
    fn the_host_endpoint_waits_at_most_five_seconds() {
        let wait = |d: Decision| match d {
            Decision::Wait(w) => w.timeout_ms,
            other => panic!("{other:?}"),
        };
        assert_eq!(wait(decide(&request(EndpointKind::Host))), 5_000);
        assert_eq!(wait(decide(&request(EndpointKind::Workload))), 60_000);
    }
}
