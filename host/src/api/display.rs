//! The API's answers in words: what `weftd status`, `weftd ipcache list` and
//! `weftd endpoint list` print without `-o json`.

use super::{EndpointView, IpCacheRow, StatusReport};
use std::fmt;

impl StatusReport {
    /// What keeps `weftd status --wait` waiting: one line per remote cluster not ready
    /// (its pending barriers and its last error); empty once every one is ready.
    ///
    /// # Example
    /// ```
    /// let report: weft::api::StatusReport =
    ///     serde_json::from_str(r#"{"cluster":"c1","clusters":[]}"#).unwrap();
    /// assert!(report.pending_clusters().is_empty());
    /// ```
    pub fn pending_clusters(&self) -> Vec<String> {
        self.clusters
            .iter()
            .filter(|c| !c.ready)
            .map(|c| {
                let flags = [
                    c.synced.nodes,
                    c.synced.ipcache,
                    c.synced.identities,
                    c.synced.services,
                ];
                let pending: Vec<&str> = crate::clustermesh::Resource::ALL
                    .iter()
                    .zip(flags)
                    .filter(|(_, synced)| !synced)
                    .map(|(r, _)| r.name())
                    .collect();
                let error = c
                    .last_error
                    .as_deref()
                    .map_or(String::new(), |e| format!("; last error: {e}"));
                format!(
                    "{}: {} pending{}{error}",
                    c.name,
                    pending.join(", "),
                    if c.connected { "" } else { " (not connected)" }
                )
            })
            .collect()
    }
}

/// The status as the table `weftd status` prints.
impl fmt::Display for StatusReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let report = self;
        writeln!(f, "cluster: {}", report.cluster)?;
        if let Some(t) = &report.totals {
            writeln!(f,
                "state: {} ipcache entries, {} nodes, {} identities ({} this cluster's, {} remote, {} local CIDR), {} values refused",
                t.ipcache,
                t.nodes,
                t.identities.cluster + t.identities.remote + t.local_identities,
                t.identities.cluster,
                t.identities.remote,
                t.local_identities,
                t.rejected,
            )?;
            if !t.ipcache_by_source.is_empty() {
                let by: Vec<String> = t
                    .ipcache_by_source
                    .iter()
                    .map(|(source, n)| format!("{source} {n}"))
                    .collect();
                writeln!(f, "  ipcache by source: {}", by.join(", "))?;
            }
        }
        if let Some(p) = &report.plugins {
            write!(f, "{p}")?;
        }
        if let Some(w) = &report.wireguard {
            write!(f, "{w}")?;
        }
        if let Some(d) = &report.datapath {
            writeln!(f,
                "datapath: generation {} under {}: {} map entries ({} written, {} deleted, {} refused)",
                d.generation,
                d.root.display(),
                d.map_entries,
                d.written,
                d.deleted,
                d.failed
            )?;
            for e in &d.endpoints {
                let serving = e
                    .generation
                    .map_or("not attached".to_owned(), |g| format!("generation {g}"));
                writeln!(f, "  {} ({}): {serving}", e.name, e.device)?;
            }
        }
        if let Some(p) = &report.policies {
            writeln!(
                f,
                "policies: {} in force, {} refused",
                p.loaded.len(),
                p.refused.len()
            )?;
            for r in &p.refused {
                writeln!(f, "  refused {}: {}", r.file, r.reason)?;
            }
        }
        if let Some(k) = &report.kubernetes {
            match &k.error {
                Some(e) => writeln!(f, "kubernetes: not used: {e}")?,
                None => {
                    let synced = k.sources.iter().filter(|s| s.synced).count();
                    writeln!(f, "kubernetes: {synced}/{} sources synced", k.sources.len())?;
                }
            }
            for s in &k.sources {
                let state = if s.synced { "synced" } else { "listing" };
                write!(
                    f,
                    "  {:<34} {state:<8} {:>7} objects {:>3} lists {:>4} errors",
                    s.name, s.objects, s.lists, s.errors
                )?;
                match &s.last_error {
                    Some(e) => writeln!(f, "  last: {e}")?,
                    None => writeln!(f)?,
                }
            }
        }
        if let Some(e) = &report.endpoints {
            writeln!(
                f,
                "endpoints: {} ready, {} being created (weftd endpoint list)",
                e.ready, e.creating
            )?;
        }
        if report.clusters.is_empty() {
            f.write_str("no remote clusters\n")?;
            return Ok(());
        }
        writeln!(
            f,
            "{:<16} {:>4} {:<9} {:<5} {:<16} {:<16} {:<16} {:<16} {:>9} {:>10}  LAST ERROR",
            "REMOTE",
            "ID",
            "CONNECTED",
            "READY",
            "NODES",
            "IPCACHE",
            "IDENTITIES",
            "SERVICES",
            "MALFORMED",
            "RECONNECTS",
        )?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        for c in &report.clusters {
            // A barrier: `synced` with how long after the cluster's addition, or
            // `pending`; the values held in brackets.
            let cell = |synced: bool, after: Option<u64>, n: usize| match (synced, after) {
                (true, Some(ms)) => format!("synced {}({n})", brief_ms(ms)),
                (true, None) => format!("synced({n})"),
                (false, _) => format!("pending({n})"),
            };
            let after = c.synced_after_ms;
            let error = match (&c.last_error, c.last_failure_unix) {
                (Some(e), Some(at)) => {
                    format!("{e} ({} ago)", brief_ms(now.saturating_sub(at) * 1_000))
                }
                (Some(e), None) => e.clone(),
                (None, _) => "-".into(),
            };
            writeln!(
                f,
                "{:<16} {:>4} {:<9} {:<5} {:<16} {:<16} {:<16} {:<16} {:>9} {:>10}  {}",
                c.name,
                c.id.map_or("-".into(), |i| i.to_string()),
                if c.connected { "yes" } else { "no" },
                if c.ready { "yes" } else { "no" },
                cell(c.synced.nodes, after.nodes, c.counts.nodes),
                cell(c.synced.ipcache, after.ipcache, c.counts.ipcache),
                cell(c.synced.identities, after.identities, c.counts.identities),
                cell(c.synced.services, after.services, c.counts.services),
                c.malformed,
                c.reconnects,
                error,
            )?;
        }
        let refused = report
            .totals
            .as_ref()
            .map(|t| &t.refused_claims)
            .into_iter()
            .flatten()
            .filter(|(_, r)| r.refused > 0);
        for (cluster, r) in refused {
            writeln!(f,
                "{cluster}: {} claims refused ({} held back now), it may speak only for its own nodes, identities and prefixes; last: {}",
                r.refused,
                r.held_back,
                r.last.as_deref().unwrap_or("-"),
            )?;
        }
        if let Some(rt) = &report.runtime {
            writeln!(
                f,
                "runtime: {} tasks alive on {} workers",
                rt.alive_tasks, rt.workers
            )?;
        }
        Ok(())
    }
}

