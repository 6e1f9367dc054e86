//! WASM plugins: the hooks of `plugin-sdk/wit/weft-plugin.wit`, run sandboxed.
//!
//! One engine; each plugin instance in its own `Store` with a memory cap and an epoch
//! deadline per call; WASI only as far as starting needs, its waits bounded by the
//! call's deadline (the `wasi` module); no filesystem, network or environment. Each plugin runs
//! on its own thread, which the agent gives up on and replaces when it stalls
//! ([`PluginHost`]). The host enforces each hook's contract ([`enforce`]): a plugin's
//! answer is bounded before it is acted on.
//!
//! Owns: the wasmtime engine and its limits, manifests, signatures and trust, the
//! compile cache, record/replay, shadows, and the vendor's tool ([`tool`]: scaffold,
//! build, sign, verify, test against a recording).
//! Must not know: etcd, the datapath, WireGuard or the agent. It sees the mesh only
//! through [`MeshView`] and the hook types of `weft-hooks`, which it takes and
//! answers in; the WIT-generated types are its own, converted at the call (`convert`),
//! and shown only as [`wit`]: a plugin's raw answer, before the host bounds it.

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod tool;

mod bindings;
mod cache;
mod contract;
mod convert;
mod directory;
mod host;
mod host_state;
mod instance;
mod loader;
mod manifest;
mod record;
mod replay;
mod report_text;
mod runtime;
mod set;
mod shadow;
mod slot;
mod trust;
mod v0_1;
mod wasi;
mod worker;

/// The WIT contract's answers as a plugin gives them, before [`enforce`] bounds them
/// (for tools and tests that drive [`Instance`] directly).
pub mod wit {
    pub use crate::bindings::weft::plugin::types::{Barrier, Decision, PeerGcDecision, Wait};
}

pub use bindings::VERSION as WIT_VERSION;
pub use cache::{CacheOutcome, CompileCache};
pub use contract::{enforce, enforce_peer_gc, Violation};
pub use directory::{Changes, PluginDir};
pub use host::{PluginHost, PluginsReport, RecordingStatus, Refusal};
pub use host_state::{Bounds, LimitExceeded, MeshView};
pub use instance::{CallError, Instance};
pub use loader::{read_package, Loader, Read, MAX_COMPONENT_BYTES};
pub use manifest::{
    digest_hex, generate_signing_key, read_signing_key, seal, Manifest, ManifestSignature, Verified,
};
pub use record::{read_recording, Answered, Event, HookInput, Recorder, Said};
pub use replay::{replay, Difference, ReplayReport};
pub use runtime::{Prepared, Runtime};
pub use set::PluginSet;
pub use shadow::{Disagreement, ShadowStatus};
pub use slot::{Isolation, LoadedPlugin, Outcome, PluginStatus, Record, FAILURE_CAUSES};
pub use trust::{TrustPolicy, TrustedKey};

use std::path::PathBuf;
use std::time::Duration;

/// Limits of the plugin runtime.
#[derive(Debug, Clone)]
pub struct Config {
    /// How long one hook call may run.
    pub deadline: Duration,
    /// What one instance may make the host hold: memory, tables, resources, logs,
    /// metric names.
    pub bounds: Bounds,
    /// The longest wait a policy decision may ask for.
    pub max_wait: Duration,
    /// How long the agent waits for a plugin's thread (a call, an install) before it
    /// gives up on it: the built-in default answers, the plugin is quarantined and its
    /// thread replaced. A call is stopped at `deadline`; this bound is for what the
    /// sandbox cannot stop (a host call that never returns).
    pub stall: Duration,
    /// Plugin instances the pooling allocator reserves room for (one per plugin and
    /// shadow, plus abandoned threads' and those being replaced); 0 allocates each
    /// instance on demand.
    pub pooled_instances: u32,
}

impl Config {
    /// The stall bound for a call `deadline`: a call, plus the re-instantiation of a
    /// failed instance, plus the one before it in the queue, with room for a loaded
    /// machine.
    pub fn stall_for(deadline: Duration) -> Duration {
        deadline * 4 + Duration::from_millis(250)
    }
}

impl Default for Config {
    fn default() -> Self {
        let deadline = Duration::from_millis(50);
        Self {
            deadline,
            bounds: Bounds::default(),
            max_wait: Duration::from_secs(300),
            stall: Self::stall_for(deadline),
            pooled_instances: 128,
        }
    }
}

