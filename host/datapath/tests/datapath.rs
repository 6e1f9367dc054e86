//! The BPF datapath on this kernel: `weft_to_netdev` on synthetic packets
//! (`BPF_PROG_TEST_RUN`), one per decision, with the ipcache map filled by the map
//! writer from a real `IpCache`. Needs root and a bpffs; without them every test says
//! so loudly and does nothing.

use weft_testkit as support;

use std::net::IpAddr;
use support::bpf::Bpf;
use weft_datapath::{DatapathConfig, CONFIG_NODE_ENCRYPTION, TC_ACT_OK, TC_ACT_REDIRECT};
use weft_state::ipcache::{Owner, Prefix, Source};

const WG_IFINDEX: u32 = 4242;
const MARK_ENCRYPTED: u32 = 0x1E00;
const POD_ID: u32 = 70_000;

/// The shared harness, with a WireGuard device configured.
fn start(name: &str) -> Option<Bpf> {
    let mut b = Bpf::start(name)?;
    b.dp.set_config(DatapathConfig {
        wg_ifindex: WG_IFINDEX,
        flags: 0,
    })
    .unwrap();
    Some(b)
}

fn run(b: &mut Bpf, src: &str, dst: &str, mark: u32) -> u32 {
    b.writer.flush();
    let packet = packet(src.parse().unwrap(), dst.parse().unwrap());
    b.dp.test_run(&packet, mark, 1).unwrap().action
}

/// An Ethernet frame with an IPv4 or IPv6 header and a few bytes of UDP payload.
fn packet(src: IpAddr, dst: IpAddr) -> Vec<u8> {
    let mut p = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1];
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            p.extend_from_slice(&[0x08, 0x00]);
            p.extend_from_slice(&[0x45, 0, 0, 28, 0, 0, 0x40, 0, 64, 17, 0, 0]);
            p.extend_from_slice(&s.octets());
            p.extend_from_slice(&d.octets());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            p.extend_from_slice(&[0x86, 0xdd]);
            p.extend_from_slice(&[0x60, 0, 0, 0, 0, 8, 17, 64]);
            p.extend_from_slice(&s.octets());
            p.extend_from_slice(&d.octets());
        }
        _ => panic!("mixed families"),
    }
    p.extend_from_slice(&[0x30, 0x39, 0x30, 0x39, 0, 8, 0, 0]);
    p
}

#[test]
fn pod_to_a_destination_with_a_key_is_redirected_unless_already_encrypted() {
    let Some(mut b) = start("redirect") else {
        return;
    };
    b.put("10.1.0.5/32", POD_ID, 0); // a local pod
    b.put("10.2.0.7/32", POD_ID + 1, 0xFF); // a remote pod behind WireGuard
    b.put("10.3.0.7/32", POD_ID + 2, 0); // a remote pod without a key
    assert_eq!(run(&mut b, "10.1.0.5", "10.2.0.7", 0), TC_ACT_REDIRECT);
    assert_eq!(
        run(&mut b, "10.1.0.5", "10.2.0.7", MARK_ENCRYPTED),
        TC_ACT_OK,
        "WireGuard's own output passes"
    );
    // Another mark (say, 0x0E00 for IPsec) is not WireGuard's.
    assert_eq!(run(&mut b, "10.1.0.5", "10.2.0.7", 0x0E00), TC_ACT_REDIRECT);
    assert_eq!(run(&mut b, "10.1.0.5", "10.3.0.7", 0), TC_ACT_OK, "no key");
    assert_eq!(
        run(&mut b, "10.1.0.5", "10.9.9.9", 0),
        TC_ACT_OK,
        "no entry"
    );
    assert_eq!(
        run(&mut b, "10.8.0.1", "10.2.0.7", 0),
        TC_ACT_OK,
        "a source outside the cluster"
    );
    // Without a WireGuard device configured nothing is redirected.
    b.dp.set_config(DatapathConfig::default()).unwrap();
    assert_eq!(run(&mut b, "10.1.0.5", "10.2.0.7", 0), TC_ACT_OK);
}

#[test]
fn the_host_is_encrypted_only_with_node_encryption() {
    let Some(mut b) = start("host") else {
        return;
    };
    b.put("192.0.2.1/32", 1, 0); // this host
    b.put("192.0.2.2/32", 6, 0xFF); // a remote node
    b.put("10.2.0.7/32", POD_ID, 0xFF); // a remote pod
    assert_eq!(run(&mut b, "192.0.2.1", "10.2.0.7", 0), TC_ACT_OK);
    assert_eq!(run(&mut b, "192.0.2.1", "192.0.2.2", 0), TC_ACT_OK);
    b.dp.set_config(DatapathConfig {
        wg_ifindex: WG_IFINDEX,
        flags: CONFIG_NODE_ENCRYPTION,
    })
    .unwrap();
    assert_eq!(run(&mut b, "192.0.2.1", "10.2.0.7", 0), TC_ACT_REDIRECT);
    assert_eq!(run(&mut b, "192.0.2.1", "192.0.2.2", 0), TC_ACT_REDIRECT);
    // Traffic from a remote node passing through is not this node's to encrypt.
    assert_eq!(run(&mut b, "192.0.2.2", "10.2.0.7", 0), TC_ACT_OK);
}

#[test]
fn the_longest_prefix_decides() {
    let Some(mut b) = start("lpm") else {
        return;
    };
    b.put("10.1.0.5/32", POD_ID, 0);
    b.put("10.2.0.0/24", POD_ID + 1, 0xFF);
    b.put("10.2.0.7/32", POD_ID + 2, 0);
    assert_eq!(
        run(&mut b, "10.1.0.5", "10.2.0.8", 0),
        TC_ACT_REDIRECT,
        "the /24"
    );
    assert_eq!(
        run(&mut b, "10.1.0.5", "10.2.0.7", 0),
        TC_ACT_OK,
        "the /32 inside it"
    );
    // Removing the /32 from the ipcache removes it from the map: the /24 decides.
    let p: Prefix = "10.2.0.7/32".parse().unwrap();
    b.ipcache
        .remove(p, &Owner::new(Source::ClusterMesh, p.to_string()));
    assert_eq!(run(&mut b, "10.1.0.5", "10.2.0.7", 0), TC_ACT_REDIRECT);
}

#[test]
fn ipv6_is_decided_alike() {
    let Some(mut b) = start("ipv6") else {
        return;
    };
    b.put("fd00:1::5/128", POD_ID, 0);
    b.put("fd00:2::/64", POD_ID + 1, 0xFF);
    assert_eq!(run(&mut b, "fd00:1::5", "fd00:2::7", 0), TC_ACT_REDIRECT);
    assert_eq!(
        run(&mut b, "fd00:1::5", "fd00:2::7", MARK_ENCRYPTED),
        TC_ACT_OK
    );
    assert_eq!(run(&mut b, "fd00:1::5", "fd00:3::7", 0), TC_ACT_OK);
    assert_eq!(run(&mut b, "fd00:9::5", "fd00:2::7", 0), TC_ACT_OK);
}
