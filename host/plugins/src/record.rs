//! Recording what the agent passed to each hook and what each plugin answered
//! (`--plugin-record DIR`), for `weftd plugin test` to replay against a new build.
//!
//! One JSON object per line in `hooks-<n>.jsonl`. Bounded: a file is closed at a
//! quarter of the limit and the oldest files go while the directory holds more than
//! the limit. Written by a thread of its own behind a bounded queue: a hook never
//! waits on the disk; what does not fit in the queue is dropped and counted.

use super::{Error, RecordError};
use serde::{Deserialize, Serialize};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use weft_hooks::{
    ClusterInfo, ClusterSync, PeerGcRequest, PeerGcVerdict, RegenerationRequest, Resource, Verdict,
};

/// Events the writer may hold before new ones are dropped.
const QUEUE: usize = 1_024;

/// What a hook was given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "hook", rename_all = "kebab-case")]
pub enum HookInput {
    /// A resource's "synced" hook.
    Synced {
        /// Which resource.
        resource: Resource,
        /// The cluster.
        cluster: ClusterInfo,
    },
    /// The "cluster disconnected" hook.
    ClusterDisconnected {
        /// The cluster.
        cluster: ClusterInfo,
    },
    /// The regeneration-policy hook.
    RegenerationPolicy {
        /// The question.
        request: RegenerationRequest,
    },
    /// The peer-gc-policy hook.
    PeerGcPolicy {
        /// The question.
        request: PeerGcRequest,
    },
}

impl HookInput {
    /// The hook's WIT name.
    pub fn hook(&self) -> &'static str {
        match self {
            HookInput::Synced { resource, .. } => match resource {
                Resource::Nodes => "on-nodes-synced",
                Resource::IpCache => "on-ipcache-synced",
                Resource::Identities => "on-identities-synced",
                Resource::Services => "on-services-synced",
            },
            HookInput::ClusterDisconnected { .. } => "on-cluster-disconnected",
            HookInput::RegenerationPolicy { .. } => "regeneration-policy",
            HookInput::PeerGcPolicy { .. } => "peer-gc-policy",
        }
    }
}

/// A policy answer, of either policy hook.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Said {
    /// A regeneration verdict (as bounded by the host).
    Regeneration(Verdict),
    /// A peer-gc verdict (as bounded by the host).
    PeerGc(PeerGcVerdict),
    /// The call failed: why.
    Failed(String),
}

impl std::fmt::Display for Said {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Said::Regeneration(v) => write!(f, "{v:?}"),
            Said::PeerGc(v) => write!(f, "{v:?}"),
            Said::Failed(reason) => write!(f, "failed: {reason}"),
        }
    }
}

/// One plugin's answer to a recorded question.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answered {
    /// The plugin.
    pub plugin: String,
    /// Its version.
    pub version: String,
    /// Its digest.
    pub digest: String,
    /// A shadow's answer (never acted on).
    #[serde(default)]
    pub shadow: bool,
    /// What it said.
    pub said: Said,
}

/// One recorded hook call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// When, in milliseconds since the UNIX epoch.
    pub at_ms: u64,
    /// What the hook was given.
    #[serde(flatten)]
    pub input: HookInput,
    /// What the plugins' mesh view said then (policy hooks).
    #[serde(default)]
    pub mesh: Vec<ClusterSync>,
    /// The plugins asked, in order, and their answers (policy hooks).
    #[serde(default)]
    pub answers: Vec<Answered>,
    /// What the agent acted on, and who decided (`None`: the built-in default).
    #[serde(default)]
    pub decided: Option<(Said, Option<String>)>,
}

impl Event {
    /// An event for `input`, now.
    pub fn now(input: HookInput) -> Self {
        let at_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Self {
            at_ms,
            input,
            mesh: Vec::new(),
            answers: Vec::new(),
            decided: None,
        }
    }
}

/// Writes events to a recording directory from a thread of its own.
#[derive(Debug)]
pub struct Recorder {
    tx: mpsc::SyncSender<Event>,
    dropped: AtomicU64,
    dir: PathBuf,
}

