//! A pod's identity labels from the Pod and Namespace stores, as a CNI ADD needs them:
//! waiting, bounded, for a Pod event (or the initial lists) that has not arrived yet.

use crate::KubernetesSources;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::runtime::reflector::ObjectRef;
use std::time::{Duration, Instant};
use weft_model::{pod_identity_labels, LabelFilter, Labels, PodIdentitySource};

/// What was not there within the wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// The sources have no initial list (the API server is unreachable or slow).
    NotSynced,
    /// No such Pod (with that UID, when given) on this node.
    Pod,
    /// The Pod's Namespace.
    Namespace,
}

impl KubernetesSources {
    /// The identity labels of the pod `namespace`/`name` (and `uid`, when given), for
    /// the cluster `cluster` through `filter`, waiting at most `bound` in all.
    ///
    /// # Errors
    /// [`Missing`]: what was not there when the wait ended.
    pub async fn pod_identity_labels(
        &self,
        namespace: &str,
        name: &str,
        uid: Option<&str>,
        cluster: &str,
        filter: &LabelFilter,
        bound: Duration,
    ) -> Result<Labels, Missing> {
        let deadline = Instant::now() + bound;
        let left = || deadline.saturating_duration_since(Instant::now());
        if !(self.pods.wait_synced(left()).await && self.namespaces.wait_synced(left()).await) {
            return Err(Missing::NotSynced);
        }
        let key = ObjectRef::<Pod>::new(name).within(namespace);
        let same_uid = |p: &Pod| uid.is_none_or(|u| p.metadata.uid.as_deref() == Some(u));
        let pod = self
            .pods
            .wait_for(&key, left(), same_uid)
            .await
            .ok_or(Missing::Pod)?;
        let ns = self
            .namespaces
            .wait_for(&ObjectRef::<Namespace>::new(namespace), left(), |_| true)
            .await
            .ok_or(Missing::Namespace)?;
        let empty = Default::default();
        Ok(pod_identity_labels(
            &PodIdentitySource {
                cluster,
                namespace,
                service_account: pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.service_account_name.as_deref()),
                pod_labels: pod.metadata.labels.as_ref().unwrap_or(&empty),
                namespace_labels: ns.metadata.labels.as_ref().unwrap_or(&empty),
            },
            filter,
        ))
    }
}
