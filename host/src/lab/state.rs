//! The lab's state file: everything the lab made, recorded *before* it is made, so that
//! `weftd lab down` removes it all — also after `lab up` crashed half-way — and never
//! anything it did not make.

use super::spec::Spec;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// One thing the lab made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Made {
    /// A named network namespace.
    Netns {
        /// Its name (under `/run/netns`).
        name: String,
    },
    /// A process (etcd, weftd), killed only while its command line names the lab's
    /// directory: a pid reused by another process is left alone.
    Process {
        /// What it is, for the operator.
        what: String,
        /// Its pid; 0 until it started.
        pid: i32,
    },
    /// A userspace WireGuard device (its helper outlives the agent by design).
    WireGuard {
        /// The device.
        device: String,
    },
    /// A bpffs directory of pinned links, programs and maps.
    Bpf {
        /// The directory.
        path: PathBuf,
    },
}

/// The state file's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabState {
    /// The lab's size and directory.
    pub spec: Spec,
    /// What was made, in order.
    pub made: Vec<Made>,
}

/// What can go wrong with the state file.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// It cannot be read, written or decoded.
    #[error("lab state {path}: {reason}")]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

impl LabState {
    /// A new lab's state; its file is written at once.
    ///
    /// # Errors
    /// [`StateError`] when the directory or the file cannot be written.
    pub fn create(spec: Spec) -> Result<Self, StateError> {
        let state = Self {
            spec,
            made: Vec::new(),
        };
        std::fs::create_dir_all(&state.spec.dir).map_err(|e| state.error(e))?;
        state.save()?;
        Ok(state)
    }

    /// The state of the lab whose file is `path`.
    ///
    /// # Errors
    /// [`StateError`] when it cannot be read or decoded.
    pub fn read(path: &Path) -> Result<Self, StateError> {
        let bad = |reason: String| StateError::File {
            path: path.into(),
            reason,
        };
        let bytes = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
        serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))
    }

    /// Records `made` (before making it) and saves.
    ///
    /// # Errors
    /// [`StateError`] when the file cannot be written: nothing should be made then.
    pub fn record(&mut self, made: Made) -> Result<(), StateError> {
        self.made.push(made);
        self.save()
    }

    /// Forgets the last record: its making failed, so the lab did not make it (a
    /// namespace that already existed is someone else's).
    ///
    /// # Errors
    /// [`StateError`] when the file cannot be written.
    pub fn forget_last(&mut self) -> Result<(), StateError> {
        self.made.pop();
        self.save()
    }

    /// Sets the pid of the last process recorded as `what`, and saves.
    ///
    /// # Errors
    /// [`StateError`] when the file cannot be written.
    pub fn started(&mut self, what: &str, pid: i32) -> Result<(), StateError> {
        if let Some(Made::Process { pid: p, .. }) = self
            .made
            .iter_mut()
            .rev()
            .find(|m| matches!(m, Made::Process { what: w, .. } if w == what))
        {
            *p = pid;
        }
        self.save()
    }

    fn save(&self) -> Result<(), StateError> {
        let bytes = serde_json::to_vec_pretty(self).expect("a lab state serialises");
        crate::fsutil::write_atomically(&self.spec.state_file(), &bytes, 0o600)
            .map_err(|e| self.error(e))
    }

    fn error(&self, e: std::io::Error) -> StateError {
        StateError::File {
            path: self.spec.state_file(),
            reason: e.to_string(),
        }
    }
}
