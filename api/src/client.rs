//! A hyper HTTP/1.1 client over the agent's unix socket: one connection per request
//! (calls are rare: a status, a pod's ADD), every call bounded by a timeout.

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::path::PathBuf;
use std::time::Duration;
use tokio::net::UnixStream;

/// What calling the agent can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Nothing answers on the socket (no agent, or not root).
    #[error("cannot reach weftd at {path}: {source}")]
    Connect {
        /// The socket.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The exchange failed after connecting.
    #[error("talking to weftd at {path}: {reason}")]
    Http {
        /// The socket.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
    /// No answer within the call's bound.
    #[error("weftd at {path} did not answer within {timeout:?}")]
    Timeout {
        /// The socket.
        path: PathBuf,
        /// The bound.
        timeout: Duration,
    },
    /// The agent answered with an error status.
    #[error("weftd answered {status}: {body}")]
    Status {
        /// The HTTP status.
        status: u16,
        /// The answer's body, which for the write routes is a JSON error.
        body: String,
    },
    /// The answer was not what the route returns.
    #[error("bad answer from weftd: {reason}")]
    BadAnswer {
        /// What was wrong.
        reason: String,
    },
}

/// Calls the agent's local API.
#[derive(Debug, Clone)]
pub struct Client {
    path: PathBuf,
    timeout: Duration,
}

impl Client {
    /// A client of the socket at `path`, with a 30 s bound per call.
    pub fn new(path: PathBuf) -> Self {
        Self {
            path,
            timeout: Duration::from_secs(30),
        }
    }

    /// The same client with another bound per call.
    #[must_use]
    pub fn with_timeout(self, timeout: Duration) -> Self {
        Self { timeout, ..self }
    }

    /// `GET route`, its JSON answer decoded.
    ///
    /// # Errors
    /// [`Error`] naming what failed.
    pub async fn get<T: DeserializeOwned>(&self, route: &str) -> Result<T, Error> {
        let (status, body) = self.call(Method::GET, route, None).await?;
        decode(status, &body)
    }

    /// `GET route`, its answer as text.
    ///
    /// # Errors
    /// [`Error`] naming what failed.
    pub async fn get_text(&self, route: &str) -> Result<String, Error> {
        let (status, body) = self.call(Method::GET, route, None).await?;
        let text = String::from_utf8_lossy(&body).into_owned();
        if status.is_success() {
            Ok(text)
        } else {
            Err(Error::Status {
                status: status.as_u16(),
                body: text,
            })
        }
    }

    /// `POST route` with `body` as JSON: the status and the raw answer, whatever the
    /// status (the write routes answer errors as JSON the caller relays).
    ///
    /// # Errors
    /// [`Error`] when there is no answer.
    pub async fn post<B: Serialize>(
        &self,
        route: &str,
        body: &B,
    ) -> Result<(StatusCode, Bytes), Error> {
        let body = serde_json::to_vec(body).map_err(|e| Error::BadAnswer {
            reason: format!("cannot encode the request: {e}"),
        })?;
        self.call(Method::POST, route, Some(body)).await
    }

    async fn call(
        &self,
        method: Method,
        route: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, Bytes), Error> {
        tokio::time::timeout(self.timeout, self.exchange(method, route, body))
            .await
            .map_err(|_| Error::Timeout {
                path: self.path.clone(),
                timeout: self.timeout,
            })?
    }

    async fn exchange(
        &self,
        method: Method,
        route: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, Bytes), Error> {
        let stream = UnixStream::connect(&self.path)
            .await
            .map_err(|source| Error::Connect {
                path: self.path.clone(),
                source,
            })?;
        let http = |e: hyper::Error| Error::Http {
            path: self.path.clone(),
            reason: e.to_string(),
        };
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(http)?;
        // The connection is driven beside the request; it ends with the answer.
        let driver = tokio::spawn(conn);
        let mut request = Request::builder()
            .method(method)
            .uri(route)
            .header(hyper::header::HOST, "weftd");
        if body.is_some() {
            request = request.header(hyper::header::CONTENT_TYPE, "application/json");
        }
        let request = request
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| Error::Http {
                path: self.path.clone(),
                reason: e.to_string(),
            })?;
        let answer = sender.send_request(request).await.map_err(http)?;
        let status = answer.status();
        let body = answer.into_body().collect().await.map_err(http)?.to_bytes();
        driver.abort();
        Ok((status, body))
    }
}

fn decode<T: DeserializeOwned>(status: StatusCode, body: &[u8]) -> Result<T, Error> {
    if !status.is_success() {
        return Err(Error::Status {
            status: status.as_u16(),
            body: String::from_utf8_lossy(body).into_owned(),
        });
    }
    serde_json::from_slice(body).map_err(|e| Error::BadAnswer {
        reason: e.to_string(),
    })
}
