//! Property: the resolved ipcache depends only on the set of facts, never on the order
//! in which they (and removals) arrived, and equals a simple reference model (with
//! the rule that our own facts decide our prefixes alone, without a remote cluster's).

use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;
use weft_state::identity::LOCAL_SCOPE;
use weft_state::ipcache::{Fact, IpCache, Owner, Prefix, Source};

const PREFIXES: [&str; 4] = ["10.0.0.1", "10.0.0.0/8", "f00d::1", "192.0.2.0/24"];
const LABELS: [&str; 7] = [
    "reserved:host=;",
    "reserved:remote-node=;",
    "reserved:kube-apiserver=;",
    "reserved:health=;",
    "cidr:10.0.0.0/8=;",
    "k8s:app=web;",
    "k8s:app=db;k8s:tier=back;",
];
const PEERS: [&str; 2] = ["172.18.0.2", "172.18.0.3"];

/// (source index, resource name)
fn owner() -> impl Strategy<Value = (usize, &'static str)> {
    (0..Source::ALL.len(), prop::sample::select(vec!["a", "b"]))
}

#[derive(Debug, Clone, PartialEq)]
struct FactSpec {
    labels: Option<usize>,
    identity: Option<u32>,
    peer: Option<usize>,
    key: u8,
}

fn fact() -> impl Strategy<Value = FactSpec> {
    (
        prop::option::of(0..LABELS.len()),
        prop::option::of(prop::sample::select(vec![0x20001u32, 0x30002, 0x10005])),
        prop::option::of(0..PEERS.len()),
        prop::sample::select(vec![0u8, 3, 7]),
    )
        .prop_map(|(labels, identity, peer, key)| FactSpec {
            labels,
            identity,
            peer,
            key,
        })
}

impl FactSpec {
    fn build(&self) -> Fact {
        Fact {
            labels: self.labels.map(|i| Arc::new(LABELS[i].parse().unwrap())),
            identity: self.identity,
            tunnel_peer: self.peer.map(|i| PEERS[i].parse().unwrap()),
            encrypt_key: self.key,
            k8s: None,
        }
    }
}

/// One operation: (prefix, owner) gets a fact, or loses it (`None`).
type Op = (usize, (usize, &'static str), Option<FactSpec>);

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        (
            0..PREFIXES.len(),
            owner(),
            prop::option::weighted(0.75, fact()),
        ),
        1..40,
    )
}

/// A comparable form of an entry: local identities by their labels.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct View {
    identity: String,
    tunnel: Option<IpAddr>,
    key: u8,
    source: Source,
}

fn apply(ops: &[Op]) -> BTreeMap<String, View> {
    let cache = IpCache::default();
    for (p, (s, r), f) in ops {
        let prefix: Prefix = PREFIXES[*p].parse().unwrap();
        let owner = Owner::new(Source::ALL[*s], *r);
        match f {
            Some(f) => {
                cache.upsert(prefix, owner, f.build());
            }
            None => {
                cache.remove(prefix, &owner);
            }
        }
    }
    let entries = cache.entries();
    assert_eq!(
        cache.len(),
        entries.len(),
        "the entry count agrees with the entries"
    );
    let mut by_source = std::collections::BTreeMap::new();
    for (_, e) in &entries {
        *by_source.entry(e.source).or_insert(0) += 1;
    }
    assert_eq!(
        cache.len_by_source(),
        by_source,
        "the count by source agrees with the entries"
    );
    entries
        .into_iter()
        .map(|(p, e)| {
            let identity = match cache.local_identity_labels(e.identity) {
                Some(l) if e.identity & LOCAL_SCOPE != 0 => format!("local {l}"),
                _ => e.identity.to_string(),
            };
            let view = View {
                identity,
                tunnel: e.tunnel_endpoint,
                key: e.encrypt_key,
                source: e.source,
            };
            (p.to_string(), view)
        })
        .collect()
}

