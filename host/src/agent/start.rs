//! One function per subsystem the agent starts: each starts it (its tasks go into the
//! agent's set) and returns its handle, in the order [`super::run`] calls them.

use super::status::Status;
use super::{Agent, Config, EndpointsConfig, Error, PluginsConfig};
use crate::api;
use crate::clustermesh::{self, ClusterMesh, ClusterStatus};
use crate::datapath::NodeDatapath;
use crate::endpoint::EndpointManager;
use crate::gc_gate::{GarbageGate, WireGuardGarbage};
use crate::kvstore::{self, Endpoints};
use crate::metrics::{Waiter, Waits};
use crate::model::{Node, NodeAddress};
use crate::node::{run_registration, LeasedKeys, NodeId, Registration};
use crate::plugins::{self, CompileCache, PluginDir, PluginHost, TrustPolicy};
use crate::policy::PolicySet;
use crate::regeneration::{wait_for_regeneration, RegenerationConfig};
use crate::state::{LocalKvStore, State};
use crate::wireguard::{self, NodeKey, NodeWireGuard, PodRoutes};
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// The plugin host, and whether the plugins present at start are loaded.
pub(super) struct Plugins {
    pub(super) host: PluginHost,
    /// Turns true once the plugin directory's first scan is loaded.
    pub(super) loaded: watch::Receiver<bool>,
}

/// The node's WireGuard device and the pod routes through it.
pub(super) struct WireGuard {
    pub(super) device: NodeWireGuard,
    pub(super) routes: Arc<PodRoutes>,
}

/// The policies in force: the policy directory's and the Kubernetes API's, together.
pub(super) struct Policies {
    pub(super) current: watch::Receiver<Arc<PolicySet>>,
    /// A policy directory or the API is followed (else the set stays empty and
    /// unreported).
    pub(super) followed: bool,
    /// Where the API's policies go (`start_kubernetes` follows them into it).
    pub(super) from_api: watch::Sender<Arc<PolicySet>>,
}

/// This cluster's etcd, connected: what endpoints publish through.
pub(super) struct LocalKvstore {
    client: kvstore::Client,
    /// This node's lease, and the keys published under it.
    leased: LeasedKeys,
}

/// Checks what contradicts itself and makes the state directory: the endpoints'
/// records, the IPAM and the WireGuard key live there, root's alone, whatever the
/// umask.
pub(super) fn prepare(config: &Config) -> Result<(), Error> {
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
    Ok(())
}

/// The node's WireGuard device and the pod routes through it, when WireGuard is
/// configured, subscribed to the nodes and the ipcache.
pub(super) async fn start_wireguard(
    config: &Config,
    state: &State,
    local: &NodeId,
) -> Result<Option<WireGuard>, Error> {
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
            source: wireguard::DeviceError::Routes(e),
        })?;
    state.nodes.subscribe(wg.peers.clone());
    state.nodes.subscribe(routes.clone());
    state.ipcache.add_listener(wg.peers.clone());
    Ok(Some(WireGuard { device: wg, routes }))
}

/// The plugin host and the mesh. The plugins read the mesh, and the mesh calls the
/// plugins: the plugins' view of the mesh is tied once both exist.
pub(super) fn start_mesh_and_plugins(
    config: &Config,
    state: &Arc<State>,
    tasks: &mut JoinSet<()>,
) -> Result<(ClusterMesh, Plugins), Error> {
    let cell = Arc::new(OnceLock::<ClusterMesh>::new());
    let view: plugins::MeshView = {
        let cell = cell.clone();
        Arc::new(move || {
            cell.get()
                .map(|m| m.status().iter().map(ClusterStatus::hook_view).collect())
                .unwrap_or_default()
        })
    };
    let plugins = start_plugins(config, view, tasks)?;
    let mesh = ClusterMesh::new(
        config.mesh.clone(),
        state.clone(),
        plugins.host.sync_callbacks(),
    );
    let _ = cell.set(mesh.clone());
    Ok((mesh, plugins))
}

