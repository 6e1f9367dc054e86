//! weft: a node agent for multi-cluster networking.
//!
//! Start with `ARCHITECTURE.md` at the repository root: it maps these modules.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod agent;
pub mod api;
pub mod claims;
pub mod cli;
pub mod clustermesh;
pub mod datapath;
pub mod endpoint;
pub mod health;
pub mod identity;
pub mod ipcache;
pub mod k8s;
pub mod lab;
pub mod metrics;
/// etcd access: the `weft-kvstore` crate.
pub use weft_kvstore as kvstore;
/// The wire values in etcd: the `weft-model` crate, the first of the workspace's
/// crates, named here as before.
pub use weft_model as model;
/// The node's plumbing: the `weft-sys` crate's modules, named here as before.
pub use weft_sys::{dirwatch, fsutil, loglimit, netlink, netns, seeded};
pub mod node;
/// The hook moments as plain Rust: the `weft-hooks` crate.
pub use weft_hooks as hooks;
/// The plugin host: the `weft-plugins` crate.
pub use weft_plugins as plugins;
/// The vendor's side of plugins (`weftd plugin …`): `weft_plugins::tool`.
pub use weft_plugins::tool as plugin_tool;
pub mod policy;
pub mod regeneration;
pub mod state;
pub mod wireguard;
