//! The WireGuard stage: a node subscriber and an ipcache listener whose events feed the
//! [`PeerTable`] on a thread of its own, which sends the changes to the device. The
//! listeners only queue, so no UAPI round trip happens under the ipcache's lock, and
//! the thread takes the whole queue before it sends: a burst of events is one update.
//! The queue keeps the newest word per node and per prefix, so it is bounded by the
//! state, never by the rate of events.
//! The thread also checks the device now and then; one that is gone or new (its helper
//! killed) is opened again and given every peer the table holds.

use super::{PeerTable, WireGuardDevice};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use weft_model::Node;
use weft_state::ipcache::{Change, Listener, Prefix};
use weft_state::node::{NodeId, NodeListener};

/// How often an idle stage checks that its device still answers.
const HEALTH_CHECK: Duration = Duration::from_secs(5);

/// Opens the device again when it is gone: finds or starts it, and configures it.
pub type Revive = Box<dyn Fn() -> Result<WireGuardDevice, super::Error> + Send>;

/// A question to the thread, answered after everything queued before it is applied.
enum Request {
    CollectGarbage(mpsc::Sender<GarbageReport>),
    Garbage(mpsc::Sender<Vec<(String, Vec<String>)>>),
    Flush(mpsc::Sender<()>),
}

/// What changed since the thread last looked: the newest word per node and per
/// prefix. Bounded by the nodes and prefixes there are, not by the rate of events (a
/// prefix that flaps a thousand times is one entry), so the listeners never block
/// and the queue never grows past the state. The table applies each word alike in
/// any order: nodes and tunnels are separate maps in it.
#[derive(Default)]
struct Pending {
    /// `None`: the node went away.
    nodes: HashMap<NodeId, Option<(Vec<IpAddr>, String)>>,
    tunnels: HashMap<Prefix, Option<IpAddr>>,
    /// One per caller waiting on its answer.
    requests: Vec<Request>,
    /// The stage was dropped: the thread ends.
    closed: bool,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.nodes.is_empty() && self.tunnels.is_empty() && self.requests.is_empty()
    }
}

#[derive(Default)]
struct Queue {
    pending: Mutex<Pending>,
    wake: Condvar,
}

impl Queue {
    fn push(&self, f: impl FnOnce(&mut Pending)) {
        f(&mut self.pending.lock().expect("wireguard queue lock"));
        self.wake.notify_one();
    }

    /// Everything pending, once there is something or `timeout` passed; `None` once
    /// closed.
    fn take(&self, timeout: Duration) -> Option<Pending> {
        let pending = self.pending.lock().expect("wireguard queue lock");
        let (mut pending, _) = self
            .wake
            .wait_timeout_while(pending, timeout, |p| p.is_empty() && !p.closed)
            .expect("wireguard queue lock");
        if pending.closed {
            return None;
        }
        Some(std::mem::take(&mut *pending))
    }
}

/// What garbage collection did with the restored peers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GarbageReport {
    /// Restored peers a node claims, kept (public keys).
    pub kept: Vec<String>,
    /// Restored peers no node claims, removed (public keys).
    pub removed: Vec<String>,
    /// Restored AllowedIPs of kept peers that nothing claims, removed.
    pub trimmed: Vec<String>,
}

/// One peer in [`PeerSyncStatus`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerStatus {
    /// Its public key.
    pub key: String,
    /// Its node as `cluster/name`; `None` for a restored peer no node claims (yet).
    pub node: Option<String>,
    /// Where its packets go.
    pub endpoint: Option<String>,
    /// How many AllowedIPs it has.
    pub allowed_ips: usize,
    /// Seconds since its last handshake; `None`: none yet.
    pub handshake_seconds_ago: Option<u64>,
}

