//! The host's side of each hook's contract: a plugin's answer is checked and bounded
//! before the agent acts on it, so no plugin can make the agent wait for ever.

use super::bindings::weft::plugin::types::{Decision, Wait};
use crate::clustermesh::Resource;
use std::time::Duration;

/// What the agent does after a regeneration-policy call.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// A barrier name that is not one of nodes, ipcache, identities, services.
    #[error("unknown barrier {name:?}")]
    UnknownBarrier {
        /// The name given.
        name: String,
    },
}

/// Checks and bounds a plugin's decision: the timeout is clamped to `max_wait`, and
/// barrier names must be known.
///
/// # Errors
/// [`Violation`] for a decision the host refuses.
pub fn enforce(decision: Decision, max_wait: Duration) -> Result<Verdict, Violation> {
    match decision {
        Decision::Proceed => Ok(Verdict::Proceed),
        Decision::NoOpinion => Ok(Verdict::NoOpinion),
        Decision::Wait(Wait {
            timeout_ms,
            barriers,
            clusters,
        }) => {
            let barriers = barriers
                .into_iter()
                .map(|name| {
                    Resource::ALL
                        .into_iter()
                        .find(|r| r.name() == name)
                        .ok_or(Violation::UnknownBarrier { name })
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Verdict::Wait {
                timeout: Duration::from_millis(timeout_ms).min(max_wait),
                barriers,
                clusters,
            })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_are_clamped_and_unknown_barriers_refused() {
        let max = Duration::from_secs(300);
        let forever = Decision::Wait(Wait {
            timeout_ms: u64::MAX,
            barriers: vec!["nodes".into()],
            clusters: vec!["c2".into()],
        });
        assert_eq!(
            enforce(forever, max),
            Ok(Verdict::Wait {
                timeout: max,
                barriers: vec![Resource::Nodes],
                clusters: vec!["c2".into()],
            })
        );
        let unknown = Decision::Wait(Wait {
            timeout_ms: 1,
            barriers: vec!["pods".into()],
            clusters: vec![],
        });
        assert_eq!(
            enforce(unknown, max),
            Err(Violation::UnknownBarrier {
                name: "pods".into()
            })
        );
        assert_eq!(enforce(Decision::NoOpinion, max), Ok(Verdict::NoOpinion));
    }
}
