//! WireGuard run by `weftd`: two agents in two clusters (real etcd each), their nodes
//! in two network namespaces joined by a veth, each with a userspace device the agent
//! configured. A capture on the link sees only WireGuard's UDP. A TCP stream between
//! the clusters survives a restart of one agent while the other cluster's etcd is
//! frozen, because the restored peer waits for the remote nodes; the control run,
//! without the wait, shows the peer removed and the stream cut. Needs root and
//! /dev/net/tun.

mod support;

use serde_json::Value;
use std::ffi::{OsStr, OsString};
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::agent::{cluster_config, logged_at, Agent};
use support::netns::{joined_pair, Netns};
use support::{eventually, Etcd};
use weft::wireguard::WireGuardDevice;

const HELPER: &str = env!("CARGO_BIN_EXE_weft-wg");
const POD_A: &str = "10.200.0.1";
const POD_B: &str = "10.200.0.2";
const NODE_A: &str = "10.100.0.1";
const NODE_B: &str = "10.100.0.2";
/// Sent in the clear by the pods; must never be seen on the link.
const MARKER: &[u8] = b"WEFT-PLAINTEXT-MARKER";
/// How long cluster2's etcd stays frozen, from the agent's restart on.
const ETCD_PAUSE: Duration = Duration::from_secs(10);
/// A gap in the stream at least this long means it was cut.
const CUT: Duration = Duration::from_secs(2);

/// Stops a helper the agent started, even when the test fails.
struct StopDevice(String);

impl Drop for StopDevice {
    fn drop(&mut self) {
        if let Ok(device) = WireGuardDevice::named(&self.0) {
            device.stop();
        }
    }
}

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
        HELPER.into(),
    ]);
    if early_gc {
        f.push("--wireguard-unsafe-early-gc".into());
    }
    f
}

fn refs(f: &[OsString]) -> Vec<&OsStr> {
    f.iter().map(OsString::as_os_str).collect()
}

