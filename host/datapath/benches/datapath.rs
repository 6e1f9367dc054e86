//! Datapath benchmark (needs root and BPF).
//!
//! - Map sync: 100,000 resolved ipcache entries written to a fresh generation's map by
//!   the map writer (the ipcache replays them to the new listener, as at agent start)
//!   next to a raw loop of `LpmTrie::insert` of the same keys and values into another
//!   fresh map, in the same run.
//! - Per packet: `BPF_PROG_TEST_RUN` (repeat 1,000,000) of `weft_to_netdev` on one
//!   packet per decision path, with the 100,000 entries in the map, next to the empty
//!   classifier `weft_baseline` in the same run.
//!
//! `cargo bench -p weft-datapath --bench datapath`.

use aya::programs::SchedClassifier;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use weft_datapath::{
    ipcache_key, test_run, Datapath, DatapathConfig, MapWriter, RemoteEndpointInfo, BASELINE_OBJECT,
};
use weft_state::ipcache::{Fact, IpCache, Owner, Prefix, Source};

const N: u32 = 100_000;
const REPEAT: u32 = 1_000_000;
const POD_ID: u32 = 70_000;
const ROUNDS: usize = 5;

fn addr(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0x0A00_0000 + i))
}

/// The i-th entry: remote pods, a third of them behind WireGuard.
fn fact(i: u32) -> Fact {
    Fact {
        identity: Some(POD_ID + i % 1000),
        tunnel_peer: Some(IpAddr::V4(Ipv4Addr::new(172, 18, (i % 200) as u8, 1))),
        encrypt_key: if i.is_multiple_of(3) { 0xFF } else { 0 },
        ..Fact::default()
    }
}

fn packet(src: IpAddr, dst: IpAddr) -> Vec<u8> {
    let mut p = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1];
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            p.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 28, 0, 0, 0x40, 0, 64, 17, 0, 0]);
            p.extend_from_slice(&s.octets());
            p.extend_from_slice(&d.octets());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            p.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 8, 17, 64]);
            p.extend_from_slice(&s.octets());
            p.extend_from_slice(&d.octets());
        }
        _ => unreachable!(),
    }
    p.extend_from_slice(&[0x30, 0x39, 0x30, 0x39, 0, 8, 0, 0]);
    p
}

