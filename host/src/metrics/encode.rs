//! The scrape: a [`StatusReport`] and the waits encoded as Prometheus families
//! (OpenMetrics text, `weft_` prefix, base units; `prometheus-client` adds `_total` to
//! counters and the unit to names). One function per part of the status.

use super::{Latency, Waiter, WaitsSnapshot};
use crate::api::{EndpointsSummary, StatusReport};
use crate::clustermesh::{ClusterStatus, Resource};
use crate::datapath::DatapathStatus;
use crate::plugins::{PluginsReport, FAILURE_CAUSES};
use crate::state::Totals;
use crate::wireguard::PeerSyncStatus;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use std::fmt;

/// What one scrape shows.
#[derive(Debug)]
struct Snapshot {
    report: StatusReport,
    waits: WaitsSnapshot,
}

/// Labels of a sample.
type Labels = Vec<(&'static str, String)>;

/// One sample's value.
enum Value<'a> {
    Gauge(f64),
    Counter(u64),
    Histogram(&'a Latency),
}

/// The samples of one family.
type Samples<'a> = Vec<(Labels, Value<'a>)>;

fn flag(b: bool) -> Value<'static> {
    Value::Gauge(if b { 1.0 } else { 0.0 })
}

/// One unlabelled sample.
fn one(v: Value<'_>) -> Samples<'_> {
    vec![(Labels::new(), v)]
}

/// One sample per value of label `name`.
fn by<'a>(
    name: &'static str,
    values: impl IntoIterator<Item = (&'a str, Value<'a>)>,
) -> Samples<'a> {
    values
        .into_iter()
        .map(|(label, v)| (vec![(name, label.to_owned())], v))
        .collect()
}

/// Writes families into one scrape.
struct Families<'e, 'a>(&'e mut DescriptorEncoder<'a>);

impl Families<'_, '_> {
    /// Writes one family; a family with no samples is left out.
    fn write(
        &mut self,
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
        let mut metric = self.0.encode_descriptor(name, help, unit, kind)?;
        for (labels, value) in samples {
            let mut m = metric.encode_family(labels)?;
            match value {
                Value::Gauge(v) => m.encode_gauge(v)?,
                Value::Counter(v) => m.encode_counter::<NoLabelSet, _, u64>(v, None)?,
                Value::Histogram(l) => {
                    m.encode_histogram::<NoLabelSet>(
                        l.sum_seconds(),
                        l.count(),
                        &l.buckets(),
                        None,
                    )?;
                }
            }
        }
        Ok(())
    }

    /// A family without a unit.
    fn plain(&mut self, name: &str, help: &str, samples: &[(Labels, Value)]) -> fmt::Result {
        self.write(name, help, None, samples)
    }

    /// A family in seconds.
    fn seconds(&mut self, name: &str, help: &str, samples: &[(Labels, Value)]) -> fmt::Result {
        self.write(name, help, Some(&Unit::Seconds), samples)
    }
}

