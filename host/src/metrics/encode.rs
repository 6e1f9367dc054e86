//! The scrape: a [`StatusReport`] and the waits encoded as Prometheus families
//! (OpenMetrics text, `weft_` prefix, base units; `prometheus-client` adds `_total` to
//! counters and the unit to names).

use super::{Latency, WaitResult, Waiter};
use crate::api::StatusReport;
use crate::clustermesh::Resource;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use std::collections::BTreeMap;
use std::fmt;

/// What one scrape shows.
#[derive(Debug)]
struct Snapshot {
    report: StatusReport,
    waits: BTreeMap<(Waiter, WaitResult), Latency>,
}

/// Labels of a sample.
type Labels = Vec<(&'static str, String)>;

/// One sample's value.
enum Value<'a> {
    Gauge(f64),
    Counter(u64),
    Histogram(&'a Latency),
}

/// Writes one family; a family with no samples is left out.
fn family(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    samples: &[(Labels, Value)],
) -> fmt::Result {
    let Some((_, first)) = samples.first() else {
        return Ok(());
    };
    let kind = match first {
        Value::Gauge(_) => MetricType::Gauge,
        Value::Counter(_) => MetricType::Counter,
        Value::Histogram(_) => MetricType::Histogram,
    };
    let mut metric = enc.encode_descriptor(name, help, unit, kind)?;
    for (labels, value) in samples {
        let mut m = metric.encode_family(labels)?;
        match value {
            Value::Gauge(v) => m.encode_gauge(v)?,
            Value::Counter(v) => m.encode_counter::<NoLabelSet, _, u64>(v, None)?,
            Value::Histogram(l) => {
                m.encode_histogram::<NoLabelSet>(l.sum_seconds(), l.count(), &l.buckets(), None)?;
            }
        }
    }
    Ok(())
}

fn flag(b: bool) -> Value<'static> {
    Value::Gauge(if b { 1.0 } else { 0.0 })
}

fn count(n: impl TryInto<u64>) -> u64 {
    n.try_into().unwrap_or(u64::MAX)
}

impl Collector for Snapshot {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let r = &self.report;
        let seconds = Some(&Unit::Seconds);
        let cluster = |name: &str| -> Labels { vec![("cluster", name.to_owned())] };
        let per_resource = |name: &str, res: Resource| -> Labels {
            vec![
                ("cluster", name.to_owned()),
                ("resource", res.name().to_owned()),
            ]
        };

