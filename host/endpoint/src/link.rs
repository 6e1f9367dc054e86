//! An endpoint's interfaces, addresses and routes, through rtnetlink: a veth pair whose
//! host side stays in the node's namespace and whose other side becomes the
//! container's interface.
//!
//! Inside the container: the endpoint's addresses (/32, /128), a link route to the
//! gateway and the default route through it, and a permanent neighbour entry mapping
//! the gateway to the host side's MAC (nothing on the node owns the gateway address:
//! the host side answers for it). On the node: a route to each address through the
//! host side.
//!
//! Every step is idempotent, and the names are derived from the endpoint's key, so an
//! ADD retried after a crash, a DEL or a GC finds what an earlier attempt left: deleting
//! the host side removes the pair wherever its other end is.

use futures::TryStreamExt as _;
use rtnetlink::packet_route::neighbour::NeighbourState;
use rtnetlink::packet_route::route::RouteScope;
use rtnetlink::{LinkUnspec, LinkVeth, RouteMessageBuilder};
use sha2::Digest as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::AsRawFd as _;
use std::path::{Path, PathBuf};

pub use weft_sys::netlink::Error;
use weft_sys::netlink::{delete_link, failed, in_namespace, link, mac, name};

/// Prefix of the host side's name; with the key's hash, at most 15 bytes.
pub const HOST_PREFIX: &str = "wft";

/// The host side's name for the endpoint `key`: `wft` and 11 hex digits of its hash.
pub fn host_ifname(key: &str) -> String {
    format!(
        "{HOST_PREFIX}{}",
        &hex::encode(sha2::Sha256::digest(key))[..11]
    )
}

/// The container side's name until it is in the container and renamed.
fn peer_ifname(key: &str) -> String {
    format!("wfp{}", &hex::encode(sha2::Sha256::digest(key))[..11])
}

/// What to set up for one endpoint.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The endpoint's key (container ID and interface).
    pub key: String,
    /// The container's network namespace.
    pub netns: PathBuf,
    /// The interface to create in it.
    pub ifname: String,
    /// Its addresses, one per family.
    pub addresses: Vec<IpAddr>,
    /// The gateway of each family, by the same order.
    pub gateways: Vec<IpAddr>,
    /// The MTU of both sides.
    pub mtu: u32,
}

/// What was set up.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Attachment {
    /// The host side.
    pub host_ifname: String,
    /// Its index in the node's namespace.
    pub host_ifindex: u32,
    /// Its MAC.
    pub host_mac: String,
    /// The container side's MAC.
    pub container_mac: String,
}

/// Sets up the endpoint of `plan`, with its host side in `node_netns` (the agent's own
/// namespace when `None`). A leftover of an earlier attempt is removed first.
///
/// # Errors
/// [`Error`] naming the step and the interface.
pub async fn attach(node_netns: Option<&Path>, plan: &Plan) -> Result<Attachment, Error> {
    let container = weft_sys::netns::open(&plan.netns)?;
    let host_if = host_ifname(&plan.key);
    let peer_if = peer_ifname(&plan.key);
    let (p, hi, pi) = (plan.clone(), host_if.clone(), peer_if.clone());
    let fd = container.as_raw_fd();
    let (host_ifindex, host_mac) = in_namespace(node_netns, move |h| async move {
        delete_link(&h, &hi).await?;
        delete_link(&h, &pi).await?;
        h.link()
            .add(LinkVeth::new(&hi, &pi).mtu(p.mtu).build())
            .execute()
            .await
            .map_err(failed(format!("create veth {hi}")))?;
        let peer = link(&h, &pi).await?.header.index;
        h.link()
            .set(LinkUnspec::new_with_index(peer).setns_by_fd(fd).build())
            .execute()
            .await
            .map_err(failed(format!("move {pi} into {}", p.netns.display())))?;
        let host = link(&h, &hi).await?;
        let index = host.header.index;
        h.link()
            .set(LinkUnspec::new_with_index(index).up().build())
            .execute()
            .await
            .map_err(failed(format!("set {hi} up")))?;
        for ip in &p.addresses {
            h.route()
                .add(host_route(*ip, index))
                .replace()
                .execute()
                .await
                .map_err(failed(format!("route {ip} via {hi}")))?;
        }
        Ok((index, mac(&host)))
    })
    .await?;
    drop(container);
    let (p, mac_bytes) = (plan.clone(), parse_mac(&host_mac));
    let container_mac = in_namespace(Some(&plan.netns), move |h| async move {
        let peer = link(&h, &peer_if).await?.header.index;
        h.link()
            .set(
                LinkUnspec::new_with_index(peer)
                    .name(p.ifname.clone())
                    .up()
                    .build(),
            )
            .execute()
            .await
            .map_err(failed(format!(
                "rename {peer_if} to {} and set it up",
                p.ifname
            )))?;
        if let Ok(lo) = link(&h, "lo").await {
            let _ = h
                .link()
                .set(LinkUnspec::new_with_index(lo.header.index).up().build())
                .execute()
                .await;
        }
        for ip in &p.addresses {
            let len = if ip.is_ipv4() { 32 } else { 128 };
            h.address()
                .add(peer, *ip, len)
                .replace()
                .execute()
                .await
                .map_err(failed(format!("address {ip}/{len} on {}", p.ifname)))?;
        }
        for gw in &p.gateways {
            h.neighbours()
                .add(peer, *gw)
                .link_layer_address(&mac_bytes)
                .state(NeighbourState::Permanent)
                .replace()
                .execute()
                .await
                .map_err(failed(format!("neighbour {gw} on {}", p.ifname)))?;
            h.route()
                .add(host_route(*gw, peer))
                .replace()
                .execute()
                .await
                .map_err(failed(format!("route to the gateway {gw}")))?;
            h.route()
                .add(default_route(*gw, peer))
                .replace()
                .execute()
                .await
                .map_err(failed(format!("default route via {gw}")))?;
        }
        Ok(mac(&link(&h, &p.ifname).await?))
    })
    .await?;
    Ok(Attachment {
        host_ifname: host_if,
        host_ifindex,
        host_mac,
        container_mac,
    })
}

