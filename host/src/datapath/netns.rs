//! Running a piece of work inside a network namespace: on a thread of its own that
//! entered it with `setns`, so the rest of the (multi-threaded) process stays put.

use super::Error;
use std::path::Path;

/// Runs `f` on a new thread inside the network namespace `netns` (a path such as
/// `/run/netns/NAME` or `/proc/PID/ns/net`); `None` runs it in the caller's.
///
/// # Errors
/// [`Error::Netns`] when the namespace cannot be opened or entered.
pub fn in_netns<T: Send>(netns: Option<&Path>, f: impl FnOnce() -> T + Send) -> Result<T, Error> {
    let Some(path) = netns else { return Ok(f()) };
    let bad = |reason: String| Error::Netns {
        path: path.into(),
        reason,
    };
    let file = std::fs::File::open(path).map_err(|e| bad(e.to_string()))?;
    std::thread::scope(|s| {
        s.spawn(|| {
            nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)
                .map_err(|e| bad(e.to_string()))?;
            Ok(f())
        })
        .join()
        .map_err(|_| bad("the namespace thread panicked".into()))?
    })
}
