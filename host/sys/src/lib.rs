//! What weft needs of the node it runs on, each piece small and independent of the
//! rest of weft: rtnetlink opened inside a network namespace ([`netlink`]), wake-ups
//! for a watched directory ([`dirwatch`]), the loops' heartbeats and the readiness
//! conditions ([`health`]), files written whole or not at all ([`fsutil`]), a rate
//! limit for log lines remote input drives ([`loglimit`]) and hash maps keyed by what
//! remote clusters choose ([`seeded`]), and the TCP stream between two namespaces whose
//! gaps judge whether a restart dropped a connection ([`stream`]).
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
