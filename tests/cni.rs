//! `weft-cni` driven as a container runtime drives it, against a real `weftd` with a
//! pod CIDR and a real etcd: ADD makes the pod's interface, address, identity and
//! ipcache entry (read back from etcd in the established layout); ADD again and CHECK
//! agree; a restarted agent restores the endpoint untouched; an ADD interrupted by a
//! crash is undone at the next start; DEL and GC remove everything, DEL twice is fine.
//! The host sides live in a namespace the test owns.

use weft_testkit as support;

use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;
use support::agent::Agent;
use support::netns::Netns;
use support::{eventually, Etcd};

/// Runs `weft-cni` for pod `shop/<pod>` with `conf` on stdin: stdout as JSON (null
/// when empty) and the exit status.
fn cni(command: &str, pod: &str, netns: Option<&Path>, conf: &Value) -> (Value, i32) {
    weft_testkit::cni::call(command, pod, netns, conf)
}

fn conf(agent: &Agent) -> Value {
    json!({
        "cniVersion": "1.0.0",
        "name": "weft",
        "type": "weft-cni",
        "socket": agent.state.path().join("weftd.sock"),
        "runtimeConfig": {"labels": {"app": "web"}},
    })
}

async fn get(etcd: &Etcd, key: &str) -> Option<Value> {
    etcd.get_json(key).await
}

fn has_link(ns: &Netns, name: &str) -> bool {
    let name = name.to_owned();
    ns.run(move || nix::net::if_::if_nametoindex(name.as_str()).is_ok())
}

/// The flags of an agent with endpoints whose host sides live in `node`.
fn flags(node: &Path) -> [&std::ffi::OsStr; 4] {
    [
        "--pod-cidr".as_ref(),
        "10.77.0.0/24".as_ref(),
        "--datapath-netns".as_ref(),
        node.as_os_str(),
    ]
}

fn start(etcd: &Etcd, node: &Netns) -> Agent {
    Agent::start_with("cluster1", 1, etcd, &flags(&node.path()))
}

