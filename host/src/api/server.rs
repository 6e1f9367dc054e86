//! Serves the local API with axum on the unix socket.

use super::{socket_path, Error, IpCacheRow, StatusReport};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::future::BoxFuture;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::sync::Arc;
use weft_api::cni::{CniAnswer, CniCall, Failure};

/// Carries out a CNI call (the agent's endpoints).
pub type CniHandler =
    Arc<dyn Fn(CniCall) -> BoxFuture<'static, Result<CniAnswer, Failure>> + Send + Sync>;

/// What answers each route. `status` and `ipcache` may block (the WireGuard status
/// asks its device): they run on the blocking pool.
pub struct Handlers {
    /// `GET /status`.
    pub status: Box<dyn Fn() -> StatusReport + Send + Sync>,
    /// `GET /ipcache`.
    pub ipcache: Box<dyn Fn() -> Vec<IpCacheRow> + Send + Sync>,
    /// `GET /v1/endpoints`: this node's endpoints (none without `--pod-cidr`).
    pub endpoints: Box<dyn Fn() -> Vec<super::EndpointView> + Send + Sync>,
    /// `POST /v1/cni`; without it the agent manages no endpoints and says so.
    pub cni: Option<CniHandler>,
}

/// Binds the socket in `state_dir` (replacing a stale one) with mode 0600, and serves
/// until dropped.
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
    // Bound under a temporary name, made 0600, then renamed into place: the socket is
    // never reachable at its path with the umask's mode.
    let staging = path.with_extension("sock.new");
    match std::fs::remove_file(&staging) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(socket_err(e)),
        _ => {}
    }
    let listener = tokio::net::UnixListener::bind(&staging).map_err(socket_err)?;
    std::fs::set_permissions(&staging, std::fs::Permissions::from_mode(0o600))
        .map_err(socket_err)?;
    std::fs::rename(&staging, &path).map_err(socket_err)?;
    let router = Router::new()
        .route("/status", get(status))
        .route("/ipcache", get(ipcache))
        .route("/healthz", get(|| async { "ok\n" }))
        .route(super::ENDPOINTS_ROUTE, get(endpoints))
        .route(weft_api::cni::ROUTE, post(cni))
        .with_state(Arc::new(handlers));
    Ok(async move {
        // `serve` retries failed accepts itself (after a pause, so it does not spin).
        let _ = axum::serve(listener, router).await;
    })
}

type Shared = State<Arc<Handlers>>;

async fn status(State(h): Shared) -> Response {
    blocking(move || Json((h.status)()).into_response()).await
}

async fn ipcache(State(h): Shared) -> Response {
    blocking(move || Json((h.ipcache)()).into_response()).await
}

async fn endpoints(State(h): Shared) -> Response {
    blocking(move || Json((h.endpoints)()).into_response()).await
}

async fn blocking(f: impl FnOnce() -> Response + Send + 'static) -> Response {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("handler failed: {e}\n"),
        )
            .into_response()
    })
}

