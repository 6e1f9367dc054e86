//! etcd access: a client with request limits and the list-then-watch stage.
//!
//! Must not know: what the keys and values mean (the layout and the wire values are
//! `weft-model`'s, their decoding and holding the reflectors' in clustermesh).
//!
//! [`list_watch`] is the one way weft reads a prefix: a paged list at one revision,
//! then a watch from that revision + 1, resumed after errors and re-listed after
//! compaction with deletes for keys that vanished meanwhile (the stale drain).
//! [`list_watch_raw`] is the same stage leaving the keys and the drain to a consumer
//! that keeps them anyway.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod backoff;
mod client;
mod limit;
mod list_watch;
mod tls;

pub use backoff::Backoff;
pub use client::{Client, Endpoints, TlsFiles};
pub use limit::Limits;
pub use list_watch::{list_watch, list_watch_raw, Event, Events};
pub use tls::TlsProblem;

use std::time::Duration;

/// Request limits and timeouts of one etcd client.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Keys per page of a list (0 = the whole range in one request).
    pub page_size: u32,
    /// Requests in flight at once (0 = no limit).
    pub max_in_flight: usize,
    /// Requests per second (0 = no limit); bursts up to one second's worth.
    pub qps: f64,
    /// How long one unary request (a list page, a put) may take.
    pub request_timeout: Duration,
    /// HTTP/2 keep-alive interval and timeout: how fast a dead or paused etcd is noticed.
    pub keep_alive: (Duration, Duration),
    /// The largest list page or watch response decoded. gRPC's default (4 MiB) is
    /// raised deliberately: a page of 256 node records can pass it. A single value
    /// larger than this is reported as [`Event::TooLarge`] and skipped.
    pub max_response_bytes: usize,
    /// The bytes a list page aims at: after a large page the next asks for fewer keys
    /// (never fewer than one, never more than `page_size`).
    pub page_bytes: usize,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            page_size: 256,
            max_in_flight: 20,
            qps: 20.0,
            // Well inside the node lease's 15 s: a keep-alive that hangs must fail, and
            // be retried, while the lease still holds.
            request_timeout: Duration::from_secs(5),
            keep_alive: (Duration::from_secs(15), Duration::from_secs(25)),
            max_response_bytes: 32 << 20,
            page_bytes: 2 << 20,
        }
    }
}

impl Config {
    /// The same configuration without any rate or in-flight limit.
    #[must_use]
    pub fn unlimited(mut self) -> Self {
        self.max_in_flight = 0;
        self.qps = 0.0;
        self
    }
}

/// What can go wrong talking to etcd.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No endpoint was given.
    #[error("no etcd endpoint configured")]
    NoEndpoints,
    /// A TLS file could not be read.
    #[error("cannot read TLS file {path}")]
    TlsFile {
        /// The file at fault.
        path: String,
        /// Why it could not be read.
        #[source]
        source: std::io::Error,
    },
    /// An etcd request failed.
    #[error("etcd {op} on {key:?} failed")]
    Request {
        /// The operation (`get`, `watch`, `put`, ...).
        op: &'static str,
        /// The key or prefix.
        key: String,
        /// The client's error.
        #[source]
        source: etcd_client::Error,
    },
    /// An etcd request did not answer in time.
    #[error("etcd {op} on {key:?} timed out after {timeout:?}")]
    Timeout {
        /// The operation.
        op: &'static str,
        /// The key or prefix.
        key: String,
        /// The limit that was hit.
        timeout: Duration,
    },
    /// A watch ended or was cancelled by the server.
    #[error("watch on {prefix:?} ended: {end}")]
    WatchEnded {
        /// The watched prefix.
        prefix: String,
        /// How it ended.
        end: ServerEnd,
    },
    /// The revision to resume from was compacted: the prefix is listed again.
    #[error("watch on {prefix:?} at revision {revision} hit compaction at {compact_revision}; listing again")]
    Compacted {
        /// The watched prefix.
        prefix: String,
        /// The revision the watch asked for.
        revision: i64,
        /// The oldest revision still available.
        compact_revision: i64,
    },
    /// A key is not UTF-8.
    #[error("key {key:?} is not UTF-8")]
    KeyNotUtf8 {
        /// The key, lossily decoded.
        key: String,
    },
    /// A TLS handshake failed for a reason the configuration must fix (a wrong CA, an
    /// expired certificate); the connection is still retried.
    #[error("etcd {op} on {key:?}: {problem}")]
    Tls {
        /// The operation.
        op: &'static str,
        /// The key or prefix.
        key: String,
        /// What is wrong.
        problem: TlsProblem,
    },
    /// A list page or watch response is larger than the client decodes.
    #[error("etcd {op} on {key:?}: response over the {limit}-byte limit")]
    TooLarge {
        /// The operation.
        op: &'static str,
        /// The key or prefix.
        key: String,
        /// The limit (`Config::max_response_bytes`).
        limit: usize,
    },
    /// A lease could not be kept alive.
    #[error("lease {id} expired or was lost")]
    LeaseLost {
        /// The lease ID.
        id: i64,
    },
}

/// The end of the range of all keys starting with `prefix` (etcd's `range_end`).
pub fn prefix_range_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_end_of_a_prefix() {
        assert_eq!(prefix_range_end("cilium/a/"), b"cilium/a0".to_vec());
        assert_eq!(prefix_range_end(""), vec![0]);
    }
}

/// How the server ended a watch (other than by compaction, which is
/// [`Error::Compacted`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerEnd {
    /// The server closed the stream.
    Closed,
    /// The server cancelled the watch, with its reason (etcd's text: the data).
    Cancelled {
        /// etcd's `cancel_reason`.
        reason: String,
    },
}

impl std::fmt::Display for ServerEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServerEnd::Closed => f.write_str("stream closed by server"),
            ServerEnd::Cancelled { reason } => write!(f, "cancelled: {reason}"),
        }
    }
}
