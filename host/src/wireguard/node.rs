//! WireGuard as the agent runs it: the node's key, its device (found running or
//! started), the MTU, and the peer stage subscribed to nodes and the ipcache.

use super::{mtu, Error, NodeKey, PeerSync, WireGuardDevice};
use crate::datapath::in_netns;
use crate::node::NodeId;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The device's name unless configured: the established agent's is `cilium_wg0`.
pub const DEFAULT_DEVICE: &str = "weft_wg0";

/// How the agent's WireGuard is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeWireGuardConfig {
    /// The device's name. Userspace devices keep their sockets in one directory for
    /// the whole machine, so it must be unique on the machine.
    pub device: String,
    /// The network namespace of the device; `None` for the agent's own.
    pub netns: Option<PathBuf>,
    /// The `weft-wg` binary.
    pub helper: PathBuf,
    /// The device whose MTU, less WireGuard's overhead, the device gets.
    pub mtu_device: Option<String>,
    /// Whether restored peers wait for the remote nodes before garbage collection.
    /// Off only to show the outage that the wait prevents.
    pub wait_for_remote_nodes: bool,
}

impl NodeWireGuardConfig {
    /// The configuration for `device` in `netns`, with the helper next to this
    /// executable (`weftd` and `weft-wg` ship together).
    pub fn new(device: String, netns: Option<PathBuf>) -> Self {
        let helper = std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(|d| d.join("weft-wg")))
            .unwrap_or_else(|| PathBuf::from("weft-wg"));
        Self {
            device,
            netns,
            helper,
            mtu_device: None,
            wait_for_remote_nodes: true,
        }
    }
}

/// The node's WireGuard: its key and the peer stage.
pub struct NodeWireGuard {
    /// The node's key; its public half goes in the node record.
    pub key: NodeKey,
    /// The peers, fed by the node manager and the ipcache.
    pub peers: Arc<PeerSync>,
}

impl NodeWireGuard {
    /// Loads or makes the key in `state_dir`, finds or starts the device, configures
    /// it, sets its MTU, and starts the peer stage with the device's peers restored.
    /// Blocking.
    ///
    /// # Errors
    /// [`Error`] naming the key file or the device.
    pub fn start(
        config: &NodeWireGuardConfig,
        state_dir: &Path,
        local: NodeId,
    ) -> Result<Self, Error> {
        let key = NodeKey::load_or_create(&state_dir.join("wireguard.key"))?;
        let device =
            WireGuardDevice::ensure(&config.device, config.netns.as_deref(), &config.helper)?;
        device.configure(&key)?;
        if let Some(native) = &config.mtu_device {
            set_mtu(config, native)?;
        }
        let peers = PeerSync::start(device, local)?;
        tracing::info!(device = %config.device, public_key = %key.public().to_base64(), "WireGuard ready");
        Ok(Self { key, peers })
    }
}

/// Gives the device the MTU of `native` less WireGuard's overhead.
fn set_mtu(config: &NodeWireGuardConfig, native: &str) -> Result<(), Error> {
    let bad = |reason: String| Error::Device {
        device: config.device.clone(),
        reason,
    };
    let device = config.device.clone();
    let native = native.to_owned();
    let set = in_netns(config.netns.as_deref(), move || {
        let native_mtu =
            mtu::link_mtu(&native).map_err(|e| format!("MTU of native device {native}: {e}"))?;
        let wg_mtu = native_mtu.saturating_sub(mtu::OVERHEAD);
        mtu::set_link_mtu(&device, wg_mtu).map_err(|e| format!("setting MTU {wg_mtu}: {e}"))?;
        Ok::<u32, String>(wg_mtu)
    })
    .map_err(|e| bad(e.to_string()))?
    .map_err(bad)?;
    tracing::info!(device = %config.device, mtu = set, "WireGuard MTU set");
    Ok(())
}