/// The plugin host, with the plugin directory followed when one is configured.
fn start_plugins(
    config: &Config,
    view: plugins::MeshView,
    tasks: &mut JoinSet<()>,
) -> Result<Plugins, Error> {
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
        let loaded = watch::channel(true).1;
        return Ok(Plugins { host, loaded });
    };
    let trust = trust_policy(pc)?;
    let cache_dir = config.plugin_cache_dir();
    let cache = CompileCache::open(&cache_dir)
        .inspect_err(|e| tracing::warn!(error = %weft_sys::error_chain(e), "plugins load without a compile cache"))
        .ok();
    let loader = plugins::Loader::new(runtime, cache, trust);
    let (loaded_tx, loaded) = watch::channel(false);
    tasks.spawn(PluginDir::new(dir, loader, host.clone()).run(loaded_tx));
    Ok(Plugins { host, loaded })
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

/// The BPF datapath's new generation, built from the ipcache, when one is configured.
pub(super) fn start_datapath(
    config: &Config,
    state: &State,
) -> Result<Option<NodeDatapath>, Error> {
    Ok(match &config.datapath {
        Some(dc) => Some(NodeDatapath::start(dc, &state.ipcache)?),
        None => None,
    })
}

/// The runtime's heartbeat, and `/healthz` and `/readyz` when an address is
/// configured: ready once the local state is synced and the plugins initialised.
pub(super) async fn start_health(
    config: &Config,
    local_nodes: &watch::Receiver<bool>,
    kubernetes: &watch::Receiver<bool>,
    plugins: &Plugins,
    tasks: &mut JoinSet<()>,
) -> Result<(), Error> {
    tasks.spawn(crate::health::runtime_heartbeat(Duration::from_secs(1)));
    let Some(addr) = config.health_addr else {
        return Ok(());
    };
    // Served only once the datapath is loaded (start-up stops when it cannot be), so
    // "datapath loaded" holds whenever /readyz answers at all.
    let readiness = crate::health::Readiness::default()
        .with("local state synced", local_nodes.clone())
        .with("kubernetes sources synced", kubernetes.clone())
        .with("plugins initialised", plugins.loaded.clone());
    let (bound, serve) = crate::health::serve(addr, readiness)
        .await
        .map_err(|source| Error::Listen {
            what: "--health-addr",
            addr,
            source,
        })?;
    tracing::info!(addr = %bound, "serving /healthz and /readyz");
    tasks.spawn(serve);
    Ok(())
}

/// The policy directory, followed live when one is configured, and the API's
/// policies (fed once the Kubernetes sources start), merged into one set: the
/// directory's first, then the API's. Both may be on together.
pub(super) fn start_policies(
    config: &Config,
    kubernetes: bool,
    tasks: &mut JoinSet<()>,
) -> Policies {
    let (policy_tx, current) = watch::channel(Arc::new(PolicySet::default()));
    let (dir_tx, mut dir) = watch::channel(Arc::new(PolicySet::default()));
    let (from_api, mut api) = watch::channel(Arc::new(PolicySet::default()));
    if let Some(d) = config.policy_dir.clone() {
        tasks.spawn(crate::policy::dir::follow(d, dir_tx));
    }
    tasks.spawn(async move {
        loop {
            let merged = {
                let (d, a) = (dir.borrow_and_update(), api.borrow_and_update());
                PolicySet {
                    policies: d.policies.iter().chain(&a.policies).cloned().collect(),
                    refused: d.refused.iter().chain(&a.refused).cloned().collect(),
                }
            };
            if **policy_tx.borrow() != merged {
                policy_tx.send_replace(Arc::new(merged));
            }
            // A source whose sender is gone stays as it last was.
            tokio::select! {
                Ok(()) = dir.changed() => {}
                Ok(()) = api.changed() => {}
                else => return,
            }
        }
    });
    Policies {
        current,
        followed: config.policy_dir.is_some() || kubernetes,
        from_api,
    }
}

