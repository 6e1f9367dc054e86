//! weft: a node agent for multi-cluster networking.
//!
//! Start with `ARCHITECTURE.md` at the repository root: it maps these modules.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod agent;
pub mod api;
pub mod cli;
/// The BPF datapath: the `weft-datapath` crate.
pub use weft_datapath as datapath;
/// Endpoints on this node: the `weft-endpoint` crate.
pub use weft_endpoint as endpoint;
pub mod gc_gate;
pub mod health;
/// Kubernetes sources: the `weft-k8s` crate.
pub use weft_k8s as k8s;
#[cfg(feature = "lab")]
pub mod lab;
pub mod metrics;
/// The regeneration wait on the mesh: `weft_endpoint::wait`.
pub use weft_endpoint::wait as regeneration;
/// The hook moments as plain Rust: the `weft-hooks` crate.
pub use weft_hooks as hooks;
/// etcd access: the `weft-kvstore` crate.
pub use weft_kvstore as kvstore;
/// The wire values in etcd: the `weft-model` crate, the first of the workspace's
/// crates, named here as before.
pub use weft_model as model;
/// The plugin host: the `weft-plugins` crate.
pub use weft_plugins as plugins;
/// The vendor's side of plugins (`weftd plugin …`): `weft_plugins::tool`.
pub use weft_plugins::tool as plugin_tool;
/// The node's plumbing: the `weft-sys` crate's modules, named here as before.
pub use weft_sys::{dirwatch, fsutil, loglimit, netlink, netns, seeded, stream};
pub mod state;
/// The cluster mesh: the `weft-clustermesh` crate.
pub use weft_clustermesh as clustermesh;
/// The state stage's parts: the `weft-state` crate's modules, named here as before.
pub use weft_state::{claims, ipcache, policy};

/// Security identities: the cache and local allocator (`weft-state`) and the global
/// allocator in etcd (`weft-clustermesh`).
pub mod identity {
    pub use weft_clustermesh::identity_allocator as allocator;
    pub use weft_clustermesh::GlobalAllocator;
    pub use weft_state::identity::*;
}

/// Nodes: the manager (`weft-state`) and this node's registration (`weft-clustermesh`).
pub mod node {
    pub use weft_clustermesh::registration::{run_registration, Registration};
    pub use weft_clustermesh::{LeasedKeys, PutError};
    pub use weft_state::node::*;
}
/// WireGuard: the `weft-wireguard` crate.
pub use weft_wireguard as wireguard;
