//! The established agent's regeneration policy, as a plugin: wait for remote ipcache
//! entries and identities up to the configured timeout (1 minute by default); the host
//! endpoint with IPsec waits at most 5 seconds, because it is restored synchronously
//! and blocking it keeps the agent from becoming ready.

use weft_plugin_sdk::{
    export_plugin, Barrier, Decision, EndpointKind, Plugin, RegenerationRequest, Wait,
};

/// The cap of the host endpoint's wait when IPsec is on.
const HOST_IPSEC_CAP_MS: u64 = 5_000;

struct RegenerationPolicy;

impl Plugin for RegenerationPolicy {
    fn regeneration_policy(request: RegenerationRequest) -> Decision {
        let mut timeout_ms = request.default_timeout_ms;
        if request.endpoint.kind == EndpointKind::Host && request.ipsec {
            timeout_ms = timeout_ms.min(HOST_IPSEC_CAP_MS);
        }
        Decision::Wait(Wait {
            timeout_ms,
            barriers: vec![Barrier::Ipcache, Barrier::Identities],
            clusters: vec![],
        })
    }
}

export_plugin!(RegenerationPolicy);
