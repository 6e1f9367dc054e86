//! `weftd plugin build`: compiles a plugin crate for `wasm32-wasip2`, checks the
//! component as an agent would (imports the sandbox provides, the hooks of a contract
//! it speaks), and writes `dist/<name>.wasm` with its manifest: the fields of
//! `plugin.toml`, the digest and the WIT version. The manifest is unsigned: sign it
//! next.

use crate as plugins;
use crate::{digest_hex, Manifest, Runtime};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The fields of `plugin.toml`: what the vendor decides, all covered by the signature.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Source {
    name: String,
    version: String,
    #[serde(default)]
    priority: i32,
    #[serde(default)]
    config: String,
    #[serde(default)]
    shadow: bool,
}

/// What `build` can fail on.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `plugin.toml` cannot be read or parsed.
    #[error("{path}: {reason}")]
    Source {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// cargo failed (its output went to the terminal).
    #[error("cargo {what} failed: {reason}")]
    Cargo {
        /// Which step.
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// The component would be refused by an agent.
    #[error(transparent)]
    Plugin(#[from] plugins::Error),
    /// The output cannot be written.
    #[error("cannot write {path}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Builds the plugin crate in `dir`; the manifest written.
///
/// # Errors
/// [`Error`] naming the step that failed.
pub fn build(dir: &Path, cargo: &str) -> Result<(PathBuf, Manifest), Error> {
    let source_path = dir.join("plugin.toml");
    let source: Source = std::fs::read_to_string(&source_path)
        .map_err(|e| e.to_string())
        .and_then(|t| toml::from_str(&t).map_err(|e| e.message().to_owned()))
        .map_err(|reason| Error::Source {
            path: source_path.clone(),
            reason,
        })?;
    // Absolute: cargo runs in `dir`, which may be relative to this process's directory.
    let manifest_path = std::path::absolute(dir.join("Cargo.toml")).map_err(|e| Error::Cargo {
        what: "build",
        reason: e.to_string(),
    })?;
    // In the crate's directory: cargo reads `.cargo/config.toml` from there.
    let status = Command::new(cargo)
        .current_dir(manifest_path.parent().expect("a file has a parent"))
        .args([
            "build",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--manifest-path",
        ])
        .arg(&manifest_path)
        .status()
        .map_err(|e| Error::Cargo {
            what: "build",
            reason: e.to_string(),
        })?;
    if !status.success() {
        return Err(Error::Cargo {
            what: "build",
            reason: status.to_string(),
        });
    }
    let wasm = std::fs::read(artifact(&manifest_path, cargo)?).map_err(|e| Error::Cargo {
        what: "build",
        reason: format!("the component is not where cargo said: {e}"),
    })?;
    // As an agent would: compiled, and checked against the imports and exports.
    let runtime = Runtime::new(plugins::Config::default())?;
    let component = runtime.compile(&wasm)?;
    runtime.prepare(&source.name, &component)?;
    let dist = dir.join("dist");
    let wasm_name = format!("{}.wasm", source.name);
    let manifest = Manifest {
        name: source.name.clone(),
        version: source.version,
        wasm: wasm_name.clone().into(),
        sha256: digest_hex(&wasm),
        wit: runtime.exported_wit(&component),
        priority: source.priority,
        config: source.config,
        shadow: source.shadow,
        signature: None,
    };
    let text = toml::to_string(&manifest).map_err(|e| Error::Source {
        path: source_path,
        reason: e.to_string(),
    })?;
    let out = dist.join(format!("{}.toml", source.name));
    let write = |path: PathBuf, bytes: &[u8]| {
        std::fs::create_dir_all(&dist)
            .and_then(|()| std::fs::write(&path, bytes))
            .map_err(|source| Error::Write { path, source })
    };
    write(dist.join(&wasm_name), &wasm)?;
    write(out.clone(), text.as_bytes())?;
    Ok((out, manifest))
}

/// Where cargo put the crate's component.
fn artifact(manifest_path: &Path, cargo: &str) -> Result<PathBuf, Error> {
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--manifest-path",
        ])
        .arg(manifest_path)
        .output()
        .map_err(|e| Error::Cargo {
            what: "metadata",
            reason: e.to_string(),
        })?;
    let bad = |reason: String| Error::Cargo {
        what: "metadata",
        reason,
    };
    if !out.status.success() {
        return Err(bad(String::from_utf8_lossy(&out.stderr).into_owned()));
    }
    let meta: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|e| bad(e.to_string()))?;
    let target = meta["target_directory"]
        .as_str()
        .ok_or_else(|| bad("no target_directory".into()))?;
    let root = std::fs::canonicalize(manifest_path).map_err(|e| bad(e.to_string()))?;
    let package = meta["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["manifest_path"].as_str().map(Path::new) == Some(root.as_path()))
        .ok_or_else(|| bad(format!("no package at {}", root.display())))?;
    let lib = package["name"]
        .as_str()
        .unwrap_or_default()
        .replace('-', "_");
    Ok(Path::new(target).join(format!("wasm32-wasip2/release/{lib}.wasm")))
}
