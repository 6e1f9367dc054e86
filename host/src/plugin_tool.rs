//! The vendor's side of plugins (`weftd plugin …`): what a manifest signs and whether an
//! agent would load it.

use crate::plugins::{self, Manifest, TrustPolicy};
use std::fmt;
use std::path::Path;

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
                detail: e.to_string(),
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
        Err(e) => (false, e.to_string()),
    };
    Ok(Verdict {
        manifest: Some(manifest),
        accepted,
        detail,
    })
}
