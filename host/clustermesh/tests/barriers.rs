//! Sync barrier semantics (a–f) of the cluster mesh, against real etcd.

use weft_testkit as support;

use std::time::Duration;
use support::{eventually, put_cluster_config, seed_cluster, within, Etcd, Lab};
use tokio::time::Instant;
use weft_clustermesh::{PendingCluster, Resource};

const CANARIES: &str = r#"{"id":2,"capabilities":{"syncedCanaries":true}}"#;

fn canary(cluster: &str, base: &str) -> String {
    format!("cilium/synced/{cluster}/{base}")
}

/// (a) Released when the initial list is in, and not before: the "synced" callback of
/// each resource already sees every value, although the list took many pages.
#[tokio::test]
async fn barrier_released_exactly_when_the_initial_list_is_in() {
    let etcd = Etcd::start().await;
    seed_cluster(&etcd, "c2", 2, 60).await;
    let lab = Lab::start(7);
    lab.add("c2", &etcd.url());
    let s = lab.until("c2 ready", "c2", |s| s.ready).await;
    assert_eq!(support::counts(&s), (60, 60, 60, 60));
    let seen = lab.seen_counts.lock().unwrap().clone();
    assert_eq!(seen.len(), 4, "one callback per resource: {seen:?}");
    for (r, cluster, n) in seen {
        assert_eq!(
            (cluster.as_str(), n),
            ("c2", 60),
            "{r} released before its list was in"
        );
    }
    assert_eq!(
        lab.recorder.keys_of("c2"),
        240,
        "the observer saw the whole list"
    );
}

/// (a, canary mode) and (b), (d): a resource is not synced before its canary, and
/// `ip_identities_synced` also waits for nodes; the timeout names what is pending.
#[tokio::test]
async fn ip_identities_synced_waits_for_nodes_and_names_what_is_pending() {
    let etcd = Etcd::start().await;
    put_cluster_config(&etcd, "c2", CANARIES).await;
    seed_cluster(&etcd, "c2", 2, 5).await;
    etcd.put(&canary("c2", "cilium/state/ip/v1"), "2026-12-02T00:00:00Z")
        .await;
    etcd.put(
        &canary("c2", "cilium/state/identities/v1"),
        "2026-12-02T00:00:00Z",
    )
    .await;
    let lab = Lab::start(256);
    lab.add("c2", &etcd.url());
    let s = lab
        .until("ipcache and identities synced", "c2", |s| {
            s.synced.ipcache && s.synced.identities
        })
        .await;
    assert!(
        !s.synced.nodes && !s.synced.services,
        "no canary, no sync: {s:?}"
    );
    assert_eq!(
        s.counts.nodes, 0,
        "nodes are not even read before their canary"
    );

    let err = lab
        .mesh
        .ip_identities_synced(Instant::now() + Duration::from_millis(300))
        .await
        .expect_err("nodes are still pending");
    assert_eq!(
        err.pending,
        [PendingCluster {
            cluster: "c2".into(),
            resources: vec![Resource::Nodes]
        }]
    );
    assert!(err.to_string().contains("c2 (nodes)"), "{err}");

    etcd.put(
        &canary("c2", "cilium/state/nodes/v1"),
        "2026-12-02T00:00:00Z",
    )
    .await;
    let report = lab
        .mesh
        .ip_identities_synced(Instant::now() + Duration::from_secs(30))
        .await
        .expect("synced once the nodes' canary is there");
    assert_eq!(report.synced, ["c2"]);
    assert_eq!(lab.status_of("c2").unwrap().counts.nodes, 5);
}

/// (c) A cluster removed mid-sync releases its waiters as disconnected — no deadlock —
/// and the mesh-wide wait counts it as done. Clusters added after the call are not
/// waited for.
#[tokio::test]
async fn removing_a_cluster_mid_sync_releases_waiters() {
    let etcd = Etcd::start().await;
    put_cluster_config(&etcd, "c2", CANARIES).await;
    let lab = Lab::start(256);
    let empty = lab
        .mesh
        .nodes_synced(Instant::now() + Duration::from_secs(30));
    assert!(
        within("a wait with no cluster", Duration::from_secs(1), empty)
            .await
            .is_ok()
    );

    lab.add("c2", &etcd.url());
    lab.until("c2 connected", "c2", |s| s.connected).await;
    let mesh = lab.mesh.clone();
    let waiter = tokio::spawn(async move {
        mesh.nodes_synced(Instant::now() + Duration::from_secs(600))
            .await
    });
    // The waiter holds no lock: status and changes proceed while it waits.
    assert!(!lab.status_of("c2").unwrap().synced.nodes);
    lab.remove("c2");
    let report = within(
        "waiter released by removal",
        Duration::from_secs(30),
        waiter,
    )
    .await
    .unwrap()
    .expect("a removed cluster counts as done");
    assert_eq!(report.disconnected, ["c2"]);
    assert!(report.synced.is_empty());
}