fn main() {
    let root = PathBuf::from(format!("/sys/fs/bpf/weft-bench-{}", std::process::id()));
    Datapath::remove_all(&root);
    let result = std::panic::catch_unwind(|| run(&root));
    Datapath::remove_all(&root);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

fn run(root: &std::path::Path) {
    // Map sync. The ipcache is filled first, without listeners: what is measured is
    // getting its entries into a new generation's map.
    let ipcache = IpCache::default();
    for i in 0..N {
        let p = Prefix::host(addr(i));
        ipcache.upsert(p, Owner::new(Source::ClusterMesh, format!("k{i}")), fact(i));
    }
    let entries = ipcache.entries();

    let kv: Vec<_> = entries
        .iter()
        .map(|(p, e)| (ipcache_key(p), RemoteEndpointInfo::from(e)))
        .collect();
    // Rounds alternate between the two, each into a fresh generation; medians.
    let (mut raws, mut wefts) = (Vec::new(), Vec::new());
    let mut last = None;
    for _ in 0..ROUNDS {
        let mut raw_dp = Datapath::open(root).expect("the datapath loads (root and BPF needed)");
        raw_dp.release_unused();
        let raw_map = raw_dp.ipcache_map();
        let t = Instant::now();
        {
            let mut map = raw_map.lock().unwrap();
            // Every entry is a host prefix: the hash map is where they go.
            for (k, v) in &kv {
                map.hosts.insert(k, *v, 0).unwrap();
            }
        }
        raws.push(t.elapsed());
        drop(raw_dp);

        let mut dp = Datapath::open(root).unwrap();
        dp.release_unused();
        let writer = MapWriter::start(dp.ipcache_map());
        let t = Instant::now();
        ipcache.add_listener(writer.clone()); // replays every entry
        writer.flush();
        wefts.push(t.elapsed());
        let stats = writer.stats();
        assert_eq!((stats.written, stats.failed), (u64::from(N), 0));
        // Earlier rounds' writers stay listeners (the ipcache has no removal); only
        // the last round's datapath is used below.
        last = Some((dp, writer));
    }
    let (mut dp, writer) = last.expect("at least one round");
    let stats = writer.stats();
    raws.sort();
    wefts.sort();
    let (raw, weft) = (raws[ROUNDS / 2], wefts[ROUNDS / 2]);

    // Per packet, with the 100,000 entries in the map plus the few the paths need.
    let put = |prefix: &str, identity: u32, key: u8| {
        let p: Prefix = prefix.parse().unwrap();
        let fact = Fact {
            identity: Some(identity),
            encrypt_key: key,
            ..Fact::default()
        };
        ipcache.upsert(p, Owner::new(Source::ClusterMesh, prefix), fact);
    };
    put("192.168.0.5/32", POD_ID, 0); // a local pod
    put("192.168.0.1/32", 1, 0); // this host
    put("192.168.1.0/24", POD_ID + 1, 0xFF); // remote pods behind WireGuard
    put("fd00:1::5/128", POD_ID, 0);
    put("fd00:2::/64", POD_ID + 1, 0xFF);
    writer.flush();
    dp.set_config(DatapathConfig {
        wg_ifindex: 1,
        flags: 0,
    })
    .unwrap();

    // The baselines' maps are the current generation's, filled above.
    let gen = root.join(format!("gen-{}", dp.generation()));
    let mut baseline = aya::EbpfLoader::new()
        .map_pin_path("weft_ipcache_hosts", gen.join("weft_ipcache_hosts"))
        .map_pin_path("weft_ipcache", gen.join("weft_ipcache"))
        .map_pin_path("weft_config", root.join("weft_config"))
        .load(BASELINE_OBJECT)
        .unwrap();
    for name in ["weft_baseline", "weft_one_lookup"] {
        let p: &mut SchedClassifier = baseline.program_mut(name).unwrap().try_into().unwrap();
        p.load().unwrap();
    }
    let empty: &SchedClassifier = baseline
        .program("weft_baseline")
        .unwrap()
        .try_into()
        .unwrap();
    let one_lookup: &SchedClassifier = baseline
        .program("weft_one_lookup")
        .unwrap()
        .try_into()
        .unwrap();

    let v4 = |s: &str, d: &str| packet(s.parse().unwrap(), d.parse().unwrap());
    let v6 = |s: &str, d: &str| {
        packet(
            IpAddr::V6(s.parse::<Ipv6Addr>().unwrap()),
            IpAddr::V6(d.parse::<Ipv6Addr>().unwrap()),
        )
    };
    // 10.0.0.x are among the 100,000 remote pods (/32, every third with a key):
    // 10.0.0.3 has a key, 10.0.0.2 has none, 10.0.0.4 is a pod source.
    let paths: [(&str, Vec<u8>, u32, u32); 7] = [
        (
            "marked by WireGuard → pass",
            v4("10.0.0.4", "10.0.0.3"),
            0x1E00,
            0,
        ),
        (
            "no destination entry → pass",
            v4("10.0.0.4", "172.31.0.1"),
            0,
            0,
        ),
        (
            "destination without key → pass",
            v4("10.0.0.4", "10.0.0.2"),
            0,
            0,
        ),
        (
            "host source, no node encryption → pass",
            v4("192.168.0.1", "10.0.0.3"),
            0,
            0,
        ),
        (
            "pod → keyed pod (/32) → redirect",
            v4("10.0.0.4", "10.0.0.3"),
            0,
            7,
        ),
        (
            "pod → keyed CIDR (/24) → redirect",
            v4("10.0.0.4", "192.168.1.7"),
            0,
            7,
        ),
        (
            "IPv6 pod → keyed CIDR (/64) → redirect",
            v6("fd00:1::5", "fd00:2::7"),
            0,
            7,
        ),
    ];
    let empty_run = test_run(empty, &paths[0].1, 0, REPEAT).unwrap().duration;
    println!("map sync: {N} entries, medians of {ROUNDS} rounds");
    println!("| measure | weft | baseline | ratio | target |");
    println!("|---|---|---|---|---|");
    let rate = |d: Duration| f64::from(N) / d.as_secs_f64();
    println!(
        "| entries written / s | {:.0} ({:.0} ms, {} batches) | raw insert loop {:.0} ({:.0} ms) | {:.2}× | ≥ 0.8× |",
        rate(weft),
        weft.as_secs_f64() * 1e3,
        stats.batches,
        rate(raw),
        raw.as_secs_f64() * 1e3,
        rate(weft) / rate(raw),
    );
    println!("per packet ({REPEAT} runs each, {} map entries):", N + 5);
    println!("| path | ns / packet | empty classifier | ratio | target |");
    println!("|---|---|---|---|---|");
    for (name, packet, mark, action) in &paths {
        let r = dp.test_run(packet, *mark, REPEAT).unwrap();
        assert_eq!(r.action, *action, "{name}");
        // The baseline again next to each path: the machine is noisy.
        let base = test_run(empty, packet, 0, REPEAT).unwrap().duration;
        println!(
            "| {name} | {} | {} | {:.2}× | < 100 ns, < 2× |",
            r.duration.as_nanos(),
            base.as_nanos(),
            r.duration.as_secs_f64() / base.as_secs_f64(),
        );
    }
    // The floor: parsing plus one lookup of a /32 among the 100,000, nothing else.
    let packet = &paths[4].1;
    let r = test_run(one_lookup, packet, 0, REPEAT).unwrap();
    assert_eq!(r.action, 0, "the destination is in the map");
    let base = test_run(empty, packet, 0, REPEAT).unwrap().duration;
    println!(
        "| (floor) parse + one lookup, nothing else | {} | {} | {:.2}× | — |",
        r.duration.as_nanos(),
        base.as_nanos(),
        r.duration.as_secs_f64() / base.as_secs_f64(),
    );
    println!("(first empty run: {} ns)", empty_run.as_nanos());

    // The endpoint programs, for an endpoint named by the loopback's ifindex (the test
    // run needs a device of this namespace) at 192.168.0.5, ingress enforced: UDP
    // 12345 admitted from 10.0.0.4's identity only.
    let before = v4("10.0.0.4", "192.168.0.5");
    let unjudged = dp
        .test_run_endpoint(weft_datapath::TO_ENDPOINT, &before, 1, REPEAT)
        .unwrap();
    let policy = weft_state::policy::EndpointPolicy {
        ingress_enforced: true,
        ingress: [weft_state::policy::Allow {
            identity: POD_ID + 4,
            protocol: 17,
            first: 12345,
            last: 12345,
        }]
        .into(),
        ..Default::default()
    };
    let (info, keys) = weft_datapath::policy_entries(1, POD_ID, &policy).unwrap();
    dp.set_endpoint(1, info, &keys).unwrap();
    // The reply path: the endpoint's own flow out first (it is remembered), then its
    // answer in.
    let out = v4("192.168.0.5", "10.0.0.6");
    let r = dp
        .test_run_endpoint(weft_datapath::FROM_ENDPOINT, &out, 1, 1)
        .unwrap();
    assert_eq!(r.action, 0);
    let endpoint_paths: [(&str, &str, Vec<u8>, u32); 4] = [
        (
            "from endpoint, egress open (flow remembered) → pass",
            weft_datapath::FROM_ENDPOINT,
            out.clone(),
            0,
        ),
        (
            "to endpoint, admitted identity and port → pass",
            weft_datapath::TO_ENDPOINT,
            v4("10.0.0.4", "192.168.0.5"),
            0,
        ),
        (
            "to endpoint, reply of its own flow → pass",
            weft_datapath::TO_ENDPOINT,
            v4("10.0.0.6", "192.168.0.5"),
            0,
        ),
        (
            "to endpoint, not admitted → drop",
            weft_datapath::TO_ENDPOINT,
            v4("10.0.0.5", "192.168.0.5"),
            2,
        ),
    ];
    println!("endpoint programs ({REPEAT} runs each):");
    println!("| path | ns / packet | empty classifier | ratio | target |");
    println!("|---|---|---|---|---|");
    let base = test_run(empty, &before, 0, REPEAT).unwrap().duration;
    println!(
        "| endpoint without policy → pass | {} | {} | {:.2}× | — |",
        unjudged.duration.as_nanos(),
        base.as_nanos(),
        unjudged.duration.as_secs_f64() / base.as_secs_f64(),
    );
    for (name, program, packet, action) in &endpoint_paths {
        let r = dp.test_run_endpoint(program, packet, 1, REPEAT).unwrap();
        assert_eq!(r.action, *action, "{name}");
        let base = test_run(empty, packet, 0, REPEAT).unwrap().duration;
        println!(
            "| {name} | {} | {} | {:.2}× | — |",
            r.duration.as_nanos(),
            base.as_nanos(),
            r.duration.as_secs_f64() / base.as_secs_f64(),
        );
    }
    dp.remove_endpoint(1);
}
