//! The `weftd` command line: every flag also read from the environment.

use crate::{agent, api, clustermesh, kvstore, plugins};
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

/// weft node agent.
#[derive(Debug, Parser)]
#[command(name = "weftd", version, about)]
pub struct Cli {
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, env = "WEFT_LOG_FORMAT", global = true)]
    pub log_format: LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Log formats.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the agent.
    Run(Box<RunArgs>),
    /// Show the running agent's view of the cluster mesh; with --wait, wait until
    /// every remote cluster is ready (for scripts: the exit code says).
    Status(StatusCommand),
    /// Write this cluster's config to its etcd.
    ClusterConfig(ClusterConfigArgs),
    /// Inspect the running agent's ipcache.
    #[command(subcommand)]
    Ipcache(IpcacheCommand),
    /// This node's endpoints (pods made through weft-cni).
    #[command(subcommand)]
    Endpoint(EndpointCommand),
    /// Package plugins: signing keys, digests and signatures in manifests.
    #[command(subcommand)]
    Plugin(PluginCommand),
    /// A whole multi-cluster mesh on this machine: namespaces, etcd, agents, pods.
    /// Only in a weftd built with the `lab` feature (the default; not the image's).
    #[cfg(feature = "lab")]
    #[command(subcommand)]
    Lab(LabCommand),
}

#[cfg(feature = "lab")]
pub use crate::lab::command::{LabAt, LabCommand, LabScenario};

/// `weftd plugin ...`.
#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Make an ed25519 signing key (mode 0600) and print its public key, the line to
    /// put in the file given to --plugin-trusted-keys.
    Keygen {
        /// Where to write the secret key; an existing file is not overwritten.
        #[arg(long)]
        out: PathBuf,
    },
    /// Print the public key (hex) of an existing signing key, for trust policies.
    Public {
        /// The signing key file (`keygen`'s).
        key: PathBuf,
    },
    /// Fill in a manifest's sha256 from its .wasm, and its signature with --key.
    Seal {
        /// The manifest.
        manifest: PathBuf,
        /// The signing key (from `weftd plugin keygen`).
        #[arg(long)]
        key: Option<PathBuf>,
    },
    /// Fill in a manifest's sha256 and sign it: the signature covers name, version,
    /// digest, WIT version, priority, config and shadow.
    Sign {
        /// The manifest.
        manifest: PathBuf,
        /// The signing key (from `weftd plugin keygen`).
        #[arg(long)]
        key: PathBuf,
    },
    /// Scaffold a plugin crate (with the SDK this agent speaks): builds as generated,
    /// has a test.
    New {
        /// The plugin's name (and the crate's).
        name: String,
        /// Where to create it (default: the current directory).
        #[arg(long, default_value = ".")]
        dir: PathBuf,
    },
    /// Build the plugin crate in DIR for wasm32-wasip2, check it as an agent would,
    /// and write `dist/<name>.wasm` with its manifest (digest and WIT version filled in,
    /// unsigned).
    Build {
        /// The crate (default: the current directory).
        #[arg(default_value = ".")]
        dir: PathBuf,
        /// The cargo to build with.
        #[arg(long, env = "CARGO", default_value = "cargo")]
        cargo: String,
    },
    /// Replay a recording (`weftd run --plugin-record`) against the plugin of a
    /// manifest; prints every decision that differs, with its input, and exits
    /// non-zero when any does.
    Test {
        /// The manifest of the build to test.
        manifest: PathBuf,
        /// The recording directory.
        #[arg(long)]
        recording: PathBuf,
    },
    /// Check a manifest and its component as an agent would, printing what is signed;
    /// exits non-zero when the agent would refuse it.
    Verify {
        /// The manifest.
        manifest: PathBuf,
        /// The trust policy to check against.
        #[arg(long)]
        trust_policy: Option<PathBuf>,
        /// A trusted keys file (one hex public key per line).
        #[arg(long)]
        trusted_keys: Option<PathBuf>,
        /// Accept an unsigned plugin when no key is given (as `--plugin-allow-unsigned`).
        #[arg(long)]
        allow_unsigned: bool,
    },
}

/// `weftd ipcache ...`.
#[derive(Debug, Subcommand)]
pub enum IpcacheCommand {
    /// List every resolved entry: prefix, identity, tunnel endpoint, key, source.
    List(StatusArgs),
    /// Read a datapath generation's ipcache maps from their pins (no agent needed):
    /// prefix, identity, tunnel endpoint, key.
    Map(MapArgs),
}

