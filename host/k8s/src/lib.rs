//! Kubernetes sources. Optional: off when neither a kubeconfig nor an in-cluster
//! configuration is present.
//!
//! Owns the agent's kube-rs client and its watchers; what they see becomes facts of
//! the state stage (`weft-state`). Must not know etcd, the mesh, the datapath or the
//! plugins: the state stage is the only thing it writes to. A pod's identity labels
//! are computed here from the stores ([`KubernetesSources::pod_identity_labels`]), for
//! the endpoints' CNI ADD.
#![deny(unsafe_code)]
#![warn(missing_docs)]
//!
//! [`KubernetesSources`] follows this node's Pods, the Namespaces, its Node, the three
//! policy kinds, Services and EndpointSlices, each a [`Source`] (watcher → reflector
//! store, status, change feed). [`run_kube_apiserver_source`] watches the EndpointSlices of `default/kubernetes`; their
//! addresses get the `reserved:kube-apiserver` label in the ipcache, with source
//! `kube-apiserver`, and lose it when they go away.

pub mod cilium;
mod kube_apiserver;
mod pods;
pub mod policies;
pub mod source;
mod sources;

pub use k8s_openapi::api::core::v1::Node;
pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
pub use kube::runtime::reflector::ObjectRef;
pub use kube::Client;
pub use kube_apiserver::{run_kube_apiserver_source, KubeApiServerSource};
pub use pods::Missing;
pub use source::{Change, Retry, Source, SourceStatus};
pub use sources::{client, watched_resources, ClientError, KubernetesSources, NodeFacts};
