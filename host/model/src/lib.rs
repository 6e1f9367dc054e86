//! The values weft reads from and writes to etcd, in the established wire layout.
//!
//! Every type here decodes the JSON the established Go implementation writes (see
//! `shared/reference/kvstore-format.md`) and encodes it back to equal JSON. Unknown
//! fields are ignored and optional ones may be missing, because writers add fields
//! over time. A value that does not decode is a [`DecodeError`] naming its key; the
//! caller counts and skips it.
//!
//! Beside the values: [`layout`] (every etcd key weft reads or writes), [`Prefix`] (an IP prefix, host bits cleared), the four
//! [`Resource`]s every remote cluster syncs, the label keys weft itself sets, and
//! [`remote`], the words in which the cluster mesh hands a remote cluster's changes to
//! the state stage.
//!
//! This crate knows nothing of weft's stages: it depends on serde and nothing of
//! weft, so that every stage can name the wire values and an edit elsewhere never
//! rebuilds it.

mod cluster_config;
mod identity;
mod ip_identity;
mod label_filter;
mod labels;
pub mod layout;
mod net;
mod node;
mod prefix;
pub mod remote;
mod reserved;
mod resource;
mod service;

pub use cluster_config::{Capabilities, ClusterConfig};
pub use identity::{Identity, Label, Labels, LabelsError};
pub use ip_identity::{IpIdentityPair, NamedPort};
pub use label_filter::{LabelFilter, LabelFilterError, DEFAULT_PATTERNS};
pub use labels::{
    pod_identity_labels, PodIdentitySource, CLUSTER_LABEL, NAMESPACE_LABEL,
    NAMESPACE_LABELS_PREFIX, POLICY_LABELS_PREFIX, SERVICE_ACCOUNT_LABEL,
};
pub use net::IpNet;
pub use node::{Node, NodeAddress};
pub use prefix::{Prefix, PrefixError};
pub use reserved::Reserved;
pub use resource::{Counts, Resource};
pub use service::{ClusterService, L4Addr};

/// A value in etcd that could not be decoded.
#[derive(Debug, Clone, thiserror::Error)]
#[error("malformed value at key {key:?}: {reason}")]
pub struct DecodeError {
    /// The etcd key whose value is at fault.
    pub key: String,
    /// What is wrong with it.
    pub reason: String,
}

impl DecodeError {
    /// A decode error for `key` with a human-readable `reason`.
    pub fn new(key: &str, reason: impl std::fmt::Display) -> Self {
        Self {
            key: key.to_owned(),
            reason: reason.to_string(),
        }
    }
}

/// Decodes a JSON value, naming `key` in the error.
///
/// # Errors
/// [`DecodeError`] when `value` is not valid JSON for `T`.
pub fn decode_json<T: serde::de::DeserializeOwned>(
    key: &str,
    value: &[u8],
) -> Result<T, DecodeError> {
    serde_json::from_slice(value).map_err(|e| DecodeError::new(key, e))
}