/// `weftd ipcache map`.
#[derive(Debug, Args)]
pub struct MapArgs {
    /// The bpffs directory the agent pins under.
    #[arg(long, env = "WEFT_BPF_ROOT", default_value = "/sys/fs/bpf/weft")]
    pub bpf_root: PathBuf,
    /// The generation to read (the agent's is in `weftd status`); the newest pinned
    /// when not given.
    #[arg(long)]
    pub generation: Option<u64>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
    pub output: Output,
}

/// `weftd endpoint ...`.
#[derive(Debug, Subcommand)]
pub enum EndpointCommand {
    /// List the endpoints: key, pod, identity, addresses, host side, phase.
    List(StatusArgs),
}

/// `weftd run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// This cluster's name.
    #[arg(long, env = "WEFT_CLUSTER_NAME", default_value = "default")]
    pub cluster_name: String,
    /// This cluster's ID (0 when not in a mesh).
    #[arg(long, env = "WEFT_CLUSTER_ID", default_value_t = 0)]
    pub cluster_id: u32,
    /// This cluster's etcd endpoints, comma-separated (kvstore mode).
    #[arg(long, env = "WEFT_KVSTORE_ENDPOINTS", value_delimiter = ',')]
    pub kvstore_endpoints: Vec<String>,
    /// Directory with one etcd client config file per remote cluster.
    #[arg(long, env = "WEFT_CLUSTERMESH_CONFIG")]
    pub clustermesh_config: Option<PathBuf>,
    /// State directory (API socket).
    #[arg(long, env = "WEFT_STATE_DIR", default_value = "/var/run/weft")]
    pub state_dir: PathBuf,
    /// How long endpoint regeneration waits for remote ipcache and identities.
    #[arg(long, env = "WEFT_CLUSTERMESH_IP_IDENTITIES_SYNC_TIMEOUT", default_value = "1m", value_parser = humantime::parse_duration)]
    pub clustermesh_ip_identities_sync_timeout: Duration,
    /// The largest valid cluster ID.
    #[arg(long, env = "WEFT_MAX_CONNECTED_CLUSTERS", default_value_t = 255)]
    pub max_connected_clusters: u32,
    /// The most keys one remote cluster may hold (nodes, ipcache entries, identities
    /// and services together); a new key past it is refused and counted as malformed.
    #[arg(
        long,
        env = "WEFT_CLUSTERMESH_MAX_KEYS_PER_CLUSTER",
        default_value_t = 1_000_000
    )]
    pub clustermesh_max_keys_per_cluster: usize,
    /// This node's name (default: the host name).
    #[arg(long, env = "WEFT_NODE_NAME")]
    pub node_name: Option<String>,
    /// This node's addresses, comma-separated.
    #[arg(long, env = "WEFT_NODE_IP", value_delimiter = ',')]
    pub node_ip: Vec<IpAddr>,
    /// This node's pod CIDRs (IPv4, and IPv6 when the node has one), comma-separated:
    /// with them, the agent creates endpoints for `weft-cni` (needs --kvstore-endpoints,
    /// where their identities and ipcache entries are published).
    #[arg(long, env = "WEFT_POD_CIDR", value_delimiter = ',')]
    pub pod_cidr: Vec<ipnet::IpNet>,
    /// A directory of policies (CiliumNetworkPolicy or NetworkPolicy, one per file),
    /// followed live; endpoints they select are default-deny.
    #[arg(long, env = "WEFT_POLICY_DIR")]
    pub policy_dir: Option<PathBuf>,
    /// The MTU of endpoint interfaces (leave room for WireGuard's 80 bytes).
    #[arg(long, env = "WEFT_ENDPOINT_MTU", default_value_t = 1420)]
    pub endpoint_mtu: u32,
    /// Where the node's procfs is, for the forwarding knobs (`sys/net/...`): a
    /// container's own `/proc/sys` is read-only, so the chart mounts the node's
    /// `/proc/sys/net` at `/host/proc/sys/net` and sets `/host/proc`.
    #[arg(long, env = "WEFT_PROCFS", default_value = "/proc")]
    pub procfs: PathBuf,
    /// Print every path this configuration writes (one per line: the path, a tab,
    /// what is written there) and exit: what a deployment must mount writable.
    #[arg(long)]
    pub print_written_paths: bool,
    /// Serve Prometheus metrics on this address (`/metrics`); off unless given.
    #[arg(long, env = "WEFT_PROMETHEUS_SERVE_ADDR")]
    pub prometheus_serve_addr: Option<std::net::SocketAddr>,
    /// Serve `/healthz` (every loop turning) and `/readyz` (local state synced,
    /// datapath loaded, plugins initialised) on this address.
    #[arg(long, env = "WEFT_HEALTH_ADDR", default_value = "127.0.0.1:9879")]
    pub health_addr: std::net::SocketAddr,
    /// etcd limits of remote clusters.
    #[command(flatten)]
    pub kvstore: KvstoreArgs,
    /// Plugins.
    #[command(flatten)]
    pub plugins: PluginArgs,
    /// The BPF datapath.
    #[command(flatten)]
    pub datapath: DatapathArgs,
    /// WireGuard.
    #[command(flatten)]
    pub wireguard: WireGuardArgs,
}

