//! The host's side of each hook's contract: a plugin's answer is checked and bounded
//! before the agent acts on it, so no plugin can make the agent wait for ever.

use super::bindings::weft::plugin::types::{Barrier, Decision, PeerGcDecision, Wait};
use std::time::Duration;
use weft_hooks::Resource;

/// What the agent does after a regeneration-policy call.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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

/// A decision the host refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Violation {
    /// A barrier name that is not one of nodes, ipcache, identities, services (a
    /// 0.1.0 plugin; 0.2.0 names barriers by an enum).
    #[error("unknown barrier {name:?}")]
    UnknownBarrier {
        /// The name given.
        name: String,
    },
}

/// The resource a barrier stands for.
pub fn resource(barrier: Barrier) -> Resource {
    match barrier {
        Barrier::Nodes => Resource::Nodes,
        Barrier::Ipcache => Resource::IpCache,
        Barrier::Identities => Resource::Identities,
        Barrier::Services => Resource::Services,
    }
}

/// Bounds a plugin's decision: the timeout is clamped to `max_wait`.
pub fn enforce(decision: Decision, max_wait: Duration) -> Verdict {
    match decision {
        Decision::Proceed => Verdict::Proceed,
        Decision::NoOpinion => Verdict::NoOpinion,
        Decision::Wait(Wait {
            timeout_ms,
            barriers,
            clusters,
        }) => Verdict::Wait {
            timeout: Duration::from_millis(timeout_ms).min(max_wait),
            barriers: barriers.into_iter().map(resource).collect(),
            clusters,
        },
    }
}

/// What the agent does with restored WireGuard peers no one claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PeerGcVerdict {
    /// Keep them this much longer, then remove them.
    Hold(Duration),
    /// Remove them now.
    Collect,
    /// Ask the next plugin.
    NoOpinion,
}

/// Bounds a peer-gc decision: a hold is clamped to `max_wait`, like a regeneration
/// wait, so no plugin keeps stale peers for ever.
pub fn enforce_peer_gc(decision: PeerGcDecision, max_wait: Duration) -> PeerGcVerdict {
    match decision {
        PeerGcDecision::Hold(ms) => PeerGcVerdict::Hold(Duration::from_millis(ms).min(max_wait)),
        PeerGcDecision::Collect => PeerGcVerdict::Collect,
        PeerGcDecision::NoOpinion => PeerGcVerdict::NoOpinion,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_and_holds_are_clamped() {
        let max = Duration::from_secs(300);
        let forever = Decision::Wait(Wait {
            timeout_ms: u64::MAX,
            barriers: vec![Barrier::Nodes],
            clusters: vec!["c2".into()],
        });
        assert_eq!(
            enforce(forever, max),
            Verdict::Wait {
                timeout: max,
                barriers: vec![Resource::Nodes],
                clusters: vec!["c2".into()],
            }
        );
        assert_eq!(enforce(Decision::NoOpinion, max), Verdict::NoOpinion);
        assert_eq!(
            enforce_peer_gc(PeerGcDecision::Hold(u64::MAX), max),
            PeerGcVerdict::Hold(max)
        );
        assert_eq!(
            enforce_peer_gc(PeerGcDecision::Hold(20), max),
            PeerGcVerdict::Hold(Duration::from_millis(20))
        );
    }
}
