//! Every Kubernetes source of one node's agent, started together: the node's Pods
//! (field selector `spec.nodeName`), Namespaces, the node's own Node, the three policy
//! kinds, Services and EndpointSlices.

use crate::cilium::{CiliumClusterwideNetworkPolicy, CiliumNetworkPolicy};
use crate::source::{Retry, Source, SourceStatus};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::runtime::watcher;
use kube::Api;
use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;
use tokio::task::JoinSet;

/// A Kubernetes configuration that was asked for and cannot be used, naming it.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// `--k8s-kubeconfig-path` does not read or parse.
    #[error("kubeconfig {path}")]
    Kubeconfig {
        /// The file.
        path: String,
        /// kube-rs's error.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// The configuration does not make a client.
    #[error("Kubernetes client from {from}")]
    Client {
        /// The kubeconfig's path, or `in-cluster`.
        from: String,
        /// kube-rs's error.
        #[source]
        source: kube::Error,
    },
}

/// A client from `kubeconfig` when given; otherwise from the environment (`KUBECONFIG`,
/// `~/.kube/config`, the in-cluster service account), `Ok(None)` when there is none.
///
/// # Errors
/// [`ClientError`] when the given kubeconfig, or the configuration found, is unusable.
pub async fn client(kubeconfig: Option<&Path>) -> Result<Option<kube::Client>, ClientError> {
    let (config, from) = match kubeconfig {
        Some(path) => {
            let err = |source| ClientError::Kubeconfig {
                path: path.display().to_string(),
                source,
            };
            let file = kube::config::Kubeconfig::read_from(path).map_err(err)?;
            let config = kube::Config::from_custom_kubeconfig(file, &Default::default())
                .await
                .map_err(err)?;
            (config, path.display().to_string())
        }
        None => match kube::Config::infer().await {
            Ok(c) => (c, "the environment".to_owned()),
            Err(e) => {
                tracing::info!(reason = %e, "no Kubernetes configuration: Kubernetes sources off");
                return Ok(None);
            }
        },
    };
    kube::Client::try_from(config)
        .map(Some)
        .map_err(|source| ClientError::Client { from, source })
}

/// `(API group, resource)` of everything the agent watches (its sources and the
/// kube-apiserver's EndpointSlices): what the chart's ClusterRole grants, get, list and
/// watch, and nothing more (`tests/deploy.rs` holds the two equal).
pub fn watched_resources() -> Vec<(String, String)> {
    fn of<K: kube::Resource<DynamicType = ()>>() -> (String, String) {
        (K::group(&()).into_owned(), K::plural(&()).into_owned())
    }
    let mut all = vec![
        of::<Pod>(),
        of::<Namespace>(),
        of::<Node>(),
        of::<NetworkPolicy>(),
        of::<CiliumNetworkPolicy>(),
        of::<CiliumClusterwideNetworkPolicy>(),
        of::<Service>(),
        of::<EndpointSlice>(),
    ];
    all.sort();
    all.dedup();
    all
}

/// The sources of one node.
#[derive(Clone)]
pub struct KubernetesSources {
    /// This node's Pods.
    pub pods: Source<Pod>,
    /// Every Namespace (their labels join identities).
    pub namespaces: Source<Namespace>,
    /// This node's Node (pod CIDRs, addresses).
    pub node: Source<Node>,
    /// `networking.k8s.io/v1` NetworkPolicies.
    pub network_policies: Source<NetworkPolicy>,
    /// `cilium.io/v2` CiliumNetworkPolicies.
    pub cilium_network_policies: Source<CiliumNetworkPolicy>,
    /// `cilium.io/v2` CiliumClusterwideNetworkPolicies.
    pub cilium_clusterwide_network_policies: Source<CiliumClusterwideNetworkPolicy>,
    /// Services (for global services).
    pub services: Source<Service>,
    /// `discovery.k8s.io/v1` EndpointSlices (for global services).
    pub endpoint_slices: Source<EndpointSlice>,
}

