//! This cluster's own kvstore, read by the same reflector as every remote cluster: its
//! nodes, ipcache entries and identities, as [`ClusterEvent`]s of this cluster.
//!
//! Its services are not read back: what this cluster exports it knows already.
//!
//! [`ClusterEvent`]: weft_model::remote::ClusterEvent

use super::reflector::Reflector;
use super::remote_cluster::error_chain;
use super::resource::Owner;
use super::Resource;
use futures::StreamExt;
use std::sync::Arc;
use tokio_stream::StreamMap;
use weft_kvstore::{list_watch_raw, Client};
use weft_model::layout::Layout;
use weft_model::remote::Observer;

/// The resources read from this cluster's own kvstore.
pub const LOCAL_RESOURCES: [Resource; 3] =
    [Resource::Nodes, Resource::IpCache, Resource::Identities];

/// This cluster, as its own kvstore's values must name it.
#[derive(Debug, Clone)]
pub struct LocalCluster {
    /// Its name: a node naming another cluster is refused.
    pub name: String,
    /// Its ID, when it has one (0 is none): a node naming another ID is refused.
    pub id: u32,
}

/// Feeds `observer` from this cluster's etcd until dropped; `synced(r)` is called
/// after each complete list of resource `r` (the first, and each re-list), once the
/// observer has been told all of it. A broken watch is logged and resumed by the
/// list-watch stage; a refused value is the observer's to count
/// ([`Observer::on_refused`]).
pub async fn run_local_cluster(
    client: Client,
    cluster: LocalCluster,
    observer: Arc<dyn Observer>,
    mut synced: impl FnMut(Resource) + Send,
) {
    let name = cluster.name.as_str();
    let id = (cluster.id != 0).then_some(cluster.id);
    let prefixes = Resource::ALL.map(|r| Layout::PLAIN.prefix(r, name));
    let mut streams = StreamMap::new();
    for r in LOCAL_RESOURCES {
        let prefix = prefixes[r.index()].clone();
        streams.insert(r, list_watch_raw(client.clone(), prefix));
    }
    // This cluster's own keys: no limit beyond etcd's.
    let mut reflector = Reflector::new(usize::MAX);
    while let Some((r, item)) = streams.next().await {
        let event = match item {
            Ok(event) => event,
            Err(e) => {
                tracing::warn!(resource = %r, error = %error_chain(&e), "local kvstore");
                continue;
            }
        };
        let owner = Owner { name, id };
        let change = reflector.apply(r, owner, &prefixes[r.index()], event);
        change.tell(&*observer, name, id, r);
        if let super::reflector::Change::Listed { .. } = change {
            synced(r);
        }
    }
}