/// The ipcache as the table `weftd ipcache list` prints.
pub struct IpCacheTable<'a>(pub &'a [IpCacheRow]);

impl fmt::Display for IpCacheTable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rows = self.0;
        writeln!(
            f,
            "{:<43} {:>10} {:<39} {:>3}  SOURCE",
            "PREFIX", "IDENTITY", "TUNNEL ENDPOINT", "KEY"
        )?;
        for r in rows {
            let tunnel = r
                .tunnel_endpoint
                .map_or("-".to_owned(), |ip| ip.to_string());
            writeln!(
                f,
                "{:<43} {:>10} {:<39} {:>3}  {}",
                r.prefix, r.identity, tunnel, r.encrypt_key, r.source
            )?;
        }
        Ok(())
    }
}

/// The endpoints as `weftd endpoint list` prints them.
pub struct EndpointTable<'a>(pub &'a [EndpointView]);

impl fmt::Display for EndpointTable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rows = self.0;
        writeln!(
            f,
            "{:<28} {:<28} {:>10} {:<32} {:<15} PHASE",
            "ENDPOINT", "POD", "IDENTITY", "ADDRESSES", "HOST SIDE"
        )?;
        for view in rows {
            let r = &view.record;
            let ips: Vec<String> = r.addresses.iter().map(ToString::to_string).collect();
            let host = r
                .attachment
                .as_ref()
                .map_or("-", |a| a.host_ifname.as_str());
            writeln!(
                f,
                "{:<28} {:<28} {:>10} {:<32} {:<15} {:?}",
                r.key,
                format!("{}/{}", r.namespace, r.pod_name),
                r.identity.map_or("-".into(), |i| i.to_string()),
                ips.join(","),
                host,
                r.phase,
            )?;
            writeln!(f, "    labels: {}", r.labels)?;
            if let Some(g) = &r.regeneration {
                writeln!(f, "    regeneration {g}")?;
            }
            if let Some(p) = &view.policy {
                let side = |enforced: bool, n: usize| {
                    if enforced {
                        format!("enforced, {n} allowed")
                    } else {
                        "open".to_owned()
                    }
                };
                writeln!(
                    f,
                    "    policy: ingress {}, egress {} (selected by: {})",
                    side(p.ingress_enforced, p.ingress.len()),
                    side(p.egress_enforced, p.egress.len()),
                    if p.selected_by.is_empty() {
                        "none".to_owned()
                    } else {
                        p.selected_by.join(", ")
                    }
                )?;
            }
        }
        Ok(())
    }
}

