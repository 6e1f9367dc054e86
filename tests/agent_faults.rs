//! Fault injection on the agent itself: while a writer keeps putting and deleting a
//! remote cluster's ipcache entries, `weftd` is killed (SIGKILL, as the OOM killer or a
//! node crash would) at random points — before, during and after its initial lists —
//! and started again over the same directories. After the last restart the agent must
//! converge on the remote etcd entry by entry, and its last life must release each of
//! the cluster's barriers exactly once. With WireGuard and the BPF datapath on, the
//! agent also stopped (SIGTERM) at random, and the remote etcd frozen and thawed at
//! random points, no restored peer may ever be
//! missing from the device, and the datapath's ipcache maps must equal the ipcache.
//! The seed is printed (`WEFT_FAULT_SEED` replays a run); so are the faults.

use weft_testkit as support;

use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::agent::{cluster_config, Agent};
use support::netns::Netns;
use support::{eventually, ip_json, write_config_file, Etcd, Rng};

/// The writer's entries live in 10.2.200.0/24, where no node of the cluster is.
const PREFIX: &str = "cilium/state/ip/v1/default/10.2.200.";

/// The remote etcd's entries of the writer's range: prefix → identity.
async fn etcd_entries(etcd: &Etcd) -> BTreeMap<String, u32> {
    let mut c = etcd.client().await;
    let all = c
        .get(PREFIX, Some(etcd_client::GetOptions::new().with_prefix()))
        .await
        .unwrap();
    all.kvs()
        .iter()
        .map(|kv| {
            let v: serde_json::Value = serde_json::from_slice(kv.value()).unwrap();
            let ip = v["IP"].as_str().unwrap();
            (format!("{ip}/32"), v["ID"].as_u64().unwrap() as u32)
        })
        .collect()
}

/// Puts and deletes entries of the writer's range in `remote` (a quarter deletes),
/// `value` making an entry's JSON from its host number and identity, until `stop`.
/// Returns how many writes it made.
fn writer(
    remote: &Arc<Etcd>,
    seed: u64,
    stop: &Arc<AtomicBool>,
    value: impl Fn(u64, u32) -> String + Send + 'static,
) -> tokio::task::JoinHandle<u64> {
    let (remote, stop) = (remote.clone(), stop.clone());
    let mut rng = Rng(seed.rotate_left(17) | 1);
    tokio::spawn(async move {
        let mut writes = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let host = 1 + rng.below(200);
            let key = format!("{PREFIX}{host}");
            if rng.below(4) == 0 {
                remote.delete(&key).await;
            } else {
                let id = (2 << 16) + 100 + rng.below(2_000) as u32;
                remote.put(&key, &value(host, id)).await;
            }
            writes += 1;
            // The writer's pace, not a synchronisation.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        writes
    })
}

