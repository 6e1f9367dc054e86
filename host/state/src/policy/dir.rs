//! The policy directory, followed live: one policy per file (`*.yaml`, `*.yml`,
//! `*.json`), read again on every change. A file that does not parse is refused alone,
//! named with its reason; the others stay in force.

use super::rule::{parse_all, Policy, Refused};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use weft_sys::dirwatch::DirWake;

/// The largest policy file read; a larger one is refused.
pub const MAX_POLICY_BYTES: u64 = 1 << 20;

/// The policies in force and the files refused.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicySet {
    /// The policies, by file name order.
    pub policies: Vec<Policy>,
    /// The files refused, with why.
    pub refused: Vec<Refused>,
}

/// Reads `dir` once: every policy file, each parsed alone.
pub fn read(dir: &Path) -> PolicySet {
    let mut files = BTreeMap::new();
    let mut refused = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return PolicySet::default();
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let policy_file = ["yaml", "yml", "json"]
            .iter()
            .any(|e| path.extension().is_some_and(|x| x == *e));
        if !policy_file || name.starts_with('.') {
            continue;
        }
        let refuse = |reason: String| Refused {
            file: name.clone(),
            reason,
        };
        // Regular files only, size-capped: a FIFO or a huge file must not stall or
        // exhaust the agent.
        match std::fs::symlink_metadata(&path) {
            Ok(m) if !m.is_file() => refused.push(refuse("not a regular file".into())),
            Ok(m) if m.len() > MAX_POLICY_BYTES => {
                refused.push(refuse(format!("larger than {MAX_POLICY_BYTES} bytes")))
            }
            Ok(_) => match std::fs::read_to_string(&path) {
                Ok(text) => {
                    files.insert(name, text);
                }
                Err(e) => refused.push(refuse(e.to_string())),
            },
            Err(e) => refused.push(refuse(e.to_string())),
        }
    }
    let (policies, mut bad) = parse_all(&files);
    refused.append(&mut bad);
    refused.sort_by(|a, b| a.file.cmp(&b.file));
    PolicySet { policies, refused }
}

/// Follows `dir`: publishes its policies on `tx` at once and after every change, until
/// dropped. Refused files are logged once per change.
pub async fn follow(dir: PathBuf, tx: watch::Sender<Arc<PolicySet>>) {
    let mut wake = DirWake::new(dir.clone(), Duration::from_secs(2));
    loop {
        wake.arm();
        let set = read(&dir);
        if **tx.borrow() != set {
            for r in &set.refused {
                tracing::warn!(file = r.file, reason = r.reason, "policy refused");
            }
            tracing::info!(
                policies = set.policies.len(),
                refused = set.refused.len(),
                "policies read"
            );
            tx.send_replace(Arc::new(set));
        }
        wake.changed().await;
    }
}
