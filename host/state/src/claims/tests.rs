//! The claim rules through the state stage, as the mesh drives it: each rule alone,
//! then every order of one mix of honest and hostile claims.

use crate::ipcache::{Entry, Prefix, Source};
use crate::node::{NodeId, NodeListener};
use crate::State;
use proptest::prelude::*;
use std::sync::{Arc, Mutex};
use weft_model::remote::{ClusterEvent, Kept, Observer, Value};
use weft_model::{IpIdentityPair, Node};

fn state() -> State {
    State::new(NodeId {
        cluster: "c1".into(),
        name: "me".into(),
    })
}

fn node(cluster: &str, name: &str, ip: &str, cidr: Option<&str>) -> Node {
    let cidr = cidr.map_or("null".to_owned(), |net| {
        format!(r#"{{"IP":"{net}","Mask":"////AA=="}}"#)
    });
    serde_json::from_str(&format!(
        r#"{{"Name":"{name}","Cluster":"{cluster}","IPAddresses":[{{"Type":"InternalIP","IP":"{ip}"}}],"IPv4AllocCIDR":{cidr}}}"#
    ))
    .unwrap()
}

fn pair(prefix: &str, id: u32, host: Option<&str>) -> IpIdentityPair {
    let p: Prefix = prefix.parse().unwrap();
    let mask = if p.is_host() {
        "null".to_owned()
    } else {
        let bits = u32::MAX
            .checked_shl(32 - u32::from(p.prefix_len()))
            .unwrap_or(0);
        format!(
            "\"{}\"",
            base64::Engine::encode(
                &base64::engine::general_purpose::STANDARD,
                bits.to_be_bytes()
            )
        )
    };
    let host = host.map_or(String::new(), |h| format!(r#","HostIP":"{h}""#));
    serde_json::from_str(&format!(
        r#"{{"IP":"{}","Mask":{mask},"ID":{id}{host}}}"#,
        p.addr()
    ))
    .unwrap()
}

/// Cluster IDs as the mesh announces them: `cN` is N.
fn id_of(cluster: &str) -> Option<u32> {
    cluster.strip_prefix('c').and_then(|n| n.parse().ok())
}

fn put(state: &State, cluster: &str, key: &str, value: Value, old: Option<&Value>) {
    state.on_event(ClusterEvent::Upsert {
        cluster,
        cluster_id: id_of(cluster),
        key: &key.into(),
        value: &value,
        old: old.map(|v| Kept::of(v, |_| 0)).as_ref(),
    });
}

fn delete(state: &State, cluster: &str, key: &str, old: Value) {
    state.on_event(ClusterEvent::Delete {
        cluster,
        key: &key.into(),
        old: &Kept::of(&old, |_| 0),
    });
}

fn lookup(state: &State, prefix: &str) -> Option<Entry> {
    state.ipcache.lookup(prefix.parse().unwrap())
}

fn refused(state: &State, cluster: &str) -> (u64, usize) {
    let r = state.refused_claims();
    r.get(cluster).map_or((0, 0), |r| (r.refused, r.held_back))
}

#[derive(Default)]
struct Seen(Mutex<Vec<String>>);

impl NodeListener for Seen {
    fn on_upsert(&self, node: &Node, _: Option<&Node>) {
        self.0
            .lock()
            .unwrap()
            .push(format!("+{}/{}", node.cluster, node.name));
    }
    fn on_delete(&self, node: &Node) {
        self.0
            .lock()
            .unwrap()
            .push(format!("-{}/{}", node.cluster, node.name));
    }
}

#[test]
fn an_entry_must_carry_its_clusters_identity() {
    let s = state();
    for (key, id) in [("reserved", 6), ("c3s", 0x3_0001), ("local", 0x100_0001)] {
        let prefix = match key {
            "reserved" => "10.2.0.1",
            "c3s" => "10.2.0.2",
            _ => "10.2.0.3",
        };
        put(
            &s,
            "c2",
            key,
            Value::IpIdentity(pair(prefix, id, None)),
            None,
        );
        assert_eq!(lookup(&s, prefix), None, "{key}: identity {id} refused");
    }
    assert_eq!(refused(&s, "c2"), (3, 3));
    put(
        &s,
        "c2",
        "own",
        Value::IpIdentity(pair("10.2.0.4", 0x2_0001, None)),
        None,
    );
    assert_eq!(
        lookup(&s, "10.2.0.4").unwrap().identity,
        0x2_0001,
        "its own is admitted"
    );
    let last = s.refused_claims()["c2"].last.clone().unwrap();
    assert!(
        last.contains("local") && last.contains("not cluster-scoped"),
        "{last}"
    );
}

#[test]
fn a_remote_node_cannot_take_a_local_nodes_address() {
    let s = state();
    let seen = Arc::new(Seen::default());
    s.nodes.subscribe(seen.clone());
    s.nodes.upsert(
        Source::Local,
        node("c1", "me", "172.18.0.2", Some("10.1.0.0")),
    );
    put(
        &s,
        "c3",
        "n/evil",
        Value::Node(Box::new(node("c3", "evil", "172.18.0.2", None))),
        None,
    );
    let e = lookup(&s, "172.18.0.2").unwrap();
    assert_eq!(
        (e.identity, e.tunnel_endpoint),
        (1, None),
        "still this host"
    );
    assert_eq!(refused(&s, "c3"), (1, 1));
    assert_eq!(
        *seen.0.lock().unwrap(),
        ["+c1/me"],
        "WireGuard never sees it"
    );
    // Nor another node's pod CIDR with its own address.
    put(
        &s,
        "c3",
        "n/evil2",
        Value::Node(Box::new(node(
            "c3",
            "evil2",
            "172.18.0.66",
            Some("10.1.0.0"),
        ))),
        None,
    );
    assert_eq!(lookup(&s, "172.18.0.66"), None);
    assert_eq!(refused(&s, "c3"), (2, 2));
}

#[test]
fn our_node_evicts_a_remote_node_that_held_its_address_first() {
    let s = state();
    let seen = Arc::new(Seen::default());
    s.nodes.subscribe(seen.clone());
    let evil = node("c3", "evil", "172.18.0.5", None);
    put(
        &s,
        "c3",
        "n/evil",
        Value::Node(Box::new(evil.clone())),
        None,
    );
    assert_eq!(
        lookup(&s, "172.18.0.5").unwrap().identity,
        6,
        "admitted: nothing claimed it"
    );
    s.nodes
        .upsert(Source::KvStore, node("c1", "n5", "172.18.0.5", None));
    assert_eq!(*seen.0.lock().unwrap(), ["+c3/evil", "-c3/evil", "+c1/n5"]);
    assert_eq!(refused(&s, "c3"), (1, 1));
    // Our node goes: the held-back one is admitted again.
    s.nodes.delete("c1", "n5");
    assert_eq!(seen.0.lock().unwrap().last().unwrap(), "+c3/evil");
    assert_eq!(refused(&s, "c3"), (1, 0));
    delete(&s, "c3", "n/evil", Value::Node(Box::new(evil)));
    assert_eq!(lookup(&s, "172.18.0.5"), None);
}

#[test]
fn between_remote_clusters_the_holder_keeps_its_space() {
    let s = state();
    let honest = node("c2", "n1", "172.18.0.4", Some("10.2.1.0"));
    put(
        &s,
        "c2",
        "n/n1",
        Value::Node(Box::new(honest.clone())),
        None,
    );
    let mut wide = node("c3", "wide", "172.18.0.9", None);
    wide.ipv4_alloc_cidr = node("c3", "x", "1.1.1.1", Some("10.2.1.0")).ipv4_alloc_cidr;
    wide.ipv4_alloc_cidr.as_mut().unwrap().mask = vec![255, 255, 0, 0];
    put(&s, "c3", "n/wide", Value::Node(Box::new(wide)), None);
    assert_eq!(
        lookup(&s, "172.18.0.9"),
        None,
        "a /16 over c2's pods is refused"
    );
    let last = s.refused_claims()["c3"].last.clone().unwrap();
    assert!(
        last.contains("10.2.0.0/16") && last.contains("c2/n1"),
        "{last}"
    );
    delete(&s, "c2", "n/n1", Value::Node(Box::new(honest)));
    assert_eq!(
        lookup(&s, "172.18.0.9").unwrap().identity,
        6,
        "admitted once c2's node is gone"
    );
}

#[test]
fn an_entry_inside_another_clusters_node_space_is_refused_whichever_came_first() {
    let s = state();
    // c3 claims c2's pod before c2's node says whose it is: admitted for now.
    put(
        &s,
        "c3",
        "ip/10.2.1.5",
        Value::IpIdentity(pair("10.2.1.5", 0x3_0005, None)),
        None,
    );
    assert_eq!(lookup(&s, "10.2.1.5").unwrap().identity, 0x3_0005);
    // c2's own entry is held back meanwhile: c3 holds the prefix.
    put(
        &s,
        "c2",
        "ip/10.2.1.5",
        Value::IpIdentity(pair("10.2.1.5", 0x2_0005, Some("172.18.0.4"))),
        None,
    );
    assert_eq!(lookup(&s, "10.2.1.5").unwrap().identity, 0x3_0005);
    assert_eq!(refused(&s, "c2"), (1, 1));
    // c2's node arrives: c3's entry is evicted, c2's takes the prefix.
    put(
        &s,
        "c2",
        "n/n1",
        Value::Node(Box::new(node("c2", "n1", "172.18.0.4", Some("10.2.1.0")))),
        None,
    );
    let e = lookup(&s, "10.2.1.5").unwrap();
    assert_eq!(
        (e.identity, e.tunnel_endpoint),
        (0x2_0005, Some("172.18.0.4".parse().unwrap()))
    );
    assert_eq!(refused(&s, "c2"), (1, 0));
    assert_eq!(refused(&s, "c3"), (1, 1));
    // A default route, or a tunnel into c2's node, is refused too.
    put(
        &s,
        "c3",
        "ip/0.0.0.0/0",
        Value::IpIdentity(pair("0.0.0.0/0", 0x3_0001, None)),
        None,
    );
    assert_eq!(lookup(&s, "0.0.0.0/0"), None);
    put(
        &s,
        "c3",
        "ip/10.3.0.1",
        Value::IpIdentity(pair("10.3.0.1", 0x3_0001, Some("172.18.0.4"))),
        None,
    );
    assert_eq!(lookup(&s, "10.3.0.1"), None);
    assert_eq!(refused(&s, "c3"), (3, 3));
}

#[test]
fn our_facts_decide_our_prefixes_alone() {
    let s = state();
    let ours = crate::pair_fact(&pair("10.1.0.7", 0x1_0007, None)).unwrap();
    s.ipcache.upsert(
        ours.0,
        crate::ipcache::Owner::new(Source::KvStore, "kv/10.1.0.7"),
        ours.1,
    );
    put(
        &s,
        "c3",
        "ip/10.1.0.7",
        Value::IpIdentity(pair("10.1.0.7", 0x3_0007, Some("172.18.0.9"))),
        None,
    );
    let e = lookup(&s, "10.1.0.7").unwrap();
    assert_eq!(
        (e.identity, e.tunnel_endpoint, e.source),
        (0x1_0007, None, Source::KvStore),
        "no tunnel out of a local pod's address"
    );
}

#[test]
fn a_key_that_moves_its_prefix_lets_the_old_one_go() {
    let s = state();
    let before = Value::IpIdentity(pair("10.2.0.0/24", 0x2_0001, None));
    put(&s, "c2", "ip/10.2.0.0", before.clone(), None);
    let after = Value::IpIdentity(pair("10.2.0.0/25", 0x2_0001, None));
    put(&s, "c2", "ip/10.2.0.0", after, Some(&before));
    assert_eq!(lookup(&s, "10.2.0.0/24"), None, "the old prefix is gone");
    assert!(lookup(&s, "10.2.0.0/25").is_some());
}

#[test]
fn a_held_prefix_passes_to_the_next_claimant_when_let_go() {
    let s = state();
    let first = Value::IpIdentity(pair("10.9.0.1", 0x2_0001, None));
    put(&s, "c2", "ip/10.9.0.1", first.clone(), None);
    put(
        &s,
        "c3",
        "ip/10.9.0.1",
        Value::IpIdentity(pair("10.9.0.1", 0x3_0001, None)),
        None,
    );
    assert_eq!(lookup(&s, "10.9.0.1").unwrap().identity, 0x2_0001);
    // An update of the holder's own entry does not let it go.
    let updated = Value::IpIdentity(pair("10.9.0.1", 0x2_0002, None));
    put(&s, "c2", "ip/10.9.0.1", updated.clone(), Some(&first));
    assert_eq!(lookup(&s, "10.9.0.1").unwrap().identity, 0x2_0002);
    delete(&s, "c2", "ip/10.9.0.1", updated);
    assert_eq!(lookup(&s, "10.9.0.1").unwrap().identity, 0x3_0001);
    assert_eq!(refused(&s, "c3"), (1, 0));
}

/// One event of the mix.
#[derive(Debug, Clone)]
enum Step {
    OurNode(&'static str, &'static str, &'static str),
    RemoteNode(
        &'static str,
        &'static str,
        &'static str,
        Option<&'static str>,
    ),
    Entry(&'static str, &'static str, u32, Option<&'static str>),
}

/// Honest clusters c2 and c3 and, in c3, a few lies about c1 and c2.
fn mix() -> Vec<Step> {
    vec![
        Step::OurNode("n2", "172.18.0.3", "10.1.1.0"),
        Step::RemoteNode("c2", "n1", "172.18.0.4", Some("10.2.1.0")),
        Step::RemoteNode("c3", "n1", "172.18.0.9", Some("10.3.1.0")),
        Step::RemoteNode("c3", "evil", "172.18.0.3", None),
        Step::Entry("c2", "10.2.1.5", 0x2_0005, Some("172.18.0.4")),
        Step::Entry("c3", "10.3.1.8", 0x3_0008, Some("172.18.0.9")),
        Step::Entry("c3", "10.2.1.5", 0x3_0005, Some("172.18.0.9")),
        Step::Entry("c3", "10.1.1.7", 0x3_0007, Some("172.18.0.9")),
        Step::Entry("c3", "0.0.0.0/0", 0x3_0001, None),
        Step::Entry("c2", "10.3.1.9", 0x2_0009, None),
        Step::Entry("c3", "10.3.1.10", 6, None),
    ]
}

fn run(steps: &[Step]) -> (Vec<(Prefix, Entry)>, Vec<String>) {
    let s = state();
    s.nodes.upsert(
        Source::Local,
        node("c1", "me", "172.18.0.2", Some("10.1.0.0")),
    );
    for step in steps {
        match step {
            Step::OurNode(name, ip, cidr) => {
                s.nodes
                    .upsert(Source::KvStore, node("c1", name, ip, Some(cidr)));
            }
            Step::RemoteNode(c, name, ip, cidr) => {
                put(
                    &s,
                    c,
                    &format!("n/{name}"),
                    Value::Node(Box::new(node(c, name, ip, *cidr))),
                    None,
                );
            }
            Step::Entry(c, prefix, id, host) => {
                put(
                    &s,
                    c,
                    &format!("ip/{prefix}"),
                    Value::IpIdentity(pair(prefix, *id, *host)),
                    None,
                );
            }
        }
    }
    let mut nodes: Vec<String> = s
        .nodes
        .nodes()
        .iter()
        .map(|n| format!("{}/{}", n.cluster, n.name))
        .collect();
    nodes.sort();
    (s.ipcache.entries(), nodes)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    /// Whatever the order, the lies are refused and the honest state is the same.
    #[test]
    fn every_order_admits_the_same_claims(order in Just(mix()).prop_shuffle()) {
        let (entries, nodes) = run(&order);
        prop_assert_eq!(&(entries.clone(), nodes.clone()), &run(&mix()));
        let get = |p: &str| entries.iter().find(|(q, _)| *q == p.parse::<Prefix>().unwrap()).map(|(_, e)| e.identity);
        prop_assert_eq!(get("10.2.1.5"), Some(0x2_0005));
        prop_assert_eq!(get("10.3.1.8"), Some(0x3_0008));
        prop_assert_eq!(get("10.1.1.7"), None);
        prop_assert_eq!(get("0.0.0.0/0"), None);
        prop_assert_eq!(get("10.3.1.9"), None);
        prop_assert_eq!(get("10.3.1.10"), None);
        prop_assert_eq!(nodes, ["c1/me", "c1/n2", "c2/n1", "c3/n1"]);
    }
}
