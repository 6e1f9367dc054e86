//! WireGuard as the agent runs it: the node's key, its device (found running or
//! started, up, with its MTU), and the peer stage subscribed to nodes and the ipcache.
//! A device that goes away (its helper killed) is opened again by the stage.

use super::{link, DeviceError, Error, NodeKey, PeerSync, WireGuardDevice};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use weft_state::node::NodeId;
use weft_sys::netns::in_netns;

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
    /// The `weft-wg` binary, started when no device answers.
    pub helper: PathBuf,
    /// The userspace device is run outside the agent (the chart's `wireguard`
    /// container): the agent adopts it and never starts one, since a helper it
    /// started would live and die with the agent's container.
    pub external_helper: bool,
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
            external_helper: false,
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
    /// Loads or makes the key in `state_dir`, opens the device, and starts the peer
    /// stage with the device's peers restored. Blocking.
    ///
    /// # Errors
    /// [`Error`] naming the key file or the device.
    pub fn start(
        config: &NodeWireGuardConfig,
        state_dir: &Path,
        local: NodeId,
    ) -> Result<Self, Error> {
        let key = NodeKey::load_or_create(&state_dir.join("wireguard.key"))?;
        let device = open_device(config, &key)?;
        let revive = {
            let (config, key) = (config.clone(), key.clone());
            Box::new(move || open_device(&config, &key))
        };
        let peers = PeerSync::start_reviving(device, local, revive)?;
        tracing::info!(device = %config.device, public_key = %key.public().to_base64(), "WireGuard ready");
        Ok(Self { key, peers })
    }
}

/// Finds or starts the device, configures it, sets its MTU and brings it up.
fn open_device(config: &NodeWireGuardConfig, key: &NodeKey) -> Result<WireGuardDevice, Error> {
    let device = if config.external_helper {
        WireGuardDevice::adopt(&config.device, super::START_TIMEOUT)?
    } else {
        WireGuardDevice::ensure(&config.device, config.netns.as_deref(), &config.helper)?
    };
    device.configure(key)?;
    let bad = |source: DeviceError| Error::Device {
        device: config.device.clone(),
        source,
    };
    let name = config.device.clone();
    let native = config.mtu_device.clone();
    let mtu = in_netns(config.netns.as_deref(), move || {
        let mtu = match native {
            Some(native) => {
                let native_mtu = link::mtu(&native).map_err(|source| DeviceError::NativeMtu {
                    device: native.clone(),
                    source,
                })?;
                let mtu = native_mtu.saturating_sub(link::WIREGUARD_OVERHEAD);
                link::set_mtu(&name, mtu).map_err(|source| DeviceError::SetMtu { mtu, source })?;
                Some(mtu)
            }
            None => None,
        };
        link::set_up(&name).map_err(DeviceError::Up)?;
        Ok::<Option<u32>, DeviceError>(mtu)
    })
    .map_err(|e| bad(DeviceError::Netns(e)))?
    .map_err(bad)?;
    tracing::info!(device = %config.device, ?mtu, "WireGuard device up");
    Ok(device)
}
