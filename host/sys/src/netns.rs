//! Running a piece of work inside a network namespace: on a thread of its own that
//! entered it with `setns`, so the rest of the (multi-threaded) process stays put.

use std::path::{Path, PathBuf};

/// A network namespace that could not be opened or entered.
#[derive(Debug, thiserror::Error)]
#[error("network namespace {}: {step}: {source}", path.display())]
pub struct NetnsError {
    /// The namespace.
    pub path: PathBuf,
    /// What failed: `open`, `enter` or `run` (the thread running the work panicked).
    pub step: &'static str,
    /// The system's answer.
    #[source]
    pub source: std::io::Error,
}

impl NetnsError {
    /// The error of `step` on `path`.
    pub fn new(path: &Path, step: &'static str, source: impl Into<std::io::Error>) -> Self {
        Self {
            path: path.into(),
            step,
            source: source.into(),
        }
    }
}

/// Opens the namespace file `path` (for [`enter`] on another thread).
///
/// # Errors
/// [`NetnsError`] with step `open`.
pub fn open(path: &Path) -> Result<std::fs::File, NetnsError> {
    std::fs::File::open(path).map_err(|e| NetnsError::new(path, "open", e))
}

/// Moves the calling thread into the namespace `file` (opened from `path`).
///
/// # Errors
/// [`NetnsError`] with step `enter`.
pub fn enter(path: &Path, file: &std::fs::File) -> Result<(), NetnsError> {
    nix::sched::setns(file, nix::sched::CloneFlags::CLONE_NEWNET)
        .map_err(|e| NetnsError::new(path, "enter", e))
}

/// Runs `f` on a new thread inside the network namespace `netns` (a path such as
/// `/run/netns/NAME` or `/proc/PID/ns/net`); `None` runs it in the caller's.
///
/// # Errors
/// [`NetnsError`] when the namespace cannot be opened or entered.
pub fn in_netns<T: Send>(
    netns: Option<&Path>,
    f: impl FnOnce() -> T + Send,
) -> Result<T, NetnsError> {
    let Some(path) = netns else { return Ok(f()) };
    let file = open(path)?;
    std::thread::scope(|s| {
        s.spawn(|| {
            enter(path, &file)?;
            Ok(f())
        })
        .join()
        .map_err(|_| {
            NetnsError::new(
                path,
                "run",
                std::io::Error::other("the namespace thread panicked"),
            )
        })?
    })
}
