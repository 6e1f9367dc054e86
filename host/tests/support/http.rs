//! GET over TCP with hyper: what a Prometheus server or a kubelet probe asks.

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;

/// `GET path` from `addr`: the status code and the body; `None` when nothing answers.
pub async fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .ok()?;
    let driver = tokio::spawn(conn);
    let request = hyper::Request::get(path)
        .header(hyper::header::HOST, addr.to_string())
        .body(Empty::<Bytes>::new())
        .ok()?;
    let answer = sender.send_request(request).await.ok()?;
    let status = answer.status().as_u16();
    let body = answer.into_body().collect().await.ok()?.to_bytes();
    driver.abort();
    Some((status, String::from_utf8_lossy(&body).into_owned()))
}

/// A loopback address with a port free now (bound, then released for the agent).
pub fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}
