//! `restart`: long-running TCP streams from a client pod of cluster1's first node to
//! the web pod of every cluster2 node (both ends under policy: each side judges the
//! other by identity). cluster2's etcd is frozen for 10 s and, at the same moment, the
//! client node's agent is restarted. Expected: no stream error and no gap, because the
//! restored client endpoint keeps its datapath until cluster2's identities are back.
//! The control runs the restarted agent with a regeneration policy plugin that lets
//! every endpoint proceed: the client is switched to a datapath without cluster2's
//! identities, and its packets are dropped until cluster2 thaws.

use super::{
    flowing_again, freeze_and_restart, lab_for, logged, longest_gap, open_streams, regeneration,
    step, Steps, Verdict, CUT, ETCD_PAUSE, FIRST,
};
use crate::lab::spec::{PodRef, Spec};
use crate::lab::LabError;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

/// The plugin the control installs.
const PROCEED: &str = "proceed";

/// Runs `restart` on the lab in `dir` (`control`: with the proceed plugin), telling
/// `out` what happens; with `plot`, draws the streams and the scenario's moments there.
///
/// # Errors
/// [`LabError`] when the lab cannot run it (too small, not running).
pub async fn restart(
    dir: &Path,
    control: bool,
    plot: Option<&Path>,
    out: &mut impl Write,
) -> Result<Verdict, LabError> {
    // A client and a web pod per node.
    let mut state = lab_for(dir, "restart", 2)?;
    let spec = state.spec.clone();
    let node = FIRST;
    let client = PodRef { node, pod: 2 };
    let steps = Steps(Instant::now());
    let streams = open_streams(&spec, client).await?;
    let opened = Instant::now();
    let opened_at = std::time::SystemTime::now();
    steps.say(
        out,
        format!(
            "{} streams from {} to cluster2's web pods flowing",
            streams.len(),
            Spec::pod_name(client)
        ),
    );
    if control {
        // Critical-clusters naming no cluster of the lab: every endpoint proceeds.
        crate::lab::up::install_plugin(&spec, 1, PROCEED, "critical_clusters", 100, "none")?;
        steps.say(
            out,
            "control: cluster1 gets a regeneration policy that proceeds at once",
        );
    }
    let paused = Instant::now();
    let paused_at = std::time::SystemTime::now();
    let frozen = freeze_and_restart(&mut state, node)?;
    let restarted_at = Instant::now();
    steps.say(
        out,
        format!(
            "cluster2's etcd frozen for {ETCD_PAUSE:?}; the agent of {} restarted",
            Spec::node_name(node)
        ),
    );
    if regeneration(&spec, client, ETCD_PAUSE, |r| r.reason == "restore")
        .await
        .is_none()
    {
        steps.say(
            out,
            "the restarted agent did not list the client within the pause",
        );
    }
    tokio::time::sleep((paused + ETCD_PAUSE).saturating_duration_since(Instant::now())).await;
    let during = regeneration(&spec, client, Duration::from_secs(2), |_| true).await;
    frozen.thaw();
    let thawed = Instant::now();
    steps.say(
        out,
        format!(
            "cluster2's etcd thawed; the restored client was {} during the pause",
            during
                .as_ref()
                .map_or("not listed".to_owned(), |r| r.outcome.to_string())
        ),
    );
    // The restore, or a regeneration after it (cluster2's identities arriving).
    let switched = regeneration(&spec, client, Duration::from_secs(60), |r| {
        r.reason != "create" && !r.outcome.is_waiting()
    })
    .await;
    flowing_again(&streams).await;
    if plot.is_some() {
        // The aftermath, for the picture: not a synchronisation.
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    let end = Instant::now();
    let gap = longest_gap(&streams, paused, end);
    let mut errors = Vec::new();
    let count = streams.len();
    let mut series = Vec::new();
    for (web, s) in streams {
        series.push(crate::lab::plot::Series {
            name: format!("{} → {}", Spec::pod_name(client), Spec::pod_name(web)),
            arrivals: s
                .arrivals()
                .iter()
                .map(|a| a.duration_since(opened).as_secs_f64())
                .collect(),
        });
        errors.extend(s.close());
    }
    if control {
        crate::lab::up::remove_plugin(&spec, 1, PROCEED)?;
    }
    if let Some(path) = plot {
        let since = |t: Instant| t.duration_since(opened).as_secs_f64();
        let log = spec.node_dir(node).join("weftd.log");
        let at = |t: std::time::SystemTime| {
            t.duration_since(opened_at)
                .unwrap_or_default()
                .as_secs_f64()
        };
        let mut events: Vec<crate::lab::plot::Event> = vec![
            (since(paused), "cluster2's etcd frozen".into()),
            (since(restarted_at), "agent restarted".into()),
            (since(thawed), "cluster2's etcd thawed".into()),
        ];
        let barriers = logged(&log, paused_at, &["barrier released", "\"cluster2\""]);
        if let Some(t) = barriers.iter().max() {
            events.push((at(*t), "cluster2's barriers released".into()));
        }
        let switches = logged(&log, paused_at, &["endpoint switched", "\"wft"]);
        if let Some(t) = switches.iter().max() {
            events.push((at(*t), "client endpoint switched".into()));
        }
        events.sort_by(|a, b| a.0.total_cmp(&b.0));
        let title = format!(
            "restart{}: streams across a restart with cluster2's etcd frozen",
            if control { " (control: proceed)" } else { "" }
        );
        crate::lab::plot::draw(path, &title, &series, &events, since(end))
            .map_err(|e| step(&format!("plot {}", path.display()), e))?;
        steps.say(out, format!("plot written to {}", path.display()));
    }
    let result = switched.map_or("not switched within 60 s".to_owned(), |r| {
        r.outcome.to_string()
    });
    let passed = if control {
        gap >= CUT
    } else {
        errors.is_empty() && gap < CUT
    };
    let line = format!(
        "restart{}: {} — {count} streams, {} errors, longest gap {:.2} s (cut: {:.0} s or more); client endpoint {}",
        if control { " (control: proceed)" } else { "" },
        match (control, passed) {
            (false, true) => "PASS, nothing dropped",
            (false, false) => "FAIL, disrupted",
            (true, true) => "disruption shown, as expected without the wait",
            (true, false) => "FAIL, no disruption to show",
        },
        errors.len(),
        gap.as_secs_f64(),
        CUT.as_secs_f64(),
        result,
    );
    Ok(Verdict {
        passed,
        line,
        gap: Some(gap),
    })
}

/// The baseline of `restart`: the same streams for `duration` with nothing happening,
/// their longest gap (what the restart's gap is compared with).
///
/// # Errors
/// [`LabError`] when the lab cannot run it.
pub async fn idle_gap(dir: &Path, duration: Duration) -> Result<Duration, LabError> {
    let state = lab_for(dir, "restart", 2)?;
    let spec = &state.spec;
    let client = PodRef {
        node: FIRST,
        pod: 2,
    };
    let streams = open_streams(spec, client).await?;
    let from = Instant::now();
    // The measurement's length: nothing to wait for.
    tokio::time::sleep(duration).await;
    let to = Instant::now();
    let gap = longest_gap(&streams, from, to);
    for (_, s) in streams {
        s.close();
    }
    Ok(gap)
}
