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
    #[error("WireGuard key {}", path.display())]
    Key {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        #[source]
        source: KeyError,
    },
    /// The device or its helper.
    #[error("WireGuard device {device}")]
    Device {
        /// The device.
        device: String,
        /// What failed.
        #[source]
        source: DeviceError,
    },
}

/// What is wrong with the private key file.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// Others than its owner may read it.
    #[error("mode {mode:04o} lets others than its owner read the private key: make it 0600")]
    Mode {
        /// The file's permission bits.
        mode: u32,
    },
    /// It cannot be read or written.
    #[error("cannot read or write it")]
    Io(#[source] std::io::Error),
    /// It holds no WireGuard key.
    #[error("not a base64 WireGuard key")]
    NotBase64,
}

/// What failed with the device or its helper.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// The name is not an interface name.
    #[error("not an interface name")]
    Name(#[source] wireguard_control::InvalidInterfaceName),
    /// Its network namespace cannot be entered.
    #[error("its network namespace")]
    Netns(#[source] weft_sys::netns::NetnsError),
    /// The helper's log file cannot be opened.
    #[error("log file {}", path.display())]
    Log {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The helper cannot be started.
    #[error("starting {}", helper.display())]
    Start {
        /// The helper binary.
        helper: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The helper exited before it opened its socket.
    #[error("weft-wg exited ({status}) before opening its socket; see {}", log.display())]
    Exited {
        /// How it exited.
        status: std::process::ExitStatus,
        /// Its log file.
        log: PathBuf,
    },
    /// The helper runs but did not open its socket in time.
    #[error("weft-wg (pid {pid}) did not open {} within {within:?}", socket.display())]
    NoSocket {
        /// The helper's process.
        pid: u32,
        /// The socket it should open.
        socket: PathBuf,
        /// How long the agent waited.
        within: std::time::Duration,
    },
    /// The thread that reaps the helper cannot be started.
    #[error("reaper thread")]
    Reaper(#[source] std::io::Error),
    /// No helper run outside the agent answers.
    #[error(
        "no weft-wg answers on {} within {within:?}: the device is run outside the agent \
         (--wireguard-external-helper), by its own container or process; is it running, \
         with the same socket directory mounted?",
        socket.display()
    )]
    NotAdopted {
        /// The socket.
        socket: PathBuf,
        /// How long the agent waited.
        within: std::time::Duration,
    },
    /// Configuring it failed.
    #[error("update")]
    Update(#[source] std::io::Error),
    /// Reading its configuration failed.
    #[error("get")]
    Get(#[source] std::io::Error),
    /// The native device's MTU cannot be read.
    #[error("MTU of native device {device}")]
    NativeMtu {
        /// The native device.
        device: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Its MTU cannot be set.
    #[error("setting MTU {mtu}")]
    SetMtu {
        /// The MTU.
        mtu: u32,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// It cannot be brought up.
    #[error("bringing it up")]
    Up(#[source] std::io::Error),
    /// The routes through it cannot be read.
    #[error("reading its pod routes")]
    Routes(#[source] weft_sys::netlink::Error),
}
