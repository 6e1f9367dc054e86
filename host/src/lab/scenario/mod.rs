//! Scenarios on a running lab, each ending with one verdict line and its figures, each
//! with a control run that shows the failure the mechanism prevents. One module per
//! scenario; this one holds what they share: the lab check, the first step (cluster2's
//! etcd frozen, cluster1's first agent restarted), streams, and what the agents report.
//!
//! - [`restart()`]: streams across an agent restart while a remote etcd is frozen;
//! - [`cluster_removed`]: a remote cluster removed while endpoints wait for it;
//! - [`etcd_restart()`]: a remote etcd restarted under writes;
//! - [`plugin_reload`]: the policy plugin swapped while endpoints regenerate;
//! - [`vendor_callback`]: a vendor's sync callbacks against the barriers.

mod callback;
mod etcd_restart;
mod reload;
mod removed;
mod restart;

pub use callback::vendor_callback;
pub use etcd_restart::etcd_restart;
pub use reload::plugin_reload;
pub use removed::cluster_removed;
pub use restart::{idle_gap, restart};

use super::process;
use super::spec::{NodeRef, PodRef, Spec, POD_PORT};
use super::state::{LabState, Made};
use super::LabError;
use crate::endpoint::regeneration::Regeneration;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};
use weft_sys::stream::Stream;

/// How long cluster2's etcd stays frozen.
pub const ETCD_PAUSE: Duration = Duration::from_secs(10);

/// A gap in a stream at least this long means it was cut.
pub const CUT: Duration = Duration::from_secs(2);

/// A scenario's result.
#[derive(Debug, Clone)]
pub struct Verdict {
    /// Whether the scenario showed what it should (for a control: the failure).
    pub passed: bool,
    /// One line with the figures.
    pub line: String,
    /// The longest gap of the scenario's streams, when it has streams.
    pub gap: Option<Duration>,
}

fn step(what: &str, reason: impl std::fmt::Display) -> LabError {
    LabError::Step {
        what: what.into(),
        reason: reason.to_string(),
    }
}

/// The pid of the process the state records as `what`.
fn pid_of(state: &LabState, what: &str) -> Result<i32, LabError> {
    state
        .made
        .iter()
        .find_map(|m| match m {
            Made::Process { what: w, pid } if w == what => Some(*pid),
            _ => None,
        })
        .ok_or_else(|| step(what, "not in the lab"))
}

/// Pod `p`'s address, as its agent lists it.
async fn pod_ip(spec: &Spec, p: PodRef) -> Result<IpAddr, LabError> {
    let state_dir = spec.node_dir(p.node).join("state");
    let name = Spec::pod_name(p);
    crate::api::fetch_endpoints(&state_dir)
        .await
        .map_err(|e| step(&format!("the agent of {}", Spec::node_name(p.node)), e))?
        .into_iter()
        .find(|e| e.record.pod_name == name)
        .and_then(|e| e.record.addresses.first().copied())
        .ok_or_else(|| step(&format!("pod {name}"), "not listed by its agent"))
}

