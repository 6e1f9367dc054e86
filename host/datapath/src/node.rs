//! The node's datapath as the agent runs it: a new generation filled from the ipcache
//! at start, and the native device switched to it when the agent says so.

use super::{
    Datapath, DatapathConfig, Endpoint, EndpointInfo, Error, MapWriter, PolicyKey, WriterStats,
    FROM_ENDPOINT, TO_ENDPOINT,
};
use aya::programs::TcAttachType;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use weft_state::ipcache::IpCache;
use weft_sys::netns::in_netns;

/// How the agent's datapath is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeDatapathConfig {
    /// The bpffs directory (`/sys/fs/bpf/weft`).
    pub root: PathBuf,
    /// The native device, where `to-netdev` runs on egress.
    pub native_device: String,
    /// The network namespace of the devices; `None` for the agent's own.
    pub netns: Option<PathBuf>,
    /// The device encrypted traffic is redirected to (WireGuard's); none: no redirect.
    pub encrypt_device: Option<String>,
    /// Encrypt the host's own traffic too.
    pub node_encryption: bool,
}

/// What `weftd status` shows of the datapath.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatapathStatus {
    /// The bpffs directory.
    pub root: PathBuf,
    /// The generation this agent fills.
    pub generation: u64,
    /// Each endpoint and the generation that serves it (`None`: not attached).
    pub endpoints: Vec<EndpointStatus>,
    /// Entries written, deleted and refused by the map writer.
    pub written: u64,
    /// Entries deleted.
    pub deleted: u64,
    /// Writes the kernel refused.
    pub failed: u64,
    /// Entries in this generation's ipcache map.
    #[serde(default)]
    pub map_entries: u64,
}

/// One endpoint in [`DatapathStatus`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointStatus {
    /// Its name.
    pub name: String,
    /// Its device.
    pub device: String,
    /// The generation serving it.
    pub generation: Option<u64>,
}

/// The agent's datapath.
#[derive(Clone)]
pub struct NodeDatapath {
    datapath: Arc<Mutex<Datapath>>,
    writer: Arc<MapWriter>,
    native: Endpoint,
}

impl std::fmt::Debug for NodeDatapath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeDatapath")
            .field("native", &self.native)
            .finish_non_exhaustive()
    }
}

impl NodeDatapath {
    /// Loads a new generation under `config.root`, sets the config, and starts filling
    /// its maps from `ipcache` (which replays its entries to the writer). Endpoints
    /// attached by an earlier agent keep their generation until [`Self::switch_native`].
    ///
    /// # Errors
    /// [`Error`] when the datapath cannot load, or the encrypt device is unknown.
    pub fn start(config: &NodeDatapathConfig, ipcache: &IpCache) -> Result<Self, Error> {
        let mut datapath = Datapath::open(&config.root)?;
        let wg_ifindex = match &config.encrypt_device {
            Some(device) => in_netns(config.netns.as_deref(), || {
                nix::net::if_::if_nametoindex(device.as_str())
            })?
            .map_err(|source| Error::NoDevice {
                device: device.clone(),
                source,
            })?,
            None => 0,
        };
        datapath.set_config(DatapathConfig {
            wg_ifindex,
            flags: if config.node_encryption {
                super::CONFIG_NODE_ENCRYPTION
            } else {
                0
            },
        })?;
        let writer = MapWriter::start(datapath.ipcache_map());
        ipcache.add_listener(writer.clone());
        let native = Endpoint {
            name: format!("native-{}", config.native_device),
            netns: config.netns.clone(),
            device: config.native_device.clone(),
        };
        tracing::info!(generation = datapath.generation(), previous = ?datapath.generation_of(&native.name), "datapath loaded; the native device keeps its generation until switched");
        Ok(Self {
            datapath: Arc::new(Mutex::new(datapath)),
            writer,
            native,
        })
    }

    /// Waits until the maps hold the ipcache as it is now, then switches the native
    /// device to this generation (atomically) and releases what nothing uses.
    /// Blocking: run it off the async threads.
    ///
    /// # Errors
    /// [`Error`] when the switch fails; the device keeps its generation.
    pub fn switch_native(&self) -> Result<(), Error> {
        self.writer.flush();
        self.datapath
            .lock()
            .expect("datapath lock")
            .switch(&self.native)
    }

    /// Switches a workload endpoint (its host side `host_ifname`, with `ifindex`, in
    /// the datapath's namespace) to this generation: its policy written first, then
    /// both its programs attached or updated. Blocking.
    ///
    /// # Errors
    /// [`Error`] when a write or an attach fails.
    pub fn switch_endpoint(
        &self,
        host_ifname: &str,
        ifindex: u32,
        info: EndpointInfo,
        keys: &BTreeSet<PolicyKey>,
    ) -> Result<(), Error> {
        self.writer.flush();
        let mut dp = self.datapath.lock().expect("datapath lock");
        dp.set_endpoint(ifindex, info, keys)?;
        dp.switch_program(
            &self.endpoint_link(host_ifname, "from"),
            FROM_ENDPOINT,
            TcAttachType::Ingress,
        )?;
        dp.switch_program(
            &self.endpoint_link(host_ifname, "to"),
            TO_ENDPOINT,
            TcAttachType::Egress,
        )
    }

    /// Detaches a workload endpoint's programs and forgets its policy.
    pub fn remove_endpoint(&self, host_ifname: &str, ifindex: u32) {
        let mut dp = self.datapath.lock().expect("datapath lock");
        for side in ["from", "to"] {
            let _ = dp.detach(&self.endpoint_link(host_ifname, side).name);
        }
        dp.remove_endpoint(ifindex);
    }

    fn endpoint_link(&self, host_ifname: &str, side: &str) -> Endpoint {
        Endpoint {
            name: format!("{host_ifname}-{side}"),
            netns: self.native.netns.clone(),
            device: host_ifname.to_owned(),
        }
    }

    /// The datapath's status.
    pub fn status(&self) -> DatapathStatus {
        let dp = self.datapath.lock().expect("datapath lock");
        let WriterStats {
            written,
            deleted,
            failed,
            entries,
            ..
        } = self.writer.stats();
        DatapathStatus {
            root: dp.root().into(),
            generation: dp.generation(),
            endpoints: std::iter::once(EndpointStatus {
                name: self.native.name.clone(),
                device: self.native.device.clone(),
                generation: dp.generation_of(&self.native.name),
            })
            .chain(
                dp.linked()
                    .into_iter()
                    .filter(|name| *name != self.native.name)
                    .map(|name| EndpointStatus {
                        // `<host side>-from` / `-to`: the workload endpoints' links.
                        device: name
                            .rsplit_once('-')
                            .map_or(name.as_str(), |(d, _)| d)
                            .to_owned(),
                        generation: dp.generation_of(&name),
                        name,
                    }),
            )
            .collect(),
            written,
            deleted,
            failed,
            map_entries: entries,
        }
    }
}
