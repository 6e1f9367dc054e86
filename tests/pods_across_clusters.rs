//! Pods on two clusters' nodes, each node a network namespace with its own `weftd`
//! (real etcd per cluster, WireGuard, the BPF datapath, a policy directory), pods made
//! through `weft-cni`. The underlay joins the nodes and routes node addresses only.
//!
//! - pod→pod, pod→host and host→pod across the clusters cross the link as WireGuard
//!   UDP only (the three cases of the second seed note), and the policy decides,
//!   a selector on the remote cluster's label included;
//! - the first seed note on pods: a policy-protected cross-cluster stream survives a
//!   restart of the client's agent while the remote cluster's etcd is frozen, because
//!   the restored endpoint keeps its datapath until the remote identities are back;
//!   the control run, whose policy plugin says `proceed`, cuts it.
//!
//! Needs root, BPF and /dev/net/tun.

use weft_testkit as support;

use serde_json::Value;
use std::ffi::{OsStr, OsString};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use support::agent::{cluster_config, Agent, VendorKey};
use support::netns::{joined_pair, Netns};
use support::traffic::{contains, Capture, StopDevice, Stream, MARKER};
use support::{eventually, Etcd};

const NODE_A: &str = "10.100.0.1";
const NODE_B: &str = "10.100.0.2";
/// How long cluster2's etcd stays frozen, from the agent's restart on.
const ETCD_PAUSE: Duration = Duration::from_secs(10);
/// A gap in the stream at least this long means it was cut.
const CUT: Duration = Duration::from_secs(2);

/// cluster1's policy: its clients may reach cluster2's web pods on 80, and remote
/// nodes on 9000; nothing else.
const CLIENT_POLICY: &str = "
apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: client-egress, namespace: shop}
spec:
  endpointSelector: {matchLabels: {app: client}}
  egress:
  - toEndpoints: [{matchLabels: {app: web, io.cilium.k8s.policy.cluster: cluster2}}]
    toPorts: [{ports: [{port: '80', protocol: TCP}]}]
  - toEntities: [remote-node]
    toPorts: [{ports: [{port: '9000', protocol: TCP}]}]
";

/// cluster2's policy: its web pods admit cluster1's clients on 80 (not cluster2's own
/// clients: the cluster label decides) and remote nodes on 8080.
const WEB_POLICY: &str = "
apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: web-ingress, namespace: shop}
spec:
  endpointSelector: {matchLabels: {app: web}}
  ingress:
  - fromEndpoints: [{matchLabels: {app: client, io.cilium.k8s.policy.cluster: cluster1}}]
    toPorts: [{ports: [{port: '80', protocol: TCP}]}]
  - fromEntities: [remote-node]
    toPorts: [{ports: [{port: '8080', protocol: TCP}]}]
";

/// A bpffs directory, emptied when dropped.
struct BpfRoot(PathBuf);

impl Drop for BpfRoot {
    fn drop(&mut self) {
        weft_datapath::Datapath::remove_all(&self.0);
    }
}

/// One node: its agent, the agent's flags, and what the agent made.
struct Node {
    // Dropped in this order: the agent, its helper, its pins, its policies.
    agent: Agent,
    flags: Vec<OsString>,
    _device: StopDevice,
    _root: BpfRoot,
    _policies: tempfile::TempDir,
}

impl Node {
    fn start(
        cluster: &str,
        id: u32,
        etcd: &Etcd,
        (ns, ip, cidr, native): (&Netns, &str, &str, &str),
        policy: &str,
        test: &str,
    ) -> Node {
        let device = format!("w{test}{id}{}", std::process::id() % 100_000);
        let root = BpfRoot(PathBuf::from(format!(
            "/sys/fs/bpf/weft-test-{}-{test}{id}",
            std::process::id()
        )));
        weft_datapath::Datapath::remove_all(&root.0);
        let policies = tempfile::tempdir().unwrap();
        std::fs::write(policies.path().join("policy.yaml"), policy).unwrap();
        let flags: Vec<OsString> = [
            "--wireguard",
            "--wireguard-device",
            &device,
            "--wireguard-helper",
            support::bin::weft_wg(),
            "--native-device",
            native,
            "--pod-cidr",
            cidr,
        ]
        .iter()
        .map(OsString::from)
        .chain([
            "--datapath-netns".into(),
            ns.path().into(),
            "--bpf-root".into(),
            root.0.clone().into(),
            "--policy-dir".into(),
            policies.path().into(),
        ])
        .collect();
        let agent = Agent::start_node(cluster, id, etcd, ip, &refs(&flags));
        Node {
            agent,
            flags,
            _device: StopDevice(device),
            _root: root,
            _policies: policies,
        }
    }
}

