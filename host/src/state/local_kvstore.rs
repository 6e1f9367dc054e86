//! This cluster's own kvstore: its nodes, ipcache entries and identities, with source
//! `kvstore`.

use super::{pair_fact, State};
use crate::ipcache::{Owner, Prefix, Source};
use crate::kvstore::{list_watch, Client, Event};
use crate::model::layout::Layout;
use crate::model::{decode_json, DecodeError, Identity, IpIdentityPair, Node, Resource};
use futures::StreamExt;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::watch;
use tokio_stream::StreamMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Nodes,
    IpCache,
    Identities,
}

/// What a key stands for in the state, so that a delete knows what to withdraw.
#[derive(Debug, PartialEq, Eq)]
enum Held {
    Node { cluster: String, name: String },
    Prefix(Prefix),
    Identity(u32),
}

/// Feeds `state` from this cluster's etcd until dropped. This node's own record is
/// skipped: the agent states it with source `local`. `nodes_synced` turns true once
/// the first list of this cluster's nodes is in.
pub async fn run_local_kvstore(
    client: Client,
    state: Arc<State>,
    cluster: String,
    own_node: String,
    nodes_synced: watch::Sender<bool>,
) {
    let at = |r| Layout::PLAIN.prefix(r, &cluster);
    let prefixes = [
        (Kind::Nodes, at(Resource::Nodes)),
        (Kind::IpCache, at(Resource::IpCache)),
        (Kind::Identities, at(Resource::Identities)),
    ];
    let mut streams = StreamMap::new();
    for (kind, prefix) in &prefixes {
        streams.insert(*kind, list_watch(client.clone(), prefix.clone()));
    }
    let mut held: HashMap<String, Held> = HashMap::new();
    while let Some((kind, item)) = streams.next().await {
        match item {
            Ok(Event::Upsert { key, value, .. }) => {
                let prefix = &prefixes
                    .iter()
                    .find(|(k, _)| *k == kind)
                    .expect("known kind")
                    .1;
                let suffix = key.strip_prefix(prefix.as_str()).unwrap_or(&key);
                if kind == Kind::Nodes && suffix == own_node {
                    continue;
                }
                match apply(&state, kind, &key, suffix, &value) {
                    Ok(now) => {
                        let previous = held.insert(key.clone(), now);
                        // Withdraw only what the new value no longer covers (say, a
                        // pair whose prefix changed); the same target was replaced.
                        if let Some(old) = previous.filter(|old| held.get(&key) != Some(old)) {
                            withdraw(&state, &key, old);
                        }
                    }
                    Err(e) => {
                        // The value's state is unknown: what the key held goes.
                        if let Some(old) = held.remove(&key) {
                            withdraw(&state, &key, old);
                        }
                        state.reject(&e);
                    }
                }
            }
            Ok(Event::Delete { key }) => {
                if let Some(old) = held.remove(&key) {
                    withdraw(&state, &key, old);
                }
            }
            Ok(Event::TooLarge { key }) => {
                // Its value is unknown: what the key held goes.
                if let Some(old) = held.remove(&key) {
                    withdraw(&state, &key, old);
                }
                state.reject(&format_args!("{key}: value too large to read"));
            }
            Ok(Event::InitDone { .. }) if kind == Kind::Nodes => {
                nodes_synced.send_if_modified(|synced| !std::mem::replace(synced, true));
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "local kvstore"),
        }
    }
}

fn apply(
    state: &State,
    kind: Kind,
    key: &str,
    suffix: &str,
    value: &[u8],
) -> Result<Held, DecodeError> {
    match kind {
        Kind::Nodes => {
            let node: Node = decode_json(key, value)?;
            let held = Held::Node {
                cluster: node.cluster.clone(),
                name: node.name.clone(),
            };
            state.nodes.upsert(Source::KvStore, node);
            Ok(held)
        }
        Kind::IpCache => {
            let pair: IpIdentityPair = decode_json(key, value)?;
            let (prefix, fact) =
                pair_fact(&pair).ok_or_else(|| DecodeError::new(key, "no valid prefix"))?;
            state
                .ipcache
                .upsert(prefix, Owner::new(Source::KvStore, key), fact);
            Ok(Held::Prefix(prefix))
        }
        Kind::Identities => {
            let identity = Identity::decode(key, suffix, value)?;
            let mut ids = state.identities.lock().expect("identity lock poisoned");
            ids.upsert_local_cluster(identity.id, identity.labels);
            Ok(Held::Identity(identity.id))
        }
    }
}

fn withdraw(state: &State, key: &str, held: Held) {
    match held {
        Held::Node { cluster, name } => state.nodes.delete(&cluster, &name),
        Held::Prefix(prefix) => {
            state
                .ipcache
                .remove(prefix, &Owner::new(Source::KvStore, key));
        }
        Held::Identity(id) => state
            .identities
            .lock()
            .expect("identity lock poisoned")
            .remove_local_cluster(id),
    }
}
