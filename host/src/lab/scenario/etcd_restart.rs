//! `etcd-restart`: cluster2's etcd is stopped and started again on the same data while
//! a writer keeps changing ipcache entries in it and streams run from cluster1 to
//! cluster2's pods. Expected: nothing of cluster2 is drained from the other clusters'
//! agents while its etcd is down (its nodes, identities and ipcache entries stay, and
//! so do the streams), and once it is back every agent's view of the writer's keys
//! equals etcd's, key by key. The control treats the outage as a removal, as an agent
//! would that forgets a cluster it cannot reach: cluster2 is taken out of cluster1's
//! mesh directory while its etcd is down and put back when it returns. It shows what a
//! drain is: cluster2's state gone from cluster1's agents and the streams cut.

use super::{
    flowing_again, lab_back, lab_for, longest_gap, open_streams, pid_of, put_back, step, Steps,
    Verdict, CUT, FIRST,
};
use crate::api::IpCacheRow;
use crate::kvstore::{self, Client};
use crate::lab::process;
use crate::lab::spec::{NodeRef, PodRef, Spec};
use crate::lab::LabError;
use std::collections::BTreeMap;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long cluster2's etcd stays down.
pub const ETCD_DOWN: Duration = Duration::from_secs(5);

/// The keys the writer cycles through: addresses `.200` on in cluster2's first pod
/// CIDR, above any the lab's IPAM hands out (at most 9 pods a node).
const KEYS: u8 = 32;
const FIRST_HOST: u8 = 200;

/// Between two writes.
const WRITE_EVERY: Duration = Duration::from_millis(10);

/// How long the writer goes on once etcd answers again.
const WRITE_AFTER: Duration = Duration::from_secs(2);

/// How long every agent has to converge once the writer stopped.
const CONVERGE_WITHIN: Duration = Duration::from_secs(30);

/// The node of cluster2 whose pod CIDR the writer's addresses are in.
const WRITTEN_NODE: NodeRef = NodeRef {
    cluster: 2,
    node: 1,
};

/// The writer's address for key `k`.
fn written_ip(k: u8) -> Ipv4Addr {
    let net = Spec::pod_cidr(WRITTEN_NODE).network().octets();
    Ipv4Addr::new(net[0], net[1], net[2], FIRST_HOST + k)
}

fn is_written(ip: IpAddr) -> bool {
    (0..KEYS).any(|k| IpAddr::V4(written_ip(k)) == ip)
}

/// The writer's `i`-th operation: its key, and the identity it puts (`None`: a
/// delete). Every round over the keys changes every identity; every other round
/// deletes one key in four, so the end state has changed, deleted and re-created keys.
fn operation(i: u64) -> (u8, Option<u32>) {
    let k = u8::try_from(i % u64::from(KEYS)).expect("below KEYS");
    let round = i / u64::from(KEYS);
    if round % 2 == 1 && k % 4 == 0 {
        return (k, None);
    }
    // A cluster2 identity: its cluster ID in bits 16–23.
    let identity = (2 << 16) | (1_000 + u32::try_from(round % 50_000).expect("small"));
    (k, Some(identity))
}

/// The IP-identity pair the writer puts, as cluster2's agents would write it.
fn value(ip: Ipv4Addr, identity: u32) -> String {
    serde_json::json!({
        "IP": ip.to_string(),
        "Mask": null,
        "HostIP": Spec::node_ip(WRITTEN_NODE).to_string(),
        "ID": identity,
        "Key": 0,
        "Metadata": "etcd-restart",
        "K8sNamespace": "default",
        "K8sPodName": format!("written-{}", ip.octets()[3]),
    })
    .to_string()
}

/// What the writer did.
#[derive(Debug, Default, Clone, Copy)]
struct Writes {
    ok: u64,
    failed: u64,
}

