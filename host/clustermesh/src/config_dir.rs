//! The clustermesh config directory as a stream of added, changed and removed clusters.

use super::config_file::{parse_config_file, ConfigError};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use weft_kvstore::Endpoints;
use weft_sys::dirwatch::DirWake;

/// A change in the directory.
#[derive(Debug)]
pub enum DirEvent {
    /// A cluster's file appeared or its contents changed, or a TLS file it names did.
    Upsert {
        /// The cluster's name (the file's name).
        name: String,
        /// Its parsed contents, or why they are not acceptable.
        config: Result<Endpoints, ConfigError>,
    },
    /// A cluster's file went away.
    Remove {
        /// The cluster's name.
        name: String,
    },
    /// Every file present at start was reported (sent once, after the first scan).
    InitDone,
}

/// How often the directory is rescanned even without a notification: inotify misses
/// nothing in practice, but a directory created later, or replaced by a mount, is only
/// seen by a scan.
const RESCAN: Duration = Duration::from_secs(2);

/// Watches `dir`: one [`DirEvent::Upsert`] per file at start and [`DirEvent::InitDone`],
/// then one event per change.
/// Hidden files (Kubernetes' `..data` links) are ignored, and so are names with a dot:
/// no cluster name has one, and the TLS files a cluster's config names sit beside it
/// in the same Secret (`cluster2.crt`). The stream stops when dropped.
pub fn watch_dir(dir: PathBuf) -> ReceiverStream<DirEvent> {
    watch_dir_counting(dir, Arc::default())
}

/// [`watch_dir`], counting the scans in `scans` (for tests).
fn watch_dir_counting(dir: PathBuf, scans: Arc<AtomicUsize>) -> ReceiverStream<DirEvent> {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        let mut wake = DirWake::new(dir.clone(), RESCAN);
        let mut known: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        let mut init_done = false;
        loop {
            wake.arm();
            scans.fetch_add(1, Ordering::Relaxed);
            let mut events = rescan(&dir, &mut known);
            if !std::mem::replace(&mut init_done, true) {
                events.push(DirEvent::InitDone);
            }
            for event in events {
                if tx.send(event).await.is_err() {
                    return;
                }
            }
            tokio::select! {
                _ = wake.changed() => {}
                _ = tx.closed() => return,
            }
        }
    });
    ReceiverStream::new(rx)
}

/// What a cluster's configuration is made of: its file, and the TLS files the file
/// names (a CA, a certificate or a key replaced in place, as a Kubernetes Secret update
/// does, changes it and reconnects the cluster with the new material).
fn fingerprint(bytes: &[u8], config: &Result<Endpoints, ConfigError>) -> Vec<u8> {
    let mut print = bytes.to_vec();
    if let Ok(e) = config {
        for path in [&e.tls.trusted_ca_file, &e.tls.cert_file, &e.tls.key_file]
            .into_iter()
            .flatten()
        {
            print.push(0);
            print.extend_from_slice(path.as_os_str().as_encoded_bytes());
            print.push(0);
            match std::fs::read(path) {
                Ok(content) => print.extend_from_slice(&content),
                // Unreadable now: when it can be read again, that is a change.
                Err(_) => print.push(1),
            }
        }
    }
    print
}

