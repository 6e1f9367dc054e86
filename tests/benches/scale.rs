//! Scale benchmark (issue 15): 10 remote clusters, each its own etcd, with 50,000
//! ipcache entries, 1,000 identities and 500 nodes each (500,000 entries, 10,000
//! identities and 5,000 nodes in all, near the BPF map's 512,000). Measured: the time
//! from adding all ten to every barrier released, next to a raw paged read of the
//! same keys from the ten etcds at once in the same run, and the agent's peak memory.
//! The etcds run on half of the CPUs and the reader (raw client or agent) on the others,
//! as remote etcds never share the agent's node; `WEFT_SCALE_SHARED=1` shares them all.
//! `cargo bench -p weft-e2e --bench scale`.

use weft_testkit as support;

use std::process::Command;
use std::time::{Duration, Instant};
use support::agent::{start_unlimited, status};
use support::{ip_json, node_json, Etcd};
use weft_model::layout::{self, Layout};
use weft_model::Resource;

/// Remote clusters; `WEFT_SCALE_CLUSTERS` takes fewer for a profile.
fn clusters() -> u32 {
    support::env_or("WEFT_SCALE_CLUSTERS", 10)
}
/// Rounds of (raw read, agent sync), each against the same etcds; `WEFT_SCALE_ROUNDS`.
/// The machines are noisy: the median ratio is the figure.
fn rounds() -> usize {
    support::env_or("WEFT_SCALE_ROUNDS", 3)
}
/// Whether the etcds share every CPU with the reader (`WEFT_SCALE_SHARED=1`). By
/// default they are pinned to the first half of the CPUs and the reader (the raw
/// client, or the agent) to the rest, as in a deployment, where remote clusters'
/// etcds run in those clusters and never take the agent's node's CPU.
fn shared() -> bool {
    std::env::var("WEFT_SCALE_SHARED").is_ok_and(|v| v == "1")
}

/// Pins every thread of process `pid` to `cpus`; children it starts after inherit it.
fn pin(pid: u32, cpus: &[usize]) {
    let mut set = nix::sched::CpuSet::new();
    for cpu in cpus {
        set.set(*cpu).unwrap();
    }
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let tid: i32 = task.unwrap().file_name().to_str().unwrap().parse().unwrap();
        // A thread that ended since the listing is no matter.
        let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(tid), &set);
    }
}

const ENTRIES: u32 = 50_000;
const IDENTITIES: u32 = 1_000;
const NODES: u32 = 500;

fn name(id: u32) -> String {
    format!("cluster{id}")
}

async fn load(etcd: &Etcd, id: u32) -> usize {
    let cluster = name(id);
    let mut kv = Vec::new();
    for i in 0..ENTRIES {
        let ip = format!("10.{id}.{}.{}", i >> 8, i & 255);
        kv.push((
            layout::ip(&ip),
            ip_json(&ip, (id << 16) + 1 + i % IDENTITIES),
        ));
    }
    for i in 0..IDENTITIES {
        kv.push((
            layout::identity((id << 16) + 1 + i),
            format!("k8s:app=app-{i};k8s:io.cilium.k8s.policy.cluster={cluster};"),
        ));
    }
    for i in 0..NODES {
        let node = format!("node-{i}");
        let ip = format!("172.{}.{}.{}", 16 + id, i >> 8, i & 255);
        kv.push((
            layout::node(&cluster, &node),
            node_json(&cluster, id, &node, &ip),
        ));
    }
    etcd.put_all(&kv).await;
    kv.len()
}

/// Every key of one cluster, 256 a page at one revision, per prefix.
async fn raw_read_one(etcd: &Etcd, id: u32) -> usize {
    let prefixes = Resource::ALL.map(|r| Layout::PLAIN.prefix(r, &name(id)));
    etcd.raw_read(&prefixes).await
}

