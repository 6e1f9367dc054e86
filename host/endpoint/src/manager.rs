//! The endpoint manager: what `weft-cni` asks, done. An ADD takes, in order and each
//! step idempotent: a record (before any side effect), addresses, the interfaces, a
//! security identity, the ipcache entry; then the record says `ready`. A failed ADD
//! undoes what it did; a crashed one is undone by the next ADD or DEL of the same
//! endpoint, by a GC, or at the agent's next start. DEL undoes all of it, also when
//! only parts exist.

use super::ipam::Ipam;
use super::link::{self, Plan};
use super::pods::{PodDirectory, PodRef};
use super::regeneration::{self, EndpointDatapath, Regenerate, Regeneration};
use super::store::{Phase, Record, Store};
use ipnet::IpNet;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use weft_api::cni::rscni_types::types::{CNIResult, Interface, IpConfig, Route};
use weft_api::cni::{code, CniAnswer, CniCall, Command, Failure};
use weft_clustermesh::GlobalAllocator;
use weft_clustermesh::LeasedKeys;
use weft_hooks::RegenerationReason;
use weft_model::{IpIdentityPair, Label, Labels};

pub use weft_model::{CLUSTER_LABEL, NAMESPACE_LABEL};

/// How endpoints are made on this node.
#[derive(Debug, Clone)]
pub struct Config {
    /// The node's pod CIDRs: IPv4, and IPv6 when the node has one.
    pub pod_cidrs: Vec<IpNet>,
    /// The namespace the host sides live in (the agent's own when `None`).
    pub node_netns: Option<PathBuf>,
    /// The MTU of the endpoints' interfaces.
    pub mtu: u32,
    /// This cluster's name (the cluster label of every identity).
    pub cluster: String,
    /// The node's address, published as the endpoints' `HostIP`.
    pub node_ip: Option<IpAddr>,
    /// The encryption key index published with the endpoints (0xFF with WireGuard).
    pub encrypt_key: u8,
}

