//! The two policy questions the agent asks (how long may this endpoint's regeneration
//! wait; may these restored WireGuard peers go) and their answers, as plain Rust.
//!
//! These are the agent's types; the plugin host converts them to and from the WIT
//! contract's at the call. Their serde form is the plugin recording's (pinned by
//! weft-plugins' `the_recording_format_is_pinned`): field and variant names as in Rust.

use crate::Resource;
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::time::Duration;
use weft_model::Reserved;

/// Which kind of endpoint is being regenerated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EndpointKind {
    /// The node's host endpoint.
    Host,
    /// A pod.
    Workload,
}

/// The endpoint being regenerated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    /// Host or workload.
    pub kind: EndpointKind,
    /// Its security identity (the host endpoint: 1, reserved:host).
    pub identity: u32,
    /// Its namespace; empty for the host endpoint.
    pub namespace: String,
    /// Its name (the pod's, for a workload); empty for the host endpoint.
    pub name: String,
    /// Its labels, as `source:key=value` (the host endpoint: `reserved:host`).
    pub labels: Vec<String>,
}

impl Endpoint {
    /// The host endpoint, as a policy sees it: the reserved `host` identity and its
    /// label, no namespace or name.
    pub fn host() -> Endpoint {
        Endpoint {
            kind: EndpointKind::Host,
            identity: Reserved::Host.id(),
            namespace: String::new(),
            name: String::new(),
            labels: vec![format!("reserved:{}", Reserved::Host.name())],
        }
    }
}

/// Why the endpoint is regenerated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RegenerationReason {
    /// Restored after an agent restart: switched to the new datapath state.
    Restore,
    /// A new endpoint.
    Create,
    /// Its identity changed.
    IdentityChange,
    /// The policy that selects it changed.
    PolicyChange,
}

impl RegenerationReason {
    /// The reason's name, as the WIT file and the endpoint listing spell it.
    pub fn name(self) -> &'static str {
        match self {
            RegenerationReason::Restore => "restore",
            RegenerationReason::Create => "create",
            RegenerationReason::IdentityChange => "identity-change",
            RegenerationReason::PolicyChange => "policy-change",
        }
    }
}

/// One remote cluster's sync state, as a policy sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterSync {
    /// The cluster's name.
    pub name: String,
    /// Its etcd is reachable and its config accepted.
    pub connected: bool,
    /// Its initial nodes are in.
    pub nodes_synced: bool,
    /// Its initial ipcache entries are in.
    pub ipcache_synced: bool,
    /// Its initial identities are in.
    pub identities_synced: bool,
    /// Its initial services are in.
    pub services_synced: bool,
}

/// What the regeneration policy is asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegenerationRequest {
    /// The endpoint.
    pub endpoint: Endpoint,
    /// Why it is regenerated.
    pub reason: RegenerationReason,
    /// IPsec is on.
    pub ipsec: bool,
    /// WireGuard is on.
    pub wireguard: bool,
    /// The configured default wait (`--clustermesh-ip-identities-sync-timeout`).
    pub default_timeout_ms: u64,
    /// Every remote cluster's sync state.
    pub clusters: Vec<ClusterSync>,
}

/// A WireGuard peer found on the device at start that no node or prefix claims now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoredPeer {
    /// The peer's public key, base64.
    pub public_key: String,
    /// Its AllowedIPs, as CIDRs.
    pub allowed_ips: Vec<String>,
}

/// What the peer-gc policy is asked, once the remote nodes and ipcache entries are in
/// (or their clusters gone).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerGcRequest {
    /// The unclaimed restored peers.
    pub peers: Vec<RestoredPeer>,
    /// Every remote cluster's sync state.
    pub clusters: Vec<ClusterSync>,
}

/// What the agent does after a regeneration-policy call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Wait at most `timeout` for `barriers` of every remote cluster.
    Wait {
        /// The bounded wait.
        timeout: Duration,
        /// The barriers to wait for.
        barriers: Vec<Resource>,
        /// The remote clusters to wait for; empty means all.
        clusters: Vec<String>,
    },
    /// Do not wait.
    Proceed,
    /// The plugin has no opinion: ask the next one.
    NoOpinion,
}

/// What the agent does with restored WireGuard peers no one claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PeerGcVerdict {
    /// Keep them this much longer, then remove them.
    Hold(Duration),
    /// Remove them now.
    Collect,
    /// Ask the next plugin.
    NoOpinion,
}

/// How a policy question was answered: a regeneration [`Verdict`], or a
/// [`PeerGcVerdict`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer<V = Verdict> {
    /// What the agent does.
    pub verdict: V,
    /// The plugin that decided, `None` for the built-in default.
    pub decided_by: Option<String>,
}

impl Answer {
    /// The built-in default's answer to `request` ([`default_verdict`]).
    pub fn default_for(request: &RegenerationRequest) -> Self {
        Answer {
            verdict: default_verdict(
                request.endpoint.kind == EndpointKind::Host,
                request.ipsec,
                Duration::from_millis(request.default_timeout_ms),
            ),
            decided_by: None,
        }
    }
}

impl Answer<PeerGcVerdict> {
    /// The built-in default for restored peers: collect them (the agent has already
    /// waited for the remote nodes and ipcache entries).
    pub fn default_peer_gc() -> Self {
        Answer {
            verdict: PeerGcVerdict::Collect,
            decided_by: None,
        }
    }
}

/// The built-in default, used when no plugin has an opinion or a plugin failed: the
/// established agent's rule (ipcache and identities, up to `default_timeout`; the host
/// endpoint with IPsec at most 5 seconds).
pub fn default_verdict(host_endpoint: bool, ipsec: bool, default_timeout: Duration) -> Verdict {
    let cap = if host_endpoint && ipsec {
        Duration::from_secs(5)
    } else {
        Duration::MAX
    };
    Verdict::Wait {
        timeout: default_timeout.min(cap),
        barriers: vec![Resource::IpCache, Resource::Identities],
        clusters: vec![],
    }
}

/// Who answers "how long may this endpoint's regeneration wait?" (the plugin host in
/// the agent; a fixed answer in a unit test). The answer's timeout is already bounded.
pub trait RegenerationPolicy: Send + Sync {
    /// Answers `request`; never fails (a failure is the built-in default's answer).
    fn regeneration_policy(
        &self,
        request: RegenerationRequest,
    ) -> impl Future<Output = Answer> + Send;
}

/// Who answers "may these restored peers be removed now?".
pub trait PeerGcPolicy: Send + Sync {
    /// Answers `request`; a hold is already bounded.
    fn peer_gc_policy(
        &self,
        request: PeerGcRequest,
    ) -> impl Future<Output = Answer<PeerGcVerdict>> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_caps_the_host_endpoint_with_ipsec_at_five_seconds() {
        let long = Duration::from_secs(120);
        let wait = |host, ipsec| match default_verdict(host, ipsec, long) {
            Verdict::Wait { timeout, .. } => timeout,
            other => panic!("{other:?}"),
        };
        assert_eq!(wait(true, true), Duration::from_secs(5));
        assert_eq!(wait(true, false), long);
        assert_eq!(wait(false, true), long);
    }
}
