//! Label and field selectors, in the API's query syntax
//! (`labelSelector=app=web,tier!=db,env in (a,b),!legacy`;
//! `fieldSelector=spec.nodeName=n1,metadata.name!=x`).
//!
//! Parsed by hand: the syntax is the API's own and small; no maintained Rust crate
//! implements the server side of it.

use serde_json::Value;

/// What a selector does not accept, naming it (a `400 BadRequest` to the client).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unable to parse requirement {requirement:?}: {reason}")]
pub struct SelectorError {
    /// The requirement at fault.
    pub requirement: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Op {
    Eq(String),
    NotEq(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    NotExists,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: Op,
}

impl Requirement {
    fn matches(&self, value: Option<&str>) -> bool {
        match (&self.op, value) {
            (Op::Eq(v), Some(x)) => x == v,
            (Op::Eq(_), None) => false,
            // As the API: `!=` and `notin` also match objects without the key.
            (Op::NotEq(v), x) => x != Some(v.as_str()),
            (Op::In(vs), Some(x)) => vs.iter().any(|v| v == x),
            (Op::In(_), None) => false,
            (Op::NotIn(vs), x) => x.is_none_or(|x| !vs.iter().any(|v| v == x)),
            (Op::Exists, x) => x.is_some(),
            (Op::NotExists, x) => x.is_none(),
        }
    }
}

/// Splits at commas outside parentheses.
fn requirements(text: &str) -> Vec<&str> {
    let (mut depth, mut start, mut out) = (0i32, 0usize, Vec::new());
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&text[start..]);
    out.into_iter()
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .collect()
}

fn set(values: &str, requirement: &str) -> Result<Vec<String>, SelectorError> {
    let inner = values
        .trim()
        .strip_prefix('(')
        .and_then(|v| v.strip_suffix(')'))
        .ok_or(SelectorError {
            requirement: requirement.to_owned(),
            reason: "a set must be in parentheses",
        })?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .collect())
}

fn parse_one(r: &str, sets: bool) -> Result<Requirement, SelectorError> {
    let bad = |reason| SelectorError {
        requirement: r.to_owned(),
        reason,
    };
    let req = |key: &str, op| {
        let key = key.trim();
        if key.is_empty() || key.contains(char::is_whitespace) {
            return Err(bad("a key must be one non-empty word"));
        }
        Ok(Requirement {
            key: key.to_owned(),
            op,
        })
    };
    if let Some((k, v)) = r.split_once("!=") {
        return req(k, Op::NotEq(v.trim().to_owned()));
    }
    if let Some((k, v)) = r.split_once("==").or_else(|| r.split_once('=')) {
        return req(k, Op::Eq(v.trim().to_owned()));
    }
    if sets {
        if let Some((k, v)) = r.split_once(" notin ") {
            return req(k, Op::NotIn(set(v, r)?));
        }
        if let Some((k, v)) = r.split_once(" in ") {
            return req(k, Op::In(set(v, r)?));
        }
        if let Some(k) = r.strip_prefix('!') {
            return req(k, Op::NotExists);
        }
        return req(r, Op::Exists);
    }
    Err(bad("a field selector needs = , == or !="))
}

/// A label selector: every requirement must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<Requirement>);

impl LabelSelector {
    /// Parses the `labelSelector` query parameter.
    ///
    /// # Errors
    /// [`SelectorError`] naming the requirement that does not parse.
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        requirements(text)
            .into_iter()
            .map(|r| parse_one(r, true))
            .collect::<Result<_, _>>()
            .map(LabelSelector)
    }

    /// Whether the object's `metadata.labels` satisfy it.
    pub fn matches(&self, object: &Value) -> bool {
        let labels = &object["metadata"]["labels"];
        self.0
            .iter()
            .all(|r| r.matches(labels[r.key.as_str()].as_str()))
    }
}

/// A field selector: every requirement must hold; a field is a dotted path into the
/// object (`metadata.name`, `spec.nodeName`, `status.phase`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<Requirement>);

impl FieldSelector {
    /// Parses the `fieldSelector` query parameter.
    ///
    /// # Errors
    /// [`SelectorError`] naming the requirement that does not parse.
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        requirements(text)
            .into_iter()
            .map(|r| parse_one(r, false))
            .collect::<Result<_, _>>()
            .map(FieldSelector)
    }

    /// Whether the object's fields satisfy it. A missing string field is the empty
    /// string, as the API's field sets have it (`spec.nodeName=` selects unscheduled pods).
    pub fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|r| {
            let field = r
                .key
                .split('.')
                .try_fold(object, |v, part| v.get(part))
                .and_then(Value::as_str)
                .unwrap_or("");
            r.matches(Some(field))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(labels: Value, node: &str) -> Value {
        json!({"metadata": {"name": "p", "namespace": "ns", "labels": labels}, "spec": {"nodeName": node}})
    }

    #[test]
    fn label_selectors_as_the_api_reads_them() {
        let web = pod(json!({"app": "web", "tier": "front"}), "n1");
        let db = pod(json!({"app": "db"}), "n1");
        let none = pod(json!(null), "n1");
        let cases: &[(&str, [bool; 3])] = &[
            ("", [true, true, true]),
            ("app=web", [true, false, false]),
            ("app==web", [true, false, false]),
            ("app!=web", [false, true, true]),
            ("app in (web, db)", [true, true, false]),
            ("app notin (web)", [false, true, true]),
            ("tier", [true, false, false]),
            ("!tier", [false, true, true]),
            ("app=web,tier=front", [true, false, false]),
            ("app in (web,db),!tier", [false, true, false]),
        ];
        for (text, want) in cases {
            let s = LabelSelector::parse(text).unwrap();
            let got = [s.matches(&web), s.matches(&db), s.matches(&none)];
            assert_eq!(&got, want, "{text}");
        }
        assert!(LabelSelector::parse("app in web").is_err());
        assert!(LabelSelector::parse("a b=c").is_err());
    }

    #[test]
    fn field_selectors_read_dotted_paths() {
        let p = pod(json!({}), "n1");
        let unscheduled = json!({"metadata": {"name": "q"}});
        let s = FieldSelector::parse("spec.nodeName=n1").unwrap();
        assert!(s.matches(&p) && !s.matches(&unscheduled));
        let s = FieldSelector::parse("spec.nodeName=").unwrap();
        assert!(!s.matches(&p) && s.matches(&unscheduled));
        let s = FieldSelector::parse("metadata.name!=p,metadata.namespace=ns").unwrap();
        assert!(!s.matches(&p));
        assert!(FieldSelector::parse("spec.nodeName").is_err());
    }
}
