//! The running agent: wires kvstore, node registration, cluster mesh and the API.

use crate::api::{self, StatusReport};
use crate::clustermesh::{self, ClusterMesh};
use crate::datapath::{self, NodeDatapath, NodeDatapathConfig};
use crate::endpoint::store::Phase;
use crate::endpoint::EndpointManager;
use crate::gc_gate::{GarbageGate, WireGuardGarbage};
use crate::ipcache::Source;
use crate::kvstore::{self, Endpoints};
use crate::metrics::{Waiter, Waits};
use crate::model::{Node, NodeAddress};
use crate::node::{run_registration, NodeId, Registration};
use crate::plugins::{self, CompileCache, PluginDir, PluginHost, TrustPolicy};
use crate::policy::PolicySet;
use crate::regeneration::{wait_for_regeneration, RegenerationConfig};
use crate::state::{LocalKvStore, State};
use crate::wireguard::{
    self, NodeKey, NodeWireGuard, NodeWireGuardConfig, PeerSyncStatus, PodRoutes,
};
use std::future::Future;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::watch;

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
}

/// This node's endpoints.
#[derive(Debug, Clone)]
pub struct EndpointsConfig {
    /// The node's pod CIDRs.
    pub pod_cidrs: Vec<ipnet::IpNet>,
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

/// What stops the agent from starting.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The state directory cannot be created.
    #[error("cannot create state directory {path}")]
    StateDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The API could not start.
    #[error(transparent)]
    Api(#[from] api::Error),
    /// The local etcd client could not be built.
    #[error(transparent)]
    Kvstore(#[from] kvstore::Error),
    /// The plugin runtime or the trusted keys could not be set up.
    #[error(transparent)]
    Plugins(#[from] plugins::Error),
    /// Flags that contradict each other.
    #[error("configuration: {reason}")]
    Config {
        /// What contradicts what.
        reason: String,
    },
    /// The BPF datapath could not be loaded.
    #[error(transparent)]
    Datapath(#[from] datapath::Error),
    /// The WireGuard key or device could not be set up.
    #[error(transparent)]
    WireGuard(#[from] wireguard::Error),
    /// The endpoints' state could not be opened.
    #[error(transparent)]
    Endpoints(#[from] crate::endpoint::manager::Error),
    /// An address to serve on could not be bound.
    #[error("{what} on {addr}")]
    Listen {
        /// The flag naming the address.
        what: &'static str,
        /// The address.
        addr: std::net::SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Runs the agent until `shutdown` completes, then stops the mesh without draining.
///
/// # Errors
/// [`Error`] when start-up fails; once running, problems are reported, not fatal.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), Error> {
    // The endpoints' records, the IPAM and the WireGuard key live here: root's alone,
    // whatever the umask.
    std::fs::create_dir_all(&config.state_dir)
        .and_then(|()| {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&config.state_dir, std::fs::Permissions::from_mode(0o700))
        })
        .map_err(|source| Error::StateDir {
            path: config.state_dir.clone(),
            source,
        })?;
    if config.endpoints.is_some() && config.kvstore_endpoints.is_empty() {
        return Err(Error::Config {
            reason: "--pod-cidr needs --kvstore-endpoints: endpoints' identities and ipcache entries are published there".into(),
        });
    }
    let own_cluster = config.mesh.cluster_name.clone();
    let local = NodeId {
        cluster: own_cluster.clone(),
        name: config.node_name.clone(),
    };
    let state = Arc::new(State::new(local.clone()));
    let waits = Arc::new(Waits::default());
    // WireGuard first: the node record carries its key, and the datapath redirects
    // to its device.
    let (wireguard, pod_routes) = start_wireguard(&config, &state, &local).await?.unzip();
    let wg_key = wireguard.as_ref().map(|wg| &wg.key);
    state.nodes.upsert(Source::Local, own_node(&config, wg_key));
    let mut tasks = tokio::task::JoinSet::new();
    // The plugins read the mesh, and the mesh calls the plugins: the view is tied
    // once both exist.
    let mesh_cell = Arc::new(OnceLock::<ClusterMesh>::new());
    let view: plugins::MeshView = {
        let cell = mesh_cell.clone();
        Arc::new(move || {
            cell.get()
                .map(|m| {
                    m.status()
                        .iter()
                        .map(crate::clustermesh::ClusterStatus::hook_view)
                        .collect()
                })
                .unwrap_or_default()
        })
    };
    let (plugin_host, plugins_loaded) = start_plugins(&config, view, &mut tasks)?;
    let mesh = ClusterMesh::new(
        config.mesh.clone(),
        state.clone(),
        plugin_host.sync_callbacks(),
    );
    let _ = mesh_cell.set(mesh.clone());
    let node_datapath = match &config.datapath {
        Some(dc) => Some(NodeDatapath::start(dc, &state.ipcache)?),
        None => None,
    };
    // Without a kvstore, this node is the only local node there is.
    let (local_nodes_synced, local_nodes) = watch::channel(config.kvstore_endpoints.is_empty());
    tasks.spawn(crate::health::runtime_heartbeat(Duration::from_secs(1)));
    if let Some(addr) = config.health_addr {
        // Served only once the datapath is loaded (start-up stops when it cannot be),
        // so "datapath loaded" holds whenever /readyz answers at all.
        let readiness = crate::health::Readiness::default()
            .with("local state synced", local_nodes.clone())
            .with("plugins initialised", plugins_loaded.clone());
        let (bound, serve) = crate::health::serve(addr, readiness)
            .await
            .map_err(|source| Error::Listen {
                what: "--health-addr",
                addr,
                source,
            })?;
        tracing::info!(addr = %bound, "serving /healthz and /readyz");
        tasks.spawn(serve);
    }

    // Set once the local etcd is connected; until then CNI calls are told to retry.
    let endpoint_manager: Arc<std::sync::OnceLock<Arc<EndpointManager>>> = Arc::default();
    let (policy_tx, policies) = watch::channel(Arc::new(PolicySet::default()));
    if let Some(dir) = config.policy_dir.clone() {
        tasks.spawn(crate::policy::dir::follow(dir, policy_tx));
    }
    let following_policies = config.policy_dir.is_some();
    // One status for the API and the metrics.
    let status: Arc<dyn Fn() -> StatusReport + Send + Sync> = {
        let (mesh, state, plugins) = (mesh.clone(), state.clone(), plugin_host.clone());
        let dp = node_datapath.clone();
        let endpoints = endpoint_manager.clone();
        let policies = policies.clone();
        let wg = wireguard.as_ref().map(|wg| wg.peers.clone());
        let routes = pod_routes.clone();
        let runtime = tokio::runtime::Handle::current();
        Arc::new(move || StatusReport {
            runtime: Some(api::RuntimeStatus::of(&runtime)),
            cluster: own_cluster.clone(),
            clusters: mesh.status(),
            totals: Some(state.totals()),
            plugins: Some(plugins.report()),
            datapath: dp.as_ref().map(NodeDatapath::status),
            wireguard: wg.as_ref().map(|wg| PeerSyncStatus {
                routes: routes.as_ref().map(|r| r.status()),
                ..wg.status()
            }),
            policies: following_policies.then(|| {
                let set = policies.borrow();
                api::PoliciesStatus {
                    loaded: set.policies.iter().map(|p| p.name.clone()).collect(),
                    refused: set.refused.clone(),
                }
            }),
            endpoints: endpoints.get().map(|m| {
                let all = m.list();
                let ready = all.iter().filter(|r| r.phase == Phase::Ready).count();
                api::EndpointsSummary {
                    ready,
                    creating: all.len() - ready,
                }
            }),
        })
    };
    if let Some(addr) = config.prometheus_serve_addr {
        let serve = crate::metrics::serve(addr, status.clone(), waits.clone())
            .await
            .map_err(|source| Error::Listen {
                what: "--prometheus-serve-addr",
                addr,
                source,
            })?;
        tracing::info!(addr = %serve.0, "serving Prometheus metrics");
        tasks.spawn(serve.1);
    }
    let api_state = api_handlers(
        status.clone(),
        endpoint_manager.clone(),
        state.clone(),
        policies.clone(),
        following_policies,
        config.endpoints.is_some(),
    );
    tasks.spawn(api::serve(&config.state_dir, api_state)?);

    if let Some(wg) = &wireguard {
        let gate = GarbageGate {
            mesh: mesh.clone(),
            config_dir: config.clustermesh_config.is_some(),
            local_nodes,
            wait: config
                .wireguard
                .as_ref()
                .is_some_and(|w| w.wait_for_remote_nodes),
            timeout: config.ip_identities_sync_timeout,
            policy: plugin_host.clone(),
            plugins_loaded: plugins_loaded.clone(),
            waits: waits.clone(),
        };
        let garbage = Arc::new(WireGuardGarbage {
            peers: wg.peers.clone(),
            routes: pod_routes.clone(),
        });
        tasks.spawn(gate.collect(garbage));
    }
    if !config.kvstore_endpoints.is_empty() {
        let endpoints = Endpoints {
            urls: config.kvstore_endpoints.clone(),
            ..Endpoints::default()
        };
        let client = kvstore::Client::connect(&endpoints, &config.mesh.kvstore).await?;
        tasks.spawn(clustermesh::run_local_cluster(
            client.clone(),
            clustermesh::LocalCluster {
                name: config.mesh.cluster_name.clone(),
                id: config.mesh.cluster_id,
            },
            Arc::new(LocalKvStore::new(state.clone(), &config.node_name)),
            move |r| {
                if r == clustermesh::Resource::Nodes {
                    local_nodes_synced.send_if_modified(|synced| !std::mem::replace(synced, true));
                }
            },
        ));
        let (lease_tx, lease_rx) = watch::channel(None);
        tasks.spawn(run_registration(
            client.clone(),
            Registration {
                node: own_node(&config, wg_key),
                lease_ttl: Duration::from_secs(15),
            },
            lease_tx,
        ));
        let leased = crate::node::LeasedKeys::new(client.clone(), lease_rx);
        tasks.spawn(leased.clone().run());
        if let Some(ec) = &config.endpoints {
            enable_forwarding(ec)?;
            let allocator = crate::identity::GlobalAllocator::new(
                client.clone(),
                leased.clone(),
                &config.node_name,
                config.mesh.cluster_id,
            );
            let manager = Arc::new(EndpointManager::open(
                &config.state_dir,
                crate::endpoint::Config {
                    pod_cidrs: ec.pod_cidrs.clone(),
                    node_netns: ec.netns.clone(),
                    mtu: ec.mtu,
                    cluster: config.mesh.cluster_name.clone(),
                    node_ip: config.node_ips.first().copied(),
                    encrypt_key: if wireguard.is_some() { 0xFF } else { 0 },
                },
                allocator,
                leased.clone(),
                Some(endpoint_regeneration(
                    &mesh,
                    &plugin_host,
                    plugins_loaded.clone(),
                    config.clustermesh_config.is_some(),
                    RegenerationConfig {
                        default_timeout: config.ip_identities_sync_timeout,
                        ipsec: false,
                        wireguard: wireguard.is_some(),
                    },
                    &waits,
                )),
            )?);
            if let Some(dp) = &node_datapath {
                let switch = Arc::new(crate::endpoint::EndpointSwitch::new(
                    dp.clone(),
                    state.clone(),
                    policies.clone(),
                ));
                manager.set_datapath(switch.clone());
                tasks.spawn(switch.follow(manager.clone()));
            }
            let m = manager.clone();
            tasks.spawn(async move {
                let restored = m.restore().await;
                tracing::info!(endpoints = restored.len(), "endpoints restored");
            });
            let _ = endpoint_manager.set(manager);
        }
    }
    if let Some(dir) = config.clustermesh_config.clone() {
        let m = mesh.clone();
        tasks.spawn(async move { m.run_config_dir(dir).await });
        let dp = node_datapath.clone();
        // The host endpoint regenerates first after a restart, as a workload does.
        let regenerate = endpoint_regeneration(
            &mesh,
            &plugin_host,
            plugins_loaded,
            true,
            RegenerationConfig {
                default_timeout: config.ip_identities_sync_timeout,
                ipsec: false,
                wireguard: false,
            },
            &waits,
        );
        tasks.spawn(regenerate_host_endpoint(regenerate, dp));
    } else if let Some(dp) = node_datapath.clone() {
        // No remote clusters to wait for.
        tasks.spawn(switch_native(dp));
    }
    if let Some(client) = crate::k8s::client_if_configured().await {
        tasks.spawn(crate::k8s::run_kube_apiserver_source(
            client,
            state.ipcache.clone(),
        ));
    }
    tracing::info!(cluster = %config.mesh.cluster_name, node = %config.node_name, "weftd running");
    shutdown.await;
    tracing::info!("stopping: connections closed, no state drained");
    mesh.stop().await;
    tasks.shutdown().await;
    let _ = std::fs::remove_file(api::socket_path(&config.state_dir));
    Ok(())
}

/// The node's WireGuard device and the pod routes through it, when WireGuard is
/// configured, subscribed to the nodes and the ipcache.
async fn start_wireguard(
    config: &Config,
    state: &State,
    local: &NodeId,
) -> Result<Option<(NodeWireGuard, Arc<PodRoutes>)>, Error> {
    let Some(wc) = config.wireguard.clone() else {
        return Ok(None);
    };
    let dir = config.state_dir.clone();
    let (device, netns) = (wc.device.clone(), wc.netns.clone());
    let node = local.clone();
    let started = tokio::task::spawn_blocking(move || NodeWireGuard::start(&wc, &dir, node))
        .await
        .expect("WireGuard start-up task");
    let wg = started?;
    let local_cidrs = config
        .endpoints
        .as_ref()
        .map(|e| e.pod_cidrs.clone())
        .unwrap_or_default();
    let routes = PodRoutes::start(device.clone(), netns, local.clone(), local_cidrs)
        .await
        .map_err(|e| wireguard::Error::Device {
            device,
            reason: format!("reading its pod routes: {e}"),
        })?;
    state.nodes.subscribe(wg.peers.clone());
    state.nodes.subscribe(routes.clone());
    state.ipcache.add_listener(wg.peers.clone());
    Ok(Some((wg, routes)))
}

/// The host endpoint's regeneration after a start: its wait on the remote state, as
/// the policy decides, logged (it has no listing); then the native device switches to
/// the new datapath generation.
async fn regenerate_host_endpoint(
    regenerate: crate::endpoint::regeneration::Regenerate,
    datapath: Option<NodeDatapath>,
) {
    let outcome = regenerate(
        crate::hooks::Endpoint::host(),
        crate::hooks::RegenerationReason::Restore,
        Box::new(|_, _| {}),
    )
    .await;
    let decided_by = outcome
        .answer
        .decided_by
        .as_deref()
        .unwrap_or("built-in default");
    let verdict = &outcome.answer.verdict;
    match outcome.result {
        None => tracing::info!(
            decided_by,
            ?verdict,
            "host endpoint proceeds without waiting"
        ),
        Some(Ok(r)) => {
            tracing::info!(decided_by, ?verdict, synced = ?r.synced, disconnected = ?r.disconnected, "remote state synced for the host endpoint")
        }
        Some(Err(e)) => {
            tracing::warn!(decided_by, ?verdict, error = %e, "host endpoint proceeds without full remote state")
        }
    }
    if let Some(dp) = datapath {
        switch_native(dp).await;
    }
}

/// What the local API answers with: the status, the endpoints (with their policy when
/// policies are followed), the ipcache, and the CNI calls when this node runs pods.
fn api_handlers(
    status: Arc<dyn Fn() -> StatusReport + Send + Sync>,
    endpoint_manager: Arc<OnceLock<Arc<EndpointManager>>>,
    state: Arc<State>,
    policies: watch::Receiver<Arc<PolicySet>>,
    following_policies: bool,
    cni: bool,
) -> api::Handlers {
    api::Handlers {
        status: Box::new(move || status()),
        endpoints: {
            let (endpoints, state) = (endpoint_manager.clone(), state.clone());
            Box::new(move || {
                let records = endpoints.get().map(|m| m.list()).unwrap_or_default();
                let set = policies.borrow().clone();
                let identities = state.identities.lock().expect("identities lock").all();
                records
                    .into_iter()
                    .map(|record| {
                        let policy = following_policies
                            .then(|| record.labels.parse().ok())
                            .flatten()
                            .map(|labels| {
                                crate::policy::compute(&set.policies, &labels, &identities)
                            });
                        api::EndpointView { record, policy }
                    })
                    .collect()
            })
        },
        ipcache: Box::new(move || {
            state
                .ipcache
                .entries()
                .into_iter()
                .map(Into::into)
                .collect()
        }),
        cni: cni.then(|| {
            let handler: api::CniHandler = Arc::new(move |call| {
                let endpoints = endpoint_manager.clone();
                Box::pin(async move {
                    match endpoints.get() {
                        Some(m) => m.handle(call).await,
                        None => Err(weft_api::cni::Failure::new(
                            11,
                            "the agent is starting",
                            "its local etcd is not connected yet",
                        )),
                    }
                })
            });
            handler
        }),
    }
}

/// The plugin host, with the plugin directory followed when one is configured. The
/// receiver turns true once the plugins present at start are loaded.
fn start_plugins(
    config: &Config,
    view: plugins::MeshView,
    tasks: &mut tokio::task::JoinSet<()>,
) -> Result<(PluginHost, watch::Receiver<bool>), Error> {
    let pc = &config.plugins;
    let runtime = Arc::new(plugins::Runtime::new(pc.runtime.clone())?);
    let host = PluginHost::new(runtime.clone(), view, plugins::Isolation::default());
    if let Some(dir) = &pc.record_dir {
        host.record_to(Arc::new(plugins::Recorder::start(
            dir,
            pc.record_max_bytes,
        )?));
    }
    let Some(dir) = pc.dir.clone() else {
        return Ok((host, watch::channel(true).1));
    };
    let trust = trust_policy(pc)?;
    let cache_dir = config.plugin_cache_dir();
    let cache = CompileCache::open(&cache_dir)
        .inspect_err(|e| tracing::warn!(error = %e, "plugins load without a compile cache"))
        .ok();
    let loader = plugins::Loader::new(runtime, cache, trust);
    let (loaded_tx, loaded_rx) = watch::channel(false);
    tasks.spawn(PluginDir::new(dir, loader, host.clone()).run(loaded_tx));
    Ok((host, loaded_rx))
}

/// The trust policy from its file and the trusted keys file. Unsigned plugins are
/// allowed only on request, and never beside keys: a node that has keys means them.
fn trust_policy(pc: &PluginsConfig) -> Result<TrustPolicy, Error> {
    let mut trust = match &pc.trust_policy {
        Some(path) => TrustPolicy::read(path)?,
        None => TrustPolicy::none(),
    };
    if let Some(path) = &pc.trusted_keys {
        trust.add_keys_file(path)?;
    }
    if pc.allow_unsigned {
        if trust.has_keys() {
            return Err(Error::Config {
                reason: "--plugin-allow-unsigned cannot be used with trusted keys: with keys, every plugin must be signed".into(),
            });
        }
        trust = trust.allowing_unsigned();
    }
    Ok(trust)
}

/// Switches the native device to this agent's datapath generation.
async fn switch_native(dp: NodeDatapath) {
    match tokio::task::spawn_blocking(move || dp.switch_native()).await {
        Ok(Ok(())) => tracing::info!("native device switched to the new datapath generation"),
        Ok(Err(e)) => {
            tracing::error!(error = %e, "native device not switched; it keeps its generation")
        }
        Err(e) => tracing::error!(error = %e, "datapath switch task failed"),
    }
}

/// This node's record, as published and as stated to the node manager: with
/// WireGuard, its public key and the WireGuard key index (0xFF), so that other nodes
/// make it a peer and encrypt what they send to it.
fn own_node(config: &Config, wireguard: Option<&NodeKey>) -> Node {
    Node {
        name: config.node_name.clone(),
        cluster: config.mesh.cluster_name.clone(),
        cluster_id: config.mesh.cluster_id,
        ip_addresses: config
            .node_ips
            .iter()
            .map(|ip| NodeAddress {
                kind: "InternalIP".into(),
                ip: *ip,
            })
            .collect(),
        ipv4_alloc_cidr: pod_cidr(config, true),
        ipv6_alloc_cidr: pod_cidr(config, false),
        source: "kvstore".into(),
        labels: Some(Default::default()),
        wireguard_pub_key: wireguard.map_or_else(String::new, |k| k.public().to_base64()),
        encryption_key: if wireguard.is_some() { 0xFF } else { 0 },
        ..Node::default()
    }
}

/// The node's pod CIDR of one family, as the node record carries it.
fn pod_cidr(config: &Config, v4: bool) -> Option<crate::model::IpNet> {
    let cidr = config
        .endpoints
        .as_ref()?
        .pod_cidrs
        .iter()
        .find(|c| c.addr().is_ipv4() == v4)?
        .trunc();
    let mask = match cidr.netmask() {
        IpAddr::V4(m) => m.octets().to_vec(),
        IpAddr::V6(m) => m.octets().to_vec(),
    };
    Some(crate::model::IpNet {
        ip: cidr.network(),
        mask,
    })
}

/// How an endpoint (the host's or a workload's) waits at its regeneration: for the
/// clusters and plugins present at start, then as the policy decides.
fn endpoint_regeneration(
    mesh: &ClusterMesh,
    plugins: &PluginHost,
    loaded: watch::Receiver<bool>,
    config_dir: bool,
    config: RegenerationConfig,
    waits: &Arc<Waits>,
) -> crate::endpoint::regeneration::Regenerate {
    let (mesh, plugins, waits) = (mesh.clone(), plugins.clone(), waits.clone());
    Arc::new(move |endpoint, reason, on_wait| {
        let (mesh, plugins, mut loaded) = (mesh.clone(), plugins.clone(), loaded.clone());
        let waits = waits.clone();
        Box::pin(async move {
            let started = tokio::time::Instant::now();
            if config_dir {
                mesh.config_dir_synced().await;
            }
            let _ = loaded.wait_for(|l| *l).await;
            let waiter = match endpoint.kind {
                crate::hooks::EndpointKind::Host => Waiter::HostEndpoint,
                _ => Waiter::Endpoint,
            };
            let outcome =
                wait_for_regeneration(&mesh, &plugins, config, endpoint, reason, on_wait).await;
            // Only a wait is observed: a verdict to proceed waited for nothing.
            if let Some(result) = &outcome.result {
                waits.observe_wait(waiter, result, started.elapsed());
            }
            outcome
        })
    })
}

/// Turns on forwarding in the endpoints' node namespace, for each family of the pod
/// CIDRs: pods reach other pods, the node and other nodes through it.
fn enable_forwarding(config: &EndpointsConfig) -> Result<(), Error> {
    let knobs = config.forwarding_knobs();
    // /proc/sys/net is the namespace of the thread that opens it, wherever it is
    // mounted.
    crate::netns::in_netns(config.netns.as_deref(), || {
        knobs
            .iter()
            .try_for_each(|k| std::fs::write(k, "1").map_err(|e| format!("{}: {e}", k.display())))
    })
    .map_err(|e| Error::Config {
        reason: format!("endpoints' namespace: {e}"),
    })?
    .map_err(|reason| Error::Config {
        reason: format!("cannot enable forwarding for the endpoints: {reason}"),
    })
}
