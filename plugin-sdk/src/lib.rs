//! Write a weft plugin in Rust.
//!
//! The bindings are generated from `wit/weft-plugin.wit` (package `weft:plugin@0.2.0`),
//! the contract the agent enforces. Implement [`Plugin`] (every hook has a default, so
//! write only those you need) and export it with [`export_plugin!`]:
//!
//! ```ignore
//! use weft_plugin_sdk::{export_plugin, log, Barrier, Cluster, Decision, Plugin, RegenerationRequest, Wait};
//!
//! struct OnlyNodes;
//!
//! impl Plugin for OnlyNodes {
//!     fn on_nodes_synced(cluster: Cluster) {
//!         log::info(&format!("nodes of {} are in", cluster.name));
//!     }
//!
//!     fn regeneration_policy(request: RegenerationRequest) -> Decision {
//!         Decision::Wait(Wait {
//!             timeout_ms: request.default_timeout_ms,
//!             barriers: vec![Barrier::Nodes],
//!             clusters: vec![], // every remote cluster
//!         })
//!     }
//! }
//!
//! export_plugin!(OnlyNodes);
//! ```
//!
//! Build with `cargo build --target wasm32-wasip2 --release`; see the README for
//! packaging (manifest, digest, signature) and testing.

#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "plugin",
        pub_export_macro: true,
        export_macro_name: "export_hooks",
        default_bindings_module: "weft_plugin_sdk::bindings",
    });
}

pub use bindings::weft::plugin::types::{
    Barrier, Cluster, ClusterSync, Decision, Endpoint, EndpointKind, PeerGcDecision, PeerGcRequest,
    RegenerationReason, RegenerationRequest, ResourceCounts, RestoredPeer, Wait,
};

/// The version of the contract this SDK builds plugins against; a plugin's manifest
/// says it as `wit`.
pub const WIT_VERSION: &str = "0.2.0";

/// Structured logging into the agent's log.
pub mod log {
    use crate::bindings::weft::plugin::log::log;

    /// Logs `message` at debug level.
    pub fn debug(message: &str) {
        log(Level::Debug, message, &[]);
    }

    /// Logs `message` at info level.
    pub fn info(message: &str) {
        log(Level::Info, message, &[]);
    }

    /// Logs `message` at warn level.
    pub fn warn(message: &str) {
        log(Level::Warn, message, &[]);
    }

    /// Logs `message` at error level.
    pub fn error(message: &str) {
        log(Level::Error, message, &[]);
    }

    /// Logs `message` with key/value fields.
    pub fn with_fields(level: Level, message: &str, fields: &[(&str, &str)]) {
        let fields: Vec<(String, String)> = fields
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        log(level, message, &fields);
    }

    pub use crate::bindings::weft::plugin::log::Level;
}

/// Counters and gauges exported with the agent's metrics.
pub mod metrics {
    pub use crate::bindings::weft::plugin::metrics::{counter_add, gauge_set};
}

/// The agent's view of the cluster mesh and its clock.
pub mod host {
    pub use crate::bindings::weft::plugin::clock::now_ns;
    pub use crate::bindings::weft::plugin::mesh::status as mesh_status;
}

/// The hooks a plugin may implement; each has a default that does nothing (or, for the
/// policy, has no opinion).
pub trait Plugin {
    /// Called once with the manifest's `config` string; an error refuses the plugin.
    fn init(_config: String) -> Result<(), String> {
        Ok(())
    }
    /// A remote cluster's initial identities are in.
    fn on_identities_synced(_cluster: Cluster) {}
    /// A remote cluster's initial nodes are in.
    fn on_nodes_synced(_cluster: Cluster) {}
    /// A remote cluster's initial ipcache entries are in.
    fn on_ipcache_synced(_cluster: Cluster) {}
    /// A remote cluster's initial services are in.
    fn on_services_synced(_cluster: Cluster) {}
    /// A remote cluster was removed or refused.
    fn on_cluster_disconnected(_cluster: Cluster) {}
    /// How long may this endpoint's regeneration wait for remote state?
    fn regeneration_policy(_request: RegenerationRequest) -> Decision {
        Decision::NoOpinion
    }
    /// May the restored WireGuard peers no node claims be removed now? The agent asks
    /// once the remote nodes and ipcache entries are in; `Hold(ms)` keeps them longer
    /// (the agent clamps it).
    fn peer_gc_policy(_request: PeerGcRequest) -> PeerGcDecision {
        PeerGcDecision::NoOpinion
    }
}

/// Exports a [`Plugin`] implementation as the component's `weft:plugin/hooks`.
#[macro_export]
macro_rules! export_plugin {
    ($plugin:ty) => {
        #[allow(dead_code)]
        struct __WeftPluginExport;

        impl $crate::bindings::exports::weft::plugin::hooks::Guest for __WeftPluginExport {
            fn init(config: String) -> Result<(), String> {
                <$plugin as $crate::Plugin>::init(config)
            }
            fn on_identities_synced(cluster: $crate::Cluster) {
                <$plugin as $crate::Plugin>::on_identities_synced(cluster)
            }
            fn on_nodes_synced(cluster: $crate::Cluster) {
                <$plugin as $crate::Plugin>::on_nodes_synced(cluster)
            }
            fn on_ipcache_synced(cluster: $crate::Cluster) {
                <$plugin as $crate::Plugin>::on_ipcache_synced(cluster)
            }
            fn on_services_synced(cluster: $crate::Cluster) {
                <$plugin as $crate::Plugin>::on_services_synced(cluster)
            }
            fn on_cluster_disconnected(cluster: $crate::Cluster) {
                <$plugin as $crate::Plugin>::on_cluster_disconnected(cluster)
            }
            fn regeneration_policy(request: $crate::RegenerationRequest) -> $crate::Decision {
                <$plugin as $crate::Plugin>::regeneration_policy(request)
            }
            fn peer_gc_policy(request: $crate::PeerGcRequest) -> $crate::PeerGcDecision {
                <$plugin as $crate::Plugin>::peer_gc_policy(request)
            }
        }

        // Exported from the component only: a native build (`cargo test` of a plugin's
        // logic) has no component exports to link.
        #[cfg(target_arch = "wasm32")]
        $crate::bindings::export_hooks!(__WeftPluginExport with_types_in $crate::bindings);
    };
}
