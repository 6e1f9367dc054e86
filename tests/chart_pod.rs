//! The chart's pod as weft's binaries see it (`support::pod`: each container in its own
//! mount and PID namespace, read-only root, the chart's volumes, capabilities and
//! environment, the node's network namespace), on node A of two nodes joined by a
//! veth. Node B runs an agent as the other tests do. Both clusters' etcds run here on
//! loopback, bridged into node A's loopback.
//!
//! The pod starts from the chart as rendered (init containers included) and its agent
//! carries a TCP stream through WireGuard to node B. A restart of the agent's
//! container, the restart the kubelet does, while cluster2's etcd is frozen, keeps the
//! stream: the device runs in the pod's `wireguard` container and the restarted agent
//! adopts it with its peers. The control renders the chart with the agent starting
//! its device itself (`wireguard.userspace=false`, on a kernel without WireGuard): the
//! restart kills the device with the agent's container, and the stream is cut. Needs
//! root, /dev/net/tun and BPF.

use weft_testkit as support;

use serde_json::Value;
use std::ffi::{OsStr, OsString};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use support::agent::{cluster_config, Agent};
use support::netns::{joined_pair, Netns};
use support::pod::Pod;
use support::traffic::{
    tunnelled_pod_json as pod_json, wireguard_peers as peers, StopDevice, Stream,
};
use support::{eventually, Etcd, Proxy};

const POD_A: &str = "10.200.0.1";
const POD_B: &str = "10.200.0.2";
const NODE_A: &str = "10.100.0.1";
const NODE_B: &str = "10.100.0.2";
/// Node A's pod CIDR, as its Node object would give it.
const POD_CIDR_A: &str = "10.210.0.0/24";
/// How long cluster2's etcd stays frozen, from the container's restart on.
const ETCD_PAUSE: Duration = Duration::from_secs(10);
/// A gap in the stream at least this long means it was cut.
const CUT: Duration = Duration::from_secs(2);

fn pod_b() -> SocketAddr {
    SocketAddr::new(POD_B.parse().unwrap(), 7000)
}

/// `weftd status -o json` of the agent whose state directory is `dir`.
fn status(dir: &Path) -> Option<Value> {
    let out = Command::new(support::bin::weftd())
        .args(["status", "-o", "json", "--state-dir"])
        .arg(dir)
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).unwrap())
}

struct Lab {
    // Dropped in this order: the pod, node B's agent and its helper, the bridges,
    // the namespaces, the etcds.
    pod: Pod,
    state_a: PathBuf,
    _b: Agent,
    _stop_b: StopDevice,
    _bridges: [Proxy; 2],
    a: Netns,
    b: Netns,
    _e1: Etcd,
    e2: Etcd,
}