/// A duration in milliseconds, briefly (`120ms`, `3.4s`, `2m05s`).
fn brief_ms(ms: u64) -> String {
    match ms {
        0..=999 => format!("{ms}ms"),
        1_000..=59_999 => format!("{:.1}s", ms as f64 / 1e3),
        _ => format!("{}m{:02}s", ms / 60_000, (ms % 60_000) / 1_000),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{KubernetesSourceStatus, KubernetesStatus};

    /// A report with one remote cluster whose ipcache is synced and whose other
    /// barriers are pending, from the JSON contract.
    fn report() -> StatusReport {
        serde_json::from_value(serde_json::json!({
            "cluster": "c1",
            "clusters": [{
                "name": "c2", "id": 2, "connected": false, "ready": false,
                "synced": {"nodes": false, "ipcache": true, "identities": false, "services": false},
                "counts": {"nodes": 0, "ipcache": 3, "identities": 0, "services": 0},
                "malformed": 1, "last_error": "etcd unreachable",
                "synced_after_ms": {"ipcache": 1500}
            }]
        }))
        .unwrap()
    }

    #[test]
    fn the_status_shows_each_kubernetes_source() {
        let mut r = report();
        r.kubernetes = Some(KubernetesStatus {
            error: None,
            sources: vec![
                KubernetesSourceStatus {
                    name: "pods".into(),
                    synced: true,
                    objects: 3,
                    lists: 2,
                    errors: 1,
                    last_error: Some("410 Gone".into()),
                },
                KubernetesSourceStatus {
                    name: "namespaces".into(),
                    synced: false,
                    objects: 0,
                    lists: 0,
                    errors: 0,
                    last_error: None,
                },
            ],
        });
        let text = r.to_string();
        assert!(text.contains("kubernetes: 1/2 sources synced"), "{text}");
        let pods = text
            .lines()
            .find(|l| l.trim_start().starts_with("pods"))
            .unwrap();
        let words: Vec<&str> = pods.split_whitespace().collect();
        assert_eq!(
            words[..8],
            ["pods", "synced", "3", "objects", "2", "lists", "1", "errors"]
        );
        assert!(pods.ends_with("last: 410 Gone"), "{pods}");
        r.kubernetes = Some(KubernetesStatus {
            error: Some("kubeconfig /x: No such file".into()),
            sources: vec![],
        });
        assert!(r
            .to_string()
            .contains("kubernetes: not used: kubeconfig /x"));
    }

    #[test]
    fn the_status_shows_each_barrier_and_the_clusters_error() {
        let text = report().to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "cluster: c1");
        assert!(lines[1].starts_with("REMOTE") && lines[1].ends_with("LAST ERROR"));
        let row: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(
            row[..9],
            [
                "c2",
                "2",
                "no",
                "no",
                "pending(0)",
                "synced",
                "1.5s(3)",
                "pending(0)",
                "pending(0)"
            ]
        );
        assert!(lines[2].ends_with("etcd unreachable"), "{}", lines[2]);
    }

    #[test]
    fn without_remote_clusters_the_status_says_so() {
        let report = StatusReport {
            clusters: vec![],
            ..report()
        };
        assert_eq!(report.to_string(), "cluster: c1\nno remote clusters\n");
        assert!(report.pending_clusters().is_empty());
    }

    #[test]
    fn a_pending_cluster_names_its_barriers_and_its_error() {
        assert_eq!(
            report().pending_clusters(),
            ["c2: nodes, identities, services pending (not connected); last error: etcd unreachable"]
        );
    }

    #[test]
    fn the_ipcache_table_has_one_row_per_entry_under_its_header() {
        let rows = [IpCacheRow {
            prefix: "10.1.0.5/32".into(),
            identity: 4242,
            tunnel_endpoint: None,
            encrypt_key: 0,
            source: "kvstore".into(),
        }];
        let text = IpCacheTable(&rows).to_string();
        let lines: Vec<Vec<&str>> = text
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(
            lines,
            [
                vec!["PREFIX", "IDENTITY", "TUNNEL", "ENDPOINT", "KEY", "SOURCE"],
                vec!["10.1.0.5/32", "4242", "-", "0", "kvstore"],
            ]
        );
    }
}
