//! `cluster-removed-mid-sync`: a remote cluster removed while endpoints wait for it.

use super::{
    freeze_and_restart, lab_back, lab_for, put_back, regeneration, step, Steps, Verdict, FIRST,
};
use crate::lab::spec::{PodRef, Spec};
use crate::lab::LabError;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};
use weft_api::endpoint::Outcome;

/// Runs `cluster-removed-mid-sync` on the lab in `dir`: cluster2's etcd is frozen and
/// cluster1's first node's agent restarted, so its restored endpoints wait for
/// cluster2; then cluster2 is removed from cluster1's mesh directory. Expected: the
/// waits end at once, as disconnected, with no deadlock. The control leaves cluster2
/// in place: the waits go on while it is frozen. Either way the lab is put back
/// (cluster2 added again, thawed) and waited for.
///
/// # Errors
/// [`LabError`] when the lab cannot run it.
pub async fn cluster_removed(
    dir: &Path,
    control: bool,
    out: &mut impl Write,
) -> Result<Verdict, LabError> {
    let mut state = lab_for(dir, "cluster-removed-mid-sync", 1)?;
    let spec = state.spec.clone();
    let node = FIRST;
    let pod = PodRef { node, pod: 1 };
    let steps = Steps(Instant::now());
    let restarted_at = std::time::SystemTime::now();
    let frozen = freeze_and_restart(&mut state, node)?;
    let thaw = |out: &mut dyn Write| {
        frozen.thaw();
        steps.say(out, "cluster2's etcd thawed");
    };
    steps.say(
        out,
        format!(
            "cluster2's etcd frozen; the agent of {} restarted: its endpoints wait for cluster2",
            Spec::node_name(node)
        ),
    );
    // Waiting in earnest: the policy has decided and the wait took cluster2. (The
    // listing says "waiting" from the start; removed before the agent's first read of
    // its mesh directory, cluster2 would never be waited for.)
    let waiting = regeneration(&spec, pod, Duration::from_secs(20), |r| {
        r.reason == "restore"
            && r.outcome.is_waiting()
            && r.waiting_for.iter().any(|c| c == "cluster2")
    })
    .await;
    if waiting.is_none() {
        thaw(out);
        return Err(step(
            "cluster-removed-mid-sync",
            format!("{} never waited for cluster2", Spec::pod_name(pod)),
        ));
    }
    let mesh_file = spec.cluster_dir(1).join("mesh").join(Spec::cluster_name(2));
    let config = std::fs::read(&mesh_file).map_err(|e| step("cluster1's mesh directory", e))?;
    let removed = Instant::now();
    if !control {
        std::fs::remove_file(&mesh_file).map_err(|e| step("cluster1's mesh directory", e))?;
        steps.say(out, "cluster2 removed from cluster1's mesh directory");
    } else {
        steps.say(out, "control: cluster2 stays in cluster1's mesh directory");
    }
    // The removal's effect is bounded by the directory's rescan; the control watches
    // for as long.
    let ended = regeneration(&spec, pod, Duration::from_secs(5), |r| {
        r.reason != "create" && !r.outcome.is_waiting()
    })
    .await
    .map(|r| (r.reason, r.outcome));
    let took = removed.elapsed();
    // The restore's own outcome, from the agent's log: a regeneration may follow it at
    // once (cluster2's identities went with it) and take its place in the listing.
    let ended = ended.map(|(reason, result)| {
        restore_result(&spec.node_dir(node).join("weftd.log"), pod, restarted_at)
            .map_or((reason, result), |r| ("restore".to_owned(), r))
    });
    if !control {
        put_back(&mesh_file, &config)?;
        steps.say(out, "cluster2 added back");
    }
    thaw(out);
    lab_back(&spec, "cluster-removed-mid-sync").await?;
    steps.say(
        out,
        "the lab is back: every cluster synced, every pod switched",
    );
    let result = ended.as_ref().map(|(_, r)| r.clone());
    let passed = if control {
        ended.is_none()
    } else {
        matches!(&result, Some(Outcome::Synced { disconnected }) if disconnected.iter().any(|c| c == "cluster2"))
    };
    let line = format!(
        "cluster-removed-mid-sync{}: {} — {} {}",
        if control {
            " (control: not removed)"
        } else {
            ""
        },
        match (control, passed) {
            (false, true) => "PASS, the waits ended at once",
            (false, false) => "FAIL, the waits did not end",
            (true, true) => "the waits go on while the cluster is frozen, as expected",
            (true, false) => "FAIL, a wait ended with the cluster frozen",
        },
        Spec::pod_name(pod),
        match result {
            Some(r) => format!("ended {:.2} s after: {r}", took.as_secs_f64()),
            None => format!("still waiting {:.1} s after", took.as_secs_f64()),
        }
    );
    Ok(Verdict {
        passed,
        line,
        gap: None,
    })
}

/// The result of pod `p`'s restore regeneration logged (in the agent's JSON log at
/// `path`) since `since`.
fn restore_result(path: &Path, p: PodRef, since: std::time::SystemTime) -> Option<Outcome> {
    let key = format!("\"endpoint\":\"{}/eth0\"", Spec::pod_name(p));
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter(|l| l.contains("endpoint regenerated") && l.contains(&key))
        .filter(|l| l.contains("\"reason\":\"restore\""))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .rfind(|v| {
            v["timestamp"]
                .as_str()
                .and_then(|t| humantime::parse_rfc3339_weak(t.trim_end_matches('Z')).ok())
                .is_some_and(|t| t >= since)
        })
        .and_then(|v| serde_json::from_str(v["fields"]["outcome"].as_str()?).ok())
}
