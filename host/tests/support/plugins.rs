//! The plugin workspace, built once per test binary.

use std::path::PathBuf;
use std::sync::Once;

/// Builds the plugin workspace for wasm32-wasip2 once per test binary (a no-op when up
/// to date) and returns the path of plugin `name`'s component.
pub fn plugin_wasm(name: &str) -> PathBuf {
    static BUILD: Once = Once::new();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    BUILD.call_once(|| {
        let status = std::process::Command::new(env!("CARGO"))
            .args([
                "build",
                "--release",
                "--target",
                "wasm32-wasip2",
                "--manifest-path",
            ])
            .arg(root.join("plugins/Cargo.toml"))
            .status()
            .expect("cargo runs");
        assert!(
            status.success(),
            "building the plugins failed (is the wasm32-wasip2 target installed? `make deps`)"
        );
    });
    root.join(format!("plugins/target/wasm32-wasip2/release/{name}.wasm"))
}

/// A regeneration request for an endpoint of `kind` being restored, with the default
/// 60 s timeout: the host endpoint as the agent describes it, or a workload
/// `default/web` with identity 70000.
pub fn request(
    kind: weft::plugins::EndpointKind,
    ipsec: bool,
    clusters: Vec<weft::plugins::ClusterSync>,
) -> weft::plugins::RegenerationRequest {
    use weft::plugins::{Endpoint, EndpointKind, RegenerationReason, RegenerationRequest};
    let endpoint = match kind {
        EndpointKind::Host => weft::regeneration::host_endpoint(),
        EndpointKind::Workload => Endpoint {
            kind,
            identity: 70_000,
            namespace: "default".into(),
            name: "web".into(),
            labels: vec!["k8s:app=web".into()],
        },
    };
    RegenerationRequest {
        endpoint,
        reason: RegenerationReason::Restore,
        ipsec,
        wireguard: false,
        default_timeout_ms: 60_000,
        clusters,
    }
}

/// A remote cluster's sync state as a hook sees it: every barrier `synced` or not.
pub fn cluster_sync(name: &str, synced: bool) -> weft::plugins::ClusterSync {
    weft::plugins::ClusterSync {
        name: name.into(),
        connected: true,
        nodes_synced: synced,
        ipcache_synced: synced,
        identities_synced: synced,
        services_synced: synced,
    }
}