/// Writes until `stop` is set, one operation every [`WRITE_EVERY`]; a write that fails
/// (etcd down) is counted and the next one tried.
async fn write(client: Client, stop: Arc<AtomicBool>) -> Writes {
    let mut w = Writes::default();
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let (k, identity) = operation(i);
        let ip = written_ip(k);
        let key = crate::model::layout::ip(ip);
        let op = async {
            match identity {
                Some(id) => client.put(&key, value(ip, id), 0).await,
                None => client.delete(&key).await,
            }
        };
        match tokio::time::timeout(Duration::from_millis(500), op).await {
            Ok(Ok(())) => {
                w.ok += 1;
                i += 1;
            }
            // The same operation again: the writer's sequence stays whole.
            _ => w.failed += 1,
        }
        tokio::time::sleep(WRITE_EVERY).await;
    }
    w
}

/// The writer's keys in etcd: address → identity.
async fn written_in_etcd(client: &Client) -> Result<BTreeMap<IpAddr, u32>, kvstore::Error> {
    let mut keys = BTreeMap::new();
    let prefix = crate::model::layout::Layout::PLAIN.prefix(crate::model::Resource::IpCache, "");
    for (key, value) in client.list_prefix(&prefix).await? {
        let Ok(ip) = key[prefix.len()..].parse::<IpAddr>() else {
            continue;
        };
        let id = serde_json::from_slice::<serde_json::Value>(&value)
            .ok()
            .and_then(|v| v["ID"].as_u64())
            .and_then(|id| u32::try_from(id).ok());
        if let (true, Some(id)) = (is_written(ip), id) {
            keys.insert(ip, id);
        }
    }
    Ok(keys)
}

/// The address of a host row (`addr/32`).
fn host_ip(row: &IpCacheRow) -> Option<IpAddr> {
    let net: ipnet::IpNet = row.prefix.parse().ok()?;
    (net.prefix_len() == net.max_prefix_len()).then(|| net.addr())
}

/// What one agent holds of cluster2: the rows of its nodes and pods (the writer's
/// aside), its nodes and identities; and its view of the writer's keys.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Held {
    lab: usize,
    nodes: usize,
    identities: usize,
    written: BTreeMap<IpAddr, u32>,
}

impl Held {
    fn total(&self) -> usize {
        self.lab + self.nodes + self.identities
    }
}

async fn held(spec: &Spec, agent: NodeRef) -> Option<Held> {
    let state_dir = spec.node_dir(agent).join("state");
    let status = crate::api::fetch_status(&state_dir).await.ok()?;
    let cluster = status
        .clusters
        .iter()
        .find(|c| c.name == Spec::cluster_name(2));
    let rows = crate::api::fetch_ipcache(&state_dir).await.ok()?;
    let of_cluster2 = |ip: IpAddr| {
        spec.nodes().filter(|n| n.cluster == 2).any(|n| match ip {
            IpAddr::V4(v4) => Spec::pod_cidr(n).contains(&v4) || Spec::node_ip(n) == v4,
            IpAddr::V6(_) => false,
        })
    };
    let mut h = Held {
        nodes: cluster.map_or(0, |c| c.counts.nodes),
        identities: cluster.map_or(0, |c| c.counts.identities),
        ..Held::default()
    };
    for row in &rows {
        match host_ip(row) {
            Some(ip) if is_written(ip) => {
                h.written.insert(ip, row.identity);
            }
            Some(ip) if of_cluster2(ip) => h.lab += 1,
            _ => {}
        }
    }
    Some(h)
}

/// The agents that watch cluster2: every node of every other cluster.
fn watchers(spec: &Spec) -> Vec<NodeRef> {
    spec.nodes().filter(|n| n.cluster != 2).collect()
}

