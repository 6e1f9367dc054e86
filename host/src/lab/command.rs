//! `weftd lab …`: the lab's subcommands and their arguments (in the lab, so that a
//! weftd built without it has none of them).

use clap::{Args, Subcommand, ValueEnum};
use std::path::PathBuf;

/// `weftd lab ...`.
#[derive(Debug, Subcommand)]
pub enum LabCommand {
    /// Make a lab and bring it up: every cluster synced, every pod switched, then the
    /// connectivity matrix. Exits non-zero when a cell is not as the policy says.
    Up {
        /// Clusters (1–9), each with its own etcd.
        #[arg(long, default_value_t = 2)]
        clusters: u8,
        /// Nodes per cluster (1–9).
        #[arg(long, default_value_t = 2)]
        nodes: u8,
        /// Pods per node (1–9); odd ones serve (`app=web`), even ones are clients.
        #[arg(long, default_value_t = 2)]
        pods: u8,
        /// Where the shipped plugins' components are.
        #[arg(long, default_value = "plugins/target/wasm32-wasip2/release")]
        plugins: PathBuf,
        /// Which lab.
        #[command(flatten)]
        at: LabAt,
    },
    /// The lab as its agents see it.
    Status(LabAt),
    /// Run a scenario on the lab: one verdict line; exits non-zero when it fails.
    Scenario {
        /// The scenario.
        #[arg(value_enum)]
        scenario: LabScenario,
        /// Run its control instead: the mechanism off, the failure shown.
        #[arg(long)]
        control: bool,
        /// Draw the streams and the scenario's moments into this SVG file.
        #[arg(long)]
        plot: Option<PathBuf>,
        /// Which lab.
        #[command(flatten)]
        at: LabAt,
    },
    /// Churn the lab (pods, a cluster, a node's agent, plugins, an etcd pause) while
    /// streams run, sampling every agent's memory, open files and tasks: the streams
    /// must see no error and no cut, and the curves stay flat (judged from 10 min on).
    /// Needs 3 clusters or more and 2–8 pods per node.
    Soak {
        /// How long the churn goes on (`30s`, `1h`).
        #[arg(long, value_parser = humantime::parse_duration, default_value = "1h")]
        duration: std::time::Duration,
        /// The time between churn steps.
        #[arg(long, value_parser = humantime::parse_duration, default_value = "15s")]
        every: std::time::Duration,
        /// The time between samples of the agents.
        #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
        sample_every: std::time::Duration,
        /// Draw the agents' curves into this SVG file.
        #[arg(long)]
        plot: Option<PathBuf>,
        /// Write every sample into this CSV file.
        #[arg(long)]
        csv: Option<PathBuf>,
        /// Only these kinds of churn (comma-separated); all by default.
        #[arg(long, value_enum, value_delimiter = ',')]
        steps: Vec<super::soak::churn::Kind>,
        /// Which lab.
        #[command(flatten)]
        at: LabAt,
    },
    /// Remove everything the lab made (also after a crash), from its state file.
    Down(LabAt),
}

/// The lab's scenarios.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LabScenario {
    /// Streams across clusters survive a restart of the client's agent while the
    /// remote etcd is frozen (control: a `proceed` regeneration policy).
    Restart,
    /// Endpoints waiting for a frozen cluster stop waiting as soon as it is removed
    /// (control: not removed, the waits go on).
    ClusterRemovedMidSync,
    /// A remote etcd restarted under writes: nothing of it drained, every agent
    /// converges on what it holds (control: the outage as a removal, drained and cut).
    EtcdRestart,
    /// A vendor's sync callbacks (the shipped `sync-events` plugin) count as the
    /// barriers release (control: the remote cluster held frozen, nothing counted).
    VendorCallback,
    /// The regeneration policy plugin replaced while endpoints wait (control: a
    /// tampered version, refused; the running one keeps deciding).
    PluginReload,
}

/// Which lab.
#[derive(Debug, Args)]
pub struct LabAt {
    /// The lab's name (1–4 lowercase letters or digits): it prefixes its namespaces
    /// and devices.
    #[arg(long, default_value = "weft")]
    pub name: String,
    /// The directory labs live in; this one's is `<dir>/<name>`.
    #[arg(long, default_value = "/var/run/weft-lab")]
    pub dir: PathBuf,
}

impl LabAt {
    /// This lab's directory.
    pub fn path(&self) -> PathBuf {
        self.dir.join(&self.name)
    }
}
