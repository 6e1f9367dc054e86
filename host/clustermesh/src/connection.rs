//! The connection life of a remote cluster: connect, read and check its cluster
//! config, then watch its resources until the config changes or the task is stopped.

use super::remote_cluster::{error_chain, RemoteCluster, StreamKey};
use super::shared::Shared;
use super::Resource;
use futures::StreamExt;
use std::sync::Arc;
use tokio::time::Instant;
use tokio_stream::StreamMap;
use weft_kvstore::{self as kvstore, list_watch, Backoff, Client, Endpoints, Event};
use weft_model::layout::{self, Layout, HAS_CLUSTER_CONFIG};
use weft_model::ClusterConfig;

/// Why an attempt did not lead to watching.
enum NotConnected {
    /// Definitive until something changes: waiters are released as disconnected.
    Refused(String),
    /// Transient: waiters keep waiting.
    Transient(String),
}

struct Connected {
    client: Client,
    layout: Layout,
    config: Option<Vec<u8>>,
}

/// Runs until aborted by the mesh (on removal, stop, or a changed config file).
pub(crate) async fn run(cluster: Arc<RemoteCluster>, mesh: Arc<Shared>, endpoints: Endpoints) {
    let retry = mesh.config.retry;
    let mut backoff = Backoff::new(retry.0, retry.1);
    let started = Instant::now();
    loop {
        match connect(&cluster, &mesh, &endpoints, started).await {
            Ok(conn) => {
                backoff.reset();
                let reason = watch(&cluster, conn).await;
                tracing::info!(cluster = %cluster.name, %reason, "reconnecting remote cluster");
                continue;
            }
            Err(NotConnected::Refused(reason)) => cluster.refuse(reason),
            Err(NotConnected::Transient(error)) => cluster.note_error(error),
        }
        tokio::time::sleep(backoff.next_delay()).await;
    }
}

async fn connect(
    cluster: &RemoteCluster,
    mesh: &Shared,
    endpoints: &Endpoints,
    started: Instant,
) -> Result<Connected, NotConnected> {
    let name = &*cluster.name;
    let client = Client::connect(endpoints, &mesh.config.kvstore)
        .await
        .map_err(|e| NotConnected::Refused(error_chain(&e)))?;
    let transient = |e: kvstore::Error| NotConnected::Transient(error_chain(&e));
    let key = layout::cluster_config(name);
    let raw = client.get(&key).await.map_err(transient)?;
    let config = match &raw {
        Some(bytes) => Some(serde_json::from_slice::<ClusterConfig>(bytes).map_err(|e| {
            NotConnected::Refused(format!("malformed cluster config at {key:?}: {e}"))
        })?),
        None => {
            if client
                .get(HAS_CLUSTER_CONFIG)
                .await
                .map_err(transient)?
                .is_some()
            {
                let waited = started.elapsed();
                let msg = format!(
                    "cluster config {key:?} is required ({HAS_CLUSTER_CONFIG:?} exists) but missing after {}s",
                    waited.as_secs()
                );
                return Err(if waited < mesh.config.cluster_config_timeout {
                    NotConnected::Transient(msg)
                } else {
                    NotConnected::Refused(msg)
                });
            }
            None
        }
    };
    let id = config.as_ref().map(|c| c.id);
    if let Some(id) = id {
        if let Some(accepted) = cluster.accepted_id().filter(|a| *a != id) {
            let e = super::cluster_ids::IdError::Changed { id, accepted };
            return Err(NotConnected::Refused(e.to_string()));
        }
        mesh.claim_id(name, id)
            .map_err(|e| NotConnected::Refused(e.to_string()))?;
    }
    let layout = Layout::of(config.as_ref());
    cluster.accept(id);
    tracing::info!(cluster = name, ?id, ?layout, "remote cluster connected");
    Ok(Connected {
        client,
        layout,
        config: raw,
    })
}

/// Watches until the cluster config changes; returns why it stopped.
async fn watch(cluster: &RemoteCluster, conn: Connected) -> String {
    let name = &*cluster.name;
    let config_key = layout::cluster_config(name);
    let prefixes = Resource::ALL.map(|r| conn.layout.prefix(r, name));
    let mut streams = StreamMap::new();
    let start = |streams: &mut StreamMap<_, _>, r: Resource| {
        // The cluster's store keeps the keys and drains what a list does not repeat.
        let prefix = prefixes[r.index()].clone();
        streams.insert(
            StreamKey::Resource(r),
            kvstore::list_watch_raw(conn.client.clone(), prefix),
        );
    };
    streams.insert(
        StreamKey::Config,
        list_watch(conn.client.clone(), config_key.clone()),
    );
    if conn.layout.canaries {
        let prefix = Layout::canaries_prefix(name);
        streams.insert(StreamKey::Canaries, list_watch(conn.client.clone(), prefix));
    } else {
        for r in Resource::ALL {
            start(&mut streams, r);
        }
    }
    while let Some((key, item)) = streams.next().await {
        let event = match item {
            Ok(event) => event,
            Err(e) => {
                cluster.stream_error(key, &e);
                continue;
            }
        };
        match (key, event) {
            (StreamKey::Resource(r), event) => cluster.apply(r, &prefixes[r.index()], event),
            (StreamKey::Config, Event::Upsert { key, value, .. }) if key == config_key => {
                if conn.config.as_deref() != Some(&value[..]) {
                    return "cluster config changed".into();
                }
            }
            (StreamKey::Config, Event::Delete { key }) if key == config_key => {
                return "cluster config deleted".into();
            }
            (StreamKey::Canaries, Event::Upsert { key, .. }) => {
                let resource = conn.layout.canary_resource(name, &key);
                if let Some(r) =
                    resource.filter(|r| !streams.contains_key(&StreamKey::Resource(*r)))
                {
                    tracing::info!(cluster = name, resource = %r, "sync canary found: watching");
                    start(&mut streams, r);
                }
            }
            (key, _) => cluster.stream_ok(key),
        }
    }
    "every stream ended".into()
}
