//! Fuzzing of what weft reads from others, as a bounded property run (the toolchain
//! here is stable, so no libFuzzer): remote etcd values, clustermesh config files,
//! plugin manifests and trust policies, and the state stage fed arbitrary remote
//! nodes and entries. Inputs are random bytes and mutations (flips, cuts, splices) of
//! valid seeds. The property: an error, never a panic; and for the state, the claim
//! rules hold whatever arrives. The shipped plugins get arbitrary hook inputs: every
//! call answers (no trap, no deadline), within the contract, the same way twice. `WEFT_FUZZ_CASES` sets the cases per target (default
//! 2,000 in CI; BENCHMARKS.md reports longer runs).

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::path::Path;
use weft_clustermesh::{ClusterEvent, Kept, Observer, Value};
use weft_model::{decode_json, ClusterConfig, ClusterService, Identity, IpIdentityPair, Node};
use weft_plugins::{Manifest, TrustPolicy};
use weft_state::ipcache::{Prefix, Source};
use weft_state::node::NodeId;
use weft_state::State;

use weft_testkit as support;

fn cases() -> u32 {
    support::env_or("WEFT_FUZZ_CASES", 2_000)
}

fn runner() -> TestRunner {
    TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    })
}

/// Random bytes, or a seed flipped, cut or spliced with another.
fn mutated(seeds: &'static [&'static str]) -> impl Strategy<Value = Vec<u8>> {
    let seed = prop::sample::select(seeds);
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..512),
        (
            seed.clone(),
            prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8)
        )
            .prop_map(|(s, flips)| {
                let mut b = s.as_bytes().to_vec();
                for (at, byte) in flips {
                    if !b.is_empty() {
                        let i = at.index(b.len());
                        b[i] = byte;
                    }
                }
                b
            }),
        (seed.clone(), any::<prop::sample::Index>()).prop_map(|(s, at)| {
            let b = s.as_bytes();
            b[..at.index(b.len() + 1)].to_vec()
        }),
        (
            seed.clone(),
            seed,
            any::<prop::sample::Index>(),
            any::<prop::sample::Index>()
        )
            .prop_map(|(a, b, i, j)| {
                let (a, b) = (a.as_bytes(), b.as_bytes());
                let mut out = a[..i.index(a.len() + 1)].to_vec();
                out.extend_from_slice(&b[j.index(b.len() + 1)..]);
                out
            }),
    ]
}

const VALUES: &[&str] = &[
    r#"{"Name":"n1","Cluster":"c2","IPAddresses":[{"Type":"InternalIP","IP":"172.18.0.3"}],"IPv4AllocCIDR":{"IP":"10.244.1.0","Mask":"////AA=="},"IPv4HealthIP":"10.244.1.153","EncryptionKey":5,"ClusterID":2}"#,
    r#"{"IP":"10.244.2.74","Mask":null,"HostIP":"172.18.0.2","ID":199475,"Key":5,"Metadata":"","K8sNamespace":"ns","K8sPodName":"web-0","NamedPorts":[{"Name":"http","Port":80,"Protocol":"TCP"}]}"#,
    r#"{"IP":"10.0.0.0","Mask":"/wAAAA==","ID":16777217,"Key":0}"#,
    r#"{"cluster":"cluster3","namespace":"ns","name":"echo","frontends":{"10.96.0.10":{"http":{"Protocol":"TCP","Port":80}}},"backends":{"10.244.1.10":{"http":{"Protocol":"TCP","Port":8080}}},"labels":{},"selector":{"app":"echo"},"includeExternal":true,"shared":true,"clusterID":3}"#,
    r#"{"id":3,"capabilities":{"syncedCanaries":true,"maxConnectedClusters":255,"cached":true}}"#,
    "k8s:app=web;k8s:io.cilium.k8s.policy.cluster=c2;",
];

