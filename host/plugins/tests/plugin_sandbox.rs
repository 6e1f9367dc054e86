//! The sandbox holds: rogue plugins (a WASI sleep, a busy poll, a resource leak, a
//! flood of metric names, a 10 MiB log line, a growing wasm table, a host call that
//! never returns) each fail
//! alone, at the bound they break; the built-in default answers and the other plugins
//! and the agent serve on. Real `wasm32-wasip2` components.

use weft_testkit as support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weft_clustermesh::Resource;
use weft_hooks::{ClusterInfo, ClusterSync, Counts, EndpointKind, RegenerationRequest};
use weft_plugins::{
    CallError, Config, Error, Isolation, LoadedPlugin, MeshView, PluginHost, PluginSet, Runtime,
};

/// Far below the rogue plugins' 30 s, far above any bound they should meet.
const PROMPTLY: Duration = Duration::from_secs(5);

fn plugin(rt: &Runtime, name: &str, file: &str, priority: i32, config: &str) -> LoadedPlugin {
    let path = support::plugin_wasm(file);
    let wasm = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    LoadedPlugin {
        version: "1.0.0".into(),
        digest: weft_plugins::digest_hex(&wasm),
        priority,
        config: config.into(),
        ..LoadedPlugin::new(name, rt.compile(&wasm).unwrap())
    }
}

fn request() -> RegenerationRequest {
    support::request(EndpointKind::Host, false, vec![])
}

fn cluster(name: &str) -> ClusterInfo {
    ClusterInfo {
        name: name.into(),
        id: Some(2),
        counts: Counts {
            nodes: 1,
            ipcache: 1,
            identities: 1,
            services: 0,
        },
    }
}

fn runtime() -> Arc<Runtime> {
    Arc::new(Runtime::new(Config::default()).unwrap())
}

/// Each rogue, alone in a runtime, fails its call with the bound it breaks, promptly.
#[test]
fn each_rogue_plugin_fails_at_the_bound_it_breaks() {
    let rt = runtime();
    type Expected = fn(&CallError) -> bool;
    let cases: [(&str, Expected); 7] = [
        ("test_wasi_sleep", |e| *e == CallError::Deadline),
        ("test_busy_poll", |e| *e == CallError::Deadline),
        ("test_spin", |e| *e == CallError::Deadline),
        (
            "test_resource_leak",
            |e| matches!(e, CallError::Limit { what } if what.contains("host resources")),
        ),
        (
            "test_metric_flood",
            |e| matches!(e, CallError::Limit { what } if what.contains("metric names over its limit of 64")),
        ),
        (
            "test_huge_log",
            |e| matches!(e, CallError::Limit { what } if what.contains("log bytes per call")),
        ),
        (
            "test_table_grow",
            |e| matches!(e, CallError::Limit { what } if what.contains("table elements")),
        ),
    ];
    for (file, expected) in cases {
        let p = plugin(&rt, file, file, 0, "");
        let mut instance = rt
            .instantiate(file, &p.component, "", Arc::new(Vec::new))
            .unwrap();
        let started = Instant::now();
        let result = instance.regeneration_policy(&request());
        let took = started.elapsed();
        match result {
            Err(e) if expected(&e) => {}
            other => panic!("{file}: unexpected {other:?}"),
        }
        assert!(took < PROMPTLY, "{file} ran {took:?}");
    }
}

/// In a set, the rogue fails alone: the default answers for it, it is counted with
/// its reason, and the plugin beside it keeps getting its hooks.
#[test]
fn a_rogue_plugin_fails_alone_and_the_default_decides() {
    for (file, reason) in [
        ("test_wasi_sleep", "deadline exceeded"),
        ("test_busy_poll", "deadline exceeded"),
        ("test_resource_leak", "host resources"),
        ("test_metric_flood", "metric names"),
        ("test_huge_log", "log bytes per call"),
        ("test_table_grow", "table elements"),
    ] {
        let rt = runtime();
        let mut set = PluginSet::new(rt.clone(), Arc::new(Vec::new), Isolation::default());
        set.insert(plugin(&rt, "rogue", file, 100, "")).unwrap();
        set.insert(plugin(&rt, "sync-events", "sync_events", 0, ""))
            .unwrap();
        let answer = set.regeneration_policy(&request());
        assert_eq!(answer, PluginSet::default_answer(&request()), "{file}");
        set.on_synced(Resource::Nodes, &cluster("c2"));
        let statuses = set.statuses();
        let rogue = &statuses[0];
        assert_eq!(rogue.failures, 1, "{file}: {rogue:?}");
        let error = rogue.last_error.as_deref().unwrap_or_default();
        assert!(error.contains(reason), "{file}: {error}");
        assert_eq!(
            statuses[1].counters.get("sync_events_nodes"),
            Some(&1),
            "{file}: the other plugin got its hook"
        );
        assert_eq!(statuses[1].failures, 0);
    }
}

/// A mesh view that blocks (as a host import stuck on a lock would) while armed.
fn blocking_mesh(armed: Arc<AtomicBool>) -> MeshView {
    Arc::new(move || {
        let until = Instant::now() + Duration::from_secs(60);
        while armed.load(Ordering::Relaxed) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        vec![ClusterSync {
            name: "c2".into(),
            connected: true,
            nodes_synced: false,
            ipcache_synced: false,
            identities_synced: false,
            services_synced: false,
        }]
    })
}