/// Prometheus metrics, when an address is configured.
pub(super) async fn start_metrics(
    agent: &Agent,
    status: Status,
    tasks: &mut JoinSet<()>,
) -> Result<(), Error> {
    let Some(addr) = agent.config.prometheus_serve_addr else {
        return Ok(());
    };
    let (bound, serve) = crate::metrics::serve(addr, status, agent.waits.clone())
        .await
        .map_err(|source| Error::Listen {
            what: "--prometheus-serve-addr",
            addr,
            source,
        })?;
    tracing::info!(addr = %bound, "serving Prometheus metrics");
    tasks.spawn(serve);
    Ok(())
}

/// The local API on its socket in the state directory.
pub(super) fn start_api(
    agent: &Agent,
    status: Status,
    tasks: &mut JoinSet<()>,
) -> Result<(), Error> {
    let handlers = super::status::api_handlers(agent, status);
    tasks.spawn(api::serve(&agent.config.state_dir, handlers)?);
    Ok(())
}

/// With WireGuard, the collection of the peers and routes that a restart restored and
/// no node claims any more, once the garbage gate opens.
pub(super) fn start_wireguard_gc(
    agent: &Agent,
    local_nodes: watch::Receiver<bool>,
    tasks: &mut JoinSet<()>,
) {
    let Some(wg) = &agent.wireguard else { return };
    let config = &agent.config;
    let gate = GarbageGate {
        mesh: agent.mesh.clone(),
        config_dir: config.clustermesh_config.is_some(),
        local_nodes,
        wait: config
            .wireguard
            .as_ref()
            .is_some_and(|w| w.wait_for_remote_nodes),
        timeout: config.ip_identities_sync_timeout,
        policy: agent.plugins.host.clone(),
        plugins_loaded: agent.plugins.loaded.clone(),
        waits: agent.waits.clone(),
    };
    let garbage = Arc::new(WireGuardGarbage {
        peers: wg.device.peers.clone(),
        routes: Some(wg.routes.clone()),
    });
    tasks.spawn(gate.collect(garbage));
}

/// This cluster's etcd, when configured: its state reflected into the state stage
/// (`local_nodes_synced` told when its nodes are in), this node registered under a
/// lease, and the keys published under that lease kept.
pub(super) async fn start_local_kvstore(
    agent: &Agent,
    local_nodes_synced: watch::Sender<bool>,
    tasks: &mut JoinSet<()>,
) -> Result<Option<LocalKvstore>, Error> {
    let config = &agent.config;
    if config.kvstore_endpoints.is_empty() {
        return Ok(None);
    }
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
        Arc::new(LocalKvStore::new(agent.state.clone(), &config.node_name)),
        move |r| {
            if r == clustermesh::Resource::Nodes {
                local_nodes_synced.send_if_modified(|synced| !std::mem::replace(synced, true));
            }
        },
    ));
    let key = agent.wireguard.as_ref().map(|wg| &wg.device.key);
    let (lease_tx, lease_rx) = watch::channel(None);
    tasks.spawn(run_registration(
        client.clone(),
        Registration {
            node: own_node(config, key),
            lease_ttl: Duration::from_secs(15),
        },
        lease_tx,
    ));
    let leased = LeasedKeys::new(client.clone(), lease_rx);
    tasks.spawn(leased.clone().run());
    Ok(Some(LocalKvstore { client, leased }))
}

