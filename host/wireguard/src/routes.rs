//! Routes to the other nodes' pod CIDRs through the WireGuard device, so that traffic
//! to a remote pod reaches the device whatever the underlay routes: the underlay
//! carries node addresses only, and WireGuard's AllowedIPs pick the peer. Traffic to
//! node addresses goes out on the native device, where `to-netdev` redirects what must
//! be encrypted.
//!
//! [`RouteTable`] is the pure state: the CIDRs each node claims, and the routes found
//! at start (*restored*: kept until garbage collection, as restored peers are: a route
//! removed before the remote nodes are back cuts the connections through it).
//! [`PodRoutes`] is the stage: a node listener that only updates the table, and a task
//! that brings the device's routes in step with it on every change and every few
//! seconds: level-triggered, so a route deleted by hand, or lost with a device that
//! was opened again, comes back. Only routes weft made (protocol [`ROUTE_PROTOCOL`])
//! are ever removed.

use futures::TryStreamExt as _;
use ipnet::IpNet;
use rtnetlink::packet_route::route::{RouteAttribute, RouteMessage, RouteProtocol};
use rtnetlink::packet_route::AddressFamily;
use rtnetlink::{Handle, RouteMessageBuilder};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use weft_model::Node;
use weft_state::node::{NodeId, NodeListener};
use weft_sys::netlink;

/// The routing protocol number weft's routes carry (`ip route` shows `proto 87`): how
/// weft knows its own routes from everyone else's.
pub const ROUTE_PROTOCOL: u8 = 87;

/// How often the device's routes are checked without a change.
const RECHECK: Duration = Duration::from_secs(5);

/// Why a node's pod CIDR gets no route.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteRefusal {
    /// The record's mask is not a prefix.
    #[error("pod CIDR {0} has a malformed mask")]
    Malformed(IpAddr),
    /// A default route would take every destination the node has no route for.
    #[error("pod CIDR {0} is a default route")]
    Default(IpNet),
    /// It overlaps this node's own pod CIDR: this node's pods are reached locally.
    #[error("pod CIDR {0} overlaps this node's pod CIDR {1}")]
    OverlapsLocal(IpNet, IpNet),
}

/// The routes the device should have: every other node's pod CIDRs.
///
/// # Example
/// ```
/// use weft_state::node::NodeId;
/// use weft_wireguard::RouteTable;
///
/// let mut table = RouteTable::new(vec!["10.1.0.0/24".parse().unwrap()]);
/// let node = NodeId { cluster: "c2".into(), name: "n1".into() };
/// table.upsert_node(&node, ["10.2.0.0/24".parse().unwrap(), "10.1.0.0/16".parse().unwrap()]);
/// // The CIDR that covers this node's own pods is refused.
/// assert_eq!(table.wanted().len(), 1);
/// assert_eq!(table.refused().count(), 1);
/// ```
#[derive(Debug, Default)]
pub struct RouteTable {
    local: Vec<IpNet>,
    claims: BTreeMap<NodeId, BTreeSet<IpNet>>,
    refused: BTreeMap<NodeId, Vec<RouteRefusal>>,
    restored: BTreeSet<IpNet>,
}

impl RouteTable {
    /// A table for a node whose own pod CIDRs are `local`.
    pub fn new(local: Vec<IpNet>) -> Self {
        Self {
            local,
            ..Self::default()
        }
    }

    /// Keeps `existing` routes (found on the device at start) until
    /// [`Self::collect_garbage`].
    pub fn restoring(mut self, existing: impl IntoIterator<Item = IpNet>) -> Self {
        self.restored = existing.into_iter().collect();
        self
    }

    /// `node` claims `cidrs` (replacing what it claimed before); the ones that may not
    /// be routed are refused.
    pub fn upsert_node(&mut self, node: &NodeId, cidrs: impl IntoIterator<Item = IpNet>) {
        self.upsert_claims(node, cidrs.into_iter().map(Ok));
    }

    /// [`Self::upsert_node`] with claims already refused for what the table cannot see
    /// (a malformed mask).
    pub fn upsert_claims(
        &mut self,
        node: &NodeId,
        claims: impl IntoIterator<Item = Result<IpNet, RouteRefusal>>,
    ) {
        let mut accepted = BTreeSet::new();
        let mut refused = Vec::new();
        for claim in claims {
            match claim.and_then(|cidr| self.check(cidr)) {
                Ok(cidr) => {
                    accepted.insert(cidr.trunc());
                }
                Err(r) => refused.push(r),
            }
        }
        self.claims.insert(node.clone(), accepted);
        if refused.is_empty() {
            self.refused.remove(node);
        } else {
            self.refused.insert(node.clone(), refused);
        }
    }

