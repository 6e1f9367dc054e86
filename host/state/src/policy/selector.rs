//! Label selectors, as Kubernetes and the established agent write them: `matchLabels`
//! and `matchExpressions` (`In`, `NotIn`, `Exists`, `DoesNotExist`), matched against an
//! identity's labels.
//!
//! A key may name its source (`k8s:app`, `any:app`); without one it means `k8s:`, and
//! `any:` matches a label of any source, as in the established agent.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use weft_model::Labels;

/// One `matchExpressions` item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Expression {
    /// The label key.
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: Operator,
    /// The values, for `In` and `NotIn`.
    #[serde(default)]
    pub values: Vec<String>,
}

/// A `matchExpressions` operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Operator {
    /// The label has one of the values.
    In,
    /// The label is absent or has none of the values.
    NotIn,
    /// The label is present.
    Exists,
    /// The label is absent.
    DoesNotExist,
}

/// A label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Selector {
    /// Labels that must be present with these values.
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
    /// Further requirements, all of which must hold.
    #[serde(default)]
    pub match_expressions: Vec<Expression>,
}

impl Selector {
    /// Whether `labels` satisfy every requirement.
    ///
    /// ```
    /// use weft_state::policy::Selector;
    /// let s: Selector = serde_yaml::from_str("matchLabels: {app: web}").unwrap();
    /// assert!(s.matches(&"k8s:app=web;k8s:tier=front;".parse().unwrap()));
    /// assert!(!s.matches(&"k8s:app=db;".parse().unwrap()));
    /// ```
    pub fn matches(&self, labels: &Labels) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| values(labels, k).any(|have| have == v))
            && self.match_expressions.iter().all(|e| {
                let mut have = values(labels, &e.key);
                match e.operator {
                    Operator::In => have.any(|h| e.values.iter().any(|v| v == h)),
                    Operator::NotIn => !have.any(|h| e.values.iter().any(|v| v == h)),
                    Operator::Exists => have.next().is_some(),
                    Operator::DoesNotExist => have.next().is_none(),
                }
            })
    }

    /// Whether the selector says anything about label `key` (source-qualified or not).
    pub fn mentions(&self, key: &str) -> bool {
        let bare = |k: &str| split(k).1 == key;
        self.match_labels.keys().any(|k| bare(k))
            || self.match_expressions.iter().any(|e| bare(&e.key))
    }

    /// The same selector, also requiring `key=value` (a `k8s:` label).
    #[must_use]
    pub fn and(mut self, key: &str, value: &str) -> Self {
        self.match_labels
            .insert(format!("k8s:{key}"), value.to_owned());
        self
    }
}

/// `(source, key)` of a selector key; no source means `k8s`.
fn split(key: &str) -> (&str, &str) {
    match key.split_once(':') {
        Some((source, k))
            if !source.is_empty() && !source.contains('.') && !source.contains('/') =>
        {
            (source, k)
        }
        _ => ("k8s", key),
    }
}

/// The values `labels` hold for selector key `key`.
fn values<'a>(labels: &'a Labels, key: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    let (source, k) = split(key);
    labels
        .iter()
        .filter(move |l| l.key == k && (source == "any" || l.source == source))
        .map(|l| l.value.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(yaml: &str) -> Selector {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn labels(s: &str) -> Labels {
        s.parse().unwrap()
    }

    #[test]
    fn expressions_and_sources() {
        let web = labels(
            "k8s:app=web;k8s:io.cilium.k8s.policy.cluster=c2;k8s:io.kubernetes.pod.namespace=shop;",
        );
        assert!(sel("{}").matches(&web), "empty matches all");
        assert!(sel("matchLabels: {io.cilium.k8s.policy.cluster: c2}").matches(&web));
        assert!(!sel("matchLabels: {io.cilium.k8s.policy.cluster: c1}").matches(&web));
        assert!(sel("matchLabels: {'k8s:app': web}").matches(&web));
        assert!(sel("matchLabels: {'any:app': web}").matches(&web));
        assert!(!sel("matchLabels: {'reserved:app': web}").matches(&web));
        let e = |op: &str, values: &str| {
            sel(&format!(
                "matchExpressions: [{{key: app, operator: {op}, values: {values}}}]"
            ))
        };
        assert!(e("In", "[web, db]").matches(&web));
        assert!(!e("In", "[db]").matches(&web));
        assert!(e("NotIn", "[db]").matches(&web));
        assert!(!e("NotIn", "[web]").matches(&web));
        assert!(e("Exists", "[]").matches(&web));
        assert!(!e("DoesNotExist", "[]").matches(&web));
        assert!(sel("matchExpressions: [{key: tier, operator: DoesNotExist}]").matches(&web));
        assert!(sel("matchLabels: {app: web}").mentions("app"));
        assert!(!sel("matchLabels: {app: web}").mentions("tier"));
    }
}
