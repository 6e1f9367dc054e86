//! The datapath on real packets: two network namespaces joined by a veth; the "native
//! device" carries `weft_to_netdev` (TCX egress) and a TUN device stands in for
//! WireGuard. Also map generations: the attached one serves until the switch.
//! Needs root and BPF; says so loudly and does nothing without them.

use weft_testkit as support;

use std::net::{Ipv4Addr, UdpSocket};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use support::netns::{Netns, Tun};
use weft_datapath::{Datapath, DatapathConfig, Endpoint, MapWriter};
use weft_state::ipcache::{Fact, IpCache, Owner, Prefix, Source};

const POD_ID: u32 = 70_000;
const PORT: u16 = 5000;
const KEYED: Ipv4Addr = Ipv4Addr::new(10, 2, 0, 7);
const PLAIN: Ipv4Addr = Ipv4Addr::new(10, 3, 0, 7);

/// Node A (10.100.0.1, with the program and the TUN) and node B (10.100.0.2, which
/// owns 10.2.0.7 and 10.3.0.7 and listens on them), joined by a veth.
struct Lab {
    a: Netns,
    /// Held so that node B lives as long as the lab.
    _b: Netns,
    tun: Tun,
    tun_ifindex: u32,
    root: PathBuf,
    sender: UdpSocket,
    receiver: UdpSocket,
}

impl Lab {
    fn start(test: &str) -> Option<Lab> {
        if !support::bpf_available(test) {
            return None;
        }
        let (a, b) = support::netns::joined_pair(test);
        let tun = Tun::new(&a, "weftwg0");
        a.ip(&["link", "set", "weftwg0", "up"]);
        let tun_ifindex = a.ifindex("weftwg0");
        let root = PathBuf::from(format!(
            "/sys/fs/bpf/weft-test-{}-{test}",
            std::process::id()
        ));
        Datapath::remove_all(&root);
        let sender = a.udp("10.100.0.1:0");
        let receiver = b.udp(&format!("0.0.0.0:{PORT}"));
        Some(Lab {
            a,
            _b: b,
            tun,
            tun_ifindex,
            root,
            sender,
            receiver,
        })
    }

    fn endpoint(&self) -> Endpoint {
        Endpoint {
            name: "node-a-weftv0".into(),
            netns: Some(self.a.path()),
            device: "weftv0".into(),
        }
    }

    /// A new generation (as a restarted agent loads), filled from `entries`.
    fn generation(&self, entries: &[(&str, u32, u8)]) -> (Datapath, IpCache, Arc<MapWriter>) {
        let mut dp = Datapath::open(&self.root).unwrap();
        dp.set_config(DatapathConfig {
            wg_ifindex: self.tun_ifindex,
            flags: 0,
        })
        .unwrap();
        let ipcache = IpCache::default();
        let writer = MapWriter::start(dp.ipcache_map());
        ipcache.add_listener(writer.clone());
        put(&ipcache, entries);
        writer.flush();
        (dp, ipcache, writer)
    }

    fn send(&self, to: Ipv4Addr, payload: &[u8]) {
        self.sender.send_to(payload, (to, PORT)).unwrap();
    }

    fn send_marked(&self, to: Ipv4Addr, payload: &[u8], mark: u32) {
        let s = self.a.udp("10.100.0.1:0");
        nix::sys::socket::setsockopt(&s, nix::sys::socket::sockopt::Mark, &mark).unwrap();
        s.send_to(payload, (to, PORT)).unwrap();
    }

    /// What node B received (its socket's read timeout bounds the wait).
    fn received(&self) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        let mut buf = [0u8; 1500];
        while let Ok((n, _)) = self.receiver.recv_from(&mut buf) {
            got.push(buf[..n].to_vec());
        }
        got
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        Datapath::remove_all(&self.root);
    }
}

/// Upserts `(prefix, identity, key)` entries as clustermesh facts.
fn put(ipcache: &IpCache, entries: &[(&str, u32, u8)]) {
    for (prefix, identity, key) in entries {
        let prefix: Prefix = prefix.parse().unwrap();
        let fact = Fact {
            identity: Some(*identity),
            encrypt_key: *key,
            ..Fact::default()
        };
        ipcache.upsert(
            prefix,
            Owner::new(Source::ClusterMesh, prefix.to_string()),
            fact,
        );
    }
}

