//! `weftd` end to end: two agents in two clusters (one etcd each) publish their nodes
//! and see each other; the status JSON contract; the node record outlives etcd's loss;
//! plugins packaged with `weftd plugin`, loaded, called and reloaded by the agent;
//! `weftd cluster-config`.

use weft_testkit as support;

use std::time::Duration;
use support::agent::{cluster_config, package, weftd, Agent, VendorKey};
use support::{eventually, Etcd};

#[tokio::test]
async fn two_agents_in_two_clusters_see_each_other() {
    let (e1, e2) = (Etcd::start().await, Etcd::start().await);
    cluster_config("cluster1", 1, &e1, false);
    cluster_config("cluster2", 2, &e2, true);
    let a1 = Agent::start("cluster1", 1, &e1);
    let a2 = Agent::start("cluster2", 2, &e2);
    support::write_config_file(a1.mesh_dir.path(), "cluster2", &e2.url());
    support::write_config_file(a2.mesh_dir.path(), "cluster1", &e1.url());

    for (agent, own, remote, id) in [
        (&a1, "cluster1", "cluster2", 2),
        (&a2, "cluster2", "cluster1", 1),
    ] {
        let status = eventually(
            &format!("{own} sees {remote}'s node"),
            Duration::from_secs(30),
            || {
                agent
                    .status_json()
                    .filter(|s| s["clusters"][0]["counts"]["nodes"] == 1)
            },
        )
        .await;
        assert_eq!(status["cluster"], own);
        let c = &status["clusters"][0];
        let keys: Vec<&String> = c.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "connected",
                "counts",
                "id",
                "last_error",
                "malformed",
                "name",
                "ready",
                "reconnects",
                "synced",
                "synced_after_ms"
            ],
            "the status contract"
        );
        assert_eq!(
            (&c["name"], &c["id"], &c["connected"]),
            (&remote.into(), &id.into(), &true.into())
        );
        assert_eq!(c["synced"]["nodes"], true);
        assert_eq!(c["last_error"], serde_json::Value::Null);
    }
    // The remote node is in the ipcache next to our own, resolved.
    let rows = a1.json(&["ipcache", "list"]).unwrap();
    let row = |prefix: &str| {
        let r = rows
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["prefix"] == prefix);
        r.unwrap_or_else(|| panic!("{prefix} in {rows}")).clone()
    };
    let remote = row("192.0.2.2/32");
    assert_eq!(
        (&remote["identity"], &remote["source"]),
        (&6.into(), &"clustermesh".into())
    );
    assert_eq!(remote["tunnel_endpoint"], "192.0.2.2");
    let own = row("192.0.2.1/32");
    assert_eq!(
        (&own["identity"], &own["source"]),
        (&1.into(), &"local".into())
    );
    let totals = &a1.status_json().unwrap()["totals"];
    assert_eq!(
        (&totals["nodes"], &totals["ipcache"]),
        (&2.into(), &2.into())
    );

    // cluster2 announces canaries but nobody writes the ipcache one: pending, visibly.
    let s = a1.status_json().unwrap();
    assert_eq!(s["clusters"][0]["synced"]["ipcache"], false);
    assert_eq!(s["clusters"][0]["ready"], false);
    // cluster1 has no canaries: everything synced.
    let s = a2.status_json().unwrap();
    assert_eq!(s["clusters"][0]["ready"], true);
}

