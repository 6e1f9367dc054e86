//! Identities allocated in a real etcd in the established allocator layout: two nodes
//! asking for the same labels at once get one id; the master key holds the labels,
//! each user node has its leased value key; the id goes when its last user releases
//! it, or when the users' leases expire and the collector runs. A lock held the
//! established agent's way (an etcd mutex under `locks/<labels>/`) holds weft back.

use weft_testkit as support;

use std::sync::Arc;
use std::time::Duration;
use support::Etcd;
use tokio::sync::watch;
use weft_clustermesh::identity_allocator::PREFIX;
use weft_clustermesh::GlobalAllocator;
use weft_clustermesh::LeasedKeys;
use weft_kvstore::{Client, Config, Endpoints};
use weft_model::Labels;

const CLUSTER_ID: u32 = 5;

async fn client(etcd: &Etcd) -> Client {
    let endpoints = Endpoints {
        urls: vec![etcd.url()],
        ..Endpoints::default()
    };
    Client::connect(&endpoints, &Config::default())
        .await
        .unwrap()
}

/// An allocator for `node` with a lease of `ttl` seconds that nobody keeps alive.
async fn node(etcd: &Etcd, node: &str, ttl: i64) -> GlobalAllocator {
    let c = client(etcd).await;
    let lease = c.grant_lease(ttl).await.unwrap();
    let (_tx, rx) = watch::channel(Some(lease));
    std::mem::forget(_tx); // the lease never changes in these tests
    GlobalAllocator::new(c.clone(), LeasedKeys::new(c, rx), node, CLUSTER_ID)
}

fn labels(s: &str) -> Labels {
    s.parse().unwrap()
}

async fn raw(etcd: &Etcd, key: &str) -> Option<String> {
    let mut c = etcd.client().await;
    let resp = c.get(key, None).await.unwrap();
    resp.kvs()
        .first()
        .map(|kv| String::from_utf8_lossy(kv.value()).into_owned())
}

#[tokio::test]
async fn two_nodes_share_one_id_in_the_established_layout_and_the_last_release_frees_it() {
    let etcd = Etcd::start().await;
    let (a, b) = (
        Arc::new(node(&etcd, "node-a", 30).await),
        Arc::new(node(&etcd, "node-b", 30).await),
    );
    let web = labels(
        "k8s:app=web;k8s:io.cilium.k8s.policy.cluster=c5;k8s:io.kubernetes.pod.namespace=shop;",
    );
    let (ia, ib) = tokio::join!(
        {
            let (a, w) = (a.clone(), web.clone());
            async move { a.acquire(&w).await.unwrap() }
        },
        {
            let (b, w) = (b.clone(), web.clone());
            async move { b.acquire(&w).await.unwrap() }
        },
    );
    assert_eq!(ia, ib, "one id for the same labels");
    assert_eq!(ia >> 16, CLUSTER_ID, "cluster-scoped: {ia:#x}");
    assert!((256..=65535).contains(&(ia & 0xffff)), "{ia:#x}");
    assert_eq!(
        raw(&etcd, &format!("{PREFIX}id/{ia}")).await.as_deref(),
        Some(web.to_string().as_str())
    );
    for n in ["node-a", "node-b"] {
        let key = format!("{PREFIX}value/{web}/{n}");
        assert_eq!(raw(&etcd, &key).await, Some(ia.to_string()), "{key}");
    }
    assert!(
        keys_under(&etcd, &format!("{PREFIX}locks/{web}/"))
            .await
            .is_empty(),
        "the lock is released"
    );

    let db = labels(
        "k8s:app=db;k8s:io.cilium.k8s.policy.cluster=c5;k8s:io.kubernetes.pod.namespace=shop;",
    );
    let idb = a.acquire(&db).await.unwrap();
    assert_ne!(idb, ia);
    assert_eq!(
        a.acquire(&web).await.unwrap(),
        ia,
        "a second endpoint, same id"
    );

    // node-a holds web twice: the first release keeps its use.
    a.release(&web).await.unwrap();
    assert!(raw(&etcd, &format!("{PREFIX}value/{web}/node-a"))
        .await
        .is_some());
    a.release(&web).await.unwrap();
    assert!(raw(&etcd, &format!("{PREFIX}value/{web}/node-a"))
        .await
        .is_none());
    assert!(
        raw(&etcd, &format!("{PREFIX}id/{ia}")).await.is_some(),
        "node-b still uses it"
    );
    b.release(&web).await.unwrap();
    assert!(
        raw(&etcd, &format!("{PREFIX}id/{ia}")).await.is_none(),
        "no user left: collected"
    );

    // Freed, the lowest id is handed out again.
    let again = b.acquire(&labels("k8s:app=cache;")).await.unwrap();
    assert_eq!(again, ia);
}

