//! Network namespaces, veth links and TUN devices for the datapath tests. Everything
//! is created inside namespaces the test owns, with no route out, and removed on drop.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::time::Duration;

/// Runs `ip` with `args`; panics with its error output.
pub fn ip(args: &[&str]) {
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A named network namespace, deleted on drop.
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new(name: &str) -> Netns {
        let name = format!("{name}-{}", std::process::id());
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &name])
            .output();
        ip(&["netns", "add", &name]);
        ip(&["-n", &name, "link", "set", "lo", "up"]);
        Netns { name }
    }

    pub fn path(&self) -> PathBuf {
        PathBuf::from(format!("/run/netns/{}", self.name))
    }

    /// `ip -n <ns> args...`.
    pub fn ip(&self, args: &[&str]) {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        ip(&all);
    }

    /// Runs `f` inside the namespace.
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        weft_sys::netns::in_netns(Some(&self.path()), f).unwrap()
    }

    /// The ifindex of `device` in the namespace.
    pub fn ifindex(&self, device: &str) -> u32 {
        self.run(|| nix::net::if_::if_nametoindex(device).unwrap())
    }

    /// A UDP socket bound in the namespace.
    pub fn udp(&self, addr: &str) -> std::net::UdpSocket {
        let addr = addr.to_owned();
        self.run(move || {
            let s = std::net::UdpSocket::bind(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_millis(300)))
                .unwrap();
            s
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

nix::ioctl_write_int!(tunsetiff, b'T', 202);

/// A TUN device created in a namespace, read by the test (it stands in for WireGuard).
pub struct Tun {
    fd: OwnedFd,
}

impl Tun {
    pub fn new(ns: &Netns, name: &str) -> Tun {
        let name = name.to_owned();
        let fd = ns.run(move || {
            let fd = nix::fcntl::open(
                "/dev/net/tun",
                nix::fcntl::OFlag::O_RDWR | nix::fcntl::OFlag::O_NONBLOCK,
                nix::sys::stat::Mode::empty(),
            )
            .unwrap();
            // struct ifreq: the name, then the flags (IFF_TUN | IFF_NO_PI).
            let mut ifr = [0u8; 40];
            ifr[..name.len()].copy_from_slice(name.as_bytes());
            let flags: u16 = (libc::IFF_TUN | libc::IFF_NO_PI) as u16;
            ifr[16..18].copy_from_slice(&flags.to_ne_bytes());
            // SAFETY: TUNSETIFF reads a `struct ifreq` (40 bytes) that outlives the call.
            unsafe { tunsetiff(fd.as_raw_fd(), ifr.as_ptr() as u64) }.unwrap();
            fd
        });
        Tun { fd }
    }

    /// The IPv4 destinations of the packets that arrive within `wait`.
    pub fn destinations(&self, wait: Duration) -> Vec<std::net::Ipv4Addr> {
        let deadline = std::time::Instant::now() + wait;
        let mut found = Vec::new();
        let mut buf = [0u8; 2048];
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return found;
            }
            let mut fds = [nix::poll::PollFd::new(
                std::os::fd::AsFd::as_fd(&self.fd),
                nix::poll::PollFlags::POLLIN,
            )];
            let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
            if nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(ms)).unwrap() == 0 {
                continue;
            }
            while let Ok(n) = nix::unistd::read(&self.fd, &mut buf) {
                if n >= 20 && buf[0] >> 4 == 4 {
                    found.push(std::net::Ipv4Addr::new(buf[16], buf[17], buf[18], buf[19]));
                }
            }
        }
    }
}

/// Two namespaces joined by a veth: node A (`weftv0`, 10.100.0.1/24) and B (`weftv1`,
/// 10.100.0.2/24) which owns 10.2.0.7 and 10.3.0.7; A routes 10.2.0.0/16 and
/// 10.3.0.0/16 via B. Nothing else: no route out of either.
pub fn joined_pair(test: &str) -> (Netns, Netns) {
    let a = Netns::new(&format!("weft-{test}-a"));
    let b = Netns::new(&format!("weft-{test}-b"));
    ip(&[
        "link", "add", "weftv0", "netns", &a.name, "type", "veth", "peer", "name", "weftv1",
        "netns", &b.name,
    ]);
    a.ip(&["addr", "add", "10.100.0.1/24", "dev", "weftv0"]);
    a.ip(&["link", "set", "weftv0", "up"]);
    b.ip(&["addr", "add", "10.100.0.2/24", "dev", "weftv1"]);
    b.ip(&["addr", "add", "10.2.0.7/32", "dev", "lo"]);
    b.ip(&["addr", "add", "10.3.0.7/32", "dev", "lo"]);
    b.ip(&["link", "set", "weftv1", "up"]);
    a.ip(&["route", "add", "10.2.0.0/16", "via", "10.100.0.2"]);
    a.ip(&["route", "add", "10.3.0.0/16", "via", "10.100.0.2"]);
    (a, b)
}
