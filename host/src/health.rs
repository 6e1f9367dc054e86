//! Liveness and readiness on `--health-addr`: `/healthz` answers 200 while every
//! registered loop has turned within its period ([`Beat`]), `/readyz` while the local
//! conditions hold ([`Readiness`]). Remote clusters never gate readiness: a readiness
//! that waited for them would keep new pods off every node of a cluster whenever a
//! remote one is down, and the agent already bounds what waits for them.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use std::net::SocketAddr;
use std::sync::Arc;
pub use weft_sys::health::{runtime_heartbeat, stale_loops, Beat, Readiness};

/// Binds `addr` and serves `/healthz` and `/readyz` until dropped.
///
/// # Errors
/// When `addr` cannot be bound.
pub async fn serve(
    addr: SocketAddr,
    readiness: Readiness,
) -> std::io::Result<(SocketAddr, impl std::future::Future<Output = ()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let router = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(Arc::new(readiness));
    Ok((bound, async move {
        let _ = axum::serve(listener, router).await;
    }))
}

async fn healthz() -> (StatusCode, String) {
    let stale = stale_loops();
    if stale.is_empty() {
        return (StatusCode::OK, "ok\n".into());
    }
    let lines: Vec<String> = stale
        .iter()
        .map(|(name, since)| format!("{name}: no turn for {:.1} s", since.as_secs_f64()))
        .collect();
    (StatusCode::SERVICE_UNAVAILABLE, lines.join("\n") + "\n")
}

async fn readyz(State(r): State<Arc<Readiness>>) -> (StatusCode, String) {
    let pending = r.pending();
    if pending.is_empty() {
        (StatusCode::OK, "ok\n".into())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {}\n", pending.join(", ")),
        )
    }
}
