//! The vendor's side of plugins (`weftd plugin …`): scaffold a crate, build it, see what
//! a manifest signs and whether an agent would load it, and test a build against what
//! an agent recorded.

pub mod build;
pub mod scaffold;

use crate as plugins;
use crate::{LoadedPlugin, Manifest, ReplayReport, Runtime, TrustPolicy};
use std::fmt::{self, Write as _};
use std::path::Path;
use std::sync::Arc;

/// The fields a signature covers, one per line, as `weftd plugin sign` and `verify`
/// print them.
pub fn render_signed_fields(m: &Manifest) -> String {
    m.signed_fields()
        .iter()
        .map(|(field, value)| format!("  {field:<9} {value:?}\n"))
        .collect()
}

/// What `weftd plugin verify` found.
#[derive(Debug, Clone)]
pub struct Verdict {
    /// The manifest, when it could be parsed.
    pub manifest: Option<Manifest>,
    /// Whether an agent with this trust would load it (before instantiating it).
    pub accepted: bool,
    /// The signer, or why it is refused.
    pub detail: String,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(m) = &self.manifest {
            writeln!(f, "signed fields:")?;
            f.write_str(&render_signed_fields(m))?;
            writeln!(
                f,
                "signature: {}",
                if m.signature.is_some() {
                    "ed25519"
                } else {
                    "none"
                }
            )?;
        }
        let word = if self.accepted { "accepted" } else { "refused" };
        writeln!(f, "{word}: {}", self.detail)
    }
}

/// Checks the manifest at `path` and its component as an agent with this trust would:
/// the component's file, digest, minimum version and signature (not instantiation).
///
/// # Errors
/// [`plugins::Error`] when the trust policy or keys file cannot be read; a refused
/// plugin is a [`Verdict`], not an error.
pub fn verify_plugin(
    path: &Path,
    trust_policy: Option<&Path>,
    trusted_keys: Option<&Path>,
    allow_unsigned: bool,
) -> Result<Verdict, plugins::Error> {
    let mut trust = match trust_policy {
        Some(p) => TrustPolicy::read(p)?,
        None => TrustPolicy::none(),
    };
    if let Some(p) = trusted_keys {
        trust.add_keys_file(p)?;
    }
    if allow_unsigned && !trust.has_keys() {
        trust = trust.allowing_unsigned();
    }
    let read = plugins::read_package(path, plugins::MAX_COMPONENT_BYTES);
    let (manifest, wasm) = match read.result {
        Ok(r) => r,
        Err(e) => {
            return Ok(Verdict {
                manifest: None,
                accepted: false,
                detail: weft_sys::error_chain(&e),
            })
        }
    };
    let (accepted, detail) = match manifest.verify(&wasm, &trust) {
        Ok(v) => (
            true,
            match v.signed_by {
                Some(key) => format!("signed by {key:?}"),
                None => "unsigned, allowed by --allow-unsigned".into(),
            },
        ),
        Err(e) => (false, weft_sys::error_chain(&e)),
    };
    Ok(Verdict {
        manifest: Some(manifest),
        accepted,
        detail,
    })
}

/// Replays the recording in `recording` against the plugin of the manifest at `path`
/// (its digest checked; its signature not, this is a vendor's tool).
///
/// # Errors
/// [`plugins::Error`] when the package, the component or the recording cannot be used.
pub fn test_plugin(
    path: &Path,
    recording: &Path,
) -> Result<(Manifest, ReplayReport), plugins::Error> {
    let (manifest, wasm) = plugins::read_package(path, plugins::MAX_COMPONENT_BYTES).result?;
    let verified = manifest.verify(&wasm, &TrustPolicy::none().allowing_unsigned())?;
    let runtime = Arc::new(Runtime::new(plugins::Config::default())?);
    let component = runtime.compile(&wasm)?;
    let plugin = LoadedPlugin {
        version: manifest.version.clone(),
        digest: verified.digest,
        priority: manifest.priority,
        config: manifest.config.clone(),
        shadow: manifest.shadow,
        ..LoadedPlugin::new(&manifest.name, component)
    };
    let events = plugins::read_recording(recording)?;
    let report = plugins::replay(runtime, plugin, &events)?;
    Ok((manifest, report))
}

/// `weftd plugin test`'s output: the summary, then every difference with its input.
pub fn render_replay(m: &Manifest, r: &ReplayReport) -> String {
    let mut out = format!(
        "replayed {} events against {} {} (sha256 {}): {} decisions compared, {} differ, {} hooks failed\n",
        r.events,
        m.name,
        m.version,
        m.sha256.get(..12).unwrap_or(&m.sha256),
        r.compared,
        r.differences.len(),
        r.failures.len(),
    );
    for d in &r.differences {
        let input = serde_json::to_string(&d.input).unwrap_or_default();
        let _ = writeln!(out, "#{} {}", d.event, d.input.hook());
        let _ = writeln!(out, "  input:      {input}");
        let _ = writeln!(out, "  recorded:   {} ({})", d.recorded, d.recorded_from);
        let _ = writeln!(out, "  this build: {}", d.replayed);
    }
    for (event, why) in &r.failures {
        let _ = writeln!(out, "#{event} failed: {why}");
    }
    out
}
