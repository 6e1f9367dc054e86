//! How long an endpoint's regeneration waits for remote state: the plugins' policy
//! asked, bounded by the host, then carried out on the mesh's barriers.

use std::time::Duration;
use tokio::time::Instant;
use weft_clustermesh::{ClusterMesh, ClusterStatus, SyncReport, SyncTimeout};
use weft_hooks::{Answer, RegenerationPolicy, RegenerationReason, RegenerationRequest, Verdict};

pub use weft_hooks::Endpoint;

/// The node's encryption and the configured default wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegenerationConfig {
    /// `--clustermesh-ip-identities-sync-timeout`.
    pub default_timeout: Duration,
    /// IPsec is on.
    pub ipsec: bool,
    /// WireGuard is on.
    pub wireguard: bool,
}

/// How a regeneration wait ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitOutcome {
    /// The policy's answer.
    pub answer: Answer,
    /// `None` when the verdict was to proceed; else the wait's result.
    pub result: Option<Result<SyncReport, SyncTimeout>>,
}

/// Told once, when the policy's verdict is to wait: the answer and the clusters the
/// wait took (by name), before it waits. What an endpoint listing shows while it waits.
pub type OnWait = Box<dyn FnOnce(&Answer, &[&str]) + Send>;

/// Asks the policy for `endpoint`, regenerated for `reason`, and waits as it decides.
/// The wait is bounded by the verdict's timeout, which the host has already clamped.
/// `on_wait` learns what it waits for before it waits.
pub async fn wait_for_regeneration(
    mesh: &ClusterMesh,
    plugins: &impl RegenerationPolicy,
    config: RegenerationConfig,
    endpoint: Endpoint,
    reason: RegenerationReason,
    on_wait: OnWait,
) -> WaitOutcome {
    let kind = endpoint.kind;
    let request = RegenerationRequest {
        endpoint,
        reason,
        ipsec: config.ipsec,
        wireguard: config.wireguard,
        default_timeout_ms: u64::try_from(config.default_timeout.as_millis()).unwrap_or(u64::MAX),
        clusters: mesh.status().iter().map(ClusterStatus::hook_view).collect(),
    };
    tracing::info!(endpoint = ?kind, ?reason, "asking the regeneration policy");
    let answer = plugins.regeneration_policy(request).await;
    let result = match &answer.verdict {
        Verdict::Wait {
            timeout,
            barriers,
            clusters,
        } => {
            let wait = mesh.sync_wait(barriers, clusters);
            let waiting_for: Vec<&str> = wait.clusters().collect();
            tracing::info!(
                endpoint = ?kind,
                decided_by = answer.decided_by.as_deref().unwrap_or("built-in default"),
                ?timeout,
                ?barriers,
                ?waiting_for,
                "endpoint regeneration waits for remote state"
            );
            on_wait(&answer, &waiting_for);
            let now = Instant::now();
            // A year stands for "no bound" where the clock cannot add the timeout.
            let deadline = now
                .checked_add(*timeout)
                .unwrap_or(now + Duration::from_secs(365 * 86_400));
            Some(wait.until(deadline).await)
        }
        Verdict::Proceed | Verdict::NoOpinion => None,
    };
    WaitOutcome { answer, result }
}