        // Remote clusters.
        let cs = &r.clusters;
        let each = |f: &dyn Fn(&crate::clustermesh::ClusterStatus) -> Value<'static>| {
            cs.iter()
                .map(|c| (cluster(&c.name), f(c)))
                .collect::<Vec<_>>()
        };
        family(
            &mut enc,
            "remote_cluster_connected",
            "Whether the remote cluster's etcd is reachable and every watch healthy.",
            None,
            &each(&|c| flag(c.connected)),
        )?;
        family(
            &mut enc,
            "remote_cluster_ready",
            "Whether all four of the remote cluster's barriers are released as synced.",
            None,
            &each(&|c| flag(c.ready)),
        )?;
        let mut synced = Vec::new();
        let mut synced_after = Vec::new();
        let mut entries = Vec::new();
        for c in cs {
            let flags = [
                c.synced.nodes,
                c.synced.ipcache,
                c.synced.identities,
                c.synced.services,
            ];
            let counts = [
                c.counts.nodes,
                c.counts.ipcache,
                c.counts.identities,
                c.counts.services,
            ];
            for (i, res) in Resource::ALL.into_iter().enumerate() {
                synced.push((per_resource(&c.name, res), flag(flags[i])));
                entries.push((per_resource(&c.name, res), Value::Gauge(counts[i] as f64)));
                if let Some(ms) = c.synced_after_ms.to_array()[i] {
                    synced_after.push((per_resource(&c.name, res), Value::Gauge(ms as f64 / 1e3)));
                }
            }
        }
        family(
            &mut enc,
            "remote_cluster_barrier_synced",
            "Whether the resource's initial list is in (its sync barrier released).",
            None,
            &synced,
        )?;
        family(
            &mut enc,
            "remote_cluster_synced_after",
            "Time from the cluster's addition to the release of the resource's barrier.",
            seconds,
            &synced_after,
        )?;
        family(
            &mut enc,
            "remote_cluster_entries",
            "Values held from the remote cluster, by resource.",
            None,
            &entries,
        )?;
        family(
            &mut enc,
            "remote_cluster_malformed_values",
            "Values from the remote cluster skipped as malformed.",
            None,
            &each(&|c| Value::Counter(c.malformed)),
        )?;
        family(
            &mut enc,
            "remote_cluster_reconnects",
            "Times a broken connection to the remote cluster was healthy again.",
            None,
            &each(&|c| Value::Counter(c.reconnects)),
        )?;
        let failures: Vec<_> = cs
            .iter()
            .filter_map(|c| Some((cluster(&c.name), Value::Gauge(c.last_failure_unix? as f64))))
            .collect();
        family(&mut enc, "remote_cluster_last_failure_timestamp", "When the remote cluster last failed (refused, unreachable, a broken watch), since the Unix epoch.", seconds, &failures)?;

        // Waits.
        let waits: Vec<_> = self
            .waits
            .iter()
            .map(|((w, res), l)| {
                (
                    vec![
                        ("waiter", w.name().to_owned()),
                        ("result", res.name().to_owned()),
                    ],
                    Value::Histogram(l),
                )
            })
            .collect();
        family(
            &mut enc,
            "sync_wait_duration",
            "How long waits on remote state took, by waiter and result.",
            seconds,
            &waits,
        )?;

        // The state: ipcache, nodes, identities.
        if let Some(t) = &r.totals {
            let by_source: Vec<_> = t
                .ipcache_by_source
                .iter()
                .map(|(s, n)| (vec![("source", s.clone())], Value::Gauge(*n as f64)))
                .collect();
            family(
                &mut enc,
                "ipcache_entries",
                "Resolved ipcache entries, by the source of their strongest fact.",
                None,
                &by_source,
            )?;
            family(
                &mut enc,
                "nodes",
                "Known nodes, this one included.",
                None,
                &[(vec![], Value::Gauge(t.nodes as f64))],
            )?;
            family(
                &mut enc,
                "state_rejected_values",
                "Values the state refused (an identity of the wrong cluster, say).",
                None,
                &[(vec![], Value::Counter(t.rejected))],
            )?;
        }

        // The datapath.
        if let Some(d) = &r.datapath {
            let one = |v: Value<'static>| [(Labels::new(), v)];
            family(
                &mut enc,
                "datapath_generation",
                "The datapath generation this agent fills.",
                None,
                &one(Value::Gauge(d.generation as f64)),
            )?;
            family(
                &mut enc,
                "datapath_map_entries",
                "Entries in this generation's ipcache map.",
                None,
                &one(Value::Gauge(d.map_entries as f64)),
            )?;
            family(
                &mut enc,
                "datapath_map_writes",
                "ipcache map entries written.",
                None,
                &one(Value::Counter(d.written)),
            )?;
            family(
                &mut enc,
                "datapath_map_deletes",
                "ipcache map entries deleted.",
                None,
                &one(Value::Counter(d.deleted)),
            )?;
            family(
                &mut enc,
                "datapath_map_write_errors",
                "ipcache map writes the kernel refused.",
                None,
                &one(Value::Counter(d.failed)),
            )?;
            let attached = d
                .endpoints
                .iter()
                .filter(|e| e.generation.is_some())
                .count();
            let endpoints = [
                (
                    vec![("state", "attached".to_owned())],
                    Value::Gauge(attached as f64),
                ),
                (
                    vec![("state", "detached".to_owned())],
                    Value::Gauge((d.endpoints.len() - attached) as f64),
                ),
            ];
            family(
                &mut enc,
                "datapath_endpoints",
                "Datapath endpoints (links), attached to a generation or not.",
                None,
                &endpoints,
            )?;
        }

        // WireGuard.
        if let Some(w) = &r.wireguard {
            let one = |v: Value<'static>| [(Labels::new(), v)];
            let with = w
                .peers
                .iter()
                .filter(|p| p.handshake_seconds_ago.is_some())
                .count();
            let peers = [
                (
                    vec![("handshake", "yes".to_owned())],
                    Value::Gauge(with as f64),
                ),
                (
                    vec![("handshake", "no".to_owned())],
                    Value::Gauge((w.peers.len() - with) as f64),
                ),
            ];
            family(
                &mut enc,
                "wireguard_peers",
                "The device's peers, with a handshake or none yet.",
                None,
                &peers,
            )?;
            if let Some(oldest) = w.peers.iter().filter_map(|p| p.handshake_seconds_ago).max() {
                family(
                    &mut enc,
                    "wireguard_oldest_handshake_age",
                    "The age of the oldest latest handshake among the peers.",
                    seconds,
                    &one(Value::Gauge(oldest as f64)),
                )?;
            }
            family(
                &mut enc,
                "wireguard_restored_peers",
                "Peers the device had when the agent started.",
                None,
                &one(Value::Gauge(w.restored as f64)),
            )?;
            family(
                &mut enc,
                "wireguard_uapi_updates",
                "Configuration updates sent to the device.",
                None,
                &one(Value::Counter(w.updates)),
            )?;
            family(
                &mut enc,
                "wireguard_uapi_errors",
                "Configuration updates the device refused (each followed by a resync).",
                None,
                &one(Value::Counter(w.failed_updates)),
            )?;
            family(
                &mut enc,
                "wireguard_revivals",
                "Times the device was gone and was opened again.",
                None,
                &one(Value::Counter(w.revived)),
            )?;
            let reachable = i64::from(w.device_error.is_none());
            family(
                &mut enc,
                "wireguard_device_up",
                "Whether the device answered the last question.",
                None,
                &one(Value::Gauge(reachable as f64)),
            )?;
        }

        // Plugins.
        if let Some(p) = &r.plugins {
            let plugin = |name: &str| -> Labels { vec![("plugin", name.to_owned())] };
            let loaded = &p.loaded;
            let each = |f: &dyn Fn(&crate::plugins::PluginStatus) -> Value<'static>| {
                loaded
                    .iter()
                    .map(|s| (plugin(&s.name), f(s)))
                    .collect::<Vec<_>>()
            };
            family(
                &mut enc,
                "plugin_calls",
                "Hook calls made to the plugin.",
                None,
                &each(&|s| Value::Counter(s.calls)),
            )?;
            let mut failures = Vec::new();
            for s in loaded {
                for (cause, n) in &s.failure_causes {
                    failures.push((
                        vec![("plugin", s.name.clone()), ("cause", cause.clone())],
                        Value::Counter(*n),
                    ));
                }
            }
            family(&mut enc, "plugin_failures", "Failed hook calls, by cause (deadline, memory, limit, contract, trap, instantiate, stall).", None, &failures)?;
            family(
                &mut enc,
                "plugin_quarantines",
                "Times the plugin was quarantined.",
                None,
                &each(&|s| Value::Counter(s.quarantines)),
            )?;
            family(
                &mut enc,
                "plugin_quarantined",
                "Whether the plugin is in quarantine now.",
                None,
                &each(&|s| flag(s.state == "quarantined")),
            )?;
            let latency: Vec<_> = loaded
                .iter()
                .map(|s| (plugin(&s.name), Value::Histogram(&s.latency)))
                .collect();
            family(
                &mut enc,
                "plugin_call_duration",
                "How long the plugin's hook calls took inside its instance.",
                seconds,
                &latency,
            )?;
            let shadows = &p.shadows;
            let compared: Vec<_> = shadows
                .iter()
                .map(|s| (plugin(&s.name), Value::Counter(s.compared)))
                .collect();
            let agreed: Vec<_> = shadows
                .iter()
                .map(|s| (plugin(&s.name), Value::Counter(s.agreed)))
                .collect();
            family(
                &mut enc,
                "plugin_shadow_compared",
                "Questions a shadow plugin and the live one both answered.",
                None,
                &compared,
            )?;
            family(
                &mut enc,
                "plugin_shadow_agreed",
                "Of those, answered the same.",
                None,
                &agreed,
            )?;
            let loads = [
                (vec![("result", "ok".to_owned())], Value::Counter(p.loads)),
                (
                    vec![("result", "failed".to_owned())],
                    Value::Counter(p.failed_loads),
                ),
            ];
            family(
                &mut enc,
                "plugin_loads",
                "Plugin loads and reloads, by result.",
                None,
                &loads,
            )?;
            family(
                &mut enc,
                "plugin_refused",
                "Plugin manifests refused as they stand.",
                None,
                &[(Labels::new(), Value::Gauge(p.refused.len() as f64))],
            )?;
            family(
                &mut enc,
                "plugin_stalls",
                "Plugin threads given up on and replaced.",
                None,
                &[(Labels::new(), Value::Counter(p.stalls))],
            )?;
            family(
                &mut enc,
                "plugin_dropped_hooks",
                "Hooks dropped because a plugin's queue was full.",
                None,
                &[(Labels::new(), Value::Counter(p.dropped_hooks))],
            )?;
        }

        // Endpoints.
        if let Some(e) = &r.endpoints {
            let endpoints = [
                (
                    vec![("state", "ready".to_owned())],
                    Value::Gauge(count(e.ready) as f64),
                ),
                (
                    vec![("state", "creating".to_owned())],
                    Value::Gauge(count(e.creating) as f64),
                ),
            ];
            family(
                &mut enc,
                "endpoints",
                "This node's endpoints, by state.",
                None,
                &endpoints,
            )?;
        }
        Ok(())
    }
}

