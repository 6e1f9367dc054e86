//! Cluster mesh configuration and layouts against real etcd: config files, cluster
//! configs and IDs, canary / immediate / cached layouts, malformed values.

use weft_testkit as support;

use std::time::Duration;
use support::{node_json, put_cluster_config, seed_cluster, within, Etcd, Lab};
use tokio::time::Instant;
use weft_clustermesh::{self as clustermesh, ClusterMesh, SyncCallbacks};

#[tokio::test]
async fn immediate_mode_without_a_cluster_config() {
    let etcd = Etcd::start().await;
    seed_cluster(&etcd, "c2", 2, 4).await;
    let lab = Lab::start(256);
    lab.add("c2", &etcd.url());
    let s = lab.until("c2 ready", "c2", |s| s.ready).await;
    assert_eq!(s.id, None, "no config, no announced ID");
    assert!(s.connected && s.last_error.is_none(), "{s:?}");
}

#[tokio::test]
async fn canary_mode_reads_each_resource_only_after_its_canary() {
    let etcd = Etcd::start().await;
    put_cluster_config(
        &etcd,
        "c2",
        r#"{"id":2,"capabilities":{"syncedCanaries":true}}"#,
    )
    .await;
    seed_cluster(&etcd, "c2", 2, 4).await;
    etcd.put("cilium/synced/c2/cilium/state/services/v1", "t")
        .await;
    let lab = Lab::start(256);
    lab.add("c2", &etcd.url());
    let s = lab
        .until("services synced", "c2", |s| s.synced.services)
        .await;
    assert_eq!(s.id, Some(2));
    assert_eq!(
        (s.counts.nodes, s.counts.ipcache, s.counts.identities),
        (0, 0, 0)
    );
    for base in [
        "cilium/state/nodes/v1",
        "cilium/state/ip/v1",
        "cilium/state/identities/v1",
    ] {
        etcd.put(&format!("cilium/synced/c2/{base}"), "t").await;
    }
    let s = lab.until("c2 ready", "c2", |s| s.ready).await;
    assert_eq!(support::counts(&s), (4, 4, 4, 4));
}

#[tokio::test]
async fn cached_layout_is_read_from_the_cache_prefixes() {
    let etcd = Etcd::start().await;
    put_cluster_config(
        &etcd,
        "c2",
        r#"{"id":2,"capabilities":{"syncedCanaries":true,"cached":true}}"#,
    )
    .await;
    // The plain layout holds decoys that must not be read.
    seed_cluster(&etcd, "c2", 2, 3).await;
    let kv = vec![
        (
            "cilium/cache/nodes/v1/c2/n1".to_owned(),
            node_json("c2", 2, "n1", "10.2.0.1"),
        ),
        (
            "cilium/cache/ip/v1/c2/10.2.0.1".to_owned(),
            support::ip_json("10.2.0.1", 131172),
        ),
        (
            "cilium/cache/identities/v1/c2/id/131172".to_owned(),
            "k8s:app=x;".to_owned(),
        ),
        (
            "cilium/cache/services/v1/c2/ns/s".to_owned(),
            support::service_json("c2", 2, "ns", "s"),
        ),
    ];
    etcd.put_all(&kv).await;
    for t in ["nodes", "ip", "identities", "services"] {
        etcd.put(&format!("cilium/synced/c2/cilium/cache/{t}/v1"), "t")
            .await;
    }
    let lab = Lab::start(256);
    lab.add("c2", &etcd.url());
    let s = lab.until("c2 ready", "c2", |s| s.ready).await;
    assert_eq!(support::counts(&s), (1, 1, 1, 1));
}