fn refs(f: &[OsString]) -> Vec<&OsStr> {
    f.iter().map(OsString::as_os_str).collect()
}

struct Lab {
    // Dropped in this order: agents, pods, node namespaces, etcd.
    a: Node,
    b: Node,
    client: Netns,
    web: Netns,
    local_client: Netns,
    node_a: Netns,
    node_b: Netns,
    client_ip: IpAddr,
    web_ip: IpAddr,
    _e1: Etcd,
    e2: Etcd,
}

async fn lab(test: &str) -> Option<Lab> {
    if !support::wireguard_available(test) || !support::bpf_available(test) {
        return None;
    }
    let (node_a, node_b) = joined_pair(test);
    let (e1, e2) = (Etcd::start().await, Etcd::start().await);
    cluster_config("cluster1", 1, &e1, false);
    cluster_config("cluster2", 2, &e2, false);
    let a = Node::start(
        "cluster1",
        1,
        &e1,
        (&node_a, NODE_A, "10.77.0.0/24", "weftv0"),
        CLIENT_POLICY,
        test,
    );
    let b = Node::start(
        "cluster2",
        2,
        &e2,
        (&node_b, NODE_B, "10.78.0.0/24", "weftv1"),
        WEB_POLICY,
        test,
    );
    support::write_config_file(a.agent.mesh_dir.path(), "cluster2", &e2.url());
    support::write_config_file(b.agent.mesh_dir.path(), "cluster1", &e1.url());
    for agent in [&a.agent, &b.agent] {
        eventually("weftd answers", Duration::from_secs(30), || {
            agent.status_json()
        })
        .await;
    }
    let (client, web, local_client) = (
        Netns::new(&format!("weft-{test}-client")),
        Netns::new(&format!("weft-{test}-web")),
        Netns::new(&format!("weft-{test}-lclient")),
    );
    let client_ip = support::cni::add(&a.agent, "client", "shop", &client, "client");
    let web_ip = support::cni::add(&b.agent, "web", "shop", &web, "web");
    support::cni::add(&b.agent, "lclient", "shop", &local_client, "client");
    for (agent, key) in [
        (&a.agent, "client/eth0"),
        (&b.agent, "web/eth0"),
        (&b.agent, "lclient/eth0"),
    ] {
        let r = support::cni::regeneration(agent, key, "switched", support::cni::ended).await;
        assert_ne!(r["result"], "not-switched", "{key}: {r}");
    }
    // Each agent routes the other's pod CIDR through its device.
    for (agent, cidr) in [(&a.agent, "10.78.0.0/24"), (&b.agent, "10.77.0.0/24")] {
        eventually(
            "the remote pod CIDR routed through WireGuard",
            Duration::from_secs(30),
            || {
                let s = agent.status_json()?;
                let routes = s["wireguard"]["routes"]["installed"].as_array()?.clone();
                (routes == [Value::from(cidr)]).then_some(())
            },
        )
        .await;
    }
    Some(Lab {
        a,
        b,
        client,
        web,
        local_client,
        node_a,
        node_b,
        client_ip,
        web_ip,
        _e1: e1,
        e2,
    })
}

/// Whether a TCP connection from `from` to `addr` is accepted within a second.
fn connects(from: &Netns, addr: SocketAddr) -> bool {
    from.run(move || TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok())
}

/// Waits until `from` reaches `to` (listening there for the check): the policy, both
/// sides' identities and the tunnel are in place.
async fn until_reached(what: &str, from: &Netns, server: &Netns, to: SocketAddr) {
    let listener = server.run(move || TcpListener::bind(to).unwrap());
    eventually(what, Duration::from_secs(60), || {
        connects(from, to).then_some(())
    })
    .await;
    drop(listener);
}

