//! The running agent: [`run`] starts each subsystem in order and wires it to those
//! started before it. Each `start_*` function (in `start.rs`) starts one and returns
//! its handle; `status.rs` builds the one status the API and the metrics share.

mod config;
mod pods;
mod start;
mod status;

pub use config::{Config, EndpointsConfig, KubernetesConfig, PluginsConfig, WrittenPath};

use crate::api;
use crate::clustermesh::ClusterMesh;
use crate::datapath::{self, NodeDatapath};
use crate::endpoint::EndpointManager;
use crate::ipcache::Source;
use crate::kvstore;
use crate::metrics::Waits;
use crate::node::NodeId;
use crate::plugins;
use crate::state::State;
use crate::wireguard;
use start::*;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use tokio::sync::watch;

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
    /// The endpoints' namespace could not be entered to turn on forwarding.
    #[error("endpoints' namespace")]
    EndpointsNetns(#[source] crate::netns::NetnsError),
    /// Forwarding for the endpoints could not be turned on.
    #[error("cannot enable forwarding for the endpoints: {}", knob.display())]
    Forwarding {
        /// The sysctl's path.
        knob: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
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

/// The handles of what has started, which the subsystems started later are wired to.
struct Agent {
    config: Config,
    state: Arc<State>,
    waits: Arc<Waits>,
    mesh: ClusterMesh,
    plugins: Plugins,
    datapath: Option<NodeDatapath>,
    wireguard: Option<WireGuard>,
    policies: Policies,
    /// Set once the local etcd is connected; until then CNI calls are told to retry.
    endpoints: Arc<OnceLock<Arc<EndpointManager>>>,
    /// Set once the Kubernetes sources are started (or found unusable); unset without
    /// a Kubernetes configuration.
    kubernetes: Arc<OnceLock<Kubernetes>>,
}

/// The Kubernetes side of the agent.
enum Kubernetes {
    /// The sources, followed.
    Sources(Box<crate::k8s::KubernetesSources>),
    /// The configuration asked for cannot be used: why (the agent runs on, not ready).
    Unusable(String),
}

/// Runs the agent until `shutdown` completes, then stops the mesh without draining.
///
/// # Errors
/// [`Error`] when start-up fails; once running, problems are reported, not fatal.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), Error> {
    prepare(&config)?;
    let mut tasks = tokio::task::JoinSet::new();
    let k8s_client = crate::k8s::client(config.kubernetes.kubeconfig.as_deref()).await;
    let k8s_sources = match &k8s_client {
        Ok(Some(client)) => Some(crate::k8s::KubernetesSources::start(
            client,
            &config.node_name,
            crate::k8s::Retry::default(),
            &mut tasks,
        )),
        _ => None,
    };
    // The pod CIDRs, when they are the Node's: everything below names them.
    let config = node_pod_cidrs(config, k8s_sources.as_ref()).await?;
    let local = NodeId {
        cluster: config.mesh.cluster_name.clone(),
        name: config.node_name.clone(),
    };
    let state = Arc::new(State::new(local.clone()));
    // WireGuard first: the node record carries its key, and the datapath redirects
    // to its device.
    let wireguard = start_wireguard(&config, &state, &local).await?;
    let key = wireguard.as_ref().map(|wg| &wg.device.key);
    state.nodes.upsert(Source::Local, own_node(&config, key));
    let (mesh, plugins) = start_mesh_and_plugins(&config, &state, &mut tasks)?;
    let datapath = start_datapath(&config, &state)?;
    // Without a kvstore, this node is the only local node there is.
    let (local_nodes_synced, local_nodes) = watch::channel(config.kvstore_endpoints.is_empty());
    // Ready at once without Kubernetes; never with a configuration that cannot be used.
    let (k8s_synced_tx, k8s_synced) = watch::channel(matches!(k8s_client, Ok(None)));
    start_health(&config, &local_nodes, &k8s_synced, &plugins, &mut tasks).await?;
    let policies = start_policies(&config, matches!(k8s_client, Ok(Some(_))), &mut tasks);
    let agent = Agent {
        config,
        state,
        waits: Arc::default(),
        mesh,
        plugins,
        datapath,
        wireguard,
        policies,
        endpoints: Arc::default(),
        kubernetes: Arc::default(),
    };
    let status = status::report(&agent);
    start_metrics(&agent, status.clone(), &mut tasks).await?;
    start_api(&agent, status, &mut tasks)?;
    start_wireguard_gc(&agent, local_nodes, &mut tasks);
    // Before the endpoints: their ADDs take pods' labels from the Pod store.
    start_kubernetes(&agent, k8s_client, k8s_sources, k8s_synced_tx, &mut tasks);
    if let Some(local) = start_local_kvstore(&agent, local_nodes_synced, &mut tasks).await? {
        start_endpoints(&agent, &local, &mut tasks)?;
    }
    start_remote_clusters(&agent, &mut tasks);
    let (cluster, node) = (&agent.config.mesh.cluster_name, &agent.config.node_name);
    tracing::info!(%cluster, %node, "weftd running");
    shutdown.await;
    tracing::info!("stopping: connections closed, no state drained");
    agent.mesh.stop().await;
    tasks.shutdown().await;
    let _ = std::fs::remove_file(api::socket_path(&agent.config.state_dir));
    Ok(())
}
