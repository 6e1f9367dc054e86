//! `weftd lab`: a whole multi-cluster mesh on one machine, for real. One network
//! namespace per node on a shared underlay (a bridge in a namespace of its own) that
//! carries node addresses only; one etcd per cluster; a `weftd` per node with the
//! shipped plugins (signed), WireGuard and the BPF datapath; pods made through
//! `weft-cni` as a container runtime makes them; each cluster's mesh directory naming
//! the others. Nothing has a route out of the lab.
//!
//! - [`spec`]: the lab's size and every part's name and address (pure);
//! - [`state`]: the state file, every part recorded before it is made;
//! - [`netns`], [`underlay`], [`process`], [`pods`]: making the parts;
//! - [`up`](mod@up), [`down`](mod@down): the lab's life; [`view`] and [`matrix`]: what it
//!   shows; [`scenario`]: what it proves, each with its control run; [`soak`]: the lab
//!   under churn for an hour, its agents' curves flat.

pub mod command;
pub mod down;
pub mod matrix;
pub mod netns;
pub mod plot;
pub mod pods;
pub mod process;
pub mod scenario;
pub mod soak;
pub mod spec;
pub mod state;
pub mod underlay;
pub mod up;
pub mod view;

use spec::Spec;
use state::LabState;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What can go wrong with a lab.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// The spec is out of range.
    #[error(transparent)]
    Spec(#[from] spec::SpecError),
    /// The state file.
    #[error(transparent)]
    State(#[from] state::StateError),
    /// A lab of that name exists.
    #[error("a lab exists ({0}): `weftd lab down` it first")]
    Exists(PathBuf),
    /// A step failed.
    #[error("{what}: {reason}")]
    Step {
        /// The step, naming the part.
        what: String,
        /// Why.
        reason: String,
    },
}

/// How long `up` waits for every agent to be ready.
const READY_WITHIN: Duration = Duration::from_secs(180);

/// How `up` shows the lab coming up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Display {
    /// On a terminal: the view redrawn in place as it changes, with the time.
    Live,
    /// Elsewhere (a log, a pipe): a new block of plain lines on each change.
    Plain,
}

/// Makes the lab, shows it coming up on `out`, and ends with the connectivity matrix.
/// Whether every cell of the matrix is as the policy says.
///
/// # Errors
/// [`LabError`]; what was made stays recorded for `weftd lab down`.
pub async fn up(
    spec: &Spec,
    programs: &up::Programs,
    display: Display,
    out: &mut impl Write,
) -> Result<bool, LabError> {
    let started = Instant::now();
    let say = |out: &mut dyn Write, line: String| {
        let _ = writeln!(out, "[{:>5.1}s] {line}", started.elapsed().as_secs_f64());
    };
    say(
        out,
        format!(
            "lab {}: {} clusters × {} nodes × {} pods, in {}",
            spec.name,
            spec.clusters,
            spec.nodes,
            spec.pods,
            spec.dir.display()
        ),
    );
    let urls = up::make(spec, programs).await?;
    for (c, url) in urls.iter().enumerate() {
        say(
            out,
            format!("{}: etcd at {url}", Spec::cluster_name(c as u8 + 1)),
        );
    }
    say(
        out,
        format!(
            "{} agents started; pods through weft-cni",
            spec.nodes().count()
        ),
    );
    let mut state = LabState::read(&spec.state_file())?;
    let pods = up::make_pods(&mut state, programs).await?;
    say(out, format!("{} pods added", pods.len()));
    let deadline = Instant::now() + READY_WITHIN;
    let mut last = String::new();
    let mut live = view::Redraw::default();
    loop {
        let views = view::nodes(spec).await;
        let text = view::render(spec, &views);
        match display {
            Display::Live => {
                let time = format!("[{:>5.1}s]", started.elapsed().as_secs_f64());
                let _ = live.draw(out, &format!("{time}\n{text}"));
            }
            Display::Plain if text != last => {
                say(out, format!("\n{}", text.trim_end()));
                last = text;
            }
            Display::Plain => {}
        }
        if view::ready(spec, &views) {
            break;
        }
        if Instant::now() > deadline {
            return Err(LabError::Step {
                what: "waiting for the agents".into(),
                reason: format!(
                    "not ready within {READY_WITHIN:?}; see the logs under {}",
                    spec.dir.display()
                ),
            });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    say(
        out,
        "every agent ready: clusters synced, pods switched, peers and routes in".into(),
    );
    let ips: BTreeMap<_, _> = pods.into_iter().collect();
    let s = spec.clone();
    let cells = tokio::task::spawn_blocking(move || matrix::measure(&s, &ips))
        .await
        .map_err(|e| LabError::Step {
            what: "the connectivity matrix".into(),
            reason: e.to_string(),
        })?
        .map_err(|e| LabError::Step {
            what: "the connectivity matrix".into(),
            reason: e.to_string(),
        })?;
    say(
        out,
        format!(
            "connectivity (TCP to each node's web pod, port {}):\n{}",
            spec::POD_PORT,
            matrix::render(spec, &cells).trim_end()
        ),
    );
    Ok(cells.iter().all(matrix::Cell::as_expected))
}

/// The lab in `dir`, as its agents see it, and its processes.
///
/// # Errors
/// [`LabError::State`] when there is no lab there.
pub async fn status(dir: &std::path::Path) -> Result<String, LabError> {
    let state = LabState::read(&dir.join("lab.json"))?;
    let spec = &state.spec;
    let marker = spec.dir.to_string_lossy().into_owned();
    let mut out = format!(
        "lab {}: {} clusters × {} nodes × {} pods, in {}\n",
        spec.name,
        spec.clusters,
        spec.nodes,
        spec.pods,
        spec.dir.display()
    );
    for made in &state.made {
        if let state::Made::Process { what, pid } = made {
            let running = if process::runs(*pid, &marker) {
                "running"
            } else {
                "NOT RUNNING"
            };
            out.push_str(&format!("  {what:<16} pid {pid:<8} {running}\n"));
        }
    }
    out.push_str(&view::render(spec, &view::nodes(spec).await));
    Ok(out)
}

/// Removes the lab in `dir`: what `down` did, one line per part.
///
/// # Errors
/// [`LabError::State`] when there is no lab there.
pub fn down(dir: &std::path::Path) -> Result<Vec<String>, LabError> {
    let state = LabState::read(&dir.join("lab.json"))?;
    Ok(down::down(&state))
}
