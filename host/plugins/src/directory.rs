//! The plugin directory, followed: manifests added, changed and removed become loads,
//! reloads and removals on the plugin host.
//!
//! A reload loads the new plugin completely (verify, compile, instantiate, `init`)
//! before it replaces the running one; if any step fails the running plugin stays and
//! the refusal is reported. A manifest is tried again only when it or its component
//! changes.

use super::host::{PluginHost, Refusal};
use super::loader::Loader;
use super::manifest::Manifest;
use super::Error;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use weft_sys::dirwatch::DirWake;

/// How often the directory is read even without a notification.
const RESCAN: Duration = Duration::from_secs(2);

struct Tracked {
    /// Of the manifest and its component, as last tried.
    fingerprint: [u8; 32],
    /// The plugin this manifest has running.
    installed: Option<Installed>,
}

/// A plugin a manifest has running: live, or the shadow of the live one of its name.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Installed {
    name: String,
    shadow: bool,
}

impl std::fmt::Display for Installed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)?;
        if self.shadow {
            f.write_str(" (shadow)")?;
        }
        Ok(())
    }
}

/// What one pass over the directory changed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Changes {
    /// Plugins loaded or reloaded.
    pub loaded: Vec<String>,
    /// Plugins removed (their manifest went away).
    pub removed: Vec<String>,
    /// Manifests refused.
    pub refused: Vec<PathBuf>,
}

/// A plugin directory and what it has running on a host.
pub struct PluginDir {
    dir: PathBuf,
    loader: Loader,
    host: PluginHost,
    known: BTreeMap<PathBuf, Tracked>,
}

impl PluginDir {
    /// Follows `dir` (one `*.toml` manifest per plugin), loading with `loader` into
    /// `host`.
    pub fn new(dir: PathBuf, loader: Loader, host: PluginHost) -> Self {
        let trust = loader.trust().describe();
        host.update_report(|r| r.trust = trust);
        Self {
            dir,
            loader,
            host,
            known: BTreeMap::new(),
        }
    }

    /// Reads the directory once and applies what changed since the last pass.
    pub async fn reconcile(&mut self) -> Changes {
        let mut changes = Changes::default();
        let present = manifests(&self.dir);
        let gone: Vec<PathBuf> = self
            .known
            .keys()
            .filter(|p| !present.contains(p))
            .cloned()
            .collect();
        for path in gone {
            if let Some(gone) = self.known.remove(&path).and_then(|t| t.installed) {
                self.host.remove(&gone.name, gone.shadow);
                tracing::info!(plugin = %gone, manifest = %path.display(), "plugin removed");
                changes.removed.push(gone.to_string());
            }
            self.set_refusal(&path, None);
        }
        for path in present {
            match self.try_manifest(&path).await {
                None => {}
                Some(Ok(name)) => changes.loaded.push(name),
                Some(Err(())) => changes.refused.push(path),
            }
        }
        changes
    }

    /// Loads `path` if it changed: `None` when unchanged, the plugin's name when
    /// (re)loaded (with " (shadow)" for a shadow).
    async fn try_manifest(&mut self, path: &Path) -> Option<Result<String, ()>> {
        let loader = self.loader.clone();
        let p = path.to_owned();
        // Reading may meet anything a directory can hold: off the async threads.
        let read = match tokio::task::spawn_blocking(move || loader.read(&p)).await {
            Ok(read) => read,
            Err(e) => {
                tracing::error!(manifest = %path.display(), error = %e, "plugin read task failed");
                return None;
            }
        };
        let tracked = self.known.entry(path.into()).or_insert(Tracked {
            fingerprint: [0; 32],
            installed: None,
        });
        if tracked.fingerprint == read.fingerprint {
            return None;
        }
        tracked.fingerprint = read.fingerprint;
        let previous = tracked.installed.clone();
        let result = self.load(path, read.result).await;
        let failed = result.is_err();
        self.host.update_report(|r| {
            if failed {
                r.failed_loads += 1;
            } else {
                r.loads += 1;
            }
        });
        match result {
            Ok(installed) => {
                if let Some(old) = previous.filter(|old| *old != installed) {
                    self.host.remove(&old.name, old.shadow);
                }
                let name = installed.to_string();
                self.known.get_mut(path).expect("tracked above").installed = Some(installed);
                self.set_refusal(path, None);
                tracing::info!(plugin = %name, manifest = %path.display(), "plugin loaded");
                Some(Ok(name))
            }
            Err(e) => {
                tracing::warn!(manifest = %path.display(), error = %weft_sys::error_chain(&e), kept = ?previous, "plugin refused");
                self.set_refusal(
                    path,
                    Some(Refusal {
                        manifest: path.into(),
                        error: weft_sys::error_chain(&e),
                        kept: previous.map(|p| p.to_string()),
                    }),
                );
                Some(Err(()))
            }
        }
    }

    async fn load(
        &self,
        path: &Path,
        read: Result<(Manifest, Vec<u8>), Error>,
    ) -> Result<Installed, Error> {
        let (manifest, wasm) = read?;
        let installed = Installed {
            name: manifest.name.clone(),
            shadow: manifest.shadow,
        };
        if let Some((other, _)) = self
            .known
            .iter()
            .find(|(p, t)| p.as_path() != path && t.installed.as_ref() == Some(&installed))
        {
            return Err(Error::DuplicateName {
                plugin: manifest.name,
                other: other.clone(),
            });
        }
        let loader = self.loader.clone();
        // Compiling takes milliseconds to seconds: off the async threads.
        let (plugin, outcome) =
            tokio::task::spawn_blocking(move || loader.load_bytes(manifest, &wasm))
                .await
                .map_err(|e| Error::CompileTask {
                    plugin: installed.name.clone(),
                    source: Arc::new(e),
                })??;
        tracing::debug!(plugin = %installed, cache = ?outcome, "plugin compiled");
        self.host.install(plugin).await?;
        Ok(installed)
    }

    fn set_refusal(&self, path: &Path, refusal: Option<Refusal>) {
        self.host.update_report(|r| {
            r.refused.retain(|x| x.manifest != path);
            r.refused.extend(refusal);
        });
    }

    /// Reconciles now, then on every change, until dropped. `loaded` turns true once
    /// the first pass is done, so the first policy question sees the initial plugins.
    pub async fn run(mut self, loaded: tokio::sync::watch::Sender<bool>) {
        let mut wake = DirWake::new(self.dir.clone(), RESCAN);
        loop {
            wake.arm();
            self.reconcile().await;
            loaded.send_replace(true);
            wake.changed().await;
        }
    }
}

/// The manifests in `dir`: non-hidden `*.toml` files, regular files inside the
/// directory (symlinks followed, as Kubernetes' ConfigMap mounts need, but not out of
/// the directory).
fn manifests(dir: &Path) -> Vec<PathBuf> {
    let Ok(root) = std::fs::canonicalize(dir) else {
        return Vec::new();
    };
    let inside = |p: &Path| std::fs::canonicalize(p).is_ok_and(|c| c.starts_with(&root));
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default();
            !name.starts_with('.') && name.ends_with(".toml") && p.is_file() && inside(p)
        })
        .collect();
    found.sort();
    found
}
