//! The IP cache: for every IP or CIDR, its identity, tunnel endpoint and encryption key.
//!
//! Facts about one prefix arrive from several sources in any order (remote clusters,
//! the local kvstore, the Kubernetes API, the node manager). Each is kept, tagged with
//! its [`Owner`]; the resolved [`Entry`] is a pure function of the set of facts, so
//! the order of arrival cannot change it:
//! - identity from the merged labels (host → 1; remote-node + kube-apiserver → 7;
//!   remote-node → 6; health → 4), else the explicit identity of the strongest owner
//!   that gives one, else a local (CIDR) identity for the merged labels;
//! - tunnel endpoint and encryption key **each** from the strongest owner that gives a
//!   valid value, independently of which owner gave the labels.

mod cache;
mod fact;
mod resolve;
mod source;

pub use cache::{Change, IpCache, Listener, Upserted};
pub use fact::{Entry, Fact, K8sMeta, Owner};
pub use source::Source;
pub use weft_model::{Prefix, PrefixError};

#[cfg(test)]
mod tests;
