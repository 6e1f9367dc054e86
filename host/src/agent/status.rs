//! What the agent reports: one status for the API and the metrics, and the API's
//! handlers (status, endpoints with their policy, ipcache, CNI calls).

use super::Agent;
use crate::api::{self, StatusReport};
use crate::datapath::NodeDatapath;
use crate::endpoint::store::Phase;
use crate::wireguard::PeerSyncStatus;
use std::sync::Arc;

/// The status the API and the metrics share.
pub(super) type Status = Arc<dyn Fn() -> StatusReport + Send + Sync>;

/// The agent's status as it is at each call.
pub(super) fn report(agent: &Agent) -> Status {
    let (mesh, state) = (agent.mesh.clone(), agent.state.clone());
    let plugins = agent.plugins.host.clone();
    let dp = agent.datapath.clone();
    let endpoints = agent.endpoints.clone();
    let (policies, followed) = (agent.policies.current.clone(), agent.policies.followed);
    let wg = agent
        .wireguard
        .as_ref()
        .map(|wg| (wg.device.peers.clone(), wg.routes.clone()));
    let cluster = agent.config.mesh.cluster_name.clone();
    let kubernetes = agent.kubernetes.clone();
    let runtime = tokio::runtime::Handle::current();
    Arc::new(move || StatusReport {
        runtime: Some(api::RuntimeStatus::of(&runtime)),
        kubernetes: kubernetes.get().map(|k| match k {
            super::Kubernetes::Sources(s) => api::KubernetesStatus {
                error: None,
                sources: s.statuses().into_iter().map(Into::into).collect(),
            },
            super::Kubernetes::Unusable(why) => api::KubernetesStatus {
                error: Some(why.clone()),
                sources: Vec::new(),
            },
        }),
        cluster: cluster.clone(),
        clusters: mesh.status(),
        totals: Some(state.totals()),
        plugins: Some(plugins.report()),
        datapath: dp.as_ref().map(NodeDatapath::status),
        wireguard: wg.as_ref().map(|(peers, routes)| PeerSyncStatus {
            routes: Some(routes.status()),
            ..peers.status()
        }),
        policies: followed.then(|| {
            let set = policies.borrow();
            api::PoliciesStatus {
                loaded: set.policies.iter().map(|p| p.name.clone()).collect(),
                refused: set.refused.clone(),
            }
        }),
        endpoints: endpoints.get().map(|m| {
            let all = m.list();
            let ready = all.iter().filter(|r| r.phase == Phase::Ready).count();
            api::EndpointsSummary {
                ready,
                creating: all.len() - ready,
            }
        }),
    })
}

/// What the local API answers with: the status, the endpoints (with their policy when
/// policies are followed), the ipcache, and the CNI calls when this node runs pods.
pub(super) fn api_handlers(agent: &Agent, status: Status) -> api::Handlers {
    let endpoint_manager = agent.endpoints.clone();
    let state = agent.state.clone();
    let (policies, following_policies) = (agent.policies.current.clone(), agent.policies.followed);
    let cni = agent.config.endpoints.is_some();
    api::Handlers {
        status: Box::new(move || status()),
        endpoints: {
            let (endpoints, state) = (endpoint_manager.clone(), state.clone());
            Box::new(move || {
                let records = endpoints.get().map(|m| m.list()).unwrap_or_default();
                let set = policies.borrow().clone();
                let identities = state.identities.lock().expect("identities lock").all();
                records
                    .into_iter()
                    .map(|record| {
                        let policy = following_policies
                            .then(|| record.labels.parse().ok())
                            .flatten()
                            .map(|labels| {
                                crate::policy::compute(&set.policies, &labels, &identities)
                            });
                        api::EndpointView { record, policy }
                    })
                    .collect()
            })
        },
        ipcache: Box::new(move || {
            state
                .ipcache
                .entries()
                .into_iter()
                .map(Into::into)
                .collect()
        }),
        cni: cni.then(|| {
            let handler: api::CniHandler = Arc::new(move |call| {
                let endpoints = endpoint_manager.clone();
                Box::pin(async move {
                    match endpoints.get() {
                        Some(m) => m.handle(call).await,
                        None => Err(weft_api::cni::Failure::new(
                            11,
                            "the agent is starting",
                            "its local etcd is not connected yet",
                        )),
                    }
                })
            });
            handler
        }),
    }
}