/// What `weftd status` shows of WireGuard.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerSyncStatus {
    /// The device.
    pub device: String,
    /// Its backend (`userspace`: a `weft-wg` helper).
    pub backend: String,
    /// Peers the device had at start.
    pub restored: usize,
    /// Whether restored peers are still kept, waiting for the remote nodes.
    pub restoring: bool,
    /// What garbage collection did, once it ran.
    pub collected: Option<GarbageReport>,
    /// Nodes refused a peer: `cluster/name: reason`.
    pub refused: Vec<String>,
    /// UAPI updates sent.
    pub updates: u64,
    /// UAPI updates the device refused (each followed by a resync).
    pub failed_updates: u64,
    /// Times the device was gone and was opened again, its peers given back.
    pub revived: u64,
    /// The device's peers, as it reports them; empty when it does not answer.
    pub peers: Vec<PeerStatus>,
    /// Why the device did not answer the status's question; `None` when it did.
    pub device_error: Option<String>,
    /// The routes to other nodes' pod CIDRs through the device.
    #[serde(default)]
    pub routes: Option<super::PodRoutesStatus>,
}

#[derive(Default)]
struct Shared {
    status: PeerSyncStatus,
    /// Public key (base64) to `cluster/name`.
    owners: HashMap<String, String>,
}

/// Keeps a device's peers in step with the remote nodes and the ipcache.
pub struct PeerSync {
    queue: Arc<Queue>,
    shared: Arc<Mutex<Shared>>,
    device: WireGuardDevice,
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
    pub fn start(device: WireGuardDevice, local: NodeId) -> Result<Arc<Self>, super::Error> {
        Self::start_with(device, local, None)
    }

    /// [`Self::start`], and `revive` opens the device again when it is gone.
    ///
    /// # Errors
    /// [`super::Error`] when the device's peers cannot be read.
    pub fn start_reviving(
        device: WireGuardDevice,
        local: NodeId,
        revive: Revive,
    ) -> Result<Arc<Self>, super::Error> {
        Self::start_with(device, local, Some(revive))
    }

    fn start_with(
        device: WireGuardDevice,
        local: NodeId,
        revive: Option<Revive>,
    ) -> Result<Arc<Self>, super::Error> {
        let restored = device.peers()?;
        tracing::info!(
            device = device.name(),
            peers = restored.len(),
            "WireGuard peers restored; kept until the remote nodes are synced"
        );
        let shared = Arc::new(Mutex::new(Shared {
            status: PeerSyncStatus {
                device: device.name().into(),
                backend: device.backend().into(),
                restored: restored.len(),
                restoring: !restored.is_empty(),
                ..PeerSyncStatus::default()
            },
            owners: HashMap::new(),
        }));
        let table = PeerTable::restoring(restored);
        let queue = Arc::new(Queue::default());
        let worker = Worker {
            table,
            device: device.clone(),
            shared: shared.clone(),
            revive,
        };
        let input = queue.clone();
        std::thread::Builder::new()
            .name("weft-wireguard".into())
            .spawn(move || worker.run(&input))
            .expect("the WireGuard thread starts");
        Ok(Arc::new(Self {
            queue,
            shared,
            device,
            local,
        }))
    }

    fn ask(&self, request: Request) {
        self.queue.push(|p| p.requests.push(request));
    }

    /// Removes restored peers and AllowedIPs no node claims. Call only once local nodes
    /// are synced and the mesh's `nodes_synced` and `ip_identities_synced` returned.
    pub fn collect_garbage(&self) -> GarbageReport {
        let (reply, answer) = mpsc::channel();
        self.ask(Request::CollectGarbage(reply));
        answer.recv().unwrap_or_default()
    }

    /// The restored peers collection would remove now: public key (base64) and
    /// AllowedIPs, as of every event queued before the call.
    pub fn garbage(&self) -> Vec<(String, Vec<String>)> {
        let (reply, answer) = mpsc::channel();
        self.ask(Request::Garbage(reply));
        answer.recv().unwrap_or_default()
    }

    /// Waits until every event queued before the call is applied.
    pub fn flush(&self) {
        let (reply, answer) = mpsc::channel();
        self.ask(Request::Flush(reply));
        let _ = answer.recv();
    }

