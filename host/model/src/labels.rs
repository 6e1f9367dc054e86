//! The label keys weft sets on every endpoint's identity itself (the `k8s:` source),
//! and that policy selectors name: one spelling for the endpoint manager and the policy;
//! and how a pod's identity labels are made from what Kubernetes says about it.

use crate::{Label, LabelFilter, Labels};
use std::collections::BTreeMap;

/// The label naming the endpoint's cluster.
pub const CLUSTER_LABEL: &str = "io.cilium.k8s.policy.cluster";

/// The label naming the endpoint's namespace.
pub const NAMESPACE_LABEL: &str = "io.kubernetes.pod.namespace";

/// The label naming the pod's service account.
pub const SERVICE_ACCOUNT_LABEL: &str = "io.cilium.k8s.policy.serviceaccount";

/// The prefix under which the namespace's labels join its pods' identities:
/// `io.cilium.k8s.namespace.labels.<key>`.
pub const NAMESPACE_LABELS_PREFIX: &str = "io.cilium.k8s.namespace.labels";

/// The prefix of the labels only the agent sets (cluster, service account, …): a
/// pod's own labels under it are dropped, as the established agent drops them.
pub const POLICY_LABELS_PREFIX: &str = "io.cilium.k8s.policy";

/// What Kubernetes says about a pod that its identity is made of.
#[derive(Debug, Clone, Copy)]
pub struct PodIdentitySource<'a> {
    /// This cluster's name.
    pub cluster: &'a str,
    /// The pod's namespace.
    pub namespace: &'a str,
    /// The pod's `spec.serviceAccountName`, when set.
    pub service_account: Option<&'a str>,
    /// The pod's labels.
    pub pod_labels: &'a BTreeMap<String, String>,
    /// The labels of the pod's namespace (Kubernetes sets
    /// `kubernetes.io/metadata.name` on every namespace).
    pub namespace_labels: &'a BTreeMap<String, String>,
}

