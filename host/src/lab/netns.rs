//! Named network namespaces, made as `ip netns add` makes them: a file under
//! `/run/netns` with a new namespace bind-mounted on it, by a thread of its own (the
//! namespace is the thread's, never the agent's other threads').

use super::spec::netns_path;
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::{unshare, CloneFlags};
use std::path::PathBuf;

/// Makes the namespace `name`; an existing one is an error (the lab never takes over
/// what it did not make).
///
/// # Errors
/// When it exists or the kernel refuses.
pub fn create(name: &str) -> std::io::Result<PathBuf> {
    let path = netns_path(name);
    std::fs::create_dir_all("/run/netns")?;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)?;
    let target = path.clone();
    let made = std::thread::spawn(move || -> nix::Result<()> {
        unshare(CloneFlags::CLONE_NEWNET)?;
        mount(
            Some("/proc/thread-self/ns/net"),
            &target,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
    })
    .join()
    .map_err(|_| std::io::Error::other("the namespace thread panicked"))?;
    if let Err(e) = made {
        let _ = std::fs::remove_file(&path);
        return Err(e.into());
    }
    Ok(path)
}

/// Removes the namespace `name` (its devices go with it once nothing holds it);
/// nothing when it is gone.
pub fn delete(name: &str) {
    let path = netns_path(name);
    let _ = umount2(&path, MntFlags::MNT_DETACH);
    let _ = std::fs::remove_file(&path);
}