/// WireGuard (off unless --wireguard is given).
#[derive(Debug, Args)]
pub struct WireGuardArgs {
    /// Encrypt traffic to other nodes with WireGuard: one device, a peer per node.
    #[arg(long, env = "WEFT_WIREGUARD")]
    pub wireguard: bool,
    /// The WireGuard device; unique on the machine (userspace devices share one
    /// socket directory).
    #[arg(long, env = "WEFT_WIREGUARD_DEVICE", default_value = crate::wireguard::DEFAULT_DEVICE)]
    pub wireguard_device: String,
    /// The `weft-wg` helper that runs a userspace device (default: next to weftd).
    #[arg(long, env = "WEFT_WIREGUARD_HELPER")]
    pub wireguard_helper: Option<PathBuf>,
    /// The userspace device is run outside the agent (`weft-wg DEVICE` in its own
    /// container, as the chart does, sharing `/var/run/wireguard`): wait for its
    /// socket and adopt it; never start a helper or a kernel device. A helper the
    /// agent started would die with the agent's container.
    #[arg(
        long,
        env = "WEFT_WIREGUARD_EXTERNAL_HELPER",
        conflicts_with = "wireguard_helper"
    )]
    pub wireguard_external_helper: bool,
    /// Remove restored peers without waiting for the remote nodes: the outage the wait
    /// exists to prevent. For demonstrating it only.
    #[arg(long, hide = true)]
    pub wireguard_unsafe_early_gc: bool,
}

/// The BPF datapath (off unless --native-device is given).
#[derive(Debug, Args)]
pub struct DatapathArgs {
    /// The native device: `to-netdev` runs on its egress. Turns the datapath on.
    #[arg(long, env = "WEFT_NATIVE_DEVICE")]
    pub native_device: Option<String>,
    /// The device traffic to encrypt is redirected to (WireGuard's).
    #[arg(long, env = "WEFT_ENCRYPT_DEVICE")]
    pub encrypt_device: Option<String>,
    /// Encrypt the host's own traffic too.
    #[arg(long, env = "WEFT_NODE_ENCRYPTION")]
    pub node_encryption: bool,
    /// The bpffs directory for maps, programs and links.
    #[arg(long, env = "WEFT_BPF_ROOT", default_value = "/sys/fs/bpf/weft")]
    pub bpf_root: PathBuf,
    /// The network namespace of those devices, WireGuard's too (default: the
    /// agent's own).
    #[arg(long, env = "WEFT_DATAPATH_NETNS")]
    pub datapath_netns: Option<PathBuf>,
}

/// Where plugins come from and how they are limited.
#[derive(Debug, Args)]
pub struct PluginArgs {
    /// Directory with one manifest (`*.toml`) per plugin, followed for hot reload.
    #[arg(long, env = "WEFT_PLUGIN_DIR")]
    pub plugin_dir: Option<PathBuf>,
    /// Trust policy (TOML): the keys that may sign plugins, the plugin names each may
    /// sign, and a minimum version per plugin. With keys, every plugin must be signed.
    #[arg(long, env = "WEFT_PLUGIN_TRUST_POLICY")]
    pub plugin_trust_policy: Option<PathBuf>,
    /// File of ed25519 public keys (hex, one per line), each trusted for every plugin.
    #[arg(long, env = "WEFT_PLUGIN_TRUSTED_KEYS")]
    pub plugin_trusted_keys: Option<PathBuf>,
    /// Load unsigned plugins (only without trusted keys); `weftd status` says so.
    #[arg(long, env = "WEFT_PLUGIN_ALLOW_UNSIGNED")]
    pub plugin_allow_unsigned: bool,
    /// Record every hook's input and each plugin's answer in this directory (JSON
    /// lines, rotated), for `weftd plugin test` to replay.
    #[arg(long, env = "WEFT_PLUGIN_RECORD")]
    pub plugin_record: Option<PathBuf>,
    /// The most the recording keeps, in MiB; the oldest events go first.
    #[arg(long, env = "WEFT_PLUGIN_RECORD_MAX_MIB", default_value_t = 64)]
    pub plugin_record_max_mib: u64,
    /// Compile cache (default: `<state-dir>/plugin-cache`); it keeps the 64 entries
    /// last written or used.
    #[arg(long, env = "WEFT_PLUGIN_CACHE_DIR")]
    pub plugin_cache_dir: Option<PathBuf>,
    /// How long one plugin call may run.
    #[arg(long, env = "WEFT_PLUGIN_DEADLINE", default_value = "50ms", value_parser = humantime::parse_duration)]
    pub plugin_deadline: Duration,
    /// Linear memory one plugin instance may use, in MiB.
    #[arg(long, env = "WEFT_PLUGIN_MEMORY_MIB", default_value_t = 32)]
    pub plugin_memory_mib: usize,
    /// The longest regeneration wait a plugin may ask for.
    #[arg(long, env = "WEFT_PLUGIN_MAX_WAIT", default_value = "5m", value_parser = humantime::parse_duration)]
    pub plugin_max_wait: Duration,
}

