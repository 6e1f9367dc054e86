//! The agent's local API: HTTP/1.1 over a unix socket in the state directory (mode
//! 0600), served with axum; callers use [`weft_api::Client`].
//!
//! `GET /status` answers the [`StatusReport`] JSON contract, `GET /ipcache` the
//! resolved ipcache as [`IpCacheRow`]s, `GET /healthz` "ok", `GET /v1/endpoints` this
//! node's endpoints, and `POST /v1/cni` carries
//! out what `weft-cni` relays from a container runtime ([`weft_api::cni`]).

mod client;
mod display;
mod server;

pub use client::{fetch_endpoints, fetch_ipcache, fetch_status};
pub use display::{EndpointTable, IpCacheTable};
pub use server::{serve, CniHandler, Handlers};
pub use weft_api::socket_path;

use crate::clustermesh::ClusterStatus;
use crate::datapath::DatapathStatus;
use crate::ipcache::{Entry, Prefix};
use crate::plugins::PluginsReport;
use crate::state::Totals;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The whole status: `{"cluster":..,"clusters":[..]}`. A stable contract.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusReport {
    /// This cluster's name.
    pub cluster: String,
    /// Every remote cluster, by name.
    pub clusters: Vec<ClusterStatus>,
    /// Totals of the state stage (ipcache, nodes, identities).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub totals: Option<Totals>,
    /// The plugins: loaded, refused, loads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugins: Option<PluginsReport>,
    /// The BPF datapath, when the agent runs one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub datapath: Option<DatapathStatus>,
    /// WireGuard, when the agent runs it: the device and its peers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wireguard: Option<crate::wireguard::PeerSyncStatus>,
    /// This node's endpoints, when the agent manages them (`--pod-cidr`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoints: Option<EndpointsSummary>,
    /// The policy directory, when the agent follows one (`--policy-dir`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policies: Option<PoliciesStatus>,
    /// The Kubernetes sources, when a Kubernetes configuration is present or asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<KubernetesStatus>,
    /// The agent's async runtime: what a soak watches for leaks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeStatus>,
}

/// The agent's async runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeStatus {
    /// Tasks alive now (spawned and not yet finished).
    pub alive_tasks: usize,
    /// Worker threads.
    pub workers: usize,
}

impl RuntimeStatus {
    /// The runtime of `handle`, now.
    pub fn of(handle: &tokio::runtime::Handle) -> Self {
        let m = handle.metrics();
        Self {
            alive_tasks: m.num_alive_tasks(),
            workers: m.num_workers(),
        }
    }
}

/// The endpoints at a glance; `weftd endpoint list` shows each.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointsSummary {
    /// Endpoints attached, with their identity and ipcache entry.
    pub ready: usize,
    /// Endpoints whose ADD has not finished (or was interrupted).
    pub creating: usize,
}

/// One endpoint as `weftd endpoint list` shows it: its record, and its policy when
/// the agent follows a policy directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointView {
    /// The endpoint, as recorded.
    #[serde(flatten)]
    pub record: crate::endpoint::store::Record,
    /// What it may receive and send, computed from every identity known now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<crate::policy::EndpointPolicy>,
}

/// The policy directory's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoliciesStatus {
    /// The policies in force, by name.
    pub loaded: Vec<String>,
    /// The files refused, with why.
    pub refused: Vec<crate::policy::Refused>,
}

/// The Kubernetes sources.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KubernetesStatus {
    /// Why there are no sources: the configuration asked for cannot be used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Each source (pods, namespaces, node, the policy kinds, services, endpoint slices).
    pub sources: Vec<KubernetesSourceStatus>,
}

/// One Kubernetes source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KubernetesSourceStatus {
    /// The resource (`pods`, `ciliumnetworkpolicies`, …).
    pub name: String,
    /// Its initial list has arrived.
    pub synced: bool,
    /// Objects in its store.
    pub objects: usize,
    /// Completed lists (more than one after `410 Gone` or errors).
    pub lists: u64,
    /// List and watch errors so far.
    pub errors: u64,
    /// The last error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

impl From<crate::k8s::SourceStatus> for KubernetesSourceStatus {
    fn from(s: crate::k8s::SourceStatus) -> Self {
        KubernetesSourceStatus {
            name: s.name.to_owned(),
            synced: s.synced,
            objects: s.objects,
            lists: s.lists,
            errors: s.errors,
            last_error: s.last_error,
        }
    }
}

/// `GET`: this node's endpoints, as recorded.
pub const ENDPOINTS_ROUTE: &str = "/v1/endpoints";

/// One resolved ipcache entry, as `weftd ipcache list` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpCacheRow {
    /// The prefix, `addr/len`.
    pub prefix: String,
    /// The security identity.
    pub identity: u32,
    /// The node to tunnel to.
    pub tunnel_endpoint: Option<std::net::IpAddr>,
    /// The encryption key index (0 = none).
    pub encrypt_key: u8,
    /// The strongest source with a fact about the prefix.
    pub source: String,
}

impl From<(Prefix, Entry)> for IpCacheRow {
    fn from((prefix, e): (Prefix, Entry)) -> Self {
        Self {
            prefix: prefix.to_string(),
            identity: e.identity,
            tunnel_endpoint: e.tunnel_endpoint,
            encrypt_key: e.encrypt_key,
            source: e.source.name().to_owned(),
        }
    }
}

/// What can go wrong serving or calling the API.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The socket could not be bound or reached.
    #[error("cannot use the API socket {path}")]
    Socket {
        /// The socket's path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Calling the agent failed.
    #[error(transparent)]
    Call(#[from] weft_api::Error),
}
