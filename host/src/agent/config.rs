//! What the agent is told: everything parsed once at the edge (`weftd run`'s flags).

use crate::clustermesh;
use crate::datapath::NodeDatapathConfig;
use crate::plugins;
use crate::wireguard::{self, NodeWireGuardConfig};
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Everything the agent needs, parsed once at the edge.
#[derive(Debug, Clone)]
pub struct Config {
    /// The cluster mesh's configuration (own name and ID, remote etcd limits).
    pub mesh: clustermesh::Config,
    /// This cluster's etcd, where the node record is published (kvstore mode).
    pub kvstore_endpoints: Vec<String>,
    /// The clustermesh config directory, one file per remote cluster.
    pub clustermesh_config: Option<PathBuf>,
    /// Where the API socket lives.
    pub state_dir: PathBuf,
    /// How long start-up waits for remote ipcache entries and identities.
    pub ip_identities_sync_timeout: Duration,
    /// This node's name.
    pub node_name: String,
    /// This node's addresses.
    pub node_ips: Vec<IpAddr>,
    /// The plugins.
    pub plugins: PluginsConfig,
    /// The BPF datapath; `None` runs without one.
    pub datapath: Option<NodeDatapathConfig>,
    /// WireGuard; `None` runs without encryption.
    pub wireguard: Option<NodeWireGuardConfig>,
    /// Endpoints for `weft-cni`; `None` manages none.
    pub endpoints: Option<EndpointsConfig>,
    /// The policy directory, followed live.
    pub policy_dir: Option<PathBuf>,
    /// Where Prometheus metrics are served; `None`: not served.
    pub prometheus_serve_addr: Option<std::net::SocketAddr>,
    /// Where `/healthz` and `/readyz` are served; `None`: not served.
    pub health_addr: Option<std::net::SocketAddr>,
    /// The Kubernetes API and what identities take from it.
    pub kubernetes: KubernetesConfig,
}

/// The Kubernetes API: where it is, and which labels make identities.
#[derive(Debug, Clone, Default)]
pub struct KubernetesConfig {
    /// `--k8s-kubeconfig-path`; `None`: in-cluster, else the environment's.
    pub kubeconfig: Option<PathBuf>,
    /// The identity-relevant label filter (`--labels` on the established defaults).
    pub labels: weft_model::LabelFilter,
}

/// This node's endpoints.
#[derive(Debug, Clone)]
pub struct EndpointsConfig {
    /// The node's pod CIDRs (empty until read from the Node with `from_node`).
    pub pod_cidrs: Vec<ipnet::IpNet>,
    /// `--ipam kubernetes`: the pod CIDRs are the Node object's `spec.podCIDRs`, read
    /// at start (the agent waits for them, as the established agent does).
    pub from_node: bool,
    /// The endpoints' MTU.
    pub mtu: u32,
    /// The namespace their host sides live in (the datapath's), the agent's own when
    /// `None`.
    pub netns: Option<PathBuf>,
    /// Where the forwarding knobs are: `/proc`, or the node's `/proc/sys/net` mounted
    /// elsewhere (a container's own `/proc/sys` is read-only).
    pub procfs: PathBuf,
}

impl EndpointsConfig {
    /// The forwarding knobs the agent turns on: one per family of the pod CIDRs.
    pub fn forwarding_knobs(&self) -> Vec<PathBuf> {
        let mut knobs = Vec::new();
        // Not known before the Node is read: either may be written.
        if self.from_node && self.pod_cidrs.is_empty() {
            return vec![
                self.procfs.join("sys/net/ipv4/ip_forward"),
                self.procfs.join("sys/net/ipv6/conf/all/forwarding"),
            ];
        }
        if self.pod_cidrs.iter().any(|c| c.addr().is_ipv4()) {
            knobs.push(self.procfs.join("sys/net/ipv4/ip_forward"));
        }
        if self.pod_cidrs.iter().any(|c| c.addr().is_ipv6()) {
            knobs.push(self.procfs.join("sys/net/ipv6/conf/all/forwarding"));
        }
        knobs
    }
}

/// A path the agent writes, and what it writes there: what a deployment must give it
/// writable (`weftd run --print-written-paths`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenPath {
    /// A directory the agent writes in, or a file it writes in place.
    pub path: PathBuf,
    /// What it writes there.
    pub what: &'static str,
}

impl Config {
    /// Every path this configuration has the agent write. Each is the one the code
    /// that writes it uses, so a chart checked against this list cannot miss one.
    pub fn written_paths(&self) -> Vec<WrittenPath> {
        let at = |path: PathBuf, what| WrittenPath { path, what };
        let mut paths = vec![at(
            self.state_dir.clone(),
            "the API socket, endpoint records, IPAM, the WireGuard key",
        )];
        if self.plugins.dir.is_some() {
            paths.push(at(self.plugin_cache_dir(), "the plugins' compile cache"));
        }
        if let Some(dir) = &self.plugins.record_dir {
            paths.push(at(dir.clone(), "the plugin hook recording"));
        }
        if let Some(d) = &self.datapath {
            paths.push(at(d.root.clone(), "BPF maps, programs and links (a bpffs)"));
        }
        // An adopted device's socket is only connected to: its helper writes there.
        if self.wireguard.as_ref().is_some_and(|w| !w.external_helper) {
            paths.push(at(
                wireguard::RUN_DIR.into(),
                "the userspace WireGuard device the agent starts: its socket, PID file, log",
            ));
        }
        if let Some(e) = &self.endpoints {
            for knob in e.forwarding_knobs() {
                paths.push(at(knob, "forwarding for the endpoints (a sysctl)"));
            }
        }
        paths
    }

    /// The plugins' compile cache: as configured, else in the state directory.
    pub fn plugin_cache_dir(&self) -> PathBuf {
        self.plugins
            .cache_dir
            .clone()
            .unwrap_or_else(|| self.state_dir.join("plugin-cache"))
    }
}

/// Where plugins come from and how they are limited.
#[derive(Debug, Clone, Default)]
pub struct PluginsConfig {
    /// One manifest per plugin; without it only the built-in default policy runs.
    pub dir: Option<PathBuf>,
    /// The trust policy: keys, what each may sign, minimum versions.
    pub trust_policy: Option<PathBuf>,
    /// ed25519 public keys, one per line, each trusted for every plugin.
    pub trusted_keys: Option<PathBuf>,
    /// Load unsigned plugins when no key is configured.
    pub allow_unsigned: bool,
    /// Record every hook's input and answers here, for `weftd plugin test`.
    pub record_dir: Option<PathBuf>,
    /// The most the recording keeps, in bytes.
    pub record_max_bytes: u64,
    /// The compile cache (default `<state-dir>/plugin-cache`).
    pub cache_dir: Option<PathBuf>,
    /// Deadlines, memory cap, the longest wait a plugin may ask for.
    pub runtime: plugins::Config,
}