/// Remote etcd client limits.
#[derive(Debug, Args)]
pub struct KvstoreArgs {
    /// Keys per list page (0 = no paging).
    #[arg(long, env = "WEFT_KVSTORE_PAGE_SIZE", default_value_t = 256)]
    pub kvstore_page_size: u32,
    /// Requests in flight per etcd (0 = no limit).
    #[arg(long, env = "WEFT_KVSTORE_MAX_IN_FLIGHT", default_value_t = 20)]
    pub kvstore_max_in_flight: usize,
    /// Requests per second per etcd (0 = no limit).
    #[arg(long, env = "WEFT_KVSTORE_QPS", default_value_t = 20.0)]
    pub kvstore_qps: f64,
}

/// `weftd status` and the other read-only commands.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// State directory of the running agent.
    #[arg(long, env = "WEFT_STATE_DIR", default_value = "/var/run/weft")]
    pub state_dir: PathBuf,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
    pub output: Output,
}

/// `weftd status`.
#[derive(Debug, Args)]
pub struct StatusCommand {
    /// Where the agent is, and the output format.
    #[command(flatten)]
    pub args: StatusArgs,
    /// Wait until every remote cluster the agent knows is ready (all four barriers
    /// released), then show the status; exit non-zero naming what is pending (or
    /// that the agent does not answer) when --timeout passes.
    #[arg(long)]
    pub wait: bool,
    /// How long --wait waits.
    #[arg(long, default_value = "2m", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

/// Output formats of `weftd status`.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Output {
    /// A table.
    Text,
    /// The stable JSON contract.
    Json,
}

/// `weftd cluster-config`.
#[derive(Debug, Args)]
pub struct ClusterConfigArgs {
    /// The cluster's name.
    #[arg(long, env = "WEFT_CLUSTER_NAME")]
    pub cluster_name: String,
    /// The cluster's ID (1–255).
    #[arg(long, env = "WEFT_CLUSTER_ID")]
    pub cluster_id: u32,
    /// The cluster's etcd endpoints, comma-separated.
    #[arg(
        long,
        env = "WEFT_KVSTORE_ENDPOINTS",
        value_delimiter = ',',
        required = true
    )]
    pub kvstore_endpoints: Vec<String>,
    /// Announce that writers put sync canaries.
    #[arg(long, env = "WEFT_SYNCED_CANARIES")]
    pub synced_canaries: bool,
    /// The largest valid cluster ID in the mesh, announced to readers; the same as the
    /// agents' `--max-connected-clusters`.
    #[arg(long, env = "WEFT_MAX_CONNECTED_CLUSTERS", default_value_t = 255)]
    pub max_connected_clusters: u32,
}