impl Recorder {
    /// Starts recording into `dir` (made if missing), keeping at most `max_bytes`.
    ///
    /// # Errors
    /// [`Error::Record`] when the directory cannot be made or read.
    pub fn start(dir: &Path, max_bytes: u64) -> Result<Self, Error> {
        let bad = |e: std::io::Error| Error::Record {
            path: dir.into(),
            source: RecordError::Io(e.into()),
        };
        std::fs::create_dir_all(dir).map_err(bad)?;
        let mut writer = Writer {
            dir: dir.into(),
            max_bytes: max_bytes.max(4096),
            files: recording_files(dir).map_err(bad)?,
            current: None,
        };
        let (tx, rx) = mpsc::sync_channel::<Event>(QUEUE);
        std::thread::Builder::new()
            .name("weft-plugin-record".into())
            .spawn(move || {
                for event in rx {
                    if let Err(e) = writer.write(&event) {
                        tracing::warn!(error = %e, "plugin recording: event not written");
                    }
                }
            })
            .map_err(bad)?;
        Ok(Self {
            tx,
            dropped: AtomicU64::new(0),
            dir: dir.into(),
        })
    }

    /// Queues `event`; dropped (and counted) when the writer is behind.
    pub fn record(&self, event: Event) {
        if self.tx.try_send(event).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Events dropped because the writer was behind.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// The recording directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

struct Writer {
    dir: PathBuf,
    max_bytes: u64,
    /// Existing files, oldest first: sequence number and size.
    files: Vec<(u64, u64)>,
    current: Option<std::fs::File>,
}

impl Writer {
    fn write(&mut self, event: &Event) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(event).map_err(std::io::Error::other)?;
        line.push(b'\n');
        let rotate = self
            .files
            .last()
            .is_none_or(|(_, size)| *size + line.len() as u64 > self.max_bytes / 4);
        if rotate || self.current.is_none() {
            let seq = self.files.last().map_or(0, |(n, _)| n + 1);
            self.current = Some(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(file_name(&self.dir, seq))?,
            );
            self.files.push((seq, 0));
        }
        self.current
            .as_mut()
            .expect("opened above")
            .write_all(&line)?;
        if let Some((_, size)) = self.files.last_mut() {
            *size += line.len() as u64;
        }
        while self.files.iter().map(|(_, s)| s).sum::<u64>() > self.max_bytes
            && self.files.len() > 1
        {
            let (oldest, _) = self.files.remove(0);
            std::fs::remove_file(file_name(&self.dir, oldest))?;
        }
        Ok(())
    }
}

fn file_name(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("hooks-{seq:08}.jsonl"))
}

/// The recording's files in `dir`, oldest first: sequence number and size.
fn recording_files(dir: &Path) -> std::io::Result<Vec<(u64, u64)>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(seq) = name.to_str().and_then(|n| {
            n.strip_prefix("hooks-")?
                .strip_suffix(".jsonl")?
                .parse()
                .ok()
        }) else {
            continue;
        };
        files.push((seq, entry.metadata()?.len()));
    }
    files.sort();
    Ok(files)
}

