//! weft's test support, one crate that every crate's tests and the end-to-end tests
//! share (rather than a module each test binary recompiles): real etcd processes on
//! free loopback ports, a cuttable TCP proxy, a throw-away PKI, a recording observer,
//! bounded waits, network namespaces, the plugins built, and the executables
//! (`weftd`, `weft-wg`, `weft-cni`) built and started as a cluster would.
//!
//! Must not know the agent's library (`weft`): what it starts, it starts as a
//! process, so that an edit to the agent relinks no test that does not run it.

// A fixture's `new` makes directories and starts processes: a `Default` would hide
// that. `Rng::next` is a seeded generator's step, not an iterator.
#![allow(clippy::new_without_default, clippy::should_implement_trait)]

pub mod agent;
pub mod bin;
pub mod bpf;
pub mod chart;
pub mod cni;
pub mod deploy_tools;
pub mod docs;
mod etcd;
pub mod faults;
pub mod http;
mod mesh;
pub mod netns;
mod plugins;
pub mod pod;
mod proxy;
mod tls;
pub mod traffic;

pub use mesh::{counts, Lab};

pub use etcd::Etcd;
pub use faults::Rng;
pub use plugins::{cluster_sync, plugin_wasm, request};
pub use proxy::Proxy;
pub use tls::Pki;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use weft_clustermesh::{ClusterEvent, Observer, Value};
use weft_model::layout;