#[test]
fn remote_values_decode_or_fail_cleanly() {
    runner()
        .run(&mutated(VALUES), |bytes| {
            let key = "cilium/state/x";
            let _ = decode_json::<Node>(key, &bytes);
            let _ = decode_json::<IpIdentityPair>(key, &bytes);
            let _ = decode_json::<ClusterService>(key, &bytes);
            let _ = decode_json::<ClusterConfig>(key, &bytes);
            let _ = Identity::decode(key, "131172", &bytes);
            if let Ok(pair) = decode_json::<IpIdentityPair>(key, &bytes) {
                let _ = pair.prefix_len();
                let _ = weft_state::pair_fact(&pair);
            }
            Ok(())
        })
        .unwrap();
}

const CONFIG_FILES: &[&str] = &[
    "endpoints:\n- http://127.0.0.1:2379\n",
    "endpoints:\n- https://10.0.0.1:2379\n- https://10.0.0.2:2379\ntrusted-ca-file: /var/lib/weft/ca.crt\ncert-file: c.crt\nkey-file: c.key\n",
    "{\"endpoints\":[\"http://[::1]:2379\"]}",
];

#[test]
fn clustermesh_config_files_parse_or_fail_cleanly() {
    runner()
        .run(&mutated(CONFIG_FILES), |bytes| {
            let text = String::from_utf8_lossy(&bytes);
            let _ = weft_clustermesh::parse_config_file(Path::new("/etc/weft/mesh/c2"), &text);
            Ok(())
        })
        .unwrap();
}

const MANIFESTS: &[&str] = &[
    "name = \"vendor-policy\"\nversion = \"1.2.0\"\nwasm = \"vendor.wasm\"\nsha256 = \"0000000000000000000000000000000000000000000000000000000000000000\"\nwit = \"0.2.0\"\npriority = 10\n[config]\ntimeout_ms = 250\n",
    "name = \"x\"\nversion = \"0.1.0\"\nwasm = \"x.wasm\"\nshadow = true\n[signature]\nkey = \"abc\"\nvalue = \"def\"\n",
];

const TRUST_POLICIES: &[&str] = &[
    "[[keys]]\nname = \"vendor\"\npublic = \"MCowBQYDK2VwAyEA\"\nplugins = [\"vendor-*\"]\n[minimum]\nvendor-policy = \"1.2.0\"\n",
    "[[keys]]\nname = \"a\"\npublic = \"\"\n",
];

#[test]
fn plugin_manifests_and_trust_policies_parse_or_fail_cleanly() {
    runner()
        .run(&mutated(MANIFESTS), |bytes| {
            let _ = Manifest::parse(&String::from_utf8_lossy(&bytes));
            Ok(())
        })
        .unwrap();
    runner()
        .run(&mutated(TRUST_POLICIES), |bytes| {
            let _ = TrustPolicy::parse(&String::from_utf8_lossy(&bytes));
            Ok(())
        })
        .unwrap();
}

/// One arbitrary remote event: a node or an entry of cluster c2 or c3, or a delete.
#[derive(Debug, Clone)]
enum Remote {
    Node {
        cluster: u8,
        name: u8,
        ip: u8,
        cidr: Option<u8>,
    },
    Entry {
        cluster: u8,
        ip: u8,
        len: u8,
        id: u32,
        host: Option<u8>,
    },
    DeleteNode {
        cluster: u8,
        name: u8,
    },
    DeleteEntry {
        cluster: u8,
        ip: u8,
        len: u8,
    },
}

fn remote() -> impl Strategy<Value = Remote> {
    let cluster = 2u8..=3;
    prop_oneof![
        (cluster.clone(), 0u8..4, 0u8..8, prop::option::of(0u8..4)).prop_map(
            |(cluster, name, ip, cidr)| Remote::Node {
                cluster,
                name,
                ip,
                cidr
            }
        ),
        (
            cluster.clone(),
            0u8..16,
            prop::sample::select(vec![0u8, 8, 16, 24, 30, 32]),
            prop_oneof![
                Just(6u32),
                Just(0x2_0005),
                Just(0x3_0005),
                Just(0x100_0001),
                any::<u32>()
            ],
            prop::option::of(0u8..8),
        )
            .prop_map(|(cluster, ip, len, id, host)| Remote::Entry {
                cluster,
                ip,
                len,
                id,
                host
            }),
        (cluster.clone(), 0u8..4).prop_map(|(cluster, name)| Remote::DeleteNode { cluster, name }),
        (
            cluster,
            0u8..16,
            prop::sample::select(vec![0u8, 8, 16, 24, 30, 32])
        )
            .prop_map(|(cluster, ip, len)| Remote::DeleteEntry { cluster, ip, len }),
    ]
}

