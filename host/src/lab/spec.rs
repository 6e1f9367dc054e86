//! What a lab is made of, as pure data: its size, and the name and address of every
//! part, derived from the lab's name and the part's position. Nothing here touches the
//! machine; `up` makes what this names, and `down` removes what the state file records.

use ipnet::Ipv4Net;
use serde::{Deserialize, Serialize};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

/// The most clusters a lab has: cluster IDs are 1–9 and name parts.
pub const MAX_CLUSTERS: u8 = 9;
/// The most nodes per cluster.
pub const MAX_NODES: u8 = 9;
/// The most pods per node.
pub const MAX_PODS: u8 = 9;

/// The port every lab pod's server listens on for the connectivity matrix.
pub const POD_PORT: u16 = 8080;

/// A lab's size and where it lives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spec {
    /// Short name: it prefixes every namespace and device the lab makes.
    pub name: String,
    /// Clusters, each with its own etcd.
    pub clusters: u8,
    /// Nodes per cluster, each a network namespace with its own `weftd`.
    pub nodes: u8,
    /// Pods per node, made through `weft-cni`.
    pub pods: u8,
    /// The lab's directory: its state file, etcd data, agents' state, logs.
    pub dir: PathBuf,
}

/// What is wrong with a spec.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// A count out of range.
    #[error("{what} must be 1 to {max}, not {got}")]
    Count {
        /// Which count.
        what: &'static str,
        /// Its maximum.
        max: u8,
        /// What was asked.
        got: u8,
    },
    /// A name that would not fit in interface names, or is not plain.
    #[error("lab name {0:?}: 1 to 4 lowercase letters or digits")]
    Name(String),
}

/// A node: its cluster (1-based) and its index in the cluster (1-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct NodeRef {
    /// The cluster, 1-based: also its cluster ID.
    pub cluster: u8,
    /// The node in its cluster, 1-based.
    pub node: u8,
}

/// A pod: its node and its index on the node (1-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PodRef {
    /// Its node.
    pub node: NodeRef,
    /// The pod on its node, 1-based.
    pub pod: u8,
}

impl Spec {
    /// Checks the counts and the name.
    ///
    /// # Errors
    /// [`SpecError`] naming what is out of range.
    pub fn check(&self) -> Result<(), SpecError> {
        for (what, max, got) in [
            ("clusters", MAX_CLUSTERS, self.clusters),
            ("nodes per cluster", MAX_NODES, self.nodes),
            ("pods per node", MAX_PODS, self.pods),
        ] {
            if got == 0 || got > max {
                return Err(SpecError::Count { what, max, got });
            }
        }
        let plain = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
        if self.name.is_empty() || self.name.len() > 4 || !self.name.chars().all(plain) {
            return Err(SpecError::Name(self.name.clone()));
        }
        Ok(())
    }

