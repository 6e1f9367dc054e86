//! The host's side of each hook's contract: a plugin's answer is checked and bounded
//! before the agent acts on it, so no plugin can make the agent wait for ever. The
//! answers ([`Verdict`], [`PeerGcVerdict`]) are weft-hooks' plain types.

use super::bindings::weft::plugin::types::{Barrier, Decision, PeerGcDecision, Wait};
use std::time::Duration;
use weft_hooks::{PeerGcVerdict, Resource, Verdict};

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

/// Bounds a peer-gc decision: a hold is clamped to `max_wait`, like a regeneration
/// wait, so no plugin keeps stale peers for ever.
pub fn enforce_peer_gc(decision: PeerGcDecision, max_wait: Duration) -> PeerGcVerdict {
    match decision {
        PeerGcDecision::Hold(ms) => PeerGcVerdict::Hold(Duration::from_millis(ms).min(max_wait)),
        PeerGcDecision::Collect => PeerGcVerdict::Collect,
        PeerGcDecision::NoOpinion => PeerGcVerdict::NoOpinion,
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
