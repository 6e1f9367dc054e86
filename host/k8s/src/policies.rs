//! The policies the API holds — NetworkPolicy, CiliumNetworkPolicy,
//! CiliumClusterwideNetworkPolicy — as one [`PolicySet`], through the same parser and
//! semantics as the policy directory's files (`weft_state::policy::parse`). An object
//! that does not parse is refused alone, named `Kind namespace/name` with its reason;
//! the others stay in force.

use crate::{KubernetesSources, Source};
use serde::Serialize;
use std::sync::Arc;
use tokio::sync::{broadcast, watch};
use weft_state::policy::{parse, PolicySet};

/// The policies of the three stores now, parsed each alone, in a stable order.
pub fn read(sources: &KubernetesSources) -> PolicySet {
    let mut set = PolicySet::default();
    add(&mut set, &sources.network_policies, "NetworkPolicy");
    add(
        &mut set,
        &sources.cilium_network_policies,
        "CiliumNetworkPolicy",
    );
    add(
        &mut set,
        &sources.cilium_clusterwide_network_policies,
        "CiliumClusterwideNetworkPolicy",
    );
    set
}

fn add<K>(set: &mut PolicySet, source: &Source<K>, kind: &str)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let mut objects: Vec<Arc<K>> = source.store().state();
    let name = |o: &K| {
        let m = o.meta();
        match &m.namespace {
            Some(ns) => format!("{kind} {ns}/{}", m.name.as_deref().unwrap_or_default()),
            None => format!("{kind} {}", m.name.as_deref().unwrap_or_default()),
        }
    };
    objects.sort_by_key(|o| name(o));
    for o in objects {
        let mut value = serde_json::to_value(&*o).expect("an API object serialises");
        // What the parser reads as a file: the kind and version (typed objects from
        // the store may lack them) and no server-side status.
        value["apiVersion"] = K::api_version(&()).as_ref().into();
        value["kind"] = K::kind(&()).as_ref().into();
        if let Some(m) = value.as_object_mut() {
            m.remove("status");
        }
        let text = serde_json::to_string(&value).expect("JSON");
        match parse(&name(&o), &text) {
            Ok(p) => set.policies.push(p),
            Err(r) => set.refused.push(r),
        }
    }
}

/// Publishes the API's policies on `tx` once every policy source has its initial list,
/// and again after changes, until dropped. A burst of changes is one round: the round
/// reads the stores after the feed is drained.
pub async fn follow(sources: KubernetesSources, tx: watch::Sender<Arc<PolicySet>>) {
    let mut feeds = (
        sources.network_policies.subscribe(),
        sources.cilium_network_policies.subscribe(),
        sources.cilium_clusterwide_network_policies.subscribe(),
    );
    loop {
        let synced = sources.network_policies.status().synced
            && sources.cilium_network_policies.status().synced
            && sources.cilium_clusterwide_network_policies.status().synced;
        if synced {
            let set = read(&sources);
            if **tx.borrow() != set {
                for r in &set.refused {
                    tracing::warn!(object = r.file, reason = r.reason, "policy refused");
                }
                tracing::info!(
                    policies = set.policies.len(),
                    refused = set.refused.len(),
                    "Kubernetes policies read"
                );
                tx.send_replace(Arc::new(set));
            }
        }
        let closed = |r: &Result<_, broadcast::error::RecvError>| {
            matches!(r, Err(broadcast::error::RecvError::Closed))
        };
        let woke = tokio::select! {
            r = feeds.0.recv() => closed(&r.map(|_| ())),
            r = feeds.1.recv() => closed(&r.map(|_| ())),
            r = feeds.2.recv() => closed(&r.map(|_| ())),
        };
        if woke {
            return;
        }
        // The rest of a burst: already in the stores, read in the one round.
        while feeds.0.try_recv().is_ok() || feeds.1.try_recv().is_ok() || feeds.2.try_recv().is_ok()
        {
        }
    }
}
