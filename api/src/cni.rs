//! The CNI route: what `weft-cni` relays from a container runtime, and what the agent
//! answers.
//!
//! `weft-cni` handles the specification's framing (environment, versions, the error
//! JSON on stdout); the agent does the work and stays version-agnostic: it answers a
//! [`CNIResult`] without a version, or an [`Failure`] with the specification's code.

use rscni_types::types::{CNIResult, NetConf};
use serde::{Deserialize, Serialize};

pub use rscni_types;

/// `POST` a [`CniCall`]; `200` with a [`CniAnswer`] or `4xx/5xx` with a [`Failure`].
pub const ROUTE: &str = "/v1/cni";

/// The CNI operations the agent carries out (`VERSION` is answered by `weft-cni`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Command {
    /// Attach the container to the network.
    Add,
    /// Detach it; succeeds when there is nothing left to undo.
    Del,
    /// Check that the attachment is as ADD left it.
    Check,
    /// Remove every attachment not in the configuration's valid attachments.
    Gc,
    /// Whether the plugin is ready for ADDs.
    Status,
}

/// One invocation, as the runtime made it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CniCall {
    /// The operation.
    pub command: Command,
    /// `CNI_CONTAINERID` (empty for GC and STATUS).
    #[serde(default)]
    pub container_id: String,
    /// `CNI_NETNS`, the path of the container's network namespace.
    #[serde(default)]
    pub netns: Option<String>,
    /// `CNI_IFNAME`, the interface to create inside it.
    #[serde(default)]
    pub ifname: String,
    /// `CNI_ARGS`, split into pairs (`K8S_POD_NAMESPACE`, `K8S_POD_NAME`, …).
    #[serde(default)]
    pub args: Vec<(String, String)>,
    /// The network configuration from stdin (with `prevResult` and `runtimeConfig`
    /// when the runtime passed them).
    pub config: NetConf,
}

impl CniCall {
    /// The value of `CNI_ARGS` key `key`.
    pub fn arg(&self, key: &str) -> Option<&str> {
        self.args
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// A successful answer: ADD's (and CHECK's echo of) the attachment; empty otherwise.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CniAnswer {
    /// The attachment, for ADD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<CNIResult>,
}

/// A failed call, in the specification's terms: `weft-cni` prints it as the error
/// JSON (with the negotiated `cniVersion`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("CNI error {code}: {msg}: {details}")]
pub struct Failure {
    /// The specification's code (1–99), or the agent's own (100 and up).
    pub code: u32,
    /// What failed, briefly.
    pub msg: String,
    /// Why, naming the thing at fault.
    #[serde(default)]
    pub details: String,
}

impl Failure {
    /// A failure with code `code`.
    pub fn new(code: u32, msg: impl Into<String>, details: impl Into<String>) -> Self {
        Self {
            code,
            msg: msg.into(),
            details: details.into(),
        }
    }

    /// The specification's error of the same code, for its error JSON.
    pub fn to_spec(&self) -> rscni_types::error::Error {
        use rscni_types::error::Error as E;
        let d = format!("{}: {}", self.msg, self.details);
        match self.code {
            1 => E::IncompatibleVersion(d),
            2 => E::UnsupportedNetworkConfiguration(d),
            3 => E::NotExist(d),
            4 => E::InvalidEnvValue(d),
            5 => E::IOFailure(d),
            6 => E::FailedToDecode(d),
            7 => E::InvalidNetworkConfig(d),
            8 => E::InvalidNetNS(d),
            11 => E::TryAgainLater(d),
            50 => E::PluginNotAvailable(d),
            51 => E::PluginNotAvailableLimitedConnectivity(d),
            code => E::Custom(code, self.msg.clone(), self.details.clone()),
        }
    }
}

/// The agent's own error codes (the specification leaves 100 and up to plugins).
pub mod code {
    /// The agent could not allocate an address: the pod CIDR is exhausted.
    pub const ADDRESSES_EXHAUSTED: u32 = 100;
    /// Setting up the interface, addresses or routes failed.
    pub const LINK_SETUP: u32 = 101;
    /// The security identity could not be allocated (the local etcd is unreachable).
    pub const IDENTITY: u32 = 102;
}
