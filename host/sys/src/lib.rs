//! What weft needs of the node it runs on, each piece small and independent of the
//! rest of weft: rtnetlink opened inside a network namespace ([`netlink`]), wake-ups
//! for a watched directory ([`dirwatch`]), the loops' heartbeats and the readiness
//! conditions ([`health`]), files written whole or not at all ([`fsutil`]), a rate
//! limit for log lines remote input drives ([`loglimit`]) and hash maps keyed by what
//! remote clusters choose ([`seeded`]), and the TCP stream between two namespaces whose
//! gaps judge whether a restart dropped a connection ([`stream`]), and an error told
//! with its sources on one line ([`error_chain`]).
//!
//! Must not know: etcd, clusters, identities or anything else of weft's model. A piece
//! that needs them belongs in the crate that owns them.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod dirwatch;
pub mod fsutil;
pub mod health;
pub mod loglimit;
pub mod netlink;
pub mod netns;
pub mod seeded;
pub mod stream;

/// An error with its sources, on one line (`what: why: the system's answer`): how a
/// typed error with `#[source]` causes reads in a log line, a status field or a
/// CNI answer.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        source = inner.source();
    }
    s
}
