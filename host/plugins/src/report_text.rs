//! The plugins' report in words: the plugins part of `weftd status`.

use crate::PluginsReport;
use std::fmt;

impl fmt::Display for PluginsReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self;
        writeln!(
            f,
            "plugins: {} loaded, {} refused ({} loads, {} failed, {} stalls)",
            p.loaded.len(),
            p.refused.len(),
            p.loads,
            p.failed_loads,
            p.stalls,
        )?;
        if !p.trust.is_empty() {
            writeln!(f, "  trust: {}", p.trust)?;
        }
        let row = |cells: [&str; 9]| {
            format!(
                "  {:<22} {:<9} {:>8} {:<14} {:<12} {:>8} {:>8} {:<11}  {}\n",
                cells[0],
                cells[1],
                cells[2],
                cells[3],
                cells[4],
                cells[5],
                cells[6],
                cells[7],
                cells[8]
            )
        };
        if !p.loaded.is_empty() {
            f.write_str(&row([
                "PLUGIN",
                "VERSION",
                "PRIORITY",
                "DIGEST",
                "SIGNED BY",
                "CALLS",
                "FAILURES",
                "STATE",
                "LAST ERROR",
            ]))?;
        }
        for s in &p.loaded {
            f.write_str(&row([
                &s.name,
                &s.version,
                &s.priority.to_string(),
                s.digest.get(..12).unwrap_or(&s.digest),
                s.signed_by.as_deref().unwrap_or("(unsigned)"),
                &s.calls.to_string(),
                &s.failures.to_string(),
                &s.state,
                s.last_error.as_deref().unwrap_or("-"),
            ]))?;
            if !s.counters.is_empty() {
                let counters: Vec<String> =
                    s.counters.iter().map(|(k, v)| format!("{k}={v}")).collect();
                writeln!(f, "  {:<22} counters: {}", "", counters.join(" "))?;
            }
        }
        for s in &p.shadows {
            writeln!(
                f,
                "  shadow {} {} (signed by {}): {} compared, {} agreed, {} failures, {}",
                s.name,
                s.version,
                s.signed_by.as_deref().unwrap_or("nobody"),
                s.compared,
                s.agreed,
                s.failures,
                s.state
            )?;
            if let Some(d) = &s.last_disagreement {
                writeln!(
                    f,
                    "    last disagreement on {}: live {}, shadow {}",
                    d.input.hook(),
                    d.live,
                    d.shadow
                )?;
            }
        }
        if let Some(r) = &p.recording {
            writeln!(
                f,
                "  recording to {} ({} events dropped)",
                r.dir.display(),
                r.dropped
            )?;
        }
        for r in &p.refused {
            let kept = r
                .kept
                .as_ref()
                .map_or(String::new(), |k| format!(" (still running: {k})"));
            writeln!(f, "  refused {}: {}{kept}", r.manifest.display(), r.error)?;
        }
        Ok(())
    }
}
