//! Calls the local API (what `weftd status` does).

use super::{socket_path, Error, IpCacheRow, StatusReport};
use std::path::Path;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// Fetches the running agent's status through the socket in `state_dir`.
///
/// # Errors
/// [`Error::Socket`] when no agent answers, [`Error::BadAnswer`] for anything else.
pub async fn fetch_status(state_dir: &Path) -> Result<StatusReport, Error> {
    get(state_dir, "/status").await
}

/// Fetches the running agent's resolved ipcache.
///
/// # Errors
/// [`Error::Socket`] when no agent answers, [`Error::BadAnswer`] for anything else.
pub async fn fetch_ipcache(state_dir: &Path) -> Result<Vec<IpCacheRow>, Error> {
    get(state_dir, "/ipcache").await
}

async fn get<T: serde::de::DeserializeOwned>(state_dir: &Path, route: &str) -> Result<T, Error> {
    let path = socket_path(state_dir);
    let socket_err = |source| Error::Socket {
        path: path.clone(),
        source,
    };
    let mut conn = UnixStream::connect(&path).await.map_err(socket_err)?;
    let request = format!("GET {route} HTTP/1.1\r\nHost: weftd\r\nConnection: close\r\n\r\n");
    conn.write_all(request.as_bytes())
        .await
        .map_err(socket_err)?;
    let mut answer = Vec::new();
    conn.read_to_end(&mut answer).await.map_err(socket_err)?;
    let text = String::from_utf8_lossy(&answer);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| Error::BadAnswer {
            reason: "no HTTP head".into(),
        })?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(Error::BadAnswer {
            reason: head.lines().next().unwrap_or_default().to_owned(),
        });
    }
    serde_json::from_str(body).map_err(|e| Error::BadAnswer {
        reason: e.to_string(),
    })
}