impl KubernetesSources {
    /// Starts every source on `tasks`, for the node `node`.
    pub fn start(client: &kube::Client, node: &str, retry: Retry, tasks: &mut JoinSet<()>) -> Self {
        let on_node = format!("spec.nodeName={node}");
        let this_node = format!("metadata.name={node}");
        let all = watcher::Config::default;
        macro_rules! follow {
            ($name:literal, $api:expr, $config:expr) => {{
                let (source, run) = Source::follow($name, $api, $config, retry);
                tasks.spawn(run);
                source
            }};
        }
        KubernetesSources {
            pods: follow!("pods", Api::all(client.clone()), all().fields(&on_node)),
            namespaces: follow!("namespaces", Api::all(client.clone()), all()),
            node: follow!("node", Api::all(client.clone()), all().fields(&this_node)),
            network_policies: follow!("networkpolicies", Api::all(client.clone()), all()),
            cilium_network_policies: follow!(
                "ciliumnetworkpolicies",
                Api::all(client.clone()),
                all()
            ),
            cilium_clusterwide_network_policies: follow!(
                "ciliumclusterwidenetworkpolicies",
                Api::all(client.clone()),
                all()
            ),
            services: follow!("services", Api::all(client.clone()), all()),
            endpoint_slices: follow!("endpointslices", Api::all(client.clone()), all()),
        }
    }

    /// Every source's status, in a fixed order.
    pub fn statuses(&self) -> Vec<SourceStatus> {
        vec![
            self.pods.status(),
            self.namespaces.status(),
            self.node.status(),
            self.network_policies.status(),
            self.cilium_network_policies.status(),
            self.cilium_clusterwide_network_policies.status(),
            self.services.status(),
            self.endpoint_slices.status(),
        ]
    }

    /// Whether every source has its initial list.
    pub fn synced(&self) -> bool {
        self.statuses().iter().all(|s| s.synced)
    }

    /// Waits (at most `bound`) until every source has its initial list.
    pub async fn wait_synced(&self, bound: Duration) -> bool {
        tokio::time::timeout(bound, async {
            self.pods.wait_synced(bound).await
                && self.namespaces.wait_synced(bound).await
                && self.node.wait_synced(bound).await
                && self.network_policies.wait_synced(bound).await
                && self.cilium_network_policies.wait_synced(bound).await
                && self
                    .cilium_clusterwide_network_policies
                    .wait_synced(bound)
                    .await
                && self.services.wait_synced(bound).await
                && self.endpoint_slices.wait_synced(bound).await
        })
        .await
        .unwrap_or(false)
    }
}

/// What the Node says about itself: its pod CIDRs (`spec.podCIDRs`, else `spec.podCIDR`)
/// and its internal addresses. Malformed entries are skipped and named in the log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeFacts {
    /// The pod CIDRs.
    pub pod_cidrs: Vec<String>,
    /// `InternalIP` addresses (else `ExternalIP`).
    pub addresses: Vec<IpAddr>,
}

impl NodeFacts {
    /// Reads them from a Node.
    pub fn of(node: &Node) -> Self {
        let spec = node.spec.as_ref();
        let mut pod_cidrs: Vec<String> = spec.and_then(|s| s.pod_cidrs.clone()).unwrap_or_default();
        if pod_cidrs.is_empty() {
            pod_cidrs.extend(spec.and_then(|s| s.pod_cidr.clone()));
        }
        let addresses = node
            .status
            .as_ref()
            .and_then(|s| s.addresses.as_ref())
            .map(|all| {
                let of = |kind: &str| -> Vec<IpAddr> {
                    all.iter()
                        .filter(|a| a.type_ == kind)
                        .filter_map(|a| match a.address.parse() {
                            Ok(ip) => Some(ip),
                            Err(_) => {
                                tracing::warn!(address = %a.address, "skipping a Node address that is not an IP");
                                None
                            }
                        })
                        .collect()
                };
                let internal = of("InternalIP");
                if internal.is_empty() {
                    of("ExternalIP")
                } else {
                    internal
                }
            })
            .unwrap_or_default();
        NodeFacts {
            pod_cidrs,
            addresses,
        }
    }
}
