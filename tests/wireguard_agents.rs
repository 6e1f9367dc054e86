//! WireGuard run by `weftd`: two agents in two clusters (real etcd each), their nodes
//! in two network namespaces joined by a veth, each with a userspace device the agent
//! configured. A capture on the link sees only WireGuard's UDP. A TCP stream between
//! the clusters survives a restart of one agent while the other cluster's etcd is
//! frozen, because the restored peer waits for the remote nodes; the control run,
//! without the wait, shows the peer removed and the stream cut. Needs root and
//! /dev/net/tun.

use weft_testkit as support;

use serde_json::Value;
use std::ffi::{OsStr, OsString};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use support::agent::{cluster_config, logged_at, Agent};
use support::netns::{joined_pair, Netns};
use support::traffic::{
    contains, tunnelled_pod_json as pod_json, wireguard_peers as peers, Capture, StopDevice,
    Stream, MARKER,
};
use support::{eventually, Etcd};

const POD_A: &str = "10.200.0.1";
const POD_B: &str = "10.200.0.2";
const NODE_A: &str = "10.100.0.1";
const NODE_B: &str = "10.100.0.2";

/// Pod B's listener.
fn pod_b() -> SocketAddr {
    SocketAddr::new(POD_B.parse().unwrap(), 7000)
}
/// How long cluster2's etcd stays frozen, from the agent's restart on.
const ETCD_PAUSE: Duration = Duration::from_secs(10);
/// A gap in the stream at least this long means it was cut.
const CUT: Duration = Duration::from_secs(2);

struct Lab {
    // Dropped in this order: agents, then helpers, then namespaces and etcd.
    a1: Agent,
    _a2: Agent,
    _devices: [StopDevice; 2],
    a: Netns,
    b: Netns,
    _e1: Etcd,
    e2: Etcd,
    dev_a: String,
    dev_b: String,
}

fn flags(device: &str, ns: &Netns, early_gc: bool) -> Vec<OsString> {
    let mut f: Vec<OsString> = ["--wireguard", "--wireguard-device", device]
        .iter()
        .map(OsString::from)
        .collect();
    f.extend([
        "--datapath-netns".into(),
        ns.path().into(),
        "--wireguard-helper".into(),
        support::bin::weft_wg().into(),
    ]);
    if early_gc {
        f.push("--wireguard-unsafe-early-gc".into());
    }
    f
}

fn refs(f: &[OsString]) -> Vec<&OsStr> {
    f.iter().map(OsString::as_os_str).collect()
}

/// cluster1's and cluster2's etcd, each with its cluster config.
async fn etcds() -> (Etcd, Etcd) {
    let (e1, e2) = (Etcd::start().await, Etcd::start().await);
    cluster_config("cluster1", 1, &e1, false);
    cluster_config("cluster2", 2, &e2, false);
    (e1, e2)
}

async fn lab(test: &str) -> Option<Lab> {
    if !support::wireguard_available(test) {
        return None;
    }
    let (a, b) = joined_pair(test);
    let pid = std::process::id() % 100_000;
    let (dev_a, dev_b) = (format!("w{test}a{pid}"), format!("w{test}b{pid}"));
    let devices = [StopDevice(dev_a.clone()), StopDevice(dev_b.clone())];
    let (e1, e2) = etcds().await;
    let a1 = Agent::start_node("cluster1", 1, &e1, NODE_A, &refs(&flags(&dev_a, &a, false)));
    let a2 = Agent::start_node("cluster2", 2, &e2, NODE_B, &refs(&flags(&dev_b, &b, false)));
    support::write_config_file(a1.mesh_dir.path(), "cluster2", &e2.url());
    support::write_config_file(a2.mesh_dir.path(), "cluster1", &e1.url());
    e1.put(
        "cilium/state/ip/v1/default/10.200.0.1",
        &pod_json(1, POD_A, NODE_A),
    )
    .await;
    e2.put(
        "cilium/state/ip/v1/default/10.200.0.2",
        &pod_json(2, POD_B, NODE_B),
    )
    .await;
    for (agent, remote) in [
        (&a1, "cluster2/cluster2-node"),
        (&a2, "cluster1/cluster1-node"),
    ] {
        eventually(
            &format!("a peer for {remote}: its node IP and its pod"),
            Duration::from_secs(60),
            || {
                let s = agent.status_json()?;
                let p = peers(&s);
                (p.len() == 1 && p[0]["node"] == remote && p[0]["allowed_ips"] == 2).then_some(())
            },
        )
        .await;
    }
    // weftd brought its device up; the pods' addresses are the test's.
    a.ip(&["addr", "add", &format!("{POD_A}/24"), "dev", &dev_a]);
    b.ip(&["addr", "add", &format!("{POD_B}/24"), "dev", &dev_b]);
    Some(Lab {
        a1,
        _a2: a2,
        _devices: devices,
        a,
        b,
        _e1: e1,
        e2,
        dev_a,
        dev_b,
    })
}

