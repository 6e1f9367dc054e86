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
pub mod dirwatch;
pub mod endpoint;
pub mod fsutil;
pub mod health;
pub mod identity;
pub mod ipcache;
pub mod k8s;
pub mod kvstore;
pub mod lab;
pub mod loglimit;
pub mod metrics;
/// The wire values in etcd: the `weft-model` crate, the first of the workspace's
/// crates, named here as before.
pub use weft_model as model;
pub mod netlink;
pub mod node;
pub mod plugin_tool;
pub mod plugins;
pub mod policy;
pub mod regeneration;
pub mod seeded;
pub mod state;
pub mod wireguard;