    /// `node` is gone, and its claims with it.
    pub fn delete_node(&mut self, node: &NodeId) {
        self.claims.remove(node);
        self.refused.remove(node);
    }

    fn check(&self, cidr: IpNet) -> Result<IpNet, RouteRefusal> {
        if cidr.prefix_len() == 0 {
            return Err(RouteRefusal::Default(cidr));
        }
        match self
            .local
            .iter()
            .find(|l| l.contains(&cidr) || cidr.contains(*l))
        {
            Some(l) => Err(RouteRefusal::OverlapsLocal(cidr, *l)),
            None => Ok(cidr),
        }
    }

    /// The routes the device should have: the nodes' claims and, until garbage
    /// collection, the restored routes.
    pub fn wanted(&self) -> BTreeSet<IpNet> {
        self.claims
            .values()
            .flatten()
            .chain(&self.restored)
            .copied()
            .collect()
    }

    /// Whether restored routes are still kept.
    pub fn restoring_routes(&self) -> bool {
        !self.restored.is_empty()
    }

    /// Stops keeping the restored routes: returns those no node claims, which go.
    pub fn collect_garbage(&mut self) -> Vec<IpNet> {
        let claimed: BTreeSet<IpNet> = self.claims.values().flatten().copied().collect();
        std::mem::take(&mut self.restored)
            .into_iter()
            .filter(|r| !claimed.contains(r))
            .collect()
    }

    /// Nodes whose CIDRs were refused, and why.
    pub fn refused(&self) -> impl Iterator<Item = (&NodeId, &RouteRefusal)> {
        self.refused
            .iter()
            .flat_map(|(id, rs)| rs.iter().map(move |r| (id, r)))
    }
}

/// What `weftd status` shows of the pod routes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodRoutesStatus {
    /// The routes the device has, as last read.
    pub installed: Vec<String>,
    /// Whether restored routes are still kept, waiting for the remote nodes.
    pub restoring: bool,
    /// Restored routes no node claimed, removed at garbage collection.
    pub collected: Option<Vec<String>>,
    /// Pod CIDRs refused a route: `cluster/name: reason`.
    pub refused: Vec<String>,
    /// Routes added or removed.
    pub changes: u64,
    /// Why the last attempt to bring the routes in step failed; `None` when it did not.
    pub error: Option<String>,
}

/// Keeps the device's routes to the other nodes' pod CIDRs in step with the nodes.
pub struct PodRoutes {
    device: String,
    netns: Option<PathBuf>,
    local: NodeId,
    table: Mutex<RouteTable>,
    changed: Notify,
    status: Mutex<PodRoutesStatus>,
}

impl PodRoutes {
    /// Reads the routes weft made on `device` in `netns` (kept until
    /// [`Self::collect_garbage`]) and starts the task that keeps them. `local` is this
    /// node (no route), whose pod CIDRs are `local_cidrs`.
    ///
    /// # Errors
    /// [`netlink::Error`] when the routes cannot be read.
    pub async fn start(
        device: String,
        netns: Option<PathBuf>,
        local: NodeId,
        local_cidrs: Vec<IpNet>,
    ) -> Result<Arc<Self>, netlink::Error> {
        let dev = device.clone();
        let restored = netlink::in_namespace(netns.as_deref(), move |h| async move {
            match netlink::find_link(&h, &dev).await? {
                Some(link) => installed(&h, link.header.index).await,
                None => Ok(BTreeSet::new()),
            }
        })
        .await?;
        tracing::info!(
            device,
            routes = restored.len(),
            "pod routes restored; kept until the remote nodes are synced"
        );
        let routes = Arc::new(Self {
            table: Mutex::new(RouteTable::new(local_cidrs).restoring(restored.iter().copied())),
            status: Mutex::new(PodRoutesStatus {
                installed: restored.iter().map(ToString::to_string).collect(),
                restoring: !restored.is_empty(),
                ..PodRoutesStatus::default()
            }),
            device,
            netns,
            local,
            changed: Notify::new(),
        });
        tokio::spawn(routes.clone().run());
        Ok(routes)
    }

    /// Stops keeping the restored routes; those no node claims are removed. Call only
    /// when restored WireGuard peers may go.
    pub fn collect_garbage(&self) -> Vec<IpNet> {
        let gone = self
            .table
            .lock()
            .expect("route table lock")
            .collect_garbage();
        tracing::info!(removed = ?gone, "restored pod routes collected");
        let mut status = self.status.lock().expect("route status lock");
        status.restoring = false;
        status.collected = Some(gone.iter().map(ToString::to_string).collect());
        drop(status);
        self.changed.notify_one();
        gone
    }

