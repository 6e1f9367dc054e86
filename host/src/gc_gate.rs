//! When restored WireGuard peers (and the pod routes restored with them) may go: once
//! this cluster's nodes are listed and every remote cluster's nodes and ipcache entries
//! are in (a disconnected or removed cluster counts as done). Until then a restored
//! peer may be the only way to a remote node whose record has not arrived: removing it
//! is the outage of the seed note.
//!
//! Then the peer-gc policy (the plugins) may hold the removal back, for a time the host
//! has clamped (a vendor that knows its remote nodes re-register slowly).

use crate::clustermesh::{ClusterMesh, ClusterStatus};
use crate::hooks::{PeerGcPolicy, PeerGcRequest, PeerGcVerdict, RestoredPeer};
use crate::metrics::{Waiter, Waits};
use crate::wireguard::{PeerSync, PodRoutes};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// What the gate lets go, once it may: the restored state no one claims. Both calls
/// block (they ask the WireGuard stage's thread).
pub trait RestoredGarbage: Send + Sync + 'static {
    /// The restored peers collection would remove now.
    fn unclaimed(&self) -> Vec<RestoredPeer>;
    /// Removes what no one claims.
    fn collect(&self);
}

/// The device's restored peers and, when the agent routes pods, the restored routes.
pub struct WireGuardGarbage {
    /// The WireGuard stage.
    pub peers: Arc<PeerSync>,
    /// The pod routes, if the agent manages them.
    pub routes: Option<Arc<PodRoutes>>,
}

impl RestoredGarbage for WireGuardGarbage {
    fn unclaimed(&self) -> Vec<RestoredPeer> {
        self.peers
            .garbage()
            .into_iter()
            .map(|(public_key, allowed_ips)| RestoredPeer {
                public_key,
                allowed_ips,
            })
            .collect()
    }

    fn collect(&self) {
        let r = self.peers.collect_garbage();
        tracing::info!(kept = r.kept.len(), removed = ?r.removed, trimmed = ?r.trimmed, "restored WireGuard peers collected");
        if let Some(routes) = &self.routes {
            routes.collect_garbage();
        }
    }
}

/// The gate: what it waits for, and who may hold the removal back.
pub struct GarbageGate<P> {
    /// The remote clusters.
    pub mesh: ClusterMesh,
    /// The mesh follows a config directory: the clusters to wait for are its files.
    pub config_dir: bool,
    /// Becomes true once this cluster's own nodes are listed.
    pub local_nodes: watch::Receiver<bool>,
    /// Wait for the remote nodes at all (`--wireguard-wait-for-remote-nodes`).
    pub wait: bool,
    /// One wait's bound; a wait that times out is counted and begun again.
    pub timeout: Duration,
    /// Who may hold the removal back.
    pub policy: P,
    /// Becomes true once the plugins present at start are in.
    pub plugins_loaded: watch::Receiver<bool>,
    /// Where the waits are counted.
    pub waits: Arc<Waits>,
}

impl<P: PeerGcPolicy> GarbageGate<P> {
    /// Waits until the restored state may go, then removes it. Never ends before:
    /// a wait that times out is begun again, since a cut connection costs more than a
    /// stale peer; and a stopping mesh releases no wait.
    pub async fn collect(mut self, garbage: Arc<impl RestoredGarbage>) {
        if self.wait {
            self.wait_for_remote_nodes().await;
        } else {
            tracing::warn!("restored WireGuard peers collected without waiting for the remote nodes (the wait is disabled)");
        }
        self.ask_policy(&garbage).await;
        if let Err(e) = tokio::task::spawn_blocking(move || garbage.collect()).await {
            tracing::error!(error = %e, "WireGuard garbage collection task failed");
        }
    }

    async fn wait_for_remote_nodes(&mut self) {
        let _ = self.local_nodes.wait_for(|synced| *synced).await;
        if self.config_dir {
            self.mesh.config_dir_synced().await;
        }
        loop {
            let started = tokio::time::Instant::now();
            let deadline = started + self.timeout;
            let synced = match self.mesh.nodes_synced(deadline).await {
                Ok(_) => self.mesh.ip_identities_synced(deadline).await,
                Err(e) => Err(e),
            };
            self.waits
                .observe_wait(Waiter::WireguardGc, &synced, started.elapsed());
            match synced {
                Ok(r) => {
                    tracing::info!(synced = ?r.synced, disconnected = ?r.disconnected, "remote nodes synced: restored WireGuard peers may go");
                    return;
                }
                Err(e) => tracing::warn!(error = %e, "restored WireGuard peers kept"),
            }
        }
    }