/// (c, f) Stopping the agent drains nothing and releases no waiter: a stop is no news
/// about a cluster, and a waiter that took it for "disconnected" would act on it
/// (collect a frozen cluster's restored WireGuard peers) just before the agent exits.
/// Not even a waiter's deadline ends it once the mesh stops.
#[tokio::test]
async fn stopping_releases_no_waiter_and_drains_nothing() {
    let (synced, pending) = (Etcd::start().await, Etcd::start().await);
    seed_cluster(&synced, "c2", 2, 3).await;
    put_cluster_config(
        &pending,
        "c3",
        r#"{"id":3,"capabilities":{"syncedCanaries":true}}"#,
    )
    .await;
    let lab = Lab::start(256);
    lab.add("c2", &synced.url());
    lab.add("c3", &pending.url());
    lab.until("c2 ready", "c2", |s| s.ready).await;
    lab.until("c3 connected", "c3", |s| s.connected).await;
    let wait = |deadline: Duration| {
        let mesh = lab.mesh.clone();
        tokio::spawn(async move { mesh.services_synced(Instant::now() + deadline).await })
    };
    let (long, short) = (
        wait(Duration::from_secs(600)),
        wait(Duration::from_millis(500)),
    );
    lab.mesh.stop().await;
    let after = wait(Duration::from_millis(100));
    // Bounded: past the short deadlines, with room for a scheduler's delay.
    let ended = tokio::time::timeout(Duration::from_secs(2), async {
        tokio::select! {
            r = long => format!("the long wait ended: {r:?}"),
            r = short => format!("the short wait ended: {r:?}"),
            r = after => format!("a wait begun after the stop ended: {r:?}"),
        }
    })
    .await;
    assert!(ended.is_err(), "{}", ended.unwrap());
    assert_eq!(
        lab.recorder.deletes.lock().unwrap().len(),
        0,
        "stop drains nothing"
    );
    assert_eq!(lab.recorder.keys_of("c2"), 12);
}

/// (e) "Synced" callbacks run once per cluster, not again after etcd restarts nor
/// after the config file changes (both reconnect and list again).
#[tokio::test]
async fn callbacks_run_once_and_not_again_on_reconnect() {
    let mut etcd = Etcd::start().await;
    seed_cluster(&etcd, "c2", 2, 3).await;
    let lab = Lab::start(256);
    lab.add("c2", &etcd.url());
    lab.until("c2 ready", "c2", |s| s.ready).await;

    etcd.restart().await;
    etcd.put(
        "cilium/state/nodes/v1/c2/after-restart",
        &support::node_json("c2", 2, "after-restart", "10.2.9.9"),
    )
    .await;
    lab.until("node written after the restart", "c2", |s| {
        s.counts.nodes == 4
    })
    .await;

    // Same etcd under another URL: a changed file, a new connection, a new list.
    let proxy = support::Proxy::start(etcd.client_port).await;
    lab.add("c2", &proxy.url());
    etcd.put(
        "cilium/state/nodes/v1/c2/after-change",
        &support::node_json("c2", 2, "after-change", "10.2.9.8"),
    )
    .await;
    lab.until("node written after the change", "c2", |s| {
        s.counts.nodes == 5 && s.connected
    })
    .await;

    for r in Resource::ALL {
        assert_eq!(lab.calls(r), 1, "{r} callback ran more than once");
    }
}

/// (f) Removing a cluster's file drains all its state and frees its cluster ID; a
/// cluster claiming a taken ID is refused with a reason naming the holder.
#[tokio::test]
async fn removal_drains_all_state_and_frees_the_cluster_id() {
    let (a, b) = (Etcd::start().await, Etcd::start().await);
    seed_cluster(&a, "ca", 5, 10).await;
    put_cluster_config(&a, "ca", r#"{"id":5}"#).await;
    seed_cluster(&b, "cb", 5, 2).await;
    put_cluster_config(&b, "cb", r#"{"id":5}"#).await;
    let lab = Lab::start(256);
    lab.add("ca", &a.url());
    lab.until("ca ready", "ca", |s| s.ready).await;
    assert_eq!(lab.recorder.keys_of("ca"), 40);

    lab.add("cb", &b.url());
    let refused = lab.until_error("cb", "already used").await;
    assert!(!refused.connected && refused.last_error.unwrap().contains("\"ca\""));

    lab.remove("ca");
    eventually("ca drained", Duration::from_secs(30), || {
        (lab.recorder.deletes_of("ca") == 40).then_some(())
    })
    .await;
    assert_eq!(lab.recorder.keys_of("ca"), 0);
    assert!(lab.status_of("ca").is_none());
    let s = lab
        .until("cb accepted with the freed ID", "cb", |s| s.ready)
        .await;
    assert_eq!(s.id, Some(5));
}
