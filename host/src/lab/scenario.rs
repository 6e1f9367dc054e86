//! Scenarios on a running lab, each ending with one verdict line and its figures, each
//! with a control run that shows the failure the mechanism prevents.
//!
//! `restart`: long-running TCP streams from a client pod of cluster1's first node to
//! the web pod of every cluster2 node (both ends under policy: each side judges the
//! other by identity). cluster2's etcd is frozen for 10 s and, at the same moment, the
//! client node's agent is restarted. Expected: no stream error and no gap, because the
//! restored client endpoint keeps its datapath until cluster2's identities are back.
//! The control runs the restarted agent with a regeneration policy plugin that lets
//! every endpoint proceed: the client is switched to a datapath without cluster2's
//! identities, and its packets are dropped until cluster2 thaws.

use super::process;
use super::spec::{NodeRef, PodRef, Spec, POD_PORT};
use super::state::{LabState, Made};
use super::stream::Stream;
use super::LabError;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

/// How long cluster2's etcd stays frozen.
pub const ETCD_PAUSE: Duration = Duration::from_secs(10);

/// A gap in a stream at least this long means it was cut.
pub const CUT: Duration = Duration::from_secs(2);

/// The plugin the control installs.
const PROCEED: &str = "proceed";

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

/// The client's last regeneration: reason and result, once `done` says so.
async fn regeneration(
    spec: &Spec,
    client: PodRef,
    within: Duration,
    done: impl Fn(&str, &str) -> bool,
) -> Option<(String, String)> {
    let state_dir = spec.node_dir(client.node).join("state");
    let name = Spec::pod_name(client);
    let deadline = Instant::now() + within;
    loop {
        if let Ok(endpoints) = crate::api::fetch_endpoints(&state_dir).await {
            let r = endpoints
                .into_iter()
                .find(|e| e.record.pod_name == name)
                .and_then(|e| e.record.regeneration)
                .map(|r| (r.reason, r.result));
            if let Some((reason, result)) = r.filter(|(a, b)| done(a, b)) {
                return Some((reason, result));
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
async fn open_streams(spec: &Spec, client: PodRef) -> Result<Vec<(PodRef, Stream)>, LabError> {
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
    let gap = streams
        .iter()
        .map(|(_, s)| s.longest_gap(from, to))
        .max()
        .unwrap_or_default();
    for (_, s) in streams {
        s.close();
    }
    Ok(gap)
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
        super::up::install_plugin(&spec, 1, PROCEED, "critical_clusters", 100, "none")?;
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
    if regeneration(&spec, client, ETCD_PAUSE, |reason, _| reason == "restore")
        .await
        .is_none()
    {
        steps.say(
            out,
            "the restarted agent did not list the client within the pause",
        );
    }
    tokio::time::sleep((paused + ETCD_PAUSE).saturating_duration_since(Instant::now())).await;
    let during = regeneration(&spec, client, Duration::from_secs(2), |_, _| true).await;
    frozen.thaw();
    let thawed = Instant::now();
    steps.say(
        out,
        format!(
            "cluster2's etcd thawed; the restored client was {} during the pause",
            during
                .as_ref()
                .map_or("not listed".to_owned(), |(_, result)| result.clone())
        ),
    );
    // The restore, or a regeneration after it (cluster2's identities arriving).
    let switched = regeneration(&spec, client, Duration::from_secs(60), |reason, result| {
        reason != "create" && result != "waiting"
    })
    .await;
    let resumed = Instant::now();
    let deadline = resumed + Duration::from_secs(30);
    while streams.iter().any(|(_, s)| s.arrived_since(resumed) < 10) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if plot.is_some() {
        // The aftermath, for the picture: not a synchronisation.
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    let end = Instant::now();
    let gap = streams
        .iter()
        .map(|(_, s)| s.longest_gap(paused, end))
        .max()
        .unwrap_or_default();
    let mut errors = Vec::new();
    let count = streams.len();
    let mut series = Vec::new();
    for (web, s) in streams {
        series.push(super::plot::Series {
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
        super::up::remove_plugin(&spec, 1, PROCEED)?;
    }
    if let Some(path) = plot {
        let since = |t: Instant| t.duration_since(opened).as_secs_f64();
        let log = spec.node_dir(node).join("weftd.log");
        let at = |t: std::time::SystemTime| {
            t.duration_since(opened_at)
                .unwrap_or_default()
                .as_secs_f64()
        };
        let mut events: Vec<super::plot::Event> = vec![
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
        super::plot::draw(path, &title, &series, &events, since(end))
            .map_err(|e| step(&format!("plot {}", path.display()), e))?;
        steps.say(out, format!("plot written to {}", path.display()));
    }
    let result = switched.map_or("not switched within 60 s".to_owned(), |(_, r)| r);
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
    let waiting = regeneration(&spec, pod, Duration::from_secs(20), |reason, result| {
        reason == "restore" && result == "waiting"
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
    let ended = regeneration(&spec, pod, Duration::from_secs(5), |reason, result| {
        reason != "create" && result != "waiting"
    })
    .await;
    let took = removed.elapsed();
    // The restore's own outcome, from the agent's log: a regeneration may follow it at
    // once (cluster2's identities went with it) and take its place in the listing.
    let ended = ended.map(|(reason, result)| {
        restore_result(&spec.node_dir(node).join("weftd.log"), pod, restarted_at)
            .map_or((reason, result), |r| ("restore".to_owned(), r))
    });
    if !control {
        // Written whole under another name, then renamed: the agents see it at once.
        let staged = mesh_file.with_extension("new");
        std::fs::write(&staged, &config)
            .and_then(|()| std::fs::rename(&staged, &mesh_file))
            .map_err(|e| step("cluster1's mesh directory", e))?;
        steps.say(out, "cluster2 added back");
    }
    thaw(out);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if super::view::ready(&spec, &super::view::nodes(&spec).await) {
            break;
        }
        if Instant::now() > deadline {
            return Err(step(
                "cluster-removed-mid-sync",
                "the lab did not come back within 60 s",
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    steps.say(
        out,
        "the lab is back: every cluster synced, every pod switched",
    );
    let result = ended.as_ref().map(|(_, r)| r.clone());
    let passed = if control {
        ended.is_none()
    } else {
        result
            .as_deref()
            .is_some_and(|r| r.contains("disconnected: cluster2"))
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

/// The version of plugin `name` an agent runs, and the refusals it reports for it.
async fn plugin_state(state_dir: &Path, name: &str) -> Option<(String, u64, Vec<String>)> {
    let plugins = crate::api::fetch_status(state_dir).await.ok()?.plugins?;
    let loaded = plugins.loaded.iter().find(|p| p.name == name)?;
    let refused = plugins
        .refused
        .iter()
        .filter(|r| r.manifest.ends_with(format!("{name}.toml")))
        .map(|r| r.error.clone())
        .collect();
    Some((loaded.version.clone(), loaded.failures, refused))
}

/// Runs `plugin-reload` on the lab in `dir`: cluster1's first agent restarts with
/// cluster2's etcd frozen, so its restored endpoints regenerate and wait; meanwhile
/// cluster1's `regeneration-policy` plugin is replaced by a new version. Expected: the
/// agent runs the new version, nothing fails, and every endpoint switches once cluster2
/// thaws. The control's new version is tampered with after signing: it is refused,
/// the running version keeps deciding, and the endpoints switch all the same. A good
/// version is installed after the control, so the lab's directory is whole again.
///
/// # Errors
/// [`LabError`] when the lab cannot run it.
pub async fn plugin_reload(
    dir: &Path,
    control: bool,
    out: &mut impl Write,
) -> Result<Verdict, LabError> {
    const PLUGIN: &str = "regeneration-policy";
    let mut state = lab_for(dir, "plugin-reload", 1)?;
    let spec = state.spec.clone();
    let node = FIRST;
    let state_dir = spec.node_dir(node).join("state");
    let steps = Steps(Instant::now());
    // Newer than any earlier run's: the clock in milliseconds.
    let new_version = |offset: u128| {
        let millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        format!("0.2.{}", millis + offset)
    };
    let etcd = freeze_and_restart(&mut state, node)?;
    steps.say(
        out,
        format!(
            "cluster2's etcd frozen; the agent of {} restarted: its endpoints regenerate",
            Spec::node_name(node)
        ),
    );
    let pod = PodRef { node, pod: 1 };
    let waiting = regeneration(&spec, pod, Duration::from_secs(20), |reason, result| {
        reason == "restore" && result == "waiting"
    })
    .await;
    let before = plugin_state(&state_dir, PLUGIN).await;
    let version = new_version(0);
    super::up::install_plugin_version(
        &spec,
        1,
        (PLUGIN, &version),
        "regeneration_policy",
        0,
        "",
        control,
    )?;
    steps.say(
        out,
        format!(
            "{PLUGIN} {version}{} put in place while the endpoints wait",
            if control {
                ", tampered with after signing"
            } else {
                ""
            }
        ),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let after = loop {
        let s = plugin_state(&state_dir, PLUGIN).await;
        let settled = s.as_ref().is_some_and(|(v, _, refused)| {
            if control {
                !refused.is_empty()
            } else {
                *v == version
            }
        });
        if settled || Instant::now() > deadline {
            break s;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    etcd.thaw();
    steps.say(out, "cluster2's etcd thawed");
    let deadline = Instant::now() + Duration::from_secs(60);
    let switched = loop {
        let endpoints = crate::api::fetch_endpoints(&state_dir)
            .await
            .unwrap_or_default();
        let all = endpoints.len() == usize::from(spec.pods)
            && endpoints.iter().all(|e| {
                e.record
                    .regeneration
                    .as_ref()
                    .is_some_and(|r| r.reason != "create" && r.result == "synced")
            });
        if all || Instant::now() > deadline {
            break all;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    if control {
        // The directory whole again: a good version after the refused one.
        let good = new_version(1);
        super::up::install_plugin_version(
            &spec,
            1,
            (PLUGIN, &good),
            "regeneration_policy",
            0,
            "",
            false,
        )?;
        steps.say(out, format!("{PLUGIN} {good} (good) put in place"));
    }
    let old = before.as_ref().map(|(v, ..)| v.clone()).unwrap_or_default();
    let (running, failures, refused) = after.unwrap_or_default();
    let passed = waiting.is_some()
        && switched
        && failures == 0
        && if control {
            running == old && !refused.is_empty()
        } else {
            running == version
        };
    let line = format!(
        "plugin-reload{}: {} — running {PLUGIN} {running} (was {old}), {failures} failures, {}; every endpoint synced and switched: {}",
        if control { " (control: tampered)" } else { "" },
        match (control, passed) {
            (false, true) => "PASS, swapped under waiting endpoints",
            (true, true) => "the tampered version was refused and the running one kept deciding, as expected",
            (_, false) => "FAIL",
        },
        if refused.is_empty() {
            "nothing refused".to_owned()
        } else {
            format!("refused: {}", refused.join("; "))
        },
        if switched { "yes" } else { "no" }
    );
    Ok(Verdict {
        passed,
        line,
        gap: None,
    })
}

/// The result of pod `p`'s restore regeneration logged (in the agent's JSON log at
/// `path`) since `since`.
fn restore_result(path: &Path, p: PodRef, since: std::time::SystemTime) -> Option<String> {
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
        .and_then(|v| v["fields"]["result"].as_str().map(str::to_owned))
}