/// A pod's ipcache entry, tunnelled to its node and keyed for WireGuard (0xFF).
fn pod_json(ip: &str, node: &str) -> String {
    format!(r#"{{"IP":"{ip}","Mask":null,"HostIP":"{node}","ID":70001,"Key":255,"Metadata":""}}"#)
}

fn peers(status: &Value) -> Vec<Value> {
    status["wireguard"]["peers"]
        .as_array()
        .cloned()
        .unwrap_or_default()
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
        &pod_json(POD_A, NODE_A),
    )
    .await;
    e2.put(
        "cilium/state/ip/v1/default/10.200.0.2",
        &pod_json(POD_B, NODE_B),
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

/// A TCP stream from pod A to pod B: A writes the marker every 20 ms, B notes when
/// data arrives.
struct Stream {
    arrivals: Arc<Mutex<Vec<Instant>>>,
    errors: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Stream {
    fn open(a: &Netns, b: &Netns) -> Stream {
        let to: SocketAddr = format!("{POD_B}:7000").parse().unwrap();
        let listener = b.run(move || TcpListener::bind(to).unwrap());
        // The first SYN waits for the handshake; TCP retries.
        let mut client = a
            .run(move || TcpStream::connect_timeout(&to, Duration::from_secs(20)))
            .expect("pod A connects to pod B through the tunnel");
        let (mut server, _) = listener.accept().unwrap();
        server
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let arrivals = Arc::new(Mutex::new(Vec::new()));
        let errors = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (arrivals, errors, stop) = (arrivals.clone(), errors.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while !stop.load(Ordering::Relaxed) {
                    match server.read(&mut buf) {
                        Ok(0) => {
                            // Pod A closing at the end is no error.
                            if !stop.load(Ordering::Relaxed) {
                                let end = "pod B saw the stream end".to_owned();
                                errors.lock().unwrap().push(end);
                            }
                            return;
                        }
                        Ok(_) => arrivals.lock().unwrap().push(Instant::now()),
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(e) => {
                            errors.lock().unwrap().push(format!("pod B read: {e}"));
                            return;
                        }
                    }
                }
            })
        };
        let writer = {
            let (errors, stop) = (errors.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if let Err(e) = client.write_all(MARKER) {
                        errors.lock().unwrap().push(format!("pod A write: {e}"));
                        return;
                    }
                    // The stream's pace, not a synchronisation.
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        };
        Stream {
            arrivals,
            errors,
            stop,
            threads: vec![reader, writer],
        }
    }

    fn arrived_since(&self, t: Instant) -> usize {
        self.arrivals
            .lock()
            .unwrap()
            .iter()
            .filter(|a| **a > t)
            .count()
    }

    /// The longest time without data between `from` and `to`.
    fn longest_gap(&self, from: Instant, to: Instant) -> Duration {
        let mut last = from;
        let mut gap = Duration::ZERO;
        for t in self
            .arrivals
            .lock()
            .unwrap()
            .iter()
            .filter(|t| **t > from && **t <= to)
        {
            gap = gap.max(*t - last);
            last = *t;
        }
        gap.max(to.saturating_duration_since(last))
    }

    fn close(mut self) -> Vec<String> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.errors.lock().unwrap().clone()
    }
}

/// Frames seen in a namespace for `window`, with the ifindex they were seen on.
fn capture(ns: &Netns, window: Duration) -> Vec<(usize, Vec<u8>)> {
    use nix::sys::socket::{self, AddressFamily, LinkAddr, SockFlag, SockProtocol, SockType};
    use std::os::fd::AsRawFd as _;
    let fd = ns.run(|| {
        socket::socket(
            AddressFamily::Packet,
            SockType::Raw,
            SockFlag::empty(),
            SockProtocol::EthAll,
        )
        .unwrap()
    });
    let timeout = nix::sys::time::TimeVal::new(0, 100_000);
    socket::setsockopt(&fd, socket::sockopt::ReceiveTimeout, &timeout).unwrap();
    let mut frames = Vec::new();
    let mut buf = vec![0u8; 65_536];
    let deadline = Instant::now() + window;
    while Instant::now() < deadline {
        if let Ok((n, Some(from))) = socket::recvfrom::<LinkAddr>(fd.as_raw_fd(), &mut buf) {
            frames.push((from.ifindex(), buf[..n].to_vec()));
        }
    }
    frames
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// An Ethernet frame's IP protocol and UDP ports, when it is IPv4 or IPv6.
fn ip_transport(frame: &[u8]) -> Option<(u8, Option<(u16, u16)>)> {
    let ethertype = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    let (proto, l4) = match ethertype {
        0x0800 => {
            let ihl = usize::from(frame.get(14)? & 0x0f) * 4;
            (*frame.get(14 + 9)?, 14 + ihl)
        }
        0x86DD => (*frame.get(14 + 6)?, 14 + 40),
        _ => return None,
    };
    let ports = (proto == 17).then(|| {
        let p = |i: usize| u16::from_be_bytes([frame[l4 + i], frame[l4 + i + 1]]);
        (p(0), p(2))
    });
    Some((proto, ports))
}

/// Runs the restart: with a stream flowing, agent A is killed and started again while
/// cluster2's etcd is frozen for [`ETCD_PAUSE`], then cluster2 is thawed. Returns the
/// stream, when the restart began, and (without the wait) when the restored peer was
/// seen removed.
async fn restart_during_etcd_pause(
    lab: &mut Lab,
    early_gc: bool,
) -> (Stream, Instant, Option<Instant>) {
    let stream = Stream::open(&lab.a, &lab.b);
    let opened = Instant::now();
    eventually("the stream flows", Duration::from_secs(20), || {
        (stream.arrived_since(opened) >= 10).then_some(())
    })
    .await;

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
    let stream = Stream::open(&lab.a, &lab.b);
    let frames = capture(&lab.b, Duration::from_secs(1));
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
    let tunnelled = on_veth
        .iter()
        .filter(|f| {
            matches!(ip_transport(f), Some((17, Some((s, d))))
            if s == weft::wireguard::LISTEN_PORT && d == weft::wireguard::LISTEN_PORT)
        })
        .count();
    assert!(
        tunnelled > 10,
        "the stream crossed the link as WireGuard UDP ({tunnelled} frames)"
    );
    for f in &on_veth {
        assert!(!contains(f, MARKER), "plaintext on the link");
        match ip_transport(f) {
            None => {}              // ARP
            Some((0 | 58, _)) => {} // IPv6 neighbour discovery, MLD (hop-by-hop)
            Some((17, Some((s, d)))) => assert!(
                s == weft::wireguard::LISTEN_PORT && d == weft::wireguard::LISTEN_PORT,
                "UDP {s} -> {d} on the link"
            ),
            Some(other) => panic!("not WireGuard on the link: {other:?}"),
        }
    }

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
    let resumed = Instant::now();
    eventually("the stream still flows", Duration::from_secs(10), || {
        (stream.arrived_since(resumed) >= 10).then_some(())
    })
    .await;
    let gap = stream.longest_gap(restarted, Instant::now());
    let errors = stream.close();
    assert!(errors.is_empty(), "the stream saw no error: {errors:?}");
    assert!(
        gap < CUT,
        "no gap in the stream across the restart and the {ETCD_PAUSE:?} pause (longest {gap:?})"
    );
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
    _ns: Netns,
    _e1: Etcd,
    e2: Etcd,
}

async fn one_agent(test: &str) -> Option<OneAgent> {
    if !support::wireguard_available(test) {
        return None;
    }
    let ns = Netns::new(&format!("weft-{test}"));
    let dev = format!("w{test}{}", std::process::id() % 100_000);
    let stop = StopDevice(dev.clone());
    let (e1, e2) = etcds().await;
    let flags = flags(&dev, &ns, false);
    let agent = Agent::start_node("cluster1", 1, &e1, NODE_A, &refs(&flags));
    Some(OneAgent {
        agent,
        flags,
        _stop: stop,
        _ns: ns,
        _e1: e1,
        e2,
    })
}

/// A node of cluster2 publishing `key`.
fn node_json(name: &str, ip: &str, key: &str) -> String {
    format!(
        r#"{{"Name":"{name}","Cluster":"cluster2","ClusterID":2,"IPAddresses":[{{"Type":"InternalIP","IP":"{ip}"}}],"WireguardPubKey":"{key}"}}"#
    )
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

    // Restarted with cluster2 frozen: the peer is restored and kept.
    e2.pause();
    agent.restart(&refs(flags));
    eventually("the restored peer kept", Duration::from_secs(30), || {
        let s = agent.status_json()?;
        (s["wireguard"]["restoring"] == true && peers(&s).len() == 1).then_some(())
    })
    .await;
    // The operator removes cluster2: it counts as done, and its peer goes.
    std::fs::remove_file(agent.mesh_dir.path().join("cluster2")).unwrap();
    let s = eventually(
        "the removed cluster's restored peer collected",
        Duration::from_secs(30),
        || {
            agent
                .status_json()
                .filter(|s| !s["wireguard"]["collected"].is_null())
        },
    )
    .await;
    assert_eq!(
        s["wireguard"]["collected"]["removed"],
        serde_json::json!([key]),
        "{s}"
    );
    assert!(peers(&s).is_empty(), "{s}");
    e2.resume();
}

/// cluster2's node n1 publishes `key`; cluster2 is added; the agent makes n1 a peer.
async fn peer_for_n1(agent: &Agent, e2: &Etcd, key: &str) {
    e2.put(
        "cilium/state/nodes/v1/cluster2/n1",
        &node_json("n1", "10.100.1.1", key),
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
        let manifest = plugins.path().join("hold.toml");
        let text = std::fs::read_to_string(&manifest).unwrap();
        std::fs::write(
            &manifest,
            text.replace(
                "config = \"\"",
                &format!("config = \"{}\"", hold.as_millis()),
            ),
        )
        .unwrap();
        support::agent::weftd(&[
            "plugin".as_ref(),
            "sign".as_ref(),
            manifest.as_os_str(),
            "--key".as_ref(),
            vendor.key.as_os_str(),
        ]);
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
