//! The moments weft's hooks stand for, as plain Rust: the four resources every remote
//! cluster syncs ([`Resource`], [`Counts`]), what a "synced" or "disconnected" callback
//! learns ([`ClusterInfo`], [`SyncCallbacks`]), and the histogram that hook calls and
//! waits are timed in ([`Latency`]).
//!
//! Owns: these types, shared by the mesh (which fires the moments), the plugin host
//! (which answers them) and the metrics (which count them).
//! Must not know: etcd, wasmtime, the datapath or the agent; it depends on serde and
//! weft-model only (where [`Resource`] and [`Counts`] are defined, beside the layout),
//! so that the plugin host builds without the rest of weft.

#![deny(unsafe_code)]
#![warn(missing_docs)]

mod latency;
mod sync;

pub use latency::{Latency, CALL_BOUNDS_US, WAIT_BOUNDS_US};
pub use sync::{ClusterInfo, DisconnectCallback, SyncCallback, SyncCallbacks};
pub use weft_model::{Counts, Resource};