/// Encodes `report` and `waits` as an OpenMetrics text exposition.
///
/// # Example
/// ```
/// use weft::api::StatusReport;
/// let report = StatusReport {
///     cluster: "c1".into(),
///     clusters: vec![],
///     totals: None,
///     plugins: None,
///     datapath: None,
///     wireguard: None,
///     endpoints: None,
///     policies: None,
/// };
/// let text = weft::metrics::encode(report, Default::default());
/// assert!(text.ends_with("# EOF\n"));
/// ```
pub fn encode(report: StatusReport, waits: BTreeMap<(Waiter, WaitResult), Latency>) -> String {
    let mut registry = Registry::with_prefix("weft");
    registry.register_collector(Box::new(Snapshot { report, waits }));
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
    out
}

/// The content type of [`encode`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::{PluginStatus, PluginsReport};
    use std::time::Duration;

    fn report() -> StatusReport {
        let mut latency = Latency::new(super::super::CALL_BOUNDS_US);
        latency.observe(Duration::from_micros(3));
        latency.observe(Duration::from_micros(700));
        let plugin = PluginStatus {
            name: "policy".into(),
            version: "1.0.0".into(),
            digest: String::new(),
            wit: "0.2.0".into(),
            signed_by: None,
            priority: 0,
            calls: 7,
            failures: 3,
            state: "quarantined".into(),
            last_error: None,
            counters: BTreeMap::new(),
            failure_causes: [("deadline".to_owned(), 2), ("trap".to_owned(), 1)].into(),
            quarantines: 1,
            latency,
        };
        StatusReport {
            cluster: "c1".into(),
            clusters: vec![],
            totals: None,
            plugins: Some(PluginsReport {
                loaded: vec![plugin],
                loads: 2,
                ..PluginsReport::default()
            }),
            datapath: Some(crate::datapath::DatapathStatus {
                root: "/sys/fs/bpf/weft".into(),
                generation: 4,
                endpoints: vec![],
                written: 10,
                deleted: 3,
                failed: 1,
                map_entries: 7,
            }),
            wireguard: Some(crate::wireguard::PeerSyncStatus {
                peers: vec![
                    crate::wireguard::PeerStatus {
                        key: "k1".into(),
                        node: Some("c2/n1".into()),
                        endpoint: None,
                        allowed_ips: 2,
                        handshake_seconds_ago: Some(40),
                    },
                    crate::wireguard::PeerStatus {
                        key: "k2".into(),
                        node: None,
                        endpoint: None,
                        allowed_ips: 1,
                        handshake_seconds_ago: None,
                    },
                ],
                failed_updates: 2,
                ..Default::default()
            }),
            endpoints: None,
            policies: None,
        }
    }

    #[test]
    fn plugins_datapath_and_wireguard_are_named_as_prometheus_expects() {
        let text = encode(report(), BTreeMap::new());
        for line in [
            "weft_plugin_calls_total{plugin=\"policy\"} 7",
            "weft_plugin_failures_total{plugin=\"policy\",cause=\"deadline\"} 2",
            "weft_plugin_failures_total{plugin=\"policy\",cause=\"trap\"} 1",
            "weft_plugin_quarantines_total{plugin=\"policy\"} 1",
            "weft_plugin_quarantined{plugin=\"policy\"} 1.0",
            "# UNIT weft_plugin_call_duration_seconds seconds",
            "weft_plugin_call_duration_seconds_count{plugin=\"policy\"} 2",
            "weft_plugin_call_duration_seconds_bucket{le=\"0.000005\",plugin=\"policy\"} 1",
            "weft_plugin_call_duration_seconds_bucket{le=\"+Inf\",plugin=\"policy\"} 2",
            "weft_plugin_loads_total{result=\"ok\"} 2",
            "weft_datapath_map_entries 7.0",
            "weft_datapath_map_write_errors_total 1",
            "weft_wireguard_peers{handshake=\"yes\"} 1.0",
            "weft_wireguard_peers{handshake=\"no\"} 1.0",
            "weft_wireguard_oldest_handshake_age_seconds 40.0",
            "weft_wireguard_uapi_errors_total 2",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} in\n{text}");
        }
        // No remote cluster: no remote-cluster family at all, rather than empty ones.
        assert!(!text.contains("weft_remote_cluster"), "{text}");
    }
}
