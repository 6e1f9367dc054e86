//! Endpoint records in the state directory, one file per endpoint, written before the
//! first side effect of an ADD and removed after the last undo of a DEL: whatever a
//! crash interrupts, the record says what may need cleaning.

use super::link::Attachment;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Where an endpoint is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// An ADD started and has not finished: a crash here leaves parts to clean.
    Creating,
    /// Attached, with its identity and ipcache entry.
    Ready,
}

/// One endpoint, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// `<container id>/<ifname>`.
    pub key: String,
    /// The runtime's container ID.
    pub container_id: String,
    /// The interface in the container.
    pub ifname: String,
    /// The container's network namespace.
    pub netns: PathBuf,
    /// The pod's namespace (`K8S_POD_NAMESPACE`).
    pub namespace: String,
    /// The pod's name (`K8S_POD_NAME`).
    pub pod_name: String,
    /// The identity's labels, in the established string form.
    pub labels: String,
    /// Where the ADD got to.
    pub phase: Phase,
    /// The addresses, once allocated.
    #[serde(default)]
    pub addresses: Vec<IpAddr>,
    /// The security identity, once allocated.
    #[serde(default)]
    pub identity: Option<u32>,
    /// The interfaces, once set up.
    #[serde(default)]
    pub attachment: Option<Attachment>,
    /// The last regeneration (or the one under way, in a listing).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "tolerant_regeneration"
    )]
    pub regeneration: Option<Regeneration>,
}

pub use weft_api::endpoint::Regeneration;

/// Reads a record's last regeneration, or none when it is in a form this agent does
/// not know (an earlier agent wrote `result` as a sentence): the regeneration is only
/// shown, and the record it is part of must not be lost over it.
fn tolerant_regeneration<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Regeneration>, D::Error> {
    let value = Option::<serde_json::Value>::deserialize(d)?;
    Ok(value.and_then(|v| match serde_json::from_value(v) {
        Ok(r) => Some(r),
        Err(e) => {
            tracing::warn!(error = %e, "an endpoint record's last regeneration is in an older form; not shown");
            None
        }
    }))
}

/// The records of one agent: on disk, and mirrored in memory for the readers (a
/// listing, every policy change) so that only writes touch the disk.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
    memory: Arc<Mutex<BTreeMap<String, Record>>>,
}

impl Store {
    /// Records in `dir` (created when missing), read once.
    ///
    /// # Errors
    /// When the directory cannot be created.
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let store = Self {
            dir: dir.into(),
            memory: Arc::default(),
        };
        let (records, _) = store.read_all();
        *store.memory.lock().expect("records lock") =
            records.into_iter().map(|r| (r.key.clone(), r)).collect();
        Ok(store)
    }

    fn path(&self, key: &str) -> PathBuf {
        // Container IDs are letters, digits, `_.-`; interface names have no `/`.
        self.dir.join(format!("{}.json", key.replace('/', "@")))
    }

    /// Writes `record`, whole.
    ///
    /// # Errors
    /// When it cannot be written.
    pub fn put(&self, record: &Record) -> std::io::Result<()> {
        let bytes = serde_json::to_vec_pretty(record).expect("a record serialises");
        weft_sys::fsutil::write_atomically(&self.path(&record.key), &bytes, 0o600)?;
        self.memory
            .lock()
            .expect("records lock")
            .insert(record.key.clone(), record.clone());
        Ok(())
    }

    /// The record of `key`, if any.
    pub fn get(&self, key: &str) -> Option<Record> {
        self.memory.lock().expect("records lock").get(key).cloned()
    }

    /// Removes the record of `key`; nothing when there is none.
    ///
    /// # Errors
    /// When it cannot be removed.
    pub fn remove(&self, key: &str) -> std::io::Result<()> {
        match std::fs::remove_file(self.path(key)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        self.memory.lock().expect("records lock").remove(key);
        Ok(())
    }

    /// Every record, by key.
    pub fn records(&self) -> Vec<Record> {
        self.memory
            .lock()
            .expect("records lock")
            .values()
            .cloned()
            .collect()
    }

    /// Every record as the disk has it; an unreadable file is reported with its path
    /// and skipped.
    pub fn read_all(&self) -> (Vec<Record>, Vec<(PathBuf, String)>) {
        let (mut ok, mut bad) = (Vec::new(), Vec::new());
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return (ok, bad);
        };
        for path in entries.flatten().map(|e| e.path()) {
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            match std::fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
            {
                Ok(r) => ok.push(r),
                Err(e) => bad.push((path, e)),
            }
        }
        ok.sort_by(|a: &Record, b| a.key.cmp(&b.key));
        (ok, bad)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OLD: &str = r#"{"key":"abc/eth0","container_id":"abc","ifname":"eth0",
        "netns":"/var/run/netns/x","namespace":"shop","pod_name":"web-0",
        "labels":"k8s:app=web","phase":"ready","addresses":["10.1.0.5"],"identity":70000,
        "regeneration":{"reason":"restore","decided_by":"built-in default",
        "verdict":"wait 2m for [IpCache, Identities]",
        "result":"timed out: clustermesh sync timed out; still pending: c2 (ipcache)",
        "waited_ms":120000,"started_at":1700000000}}"#;

    #[test]
    fn a_record_from_an_earlier_agent_keeps_everything_but_its_regeneration_sentence() {
        let r: Record = serde_json::from_str(OLD).unwrap();
        assert_eq!(r.key, "abc/eth0");
        assert_eq!(r.identity, Some(70_000));
        assert_eq!(r.phase, Phase::Ready);
        assert_eq!(r.regeneration, None);
    }

    #[test]
    fn a_records_regeneration_round_trips() {
        let mut r: Record = serde_json::from_str(OLD).unwrap();
        r.regeneration = Some(crate::regeneration::waiting(
            weft_hooks::RegenerationReason::Create,
        ));
        let back: Record = serde_json::from_slice(&serde_json::to_vec(&r).unwrap()).unwrap();
        assert_eq!(back, r);
    }
}
