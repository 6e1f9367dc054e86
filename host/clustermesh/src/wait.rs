//! Mesh-wide waits: `nodes_synced`, `ip_identities_synced`, `services_synced`.

use super::barrier::{BarrierState, Outcome, Waiter};
use super::{ClusterMesh, Resource};
use std::fmt;
use tokio::time::Instant;

/// How a mesh-wide wait ended in time: every cluster present at the call either synced
/// or went away.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncReport {
    /// Clusters whose barriers were all released as synced.
    pub synced: Vec<String>,
    /// Clusters that were removed or refused first (counted as done).
    pub disconnected: Vec<String>,
}

/// The deadline passed with some barriers still pending.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("clustermesh sync timed out; still pending: {}", describe(.pending))]
pub struct SyncTimeout {
    /// Each cluster still pending, with the resources it still lacks.
    pub pending: Vec<PendingCluster>,
}

/// One cluster that had not synced at the deadline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingCluster {
    /// The cluster.
    pub cluster: String,
    /// The resources whose initial list is not in.
    pub resources: Vec<Resource>,
}

fn describe(pending: &[PendingCluster]) -> String {
    pending
        .iter()
        .map(|p| {
            let r: Vec<&str> = p.resources.iter().map(|r| r.name()).collect();
            format!("{} ({})", p.cluster, r.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

impl fmt::Display for PendingCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&describe(std::slice::from_ref(self)))
    }
}

impl ClusterMesh {
    /// Waits until every remote cluster present now has its nodes, or `deadline`.
    ///
    /// # Errors
    /// [`SyncTimeout`] naming what is still pending at the deadline.
    pub async fn nodes_synced(&self, deadline: Instant) -> Result<SyncReport, SyncTimeout> {
        self.wait_synced(&[Resource::Nodes], deadline).await
    }

    /// Waits for ipcache entries, identities **and** nodes (node IPs are ipcache
    /// entries too) of every remote cluster present now, or `deadline`.
    ///
    /// # Errors
    /// [`SyncTimeout`] naming what is still pending at the deadline.
    pub async fn ip_identities_synced(&self, deadline: Instant) -> Result<SyncReport, SyncTimeout> {
        let r = [Resource::IpCache, Resource::Identities, Resource::Nodes];
        self.wait_synced(&r, deadline).await
    }

    /// Waits until every remote cluster present now has its services, or `deadline`.
    ///
    /// # Errors
    /// [`SyncTimeout`] naming what is still pending at the deadline.
    pub async fn services_synced(&self, deadline: Instant) -> Result<SyncReport, SyncTimeout> {
        self.wait_synced(&[Resource::Services], deadline).await
    }

    /// Waits for `resources` of the clusters present at the call. The clusters are
    /// snapshotted under the lock; the wait itself holds no lock, so clusters can be
    /// added, removed or report status meanwhile. A cluster that goes away (removed,
    /// or refused for good) releases its waiters as disconnected, which counts as
    /// done. Once the mesh stops, no wait ends.
    ///
    /// # Errors
    /// [`SyncTimeout`] naming what is still pending at the deadline.
    pub async fn wait_synced(
        &self,
        resources: &[Resource],
        deadline: Instant,
    ) -> Result<SyncReport, SyncTimeout> {
        self.wait_synced_of(resources, &[], deadline).await
    }

    /// [`Self::wait_synced`] for the named clusters only (all when `clusters` is
    /// empty). A named cluster that is not present is not waited for.
    ///
    /// # Errors
    /// [`SyncTimeout`] naming what is still pending at the deadline.
    pub async fn wait_synced_of(
        &self,
        resources: &[Resource],
        clusters: &[String],
        deadline: Instant,
    ) -> Result<SyncReport, SyncTimeout> {
        self.sync_wait(resources, clusters).until(deadline).await
    }

    /// The first half of [`Self::wait_synced_of`]: takes the clusters to wait for
    /// (those named in `clusters` that are present now, all when it is empty), so the
    /// caller can say what it waits for before it waits.
    ///
    /// ```
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// use std::sync::Arc;
    /// use weft_clustermesh::{ClusterMesh, Config, NoObserver, Resource};
    /// let mesh = ClusterMesh::new(Config::default(), Arc::new(NoObserver), Default::default());
    /// let wait = mesh.sync_wait(&[Resource::Nodes], &[]);
    /// assert_eq!(wait.clusters().count(), 0);
    /// let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(1);
    /// assert!(wait.until(deadline).await.unwrap().synced.is_empty());
    /// # });
    /// ```
    pub fn sync_wait(&self, resources: &[Resource], clusters: &[String]) -> SyncWait {
        let waiters = self
            .members()
            .iter()
            .filter(|c| clusters.is_empty() || clusters.iter().any(|n| **n == *c.name))
            .map(|c| {
                let w = resources
                    .iter()
                    .map(|r| (*r, c.barrier(*r).waiter()))
                    .collect();
                (c.name.to_string(), w)
            })
            .collect();
        SyncWait {
            waiters,
            stopping: self.shared.stopping.subscribe(),
        }
    }
}

/// A mesh-wide wait whose clusters are taken ([`ClusterMesh::sync_wait`]): it waits
/// for them only, whatever joins or leaves the mesh meanwhile (one that leaves counts
/// as disconnected).
pub struct SyncWait {
    waiters: Vec<(String, Vec<(Resource, Waiter)>)>,
    stopping: tokio::sync::watch::Receiver<bool>,
}

impl SyncWait {
    /// The clusters waited for, by name.
    pub fn clusters(&self) -> impl Iterator<Item = &str> {
        self.waiters.iter().map(|(name, _)| name.as_str())
    }

    /// Waits until each cluster taken synced or went away, or `deadline`. Once the
    /// mesh stops, it never ends.
    ///
    /// # Errors
    /// [`SyncTimeout`] naming what is still pending at the deadline.
    pub async fn until(self, deadline: Instant) -> Result<SyncReport, SyncTimeout> {
        let Self {
            mut waiters,
            mut stopping,
        } = self;
        let all = async {
            let mut report = SyncReport::default();
            for (name, ws) in &mut waiters {
                let mut disconnected = false;
                for (_, w) in ws.iter_mut() {
                    disconnected |= w.wait().await == Outcome::Disconnected;
                }
                if disconnected {
                    report.disconnected.push(name.clone());
                } else {
                    report.synced.push(name.clone());
                }
            }
            report
        };
        let stopped = async move {
            let _ = stopping.wait_for(|s| *s).await;
        };
        let outcome = tokio::select! {
            // A stop ends no wait, not even by its deadline: see `ClusterMesh::stop`.
            biased;
            () = stopped => std::future::pending().await,
            outcome = tokio::time::timeout_at(deadline, all) => outcome,
        };
        match outcome {
            Ok(report) => Ok(report),
            Err(_) => Err(SyncTimeout {
                pending: waiters
                    .iter()
                    .filter_map(|(name, ws)| {
                        let resources: Vec<Resource> = ws
                            .iter()
                            .filter(|(_, w)| w.state() == BarrierState::Pending)
                            .map(|(r, _)| *r)
                            .collect();
                        (!resources.is_empty()).then(|| PendingCluster {
                            cluster: name.clone(),
                            resources,
                        })
                    })
                    .collect(),
            }),
        }
    }
}

/// The wait's time logic on tokio's paused clock: the clock advances only when every
/// task is idle, so a deadline is reached exactly when nothing else can happen first.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::barrier::SyncBarrier;
    use std::time::Duration;

    /// A wait on `resources` of each named cluster, with the barriers that drive it
    /// and the mesh's stop signal.
    fn wait_on(
        clusters: &[&str],
        resources: &[Resource],
    ) -> (
        SyncWait,
        Vec<Vec<SyncBarrier>>,
        tokio::sync::watch::Sender<bool>,
    ) {
        let barriers: Vec<Vec<SyncBarrier>> = clusters
            .iter()
            .map(|_| resources.iter().map(|_| SyncBarrier::default()).collect())
            .collect();
        let waiters = clusters
            .iter()
            .zip(&barriers)
            .map(|(name, bs)| {
                let ws = resources.iter().zip(bs).map(|(r, b)| (*r, b.waiter()));
                (name.to_string(), ws.collect())
            })
            .collect();
        let (stop, stopping) = tokio::sync::watch::channel(false);
        (SyncWait { waiters, stopping }, barriers, stop)
    }

    const BOTH: [Resource; 2] = [Resource::IpCache, Resource::Identities];

    #[tokio::test(start_paused = true)]
    async fn the_deadline_names_what_is_still_pending() {
        let (wait, barriers, _stop) = wait_on(&["c2", "c3"], &BOTH);
        barriers[0][0].release();
        barriers[0][1].release();
        barriers[1][1].release();
        let started = Instant::now();
        let e = wait
            .until(started + Duration::from_secs(60))
            .await
            .unwrap_err();
        assert_eq!(started.elapsed(), Duration::from_secs(60));
        assert_eq!(
            e.pending,
            [PendingCluster {
                cluster: "c3".into(),
                resources: vec![Resource::IpCache],
            }]
        );
        assert!(e.to_string().contains("c3 (ipcache)"), "{e}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_cluster_removed_mid_wait_counts_as_done() {
        let (wait, barriers, _stop) = wait_on(&["c2", "c3"], &BOTH);
        let started = Instant::now();
        let wait = tokio::spawn(wait.until(started + Duration::from_secs(60)));
        tokio::time::sleep(Duration::from_secs(10)).await;
        for b in &barriers[0] {
            b.release();
        }
        // c3 goes (removed from the mesh): its barriers are dropped.
        let [c2, c3]: [Vec<SyncBarrier>; 2] = barriers.try_into().ok().unwrap();
        drop(c3);
        let report = wait.await.unwrap().unwrap();
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(10),
            "ends when c3 goes"
        );
        assert_eq!(report.synced, ["c2"]);
        assert_eq!(report.disconnected, ["c3"]);
        drop(c2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_cluster_releases_as_disconnected() {
        let (wait, barriers, _stop) = wait_on(&["c2"], &BOTH);
        barriers[0][0].release();
        barriers[0][1].disconnect();
        let report = wait.until(Instant::now() + Duration::from_secs(60)).await;
        assert_eq!(report.unwrap().disconnected, ["c2"]);
    }

    #[tokio::test(start_paused = true)]
    async fn after_stop_no_wait_ends_not_even_by_its_deadline() {
        let (wait, barriers, stop) = wait_on(&["c2"], &BOTH);
        let started = Instant::now();
        let wait = tokio::spawn(wait.until(started + Duration::from_secs(60)));
        stop.send_replace(true);
        // Past the deadline, then every barrier released: still no end.
        tokio::time::sleep(Duration::from_secs(120)).await;
        for b in &barriers[0] {
            b.release();
        }
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert!(!wait.is_finished(), "a stopping mesh releases no waiter");
        wait.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn control_without_stop_the_same_wait_times_out() {
        let (wait, _barriers, _stop) = wait_on(&["c2"], &BOTH);
        let started = Instant::now();
        let wait = tokio::spawn(wait.until(started + Duration::from_secs(60)));
        tokio::time::sleep(Duration::from_secs(120)).await;
        assert!(wait.is_finished());
        assert!(wait.await.unwrap().is_err());
    }
}
