//! What liveness and readiness are made of: the loops' heartbeats ([`Beat`]) and the
//! local conditions ([`Readiness`]). The agent serves them on `--health-addr`
//! (`/healthz` while every registered loop has turned within its period, `/readyz`
//! while the local conditions hold). Remote clusters never gate readiness: a readiness
//! that waited for them would keep new pods off every node of a cluster whenever a
//! remote one is down, and the agent already bounds what waits for them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// A loop is stale when it has not turned for this many periods (plus a second).
const STALE_PERIODS: u32 = 3;

struct Registered {
    name: String,
    period: Duration,
    last: Instant,
}

/// The loops of this process, by registration.
static LOOPS: Mutex<BTreeMap<u64, Registered>> = Mutex::new(BTreeMap::new());
static NEXT: AtomicU64 = AtomicU64::new(0);

fn loops() -> std::sync::MutexGuard<'static, BTreeMap<u64, Registered>> {
    LOOPS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A loop's heartbeat: registered on creation, unregistered on drop. A loop that
/// turns at least every `period` calls [`Beat::beat`] each turn.
///
/// # Example
/// ```
/// use std::time::Duration;
/// let beat = weft_sys::health::Beat::register("example loop", Duration::from_secs(5));
/// beat.beat();
/// assert!(weft_sys::health::stale_loops().iter().all(|(name, _)| name != "example loop"));
/// ```
#[derive(Debug)]
pub struct Beat(u64);

impl Beat {
    /// Registers a loop named `name` that turns at least every `period`.
    pub fn register(name: impl Into<String>, period: Duration) -> Self {
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        loops().insert(
            id,
            Registered {
                name: name.into(),
                period,
                last: Instant::now(),
            },
        );
        Self(id)
    }

    /// The loop turned.
    pub fn beat(&self) {
        if let Some(r) = loops().get_mut(&self.0) {
            r.last = Instant::now();
        }
    }
}

impl Drop for Beat {
    fn drop(&mut self) {
        loops().remove(&self.0);
    }
}

/// The loops that have not turned within their bound, with how long ago they last did.
pub fn stale_loops() -> Vec<(String, Duration)> {
    let now = Instant::now();
    loops()
        .values()
        .filter_map(|r| {
            let since = now.saturating_duration_since(r.last);
            (since > r.period * STALE_PERIODS + Duration::from_secs(1))
                .then(|| (r.name.clone(), since))
        })
        .collect()
}

/// A loop on the async runtime that turns every `period`: when the runtime stops
/// running tasks, it stops turning and `/healthz` says so.
pub async fn runtime_heartbeat(period: Duration) {
    let beat = Beat::register("the async runtime", period);
    let mut tick = tokio::time::interval(period);
    loop {
        tick.tick().await;
        beat.beat();
    }
}

/// The local conditions of readiness, each named, each a watch that turns `true`.
#[derive(Debug, Clone, Default)]
pub struct Readiness(Vec<(&'static str, watch::Receiver<bool>)>);

impl Readiness {
    /// Adds condition `name`, met once `met` is `true`.
    #[must_use]
    pub fn with(mut self, name: &'static str, met: watch::Receiver<bool>) -> Self {
        self.0.push((name, met));
        self
    }

    /// The conditions not met now.
    pub fn pending(&self) -> Vec<&'static str> {
        self.0
            .iter()
            .filter(|(_, met)| !*met.borrow())
            .map(|(name, _)| *name)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loop_that_stops_turning_goes_stale_and_leaves_with_its_beat() {
        let beat = Beat::register("test loop", Duration::from_millis(1));
        loops().get_mut(&beat.0).unwrap().last = Instant::now() - Duration::from_secs(2);
        let stale = stale_loops();
        assert!(stale
            .iter()
            .any(|(n, since)| n == "test loop" && *since >= Duration::from_secs(2)));
        beat.beat();
        assert!(stale_loops().iter().all(|(n, _)| n != "test loop"));
        loops().get_mut(&beat.0).unwrap().last = Instant::now() - Duration::from_secs(2);
        drop(beat);
        assert!(stale_loops().iter().all(|(n, _)| n != "test loop"));
    }

    #[test]
    fn readiness_names_each_condition_not_met() {
        let (a_tx, a) = watch::channel(false);
        let (_b_tx, b) = watch::channel(true);
        let r = Readiness::default().with("a", a).with("b", b);
        assert_eq!(r.pending(), vec!["a"]);
        a_tx.send(true).unwrap();
        assert!(r.pending().is_empty());
    }
}