/// What can go wrong setting up or loading a plugin.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// wasmtime could not be set up.
    #[error("plugin engine: {reason}")]
    Engine {
        /// Why.
        reason: String,
    },
    /// The bytes are not a valid component.
    #[error("cannot compile plugin: {reason}")]
    Compile {
        /// Why.
        reason: String,
    },
    /// The component does not fit the contract.
    #[error("plugin {plugin:?} refused: {reason}")]
    Instantiate {
        /// The plugin.
        plugin: String,
        /// Why (a missing export, an incompatible WIT version, a missing import).
        reason: String,
    },
    /// The plugin's `init` failed.
    #[error("plugin {plugin:?} init failed: {reason}")]
    Init {
        /// The plugin.
        plugin: String,
        /// Its error, or how it trapped.
        reason: String,
    },
    /// A manifest cannot be read or parsed.
    #[error("bad plugin manifest {path}: {reason}")]
    Manifest {
        /// The manifest.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The trust policy (or trusted keys) file cannot be read or parsed.
    #[error("bad plugin trust policy {path}: {reason}")]
    TrustPolicy {
        /// The file.
        path: PathBuf,
        /// Why (naming the entry or line).
        reason: String,
    },
    /// The component file cannot be used: outside the plugin directory, not a regular
    /// file, too large, or unreadable.
    #[error("plugin {plugin:?} refused: wasm {path}: {reason}")]
    Wasm {
        /// The plugin.
        plugin: String,
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The component is not the one the manifest names.
    #[error("plugin {plugin:?} refused: wrong digest: the manifest says sha256 {expected}, the file has {actual}")]
    Digest {
        /// The plugin.
        plugin: String,
        /// The manifest's digest.
        expected: String,
        /// The file's.
        actual: String,
    },
    /// The component exports another WIT version than its manifest says.
    #[error("plugin {plugin:?} refused: wit: the manifest says {manifest}, the component exports {component}")]
    Wit {
        /// The plugin.
        plugin: String,
        /// The manifest's `wit`.
        manifest: String,
        /// What the component exports.
        component: String,
    },
    /// The version is below the trust policy's minimum for this plugin.
    #[error("plugin {plugin:?} refused: version {version} is below the trust policy's min_version {minimum} (no downgrade)")]
    Downgrade {
        /// The plugin.
        plugin: String,
        /// The manifest's version.
        version: String,
        /// The policy's minimum.
        minimum: String,
    },
    /// The manifest carries no signature and unsigned plugins are not allowed.
    #[error("plugin {plugin:?} refused: unsigned: {reason}")]
    Unsigned {
        /// The plugin.
        plugin: String,
        /// Why a signature is needed.
        reason: String,
    },
    /// The signature is malformed, does not cover the manifest as it stands, or was
    /// made by a key not allowed to sign this plugin.
    #[error("plugin {plugin:?} refused: bad signature: {reason}")]
    Signature {
        /// The plugin.
        plugin: String,
        /// Why (naming the changed field when it can).
        reason: String,
    },
    /// The compile cache directory cannot be used.
    #[error("plugin compile cache {path}: {reason}")]
    Cache {
        /// The directory.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A signing key file cannot be read, parsed or written.
    #[error("signing key {path}: {reason}")]
    SigningKey {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The hook recording cannot be written or read.
    #[error("plugin recording {path}: {reason}")]
    Record {
        /// The directory or file.
        path: PathBuf,
        /// Why (with the line, when reading).
        reason: String,
    },
    /// Two manifests name the same plugin.
    #[error("plugin {plugin:?} refused: its name is already used by {other}")]
    DuplicateName {
        /// The plugin.
        plugin: String,
        /// The other manifest.
        other: PathBuf,
    },
}

impl Error {
    fn engine(e: impl std::fmt::Display) -> Self {
        Error::Engine {
            reason: e.to_string(),
        }
    }

    /// The same error naming the file `path`, for the errors about a file read.
    fn with_path(self, path: &std::path::Path) -> Self {
        match self {
            Error::Manifest { reason, .. } => Error::Manifest {
                path: path.into(),
                reason,
            },
            Error::TrustPolicy { reason, .. } => Error::TrustPolicy {
                path: path.into(),
                reason,
            },
            other => other,
        }
    }
}