async fn lab(test: &str, sets: &[&str]) -> Option<Lab> {
    if !support::wireguard_available(test) || !support::bpf_available(test) {
        return None;
    }
    let (a, b) = joined_pair(test);
    let (e1, e2) = (Etcd::start().await, Etcd::start().await);
    cluster_config("cluster1", 1, &e1, false);
    cluster_config("cluster2", 2, &e2, false);
    // Node A reaches both etcds at the addresses they have here.
    let bridges = [
        Proxy::bridge(&a, e1.client_port).await,
        Proxy::bridge(&a, e2.client_port).await,
    ];
    let pid = std::process::id() % 100_000;
    let (dev_a, dev_b) = (format!("w{test}a{pid}"), format!("w{test}b{pid}"));

    // Node B: an agent as the other tests run it, its device in B.
    let flags: Vec<OsString> = [
        "--wireguard",
        "--wireguard-device",
        &dev_b,
        "--wireguard-helper",
        support::bin::weft_wg(),
        "--datapath-netns",
    ]
    .iter()
    .map(OsString::from)
    .chain([b.path().into()])
    .collect();
    let flags: Vec<&OsStr> = flags.iter().map(OsString::as_os_str).collect();
    let agent_b = Agent::start_node("cluster2", 2, &e2, NODE_B, &flags);
    support::write_config_file(agent_b.mesh_dir.path(), "cluster1", &e1.url());

    // Node A: the chart's pod.
    let mut values = vec![
        "cluster.name=cluster1".to_owned(),
        "cluster.id=1".to_owned(),
        format!("kvstore.endpoints={}", e1.url()),
        format!("wireguard.device={dev_a}"),
        "datapath.nativeDevice=weftv0".to_owned(),
    ];
    values.extend(sets.iter().map(|s| s.to_string()));
    let values: Vec<&str> = values.iter().map(String::as_str).collect();
    let manifests = support::chart::render(&values).unwrap();
    let cluster2 = format!("endpoints:\n- {}\n", e2.url());
    let mut pod = Pod::new(
        &manifests,
        &a,
        "cluster1-node",
        NODE_A,
        &[("weft-clustermesh", &[("cluster2", cluster2.as_str())])],
    );
    // The kubectl image's init container: what it writes, from the Node object.
    pod.run_init_containers(|name, pod| {
        name == "node-pod-cidr"
            && std::fs::write(pod.volume("node-facts").join("pod-cidr"), POD_CIDR_A).is_ok()
    });
    pod.start_containers();
    let state_a = pod.host_path("/var/run/weft");

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
    let views: [(&Path, &str); 2] = [
        (&state_a, "cluster2/cluster2-node"),
        (agent_b.state.path(), "cluster1/cluster1-node"),
    ];
    for (dir, remote) in views {
        eventually(
            &format!("a peer for {remote}: its node IP and its pod"),
            Duration::from_secs(90),
            || {
                let s = status(dir)?;
                let p = peers(&s);
                (p.iter()
                    .any(|p| p["node"] == remote && p["allowed_ips"].as_u64() >= Some(2)))
                .then_some(())
            },
        )
        .await;
    }
    // The agents brought their devices up; the pods' addresses are the test's.
    a.ip(&["addr", "add", &format!("{POD_A}/24"), "dev", &dev_a]);
    b.ip(&["addr", "add", &format!("{POD_B}/24"), "dev", &dev_b]);
    Some(Lab {
        pod,
        state_a,
        _b: agent_b,
        _stop_b: StopDevice(dev_b),
        _bridges: bridges,
        a,
        b,
        _e1: e1,
        e2,
    })
}

/// With a stream flowing from A to B, restarts the agent's container while cluster2's
/// etcd is frozen for [`ETCD_PAUSE`], then thaws it. Returns the stream and when the
/// restart began.
async fn restart_container_during_etcd_pause(lab: &mut Lab) -> (Stream, Instant) {
    let stream = Stream::flowing(&lab.a, &lab.b, pod_b()).await;
    lab.e2.pause();
    let restarted = Instant::now();
    lab.pod.restart("weftd");
    // The restarted container's agent answers (its socket is on the node's path).
    eventually(
        "the restarted agent answers",
        Duration::from_secs(60),
        || {
            let s = status(&lab.state_a)?;
            (s["wireguard"]["device_error"].is_null() && !s["wireguard"].is_null()).then_some(())
        },
    )
    .await;
    let until = restarted + ETCD_PAUSE;
    // cluster2 stays frozen for the whole pause: the scenario, not a wait for an event.
    tokio::time::sleep(until.saturating_duration_since(Instant::now())).await;
    (stream, restarted)
}

