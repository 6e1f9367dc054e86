//! Serves the local API.

use super::{socket_path, Error, IpCacheRow, StatusReport};
use std::path::Path;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixListener;

/// What answers each route; called per request, they must not block.
pub struct Handlers {
    /// `GET /status`.
    pub status: Box<dyn Fn() -> StatusReport + Send + Sync>,
    /// `GET /ipcache`.
    pub ipcache: Box<dyn Fn() -> Vec<IpCacheRow> + Send + Sync>,
}

/// Binds the socket in `state_dir` (replacing a stale one) and serves until dropped.
///
/// # Errors
/// [`Error::Socket`] when the socket cannot be bound.
pub fn serve(
    state_dir: &Path,
    handlers: Handlers,
) -> Result<impl std::future::Future<Output = ()>, Error> {
    let path = socket_path(state_dir);
    let socket_err = |source| Error::Socket {
        path: path.clone(),
        source,
    };
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(socket_err(e)),
        _ => {}
    }
    let listener = UnixListener::bind(&path).map_err(socket_err)?;
    let handlers = std::sync::Arc::new(handlers);
    Ok(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else {
                // Out of file descriptors, say: do not spin.
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            };
            let handlers = handlers.clone();
            tokio::spawn(async move {
                let mut buf = Vec::with_capacity(1024);
                let mut chunk = [0u8; 1024];
                // Read the request head; bodies are not used.
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 16 * 1024 {
                    match conn.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&buf);
                let path = head.split_whitespace().nth(1).unwrap_or("");
                // The handlers may block (the WireGuard status asks its device).
                let blocking = |f: fn(&Handlers) -> String| {
                    let h = handlers.clone();
                    async move {
                        tokio::task::spawn_blocking(move || f(&h))
                            .await
                            .unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
                    }
                };
                let (code, kind, body) = match path {
                    "/status" => (
                        "200 OK",
                        "application/json",
                        blocking(|h| json(&(h.status)())).await,
                    ),
                    "/ipcache" => (
                        "200 OK",
                        "application/json",
                        blocking(|h| json(&(h.ipcache)())).await,
                    ),
                    "/healthz" => ("200 OK", "text/plain", "ok\n".to_owned()),
                    _ => ("404 Not Found", "text/plain", "not found\n".to_owned()),
                };
                let answer = format!(
                    "HTTP/1.1 {code}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(answer.as_bytes()).await;
                let _ = conn.shutdown().await;
            });
        }
    })
}

fn json(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).expect("API values serialise")
}