impl RunArgs {
    /// The agent's configuration.
    pub fn into_config(self) -> agent::Config {
        let kvstore = kvstore::Config {
            page_size: self.kvstore.kvstore_page_size,
            max_in_flight: self.kvstore.kvstore_max_in_flight,
            qps: self.kvstore.kvstore_qps,
            ..kvstore::Config::default()
        };
        let node_name = self.node_name.unwrap_or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_owned())
                .unwrap_or_else(|_| "localhost".into())
        });
        let wg = self.wireguard;
        let wireguard = wg.wireguard.then(|| {
            let mut c = crate::wireguard::NodeWireGuardConfig::new(
                wg.wireguard_device,
                self.datapath.datapath_netns.clone(),
            );
            if let Some(helper) = wg.wireguard_helper {
                c.helper = helper;
            }
            c.external_helper = wg.wireguard_external_helper;
            c.mtu_device = self.datapath.native_device.clone();
            c.wait_for_remote_nodes = !wg.wireguard_unsafe_early_gc;
            c
        });
        agent::Config {
            mesh: clustermesh::Config {
                cluster_name: self.cluster_name,
                cluster_id: self.cluster_id,
                max_connected_clusters: self.max_connected_clusters,
                max_keys_per_cluster: self.clustermesh_max_keys_per_cluster,
                kvstore,
                ..clustermesh::Config::default()
            },
            kvstore_endpoints: self.kvstore_endpoints,
            clustermesh_config: self.clustermesh_config,
            prometheus_serve_addr: self.prometheus_serve_addr,
            health_addr: Some(self.health_addr),
            state_dir: self.state_dir,
            ip_identities_sync_timeout: self.clustermesh_ip_identities_sync_timeout,
            policy_dir: self.policy_dir,
            endpoints: (!self.pod_cidr.is_empty()).then(|| agent::EndpointsConfig {
                pod_cidrs: self.pod_cidr,
                mtu: self.endpoint_mtu,
                netns: self.datapath.datapath_netns.clone(),
                procfs: self.procfs,
            }),
            node_name,
            node_ips: self.node_ip,
            wireguard: wireguard.clone(),
            datapath: self.datapath.native_device.map(|native_device| {
                crate::datapath::NodeDatapathConfig {
                    root: self.datapath.bpf_root,
                    native_device,
                    netns: self.datapath.datapath_netns,
                    // With WireGuard on, the datapath redirects to its device.
                    encrypt_device: self
                        .datapath
                        .encrypt_device
                        .or_else(|| wireguard.map(|w| w.device)),
                    node_encryption: self.datapath.node_encryption,
                }
            }),
            plugins: agent::PluginsConfig {
                dir: self.plugins.plugin_dir,
                trust_policy: self.plugins.plugin_trust_policy,
                trusted_keys: self.plugins.plugin_trusted_keys,
                allow_unsigned: self.plugins.plugin_allow_unsigned,
                record_dir: self.plugins.plugin_record,
                record_max_bytes: self.plugins.plugin_record_max_mib << 20,
                cache_dir: self.plugins.plugin_cache_dir,
                runtime: plugins::Config {
                    deadline: self.plugins.plugin_deadline,
                    bounds: plugins::Bounds {
                        memory: self.plugins.plugin_memory_mib << 20,
                        ..plugins::Bounds::default()
                    },
                    max_wait: self.plugins.plugin_max_wait,
                    stall: plugins::Config::stall_for(self.plugins.plugin_deadline),
                    ..plugins::Config::default()
                },
            },
        }
    }
}

/// What keeps `weftd status --wait` waiting: one line per remote cluster not ready
/// (its pending barriers and its last error); empty once every one is ready.
///
/// # Example
/// ```
/// let report: weft::api::StatusReport =
///     serde_json::from_str(r#"{"cluster":"c1","clusters":[]}"#).unwrap();
/// assert!(weft::cli::pending_clusters(&report).is_empty());
/// ```
pub fn pending_clusters(report: &api::StatusReport) -> Vec<String> {
    report
        .clusters
        .iter()
        .filter(|c| !c.ready)
        .map(|c| {
            let flags = [
                c.synced.nodes,
                c.synced.ipcache,
                c.synced.identities,
                c.synced.services,
            ];
            let pending: Vec<&str> = clustermesh::Resource::ALL
                .iter()
                .zip(flags)
                .filter(|(_, synced)| !synced)
                .map(|(r, _)| r.name())
                .collect();
            let error = c
                .last_error
                .as_deref()
                .map_or(String::new(), |e| format!("; last error: {e}"));
            format!(
                "{}: {} pending{}{error}",
                c.name,
                pending.join(", "),
                if c.connected { "" } else { " (not connected)" }
            )
        })
        .collect()
}

/// A duration in milliseconds, briefly (`120ms`, `3.4s`, `2m05s`).
fn brief_ms(ms: u64) -> String {
    match ms {
        0..=999 => format!("{ms}ms"),
        1_000..=59_999 => format!("{:.1}s", ms as f64 / 1e3),
        _ => format!("{}m{:02}s", ms / 60_000, (ms % 60_000) / 1_000),
    }
}