/// The endpoints for `weft-cni`, when configured: forwarding on, the records restored
/// and each regenerated, switched into the datapath when there is one. The API answers
/// CNI calls from then on.
pub(super) fn start_endpoints(
    agent: &Agent,
    local: &LocalKvstore,
    tasks: &mut JoinSet<()>,
) -> Result<(), Error> {
    let config = &agent.config;
    let Some(ec) = &config.endpoints else {
        return Ok(());
    };
    enable_forwarding(ec)?;
    let allocator = crate::identity::GlobalAllocator::new(
        local.client.clone(),
        local.leased.clone(),
        &config.node_name,
        config.mesh.cluster_id,
    );
    let wireguard = agent.wireguard.is_some();
    let regeneration = RegenerationConfig {
        default_timeout: config.ip_identities_sync_timeout,
        ipsec: false,
        wireguard,
    };
    let manager = Arc::new(EndpointManager::open(
        &config.state_dir,
        crate::endpoint::Config {
            pod_cidrs: ec.pod_cidrs.clone(),
            node_netns: ec.netns.clone(),
            mtu: ec.mtu,
            cluster: config.mesh.cluster_name.clone(),
            node_ip: config.node_ips.first().copied(),
            encrypt_key: if wireguard { 0xFF } else { 0 },
        },
        allocator,
        local.leased.clone(),
        Some(endpoint_regeneration(
            agent,
            config.clustermesh_config.is_some(),
            regeneration,
        )),
    )?);
    if let Some(k8s) = agent.kubernetes.get() {
        manager.set_pod_directory(Arc::new(super::pods::KubernetesPods::new(
            k8s,
            &config.mesh.cluster_name,
            &config.kubernetes.labels,
        )));
        if let super::Kubernetes::Sources(sources) = k8s {
            tasks.spawn(super::pods::follow_labels(
                (**sources).clone(),
                manager.clone(),
                config.mesh.cluster_name.clone(),
                config.kubernetes.labels.clone(),
            ));
        }
    }
    if let Some(dp) = &agent.datapath {
        let switch = Arc::new(crate::endpoint::EndpointSwitch::new(
            dp.clone(),
            agent.state.clone(),
            agent.policies.current.clone(),
        ));
        manager.set_datapath(switch.clone());
        tasks.spawn(switch.follow(manager.clone()));
    }
    let m = manager.clone();
    tasks.spawn(async move {
        let restored = m.restore().await;
        tracing::info!(endpoints = restored.len(), "endpoints restored");
    });
    let _ = agent.endpoints.set(manager);
    Ok(())
}

/// The remote clusters of the clustermesh directory, and the host endpoint's
/// regeneration on them; without a directory, the native device switches at once.
pub(super) fn start_remote_clusters(agent: &Agent, tasks: &mut JoinSet<()>) {
    let Some(dir) = agent.config.clustermesh_config.clone() else {
        // No remote clusters to wait for.
        if let Some(dp) = agent.datapath.clone() {
            tasks.spawn(switch_native(dp));
        }
        return;
    };
    let m = agent.mesh.clone();
    tasks.spawn(async move { m.run_config_dir(dir).await });
    // The host endpoint regenerates first after a restart, as a workload does.
    let regenerate = endpoint_regeneration(
        agent,
        true,
        RegenerationConfig {
            default_timeout: agent.config.ip_identities_sync_timeout,
            ipsec: false,
            wireguard: false,
        },
    );
    tasks.spawn(regenerate_host_endpoint(regenerate, agent.datapath.clone()));
}

/// `--ipam kubernetes`: the pod CIDRs from this node's Node object. Waits until the
/// Node has them (as the established agent does), saying so every 10 s.
///
/// # Errors
/// [`Error::Config`] when there is no Kubernetes API to read the Node from.
pub(super) async fn node_pod_cidrs(
    mut config: Config,
    sources: Option<&crate::k8s::KubernetesSources>,
) -> Result<Config, Error> {
    let Some(ec) = config.endpoints.as_mut().filter(|e| e.from_node) else {
        return Ok(config);
    };
    let Some(sources) = sources else {
        return Err(Error::Config {
            reason: "--ipam kubernetes reads the pod CIDRs from the Node: it needs the Kubernetes API (in-cluster, or --k8s-kubeconfig-path)".into(),
        });
    };
    let key = crate::k8s::ObjectRef::new(&config.node_name);
    let has_cidrs = |n: &crate::k8s::Node| !crate::k8s::NodeFacts::of(n).pod_cidrs.is_empty();
    let node = loop {
        if let Some(n) = sources
            .node
            .wait_for(&key, Duration::from_secs(10), has_cidrs)
            .await
        {
            break n;
        }
        tracing::warn!(node = %config.node_name, status = ?sources.node.status(), "waiting for the Node's pod CIDRs (spec.podCIDRs)");
    };
    for cidr in crate::k8s::NodeFacts::of(&node).pod_cidrs {
        match cidr.parse::<ipnet::IpNet>() {
            Ok(c) => ec.pod_cidrs.push(c.trunc()),
            Err(e) => {
                tracing::warn!(%cidr, error = %e, "skipping a pod CIDR of the Node that does not parse")
            }
        }
    }
    if ec.pod_cidrs.is_empty() {
        return Err(Error::Config {
            reason: format!("the Node {}'s pod CIDRs do not parse", config.node_name),
        });
    }
    tracing::info!(pod_cidrs = ?ec.pod_cidrs, "pod CIDRs from the Node");
    Ok(config)
}

