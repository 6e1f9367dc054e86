//! Calls the local API (what `weftd status` does).

use super::{socket_path, Error, StatusReport};
use std::path::Path;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// Fetches the running agent's status through the socket in `state_dir`.
///
/// # Errors
/// [`Error::Socket`] when no agent answers, [`Error::BadAnswer`] for anything else.
pub async fn fetch_status(state_dir: &Path) -> Result<StatusReport, Error> {
    let path = socket_path(state_dir);
    let socket_err = |source| Error::Socket {
        path: path.clone(),
        source,
    };
    let mut conn = UnixStream::connect(&path).await.map_err(socket_err)?;
    conn.write_all(b"GET /status HTTP/1.1\r\nHost: weftd\r\nConnection: close\r\n\r\n")
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