/// Removes the endpoint `key`'s interfaces (the pair goes with its host side);
/// nothing when they are gone.
///
/// # Errors
/// [`Error`] when the kernel refuses.
pub async fn detach(node_netns: Option<&Path>, key: &str) -> Result<(), Error> {
    let (host_if, peer_if) = (host_ifname(key), peer_ifname(key));
    in_namespace(node_netns, move |h| async move {
        delete_link(&h, &host_if).await?;
        delete_link(&h, &peer_if).await
    })
    .await
}

/// Removes the host side `name` (and with it its pair); nothing when it is gone.
///
/// # Errors
/// [`Error`] when the kernel refuses.
pub async fn remove_host_side(node_netns: Option<&Path>, name: &str) -> Result<(), Error> {
    let name = name.to_owned();
    in_namespace(
        node_netns,
        move |h| async move { delete_link(&h, &name).await },
    )
    .await
}

/// The host sides in `node_netns` (names starting with [`HOST_PREFIX`]).
///
/// # Errors
/// [`Error`] when the links cannot be listed.
pub async fn host_sides(node_netns: Option<&Path>) -> Result<Vec<String>, Error> {
    in_namespace(node_netns, |h| async move {
        let mut names = Vec::new();
        let mut links = h.link().get().execute();
        while let Some(l) = links
            .try_next()
            .await
            .map_err(failed("list links".into()))?
        {
            if let Some(name) = name(&l) {
                if name.starts_with(HOST_PREFIX) {
                    names.push(name);
                }
            }
        }
        Ok(names)
    })
    .await
}

/// Whether the container side of `plan` is as [`attach`] left it: the interface, up,
/// with its addresses.
///
/// # Errors
/// [`Error`] naming what is missing.
pub async fn check(plan: &Plan) -> Result<(), Error> {
    let p = plan.clone();
    in_namespace(Some(&plan.netns), move |h| async move {
        let l = link(&h, &p.ifname).await?;
        let index = l.header.index;
        let mut have = Vec::new();
        let mut addrs = h.address().get().set_link_index_filter(index).execute();
        while let Some(a) = addrs
            .try_next()
            .await
            .map_err(failed(format!("list addresses of {}", p.ifname)))?
        {
            for attr in a.attributes {
                if let rtnetlink::packet_route::address::AddressAttribute::Address(ip) = attr {
                    have.push(ip);
                }
            }
        }
        for ip in &p.addresses {
            if !have.contains(ip) {
                return Err(Error::Unexpected {
                    what: format!("check {}", p.ifname),
                    found: format!("address {ip} is missing"),
                });
            }
        }
        Ok(())
    })
    .await
}

fn parse_mac(mac: &str) -> Vec<u8> {
    mac.split(':')
        .filter_map(|b| u8::from_str_radix(b, 16).ok())
        .collect()
}

/// `ip/32` (or `/128`) through interface `index`, scope link.
fn host_route(ip: IpAddr, index: u32) -> rtnetlink::packet_route::route::RouteMessage {
    match ip {
        IpAddr::V4(a) => RouteMessageBuilder::<Ipv4Addr>::new()
            .destination_prefix(a, 32)
            .output_interface(index)
            .scope(RouteScope::Link)
            .build(),
        IpAddr::V6(a) => RouteMessageBuilder::<Ipv6Addr>::new()
            .destination_prefix(a, 128)
            .output_interface(index)
            .build(),
    }
}

/// The default route of `gw`'s family through `gw` on interface `index`.
fn default_route(gw: IpAddr, index: u32) -> rtnetlink::packet_route::route::RouteMessage {
    match gw {
        IpAddr::V4(a) => RouteMessageBuilder::<Ipv4Addr>::new()
            .gateway(a)
            .output_interface(index)
            .build(),
        IpAddr::V6(a) => RouteMessageBuilder::<Ipv6Addr>::new()
            .gateway(a)
            .output_interface(index)
            .build(),
    }
}
