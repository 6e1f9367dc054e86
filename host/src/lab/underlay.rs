//! The lab's underlay: a bridge in a namespace of its own, and each node's `eth0` on it
//! with the node's address. It carries node addresses only: no node has a route to
//! another node's pods but through WireGuard, and nothing has a route out of the lab.

use super::spec::{netns_path, NodeRef, Spec};
use crate::netlink::{self, failed, in_namespace, link};
use rtnetlink::{LinkBridge, LinkUnspec, LinkVeth};
use std::os::fd::AsRawFd as _;

/// The bridge's name, inside the underlay namespace.
pub const BRIDGE: &str = "br0";

/// Makes the bridge (up) in the underlay namespace.
///
/// # Errors
/// [`netlink::Error`] naming the step.
pub async fn bridge(spec: &Spec) -> Result<(), netlink::Error> {
    in_namespace(Some(&netns_path(&spec.underlay_netns())), |h| async move {
        h.link()
            .add(LinkBridge::new(BRIDGE).up().build())
            .execute()
            .await
            .map_err(failed(format!("create bridge {BRIDGE}")))?;
        up(&h, "lo").await
    })
    .await
}

/// Joins node `n` to the bridge: a veth whose underlay side is a bridge port and whose
/// other side is the node's `eth0`, with the node's address.
///
/// # Errors
/// [`netlink::Error`] naming the step.
pub async fn join(spec: &Spec, n: NodeRef) -> Result<(), netlink::Error> {
    let node_ns = netns_path(&spec.node_netns(n));
    let node = crate::netns::open(&node_ns)?;
    let fd = node.as_raw_fd();
    let port = spec.bridge_port(n);
    // The node's side is made with a temporary name: `eth0` may exist here.
    let temp = format!("{port}n");
    let (p, t) = (port.clone(), temp.clone());
    in_namespace(
        Some(&netns_path(&spec.underlay_netns())),
        move |h| async move {
            h.link()
                .add(LinkVeth::new(&p, &t).build())
                .execute()
                .await
                .map_err(failed(format!("create veth {p}")))?;
            let peer = link(&h, &t).await?.header.index;
            h.link()
                .set(LinkUnspec::new_with_index(peer).setns_by_fd(fd).build())
                .execute()
                .await
                .map_err(failed(format!("move {t} into the node's namespace")))?;
            let bridge = link(&h, BRIDGE).await?.header.index;
            let index = link(&h, &p).await?.header.index;
            h.link()
                .set(
                    LinkUnspec::new_with_index(index)
                        .controller(bridge)
                        .up()
                        .build(),
                )
                .execute()
                .await
                .map_err(failed(format!("put {p} on {BRIDGE}")))
        },
    )
    .await?;
    drop(node);
    let ip = Spec::node_ip(n);
    in_namespace(Some(&node_ns), move |h| async move {
        let index = link(&h, &temp).await?.header.index;
        h.link()
            .set(LinkUnspec::new_with_index(index).name("eth0").up().build())
            .execute()
            .await
            .map_err(failed(format!("rename {temp} to eth0")))?;
        h.address()
            .add(index, ip.into(), Spec::UNDERLAY_PREFIX)
            .execute()
            .await
            .map_err(failed(format!("address {ip} on eth0")))?;
        up(&h, "lo").await
    })
    .await
}

async fn up(h: &rtnetlink::Handle, name: &str) -> Result<(), netlink::Error> {
    let index = link(h, name).await?.header.index;
    h.link()
        .set(LinkUnspec::new_with_index(index).up().build())
        .execute()
        .await
        .map_err(failed(format!("set {name} up")))
}