/// Whether an IPv4 packet (no link header: as the WireGuard device carries it) goes
/// from `src` to `dst` and carries the marker.
fn marked_packet(packet: &[u8], src: IpAddr, dst: IpAddr) -> bool {
    let (IpAddr::V4(s), IpAddr::V4(d)) = (src, dst) else {
        return false;
    };
    packet.len() > 20
        && packet[0] >> 4 == 4
        && packet[12..16] == s.octets()
        && packet[16..20] == d.octets()
        && contains(packet, MARKER)
}

#[tokio::test]
async fn pods_reach_across_clusters_through_wireguard_only_and_as_the_policies_allow() {
    let Some(lab) = lab("pxe").await else {
        return;
    };
    let node_b: IpAddr = NODE_B.parse().unwrap();
    let node_a: IpAddr = NODE_A.parse().unwrap();
    let web = |port| SocketAddr::new(lab.web_ip, port);
    let host_b = SocketAddr::new(node_b, 9000);
    until_reached(
        "pod→pod: the client reaches web:80",
        &lab.client,
        &lab.web,
        web(80),
    )
    .await;
    until_reached(
        "pod→host: the client reaches node B:9000",
        &lab.client,
        &lab.node_b,
        host_b,
    )
    .await;
    until_reached(
        "host→pod: node A reaches web:8080",
        &lab.node_a,
        &lab.web,
        web(8080),
    )
    .await;

    // The three cases, each a stream of the marker, while B's namespace is captured.
    let capture = Capture::start(&lab.node_b);
    let streams = [
        Stream::flowing(&lab.client, &lab.web, web(80)).await,
        Stream::flowing(&lab.client, &lab.node_b, host_b).await,
        Stream::flowing(&lab.node_a, &lab.web, web(8080)).await,
    ];
    let frames = capture.stop();
    for s in streams {
        let errors = s.close();
        assert!(errors.is_empty(), "{errors:?}");
    }
    let veth = lab.node_b.ifindex("weftv1") as usize;
    let on_veth: Vec<&Vec<u8>> = frames
        .iter()
        .filter(|(i, _)| *i == veth)
        .map(|(_, f)| f)
        .collect();
    support::traffic::only_wireguard(&on_veth, 30);
    // The plaintext is where it should be: inside the tunnel, for each case.
    let status = lab.b.agent.status_json().unwrap();
    let device = status["wireguard"]["device"].as_str().unwrap().to_owned();
    let tunnel = lab.node_b.ifindex(&device) as usize;
    for (case, src, dst) in [
        ("pod→pod", lab.client_ip, lab.web_ip),
        ("pod→host", lab.client_ip, node_b),
        ("host→pod", node_a, lab.web_ip),
    ] {
        assert!(
            frames
                .iter()
                .any(|(i, f)| *i == tunnel && marked_packet(f, src, dst)),
            "{case}: the marker {src} → {dst} came out of the WireGuard device"
        );
    }

    // What the policies deny.
    let mut listeners = Vec::new();
    for (ns, at) in [
        (&lab.web, web(80)),
        (&lab.web, web(81)),
        (&lab.web, web(8080)),
        (&lab.node_b, SocketAddr::new(node_b, 9001)),
    ] {
        listeners.push(ns.run(move || TcpListener::bind(at).unwrap()));
    }
    assert!(
        connects(&lab.client, web(80)),
        "pod→pod on 80 still allowed"
    );
    assert!(!connects(&lab.client, web(81)), "pod→pod on 81: denied");
    assert!(
        !connects(&lab.local_client, web(80)),
        "cluster2's own client: the policy admits cluster1's only"
    );
    assert!(connects(&lab.node_a, web(8080)), "host→pod on 8080 allowed");
    assert!(
        !connects(&lab.node_a, web(80)),
        "host→pod on 80: remote nodes are not admitted there"
    );
    assert!(
        !connects(&lab.client, SocketAddr::new(node_b, 9001)),
        "pod→host on 9001: the client's egress does not allow it"
    );
    let listed = lab.b.agent.json(&["endpoint", "list"]).unwrap();
    let web_ep = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["key"] == "web/eth0")
        .unwrap()
        .clone();
    assert_eq!(web_ep["policy"]["ingress_enforced"], true, "{web_ep}");
}

