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
mod error;
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
pub use error::{
    CacheDirError, Cause, Error, FileError, ManifestError, RecordError, SignatureError,
    SigningKeyError, TrustPolicyError, WasmFileError,
};
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
