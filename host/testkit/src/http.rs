//! GET over TCP with hyper: what a Prometheus server or a kubelet probe asks.

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;

/// What Prometheus (2.42, Debian's) sends in `Accept` when it scrapes.
pub const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// `GET path` from `addr`: the status code and the body; `None` when nothing answers.
pub async fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    get_accepting(addr, path, None)
        .await
        .map(|(code, _, body)| (code, body))
}

/// `GET path` from `addr` with `Accept: accept` when given: the status code, the
/// content type and the body; `None` when nothing answers.
pub async fn get_accepting(
    addr: SocketAddr,
    path: &str,
    accept: Option<&str>,
) -> Option<(u16, String, String)> {
    let stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .ok()?;
    let driver = tokio::spawn(conn);
    let mut request = hyper::Request::get(path).header(hyper::header::HOST, addr.to_string());
    if let Some(accept) = accept {
        request = request.header(hyper::header::ACCEPT, accept);
    }
    let request = request.body(Empty::<Bytes>::new()).ok()?;
    let answer = sender.send_request(request).await.ok()?;
    let status = answer.status().as_u16();
    let content_type = answer
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body = answer.into_body().collect().await.ok()?.to_bytes();
    driver.abort();
    Some((
        status,
        content_type,
        String::from_utf8_lossy(&body).into_owned(),
    ))
}

/// A loopback address with a port free now (bound, then released for the agent).
pub fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// The value of the sample `series` (`name{labels}`, exactly as exposed) in a scrape,
/// if present.
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.split(' ').next()?.parse().ok())
}