async fn keys_under(etcd: &Etcd, prefix: &str) -> Vec<String> {
    let mut c = etcd.client().await;
    let options = etcd_client::GetOptions::new()
        .with_prefix()
        .with_keys_only();
    let resp = c.get(prefix, Some(options)).await.unwrap();
    resp.kvs()
        .iter()
        .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
        .collect()
}

#[tokio::test]
async fn a_lock_held_the_established_agents_way_holds_an_allocation_back() {
    let etcd = Etcd::start().await;
    let a = Arc::new(node(&etcd, "node-a", 30).await);
    let web = labels("k8s:app=web;");
    let prefix = format!("{PREFIX}locks/{web}/");
    // A Go agent's mutex: its key on its session's lease, created first.
    let mut go = etcd.client().await;
    let go_lease = go.lease_grant(30, None).await.unwrap().id();
    let go_key = format!("{prefix}{go_lease:x}");
    let options = etcd_client::PutOptions::new().with_lease(go_lease);
    go.put(go_key.as_str(), "", Some(options)).await.unwrap();

    let allocation = tokio::spawn({
        let (a, web) = (a.clone(), web.clone());
        async move { a.acquire(&web).await.unwrap() }
    });
    let keys = support::within(
        "weft queues its key behind the Go agent's",
        Duration::from_secs(10),
        async {
            loop {
                let keys = keys_under(&etcd, &prefix).await;
                if keys.len() == 2 {
                    return keys;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        },
    )
    .await;
    assert!(keys.contains(&go_key), "{keys:?}");
    assert!(
        !allocation.is_finished(),
        "weft waits while the first key is the Go agent's"
    );
    assert!(
        raw(&etcd, &format!("{PREFIX}value/{web}/node-a"))
            .await
            .is_none(),
        "nothing allocated under another's lock"
    );
    go.delete(go_key.as_str(), None).await.unwrap();
    let id = support::within(
        "the allocation goes on",
        Duration::from_secs(10),
        allocation,
    )
    .await
    .unwrap();
    assert_eq!(
        raw(&etcd, &format!("{PREFIX}id/{id}")).await.as_deref(),
        Some(web.to_string().as_str())
    );
    assert!(
        keys_under(&etcd, &prefix).await.is_empty(),
        "weft's key is gone too"
    );
}

#[tokio::test]
async fn a_crashed_nodes_identity_is_collected_once_its_lease_expires() {
    let etcd = Etcd::start().await;
    let crashed = node(&etcd, "node-c", 2).await;
    let survivor = node(&etcd, "node-s", 30).await;
    let tmp = labels("k8s:app=tmp;");
    let kept = labels("k8s:app=kept;");
    let id = crashed.acquire(&tmp).await.unwrap();
    let kept_id = survivor.acquire(&kept).await.unwrap();
    assert_eq!(survivor.collect_unused().await.unwrap(), 0, "both in use");
    // No release: the lease runs out, and etcd deletes the node's value key.
    let value_key = format!("{PREFIX}value/{tmp}/node-c");
    let mut c = etcd.client().await;
    let mut events = c.watch(value_key.as_str(), None).await.unwrap();
    drop(crashed);
    let deadline = Duration::from_secs(10);
    let gone = tokio::time::timeout(deadline, async {
        while let Some(resp) = events.message().await.unwrap() {
            if resp
                .events()
                .iter()
                .any(|e| e.event_type() == etcd_client::EventType::Delete)
            {
                return;
            }
        }
    })
    .await;
    assert!(gone.is_ok(), "the lease expired within {deadline:?}");
    assert_eq!(survivor.collect_unused().await.unwrap(), 1);
    assert!(raw(&etcd, &format!("{PREFIX}id/{id}")).await.is_none());
    assert!(
        raw(&etcd, &format!("{PREFIX}id/{kept_id}")).await.is_some(),
        "in use: kept"
    );
}
