//! The soak's churn: each step changes one part of the lab, and a later step of the
//! cycle puts it back, so the lab keeps its shape while every path that adds and removes
//! state runs again and again. The streams (cluster1 → cluster2) must not notice.

use crate::lab::process;
use crate::lab::spec::{NodeRef, PodRef, Spec};
use crate::lab::state::{LabState, Made};
use crate::lab::{netns, pods, LabError};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// One step of the cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// A pod added through `weft-cni` on the next node in turn.
    PodAdded,
    /// That pod deleted through `weft-cni`, its namespace removed.
    PodDeleted,
    /// cluster2's etcd frozen for [`ETCD_PAUSE`], then thawed.
    EtcdPaused,
    /// The churned cluster (the last) removed from every other cluster's mesh directory.
    ClusterRemoved,
    /// It put back.
    ClusterAdded,
    /// The churned node (the churned cluster's last) stopped: its agent gets SIGTERM.
    NodeStopped,
    /// Its agent started again.
    NodeStarted,
    /// A new version of the regeneration-policy plugin, for the next cluster in turn.
    PluginReloaded,
}

/// A kind of churn: a step and the step that undoes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// Pods added and deleted.
    Pods,
    /// cluster2's etcd frozen and thawed.
    EtcdPause,
    /// The churned cluster removed from the mesh and put back.
    Cluster,
    /// The churned node's agent stopped and started.
    Node,
    /// New plugin versions installed.
    Plugin,
}

impl Step {
    /// The kind of churn the step belongs to.
    pub fn kind(self) -> Kind {
        match self {
            Step::PodAdded | Step::PodDeleted => Kind::Pods,
            Step::EtcdPaused => Kind::EtcdPause,
            Step::ClusterRemoved | Step::ClusterAdded => Kind::Cluster,
            Step::NodeStopped | Step::NodeStarted => Kind::Node,
            Step::PluginReloaded => Kind::Plugin,
        }
    }
}

/// The cycle: what one step changes, a later one puts back.
pub const CYCLE: [Step; 8] = [
    Step::PodAdded,
    Step::EtcdPaused,
    Step::ClusterRemoved,
    Step::PluginReloaded,
    Step::NodeStopped,
    Step::PodDeleted,
    Step::ClusterAdded,
    Step::NodeStarted,
];

/// How long an etcd pause lasts: under the node leases' 15 s.
pub const ETCD_PAUSE: Duration = Duration::from_secs(5);

/// How long a pod ADD is retried while its agent is busy (CNI "try again").
const ADD_WITHIN: Duration = Duration::from_secs(30);

/// What the churn has changed and must put back.
pub struct Churn {
    state: LabState,
    cni: PathBuf,
    marker: String,
    /// Steps taken, for the figures.
    pub taken: usize,
    /// The churn pod, while it exists; the next pod's node.
    pod: Option<PodRef>,
    next_node: usize,
    /// The churned cluster's files, by mesh directory, while removed.
    removed: Vec<(PathBuf, Vec<u8>)>,
    /// The churned node's command, while stopped.
    stopped: Option<Command>,
    next_plugin_cluster: u8,
}

fn fail(what: impl Into<String>, reason: impl std::fmt::Display) -> LabError {
    LabError::Step {
        what: what.into(),
        reason: reason.to_string(),
    }
}

impl Churn {
    /// The churn of the lab `state`, with `weft-cni` at `cni`. The lab needs 3 clusters
    /// (the last is churned, streams run from the first to the second) and room for
    /// one more pod per node.
    ///
    /// # Errors
    /// [`LabError::Step`] when the lab is too small.
    pub fn new(state: LabState, cni: PathBuf) -> Result<Self, LabError> {
        let spec = &state.spec;
        if spec.clusters < 3 || spec.pods < 2 || spec.pods >= crate::lab::spec::MAX_PODS {
            return Err(fail(
                "soak",
                format!(
                    "needs 3 clusters or more and 2 to {} pods per node",
                    crate::lab::spec::MAX_PODS - 1
                ),
            ));
        }
        Ok(Self {
            marker: spec.dir.to_string_lossy().into_owned(),
            state,
            cni,
            taken: 0,
            pod: None,
            next_node: 0,
            removed: Vec::new(),
            stopped: None,
            next_plugin_cluster: 1,
        })
    }

