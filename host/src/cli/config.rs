//! From the arguments to what they configure: the agent's [`agent::Config`], and the
//! cluster config `weftd cluster-config` publishes.

use super::{ClusterConfigArgs, Ipam, RunArgs};
use crate::{agent, clustermesh, kvstore, plugins};

impl RunArgs {
    /// The agent's configuration.
    pub fn into_config(self) -> agent::Config {
        let kvstore = kvstore::Config {
            page_size: self.kvstore.kvstore_page_size,
            max_in_flight: self.kvstore.kvstore_max_in_flight,
            qps: self.kvstore.kvstore_qps,
            ..kvstore::Config::default()
        };
        let node_name = self.node_name.unwrap_or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_owned())
                .unwrap_or_else(|_| "localhost".into())
        });
        let wg = self.wireguard;
        let wireguard = wg.wireguard.then(|| {
            let mut c = crate::wireguard::NodeWireGuardConfig::new(
                wg.wireguard_device,
                self.datapath.datapath_netns.clone(),
            );
            if let Some(helper) = wg.wireguard_helper {
                c.helper = helper;
            }
            c.external_helper = wg.wireguard_external_helper;
            c.mtu_device = self.datapath.native_device.clone();
            c.wait_for_remote_nodes = !wg.wireguard_unsafe_early_gc;
            c
        });
        agent::Config {
            mesh: clustermesh::Config {
                cluster_name: self.cluster_name,
                cluster_id: self.cluster_id,
                max_connected_clusters: self.max_connected_clusters,
                max_keys_per_cluster: self.clustermesh_max_keys_per_cluster,
                kvstore,
                ..clustermesh::Config::default()
            },
            kvstore_endpoints: self.kvstore_endpoints,
            clustermesh_config: self.clustermesh_config,
            prometheus_serve_addr: self.prometheus_serve_addr,
            health_addr: Some(self.health_addr),
            state_dir: self.state_dir,
            ip_identities_sync_timeout: self.clustermesh_sync_timeout,
            policy_dir: self.policy_dir,
            kubernetes: agent::KubernetesConfig {
                kubeconfig: self.k8s_kubeconfig_path,
                labels: weft_model::LabelFilter::with_patterns(&self.labels)
                    .expect("each --labels pattern was checked as it was parsed"),
            },
            endpoints: (!self.pod_cidr.is_empty() || self.ipam == Some(Ipam::Kubernetes)).then(
                || agent::EndpointsConfig {
                    pod_cidrs: self.pod_cidr,
                    from_node: self.ipam == Some(Ipam::Kubernetes),
                    mtu: self.endpoint_mtu,
                    netns: self.datapath.datapath_netns.clone(),
                    procfs: self.procfs,
                },
            ),
            node_name,
            node_ips: self.node_ip,
            wireguard: wireguard.clone(),
            datapath: self.datapath.native_device.map(|native_device| {
                crate::datapath::NodeDatapathConfig {
                    root: self.datapath.bpf_root,
                    native_device,
                    netns: self.datapath.datapath_netns,
                    // With WireGuard on, the datapath redirects to its device.
                    encrypt_device: self
                        .datapath
                        .encrypt_device
                        .or_else(|| wireguard.map(|w| w.device)),
                    node_encryption: self.datapath.node_encryption,
                }
            }),
            plugins: agent::PluginsConfig {
                dir: self.plugins.plugin_dir,
                trust_policy: self.plugins.plugin_trust_policy,
                trusted_keys: self.plugins.plugin_trusted_keys,
                allow_unsigned: self.plugins.plugin_allow_unsigned,
                record_dir: self.plugins.plugin_record,
                record_max_bytes: self.plugins.plugin_record_max_mib << 20,
                cache_dir: self.plugins.plugin_cache_dir,
                runtime: plugins::Config {
                    deadline: self.plugins.plugin_deadline,
                    bounds: plugins::Bounds {
                        memory: self.plugins.plugin_memory_mib << 20,
                        ..plugins::Bounds::default()
                    },
                    max_wait: self.plugins.plugin_max_wait,
                    stall: plugins::Config::stall_for(self.plugins.plugin_deadline),
                    ..plugins::Config::default()
                },
            },
        }
    }
}

/// Writes this cluster's config (and the "config required" marker) to its etcd.
///
/// # Errors
/// [`kvstore::Error`] when etcd cannot be reached or written.
pub async fn write_cluster_config(args: &ClusterConfigArgs) -> Result<(), kvstore::Error> {
    let endpoints = kvstore::Endpoints {
        urls: args.kvstore_endpoints.clone(),
        ..Default::default()
    };
    let client = kvstore::Client::connect(&endpoints, &kvstore::Config::default()).await?;
    let config = crate::model::ClusterConfig {
        id: args.cluster_id,
        capabilities: crate::model::Capabilities {
            synced_canaries: args.synced_canaries,
            max_connected_clusters: args.max_connected_clusters,
            ..Default::default()
        },
    };
    clustermesh::write_cluster_config(&client, &args.cluster_name, &config).await
}
