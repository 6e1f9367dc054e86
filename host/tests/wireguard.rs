//! WireGuard devices run by `weft-wg` helpers in two namespaces: keys kept 0600 in the
//! state directory, traffic carried through the tunnel, and a device found intact by
//! a restarted agent. Needs root and /dev/net/tun.

mod support;

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::time::{Duration, Instant};
use weft::wireguard::{NodeKey, UserspaceDevice, LISTEN_PORT};
use wireguard_control::{DeviceUpdate, PeerConfigBuilder};

const HELPER: &str = env!("CARGO_BIN_EXE_weft-wg");

/// Stops a helper even when the test fails.
struct Stop(UserspaceDevice);

impl Drop for Stop {
    fn drop(&mut self) {
        self.0.stop();
    }
}

#[test]
fn two_nodes_talk_through_the_tunnel_and_a_restart_finds_the_device_intact() {
    if !support::bpf_available("wireguard tunnel") || !Path::new("/dev/net/tun").exists() {
        return;
    }
    let (a, b) = support::netns::joined_pair("wg");
    let state = tempfile::tempdir().unwrap();
    let key_a = NodeKey::load_or_create(&state.path().join("a.key")).unwrap();
    let key_b = NodeKey::load_or_create(&state.path().join("b.key")).unwrap();
    let mode = std::fs::metadata(state.path().join("a.key"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(
        NodeKey::load_or_create(&state.path().join("a.key")).unwrap(),
        key_a,
        "the key is kept across restarts"
    );
    let private = std::fs::read_to_string(state.path().join("a.key")).unwrap();
    let shown = format!("{key_a:?}");
    assert!(shown.contains(&key_a.public().to_base64()) && !shown.contains(private.trim()));

    let pid = std::process::id() % 100_000;
    let (name_a, name_b) = (format!("wta{pid}"), format!("wtb{pid}"));
    let dev_a = Stop(UserspaceDevice::ensure(&name_a, Some(&a.path()), Path::new(HELPER)).unwrap());
    let dev_b = Stop(UserspaceDevice::ensure(&name_b, Some(&b.path()), Path::new(HELPER)).unwrap());
    dev_a.0.configure(&key_a).unwrap();
    dev_b.0.configure(&key_b).unwrap();
    let peer = |key: &NodeKey, endpoint: &str, allowed: &str| {
        PeerConfigBuilder::new(key.public())
            .set_endpoint(format!("{endpoint}:{LISTEN_PORT}").parse().unwrap())
            .add_allowed_ip(allowed.parse().unwrap(), 32)
    };
    dev_a
        .0
        .apply(DeviceUpdate::new().add_peer(peer(&key_b, "10.100.0.2", "10.200.0.2")))
        .unwrap();
    dev_b
        .0
        .apply(DeviceUpdate::new().add_peer(peer(&key_a, "10.100.0.1", "10.200.0.1")))
        .unwrap();
    a.ip(&["addr", "add", "10.200.0.1/24", "dev", &name_a]);
    a.ip(&["link", "set", &name_a, "up"]);
    b.ip(&["addr", "add", "10.200.0.2/24", "dev", &name_b]);
    b.ip(&["link", "set", &name_b, "up"]);

    let sender = a.udp("10.200.0.1:0");
    let receiver = b.udp("10.200.0.2:7000");
    let through_tunnel = |payload: &[u8]| {
        // The first packets wait for the handshake: send until one arrives.
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut buf = [0u8; 64];
        while Instant::now() < deadline {
            sender.send_to(payload, "10.200.0.2:7000").unwrap();
            if let Ok((n, _)) = receiver.recv_from(&mut buf) {
                return buf[..n].to_vec();
            }
        }
        panic!("nothing came through the tunnel in 10 s");
    };
    assert_eq!(through_tunnel(b"hello"), b"hello");
    let listen = dev_a.0.get().unwrap();
    assert_eq!(listen.listen_port, Some(LISTEN_PORT));
    assert_eq!(listen.fwmark, Some(0x1E00));

    // A restarted agent finds the device running, with its peer and tunnel.
    let again = UserspaceDevice::ensure(&name_a, Some(&a.path()), Path::new(HELPER)).unwrap();
    assert_eq!(again.get().unwrap().peers.len(), 1);
    assert_eq!(through_tunnel(b"after restart"), b"after restart");
}