    /// The lab's spec.
    pub fn spec(&self) -> &Spec {
        &self.state.spec
    }

    /// The lab's state (agents' pids as they are now).
    pub fn state(&self) -> &LabState {
        &self.state
    }

    /// The cluster whose membership churns: the last.
    fn churned_cluster(&self) -> u8 {
        self.spec().clusters
    }

    /// The node whose agent is stopped and started: the churned cluster's last.
    pub fn churned_node(&self) -> NodeRef {
        NodeRef {
            cluster: self.churned_cluster(),
            node: self.spec().nodes,
        }
    }

    fn agent_what(n: NodeRef) -> String {
        format!("weftd of {}", Spec::node_name(n))
    }

    /// The pid the state records for node `n`'s agent.
    pub fn agent_pid(&self, n: NodeRef) -> Option<i32> {
        let what = Self::agent_what(n);
        self.state.made.iter().rev().find_map(|m| match m {
            Made::Process { what: w, pid } if *w == what => Some(*pid),
            _ => None,
        })
    }

    /// Takes `step`: a line saying what it did.
    ///
    /// # Errors
    /// [`LabError`] naming the part that could not be changed.
    pub async fn take(&mut self, step: Step) -> Result<String, LabError> {
        self.taken += 1;
        match step {
            Step::PodAdded => self.add_pod().await,
            Step::PodDeleted => self.delete_pod().await,
            Step::EtcdPaused => self.pause_etcd().await,
            Step::ClusterRemoved => self.remove_cluster(),
            Step::ClusterAdded => self.add_cluster(),
            Step::NodeStopped => self.stop_node().await,
            Step::NodeStarted => self.start_node(),
            Step::PluginReloaded => self.reload_plugin(),
        }
    }

    /// Puts back whatever the cycle left changed: lines saying what.
    ///
    /// # Errors
    /// [`LabError`] naming the part.
    pub async fn restore(&mut self) -> Result<Vec<String>, LabError> {
        let mut lines = Vec::new();
        if self.pod.is_some() {
            lines.push(self.delete_pod().await?);
        }
        if !self.removed.is_empty() {
            lines.push(self.add_cluster()?);
        }
        if self.stopped.is_some() {
            lines.push(self.start_node()?);
        }
        Ok(lines)
    }

    async fn add_pod(&mut self) -> Result<String, LabError> {
        if self.pod.is_some() {
            return Ok("pod: one exists already".into());
        }
        let churned = self.churned_node();
        let nodes: Vec<NodeRef> = self.spec().nodes().filter(|n| *n != churned).collect();
        let node = nodes[self.next_node % nodes.len()];
        self.next_node += 1;
        let p = PodRef {
            node,
            pod: self.spec().pods + 1,
        };
        let name = self.spec().pod_netns(p);
        let path = crate::lab::up::make_netns(&mut self.state, &name)?;
        self.pod = Some(p);
        let state_dir = self.spec().node_dir(node).join("state");
        let deadline = tokio::time::Instant::now() + ADD_WITHIN;
        loop {
            let (c, s, n) = (self.cni.clone(), state_dir.clone(), path.clone());
            let added = tokio::task::spawn_blocking(move || pods::add(&c, &s, &n, p))
                .await
                .map_err(|e| fail(format!("pod {name}"), e))?;
            match added {
                Ok(ip) => return Ok(format!("pod {} added ({ip})", Spec::pod_name(p))),
                Err(e) if tokio::time::Instant::now() < deadline && e.contains("\"code\":11") => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => return Err(fail(format!("pod {name}"), e)),
            }
        }
    }

    async fn delete_pod(&mut self) -> Result<String, LabError> {
        let Some(p) = self.pod.take() else {
            return Ok("pod: none to delete".into());
        };
        let name = self.spec().pod_netns(p);
        let path = crate::lab::spec::netns_path(&name);
        let state_dir = self.spec().node_dir(p.node).join("state");
        let cni = self.cni.clone();
        let deleted = tokio::task::spawn_blocking(move || pods::del(&cni, &state_dir, &path, p))
            .await
            .map_err(|e| fail(format!("pod {name}"), e))?;
        netns::delete(&name);
        deleted.map_err(|e| fail(format!("pod {name}"), e))?;
        Ok(format!("pod {} deleted", Spec::pod_name(p)))
    }