/// Renders the status as the table `weftd status` prints.
pub fn render_status(report: &api::StatusReport) -> String {
    let mut out = format!("cluster: {}\n", report.cluster);
    if let Some(t) = &report.totals {
        out.push_str(&format!(
            "state: {} ipcache entries, {} nodes, {} identities ({} this cluster's, {} remote, {} local CIDR), {} values refused\n",
            t.ipcache,
            t.nodes,
            t.identities.cluster + t.identities.remote + t.local_identities,
            t.identities.cluster,
            t.identities.remote,
            t.local_identities,
            t.rejected,
        ));
        if !t.ipcache_by_source.is_empty() {
            let by: Vec<String> = t
                .ipcache_by_source
                .iter()
                .map(|(source, n)| format!("{source} {n}"))
                .collect();
            out.push_str(&format!("  ipcache by source: {}\n", by.join(", ")));
        }
    }
    if let Some(p) = &report.plugins {
        out.push_str(&render_plugins(p));
    }
    if let Some(w) = &report.wireguard {
        out.push_str(&render_wireguard(w));
    }
    if let Some(d) = &report.datapath {
        out.push_str(&format!(
            "datapath: generation {} under {}: {} map entries ({} written, {} deleted, {} refused)\n",
            d.generation,
            d.root.display(),
            d.map_entries,
            d.written,
            d.deleted,
            d.failed
        ));
        for e in &d.endpoints {
            let serving = e
                .generation
                .map_or("not attached".to_owned(), |g| format!("generation {g}"));
            out.push_str(&format!("  {} ({}): {serving}\n", e.name, e.device));
        }
    }
    if let Some(p) = &report.policies {
        out.push_str(&format!(
            "policies: {} in force, {} refused\n",
            p.loaded.len(),
            p.refused.len()
        ));
        for r in &p.refused {
            out.push_str(&format!("  refused {}: {}\n", r.file, r.reason));
        }
    }
    if let Some(e) = &report.endpoints {
        out.push_str(&format!(
            "endpoints: {} ready, {} being created (weftd endpoint list)\n",
            e.ready, e.creating
        ));
    }
    if report.clusters.is_empty() {
        out.push_str("no remote clusters\n");
        return out;
    }
    out.push_str(&format!(
        "{:<16} {:>4} {:<9} {:<5} {:<16} {:<16} {:<16} {:<16} {:>9} {:>10}  {}\n",
        "REMOTE",
        "ID",
        "CONNECTED",
        "READY",
        "NODES",
        "IPCACHE",
        "IDENTITIES",
        "SERVICES",
        "MALFORMED",
        "RECONNECTS",
        "LAST ERROR"
    ));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    for c in &report.clusters {
        // A barrier: `synced` with how long after the cluster's addition, or
        // `pending`; the values held in brackets.
        let cell = |synced: bool, after: Option<u64>, n: usize| match (synced, after) {
            (true, Some(ms)) => format!("synced {}({n})", brief_ms(ms)),
            (true, None) => format!("synced({n})"),
            (false, _) => format!("pending({n})"),
        };
        let after = c.synced_after_ms;
        let error = match (&c.last_error, c.last_failure_unix) {
            (Some(e), Some(at)) => {
                format!("{e} ({} ago)", brief_ms(now.saturating_sub(at) * 1_000))
            }
            (Some(e), None) => e.clone(),
            (None, _) => "-".into(),
        };
        out.push_str(&format!(
            "{:<16} {:>4} {:<9} {:<5} {:<16} {:<16} {:<16} {:<16} {:>9} {:>10}  {}\n",
            c.name,
            c.id.map_or("-".into(), |i| i.to_string()),
            if c.connected { "yes" } else { "no" },
            if c.ready { "yes" } else { "no" },
            cell(c.synced.nodes, after.nodes, c.counts.nodes),
            cell(c.synced.ipcache, after.ipcache, c.counts.ipcache),
            cell(c.synced.identities, after.identities, c.counts.identities),
            cell(c.synced.services, after.services, c.counts.services),
            c.malformed,
            c.reconnects,
            error,
        ));
    }
    let refused = report
        .totals
        .as_ref()
        .map(|t| &t.refused_claims)
        .into_iter()
        .flatten()
        .filter(|(_, r)| r.refused > 0);
    for (cluster, r) in refused {
        out.push_str(&format!(
            "{cluster}: {} claims refused ({} held back now), it may speak only for its own nodes, identities and prefixes; last: {}\n",
            r.refused,
            r.held_back,
            r.last.as_deref().unwrap_or("-"),
        ));
    }
    if let Some(rt) = &report.runtime {
        out.push_str(&format!(
            "runtime: {} tasks alive on {} workers\n",
            rt.alive_tasks, rt.workers
        ));
    }
    out
}