#[tokio::test]
async fn node_record_is_published_again_after_etcd_loses_it() {
    let mut etcd = Etcd::start().await;
    let _agent = Agent::start("cluster1", 1, &etcd);
    let key = "cilium/state/nodes/v1/cluster1/cluster1-node";
    let get = |etcd: &Etcd| {
        let url = etcd.url();
        async move {
            let mut c = etcd_client::Client::connect([url], None).await.ok()?;
            let r = c.get(key, None).await.ok()?;
            let kv = r.kvs().first()?;
            Some((kv.value().to_vec(), kv.lease()))
        }
    };
    let deadline = Duration::from_secs(30);
    let (value, lease) = support::within("node published", deadline, async {
        loop {
            if let Some(v) = get(&etcd).await {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert_ne!(lease, 0, "the record lives on a lease");
    let node: weft_model::Node = serde_json::from_slice(&value).unwrap();
    assert_eq!(
        (node.name.as_str(), node.cluster.as_str(), node.cluster_id),
        ("cluster1-node", "cluster1", 1)
    );

    etcd.restart_empty().await;
    support::within("node published again on a new etcd", deadline, async {
        loop {
            if get(&etcd).await.is_some() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn an_agent_loads_signed_plugins_calls_their_hooks_and_reloads_them() {
    let (e1, e2) = (Etcd::start().await, Etcd::start().await);
    cluster_config("cluster1", 1, &e1, false);
    cluster_config("cluster2", 2, &e2, false);
    support::seed_cluster(&e2, "cluster2", 2, 3).await;

    let vendor = VendorKey::new();
    let (key, trusted) = (&vendor.key, &vendor.trusted);
    let plugins = tempfile::tempdir().unwrap();
    package(
        plugins.path(),
        "sync-events",
        "sync_events",
        "1.0.0",
        5,
        key,
    );
    package(
        plugins.path(),
        "regeneration-policy",
        "regeneration_policy",
        "1.0.0",
        0,
        key,
    );

    let a1 = Agent::start_with(
        "cluster1",
        1,
        &e1,
        &[
            "--plugin-dir".as_ref(),
            plugins.path().as_os_str(),
            "--plugin-trusted-keys".as_ref(),
            trusted.as_os_str(),
        ],
    );
    support::write_config_file(a1.mesh_dir.path(), "cluster2", &e2.url());

    let plugin = |s: &serde_json::Value, name: &str| {
        s["plugins"]["loaded"]
            .as_array()?
            .iter()
            .find(|p| p["name"] == name)
            .cloned()
    };
    let status = eventually(
        "the sync hooks ran for cluster2",
        Duration::from_secs(30),
        || {
            let s = a1.status_json()?;
            let p = plugin(&s, "sync-events")?;
            (p["counters"]["sync_events_identities"] == 1).then_some(s)
        },
    )
    .await;
    let p = plugin(&status, "sync-events").unwrap();
    let keys: Vec<&String> = p.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "calls",
            "counters",
            "digest",
            "failure_causes",
            "failures",
            "last_error",
            "latency",
            "name",
            "priority",
            "quarantines",
            "signed_by",
            "state",
            "version",
            "wit"
        ],
        "the plugin status contract"
    );
    assert!(
        p["signed_by"].as_str().unwrap().starts_with("key-"),
        "named after the trusted key: {p}"
    );
    assert_eq!(p["wit"], weft_plugins::WIT_VERSION);
    assert_eq!(
        status["plugins"]["trust"],
        "signatures required (1 trusted keys)"
    );
    let digest =
        weft_plugins::digest_hex(&std::fs::read(support::plugin_wasm("sync_events")).unwrap());
    assert_eq!(
        (&p["version"], &p["digest"], &p["state"], &p["failures"]),
        (&"1.0.0".into(), &digest.into(), &"active".into(), &0.into())
    );
    // The host endpoint's start-up wait was decided by the shipped policy plugin.
    eventually(
        "the policy plugin decided the host endpoint's wait",
        Duration::from_secs(30),
        || {
            a1.log()
                .contains("\"decided_by\":\"regeneration-policy\"")
                .then_some(())
        },
    )
    .await;

    // An unsigned plugin is refused; the agent keeps serving with the others.
    std::fs::copy(
        support::plugin_wasm("critical_clusters"),
        plugins.path().join("cc.wasm"),
    )
    .unwrap();
    let unsigned = plugins.path().join("critical.toml");
    std::fs::write(&unsigned, "name = \"critical\"\nversion = \"1.0.0\"\nwasm = \"cc.wasm\"\nsha256 = \"\"\nconfig = \"cluster2\"\n").unwrap();
    weftd(&["plugin".as_ref(), "seal".as_ref(), unsigned.as_os_str()]);
    let s = eventually(
        "the unsigned plugin refused",
        Duration::from_secs(30),
        || {
            a1.status_json().filter(|s| {
                s["plugins"]["refused"]
                    .as_array()
                    .is_some_and(|r| !r.is_empty())
            })
        },
    )
    .await;
    let error = s["plugins"]["refused"][0]["error"].as_str().unwrap();
    assert!(error.contains("unsigned"), "{error}");

    // A new version is picked up without a restart.
    package(
        plugins.path(),
        "regeneration-policy",
        "regeneration_policy",
        "1.1.0",
        0,
        key,
    );
    eventually("version 1.1.0 running", Duration::from_secs(30), || {
        let s = a1.status_json()?;
        (plugin(&s, "regeneration-policy")?["version"] == "1.1.0").then_some(())
    })
    .await;
    let text = weftd(&[
        "status".as_ref(),
        "--state-dir".as_ref(),
        a1.state.path().as_os_str(),
    ]);
    assert!(text.contains("plugins: 2 loaded, 1 refused"), "{text}");
    assert!(text.contains("regeneration-policy    1.1.0"), "{text}");
}

/// `weftd cluster-config` writes the established config JSON, with the largest
/// cluster ID it is told, and then the marker that makes the config required.
#[tokio::test]
async fn cluster_config_writes_the_config_and_the_marker() {
    let etcd = Etcd::start().await;
    let url = etcd.url();
    let args = [
        "cluster-config",
        "--cluster-name",
        "cluster7",
        "--cluster-id",
        "7",
        "--kvstore-endpoints",
        &url,
        "--synced-canaries",
        "--max-connected-clusters",
        "511",
    ];
    weftd(&args.map(std::ffi::OsStr::new));
    let client = etcd.client().await;
    let get = |key: &'static str| {
        let mut c = client.clone();
        async move {
            let r = c.get(key, None).await.unwrap();
            r.kvs().first().map(|kv| kv.value_str().unwrap().to_owned())
        }
    };
    let config: serde_json::Value =
        serde_json::from_str(&get("cilium/cluster-config/cluster7").await.unwrap()).unwrap();
    assert_eq!(config["id"], 7);
    assert_eq!(config["capabilities"]["syncedCanaries"], true);
    assert_eq!(config["capabilities"]["maxConnectedClusters"], 511);
    assert!(get("cilium/.has-cluster-config").await.is_some());
}