/// The client's last regeneration, as its agent lists it, once `done` says so.
async fn regeneration(
    spec: &Spec,
    client: PodRef,
    within: Duration,
    done: impl Fn(&Regeneration) -> bool,
) -> Option<Regeneration> {
    let state_dir = spec.node_dir(client.node).join("state");
    let name = Spec::pod_name(client);
    let deadline = Instant::now() + within;
    loop {
        if let Ok(endpoints) = crate::api::fetch_endpoints(&state_dir).await {
            let r = endpoints
                .into_iter()
                .find(|e| e.record.pod_name == name)
                .and_then(|e| e.record.regeneration);
            if let Some(r) = r.filter(|r| done(r)) {
                return Some(r);
            }
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Opens a stream from `client` to the web pod of every cluster2 node, and waits until
/// each flows.
pub(in crate::lab) async fn open_streams(
    spec: &Spec,
    client: PodRef,
) -> Result<Vec<(PodRef, Stream)>, LabError> {
    let client_ns = super::spec::netns_path(&spec.pod_netns(client));
    let mut streams = Vec::new();
    for n in 1..=spec.nodes {
        let web = PodRef {
            node: NodeRef {
                cluster: 2,
                node: n,
            },
            pod: 1,
        };
        let to = SocketAddr::new(pod_ip(spec, web).await?, POD_PORT);
        let server = super::spec::netns_path(&spec.pod_netns(web));
        let c = client_ns.clone();
        let stream = tokio::task::spawn_blocking(move || Stream::open(&c, &server, to))
            .await
            .map_err(|e| step("a stream", e))?
            .map_err(|e| step(&format!("a stream to {}", Spec::pod_name(web)), e))?;
        streams.push((web, stream));
    }
    let opened = Instant::now();
    let deadline = opened + Duration::from_secs(20);
    while streams.iter().any(|(_, s)| s.arrived_since(opened) < 10) {
        if Instant::now() > deadline {
            return Err(step("the streams", "no data within 20 s"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(streams)
}

/// The first node of cluster1: the one whose agent every scenario restarts.
const FIRST: NodeRef = NodeRef {
    cluster: 1,
    node: 1,
};

/// The lab in `dir`, checked to have what `scenario` needs: 2 clusters or more, and
/// `pods` pods per node or more.
fn lab_for(dir: &Path, scenario: &str, pods: u8) -> Result<LabState, LabError> {
    let state = LabState::read(&dir.join("lab.json"))?;
    if state.spec.clusters < 2 || state.spec.pods < pods {
        return Err(step(
            scenario,
            format!("needs 2 clusters or more and {pods} pods per node or more"),
        ));
    }
    Ok(state)
}

/// Prints a scenario's steps with the time since it started.
struct Steps(Instant);

impl Steps {
    fn say(&self, out: &mut dyn Write, line: impl std::fmt::Display) {
        let _ = writeln!(out, "[{:>5.1}s] {line}", self.0.elapsed().as_secs_f64());
    }
}

/// cluster2's etcd, frozen by [`freeze_and_restart`]; [`Frozen::thaw`] thaws it.
struct Frozen {
    etcd: i32,
    marker: String,
}

impl Frozen {
    fn thaw(&self) {
        process::signal(self.etcd, &self.marker, nix::sys::signal::Signal::SIGCONT);
    }
}

/// What every scenario starts from: cluster2's etcd frozen, then the agent of `node`
/// restarted (its new pid recorded). cluster2 is thawed again when the restart fails.
fn freeze_and_restart(state: &mut LabState, node: NodeRef) -> Result<Frozen, LabError> {
    let spec = state.spec.clone();
    let marker = spec.dir.to_string_lossy().into_owned();
    let etcd = pid_of(state, "etcd of cluster2")?;
    let agent_what = format!("weftd of {}", Spec::node_name(node));
    let agent = pid_of(state, &agent_what)?;
    if !process::signal(etcd, &marker, nix::sys::signal::Signal::SIGSTOP) {
        return Err(step("etcd of cluster2", "not running"));
    }
    let frozen = Frozen { etcd, marker };
    let log = spec.node_dir(node).join("weftd.log");
    match process::restart(agent, &frozen.marker, &log) {
        Ok(pid) => {
            state.started(&agent_what, pid)?;
            Ok(frozen)
        }
        Err(e) => {
            frozen.thaw();
            Err(step(&agent_what, e))
        }
    }
}

/// When lines holding every needle were logged (the agent's JSON log at `path`), from
/// `since` on.
fn logged(
    path: &Path,
    since: std::time::SystemTime,
    needles: &[&str],
) -> Vec<std::time::SystemTime> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter(|l| needles.iter().all(|n| l.contains(n)))
        .filter_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).ok()?;
            humantime::parse_rfc3339_weak(v["timestamp"].as_str()?.trim_end_matches('Z')).ok()
        })
        .filter(|t| *t >= since)
        .collect()
}

/// Waits (up to 60 s) until the lab is whole again after `scenario`: every cluster
/// synced, every pod switched, every peer and route in.
pub(in crate::lab) async fn lab_back(spec: &Spec, scenario: &str) -> Result<(), LabError> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if super::view::ready(spec, &super::view::nodes(spec).await) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(step(scenario, "the lab did not come back within 60 s"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The longest gap of any of `streams` between `from` and `to`.
pub(in crate::lab) fn longest_gap(
    streams: &[(PodRef, Stream)],
    from: Instant,
    to: Instant,
) -> Duration {
    streams
        .iter()
        .map(|(_, s)| s.longest_gap(from, to))
        .max()
        .unwrap_or_default()
}

/// Waits (up to 30 s) until every stream flows again: at once, unless they were cut.
async fn flowing_again(streams: &[(PodRef, Stream)]) {
    let resumed = Instant::now();
    let deadline = resumed + Duration::from_secs(30);
    while streams.iter().any(|(_, s)| s.arrived_since(resumed) < 10) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Puts cluster2's entry back into cluster1's mesh directory (`config`, its text),
/// written whole under another name, then renamed: the agents see it at once.
fn put_back(mesh_file: &Path, config: impl AsRef<[u8]>) -> Result<(), LabError> {
    let staged = mesh_file.with_extension("new");
    std::fs::write(&staged, config)
        .and_then(|()| std::fs::rename(&staged, mesh_file))
        .map_err(|e| step("cluster1's mesh directory", e))
}