/// A fresh `weftd`, then all ten clusters' files; the time until every cluster is
/// ready, and the agent's peak resident memory in KiB.
async fn agent_sync(etcds: &[(u32, Etcd)]) -> (Duration, u64, Duration) {
    let state = tempfile::tempdir().unwrap();
    let mesh = tempfile::tempdir().unwrap();
    // `WEFT_AGENT_WRAPPER` runs the agent under a profiler (`heaptrack`, say).
    let wrapper = std::env::var("WEFT_AGENT_WRAPPER").unwrap_or_default();
    let mut words = wrapper.split_whitespace();
    let cmd = match words.next() {
        Some(program) => {
            let mut c = Command::new(program);
            c.args(words).arg(support::bin::weftd());
            c
        }
        None => Command::new(support::bin::weftd()),
    };
    let mut child = start_unlimited(cmd, mesh.path(), state.path()).await;
    let start = Instant::now();
    for (id, etcd) in etcds {
        support::write_config_file(mesh.path(), &name(*id), &etcd.url());
    }
    loop {
        let s = status(state.path()).await.unwrap();
        let ready = s["clusters"]
            .as_array()
            .map_or(0, |c| c.iter().filter(|c| c["ready"] == true).count());
        if ready == etcds.len() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(600),
            "sync took over 10 minutes"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let took = start.elapsed();
    let proc_status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    let hwm = proc_status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    let report = status(state.path()).await.unwrap_or_default();
    let entries = report["totals"]["ipcache"].as_u64().unwrap_or(0);
    println!("weftd holds {entries} resolved ipcache entries");
    // When each cluster's ipcache barrier went, from its addition: the spread says
    // whether the clusters were served together or one after another.
    let mut ipcache: Vec<u64> = report["clusters"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["synced_after_ms"]["ipcache"].as_u64())
        .collect();
    ipcache.sort_unstable();
    println!("ipcache barriers released after (ms, per cluster): {ipcache:?}");
    let cpu = support::cpu_time(child.id());
    let _ = child.kill();
    let _ = child.wait();
    (took, hwm, cpu)
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` asks for the list of tests; there are none.
    }
    let mut etcds = Vec::new();
    let clusters = clusters();
    let cpus: Vec<usize> =
        (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect();
    let (servers, readers) = cpus.split_at(cpus.len() / 2);
    let split = !shared() && !servers.is_empty();
    if split {
        // The etcds start pinned (so that Go sizes its scheduler to their CPUs)...
        pin(std::process::id(), servers);
    }
    for id in 2..2 + clusters {
        etcds.push((id, Etcd::start().await));
    }
    if split {
        // ...and the reader, the agent with it, runs on the others.
        pin(std::process::id(), readers);
        println!("etcds on CPUs {servers:?}, the reader (raw client or weftd) on {readers:?}");
    } else {
        println!("etcds and the reader share CPUs {cpus:?}");
    }
    let t = Instant::now();
    let loaded = futures::future::join_all(etcds.iter().map(|(id, e)| load(e, *id))).await;
    let keys: usize = loaded.iter().sum();
    println!(
        "loaded {keys} keys into {clusters} etcds in {:.1?}",
        t.elapsed()
    );

    let mut ratios = Vec::new();
    let mut peak = 0;
    for round in 1..=rounds() {
        // The etcds' CPU in each phase: whether they serve the agent more than the raw
        // read, or the agent's own CPU is what it adds.
        let etcd_cpu = || etcds.iter().map(|(_, e)| e.cpu_time()).sum::<Duration>();
        let reader_cpu = || support::cpu_time(std::process::id());
        let (t, before, reader_before) = (Instant::now(), etcd_cpu(), reader_cpu());
        let read =
            futures::future::join_all(etcds.iter().map(|(id, e)| raw_read_one(e, *id))).await;
        let raw = t.elapsed();
        let raw_etcd = etcd_cpu() - before;
        let raw_reader = reader_cpu() - reader_before;
        assert_eq!(read.iter().sum::<usize>(), keys);
        let before = etcd_cpu();
        let (agent, hwm, agent_cpu) = agent_sync(&etcds).await;
        let agent_etcd = etcd_cpu() - before;
        let ratio = agent.as_secs_f64() / raw.as_secs_f64();
        println!(
            "round {round}: raw paged read of all ten {raw:.2?} (etcds' CPU {raw_etcd:.2?}, the client's {raw_reader:.2?}), weftd add→all ready {agent:.2?} (etcds' CPU {agent_etcd:.2?}, weftd's {agent_cpu:.2?}), ratio {ratio:.2}x; peak RSS {} MiB",
            hwm / 1024
        );
        ratios.push(ratio);
        peak = peak.max(hwm);
    }
    ratios.sort_by(f64::total_cmp);
    println!(
        "median ratio {:.2}x of {} rounds (target <= 1.1x); peak RSS {} MiB (target < 300 MiB)",
        ratios[ratios.len() / 2],
        ratios.len(),
        peak / 1024
    );
}