/// Polls `check` until it returns `Some`, at most `limit`; panics naming `what`.
pub async fn eventually<T>(what: &str, limit: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(v) = check() {
            return v;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {limit:?} waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The number in environment variable `name` (a run's size, say), or `default` when it
/// is unset or not a number.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Awaits `f` at most `limit`; panics naming `what`.
pub async fn within<T>(what: &str, limit: Duration, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(limit, f)
        .await
        .unwrap_or_else(|_| panic!("timed out after {limit:?}: {what}"))
}

/// Records what the mesh tells its observer: current state per key, and every event.
#[derive(Default)]
pub struct Recorder {
    pub state: Mutex<BTreeMap<(String, String), Value>>,
    pub upserts: Mutex<usize>,
    pub deletes: Mutex<Vec<(String, String)>>,
    /// The last size each cluster's list announced, per resource.
    pub expected: Mutex<BTreeMap<(String, weft_clustermesh::Resource), usize>>,
}

impl Recorder {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub fn keys_of(&self, cluster: &str) -> usize {
        self.state
            .lock()
            .unwrap()
            .keys()
            .filter(|(c, _)| c == cluster)
            .count()
    }

    pub fn deletes_of(&self, cluster: &str) -> usize {
        self.deletes
            .lock()
            .unwrap()
            .iter()
            .filter(|(c, _)| c == cluster)
            .count()
    }
}

impl Observer for Recorder {
    fn on_event(&self, event: ClusterEvent<'_>) {
        match event {
            ClusterEvent::Upsert {
                cluster,
                key,
                value,
                ..
            } => {
                *self.upserts.lock().unwrap() += 1;
                self.state
                    .lock()
                    .unwrap()
                    .insert((cluster.into(), key.to_string()), value.clone());
            }
            ClusterEvent::Expect {
                cluster,
                resource,
                keys,
            } => {
                self.expected
                    .lock()
                    .unwrap()
                    .insert((cluster.into(), resource), keys);
            }
            ClusterEvent::Delete { cluster, key, .. } => {
                let removed = self
                    .state
                    .lock()
                    .unwrap()
                    .remove(&(cluster.into(), key.to_string()));
                assert!(
                    removed.is_some(),
                    "delete of unknown key {key} of {cluster}"
                );
                self.deletes
                    .lock()
                    .unwrap()
                    .push((cluster.into(), key.to_string()));
            }
        }
    }
}

/// JSON of a node of `cluster`.
pub fn node_json(cluster: &str, id: u32, name: &str, ip: &str) -> String {
    format!(
        r#"{{"Name":"{name}","Cluster":"{cluster}","ClusterID":{id},"IPAddresses":[{{"Type":"InternalIP","IP":"{ip}"}}]}}"#
    )
}

/// JSON of an ipcache entry, tunnelled to 198.51.100.1: no test agent's address (a
/// remote cluster's entry may not tunnel to another cluster's node).
pub fn ip_json(ip: &str, id: u32) -> String {
    format!(
        r#"{{"IP":"{ip}","Mask":null,"HostIP":"198.51.100.1","ID":{id},"Key":0,"Metadata":""}}"#
    )
}

/// JSON of a service of `cluster`.
pub fn service_json(cluster: &str, id: u32, ns: &str, name: &str) -> String {
    format!(
        r#"{{"cluster":"{cluster}","namespace":"{ns}","name":"{name}","frontends":{{}},"backends":{{}},"labels":{{}},"selector":{{}},"includeExternal":false,"shared":true,"clusterID":{id}}}"#
    )
}

/// Writes a cluster's state in the plain layout: `n` of each resource.
pub async fn seed_cluster(etcd: &Etcd, cluster: &str, id: u32, n: usize) {
    let mut kv = Vec::new();
    for i in 0..n {
        let ip = format!("10.{}.{}.{}", id, i / 250, i % 250 + 1);
        kv.push((
            layout::node(cluster, &format!("node-{i}")),
            node_json(cluster, id, &format!("node-{i}"), &ip),
        ));
        kv.push((layout::ip(&ip), ip_json(&ip, (id << 16) + 100 + i as u32)));
        kv.push((
            layout::identity((id << 16) + 100 + i as u32),
            format!("k8s:app=a{i};k8s:io.cilium.k8s.policy.cluster={cluster};"),
        ));
        kv.push((
            layout::service(cluster, "ns", &format!("svc-{i}")),
            service_json(cluster, id, "ns", &format!("svc-{i}")),
        ));
    }
    etcd.put_all(&kv).await;
}

/// Writes a cluster config.
pub async fn put_cluster_config(etcd: &Etcd, cluster: &str, json: &str) {
    etcd.put(&layout::cluster_config(cluster), json).await;
}

/// The CPU time (user and system) process `pid` has used so far, from
/// `/proc/PID/stat`; zero when it cannot be read.
#[allow(dead_code)] // the benches' measure
pub fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command (which may hold spaces) start after its ")".
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    // utime and stime are fields 14 and 15 of the line: 12 and 13 after the command.
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|i| fields.get(*i)?.parse::<u64>().ok())
        .sum();
    let per_second = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .map_or(100, |t| t as u64);
    Duration::from_millis(ticks * 1000 / per_second.max(1))
}

/// Writes the clustermesh config file of `cluster` pointing at `url`.
pub fn write_config_file(dir: &std::path::Path, cluster: &str, url: &str) {
    let tmp = dir.join(format!(".{cluster}.tmp"));
    std::fs::write(&tmp, format!("endpoints:\n- {url}\n")).unwrap();
    std::fs::rename(tmp, dir.join(cluster)).unwrap();
}

/// Whether this process may load BPF (root, a bpffs mount point). Says loudly, naming
/// `test`, when not: such tests then do nothing.
pub fn bpf_available(test: &str) -> bool {
    let root = std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"));
    let ok = root && std::path::Path::new("/sys/fs/bpf").exists();
    if !ok {
        eprintln!("SKIPPED {test}: needs root and a bpffs at /sys/fs/bpf");
    }
    ok
}

/// Whether this process may run WireGuard devices in namespaces: root (see
/// [`bpf_available`]) and `/dev/net/tun`. Says loudly, naming `test`, when not.
pub fn wireguard_available(test: &str) -> bool {
    if !bpf_available(test) {
        return false;
    }
    let tun = std::path::Path::new("/dev/net/tun").exists();
    if !tun {
        eprintln!("SKIPPED {test}: needs /dev/net/tun");
    }
    tun
}