const FULL: &[(&str, u32, u8)] = &[
    ("10.100.0.1/32", POD_ID, 0),      // node A's address stands for a pod
    ("10.2.0.0/16", POD_ID + 1, 0xFF), // remote pods behind WireGuard
    ("10.3.0.0/16", POD_ID + 2, 0),    // remote pods without a key
];

#[test]
fn keyed_traffic_reaches_the_tun_the_rest_the_veth_and_marked_traffic_passes() {
    let Some(lab) = Lab::start("pkt") else { return };
    let (mut dp, _ipcache, _writer) = lab.generation(FULL);
    dp.switch(&lab.endpoint()).unwrap();

    lab.send(KEYED, b"secret");
    assert_eq!(lab.tun.destinations(Duration::from_secs(5)), [KEYED]);
    assert!(lab.received().is_empty(), "nothing keyed left on the veth");

    lab.send(PLAIN, b"plain");
    assert_eq!(lab.received(), [b"plain".to_vec()]);
    assert!(lab.tun.destinations(Duration::from_millis(200)).is_empty());

    lab.send_marked(KEYED, b"encrypted", 0x1E00);
    assert_eq!(
        lab.received(),
        [b"encrypted".to_vec()],
        "WireGuard's output passes"
    );

    // Control: without the program the keyed packet leaves on the veth in the clear.
    dp.detach("node-a-weftv0").unwrap();
    lab.send(KEYED, b"secret");
    assert_eq!(lab.received(), [b"secret".to_vec()]);
    assert!(lab.tun.destinations(Duration::from_millis(200)).is_empty());
}

#[test]
fn the_attached_generation_serves_until_the_switch_which_loses_nothing() {
    let Some(lab) = Lab::start("gen") else { return };
    let endpoint = lab.endpoint();
    let (mut first, ipcache1, writer1) = lab.generation(FULL);
    first.switch(&endpoint).unwrap();
    assert_eq!(
        first.generation_of(&endpoint.name),
        Some(first.generation())
    );
    let first_id = first.generation();
    // The agent stops: its links and generation stay pinned.
    drop((first, ipcache1, writer1));

    // The restarted agent's new generation is only partly filled: the old one serves.
    let (mut second, ipcache2, writer2) = lab.generation(&FULL[..1]);
    assert_eq!(second.generation_of(&endpoint.name), Some(first_id));
    lab.send(KEYED, b"during restart");
    assert_eq!(lab.tun.destinations(Duration::from_secs(5)), [KEYED]);
    assert!(lab.received().is_empty());

    // Filled, then switched while packets flow: none leaves in the clear.
    put(&ipcache2, &FULL[1..]);
    writer2.flush();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let sent = std::thread::scope(|s| {
        let sender = s.spawn(|| {
            let mut n = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || n < 200 {
                lab.send(KEYED, b"flowing");
                n += 1;
                std::thread::yield_now();
            }
            n
        });
        second.switch(&endpoint).unwrap();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        sender.join().unwrap()
    });
    assert!(sent >= 200);
    assert!(
        lab.received().is_empty(),
        "a packet left in the clear during the switch"
    );
    assert!(!lab.tun.destinations(Duration::from_secs(2)).is_empty());
    assert_eq!(
        second.generation_of(&endpoint.name),
        Some(second.generation())
    );
    assert!(
        !lab.root.join(format!("gen-{first_id}")).exists(),
        "the old generation is released once no link uses it"
    );

    // Control: switching to a generation whose map is not filled yet is what the
    // wait before the switch prevents: keyed traffic leaves in the clear.
    let (mut third, _ipcache3, _writer3) = lab.generation(&[]);
    third.switch(&endpoint).unwrap();
    lab.send(KEYED, b"too early");
    assert_eq!(lab.received(), [b"too early".to_vec()]);
    drop((ipcache2, writer2));
}
