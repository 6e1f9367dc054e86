//! A security identity: `cilium/state/identities/v1/id/<numeric id>` → its labels.

use super::DecodeError;
use std::fmt;

/// One label, `source:key=value`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Label {
    /// Where the label comes from: `k8s`, `reserved`, `cidr`, ...
    pub source: String,
    /// The label's key.
    pub key: String,
    /// The label's value, possibly empty.
    pub value: String,
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}={}", self.source, self.key, self.value)
    }
}

/// A sorted set of labels in the established string form: each label followed by `;`.
///
/// # Example
/// ```
/// use weft_model::Labels;
/// let labels: Labels = "k8s:b=2;k8s:a=1;".parse().unwrap();
/// assert_eq!(labels.to_string(), "k8s:a=1;k8s:b=2;");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Labels(Vec<Label>);

impl Labels {
    /// The labels, sorted.
    pub fn iter(&self) -> impl Iterator<Item = &Label> {
        self.0.iter()
    }

    /// The number of labels.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there is no label.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl FromIterator<Label> for Labels {
    fn from_iter<I: IntoIterator<Item = Label>>(iter: I) -> Self {
        let mut labels: Vec<Label> = iter.into_iter().collect();
        labels.sort();
        labels.dedup();
        Labels(labels)
    }
}

/// Labels that are not `source:key=value;…`, naming the label at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelsError {
    /// The list does not end with `;`.
    #[error("labels {labels:?} do not end with ';'")]
    Unterminated {
        /// The whole list.
        labels: String,
    },
    /// A label has no `source:`.
    #[error("label {label:?} has no source")]
    NoSource {
        /// The label.
        label: String,
    },
    /// A label's source or key is empty.
    #[error("label {label:?} has an empty source or key")]
    Empty {
        /// The label.
        label: String,
    },
}

impl std::str::FromStr for Labels {
    type Err = LabelsError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let body = s
            .strip_suffix(';')
            .ok_or_else(|| LabelsError::Unterminated {
                labels: s.to_owned(),
            })?;
        body.split(';')
            .map(|one| {
                let label = || one.to_owned();
                let (source, rest) = one
                    .split_once(':')
                    .ok_or_else(|| LabelsError::NoSource { label: label() })?;
                let (key, value) = rest.split_once('=').unwrap_or((rest, ""));
                if source.is_empty() || key.is_empty() {
                    return Err(LabelsError::Empty { label: label() });
                }
                Ok(Label {
                    source: source.to_owned(),
                    key: key.to_owned(),
                    value: value.to_owned(),
                })
            })
            .collect()
    }
}

impl fmt::Display for Labels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|l| write!(f, "{l};"))
    }
}

/// A numeric identity and its labels, as read from one identity key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The numeric identity (cluster-scoped ones carry the cluster ID in bits 16–23).
    pub id: u32,
    /// The identity's labels.
    pub labels: Labels,
}

impl Identity {
    /// Decodes an identity from the id part of its key and its value.
    ///
    /// # Errors
    /// [`DecodeError`] naming `key` when the id is not a number or the labels are malformed.
    pub fn decode(key: &str, id: &str, value: &[u8]) -> Result<Self, DecodeError> {
        let id: u32 = id.parse().map_err(|_| {
            DecodeError::new(key, format_args!("identity id {id:?} is not a number"))
        })?;
        let text = std::str::from_utf8(value).map_err(|e| DecodeError::new(key, e))?;
        let labels = text.parse().map_err(|e| DecodeError::new(key, e))?;
        Ok(Identity { id, labels })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str =
        "k8s:app=baz;k8s:io.cilium.k8s.policy.cluster=cluster3;k8s:io.kubernetes.pod.namespace=bar;";

    #[test]
    fn example_round_trips() {
        let id = Identity::decode("k", "199475", EXAMPLE.as_bytes()).unwrap();
        assert_eq!(id.labels.len(), 3);
        assert_eq!(id.labels.to_string(), EXAMPLE);
    }

    #[test]
    fn labels_are_sorted_and_empty_values_kept() {
        let l: Labels = "reserved:host=;k8s:a=;".parse().unwrap();
        assert_eq!(l.to_string(), "k8s:a=;reserved:host=;");
    }

    #[test]
    fn malformed_values_name_their_key() {
        let e = Identity::decode("cilium/state/identities/v1/id/x", "x", b"k8s:a=b;").unwrap_err();
        assert!(e.to_string().contains("cilium/state/identities/v1/id/x"));
        assert!(Identity::decode("k", "1", b"k8s:a=b").is_err());
        assert!(Identity::decode("k", "1", b"nosource;").is_err());
        assert!(Identity::decode("k", "1", &[0xff, 0xfe]).is_err());
    }
}