/// The addresses the events use: few, so that claims collide.
fn node_ip(i: u8) -> String {
    format!("172.18.0.{i}")
}
fn pod_ip(i: u8) -> String {
    format!("10.{}.{}.{}", 1 + i % 3, i % 4, i)
}

fn node_value(cluster: &str, name: u8, ip: u8, cidr: Option<u8>) -> Node {
    let cidr = cidr.map_or("null".to_owned(), |c| {
        format!(r#"{{"IP":"10.{}.{c}.0","Mask":"////AA=="}}"#, 1 + c % 3)
    });
    serde_json::from_str(&format!(
        r#"{{"Name":"n{name}","Cluster":"{cluster}","IPAddresses":[{{"Type":"InternalIP","IP":"{}"}}],"IPv4AllocCIDR":{cidr}}}"#,
        node_ip(ip)
    ))
    .unwrap()
}

fn entry_value(ip: u8, len: u8, id: u32, host: Option<u8>) -> IpIdentityPair {
    let prefix = Prefix::new(pod_ip(ip).parse().unwrap(), len).unwrap();
    let mask = u32::MAX
        .checked_shl(32 - u32::from(len))
        .unwrap_or(0)
        .to_be_bytes();
    let mut pair: IpIdentityPair =
        serde_json::from_str(&format!(r#"{{"IP":"{}","ID":{id}}}"#, prefix.addr())).unwrap();
    pair.mask = (len != 32).then(|| mask.to_vec());
    pair.host_ip = host.map(|h| node_ip(h).parse().unwrap());
    pair
}

/// The state stage under arbitrary remote nodes and entries: no panic, every remote
/// entry admitted carries its cluster's identity and lies outside the other clusters'
/// node space, and every admitted node is alone in its space (among clusters).
#[test]
fn the_state_keeps_the_claim_rules_under_arbitrary_remote_events() {
    let cases = (cases() / 10).max(20);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&prop::collection::vec(remote(), 1..60), |events| {
            let state = State::new(NodeId {
                cluster: "c1".into(),
                name: "me".into(),
            });
            state
                .nodes
                .upsert(Source::Local, node_value("c1", 0, 1, Some(0)));
            let mut stored: std::collections::HashMap<(String, String), Value> = Default::default();
            for e in events {
                let (cluster, key, value) = match e {
                    Remote::Node {
                        cluster,
                        name,
                        ip,
                        cidr,
                    } => {
                        let c = format!("c{cluster}");
                        (
                            c.clone(),
                            format!("n/{name}"),
                            Some(Value::Node(Box::new(node_value(&c, name, ip, cidr)))),
                        )
                    }
                    Remote::Entry {
                        cluster,
                        ip,
                        len,
                        id,
                        host,
                    } => (
                        format!("c{cluster}"),
                        format!("ip/{ip}/{len}"),
                        Some(Value::IpIdentity(entry_value(ip, len, id, host))),
                    ),
                    Remote::DeleteNode { cluster, name } => {
                        (format!("c{cluster}"), format!("n/{name}"), None)
                    }
                    Remote::DeleteEntry { cluster, ip, len } => {
                        (format!("c{cluster}"), format!("ip/{ip}/{len}"), None)
                    }
                };
                let slot = (cluster.clone(), key.clone());
                match value {
                    Some(v) => {
                        let old = stored.get(&slot).cloned();
                        state.on_event(ClusterEvent::Upsert {
                            cluster: &cluster,
                            cluster_id: cluster[1..].parse().ok(),
                            key: &key.as_str().into(),
                            value: &v,
                            old: old
                                .as_ref()
                                .map(|v| Kept::of(v, weft_sys::seeded::digest))
                                .as_ref(),
                        });
                        stored.insert(slot, v);
                    }
                    None => {
                        if let Some(old) = stored.remove(&slot) {
                            state.on_event(ClusterEvent::Delete {
                                cluster: &cluster,
                                key: &key.as_str().into(),
                                old: &Kept::of(&old, weft_sys::seeded::digest),
                            });
                        }
                    }
                }
            }
            // The rules, checked against what was admitted.
            let nodes = state.nodes.nodes();
            let space: Vec<(String, Prefix)> = nodes
                .iter()
                .flat_map(|n| {
                    weft_state::claims::node_space(n)
                        .into_iter()
                        .map(move |p| (n.cluster.clone(), p))
                })
                .collect();
            for (i, (c1, p1)) in space.iter().enumerate() {
                for (c2, p2) in &space[i + 1..] {
                    prop_assert!(
                        c1 == c2 || !p1.overlaps(p2),
                        "{c1} {p1} and {c2} {p2} both admitted"
                    );
                }
            }
            for (prefix, entry) in state.ipcache.entries() {
                if entry.source != Source::ClusterMesh || entry.identity < 0x1_0000 {
                    continue; // a node's own address (reserved identities)
                }
                let cluster = format!("c{}", (entry.identity >> 16) & 0xFF);
                prop_assert!(
                    cluster == "c2" || cluster == "c3",
                    "{prefix}: identity {} admitted",
                    entry.identity
                );
                for (owner, p) in &space {
                    prop_assert!(
                        *owner == cluster || !p.overlaps(&prefix),
                        "{prefix} of {cluster} inside {owner}'s {p}"
                    );
                }
            }
            Ok(())
        })
        .unwrap();
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9-]{0,12}",
        any::<String>(),
        "[a-z]{1,8}".prop_map(|s| s.repeat(200)),
    ]
}

