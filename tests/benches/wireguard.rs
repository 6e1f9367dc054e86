//! WireGuard peer benchmark (needs root and /dev/net/tun): a userspace device run by
//! `weft-wg` in a network namespace of its own, configured over its UAPI socket.
//!
//! - **Full reconcile**: 1,000 remote nodes, each with 100 AllowedIPs (its node IP and
//!   99 ipcache prefixes tunnelled to it), fed to a fresh `PeerSync` through the node
//!   listener and a real `IpCache`, until the device holds them all. The baseline is
//!   the same configuration built by hand and sent as one `wg setconf`-style UAPI set,
//!   in the same run.
//! - **1,000 ipcache changes** on the reconciled device, each a new prefix tunnelled to
//!   some node: once flushed one by one (a UAPI round trip each, the worst case), and
//!   once as a burst. Next to them, the cost of sending the full configuration again.
//!
//! `cargo bench -p weft-e2e --bench wireguard`.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use weft_model::{Node, NodeAddress};
use weft_state::ipcache::{Fact, IpCache, Owner, Prefix, Source};
use weft_state::node::{NodeId, NodeListener as _};
use weft_testkit as support;
use weft_wireguard::{NodeKey, PeerSync, WireGuardDevice};
use wireguard_control::{DeviceUpdate, Key, PeerConfigBuilder};

const NODES: u32 = 1_000;
const PER_NODE: u32 = 100;
const CHANGES: u32 = 1_000;
const ROUNDS: usize = 3;

fn node_ip(n: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0xAC10_0000 + n)) // 172.16.0.0/12
}

/// The i-th pod prefix of node n (99 per node), then the changes after them.
fn pod(n: u32, i: u32) -> Prefix {
    Prefix::host(IpAddr::V4(Ipv4Addr::from(0x0A00_0000 + n * 128 + i)))
}

fn node_key(n: u32) -> Key {
    let mut bytes = [0u8; 32];
    bytes[..4].copy_from_slice(&(n + 1).to_be_bytes());
    Key(bytes)
}

fn node(n: u32) -> Node {
    Node {
        name: format!("node-{n}"),
        cluster: "c2".into(),
        cluster_id: 2,
        ip_addresses: vec![NodeAddress {
            kind: "InternalIP".into(),
            ip: node_ip(n),
        }],
        wireguard_pub_key: node_key(n).to_base64(),
        ..Node::default()
    }
}

fn tunnelled(n: u32) -> Fact {
    Fact {
        identity: Some(70_000),
        tunnel_peer: Some(node_ip(n)),
        encrypt_key: 0xFF,
        ..Fact::default()
    }
}

fn full_set() -> DeviceUpdate {
    let mut update = DeviceUpdate::new().replace_peers();
    for n in 0..NODES {
        let mut peer = PeerConfigBuilder::new(&node_key(n))
            .set_endpoint((node_ip(n), 51871).into())
            .add_allowed_ip(node_ip(n), 32);
        for i in 0..PER_NODE - 1 {
            let p = pod(n, i);
            peer = peer.add_allowed_ip(p.addr(), p.prefix_len());
        }
        update = update.add_peer(peer);
    }
    update
}

fn clear(device: &WireGuardDevice) {
    device
        .apply(DeviceUpdate::new().replace_peers())
        .expect("peers cleared");
}

