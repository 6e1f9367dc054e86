//! The state stage end to end with real etcd: a remote cluster's nodes, identities and
//! ip entries appear resolved in the ipcache, and disappear when the cluster is removed.

use weft_testkit as support;

use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::{eventually, put_cluster_config, Etcd};
use weft_clustermesh::{self as clustermesh, ClusterMesh, SyncCallbacks};
use weft_state::ipcache::{Change, Listener, Prefix, Source};
use weft_state::node::NodeId;
use weft_state::State;

#[derive(Default)]
struct Deletes(Mutex<Vec<Prefix>>);

impl Listener for Deletes {
    fn on_change(&self, c: &Change<'_>) {
        if c.new.is_none() {
            self.0.lock().unwrap().push(c.prefix);
        }
    }
}

#[tokio::test]
async fn remote_state_is_resolved_in_the_ipcache_and_removed_with_its_cluster() {
    let etcd = Etcd::start().await;
    put_cluster_config(&etcd, "c2", r#"{"id":2}"#).await;
    let kv = [
        (
            "cilium/state/nodes/v1/c2/n1",
            r#"{"Name":"n1","Cluster":"c2","ClusterID":2,"EncryptionKey":5,
               "IPAddresses":[{"Type":"InternalIP","IP":"172.18.0.3"}],"IPv4HealthIP":"10.2.0.2"}"#,
        ),
        (
            "cilium/state/ip/v1/default/10.2.0.10",
            r#"{"IP":"10.2.0.10","HostIP":"172.18.0.3","ID":131172,"Key":5,"K8sNamespace":"ns","K8sPodName":"web-0"}"#,
        ),
        (
            "cilium/state/identities/v1/id/131172",
            "k8s:app=web;k8s:io.cilium.k8s.policy.cluster=c2;",
        ),
        // Cluster ID 3 in its bits: refused, counted, the rest unaffected.
        ("cilium/state/identities/v1/id/196609", "k8s:app=alien;"),
        // A remote local-scope (CIDR) identity: refused, counted.
        (
            "cilium/state/ip/v1/default/10.2.0.0/24",
            r#"{"IP":"10.2.0.0","Mask":"////AA==","ID":16777217}"#,
        ),
    ];
    etcd.put_pairs(&kv).await;

    let state = Arc::new(State::new(NodeId {
        cluster: "local".into(),
        name: "me".into(),
    }));
    let deletes = Arc::new(Deletes::default());
    state.ipcache.add_listener(deletes.clone());
    let config = clustermesh::Config {
        cluster_name: "local".into(),
        cluster_id: 1,
        ..clustermesh::Config::default()
    };
    let mesh = ClusterMesh::new(config, state.clone(), SyncCallbacks::default());
    let endpoints = weft_kvstore::Endpoints {
        urls: vec![etcd.url()],
        ..Default::default()
    };
    mesh.upsert_cluster("c2", Ok(endpoints)).await;
    eventually("c2 ready", Duration::from_secs(30), || {
        mesh.status().first().filter(|s| s.ready).map(drop)
    })
    .await;

    let lookup = |ip: &str| state.ipcache.lookup(ip.parse().unwrap());
    let node = lookup("172.18.0.3").expect("the node's IP");
    assert_eq!(
        (node.identity, node.encrypt_key, node.source),
        (6, 5, Source::ClusterMesh)
    );
    assert_eq!(node.tunnel_endpoint, Some("172.18.0.3".parse().unwrap()));
    assert_eq!(
        lookup("10.2.0.2").expect("the node's health IP").identity,
        4
    );
    let pod = lookup("10.2.0.10").expect("the pod's IP");
    assert_eq!((pod.identity, pod.encrypt_key), (131172, 5));
    assert_eq!(pod.tunnel_endpoint, Some("172.18.0.3".parse().unwrap()));
    assert_eq!(pod.k8s.as_ref().unwrap().pod, "web-0");
    let labels = state
        .identities
        .lock()
        .unwrap()
        .labels(131172)
        .expect("the remote identity");
    assert_eq!(
        labels.to_string(),
        "k8s:app=web;k8s:io.cilium.k8s.policy.cluster=c2;"
    );
    let totals = state.totals();
    assert_eq!(
        (
            totals.ipcache,
            totals.nodes,
            totals.identities.remote,
            totals.rejected
        ),
        (3, 1, 1, 1),
        "the alien identity value is rejected"
    );
    let refused = &totals.refused_claims["c2"];
    assert_eq!(
        (refused.refused, refused.held_back),
        (1, 1),
        "the local-scope entry is a claim c2 may not make: {refused:?}"
    );
    assert!(refused.last.as_ref().unwrap().contains("10.2.0.0/24"));

    mesh.remove_cluster("c2").await;
    assert!(state.ipcache.is_empty(), "{:?}", state.ipcache.entries());
    assert!(state.nodes.is_empty());
    assert!(state.identities.lock().unwrap().labels(131172).is_none());
    assert_eq!(
        state.totals().refused_claims["c2"].held_back,
        0,
        "nothing of a removed cluster is held back"
    );
    let mut gone = deletes.0.lock().unwrap().clone();
    gone.sort();
    let want: Vec<Prefix> = ["10.2.0.2", "10.2.0.10", "172.18.0.3"]
        .iter()
        .map(|p| p.parse().unwrap())
        .collect();
    let mut want = want;
    want.sort();
    assert_eq!(gone, want, "listeners saw every entry go");
}