/// The agent answers STATUS once its etcd lease is there.
async fn ready(agent: &Agent) {
    let mut c = conf(agent);
    c["cniVersion"] = json!("1.1.0"); // STATUS came with 1.1.0
    eventually("weftd answers CNI STATUS", Duration::from_secs(20), || {
        let (_, status) = cni("STATUS", "", None, &c);
        (status == 0).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_pod_is_added_checked_restored_and_deleted() {
    let etcd = Etcd::start().await;
    let node = Netns::new("weft-cni-node");
    let pod = Netns::new("weft-cni-pod");
    let mut agent = start(&etcd, &node);
    ready(&agent).await;
    let c = conf(&agent);

    let (added, status) = cni("ADD", "web-0", Some(&pod.path()), &c);
    assert_eq!(status, 0, "{added}");
    assert_eq!(added["cniVersion"], "1.0.0");
    assert_eq!(added["ips"][0]["address"], "10.77.0.2/32", "{added}");
    assert_eq!(added["ips"][0]["gateway"], "10.77.0.1");
    assert_eq!(
        added["interfaces"][1]["sandbox"],
        pod.path().display().to_string()
    );
    let host_side = added["interfaces"][0]["name"].as_str().unwrap().to_owned();
    assert!(has_link(&node, &host_side) && has_link(&pod, "eth0"));

    // The ipcache entry and the identity, as the established agent writes them.
    let entry = get(&etcd, "cilium/state/ip/v1/default/10.77.0.2")
        .await
        .expect("ipcache entry");
    assert_eq!(entry["IP"], "10.77.0.2");
    assert_eq!(entry["HostIP"], "192.0.2.1");
    assert_eq!(entry["K8sNamespace"], "shop");
    assert_eq!(entry["K8sPodName"], "web-0");
    let id = entry["ID"].as_u64().unwrap();
    assert_eq!(id >> 16, 1, "cluster 1's identity: {id:#x}");
    let labels = get(&etcd, &format!("cilium/state/identities/v1/id/{id}")).await;
    assert_eq!(
        labels,
        Some(json!("k8s:app=web;k8s:io.cilium.k8s.policy.cluster=cluster1;k8s:io.kubernetes.pod.namespace=shop;"))
    );
    let listed = agent
        .json(&["endpoint", "list"])
        .expect("weftd endpoint list");
    assert_eq!(listed[0]["key"], "web-0/eth0", "{listed}");
    assert_eq!(listed[0]["identity"].as_u64(), Some(id));
    assert_eq!(listed[0]["phase"], "ready");
    assert_eq!(agent.status_json().unwrap()["endpoints"]["ready"], 1);
    let node_record = get(&etcd, "cilium/state/nodes/v1/cluster1/cluster1-node")
        .await
        .unwrap();
    assert_eq!(node_record["IPv4AllocCIDR"]["IP"], "10.77.0.0");

    let (again, status) = cni("ADD", "web-0", Some(&pod.path()), &c);
    assert_eq!(
        (status, &again["ips"]),
        (0, &added["ips"]),
        "ADD again: the same attachment"
    );
    let mut with_prev = c.clone();
    with_prev["prevResult"] = added.clone();
    assert_eq!(cni("CHECK", "web-0", Some(&pod.path()), &with_prev).1, 0);

    // Restarted: the endpoint is restored untouched, its entry on the new lease.
    let before = pod.ifindex("eth0");
    agent.restart(&flags(&node.path()));
    ready(&agent).await;
    assert_eq!(
        pod.ifindex("eth0"),
        before,
        "the pod's interface was not touched"
    );
    assert_eq!(cni("CHECK", "web-0", Some(&pod.path()), &with_prev).1, 0);
    assert!(get(&etcd, "cilium/state/ip/v1/default/10.77.0.2")
        .await
        .is_some());

    let (out, status) = cni("DEL", "web-0", Some(&pod.path()), &c);
    assert_eq!((out, status), (Value::Null, 0));
    assert!(!has_link(&node, &host_side) && !has_link(&pod, "eth0"));
    assert!(get(&etcd, "cilium/state/ip/v1/default/10.77.0.2")
        .await
        .is_none());
    assert!(
        get(&etcd, &format!("cilium/state/identities/v1/id/{id}"))
            .await
            .is_none(),
        "no user left"
    );
    assert_eq!(cni("DEL", "web-0", Some(&pod.path()), &c).1, 0, "DEL twice");
    assert_eq!(cni("DEL", "never-added", None, &c).1, 0, "DEL of nothing");
    let (out, status) = cni("CHECK", "web-0", Some(&pod.path()), &c);
    assert_eq!(
        (status, out["code"].as_u64()),
        (1, Some(3)),
        "CHECK after DEL: {out}"
    );
}

#[tokio::test]
async fn an_add_interrupted_by_a_crash_is_undone_and_gc_removes_the_rest() {
    let etcd = Etcd::start().await;
    let node = Netns::new("weft-cni-gc-node");
    let (pod_a, pod_b) = (Netns::new("weft-cni-gc-a"), Netns::new("weft-cni-gc-b"));
    let mut agent = start(&etcd, &node);
    ready(&agent).await;
    let c = conf(&agent);
    let (a, status) = cni("ADD", "pod-a", Some(&pod_a.path()), &c);
    assert_eq!(status, 0, "{a}");
    let (b, status) = cni("ADD", "pod-b", Some(&pod_b.path()), &c);
    assert_eq!(status, 0, "{b}");

    // pod-a's ADD "crashed" before its last step: its record says so.
    agent.kill();
    let record = agent.state.path().join("endpoints/pod-a@eth0.json");
    let text = std::fs::read_to_string(&record)
        .unwrap()
        .replace("\"ready\"", "\"creating\"");
    std::fs::write(&record, text).unwrap();
    agent.start_again(&flags(&node.path()));
    ready(&agent).await;
    let a_ip = a["ips"][0]["address"]
        .as_str()
        .unwrap()
        .trim_end_matches("/32")
        .to_owned();
    eventually(
        "pod-a's leftovers are undone",
        Duration::from_secs(10),
        || (!record.exists() && !has_link(&pod_a, "eth0")).then_some(()),
    )
    .await;
    assert!(get(&etcd, &format!("cilium/state/ip/v1/default/{a_ip}"))
        .await
        .is_none());
    assert!(has_link(&pod_b, "eth0"), "pod-b is untouched");

    // The freed address goes to the next pod.
    let pod_c = Netns::new("weft-cni-gc-c");
    let (cc, status) = cni("ADD", "pod-c", Some(&pod_c.path()), &c);
    assert_eq!(status, 0, "{cc}");
    assert_eq!(cc["ips"][0]["address"], a["ips"][0]["address"]);

    // GC with only pod-c valid: pod-b goes.
    let mut gc = c.clone();
    gc["cniVersion"] = json!("1.1.0");
    gc["cni.dev/valid-attachments"] = json!([{"containerID": "pod-c", "ifname": "eth0"}]);
    let (out, status) = cni("GC", "", None, &gc);
    assert_eq!(status, 0, "{out}");
    assert!(!has_link(&pod_b, "eth0"));
    assert!(has_link(&pod_c, "eth0"));
    let b_ip = b["ips"][0]["address"]
        .as_str()
        .unwrap()
        .trim_end_matches("/32")
        .to_owned();
    assert!(get(&etcd, &format!("cilium/state/ip/v1/default/{b_ip}"))
        .await
        .is_none());
}

#[tokio::test]
async fn an_unusable_namespace_is_refused_with_its_code_and_leaves_nothing() {
    let etcd = Etcd::start().await;
    let node = Netns::new("weft-cni-bad-node");
    let agent = start(&etcd, &node);
    ready(&agent).await;
    let (out, status) = cni(
        "ADD",
        "ghost",
        Some(Path::new("/run/netns/no-such-ns")),
        &conf(&agent),
    );
    assert_eq!((status, out["code"].as_u64()), (1, Some(8)), "{out}");
    assert!(
        out["details"].as_str().unwrap().contains("no-such-ns"),
        "{out}"
    );
    let ipam =
        std::fs::read_to_string(agent.state.path().join("ipam/ipv4.json")).unwrap_or_default();
    assert!(!ipam.contains("ghost"), "no address kept: {ipam}");

    let mut bad = conf(&agent);
    bad["runtimeConfig"]["labels"] = json!({"app": 7});
    let pod = Netns::new("weft-cni-bad-pod");
    let (out, status) = cni("ADD", "bad-labels", Some(&pod.path()), &bad);
    assert_eq!((status, out["code"].as_u64()), (1, Some(7)), "{out}");
    assert!(!has_link(&pod, "eth0"));
}

#[tokio::test]
async fn a_dual_stack_node_gives_a_pod_an_address_of_each_family() {
    let etcd = Etcd::start().await;
    let node = Netns::new("weft-cni-ds-node");
    let pod = Netns::new("weft-cni-ds-pod");
    let agent = Agent::start_with(
        "cluster1",
        1,
        &etcd,
        &[
            "--pod-cidr".as_ref(),
            "10.78.0.0/24,fd00:78::/64".as_ref(),
            "--datapath-netns".as_ref(),
            node.path().as_os_str(),
        ],
    );
    ready(&agent).await;
    let (added, status) = cni("ADD", "ds-0", Some(&pod.path()), &conf(&agent));
    assert_eq!(status, 0, "{added}");
    assert_eq!(added["ips"][0]["address"], "10.78.0.2/32", "{added}");
    assert_eq!(added["ips"][1]["address"], "fd00:78::2/128", "{added}");
    assert_eq!(added["ips"][1]["gateway"], "fd00:78::1");
    let routes: Vec<&str> = added["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["dst"].as_str().unwrap())
        .collect();
    assert_eq!(routes, ["0.0.0.0/0", "::/0"]);
    let v6 = get(&etcd, "cilium/state/ip/v1/default/fd00:78::2")
        .await
        .expect("IPv6 entry");
    let v4 = get(&etcd, "cilium/state/ip/v1/default/10.78.0.2")
        .await
        .expect("IPv4 entry");
    assert_eq!(v6["ID"], v4["ID"], "one identity for both");
    let node_record = get(&etcd, "cilium/state/nodes/v1/cluster1/cluster1-node")
        .await
        .unwrap();
    assert_eq!(node_record["IPv6AllocCIDR"]["IP"], "fd00:78::");
    let mut check = conf(&agent);
    check["prevResult"] = added.clone();
    assert_eq!(
        cni("CHECK", "ds-0", Some(&pod.path()), &check).1,
        0,
        "both addresses in place"
    );
    assert_eq!(cni("DEL", "ds-0", Some(&pod.path()), &conf(&agent)).1, 0);
    assert!(get(&etcd, "cilium/state/ip/v1/default/fd00:78::2")
        .await
        .is_none());
}

/// A clustermesh file naming cluster2 at an address where nothing listens: it never
/// syncs, so a regeneration that waits for it waits its whole timeout.
fn unreachable_cluster2(agent: &Agent) {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    support::write_config_file(agent.mesh_dir.path(), "cluster2", &url);
}

fn regeneration_of(agent: &Agent, key: &str) -> Option<Value> {
    let listed = agent.json(&["endpoint", "list"])?;
    let r = listed.as_array()?.iter().find(|e| e["key"] == key)?;
    Some(r["regeneration"].clone()).filter(|r| !r.is_null())
}

#[tokio::test]
async fn a_pod_waiting_for_remote_state_is_deleted_at_once() {
    let etcd = Etcd::start().await;
    let node = Netns::new("weft-cni-wait-node");
    let pod = Netns::new("weft-cni-wait-pod");
    let agent = start(&etcd, &node); // the default wait: one minute
    unreachable_cluster2(&agent);
    ready(&agent).await;
    let started = std::time::Instant::now();
    let (added, status) = cni("ADD", "slow-0", Some(&pod.path()), &conf(&agent));
    assert_eq!(status, 0, "{added}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "ADD does not wait for the mesh"
    );
    let waiting = eventually(
        "the regeneration is under way",
        Duration::from_secs(10),
        || regeneration_of(&agent, "slow-0/eth0").filter(|r| r["result"] == "waiting"),
    )
    .await;
    assert_eq!(waiting["reason"], "create");
    // Once the policy has decided, the listing says what the endpoint waits for.
    let decided = eventually("the wait is decided", Duration::from_secs(10), || {
        regeneration_of(&agent, "slow-0/eth0").filter(|r| r["waiting_for"] == json!(["cluster2"]))
    })
    .await;
    assert_eq!(decided["result"], "waiting", "{decided}");
    assert_eq!(decided["decided_by"], "built-in default", "{decided}");
    let listed = support::agent::weftd(&[
        "endpoint".as_ref(),
        "list".as_ref(),
        "--state-dir".as_ref(),
        agent.state.path().as_os_str(),
    ]);
    assert!(listed.contains("waiting, wait 1m for"), "{listed}");
    assert!(
        listed.contains(" of cluster2 by built-in default"),
        "{listed}"
    );

    let started = std::time::Instant::now();
    assert_eq!(cni("DEL", "slow-0", Some(&pod.path()), &conf(&agent)).1, 0);
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "DEL waited {took:?} for the regeneration"
    );
    assert_eq!(agent.json(&["endpoint", "list"]).unwrap(), json!([]));
}

#[tokio::test]
async fn a_regeneration_that_times_out_says_so_once_and_a_restart_regenerates_again() {
    let etcd = Etcd::start().await;
    let node = Netns::new("weft-cni-to-node");
    let pod = Netns::new("weft-cni-to-pod");
    let node_path = node.path();
    let mut with_timeout = flags(&node_path).to_vec();
    with_timeout.extend::<[&std::ffi::OsStr; 2]>([
        "--clustermesh-ip-identities-sync-timeout".as_ref(),
        "2s".as_ref(),
    ]);
    let mut agent = Agent::start_with("cluster1", 1, &etcd, &with_timeout);
    unreachable_cluster2(&agent);
    ready(&agent).await;
    assert_eq!(cni("ADD", "late-0", Some(&pod.path()), &conf(&agent)).1, 0);
    let done = eventually("the regeneration ends", Duration::from_secs(20), || {
        regeneration_of(&agent, "late-0/eth0").filter(|r| r["result"] != "waiting")
    })
    .await;
    // A typed outcome: the result, and the cluster still pending with what it lacked.
    assert_eq!(done["result"], "timed-out", "{done}");
    let pending = done["pending"].as_array().unwrap();
    assert!(
        pending
            .iter()
            .any(|p| p["cluster"] == "cluster2" && !p["resources"].as_array().unwrap().is_empty()),
        "{done}"
    );
    assert_eq!(done["decided_by"], "built-in default");
    assert!(
        done["verdict"].as_str().unwrap().contains("wait 2s"),
        "{done}"
    );
    assert!(done["waited_ms"].as_u64().unwrap() >= 1_900, "{done}");
    let warned = agent
        .log()
        .matches("cross-cluster connections may be disrupted")
        .count();
    assert_eq!(warned, 1, "logged once");

    agent.restart(&with_timeout);
    ready(&agent).await;
    eventually(
        "the restored endpoint regenerates",
        Duration::from_secs(20),
        || regeneration_of(&agent, "late-0/eth0").filter(|r| r["reason"] == "restore"),
    )
    .await;
}

fn policy_of(agent: &Agent, key: &str) -> Option<Value> {
    let listed = agent.json(&["endpoint", "list"])?;
    let e = listed.as_array()?.iter().find(|e| e["key"] == key)?;
    Some(e["policy"].clone())
}

#[tokio::test]
async fn policies_are_followed_and_admit_identities_as_they_arrive() {
    let etcd = Etcd::start().await;
    let node = Netns::new("weft-cni-pol-node");
    let (web, client) = (
        Netns::new("weft-cni-pol-web"),
        Netns::new("weft-cni-pol-client"),
    );
    let policies = tempfile::tempdir().unwrap();
    std::fs::write(
        policies.path().join("web.yaml"),
        support::cni::WEB_FROM_CLIENTS,
    )
    .unwrap();
    let node_path = node.path();
    let mut f = flags(&node_path).to_vec();
    f.extend::<[&std::ffi::OsStr; 2]>(["--policy-dir".as_ref(), policies.path().as_os_str()]);
    let agent = Agent::start_with("cluster1", 1, &etcd, &f);
    ready(&agent).await;

    assert_eq!(cni("ADD", "web", Some(&web.path()), &conf(&agent)).1, 0);
    let p = eventually("web's policy", Duration::from_secs(10), || {
        policy_of(&agent, "web/eth0")
    })
    .await;
    assert_eq!(p["ingress_enforced"], true, "{p}");
    assert_eq!(p["egress_enforced"], false, "{p}");
    assert_eq!(p["selected_by"], json!(["shop/web-from-clients"]));
    assert_eq!(p["ingress"], json!([]), "no client yet: nothing admitted");

    let mut client_conf = conf(&agent);
    client_conf["runtimeConfig"]["labels"] = json!({"app": "client"});
    let (added, status) = cni("ADD", "client", Some(&client.path()), &client_conf);
    assert_eq!(status, 0, "{added}");
    let client_id = eventually("the client's identity", Duration::from_secs(10), || {
        agent
            .json(&["endpoint", "list"])?
            .as_array()?
            .iter()
            .find(|e| e["key"] == "client/eth0")?["identity"]
            .as_u64()
    })
    .await;
    let admitted = eventually(
        "web admits the client's identity",
        Duration::from_secs(10),
        || {
            let p = policy_of(&agent, "web/eth0")?;
            p["ingress"]
                .as_array()?
                .iter()
                .find(|a| a["identity"].as_u64() == Some(client_id))
                .cloned()
        },
    )
    .await;
    assert_eq!(
        (admitted["protocol"].as_u64(), admitted["first"].as_u64()),
        (Some(6), Some(80))
    );
    assert_eq!(
        policy_of(&agent, "client/eth0").unwrap()["ingress_enforced"],
        false,
        "not selected"
    );

    std::fs::write(policies.path().join("bad.yaml"), "kind: Nonsense\n").unwrap();
    let status = eventually("the bad file refused", Duration::from_secs(10), || {
        agent.status_json().filter(|s| {
            !s["policies"]["refused"]
                .as_array()
                .is_none_or(Vec::is_empty)
        })
    })
    .await;
    assert_eq!(
        status["policies"]["refused"][0]["file"], "bad.yaml",
        "{status}"
    );
    assert_eq!(
        status["policies"]["loaded"],
        json!(["shop/web-from-clients"]),
        "the others stay"
    );

    std::fs::remove_file(policies.path().join("web.yaml")).unwrap();
    eventually("web is open again", Duration::from_secs(10), || {
        policy_of(&agent, "web/eth0").filter(|p| p["ingress_enforced"] == false)
    })
    .await;
}