    /// Asks the policy about the restored peers collection would remove, and holds as
    /// it decides.
    async fn ask_policy(&mut self, garbage: &Arc<impl RestoredGarbage>) {
        let _ = self.plugins_loaded.wait_for(|loaded| *loaded).await;
        let g = garbage.clone();
        let peers = tokio::task::spawn_blocking(move || g.unclaimed())
            .await
            .unwrap_or_default();
        if peers.is_empty() {
            return;
        }
        let clusters = self
            .mesh
            .status()
            .iter()
            .map(ClusterStatus::hook_view)
            .collect();
        let answer = self
            .policy
            .peer_gc_policy(PeerGcRequest { peers, clusters })
            .await;
        let decided_by = answer.decided_by.as_deref().unwrap_or("built-in default");
        if let PeerGcVerdict::Hold(hold) = answer.verdict {
            tracing::info!(
                decided_by,
                ?hold,
                "restored WireGuard peers held back by the peer-gc policy"
            );
            tokio::time::sleep(hold).await;
        }
    }
}

/// The gate's time logic on tokio's paused clock, with a fixed policy and a fake
/// device: the clock advances only when every task is idle, so "not collected after an
/// hour" means nothing could have collected them.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::Answer;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Mutex;
    use tokio::time::Instant;

    /// A mesh whose one remote cluster, `c2`, never answers (a closed loopback port):
    /// its barriers stay pending.
    async fn mesh_with_pending_c2() -> ClusterMesh {
        let mesh = ClusterMesh::new(
            crate::clustermesh::Config::default(),
            Arc::new(crate::clustermesh::NoObserver),
            crate::clustermesh::SyncCallbacks::default(),
        );
        let unreachable = crate::kvstore::Endpoints {
            urls: vec!["http://127.0.0.1:1".into()],
            tls: Default::default(),
        };
        mesh.upsert_cluster("c2", Ok(unreachable)).await;
        mesh
    }

    /// Answers every peer-gc question with `verdict`, counting the questions.
    struct Fixed(PeerGcVerdict, Arc<Mutex<Vec<PeerGcRequest>>>);

    impl PeerGcPolicy for Fixed {
        async fn peer_gc_policy(&self, request: PeerGcRequest) -> Answer<PeerGcVerdict> {
            self.1.lock().unwrap().push(request);
            Answer {
                verdict: self.0,
                decided_by: Some("fixed".into()),
            }
        }
    }

    /// One restored peer, and whether it was collected.
    #[derive(Default)]
    struct Device {
        unclaimed: Vec<RestoredPeer>,
        collected: AtomicBool,
        collections: AtomicUsize,
    }

    impl RestoredGarbage for Device {
        fn unclaimed(&self) -> Vec<RestoredPeer> {
            self.unclaimed.clone()
        }
        fn collect(&self) {
            self.collected.store(true, Ordering::SeqCst);
            self.collections.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn device() -> Arc<Device> {
        Arc::new(Device {
            unclaimed: vec![RestoredPeer {
                public_key: "AAAA".into(),
                allowed_ips: vec!["10.2.0.5/32".into()],
            }],
            ..Device::default()
        })
    }

    struct Setup {
        gate: GarbageGate<Fixed>,
        asked: Arc<Mutex<Vec<PeerGcRequest>>>,
        local_nodes: watch::Sender<bool>,
        _plugins_loaded: watch::Sender<bool>,
    }

    fn gate(mesh: &ClusterMesh, wait: bool, verdict: PeerGcVerdict) -> Setup {
        let (local_nodes, local_rx) = watch::channel(true);
        let (plugins_loaded, plugins_rx) = watch::channel(true);
        let asked = Arc::new(Mutex::new(Vec::new()));
        Setup {
            gate: GarbageGate {
                mesh: mesh.clone(),
                config_dir: false,
                local_nodes: local_rx,
                wait,
                timeout: Duration::from_secs(30),
                policy: Fixed(verdict, asked.clone()),
                plugins_loaded: plugins_rx,
                waits: Arc::new(Waits::default()),
            },
            asked,
            local_nodes,
            _plugins_loaded: plugins_loaded,
        }
    }

    const HOUR: Duration = Duration::from_secs(3600);

    #[tokio::test(start_paused = true)]
    async fn restored_peers_stay_while_a_remote_cluster_is_pending_and_go_once_it_is_removed() {
        let mesh = mesh_with_pending_c2().await;
        let setup = gate(&mesh, true, PeerGcVerdict::Collect);
        let waits = setup.gate.waits.clone();
        let dev = device();
        let started = Instant::now();
        let run = tokio::spawn(setup.gate.collect(dev.clone()));
        tokio::time::sleep(HOUR).await;
        assert!(
            !dev.collected.load(Ordering::SeqCst),
            "kept while c2 is pending"
        );
        // Each 30 s wait timed out, was counted against c2, and was begun again.
        let timeouts = waits.snapshot().timeouts_of("c2", Waiter::WireguardGc);
        assert!((100..=120).contains(&timeouts), "{timeouts} timeouts");
        mesh.remove_cluster("c2").await;
        tokio::time::timeout(HOUR, run).await.unwrap().unwrap();
        assert_eq!(started.elapsed(), HOUR, "collected as soon as c2 went");
        assert_eq!(dev.collections.load(Ordering::SeqCst), 1);
        assert_eq!(setup.asked.lock().unwrap()[0].peers, dev.unclaimed);
    }

    #[tokio::test(start_paused = true)]
    async fn control_without_the_wait_restored_peers_go_at_once() {
        let mesh = mesh_with_pending_c2().await;
        let setup = gate(&mesh, false, PeerGcVerdict::Collect);
        let dev = device();
        let started = Instant::now();
        tokio::time::timeout(HOUR, setup.gate.collect(dev.clone()))
            .await
            .unwrap();
        assert_eq!(started.elapsed(), Duration::ZERO);
        assert!(
            dev.collected.load(Ordering::SeqCst),
            "c2 pending, collected anyway"
        );
        mesh.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn this_clusters_own_nodes_come_first() {
        let mesh = mesh_with_pending_c2().await;
        mesh.remove_cluster("c2").await;
        let setup = gate(&mesh, true, PeerGcVerdict::Collect);
        setup.local_nodes.send_replace(false);
        let dev = device();
        let run = tokio::spawn(setup.gate.collect(dev.clone()));
        tokio::time::sleep(HOUR).await;
        assert!(
            !dev.collected.load(Ordering::SeqCst),
            "own nodes not listed yet"
        );
        setup.local_nodes.send_replace(true);
        tokio::time::timeout(HOUR, run).await.unwrap().unwrap();
        assert!(dev.collected.load(Ordering::SeqCst));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stopping_mesh_never_lets_them_go() {
        let mesh = mesh_with_pending_c2().await;
        let setup = gate(&mesh, true, PeerGcVerdict::Collect);
        let dev = device();
        mesh.stop().await;
        let run = tokio::spawn(setup.gate.collect(dev.clone()));
        tokio::time::sleep(HOUR * 24).await;
        assert!(
            !dev.collected.load(Ordering::SeqCst),
            "the agent is going away"
        );
        run.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn the_policy_holds_the_removal_back_for_its_time() {
        let mesh = mesh_with_pending_c2().await;
        mesh.remove_cluster("c2").await;
        let hold = Duration::from_secs(600);
        let setup = gate(&mesh, true, PeerGcVerdict::Hold(hold));
        let dev = device();
        let started = Instant::now();
        tokio::time::timeout(HOUR, setup.gate.collect(dev.clone()))
            .await
            .unwrap();
        assert_eq!(started.elapsed(), hold);
        assert!(dev.collected.load(Ordering::SeqCst));
    }

    #[tokio::test(start_paused = true)]
    async fn with_nothing_to_remove_the_policy_is_not_asked() {
        let mesh = mesh_with_pending_c2().await;
        mesh.remove_cluster("c2").await;
        let setup = gate(&mesh, true, PeerGcVerdict::Hold(HOUR));
        let dev = Arc::new(Device::default());
        tokio::time::timeout(HOUR, setup.gate.collect(dev.clone()))
            .await
            .unwrap();
        assert!(setup.asked.lock().unwrap().is_empty());
        assert!(
            dev.collected.load(Ordering::SeqCst),
            "routes are still collected"
        );
    }
}
