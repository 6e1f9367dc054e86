//! Which labels make an identity: the established agent's label filter (`--labels`,
//! "Limiting Identity-Relevant Labels" in its documentation), with its semantics, so
//! that the same pod yields the same identity key under weft as under it.
//!
//! A pattern is `[source:][!]regex`. The regex is anchored at the start of the key
//! only (`k8s:app` also keeps `k8s:app-team`). `!` makes it exclusive. A label is
//! identity-relevant when no inclusive pattern is configured and no exclusive one
//! matches it, or when an inclusive pattern matches a longer part of its key than the
//! shortest exclusive match (`{!io\.kubernetes, io\.kubernetes\.pod\.namespace}` keeps
//! the namespace label and drops the other `io.kubernetes` ones). The defaults are all
//! kept; an operator's patterns are added to them, and one inclusive pattern among them
//! makes every label that no inclusive pattern matches irrelevant.

use crate::Label;
use regex::Regex;

/// The established agent's default patterns, in its order.
///
/// The inclusive ones do not make the default filter inclusive (as there, only an
/// operator's inclusive pattern does); they win over the exclusive ones by length.
pub const DEFAULT_PATTERNS: &[&str] = &[
    "reserved:.*",
    r"io\.kubernetes\.pod\.namespace",
    r"io\.cilium\.k8s\.namespace\.labels",
    r"app\.kubernetes\.io",
    r"io\.cilium\.k8s\.policy\.cluster",
    r"!io\.kubernetes",
    r"!kubernetes\.io",
    r"!statefulset\.kubernetes\.io/pod-name",
    r"!apps\.kubernetes\.io/pod-index",
    r"!batch\.kubernetes\.io/job-completion-index",
    r"!batch\.kubernetes\.io/controller-uid",
    r"!.*beta\.kubernetes\.io",
    r"!k8s\.io",
    r"!pod-template-generation",
    r"!pod-template-hash",
    r"!controller-revision-hash",
    r"!annotation.*",
    r"!controller-uid",
    r"!etcd_node",
];

/// The identity-relevant label filter.
///
/// # Example
/// ```
/// use weft_model::{Label, LabelFilter};
/// let k8s = |key: &str| Label { source: "k8s".into(), key: key.into(), value: "x".into() };
/// let filter = LabelFilter::default();
/// assert!(filter.is_relevant(&k8s("app")));
/// assert!(!filter.is_relevant(&k8s("pod-template-hash")));
/// assert!(filter.is_relevant(&k8s("io.kubernetes.pod.namespace")));
///
/// let only_app = LabelFilter::with_patterns(["k8s:app"]).unwrap();
/// assert!(only_app.is_relevant(&k8s("app")));
/// assert!(!only_app.is_relevant(&k8s("team")));
/// ```
#[derive(Debug, Clone)]
pub struct LabelFilter {
    patterns: Vec<LabelPattern>,
    /// An operator gave an inclusive pattern: only labels one matches are relevant.
    inclusive: bool,
}

#[derive(Debug, Clone)]
struct LabelPattern {
    /// The pattern as written, for errors and status.
    text: String,
    /// `None`: any source (no `source:`, or `any:`).
    source: Option<String>,
    exclusive: bool,
    regex: Regex,
}

/// A `--labels` pattern that does not parse, naming it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelFilterError {
    /// Nothing after the source (and the `!`).
    #[error("label pattern {pattern:?} has no key pattern")]
    Empty {
        /// The pattern as given.
        pattern: String,
    },
    /// The key pattern is not a regular expression.
    #[error("label pattern {pattern:?} is not a regular expression: {reason}")]
    Regex {
        /// The pattern as given.
        pattern: String,
        /// What the regex parser says (the `regex` crate's error is text only).
        reason: String,
    },
}

