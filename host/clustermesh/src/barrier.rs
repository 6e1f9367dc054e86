//! Sync barriers: "has this resource's initial list arrived from this cluster?"

use tokio::sync::watch;
pub use weft_hooks::Resource;

/// Where a barrier stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BarrierState {
    /// The initial list is not in yet.
    Pending,
    /// The initial list is in. Final for the cluster's life.
    Synced,
    /// The cluster was removed or refused before it synced: waiters are released and
    /// count it as done. (Stopping the agent releases no one: see
    /// [`super::ClusterMesh::stop`].) A refused cluster that is accepted again goes
    /// back to `Pending`.
    Disconnected,
}

/// How a wait on a barrier ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The initial list arrived.
    Synced,
    /// The cluster went away first.
    Disconnected,
}

/// One barrier: released once, observable by any number of waiters, never holding a lock
/// while they wait.
#[derive(Debug)]
pub struct SyncBarrier {
    state: watch::Sender<BarrierState>,
}

impl Default for SyncBarrier {
    fn default() -> Self {
        Self {
            state: watch::Sender::new(BarrierState::Pending),
        }
    }
}

impl SyncBarrier {
    /// The current state.
    pub fn state(&self) -> BarrierState {
        *self.state.borrow()
    }

    /// Releases the barrier as synced. Returns `true` only the first time, so the
    /// caller runs its "synced" callbacks once per cluster life.
    pub fn release(&self) -> bool {
        self.state.send_if_modified(|s| {
            let first = *s != BarrierState::Synced;
            *s = BarrierState::Synced;
            first
        })
    }

    /// Releases waiters as disconnected, unless already synced.
    pub fn disconnect(&self) {
        self.state.send_if_modified(|s| {
            let changed = *s == BarrierState::Pending;
            if changed {
                *s = BarrierState::Disconnected;
            }
            changed
        });
    }

    /// A refused cluster was accepted again: new waiters wait once more.
    pub fn rearm(&self) {
        self.state.send_if_modified(|s| {
            let changed = *s == BarrierState::Disconnected;
            if changed {
                *s = BarrierState::Pending;
            }
            changed
        });
    }

    /// A waiter that owns no lock and no reference to the cluster.
    pub fn waiter(&self) -> Waiter {
        Waiter(self.state.subscribe())
    }
}

/// Waits on one barrier; see [`SyncBarrier::waiter`].
#[derive(Debug, Clone)]
pub struct Waiter(watch::Receiver<BarrierState>);

impl Waiter {
    /// Returns when the barrier is no longer pending. A barrier dropped with its
    /// cluster counts as disconnected.
    pub async fn wait(&mut self) -> Outcome {
        match self.0.wait_for(|s| *s != BarrierState::Pending).await {
            Ok(s) if *s == BarrierState::Synced => Outcome::Synced,
            _ => Outcome::Disconnected,
        }
    }

    /// The state right now.
    pub fn state(&self) -> BarrierState {
        *self.0.borrow()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn release_is_reported_once_and_wakes_waiters() {
        let b = SyncBarrier::default();
        let mut w = b.waiter();
        let task = tokio::spawn(async move { w.wait().await });
        assert!(b.release());
        assert!(!b.release(), "a second release is not a first sync");
        assert_eq!(task.await.unwrap(), Outcome::Synced);
    }

    #[tokio::test]
    async fn disconnect_releases_waiters_but_never_undoes_a_sync() {
        let b = SyncBarrier::default();
        let mut w = b.waiter();
        b.disconnect();
        assert_eq!(w.wait().await, Outcome::Disconnected);
        b.rearm();
        assert_eq!(b.state(), BarrierState::Pending);
        b.release();
        b.disconnect();
        b.rearm();
        assert_eq!(b.state(), BarrierState::Synced);
    }

    #[tokio::test(start_paused = true)]
    async fn dropped_barrier_counts_as_disconnected() {
        let b = SyncBarrier::default();
        let mut w = b.waiter();
        drop(b);
        let out = tokio::time::timeout(Duration::from_secs(1), w.wait()).await;
        assert_eq!(out.unwrap(), Outcome::Disconnected);
    }
}
