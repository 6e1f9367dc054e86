//! The lab's processes: etcd per cluster and `weftd` per node, started in a process
//! group of their own (the lab outlives the command that made it), their output in a
//! log file; stopped only while their command line still names the lab.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Starts `cmd` detached, stdout and stderr to `log`: its pid.
///
/// # Errors
/// When the log cannot be opened or the program cannot start.
pub fn spawn(mut cmd: Command, log: &Path) -> std::io::Result<i32> {
    use std::os::unix::process::CommandExt as _;
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    let child = cmd
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .process_group(0)
        .spawn()?;
    i32::try_from(child.id()).map_err(std::io::Error::other)
}

/// Whether `pid` runs with `marker` in its command line (and is not a zombie).
pub fn runs(pid: i32, marker: &str) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| rest.starts_with('Z')))
        .unwrap_or(true);
    !zombie && String::from_utf8_lossy(&cmdline).contains(marker)
}

/// Stops `pid` if it runs with `marker` in its command line: SIGTERM, then SIGKILL
/// after `grace`. Whether it was the lab's to stop.
pub fn stop(pid: i32, marker: &str, grace: Duration) -> bool {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    if pid <= 0 || !runs(pid, marker) {
        return false;
    }
    let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline && runs(pid, marker) {
        std::thread::sleep(Duration::from_millis(20));
    }
    if runs(pid, marker) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
    true
}

/// A free TCP port on loopback (bound, then released for the process that uses it).
///
/// # Errors
/// When no port can be bound.
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// The command `pid` was started with: the same program and arguments, to start it
/// again once it is stopped.
///
/// # Errors
/// When `pid` does not run or has no command line.
pub fn command_of(pid: i32) -> std::io::Result<Command> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))?;
    let args: Vec<std::ffi::OsString> = cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(a).to_owned())
        .collect();
    let Some((program, rest)) = args.split_first() else {
        return Err(std::io::Error::other(format!(
            "pid {pid} has no command line"
        )));
    };
    let mut cmd = Command::new(program);
    cmd.args(rest);
    Ok(cmd)
}

/// Restarts `pid` (if it runs with `marker`) as it was started: the same program and
/// arguments, its output appended to `log`. Its new pid.
///
/// # Errors
/// When it is not the lab's, or cannot start again.
pub fn restart(pid: i32, marker: &str, log: &Path) -> std::io::Result<i32> {
    let cmd = command_of(pid)?;
    if !stop(pid, marker, Duration::from_secs(5)) {
        return Err(std::io::Error::other(format!("pid {pid} is not the lab's")));
    }
    spawn(cmd, log)
}

/// Sends `signal` to `pid` if it runs with `marker` (SIGSTOP freezes an etcd, SIGCONT
/// thaws it). Whether it was the lab's.
pub fn signal(pid: i32, marker: &str, signal: nix::sys::signal::Signal) -> bool {
    // A stopped process is still the lab's: check before stopping it only.
    if signal != nix::sys::signal::Signal::SIGCONT && !runs(pid, marker) {
        return false;
    }
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal).is_ok()
}
