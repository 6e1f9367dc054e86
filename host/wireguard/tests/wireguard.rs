//! WireGuard devices run by `weft-wg` helpers in two namespaces: keys kept 0600 in the
//! state directory, traffic carried through the tunnel, and a device found intact by
//! a restarted agent. Needs root and /dev/net/tun.

use weft_testkit as support;

use std::net::UdpSocket;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::time::{Duration, Instant};
use support::netns::Netns;
use weft_wireguard::{NodeKey, WireGuardDevice, LISTEN_PORT};
use wireguard_control::{DeviceUpdate, PeerConfigBuilder};

/// Stops a helper even when the test fails.
struct Stop(WireGuardDevice);

impl Drop for Stop {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// Two nodes in two joined namespaces, each with a key and a device configured with
/// it, up, with a pod address: 10.200.0.1 on A, 10.200.0.2 on B. No peers yet.
struct Pair {
    // Dropped in this order: helpers, then namespaces.
    dev_a: Stop,
    dev_b: Stop,
    a: Netns,
    b: Netns,
    state: tempfile::TempDir,
    key_a: NodeKey,
    key_b: NodeKey,
    name_a: String,
}

impl Pair {
    /// Device names start with `prefix` (short: names are unique on the machine).
    fn new(test: &str, prefix: &str) -> Pair {
        let (a, b) = support::netns::joined_pair(test);
        let state = tempfile::tempdir().unwrap();
        let key_a = NodeKey::load_or_create(&state.path().join("a.key")).unwrap();
        let key_b = NodeKey::load_or_create(&state.path().join("b.key")).unwrap();
        let pid = std::process::id() % 100_000;
        let (name_a, name_b) = (format!("{prefix}a{pid}"), format!("{prefix}b{pid}"));
        let helper = Path::new(support::bin::weft_wg());
        let dev_a = Stop(WireGuardDevice::ensure(&name_a, Some(&a.path()), helper).unwrap());
        let dev_b = Stop(WireGuardDevice::ensure(&name_b, Some(&b.path()), helper).unwrap());
        dev_a.0.configure(&key_a).unwrap();
        dev_b.0.configure(&key_b).unwrap();
        for (ns, addr, name) in [
            (&a, "10.200.0.1/24", &name_a),
            (&b, "10.200.0.2/24", &name_b),
        ] {
            ns.ip(&["addr", "add", addr, "dev", name]);
            ns.ip(&["link", "set", name, "up"]);
        }
        Pair {
            dev_a,
            dev_b,
            a,
            b,
            state,
            key_a,
            key_b,
            name_a,
        }
    }
}

/// Sends `payload` from `sender` until `receiver` gets a datagram (the first packets
/// wait for the handshake), at most `within`; whether it was `payload`.
fn delivered(sender: &UdpSocket, receiver: &UdpSocket, payload: &[u8], within: Duration) -> bool {
    let to = receiver.local_addr().unwrap();
    let deadline = Instant::now() + within;
    let mut buf = [0u8; 64];
    while Instant::now() < deadline {
        let _ = sender.send_to(payload, to);
        if let Ok((n, _)) = receiver.recv_from(&mut buf) {
            return buf[..n] == *payload;
        }
    }
    false
}

#[test]
fn two_nodes_talk_through_the_tunnel_and_a_restart_finds_the_device_intact() {
    if !support::wireguard_available("wireguard tunnel") {
        return;
    }
    let Pair {
        dev_a,
        dev_b,
        a,
        b,
        state,
        key_a,
        key_b,
        name_a,
        ..
    } = &Pair::new("wg", "wt");
    let mode = std::fs::metadata(state.path().join("a.key"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(
        NodeKey::load_or_create(&state.path().join("a.key")).unwrap(),
        *key_a,
        "the key is kept across restarts"
    );
    let private = std::fs::read_to_string(state.path().join("a.key")).unwrap();
    let shown = format!("{key_a:?}");
    assert!(shown.contains(&key_a.public().to_base64()) && !shown.contains(private.trim()));

    if !Path::new("/sys/module/wireguard").exists() {
        assert_eq!(
            dev_a.0.backend(),
            "userspace",
            "no kernel WireGuard here: the userspace fallback"
        );
    }
    let peer = |key: &NodeKey, endpoint: &str, allowed: &str| {
        PeerConfigBuilder::new(key.public())
            .set_endpoint(format!("{endpoint}:{LISTEN_PORT}").parse().unwrap())
            .add_allowed_ip(allowed.parse().unwrap(), 32)
    };
    dev_a
        .0
        .apply(DeviceUpdate::new().add_peer(peer(key_b, "10.100.0.2", "10.200.0.2")))
        .unwrap();
    dev_b
        .0
        .apply(DeviceUpdate::new().add_peer(peer(key_a, "10.100.0.1", "10.200.0.1")))
        .unwrap();

    let sender = a.udp("10.200.0.1:0");
    let receiver = b.udp("10.200.0.2:7000");
    let tunnel = Duration::from_secs(10);
    assert!(delivered(&sender, &receiver, b"hello", tunnel));
    let listen = dev_a.0.get().unwrap();
    assert_eq!(listen.listen_port, Some(LISTEN_PORT));
    if dev_a.0.backend() == "userspace" {
        // Its `get` answers with the private key: root's alone.
        let socket = format!("/var/run/wireguard/{name_a}.sock");
        let mode = std::fs::metadata(&socket).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{socket}");
    }
    assert_eq!(listen.fwmark, Some(0x1E00));

    // A restarted agent finds the device running, with its peer and tunnel.
    let again =
        WireGuardDevice::ensure(name_a, Some(&a.path()), Path::new(support::bin::weft_wg()))
            .unwrap();
    assert_eq!(again.get().unwrap().peers.len(), 1);
    assert!(delivered(&sender, &receiver, b"after restart", tunnel));
}

fn remote_node(name: &str, ip: &str, key: &NodeKey) -> weft_model::Node {
    weft_model::Node {
        name: name.into(),
        cluster: "c2".into(),
        cluster_id: 2,
        ip_addresses: vec![weft_model::NodeAddress {
            kind: "InternalIP".into(),
            ip: ip.parse().unwrap(),
        }],
        wireguard_pub_key: key.public().to_base64(),
        ..weft_model::Node::default()
    }
}

#[test]
fn peers_follow_nodes_and_the_ipcache_and_restored_ones_wait_for_garbage_collection() {
    use std::collections::BTreeSet;
    use weft_state::ipcache::{Fact, IpCache, Owner, Prefix, Source};
    use weft_state::node::{NodeId, NodeListener as _};
    use weft_wireguard::PeerSync;

    if !support::wireguard_available("wireguard peers") {
        return;
    }
    let Pair {
        dev_a,
        dev_b,
        a,
        b,
        key_a,
        key_b,
        ..
    } = &Pair::new("wgp", "wp");
    // Node B's side is configured by hand: this test is about node A's agent.
    dev_b
        .0
        .apply(
            DeviceUpdate::new().add_peer(
                PeerConfigBuilder::new(key_a.public())
                    .set_endpoint(format!("10.100.0.1:{LISTEN_PORT}").parse().unwrap())
                    .add_allowed_ip("10.200.0.1".parse().unwrap(), 32),
            ),
        )
        .unwrap();
    let sender = a.udp("10.200.0.1:0");
    let receiver = b.udp("10.200.0.2:7000");
    let delivered = |payload: &[u8], within| delivered(&sender, &receiver, payload, within);
    let prefixes = |dev: &WireGuardDevice, key: &NodeKey| -> BTreeSet<String> {
        let peers = dev.peers().unwrap();
        let (_, allowed) = peers.iter().find(|(k, _)| k == key.public()).unwrap();
        allowed.iter().map(ToString::to_string).collect()
    };
    let local = NodeId {
        cluster: "c1".into(),
        name: "a".into(),
    };
    let pod_b: Prefix = "10.200.0.2/32".parse().unwrap();
    let tunnel_to_b = Fact {
        identity: Some(70_000),
        tunnel_peer: Some("10.100.0.2".parse().unwrap()),
        encrypt_key: 0xFF,
        ..Fact::default()
    };
    let owner = Owner::new(Source::ClusterMesh, "pod-b");

    // The first agent: node B and its pod's ipcache entry make the peer.
    let sync = PeerSync::start(dev_a.0.clone(), local.clone()).unwrap();
    let ipcache = IpCache::default();
    ipcache.add_listener(sync.clone());
    sync.on_upsert(&remote_node("b", "10.100.0.2", key_b), None);
    ipcache.upsert(pod_b, owner.clone(), tunnel_to_b.clone());
    sync.flush();
    assert_eq!(
        prefixes(&dev_a.0, key_b),
        BTreeSet::from(["10.100.0.2/32".into(), "10.200.0.2/32".into()])
    );
    assert!(delivered(b"first", Duration::from_secs(10)));
    // A peer nobody will claim after the restart.
    let stale = wireguard_control::Key::generate_private().get_public();
    dev_a
        .0
        .apply(DeviceUpdate::new().add_peer(
            PeerConfigBuilder::new(&stale).add_allowed_ip("10.250.0.0".parse().unwrap(), 24),
        ))
        .unwrap();
    drop((sync, ipcache));

    // The restarted agent: node B is back, its pod's entry not yet. Nothing restored
    // is removed, so the pod stays reachable.
    let sync = PeerSync::start(dev_a.0.clone(), local).unwrap();
    let ipcache = IpCache::default();
    ipcache.add_listener(sync.clone());
    sync.on_upsert(&remote_node("b", "10.100.0.2", key_b), None);
    sync.flush();
    assert_eq!(sync.status().restored, 2);
    assert!(sync.status().restoring);
    assert!(prefixes(&dev_a.0, key_b).contains("10.200.0.2/32"));
    assert_eq!(dev_a.0.peers().unwrap().len(), 2);
    assert!(delivered(b"during restart", Duration::from_secs(10)));

    // Garbage collection: the stale peer goes, node B's peer stays without the
    // AllowedIP nobody claims. That is what collecting early would have cut.
    let report = sync.collect_garbage();
    assert_eq!(report.removed, [stale.to_base64()]);
    assert_eq!(report.kept, [key_b.public().to_base64()]);
    assert_eq!(report.trimmed, ["10.200.0.2/32"]);
    let status = sync.status();
    assert!(!status.restoring);
    let [peer] = &status.peers[..] else {
        panic!("one peer: {:?}", status.peers)
    };
    assert_eq!(peer.node.as_deref(), Some("c2/b"));
    assert_eq!(peer.endpoint.as_deref(), Some("10.100.0.2:51871"));
    assert_eq!(peer.allowed_ips, 1);
    assert!(
        peer.handshake_seconds_ago.is_some_and(|s| s < 60),
        "a handshake this minute, not in 1970: {peer:?}"
    );
    assert_eq!(dev_a.0.peers().unwrap().len(), 1);
    assert_eq!(
        prefixes(&dev_a.0, key_b),
        BTreeSet::from(["10.100.0.2/32".into()])
    );
    assert!(!delivered(b"unclaimed", Duration::from_secs(1)));
    // The entry arrives: the AllowedIP is back, and so is the traffic.
    ipcache.upsert(pod_b, owner, tunnel_to_b);
    sync.flush();
    assert!(delivered(b"again", Duration::from_secs(10)));
}

#[test]
fn the_agents_device_gets_the_native_mtu_less_the_overhead_and_keeps_its_key() {
    use weft_wireguard::{link, NodeWireGuard, NodeWireGuardConfig};

    if !support::wireguard_available("wireguard mtu") {
        return;
    }
    let (a, _b) = support::netns::joined_pair("wgm");
    a.ip(&["link", "set", "weftv0", "mtu", "1400"]);
    let state = tempfile::tempdir().unwrap();
    let name = format!("wgm{}", std::process::id() % 100_000);
    let mut config = NodeWireGuardConfig::new(name.clone(), Some(a.path()));
    config.helper = support::bin::weft_wg().into();
    config.mtu_device = Some("weftv0".into());
    let local = weft_state::node::NodeId {
        cluster: "c1".into(),
        name: "a".into(),
    };
    let wg = NodeWireGuard::start(&config, state.path(), local.clone()).unwrap();
    let _stop = Stop(WireGuardDevice::named(&name).unwrap());
    let device_mtu = a.run(|| link::mtu(&name)).unwrap();
    assert_eq!(device_mtu, 1400 - link::WIREGUARD_OVERHEAD);
    // A restarted agent: the same key, the device found running.
    let again = NodeWireGuard::start(&config, state.path(), local.clone()).unwrap();
    assert_eq!(again.key, wg.key);
    assert_eq!(again.peers.status().backend, wg.peers.status().backend);

    // A native device that is not there is an error naming it.
    config.mtu_device = Some("nosuchdev0".into());
    let err = NodeWireGuard::start(&config, state.path(), local)
        .err()
        .expect("no such native device");
    assert!(
        weft_sys::error_chain(&err).contains("nosuchdev0"),
        "{err:?}"
    );
}

#[test]
fn a_device_whose_helper_died_is_opened_again_with_its_peers() {
    use weft_state::node::NodeListener as _;
    use weft_wireguard::{NodeWireGuard, NodeWireGuardConfig};

    if !support::wireguard_available("wireguard revive") {
        return;
    }
    let (a, _b) = support::netns::joined_pair("wgv");
    let state = tempfile::tempdir().unwrap();
    let name = format!("wgv{}", std::process::id() % 100_000);
    let _stop = Stop(WireGuardDevice::named(&name).unwrap());
    let mut config = NodeWireGuardConfig::new(name.clone(), Some(a.path()));
    config.helper = support::bin::weft_wg().into();
    let local = weft_state::node::NodeId {
        cluster: "c1".into(),
        name: "a".into(),
    };
    let wg = NodeWireGuard::start(&config, state.path(), local).unwrap();
    let key_b = NodeKey::load_or_create(&state.path().join("b.key")).unwrap();
    wg.peers
        .on_upsert(&remote_node("b", "10.100.0.2", &key_b), None);
    wg.peers.flush();
    let device = WireGuardDevice::named(&name).unwrap();
    assert_eq!(device.peers().unwrap().len(), 1);

    // The helper dies (killed, as by the OOM killer); its TUN goes with it.
    let pid: i32 = std::fs::read_to_string(format!("/var/run/wireguard/{name}.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    device.stop();
    let gone = Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| !stat.contains(") Z "))
    {
        assert!(Instant::now() < gone, "weft-wg {pid} still running");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(device.get().is_err(), "the device is gone");
    let status = wg.peers.status();
    assert!(
        status.device_error.is_some() && status.peers.is_empty(),
        "the status says so: {status:?}"
    );

    // The next change finds it gone: it is opened again, with every peer.
    let mut moved = remote_node("b", "10.100.0.2", &key_b);
    moved.ip_addresses.push(weft_model::NodeAddress {
        kind: "InternalIP".into(),
        ip: "10.100.0.22".parse().unwrap(),
    });
    wg.peers.on_upsert(&moved, None);
    wg.peers.flush();
    let status = wg.peers.status();
    assert_eq!(status.revived, 1, "{status:?}");
    assert_eq!(status.peers.len(), 1, "{status:?}");
    assert_eq!(status.peers[0].node.as_deref(), Some("c2/b"));
    assert_eq!(status.peers[0].allowed_ips, 2, "both node IPs: {status:?}");
    let back = a.run(|| weft_wireguard::link::mtu(&name));
    assert!(back.is_ok(), "the device's link is back: {back:?}");
}

/// The control crate's socket calls have no timeout, and with no socket it starts a
/// userspace implementation itself. A helper that accepts and never answers costs one
/// bounded wait per call (never a thread per caller), and a missing socket is an error
/// naming it, with nothing started.
#[test]
fn a_hung_helper_or_a_missing_socket_is_an_error_in_bounded_time() {
    let name = format!("wgh{}", std::process::id());
    std::fs::create_dir_all("/var/run/wireguard").unwrap();
    let socket = Path::new("/var/run/wireguard").join(format!("{name}.sock"));
    let _ = std::fs::remove_file(&socket);
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    // Accepts every connection and holds it, reading nothing, answering nothing.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming() {
            held.push(conn);
        }
    });
    let device = WireGuardDevice::named(&name).unwrap();
    let (done, results) = std::sync::mpsc::channel();
    for _ in 0..3 {
        let (device, done) = (device.clone(), done.clone());
        std::thread::spawn(move || {
            let _ = done.send(weft_sys::error_chain(&device.get().map(drop).unwrap_err()));
        });
    }
    // Each caller hears back within the UAPI timeout, the queue's wait included.
    let bound = weft_wireguard::UAPI_TIMEOUT * 2 + Duration::from_secs(5);
    for _ in 0..3 {
        let error = results
            .recv_timeout(bound)
            .expect("a caller waited past the bound");
        assert!(
            error.contains("did not answer") || error.contains("busy"),
            "{error}"
        );
    }
    std::fs::remove_file(&socket).unwrap();

    // No socket: the crate would start `wireguard-go`; the device says it is gone.
    let gone = WireGuardDevice::named(&format!("wgn{}", std::process::id())).unwrap();
    let error = weft_sys::error_chain(
        &gone
            .apply(DeviceUpdate::new().set_listen_port(LISTEN_PORT))
            .unwrap_err(),
    );
    assert!(error.contains("UAPI socket is gone"), "{error}");
}
