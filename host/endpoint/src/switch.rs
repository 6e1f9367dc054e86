//! The endpoints' datapath as the agent runs it: an endpoint is switched to the
//! agent's generation at the end of its regeneration, its policy computed from the
//! policy directory and the identities known at that moment; when either changes an
//! endpoint's entries, the endpoint regenerates.

use super::manager::EndpointManager;
use super::regeneration::EndpointDatapath;
use super::store::Record;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use weft_datapath::NodeDatapath;
use weft_hooks::RegenerationReason;
use weft_state::policy::PolicySet;
use weft_state::State;

/// Why an endpoint could not be switched into the node's datapath.
#[derive(Debug, thiserror::Error)]
pub enum SwitchError {
    /// Its record has no interfaces yet (its ADD did not get that far).
    #[error("the endpoint has no interfaces")]
    NoInterfaces,
    /// Its recorded labels do not parse, so no policy selects it.
    #[error("the endpoint's labels")]
    Labels(#[source] weft_model::LabelsError),
    /// The datapath refused its entries or its programs.
    #[error("the datapath")]
    Datapath(#[source] weft_datapath::Error),
}

/// Switches workload endpoints to the node's datapath with their policy computed from
/// the policies and the identities known at that moment, and regenerates those whose
/// policy changes with them.
pub struct EndpointSwitch {
    node: NodeDatapath,
    state: Arc<State>,
    policies: watch::Receiver<Arc<PolicySet>>,
    /// What each switched endpoint's maps hold.
    written: std::sync::Mutex<std::collections::HashMap<String, EndpointEntries>>,
    /// The inputs last read, and the policies computed from them.
    snapshot: std::sync::Mutex<Option<PolicySnapshot>>,
}

/// An endpoint's datapath entries: its host side's ifindex and name, its info and its
/// allowed flows.
type EndpointEntries = (
    u32,
    String,
    weft_datapath::EndpointInfo,
    std::collections::BTreeSet<weft_datapath::PolicyKey>,
);

/// The identities (at one version of the cache) and the policies, and the endpoint
/// policies computed from them by labels: many endpoints switched after a restart
/// share one copy of 50,000 identities, and endpoints with the same labels one
/// computation.
struct PolicySnapshot {
    version: u64,
    policies: Arc<PolicySet>,
    identities: BTreeMap<u32, Arc<weft_model::Labels>>,
    computed: std::collections::HashMap<String, weft_state::policy::EndpointPolicy>,
}

/// How long changes gather before the endpoints are looked at: a cluster's identities
/// arrive in a burst, and one round serves the whole burst.
const POLICY_BATCH: Duration = Duration::from_millis(100);

impl EndpointSwitch {
    /// Switches into `node`'s generation, with `policies` and `state`'s identities.
    pub fn new(
        node: NodeDatapath,
        state: Arc<State>,
        policies: watch::Receiver<Arc<PolicySet>>,
    ) -> Self {
        Self {
            node,
            state,
            policies,
            written: Default::default(),
            snapshot: Default::default(),
        }
    }

    /// `r`'s entries under the policies and identities as they are now.
    fn entries(&self, r: &Record) -> Result<EndpointEntries, SwitchError> {
        let a = r.attachment.as_ref().ok_or(SwitchError::NoInterfaces)?;
        let policy = self.policy(&r.labels)?;
        let (info, keys) =
            weft_datapath::policy_entries(a.host_ifindex, r.identity.unwrap_or_default(), &policy)
                .map_err(SwitchError::Datapath)?;
        Ok((a.host_ifindex, a.host_ifname.clone(), info, keys))
    }

    /// The policy of an endpoint labelled `labels`, from the snapshot, which is read
    /// again only when the identities or the policies changed.
    fn policy(&self, labels: &str) -> Result<weft_state::policy::EndpointPolicy, SwitchError> {
        let policies = self.policies.borrow().clone();
        let mut snapshot = self.snapshot.lock().expect("snapshot lock");
        let current = {
            let ids = self.state.identities.lock().expect("identities lock");
            let version = ids.version();
            match snapshot.take() {
                Some(s) if s.version == version && Arc::ptr_eq(&s.policies, &policies) => s,
                _ => PolicySnapshot {
                    version,
                    policies,
                    identities: ids.all(),
                    computed: Default::default(),
                },
            }
        };
        let s = snapshot.insert(current);
        if let Some(p) = s.computed.get(labels) {
            return Ok(p.clone());
        }
        let parsed: weft_model::Labels = labels.parse().map_err(SwitchError::Labels)?;
        let p = weft_state::policy::compute(&s.policies.policies, &parsed, &s.identities);
        s.computed.insert(labels.to_owned(), p.clone());
        Ok(p)
    }

    /// Regenerates every switched endpoint whose entries the policies or the
    /// identities changed, as they change.
    pub async fn follow(self: Arc<Self>, manager: Arc<EndpointManager>) {
        let mut policies = self.policies.clone();
        let mut identities = self
            .state
            .identities
            .lock()
            .expect("identities lock")
            .subscribe();
        loop {
            let reason = tokio::select! {
                changed = policies.changed() => match changed {
                    Ok(()) => RegenerationReason::PolicyChange,
                    Err(_) => return,
                },
                changed = identities.changed() => match changed {
                    Ok(()) => RegenerationReason::IdentityChange,
                    Err(_) => return,
                },
            };
            // Batching, not a synchronisation: what changes meanwhile is this round's.
            tokio::time::sleep(POLICY_BATCH).await;
            policies.mark_unchanged();
            identities.mark_unchanged();
            // Read as each endpoint is looked at: a regeneration that ended since the
            // round began has written what it switched.
            let regenerated = manager.regenerate_where(reason, |r| {
                self.entries(r).is_ok_and(|e| {
                    self.written.lock().expect("written lock").get(&r.key) != Some(&e)
                })
            });
            if regenerated > 0 {
                tracing::info!(
                    endpoints = regenerated,
                    ?reason,
                    "endpoints regenerate: their policy changed"
                );
            }
        }
    }
}

impl EndpointDatapath for EndpointSwitch {
    fn switch(&self, record: &Record) -> Result<(), SwitchError> {
        let entries = self.entries(record)?;
        let (ifindex, name, info, keys) = &entries;
        self.node
            .switch_endpoint(name, *ifindex, *info, keys)
            .map_err(SwitchError::Datapath)?;
        self.written
            .lock()
            .expect("written lock")
            .insert(record.key.clone(), entries);
        Ok(())
    }

    fn remove(&self, record: &Record) {
        if let Some(a) = &record.attachment {
            self.node.remove_endpoint(&a.host_ifname, a.host_ifindex);
        }
        self.written
            .lock()
            .expect("written lock")
            .remove(&record.key);
    }
}