/// The WireGuard part of `weftd status`.
fn render_wireguard(w: &crate::wireguard::PeerSyncStatus) -> String {
    let restore = if w.restoring {
        format!(
            "{} restored peers kept until the remote nodes are synced",
            w.restored
        )
    } else if w.restored == 0 {
        "nothing restored".to_owned()
    } else if let Some(c) = &w.collected {
        format!(
            "{} restored: {} kept, {} removed, {} AllowedIPs trimmed",
            w.restored,
            c.kept.len(),
            c.removed.len(),
            c.trimmed.len()
        )
    } else {
        format!("{} restored", w.restored)
    };
    let mut out = format!(
        "wireguard: device {} ({}), {} peers; {restore}; {} updates, {} refused\n",
        w.device,
        w.backend,
        w.peers.len(),
        w.updates,
        w.failed_updates
    );
    let row = |node: &str, endpoint: &str, allowed: &str, handshake: &str, key: &str| {
        format!("  {node:<24} {endpoint:<24} {allowed:>11} {handshake:<14}  {key}\n")
    };
    if !w.peers.is_empty() {
        out.push_str(&row("NODE", "ENDPOINT", "ALLOWED-IPS", "HANDSHAKE", "KEY"));
    }
    for p in &w.peers {
        out.push_str(&row(
            p.node.as_deref().unwrap_or("(restored)"),
            p.endpoint.as_deref().unwrap_or("-"),
            &p.allowed_ips.to_string(),
            &p.handshake_seconds_ago
                .map_or("never".to_owned(), |s| format!("{s}s ago")),
            &p.key,
        ));
    }
    if let Some(e) = &w.device_error {
        out.push_str(&format!("  device not answering: {e}\n"));
    }
    for r in &w.refused {
        out.push_str(&format!("  refused {r}\n"));
    }
    if let Some(r) = &w.routes {
        let kept = if r.restoring {
            ", restored ones kept until the remote nodes are synced"
        } else {
            ""
        };
        out.push_str(&format!(
            "  pod routes through the device: {}{kept}\n",
            if r.installed.is_empty() {
                "none".to_owned()
            } else {
                r.installed.join(", ")
            }
        ));
        for refused in &r.refused {
            out.push_str(&format!("  no route: {refused}\n"));
        }
        if let Some(e) = &r.error {
            out.push_str(&format!("  pod routes not in step: {e}\n"));
        }
    }
    out
}

/// The plugins part of `weftd status`.
fn render_plugins(p: &plugins::PluginsReport) -> String {
    let mut out = format!(
        "plugins: {} loaded, {} refused ({} loads, {} failed, {} stalls)\n",
        p.loaded.len(),
        p.refused.len(),
        p.loads,
        p.failed_loads,
        p.stalls,
    );
    if !p.trust.is_empty() {
        out.push_str(&format!("  trust: {}\n", p.trust));
    }
    let row = |cells: [&str; 9]| {
        format!(
            "  {:<22} {:<9} {:>8} {:<14} {:<12} {:>8} {:>8} {:<11}  {}\n",
            cells[0],
            cells[1],
            cells[2],
            cells[3],
            cells[4],
            cells[5],
            cells[6],
            cells[7],
            cells[8]
        )
    };
    if !p.loaded.is_empty() {
        out.push_str(&row([
            "PLUGIN",
            "VERSION",
            "PRIORITY",
            "DIGEST",
            "SIGNED BY",
            "CALLS",
            "FAILURES",
            "STATE",
            "LAST ERROR",
        ]));
    }
    for s in &p.loaded {
        out.push_str(&row([
            &s.name,
            &s.version,
            &s.priority.to_string(),
            s.digest.get(..12).unwrap_or(&s.digest),
            s.signed_by.as_deref().unwrap_or("(unsigned)"),
            &s.calls.to_string(),
            &s.failures.to_string(),
            &s.state,
            s.last_error.as_deref().unwrap_or("-"),
        ]));
        if !s.counters.is_empty() {
            let counters: Vec<String> =
                s.counters.iter().map(|(k, v)| format!("{k}={v}")).collect();
            out.push_str(&format!("  {:<22} counters: {}\n", "", counters.join(" ")));
        }
    }
    for s in &p.shadows {
        out.push_str(&format!(
            "  shadow {} {} (signed by {}): {} compared, {} agreed, {} failures, {}\n",
            s.name,
            s.version,
            s.signed_by.as_deref().unwrap_or("nobody"),
            s.compared,
            s.agreed,
            s.failures,
            s.state
        ));
        if let Some(d) = &s.last_disagreement {
            out.push_str(&format!(
                "    last disagreement on {}: live {}, shadow {}\n",
                d.input.hook(),
                d.live,
                d.shadow
            ));
        }
    }
    if let Some(r) = &p.recording {
        out.push_str(&format!(
            "  recording to {} ({} events dropped)\n",
            r.dir.display(),
            r.dropped
        ));
    }
    for r in &p.refused {
        let kept = r
            .kept
            .as_ref()
            .map_or(String::new(), |k| format!(" (still running: {k})"));
        out.push_str(&format!(
            "  refused {}: {}{kept}\n",
            r.manifest.display(),
            r.error
        ));
    }
    out
}

