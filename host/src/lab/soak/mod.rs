//! `weftd lab soak`: the lab under churn for a long time — pods added and deleted,
//! a cluster removed from the mesh and put back, a node's agent stopped and started,
//! plugins reloaded, an etcd frozen and thawed — while streams run from cluster1 to
//! cluster2. Every agent's memory, open files, threads and runtime tasks are sampled.
//! Expected: the streams see no error and no cut, and (over 10 minutes or more) what
//! the agents hold stays flat: a leak shows as a climb.
//!
//! - [`churn`]: the steps, each undone by a later one;
//! - [`sample`]: what is read of each agent, and when a curve counts as flat;
//! - [`plot`]: the curves, drawn.

pub mod churn;
pub mod plot;
pub mod sample;

use super::scenario::{lab_back, longest_gap, open_streams, Verdict, CUT};
use super::spec::{NodeRef, PodRef};
use super::state::LabState;
use super::LabError;
use churn::{Churn, CYCLE};
use sample::Sample;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How a soak runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// How long the churn goes on.
    pub duration: Duration,
    /// The time between churn steps.
    pub every: Duration,
    /// The time between samples.
    pub sample_every: Duration,
    /// `weft-cni`.
    pub cni: PathBuf,
    /// The kinds of churn to run; all when empty (one kind alone tells which one a
    /// climb comes with).
    pub kinds: Vec<churn::Kind>,
    /// Draw the curves into this SVG file.
    pub plot: Option<PathBuf>,
    /// Write every sample into this CSV file.
    pub csv: Option<PathBuf>,
}

/// A run shorter than this is not judged for flatness: its curves are all warm-up.
pub const JUDGED_FROM: Duration = Duration::from_secs(600);

/// What a leak may not exceed between the second and the last quarter of the run:
/// resident memory 10 % plus 4 MiB; open files and runtime tasks 4 more.
const RSS_ALLOWANCE: (f64, f64) = (0.10, 4096.0);
const COUNT_ALLOWANCE: f64 = 4.0;

