//! This cluster's own kvstore as an [`Observer`] of the state: its nodes, ipcache
//! entries and identities enter with source `kvstore`, past no claims gate (this
//! cluster speaks for itself), and this node's own record is skipped (the agent states
//! it with source `local`).

use crate::ipcache::{Owner, Source};
use crate::{pair_fact, State};
use std::sync::Arc;
use weft_model::remote::{ClusterEvent, Kept, Observer, Value};
use weft_model::Node;

/// The state's observer of this cluster's own kvstore.
pub struct LocalKvStore {
    state: Arc<State>,
    own_node: String,
}

impl LocalKvStore {
    /// Feeds `state`, skipping the node named `own_node`.
    pub fn new(state: Arc<State>, own_node: impl Into<String>) -> Self {
        Self {
            state,
            own_node: own_node.into(),
        }
    }

    fn is_own(&self, node: &Node) -> bool {
        node.name == self.own_node
    }

    /// Withdraws what `old`, kept under `key`, stated.
    fn withdraw(&self, key: &str, old: &Kept) {
        match old.value() {
            Some(Value::Node(node)) if !self.is_own(node) => {
                self.state.nodes.delete(&node.cluster, &node.name);
            }
            Some(Value::Identity(identity)) => self
                .state
                .identities
                .lock()
                .expect("identity lock poisoned")
                .remove_local_cluster(identity.id),
            _ => {
                if let Some(prefix) = old.ip_prefix() {
                    let owner = Owner::new(Source::KvStore, key);
                    self.state.ipcache.remove(prefix, &owner);
                }
            }
        }
    }
}

impl Observer for LocalKvStore {
    fn on_event(&self, event: ClusterEvent<'_>) {
        match event {
            ClusterEvent::Upsert {
                key, value, old, ..
            } => match value {
                Value::Node(node) => {
                    // A key renamed to another node withdraws the one it named.
                    if let Some(Value::Node(was)) = old.and_then(Kept::value) {
                        if was.name != node.name {
                            self.withdraw(key, old.expect("just matched"));
                        }
                    }
                    if !self.is_own(node) {
                        self.state.nodes.upsert(Source::KvStore, (**node).clone());
                    }
                }
                Value::IpIdentity(pair) => match pair_fact(pair) {
                    Some((prefix, fact)) => {
                        let owner = Owner::new(Source::KvStore, key.clone());
                        // The same key at another prefix: the old one goes.
                        if let Some(was) = old.and_then(Kept::ip_prefix).filter(|p| *p != prefix) {
                            self.state.ipcache.remove(was, &owner);
                        }
                        self.state.ipcache.upsert(prefix, owner, fact);
                    }
                    None => {
                        if let Some(old) = old {
                            self.withdraw(key, old);
                        }
                        self.state.reject(&format_args!("{key}: no valid prefix"));
                    }
                },
                Value::Identity(identity) => self
                    .state
                    .identities
                    .lock()
                    .expect("identity lock poisoned")
                    .upsert_local_cluster(identity.id, identity.labels.clone()),
                Value::Service(_) => {} // Not read from this cluster's kvstore.
            },
            // Sizing the ipcache for this cluster's list is the state's, as for any.
            ClusterEvent::Expect { .. } => self.state.on_event(event),
            ClusterEvent::Delete { key, old, .. } => self.withdraw(key, old),
        }
    }

    fn on_refused(&self, _cluster: &str, error: &str) {
        self.state.reject(&error);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::NodeId;

    fn value(json: &str) -> Value {
        Value::IpIdentity(serde_json::from_str(json).unwrap())
    }

    fn node(name: &str) -> Value {
        let json = format!(
            r#"{{"Name":"{name}","Cluster":"local","IPAddresses":[{{"Type":"InternalIP","IP":"192.0.2.{}"}}]}}"#,
            name.len()
        );
        Value::Node(Box::new(serde_json::from_str(&json).unwrap()))
    }

    fn upsert(local: &LocalKvStore, key: &Arc<str>, value: &Value, old: Option<&Kept>) {
        local.on_event(ClusterEvent::Upsert {
            cluster: "local",
            cluster_id: None,
            key,
            value,
            old,
        });
    }

    fn kept(v: &Value) -> Kept {
        Kept::of(v, |_| 1)
    }

    #[test]
    fn an_entry_moved_to_another_prefix_leaves_the_old_one() {
        let state = Arc::new(State::new(NodeId {
            cluster: "local".into(),
            name: "me".into(),
        }));
        let local = LocalKvStore::new(state.clone(), "me");
        let key: Arc<str> = "cilium/state/ip/v1/default/10.1.0.0".into();
        let a = value(r#"{"IP":"10.1.0.0","Mask":"//8AAA==","ID":7}"#);
        let b = value(r#"{"IP":"10.1.0.0","Mask":"////AA==","ID":8}"#);
        upsert(&local, &key, &a, None);
        upsert(&local, &key, &b, Some(&kept(&a)));
        let at = |p: &str| state.ipcache.lookup(p.parse().unwrap()).map(|e| e.identity);
        assert_eq!(at("10.1.0.0/24"), Some(8));
        assert_eq!(
            at("10.1.0.0/16"),
            None,
            "the /16 the key stated before went"
        );
        local.on_event(ClusterEvent::Delete {
            cluster: "local",
            key: &key,
            old: &kept(&b),
        });
        assert_eq!(state.ipcache.len(), 0);
    }

    #[test]
    fn this_nodes_own_record_is_never_stated_nor_withdrawn() {
        let state = Arc::new(State::new(NodeId {
            cluster: "local".into(),
            name: "me".into(),
        }));
        let local = LocalKvStore::new(state.clone(), "me");
        let (mine, peer): (Arc<str>, Arc<str>) = ("n/me".into(), "n/peer".into());
        upsert(&local, &mine, &node("me"), None);
        upsert(&local, &peer, &node("peer"), None);
        assert_eq!(state.nodes.len(), 1, "only the peer");
        local.on_event(ClusterEvent::Delete {
            cluster: "local",
            key: &mine,
            old: &kept(&node("me")),
        });
        assert_eq!(
            state.nodes.len(),
            1,
            "deleting our own record withdraws no peer"
        );
        // The key renamed to another node: the one it named goes.
        upsert(&local, &peer, &node("other"), Some(&kept(&node("peer"))));
        assert_eq!(state.nodes.len(), 1);
        local.on_refused("local", "n/x: malformed");
        assert_eq!(state.totals().rejected, 1, "a refusal is counted");
    }
}
