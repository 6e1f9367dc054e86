//! The endpoints' Pod directory over the Kubernetes sources: what a CNI ADD asks in
//! Kubernetes mode.

use super::Kubernetes;
use crate::endpoint::{PodDirectory, PodLookupError, PodRef};
use futures::future::BoxFuture;
use std::time::Duration;
use weft_model::{LabelFilter, Labels};

/// How long an ADD waits for its Pod's event (the established agent's k8s event lag
/// is usually well below a second; a runtime retries a failed ADD).
pub(super) const POD_WAIT: Duration = Duration::from_secs(10);

/// Pods' identity labels from the Kubernetes sources (or, when the configuration
/// cannot be used, a refusal naming why).
pub(super) struct KubernetesPods {
    sources: Option<crate::k8s::KubernetesSources>,
    cluster: String,
    filter: LabelFilter,
    bound: Duration,
}

impl KubernetesPods {
    pub(super) fn new(k8s: &Kubernetes, cluster: &str, filter: &LabelFilter) -> Self {
        KubernetesPods {
            sources: match k8s {
                Kubernetes::Sources(s) => Some((**s).clone()),
                Kubernetes::Unusable(_) => None,
            },
            cluster: cluster.to_owned(),
            filter: filter.clone(),
            bound: POD_WAIT,
        }
    }
}

impl PodDirectory for KubernetesPods {
    fn identity_labels<'a>(
        &'a self,
        pod: &'a PodRef,
    ) -> BoxFuture<'a, Result<Labels, PodLookupError>> {
        Box::pin(async move {
            let not_synced = || PodLookupError::NotSynced {
                namespace: pod.namespace.clone(),
                name: pod.name.clone(),
            };
            let Some(sources) = &self.sources else {
                return Err(not_synced());
            };
            let started = std::time::Instant::now();
            let found = sources
                .pod_identity_labels(
                    &pod.namespace,
                    &pod.name,
                    pod.uid.as_deref(),
                    &self.cluster,
                    &self.filter,
                    self.bound,
                )
                .await;
            found.map_err(|missing| {
                let (namespace, name, waited) =
                    (pod.namespace.clone(), pod.name.clone(), started.elapsed());
                match missing {
                    crate::k8s::Missing::NotSynced => not_synced(),
                    crate::k8s::Missing::Pod => PodLookupError::NotFound {
                        namespace,
                        name,
                        waited,
                    },
                    crate::k8s::Missing::Namespace => PodLookupError::NoNamespace {
                        namespace,
                        name,
                        waited,
                    },
                }
            })
        })
    }
}

/// Follows the Pod and Namespace sources: a pod whose labels (or whose namespace's
/// labels) change gets the new identity (`EndpointManager::relabel`). A re-list or a
/// feed that fell behind re-checks every pod of the node, so that no change is lost.
pub(super) async fn follow_labels(
    sources: crate::k8s::KubernetesSources,
    manager: std::sync::Arc<crate::endpoint::EndpointManager>,
    cluster: String,
    filter: LabelFilter,
) {
    use crate::k8s::Change;
    use tokio::sync::broadcast::error::RecvError;
    let (mut pods, mut namespaces) = (sources.pods.subscribe(), sources.namespaces.subscribe());
    // The pods (namespace, name) to re-check.
    let every_pod = |sources: &crate::k8s::KubernetesSources,
                     namespace: Option<&str>|
     -> Vec<(String, String)> {
        sources
            .pods
            .store()
            .state()
            .iter()
            .filter(|p| namespace.is_none_or(|ns| p.metadata.namespace.as_deref() == Some(ns)))
            .map(|p| name_of(&p.metadata))
            .collect()
    };
    loop {
        let check = tokio::select! {
            change = pods.recv() => match change {
                Ok(Change::Applied(p)) => vec![name_of(&p.metadata)],
                Ok(Change::Deleted(_)) => continue,
                Ok(Change::Resync) | Err(RecvError::Lagged(_)) => every_pod(&sources, None),
                Err(RecvError::Closed) => return,
            },
            change = namespaces.recv() => match change {
                Ok(Change::Applied(ns)) => every_pod(&sources, ns.metadata.name.as_deref()),
                Ok(Change::Deleted(_)) => continue,
                Ok(Change::Resync) | Err(RecvError::Lagged(_)) => every_pod(&sources, None),
                Err(RecvError::Closed) => return,
            },
        };
        for (namespace, name) in check {
            // The stores hold the pod now (it was just read from them): no wait.
            let labels = sources
                .pod_identity_labels(&namespace, &name, None, &cluster, &filter, Duration::ZERO)
                .await;
            let Ok(labels) = labels else { continue };
            if let Err(e) = manager.relabel(&namespace, &name, &labels).await {
                tracing::warn!(pod = %format!("{namespace}/{name}"), error = %e, "cannot give the pod its new identity; the next change retries");
            }
        }
    }
}

/// `(namespace, name)` of an object.
fn name_of(meta: &crate::k8s::ObjectMeta) -> (String, String) {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}