fn allowed_ips(device: &WireGuardDevice) -> usize {
    let peers = device.peers().unwrap();
    peers.iter().map(|(_, ips)| ips.len()).sum()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

struct Netns(String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn main() {
    if !Path::new("/dev/net/tun").exists() {
        eprintln!("SKIPPED: the WireGuard benchmark needs /dev/net/tun");
        return;
    }
    let pid = std::process::id() % 100_000;
    let ns = Netns(format!("weft-bench-wg-{pid}"));
    let ok = Command::new("ip").args(["netns", "add", &ns.0]).status();
    assert!(ok.is_ok_and(|s| s.success()), "ip netns add (root needed)");
    let name = format!("wbench{pid}");
    let path = std::path::PathBuf::from(format!("/run/netns/{}", ns.0));
    let device =
        WireGuardDevice::ensure(&name, Some(&path), Path::new(support::bin::weft_wg())).unwrap();
    let result = std::panic::catch_unwind(|| run(&device));
    device.stop();
    drop(ns);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

fn run(device: &WireGuardDevice) {
    let state = tempfile::tempdir().unwrap();
    let key = NodeKey::load_or_create(&state.path().join("wg.key")).unwrap();
    device.configure(&key).unwrap();
    let local = NodeId {
        cluster: "c1".into(),
        name: "me".into(),
    };
    let total = (NODES * PER_NODE) as usize;
    let (mut baseline, mut reconcile, mut round_trips) = (Vec::new(), Vec::new(), Vec::new());
    let (mut one_by_one, mut burst, mut resend) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        // Baseline: the whole configuration in one set.
        clear(device);
        let update = full_set();
        let t = Instant::now();
        device.apply(update).unwrap();
        baseline.push(t.elapsed());
        assert_eq!(allowed_ips(device), total);
        clear(device);

        // weft: nodes and ipcache entries as events, until the device holds them.
        let sync = PeerSync::start(device.clone(), local.clone()).unwrap();
        let ipcache = IpCache::default();
        ipcache.add_listener(sync.clone());
        let t = Instant::now();
        for n in 0..NODES {
            sync.on_upsert(&node(n), None);
        }
        for n in 0..NODES {
            let owner = Owner::new(Source::ClusterMesh, format!("node-{n}"));
            for i in 0..PER_NODE - 1 {
                ipcache.upsert(pod(n, i), owner.clone(), tunnelled(n));
            }
        }
        sync.flush();
        reconcile.push(t.elapsed());
        round_trips.push(sync.status().updates);
        assert_eq!(allowed_ips(device), total);

        // 1,000 changes, each flushed: a round trip per change.
        let owner = Owner::new(Source::ClusterMesh, "changes");
        let t = Instant::now();
        for c in 0..CHANGES {
            ipcache.upsert(pod(c, 100 + round as u32 * 2), owner.clone(), tunnelled(c));
            sync.flush();
        }
        one_by_one.push(t.elapsed() / CHANGES);
        // 1,000 changes in a burst.
        let before = sync.status().updates;
        let t = Instant::now();
        for c in 0..CHANGES {
            ipcache.upsert(pod(c, 101 + round as u32 * 2), owner.clone(), tunnelled(c));
        }
        sync.flush();
        burst.push(t.elapsed());
        let burst_trips = sync.status().updates - before;
        assert_eq!(allowed_ips(device), total + 2 * CHANGES as usize);
        // What a full rewrite per change would cost, once.
        let update = full_set();
        let t = Instant::now();
        device.apply(update).unwrap();
        resend.push(t.elapsed());
        println!(
            "round {round}: baseline {}, reconcile {} ({} round trips), change {:.0} µs flushed, burst {} ({burst_trips} round trips), full resend {}",
            ms(baseline[round]),
            ms(reconcile[round]),
            round_trips[round],
            one_by_one[round].as_secs_f64() * 1e6,
            ms(burst[round]),
            ms(resend[round]),
        );
        drop((sync, ipcache));
    }
    let (b, r) = (median(baseline), median(reconcile));
    let (o, u, f) = (median(one_by_one), median(burst), median(resend));
    println!("\nmedians of {ROUNDS} rounds, {NODES} nodes x {PER_NODE} AllowedIPs:");
    println!("| measure | baseline (one set) | weft | ratio | target |");
    println!("|---|---|---|---|---|");
    println!(
        "| full reconcile | {} | {} ({} UAPI round trips) | **{:.2}×** | ≤ 2× |",
        ms(b),
        ms(r),
        round_trips.iter().max().unwrap(),
        r.as_secs_f64() / b.as_secs_f64()
    );
    println!(
        "| one ipcache change, flushed | {} (full set resent) | {:.0} µs (1 round trip) | {:.4}× | — |",
        ms(f),
        o.as_secs_f64() * 1e6,
        o.as_secs_f64() / f.as_secs_f64()
    );
    println!(
        "| {CHANGES} ipcache changes, burst | {} (full set resent) | {} | {:.2}× | — |",
        ms(f),
        ms(u),
        u.as_secs_f64() / f.as_secs_f64()
    );
}
