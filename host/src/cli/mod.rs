//! The `weftd` command line: every flag also read from the environment.
//!
//! The arguments are here; [`config`] turns them into the agent's configuration and
//! the cluster config `weftd cluster-config` publishes. What the commands print is the
//! `Display` of the API's types (`weft::api`).

pub mod config;

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
    /// How long endpoint regeneration waits for remote ipcache and identities (the
    /// established agent's name since 1.16; the seed's name is an alias).
    #[arg(
        long,
        visible_alias = "clustermesh-ip-identities-sync-timeout",
        env = "WEFT_CLUSTERMESH_SYNC_TIMEOUT",
        default_value = "1m",
        value_parser = humantime::parse_duration
    )]
    pub clustermesh_sync_timeout: Duration,
    /// The Kubernetes API's kubeconfig (default: in-cluster, else `KUBECONFIG` or
    /// `~/.kube/config`; none of them: no Kubernetes sources).
    #[arg(long, env = "WEFT_K8S_KUBECONFIG_PATH")]
    pub k8s_kubeconfig_path: Option<PathBuf>,
    /// Identity-relevant label patterns, added to the established defaults
    /// (`[source:][!]regex`, space-separated: `k8s:app k8s:!job-name`; one inclusive
    /// pattern keeps only what inclusive patterns match).
    #[arg(long, env = "WEFT_LABELS", value_delimiter = ' ', num_args = 1.., value_parser = label_pattern)]
    pub labels: Vec<String>,
    /// The largest valid cluster ID.
    #[arg(long, env = "WEFT_MAX_CONNECTED_CLUSTERS", default_value_t = crate::clustermesh::DEFAULT_MAX_CONNECTED_CLUSTERS)]
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
    #[arg(
        long,
        env = "WEFT_POD_CIDR",
        value_delimiter = ',',
        conflicts_with = "ipam"
    )]
    pub pod_cidr: Vec<ipnet::IpNet>,
    /// Where the pod CIDRs come from: `kubernetes`, this node's Node object
    /// (`spec.podCIDRs`, read at start from the Kubernetes API), as the established
    /// agent's `--ipam kubernetes`. Instead of --pod-cidr.
    #[arg(long, env = "WEFT_IPAM", value_enum)]
    pub ipam: Option<Ipam>,
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
    #[arg(long, env = "WEFT_MAX_CONNECTED_CLUSTERS", default_value_t = crate::clustermesh::DEFAULT_MAX_CONNECTED_CLUSTERS)]
    pub max_connected_clusters: u32,
}

/// `--labels`: each pattern checked as the filter will read it.
fn label_pattern(text: &str) -> Result<String, weft_model::LabelFilterError> {
    weft_model::LabelFilter::with_patterns([text]).map(|_| text.to_owned())
}

/// `--ipam`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Ipam {
    /// The Node object's `spec.podCIDRs`.
    Kubernetes,
}
