//! Kubernetes sources. Optional: off when neither a kubeconfig nor an in-cluster
//! configuration is present.
//!
//! Owns the agent's kube-rs client and its watchers; what they see becomes facts of
//! the state stage (`weft-state`). Must not know etcd, the mesh, the datapath or the
//! plugins: the state stage is the only thing it writes to.
#![deny(unsafe_code)]
#![warn(missing_docs)]
//!
//! [`run_kube_apiserver_source`] watches the EndpointSlices of `default/kubernetes`; their
//! addresses get the `reserved:kube-apiserver` label in the ipcache, with source
//! `kube-apiserver`, and lose it when they go away.

mod kube_apiserver;

pub use kube_apiserver::{run_kube_apiserver_source, KubeApiServerSource};

/// A client when a Kubernetes configuration is present (`KUBECONFIG`, `~/.kube/config`
/// or the in-cluster service account), `None` otherwise.
pub async fn client_if_configured() -> Option<kube::Client> {
    match kube::Config::infer().await {
        Ok(config) => match kube::Client::try_from(config) {
            Ok(client) => Some(client),
            Err(e) => {
                tracing::warn!(error = %e, "Kubernetes configuration found but unusable: Kubernetes sources off");
                None
            }
        },
        Err(e) => {
            tracing::info!(reason = %e, "no Kubernetes configuration: Kubernetes sources off");
            None
        }
    }
}
