//! How long an endpoint's regeneration waits for remote state: the plugins' policy
//! asked, bounded by the host, then carried out on the mesh's barriers.

use crate::clustermesh::{ClusterMesh, ClusterStatus, SyncReport, SyncTimeout};
use crate::hooks::{
    Answer, ClusterSync, EndpointKind, RegenerationPolicy, RegenerationReason, RegenerationRequest,
    Verdict,
};
use crate::identity::Reserved;
use std::time::Duration;
use tokio::time::Instant;

pub use crate::hooks::Endpoint;

/// The host endpoint, as the policy sees it: the reserved `host` identity and its
/// label, no namespace or name.
pub fn host_endpoint() -> Endpoint {
    Endpoint {
        kind: EndpointKind::Host,
        identity: Reserved::Host.id(),
        namespace: String::new(),
        name: String::new(),
        labels: vec![format!("reserved:{}", Reserved::Host.name())],
    }
}

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

/// The hook's view of one remote cluster.
pub fn cluster_sync(s: &ClusterStatus) -> ClusterSync {
    ClusterSync {
        name: s.name.clone(),
        connected: s.connected,
        nodes_synced: s.synced.nodes,
        ipcache_synced: s.synced.ipcache,
        identities_synced: s.synced.identities,
        services_synced: s.synced.services,
    }
}

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
        clusters: mesh.status().iter().map(cluster_sync).collect(),
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