    /// The routes' status.
    pub fn status(&self) -> PodRoutesStatus {
        let mut status = self.status.lock().expect("route status lock").clone();
        status.refused = self
            .table
            .lock()
            .expect("route table lock")
            .refused()
            .map(|(id, r)| format!("{}/{}: {r}", id.cluster, id.name))
            .collect();
        status
    }

    fn note(&self, result: Result<(BTreeSet<IpNet>, u64), netlink::Error>) {
        let mut status = self.status.lock().expect("route status lock");
        match result {
            Ok((installed, changes)) => {
                status.installed = installed.iter().map(ToString::to_string).collect();
                status.changes += changes;
                status.error = None;
            }
            Err(e) => {
                if status.error.is_none() {
                    tracing::warn!(error = %e, "pod routes not in step; tried again");
                }
                status.error = Some(e.to_string());
            }
        }
    }

    async fn run(self: Arc<Self>) {
        let beat = weft_sys::health::Beat::register("the pod routes' reconciler", RECHECK);
        loop {
            beat.beat();
            let wanted = self.table.lock().expect("route table lock").wanted();
            let (device, netns) = (self.device.clone(), self.netns.clone());
            let result = netlink::in_namespace(netns.as_deref(), move |h| async move {
                reconcile(&h, &device, &wanted).await
            })
            .await;
            self.note(result);
            // A notification while this round ran is kept: the next round starts at
            // once.
            let _ = tokio::time::timeout(RECHECK, self.changed.notified()).await;
        }
    }
}

/// Adds the `wanted` routes `device` lacks and removes weft's routes it should not
/// have: the routes it has now, and how many changed. A missing device is no error:
/// its routes come back with it.
async fn reconcile(
    h: &Handle,
    device: &str,
    wanted: &BTreeSet<IpNet>,
) -> Result<(BTreeSet<IpNet>, u64), netlink::Error> {
    let Some(link) = netlink::find_link(h, device).await? else {
        return Ok((BTreeSet::new(), 0));
    };
    let index = link.header.index;
    let mut have = installed(h, index).await?;
    let mut changes = 0;
    for cidr in wanted.difference(&have.clone()) {
        h.route()
            .add(route(*cidr, index))
            .replace()
            .execute()
            .await
            .map_err(netlink::failed(format!("route {cidr} dev {device}")))?;
        have.insert(*cidr);
        changes += 1;
    }
    for cidr in have.clone().difference(wanted) {
        h.route()
            .del(route(*cidr, index))
            .execute()
            .await
            .map_err(netlink::failed(format!(
                "removing route {cidr} dev {device}"
            )))?;
        have.remove(cidr);
        changes += 1;
    }
    Ok((have, changes))
}

/// weft's routes through interface `index`, both families.
async fn installed(h: &Handle, index: u32) -> Result<BTreeSet<IpNet>, netlink::Error> {
    let mut found = BTreeSet::new();
    for family in [
        RouteMessageBuilder::<std::net::Ipv4Addr>::new().build(),
        RouteMessageBuilder::<std::net::Ipv6Addr>::new().build(),
    ] {
        let mut routes = h.route().get(family).execute();
        while let Some(r) = routes
            .try_next()
            .await
            .map_err(netlink::failed("listing routes".into()))?
        {
            if r.header.protocol != RouteProtocol::Other(ROUTE_PROTOCOL) {
                continue;
            }
            let oif = r
                .attributes
                .iter()
                .any(|a| matches!(a, RouteAttribute::Oif(i) if *i == index));
            if let (true, Some(cidr)) = (oif, destination(&r)) {
                found.insert(cidr);
            }
        }
    }
    Ok(found)
}

fn destination(r: &RouteMessage) -> Option<IpNet> {
    let len = r.header.destination_prefix_length;
    r.attributes.iter().find_map(|a| match a {
        RouteAttribute::Destination(d) => {
            let ip = match (r.header.address_family, d) {
                (AddressFamily::Inet, rtnetlink::packet_route::route::RouteAddress::Inet(a)) => {
                    IpAddr::V4(*a)
                }
                (AddressFamily::Inet6, rtnetlink::packet_route::route::RouteAddress::Inet6(a)) => {
                    IpAddr::V6(*a)
                }
                _ => return None,
            };
            IpNet::new(ip, len).ok()
        }
        _ => None,
    })
}