#[tokio::test]
async fn the_charts_pod_runs_the_agent_and_a_container_restart_keeps_the_tunnel() {
    let Some(mut lab) = lab("cpk", &[]).await else {
        return;
    };
    // The chart's pod as it runs: the agent adopted the device of the `wireguard`
    // container, turned on forwarding through the node's /proc/sys/net, and runs the
    // datapath and the image's signed plugins.
    let s = status(&lab.state_a).unwrap();
    assert_eq!(s["wireguard"]["backend"], "userspace", "{s}");
    assert!(lab.pod.running("wireguard") && lab.pod.running("weftd"));
    let forwarding = lab
        .a
        .run(|| std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward"));
    assert_eq!(forwarding.unwrap().trim(), "1", "forwarding on in node A");
    let plugins: Vec<&str> = s["plugins"]["loaded"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert!(plugins.contains(&"regeneration-policy"), "{plugins:?}");
    assert!(s["datapath"]["generation"].as_u64().is_some(), "{s}");
    assert!(
        lab.pod
            .log("weftd")
            .contains("WireGuard device run outside the agent: adopted"),
        "{}",
        lab.pod.log("weftd")
    );
    // The simulation holds what the chart asks: a read-only root and /proc/sys, the
    // capabilities it adds and no others.
    for (argv, refused) in [
        (
            &["touch", "/usr/weft-was-here"][..],
            "Read-only file system",
        ),
        (
            &["/bin/sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"][..],
            "Read-only file system",
        ),
    ] {
        let out = lab.pod.exec("weftd", argv);
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && said.contains(refused),
            "{argv:?}: {said}"
        );
    }
    let mask = |status: &str| {
        let line = status.lines().find(|l| l.starts_with("CapEff:")).unwrap();
        u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
    };
    let caps = |name: &str| {
        let out = lab.pod.exec(name, &["cat", "/proc/1/status"]);
        mask(&String::from_utf8(out.stdout).unwrap())
    };
    // What this machine can give at all (a sandbox may lack some).
    let here = mask(&std::fs::read_to_string("/proc/self/status").unwrap());
    // NET_ADMIN 12, SYS_ADMIN 21, SYS_RESOURCE 24, PERFMON 38, BPF 39.
    assert_eq!(
        caps("weftd"),
        (1 << 12 | 1 << 21 | 1 << 24 | 1 << 38 | 1 << 39) & here
    );
    assert_eq!(caps("wireguard"), 1 << 12);

    let (stream, restarted) = restart_container_during_etcd_pause(&mut lab).await;
    let s = status(&lab.state_a).expect("agent A answers");
    assert_eq!(
        s["wireguard"]["restoring"], true,
        "nothing collected while cluster2 is frozen: {s}"
    );
    assert_eq!(peers(&s).len(), 1, "the restored peer is kept: {s}");
    assert!(
        lab.pod.running("wireguard"),
        "the device's container kept running"
    );
    lab.e2.resume();
    stream.assert_unbroken_since(restarted, CUT).await;

    // The device's own container restarts: a new, empty device, which the agent finds
    // and gives its peer again.
    lab.pod.restart("wireguard");
    eventually(
        "the agent gives the new device its peer",
        Duration::from_secs(60),
        || {
            let s = status(&lab.state_a)?;
            (s["wireguard"]["revived"].as_u64() >= Some(1) && peers(&s).len() == 1).then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn control_with_the_device_in_the_agents_container_a_restart_cuts_the_stream() {
    let Some(mut lab) = lab("cpc", &["wireguard.userspace=false"]).await else {
        return;
    };
    assert!(!lab.pod.log("weftd").contains("adopted"));
    let (stream, restarted) = restart_container_during_etcd_pause(&mut lab).await;
    // The device died with the container: the restarted agent made a new one and
    // restored no peer.
    let s = status(&lab.state_a).expect("agent A answers");
    assert_eq!(s["wireguard"]["restored"], 0, "{s}");
    let gap = stream.longest_gap(
        restarted + Duration::from_millis(500),
        restarted + ETCD_PAUSE,
    );
    lab.e2.resume();
    assert!(
        gap >= CUT,
        "with the device gone nothing reaches pod B (longest gap {gap:?})"
    );
    let _ = stream.close();
}
