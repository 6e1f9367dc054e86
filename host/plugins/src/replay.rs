//! Replaying a recording against a plugin build, offline: the conformance check behind
//! `weftd plugin test`.
//!
//! Every recorded hook is called on the plugin in order (so its state evolves as it
//! did in the agent), with the mesh view it saw then. Each policy answer is compared
//! with what the plugin of the same name answered when recorded, or, when it was not
//! asked then, with what the agent did.

use super::record::{Event, HookInput, Said};
use super::slot::{Context, Isolation, LoadedPlugin, Slot};
use super::{Error, MeshView, Runtime};
use serde::Serialize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use weft_hooks::{ClusterSync, PeerGcVerdict, Verdict};

/// A recorded question the build answers differently.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Difference {
    /// The event's position in the recording (from 1).
    pub event: usize,
    /// The question.
    pub input: HookInput,
    /// What was recorded, and from whom: the plugin's own answer, or the agent's
    /// decision when the plugin was not asked.
    pub recorded: Said,
    /// Whose answer was recorded.
    pub recorded_from: String,
    /// What this build says.
    pub replayed: Said,
}

/// What a replay found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReplayReport {
    /// Events replayed.
    pub events: usize,
    /// Policy answers compared.
    pub compared: usize,
    /// Answers that differ, in order.
    pub differences: Vec<Difference>,
    /// Sync hooks that failed in the build: event position and why.
    pub failures: Vec<(usize, String)>,
}

/// Replays `events` on `plugin` in a runtime of its own.
///
/// # Errors
/// [`Error`] when the plugin cannot be instantiated or its `init` fails.
pub fn replay(
    runtime: Arc<Runtime>,
    plugin: LoadedPlugin,
    events: &[Event],
) -> Result<ReplayReport, Error> {
    let seen: Arc<Mutex<Vec<ClusterSync>>> = Arc::default();
    let view = seen.clone();
    let mesh: MeshView = Arc::new(move || view.lock().expect("replay mesh lock").clone());
    let cx = Context {
        runtime,
        mesh,
        // Every recorded call is tried: a replay reports failures, it does not isolate.
        isolation: Isolation {
            failure_threshold: u32::MAX,
            quarantine: Duration::ZERO,
            max_quarantine: Duration::ZERO,
        },
    };
    let name = plugin.name.clone();
    let mut slot = Slot::start(&cx, plugin)?;
    let mut report = ReplayReport::default();
    for (i, event) in events.iter().enumerate() {
        let n = i + 1;
        report.events += 1;
        seen.lock()
            .expect("replay mesh lock")
            .clone_from(&event.mesh);
        let failures_before = slot.record.failures();
        let replayed = match &event.input {
            HookInput::Synced { resource, cluster } => {
                slot.on_synced(&cx, *resource, cluster);
                None
            }
            HookInput::ClusterDisconnected { cluster } => {
                slot.on_cluster_disconnected(&cx, cluster);
                None
            }
            HookInput::RegenerationPolicy { request } => Some(
                match slot.regeneration_policy(&cx, request, Instant::now()) {
                    Some(Ok(v)) => Said::Regeneration(v),
                    Some(Err(reason)) => Said::Failed(reason),
                    None => Said::Regeneration(Verdict::NoOpinion),
                },
            ),
            HookInput::PeerGcPolicy { request } => {
                Some(match slot.peer_gc_policy(&cx, request, Instant::now()) {
                    Some(Ok(v)) => Said::PeerGc(v),
                    Some(Err(reason)) => Said::Failed(reason),
                    None => Said::PeerGc(PeerGcVerdict::NoOpinion),
                })
            }
        };
        let Some(replayed) = replayed else {
            if slot.record.failures() > failures_before {
                let why = slot.status(Instant::now()).last_error.unwrap_or_default();
                report.failures.push((n, why));
            }
            continue;
        };
        let recorded = event
            .answers
            .iter()
            .find(|a| a.plugin == name && !a.shadow)
            .map(|a| (a.said.clone(), format!("{} {}", a.plugin, a.version)))
            .or_else(|| {
                // Not asked then: its answer is compared with what the agent did, unless
                // it has no opinion (then the others decide, as they did).
                let no_opinion = matches!(
                    replayed,
                    Said::Regeneration(Verdict::NoOpinion) | Said::PeerGc(PeerGcVerdict::NoOpinion)
                );
                event
                    .decided
                    .as_ref()
                    .filter(|_| !no_opinion)
                    .map(|(said, by)| {
                        let by = by.as_deref().unwrap_or("the built-in default");
                        (said.clone(), format!("the agent's decision (by {by})"))
                    })
            });
        let Some((recorded, recorded_from)) = recorded else {
            continue;
        };
        report.compared += 1;
        if recorded != replayed {
            report.differences.push(Difference {
                event: n,
                input: event.input.clone(),
                recorded,
                recorded_from,
                replayed,
            });
        }
    }
    Ok(report)
}
