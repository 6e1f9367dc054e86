//! The peers' status in words: the WireGuard part of `weftd status`.

use crate::PeerSyncStatus;
use std::fmt;

impl fmt::Display for PeerSyncStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let w = self;
        let restore = if w.restoring {
            format!(
                "{} restored peers kept until the remote nodes are synced",
                w.restored
            )
        } else if w.restored == 0 {
            "nothing restored".to_owned()
        } else if let Some(c) = &w.collected {
            format!(
                "{} restored: {} kept, {} removed, {} AllowedIPs trimmed",
                w.restored,
                c.kept.len(),
                c.removed.len(),
                c.trimmed.len()
            )
        } else {
            format!("{} restored", w.restored)
        };
        writeln!(
            f,
            "wireguard: device {} ({}), {} peers; {restore}; {} updates, {} refused",
            w.device,
            w.backend,
            w.peers.len(),
            w.updates,
            w.failed_updates
        )?;
        let row = |node: &str, endpoint: &str, allowed: &str, handshake: &str, key: &str| {
            format!("  {node:<24} {endpoint:<24} {allowed:>11} {handshake:<14}  {key}\n")
        };
        if !w.peers.is_empty() {
            f.write_str(&row("NODE", "ENDPOINT", "ALLOWED-IPS", "HANDSHAKE", "KEY"))?;
        }
        for p in &w.peers {
            f.write_str(&row(
                p.node.as_deref().unwrap_or("(restored)"),
                p.endpoint.as_deref().unwrap_or("-"),
                &p.allowed_ips.to_string(),
                &p.handshake_seconds_ago
                    .map_or("never".to_owned(), |s| format!("{s}s ago")),
                &p.key,
            ))?;
        }
        if let Some(e) = &w.device_error {
            writeln!(f, "  device not answering: {e}")?;
        }
        for r in &w.refused {
            writeln!(f, "  refused {r}")?;
        }
        if let Some(r) = &w.routes {
            let kept = if r.restoring {
                ", restored ones kept until the remote nodes are synced"
            } else {
                ""
            };
            writeln!(
                f,
                "  pod routes through the device: {}{kept}",
                if r.installed.is_empty() {
                    "none".to_owned()
                } else {
                    r.installed.join(", ")
                }
            )?;
            for refused in &r.refused {
                writeln!(f, "  no route: {refused}")?;
            }
            if let Some(e) = &r.error {
                writeln!(f, "  pod routes not in step: {e}")?;
            }
        }
        Ok(())
    }
}