#[tokio::test]
async fn a_required_but_missing_cluster_config_is_an_error_not_a_fallback() {
    let etcd = Etcd::start().await;
    seed_cluster(&etcd, "c2", 2, 2).await;
    etcd.put("cilium/.has-cluster-config", "true").await;
    let lab = Lab::start(256);
    lab.add("c2", &etcd.url());
    // Lab's cluster_config_timeout is 2 s: first "waiting", then refused.
    let s = lab.until_error("c2", "required").await;
    assert!(
        !s.ready && s.counts.nodes == 0,
        "no fallback to the immediate mode: {s:?}"
    );
    let report = within(
        "a refused cluster does not hold waiters",
        Duration::from_secs(30),
        lab.mesh
            .nodes_synced(Instant::now() + Duration::from_secs(600)),
    )
    .await
    .unwrap();
    assert_eq!(report.disconnected, ["c2"]);
    // The config arrives: the cluster is accepted and syncs.
    put_cluster_config(&etcd, "c2", r#"{"id":2}"#).await;
    lab.until("accepted once the config exists", "c2", |s| s.ready)
        .await;
}

#[tokio::test]
async fn cluster_id_checks_refuse_with_a_visible_reason() {
    let etcd = Etcd::start().await;
    let lab = Lab::start(256);
    for (cluster, config, reason) in [
        ("own-id", r#"{"id":1}"#, "own ID"),
        ("too-big", r#"{"id":300}"#, "outside 1..=255"),
        (
            "zero",
            r#"{"id":0,"capabilities":{"cached":true}}"#,
            "outside",
        ),
        ("garbage", r#"{"id":"x"}"#, "malformed cluster config"),
    ] {
        put_cluster_config(&etcd, cluster, config).await;
        lab.add(cluster, &etcd.url());
        let s = lab.until_error(cluster, reason).await;
        assert!(!s.connected && !s.ready);
    }
    lab.add("local", &etcd.url());
    lab.until_error("local", "own name").await;
}

#[tokio::test]
async fn a_changed_cluster_id_is_refused_until_the_cluster_is_re_added() {
    let etcd = Etcd::start().await;
    put_cluster_config(&etcd, "c2", r#"{"id":2}"#).await;
    let lab = Lab::start(256);
    lab.add("c2", &etcd.url());
    lab.until("c2 ready", "c2", |s| s.ready).await;
    put_cluster_config(&etcd, "c2", r#"{"id":7}"#).await;
    let s = lab.until_error("c2", "changed from 2 to 7").await;
    assert!(!s.connected);
}

#[tokio::test]
async fn malformed_values_are_counted_and_skipped_without_losing_the_rest() {
    let etcd = Etcd::start().await;
    seed_cluster(&etcd, "c2", 2, 5).await;
    etcd.put("cilium/state/nodes/v1/c2/broken", "{not json")
        .await;
    etcd.put(
        "cilium/state/nodes/v1/c2/alien",
        &node_json("c9", 9, "alien", "10.9.0.1"),
    )
    .await;
    etcd.put("cilium/state/identities/v1/id/notanumber", "k8s:a=b;")
        .await;
    etcd.put(
        "cilium/state/ip/v1/default/10.0.0.9",
        r#"{"IP":"10.0.0.8","ID":3}"#,
    )
    .await;
    let lab = Lab::start(2);
    lab.add("c2", &etcd.url());
    let s = lab.until("c2 ready", "c2", |s| s.ready).await;
    assert_eq!(s.malformed, 4);
    assert_eq!(support::counts(&s), (5, 5, 5, 5));
    assert!(s.connected, "malformed values do not break the connection");

    // A good value turned bad goes away (its state is unknown); the others stay.
    etcd.put("cilium/state/nodes/v1/c2/node-0", "[]").await;
    let s = lab
        .until("bad update counted", "c2", |s| s.malformed == 5)
        .await;
    assert_eq!(s.counts.nodes, 4);
    assert!(s
        .last_error
        .unwrap()
        .contains("cilium/state/nodes/v1/c2/node-0"));
}

#[tokio::test]
async fn config_files_added_changed_and_removed() {
    let (one, two) = (Etcd::start().await, Etcd::start().await);
    seed_cluster(&one, "c2", 2, 5).await;
    seed_cluster(&two, "c2", 2, 3).await;
    let lab = Lab::start(256);
    lab.add("c2", &one.url());
    lab.until("c2 from the first etcd", "c2", |s| {
        s.ready && s.counts.nodes == 5
    })
    .await;

    // Changed: reconnect to the other etcd; what it lacks is drained.
    lab.add("c2", &two.url());
    lab.until("c2 from the second etcd", "c2", |s| {
        s.counts.nodes == 3 && s.counts.services == 3
    })
    .await;
    assert_eq!(lab.recorder.deletes_of("c2"), 8);
    assert_eq!(lab.recorder.keys_of("c2"), 12);

    // A broken file: refused with the file named, the other clusters untouched.
    std::fs::write(lab.dir.path().join("c3"), "endpoints: []\n").unwrap();
    let s = lab
        .until("c3 refused", "c3", |s| s.last_error.is_some())
        .await;
    assert!(s.last_error.unwrap().contains("lists no endpoints"));
    assert!(lab.status_of("c2").unwrap().ready);

    lab.remove("c2");
    support::eventually("c2 gone", Duration::from_secs(30), || {
        lab.status_of("c2").is_none().then_some(())
    })
    .await;
    assert_eq!(lab.recorder.keys_of("c2"), 0);
}

#[tokio::test]
async fn a_tls_cluster_is_read_with_the_files_its_config_names() {
    let etcd = Etcd::start_tls(support::Pki::new()).await;
    seed_cluster(&etcd, "c2", 2, 3).await;
    let pki = etcd.tls.as_ref().unwrap();
    let lab = Lab::start(256);
    let file = |with_client_cert: bool| {
        let mut text = format!(
            "endpoints:\n- {}\ntrusted-ca-file: {}\n",
            etcd.url(),
            pki.path("ca.crt").display()
        );
        if with_client_cert {
            text += &format!(
                "cert-file: {}\nkey-file: {}\n",
                pki.path("client.crt").display(),
                pki.path("client.key").display()
            );
        }
        std::fs::write(lab.dir.path().join("c2"), text).unwrap();
    };
    // Control: without the client certificate etcd refuses the connection.
    file(false);
    let s = lab
        .until("an error without a client certificate", "c2", |s| {
            s.last_error.is_some()
        })
        .await;
    assert!(!s.connected && s.counts.nodes == 0, "{s:?}");
    file(true);
    let s = lab.until("c2 ready over TLS", "c2", |s| s.ready).await;
    assert_eq!(support::counts(&s), (3, 3, 3, 3));
}

#[tokio::test]
async fn a_cluster_at_its_key_limit_has_new_keys_refused_and_named() {
    let etcd = Etcd::start().await;
    seed_cluster(&etcd, "c2", 2, 5).await; // 5 of each resource: 20 keys
    let recorder = support::Recorder::new();
    let config = clustermesh::Config {
        cluster_name: "local".into(),
        cluster_id: 1,
        max_keys_per_cluster: 12,
        ..clustermesh::Config::default()
    };
    let mesh = ClusterMesh::new(config, recorder.clone(), SyncCallbacks::default());
    let endpoints = weft_kvstore::Endpoints {
        urls: vec![etcd.url()],
        ..Default::default()
    };
    mesh.upsert_cluster("c2", Ok(endpoints)).await;
    let s = support::eventually("c2 ready", Duration::from_secs(30), || {
        mesh.status().into_iter().find(|s| s.ready)
    })
    .await;
    let c = s.counts;
    assert_eq!(c.nodes + c.ipcache + c.identities + c.services, 12, "{c:?}");
    assert_eq!(s.malformed, 8, "each key past the limit counted");
    assert!(
        s.last_error
            .as_deref()
            .unwrap()
            .contains("limit of 12 keys"),
        "{:?}",
        s.last_error
    );
    assert!(s.connected, "the limit does not break the connection");
    assert_eq!(
        recorder.keys_of("c2"),
        12,
        "the observer saw only what was held"
    );
    let expected = recorder.expected.lock().unwrap().clone();
    assert_eq!(
        expected.get(&("c2".into(), weft_clustermesh::Resource::IpCache)),
        Some(&5),
        "each list announced its size: {expected:?}"
    );
    mesh.stop().await;
}

/// A wrong CA or an expired certificate is a configuration problem: the status says
/// which, naming the file, while the connection is retried; the right file connects.
#[tokio::test]
async fn a_wrong_ca_or_an_expired_certificate_is_named_in_the_status() {
    let etcd = Etcd::start_tls(support::Pki::new()).await;
    seed_cluster(&etcd, "c2", 2, 3).await;
    let pki = etcd.tls.as_ref().unwrap();
    let stranger = support::Pki::new();
    // etcd reads its certificate at each handshake: started valid, then expired.
    let expired = Etcd::start_tls(support::Pki::new()).await;
    expired.tls.as_ref().unwrap().expire_server_certificate();
    let lab = Lab::start(256);
    let write = |name: &str, url: &str, ca: &std::path::Path, pki: &support::Pki| {
        let text = format!(
            "endpoints:\n- {url}\ntrusted-ca-file: {}\ncert-file: {}\nkey-file: {}\n",
            ca.display(),
            pki.path("client.crt").display(),
            pki.path("client.key").display()
        );
        std::fs::write(lab.dir.path().join(name), text).unwrap();
    };
    write("c2", &etcd.url(), &stranger.path("ca.crt"), pki);
    let s = lab.until_error("c2", "not signed by the trusted CA").await;
    let error = s.last_error.unwrap();
    assert!(
        error.contains(&stranger.path("ca.crt").display().to_string()),
        "{error}"
    );
    assert!(!s.connected);

    let epki = expired.tls.as_ref().unwrap();
    write("c3", &expired.url(), &epki.path("ca.crt"), epki);
    let s = lab
        .until_error("c3", "server's certificate has expired")
        .await;
    assert!(!s.connected);

    // The right CA: c2 connects (the wrong one was a configuration, not a blip, but
    // the cluster was never given up).
    write("c2", &etcd.url(), &pki.path("ca.crt"), pki);
    let s = lab.until("c2 ready over TLS", "c2", |s| s.ready).await;
    assert_eq!(support::counts(&s), (3, 3, 3, 3));
}
