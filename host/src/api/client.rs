//! Calls the local API (what `weftd status` does).

use super::{socket_path, Error, IpCacheRow, StatusReport};
use std::path::Path;

/// Fetches the running agent's status through the socket in `state_dir`.
///
/// # Errors
/// [`Error::Call`] when no agent answers, or not with a status.
pub async fn fetch_status(state_dir: &Path) -> Result<StatusReport, Error> {
    Ok(client(state_dir).get("/status").await?)
}

/// Fetches the running agent's resolved ipcache.
///
/// # Errors
/// [`Error::Call`] when no agent answers, or not with the ipcache.
pub async fn fetch_ipcache(state_dir: &Path) -> Result<Vec<IpCacheRow>, Error> {
    Ok(client(state_dir).get("/ipcache").await?)
}

/// Fetches the running agent's endpoints.
///
/// # Errors
/// [`Error::Call`] when no agent answers, or not with endpoints.
pub async fn fetch_endpoints(state_dir: &Path) -> Result<Vec<super::EndpointView>, Error> {
    Ok(client(state_dir).get(super::ENDPOINTS_ROUTE).await?)
}

fn client(state_dir: &Path) -> weft_api::Client {
    weft_api::Client::new(socket_path(state_dir))
}