impl LabelPattern {
    fn parse(text: &str) -> Result<Self, LabelFilterError> {
        let (source, rest) = match text.split_once(':') {
            Some((source, rest)) => (Some(source), rest),
            None => (None, text),
        };
        let (exclusive, key) = match rest.strip_prefix('!') {
            Some(key) => (true, key),
            None => (false, rest),
        };
        if key.is_empty() {
            return Err(LabelFilterError::Empty {
                pattern: text.to_owned(),
            });
        }
        let regex = Regex::new(key).map_err(|e| LabelFilterError::Regex {
            pattern: text.to_owned(),
            reason: e.to_string(),
        })?;
        Ok(LabelPattern {
            text: text.to_owned(),
            source: source
                .filter(|s| !s.is_empty() && *s != "any")
                .map(str::to_owned),
            exclusive,
            regex,
        })
    }

    /// The length of the key's part this pattern matches, when it matches from the
    /// key's start (the leftmost match, as the established agent takes it).
    fn matched_len(&self, label: &Label) -> Option<usize> {
        if self.source.as_deref().is_some_and(|s| s != label.source) {
            return None;
        }
        let m = self.regex.find(&label.key)?;
        (m.start() == 0).then_some(m.end())
    }
}

impl Default for LabelFilter {
    fn default() -> Self {
        Self::with_patterns(std::iter::empty::<&str>()).expect("the default patterns parse")
    }
}