    /// The stage's status, with the peers as the device reports them now.
    pub fn status(&self) -> PeerSyncStatus {
        let device = self.device.get();
        let shared = self.shared.lock().expect("wireguard status lock");
        let mut status = shared.status.clone();
        let now = SystemTime::now();
        let device = device.inspect_err(|e| status.device_error = Some(weft_sys::error_chain(e)));
        if let Ok(device) = device {
            status.peers = device
                .peers
                .iter()
                .map(|p| {
                    let key = p.config.public_key.to_base64();
                    PeerStatus {
                        node: shared.owners.get(&key).cloned(),
                        key,
                        endpoint: p.config.endpoint.map(|e| e.to_string()),
                        allowed_ips: p.config.allowed_ips.len(),
                        handshake_seconds_ago: p
                            .stats
                            .last_handshake_time
                            .filter(|t| *t > UNIX_EPOCH)
                            .map(|t| now.duration_since(t).unwrap_or_default().as_secs()),
                    }
                })
                .collect();
            status
                .peers
                .sort_by(|a, b| a.node.cmp(&b.node).then(a.key.cmp(&b.key)));
        }
        status
    }
}

/// The thread that owns the table.
struct Worker {
    table: PeerTable,
    device: WireGuardDevice,
    shared: Arc<Mutex<Shared>>,
    revive: Option<Revive>,
}

impl Worker {
    fn run(mut self, queue: &Queue) {
        while let Some(pending) = queue.take(HEALTH_CHECK) {
            if pending.is_empty() {
                if self.device_lost() && self.revive_device() {
                    self.apply();
                }
                continue;
            }
            for (id, node) in pending.nodes {
                match node {
                    Some((ips, key)) => self.table.upsert_node(&id, &ips, &key),
                    None => self.table.delete_node(&id),
                }
            }
            for (prefix, endpoint) in pending.tunnels {
                self.table.tunnel_changed(prefix, endpoint);
            }
            let mut replies = Vec::new();
            let mut collected = Vec::new();
            for request in pending.requests {
                match request {
                    Request::CollectGarbage(reply) => {
                        collected.push((self.table.collect_garbage(), reply));
                    }
                    Request::Garbage(reply) => {
                        let garbage = self.table.garbage().into_iter().map(|(key, ips)| {
                            (
                                key.to_base64(),
                                ips.iter().map(ToString::to_string).collect(),
                            )
                        });
                        let _ = reply.send(garbage.collect());
                    }
                    Request::Flush(reply) => replies.push(reply),
                }
            }
            self.apply();
            for (c, reply) in collected {
                let report = GarbageReport {
                    kept: c.kept.iter().map(|k| k.to_base64()).collect(),
                    removed: c.removed.iter().map(|k| k.to_base64()).collect(),
                    trimmed: c.trimmed.iter().map(ToString::to_string).collect(),
                };
                tracing::info!(kept = ?report.kept, removed = ?report.removed, trimmed = ?report.trimmed, "WireGuard: restored peers collected");
                let mut shared = self.shared.lock().expect("wireguard status lock");
                shared.status.restoring = false;
                shared.status.collected = Some(report.clone());
                drop(shared);
                let _ = reply.send(report);
            }
            for reply in replies {
                let _ = reply.send(());
            }
        }
    }

    /// Sends what the table says changed, in one update. A refused update leaves the
    /// device in an unknown state: the table is resynced from it and tried once more.
    fn apply(&mut self) {
        for attempt in 0..2 {
            let changes = self.table.changes();
            if changes.is_empty() {
                break;
            }
            let result = self.device.apply_changes(&changes);
            let mut shared = self.shared.lock().expect("wireguard status lock");
            shared.status.updates += 1;
            let Err(e) = result else { break };
            shared.status.failed_updates += 1;
            drop(shared);
            tracing::warn!(error = %weft_sys::error_chain(&e), attempt, "WireGuard update refused; resyncing with the device");
            match self.device.peers() {
                Ok(actual) => self.table.resync(actual),
                Err(_) if self.revive_device() => {}
                Err(e) => {
                    tracing::warn!(error = %weft_sys::error_chain(&e), "WireGuard device unreadable; changes wait for the next event");
                    break;
                }
            }
        }
        let mut shared = self.shared.lock().expect("wireguard status lock");
        shared.status.refused = self
            .table
            .refused()
            .iter()
            .map(|(id, r)| format!("{}/{}: {r}", id.cluster, id.name))
            .collect();
        shared.owners = self
            .table
            .owners()
            .map(|(k, id)| (k.to_base64(), format!("{}/{}", id.cluster, id.name)))
            .collect();
    }
}