async fn cni(
    State(h): Shared,
    call: Result<Json<CniCall>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let Json(call) = match call {
        Ok(call) => call,
        Err(e) => {
            let failure = Failure::new(6, "cannot decode the CNI call", e.body_text());
            return (StatusCode::BAD_REQUEST, Json(failure)).into_response();
        }
    };
    let Some(handler) = h.cni.clone() else {
        let failure = Failure::new(
            50,
            "this agent manages no endpoints",
            "weftd runs without a pod CIDR for this node (--pod-cidr)",
        );
        return (StatusCode::SERVICE_UNAVAILABLE, Json(failure)).into_response();
    };
    match handler(call).await {
        Ok(answer) => Json(answer).into_response(),
        Err(failure) => {
            // The runtime decides what to do; the status only separates its mistakes
            // (codes below 10, bar I/O) from the agent's.
            let status = match failure.code {
                1..=4 | 6..=8 => StatusCode::BAD_REQUEST,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
            (status, Json(failure)).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_api::cni::{Command, Failure};

    fn handlers(cni: Option<CniHandler>) -> Handlers {
        Handlers {
            status: Box::new(|| StatusReport {
                cluster: "c1".into(),
                clusters: vec![],
                totals: None,
                plugins: None,
                datapath: None,
                wireguard: None,
                endpoints: None,
                policies: None,
                kubernetes: None,
                runtime: None,
            }),
            ipcache: Box::new(Vec::new),
            endpoints: Box::new(Vec::new),
            cni,
        }
    }

    fn call() -> CniCall {
        CniCall {
            command: Command::Add,
            container_id: "c0ffee".into(),
            netns: Some("/run/netns/x".into()),
            ifname: "eth0".into(),
            args: vec![("K8S_POD_NAME".into(), "web-0".into())],
            config: serde_json::from_str(
                r#"{"cniVersion":"1.0.0","name":"weft","type":"weft-cni"}"#,
            )
            .unwrap(),
        }
    }

    #[tokio::test]
    async fn the_socket_is_0600_and_serves_every_route() {
        let dir = tempfile::tempdir().unwrap();
        let seen = Arc::new(std::sync::Mutex::new(None));
        let cni: CniHandler = {
            let seen = seen.clone();
            Arc::new(move |call: CniCall| {
                *seen.lock().unwrap() = Some(call);
                Box::pin(async { Err(Failure::new(100, "no addresses left", "10.0.0.0/30")) })
            })
        };
        tokio::spawn(serve(dir.path(), handlers(Some(cni))).unwrap());
        let path = socket_path(dir.path());
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        let client = weft_api::Client::new(path);
        let status: StatusReport = client.get("/status").await.unwrap();
        assert_eq!(status.cluster, "c1");
        assert_eq!(client.get_text("/healthz").await.unwrap(), "ok\n");
        let rows: Vec<IpCacheRow> = client.get("/ipcache").await.unwrap();
        assert!(rows.is_empty());
        let endpoints: Vec<super::super::EndpointView> =
            client.get(super::super::ENDPOINTS_ROUTE).await.unwrap();
        assert!(endpoints.is_empty());

        let (code, body) = client.post(weft_api::cni::ROUTE, &call()).await.unwrap();
        assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR);
        let failure: Failure = serde_json::from_slice(&body).unwrap();
        assert_eq!(failure.code, 100);
        assert_eq!(
            seen.lock().unwrap().as_ref(),
            Some(&call()),
            "the call arrives whole"
        );
    }

    #[tokio::test]
    async fn without_endpoints_or_with_a_bad_body_the_cni_route_says_why() {
        let dir = tempfile::tempdir().unwrap();
        tokio::spawn(serve(dir.path(), handlers(None)).unwrap());
        let client = weft_api::Client::new(socket_path(dir.path()));
        let (code, body) = client.post(weft_api::cni::ROUTE, &call()).await.unwrap();
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        let failure: Failure = serde_json::from_slice(&body).unwrap();
        assert_eq!(failure.code, 50, "{failure:?}");

        let (code, body) = client
            .post(weft_api::cni::ROUTE, &serde_json::json!({"command": "ADD"}))
            .await
            .unwrap();
        assert_eq!(code, StatusCode::BAD_REQUEST);
        let failure: Failure = serde_json::from_slice(&body).unwrap();
        assert_eq!(failure.code, 6, "{failure:?}");
        assert!(failure.details.contains("config"), "{failure:?}");
    }

    #[tokio::test]
    async fn a_stale_socket_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let stale = std::os::unix::net::UnixListener::bind(socket_path(dir.path())).unwrap();
        drop(stale);
        tokio::spawn(serve(dir.path(), handlers(None)).unwrap());
        let client = weft_api::Client::new(socket_path(dir.path()));
        assert_eq!(client.get_text("/healthz").await.unwrap(), "ok\n");
    }
}
