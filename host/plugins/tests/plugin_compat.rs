//! The contract's versions: a plugin built against `weft:plugin@0.1.0` keeps working
//! through the host's adapter (N−1), beside 0.2.0 plugins; the 0.2.0 request names the
//! endpoint and the reason; `peer-gc-policy` holds restored peers, clamped.

use weft_testkit as support;

use support::cluster_sync as sync;

use std::sync::Arc;
use std::time::Duration;
use weft_clustermesh::Resource;
use weft_hooks::{
    ClusterInfo, ClusterSync, Counts, EndpointKind, PeerGcRequest, PeerGcVerdict,
    RegenerationReason, RestoredPeer, Verdict,
};
use weft_plugins::{Config, Isolation, LoadedPlugin, MeshView, PluginHost, PluginSet, Runtime};

fn mesh(clusters: Vec<ClusterSync>) -> MeshView {
    Arc::new(move || clusters.clone())
}

fn component(rt: &Runtime, file: &str) -> wasmtime::component::Component {
    rt.compile(&std::fs::read(support::plugin_wasm(file)).unwrap())
        .unwrap()
}

fn cluster(name: &str) -> ClusterInfo {
    ClusterInfo {
        name: name.into(),
        id: Some(2),
        counts: Counts {
            nodes: 1,
            ipcache: 2,
            identities: 3,
            services: 0,
        },
    }
}

#[test]
fn a_0_1_0_plugin_keeps_working_through_the_adapter() {
    let rt = Runtime::new(Config::default()).unwrap();
    let old = component(&rt, "test_v0_1");
    assert_eq!(rt.exported_wit(&old).as_deref(), Some("0.1.0"));
    let clusters = vec![sync("c2", false), sync("c3", true)];
    let mut plugin = rt
        .instantiate("old", &old, "", mesh(clusters.clone()))
        .unwrap();
    assert_eq!(plugin.wit(), "0.1.0");

    // Asked in 0.1.0 terms (a restore of the host endpoint), answered in 0.2.0 terms.
    let request = support::request(EndpointKind::Host, false, clusters.clone());
    assert_eq!(request.reason, RegenerationReason::Restore);
    let decision = plugin.regeneration_policy(&request).unwrap();
    assert_eq!(
        weft_plugins::enforce(decision, Duration::from_secs(300)),
        Verdict::Wait {
            timeout: Duration::from_secs(60),
            barriers: vec![Resource::IpCache, Resource::Identities],
            clusters: vec!["c2".into()],
        }
    );
    // Its imports are served: metrics, the mesh view (above), the clock, logs.
    assert_eq!(plugin.counters().get("v0_1_host_restores"), Some(&1));
    let workload = support::request(EndpointKind::Workload, false, clusters.clone());
    plugin.regeneration_policy(&workload).unwrap();
    assert_eq!(plugin.counters().get("v0_1_host_restores"), Some(&1));
    for r in Resource::ALL {
        plugin.on_synced(r, &cluster("c2")).unwrap();
    }
    plugin.on_cluster_disconnected(&cluster("c2")).unwrap();
    for name in ["nodes", "ipcache", "identities", "services", "disconnected"] {
        assert_eq!(
            plugin.counters().get(&format!("v0_1_{name}")),
            Some(&1),
            "{name}"
        );
    }
    // 0.1.0 has no peer-gc-policy: no opinion.
    let gc = PeerGcRequest {
        peers: vec![],
        clusters: vec![],
    };
    assert_eq!(
        plugin.peer_gc_policy(&gc).unwrap(),
        weft_plugins::wit::PeerGcDecision::NoOpinion
    );

    // Its config still picks its barriers.
    let mut nodes = rt
        .instantiate("old", &old, "nodes,services", mesh(clusters.clone()))
        .unwrap();
    let decision = nodes.regeneration_policy(&request).unwrap();
    assert!(matches!(
        weft_plugins::enforce(decision, Duration::from_secs(300)),
        Verdict::Wait { barriers, .. } if barriers == [Resource::Nodes, Resource::Services]
    ));
}

#[test]
fn plugins_of_0_1_0_and_0_2_0_run_side_by_side_in_priority_order() {
    let rt = Arc::new(Runtime::new(Config::default()).unwrap());
    let clusters = vec![sync("c2", false)];
    let mut set = PluginSet::new(rt.clone(), mesh(clusters.clone()), Isolation::default());
    set.insert(LoadedPlugin {
        priority: 10,
        ..LoadedPlugin::new("sync-events", component(&rt, "sync_events"))
    })
    .unwrap();
    set.insert(LoadedPlugin::new("old", component(&rt, "test_v0_1")))
        .unwrap();
    let answer = set.regeneration_policy(&support::request(EndpointKind::Host, false, clusters));
    assert_eq!(
        answer.decided_by.as_deref(),
        Some("old"),
        "sync-events has no opinion"
    );
    set.on_synced(Resource::Nodes, &cluster("c2"));
    let statuses = set.statuses();
    assert_eq!(statuses[0].counters.get("sync_events_nodes"), Some(&1));
    assert_eq!(statuses[1].counters.get("v0_1_nodes"), Some(&1));
    assert!(statuses.iter().all(|s| s.failures == 0), "{statuses:?}");
}

#[tokio::test]
async fn the_peer_gc_policy_holds_restored_peers_clamped_and_a_0_1_0_plugin_has_no_say() {
    let rt = Arc::new(
        Runtime::new(Config {
            max_wait: Duration::from_secs(30),
            ..Config::default()
        })
        .unwrap(),
    );
    let host = PluginHost::new(rt.clone(), mesh(vec![]), Isolation::default());
    let request = PeerGcRequest {
        peers: vec![RestoredPeer {
            public_key: "x".into(),
            allowed_ips: vec!["10.2.0.0/24".into(), "192.0.2.2/32".into()],
        }],
        clusters: vec![sync("c2", true)],
    };
    // Nothing loaded, or only a 0.1.0 plugin: the built-in default collects.
    assert_eq!(
        host.peer_gc_policy(request.clone()).await.verdict,
        PeerGcVerdict::Collect
    );
    host.install(LoadedPlugin {
        priority: 10,
        ..LoadedPlugin::new("old", component(&rt, "test_v0_1"))
    })
    .await
    .unwrap();
    assert_eq!(host.peer_gc_policy(request.clone()).await.decided_by, None);
    host.install(LoadedPlugin {
        config: "1500".into(),
        ..LoadedPlugin::new("hold", component(&rt, "test_peer_gc_hold"))
    })
    .await
    .unwrap();
    let answer = host.peer_gc_policy(request.clone()).await;
    assert_eq!(answer.decided_by.as_deref(), Some("hold"));
    assert_eq!(
        answer.verdict,
        PeerGcVerdict::Hold(Duration::from_millis(1500))
    );
    let hold = &host.report().loaded[1];
    assert_eq!(hold.counters.get("peer_gc_peers"), Some(&1));
    // A hold for ever is clamped to the host's bound.
    host.install(LoadedPlugin {
        priority: 20,
        ..LoadedPlugin::new("forever", component(&rt, "test_out_of_bounds"))
    })
    .await
    .unwrap();
    assert_eq!(
        host.peer_gc_policy(request).await.verdict,
        PeerGcVerdict::Hold(Duration::from_secs(30))
    );
}