/// The reference model: the facts left standing, resolved by the rules as written.
fn model(ops: &[Op]) -> BTreeMap<String, View> {
    let mut standing: BTreeMap<usize, BTreeMap<(usize, &str), FactSpec>> = BTreeMap::new();
    for (p, o, f) in ops {
        let facts = standing.entry(*p).or_default();
        match f {
            Some(f) => facts.insert(*o, f.clone()),
            None => facts.remove(o),
        };
    }
    let mut out = BTreeMap::new();
    for (p, facts) in standing {
        // Strongest source first; within a source, resources in name order.
        let mut ranked: Vec<(&(usize, &str), &FactSpec)> = facts.iter().collect();
        ranked.sort_by(|(a, _), (b, _)| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
        let Some(((top, _), _)) = ranked.first() else {
            continue;
        };
        // Our own facts (stronger than clustermesh, the kube-apiserver's labels
        // aside) decide the prefix alone: a remote cluster's facts count for nothing.
        let index = |s: Source| Source::ALL.iter().position(|x| *x == s).unwrap();
        let (mesh, apiserver) = (index(Source::ClusterMesh), index(Source::KubeApiServer));
        let ours = ranked
            .iter()
            .any(|((s, _), _)| *s > mesh && *s != apiserver);
        ranked.retain(|((s, _), _)| !(ours && *s == mesh));
        let all: BTreeSet<&str> = ranked
            .iter()
            .filter_map(|(_, f)| f.labels)
            .flat_map(|i| LABELS[i].split_terminator(';'))
            .collect();
        let has = |l: &str| all.contains(l);
        let identity = if has("reserved:host=") {
            "1".to_owned()
        } else if has("reserved:remote-node=") && has("reserved:kube-apiserver=") {
            "7".to_owned()
        } else if has("reserved:remote-node=") {
            "6".to_owned()
        } else if has("reserved:health=") {
            "4".to_owned()
        } else if let Some(id) = ranked.iter().find_map(|(_, f)| f.identity) {
            id.to_string()
        } else if !all.is_empty() {
            let text: String = all.iter().map(|l| format!("{l};")).collect();
            format!("local {text}")
        } else {
            continue;
        };
        let view = View {
            identity,
            tunnel: ranked
                .iter()
                .find_map(|(_, f)| f.peer)
                .map(|i| PEERS[i].parse().unwrap()),
            key: ranked
                .iter()
                .map(|(_, f)| f.key)
                .find(|k| *k != 0)
                .unwrap_or(0),
            source: Source::ALL[*top],
        };
        let prefix: Prefix = PREFIXES[p].parse().unwrap();
        out.insert(prefix.to_string(), view);
    }
    out
}

/// Interleaves `ops` in another order that keeps each (prefix, owner)'s own sequence
/// (the last word of an owner is its final word), driven by `order`.
fn reorder(ops: &[Op], order: &[usize]) -> Vec<Op> {
    let mut chains: BTreeMap<(usize, (usize, &str)), std::collections::VecDeque<Op>> =
        BTreeMap::new();
    for op in ops {
        chains
            .entry((op.0, op.1))
            .or_default()
            .push_back(op.clone());
    }
    let keys: Vec<_> = chains.keys().cloned().collect();
    let mut out = Vec::with_capacity(ops.len());
    for pick in order
        .iter()
        .chain(std::iter::repeat(&0))
        .take(ops.len() * keys.len() + keys.len())
    {
        if out.len() == ops.len() {
            break;
        }
        let live: Vec<_> = keys.iter().filter(|k| !chains[*k].is_empty()).collect();
        let k = live[pick % live.len()];
        out.push(chains.get_mut(k).unwrap().pop_front().unwrap());
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn resolution_is_order_independent_and_matches_the_model(
        ops in ops(),
        order in prop::collection::vec(any::<usize>(), 0..80),
    ) {
        let first = apply(&ops);
        let shuffled = reorder(&ops, &order);
        prop_assert_eq!(shuffled.len(), ops.len());
        prop_assert_eq!(&apply(&shuffled), &first);
        prop_assert_eq!(&first, &model(&ops));
    }
}
