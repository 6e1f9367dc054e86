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
use rtnetlink::packet_route::link::{LinkAttribute, LinkMessage};
use rtnetlink::packet_route::neighbour::NeighbourState;
use rtnetlink::packet_route::route::RouteScope;
use rtnetlink::{Handle, LinkUnspec, LinkVeth, RouteMessageBuilder};
use sha2::Digest as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::AsRawFd as _;
use std::path::{Path, PathBuf};

/// What setting up or removing an endpoint's links can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The namespace cannot be opened or entered.
    #[error("network namespace {path}: {reason}")]
    Netns {
        /// The namespace.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A netlink request failed.
    #[error("{what}: {reason}")]
    Netlink {
        /// The step, naming the interface.
        what: String,
        /// The kernel's answer.
        reason: String,
    },
}

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
    let container = std::fs::File::open(&plan.netns).map_err(|e| Error::Netns {
        path: plan.netns.clone(),
        reason: e.to_string(),
    })?;
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
                return Err(Error::Netlink {
                    what: format!("check {}", p.ifname),
                    reason: format!("address {ip} is missing"),
                });
            }
        }
        Ok(())
    })
    .await
}

/// Runs `f` with a netlink handle opened inside `netns` (the agent's own when `None`),
/// on a thread of its own: the socket belongs to the namespace the thread was in when
/// it was opened, and entering a namespace must not move the agent's other threads.
async fn in_namespace<T, F, Fut>(netns: Option<&Path>, f: F) -> Result<T, Error>
where
    T: Send + 'static,
    F: FnOnce(Handle) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T, Error>>,
{
    let file = match netns {
        Some(path) => Some((
            path.to_owned(),
            std::fs::File::open(path).map_err(|e| Error::Netns {
                path: path.into(),
                reason: e.to_string(),
            })?,
        )),
        None => None,
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("weft-netlink".into())
        .spawn(move || {
            let run = || -> Result<T, Error> {
                if let Some((path, file)) = &file {
                    nix::sched::setns(file, nix::sched::CloneFlags::CLONE_NEWNET).map_err(|e| {
                        Error::Netns {
                            path: path.clone(),
                            reason: e.to_string(),
                        }
                    })?;
                }
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| Error::Netlink {
                        what: "start a netlink runtime".into(),
                        reason: e.to_string(),
                    })?;
                rt.block_on(async move {
                    let (conn, handle, _) =
                        rtnetlink::new_connection().map_err(|e| Error::Netlink {
                            what: "open a netlink socket".into(),
                            reason: e.to_string(),
                        })?;
                    tokio::spawn(conn);
                    f(handle).await
                })
            };
            let _ = tx.send(run());
        })
        .map_err(|e| Error::Netlink {
            what: "start a netlink thread".into(),
            reason: e.to_string(),
        })?;
    rx.await.map_err(|_| Error::Netlink {
        what: "netlink thread".into(),
        reason: "it ended without an answer".into(),
    })?
}

fn failed(what: String) -> impl FnOnce(rtnetlink::Error) -> Error {
    move |e| Error::Netlink {
        what,
        reason: match e {
            rtnetlink::Error::NetlinkError(m) => m.to_io().to_string(),
            e => e.to_string(),
        },
    }
}

/// Whether `e` says there is no such device.
fn no_such_device(e: &rtnetlink::Error) -> bool {
    matches!(e, rtnetlink::Error::NetlinkError(m) if m.raw_code() == -(nix::errno::Errno::ENODEV as i32))
}

/// The link `name`, if there is one.
async fn find_link(h: &Handle, name: &str) -> Result<Option<LinkMessage>, Error> {
    let found = h
        .link()
        .get()
        .match_name(name.to_owned())
        .execute()
        .try_next()
        .await;
    match found {
        Ok(l) => Ok(l),
        Err(e) if no_such_device(&e) => Ok(None),
        Err(e) => Err(failed(format!("find {name}"))(e)),
    }
}

async fn link(h: &Handle, name: &str) -> Result<LinkMessage, Error> {
    find_link(h, name).await?.ok_or_else(|| Error::Netlink {
        what: format!("find {name}"),
        reason: "no such device".into(),
    })
}

async fn delete_link(h: &Handle, name: &str) -> Result<(), Error> {
    let Some(l) = find_link(h, name).await? else {
        return Ok(());
    };
    match h.link().del(l.header.index).execute().await {
        Ok(()) => Ok(()),
        Err(e) if no_such_device(&e) => Ok(()),
        Err(e) => Err(failed(format!("delete {name}"))(e)),
    }
}

fn name(l: &LinkMessage) -> Option<String> {
    l.attributes.iter().find_map(|a| match a {
        LinkAttribute::IfName(n) => Some(n.clone()),
        _ => None,
    })
}

fn mac(l: &LinkMessage) -> String {
    l.attributes
        .iter()
        .find_map(|a| match a {
            LinkAttribute::Address(b) => Some(
                b.iter()
                    .map(|x| format!("{x:02x}"))
                    .collect::<Vec<_>>()
                    .join(":"),
            ),
            _ => None,
        })
        .unwrap_or_default()
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
