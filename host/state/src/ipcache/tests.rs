//! Precedence, shadowing, fallback, listeners and the seed regression.

use super::*;
use crate::identity::Reserved;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use weft_model::Labels;

fn labels(s: &str) -> Option<Arc<Labels>> {
    Some(Arc::new(s.parse().unwrap()))
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn p(s: &str) -> Prefix {
    s.parse().unwrap()
}

/// The kube-apiserver source's fact about an address.
fn kube_apiserver() -> (Owner, Fact) {
    let owner = Owner::new(Source::KubeApiServer, "k8s/default/kubernetes");
    (
        owner,
        Fact {
            labels: labels("reserved:kube-apiserver=;"),
            ..Fact::default()
        },
    )
}

/// A remote node's fact about its IP: remote-node, tunnel to itself, key 7.
fn remote_node() -> (Owner, Fact) {
    let owner = Owner::new(Source::ClusterMesh, "node/c2/node-2");
    let fact = Fact {
        labels: labels("reserved:remote-node=;"),
        tunnel_peer: Some(ip("172.18.0.3")),
        encrypt_key: 7,
        ..Fact::default()
    };
    (owner, fact)
}

/// The seed regression: the IPsec key of a remote node running the kube-apiserver was
/// lost when the kube-apiserver entry arrived first. Both orders must resolve alike.
#[test]
fn kube_apiserver_and_remote_node_resolve_alike_in_both_orders() {
    let addr = p("172.18.0.3");
    let mut results = Vec::new();
    for order in [
        [kube_apiserver(), remote_node()],
        [remote_node(), kube_apiserver()],
    ] {
        let cache = IpCache::default();
        for (owner, fact) in order {
            cache.upsert(addr, owner, fact);
        }
        results.push(cache.lookup(addr).unwrap());
    }
    let expected = Entry {
        identity: Reserved::KubeApiServer.id(),
        tunnel_endpoint: Some(ip("172.18.0.3")),
        encrypt_key: 7,
        source: Source::KubeApiServer,
        k8s: None,
    };
    assert_eq!(results, [expected.clone(), expected]);
}

#[test]
fn identity_from_merged_labels() {
    let cases = [
        (vec!["reserved:kube-apiserver=;", "reserved:host=;"], 1),
        (
            vec!["reserved:kube-apiserver=;", "reserved:remote-node=;"],
            7,
        ),
        (vec!["reserved:remote-node=;"], 6),
        (vec!["reserved:health=;"], 4),
        (vec!["reserved:host=;"], 1),
    ];
    for (sets, id) in cases {
        let cache = IpCache::default();
        for (i, l) in sets.iter().enumerate() {
            let owner = Owner::new(Source::ALL[i + 3], format!("r{i}"));
            cache.upsert(
                p("10.0.0.1"),
                owner,
                Fact {
                    labels: labels(l),
                    ..Fact::default()
                },
            );
        }
        assert_eq!(
            cache.lookup(p("10.0.0.1")).unwrap().identity,
            id,
            "{sets:?}"
        );
    }
}

#[test]
fn explicit_identity_of_the_strongest_owner_else_a_cidr_identity() {
    let cache = IpCache::default();
    let prefix = p("10.0.0.0/8");
    cache.upsert(
        prefix,
        Owner::new(Source::Directory, "d"),
        Fact {
            labels: labels("cidr:10.0.0.0/8=;"),
            ..Fact::default()
        },
    );
    let local = cache.lookup(prefix).unwrap().identity;
    assert_ne!(local & crate::identity::LOCAL_SCOPE, 0, "a CIDR identity");
    assert_eq!(
        cache.local_identity_labels(local).unwrap().to_string(),
        "cidr:10.0.0.0/8=;"
    );

    cache.upsert(
        prefix,
        Owner::new(Source::ClusterMesh, "c2"),
        Fact {
            identity: Some(0x20005),
            ..Fact::default()
        },
    );
    cache.upsert(
        prefix,
        Owner::new(Source::KvStore, "kv"),
        Fact {
            identity: Some(0x10009),
            ..Fact::default()
        },
    );
    assert_eq!(
        cache.lookup(prefix).unwrap().identity,
        0x10009,
        "kvstore beats clustermesh"
    );
    assert_eq!(
        cache.local_identities(),
        0,
        "the CIDR identity was released"
    );
}

#[test]
fn shadowed_writes_are_reported() {
    let cache = IpCache::default();
    let addr = p("172.18.0.3");
    let (o, f) = kube_apiserver();
    assert_eq!(cache.upsert(addr, o, f).shadowed_by, None);
    let (o, f) = remote_node();
    assert_eq!(
        cache.upsert(addr, o, f).shadowed_by,
        Some(Source::KubeApiServer)
    );
    let kv = Owner::new(Source::KubeApiServer, "other");
    assert_eq!(
        cache.upsert(addr, kv, Fact::default()).shadowed_by,
        None,
        "equal sources do not shadow"
    );
}

#[test]
fn removal_falls_back_to_the_next_strongest_facts() {
    let cache = IpCache::default();
    let addr = p("10.0.0.1");
    let weak = Owner::new(Source::ClusterMesh, "c2");
    let strong = Owner::new(Source::KvStore, "kv");
    cache.upsert(
        addr,
        weak.clone(),
        Fact {
            identity: Some(0x20001),
            tunnel_peer: Some(ip("192.0.2.2")),
            encrypt_key: 3,
            ..Fact::default()
        },
    );
    cache.upsert(
        addr,
        strong.clone(),
        Fact {
            identity: Some(0x10001),
            ..Fact::default()
        },
    );
    let e = cache.lookup(addr).unwrap();
    assert_eq!(
        (e.identity, e.tunnel_endpoint, e.encrypt_key, e.source),
        (0x10001, None, 0, Source::KvStore),
        "our own fact decides alone: the remote cluster's tunnel and key count for nothing"
    );
    assert!(cache.remove(addr, &strong));
    let e = cache.lookup(addr).unwrap();
    assert_eq!((e.identity, e.source), (0x20001, Source::ClusterMesh));
    assert!(cache.remove(addr, &weak));
    assert!(cache.lookup(addr).is_none());
    assert!(!cache.remove(addr, &weak), "nothing left to remove");
}

#[test]
fn a_key_alone_waits_for_the_labels() {
    let cache = IpCache::default();
    let addr = p("10.0.0.1");
    let key_only = Fact {
        encrypt_key: 9,
        tunnel_peer: Some(ip("192.0.2.9")),
        ..Fact::default()
    };
    cache.upsert(addr, Owner::new(Source::Local, "pair"), key_only);
    assert!(cache.lookup(addr).is_none(), "no identity, no entry");
    cache.upsert(
        addr,
        Owner::new(Source::KvStore, "c"),
        Fact {
            identity: Some(0x10001),
            ..Fact::default()
        },
    );
    assert_eq!(cache.lookup(addr).unwrap().encrypt_key, 9);
}

/// (prefix, old identity, new identity)
type Seen = (Prefix, Option<u32>, Option<u32>);

#[derive(Default)]
struct Recorder(Mutex<Vec<Seen>>);

impl Listener for Recorder {
    fn on_change(&self, c: &Change<'_>) {
        assert_ne!(c.old, c.new);
        self.0.lock().unwrap().push((
            c.prefix,
            c.old.map(|e| e.identity),
            c.new.map(|e| e.identity),
        ));
    }
}

#[test]
fn listeners_get_ordered_changes_with_old_and_new_and_a_replay() {
    let cache = IpCache::default();
    let a = p("10.0.0.1");
    cache.upsert(
        a,
        Owner::new(Source::ClusterMesh, "x"),
        Fact {
            identity: Some(0x20001),
            ..Fact::default()
        },
    );
    let rec = Arc::new(Recorder::default());
    cache.add_listener(rec.clone());
    let owner = Owner::new(Source::KvStore, "y");
    cache.upsert(
        a,
        owner.clone(),
        Fact {
            identity: Some(0x10001),
            ..Fact::default()
        },
    );
    cache.upsert(
        a,
        owner.clone(),
        Fact {
            identity: Some(0x10001),
            ..Fact::default()
        },
    ); // no change
    cache.remove(a, &owner);
    cache.remove(a, &Owner::new(Source::ClusterMesh, "x"));
    let events = rec.0.lock().unwrap().clone();
    assert_eq!(
        events,
        [
            (a, None, Some(0x20001)), // replay on add
            (a, Some(0x20001), Some(0x10001)),
            (a, Some(0x10001), Some(0x20001)),
            (a, Some(0x20001), None),
        ]
    );
    let again = Recorder::default();
    cache.upsert(
        a,
        owner,
        Fact {
            identity: Some(5),
            ..Fact::default()
        },
    );
    cache.replay(&again);
    assert_eq!(again.0.lock().unwrap().clone(), [(a, None, Some(5))]);
}