    fn etcd_pid(&self, cluster: u8) -> Result<i32, LabError> {
        let what = format!("etcd of {}", Spec::cluster_name(cluster));
        self.state
            .made
            .iter()
            .find_map(|m| match m {
                Made::Process { what: w, pid } if *w == what => Some(*pid),
                _ => None,
            })
            .ok_or_else(|| fail(&what, "not in the lab"))
    }

    async fn pause_etcd(&mut self) -> Result<String, LabError> {
        use nix::sys::signal::Signal;
        let pid = self.etcd_pid(2)?;
        if !process::signal(pid, &self.marker, Signal::SIGSTOP) {
            return Err(fail("etcd of cluster2", "not running"));
        }
        // The pause's length: the etcd is frozen, there is nothing to wait for.
        tokio::time::sleep(ETCD_PAUSE).await;
        process::signal(pid, &self.marker, Signal::SIGCONT);
        Ok(format!("cluster2's etcd frozen for {ETCD_PAUSE:?}, thawed"))
    }

    fn mesh_dir(&self, c: u8) -> PathBuf {
        self.spec().cluster_dir(c).join("mesh")
    }

    fn remove_cluster(&mut self) -> Result<String, LabError> {
        let churned = self.churned_cluster();
        let name = Spec::cluster_name(churned);
        for c in (1..=self.spec().clusters).filter(|c| *c != churned) {
            let file = self.mesh_dir(c).join(&name);
            let text = std::fs::read(&file).map_err(|e| fail(file.display().to_string(), e))?;
            std::fs::remove_file(&file).map_err(|e| fail(file.display().to_string(), e))?;
            self.removed.push((file, text));
        }
        Ok(format!("{name} removed from every other cluster's mesh"))
    }

    fn add_cluster(&mut self) -> Result<String, LabError> {
        for (file, text) in std::mem::take(&mut self.removed) {
            put_back(&file, &text)?;
        }
        Ok(format!(
            "{} put back into every other cluster's mesh",
            Spec::cluster_name(self.churned_cluster())
        ))
    }

    async fn stop_node(&mut self) -> Result<String, LabError> {
        let n = self.churned_node();
        let pid = self
            .agent_pid(n)
            .ok_or_else(|| fail(Self::agent_what(n), "not in the lab"))?;
        let cmd = process::command_of(pid).map_err(|e| fail(Self::agent_what(n), e))?;
        let marker = self.marker.clone();
        tokio::task::spawn_blocking(move || process::stop(pid, &marker, Duration::from_secs(10)))
            .await
            .map_err(|e| fail(Self::agent_what(n), e))?;
        self.stopped = Some(cmd);
        Ok(format!("the agent of {} stopped", Spec::node_name(n)))
    }

    fn start_node(&mut self) -> Result<String, LabError> {
        let Some(cmd) = self.stopped.take() else {
            return Ok("node: none stopped".into());
        };
        let n = self.churned_node();
        let what = Self::agent_what(n);
        let log = self.spec().node_dir(n).join("weftd.log");
        let pid = process::spawn(cmd, &log).map_err(|e| fail(&what, e))?;
        self.state.started(&what, pid)?;
        Ok(format!(
            "the agent of {} started (pid {pid})",
            Spec::node_name(n)
        ))
    }

    fn reload_plugin(&mut self) -> Result<String, LabError> {
        let c = self.next_plugin_cluster;
        self.next_plugin_cluster = c % self.spec().clusters + 1;
        // Newer than any before it: the clock in milliseconds.
        let millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let version = format!("0.3.{millis}");
        crate::lab::up::install_plugin_version(
            self.spec(),
            c,
            ("regeneration-policy", &version),
            "regeneration_policy",
            0,
            "",
            false,
        )?;
        Ok(format!(
            "regeneration-policy {version} installed in {}",
            Spec::cluster_name(c)
        ))
    }
}

/// Writes `text` to `file` whole: staged under another name, then renamed.
fn put_back(file: &Path, text: &[u8]) -> Result<(), LabError> {
    let staged = file.with_extension("new");
    std::fs::write(&staged, text)
        .and_then(|()| std::fs::rename(&staged, file))
        .map_err(|e| fail(file.display().to_string(), e))
}