/// Runs the soak on the lab in `dir`, telling `out` what happens.
///
/// # Errors
/// [`LabError`] when the lab cannot run it (too small, not running) or a churn step
/// cannot be taken.
pub async fn soak(
    dir: &Path,
    options: &Options,
    out: &mut impl Write,
) -> Result<Verdict, LabError> {
    let state = LabState::read(&dir.join("lab.json"))?;
    let mut churn = Churn::new(state, options.cni.clone())?;
    let spec = churn.spec().clone();
    let started = Instant::now();
    let say = |out: &mut dyn Write, line: &str| {
        let _ = writeln!(out, "[{:>7.1}s] {line}", started.elapsed().as_secs_f64());
    };
    let client = PodRef {
        node: NodeRef {
            cluster: 1,
            node: 1,
        },
        pod: 2,
    };
    let streams = open_streams(&spec, client).await?;
    let opened = Instant::now();
    say(
        out,
        &format!(
            "{} streams from {} to cluster2's web pods flowing; churn every {:?} for {:?}",
            streams.len(),
            super::spec::Spec::pod_name(client),
            options.every,
            options.duration
        ),
    );
    let cycle: Vec<churn::Step> = CYCLE
        .iter()
        .copied()
        .filter(|s| options.kinds.is_empty() || options.kinds.contains(&s.kind()))
        .collect();
    let mut samples: Vec<Sample> = Vec::new();
    let (mut next_step, mut next_sample) = (started + options.every, started);
    let mut step = 0usize;
    let end = started + options.duration;
    let mut failed = None;
    while Instant::now() < end {
        let now = Instant::now();
        if now >= next_sample {
            let at = started.elapsed().as_secs_f64();
            for n in spec.nodes().collect::<Vec<_>>() {
                let pid = churn.agent_pid(n).unwrap_or(0);
                if let Some(s) = sample::agent(&spec, n, pid, at).await {
                    samples.push(s);
                }
            }
            next_sample = now + options.sample_every;
        }
        if now >= next_step {
            let what = cycle[step % cycle.len()];
            step += 1;
            match churn.take(what).await {
                Ok(line) => say(out, &line),
                Err(e) => {
                    say(out, &format!("churn step {what:?} failed: {e}"));
                    failed = Some(e);
                    break;
                }
            }
            next_step = Instant::now() + options.every;
        }
        let wake = next_step.min(next_sample).min(end);
        tokio::time::sleep(wake.saturating_duration_since(Instant::now())).await;
    }
    let churn_end = Instant::now();
    for line in churn.restore().await? {
        say(out, &line);
    }
    let back = lab_back(&spec, "soak").await;
    let gap = longest_gap(&streams, opened, Instant::now());
    let mut errors = Vec::new();
    for (_, s) in streams {
        errors.extend(s.close());
    }
    let seconds = churn_end.duration_since(started).as_secs_f64();
    if let Some(path) = &options.csv {
        std::fs::write(path, sample::csv(&samples)).map_err(|e| LabError::Step {
            what: format!("csv {}", path.display()),
            reason: e.to_string(),
        })?;
        say(out, &format!("samples written to {}", path.display()));
    }
    if let Some(path) = &options.plot {
        let title = format!(
            "soak: {} agents over {:.0} min, a churn step every {:?}",
            spec.nodes().count(),
            seconds / 60.0,
            options.every
        );
        plot::draw(path, &title, &samples, seconds).map_err(|e| LabError::Step {
            what: format!("plot {}", path.display()),
            reason: e,
        })?;
        say(out, &format!("plot written to {}", path.display()));
    }
    let judged = options.duration >= JUDGED_FROM;
    let mut leaks = Vec::new();
    let mut figures = Vec::new();
    for n in spec.nodes().filter(|n| *n != churn.churned_node()) {
        let mine: Vec<Sample> = samples.iter().filter(|s| s.node == n).copied().collect();
        let rss = sample::flatness(
            &mine,
            seconds,
            |s| Some(s.rss_kib as f64),
            RSS_ALLOWANCE.0,
            RSS_ALLOWANCE.1,
        );
        let fds = sample::flatness(&mine, seconds, |s| Some(s.fds as f64), 0.0, COUNT_ALLOWANCE);
        let tasks = sample::flatness(
            &mine,
            seconds,
            |s| s.tasks.map(|t| t as f64),
            0.0,
            COUNT_ALLOWANCE,
        );
        let name = super::spec::Spec::node_name(n);
        figures.push(format!(
            "{name} {:.0}→{:.0} MiB, {:.0}→{:.0} fds, {:.0}→{:.0} tasks",
            rss.early / 1024.0,
            rss.late / 1024.0,
            fds.early,
            fds.late,
            tasks.early,
            tasks.late
        ));
        for (what, f) in [("memory", rss), ("fds", fds), ("tasks", tasks)] {
            if !f.flat {
                leaks.push(format!("{name} {what}"));
            }
        }
    }
    say(
        out,
        &format!("second quarter → last quarter: {}", figures.join("; ")),
    );
    let flat = !judged || leaks.is_empty();
    let passed = failed.is_none() && back.is_ok() && errors.is_empty() && gap < CUT && flat;
    let line =
        format!(
        "soak: {} — {} churn steps in {:.0} s; streams: {} errors, longest gap {:.2} s; {}; lab {}",
        if passed { "PASS" } else { "FAIL" },
        churn.taken,
        seconds,
        errors.len(),
        gap.as_secs_f64(),
        match (judged, leaks.is_empty()) {
            (false, _) => format!("flatness not judged (under {} min)", JUDGED_FROM.as_secs() / 60),
            (true, true) => "memory, fds and tasks flat".to_owned(),
            (true, false) => format!("climbing: {}", leaks.join(", ")),
        },
        match (&failed, &back) {
            (Some(e), _) => format!("churn failed: {e}"),
            (None, Err(e)) => format!("not back: {e}"),
            (None, Ok(())) => "whole again".to_owned(),
        }
    );
    Ok(Verdict {
        passed,
        line,
        gap: Some(gap),
    })
}
