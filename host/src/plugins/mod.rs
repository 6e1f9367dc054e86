//! WASM plugins: the hooks of `plugin-sdk/wit/weft-plugin.wit`, run sandboxed.
//!
//! One engine; each plugin instance in its own `Store` with a memory cap and an epoch
//! deadline per call; no filesystem, network or environment. The host enforces each
//! hook's contract ([`enforce`]): a plugin's answer is bounded before it is acted on.

mod bindings;
mod contract;
mod host_state;
mod runtime;
mod set;

pub use bindings::weft::plugin::types::{
    Cluster, ClusterSync, Decision, EndpointKind, RegenerationRequest, ResourceCounts, Wait,
};
pub use contract::{default_verdict, enforce, Verdict, Violation};
pub use host_state::MeshView;
pub use runtime::{CallError, Instance, Runtime};
pub use set::{Answer, Isolation, LoadedPlugin, PluginSet, PluginStatus};

use std::time::Duration;

/// Limits of the plugin runtime.
#[derive(Debug, Clone)]
pub struct Config {
    /// How long one hook call may run.
    pub deadline: Duration,
    /// How much linear memory one plugin instance may use.
    pub memory_cap: usize,
    /// The longest wait a policy decision may ask for.
    pub max_wait: Duration,
    /// Log calls per hook call; the rest are dropped and counted.
    pub log_budget: u32,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            deadline: Duration::from_millis(50),
            memory_cap: 32 << 20,
            max_wait: Duration::from_secs(300),
            log_budget: 100,
        }
    }
}

/// What can go wrong setting up or loading a plugin.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// wasmtime could not be set up.
    #[error("plugin engine: {reason}")]
    Engine {
        /// Why.
        reason: String,
    },
    /// The bytes are not a valid component.
    #[error("cannot compile plugin: {reason}")]
    Compile {
        /// Why.
        reason: String,
    },
    /// The component does not fit the contract.
    #[error("plugin {plugin:?} refused: {reason}")]
    Instantiate {
        /// The plugin.
        plugin: String,
        /// Why (a missing export, an incompatible WIT version, a missing import).
        reason: String,
    },
    /// The plugin's `init` failed.
    #[error("plugin {plugin:?} init failed: {reason}")]
    Init {
        /// The plugin.
        plugin: String,
        /// Its error, or how it trapped.
        reason: String,
    },
}

impl Error {
    fn engine(e: impl std::fmt::Display) -> Self {
        Error::Engine {
            reason: e.to_string(),
        }
    }
}
