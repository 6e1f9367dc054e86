//! The agent's local API: a unix socket in the state directory speaking HTTP/1.1.
//!
//! `GET /status` answers the [`StatusReport`] JSON contract, `GET /healthz` "ok".
//! It is deliberately tiny: one request per connection, no keep-alive.

mod client;
mod server;

pub use client::fetch_status;
pub use server::serve;

use crate::clustermesh::ClusterStatus;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The whole status: `{"cluster":..,"clusters":[..]}`. A stable contract.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusReport {
    /// This cluster's name.
    pub cluster: String,
    /// Every remote cluster, by name.
    pub clusters: Vec<ClusterStatus>,
}

/// The socket's path in `state_dir`.
pub fn socket_path(state_dir: &Path) -> PathBuf {
    state_dir.join("weftd.sock")
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
    /// The agent answered something other than a status.
    #[error("bad answer from the agent: {reason}")]
    BadAnswer {
        /// What was wrong.
        reason: String,
    },
}