/// Per remote cluster: every series appears, at 0 where nothing happened yet, once
/// the cluster is added (a series that first appears at 1 is no increase to a
/// scraper).
fn remote_clusters(
    f: &mut Families,
    clusters: &[ClusterStatus],
    t: Option<&Totals>,
    w: &WaitsSnapshot,
) -> fmt::Result {
    let each = |v: &dyn Fn(&ClusterStatus) -> Value<'static>| {
        by("cluster", clusters.iter().map(|c| (c.name.as_str(), v(c))))
    };
    f.plain(
        "remote_cluster_connected",
        "Whether the remote cluster's etcd is reachable and every watch healthy.",
        &each(&|c| flag(c.connected)),
    )?;
    f.plain(
        "remote_cluster_ready",
        "Whether all four of the remote cluster's barriers are released as synced.",
        &each(&|c| flag(c.ready)),
    )?;
    let (mut synced, mut after, mut entries) = (Vec::new(), Vec::new(), Vec::new());
    for c in clusters {
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
        let times = c.synced_after_ms.to_array();
        for (i, res) in Resource::ALL.into_iter().enumerate() {
            let labels = || {
                vec![
                    ("cluster", c.name.clone()),
                    ("resource", res.name().to_owned()),
                ]
            };
            synced.push((labels(), flag(flags[i])));
            entries.push((labels(), Value::Gauge(counts[i] as f64)));
            if let Some(ms) = times[i] {
                after.push((labels(), Value::Gauge(ms as f64 / 1e3)));
            }
        }
    }
    f.plain(
        "remote_cluster_barrier_synced",
        "Whether the resource's initial list is in (its sync barrier released).",
        &synced,
    )?;
    f.seconds(
        "remote_cluster_synced_after",
        "Time from the cluster's addition to the release of the resource's barrier.",
        &after,
    )?;
    f.plain(
        "remote_cluster_entries",
        "Values held from the remote cluster, by resource.",
        &entries,
    )?;
    f.plain(
        "remote_cluster_malformed_values",
        "Values from the remote cluster skipped as malformed.",
        &each(&|c| Value::Counter(c.malformed)),
    )?;
    f.plain(
        "remote_cluster_reconnects",
        "Times a broken connection to the remote cluster was healthy again.",
        &each(&|c| Value::Counter(c.reconnects)),
    )?;
    let failed = by(
        "cluster",
        clusters
            .iter()
            .filter_map(|c| Some((c.name.as_str(), Value::Gauge(c.last_failure_unix? as f64)))),
    );
    f.seconds("remote_cluster_last_failure_timestamp", "When the remote cluster last failed (refused, unreachable, a broken watch), since the Unix epoch.", &failed)?;
    let timeouts: Vec<_> = clusters
        .iter()
        .flat_map(|c| {
            Waiter::ALL.into_iter().map(|waiter| {
                (
                    vec![
                        ("cluster", c.name.clone()),
                        ("waiter", waiter.name().to_owned()),
                    ],
                    Value::Counter(w.timeouts_of(&c.name, waiter)),
                )
            })
        })
        .collect();
    f.plain(
        "remote_cluster_sync_timeouts",
        "Waits on remote state (by waiter) that timed out with this cluster still pending.",
        &timeouts,
    )?;
    let claims = |c: &ClusterStatus| t.and_then(|t| t.refused_claims.get(&c.name));
    f.plain(
        "remote_cluster_refused_claims",
        "Claims a remote cluster made for what is not its own (another cluster's node space, prefix or identity), refused.",
        &each(&|c| Value::Counter(claims(c).map_or(0, |r| r.refused))),
    )?;
    f.plain(
        "remote_cluster_held_back_claims",
        "Refused claims held back now: they take effect when what blocks them goes away.",
        &each(&|c| Value::Gauge(claims(c).map_or(0, |r| r.held_back) as f64)),
    )
}

fn waits(f: &mut Families, waits: &WaitsSnapshot) -> fmt::Result {
    let samples: Vec<_> = waits
        .durations
        .iter()
        .map(|((w, r), l)| {
            let labels = vec![
                ("waiter", w.name().to_owned()),
                ("result", r.name().to_owned()),
            ];
            (labels, Value::Histogram(l))
        })
        .collect();
    f.seconds(
        "sync_wait_duration",
        "How long waits on remote state took, by waiter and result.",
        &samples,
    )
}

fn state(f: &mut Families, t: &Totals) -> fmt::Result {
    let by_source = by(
        "source",
        t.ipcache_by_source
            .iter()
            .map(|(s, n)| (s.as_str(), Value::Gauge(*n as f64))),
    );
    f.plain(
        "ipcache_entries",
        "Resolved ipcache entries, by the source of their strongest fact.",
        &by_source,
    )?;
    f.plain(
        "nodes",
        "Known nodes, this one included.",
        &one(Value::Gauge(t.nodes as f64)),
    )?;
    f.plain(
        "state_rejected_values",
        "Values the state refused (an identity of the wrong cluster, say).",
        &one(Value::Counter(t.rejected)),
    )
}

fn datapath(f: &mut Families, d: &DatapathStatus) -> fmt::Result {
    f.plain(
        "datapath_generation",
        "The datapath generation this agent fills.",
        &one(Value::Gauge(d.generation as f64)),
    )?;
    f.plain(
        "datapath_map_entries",
        "Entries in this generation's ipcache map.",
        &one(Value::Gauge(d.map_entries as f64)),
    )?;
    f.plain(
        "datapath_map_writes",
        "ipcache map entries written.",
        &one(Value::Counter(d.written)),
    )?;
    f.plain(
        "datapath_map_deletes",
        "ipcache map entries deleted.",
        &one(Value::Counter(d.deleted)),
    )?;
    f.plain(
        "datapath_map_write_errors",
        "ipcache map writes the kernel refused.",
        &one(Value::Counter(d.failed)),
    )?;
    let attached = d
        .endpoints
        .iter()
        .filter(|e| e.generation.is_some())
        .count();
    let endpoints = by(
        "state",
        [
            ("attached", Value::Gauge(attached as f64)),
            (
                "detached",
                Value::Gauge((d.endpoints.len() - attached) as f64),
            ),
        ],
    );
    f.plain(
        "datapath_endpoints",
        "Datapath endpoints (links), attached to a generation or not.",
        &endpoints,
    )
}

