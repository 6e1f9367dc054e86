//! An endpoint's regeneration: the policy is asked with the endpoint's identity,
//! namespace and labels, and the endpoint waits as it decides. Each endpoint's wait is
//! a task of its own, so many wait at once; deleting the endpoint ends its wait at once.
//!
//! What waits is supplied by the agent ([`Regenerate`]): the mesh's barriers through
//! [`crate::wait::wait_for_regeneration`], after the clustermesh directory and
//! the plugins present at start are in.

pub use crate::switch::SwitchError;
use crate::wait::{OnWait, WaitOutcome};
use futures::future::BoxFuture;
use std::sync::Arc;
use std::time::{Instant, SystemTime};
use weft_hooks::{Answer, Endpoint, EndpointKind, RegenerationReason};

/// Asks the policy for an endpoint and waits as it decides, telling the [`OnWait`] what
/// it waits for.
pub type Regenerate = Arc<
    dyn Fn(Endpoint, RegenerationReason, OnWait) -> BoxFuture<'static, WaitOutcome> + Send + Sync,
>;

/// Switches an endpoint to the datapath the agent built, with its policy: what a
/// regeneration does once its wait is over. Blocking (netlink, BPF).
pub trait EndpointDatapath: Send + Sync {
    /// Writes the endpoint's policy and attaches (or updates) its programs.
    ///
    /// # Errors
    /// [`SwitchError`]: what the endpoint lacks, or what the datapath refused.
    fn switch(&self, record: &super::store::Record) -> Result<(), SwitchError>;
    /// Detaches the endpoint's programs and forgets its policy.
    fn remove(&self, record: &super::store::Record);
}

/// The record's part that a regeneration fills in: the API's type, which the listing
/// and the lab read.
pub use weft_api::endpoint::{Outcome, Pending, Regeneration};

/// A regeneration that has started and not yet ended.
pub fn waiting(reason: RegenerationReason) -> Regeneration {
    Regeneration {
        reason: reason.name().into(),
        decided_by: String::new(),
        verdict: String::new(),
        outcome: Outcome::Waiting,
        waited_ms: 0,
        waiting_for: Vec::new(),
        started_at: SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    }
}

/// The same regeneration, still waiting, as the policy decided: for `clusters`.
pub fn deciding(r: Regeneration, answer: &Answer, clusters: &[&str]) -> Regeneration {
    Regeneration {
        decided_by: decided_by(answer),
        verdict: verdict(answer),
        waiting_for: clusters.iter().map(|c| (*c).to_owned()).collect(),
        ..r
    }
}

/// The same regeneration, ended with `outcome` after waiting since `since`.
pub fn ended(r: Regeneration, outcome: &WaitOutcome, since: Instant) -> Regeneration {
    let result = match &outcome.result {
        None => Outcome::Proceeded,
        Some(Ok(report)) => Outcome::Synced {
            disconnected: report.disconnected.clone(),
        },
        Some(Err(timeout)) => Outcome::TimedOut {
            pending: timeout
                .pending
                .iter()
                .map(|p| Pending {
                    cluster: p.cluster.clone(),
                    resources: p.resources.iter().map(|r| r.name().to_owned()).collect(),
                })
                .collect(),
        },
    };
    Regeneration {
        decided_by: decided_by(&outcome.answer),
        verdict: verdict(&outcome.answer),
        outcome: result,
        waited_ms: u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX),
        ..r
    }
}

/// The same regeneration, whose endpoint could not be switched to the new datapath:
/// the outcome carries the error with its sources, as the API's text.
pub fn not_switched(r: Regeneration, error: &dyn std::error::Error) -> Regeneration {
    Regeneration {
        outcome: Outcome::NotSwitched {
            after: Box::new(r.outcome.clone()),
            error: weft_sys::error_chain(error),
        },
        ..r
    }
}

fn decided_by(answer: &Answer) -> String {
    answer
        .decided_by
        .clone()
        .unwrap_or_else(|| "built-in default".into())
}

fn verdict(answer: &Answer) -> String {
    match &answer.verdict {
        weft_hooks::Verdict::Wait {
            timeout, barriers, ..
        } => format!(
            "wait {} for {barriers:?}",
            humantime::format_duration(*timeout)
        ),
        v => format!("{v:?}").to_lowercase(),
    }
}

/// The policy's view of a workload endpoint.
pub fn workload(identity: u32, namespace: &str, name: &str, labels: &str) -> Endpoint {
    Endpoint {
        kind: EndpointKind::Workload,
        identity,
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        labels: labels
            .split(';')
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect(),
    }
}
