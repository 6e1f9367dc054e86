//! The WireGuard stage: a node subscriber and an ipcache listener whose events feed the
//! [`PeerTable`] on a thread of its own, which sends the changes to the device. The
//! listeners only queue, so no UAPI round trip happens under the ipcache's lock.

use super::{PeerChange, PeerTable, UserspaceDevice};
use crate::ipcache::{Change, Listener, Prefix};
use crate::model::Node;
use crate::node::{NodeId, NodeListener};
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::sync::{mpsc, Arc, Mutex};

enum Event {
    Node(NodeId, Vec<IpAddr>, String),
    NodeGone(NodeId),
    Tunnel(Prefix, Option<IpAddr>),
    CollectGarbage(mpsc::Sender<GarbageReport>),
    Flush(mpsc::Sender<()>),
}

/// What garbage collection did with the restored peers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GarbageReport {
    /// Restored peers a node claims (their stale AllowedIPs trimmed), public keys.
    pub kept: Vec<String>,
    /// Restored peers no node claims, removed.
    pub removed: Vec<String>,
}

/// What `weftd status` shows of the peers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerSyncStatus {
    /// Peers the device had at start.
    pub restored: usize,
    /// Whether restored peers are still kept, waiting for the remote nodes.
    pub restoring: bool,
    /// What garbage collection did, once it ran.
    pub collected: Option<GarbageReport>,
    /// Nodes refused a peer: `cluster/name: reason`.
    pub refused: Vec<String>,
    /// UAPI updates the device refused.
    pub failed_updates: u64,
    /// UAPI updates sent.
    pub updates: u64,
}

/// Keeps a device's peers in step with the remote nodes and the ipcache.
pub struct PeerSync {
    tx: Mutex<mpsc::Sender<Event>>,
    status: Arc<Mutex<PeerSyncStatus>>,
    local: NodeId,
}

impl PeerSync {
    /// Restores `device`'s peers (kept until [`Self::collect_garbage`]) and starts the
    /// thread. `local` is this node, which gets no peer.
    ///
    /// # Errors
    /// [`super::Error`] when the device's peers cannot be read.
    ///
    /// # Panics
    /// When the OS cannot start a thread.
    pub fn start(device: UserspaceDevice, local: NodeId) -> Result<Arc<Self>, super::Error> {
        let restored = device.peers()?;
        tracing::info!(
            device = device.name(),
            peers = restored.len(),
            "WireGuard peers restored; kept until the remote nodes are synced"
        );
        let status = Arc::new(Mutex::new(PeerSyncStatus {
            restored: restored.len(),
            restoring: !restored.is_empty(),
            ..PeerSyncStatus::default()
        }));
        let mut table = PeerTable::restoring(restored);
        let (tx, rx) = mpsc::channel::<Event>();
        let shared = status.clone();
        std::thread::Builder::new()
            .name("weft-wireguard".into())
            .spawn(move || {
                for event in rx {
                    let changes = match event {
                        Event::Node(id, ips, key) => table.upsert_node(&id, &ips, &key),
                        Event::NodeGone(id) => table.delete_node(&id),
                        Event::Tunnel(prefix, endpoint) => table.tunnel_changed(prefix, endpoint),
                        Event::CollectGarbage(reply) => {
                            let changes = table.collect_garbage();
                            let report = garbage_report(&changes);
                            tracing::info!(kept = ?report.kept, removed = ?report.removed, "WireGuard: restored peers collected");
                            apply(&device, &changes, &shared);
                            let mut s = shared.lock().expect("wireguard status lock");
                            s.restoring = false;
                            s.collected = Some(report.clone());
                            drop(s);
                            let _ = reply.send(report);
                            continue;
                        }
                        Event::Flush(reply) => {
                            let _ = reply.send(());
                            continue;
                        }
                    };
                    apply(&device, &changes, &shared);
                    shared.lock().expect("wireguard status lock").refused = table
                        .refused()
                        .iter()
                        .map(|(id, r)| format!("{}/{}: {r}", id.cluster, id.name))
                        .collect();
                }
            })
            .expect("the WireGuard thread starts");
        Ok(Arc::new(Self {
            tx: Mutex::new(tx),
            status,
            local,
        }))
    }

    fn send(&self, event: Event) {
        let _ = self.tx.lock().expect("wireguard queue lock").send(event);
    }

    /// Removes restored peers and AllowedIPs no node claims. Call only once local nodes
    /// are synced and the mesh's `nodes_synced` and `ip_identities_synced` returned.
    pub fn collect_garbage(&self) -> GarbageReport {
        let (reply, answer) = mpsc::channel();
        self.send(Event::CollectGarbage(reply));
        answer.recv().unwrap_or_default()
    }

    /// Waits until every event queued before the call is applied.
    pub fn flush(&self) {
        let (reply, answer) = mpsc::channel();
        self.send(Event::Flush(reply));
        let _ = answer.recv();
    }

    /// The stage's status.
    pub fn status(&self) -> PeerSyncStatus {
        self.status.lock().expect("wireguard status lock").clone()
    }
}

fn apply(device: &UserspaceDevice, changes: &[PeerChange], status: &Mutex<PeerSyncStatus>) {
    if changes.is_empty() {
        return;
    }
    let result = device.apply_changes(changes);
    let mut s = status.lock().expect("wireguard status lock");
    s.updates += 1;
    if let Err(e) = result {
        s.failed_updates += 1;
        tracing::warn!(error = %e, "WireGuard update refused");
    }
}

fn garbage_report(changes: &[PeerChange]) -> GarbageReport {
    let mut report = GarbageReport::default();
    for c in changes {
        match c {
            PeerChange::Upsert { key, .. } => report.kept.push(key.to_base64()),
            PeerChange::Remove { key } => report.removed.push(key.to_base64()),
        }
    }
    report
}

fn node_id(node: &Node) -> NodeId {
    NodeId {
        cluster: node.cluster.clone(),
        name: node.name.clone(),
    }
}

impl NodeListener for PeerSync {
    fn on_upsert(&self, node: &Node, _old: Option<&Node>) {
        let id = node_id(node);
        if id == self.local {
            return;
        }
        let ips = node.ip_addresses.iter().map(|a| a.ip).collect();
        self.send(Event::Node(id, ips, node.wireguard_pub_key.clone()));
    }

    fn on_delete(&self, node: &Node) {
        self.send(Event::NodeGone(node_id(node)));
    }
}

impl Listener for PeerSync {
    fn on_change(&self, change: &Change<'_>) {
        let endpoint = change.new.and_then(|e| e.tunnel_endpoint);
        if change.old.and_then(|e| e.tunnel_endpoint) != endpoint {
            self.send(Event::Tunnel(change.prefix, endpoint));
        }
    }
}