/// `cidr` through interface `index`, scope link, marked as weft's.
fn route(cidr: IpNet, index: u32) -> RouteMessage {
    let protocol = RouteProtocol::Other(ROUTE_PROTOCOL);
    match cidr {
        IpNet::V4(c) => RouteMessageBuilder::<std::net::Ipv4Addr>::new()
            .destination_prefix(c.network(), c.prefix_len())
            .output_interface(index)
            .scope(rtnetlink::packet_route::route::RouteScope::Link)
            .protocol(protocol)
            .build(),
        IpNet::V6(c) => RouteMessageBuilder::<std::net::Ipv6Addr>::new()
            .destination_prefix(c.network(), c.prefix_len())
            .output_interface(index)
            .protocol(protocol)
            .build(),
    }
}

/// A node's pod CIDRs as prefixes; a malformed one refused.
fn pod_cidrs(node: &Node) -> Vec<Result<IpNet, RouteRefusal>> {
    [&node.ipv4_alloc_cidr, &node.ipv6_alloc_cidr]
        .into_iter()
        .flatten()
        .map(|c| {
            c.prefix_len()
                .and_then(|len| IpNet::new(c.ip, len).ok())
                .ok_or(RouteRefusal::Malformed(c.ip))
        })
        .collect()
}

impl NodeListener for PodRoutes {
    fn on_upsert(&self, node: &Node, _old: Option<&Node>) {
        let id = NodeId::of(node);
        if id == self.local {
            return;
        }
        self.table
            .lock()
            .expect("route table lock")
            .upsert_claims(&id, pod_cidrs(node));
        self.changed.notify_one();
    }

    fn on_delete(&self, node: &Node) {
        self.table
            .lock()
            .expect("route table lock")
            .delete_node(&NodeId::of(node));
        self.changed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str) -> NodeId {
        NodeId {
            cluster: "c2".into(),
            name: name.into(),
        }
    }

    fn nets(s: &[&str]) -> Vec<IpNet> {
        s.iter().map(|c| c.parse().unwrap()).collect()
    }

    #[test]
    fn a_cidr_claimed_by_two_nodes_stays_until_both_are_gone() {
        let mut t = RouteTable::new(vec![]);
        t.upsert_node(&node("a"), nets(&["10.2.0.0/24"]));
        t.upsert_node(&node("b"), nets(&["10.2.0.0/24"]));
        t.delete_node(&node("a"));
        assert_eq!(t.wanted(), nets(&["10.2.0.0/24"]).into_iter().collect());
        t.delete_node(&node("b"));
        assert!(t.wanted().is_empty());
    }

    #[test]
    fn a_node_that_changes_its_cidr_gives_up_the_old_one() {
        let mut t = RouteTable::new(vec![]);
        t.upsert_node(&node("a"), nets(&["10.2.0.0/24"]));
        t.upsert_node(&node("a"), nets(&["10.3.0.0/24", "fd00:3::/64"]));
        assert_eq!(
            t.wanted(),
            nets(&["10.3.0.0/24", "fd00:3::/64"]).into_iter().collect()
        );
    }

    #[test]
    fn default_routes_and_overlaps_with_local_pods_are_refused() {
        let mut t = RouteTable::new(nets(&["10.1.0.0/24"]));
        t.upsert_node(
            &node("a"),
            nets(&["0.0.0.0/0", "10.1.0.128/25", "10.0.0.0/8", "10.2.0.0/24"]),
        );
        assert_eq!(t.wanted(), nets(&["10.2.0.0/24"]).into_iter().collect());
        let refused: Vec<String> = t.refused().map(|(_, r)| r.to_string()).collect();
        assert_eq!(refused.len(), 3, "{refused:?}");
        t.upsert_node(&node("a"), nets(&["10.2.0.0/24"]));
        assert_eq!(t.refused().count(), 0, "a corrected record clears them");
    }

    #[test]
    fn restored_routes_are_kept_until_collected_and_then_only_claimed_ones_stay() {
        let mut t = RouteTable::new(vec![]).restoring(nets(&["10.2.0.0/24", "10.9.0.0/24"]));
        assert!(t.restoring_routes());
        t.upsert_node(&node("a"), nets(&["10.2.0.0/24"]));
        assert_eq!(t.wanted().len(), 2, "the unclaimed one is kept too");
        assert_eq!(t.collect_garbage(), nets(&["10.9.0.0/24"]));
        assert_eq!(t.wanted(), nets(&["10.2.0.0/24"]).into_iter().collect());
        assert!(!t.restoring_routes());
    }

    #[test]
    fn host_bits_are_dropped() {
        let mut t = RouteTable::new(vec![]);
        t.upsert_node(&node("a"), nets(&["10.2.0.7/24"]));
        assert_eq!(t.wanted(), nets(&["10.2.0.0/24"]).into_iter().collect());
    }
}