/// A plugin stuck in a host call the sandbox cannot interrupt: the policy question is
/// answered by the default within the stall bound, the plugin is counted, quarantined
/// and its thread replaced; the next question goes past it; status answers throughout.
#[tokio::test(flavor = "multi_thread")]
async fn a_plugin_stuck_in_a_host_call_is_given_up_on_and_replaced() {
    let rt = runtime();
    let stall = rt.config().stall;
    let armed = Arc::new(AtomicBool::new(false));
    let host = PluginHost::new(
        rt.clone(),
        blocking_mesh(armed.clone()),
        Isolation::default(),
    );
    host.install(plugin(&rt, "mesh-reader", "test_mesh_reader", 100, ""))
        .await
        .unwrap();
    host.install(plugin(&rt, "policy", "regeneration_policy", 0, ""))
        .await
        .unwrap();
    let answer = host.regeneration_policy(request()).await;
    assert_eq!(answer.decided_by.as_deref(), Some("mesh-reader"));

    armed.store(true, Ordering::Relaxed);
    let started = Instant::now();
    let answer = host.regeneration_policy(request()).await;
    assert!(started.elapsed() < PROMPTLY, "{:?}", started.elapsed());
    assert_eq!(answer, PluginSet::default_answer(&request()));
    let report = host.report();
    assert_eq!(report.stalls, 1);
    let reader = &report.loaded[0];
    assert_eq!((reader.failures, reader.state.as_str()), (1, "quarantined"));
    let error = reader.last_error.as_deref().unwrap();
    assert!(
        error.contains("regeneration-policy did not return within")
            && error.contains(&format!("{stall:?}")),
        "{error}"
    );
    // Quarantined: the next question goes to the next plugin, at once.
    let started = Instant::now();
    let answer = host.regeneration_policy(request()).await;
    assert!(started.elapsed() < PROMPTLY);
    assert_eq!(answer.decided_by.as_deref(), Some("policy"));
    // Removing the stuck plugin does not wait on it either.
    assert!(host.remove("mesh-reader", false));
    armed.store(false, Ordering::Relaxed);
}

/// A sync hook stuck in a host call has nobody waiting for it: the watchdog finds it,
/// and the plugin's later hooks run on a new thread once its quarantine is over.
#[tokio::test(flavor = "multi_thread")]
async fn a_sync_hook_stuck_in_a_host_call_is_found_by_the_watchdog() {
    let rt = runtime();
    let armed = Arc::new(AtomicBool::new(true));
    let isolation = Isolation {
        quarantine: Duration::from_millis(200),
        ..Isolation::default()
    };
    let host = PluginHost::new(rt.clone(), blocking_mesh(armed.clone()), isolation);
    host.install(plugin(&rt, "mesh-reader", "test_mesh_reader", 0, ""))
        .await
        .unwrap();
    host.synced(Resource::Nodes, cluster("c2"));
    let report = support::eventually("the watchdog replaced the thread", PROMPTLY, || {
        let r = host.report();
        (r.stalls == 1).then_some(r)
    })
    .await;
    assert_eq!(report.loaded[0].failures, 1);
    armed.store(false, Ordering::Relaxed);
    // After the quarantine, the new thread serves the plugin's hooks.
    support::eventually("the quarantine is over", PROMPTLY, || {
        (host.report().loaded[0].state == "active").then_some(())
    })
    .await;
    host.synced(Resource::Nodes, cluster("c3"));
    assert!(host.flush_within(PROMPTLY).await);
    let reader = &host.report().loaded[0];
    assert_eq!(
        reader.counters.get("mesh_reader_nodes_synced"),
        Some(&1),
        "{reader:?}"
    );
}

/// An `init` stuck in a host call: the install gives up within the stall bound, says
/// so, and the running plugin of that name is kept.
#[tokio::test(flavor = "multi_thread")]
async fn an_install_whose_init_never_returns_is_refused_and_the_running_plugin_kept() {
    let rt = runtime();
    let armed = Arc::new(AtomicBool::new(true));
    let host = PluginHost::new(
        rt.clone(),
        blocking_mesh(armed.clone()),
        Isolation::default(),
    );
    host.install(plugin(&rt, "reader", "test_mesh_reader", 0, ""))
        .await
        .unwrap();
    let started = Instant::now();
    let e = host
        .install(plugin(
            &rt,
            "reader",
            "test_mesh_reader",
            0,
            "read-mesh-in-init",
        ))
        .await
        .unwrap_err();
    assert!(started.elapsed() < PROMPTLY);
    assert!(
        matches!(&e, Error::InitStalled { after, .. } if *after < PROMPTLY),
        "{e}"
    );
    let report = host.report();
    assert_eq!(report.stalls, 1);
    assert_eq!(report.loaded.len(), 1, "the running plugin is kept");
    armed.store(false, Ordering::Relaxed);
}

/// The sandbox links no filesystem: a plugin that reads a file is refused at load,
/// naming the import.
#[test]
fn a_plugin_importing_the_filesystem_is_refused_naming_the_import() {
    let rt = runtime();
    let p = plugin(&rt, "fs", "test_fs_reader", 0, "");
    match rt.prepare("fs", &p.component) {
        Err(Error::Instantiate { misfit, .. }) => assert!(
            misfit.contains("wasi:filesystem/") && misfit.contains("does not provide"),
            "{misfit}"
        ),
        other => panic!("expected a refusal, got {other:?}"),
    }
}
