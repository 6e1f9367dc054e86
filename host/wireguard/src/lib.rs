//! WireGuard: one device per node, one peer per remote node.
//!
//! The kernel module is not on these machines, so the device is userspace: boringtun
//! in a `weft-wg` helper process that outlives the agent, configured through the
//! standard UAPI socket. The agent starts the helper itself, or adopts one run
//! outside it (its own container in the chart's pod). The key lives in the state
//! directory.
//!
//! Owns: the node's key, the device and its helper, the peer table (one peer per
//! remote node, AllowedIPs from the ipcache's tunnels), pod routes, and what a restart
//! restores and later collects.
//! Must not know: etcd, the cluster mesh, plugins or the agent. It follows the state
//! stage (`weft-state`: nodes, ipcache changes); *when* restored peers may go is the
//! agent's garbage gate (`weft::gc_gate`), which reads the mesh.

#![deny(unsafe_code)]
#![warn(missing_docs)]

mod device;
mod key;
pub mod link;
mod node;
mod peers;
mod routes;
mod stage;
mod status_text;

pub use device::{
    WireGuardDevice, NO_USERSPACE_IMPLEMENTATION, RUN_DIR, START_TIMEOUT, UAPI_TIMEOUT,
};
pub use key::NodeKey;
pub use node::{NodeWireGuard, NodeWireGuardConfig, DEFAULT_DEVICE};
pub use peers::{Collected, PeerChange, PeerTable, Refusal};
pub use routes::{PodRoutes, PodRoutesStatus, RouteRefusal, RouteTable, ROUTE_PROTOCOL};
pub use stage::{GarbageReport, PeerStatus, PeerSync, PeerSyncStatus, Revive};

use std::path::PathBuf;

/// WireGuard's UDP port (the established agent's).
pub const LISTEN_PORT: u16 = 51871;

/// The mark WireGuard puts on what it has encrypted; the datapath lets those pass.
pub const FWMARK: u32 = 0x1E00;

/// What can go wrong with WireGuard.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The private key file.
    #[error("WireGuard key {path}: {reason}")]
    Key {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The device or its helper.
    #[error("WireGuard device {device}: {reason}")]
    Device {
        /// The device.
        device: String,
        /// Why.
        reason: String,
    },
}