    /// Every node, cluster by cluster.
    pub fn nodes(&self) -> impl Iterator<Item = NodeRef> + '_ {
        (1..=self.clusters)
            .flat_map(move |cluster| (1..=self.nodes).map(move |node| NodeRef { cluster, node }))
    }

    /// Every pod, node by node.
    pub fn pods(&self) -> impl Iterator<Item = PodRef> + '_ {
        self.nodes()
            .flat_map(move |node| (1..=self.pods).map(move |pod| PodRef { node, pod }))
    }

    /// The state file.
    pub fn state_file(&self) -> PathBuf {
        self.dir.join("lab.json")
    }

    /// The underlay's namespace: the bridge every node hangs on.
    pub fn underlay_netns(&self) -> String {
        format!("{}-underlay", self.name)
    }

    /// A node's namespace.
    pub fn node_netns(&self, n: NodeRef) -> String {
        format!("{}-c{}n{}", self.name, n.cluster, n.node)
    }

    /// A pod's namespace.
    pub fn pod_netns(&self, p: PodRef) -> String {
        format!(
            "{}-c{}n{}p{}",
            self.name, p.node.cluster, p.node.node, p.pod
        )
    }

    /// A node's link on the bridge (the underlay's side of its veth).
    pub fn bridge_port(&self, n: NodeRef) -> String {
        format!("{}u{}{}", self.name, n.cluster, n.node)
    }

    /// A node's WireGuard device: unique on the machine, as userspace devices share
    /// one socket directory.
    pub fn wireguard_device(&self, n: NodeRef) -> String {
        format!("{}wg{}{}", self.name, n.cluster, n.node)
    }

    /// A node's bpffs directory.
    pub fn bpf_root(&self, n: NodeRef) -> PathBuf {
        PathBuf::from(format!(
            "/sys/fs/bpf/weft-lab-{}/c{}n{}",
            self.name, n.cluster, n.node
        ))
    }

    /// The lab's bpffs directory, every node's under it.
    pub fn bpf_dir(&self) -> PathBuf {
        PathBuf::from(format!("/sys/fs/bpf/weft-lab-{}", self.name))
    }

    /// A cluster's name.
    pub fn cluster_name(cluster: u8) -> String {
        format!("cluster{cluster}")
    }

    /// A node's name.
    pub fn node_name(n: NodeRef) -> String {
        format!("c{}n{}", n.cluster, n.node)
    }

    /// A pod's container ID and name.
    pub fn pod_name(p: PodRef) -> String {
        format!("c{}n{}p{}", p.node.cluster, p.node.node, p.pod)
    }

    /// A node's address on the underlay (all nodes share one /16).
    pub fn node_ip(n: NodeRef) -> Ipv4Addr {
        Ipv4Addr::new(172, 30, n.cluster, n.node)
    }

    /// The underlay's prefix length.
    pub const UNDERLAY_PREFIX: u8 = 16;

    /// A node's pod CIDR: reachable from other nodes only through WireGuard.
    pub fn pod_cidr(n: NodeRef) -> Ipv4Net {
        Ipv4Net::new(Ipv4Addr::new(10, 200 + n.cluster, n.node, 0), 24).expect("a /24")
    }

    /// A pod's `app` label: odd pods serve (`web`), even ones are clients (`client`).
    pub fn pod_app(p: PodRef) -> &'static str {
        if p.pod % 2 == 1 {
            "web"
        } else {
            "client"
        }
    }

    /// A node's directory (its agent's state, mesh view and log).
    pub fn node_dir(&self, n: NodeRef) -> PathBuf {
        self.dir.join(Self::node_name(n))
    }

    /// A cluster's directory (etcd data, mesh config, plugins, policies).
    pub fn cluster_dir(&self, cluster: u8) -> PathBuf {
        self.dir.join(Self::cluster_name(cluster))
    }
}

/// The path of a named network namespace.
pub fn netns_path(name: &str) -> PathBuf {
    Path::new("/run/netns").join(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(clusters: u8, nodes: u8, pods: u8) -> Spec {
        Spec {
            name: "lab".into(),
            clusters,
            nodes,
            pods,
            dir: "/tmp/lab".into(),
        }
    }

    #[test]
    fn counts_and_names_are_checked() {
        assert!(spec(2, 2, 2).check().is_ok());
        assert!(spec(0, 2, 2).check().is_err());
        assert!(spec(2, 10, 2).check().is_err());
        let mut s = spec(2, 2, 2);
        s.name = "Lab-1".into();
        assert!(s.check().is_err());
    }

    #[test]
    fn every_name_fits_an_interface_and_every_address_is_distinct() {
        let s = spec(MAX_CLUSTERS, MAX_NODES, MAX_PODS);
        let mut ips = std::collections::BTreeSet::new();
        let mut cidrs = std::collections::BTreeSet::new();
        for n in s.nodes() {
            // IFNAMSIZ: 15 characters and the NUL.
            assert!(s.bridge_port(n).len() <= 15);
            assert!(s.wireguard_device(n).len() <= 15);
            assert!(ips.insert(Spec::node_ip(n)));
            assert!(cidrs.insert(Spec::pod_cidr(n)));
        }
        assert_eq!(s.pods().count(), 9 * 9 * 9);
        let underlay = Ipv4Net::new(Ipv4Addr::new(172, 30, 0, 0), Spec::UNDERLAY_PREFIX).unwrap();
        for c in &cidrs {
            assert!(!underlay.contains(c), "pods are not on the underlay");
        }
    }
}