/// The Kubernetes sources, when a Kubernetes configuration is present; `synced`
/// (readiness) turns true once every source has its initial list.
pub(super) fn start_kubernetes(
    agent: &Agent,
    client: Result<Option<crate::k8s::Client>, crate::k8s::ClientError>,
    sources: Option<crate::k8s::KubernetesSources>,
    synced: watch::Sender<bool>,
    tasks: &mut JoinSet<()>,
) {
    let (client, sources) = match (client, sources) {
        (Ok(Some(c)), Some(s)) => (c, s),
        (Ok(_), _) => return,
        (Err(e), _) => {
            let why = weft_sys::error_chain(&e);
            tracing::error!(error = %why, "Kubernetes configuration unusable: no Kubernetes sources, not ready");
            let _ = agent.kubernetes.set(super::Kubernetes::Unusable(why));
            return;
        }
    };
    tasks.spawn(crate::k8s::run_kube_apiserver_source(
        client.clone(),
        agent.state.ipcache.clone(),
    ));
    tasks.spawn(crate::k8s::policies::follow(
        sources.clone(),
        agent.policies.from_api.clone(),
    ));
    let waiting = sources.clone();
    tasks.spawn(async move {
        // The sources retry on their own; this only reports the first full list.
        while !waiting.wait_synced(Duration::from_secs(3600)).await {}
        tracing::info!("Kubernetes sources synced");
        let _ = synced.send(true);
    });
    let _ = agent
        .kubernetes
        .set(super::Kubernetes::Sources(Box::new(sources)));
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

/// Switches the native device to this agent's datapath generation.
async fn switch_native(dp: NodeDatapath) {
    match tokio::task::spawn_blocking(move || dp.switch_native()).await {
        Ok(Ok(())) => tracing::info!("native device switched to the new datapath generation"),
        Ok(Err(e)) => {
            tracing::error!(error = %weft_sys::error_chain(&e), "native device not switched; it keeps its generation")
        }
        Err(e) => tracing::error!(error = %e, "datapath switch task failed"),
    }
}

/// This node's record, as published and as stated to the node manager: with
/// WireGuard, its public key and the WireGuard key index (0xFF), so that other nodes
/// make it a peer and encrypt what they send to it.
pub(super) fn own_node(config: &Config, wireguard: Option<&NodeKey>) -> Node {
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
/// clusters (when `config_dir`) and plugins present at start, then as the policy
/// decides.
fn endpoint_regeneration(
    agent: &Agent,
    config_dir: bool,
    config: RegenerationConfig,
) -> crate::endpoint::regeneration::Regenerate {
    let mesh = agent.mesh.clone();
    let plugins = agent.plugins.host.clone();
    let loaded = agent.plugins.loaded.clone();
    let waits: Arc<Waits> = agent.waits.clone();
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
        knobs.iter().try_for_each(|knob| {
            std::fs::write(knob, "1").map_err(|source| Error::Forwarding {
                knob: knob.clone(),
                source,
            })
        })
    })
    .map_err(Error::EndpointsNetns)?
}
