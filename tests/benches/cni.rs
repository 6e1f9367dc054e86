//! CNI benchmark: `weft-cni` ADD to a ready endpoint (interfaces, address, identity in
//! etcd, ipcache entry published), p50 and p99 over 100 pods, next to setting up the
//! same namespace and veth by hand with `ip` in the same run, pod by pod alternately.
//! `cargo bench -p weft-e2e --bench cni` (root: it makes namespaces, all removed after).
//!
//! Both sides start from `ip netns add`; the hand-made side then creates the veth pair,
//! moves and renames its end, adds the address and the two routes in the pod, and the
//! route to the pod on the node: what the agent does minus the address allocation, the
//! identity and the ipcache entry.

use weft_testkit as support;

use serde_json::json;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};
use support::agent::Agent;
use support::netns::Netns;
use support::Etcd;

const PODS: usize = 100;

fn ip(args: &[&str]) {
    let ok = Command::new("ip").args(args).status().unwrap().success();
    assert!(ok, "ip {}", args.join(" "));
}

/// What `weft-cni` ADD does to the kernel, by hand.
fn by_hand(node: &str, i: usize) -> (Duration, String) {
    let pod = format!("weft-bench-hand-{i}-{}", std::process::id());
    let (host, peer) = (format!("wfh{i}"), format!("wfhp{i}"));
    let addr = format!("10.91.{}.{}", i / 200, 2 + i % 200);
    let start = Instant::now();
    ip(&["netns", "add", &pod]);
    ip(&[
        "-n", node, "link", "add", &host, "type", "veth", "peer", "name", &peer,
    ]);
    ip(&["-n", node, "link", "set", &peer, "netns", &pod]);
    ip(&["-n", &pod, "link", "set", &peer, "name", "eth0", "up"]);
    ip(&[
        "-n",
        &pod,
        "addr",
        "add",
        &format!("{addr}/32"),
        "dev",
        "eth0",
    ]);
    ip(&[
        "-n",
        &pod,
        "route",
        "add",
        "10.91.0.1",
        "dev",
        "eth0",
        "scope",
        "link",
    ]);
    ip(&[
        "-n",
        &pod,
        "route",
        "add",
        "default",
        "via",
        "10.91.0.1",
        "dev",
        "eth0",
    ]);
    ip(&["-n", node, "link", "set", &host, "up"]);
    ip(&[
        "-n",
        node,
        "route",
        "add",
        &format!("{addr}/32"),
        "dev",
        &host,
    ]);
    (start.elapsed(), pod)
}

/// `ip netns add`, then `weft-cni` ADD as a runtime runs it.
fn cni_add(conf: &str, i: usize) -> (Duration, String) {
    let pod = format!("weft-bench-cni-{i}-{}", std::process::id());
    let start = Instant::now();
    ip(&["netns", "add", &pod]);
    let out = run_cni(conf, "ADD", i, Some(&pod));
    let took = start.elapsed();
    assert!(out.contains("\"ips\""), "ADD {i}: {out}");
    (took, pod)
}

fn run_cni(conf: &str, command: &str, i: usize, pod: Option<&str>) -> String {
    let netns = pod.map(|p| PathBuf::from(format!("/run/netns/{p}")));
    support::cni::run(
        command,
        &format!("bench-{i}"),
        "bench",
        netns.as_deref(),
        conf,
    )
    .0
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let etcd = Etcd::start().await;
    let node = Netns::new("weft-bench-node");
    let agent = Agent::start_with(
        "cluster1",
        1,
        &etcd,
        &[
            "--pod-cidr".as_ref(),
            "10.90.0.0/24".as_ref(),
            "--datapath-netns".as_ref(),
            node.path().as_os_str(),
        ],
    );
    let conf = json!({
        "cniVersion": "1.1.0", "name": "weft", "type": "weft-cni",
        "socket": agent.state.path().join("weftd.sock"),
        "runtimeConfig": {"labels": {"app": "bench"}},
    })
    .to_string();
    support::eventually("weftd answers STATUS", Duration::from_secs(30), || {
        run_cni(&conf, "STATUS", 0, None).is_empty().then_some(())
    })
    .await;

    let (mut adds, mut hands, mut namespaces) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..PODS {
        let (t, pod) = by_hand(&node.name, i);
        hands.push(t);
        namespaces.push(pod);
        let (t, pod) = cni_add(&conf, i);
        adds.push(t);
        namespaces.push(pod);
    }
    for i in 0..PODS {
        run_cni(&conf, "DEL", i, None);
    }
    for ns in &namespaces {
        let _ = Command::new("ip").args(["netns", "del", ns]).status();
    }
    adds.sort();
    hands.sort();
    println!("{PODS} pods, each: `ip netns add`, then the attachment");
    println!("| measure | p50 | p99 | baseline p50 (same run) | ratio (p50) |");
    println!("|---|---|---|---|---|");
    println!(
        "| weft-cni ADD to ready | {} | {} | by hand with ip {} (p99 {}) | {:.2}× |",
        ms(pct(&adds, 0.5)),
        ms(pct(&adds, 0.99)),
        ms(pct(&hands, 0.5)),
        ms(pct(&hands, 0.99)),
        pct(&adds, 0.5).as_secs_f64() / pct(&hands, 0.5).as_secs_f64()
    );
}
