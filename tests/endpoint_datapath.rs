//! Pods made through `weft-cni` on a node whose agent runs the BPF datapath and a
//! policy directory: once an endpoint's regeneration is over, its programs are attached
//! on its host side and its policy is enforced on real TCP: the client reaches the
//! port the policy admits, not another; the control run, the policy removed (a
//! regeneration of the endpoint), reaches both, so the drop was the policy's. Needs
//! root and BPF.

use weft_testkit as support;

use serde_json::Value;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::Duration;
use support::agent::Agent;
use support::netns::Netns;
use support::{eventually, Etcd};

/// Whether a TCP connection from `from` to `addr` is accepted within a second.
fn connects(from: &Netns, addr: SocketAddr) -> bool {
    from.run(move || TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok())
}

#[tokio::test]
async fn an_endpoints_policy_is_enforced_on_its_packets_once_it_is_switched() {
    if !support::bpf_available("endpoint-datapath") {
        return;
    }
    let etcd = Etcd::start().await;
    let (node, _peer) = support::netns::joined_pair("epdp");
    let forwarding =
        || node.run(|| std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap());
    assert_eq!(forwarding().trim(), "0", "a new namespace does not forward");
    let (web, client) = (Netns::new("weft-epdp-web"), Netns::new("weft-epdp-client"));
    let policies = tempfile::tempdir().unwrap();
    std::fs::write(
        policies.path().join("web.yaml"),
        support::cni::WEB_FROM_CLIENTS,
    )
    .unwrap();
    let root = PathBuf::from(format!("/sys/fs/bpf/weft-test-{}-epdp", std::process::id()));
    weft_datapath::Datapath::remove_all(&root);
    let flags: Vec<std::ffi::OsString> = ["--native-device", "weftv0", "--datapath-netns"]
        .iter()
        .map(Into::into)
        .chain([
            node.path().into(),
            "--bpf-root".into(),
            root.clone().into(),
            "--pod-cidr".into(),
            "10.77.0.0/24".into(),
            "--policy-dir".into(),
            policies.path().into(),
        ])
        .collect();
    let flags: Vec<&std::ffi::OsStr> = flags.iter().map(|f| f.as_os_str()).collect();
    let agent = Agent::start_with("cluster1", 1, &etcd, &flags);
    eventually("weftd answers", Duration::from_secs(20), || {
        agent.status_json()
    })
    .await;
    eventually(
        "the agent turns forwarding on",
        Duration::from_secs(20),
        || (forwarding().trim() == "1").then_some(()),
    )
    .await;

    let web_ip = support::cni::add(&agent, "web", "shop", &web, "web");
    support::cni::add(&agent, "client", "shop", &client, "client");
    for key in ["web/eth0", "client/eth0"] {
        let r = support::cni::regeneration(&agent, key, "switched", support::cni::ended).await;
        assert_ne!(r["result"], "not-switched", "{key}: {r}");
    }
    // Each endpoint's two links are served by the agent's generation.
    let status = agent.status_json().unwrap();
    let datapath = &status["datapath"];
    let served: Vec<&Value> = datapath["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"].as_str().is_some_and(|n| n.starts_with("wft")))
        .collect();
    assert_eq!(served.len(), 4, "{datapath}");
    assert!(
        served
            .iter()
            .all(|e| e["generation"] == datapath["generation"]),
        "{datapath}"
    );
    let _l80 = web.run(|| TcpListener::bind("0.0.0.0:80").unwrap());
    let _l81 = web.run(|| TcpListener::bind("0.0.0.0:81").unwrap());
    let at = |port: u16| SocketAddr::new(web_ip, port);
    // The client's identity arrives through etcd; the policy is refreshed with it.
    eventually("the client reaches web:80", Duration::from_secs(20), || {
        connects(&client, at(80)).then_some(())
    })
    .await;
    assert!(!connects(&client, at(81)), "web:81 is not admitted");

    // The control: without the policy, 81 is reached too.
    std::fs::remove_file(policies.path().join("web.yaml")).unwrap();
    eventually(
        "without the policy, web:81 is reached",
        Duration::from_secs(20),
        || connects(&client, at(81)).then_some(()),
    )
    .await;
    // The change went through a regeneration of web, asked of the policy as any is.
    let r = support::cni::regeneration(&agent, "web/eth0", "regenerated", |r| {
        r["reason"] == "policy-change" && support::cni::ended(r)
    })
    .await;
    assert_eq!(r["decided_by"], "built-in default", "{r}");
    drop(agent);
    weft_datapath::Datapath::remove_all(&root);
}