fn wireguard(f: &mut Families, w: &PeerSyncStatus) -> fmt::Result {
    let with = w
        .peers
        .iter()
        .filter(|p| p.handshake_seconds_ago.is_some())
        .count();
    let peers = by(
        "handshake",
        [
            ("yes", Value::Gauge(with as f64)),
            ("no", Value::Gauge((w.peers.len() - with) as f64)),
        ],
    );
    f.plain(
        "wireguard_peers",
        "The device's peers, with a handshake or none yet.",
        &peers,
    )?;
    if let Some(oldest) = w.peers.iter().filter_map(|p| p.handshake_seconds_ago).max() {
        f.seconds(
            "wireguard_oldest_handshake_age",
            "The age of the oldest latest handshake among the peers.",
            &one(Value::Gauge(oldest as f64)),
        )?;
    }
    f.plain(
        "wireguard_restored_peers",
        "Peers the device had when the agent started.",
        &one(Value::Gauge(w.restored as f64)),
    )?;
    f.plain(
        "wireguard_uapi_updates",
        "Configuration updates sent to the device.",
        &one(Value::Counter(w.updates)),
    )?;
    f.plain(
        "wireguard_uapi_errors",
        "Configuration updates the device refused (each followed by a resync).",
        &one(Value::Counter(w.failed_updates)),
    )?;
    f.plain(
        "wireguard_revivals",
        "Times the device was gone and was opened again.",
        &one(Value::Counter(w.revived)),
    )?;
    f.plain(
        "wireguard_device_up",
        "Whether the device answered the last question.",
        &one(flag(w.device_error.is_none())),
    )
}

fn plugins(f: &mut Families, p: &PluginsReport) -> fmt::Result {
    let loaded = &p.loaded;
    let each = |v: &dyn Fn(&crate::plugins::PluginStatus) -> Value<'static>| {
        by("plugin", loaded.iter().map(|s| (s.name.as_str(), v(s))))
    };
    f.plain(
        "plugin_calls",
        "Hook calls made to the plugin.",
        &each(&|s| Value::Counter(s.calls)),
    )?;
    // Every cause from the load on, at 0 until it happens.
    let failures: Vec<_> = loaded
        .iter()
        .flat_map(|s| {
            FAILURE_CAUSES.into_iter().map(|cause| {
                (
                    vec![("plugin", s.name.clone()), ("cause", cause.to_owned())],
                    Value::Counter(s.failure_causes.get(cause).copied().unwrap_or(0)),
                )
            })
        })
        .collect();
    f.plain("plugin_failures", "Failed hook calls, by cause (deadline, memory, limit, contract, trap, instantiate, stall).", &failures)?;
    f.plain(
        "plugin_quarantines",
        "Times the plugin was quarantined.",
        &each(&|s| Value::Counter(s.quarantines)),
    )?;
    f.plain(
        "plugin_quarantined",
        "Whether the plugin is in quarantine now.",
        &each(&|s| flag(s.state == "quarantined")),
    )?;
    let latency = by(
        "plugin",
        loaded
            .iter()
            .map(|s| (s.name.as_str(), Value::Histogram(&s.latency))),
    );
    f.seconds(
        "plugin_call_duration",
        "How long the plugin's hook calls took inside its instance.",
        &latency,
    )?;
    let shadows = |v: &dyn Fn(&crate::plugins::ShadowStatus) -> u64| {
        by(
            "plugin",
            p.shadows
                .iter()
                .map(|s| (s.name.as_str(), Value::Counter(v(s)))),
        )
    };
    f.plain(
        "plugin_shadow_compared",
        "Questions a shadow plugin and the live one both answered.",
        &shadows(&|s| s.compared),
    )?;
    f.plain(
        "plugin_shadow_agreed",
        "Of those, answered the same.",
        &shadows(&|s| s.agreed),
    )?;
    let loads = by(
        "result",
        [
            ("ok", Value::Counter(p.loads)),
            ("failed", Value::Counter(p.failed_loads)),
        ],
    );
    f.plain(
        "plugin_loads",
        "Plugin loads and reloads, by result.",
        &loads,
    )?;
    f.plain(
        "plugin_refused",
        "Plugin manifests refused as they stand.",
        &one(Value::Gauge(p.refused.len() as f64)),
    )?;
    f.plain(
        "plugin_stalls",
        "Plugin threads given up on and replaced.",
        &one(Value::Counter(p.stalls)),
    )?;
    f.plain(
        "plugin_dropped_hooks",
        "Hooks dropped because a plugin's queue was full.",
        &one(Value::Counter(p.dropped_hooks)),
    )
}

fn endpoints(f: &mut Families, e: &EndpointsSummary) -> fmt::Result {
    let states = by(
        "state",
        [
            ("ready", Value::Gauge(e.ready as f64)),
            ("creating", Value::Gauge(e.creating as f64)),
        ],
    );
    f.plain("endpoints", "This node's endpoints, by state.", &states)
}

