//! This cluster's config in its own etcd, where every agent of the mesh that reads
//! this cluster finds it (`connection.rs` is the reading side).

use weft_kvstore::{Client, Error};
use weft_model::{layout, ClusterConfig};

/// Writes `config` as `cluster`'s config and then the "config required" marker, so
/// that a reader that sees the marker also finds the config.
///
/// # Errors
/// [`Error`] when etcd cannot be written; the marker is then not written either.
pub async fn write_cluster_config(
    client: &Client,
    cluster: &str,
    config: &ClusterConfig,
) -> Result<(), Error> {
    let value = serde_json::to_vec(config).expect("a cluster config serialises");
    client
        .put(&layout::cluster_config(cluster), value, 0)
        .await?;
    client.put(layout::HAS_CLUSTER_CONFIG, "true", 0).await
}
