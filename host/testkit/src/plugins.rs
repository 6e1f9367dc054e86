//! The plugin workspace, built once per test binary.

use std::path::{Path, PathBuf};
use std::sync::Once;

/// Builds the plugin workspace for wasm32-wasip2 once per test binary (a no-op when up
/// to date), and the test plugins written in WAT beside it, and returns the path of
/// plugin `name`'s component.
pub fn plugin_wasm(name: &str) -> PathBuf {
    static BUILD: Once = Once::new();
    let root = crate::bin::root().to_path_buf();
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
            // From there, so that `plugins/.cargo/config.toml` applies.
            .current_dir(root.join("plugins"))
            .status()
            .expect("cargo runs");
        assert!(
            status.success(),
            "building the plugins failed (is the wasm32-wasip2 target installed? `make deps`)"
        );
        wat_components(&root);
    });
    root.join(format!("plugins/target/wasm32-wasip2/release/{name}.wasm"))
}

/// Each `plugins/testing/*/NAME.wat` as the component `test_NAME.wasm`, beside the
/// plugins cargo built: the core module with the `weft:plugin` world embedded, wrapped
/// by wit-component as `wasm32-wasip2` builds are.
fn wat_components(root: &Path) {
    let mut resolve = wit_parser::Resolve::default();
    let (package, _) = resolve
        .push_dir(root.join("plugin-sdk/wit"))
        .expect("the SDK's WIT parses");
    let world = resolve
        .select_world(&[package], Some("plugin"))
        .expect("the SDK's WIT has the plugin world");
    let out = root.join("plugins/target/wasm32-wasip2/release");
    let testing = std::fs::read_dir(root.join("plugins/testing")).expect("plugins/testing");
    for dir in testing.map(|e| e.expect("plugins/testing lists").path()) {
        for file in std::fs::read_dir(&dir).expect("a test plugin's directory lists") {
            let path = file.expect("a test plugin's directory lists").path();
            if path.extension().is_none_or(|e| e != "wat") {
                continue;
            }
            let stem = path.file_stem().expect("a file name").to_string_lossy();
            let mut module =
                wat::parse_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            wit_component::embed_component_metadata(
                &mut module,
                &resolve,
                world,
                wit_component::StringEncoding::UTF8,
            )
            .expect("the world embeds");
            let component = wit_component::ComponentEncoder::default()
                .module(&module)
                .and_then(|e| e.validate(true).encode())
                .unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
            std::fs::write(out.join(format!("test_{stem}.wasm")), component)
                .expect("the component is written");
        }
    }
}

/// A regeneration request for an endpoint of `kind` being restored, with the default
/// 60 s timeout: the host endpoint as the agent describes it, or a workload
/// `default/web` with identity 70000.
pub fn request(
    kind: weft_hooks::EndpointKind,
    ipsec: bool,
    clusters: Vec<weft_hooks::ClusterSync>,
) -> weft_hooks::RegenerationRequest {
    use weft_hooks::{Endpoint, EndpointKind, RegenerationReason, RegenerationRequest};
    let endpoint = match kind {
        EndpointKind::Host => Endpoint::host(),
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
pub fn cluster_sync(name: &str, synced: bool) -> weft_hooks::ClusterSync {
    weft_hooks::ClusterSync {
        name: name.into(),
        connected: true,
        nodes_synced: synced,
        ipcache_synced: synced,
        identities_synced: synced,
        services_synced: synced,
    }
}
