//! How long the agent's waits on remote state took, by waiter and result.

use super::{Latency, WAIT_BOUNDS_US};
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

/// The waits' durations, shared by everything that waits.
///
/// # Example
/// ```
/// use std::time::Duration;
/// use weft::metrics::{WaitResult, Waiter, Waits};
/// let waits = Waits::default();
/// waits.observe(Waiter::Endpoint, WaitResult::Synced, Duration::from_millis(30));
/// let all = waits.snapshot();
/// assert_eq!(all[&(Waiter::Endpoint, WaitResult::Synced)].count(), 1);
/// ```
#[derive(Debug, Default)]
pub struct Waits(Mutex<BTreeMap<(Waiter, WaitResult), Latency>>);

impl Waits {
    /// Counts one wait.
    pub fn observe(&self, waiter: Waiter, result: WaitResult, took: Duration) {
        self.0
            .lock()
            .expect("waits lock")
            .entry((waiter, result))
            .or_insert_with(|| Latency::new(WAIT_BOUNDS_US))
            .observe(took);
    }

    /// Every histogram, by waiter and result.
    pub fn snapshot(&self) -> BTreeMap<(Waiter, WaitResult), Latency> {
        self.0.lock().expect("waits lock").clone()
    }
}