/// Runs the restart: with a stream flowing, agent A is killed and started again while
/// cluster2's etcd is frozen for [`ETCD_PAUSE`], then cluster2 is thawed. Returns the
/// stream, when the restart began, and (without the wait) when the restored peer was
/// seen removed.
async fn restart_during_etcd_pause(
    lab: &mut Lab,
    early_gc: bool,
) -> (Stream, Instant, Option<Instant>) {
    let stream = Stream::flowing(&lab.a, &lab.b, pod_b()).await;

    lab.e2.pause();
    let restarted = Instant::now();
    let dev_a = lab.dev_a.clone();
    lab.a1.restart(&refs(&flags(&dev_a, &lab.a, early_gc)));
    // The restarted agent answers, with the device's peer restored.
    let removed_at = if early_gc {
        eventually(
            "the restarted agent removes the restored peer at once",
            Duration::from_secs(30),
            || {
                let s = lab.a1.status_json()?;
                let removed = s["wireguard"]["collected"]["removed"].as_array()?.len();
                (removed == 1 && peers(&s).is_empty()).then_some(())
            },
        )
        .await;
        Some(Instant::now())
    } else {
        eventually(
            "the restarted agent keeps the restored peer",
            Duration::from_secs(30),
            || {
                let s = lab.a1.status_json()?;
                (s["wireguard"]["restoring"] == true && peers(&s).len() == 1).then_some(())
            },
        )
        .await;
        None
    };
    // cluster2 stays frozen for the whole pause: this is the scenario, not a wait
    // for an event.
    let until = restarted + ETCD_PAUSE;
    tokio::time::sleep(until.saturating_duration_since(Instant::now())).await;
    if !early_gc {
        let s = lab.a1.status_json().expect("agent A answers");
        assert_eq!(
            s["wireguard"]["restoring"], true,
            "nothing collected while cluster2 is frozen: {s}"
        );
        assert_eq!(peers(&s).len(), 1, "the peer is kept: {s}");
    }
    lab.e2.resume();
    (stream, restarted, removed_at)
}

#[tokio::test]
async fn traffic_is_encrypted_and_a_stream_survives_a_restart_while_the_remote_etcd_is_frozen() {
    let Some(mut lab) = lab("wgs").await else {
        return;
    };

    // Only WireGuard on the link: the pods' bytes are on the device, never on the veth.
    let stream = Stream::open(&lab.a, &lab.b, pod_b());
    let capture = Capture::start(&lab.b);
    // The capture's window while the stream flows, not a synchronisation.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let frames = capture.stop();
    let errors = stream.close();
    assert!(errors.is_empty(), "{errors:?}");
    let veth = lab.b.ifindex("weftv1") as usize;
    let device = lab.b.ifindex(&lab.dev_b) as usize;
    let on_veth: Vec<&Vec<u8>> = frames
        .iter()
        .filter(|(i, _)| *i == veth)
        .map(|(_, f)| f)
        .collect();
    assert!(
        frames
            .iter()
            .any(|(i, f)| *i == device && contains(f, MARKER)),
        "the capture sees the plaintext where it is: on the WireGuard device"
    );
    support::traffic::only_wireguard(&on_veth, 10);

    let (stream, restarted, _) = restart_during_etcd_pause(&mut lab, false).await;
    let s = eventually(
        "cluster2 back: restored peers collected",
        Duration::from_secs(60),
        || {
            lab.a1
                .status_json()
                .filter(|s| !s["wireguard"]["collected"].is_null())
        },
    )
    .await;
    // The status contract.
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        keys(&s["wireguard"]),
        [
            "backend",
            "collected",
            "device",
            "device_error",
            "failed_updates",
            "peers",
            "refused",
            "restored",
            "restoring",
            "revived",
            "routes",
            "updates"
        ]
    );
    assert_eq!(
        keys(&peers(&s)[0]),
        [
            "allowed_ips",
            "endpoint",
            "handshake_seconds_ago",
            "key",
            "node"
        ]
    );
    let collected = &s["wireguard"]["collected"];
    assert_eq!(collected["removed"], serde_json::json!([]), "{s}");
    assert_eq!(collected["kept"].as_array().unwrap().len(), 1, "{s}");
    assert_eq!(peers(&s)[0]["allowed_ips"], 2, "node IP and pod: {s}");
    // Across the restart and the whole pause.
    stream.assert_unbroken_since(restarted, CUT).await;
}

