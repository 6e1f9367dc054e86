//! The moments weft's hooks stand for, as plain Rust: the four resources every remote
//! cluster syncs ([`Resource`], [`Counts`]), what a "synced" or "disconnected" callback
//! learns ([`ClusterInfo`], [`SyncCallbacks`]), and the histogram that hook calls and
//! waits are timed in ([`Latency`]), and the two policy questions with their answers
//! ([`RegenerationRequest`] → [`Verdict`], [`PeerGcRequest`] → [`PeerGcVerdict`]) and
//! who answers them ([`RegenerationPolicy`], [`PeerGcPolicy`]).
//!
//! Owns: these types, shared by the mesh (which fires the moments), the plugin host
//! (which answers them), the endpoints and the agent (which ask), and the metrics
//! (which count them). The WIT contract's types are the plugin host's own.
//! Must not know: etcd, wasmtime, the datapath or the agent; it depends on serde and
//! weft-model only (where [`Resource`] and [`Counts`] are defined, beside the layout),
//! so that the plugin host builds without the rest of weft.

#![deny(unsafe_code)]
#![warn(missing_docs)]

mod latency;
mod policy;
mod sync;

pub use latency::{Latency, CALL_BOUNDS_US, WAIT_BOUNDS_US};
pub use policy::{
    default_verdict, Answer, ClusterSync, Endpoint, EndpointKind, PeerGcPolicy, PeerGcRequest,
    PeerGcVerdict, RegenerationPolicy, RegenerationReason, RegenerationRequest, RestoredPeer,
    Verdict,
};
pub use sync::{ClusterInfo, DisconnectCallback, SyncCallback, SyncCallbacks};
pub use weft_model::{Counts, Resource};