impl Collector for Snapshot {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let (r, f) = (&self.report, &mut Families(&mut enc));
        remote_clusters(f, &r.clusters, r.totals.as_ref(), &self.waits)?;
        waits(f, &self.waits)?;
        if let Some(t) = &r.totals {
            state(f, t)?;
        }
        if let Some(d) = &r.datapath {
            datapath(f, d)?;
        }
        if let Some(w) = &r.wireguard {
            wireguard(f, w)?;
        }
        if let Some(p) = &r.plugins {
            plugins(f, p)?;
        }
        if let Some(e) = &r.endpoints {
            endpoints(f, e)?;
        }
        if let Some(rt) = &r.runtime {
            f.plain(
                "runtime_alive_tasks",
                "Tasks alive in the agent's async runtime: flat under churn, or a leak.",
                &one(Value::Gauge(rt.alive_tasks as f64)),
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
///     kubernetes: None,
///     runtime: None,
/// };
/// let text = weft::metrics::encode(report, Default::default());
/// assert!(text.ends_with("# EOF\n"));
/// ```
pub fn encode(report: StatusReport, waits: WaitsSnapshot) -> String {
    let mut registry = Registry::with_prefix("weft");
    registry.register_collector(Box::new(Snapshot { report, waits }));
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::{PluginStatus, PluginsReport};
    use std::collections::BTreeMap;
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
            kubernetes: None,
            runtime: Some(crate::api::RuntimeStatus {
                alive_tasks: 42,
                workers: 2,
            }),
        }
    }

    #[test]
    fn plugins_datapath_and_wireguard_are_named_as_prometheus_expects() {
        let text = encode(report(), WaitsSnapshot::default());
        for line in [
            "weft_plugin_calls_total{plugin=\"policy\"} 7",
            "weft_plugin_failures_total{plugin=\"policy\",cause=\"deadline\"} 2",
            "weft_plugin_failures_total{plugin=\"policy\",cause=\"trap\"} 1",
            // Causes not seen yet are there at 0.
            "weft_plugin_failures_total{plugin=\"policy\",cause=\"stall\"} 0",
            "weft_plugin_failures_total{plugin=\"policy\",cause=\"instantiate\"} 0",
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
            "weft_runtime_alive_tasks 42.0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} in\n{text}");
        }
        // No remote cluster: no remote-cluster family at all, rather than empty ones.
        assert!(!text.contains("weft_remote_cluster"), "{text}");
    }

    #[test]
    fn a_remote_clusters_counters_are_at_0_from_its_addition_and_count_its_own_timeouts() {
        let cluster = |name: &str| -> ClusterStatus {
            serde_json::from_value(serde_json::json!({
                "name": name, "id": null, "connected": false, "ready": false,
                "synced": {"nodes": false, "ipcache": false, "identities": false, "services": false},
                "counts": {"nodes": 0, "ipcache": 0, "identities": 0, "services": 0},
                "malformed": 0, "last_error": null
            }))
            .unwrap()
        };
        let mut r = report();
        r.clusters = vec![cluster("c2"), cluster("c3")];
        let waits = super::super::Waits::default();
        let timeout = crate::clustermesh::SyncTimeout {
            pending: vec![crate::clustermesh::PendingCluster {
                cluster: "c3".into(),
                resources: vec![Resource::IpCache],
            }],
        };
        waits.observe_wait(Waiter::Endpoint, &Err(timeout), Duration::from_secs(1));
        let text = encode(r, waits.snapshot());
        for line in [
            "weft_remote_cluster_sync_timeouts_total{cluster=\"c2\",waiter=\"endpoint\"} 0",
            "weft_remote_cluster_sync_timeouts_total{cluster=\"c2\",waiter=\"host_endpoint\"} 0",
            "weft_remote_cluster_sync_timeouts_total{cluster=\"c3\",waiter=\"endpoint\"} 1",
            "weft_remote_cluster_sync_timeouts_total{cluster=\"c3\",waiter=\"wireguard_gc\"} 0",
            "weft_remote_cluster_refused_claims_total{cluster=\"c2\"} 0",
            "weft_remote_cluster_held_back_claims{cluster=\"c3\"} 0.0",
            "weft_remote_cluster_reconnects_total{cluster=\"c2\"} 0",
            "weft_sync_wait_duration_seconds_count{waiter=\"endpoint\",result=\"timed_out\"} 1",
            "weft_sync_wait_duration_seconds_count{waiter=\"wireguard_gc\",result=\"disconnected\"} 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} in\n{text}");
        }
    }
}
