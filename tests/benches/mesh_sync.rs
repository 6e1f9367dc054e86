//! Cluster-mesh sync benchmark: time from adding a remote cluster to all four barriers
//! released, next to a raw paged range read of the same keys in the same run, and the
//! agent's peak memory. `make bench` (or `cargo bench -p weft-e2e --bench mesh_sync`).
//!
//! One remote etcd holds 100,000 ipcache entries, 10,000 identities, 5,000 nodes and
//! 1,000 services. The agent is the real `weftd` with the rate limit off.

use weft_testkit as support;

use std::process::Command;
use std::time::{Duration, Instant};
use support::agent::{start_unlimited, status};
use support::{ip_json, node_json, service_json, Etcd};
use weft_model::layout::{self, Layout};
use weft_model::Resource;

const CLUSTER: &str = "bench";
const ID: u32 = 7;
const ROUNDS: usize = 3;

async fn load(etcd: &Etcd) -> usize {
    let mut kv = Vec::new();
    for i in 0..100_000u32 {
        let ip = format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255);
        kv.push((layout::ip(&ip), ip_json(&ip, (ID << 16) + (i % 10_000))));
    }
    for i in 0..10_000u32 {
        kv.push((
            layout::identity((ID << 16) + i),
            format!("k8s:app=app-{i};k8s:io.cilium.k8s.policy.cluster={CLUSTER};k8s:io.kubernetes.pod.namespace=ns-{};", i % 50),
        ));
    }
    for i in 0..5_000u32 {
        let name = format!("node-{i}");
        let ip = format!("172.16.{}.{}", i >> 8, i & 255);
        kv.push((
            layout::node(CLUSTER, &name),
            node_json(CLUSTER, ID, &name, &ip),
        ));
    }
    for i in 0..1_000u32 {
        let name = format!("svc-{i}");
        kv.push((
            layout::service(CLUSTER, "ns", &name),
            service_json(CLUSTER, ID, "ns", &name),
        ));
    }
    etcd.put_all(&kv).await;
    kv.len()
}

/// The baseline: the same four prefixes read page by page with etcd-client.
async fn raw_read(etcd: &Etcd) -> (Duration, usize) {
    let start = Instant::now();
    let prefixes = prefixes();
    let n = etcd.raw_read(&prefixes).await;
    (start.elapsed(), n)
}

/// The prefixes the agent watches for the bench's cluster, in the plain layout.
fn prefixes() -> [String; 4] {
    Resource::ALL.map(|r| Layout::PLAIN.prefix(r, CLUSTER))
}

/// A breakdown: `kvstore::list_watch` alone on the four prefixes at once, events
/// counted and dropped (no decoding, no stores).
async fn list_watch_only(etcd: &Etcd) -> Duration {
    use futures::StreamExt;
    let endpoints = weft_kvstore::Endpoints {
        urls: vec![etcd.url()],
        ..Default::default()
    };
    let config = weft_kvstore::Config::default().unlimited();
    let client = weft_kvstore::Client::connect(&endpoints, &config)
        .await
        .unwrap();
    let start = Instant::now();
    let lists = prefixes().map(|p| {
        let mut s = weft_kvstore::list_watch(client.clone(), p.to_owned());
        async move {
            while let Some(Ok(e)) = s.next().await {
                if matches!(e, weft_kvstore::Event::InitDone { .. }) {
                    break;
                }
            }
        }
    });
    futures::future::join_all(lists).await;
    start.elapsed()
}

/// The agent: a fresh `weftd`, then the cluster's file written; returns the time until
/// `ready` and the agent's peak resident memory in KiB.
async fn agent_sync(etcd: &Etcd) -> (Duration, u64) {
    let state = tempfile::tempdir().unwrap();
    let mesh = tempfile::tempdir().unwrap();
    let mut child = start_unlimited(
        Command::new(support::bin::weftd()),
        mesh.path(),
        state.path(),
    )
    .await;
    let start = Instant::now();
    support::write_config_file(mesh.path(), CLUSTER, &etcd.url());
    loop {
        let s = status(state.path()).await.unwrap();
        if s["clusters"][0]["ready"] == true {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "sync took over 5 minutes"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let took = start.elapsed();
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    let hwm = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    let _ = child.kill();
    let _ = child.wait();
    (took, hwm)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` asks for the list of tests; there are none.
    }
    let etcd = Etcd::start().await;
    let t = Instant::now();
    let keys = load(&etcd).await;
    println!("loaded {keys} keys in {:.1?}", t.elapsed());
    let (mut raw, mut agent, mut peak) = (Vec::new(), Vec::new(), 0);
    for round in 0..ROUNDS {
        let (r, n) = raw_read(&etcd).await;
        assert_eq!(n, keys);
        let (a, hwm) = agent_sync(&etcd).await;
        let lw = list_watch_only(&etcd).await;
        println!(
            "round {round}: raw paged read {r:.2?}, weftd add→ready {a:.2?} (list_watch alone {lw:.2?}), peak RSS {} MiB",
            hwm / 1024
        );
        raw.push(r);
        agent.push(a);
        peak = peak.max(hwm);
    }
    let (r, a) = (median(raw), median(agent));
    println!(
        "median: raw {r:.2?}, weftd {a:.2?}, ratio {:.2}x (target <= 1.3x); peak RSS {} MiB (target < 150 MiB)",
        a.as_secs_f64() / r.as_secs_f64(),
        peak / 1024
    );
}