#[tokio::test]
async fn control_without_the_wait_the_restored_peer_is_removed_and_the_stream_cut() {
    let Some(mut lab) = lab("wgc").await else {
        return;
    };
    let (stream, restarted, removed_at) = restart_during_etcd_pause(&mut lab, true).await;
    let removed_at = removed_at.unwrap();
    assert!(
        restarted + ETCD_PAUSE > removed_at + Duration::from_millis(500) + CUT,
        "the peer went early enough in the pause to see the cut"
    );
    // In flight when the peer went: half a second's grace.
    let gap = stream.longest_gap(
        removed_at + Duration::from_millis(500),
        restarted + ETCD_PAUSE,
    );
    assert!(
        gap >= CUT,
        "with the peer removed nothing reaches pod B (longest gap {gap:?})"
    );
    let _ = stream.close();
}

/// cluster1's agent alone, its WireGuard device in a namespace of its own. cluster2
/// is an etcd whose node records the test writes: their addresses are in no
/// namespace, and nothing is sent to them (no traffic, no keepalive).
struct OneAgent {
    // Dropped in this order: the agent, its helper, the namespace, etcd.
    agent: Agent,
    /// The agent's flags, for restarts.
    flags: Vec<OsString>,
    _stop: StopDevice,
    ns: Netns,
    device: String,
    _e1: Etcd,
    e2: Etcd,
}

async fn one_agent(test: &str) -> Option<OneAgent> {
    one_agent_with(test, &[]).await
}

/// [`one_agent`] with `extra` flags.
async fn one_agent_with(test: &str, extra: &[&str]) -> Option<OneAgent> {
    if !support::wireguard_available(test) {
        return None;
    }
    let ns = Netns::new(&format!("weft-{test}"));
    let dev = format!("w{test}{}", std::process::id() % 100_000);
    let stop = StopDevice(dev.clone());
    let (e1, e2) = etcds().await;
    let mut flags = flags(&dev, &ns, false);
    flags.extend(extra.iter().map(OsString::from));
    let agent = Agent::start_node("cluster1", 1, &e1, NODE_A, &refs(&flags));
    Some(OneAgent {
        agent,
        flags,
        _stop: stop,
        ns,
        device: dev,
        _e1: e1,
        e2,
    })
}

/// A node of cluster2 publishing `key`.
fn node_json(name: &str, ip: &str, key: &str) -> String {
    node_with_pods(name, ip, key, None)
}

