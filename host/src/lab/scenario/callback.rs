//! `vendor-callback`: the shipped `sync-events` plugin's counters against the barriers.

use super::{freeze_and_restart, lab_for, logged, Steps, Verdict, FIRST};
use crate::lab::spec::Spec;
use crate::lab::LabError;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

/// What the `sync-events` plugin of an agent counted, and the barriers behind it: per
/// resource (identities, nodes), the plugin's counter and the remote clusters whose
/// barrier is released.
async fn callbacks(state_dir: &Path) -> Option<[(u64, u64); 2]> {
    let status = crate::api::fetch_status(state_dir).await.ok()?;
    let plugin = status
        .plugins?
        .loaded
        .into_iter()
        .find(|p| p.name == "sync-events")?;
    let counter = |name: &str| plugin.counters.get(name).copied().unwrap_or(0);
    let released = |f: fn(&crate::clustermesh::ClusterStatus) -> bool| {
        status.clusters.iter().filter(|c| f(c)).count() as u64
    };
    Some([
        (
            counter("sync_events_identities"),
            released(|c| c.synced.identities),
        ),
        (counter("sync_events_nodes"), released(|c| c.synced.nodes)),
    ])
}

/// Runs `vendor-callback` on the lab in `dir`: the shipped `sync-events` plugin (a
/// vendor's sync callbacks: a counter and a log line per cluster and resource) runs in
/// every agent. cluster1's first agent is restarted with cluster2's etcd frozen, then
/// cluster2 thaws. Expected: while frozen, no identities or nodes callback has run
/// (both counters 0, both barriers pending); once thawed, each counter equals the
/// barriers released, and the plugin logged cluster2 by name. The control keeps
/// cluster2 frozen for as long and shows the callbacks held (the counters do not run
/// ahead of the barriers).
///
/// # Errors
/// [`LabError`] when the lab cannot run it.
pub async fn vendor_callback(
    dir: &Path,
    control: bool,
    out: &mut impl Write,
) -> Result<Verdict, LabError> {
    let mut state = lab_for(dir, "vendor-callback", 1)?;
    let spec = state.spec.clone();
    let node = FIRST;
    let state_dir = spec.node_dir(node).join("state");
    let steps = Steps(Instant::now());
    let restarted_at = std::time::SystemTime::now();
    let etcd = freeze_and_restart(&mut state, node)?;
    steps.say(
        out,
        format!(
            "cluster2's etcd frozen; the agent of {} restarted",
            Spec::node_name(node)
        ),
    );
    // The agent answers with its plugins loaded; the frozen cluster's barriers pending.
    let deadline = Instant::now() + Duration::from_secs(30);
    let at_start = loop {
        if let Some(c) = callbacks(&state_dir).await {
            break Some(c);
        }
        if Instant::now() > deadline {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    if !control {
        tokio::time::sleep(Duration::from_secs(1)).await;
    } else {
        // The control holds the cluster frozen as long as the run waits for it below.
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    let held = callbacks(&state_dir).await;
    etcd.thaw();
    steps.say(out, "cluster2's etcd thawed");
    let deadline = Instant::now() + Duration::from_secs(30);
    let thawed = loop {
        let c = callbacks(&state_dir).await;
        if c.is_some_and(|c| {
            c.iter()
                .all(|(counted, released)| *released > 0 && counted == released)
        }) {
            break c;
        }
        if Instant::now() > deadline {
            break c;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let logged_by_name = ["identities synced", "nodes synced"].iter().all(|what| {
        !logged(
            &spec.node_dir(node).join("weftd.log"),
            restarted_at,
            &[what, "cluster=cluster2 "],
        )
        .is_empty()
    });
    let zero = [(0, 0), (0, 0)];
    let show = |c: Option<[(u64, u64); 2]>| {
        c.map_or("no answer".to_owned(), |[(i, ib), (n, nb)]| {
            format!("identities {i} (barriers {ib}), nodes {n} (barriers {nb})")
        })
    };
    let held_ok = at_start == Some(zero) && held == Some(zero);
    let matched = thawed.is_some_and(|c| {
        c.iter()
            .all(|(counted, released)| *released > 0 && counted == released)
    });
    let passed = if control {
        held_ok
    } else {
        held_ok && matched && logged_by_name
    };
    let line = if control {
        format!(
            "vendor-callback (control: cluster2 held frozen 5 s): {} — frozen: {}",
            if passed {
                "the callbacks waited for the barriers, as expected"
            } else {
                "FAIL, a callback ran before its barrier"
            },
            show(held)
        )
    } else {
        format!(
            "vendor-callback: {} — frozen: {}; thawed: {}; logged by cluster name: {}",
            if passed {
                "PASS, the plugin's counters match the barriers"
            } else {
                "FAIL"
            },
            show(held),
            show(thawed),
            if logged_by_name { "yes" } else { "no" }
        )
    };
    Ok(Verdict {
        passed,
        line,
        gap: None,
    })
}