/// Reads a recording, oldest event first.
///
/// # Errors
/// [`Error::Record`] naming the file and line that cannot be read.
pub fn read_recording(dir: &Path) -> Result<Vec<Event>, Error> {
    let bad = |path: &Path, source: RecordError| Error::Record {
        path: path.into(),
        source,
    };
    let io = |e: std::io::Error| RecordError::Io(e.into());
    let mut events = Vec::new();
    for (seq, _) in recording_files(dir).map_err(|e| bad(dir, io(e)))? {
        let path = file_name(dir, seq);
        let text = std::fs::read_to_string(&path).map_err(|e| bad(&path, io(e)))?;
        for (n, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let event = serde_json::from_str(line).map_err(|e| {
                bad(
                    &path,
                    RecordError::Line {
                        line: n + 1,
                        source: Arc::new(e),
                    },
                )
            })?;
            events.push(event);
        }
    }
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_hooks::Counts;

    fn synced(name: &str) -> Event {
        Event::now(HookInput::Synced {
            resource: Resource::Nodes,
            cluster: ClusterInfo {
                name: name.into(),
                id: Some(2),
                counts: Counts {
                    nodes: 1,
                    ipcache: 0,
                    identities: 0,
                    services: 0,
                },
            },
        })
    }

    /// One event of every hook, every field set: the recording's format, as written by
    /// earlier builds, which `weftd plugin test` must keep reading.
    fn every_hook() -> Vec<Event> {
        use weft_hooks::{Endpoint, EndpointKind, RegenerationReason, RestoredPeer};
        let sync = ClusterSync {
            name: "c2".into(),
            connected: true,
            nodes_synced: true,
            ipcache_synced: false,
            identities_synced: true,
            services_synced: false,
        };
        let at = |input| Event {
            at_ms: 1_700_000_000_000,
            ..Event::now(input)
        };
        let mut regeneration = at(HookInput::RegenerationPolicy {
            request: RegenerationRequest {
                endpoint: Endpoint {
                    kind: EndpointKind::Workload,
                    identity: 70_000,
                    namespace: "shop".into(),
                    name: "web-0".into(),
                    labels: vec!["k8s:app=web".into()],
                },
                reason: RegenerationReason::IdentityChange,
                ipsec: false,
                wireguard: true,
                default_timeout_ms: 120_000,
                clusters: vec![sync.clone()],
            },
        });
        regeneration.mesh = vec![sync.clone()];
        let wait = Verdict::Wait {
            timeout: std::time::Duration::from_millis(2_500),
            barriers: vec![Resource::IpCache, Resource::Identities],
            clusters: vec!["c2".into()],
        };
        regeneration.answers = vec![
            Answered {
                plugin: "vendor".into(),
                version: "1.2.0".into(),
                digest: "ab12".into(),
                shadow: false,
                said: Said::Regeneration(wait.clone()),
            },
            Answered {
                plugin: "next".into(),
                version: "2.0.0".into(),
                digest: "cd34".into(),
                shadow: true,
                said: Said::Failed("deadline".into()),
            },
        ];
        regeneration.decided = Some((Said::Regeneration(wait), Some("vendor".into())));
        let mut peer_gc = at(HookInput::PeerGcPolicy {
            request: PeerGcRequest {
                peers: vec![RestoredPeer {
                    public_key: "AAAA".into(),
                    allowed_ips: vec!["10.2.0.0/24".into()],
                }],
                clusters: vec![sync],
            },
        });
        peer_gc.decided = Some((
            Said::PeerGc(PeerGcVerdict::Hold(std::time::Duration::from_secs(3))),
            None,
        ));
        let mut disconnected = synced("c3");
        disconnected.at_ms = 1_700_000_000_001;
        disconnected.input = HookInput::ClusterDisconnected {
            cluster: match disconnected.input {
                HookInput::Synced { cluster, .. } => cluster,
                _ => unreachable!(),
            },
        };
        let mut synced = synced("c4");
        synced.at_ms = 1_700_000_000_002;
        vec![regeneration, peer_gc, disconnected, synced]
    }

    #[test]
    fn the_recording_format_is_pinned() {
        let golden = include_str!("../testdata/recording-0.2.0.jsonl");
        let events = every_hook();
        let written: Vec<String> = events
            .iter()
            .map(|e| serde_json::to_string(e).unwrap())
            .collect();
        let golden: Vec<&str> = golden.lines().collect();
        assert_eq!(written, golden, "the recording's JSON changed");
        let read: Vec<Event> = golden
            .iter()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(read, events, "the pinned lines read back as the events");
    }

    #[test]
    fn a_recording_rotates_within_its_bound_and_reads_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = Writer {
            dir: dir.path().into(),
            max_bytes: 8192,
            files: Vec::new(),
            current: None,
        };
        for i in 0..500 {
            w.write(&synced(&format!("c{i}"))).unwrap();
        }
        let total: u64 = recording_files(dir.path())
            .unwrap()
            .iter()
            .map(|(_, s)| s)
            .sum();
        assert!(total <= 8192, "{total}");
        let events = read_recording(dir.path()).unwrap();
        let names: Vec<String> = events
            .iter()
            .map(|e| match &e.input {
                HookInput::Synced { cluster, .. } => cluster.name.clone(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(names.last().map(String::as_str), Some("c499"));
        let first: usize = names[0][1..].parse().unwrap();
        let expected: Vec<String> = (first..500).map(|i| format!("c{i}")).collect();
        assert_eq!(names, expected, "the newest, in order, none missing");
        std::fs::write(dir.path().join("hooks-99999999.jsonl"), "{not json\n").unwrap();
        let e = read_recording(dir.path()).unwrap_err();
        assert!(
            weft_sys::error_chain(&e).contains("hooks-99999999.jsonl")
                && weft_sys::error_chain(&e).contains("line 1"),
            "{e}"
        );
    }
}
