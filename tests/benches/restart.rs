//! Restart benchmark: an agent with 100 endpoints (made through `weft-cni`, each under a
//! policy that admits a remote cluster's clients) and a remote cluster of 1,000 nodes,
//! 50,000 ipcache entries and 500 identities is killed and started again. Measured from the
//! restart, from the agent's own log: when the remote ipcache and identities are in
//! (their barriers released: the baseline, the time the remote state takes to arrive)
//! and when the last endpoint is switched to the new generation. Median of 3 rounds.
//! `cargo bench -p weft-e2e --bench restart` (root and BPF: it makes namespaces and pins,
//! all removed after).

use weft_testkit as support;

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};
use support::agent::{cluster_config, Agent};
use support::netns::Netns;
use support::{ip_json, Etcd};
use weft_model::layout;

const PODS: usize = 100;
const ENTRIES: u32 = 50_000;
const IDENTITIES: u32 = 500;
const NODES: u32 = 1_000;
const ROUNDS: usize = 3;

const POLICY: &str = "
apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: bench, namespace: bench}
spec:
  endpointSelector: {matchLabels: {app: bench}}
  ingress:
  - fromEndpoints: [{matchLabels: {app: client-7, io.cilium.k8s.policy.cluster: cluster2}}]
    toPorts: [{ports: [{port: '80', protocol: TCP}]}]
";

/// cluster2: 1,000 nodes, 50,000 ipcache entries over 500 identities.
async fn load(etcd: &Etcd) {
    let mut kv = Vec::new();
    for i in 0..ENTRIES {
        let ip = format!("10.{}.{}.{}", 100 + (i >> 16), (i >> 8) & 255, i & 255);
        kv.push((
            layout::ip(&ip),
            ip_json(&ip, (2 << 16) + 1 + i % IDENTITIES),
        ));
    }
    for i in 0..IDENTITIES {
        kv.push((
            layout::identity((2 << 16) + 1 + i),
            format!(
                "k8s:app=client-{i};k8s:io.cilium.k8s.policy.cluster=cluster2;k8s:io.kubernetes.pod.namespace=bench;"
            ),
        ));
    }
    for i in 0..NODES {
        let name = format!("node-{i}");
        let ip = format!("172.16.{}.{}", i >> 8, i & 255);
        kv.push((
            layout::node("cluster2", &name),
            support::node_json("cluster2", 2, &name, &ip),
        ));
    }
    etcd.put_all(&kv).await;
}

/// The time of the last log line (after `from`) holding every needle.
fn last_logged_at(log: &str, needles: &[&str]) -> Option<SystemTime> {
    log.lines()
        .filter(|l| needles.iter().all(|n| l.contains(n)))
        .filter_map(|l| support::agent::logged_at(l, &[]))
        .max()
}

/// Whether every endpoint's last regeneration is a restore that ended.
fn all_restored(agent: &Agent) -> Option<()> {
    let listed = agent.json(&["endpoint", "list"])?;
    let all = listed.as_array()?;
    (all.len() == PODS
        && all.iter().all(|e| {
            let r = &e["regeneration"];
            r["reason"] == "restore" && support::cni::ended(r)
        }))
    .then_some(())
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1e3)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--list") || !support::bpf_available("restart-bench") {
        return;
    }
    let (e1, e2) = (Etcd::start().await, Etcd::start().await);
    cluster_config("cluster1", 1, &e1, false);
    cluster_config("cluster2", 2, &e2, false);
    load(&e2).await;
    let (node, _peer) = support::netns::joined_pair("rstb");
    let root = PathBuf::from(format!(
        "/sys/fs/bpf/weft-bench-{}-restart",
        std::process::id()
    ));
    weft_datapath::Datapath::remove_all(&root);
    let policies = tempfile::tempdir().unwrap();
    std::fs::write(policies.path().join("bench.yaml"), POLICY).unwrap();
    let flags: Vec<OsString> = ["--native-device", "weftv0", "--pod-cidr", "10.90.0.0/24"]
        .iter()
        .map(OsString::from)
        .chain([
            "--datapath-netns".into(),
            node.path().into(),
            "--bpf-root".into(),
            root.clone().into(),
            "--policy-dir".into(),
            policies.path().into(),
        ])
        .collect();
    let refs: Vec<&std::ffi::OsStr> = flags.iter().map(OsString::as_os_str).collect();
    let mut agent = Agent::start_with("cluster1", 1, &e1, &refs);
    support::write_config_file(agent.mesh_dir.path(), "cluster2", &e2.url());
    support::eventually("weftd answers", Duration::from_secs(30), || {
        agent.status_json()
    })
    .await;
    let pods: Vec<Netns> = (0..PODS)
        .map(|i| Netns::new(&format!("weft-bench-pod{i}")))
        .collect();
    for (i, pod) in pods.iter().enumerate() {
        support::cni::add(&agent, &format!("pod{i}"), "bench", pod, "bench");
    }
    support::eventually("every endpoint switched", Duration::from_secs(120), || {
        let listed = agent.json(&["endpoint", "list"])?;
        let all = listed.as_array()?;
        (all.len() == PODS && all.iter().all(|e| support::cni::ended(&e["regeneration"])))
            .then_some(())
    })
    .await;

    let (mut arrived, mut firsts, mut switched) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let before = agent.log().len();
        let restarted = SystemTime::now();
        agent.restart(&refs);
        support::eventually(
            "every endpoint restored and switched",
            Duration::from_secs(120),
            || all_restored(&agent),
        )
        .await;
        let log = agent.log();
        let log = &log[before..];
        let remote = ["nodes", "ipcache", "identities"]
            .iter()
            .map(|r| {
                last_logged_at(log, &["barrier released", "cluster2", &format!("\"{r}\"")])
                    .expect("the barrier's release is logged")
            })
            .max()
            .unwrap();
        let last = last_logged_at(log, &["endpoint switched", "\"wft"])
            .expect("the endpoints' switches are logged");
        let first = support::agent::logged_at(log, &["endpoint switched", "\"wft"]).unwrap();
        arrived.push(remote.duration_since(restarted).unwrap());
        firsts.push(first.duration_since(restarted).unwrap());
        switched.push(last.duration_since(restarted).unwrap());
    }
    drop(agent);
    drop(pods);
    weft_datapath::Datapath::remove_all(&root);
    let (arrived, first, switched) = (median(arrived), median(firsts), median(switched));
    println!(
        "restart with {PODS} endpoints and {NODES} remote nodes, {ENTRIES} remote ipcache entries ({IDENTITIES} identities), median of {ROUNDS}"
    );
    println!("| measure | time from the restart | baseline (same run) | ratio |");
    println!("|---|---|---|---|");
    for (what, t) in [
        ("first endpoint switched", first),
        ("every endpoint switched", switched),
    ] {
        println!(
            "| {what} | {} | remote ipcache and identities in: {} | {:.2}× |",
            ms(t),
            ms(arrived),
            t.as_secs_f64() / arrived.as_secs_f64()
        );
    }
}
