//! An endpoint's veth, addresses and routes set up through rtnetlink between two
//! namespaces the test owns (a node and a container, no route out of either): a TCP
//! connection from the container reaches an address of the node and back; a retried
//! attach replaces what the first left; detach removes the pair; check notices a
//! missing address.

use weft_testkit as support;

use std::io::{Read as _, Write as _};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;
use support::netns::Netns;
use weft_endpoint::link::{self, Plan};

fn plan(container: &Netns) -> Plan {
    Plan {
        key: format!("c0ffee-{}/eth0", std::process::id()),
        netns: container.path(),
        ifname: "eth0".into(),
        addresses: vec!["10.61.0.5".parse().unwrap()],
        gateways: vec!["10.61.0.1".parse().unwrap()],
        mtu: 1400,
    }
}

/// Node `node` listens on 192.168.61.1:7000 (on its loopback); the container connects
/// and exchanges a line.
fn round_trip(node: &Netns, container: &Netns) -> std::io::Result<String> {
    let listener = node.run(|| TcpListener::bind("192.168.61.1:7000").unwrap());
    let server = std::thread::spawn(move || {
        let (mut s, peer) = listener.accept().unwrap();
        let mut buf = [0u8; 4];
        s.read_exact(&mut buf).unwrap();
        s.write_all(b"pong").unwrap();
        peer.ip()
    });
    let answer = container.run(|| -> std::io::Result<String> {
        let addr: SocketAddr = "192.168.61.1:7000".parse().unwrap();
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(3))?;
        s.set_read_timeout(Some(Duration::from_secs(3)))?;
        s.write_all(b"ping")?;
        let mut buf = [0u8; 4];
        s.read_exact(&mut buf)?;
        Ok(String::from_utf8_lossy(&buf).into_owned())
    })?;
    let peer = server.join().unwrap();
    assert_eq!(
        peer,
        "10.61.0.5".parse::<IpAddr>().unwrap(),
        "the pod's address"
    );
    Ok(answer)
}

#[tokio::test]
async fn a_container_is_attached_reaches_its_node_and_is_detached() {
    let node = Netns::new("weft-ep-node");
    let container = Netns::new("weft-ep-pod");
    node.ip(&["addr", "add", "192.168.61.1/32", "dev", "lo"]);
    let p = plan(&container);

    let first = link::attach(Some(&node.path()), &p).await.unwrap();
    // Retried, as after a crash mid-ADD: the leftover is replaced, not an error.
    let a = link::attach(Some(&node.path()), &p).await.unwrap();
    assert_eq!(a.host_ifname, link::host_ifname(&p.key));
    assert_ne!(a.host_ifindex, first.host_ifindex, "a new pair");
    assert_eq!(a.container_mac.len(), 17, "{a:?}");
    assert_eq!(round_trip(&node, &container).unwrap(), "pong");
    link::check(&p).await.unwrap();
    assert_eq!(
        link::host_sides(Some(&node.path())).await.unwrap(),
        vec![a.host_ifname.clone()]
    );

    container.ip(&["addr", "del", "10.61.0.5/32", "dev", "eth0"]);
    let e = link::check(&p).await.unwrap_err();
    assert!(e.to_string().contains("10.61.0.5"), "{e}");

    link::detach(Some(&node.path()), &p.key).await.unwrap();
    link::detach(Some(&node.path()), &p.key).await.unwrap(); // idempotent
    assert!(link::host_sides(Some(&node.path()))
        .await
        .unwrap()
        .is_empty());
    let e = link::check(&p).await.unwrap_err();
    assert!(
        e.to_string().contains("eth0"),
        "the pair went with its host side: {e}"
    );
}

/// The control: without the host side's route, the same connection does not get
/// through, so the round trip above is the attachment's doing.
#[tokio::test]
async fn without_the_node_route_the_container_is_unreachable() {
    let node = Netns::new("weft-ep-node-ctl");
    let container = Netns::new("weft-ep-pod-ctl");
    node.ip(&["addr", "add", "192.168.61.1/32", "dev", "lo"]);
    let p = plan(&container);
    let a = link::attach(Some(&node.path()), &p).await.unwrap();
    node.ip(&["route", "del", "10.61.0.5/32", "dev", &a.host_ifname]);
    assert!(round_trip_fails(&node, &container));
    link::detach(Some(&node.path()), &p.key).await.unwrap();
}

fn round_trip_fails(node: &Netns, container: &Netns) -> bool {
    let listener = node.run(|| TcpListener::bind("192.168.61.1:7000").unwrap());
    let result = container.run(|| {
        let addr: SocketAddr = "192.168.61.1:7000".parse().unwrap();
        TcpStream::connect_timeout(&addr, Duration::from_secs(1))
    });
    drop(listener);
    result.is_err()
}