/// The regeneration wait on tokio's paused clock, with a fixed policy in place of the
/// plugins: the clock advances only when every task is idle, so a deadline is reached
/// exactly when nothing else can happen first. The mesh has one remote cluster, `c2`,
/// whose etcd (a closed loopback port) never answers: its barriers stay pending.
#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use weft_clustermesh::{Config, NoObserver, SyncCallbacks};
    use weft_hooks::Resource;
    use weft_kvstore::Endpoints;

    /// Answers every question with `verdict`, decided by "fixed".
    struct Fixed(Verdict);

    impl RegenerationPolicy for Fixed {
        async fn regeneration_policy(&self, _: RegenerationRequest) -> Answer {
            Answer {
                verdict: self.0.clone(),
                decided_by: Some("fixed".into()),
            }
        }
    }

    fn wait(timeout: Duration) -> Fixed {
        Fixed(Verdict::Wait {
            timeout,
            barriers: vec![Resource::IpCache, Resource::Identities],
            clusters: vec![],
        })
    }

    /// A mesh whose one remote cluster, `c2`, never answers (a closed loopback port).
    async fn mesh_with_pending_c2() -> ClusterMesh {
        let mesh = ClusterMesh::new(
            Config::default(),
            Arc::new(NoObserver),
            SyncCallbacks::default(),
        );
        let unreachable = Endpoints {
            urls: vec!["http://127.0.0.1:1".into()],
            tls: Default::default(),
        };
        mesh.upsert_cluster("c2", Ok(unreachable)).await;
        mesh
    }

    const CONFIG: RegenerationConfig = RegenerationConfig {
        default_timeout: Duration::from_secs(120),
        ipsec: false,
        wireguard: true,
    };

    /// What `on_wait` was told: the clusters waited for, once per wait.
    fn told() -> (Arc<Mutex<Vec<Vec<String>>>>, OnWait) {
        let told = Arc::new(Mutex::new(Vec::new()));
        let t = told.clone();
        let on_wait: OnWait = Box::new(move |_, clusters| {
            t.lock()
                .unwrap()
                .push(clusters.iter().map(|c| c.to_string()).collect());
        });
        (told, on_wait)
    }

    async fn regenerate(
        mesh: &ClusterMesh,
        policy: &impl RegenerationPolicy,
        on_wait: OnWait,
    ) -> WaitOutcome {
        let endpoint = Endpoint::host();
        wait_for_regeneration(
            mesh,
            policy,
            CONFIG,
            endpoint,
            RegenerationReason::Restore,
            on_wait,
        )
        .await
    }

    #[tokio::test(start_paused = true)]
    async fn the_policys_timeout_ends_the_wait_naming_the_pending_cluster() {
        let mesh = mesh_with_pending_c2().await;
        let (told, on_wait) = told();
        let started = Instant::now();
        let outcome = regenerate(&mesh, &wait(Duration::from_secs(30)), on_wait).await;
        assert_eq!(started.elapsed(), Duration::from_secs(30));
        let timeout = outcome.result.unwrap().unwrap_err();
        assert_eq!(timeout.pending[0].cluster, "c2");
        assert_eq!(outcome.answer.decided_by.as_deref(), Some("fixed"));
        assert_eq!(*told.lock().unwrap(), [vec!["c2".to_string()]]);
        mesh.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_cluster_removed_mid_wait_ends_it_as_disconnected() {
        let mesh = mesh_with_pending_c2().await;
        let (_, on_wait) = told();
        let started = Instant::now();
        let policy = wait(Duration::from_secs(3600));
        let m = mesh.clone();
        let remove = async move {
            tokio::time::sleep(Duration::from_secs(10)).await;
            m.remove_cluster("c2").await;
        };
        let (outcome, ()) = tokio::join!(regenerate(&mesh, &policy, on_wait), remove);
        assert_eq!(started.elapsed(), Duration::from_secs(10));
        let report = outcome.result.unwrap().unwrap();
        assert_eq!(report.disconnected, ["c2"]);
        assert!(report.synced.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_timeout_past_the_clocks_range_still_waits_and_ends_on_news() {
        let mesh = mesh_with_pending_c2().await;
        let (_, on_wait) = told();
        let started = Instant::now();
        let policy = wait(Duration::MAX);
        let m = mesh.clone();
        let remove = async move {
            tokio::time::sleep(Duration::from_secs(86_400)).await;
            m.remove_cluster("c2").await;
        };
        let (outcome, ()) = tokio::join!(regenerate(&mesh, &policy, on_wait), remove);
        assert_eq!(started.elapsed(), Duration::from_secs(86_400));
        assert_eq!(outcome.result.unwrap().unwrap().disconnected, ["c2"]);
    }

    #[tokio::test(start_paused = true)]
    async fn proceed_and_no_opinion_do_not_wait_and_tell_no_one() {
        let mesh = mesh_with_pending_c2().await;
        for verdict in [Verdict::Proceed, Verdict::NoOpinion] {
            let (told, on_wait) = told();
            let started = Instant::now();
            let outcome = regenerate(&mesh, &Fixed(verdict.clone()), on_wait).await;
            assert_eq!(started.elapsed(), Duration::ZERO, "{verdict:?}");
            assert_eq!(outcome.result, None);
            assert!(told.lock().unwrap().is_empty());
        }
        mesh.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn after_the_mesh_stops_a_wait_does_not_end_even_past_its_deadline() {
        let mesh = mesh_with_pending_c2().await;
        let (_, on_wait) = told();
        let policy = wait(Duration::from_secs(30));
        mesh.stop().await;
        let m = mesh.clone();
        let wait = tokio::spawn(async move {
            let endpoint = Endpoint::host();
            wait_for_regeneration(
                &m,
                &policy,
                CONFIG,
                endpoint,
                RegenerationReason::Create,
                on_wait,
            )
            .await
        });
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert!(!wait.is_finished(), "a stopping agent switches no endpoint");
        wait.abort();
    }
}