fn cluster_sync() -> impl Strategy<Value = weft_hooks::ClusterSync> {
    (text(), any::<[bool; 5]>()).prop_map(|(name, b)| weft_hooks::ClusterSync {
        name,
        connected: b[0],
        nodes_synced: b[1],
        ipcache_synced: b[2],
        identities_synced: b[3],
        services_synced: b[4],
    })
}

fn regeneration_request() -> impl Strategy<Value = weft_hooks::RegenerationRequest> {
    use weft_hooks::{Endpoint, EndpointKind, RegenerationReason, RegenerationRequest};
    let endpoint = (
        prop::bool::ANY,
        any::<u32>(),
        text(),
        text(),
        prop::collection::vec(text(), 0..16),
    )
        .prop_map(|(host, identity, namespace, name, labels)| Endpoint {
            kind: if host {
                EndpointKind::Host
            } else {
                EndpointKind::Workload
            },
            identity,
            namespace,
            name,
            labels,
        });
    let reason = prop::sample::select(vec![
        RegenerationReason::Restore,
        RegenerationReason::Create,
        RegenerationReason::IdentityChange,
        RegenerationReason::PolicyChange,
    ]);
    (
        endpoint,
        reason,
        any::<(bool, bool)>(),
        any::<u64>(),
        prop::collection::vec(cluster_sync(), 0..12),
    )
        .prop_map(
            |(endpoint, reason, (ipsec, wireguard), default_timeout_ms, clusters)| {
                RegenerationRequest {
                    endpoint,
                    reason,
                    ipsec,
                    wireguard,
                    default_timeout_ms,
                    clusters,
                }
            },
        )
}

fn peer_gc_request() -> impl Strategy<Value = weft_hooks::PeerGcRequest> {
    let peer =
        (text(), prop::collection::vec(text(), 0..8)).prop_map(|(public_key, allowed_ips)| {
            weft_hooks::RestoredPeer {
                public_key,
                allowed_ips,
            }
        });
    (
        prop::collection::vec(peer, 0..8),
        prop::collection::vec(cluster_sync(), 0..8),
    )
        .prop_map(|(peers, clusters)| weft_hooks::PeerGcRequest { peers, clusters })
}

fn sync_cluster() -> impl Strategy<Value = weft_hooks::ClusterInfo> {
    (text(), any::<Option<u32>>(), any::<[usize; 4]>()).prop_map(|(name, id, c)| {
        weft_hooks::ClusterInfo {
            name,
            id,
            counts: weft_hooks::Counts {
                nodes: c[0],
                ipcache: c[1],
                identities: c[2],
                services: c[3],
            },
        }
    })
}

