//! Real traffic between namespaces, and what a capture sees of it: a long-running TCP
//! stream with its arrival times, a packet capture on every interface of a namespace,
//! and the parsing a check of "only WireGuard on the link" needs.

use super::netns::Netns;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Sent in the clear by the pods; must never be seen on the link.
pub use weft_sys::stream::MARKER;

/// Stops a WireGuard helper an agent started, even when the test fails.
pub struct StopDevice(pub String);

impl Drop for StopDevice {
    fn drop(&mut self) {
        if let Ok(device) = weft_wireguard::WireGuardDevice::named(&self.0) {
            device.stop();
        }
    }
}

/// The lab's stream ([`weft_sys::stream::Stream`]) between test namespaces.
pub struct Stream(weft_sys::stream::Stream);

impl std::ops::Deref for Stream {
    type Target = weft_sys::stream::Stream;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl Stream {
    /// Listens on `to` in `server`, connects from `client` and starts writing.
    pub fn open(client: &Netns, server: &Netns, to: SocketAddr) -> Stream {
        Stream(
            weft_sys::stream::Stream::open(&client.path(), &server.path(), to)
                .unwrap_or_else(|e| panic!("the client connects to {to}: {e}")),
        )
    }

    /// [`Stream::open`], then waits until data arrives.
    pub async fn flowing(client: &Netns, server: &Netns, to: SocketAddr) -> Stream {
        let stream = Self::open(client, server, to);
        let opened = Instant::now();
        super::eventually("the stream flows", Duration::from_secs(20), || {
            (stream.arrived_since(opened) >= 10).then_some(())
        })
        .await;
        stream
    }

    /// Waits until data arrives again, then closes the stream, asserting that it saw
    /// no error and no gap of `cut` or more since `since`.
    pub async fn assert_unbroken_since(self, since: Instant, cut: Duration) {
        let now = Instant::now();
        super::eventually("the stream still flows", Duration::from_secs(10), || {
            (self.arrived_since(now) >= 10).then_some(())
        })
        .await;
        let gap = self.longest_gap(since, Instant::now());
        let errors = self.close();
        assert!(errors.is_empty(), "the stream saw no error: {errors:?}");
        assert!(gap < cut, "no gap in the stream (longest {gap:?})");
    }

    /// Stops both ends: the errors either saw.
    pub fn close(self) -> Vec<String> {
        self.0.close()
    }
}

/// A packet capture on every interface of a namespace, until stopped.
pub struct Capture {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<(usize, Vec<u8>)>>,
}

impl Capture {
    /// Starts capturing in `ns`; frames are seen from the moment this returns.
    pub fn start(ns: &Netns) -> Capture {
        use nix::sys::socket::{self, AddressFamily, LinkAddr, SockFlag, SockProtocol, SockType};
        use std::os::fd::AsRawFd as _;
        let fd = ns.run(|| {
            socket::socket(
                AddressFamily::Packet,
                SockType::Raw,
                SockFlag::empty(),
                SockProtocol::EthAll,
            )
            .unwrap()
        });
        let timeout = nix::sys::time::TimeVal::new(0, 100_000);
        socket::setsockopt(&fd, socket::sockopt::ReceiveTimeout, &timeout).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut frames = Vec::new();
            let mut buf = vec![0u8; 65_536];
            while !stopped.load(Ordering::Relaxed) {
                if let Ok((n, Some(from))) = socket::recvfrom::<LinkAddr>(fd.as_raw_fd(), &mut buf)
                {
                    frames.push((from.ifindex(), buf[..n].to_vec()));
                }
            }
            frames
        });
        Capture { stop, thread }
    }

    /// The frames seen, with the ifindex each was seen on.
    pub fn stop(self) -> Vec<(usize, Vec<u8>)> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// Whether `needle` occurs in `haystack`.
pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// An Ethernet frame's IP protocol and UDP ports, when it is IPv4 or IPv6.
pub fn ip_transport(frame: &[u8]) -> Option<(u8, Option<(u16, u16)>)> {
    let ethertype = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    let (proto, l4) = match ethertype {
        0x0800 => {
            let ihl = usize::from(frame.get(14)? & 0x0f) * 4;
            (*frame.get(14 + 9)?, 14 + ihl)
        }
        0x86DD => (*frame.get(14 + 6)?, 14 + 40),
        _ => return None,
    };
    let ports = (proto == 17).then(|| {
        let p = |i: usize| u16::from_be_bytes([frame[l4 + i], frame[l4 + i + 1]]);
        (p(0), p(2))
    });
    Some((proto, ports))
}

/// Asserts that `frames` (seen on a link between nodes) hold nothing but WireGuard's
/// UDP (and ARP, IPv6 neighbour discovery), no plaintext marker, and at least
/// `at_least` WireGuard frames. Returns how many WireGuard frames there were.
pub fn only_wireguard(frames: &[&Vec<u8>], at_least: usize) -> usize {
    let port = weft_wireguard::LISTEN_PORT;
    let mut tunnelled = 0;
    for f in frames {
        assert!(!contains(f, MARKER), "plaintext on the link");
        match ip_transport(f) {
            None => {}              // ARP
            Some((0 | 58, _)) => {} // IPv6 neighbour discovery, MLD (hop-by-hop)
            Some((17, Some((s, d)))) => {
                assert!(s == port && d == port, "UDP {s} -> {d} on the link");
                tunnelled += 1;
            }
            Some(other) => panic!("not WireGuard on the link: {other:?}"),
        }
    }
    assert!(
        tunnelled >= at_least,
        "the traffic crossed the link as WireGuard UDP ({tunnelled} frames, {at_least} expected)"
    );
    tunnelled
}

/// A pod's ipcache entry in cluster `cluster_id`, tunnelled to its node and keyed for
/// WireGuard (0xFF). Its identity is its cluster's (the cluster ID in bits 16–23).
pub fn tunnelled_pod_json(cluster_id: u32, ip: &str, node: &str) -> String {
    let id = cluster_id << 16 | 0x1171;
    format!(r#"{{"IP":"{ip}","Mask":null,"HostIP":"{node}","ID":{id},"Key":255,"Metadata":""}}"#)
}

/// The WireGuard peers of a `weftd status -o json`.
pub fn wireguard_peers(status: &serde_json::Value) -> Vec<serde_json::Value> {
    status["wireguard"]["peers"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}
