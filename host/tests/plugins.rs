//! Plugins as real `wasm32-wasip2` components: the shipped regeneration policy, and
//! misbehaving plugins isolated by the host.

use std::path::PathBuf;
use std::sync::{Arc, Once};
use std::time::Duration;
use weft::clustermesh::Resource;
use weft::plugins::{
    enforce, CallError, Config, Decision, EndpointKind, RegenerationRequest, Runtime, Verdict,
    Violation, Wait,
};

/// Builds the plugin workspace for wasm32-wasip2 once per test binary (a no-op when up
/// to date) and returns the path of plugin `name`.
fn wasm(name: &str) -> Vec<u8> {
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
    let path = root.join(format!("plugins/target/wasm32-wasip2/release/{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn no_mesh() -> weft::plugins::MeshView {
    Arc::new(Vec::new)
}

fn request(endpoint: EndpointKind, ipsec: bool) -> RegenerationRequest {
    RegenerationRequest {
        endpoint,
        restoring: true,
        ipsec,
        wireguard: false,
        default_timeout_ms: 60_000,
        clusters: vec![],
    }
}

#[test]
fn the_shipped_regeneration_policy_follows_the_established_defaults() {
    let rt = Runtime::new(Config::default()).unwrap();
    let component = rt.compile(&wasm("regeneration_policy")).unwrap();
    let mut plugin = rt
        .instantiate("regeneration-policy", &component, "", no_mesh())
        .unwrap();
    let wait = |ms: u64| {
        Decision::Wait(Wait {
            timeout_ms: ms,
            barriers: vec!["ipcache".into(), "identities".into()],
        })
    };
    assert_eq!(
        plugin
            .regeneration_policy(&request(EndpointKind::Workload, true))
            .unwrap(),
        wait(60_000)
    );
    assert_eq!(
        plugin
            .regeneration_policy(&request(EndpointKind::Host, false))
            .unwrap(),
        wait(60_000)
    );
    assert_eq!(
        plugin
            .regeneration_policy(&request(EndpointKind::Host, true))
            .unwrap(),
        wait(5_000),
        "host with IPsec: 5 s"
    );
    // Equal to the built-in default the host falls back to.
    let verdict = enforce(
        plugin
            .regeneration_policy(&request(EndpointKind::Host, true))
            .unwrap(),
        Duration::from_secs(300),
    );
    assert_eq!(
        verdict.unwrap(),
        weft::plugins::default_verdict(true, true, Duration::from_secs(60))
    );
}

#[test]
fn a_plugin_that_never_returns_is_stopped_at_its_deadline() {
    let rt = Runtime::new(Config {
        deadline: Duration::from_millis(20),
        ..Config::default()
    })
    .unwrap();
    let component = rt.compile(&wasm("test_spin")).unwrap();
    let mut spin = rt.instantiate("spin", &component, "", no_mesh()).unwrap();
    assert_eq!(
        spin.regeneration_policy(&request(EndpointKind::Workload, false)),
        Err(CallError::Deadline)
    );
    // The runtime keeps serving other plugins.
    let policy = rt.compile(&wasm("regeneration_policy")).unwrap();
    let mut ok = rt
        .instantiate("regeneration-policy", &policy, "", no_mesh())
        .unwrap();
    assert!(ok
        .regeneration_policy(&request(EndpointKind::Workload, false))
        .is_ok());
}

#[test]
fn decisions_outside_the_contract_are_bounded_or_refused() {
    let rt = Runtime::new(Config::default()).unwrap();
    let component = rt.compile(&wasm("test_out_of_bounds")).unwrap();
    let max = rt.config().max_wait;
    let mut forever = rt
        .instantiate("forever", &component, "forever", no_mesh())
        .unwrap();
    let decision = forever
        .regeneration_policy(&request(EndpointKind::Workload, false))
        .unwrap();
    assert_eq!(
        enforce(decision, max),
        Ok(Verdict::Wait {
            timeout: max,
            barriers: vec![Resource::IpCache]
        })
    );
    let mut unknown = rt
        .instantiate("unknown", &component, "unknown-barrier", no_mesh())
        .unwrap();
    let decision = unknown
        .regeneration_policy(&request(EndpointKind::Workload, false))
        .unwrap();
    assert_eq!(
        enforce(decision, max),
        Err(Violation::UnknownBarrier {
            name: "pods".into()
        })
    );
}

#[test]
fn a_memory_bomb_hits_its_cap_and_fails_that_call_only() {
    let rt = Runtime::new(Config {
        memory_cap: 8 << 20,
        deadline: Duration::from_secs(2),
        ..Config::default()
    })
    .unwrap();
    let component = rt.compile(&wasm("test_memory_bomb")).unwrap();
    let mut bomb = rt.instantiate("bomb", &component, "", no_mesh()).unwrap();
    assert_eq!(
        bomb.regeneration_policy(&request(EndpointKind::Workload, false)),
        Err(CallError::MemoryCap)
    );
}

#[test]
fn a_trapping_plugin_fails_the_call_with_the_trap() {
    let rt = Runtime::new(Config::default()).unwrap();
    let component = rt.compile(&wasm("test_trap")).unwrap();
    let mut trap = rt.instantiate("trap", &component, "", no_mesh()).unwrap();
    match trap.regeneration_policy(&request(EndpointKind::Workload, false)) {
        Err(CallError::Trap { reason }) => assert!(reason.contains("unreachable"), "{reason}"),
        other => panic!("expected a trap, got {other:?}"),
    }
}

#[test]
fn a_log_flood_is_cut_at_the_budget_and_counted() {
    let config = Config {
        log_budget: 100,
        deadline: Duration::from_secs(5),
        ..Config::default()
    };
    let rt = Runtime::new(config).unwrap();
    let component = rt.compile(&wasm("test_log_flood")).unwrap();
    let mut flood = rt.instantiate("flood", &component, "", no_mesh()).unwrap();
    assert_eq!(
        flood.regeneration_policy(&request(EndpointKind::Workload, false)),
        Ok(Decision::Proceed)
    );
    assert_eq!(flood.dropped_logs(), 100_000 - 100);
}
