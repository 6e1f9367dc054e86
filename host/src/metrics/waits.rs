//! How long the agent's waits on remote state took, by waiter and result, and which
//! remote clusters each timed-out wait was still waiting for.

use super::{Latency, WAIT_BOUNDS_US};
use crate::clustermesh::{SyncReport, SyncTimeout};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

/// Who waited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Waiter {
    /// The host endpoint's regeneration.
    HostEndpoint,
    /// A workload endpoint's regeneration.
    Endpoint,
    /// The collection of restored WireGuard peers.
    WireguardGc,
}

/// How a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitResult {
    /// Every cluster waited for synced.
    Synced,
    /// The deadline passed first.
    TimedOut,
    /// Some cluster went away (removed, refused) instead of syncing.
    Disconnected,
}

impl Waiter {
    /// Every waiter.
    pub const ALL: [Waiter; 3] = [Waiter::HostEndpoint, Waiter::Endpoint, Waiter::WireguardGc];

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            Waiter::HostEndpoint => "host_endpoint",
            Waiter::Endpoint => "endpoint",
            Waiter::WireguardGc => "wireguard_gc",
        }
    }
}

impl WaitResult {
    /// Every result.
    pub const ALL: [WaitResult; 3] = [
        WaitResult::Synced,
        WaitResult::TimedOut,
        WaitResult::Disconnected,
    ];

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            WaitResult::Synced => "synced",
            WaitResult::TimedOut => "timed_out",
            WaitResult::Disconnected => "disconnected",
        }
    }

    /// The result of a mesh-wide wait.
    pub fn of<T>(r: &Result<crate::clustermesh::SyncReport, T>) -> WaitResult {
        match r {
            Ok(report) if report.disconnected.is_empty() => WaitResult::Synced,
            Ok(_) => WaitResult::Disconnected,
            Err(_) => WaitResult::TimedOut,
        }
    }
}

/// The waits' durations, shared by everything that waits, and per remote cluster the
/// waits that timed out with it pending.
///
/// A snapshot holds every waiter and result, at 0 before the first wait ends, so
/// that the first timeout is a change a scraper sees (`increase()` needs a sample
/// before it).
///
/// # Example
/// ```
/// use std::time::Duration;
/// use weft::metrics::{WaitResult, Waiter, Waits};
/// let waits = Waits::default();
/// assert_eq!(waits.snapshot().durations[&(Waiter::Endpoint, WaitResult::TimedOut)].count(), 0);
/// waits.observe(Waiter::Endpoint, WaitResult::Synced, Duration::from_millis(30));
/// let all = waits.snapshot();
/// assert_eq!(all.durations[&(Waiter::Endpoint, WaitResult::Synced)].count(), 1);
/// ```
#[derive(Debug, Default)]
pub struct Waits(Mutex<WaitsSnapshot>);

/// What [`Waits`] holds.
#[derive(Debug, Clone, Default)]
pub struct WaitsSnapshot {
    /// Durations by waiter and result.
    pub durations: BTreeMap<(Waiter, WaitResult), Latency>,
    /// Timed-out waits by the remote cluster they still waited for, and waiter.
    pub timeouts: BTreeMap<(String, Waiter), u64>,
}

impl WaitsSnapshot {
    /// Waits of `waiter` that timed out with `cluster` pending.
    pub fn timeouts_of(&self, cluster: &str, waiter: Waiter) -> u64 {
        self.timeouts
            .get(&(cluster.to_owned(), waiter))
            .copied()
            .unwrap_or(0)
    }
}

impl Waits {
    /// Counts one wait.
    pub fn observe(&self, waiter: Waiter, result: WaitResult, took: Duration) {
        self.0
            .lock()
            .expect("waits lock")
            .durations
            .entry((waiter, result))
            .or_insert_with(|| Latency::new(WAIT_BOUNDS_US))
            .observe(took);
    }

    /// Counts one mesh-wide wait by how it ended; a timeout also counts for each
    /// cluster it still waited for.
    pub fn observe_wait(
        &self,
        waiter: Waiter,
        outcome: &Result<SyncReport, SyncTimeout>,
        took: Duration,
    ) {
        self.observe(waiter, WaitResult::of(outcome), took);
        if let Err(timeout) = outcome {
            let mut inner = self.0.lock().expect("waits lock");
            for p in &timeout.pending {
                *inner
                    .timeouts
                    .entry((p.cluster.clone(), waiter))
                    .or_default() += 1;
            }
        }
    }

    /// Every histogram, by waiter and result (those with no wait yet at 0), and the
    /// timeouts by cluster.
    pub fn snapshot(&self) -> WaitsSnapshot {
        let mut snapshot = self.0.lock().expect("waits lock").clone();
        for w in Waiter::ALL {
            for r in WaitResult::ALL {
                snapshot
                    .durations
                    .entry((w, r))
                    .or_insert_with(|| Latency::new(WAIT_BOUNDS_US));
            }
        }
        snapshot
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clustermesh::{PendingCluster, Resource};

    #[test]
    fn a_timeout_counts_for_the_clusters_it_still_waited_for_only() {
        let waits = Waits::default();
        let timeout = SyncTimeout {
            pending: vec![PendingCluster {
                cluster: "c2".into(),
                resources: vec![Resource::Identities],
            }],
        };
        waits.observe_wait(Waiter::Endpoint, &Err(timeout), Duration::from_secs(60));
        waits.observe_wait(
            Waiter::Endpoint,
            &Ok(SyncReport {
                synced: vec!["c3".into()],
                disconnected: vec![],
            }),
            Duration::from_secs(1),
        );
        let s = waits.snapshot();
        assert_eq!(s.timeouts_of("c2", Waiter::Endpoint), 1);
        assert_eq!(s.timeouts_of("c2", Waiter::HostEndpoint), 0);
        assert_eq!(s.timeouts_of("c3", Waiter::Endpoint), 0);
        assert_eq!(
            s.durations[&(Waiter::Endpoint, WaitResult::TimedOut)].count(),
            1
        );
        assert_eq!(
            s.durations[&(Waiter::Endpoint, WaitResult::Synced)].count(),
            1
        );
        assert_eq!(s.durations.len(), 9, "every waiter and result");
    }
}