/// Reads every cluster file (and the TLS files each names) and reports what differs
/// from `known`.
fn rescan(dir: &Path, known: &mut BTreeMap<String, Vec<u8>>) -> Vec<DirEvent> {
    let mut now = BTreeMap::new();
    let mut configs = BTreeMap::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            // `is_file` follows symlinks, as Kubernetes' secret mounts need.
            if name.contains('.') || !path.is_file() {
                continue;
            }
            match std::fs::read(&path) {
                Ok(bytes) => {
                    let config = parse_config_file(&path, &String::from_utf8_lossy(&bytes));
                    now.insert(name.clone(), fingerprint(&bytes, &config));
                    configs.insert(name, config);
                }
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "cannot read clustermesh config file")
                }
            }
        }
    }
    let mut events = Vec::new();
    for name in known.keys().filter(|n| !now.contains_key(*n)) {
        events.push(DirEvent::Remove { name: name.clone() });
    }
    for (name, config) in configs {
        if known.get(&name) != now.get(&name) {
            events.push(DirEvent::Upsert { name, config });
        }
    }
    *known = now;
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    async fn next(s: &mut ReceiverStream<DirEvent>) -> DirEvent {
        tokio::time::timeout(Duration::from_secs(10), s.next())
            .await
            .expect("a directory event within 10 s")
            .expect("stream open")
    }

    #[tokio::test]
    async fn files_added_changed_removed_and_hidden_ignored() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("c1"), "endpoints: [http://127.0.0.1:1]\n").unwrap();
        std::fs::write(
            dir.path().join("..data"),
            "endpoints: [http://127.0.0.1:9]\n",
        )
        .unwrap();
        // A TLS file the config names, beside it in the Secret: no cluster.
        std::fs::write(dir.path().join("c1.crt"), "-----BEGIN CERTIFICATE-----\n").unwrap();
        let mut s = watch_dir(dir.path().to_owned());
        match next(&mut s).await {
            DirEvent::Upsert { name, config } => {
                assert_eq!(name, "c1");
                assert_eq!(config.unwrap().urls, ["http://127.0.0.1:1"]);
            }
            e => panic!("unexpected {e:?}"),
        }
        assert!(matches!(next(&mut s).await, DirEvent::InitDone));
        std::fs::write(dir.path().join("c1"), "endpoints: [http://127.0.0.1:2]\n").unwrap();
        match next(&mut s).await {
            DirEvent::Upsert { name, config } => {
                assert_eq!(name, "c1");
                assert_eq!(config.unwrap().urls, ["http://127.0.0.1:2"]);
            }
            e => panic!("unexpected {e:?}"),
        }
        std::fs::write(dir.path().join("c2"), "not: [valid\n").unwrap();
        match next(&mut s).await {
            DirEvent::Upsert { name, config } => {
                assert_eq!(name, "c2");
                assert!(config.is_err());
            }
            e => panic!("unexpected {e:?}"),
        }
        std::fs::remove_file(dir.path().join("c1")).unwrap();
        match next(&mut s).await {
            DirEvent::Remove { name } => assert_eq!(name, "c1"),
            e => panic!("unexpected {e:?}"),
        }
    }

    #[tokio::test]
    async fn a_tls_file_replaced_in_place_reconnects_its_cluster() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("c1.ca");
        std::fs::write(&ca, "first CA\n").unwrap();
        std::fs::write(
            dir.path().join("c1"),
            format!(
                "endpoints: [https://127.0.0.1:1]\ntrusted-ca-file: {}\n",
                ca.display()
            ),
        )
        .unwrap();
        let mut s = watch_dir(dir.path().to_owned());
        assert!(matches!(next(&mut s).await, DirEvent::Upsert { name, .. } if name == "c1"));
        assert!(matches!(next(&mut s).await, DirEvent::InitDone));
        // A Secret update: the CA's content changes, the config file does not.
        std::fs::write(&ca, "rotated CA\n").unwrap();
        match next(&mut s).await {
            DirEvent::Upsert { name, config } => {
                assert_eq!(name, "c1");
                assert_eq!(config.unwrap().tls.trusted_ca_file, Some(ca));
            }
            e => panic!("unexpected {e:?}"),
        }
    }

    #[tokio::test]
    async fn an_unchanged_directory_is_not_rescanned_in_a_loop() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("c1"), "endpoints: [http://127.0.0.1:1]\n").unwrap();
        let scans = Arc::new(AtomicUsize::new(0));
        let mut s = watch_dir_counting(dir.path().to_owned(), scans.clone());
        assert!(matches!(next(&mut s).await, DirEvent::Upsert { .. }));
        assert!(matches!(next(&mut s).await, DirEvent::InitDone));
        // Reading c1 during a scan must not wake the watcher again. Observe an idle
        // interval shorter than the periodic rescan.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let n = scans.load(Ordering::Relaxed);
        assert!(n <= 2, "{n} scans of an unchanged directory in 0.5 s");
    }
}
