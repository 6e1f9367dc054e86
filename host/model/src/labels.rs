//! The label keys weft sets on every endpoint's identity itself (the `k8s:` source),
//! and that policy selectors name: one spelling for the endpoint manager and the policy.

/// The label naming the endpoint's cluster.
pub const CLUSTER_LABEL: &str = "io.cilium.k8s.policy.cluster";

/// The label naming the endpoint's namespace.
pub const NAMESPACE_LABEL: &str = "io.kubernetes.pod.namespace";