impl Worker {
    /// Whether the device is gone, or was replaced by a new one: a device the agent
    /// opened always has its private key, and a new one has none (its helper, run
    /// in a container of its own, restarted between two checks).
    fn device_lost(&self) -> bool {
        !matches!(self.device.get(), Ok(d) if d.private_key.is_some())
    }

    /// Opens the device again, if the stage can; the table then gives it every peer.
    /// Whether it is back.
    fn revive_device(&mut self) -> bool {
        let Some(revive) = &self.revive else {
            return false;
        };
        let opened = revive().and_then(|d| d.peers().map(|peers| (d, peers)));
        match opened {
            Ok((device, peers)) => {
                tracing::warn!(
                    device = device.name(),
                    "WireGuard device was gone: opened again, its peers given back"
                );
                self.device = device;
                self.table.resync(peers);
                self.shared
                    .lock()
                    .expect("wireguard status lock")
                    .status
                    .revived += 1;
                true
            }
            Err(e) => {
                tracing::warn!(error = %weft_sys::error_chain(&e), "WireGuard device gone and not opened again; tried at the next check");
                false
            }
        }
    }
}

impl NodeListener for PeerSync {
    fn on_upsert(&self, node: &Node, _old: Option<&Node>) {
        let id = NodeId::of(node);
        if id == self.local {
            return;
        }
        let ips = node.ip_addresses.iter().map(|a| a.ip).collect();
        let key = node.wireguard_pub_key.clone();
        self.queue.push(|p| {
            p.nodes.insert(id, Some((ips, key)));
        });
    }

    fn on_delete(&self, node: &Node) {
        self.queue.push(|p| {
            p.nodes.insert(NodeId::of(node), None);
        });
    }
}

impl Listener for PeerSync {
    fn on_change(&self, change: &Change<'_>) {
        let endpoint = change.new.and_then(|e| e.tunnel_endpoint);
        if change.old.and_then(|e| e.tunnel_endpoint) != endpoint {
            self.queue.push(|p| {
                p.tunnels.insert(change.prefix, endpoint);
            });
        }
    }
}

impl Drop for PeerSync {
    fn drop(&mut self) {
        self.queue.push(|p| p.closed = true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_holds_the_newest_word_per_prefix_and_node_not_every_event() {
        let queue = Queue::default();
        let prefix: Prefix = "10.2.0.7/32".parse().unwrap();
        let node = NodeId {
            cluster: "c2".into(),
            name: "n1".into(),
        };
        for i in 0..10_000u32 {
            let endpoint = (i % 2 == 0).then(|| "192.0.2.2".parse().unwrap());
            queue.push(|p| {
                p.tunnels.insert(prefix, endpoint);
                p.nodes
                    .insert(node.clone(), (i % 3 == 0).then(Default::default));
            });
        }
        let taken = queue.take(Duration::ZERO).expect("open");
        assert_eq!((taken.tunnels.len(), taken.nodes.len()), (1, 1));
        assert_eq!(taken.tunnels[&prefix], None, "the last word: 9,999 is odd");
        assert_eq!(
            taken.nodes[&node],
            Some(Default::default()),
            "9,999 = 3 × 3,333"
        );
        queue.push(|p| p.closed = true);
        assert!(
            queue.take(Duration::ZERO).is_none(),
            "closed: the thread ends"
        );
    }
}
