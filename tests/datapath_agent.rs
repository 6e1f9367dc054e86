//! `weftd` with its BPF datapath, end to end: the native device is switched to the
//! agent's generation only after the wait for remote state, so a restart while a
//! remote cluster's etcd is stopped keeps encrypting its traffic. The control run,
//! without the wait, sends it in the clear. Needs root and BPF.

use weft_testkit as support;

use std::ffi::OsStr;
use std::net::{Ipv4Addr, UdpSocket};
use std::path::PathBuf;
use std::time::Duration;
use support::agent::{cluster_config, Agent};
use support::netns::{Netns, Tun};
use support::{eventually, Etcd};

const PORT: u16 = 5000;
/// A pod of cluster2, behind WireGuard (key 255 in its ipcache entry).
const REMOTE_POD: Ipv4Addr = Ipv4Addr::new(10, 2, 0, 7);

/// Node A of cluster1 (its native device weftv0 and the TUN weftwg0), and a peer
/// namespace B that owns the remote pod's address, joined by a veth.
struct Nodes {
    a: Netns,
    _b: Netns,
    tun: Tun,
    sender: UdpSocket,
    receiver: UdpSocket,
    root: PathBuf,
}

impl Nodes {
    fn start(test: &str) -> Nodes {
        let (a, b) = support::netns::joined_pair(test);
        let tun = Tun::new(&a, "weftwg0");
        a.ip(&["link", "set", "weftwg0", "up"]);
        let sender = a.udp("10.100.0.1:0");
        let receiver = b.udp(&format!("0.0.0.0:{PORT}"));
        let root = PathBuf::from(format!(
            "/sys/fs/bpf/weft-test-{}-{test}",
            std::process::id()
        ));
        weft_datapath::Datapath::remove_all(&root);
        Nodes {
            a,
            _b: b,
            tun,
            sender,
            receiver,
            root,
        }
    }

    fn flags(&self) -> Vec<std::ffi::OsString> {
        [
            "--native-device",
            "weftv0",
            "--encrypt-device",
            "weftwg0",
            "--datapath-netns",
        ]
        .iter()
        .map(Into::into)
        .chain([
            self.a.path().into(),
            "--bpf-root".into(),
            self.root.clone().into(),
        ])
        .collect()
    }

    /// Sends to the remote pod: `true` when it reached the TUN (encrypted), `false`
    /// when it left on the veth in the clear.
    fn encrypted(&self) -> bool {
        self.sender.send_to(b"payload", (REMOTE_POD, PORT)).unwrap();
        let mut buf = [0u8; 64];
        let clear = self.receiver.recv_from(&mut buf).is_ok();
        let tunnelled = !self.tun.destinations(Duration::from_millis(300)).is_empty();
        assert!(clear != tunnelled, "the packet went both ways or nowhere");
        tunnelled
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        weft_datapath::Datapath::remove_all(&self.root);
    }
}

fn endpoint_generation(agent: &Agent) -> Option<(u64, Option<u64>)> {
    let s = agent.status_json()?;
    let d = &s["datapath"];
    Some((
        d["generation"].as_u64()?,
        d["endpoints"][0]["generation"].as_u64(),
    ))
}

async fn cluster2(etcd: &Etcd) {
    cluster_config("cluster2", 2, etcd, false);
    etcd.put(
        "cilium/state/ip/v1/default/10.2.0.7",
        r#"{"IP":"10.2.0.7","Mask":null,"HostIP":"192.0.2.2","ID":131172,"Key":255,"Metadata":""}"#,
    )
    .await;
    etcd.put(
        "cilium/state/identities/v1/id/131172",
        "k8s:app=db;k8s:io.cilium.k8s.policy.cluster=cluster2;",
    )
    .await;
}

/// Restarts node A's agent while cluster2's etcd is stopped: the native device keeps
/// the old generation (which still knows the remote pod) until cluster2 is back.
/// `decided` is the log line after which the agent has made its choice.
/// Whether the remote pod's traffic stayed encrypted while cluster2 was away.
async fn restart_with_remote_stopped(test: &str, extra: &[&str], decided: &str) -> bool {
    let nodes = Nodes::start(test);
    let (e1, e2) = (Etcd::start().await, Etcd::start().await);
    cluster_config("cluster1", 1, &e1, false);
    // Node A's own address stands for one of its pods.
    e1.put(
        "cilium/state/ip/v1/default/10.100.0.1",
        r#"{"IP":"10.100.0.1","Mask":null,"HostIP":"192.0.2.1","ID":65636,"Key":0,"Metadata":""}"#,
    )
    .await;
    cluster2(&e2).await;
    let flags = nodes.flags();
    let mut args: Vec<&OsStr> = flags.iter().map(|f| f.as_os_str()).collect();
    args.extend(extra.iter().map(OsStr::new));
    let mut agent = Agent::start_with("cluster1", 1, &e1, &args);
    support::write_config_file(agent.mesh_dir.path(), "cluster2", &e2.url());
    let (first, _) = eventually(
        "the native device switched",
        Duration::from_secs(30),
        || endpoint_generation(&agent).filter(|(g, e)| Some(*g) == *e),
    )
    .await;
    assert!(nodes.encrypted(), "before the restart");

    e2.pause();
    let mark = agent.log().len();
    agent.restart(&args);
    let (second, _) = eventually(
        "the restarted agent's datapath",
        Duration::from_secs(30),
        || endpoint_generation(&agent).filter(|(g, _)| *g > first),
    )
    .await;
    eventually(
        &format!("the restarted agent logs {decided:?}"),
        Duration::from_secs(30),
        || agent.log().get(mark..)?.contains(decided).then_some(()),
    )
    .await;
    let encrypted_during_pause = nodes.encrypted();
    e2.resume();
    eventually(
        "switched after cluster2 is back",
        Duration::from_secs(60),
        || endpoint_generation(&agent).filter(|(g, e)| *g == second && *e == Some(second)),
    )
    .await;
    // Once cluster2's state is back in the new generation, its traffic is encrypted
    // whichever way the restart went.
    eventually(
        "encrypted once cluster2 is back",
        Duration::from_secs(60),
        || nodes.encrypted().then_some(()),
    )
    .await;
    encrypted_during_pause
}

#[tokio::test]
async fn a_restart_while_a_remote_etcd_is_stopped_keeps_its_traffic_encrypted() {
    if !support::bpf_available("restart keeps encryption") {
        return;
    }
    let during =
        restart_with_remote_stopped("dpkeep", &[], "regeneration waits for remote state").await;
    assert!(
        during,
        "the old generation serves until the remote state is back"
    );
}

#[tokio::test]
async fn control_without_the_wait_the_remote_pod_is_reached_in_the_clear() {
    if !support::bpf_available("control: no wait") {
        return;
    }
    let during = restart_with_remote_stopped(
        "dpnowait",
        &["--clustermesh-ip-identities-sync-timeout", "0s"],
        "native device switched",
    )
    .await;
    assert!(
        !during,
        "switched at once to a generation without the remote pod"
    );
}