/// Runs `etcd-restart` on the lab in `dir` (`control`: the outage treated as a
/// removal), telling `out` what happens. The writer's keys are deleted at the end.
///
/// # Errors
/// [`LabError`] when the lab cannot run it (too small, not running, etcd unreachable).
pub async fn etcd_restart(
    dir: &Path,
    control: bool,
    out: &mut impl Write,
) -> Result<Verdict, LabError> {
    let mut state = lab_for(dir, "etcd-restart", 2)?;
    let spec = state.spec.clone();
    let client_pod = PodRef {
        node: FIRST,
        pod: 2,
    };
    let steps = Steps(Instant::now());
    let mesh_file = spec.cluster_dir(1).join("mesh").join(Spec::cluster_name(2));
    let mesh_config =
        std::fs::read_to_string(&mesh_file).map_err(|e| step("cluster1's mesh directory", e))?;
    let endpoints = crate::clustermesh::parse_config_file(&mesh_file, &mesh_config)
        .map_err(|e| step("cluster1's mesh directory", e))?;
    let config = kvstore::Config {
        request_timeout: Duration::from_millis(500),
        ..kvstore::Config::default()
    }
    .unlimited();
    let etcd = Client::connect(&endpoints, &config)
        .await
        .map_err(|e| step("etcd of cluster2", e))?;
    let watchers = watchers(&spec);
    let mut before = Vec::new();
    for w in &watchers {
        before.push(held(&spec, *w).await.ok_or_else(|| {
            step(
                &format!("the agent of {}", Spec::node_name(*w)),
                "no answer",
            )
        })?);
    }
    let streams = open_streams(&spec, client_pod).await?;
    steps.say(
        out,
        format!(
            "{} streams from {} to cluster2's web pods flowing; {} agents hold cluster2",
            streams.len(),
            Spec::pod_name(client_pod),
            watchers.len()
        ),
    );
    let stop_writer = Arc::new(AtomicBool::new(false));
    let writer = tokio::spawn(write(etcd.clone(), stop_writer.clone()));
    // Some writes in before the outage.
    tokio::time::sleep(Duration::from_secs(1)).await;

    let what = "etcd of cluster2";
    let marker = spec.dir.to_string_lossy().into_owned();
    let pid = pid_of(&state, what)?;
    let cmd = process::command_of(pid).map_err(|e| step(what, e))?;
    let stopped = Instant::now();
    if !process::stop(pid, &marker, Duration::from_secs(5)) {
        return Err(step(what, "not running"));
    }
    steps.say(
        out,
        format!("cluster2's etcd stopped under writes, for {ETCD_DOWN:?}"),
    );
    if control {
        std::fs::remove_file(&mesh_file).map_err(|e| step("cluster1's mesh directory", e))?;
        steps.say(
            out,
            "control: cluster2 removed from cluster1's mesh directory while it is down",
        );
    }
    // The agents' views while it is down: the least each held.
    let mut least = before.clone();
    while stopped.elapsed() < ETCD_DOWN {
        for (i, w) in watchers.iter().enumerate() {
            if let Some(h) = held(&spec, *w).await {
                if h.total() < least[i].total() {
                    least[i] = h;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let log = spec.cluster_dir(2).join("etcd.log");
    let pid = process::spawn(cmd, &log).map_err(|e| step(what, e))?;
    state.started(what, pid)?;
    let started = Instant::now();
    steps.say(out, "cluster2's etcd started again on its data");
    if control {
        put_back(&mesh_file, &mesh_config)?;
        steps.say(out, "control: cluster2 added back");
    }

    // The writer goes on for a while once etcd answers, then stops.
    let deadline = started + Duration::from_secs(20);
    while Instant::now() < deadline
        && etcd
            .get(&crate::model::layout::ip(written_ip(0)))
            .await
            .is_err()
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(WRITE_AFTER).await;
    stop_writer.store(true, Ordering::Relaxed);
    let writes = writer.await.map_err(|e| step("the writer", e))?;
    let expected = written_in_etcd(&etcd).await;
    let writer_stopped = Instant::now();
    steps.say(
        out,
        format!(
            "the writer stopped: {} writes, {} failed while etcd was down",
            writes.ok, writes.failed
        ),
    );

    // Convergence: every agent's view of the writer's keys equals etcd's.
    let mut converged = None;
    if let Ok(expected) = &expected {
        let deadline = writer_stopped + CONVERGE_WITHIN;
        loop {
            let mut all = true;
            for w in &watchers {
                all &= held(&spec, *w)
                    .await
                    .is_some_and(|h| h.written == *expected);
            }
            if all {
                converged = Some(writer_stopped.elapsed());
                break;
            }
            if Instant::now() > deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    flowing_again(&streams).await;
    let end = Instant::now();
    let gap = longest_gap(&streams, stopped, end);
    let count = streams.len();
    let mut errors = Vec::new();
    for (_, s) in streams {
        errors.extend(s.close());
    }

    // The lab as it was: the writer's keys deleted, every agent back in step.
    for k in 0..KEYS {
        let _ = etcd.delete(&crate::model::layout::ip(written_ip(k))).await;
    }
    lab_back(&spec, "etcd-restart").await?;
    steps.say(out, "the writer's keys deleted; the lab is back");

    let drained: usize = before
        .iter()
        .zip(&least)
        .map(|(b, l)| {
            b.lab.saturating_sub(l.lab)
                + b.nodes.saturating_sub(l.nodes)
                + b.identities.saturating_sub(l.identities)
        })
        .sum();
    let held_before: usize = before.iter().map(Held::total).sum();
    let keys = expected.as_ref().map_or(0, BTreeMap::len);
    let passed = if control {
        drained > 0 && gap >= CUT
    } else {
        drained == 0 && errors.is_empty() && gap < CUT && converged.is_some()
    };
    let line = format!(
        "etcd-restart{}: {} — cluster2's etcd down {:.1} s under {} writes ({} failed); drained {drained} of {held_before} entries held on {} agents; {count} streams, {} errors, longest gap {:.2} s (cut: {:.0} s or more); {}",
        if control { " (control: the outage as a removal)" } else { "" },
        match (control, passed) {
            (false, true) => "PASS, nothing drained, converged",
            (false, false) => "FAIL",
            (true, true) => "drained and cut, as expected of a removal",
            (true, false) => "FAIL, no drain to show",
        },
        started.duration_since(stopped).as_secs_f64(),
        writes.ok + writes.failed,
        writes.failed,
        watchers.len(),
        errors.len(),
        gap.as_secs_f64(),
        CUT.as_secs_f64(),
        match (&expected, converged) {
            (Err(e), _) => format!("etcd not read back: {e}"),
            (Ok(_), Some(t)) => format!(
                "{keys} written keys equal on every agent {:.2} s after the writer stopped",
                t.as_secs_f64()
            ),
            (Ok(_), None) => format!(
                "{keys} written keys not equal on every agent within {CONVERGE_WITHIN:?}"
            ),
        }
    );
    Ok(Verdict {
        passed,
        line,
        gap: Some(gap),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_writer_changes_deletes_and_recreates_keys_within_cluster2() {
        let ops: Vec<_> = (0..u64::from(KEYS) * 3).map(operation).collect();
        let (first, second, third) = (
            &ops[..KEYS as usize],
            &ops[KEYS as usize..2 * KEYS as usize],
            &ops[2 * KEYS as usize..],
        );
        assert!(first.iter().all(|(_, id)| id.is_some()));
        assert_eq!(
            second.iter().filter(|(_, id)| id.is_none()).count(),
            usize::from(KEYS / 4)
        );
        assert!(third.iter().all(|(_, id)| id.is_some()));
        assert_ne!(first[1].1, third[1].1, "a round changes the identity");
        for (_, id) in ops {
            if let Some(id) = id {
                assert_eq!(id >> 16, 2, "cluster2's identities only");
            }
        }
        let cidr = Spec::pod_cidr(WRITTEN_NODE);
        assert!((0..KEYS).all(|k| cidr.contains(&written_ip(k))));
        assert!(!is_written(IpAddr::V4(Ipv4Addr::new(10, 202, 1, 9))));
    }
}