/// A pod's identity labels, all `k8s:`, as the established agent makes them: its
/// labels (without those under [`POLICY_LABELS_PREFIX`], and, unlike there on a pod's
/// creation, without those that would pose as namespace labels), its namespace's labels
/// under [`NAMESPACE_LABELS_PREFIX`], the namespace, the service account (when set) and
/// the cluster; then through `filter`.
///
/// # Example
/// ```
/// use std::collections::BTreeMap;
/// use weft_model::{pod_identity_labels, LabelFilter, PodIdentitySource};
/// let pod = BTreeMap::from([
///     ("app".to_string(), "web".to_string()),
///     ("pod-template-hash".to_string(), "5d9c8b7f6".to_string()),
/// ]);
/// let ns = BTreeMap::from([("kubernetes.io/metadata.name".to_string(), "shop".to_string())]);
/// let labels = pod_identity_labels(
///     &PodIdentitySource {
///         cluster: "c1",
///         namespace: "shop",
///         service_account: Some("default"),
///         pod_labels: &pod,
///         namespace_labels: &ns,
///     },
///     &LabelFilter::default(),
/// );
/// assert_eq!(
///     labels.to_string(),
///     "k8s:app=web;\
///      k8s:io.cilium.k8s.namespace.labels.kubernetes.io/metadata.name=shop;\
///      k8s:io.cilium.k8s.policy.cluster=c1;\
///      k8s:io.cilium.k8s.policy.serviceaccount=default;\
///      k8s:io.kubernetes.pod.namespace=shop;"
/// );
/// ```
pub fn pod_identity_labels(pod: &PodIdentitySource<'_>, filter: &LabelFilter) -> Labels {
    let mut all: BTreeMap<String, String> = pod
        .pod_labels
        .iter()
        .filter(|(k, _)| {
            !k.starts_with(POLICY_LABELS_PREFIX)
                && !k.starts_with(NAMESPACE_LABELS_PREFIX)
                && k.as_str() != NAMESPACE_LABEL
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for (k, v) in pod.namespace_labels {
        all.insert(format!("{NAMESPACE_LABELS_PREFIX}.{k}"), v.clone());
    }
    all.insert(NAMESPACE_LABEL.to_owned(), pod.namespace.to_owned());
    if let Some(sa) = pod.service_account.filter(|sa| !sa.is_empty()) {
        all.insert(SERVICE_ACCOUNT_LABEL.to_owned(), sa.to_owned());
    }
    all.insert(CLUSTER_LABEL.to_owned(), pod.cluster.to_owned());
    all.into_iter()
        .map(|(key, value)| Label {
            source: "k8s".into(),
            key,
            value,
        })
        .filter(|l| filter.is_relevant(l))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// A Deployment's pod as Kubernetes labels it, in a namespace with a custom label:
    /// the identity key is the one the established agent writes for it.
    #[test]
    fn a_deployments_pod_gets_the_established_identity_key() {
        let pod = map(&[
            ("app", "frontend"),
            ("app.kubernetes.io/name", "shop"),
            ("pod-template-hash", "7c5ddbdf54"),
            ("io.cilium.k8s.policy.cluster", "spoofed"),
            ("io.cilium.k8s.namespace.labels.team", "spoofed"),
        ]);
        let ns = map(&[
            ("kubernetes.io/metadata.name", "prod"),
            ("team", "payments"),
        ]);
        let labels = pod_identity_labels(
            &PodIdentitySource {
                cluster: "cluster1",
                namespace: "prod",
                service_account: Some("frontend"),
                pod_labels: &pod,
                namespace_labels: &ns,
            },
            &LabelFilter::default(),
        );
        assert_eq!(
            labels.to_string(),
            "k8s:app=frontend;\
             k8s:app.kubernetes.io/name=shop;\
             k8s:io.cilium.k8s.namespace.labels.kubernetes.io/metadata.name=prod;\
             k8s:io.cilium.k8s.namespace.labels.team=payments;\
             k8s:io.cilium.k8s.policy.cluster=cluster1;\
             k8s:io.cilium.k8s.policy.serviceaccount=frontend;\
             k8s:io.kubernetes.pod.namespace=prod;"
        );
    }

    /// A StatefulSet's pods differ only in labels the filter drops: one identity.
    #[test]
    fn pods_that_differ_only_in_irrelevant_labels_share_an_identity() {
        let ns = map(&[("kubernetes.io/metadata.name", "db")]);
        let of = |ordinal: &str, revision: &str| {
            let pod = map(&[
                ("app", "postgres"),
                ("controller-revision-hash", revision),
                (
                    "statefulset.kubernetes.io/pod-name",
                    &format!("pg-{ordinal}"),
                ),
                ("apps.kubernetes.io/pod-index", ordinal),
            ]);
            pod_identity_labels(
                &PodIdentitySource {
                    cluster: "c",
                    namespace: "db",
                    service_account: None,
                    pod_labels: &pod,
                    namespace_labels: &ns,
                },
                &LabelFilter::default(),
            )
        };
        assert_eq!(of("0", "pg-6d4f"), of("1", "pg-7a1b"));
        assert!(!of("0", "x").to_string().contains("serviceaccount"));
    }

    /// With an inclusive `--labels`, only what it and the default inclusive patterns
    /// match stays (the service account goes, as there).
    #[test]
    fn an_inclusive_filter_keeps_the_namespace_and_cluster() {
        let pod = map(&[("app", "web"), ("env", "prod")]);
        let ns = map(&[("kubernetes.io/metadata.name", "shop")]);
        let labels = pod_identity_labels(
            &PodIdentitySource {
                cluster: "c1",
                namespace: "shop",
                service_account: Some("web"),
                pod_labels: &pod,
                namespace_labels: &ns,
            },
            &LabelFilter::with_patterns(["k8s:app"]).unwrap(),
        );
        assert_eq!(
            labels.to_string(),
            "k8s:app=web;\
             k8s:io.cilium.k8s.namespace.labels.kubernetes.io/metadata.name=shop;\
             k8s:io.cilium.k8s.policy.cluster=c1;\
             k8s:io.kubernetes.pod.namespace=shop;"
        );
    }
}
