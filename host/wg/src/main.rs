//! `weft-wg`: a userspace WireGuard device (boringtun) in a process of its own, so the
//! device and its tunnels outlive an agent restart, as a kernel device would.
//!
//! `weft-wg NAME [--netns PATH]` creates the TUN device NAME (in the namespace PATH,
//! entered first) and its UAPI socket `/var/run/wireguard/NAME.sock`, writes its PID
//! to `/var/run/wireguard/NAME.pid`, and runs until killed. The agent configures it
//! through the socket. The agent starts it, or it runs on its own (the chart's
//! `wireguard` container) and the agent adopts it. `weft-wg --print-written-paths`
//! prints the directory it writes.

use boringtun::device::{DeviceConfig, DeviceHandle};
use std::process::ExitCode;
use weft_wireguard::RUN_DIR;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(name), rest) = (args.next(), args.collect::<Vec<_>>()) else {
        eprintln!("usage: weft-wg NAME [--netns PATH]");
        return ExitCode::from(2);
    };
    if name == "--print-written-paths" {
        println!("{RUN_DIR}\tthe device's UAPI socket and PID file");
        return ExitCode::SUCCESS;
    }
    if let [flag, path] = rest.as_slice() {
        if flag != "--netns" {
            eprintln!("weft-wg: unknown flag {flag}");
            return ExitCode::from(2);
        }
        // Still single-threaded: the whole process moves.
        let entered = std::fs::File::open(path).and_then(|ns| {
            nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET).map_err(Into::into)
        });
        if let Err(e) = entered {
            eprintln!("weft-wg: cannot enter network namespace {path}: {e}");
            return ExitCode::FAILURE;
        }
    } else if !rest.is_empty() {
        eprintln!("usage: weft-wg NAME [--netns PATH]");
        return ExitCode::from(2);
    }
    // The UAPI socket answers `get` with the private key: nobody but root may
    // connect. Sockets and the directory (when this makes it) take their mode from
    // the umask; the socket is also set 0600 below, whatever the directory was.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    let config = DeviceConfig {
        n_threads: 2,
        use_connected_socket: true,
        use_multi_queue: false,
        uapi_fd: -1,
    };
    let mut device = match DeviceHandle::new(&name, config) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("weft-wg: cannot create device {name}: {e:?}");
            return ExitCode::FAILURE;
        }
    };
    let socket = format!("{RUN_DIR}/{name}.sock");
    {
        use std::os::unix::fs::PermissionsExt as _;
        if let Err(e) = std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600)) {
            eprintln!("weft-wg: cannot make {socket} 0600: {e}");
            return ExitCode::FAILURE;
        }
    }
    let pid_file = format!("{RUN_DIR}/{name}.pid");
    if let Err(e) = std::fs::write(&pid_file, std::process::id().to_string()) {
        eprintln!("weft-wg: cannot write {pid_file}: {e}");
    }
    device.wait();
    ExitCode::SUCCESS
}
