//! Fault injection on the agent itself: while a writer keeps putting and deleting a
//! remote cluster's ipcache entries, `weftd` is killed (SIGKILL, as the OOM killer or a
//! node crash would) at random points — before, during and after its initial lists —
//! and started again over the same directories. After the last restart the agent must
//! converge on the remote etcd entry by entry, and its last life must release each of
//! the cluster's barriers exactly once. The seed is printed (`WEFT_FAULT_SEED` replays
//! a run); so are the kills.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::agent::Agent;
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
async fn the_agent_converges_on_etcd_through_random_kills() {
    let seed = support::faults::seed();
    let mut rng = Rng(seed);
    let local = Etcd::start().await;
    let remote = Arc::new(Etcd::start().await);
    // Enough keys that a kill can land in the middle of the initial lists.
    support::seed_cluster(&remote, "c2", 2, 2_000).await;
    let mut agent = Agent::start("c1", 1, &local);
    write_config_file(agent.mesh_dir.path(), "c2", &remote.url());

    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
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
                    remote
                        .put(&key, &ip_json(&format!("10.2.200.{host}"), id))
                        .await;
                }
                writes += 1;
                // The writer's pace, not a synchronisation.
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            writes
        })
    };

    let kills = 8;
    let mut log = Vec::new();
    for i in 0..kills {
        // From at once (before its first list) to well into its watches.
        let after = Duration::from_millis(rng.below(2_500));
        tokio::time::sleep(after).await;
        agent.kill();
        log.push(format!("kill {i} after {after:?}"));
        agent.start_again(&[]);
    }
    stop.store(true, Ordering::Relaxed);
    let writes = writer.await.unwrap();
    println!("{} kills during {writes} writes: {}", kills, log.join(", "));

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
