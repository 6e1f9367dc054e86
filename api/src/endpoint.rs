//! An endpoint's last regeneration, as `weftd endpoint list` and the lab read it: what
//! the policy decided and how the wait ended, as a typed outcome, never a sentence to
//! parse.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The last regeneration of an endpoint (or the one under way).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Regeneration {
    /// Why it regenerated: `restore`, `create`, `identity-change`, `policy-change`.
    pub reason: String,
    /// The plugin that decided, or `built-in default`.
    pub decided_by: String,
    /// What it decided, for people: `wait 1m for [IpCache, Identities]`, `proceed`.
    pub verdict: String,
    /// How it ended, or that it has not: the `result` field and its own fields.
    #[serde(flatten)]
    pub outcome: Outcome,
    /// How long it waited, in milliseconds (so far, while waiting).
    pub waited_ms: u64,
    /// The remote clusters it waits (or waited) for, once the policy has decided.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting_for: Vec<String>,
    /// When it started, in seconds since the epoch.
    pub started_at: u64,
}

/// How a regeneration ended. In JSON, `"result"` names the variant (kebab-case) beside
/// its fields: `{"result": "timed-out", "pending": [{"cluster": "c3", "resources":
/// ["ipcache"]}]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "kebab-case")]
pub enum Outcome {
    /// Still waiting for remote state (or for the policy's answer).
    Waiting,
    /// The policy said not to wait.
    Proceeded,
    /// Every remote cluster waited for synced, or went away first.
    Synced {
        /// Clusters that were removed or refused instead of syncing (counted as done).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        disconnected: Vec<String>,
    },
    /// The policy's timeout passed with remote state still missing: the endpoint went
    /// on without it.
    TimedOut {
        /// What was still missing, per cluster.
        pending: Vec<Pending>,
    },
    /// The wait ended (as `after` says), but the endpoint could not be switched to the
    /// new datapath: it keeps the old one.
    NotSwitched {
        /// How the wait ended.
        after: Box<Outcome>,
        /// Why the switch failed.
        error: String,
    },
}

/// A remote cluster a timed-out wait still waited for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    /// The cluster.
    pub cluster: String,
    /// Its resources still not in: `nodes`, `ipcache`, `identities`, `services`.
    pub resources: Vec<String>,
}

impl Outcome {
    /// Whether the regeneration is still under way.
    pub fn is_waiting(&self) -> bool {
        matches!(self, Outcome::Waiting)
    }

    /// Whether it ended with every cluster synced and the endpoint switched.
    pub fn is_synced(&self) -> bool {
        matches!(self, Outcome::Synced { disconnected } if disconnected.is_empty())
    }

    /// The clusters a timed-out wait still waited for (also behind a failed switch).
    pub fn timed_out_on(&self) -> Vec<&str> {
        match self {
            Outcome::TimedOut { pending } => pending.iter().map(|p| p.cluster.as_str()).collect(),
            Outcome::NotSwitched { after, .. } => after.timed_out_on(),
            _ => Vec::new(),
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Waiting => f.write_str("waiting"),
            Outcome::Proceeded => f.write_str("proceeded"),
            Outcome::Synced { disconnected } if disconnected.is_empty() => f.write_str("synced"),
            Outcome::Synced { disconnected } => {
                write!(f, "synced (disconnected: {})", disconnected.join(", "))
            }
            Outcome::TimedOut { pending } => {
                f.write_str("timed out; still pending: ")?;
                for (i, p) in pending.iter().enumerate() {
                    let sep = if i == 0 { "" } else { ", " };
                    write!(f, "{sep}{} ({})", p.cluster, p.resources.join(", "))?;
                }
                Ok(())
            }
            Outcome::NotSwitched { after, error } => write!(f, "{after}; not switched: {error}"),
        }
    }
}

impl fmt::Display for Regeneration {
    /// `restore: synced, wait 1m for [IpCache] of c2 by built-in default, 812 ms`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}, {}", self.reason, self.outcome, self.verdict)?;
        if !self.waiting_for.is_empty() {
            write!(f, " of {}", self.waiting_for.join(", "))?;
        }
        write!(f, " by {}, {} ms", self.decided_by, self.waited_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn regeneration(outcome: Outcome) -> Regeneration {
        Regeneration {
            reason: "restore".into(),
            decided_by: "built-in default".into(),
            verdict: "wait 1m for [IpCache, Identities]".into(),
            outcome,
            waited_ms: 60_000,
            waiting_for: vec!["c2".into(), "c3".into()],
            started_at: 1_700_000_000,
        }
    }

    #[test]
    fn the_json_names_the_result_beside_its_fields() {
        let timed_out = Outcome::TimedOut {
            pending: vec![Pending {
                cluster: "c3".into(),
                resources: vec!["ipcache".into()],
            }],
        };
        let not_switched = Outcome::NotSwitched {
            after: Box::new(timed_out.clone()),
            error: "attach: no such device".into(),
        };
        let cases = [
            (Outcome::Waiting, json!({"result": "waiting"})),
            (Outcome::Proceeded, json!({"result": "proceeded"})),
            (
                Outcome::Synced {
                    disconnected: vec![],
                },
                json!({"result": "synced"}),
            ),
            (
                Outcome::Synced {
                    disconnected: vec!["c2".into()],
                },
                json!({"result": "synced", "disconnected": ["c2"]}),
            ),
            (
                timed_out.clone(),
                json!({"result": "timed-out", "pending": [{"cluster": "c3", "resources": ["ipcache"]}]}),
            ),
            (
                not_switched.clone(),
                json!({"result": "not-switched", "error": "attach: no such device",
                       "after": {"result": "timed-out", "pending": [{"cluster": "c3", "resources": ["ipcache"]}]}}),
            ),
        ];
        for (outcome, want) in cases {
            let r = regeneration(outcome.clone());
            let got = serde_json::to_value(&r).unwrap();
            for (k, v) in want.as_object().unwrap() {
                assert_eq!(&got[k], v, "{k} of {outcome:?}");
            }
            assert_eq!(got["reason"], "restore");
            let back: Regeneration = serde_json::from_value(got).unwrap();
            assert_eq!(back, r);
        }
        assert_eq!(not_switched.timed_out_on(), ["c3"]);
    }

    #[test]
    fn it_reads_as_a_line() {
        let r = regeneration(Outcome::NotSwitched {
            after: Box::new(Outcome::Synced {
                disconnected: vec!["c3".into()],
            }),
            error: "gone".into(),
        });
        assert_eq!(
            r.to_string(),
            "restore: synced (disconnected: c3); not switched: gone, wait 1m for [IpCache, Identities] of c2, c3 by built-in default, 60000 ms"
        );
        let t = Outcome::TimedOut {
            pending: vec![
                Pending {
                    cluster: "c2".into(),
                    resources: vec!["ipcache".into(), "identities".into()],
                },
                Pending {
                    cluster: "c3".into(),
                    resources: vec!["nodes".into()],
                },
            ],
        };
        assert_eq!(
            t.to_string(),
            "timed out; still pending: c2 (ipcache, identities), c3 (nodes)"
        );
    }

    #[test]
    fn an_unknown_result_is_an_error_naming_it() {
        let e = serde_json::from_value::<Regeneration>(json!({
            "reason": "restore", "decided_by": "x", "verdict": "proceed",
            "result": "timed out: still pending: c2 (ipcache)", "waited_ms": 1, "started_at": 2
        }))
        .unwrap_err();
        assert!(e.to_string().contains("timed out: still pending"), "{e}");
    }
}
