//! Publishes this node's record to its own cluster's etcd, on a lease kept alive.

use std::time::{Duration, SystemTime};
use tokio::sync::watch;
use weft_kvstore::{Backoff, Client, Error};
use weft_model::layout::{self, Layout};
use weft_model::{ClusterConfig, Node, Resource};

/// What this node publishes about itself.
#[derive(Debug, Clone)]
pub struct Registration {
    /// This node's record; its `Cluster` and `Name` make the key.
    pub node: Node,
    /// The lease's time to live; the key vanishes this long after the agent dies.
    pub lease_ttl: Duration,
}

/// Keeps this node's record in etcd until the future is dropped: grants a lease, puts
/// the record (and, when the cluster config announces sync canaries, the nodes'
/// canary) on it and keeps it alive. When the lease is lost — etcd restarted without
/// its data, or it expired during an outage — everything is written again on a new one.
/// `lease` tells the node's other keys ([`super::LeasedKeys`]) which lease is current.
pub async fn run_registration(
    client: Client,
    reg: Registration,
    lease: watch::Sender<Option<i64>>,
) {
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
    let ttl = reg.lease_ttl.as_secs().max(2) as i64;
    loop {
        match publish(&client, &reg, ttl).await {
            Ok(id) => {
                backoff.reset();
                tracing::info!(node = %reg.node.name, lease = id, "node record published");
                lease.send_replace(Some(id));
                let e = keep_alive(&client, id, reg.lease_ttl / 3).await;
                lease.send_replace(None);
                tracing::warn!(error = %e, "node lease lost; publishing again");
            }
            Err(e) => tracing::warn!(error = %e, "cannot publish node record"),
        }
        tokio::time::sleep(backoff.next_delay()).await;
    }
}

async fn publish(client: &Client, reg: &Registration, ttl: i64) -> Result<i64, Error> {
    let lease = client.grant_lease(ttl).await?;
    let (cluster, name) = (&reg.node.cluster, &reg.node.name);
    let value = serde_json::to_vec(&reg.node).expect("a node always serialises");
    client
        .put(&layout::node(cluster, name), value, lease)
        .await?;
    let config = client.get(&layout::cluster_config(cluster)).await?;
    let canaries = config
        .and_then(|c| serde_json::from_slice::<ClusterConfig>(&c).ok())
        .is_some_and(|c| c.capabilities.synced_canaries);
    if canaries {
        // Written after the record is acknowledged: readers that wait for the canary
        // then see it.
        let key = Layout::PLAIN.canary(Resource::Nodes, cluster);
        let now = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
        client.put(&key, now, lease).await?;
    }
    Ok(lease)
}

/// Refreshes `lease` every `every` until that fails.
async fn keep_alive(client: &Client, lease: i64, every: Duration) -> Error {
    loop {
        tokio::time::sleep(every).await;
        if let Err(e) = client.keep_alive_once(lease).await {
            return e;
        }
    }
}