#[test]
fn the_shipped_plugins_answer_any_hook_input_within_the_contract() {
    use weft_clustermesh::Resource;
    use weft_hooks::Verdict;
    use weft_plugins::wit::Decision;
    use weft_plugins::{enforce, Runtime};
    // The deadline is the host's bound on time, tested elsewhere; here a call that runs
    // out of it on a loaded machine would hide what the input did.
    let rt = Runtime::new(weft_plugins::Config {
        deadline: std::time::Duration::from_secs(2),
        ..weft_plugins::Config::default()
    })
    .unwrap();
    let mesh: weft_plugins::MeshView = std::sync::Arc::new(Vec::new);
    let component = |name: &str| {
        let path = support::plugin_wasm(name);
        rt.compile(&std::fs::read(&path).unwrap()).unwrap()
    };
    let shipped = [
        ("regeneration-policy", component("regeneration_policy"), ""),
        ("sync-events", component("sync_events"), ""),
        (
            "critical-clusters",
            component("critical_clusters"),
            "c2, c3",
        ),
    ];
    // `run` takes a `Fn`: the instances are called through a lock.
    let plugins: std::sync::Mutex<Vec<_>> = std::sync::Mutex::new(
        shipped
            .iter()
            .map(|(name, c, config)| {
                (
                    *name,
                    rt.instantiate(name, c, config, mesh.clone()).unwrap(),
                )
            })
            .collect(),
    );
    let max_wait = std::time::Duration::from_secs(300);
    let input = (
        regeneration_request(),
        peer_gc_request(),
        sync_cluster(),
        prop::sample::select(Resource::ALL.to_vec()),
    );
    // A trap leaves an instance unusable, so shrinking would report whatever input came
    // next: the first failure is kept, with its input.
    let first_failure: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);
    let result = runner().run(&input, |(request, peer_gc, cluster, resource)| {
        let outcome = (|| -> Result<(), TestCaseError> {
            for (name, plugin) in plugins.lock().unwrap().iter_mut() {
                let first = plugin
                    .regeneration_policy(&request)
                    .map_err(|e| TestCaseError::fail(format!("{name}: {e}")))?;
                let again = plugin
                    .regeneration_policy(&request)
                    .map_err(|e| TestCaseError::fail(format!("{name}: {e}")))?;
                prop_assert_eq!(
                    &first,
                    &again,
                    "{} answers the same input the same way",
                    name
                );
                if let Decision::Wait(w) = &first {
                    prop_assert!(!w.barriers.is_empty(), "{}: a wait for nothing", name);
                }
                if let Verdict::Wait { timeout, .. } = enforce(first, max_wait) {
                    prop_assert!(timeout <= max_wait);
                }
                plugin
                    .peer_gc_policy(&peer_gc)
                    .map_err(|e| TestCaseError::fail(format!("{name} peer-gc: {e}")))?;
                plugin
                    .on_synced(resource, &cluster)
                    .map_err(|e| TestCaseError::fail(format!("{name} synced: {e}")))?;
                plugin
                    .on_cluster_disconnected(&cluster)
                    .map_err(|e| TestCaseError::fail(format!("{name} disconnected: {e}")))?;
            }
            Ok(())
        })();
        if let Err(e) = &outcome {
            let mut first = first_failure.lock().unwrap();
            if first.is_none() {
                *first = Some(format!(
                    "{e}\ninput: {request:?}\n{peer_gc:?}\n{cluster:?} {resource:?}"
                ));
            }
        }
        outcome
    });
    if let Some(first) = first_failure.lock().unwrap().take() {
        panic!("first failure: {first}");
    }
    result.unwrap();
    // Configs: critical-clusters accepts a list of names or refuses with a reason.
    let configs = TestRunner::new(Config {
        cases: cases() / 20 + 1,
        failure_persistence: None,
        ..Config::default()
    })
    .run(&text(), |config| {
        let c = &shipped[2].1;
        match rt.instantiate("critical-clusters", c, &config, mesh.clone()) {
            Ok(_) => prop_assert!(config.split(',').any(|n| !n.trim().is_empty())),
            Err(e) => prop_assert!(e.to_string().contains("cluster"), "{e}"),
        }
        Ok(())
    });
    configs.unwrap();
}