/// The agent's resolved entries of the writer's range: prefix → identity.
fn agent_entries(agent: &Agent) -> Option<BTreeMap<String, u32>> {
    let rows = agent.json(&["ipcache", "list"])?;
    Some(
        rows.as_array()?
            .iter()
            .filter_map(|r| {
                let prefix = r["prefix"].as_str()?;
                let identity = r["identity"].as_u64()? as u32;
                prefix
                    .starts_with("10.2.200.")
                    .then(|| (prefix.to_owned(), identity))
            })
            .collect(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_agent_converges_on_etcd_through_random_kills_and_local_etcd_loss() {
    let seed = support::faults::seed();
    let mut rng = Rng(seed);
    let mut local = Etcd::start().await;
    let remote = Arc::new(Etcd::start().await);
    // Enough keys that a kill can land in the middle of the initial lists.
    support::seed_cluster(&remote, "c2", 2, 2_000).await;
    let mut agent = Agent::start("c1", 1, &local);
    write_config_file(agent.mesh_dir.path(), "c2", &remote.url());

    let stop = Arc::new(AtomicBool::new(false));
    let writer = writer(&remote, seed, &stop, |host, id| {
        ip_json(&format!("10.2.200.{host}"), id)
    });

    let faults = 10;
    let (mut log, mut kills) = (Vec::new(), 0);
    for i in 0..faults {
        // From at once (before its first list) to well into its watches.
        let after = Duration::from_millis(rng.below(2_500));
        tokio::time::sleep(after).await;
        if rng.below(4) == 0 {
            // The local etcd lost (its data gone): the agent must publish its node
            // again, on a new lease, while the remote cluster goes on.
            local.restart_empty().await;
            log.push(format!("local etcd lost after {after:?}"));
        } else {
            agent.kill();
            kills += 1;
            log.push(format!("kill {i} after {after:?}"));
            agent.start_again(&[]);
        }
    }
    stop.store(true, Ordering::Relaxed);
    let writes = writer.await.unwrap();
    println!(
        "{faults} faults ({kills} kills) during {writes} writes: {}",
        log.join(", ")
    );

    // Converged: every entry of etcd's range with its identity, and nothing else.
    let want = etcd_entries(&remote).await;
    assert!(!want.is_empty(), "the writer left entries");
    let got = eventually(
        "c2 ready and the agent equal to etcd",
        Duration::from_secs(60),
        || {
            let ready = agent.status_json()?["clusters"]
                .as_array()?
                .iter()
                .any(|c| c["name"] == "c2" && c["ready"] == true);
            agent_entries(&agent).filter(|got| ready && *got == want)
        },
    )
    .await;
    assert_eq!(got.len(), want.len());
    // Its node is on the local etcd, whichever etcd that is now, on a lease.
    let key = "cilium/state/nodes/v1/c1/c1-node";
    support::within(
        "the node record on the local etcd",
        Duration::from_secs(30),
        async {
            loop {
                let mut c = local.client().await;
                if let Ok(r) = c.get(key, None).await {
                    if r.kvs().first().is_some_and(|kv| kv.lease() != 0) {
                        return;
                    }
                }
                // The polling pace: etcd has no event for "written by the agent".
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        },
    )
    .await;

    // The last life released each of c2's barriers exactly once.
    let text = agent.log();
    // Each life's first line serves the health endpoints.
    let last_life = text
        .rsplit_once("serving /healthz and /readyz")
        .map_or(text.as_str(), |(_, after)| after);
    for resource in ["nodes", "ipcache", "identities", "services"] {
        let released = last_life
            .lines()
            .filter(|l| l.contains("barrier released") && l.contains("c2"))
            .filter(|l| l.contains(&format!("\"resource\":\"{resource}\"")))
            .count();
        assert_eq!(
            released,
            1,
            "{resource} released once in the last life:\n{}",
            last_life
                .lines()
                .filter(|l| l.contains("barrier") || l.contains("serving"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

/// The remote cluster's nodes in the WireGuard run: each a WireGuard peer of the
/// agent's device. Their addresses are in no namespace and nothing is sent to them.
const NODES: u8 = 6;

fn node_ip(n: u8) -> String {
    format!("10.2.100.{n}")
}

fn node_key(n: u8) -> String {
    wireguard_control::Key([n; 32]).to_base64()
}

/// The public keys of the peers on the userspace device `dev`, read from its UAPI
/// socket (the device outlives the agent); `None` when it does not answer.
fn device_keys(dev: &str) -> Option<BTreeSet<String>> {
    let iface: wireguard_control::InterfaceName = dev.parse().ok()?;
    let device =
        wireguard_control::Device::get(&iface, wireguard_control::Backend::Userspace).ok()?;
    Some(
        device
            .peers
            .iter()
            .map(|p| p.config.public_key.to_base64())
            .collect(),
    )
}

/// The datapath's pins, removed however the test ends.
struct BpfRoot(PathBuf);

impl Drop for BpfRoot {
    fn drop(&mut self) {
        weft_datapath::Datapath::remove_all(&self.0);
    }
}

/// What a WireGuard kill run saw.
struct KillRun {
    /// Device reads in which a node's peer was missing: when, and how many.
    lost: Vec<String>,
    /// Device reads made (and unanswered).
    reads: usize,
    unanswered: usize,
}

/// How a kill run goes.
struct Faults {
    rounds: usize,
    /// Freeze the remote etcd before the first restart (later ones: at random).
    freeze_first: bool,
    /// The bounds of a life, in milliseconds.
    life_ms: (u64, u64),
}

/// Kills (SIGKILL, or a third of the time SIGTERM) and restarts the agent at random
/// points, freezing or thawing the remote etcd at random before each restart, and
/// reads the device every 20 ms throughout: every node's peer must be on it at every
/// read.
async fn kill_run(run: &mut WireGuardRun, rng: &mut Rng, how: Faults) -> KillRun {
    let flags: Vec<&OsStr> = run.flags.iter().map(OsString::as_os_str).collect();
    let (agent, remote, dev) = (&mut run.agent, &run.remote, &run.dev);
    let want: BTreeSet<String> = (1..=NODES).map(node_key).collect();
    let mut seen = KillRun {
        lost: Vec::new(),
        reads: 0,
        unanswered: 0,
    };
    let mut frozen = false;
    let mut faults = Vec::new();
    let started = Instant::now();
    for i in 0..how.rounds {
        let freeze = if i == 0 && how.freeze_first {
            true
        } else {
            rng.below(2) == 0
        };
        if freeze != frozen {
            if freeze {
                remote.pause();
            } else {
                remote.resume();
            }
            frozen = freeze;
            faults.push(format!(
                "{} remote etcd",
                if freeze { "froze" } else { "thawed" }
            ));
        }
        // A crash, or a stop by the supervisor (which must not collect either).
        let how_ended = if rng.below(3) == 0 {
            agent.stop();
            "SIGTERM"
        } else {
            agent.kill();
            "SIGKILL"
        };
        agent.start_again(&flags);
        let life = rng.millis(how.life_ms.0, how.life_ms.1);
        faults.push(format!("{how_ended} {i}, next life {life:?}"));
        let until = Instant::now() + life;
        while Instant::now() < until {
            seen.reads += 1;
            match device_keys(dev) {
                Some(keys) => {
                    let missing: Vec<&String> = want.difference(&keys).collect();
                    if !missing.is_empty() {
                        seen.lost.push(format!(
                            "{:?} into the run (life {i}, etcd {}): {} peers missing",
                            started.elapsed(),
                            if frozen { "frozen" } else { "thawed" },
                            missing.len()
                        ));
                    }
                }
                None => seen.unanswered += 1,
            }
            // The reading pace, not a synchronisation.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    if frozen {
        remote.resume();
        faults.push("thawed remote etcd".into());
    }
    println!("faults: {}", faults.join(", "));
    seen
}

/// cluster1's agent with WireGuard and the BPF datapath in a namespace of its own,
/// cluster2's nodes and a writer on cluster2's ipcache, pods tunnelled to its nodes.
struct WireGuardRun {
    // Dropped in this order: the agent, the device's helper, the pins, the
    // namespaces, the etcds.
    agent: Agent,
    flags: Vec<OsString>,
    _device: support::traffic::StopDevice,
    root: BpfRoot,
    _ns: (Netns, Netns),
    remote: Arc<Etcd>,
    _local: Etcd,
    dev: String,
}

async fn wireguard_run(test: &str, extra: &[&str]) -> Option<WireGuardRun> {
    if !support::wireguard_available(test) {
        return None;
    }
    let local = Etcd::start().await;
    let remote = Arc::new(Etcd::start().await);
    cluster_config("cluster1", 1, &local, false);
    cluster_config("cluster2", 2, &remote, false);
    let mut kv = Vec::new();
    for n in 1..=NODES {
        kv.push((
            format!("cilium/state/nodes/v1/cluster2/n{n}"),
            format!(
                r#"{{"Name":"n{n}","Cluster":"cluster2","ClusterID":2,"IPAddresses":[{{"Type":"InternalIP","IP":"{}"}}],"WireguardPubKey":"{}"}}"#,
                node_ip(n),
                node_key(n)
            ),
        ));
    }
    remote.put_all(&kv).await;
    let ns = support::netns::joined_pair(test);
    let dev = format!("w{test}{}", std::process::id() % 100_000);
    let device = support::traffic::StopDevice(dev.clone());
    let root = BpfRoot(PathBuf::from(format!(
        "/sys/fs/bpf/weft-test-{}-{test}",
        std::process::id()
    )));
    weft_datapath::Datapath::remove_all(&root.0);
    let mut flags: Vec<OsString> = ["--wireguard", "--wireguard-device", &dev]
        .iter()
        .map(OsString::from)
        .collect();
    flags.extend([
        "--wireguard-helper".into(),
        support::bin::weft_wg().into(),
        "--datapath-netns".into(),
        ns.0.path().into(),
        "--native-device".into(),
        "weftv0".into(),
        "--bpf-root".into(),
        root.0.clone().into(),
    ]);
    flags.extend(extra.iter().map(OsString::from));
    let refs: Vec<&OsStr> = flags.iter().map(OsString::as_os_str).collect();
    let agent = Agent::start_node("cluster1", 1, &local, "10.100.0.1", &refs);
    write_config_file(agent.mesh_dir.path(), "cluster2", &remote.url());
    Some(WireGuardRun {
        agent,
        flags,
        _device: device,
        root,
        _ns: ns,
        remote,
        _local: local,
        dev,
    })
}

/// A pod of cluster2 on node `1 + host % NODES`, keyed for WireGuard.
fn tunnelled_pod(host: u64, id: u32) -> String {
    let node = node_ip(1 + (host % u64::from(NODES)) as u8);
    format!(
        r#"{{"IP":"10.2.200.{host}","Mask":null,"HostIP":"{node}","ID":{id},"Key":255,"Metadata":""}}"#
    )
}

/// Waits until the device has every node's peer.
async fn every_peer_on(dev: &str) {
    let want: BTreeSet<String> = (1..=NODES).map(node_key).collect();
    eventually(
        "every node's peer on the device",
        Duration::from_secs(60),
        || device_keys(dev).filter(|k| *k == want).map(drop),
    )
    .await;
}

/// The agent's resolved ipcache and its datapath generation's maps, each as
/// (prefix, identity, tunnel endpoint, key) rows; `None` while the agent does not
/// answer. The maps are read from their pins with `weftd ipcache map`.
fn ipcache_and_maps(run: &WireGuardRun) -> Option<(Vec<Value>, Vec<Value>)> {
    let generation = run.agent.status_json()?["datapath"]["generation"].as_u64()?;
    // (prefix, identity, tunnel endpoint, key) of each row, sorted by prefix.
    let rows = |list: &Value| -> Option<Vec<Value>> {
        let mut rows: Vec<Value> = list
            .as_array()?
            .iter()
            .map(|r| {
                json!([
                    r["prefix"],
                    r["identity"],
                    r["tunnel_endpoint"],
                    r["encrypt_key"]
                ])
            })
            .collect();
        rows.sort_by_key(|r| r[0].as_str().unwrap_or_default().to_owned());
        Some(rows)
    };
    let ipcache = rows(&run.agent.json(&["ipcache", "list"])?)?;
    let out = std::process::Command::new(support::bin::weftd())
        .args(["ipcache", "map", "-o", "json", "--generation"])
        .arg(generation.to_string())
        .arg("--bpf-root")
        .arg(&run.root.0)
        .output()
        .ok()?;
    let map: Value = serde_json::from_slice(&out.stdout).ok()?;
    assert_eq!(map["generation"], generation);
    let maps = rows(&map["entries"])?;
    Some((ipcache, maps))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_restored_peer_is_lost_and_the_maps_equal_the_ipcache_through_random_kills_and_freezes()
{
    let Some(mut run) = wireguard_run("wfk", &[]).await else {
        return;
    };
    let seed = support::faults::seed();
    let mut rng = Rng(seed);
    let stop = Arc::new(AtomicBool::new(false));
    let writer = writer(&run.remote, seed, &stop, tunnelled_pod);
    every_peer_on(&run.dev).await;

    // Lives from none at all (killed before its first list) to well into its watches.
    let faults = Faults {
        rounds: 8,
        freeze_first: true,
        life_ms: (0, 2_500),
    };
    let seen = kill_run(&mut run, &mut rng, faults).await;
    stop.store(true, Ordering::Relaxed);
    let writes = writer.await.unwrap();
    println!(
        "{writes} writes; {} device reads, {} unanswered",
        seen.reads, seen.unanswered
    );
    assert!(
        seen.lost.is_empty(),
        "restored peers went missing:\n{}",
        seen.lost.join("\n")
    );
    assert!(seen.reads > seen.unanswered, "the device answered");

    // Converged: the ipcache equals etcd, every peer is on the device, and the
    // agent's datapath generation holds exactly the ipcache.
    let want = etcd_entries(&run.remote).await;
    eventually(
        "cluster2 ready and the agent equal to etcd",
        Duration::from_secs(60),
        || {
            let ready = run.agent.status_json()?["clusters"]
                .as_array()?
                .iter()
                .any(|c| c["name"] == "cluster2" && c["ready"] == true);
            agent_entries(&run.agent).filter(|got| ready && *got == want)
        },
    )
    .await;
    every_peer_on(&run.dev).await;
    let (ipcache, maps) = eventually(
        "the datapath maps equal the ipcache",
        Duration::from_secs(30),
        || ipcache_and_maps(&run).filter(|(i, m)| i == m),
    )
    .await;
    assert!(
        ipcache.len() > want.len(),
        "the writer's entries and the nodes' are in both: {}",
        ipcache.len()
    );
    assert!(maps.iter().any(|r| r[3] == 255), "WireGuard-keyed entries");

    // The operator's view of the same maps, and a generation that is not pinned.
    let map = |generation: &str| {
        std::process::Command::new(support::bin::weftd())
            .args(["ipcache", "map", "--bpf-root"])
            .arg(&run.root.0)
            .args(["--generation", generation])
            .output()
            .unwrap()
    };
    let generation = run.agent.status_json().unwrap()["datapath"]["generation"].clone();
    let shown = map(&generation.to_string());
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(
        text.starts_with(&format!("generation {generation}: ")),
        "{text}"
    );
    assert!(
        text.contains("PREFIX") && text.contains("10.2.200."),
        "{text}"
    );
    let missing = map("999999");
    assert!(!missing.status.success());
    let error = String::from_utf8_lossy(&missing.stderr);
    assert!(error.contains("no generation 999999 pinned"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn control_with_early_gc_a_kill_while_the_remote_etcd_is_frozen_loses_peers() {
    let Some(mut run) = wireguard_run("wfc", &["--wireguard-unsafe-early-gc"]).await else {
        return;
    };
    let seed = support::faults::seed();
    let mut rng = Rng(seed);
    every_peer_on(&run.dev).await;
    // One restart with the remote etcd frozen, read for 3 s.
    let faults = Faults {
        rounds: 1,
        freeze_first: true,
        life_ms: (3_000, 3_001),
    };
    let seen = kill_run(&mut run, &mut rng, faults).await;
    assert!(
        !seen.lost.is_empty(),
        "without the wait, the frozen cluster's restored peers are collected"
    );
}
