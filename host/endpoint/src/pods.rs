//! Where a pod's identity labels come from when the Kubernetes API is there: container
//! runtimes pass a CNI plugin the pod's namespace, name and UID, never its labels, so
//! the ADD asks the agent's Pod store ([`PodDirectory`], implemented over the
//! Kubernetes sources) and waits, bounded, for a Pod event that has not arrived yet.

use futures::future::BoxFuture;
use std::time::Duration;
use weft_model::Labels;

/// The pod a CNI call is for, as the runtime names it (`K8S_POD_*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRef {
    /// `K8S_POD_NAMESPACE`.
    pub namespace: String,
    /// `K8S_POD_NAME`.
    pub name: String,
    /// `K8S_POD_UID`, when the runtime passes it: a Pod of the same name but another
    /// UID (deleted and made again) is not this one.
    pub uid: Option<String>,
}

/// Why a pod's labels cannot be had, naming the pod.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PodLookupError {
    /// No such Pod on this node within the wait.
    #[error("pod {namespace}/{name} is not in the agent's Pod store after {waited:?} (not on this node, deleted, or the API server is behind)")]
    NotFound {
        /// The pod's namespace.
        namespace: String,
        /// The pod's name.
        name: String,
        /// How long the ADD waited.
        waited: Duration,
    },
    /// The pod's namespace is not in the Namespace store within the wait.
    #[error("namespace {namespace} of pod {namespace}/{name} is not in the agent's Namespace store after {waited:?}")]
    NoNamespace {
        /// The namespace.
        namespace: String,
        /// The pod's name.
        name: String,
        /// How long the ADD waited.
        waited: Duration,
    },
    /// The Kubernetes sources have no initial list yet (the API server is down or slow).
    #[error("the Kubernetes sources are not synced (is the API server reachable?): pod {namespace}/{name} cannot be looked up")]
    NotSynced {
        /// The pod's namespace.
        namespace: String,
        /// The pod's name.
        name: String,
    },
}

/// The agent's view of this node's Pods and their namespaces.
pub trait PodDirectory: Send + Sync {
    /// The pod's identity labels (its labels, its namespace's, its service account's,
    /// the cluster's, through the label filter), waiting for its Pod event as long as
    /// the directory's bound.
    fn identity_labels<'a>(
        &'a self,
        pod: &'a PodRef,
    ) -> BoxFuture<'a, Result<Labels, PodLookupError>>;
}
