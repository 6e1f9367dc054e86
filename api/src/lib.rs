//! weftd's local API, as its callers see it: where the socket is, the messages of the
//! routes that change things, what an endpoint's regeneration came to
//! ([`endpoint::Regeneration`]), and a client.
//!
//! The API is HTTP/1.1 over a unix socket in the agent's state directory (mode 0600:
//! only root calls it). `weftd status` reads it; `weft-cni` writes through it. The
//! server is in the agent (`weft::api`), served with axum.
//!
//! ```no_run
//! # async fn demo() -> Result<(), weft_api::Error> {
//! let client = weft_api::Client::new(weft_api::socket_path("/var/run/weft".as_ref()));
//! let healthy: String = client.get_text("/healthz").await?;
//! # Ok(()) }
//! ```

mod client;
pub mod cni;
pub mod endpoint;

pub use client::{Client, Error};

use std::path::{Path, PathBuf};

/// The socket's path in the agent's state directory.
pub fn socket_path(state_dir: &Path) -> PathBuf {
    state_dir.join("weftd.sock")
}

/// The default state directory, where `weft-cni` looks for the socket unless its
/// network configuration names one.
pub const DEFAULT_STATE_DIR: &str = "/var/run/weft";