#[tokio::test]
async fn this_clusters_kvstore_feeds_the_state_with_source_kvstore() {
    let etcd = Etcd::start().await;
    let kv = [
        (
            "cilium/state/nodes/v1/local/me",
            r#"{"Name":"me","Cluster":"local","IPAddresses":[{"Type":"InternalIP","IP":"192.0.2.1"}]}"#,
        ),
        (
            "cilium/state/nodes/v1/local/peer",
            r#"{"Name":"peer","Cluster":"local","IPAddresses":[{"Type":"InternalIP","IP":"192.0.2.5"}]}"#,
        ),
        (
            "cilium/state/ip/v1/default/10.1.0.7",
            r#"{"IP":"10.1.0.7","HostIP":"192.0.2.5","ID":65600,"Key":0}"#,
        ),
        ("cilium/state/identities/v1/id/65600", "k8s:app=db;"),
        ("cilium/state/ip/v1/default/10.1.0.8", "{broken"),
        // This cluster speaks only for itself, and a key names its value.
        (
            "cilium/state/nodes/v1/local/stranger",
            r#"{"Name":"stranger","Cluster":"other","IPAddresses":[{"Type":"InternalIP","IP":"192.0.2.9"}]}"#,
        ),
        (
            "cilium/state/ip/v1/default/10.1.0.9",
            r#"{"IP":"10.1.0.10","ID":65600}"#,
        ),
    ];
    etcd.put_pairs(&kv).await;

    let state = Arc::new(State::new(NodeId {
        cluster: "local".into(),
        name: "me".into(),
    }));
    let endpoints = weft_kvstore::Endpoints {
        urls: vec![etcd.url()],
        ..Default::default()
    };
    let client = weft_kvstore::Client::connect(&endpoints, &weft_kvstore::Config::default())
        .await
        .unwrap();
    let (nodes_synced, mut synced) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(weft_clustermesh::run_local_cluster(
        client,
        weft_clustermesh::LocalCluster {
            name: "local".into(),
            id: 0,
        },
        Arc::new(weft_state::LocalKvStore::new(state.clone(), "me")),
        move |r| {
            if r == weft_clustermesh::Resource::Nodes {
                nodes_synced.send_replace(true);
            }
        },
    ));
    tokio::time::timeout(Duration::from_secs(30), synced.wait_for(|s| *s))
        .await
        .expect("local nodes synced within 30 s")
        .unwrap();
    assert_eq!(
        state.totals().nodes,
        1,
        "the listed node (peer; our own is skipped) is in when the nodes are synced"
    );

    eventually("local state read", Duration::from_secs(30), || {
        let t = state.totals();
        (t.ipcache == 2 && t.identities.cluster == 1 && t.rejected == 3).then_some(())
    })
    .await;
    let pod = state.ipcache.lookup("10.1.0.7".parse().unwrap()).unwrap();
    assert_eq!((pod.identity, pod.source), (65600, Source::KvStore));
    let peer = state.ipcache.lookup("192.0.2.5".parse().unwrap()).unwrap();
    assert_eq!((peer.identity, peer.source), (6, Source::KvStore));
    assert!(
        state.ipcache.lookup("192.0.2.1".parse().unwrap()).is_none(),
        "our own record is stated as local by the agent, not read back"
    );
    assert!(
        state.ipcache.lookup("192.0.2.9".parse().unwrap()).is_none()
            && state.ipcache.lookup("10.1.0.10".parse().unwrap()).is_none(),
        "refused values state nothing"
    );
    assert_eq!(
        state
            .identities
            .lock()
            .unwrap()
            .labels(65600)
            .unwrap()
            .to_string(),
        "k8s:app=db;"
    );

    etcd.delete("cilium/state/nodes/v1/local/peer").await;
    etcd.delete("cilium/state/ip/v1/default/10.1.0.7").await;
    etcd.delete("cilium/state/identities/v1/id/65600").await;
    eventually("local deletes applied", Duration::from_secs(30), || {
        let t = state.totals();
        (t.ipcache == 0 && t.nodes == 0 && t.identities.cluster == 0).then_some(())
    })
    .await;
    task.abort();
}