/// [`node_json`] with a pod CIDR: its network address and its mask, base64.
fn node_with_pods(name: &str, ip: &str, key: &str, pods: Option<(&str, &str)>) -> String {
    let cidr = pods.map_or(String::new(), |(net, mask)| {
        format!(r#","IPv4AllocCIDR":{{"IP":"{net}","Mask":"{mask}"}}"#)
    });
    format!(
        r#"{{"Name":"{name}","Cluster":"cluster2","ClusterID":2,"IPAddresses":[{{"Type":"InternalIP","IP":"{ip}"}}],"WireguardPubKey":"{key}"{cidr}}}"#
    )
}

/// /24, /25 and /0 masks as a node record carries them.
const MASK_24: &str = "////AA==";
const MASK_25: &str = "////gA==";
const MASK_0: &str = "AAAAAA==";

/// The routes `ip` lists in `ns` for `selector` (`proto 87`, say).
fn routes(ns: &Netns, selector: &[&str]) -> String {
    let mut args = vec!["-n", ns.name.as_str(), "route", "show"];
    args.extend_from_slice(selector);
    let out = std::process::Command::new("ip")
        .args(&args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn installed_routes(agent: &Agent) -> Option<Vec<String>> {
    let s = agent.status_json()?;
    serde_json::from_value(s["wireguard"]["routes"]["installed"].clone()).ok()
}

#[tokio::test]
async fn pod_routes_follow_the_remote_nodes_and_come_back_when_deleted_by_hand() {
    let Some(OneAgent {
        agent,
        e2,
        ns,
        device,
        ..
    }) = &one_agent_with("wgp", &["--pod-cidr", "10.77.0.0/24"]).await
    else {
        return;
    };
    let key = |n: u8| wireguard_control::Key([n; 32]).to_base64();
    for (name, ip, n, pods) in [
        ("n1", "10.100.1.1", 1, ("10.78.0.0", MASK_24)),
        ("mine", "10.100.1.2", 2, ("10.77.0.128", MASK_25)),
        ("all", "10.100.1.3", 3, ("0.0.0.0", MASK_0)),
    ] {
        e2.put(
            &format!("cilium/state/nodes/v1/cluster2/{name}"),
            &node_with_pods(name, ip, &key(n), Some(pods)),
        )
        .await;
    }
    support::write_config_file(agent.mesh_dir.path(), "cluster2", &e2.url());
    let only_n1 = vec!["10.78.0.0/24".to_owned()];
    eventually("n1's pod CIDR routed", Duration::from_secs(30), || {
        (installed_routes(agent)? == only_n1).then_some(())
    })
    .await;
    // Both nodes claim this node's space: the state refuses them before the route
    // stage sees them (which would refuse them too).
    let s = agent.status_json().unwrap();
    let refused = &s["totals"]["refused_claims"]["cluster2"];
    assert_eq!(
        (&refused["refused"], &refused["held_back"]),
        (&serde_json::json!(2), &serde_json::json!(2)),
        "{s}"
    );
    assert_eq!(
        s["wireguard"]["routes"]["refused"],
        serde_json::json!([]),
        "{s}"
    );
    let ours = routes(ns, &["proto", "87"]);
    assert!(
        ours.contains(&format!("10.78.0.0/24 dev {device}")),
        "{ours}"
    );
    // Someone else's route on the device is not weft's to touch.
    ns.ip(&["route", "add", "10.99.0.0/24", "dev", device]);
    ns.ip(&["route", "del", "10.78.0.0/24", "dev", device]);
    eventually(
        "a route deleted by hand comes back",
        Duration::from_secs(30),
        || {
            routes(ns, &["proto", "87"])
                .contains("10.78.0.0/24")
                .then_some(())
        },
    )
    .await;
    e2.delete("cilium/state/nodes/v1/cluster2/n1").await;
    eventually(
        "a deleted node's route goes",
        Duration::from_secs(30),
        || installed_routes(agent)?.is_empty().then_some(()),
    )
    .await;
    assert!(routes(ns, &["proto", "87"]).trim().is_empty());
    assert!(
        routes(ns, &[]).contains("10.99.0.0/24"),
        "the route weft did not make is still there"
    );
}

#[tokio::test]
async fn peers_follow_key_changes_node_deletion_and_cluster_removal_and_bad_keys_are_refused() {
    let Some(OneAgent { agent, e2, .. }) = &one_agent("wgk").await else {
        return;
    };
    let key = |n: u8| wireguard_control::Key([n; 32]).to_base64();
    let put = |name: &'static str, ip: &'static str, k: String| {
        let e2 = &e2;
        async move {
            e2.put(
                &format!("cilium/state/nodes/v1/cluster2/{name}"),
                &node_json(name, ip, &k),
            )
            .await;
        }
    };
    put("n1", "10.100.1.1", key(1)).await;
    put("zero", "10.100.1.2", key(0)).await;
    put("bad", "10.100.1.4", "not-a-key".into()).await;
    support::write_config_file(agent.mesh_dir.path(), "cluster2", &e2.url());

    // Peers by node, and the refusals.
    let seen = || {
        let s = agent.status_json()?;
        let peers: Vec<(String, String)> = peers(&s)
            .iter()
            .map(|p| {
                (
                    p["node"].as_str().unwrap_or("-").to_owned(),
                    p["key"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        let refused: Vec<String> = s["wireguard"]["refused"]
            .as_array()?
            .iter()
            .map(|r| r.as_str().unwrap().to_owned())
            .collect();
        Some((peers, refused))
    };
    let until = |what: &'static str, want_peers: Vec<(&str, String)>, want_refused: &[&str]| {
        let want_peers: Vec<(String, String)> = want_peers
            .into_iter()
            .map(|(n, k)| (n.to_owned(), k))
            .collect();
        let want_refused: Vec<String> = want_refused.iter().map(|r| (*r).to_owned()).collect();
        eventually(what, Duration::from_secs(30), move || {
            seen().filter(|(p, r)| *p == want_peers && *r == want_refused)
        })
    };
    until(
        "a peer for n1; the zero and malformed keys refused",
        vec![("cluster2/n1", key(1))],
        &[
            "cluster2/bad: malformed WireGuard key",
            "cluster2/zero: zero WireGuard key",
        ],
    )
    .await;
    // The first node with a key keeps it.
    put("dup", "10.100.1.3", key(1)).await;
    until(
        "a key n1 has is refused to dup",
        vec![("cluster2/n1", key(1))],
        &[
            "cluster2/bad: malformed WireGuard key",
            "cluster2/dup: WireGuard key already used by node cluster2/n1",
            "cluster2/zero: zero WireGuard key",
        ],
    )
    .await;

    put("n1", "10.100.1.1", key(2)).await;
    until(
        "n1's new key replaces its peer; dup gets the key n1 gave up",
        vec![("cluster2/dup", key(1)), ("cluster2/n1", key(2))],
        &[
            "cluster2/bad: malformed WireGuard key",
            "cluster2/zero: zero WireGuard key",
        ],
    )
    .await;

    e2.delete("cilium/state/nodes/v1/cluster2/n1").await;
    until(
        "a deleted node's peer goes",
        vec![("cluster2/dup", key(1))],
        &[
            "cluster2/bad: malformed WireGuard key",
            "cluster2/zero: zero WireGuard key",
        ],
    )
    .await;

    std::fs::remove_file(agent.mesh_dir.path().join("cluster2")).unwrap();
    until("a removed cluster's peers go", vec![], &[]).await;
}

#[tokio::test]
async fn a_restored_peer_of_a_cluster_removed_while_frozen_goes_once_the_cluster_is_removed() {
    let Some(OneAgent {
        agent, flags, e2, ..
    }) = &mut one_agent("wgr").await
    else {
        return;
    };
    let key = wireguard_control::Key([7; 32]).to_base64();
    peer_for_n1(agent, e2, &key).await;
    let n1_pods = vec!["10.78.0.0/24".to_owned()];
    eventually("n1's pod CIDR routed", Duration::from_secs(30), || {
        (installed_routes(agent)? == n1_pods).then_some(())
    })
    .await;

    // Restarted with cluster2 frozen: the peer and the route are restored and kept.
    e2.pause();
    agent.restart(&refs(flags));
    eventually(
        "the restored peer and route kept",
        Duration::from_secs(30),
        || {
            let s = agent.status_json()?;
            let routes = &s["wireguard"]["routes"];
            (s["wireguard"]["restoring"] == true
                && peers(&s).len() == 1
                && routes["restoring"] == true
                && routes["installed"] == serde_json::json!(n1_pods))
            .then_some(())
        },
    )
    .await;
    // The operator removes cluster2: it counts as done, and its peer and route go.
    std::fs::remove_file(agent.mesh_dir.path().join("cluster2")).unwrap();
    let s = eventually(
        "the removed cluster's restored peer and route collected",
        Duration::from_secs(30),
        || {
            agent.status_json().filter(|s| {
                !s["wireguard"]["collected"].is_null()
                    && s["wireguard"]["routes"]["installed"] == serde_json::json!([])
            })
        },
    )
    .await;
    assert_eq!(
        s["wireguard"]["collected"]["removed"],
        serde_json::json!([key]),
        "{s}"
    );
    assert_eq!(
        s["wireguard"]["routes"]["collected"],
        serde_json::json!(n1_pods),
        "{s}"
    );
    assert!(peers(&s).is_empty(), "{s}");
    e2.resume();
}

/// Issue 15's first finding: an agent stopped (SIGTERM) while a remote cluster's etcd
/// is frozen must not collect that cluster's restored peer on its way out. The device
/// outlives the agent, so a peer lost there is lost to the next agent too, and the
/// stream to that cluster stalls until it thaws. Stopped and started 30 times in that
/// state, the peer is there each time. The agent runs on one CPU, where the race was
/// seen to lose the peer within a few stops (and does, without the fix).
#[tokio::test]
async fn stopping_the_agent_while_a_remote_etcd_is_frozen_never_collects_its_peer() {
    // This thread's affinity is what the agents it starts inherit.
    let allowed = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).unwrap();
    let cpu = (0..nix::sched::CpuSet::count())
        .find(|c| allowed.is_set(*c).unwrap_or(false))
        .unwrap();
    let mut one = nix::sched::CpuSet::new();
    one.set(cpu).unwrap();
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &one).unwrap();
    let Some(OneAgent {
        agent, flags, e2, ..
    }) = &mut one_agent("wgs").await
    else {
        return;
    };
    let key = wireguard_control::Key([9; 32]).to_base64();
    peer_for_n1(agent, e2, &key).await;
    e2.pause();
    for round in 1..=30 {
        agent.stop();
        agent.start_again(&refs(flags));
        // The restarted agent answers with what the device kept, waiting for cluster2.
        let s = eventually("the agent answers", Duration::from_secs(30), || {
            agent.status_json().filter(|s| !s["wireguard"].is_null())
        })
        .await;
        assert_eq!(s["wireguard"]["restoring"], true, "round {round}: {s}");
        assert_eq!(
            peers(&s)
                .iter()
                .map(|p| p["key"].as_str().unwrap_or_default())
                .collect::<Vec<_>>(),
            [key.as_str()],
            "round {round}: the frozen cluster's peer was collected by a stop: {s}"
        );
    }
    e2.resume();
}

/// cluster2's node n1 (pods 10.78.0.0/24) publishes `key`; cluster2 is added; the
/// agent makes n1 a peer.
async fn peer_for_n1(agent: &Agent, e2: &Etcd, key: &str) {
    e2.put(
        "cilium/state/nodes/v1/cluster2/n1",
        &node_with_pods("n1", "10.100.1.1", key, Some(("10.78.0.0", MASK_24))),
    )
    .await;
    support::write_config_file(agent.mesh_dir.path(), "cluster2", &e2.url());
    eventually("a peer for n1", Duration::from_secs(30), || {
        let s = agent.status_json()?;
        (peers(&s).len() == 1).then_some(())
    })
    .await;
}

/// A restored peer no node claims any more, with the peer-gc-policy holding it back
/// for `hold` (none: the control, no plugin): the time from "may go" to "collected".
async fn restored_orphan_collected_after(test: &str, hold: Option<Duration>) -> Option<Duration> {
    let Some(OneAgent {
        agent, flags, e2, ..
    }) = &mut one_agent(test).await
    else {
        return None;
    };
    let key = wireguard_control::Key([9; 32]).to_base64();
    peer_for_n1(agent, e2, &key).await;
    // n1 leaves while the agent is down: after the restart its peer is an orphan.
    let plugins = tempfile::tempdir().unwrap();
    let vendor = support::agent::VendorKey::new();
    let mut flags = flags.clone();
    if let Some(hold) = hold {
        support::agent::package(
            plugins.path(),
            "hold",
            "test_peer_gc_hold",
            "1.0.0",
            0,
            &vendor.key,
        );
        let config = hold.as_millis().to_string();
        support::agent::configure(plugins.path(), "hold", &config, &vendor.key);
        flags.extend([
            "--plugin-dir".into(),
            plugins.path().into(),
            "--plugin-trusted-keys".into(),
            vendor.trusted.clone().into(),
        ]);
    }
    agent.kill();
    e2.delete("cilium/state/nodes/v1/cluster2/n1").await;
    agent.start_again(&refs(&flags));
    let s = eventually("the orphan collected", Duration::from_secs(60), || {
        agent
            .status_json()
            .filter(|s| !s["wireguard"]["collected"].is_null())
    })
    .await;
    assert_eq!(
        s["wireguard"]["collected"]["removed"],
        serde_json::json!([key]),
        "{s}"
    );
    let log = agent.log();
    let restart = log.rfind("weftd running").unwrap();
    let log = &log[restart..];
    let may_go = logged_at(log, &["restored WireGuard peers may go"]).unwrap();
    let collected = logged_at(log, &["restored WireGuard peers collected"]).unwrap();
    let held = logged_at(log, &["held back by the peer-gc policy"]);
    assert_eq!(held.is_some(), hold.is_some(), "{log}");
    Some(collected.duration_since(may_go).unwrap())
}

#[tokio::test]
async fn a_peer_gc_plugin_holds_the_removal_of_restored_peers() {
    let hold = Duration::from_secs(3);
    let Some(held) = restored_orphan_collected_after("wgh", Some(hold)).await else {
        return;
    };
    assert!(held >= hold, "collected {held:?} after the barriers");
    // The control: without the plugin the orphan goes as soon as the barriers allow.
    let unheld = restored_orphan_collected_after("wgc", None).await.unwrap();
    assert!(unheld < hold, "collected {unheld:?} after the barriers");
}
