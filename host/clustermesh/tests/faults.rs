//! Fault injection against a real etcd: while a writer keeps putting and deleting
//! entries, the remote etcd is frozen and thawed, killed and restarted (at random
//! points of the mesh's lists, which are paged small, and of its watches), the mesh is
//! partitioned from it while it compacts, the cluster's config file flaps, and the
//! cluster's ID changes (refused, then put back and the cluster re-added). After the
//! last fault the mesh must converge on etcd key by key, with each barrier released
//! exactly once since the cluster was last added (and at most once per addition
//! before: one refused mid-sync never releases).
//! The seed is printed (`WEFT_FAULT_SEED` replays a run); so are the faults injected.

use weft_testkit as support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::{eventually, put_cluster_config, seed_cluster, Etcd, Lab, Proxy, Rng};
use weft_clustermesh::{Resource, Value};
use weft_model::{decode_json, ClusterService, Identity, IpIdentityPair, Node};

/// What etcd holds of cluster c2, decoded as the mesh decodes it.
async fn etcd_view(etcd: &Etcd) -> BTreeMap<String, Value> {
    let mut c = etcd.client().await;
    let all = c
        .get(
            "cilium/state/",
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await
        .unwrap();
    let mut view = BTreeMap::new();
    for kv in all.kvs() {
        let key = kv.key_str().unwrap().to_owned();
        let value = if key.starts_with("cilium/state/nodes/v1/") {
            Value::Node(Box::new(decode_json::<Node>(&key, kv.value()).unwrap()))
        } else if key.starts_with("cilium/state/ip/v1/") {
            Value::IpIdentity(decode_json::<IpIdentityPair>(&key, kv.value()).unwrap())
        } else if let Some(id) = key.strip_prefix("cilium/state/identities/v1/id/") {
            Value::Identity(Identity::decode(&key, id, kv.value()).unwrap())
        } else if key.starts_with("cilium/state/services/v1/") {
            Value::Service(decode_json::<ClusterService>(&key, kv.value()).unwrap())
        } else {
            continue;
        };
        view.insert(key, value);
    }
    view
}

fn mesh_view(lab: &Lab) -> BTreeMap<String, Value> {
    lab.recorder
        .state
        .lock()
        .unwrap()
        .iter()
        .filter(|((c, _), _)| c == "c2")
        .map(|((_, k), v)| (k.clone(), v.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_mesh_converges_on_etcd_through_random_faults() {
    let seed = support::faults::seed();
    let mut rng = Rng(seed);

    let mut etcd = Etcd::start().await;
    seed_cluster(&etcd, "c2", 2, 150).await;
    put_cluster_config(&etcd, "c2", r#"{"id":2}"#).await;
    // Pages of 16 keys: a list takes dozens of requests, so faults land inside lists.
    let lab = Lab::start(16);
    // The mesh reads through a proxy that a partition cuts; the writer does not.
    let proxy = Proxy::start(etcd.client_port).await;
    lab.add("c2", &proxy.url());

    // The writer: puts and deletes entries all along, reconnecting after failures.
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let writer = {
        let (url, stop, written) = (etcd.url(), stop.clone(), written.clone());
        tokio::spawn(async move {
            let mut round = 0u64;
            let mut client = None;
            while !stop.load(Ordering::Relaxed) {
                round += 1;
                if client.is_none() {
                    client = etcd_client::Client::connect([url.as_str()], None)
                        .await
                        .ok();
                }
                let Some(c) = client.as_mut() else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let ip = format!("10.2.9.{}", round % 40);
                let key = format!("cilium/state/ip/v1/default/{ip}");
                let op = async {
                    if round.is_multiple_of(3) {
                        c.delete(key.as_str(), None).await.map(drop)
                    } else {
                        let value = support::ip_json(&ip, (2 << 16) + 1 + (round % 7) as u32);
                        c.put(key.as_str(), value, None).await.map(drop)
                    }
                };
                match tokio::time::timeout(Duration::from_millis(500), op).await {
                    Ok(Ok(())) => {
                        written.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => client = None,
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };

    let mut injected: BTreeMap<&str, u32> = BTreeMap::new();
    let mut flaps = 0;
    let mut added = 1;
    let mut before_last_add = [0; 4];
    for n in 0..13 {
        tokio::time::sleep(rng.millis(0, 1_200)).await;
        // The last is always a partition: no later reconnection can hide a missed drain.
        let kind = if n == 12 { 2 } else { rng.below(5) };
        let fault = match kind {
            0 => {
                etcd.pause();
                tokio::time::sleep(rng.millis(200, 2_500)).await;
                etcd.resume();
                "freeze and thaw"
            }
            1 => {
                etcd.kill();
                tokio::time::sleep(rng.millis(0, 1_500)).await;
                etcd.restart().await;
                "kill and restart"
            }
            2 => {
                // A partition: the mesh is cut off while the writer goes on, and etcd
                // compacts; the watch's next revision is gone when the mesh is back,
                // so it lists again and drains what was deleted meanwhile.
                proxy.cut();
                tokio::time::sleep(rng.millis(200, 1_500)).await;
                // Seeded keys the writer never touches again: only the drain after
                // the re-list can take them out of the mesh.
                for _ in 0..3 {
                    let i = rng.below(150);
                    let key = format!("cilium/state/ip/v1/default/10.2.0.{}", i % 250 + 1);
                    etcd.delete(&key).await;
                }
                etcd.compact().await;
                proxy.restore();
                "partition with compaction"
            }
            3 => {
                // The cluster says it is another: refused, whatever else goes on,
                // until its config is put back and it is removed and added again.
                put_cluster_config(&etcd, "c2", r#"{"id":7}"#).await;
                let s = lab.until_error("c2", "changed from 2 to 7").await;
                assert!(!s.connected, "refused: {s:?}");
                put_cluster_config(&etcd, "c2", r#"{"id":2}"#).await;
                lab.remove("c2");
                eventually("c2 removed", Duration::from_secs(30), || {
                    lab.status_of("c2").is_none().then_some(())
                })
                .await;
                // Released by the additions before (at most once each: one refused
                // mid-sync never released).
                before_last_add = Resource::ALL.map(|r| lab.calls(r));
                lab.add("c2", &proxy.url());
                added += 1;
                "cluster ID change"
            }
            _ => {
                flaps += 1;
                let file = format!("endpoints:\n- {}\n# flap {flaps}\n", proxy.url());
                std::fs::write(lab.dir.path().join(".c2.tmp"), file).unwrap();
                std::fs::rename(lab.dir.path().join(".c2.tmp"), lab.dir.path().join("c2")).unwrap();
                "config flap"
            }
        };
        *injected.entry(fault).or_default() += 1;
    }
    stop.store(true, Ordering::Relaxed);
    writer.await.unwrap();

    let want = etcd_view(&etcd).await;
    eventually(
        "the mesh equals etcd key by key",
        Duration::from_secs(60),
        || (mesh_view(&lab) == want).then_some(()),
    )
    .await;
    for (r, before) in Resource::ALL.into_iter().zip(before_last_add) {
        assert_eq!(
            lab.calls(r),
            before + 1,
            "{r}: released exactly once since the cluster was last added"
        );
        assert!(before < added, "{r}: at most once per addition before");
    }
    let total: u32 = injected.values().sum();
    println!(
        "faults: {total} injected, all survived ({injected:?}); {} writes under them; {} keys equal",
        written.load(Ordering::Relaxed),
        want.len()
    );
}
