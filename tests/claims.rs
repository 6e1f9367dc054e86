//! A remote cluster speaks only for its own nodes, identities and prefixes: a real
//! `weftd` of cluster1 meshed with an honest cluster2 and a hostile cluster3, each a
//! real etcd. cluster3's lies are refused, counted and shown; cluster2's state stands. The control removes cluster2:
//! the same lies, no longer conflicting, are admitted (they were held back, not
//! dropped), which shows the refusals were what kept them out.

use weft_testkit as support;

use serde_json::Value;
use std::time::Duration;
use support::agent::{cluster_config, weftd, Agent};
use support::{eventually, write_config_file, Etcd};

const MASK_24: &str = "////AA==";

fn node(cluster: &str, id: u32, name: &str, ip: &str, pods: Option<&str>) -> String {
    let cidr = pods.map_or("null".to_owned(), |net| {
        format!(r#"{{"IP":"{net}","Mask":"{MASK_24}"}}"#)
    });
    format!(
        r#"{{"Name":"{name}","Cluster":"{cluster}","ClusterID":{id},"IPAddresses":[{{"Type":"InternalIP","IP":"{ip}"}}],"IPv4AllocCIDR":{cidr}}}"#
    )
}

fn entry(ip: &str, mask: Option<&str>, id: u32, host: &str) -> String {
    let mask = mask.map_or("null".to_owned(), |m| format!("\"{m}\""));
    format!(r#"{{"IP":"{ip}","Mask":{mask},"HostIP":"{host}","ID":{id},"Key":0}}"#)
}

/// The agent's ipcache, prefix → (identity, tunnel endpoint).
fn ipcache(agent: &Agent) -> Option<Vec<(String, u64, String)>> {
    let list = agent.json(&["ipcache", "list"])?;
    let rows = list.as_array()?.iter().map(|e| {
        (
            e["prefix"].as_str().unwrap_or_default().to_owned(),
            e["identity"].as_u64().unwrap_or_default(),
            e["tunnel_endpoint"].as_str().unwrap_or_default().to_owned(),
        )
    });
    Some(rows.collect())
}

fn get(rows: &[(String, u64, String)], prefix: &str) -> Option<(u64, String)> {
    rows.iter()
        .find(|(p, _, _)| p == prefix)
        .map(|(_, id, t)| (*id, t.clone()))
}

fn refused(status: &Value, cluster: &str) -> (u64, u64) {
    let r = &status["totals"]["refused_claims"][cluster];
    (
        r["refused"].as_u64().unwrap_or(0),
        r["held_back"].as_u64().unwrap_or(0),
    )
}

#[tokio::test]
async fn a_hostile_cluster_cannot_take_another_clusters_nodes_prefixes_or_identities() {
    let (e1, e2, e3) = (
        Etcd::start().await,
        Etcd::start().await,
        Etcd::start().await,
    );
    cluster_config("cluster2", 2, &e2, false);
    cluster_config("cluster3", 3, &e3, false);
    // cluster2, honest: a node with its pod CIDR, and a pod on it.
    e2.put_pairs(&[
        (
            "cilium/state/nodes/v1/cluster2/n1",
            &node("cluster2", 2, "n1", "10.20.0.1", Some("10.202.0.0")),
        ),
        (
            "cilium/state/ip/v1/default/10.202.0.5",
            &entry("10.202.0.5", None, 0x2_0005, "10.20.0.1"),
        ),
    ])
    .await;
    // cluster3: one honest node and pod, then lies about cluster1 and cluster2.
    e3.put_pairs(&[
        (
            "cilium/state/nodes/v1/cluster3/n1",
            &node("cluster3", 3, "n1", "10.30.0.1", Some("10.203.0.0")),
        ),
        (
            "cilium/state/ip/v1/default/10.203.0.8",
            &entry("10.203.0.8", None, 0x3_0008, "10.30.0.1"),
        ),
        // Our node's address, and cluster2's node's.
        (
            "cilium/state/nodes/v1/cluster3/evil",
            &node("cluster3", 3, "evil", "192.0.2.1", None),
        ),
        (
            "cilium/state/nodes/v1/cluster3/thief",
            &node("cluster3", 3, "thief", "10.20.0.1", None),
        ),
        // cluster2's pod, our node's address, everything.
        (
            "cilium/state/ip/v1/default/10.202.0.5",
            &entry("10.202.0.5", None, 0x3_0005, "10.30.0.1"),
        ),
        (
            "cilium/state/ip/v1/default/192.0.2.1",
            &entry("192.0.2.1", None, 0x3_0009, "10.30.0.1"),
        ),
        (
            "cilium/state/ip/v1/default/0.0.0.0/0",
            &entry("0.0.0.0", Some("AAAAAA=="), 0x3_0001, "10.30.0.1"),
        ),
        // Identities not its own: reserved remote-node, and cluster2's.
        (
            "cilium/state/ip/v1/default/10.203.0.6",
            &entry("10.203.0.6", None, 6, "10.30.0.1"),
        ),
        (
            "cilium/state/ip/v1/default/10.203.0.7",
            &entry("10.203.0.7", None, 0x2_0007, "10.30.0.1"),
        ),
    ])
    .await;

    // No pod CIDR: endpoints would turn on forwarding in this (the host's) namespace.
    let agent = Agent::start("cluster1", 1, &e1);
    // cluster3 joins a working mesh. (The order of the two clusters' entries does not
    // matter, a unit property test shows; between two remote clusters' *nodes* no
    // evidence decides, and the node that holds an address keeps it.)
    write_config_file(agent.mesh_dir.path(), "cluster2", &e2.url());
    eventually("cluster2 ready", Duration::from_secs(30), || {
        let s = agent.status_json()?;
        (s["clusters"][0]["ready"] == true).then_some(())
    })
    .await;
    write_config_file(agent.mesh_dir.path(), "cluster3", &e3.url());

    let status = eventually(
        "both clusters ready, the lies counted",
        Duration::from_secs(30),
        || {
            let s = agent.status_json()?;
            let ready = s["clusters"]
                .as_array()?
                .iter()
                .filter(|c| c["ready"] == true)
                .count();
            (ready == 2 && refused(&s, "cluster3") == (7, 7)).then_some(s)
        },
    )
    .await;
    let rows = ipcache(&agent).unwrap();
    assert_eq!(
        get(&rows, "192.0.2.1/32").unwrap().0,
        1,
        "our node is still this host"
    );
    assert_eq!(
        get(&rows, "10.20.0.1/32"),
        Some((6, "10.20.0.1".into())),
        "cluster2's node is still cluster2's"
    );
    assert_eq!(
        get(&rows, "10.202.0.5/32"),
        Some((0x2_0005, "10.20.0.1".into())),
        "cluster2's pod is still cluster2's"
    );
    for lie in [
        "10.201.0.9/32",
        "0.0.0.0/0",
        "10.203.0.6/32",
        "10.203.0.7/32",
    ] {
        assert_eq!(get(&rows, lie), None, "{lie} refused");
    }
    assert_eq!(
        get(&rows, "10.203.0.8/32"),
        Some((0x3_0008, "10.30.0.1".into())),
        "cluster3's own pod is admitted"
    );
    assert_eq!(
        refused(&status, "cluster2"),
        (0, 0),
        "nothing of cluster2 refused"
    );
    let text = weftd(&[
        "status".as_ref(),
        "--state-dir".as_ref(),
        agent.state.path().as_os_str(),
    ]);
    assert!(
        text.contains("cluster3: 7 claims refused (7 held back now)"),
        "{text}"
    );

    // The control: without cluster2, nothing conflicts with the node and pod cluster3
    // claimed of it, and they are admitted: they were held back, not dropped.
    std::fs::remove_file(agent.mesh_dir.path().join("cluster2")).unwrap();
    let rows = eventually(
        "cluster3 takes what cluster2 left",
        Duration::from_secs(30),
        || {
            let rows = ipcache(&agent)?;
            (get(&rows, "10.202.0.5/32")? == (0x3_0005, "10.30.0.1".into())).then_some(rows)
        },
    )
    .await;
    assert_eq!(
        get(&rows, "10.20.0.1/32").unwrap().0,
        6,
        "the thief node is admitted"
    );
    assert_eq!(get(&rows, "192.0.2.1/32").unwrap().0, 1, "ours never is");
    let s = agent.status_json().unwrap();
    assert_eq!(
        refused(&s, "cluster3").1,
        5,
        "five lies still held back: {s}"
    );
}
