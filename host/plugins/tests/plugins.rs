//! Plugins as real `wasm32-wasip2` components: the shipped regeneration policy, and
//! misbehaving plugins isolated by the host.

use std::sync::Arc;
use std::time::Duration;
use weft_clustermesh::Resource;
use weft_hooks::{
    ClusterInfo, Counts, EndpointKind, PeerGcRequest, PeerGcVerdict, RegenerationRequest,
    RestoredPeer, Verdict,
};
use weft_plugins::wit::{Barrier, Decision, Wait};
use weft_plugins::{
    enforce, enforce_peer_gc, CallError, Config, Isolation, LoadedPlugin, PluginSet, Runtime,
    Violation,
};

use weft_testkit as support;

use support::cluster_sync;

fn wasm(name: &str) -> Vec<u8> {
    let path = support::plugin_wasm(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn no_mesh() -> weft_plugins::MeshView {
    Arc::new(Vec::new)
}

/// A runtime with `config` and plugin `file` instantiated in it as `name`. The runtime
/// is returned too: its epoch thread must outlive the instance.
fn instance(
    config: Config,
    file: &str,
    name: &str,
    plugin_config: &str,
) -> (Runtime, weft_plugins::Instance) {
    let rt = Runtime::new(config).unwrap();
    let component = rt.compile(&wasm(file)).unwrap();
    let instance = rt
        .instantiate(name, &component, plugin_config, no_mesh())
        .unwrap();
    (rt, instance)
}

fn request(endpoint: EndpointKind, ipsec: bool) -> RegenerationRequest {
    support::request(endpoint, ipsec, vec![])
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
            barriers: vec![Barrier::Ipcache, Barrier::Identities],
            clusters: vec![],
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
        verdict,
        weft_hooks::default_verdict(true, true, Duration::from_secs(60))
    );
}

#[test]
fn a_plugin_that_never_returns_is_stopped_at_its_deadline() {
    let config = Config {
        deadline: Duration::from_millis(20),
        ..Config::default()
    };
    let (rt, mut spin) = instance(config, "test_spin", "spin", "");
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
        .instantiate("forever", &component, "", no_mesh())
        .unwrap();
    let decision = forever
        .regeneration_policy(&request(EndpointKind::Workload, false))
        .unwrap();
    assert_eq!(
        enforce(decision, max),
        Verdict::Wait {
            timeout: max,
            barriers: vec![Resource::IpCache],
            clusters: vec![]
        }
    );
    let hold = forever.peer_gc_policy(&peer_gc_request()).unwrap();
    assert_eq!(enforce_peer_gc(hold, max), PeerGcVerdict::Hold(max));
    // A 0.1.0 plugin can name a barrier that does not exist: refused by the adapter.
    let old = rt.compile(&wasm("test_v0_1")).unwrap();
    let mut unknown = rt.instantiate("old", &old, "pods", no_mesh()).unwrap();
    assert_eq!(
        unknown.regeneration_policy(&request(EndpointKind::Workload, false)),
        Err(CallError::Contract(Violation::UnknownBarrier {
            name: "pods".into()
        }))
    );
}

fn peer_gc_request() -> PeerGcRequest {
    PeerGcRequest {
        peers: vec![RestoredPeer {
            public_key: "k".into(),
            allowed_ips: vec!["10.2.0.0/24".into()],
        }],
        clusters: vec![],
    }
}

#[test]
fn a_memory_bomb_hits_its_cap_and_fails_that_call_only() {
    let config = Config {
        bounds: weft_plugins::Bounds {
            memory: 8 << 20,
            ..Default::default()
        },
        deadline: Duration::from_secs(2),
        ..Config::default()
    };
    let (_rt, mut bomb) = instance(config, "test_memory_bomb", "bomb", "");
    assert_eq!(
        bomb.regeneration_policy(&request(EndpointKind::Workload, false)),
        Err(CallError::MemoryCap)
    );
}

#[test]
fn a_trapping_plugin_fails_the_call_with_the_trap() {
    let (_rt, mut trap) = instance(Config::default(), "test_trap", "trap", "");
    match trap.regeneration_policy(&request(EndpointKind::Workload, false)) {
        Err(CallError::Trap { reason }) => assert!(reason.contains("unreachable"), "{reason}"),
        other => panic!("expected a trap, got {other:?}"),
    }
}

#[test]
fn a_log_flood_is_cut_at_the_budget_and_counted() {
    let config = Config {
        deadline: Duration::from_secs(5),
        ..Config::default()
    };
    let (_rt, mut flood) = instance(config, "test_log_flood", "flood", "");
    assert_eq!(
        flood.regeneration_policy(&request(EndpointKind::Workload, false)),
        Ok(Decision::Proceed)
    );
    assert_eq!(flood.dropped_logs(), 100_000 - 100);
}

fn loaded(rt: &Runtime, name: &str, file: &str, priority: i32, config: &str) -> LoadedPlugin {
    LoadedPlugin {
        version: "0.1.0".into(),
        priority,
        config: config.into(),
        ..LoadedPlugin::new(name, rt.compile(&wasm(file)).unwrap())
    }
}

#[test]
fn the_first_plugin_with_an_opinion_decides_in_priority_order() {
    let rt = Arc::new(Runtime::new(Config::default()).unwrap());
    let mut set = PluginSet::new(rt.clone(), no_mesh(), Isolation::default());
    set.insert(loaded(
        &rt,
        "regeneration-policy",
        "regeneration_policy",
        0,
        "",
    ))
    .unwrap();
    set.insert(loaded(&rt, "sync-events", "sync_events", 100, ""))
        .unwrap();
    let answer = set.regeneration_policy(&request(EndpointKind::Workload, false));
    assert_eq!(
        answer.decided_by.as_deref(),
        Some("regeneration-policy"),
        "sync-events has no opinion"
    );

    set.insert(loaded(
        &rt,
        "critical-clusters",
        "critical_clusters",
        50,
        "c2",
    ))
    .unwrap();
    let mut req = request(EndpointKind::Workload, false);
    req.clusters = vec![cluster_sync("c2", false), cluster_sync("c3", false)];
    let answer = set.regeneration_policy(&req);
    assert_eq!(answer.decided_by.as_deref(), Some("critical-clusters"));
    assert_eq!(
        answer.verdict,
        Verdict::Wait {
            timeout: Duration::from_secs(60),
            barriers: vec![Resource::IpCache, Resource::Identities],
            clusters: vec!["c2".into()],
        },
        "waits only for the critical cluster"
    );
    req.clusters = vec![cluster_sync("c2", true), cluster_sync("c3", false)];
    assert_eq!(
        set.regeneration_policy(&req).verdict,
        Verdict::Proceed,
        "c3 is let go"
    );

    let names: Vec<String> = set.statuses().into_iter().map(|s| s.name).collect();
    assert_eq!(
        names,
        ["sync-events", "critical-clusters", "regeneration-policy"]
    );
    assert!(
        matches!(
            rt.instantiate(
                "critical-clusters",
                &rt.compile(&wasm("critical_clusters")).unwrap(),
                "",
                no_mesh()
            ),
            Err(weft_plugins::Error::Init { .. })
        ),
        "an empty config is refused by init"
    );
}

#[test]
fn failures_are_answered_by_the_default_and_quarantined_with_back_off() {
    let rt = Arc::new(
        Runtime::new(Config {
            deadline: Duration::from_millis(20),
            ..Config::default()
        })
        .unwrap(),
    );
    let isolation = Isolation {
        failure_threshold: 2,
        quarantine: Duration::from_secs(1),
        max_quarantine: Duration::from_secs(60),
    };
    let mut set = PluginSet::new(rt.clone(), no_mesh(), isolation);
    set.insert(loaded(&rt, "spin", "test_spin", 100, ""))
        .unwrap();
    set.insert(loaded(
        &rt,
        "regeneration-policy",
        "regeneration_policy",
        0,
        "",
    ))
    .unwrap();
    let req = request(EndpointKind::Host, true);
    let default = weft_hooks::default_verdict(true, true, Duration::from_secs(60));
    let spin = |set: &PluginSet, at| {
        set.statuses_at(at)
            .into_iter()
            .find(|s| s.name == "spin")
            .unwrap()
    };

    let t0 = std::time::Instant::now();
    let a = set.regeneration_policy_at(&req, t0);
    assert_eq!(
        (a.verdict.clone(), a.decided_by),
        (default.clone(), None),
        "a failed call: the default answers"
    );
    assert_eq!(
        (spin(&set, t0).failures, spin(&set, t0).state.as_str()),
        (1, "active")
    );
    set.regeneration_policy_at(&req, t0);
    assert_eq!(spin(&set, t0).state, "quarantined");
    assert_eq!(
        spin(&set, t0).last_error.as_deref(),
        Some("deadline exceeded")
    );

    let a = set.regeneration_policy_at(&req, t0 + Duration::from_millis(10));
    assert_eq!(
        a.decided_by.as_deref(),
        Some("regeneration-policy"),
        "the quarantined plugin is skipped"
    );
    assert_eq!(spin(&set, t0).calls, 2);

    // Tried again after the back-off; failing again doubles it.
    let t1 = t0 + Duration::from_millis(1100);
    assert_eq!(set.regeneration_policy_at(&req, t1).decided_by, None);
    assert_eq!(spin(&set, t1).calls, 3);
    assert_eq!(
        spin(&set, t1 + Duration::from_millis(1500)).state,
        "quarantined"
    );
    assert_eq!(spin(&set, t1 + Duration::from_millis(2100)).state, "active");
}

#[test]
fn sync_events_logs_and_counts_every_hook() {
    let rt = Arc::new(Runtime::new(Config::default()).unwrap());
    let mut set = PluginSet::new(rt.clone(), no_mesh(), Isolation::default());
    set.insert(loaded(&rt, "sync-events", "sync_events", 0, ""))
        .unwrap();
    let cluster = ClusterInfo {
        name: "c2".into(),
        id: Some(2),
        counts: Counts {
            nodes: 1,
            ipcache: 2,
            identities: 3,
            services: 4,
        },
    };
    for r in Resource::ALL {
        set.on_synced(r, &cluster);
    }
    set.on_synced(Resource::Nodes, &cluster);
    set.on_cluster_disconnected(&cluster);
    let status = set.statuses().remove(0);
    let counters: Vec<(&str, u64)> = status
        .counters
        .iter()
        .map(|(k, v)| (k.as_str(), *v))
        .collect();
    assert_eq!(
        counters,
        [
            ("sync_events_disconnected", 1),
            ("sync_events_identities", 1),
            ("sync_events_ipcache", 1),
            ("sync_events_nodes", 2),
            ("sync_events_services", 1),
        ]
    );
    assert_eq!((status.calls, status.failures), (6, 0));
}

#[test]
fn a_plugin_built_against_another_wit_version_is_refused_with_the_reason() {
    let rt = Runtime::new(Config::default()).unwrap();
    let component = rt.compile(&wasm("test_wit_future")).unwrap();
    match rt.instantiate("future", &component, "", no_mesh()) {
        Err(weft_plugins::Error::Instantiate { plugin, misfit }) => {
            assert_eq!(plugin, "future");
            assert!(
                misfit.contains("incompatible WIT version")
                    && misfit.contains("weft:plugin/hooks@0.99.0"),
                "{misfit}"
            );
        }
        Err(e) => panic!("refused for another reason: {e}"),
        Ok(_) => panic!("a 0.99.0 plugin must be refused"),
    }
}
