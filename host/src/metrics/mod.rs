//! Prometheus metrics on `--prometheus-serve-addr`: what the agent's status says,
//! encoded at each scrape with `prometheus-client` ([`encode`]), and the waits'
//! durations, which only an instrument can take ([`Waits`]). Counters and histograms
//! are kept by the parts that count (a remote cluster, a plugin's record, the map
//! writer), so `weftd status` and a scrape read the same numbers.

mod encode;
mod format;

mod waits;

pub use encode::encode;
pub use format::{text_004, Format};
pub use waits::{WaitResult, Waiter, Waits, WaitsSnapshot};
pub use weft_hooks::{Latency, CALL_BOUNDS_US, WAIT_BOUNDS_US};

/// Binds `addr` and serves `GET /metrics` until dropped: each scrape reads `status`
/// (on the blocking pool: it may ask the WireGuard device) and `waits`, in the format
/// the scraper's `Accept` asks for ([`Format::negotiate`]).
///
/// # Errors
/// When `addr` cannot be bound.
pub async fn serve(
    addr: std::net::SocketAddr,
    status: std::sync::Arc<dyn Fn() -> crate::api::StatusReport + Send + Sync>,
    waits: std::sync::Arc<Waits>,
) -> std::io::Result<(std::net::SocketAddr, impl std::future::Future<Output = ()>)> {
    use axum::http::{header, HeaderMap, StatusCode};
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let scrape = move |headers: HeaderMap| {
        let (status, waits) = (status.clone(), waits.clone());
        let format = Format::negotiate(headers.get(header::ACCEPT).and_then(|a| a.to_str().ok()));
        async move {
            let encoded = tokio::task::spawn_blocking(move || {
                let text = encode(status(), waits.snapshot());
                match format {
                    Format::OpenMetrics => text,
                    Format::Text => text_004(&text),
                }
            });
            match encoded.await {
                Ok(text) => (
                    StatusCode::OK,
                    [(header::CONTENT_TYPE, format.content_type())],
                    text,
                ),
                Err(e) => (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    [(header::CONTENT_TYPE, "text/plain")],
                    format!("scrape failed: {e}\n"),
                ),
            }
        }
    };
    let router = axum::Router::new().route("/metrics", axum::routing::get(scrape));
    Ok((bound, async move {
        let _ = axum::serve(listener, router).await;
    }))
}
