//! What a soak samples of each agent: its resident memory, open files and threads (from
//! `/proc`), and the tasks alive in its runtime (from its status).

use crate::lab::spec::{NodeRef, Spec};
use std::path::Path;
use std::time::Duration;

/// One agent, once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Seconds since the soak started.
    pub at: f64,
    /// The agent's node.
    pub node: NodeRef,
    /// Its process.
    pub pid: i32,
    /// Resident memory, KiB.
    pub rss_kib: u64,
    /// Open file descriptors.
    pub fds: u64,
    /// Threads.
    pub threads: u64,
    /// Tasks alive in its runtime; `None` when its status did not answer in time.
    pub tasks: Option<u64>,
}

/// How long a status call may take before the sample goes without its tasks.
const STATUS_WITHIN: Duration = Duration::from_secs(2);

/// Samples the agent of `node` (process `pid`); `None` when the process is gone.
pub async fn agent(spec: &Spec, node: NodeRef, pid: i32, at: f64) -> Option<Sample> {
    let proc = Path::new("/proc").join(pid.to_string());
    let status = std::fs::read_to_string(proc.join("status")).ok()?;
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())?;
    let count = |dir: &str| std::fs::read_dir(proc.join(dir)).map_or(0, |d| d.count() as u64);
    let (fds, threads) = (count("fd"), count("task"));
    let state_dir = spec.node_dir(node).join("state");
    let tasks = tokio::time::timeout(STATUS_WITHIN, crate::api::fetch_status(&state_dir))
        .await
        .ok()
        .and_then(Result::ok)
        .and_then(|s| s.runtime)
        .map(|r| r.alive_tasks as u64);
    Some(Sample {
        at,
        node,
        pid,
        rss_kib,
        fds,
        threads,
        tasks,
    })
}

/// The samples as CSV, a header first.
pub fn csv(samples: &[Sample]) -> String {
    let mut out = String::from("seconds,node,pid,rss_kib,fds,threads,tasks\n");
    for s in samples {
        out.push_str(&format!(
            "{:.1},{},{},{},{},{},{}\n",
            s.at,
            Spec::node_name(s.node),
            s.pid,
            s.rss_kib,
            s.fds,
            s.threads,
            s.tasks.map_or(String::new(), |t| t.to_string())
        ));
    }
    out
}

/// Whether one quantity stays flat: the median of the last quarter of the run against
/// the median of the second (the first is the warm-up), with an allowance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Flatness {
    /// The second quarter's median.
    pub early: f64,
    /// The last quarter's median.
    pub late: f64,
    /// Whether `late` is within the allowance of `early`.
    pub flat: bool,
}

/// The median of `values` (0 when empty).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// The flatness of `value` over `samples` (one process's, in time order) spanning
/// `end` seconds: the late median may exceed the early one by `ratio` of it plus
/// `slack`.
pub fn flatness(
    samples: &[Sample],
    end: f64,
    value: impl Fn(&Sample) -> Option<f64>,
    ratio: f64,
    slack: f64,
) -> Flatness {
    let within = |from: f64, to: f64| {
        samples
            .iter()
            .filter(|s| s.at >= from * end && s.at < to * end)
            .filter_map(&value)
            .collect::<Vec<_>>()
    };
    let (early, late) = (median(within(0.25, 0.5)), median(within(0.75, 1.01)));
    Flatness {
        early,
        late,
        flat: late <= early * (1.0 + ratio) + slack,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(values: &[u64]) -> Vec<Sample> {
        values
            .iter()
            .enumerate()
            .map(|(i, v)| Sample {
                at: i as f64,
                node: NodeRef {
                    cluster: 1,
                    node: 1,
                },
                pid: 1,
                rss_kib: *v,
                fds: 0,
                threads: 0,
                tasks: None,
            })
            .collect()
    }

    #[test]
    fn a_warm_up_then_a_plateau_is_flat_and_a_steady_climb_is_not() {
        let rss = |s: &Sample| Some(s.rss_kib as f64);
        let plateau = series(&[10, 50, 90, 100, 101, 100, 102, 100, 101, 100, 101, 102]);
        assert!(flatness(&plateau, 12.0, rss, 0.1, 0.0).flat);
        let climb: Vec<u64> = (0..12).map(|i| 100 + 20 * i).collect();
        let f = flatness(&series(&climb), 12.0, rss, 0.1, 0.0);
        assert!(!f.flat, "{f:?}");
    }
}