impl LabelFilter {
    /// The defaults plus `patterns` (an operator's `--labels`, empty ones skipped).
    ///
    /// # Errors
    /// [`LabelFilterError`] naming the first pattern that does not parse.
    pub fn with_patterns<I, S>(patterns: I) -> Result<Self, LabelFilterError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut all: Vec<LabelPattern> = DEFAULT_PATTERNS
            .iter()
            .map(|p| LabelPattern::parse(p))
            .collect::<Result<_, _>>()?;
        let mut inclusive = false;
        for p in patterns {
            let p = p.as_ref().trim();
            if p.is_empty() {
                continue;
            }
            let p = LabelPattern::parse(p)?;
            inclusive |= !p.exclusive;
            all.push(p);
        }
        Ok(LabelFilter {
            patterns: all,
            inclusive,
        })
    }

    /// Whether `label` belongs in an identity.
    pub fn is_relevant(&self, label: &Label) -> bool {
        // As the established agent counts: 0 is "no match" for both.
        let (mut included, mut ignored) = (0usize, 0usize);
        for p in &self.patterns {
            let Some(len) = p.matched_len(label) else {
                continue;
            };
            if p.exclusive {
                // The shortest exclusive match.
                if ignored == 0 || len < ignored {
                    ignored = len;
                }
            } else {
                // The longest inclusive match.
                included = included.max(len);
            }
        }
        (!self.inclusive && ignored == 0) || included > ignored
    }

    /// The patterns in force, as written (for status).
    pub fn patterns(&self) -> impl Iterator<Item = &str> {
        self.patterns.iter().map(|p| p.text.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k8s(key: &str) -> Label {
        Label {
            source: "k8s".into(),
            key: key.into(),
            value: "v".into(),
        }
    }

    /// The examples of the established agent's documentation and its default list.
    #[test]
    fn the_default_filter_drops_what_the_established_agent_drops() {
        let f = LabelFilter::default();
        for dropped in [
            "pod-template-hash",
            "pod-template-generation",
            "controller-revision-hash",
            "controller-uid",
            "statefulset.kubernetes.io/pod-name",
            "apps.kubernetes.io/pod-index",
            "batch.kubernetes.io/job-completion-index",
            "batch.kubernetes.io/controller-uid",
            "kubernetes.io/hostname",
            "beta.kubernetes.io/arch",
            "failure-domain.beta.kubernetes.io/zone",
            "k8s.io/cluster-service",
            "io.kubernetes.container.name",
            "annotation.kubernetes.io/config.seen",
            "etcd_node",
        ] {
            assert!(!f.is_relevant(&k8s(dropped)), "{dropped} is not relevant");
        }
        for kept in [
            "app",
            "name",
            "k8s-app",
            "team",
            "app.kubernetes.io/name",
            "app.kubernetes.io/component",
            "io.kubernetes.pod.namespace",
            "io.cilium.k8s.policy.cluster",
            "io.cilium.k8s.policy.serviceaccount",
            "io.cilium.k8s.namespace.labels.kubernetes.io/metadata.name",
            "io.cilium.k8s.namespace.labels.team",
            // Anchored at the start: the exclusive patterns do not match in the middle.
            "example.com/kubernetes.io",
            "my-pod-template-hash",
        ] {
            assert!(f.is_relevant(&k8s(kept)), "{kept} is relevant");
        }
        let reserved = Label {
            source: "reserved".into(),
            key: "host".into(),
            value: String::new(),
        };
        assert!(f.is_relevant(&reserved));
    }

    /// "Including Labels": `k8s:io.kubernetes\.pod\.namespace k8s:k8s-app k8s:app
    /// k8s:name` keeps those (by prefix) and the default inclusive ones, nothing else.
    #[test]
    fn an_inclusive_pattern_keeps_only_what_inclusive_patterns_match() {
        let f = LabelFilter::with_patterns([
            r"k8s:io.kubernetes\.pod\.namespace",
            "k8s:k8s-app",
            "k8s:app",
            "k8s:name",
        ])
        .unwrap();
        for kept in [
            "k8s-app",
            "app",
            "name",
            "k8s-app-team",
            "app-production",
            "name-defined",
            "io.kubernetes.pod.namespace",
            "io.cilium.k8s.namespace.labels.team",
            "app.kubernetes.io/name",
            "io.cilium.k8s.policy.cluster",
        ] {
            assert!(f.is_relevant(&k8s(kept)), "{kept} is relevant");
        }
        for dropped in ["team", "env", "io.cilium.k8s.policy.serviceaccount"] {
            assert!(!f.is_relevant(&k8s(dropped)), "{dropped} is not relevant");
        }
        // `k8s:` patterns do not match another source.
        let container = Label {
            source: "container".into(),
            key: "app".into(),
            value: "x".into(),
        };
        assert!(!f.is_relevant(&container));
    }

    /// "Excluding Labels": `k8s:!controller-uid k8s:!job-name` keeps the defaults and
    /// drops those.
    #[test]
    fn exclusive_patterns_add_to_the_defaults() {
        let f = LabelFilter::with_patterns(["k8s:!controller-uid", "k8s:!job-name"]).unwrap();
        assert!(!f.is_relevant(&k8s("job-name")));
        assert!(!f.is_relevant(&k8s("controller-uid")));
        assert!(f.is_relevant(&k8s("app")));
        assert!(!f.is_relevant(&k8s("pod-template-hash")));
    }

    #[test]
    fn the_longer_match_decides_between_inclusive_and_exclusive() {
        let f = LabelFilter::with_patterns(["!foo", r"foo\.bar"]).unwrap();
        assert!(f.is_relevant(&k8s("foo.bar")));
        assert!(!f.is_relevant(&k8s("foo.baz")));
        let f = LabelFilter::with_patterns(["any:!team"]).unwrap();
        assert!(!f.is_relevant(&k8s("team")), "any: matches every source");
    }

    #[test]
    fn a_bad_pattern_is_named() {
        let e = LabelFilter::with_patterns(["k8s:app", "k8s:(unclosed"]).unwrap_err();
        assert!(
            matches!(&e, LabelFilterError::Regex { pattern, .. } if pattern == "k8s:(unclosed"),
            "{e}"
        );
        let e = LabelFilter::with_patterns(["k8s:!"]).unwrap_err();
        assert_eq!(
            e,
            LabelFilterError::Empty {
                pattern: "k8s:!".into()
            }
        );
    }
}