/// Why the manager cannot start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The addresses' state cannot be opened.
    #[error(transparent)]
    Ipam(#[from] super::ipam::Error),
    /// The records' directory cannot be opened.
    #[error("endpoint records in {}", path.display())]
    Store {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// This node's endpoints.
pub struct EndpointManager {
    config: Config,
    store: Store,
    ipam: std::sync::Mutex<Ipam>,
    identities: GlobalAllocator,
    keys: LeasedKeys,
    /// One operation at a time: an ADD and a DEL of one endpoint must not interleave.
    ops: tokio::sync::Mutex<()>,
    /// How an endpoint waits at its regeneration; `None` regenerates at once.
    regenerate: Option<Regenerate>,
    /// Where endpoints are switched once their wait is over; `None`: no datapath.
    datapath: std::sync::OnceLock<Arc<dyn EndpointDatapath>>,
    /// Regenerations under way, by endpoint.
    waits: std::sync::Mutex<BTreeMap<String, (tokio::task::AbortHandle, Regeneration)>>,
    /// The Pod store, in Kubernetes mode: the ADD's labels come from it.
    pods: std::sync::OnceLock<Arc<dyn PodDirectory>>,
    /// Whether the runtime's labels were ignored for the API's once already (logged once).
    runtime_labels_ignored: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for EndpointManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointManager")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl EndpointManager {
    /// The manager of the endpoints recorded in `state_dir`.
    ///
    /// # Errors
    /// [`Error`] when the state cannot be opened.
    pub fn open(
        state_dir: &Path,
        config: Config,
        identities: GlobalAllocator,
        keys: LeasedKeys,
        regenerate: Option<Regenerate>,
    ) -> Result<Self, Error> {
        let dir = state_dir.join("endpoints");
        let store = Store::open(&dir).map_err(|source| Error::Store { path: dir, source })?;
        let ipam = Ipam::open(&state_dir.join("ipam"), &config.pod_cidrs)?;
        Ok(Self {
            config,
            store,
            ipam: std::sync::Mutex::new(ipam),
            identities,
            keys,
            ops: tokio::sync::Mutex::new(()),
            regenerate,
            datapath: std::sync::OnceLock::new(),
            waits: Default::default(),
            pods: std::sync::OnceLock::new(),
            runtime_labels_ignored: Default::default(),
        })
    }

    /// Takes pods' labels from `pods` (Kubernetes mode) from now on.
    pub fn set_pod_directory(&self, pods: Arc<dyn PodDirectory>) {
        let _ = self.pods.set(pods);
    }

    /// The identity labels of the pod an ADD is for: from the Pod store in Kubernetes
    /// mode (waiting for its event, bounded), else from what the runtime passed.
    async fn labels_for(&self, call: &CniCall) -> Result<(Labels, Option<PodRef>), Failure> {
        let namespace = call.arg("K8S_POD_NAMESPACE").unwrap_or_default();
        let runtime = pod_labels(call)?;
        let Some(pods) = self.pods.get() else {
            return Ok((
                identity_labels(&self.config.cluster, namespace, &runtime),
                None,
            ));
        };
        if !runtime.is_empty()
            && !self
                .runtime_labels_ignored
                .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            tracing::info!(
                "the runtime passes pod labels, and the Kubernetes API is there: the API's labels are used (logged once)"
            );
        }
        let pod = PodRef {
            namespace: namespace.to_owned(),
            name: call.arg("K8S_POD_NAME").unwrap_or_default().to_owned(),
            uid: call.arg("K8S_POD_UID").map(str::to_owned),
        };
        match pods.identity_labels(&pod).await {
            Ok(labels) => Ok((labels, Some(pod))),
            // The specification's "try again later": the runtime retries the sandbox.
            Err(e) => Err(Failure::new(
                11,
                "the pod's labels are not known yet",
                e.to_string(),
            )),
        }
    }

    /// Switches endpoints to `datapath` at the end of their regeneration from now on.
    pub fn set_datapath(&self, datapath: Arc<dyn EndpointDatapath>) {
        let _ = self.datapath.set(datapath);
    }

    /// The endpoints, as recorded, with the regenerations under way.
    pub fn list(&self) -> Vec<Record> {
        let mut records = self.store.records();
        let waits = self.waits.lock().expect("waits lock");
        for r in &mut records {
            if let Some((_, w)) = waits.get(&r.key) {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::SystemTime::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                r.regeneration = Some(Regeneration {
                    waited_ms: now.saturating_sub(w.started_at) * 1000,
                    ..w.clone()
                });
            }
        }
        records
    }

    /// Regenerates `record` for `reason` in a task of its own: asks the policy, waits
    /// as it decides, and records the outcome. A DEL of the endpoint ends the wait.
    fn regenerate(self: &Arc<Self>, record: &Record, reason: RegenerationReason) {
        let Some(regenerate) = self.regenerate.clone() else {
            return;
        };
        let endpoint = regeneration::workload(
            record.identity.unwrap_or_default(),
            &record.namespace,
            &record.pod_name,
            &record.labels,
        );
        let key = record.key.clone();
        let waiting = regeneration::waiting(reason);
        let me = Arc::clone(self);
        let (k, w) = (key.clone(), waiting.clone());
        let mut waits = self.waits.lock().expect("waits lock");
        // Shows, while it waits, what the policy decided it waits for: in its own
        // entry only (a regeneration that replaced it is another task).
        let (decided, d) = (Arc::downgrade(self), key.clone());
        let on_wait: crate::wait::OnWait = Box::new(move |answer, clusters| {
            let Some(me) = decided.upgrade() else { return };
            let mut waits = me.waits.lock().expect("waits lock");
            if let Some((task, w)) = waits.get_mut(&d) {
                if Some(task.id()) == tokio::task::try_id() {
                    *w = regeneration::deciding(w.clone(), answer, clusters);
                }
            }
        });
        let task = tokio::spawn(async move {
            let started = std::time::Instant::now();
            let outcome = regenerate(endpoint, reason, on_wait).await;
            if let Some(Err(timeout)) = &outcome.result {
                tracing::warn!(
                    endpoint = k,
                    %timeout,
                    "endpoint regenerates without full remote state: its cross-cluster connections may be disrupted"
                );
            }
            // As the listing showed it while it waited (what it waited for), ended.
            let shown = me
                .waits
                .lock()
                .expect("waits lock")
                .get(&k)
                .map(|(_, w)| w.clone());
            let mut ended = regeneration::ended(shown.unwrap_or(w), &outcome, started);
            let _op = me.ops.lock().await;
            if let Some(mut r) = me.store.get(&k) {
                if let Some(dp) = me.datapath.get().cloned() {
                    let record = r.clone();
                    let switched = tokio::task::spawn_blocking(move || dp.switch(&record)).await;
                    let failed: Option<Box<dyn std::error::Error + Send + Sync>> = match switched {
                        Ok(Ok(())) => None,
                        Ok(Err(e)) => Some(e.into()),
                        Err(e) => Some(e.into()),
                    };
                    if let Some(e) = failed {
                        let error = weft_sys::error_chain(&*e);
                        tracing::warn!(endpoint = k, %error, "endpoint not switched to the new datapath");
                        ended = regeneration::not_switched(ended, &*e);
                    }
                }
                tracing::info!(
                    endpoint = k,
                    reason = ended.reason,
                    result = %ended.outcome,
                    outcome = serde_json::to_string(&ended.outcome).unwrap_or_default(),
                    waited_ms = ended.waited_ms,
                    decided_by = ended.decided_by,
                    "endpoint regenerated"
                );
                r.regeneration = Some(ended);
                if let Err(e) = me.store.put(&r) {
                    tracing::warn!(endpoint = k, error = %e, "cannot record the regeneration");
                }
            }
            // Under way until switched and recorded: a policy change meanwhile leaves it
            // to this regeneration, which switches with the policy as it is now.
            me.waits.lock().expect("waits lock").remove(&k);
        });
        if let Some((old, _)) = waits.insert(key, (task.abort_handle(), waiting)) {
            old.abort();
        }
    }

    /// Regenerates, for `reason`, every ready endpoint that `stale` picks (its policy
    /// changed with the policies or the identities) and that has no regeneration under
    /// way: one under way switches with the policy as it is when its wait ends.
    /// Returns how many.
    pub fn regenerate_where(
        self: &Arc<Self>,
        reason: RegenerationReason,
        mut stale: impl FnMut(&Record) -> bool,
    ) -> usize {
        let waiting: BTreeSet<String> = self
            .waits
            .lock()
            .expect("waits lock")
            .keys()
            .cloned()
            .collect();
        let mut regenerated = 0;
        for r in self.store.records() {
            if r.phase == Phase::Ready && !waiting.contains(&r.key) && stale(&r) {
                self.regenerate(&r, reason);
                regenerated += 1;
            }
        }
        regenerated
    }

    /// Ends the regeneration of `key` under way, if any.
    fn stop_regeneration(&self, key: &str) {
        if let Some((task, _)) = self.waits.lock().expect("waits lock").remove(key) {
            task.abort();
        }
    }

    /// After a restart: endpoints an ADD left half-made are undone; ready ones are
    /// restored untouched (their namespaces, interfaces and addresses stay), taking
    /// their identities again and publishing their ipcache entries on this agent's
    /// lease. Returns the restored endpoints.
    pub async fn restore(self: &Arc<Self>) -> Vec<Record> {
        let _op = self.ops.lock().await;
        let (records, unreadable) = self.store.read_all();
        for (path, reason) in unreadable {
            tracing::warn!(path = %path.display(), reason, "unreadable endpoint record skipped");
        }
        let mut restored = Vec::new();
        for r in records {
            if r.phase != Phase::Ready {
                tracing::info!(endpoint = r.key, "undoing an ADD interrupted by a crash");
                if let Err(f) = self.undo(&r.key, Some(&r)).await {
                    tracing::warn!(endpoint = r.key, error = %f, "cannot undo an interrupted ADD");
                }
                continue;
            }
            match self.republish(&r).await {
                Ok(()) => {
                    self.regenerate(&r, RegenerationReason::Restore);
                    restored.push(r);
                }
                Err(f) => {
                    tracing::warn!(endpoint = r.key, error = %f, "restored endpoint not republished")
                }
            }
        }
        restored
    }

    /// Carries out a CNI call.
    ///
    /// # Errors
    /// [`Failure`] with the specification's code, or the agent's ([`code`]).
    pub async fn handle(self: &Arc<Self>, call: CniCall) -> Result<CniAnswer, Failure> {
        if call.command == Command::Add {
            // Before the lock: the wait for a late Pod event must not hold up other pods.
            let (labels, pod) = self.labels_for(&call).await?;
            let added = {
                let _op = self.ops.lock().await;
                self.add(&call, labels).await?
            };
            // A label change that came while the ADD ran found no endpoint to relabel.
            if let (Some(pods), Some(pod)) = (self.pods.get(), pod) {
                if let Ok(now) = pods.identity_labels(&pod).await {
                    if let Err(e) = self.relabel(&pod.namespace, &pod.name, &now).await {
                        tracing::warn!(pod = %format!("{}/{}", pod.namespace, pod.name), error = %e, "cannot give the new pod its changed labels' identity");
                    }
                }
            }
            return Ok(CniAnswer {
                result: Some(added),
            });
        }
        let _op = self.ops.lock().await;
        match call.command {
            Command::Add => unreachable!("handled above"),
            Command::Del => {
                let key = key(&call);
                let record = self.store.get(&key);
                self.undo(&key, record.as_ref()).await?;
                Ok(CniAnswer::default())
            }
            Command::Check => self.check(&call).await.map(|()| CniAnswer::default()),
            Command::Gc => self.gc(&call).await.map(|()| CniAnswer::default()),
            Command::Status => match self.keys.current_lease().await {
                Ok(_) => Ok(CniAnswer::default()),
                Err(e) => Err(Failure::new(
                    50,
                    "the node's etcd is unreachable",
                    e.to_string(),
                )),
            },
        }
    }

    fn persist(&self, record: &Record) -> Result<(), Failure> {
        self.store
            .put(record)
            .map_err(|e| Failure::new(5, "cannot write the endpoint's record", e.to_string()))
    }

    async fn add(self: &Arc<Self>, call: &CniCall, labels: Labels) -> Result<CNIResult, Failure> {
        let key = key(call);
        let netns = PathBuf::from(call.netns.clone().unwrap_or_default());
        if let Some(r) = self.store.get(&key) {
            if r.phase == Phase::Ready && r.netns == netns {
                return Ok(self.result(&r));
            }
            // Half made by a crash, or another namespace for the same key: undone.
            self.undo(&key, Some(&r)).await?;
        }
        if let Err(e) = std::fs::File::open(&netns) {
            return Err(Failure::new(
                8,
                "cannot open the container's network namespace",
                format!("{}: {e}", netns.display()),
            ));
        }
        let namespace = call.arg("K8S_POD_NAMESPACE").unwrap_or_default().to_owned();
        let mut record = Record {
            key: key.clone(),
            container_id: call.container_id.clone(),
            ifname: call.ifname.clone(),
            netns,
            namespace,
            pod_name: call.arg("K8S_POD_NAME").unwrap_or_default().to_owned(),
            labels: labels.to_string(),
            phase: Phase::Creating,
            addresses: Vec::new(),
            identity: None,
            attachment: None,
            regeneration: None,
        };
        self.persist(&record)?;
        match self.build(&mut record, &labels).await {
            Ok(()) => {
                self.regenerate(&record, RegenerationReason::Create);
                Ok(self.result(&record))
            }
            Err(failure) => {
                if let Err(undo) = self.undo(&key, Some(&record)).await {
                    tracing::warn!(endpoint = key, error = %undo, "cannot undo a failed ADD");
                }
                Err(failure)
            }
        }
    }

    /// The ADD's steps after its record.
    async fn build(&self, record: &mut Record, labels: &Labels) -> Result<(), Failure> {
        let addresses = self
            .ipam
            .lock()
            .expect("ipam lock")
            .allocate(&record.key)
            .map_err(|e| match e {
                super::ipam::Error::Exhausted { .. } => {
                    Failure::new(code::ADDRESSES_EXHAUSTED, "no address left", e.to_string())
                }
                e => Failure::new(
                    5,
                    "cannot store the address allocation",
                    weft_sys::error_chain(&e),
                ),
            })?;
        record.addresses = addresses.clone();
        self.persist(record)?;
        let plan = self.plan(record);
        let attachment = link::attach(self.config.node_netns.as_deref(), &plan)
            .await
            .map_err(|e| {
                Failure::new(
                    code::LINK_SETUP,
                    "cannot set up the interfaces",
                    e.to_string(),
                )
            })?;
        record.attachment = Some(attachment);
        self.persist(record)?;
        let id = self.acquire_identity(labels).await?;
        record.identity = Some(id);
        self.persist(record)?;
        self.publish(record, id).await?;
        record.phase = Phase::Ready;
        self.persist(record)
    }

    /// The security identity of `labels`, allocated (or its use counted) in etcd.
    async fn acquire_identity(&self, labels: &Labels) -> Result<u32, Failure> {
        self.identities.acquire(labels).await.map_err(|e| {
            Failure::new(
                code::IDENTITY,
                "cannot allocate the security identity",
                e.to_string(),
            )
        })
    }

    async fn publish(&self, record: &Record, id: u32) -> Result<(), Failure> {
        for ip in &record.addresses {
            let pair = IpIdentityPair {
                ip: *ip,
                mask: None,
                host_ip: self.config.node_ip,
                id,
                key: self.config.encrypt_key,
                metadata: String::new(),
                k8s_namespace: record.namespace.clone(),
                k8s_pod_name: record.pod_name.clone(),
                named_ports: Vec::new(),
            };
            let value = serde_json::to_vec(&pair).expect("a pair serialises");
            self.keys
                .put(&weft_model::layout::ip(ip), value)
                .await
                .map_err(|e| Failure::new(11, "cannot publish the ipcache entry", e.to_string()))?;
        }
        Ok(())
    }

    /// Gives the endpoint of pod `namespace`/`name` the identity of `labels`, when its
    /// pod's (or its namespace's) labels changed: the new identity first, then its
    /// ipcache entries (each IP's key rewritten in place, never deleted), the record,
    /// the old identity released, and a regeneration. Whether anything changed (no
    /// ready endpoint of the pod, or the same labels: nothing).
    ///
    /// # Errors
    /// [`Failure`] when the new identity or its entries cannot be written; the
    /// endpoint keeps its old identity then, and the next change tries again.
    pub async fn relabel(
        self: &Arc<Self>,
        namespace: &str,
        name: &str,
        labels: &Labels,
    ) -> Result<bool, Failure> {
        let _op = self.ops.lock().await;
        let Some(mut record) =
            self.store.records().into_iter().find(|r| {
                r.namespace == namespace && r.pod_name == name && r.phase == Phase::Ready
            })
        else {
            return Ok(false);
        };
        let text = labels.to_string();
        if record.labels == text {
            return Ok(false);
        }
        let old: Option<Labels> = record.labels.parse().ok();
        let id = self.acquire_identity(labels).await?;
        if let Err(e) = self.publish(&record, id).await {
            // Not adopted: the old identity's entries stay, the new one goes.
            if let Err(release) = self.identities.release(labels).await {
                tracing::warn!(endpoint = record.key, error = %release, "cannot release an identity not adopted");
            }
            return Err(e);
        }
        let previous = record.identity;
        record.labels = text;
        record.identity = Some(id);
        self.persist(&record)?;
        if let Some(old) = old {
            if let Err(e) = self.identities.release(&old).await {
                tracing::warn!(endpoint = record.key, error = %e, "cannot release the old identity");
            }
        }
        tracing::info!(endpoint = record.key, from = ?previous, to = id, "labels changed: new identity");
        // Old plugins know no labels-change reason: to them it is an identity change.
        self.regenerate(&record, RegenerationReason::IdentityChange);
        Ok(true)
    }

    /// A restored endpoint's identity and ipcache entries, on this agent's lease.
    async fn republish(&self, record: &Record) -> Result<(), Failure> {
        let labels: Labels = record
            .labels
            .parse()
            .map_err(|e: weft_model::LabelsError| {
                Failure::new(5, "the record's labels are malformed", e.to_string())
            })?;
        let id = self.acquire_identity(&labels).await?;
        if record.identity != Some(id) {
            let mut r = record.clone();
            r.identity = Some(id);
            self.persist(&r)?;
        }
        self.publish(record, id).await
    }

    /// Undoes every part of endpoint `key` that may exist, the record last.
    async fn undo(&self, key: &str, record: Option<&Record>) -> Result<(), Failure> {
        self.stop_regeneration(key);
        if let (Some(dp), Some(r)) = (self.datapath.get().cloned(), record) {
            let r = r.clone();
            let _ = tokio::task::spawn_blocking(move || dp.remove(&r)).await;
        }
        if let Some(r) = record {
            if r.identity.is_some() {
                if let Ok(labels) = r.labels.parse::<Labels>() {
                    self.identities.release(&labels).await.map_err(|e| {
                        Failure::new(11, "cannot release the security identity", e.to_string())
                    })?;
                }
            }
            for ip in &r.addresses {
                self.keys
                    .delete(&weft_model::layout::ip(ip))
                    .await
                    .map_err(|e| {
                        Failure::new(11, "cannot withdraw the ipcache entry", e.to_string())
                    })?;
            }
        }
        link::detach(self.config.node_netns.as_deref(), key)
            .await
            .map_err(|e| {
                Failure::new(
                    code::LINK_SETUP,
                    "cannot remove the interfaces",
                    e.to_string(),
                )
            })?;
        self.ipam
            .lock()
            .expect("ipam lock")
            .release(key)
            .map_err(|e| Failure::new(5, "cannot release the addresses", e.to_string()))?;
        self.store
            .remove(key)
            .map_err(|e| Failure::new(5, "cannot remove the endpoint's record", e.to_string()))
    }

    async fn check(&self, call: &CniCall) -> Result<(), Failure> {
        let key = key(call);
        let Some(record) = self.store.get(&key).filter(|r| r.phase == Phase::Ready) else {
            return Err(Failure::new(3, "no such endpoint", key));
        };
        if let Some(prev) = &call.config.prev_result {
            for ip in &record.addresses {
                if !prev.ips.iter().any(|c| c.address.addr() == *ip) {
                    return Err(Failure::new(
                        7,
                        "prevResult does not hold the endpoint's address",
                        ip.to_string(),
                    ));
                }
            }
        }
        link::check(&self.plan(&record)).await.map_err(|e| {
            Failure::new(
                code::LINK_SETUP,
                "the interfaces are not as ADD left them",
                e.to_string(),
            )
        })
    }

    /// Removes every endpoint not among the configuration's valid attachments, and
    /// whatever no record accounts for: addresses, host sides.
    async fn gc(&self, call: &CniCall) -> Result<(), Failure> {
        let valid: BTreeSet<String> = call
            .config
            .valid_attachments
            .iter()
            .flatten()
            .map(|a| format!("{}/{}", a.container_id, a.ifname))
            .collect();
        let records = self.store.records();
        let mut known = BTreeSet::new();
        for r in records {
            if valid.contains(&r.key) {
                known.insert(r.key);
            } else {
                self.undo(&r.key, Some(&r)).await?;
            }
        }
        let orphans: Vec<String> = self
            .ipam
            .lock()
            .expect("ipam lock")
            .owners()
            .into_iter()
            .filter(|o| !known.contains(o))
            .collect();
        for owner in orphans {
            self.undo(&owner, None).await?;
        }
        let named: BTreeSet<String> = known.iter().map(|k| link::host_ifname(k)).collect();
        let sides = link::host_sides(self.config.node_netns.as_deref())
            .await
            .map_err(|e| {
                Failure::new(
                    code::LINK_SETUP,
                    "cannot list the host sides",
                    e.to_string(),
                )
            })?;
        for side in sides.into_iter().filter(|s| !named.contains(s)) {
            link::remove_host_side(self.config.node_netns.as_deref(), &side)
                .await
                .map_err(|e| {
                    Failure::new(
                        code::LINK_SETUP,
                        "cannot remove a stray host side",
                        e.to_string(),
                    )
                })?;
        }
        Ok(())
    }

    fn plan(&self, record: &Record) -> Plan {
        Plan {
            key: record.key.clone(),
            netns: record.netns.clone(),
            ifname: record.ifname.clone(),
            addresses: record.addresses.clone(),
            gateways: self.config.pod_cidrs.iter().map(Ipam::gateway).collect(),
            mtu: self.config.mtu,
        }
    }

    fn result(&self, record: &Record) -> CNIResult {
        let attachment = record.attachment.clone();
        let mut interfaces = Vec::new();
        if let Some(a) = &attachment {
            interfaces.push(iface(&a.host_ifname, &a.host_mac, None));
            interfaces.push(iface(
                &record.ifname,
                &a.container_mac,
                Some(record.netns.display().to_string()),
            ));
        }
        let gateways: Vec<IpAddr> = self.config.pod_cidrs.iter().map(Ipam::gateway).collect();
        let gateway_of = |ip: &IpAddr| {
            gateways
                .iter()
                .copied()
                .find(|g| g.is_ipv4() == ip.is_ipv4())
        };
        CNIResult {
            interfaces,
            ips: record
                .addresses
                .iter()
                .map(|ip| IpConfig {
                    interface: Some(1),
                    address: IpNet::from(*ip),
                    gateway: gateway_of(ip),
                })
                .collect(),
            routes: gateways
                .iter()
                .map(|g| Route {
                    dst: if g.is_ipv4() {
                        "0.0.0.0/0".parse().expect("a route")
                    } else {
                        "::/0".parse().expect("a route")
                    },
                    gw: Some(*g),
                    mtu: None,
                    advmss: None,
                    priority: None,
                    table: None,
                    scope: None,
                })
                .collect(),
            dns: None,
        }
    }
}

fn iface(name: &str, mac: &str, sandbox: Option<String>) -> Interface {
    Interface {
        name: name.to_owned(),
        mac: mac.to_owned(),
        mtu: None,
        sandbox,
        socket_path: None,
        pci_id: None,
    }
}

/// The endpoint's key: `<container id>/<ifname>`.
fn key(call: &CniCall) -> String {
    format!("{}/{}", call.container_id, call.ifname)
}

/// The pod's labels as the runtime passed them: `runtimeConfig.labels` (an object)
/// or the CNI conventions' `args.cni.labels` (a list of `{key, value}`).
fn pod_labels(call: &CniCall) -> Result<BTreeMap<String, String>, Failure> {
    let mut labels = BTreeMap::new();
    let bad = |what: &str| Failure::new(7, "malformed pod labels", what.to_owned());
    if let Some(v) = call
        .config
        .runtime_config
        .as_ref()
        .and_then(|r| r.custom.get("labels"))
    {
        let map = v
            .as_object()
            .ok_or_else(|| bad("runtimeConfig.labels is not an object"))?;
        for (k, v) in map {
            let v = v
                .as_str()
                .ok_or_else(|| bad(&format!("runtimeConfig.labels.{k} is not a string")))?;
            labels.insert(k.clone(), v.to_owned());
        }
    }
    if let Some(v) = call
        .config
        .args
        .as_ref()
        .and_then(|a| a.get("cni"))
        .and_then(|c| c.get("labels"))
    {
        let list = v
            .as_array()
            .ok_or_else(|| bad("args.cni.labels is not a list"))?;
        for item in list {
            let (Some(k), Some(v)) = (item["key"].as_str(), item["value"].as_str()) else {
                return Err(bad("an args.cni.labels item lacks a string key or value"));
            };
            labels.insert(k.to_owned(), v.to_owned());
        }
    }
    for k in labels.keys() {
        if k.is_empty() || k.contains(';') || k.contains('=') {
            return Err(bad(&format!("label key {k:?}")));
        }
    }
    if labels.values().any(|v| v.contains(';')) {
        return Err(bad("a label value holds ';'"));
    }
    Ok(labels)
}

/// The identity's labels: the pod's, its namespace's and its cluster's, all `k8s:`.
pub fn identity_labels(cluster: &str, namespace: &str, pod: &BTreeMap<String, String>) -> Labels {
    let k8s = |key: &str, value: &str| Label {
        source: "k8s".into(),
        key: key.into(),
        value: value.into(),
    };
    pod.iter()
        .map(|(k, v)| k8s(k, v))
        .chain([k8s(NAMESPACE_LABEL, namespace), k8s(CLUSTER_LABEL, cluster)])
        .collect()
}