/// Writes this cluster's config (and the "config required" marker) to its etcd.
///
/// # Errors
/// [`kvstore::Error`] when etcd cannot be reached or written.
pub async fn write_cluster_config(args: &ClusterConfigArgs) -> Result<(), kvstore::Error> {
    let endpoints = kvstore::Endpoints {
        urls: args.kvstore_endpoints.clone(),
        ..Default::default()
    };
    let client = kvstore::Client::connect(&endpoints, &kvstore::Config::default()).await?;
    let config = crate::model::ClusterConfig {
        id: args.cluster_id,
        capabilities: crate::model::Capabilities {
            synced_canaries: args.synced_canaries,
            max_connected_clusters: args.max_connected_clusters,
            ..Default::default()
        },
    };
    clustermesh::write_cluster_config(&client, &args.cluster_name, &config).await
}

/// Renders the ipcache as the table `weftd ipcache list` prints.
pub fn render_ipcache(rows: &[api::IpCacheRow]) -> String {
    let mut out = format!(
        "{:<43} {:>10} {:<39} {:>3}  {}\n",
        "PREFIX", "IDENTITY", "TUNNEL ENDPOINT", "KEY", "SOURCE"
    );
    for r in rows {
        let tunnel = r
            .tunnel_endpoint
            .map_or("-".to_owned(), |ip| ip.to_string());
        out.push_str(&format!(
            "{:<43} {:>10} {:<39} {:>3}  {}\n",
            r.prefix, r.identity, tunnel, r.encrypt_key, r.source
        ));
    }
    out
}

/// The human view of `weftd ipcache map`.
pub fn render_map(dump: &crate::datapath::MapDump) -> String {
    let mut out = format!(
        "generation {}: {} entries\n{:<43} {:>10} {:<39} {:>3}\n",
        dump.generation,
        dump.entries.len(),
        "PREFIX",
        "IDENTITY",
        "TUNNEL ENDPOINT",
        "KEY"
    );
    for e in &dump.entries {
        let tunnel = e
            .tunnel_endpoint
            .map_or("-".to_owned(), |ip| ip.to_string());
        out.push_str(&format!(
            "{:<43} {:>10} {:<39} {:>3}\n",
            e.prefix, e.identity, tunnel, e.encrypt_key
        ));
    }
    out
}

/// The human view of `weftd endpoint list`.
pub fn render_endpoints(rows: &[api::EndpointView]) -> String {
    let mut out = format!(
        "{:<28} {:<28} {:>10} {:<32} {:<15} {}\n",
        "ENDPOINT", "POD", "IDENTITY", "ADDRESSES", "HOST SIDE", "PHASE"
    );
    for view in rows {
        let r = &view.record;
        let ips: Vec<String> = r.addresses.iter().map(ToString::to_string).collect();
        let host = r
            .attachment
            .as_ref()
            .map_or("-", |a| a.host_ifname.as_str());
        out.push_str(&format!(
            "{:<28} {:<28} {:>10} {:<32} {:<15} {:?}\n",
            r.key,
            format!("{}/{}", r.namespace, r.pod_name),
            r.identity.map_or("-".into(), |i| i.to_string()),
            ips.join(","),
            host,
            r.phase,
        ));
        out.push_str(&format!("    labels: {}\n", r.labels));
        if let Some(g) = &r.regeneration {
            out.push_str(&format!("    regeneration {g}\n"));
        }
        if let Some(p) = &view.policy {
            let side = |enforced: bool, n: usize| {
                if enforced {
                    format!("enforced, {n} allowed")
                } else {
                    "open".to_owned()
                }
            };
            out.push_str(&format!(
                "    policy: ingress {}, egress {} (selected by: {})\n",
                side(p.ingress_enforced, p.ingress.len()),
                side(p.egress_enforced, p.egress.len()),
                if p.selected_by.is_empty() {
                    "none".to_owned()
                } else {
                    p.selected_by.join(", ")
                }
            ));
        }
    }
    out
}
