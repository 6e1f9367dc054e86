//! Shadow plugins: a new version (`shadow = true` in its manifest) runs beside the live
//! plugin of the same name, gets the same hooks and the same policy questions, and
//! its answers are compared with the live plugin's, never acted on. `weftd status`
//! shows how often they agreed and the last disagreement with its input, so an
//! operator promotes it with evidence.

use super::record::{HookInput, Said};
use super::worker::Worker;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// A question the shadow answered differently from the live plugin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Disagreement {
    /// When, in milliseconds since the UNIX epoch.
    pub at_ms: u64,
    /// The question.
    pub input: HookInput,
    /// The live plugin's answer.
    pub live: Said,
    /// The shadow's answer.
    pub shadow: Said,
}

/// What `weftd status` shows of a shadow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShadowStatus {
    /// The plugin's name (the live plugin's).
    pub name: String,
    /// The shadow's version.
    pub version: String,
    /// Its digest.
    pub digest: String,
    /// The trusted key that signed it.
    pub signed_by: Option<String>,
    /// Questions answered by both it and the live plugin.
    pub compared: u64,
    /// Of those, answered the same.
    pub agreed: u64,
    /// Calls of the shadow that failed (its own record: deadline, trap, …).
    pub failures: u64,
    /// `active` or `quarantined`.
    pub state: String,
    /// The last question it answered differently.
    pub last_disagreement: Option<Disagreement>,
}

#[derive(Default)]
struct Tally {
    compared: u64,
    agreed: u64,
    last_disagreement: Option<Disagreement>,
}

/// A shadow: its thread, and how its answers compared.
pub(crate) struct Shadow {
    pub worker: Arc<Worker>,
    tally: Mutex<Tally>,
}

impl Shadow {
    pub fn new(worker: Arc<Worker>) -> Arc<Self> {
        Arc::new(Self {
            worker,
            tally: Mutex::new(Tally::default()),
        })
    }

    /// The same shadow on a new thread (its old one stalled), keeping its tally.
    pub fn with_worker(&self, worker: Arc<Worker>) -> Arc<Self> {
        let old = self.tally.lock().expect("shadow tally lock");
        Arc::new(Self {
            worker,
            tally: Mutex::new(Tally {
                compared: old.compared,
                agreed: old.agreed,
                last_disagreement: old.last_disagreement.clone(),
            }),
        })
    }

    /// Counts one question both answered.
    pub fn compare(&self, input: HookInput, live: Said, shadow: Said) {
        let mut t = self.tally.lock().expect("shadow tally lock");
        t.compared += 1;
        if live == shadow {
            t.agreed += 1;
        } else {
            t.last_disagreement = Some(Disagreement {
                at_ms: super::record::Event::now(input.clone()).at_ms,
                input,
                live,
                shadow,
            });
        }
    }

    /// The shadow's status at `now`.
    pub fn status(&self, now: Instant) -> ShadowStatus {
        let p = &self.worker.plugin;
        let record = self.worker.record().map(|r| r.status(p, now));
        let t = self.tally.lock().expect("shadow tally lock");
        ShadowStatus {
            name: p.name.clone(),
            version: p.version.clone(),
            digest: p.digest.clone(),
            signed_by: p.signed_by.clone(),
            compared: t.compared,
            agreed: t.agreed,
            failures: record.as_ref().map_or(0, |r| r.failures),
            state: record.map_or_else(|| "starting".into(), |r| r.state),
            last_disagreement: t.last_disagreement.clone(),
        }
    }
}