/// A signed regeneration-policy plugin that lets every endpoint proceed: the
/// `critical-clusters` example naming a cluster that is not in the mesh.
fn proceed_plugin() -> (tempfile::TempDir, VendorKey) {
    let plugins = tempfile::tempdir().unwrap();
    let vendor = VendorKey::new();
    support::agent::package(
        plugins.path(),
        "proceed",
        "critical_clusters",
        "1.0.0",
        100,
        &vendor.key,
    );
    support::agent::configure(plugins.path(), "proceed", "not-in-the-mesh", &vendor.key);
    (plugins, vendor)
}

/// With the client's stream to web flowing, cluster2's etcd is frozen and agent A
/// restarted (with `extra` flags); after [`ETCD_PAUSE`] cluster2 is thawed. Returns
/// the stream, when the restart began, and the client endpoint's regeneration as it
/// was at the end of the pause. With `proceeds`, it also waits for the client's early
/// switch, and returns when it was seen.
async fn restart_during_etcd_pause(
    lab: &mut Lab,
    extra: &[OsString],
    proceeds: bool,
) -> (Stream, Instant, Value, Option<Instant>) {
    let to = SocketAddr::new(lab.web_ip, 80);
    until_reached("the client reaches web:80", &lab.client, &lab.web, to).await;
    let stream = Stream::flowing(&lab.client, &lab.web, to).await;
    lab.e2.pause();
    let restarted = Instant::now();
    let mut flags = lab.a.flags.clone();
    flags.extend_from_slice(extra);
    lab.a.agent.restart(&refs(&flags));
    let agent = &lab.a.agent;
    let switched = if proceeds {
        // Its restore, or a later regeneration (identities arriving): proceeded either way.
        support::cni::regeneration(agent, "client/eth0", "switched at once", |r| {
            r["reason"] != "create" && r["result"] == "proceeded"
        })
        .await;
        Some(Instant::now())
    } else {
        support::cni::regeneration(agent, "client/eth0", "restored", |r| {
            r["reason"] == "restore"
        })
        .await;
        None
    };
    // cluster2 stays frozen for the whole pause: this is the scenario, not a wait for
    // an event.
    tokio::time::sleep((restarted + ETCD_PAUSE).saturating_duration_since(Instant::now())).await;
    let during = support::cni::regeneration(agent, "client/eth0", "listed", |_| true).await;
    lab.e2.resume();
    (stream, restarted, during, switched)
}

#[tokio::test]
async fn a_policy_protected_stream_between_pods_survives_a_restart_while_the_remote_etcd_is_frozen()
{
    let Some(mut lab) = lab("pxs").await else {
        return;
    };
    let (stream, restarted, during, _) = restart_during_etcd_pause(&mut lab, &[], false).await;
    assert_eq!(
        during["result"], "waiting",
        "the restored client waits for cluster2's identities: {during}"
    );
    let r = support::cni::regeneration(
        &lab.a.agent,
        "client/eth0",
        "switched once cluster2 is back",
        support::cni::ended,
    )
    .await;
    assert_eq!(r["result"], "synced", "{r}");
    // Across the restart and the whole pause.
    stream.assert_unbroken_since(restarted, CUT).await;
}

#[tokio::test]
async fn control_with_a_proceed_policy_the_restored_client_is_switched_early_and_its_stream_cut() {
    let Some(mut lab) = lab("pxc").await else {
        return;
    };
    let (_plugins, vendor) = proceed_plugin();
    let extra: Vec<OsString> = vec![
        "--plugin-dir".into(),
        _plugins.path().into(),
        "--plugin-trusted-keys".into(),
        vendor.trusted.clone().into(),
    ];
    let (stream, restarted, during, switched) =
        restart_during_etcd_pause(&mut lab, &extra, true).await;
    assert_eq!(during["result"], "proceeded", "{during}");
    assert_eq!(during["decided_by"], "proceed", "{during}");
    // In flight when the switch was seen: half a second's grace.
    let cut_from = switched.unwrap() + Duration::from_millis(500);
    assert!(
        restarted + ETCD_PAUSE > cut_from + CUT,
        "the switch came early enough in the pause to see the cut"
    );
    let gap = stream.longest_gap(cut_from, restarted + ETCD_PAUSE);
    let _ = stream.close();
    assert!(
        gap >= CUT,
        "switched to a datapath without cluster2's identities, the client's packets are dropped (longest gap {gap:?})"
    );
}
