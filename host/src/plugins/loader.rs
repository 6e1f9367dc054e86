//! From a manifest to a plugin ready to instantiate: read, verify, compile (through the
//! cache). Instantiation and `init` are the plugin host's, so a plugin that compiles
//! but fails there is refused by the same path.

use super::cache::{CacheOutcome, CompileCache};
use super::manifest::{Manifest, TrustedKeys};
use super::runtime::Runtime;
use super::slot::LoadedPlugin;
use super::Error;
use std::path::Path;
use std::sync::Arc;

/// Loads plugins for one runtime.
#[derive(Clone)]
pub struct Loader {
    runtime: Arc<Runtime>,
    cache: Option<CompileCache>,
    trusted: TrustedKeys,
}

impl Loader {
    /// A loader compiling on `runtime`, through `cache` when given, requiring
    /// signatures by `trusted` when it holds keys.
    pub fn new(runtime: Arc<Runtime>, cache: Option<CompileCache>, trusted: TrustedKeys) -> Self {
        Self {
            runtime,
            cache,
            trusted,
        }
    }

    /// The runtime the plugins are compiled for.
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    /// Reads the manifest at `path` and its component, checks digest and signature,
    /// and compiles it (`None` as outcome without a cache).
    ///
    /// # Errors
    /// [`Error`] naming the check that failed: manifest, component file, digest,
    /// signature, or compilation.
    pub fn load(&self, path: &Path) -> Result<(LoadedPlugin, Option<CacheOutcome>), Error> {
        let manifest = Manifest::read(path)?;
        let wasm_path = manifest.wasm_path(path);
        let wasm = std::fs::read(&wasm_path).map_err(|e| Error::Wasm {
            plugin: manifest.name.clone(),
            path: wasm_path.clone(),
            reason: e.to_string(),
        })?;
        self.load_bytes(manifest, &wasm)
    }

    /// [`Self::load`] for a manifest and component already in memory.
    ///
    /// # Errors
    /// As [`Self::load`].
    pub fn load_bytes(
        &self,
        manifest: Manifest,
        wasm: &[u8],
    ) -> Result<(LoadedPlugin, Option<CacheOutcome>), Error> {
        let digest = manifest.verify(wasm, &self.trusted)?;
        if self.trusted.is_empty() && manifest.signature.is_some() {
            tracing::info!(plugin = %manifest.name, "signature not checked: no --plugin-trusted-keys");
        }
        let (component, outcome) = match &self.cache {
            Some(cache) => {
                let (c, o) = cache.load(&self.runtime, &digest, wasm)?;
                (c, Some(o))
            }
            None => (self.runtime.compile(wasm)?, None),
        };
        Ok((
            LoadedPlugin {
                name: manifest.name,
                version: manifest.version,
                digest,
                priority: manifest.priority,
                config: manifest.config,
                component,
            },
            outcome,
        ))
    }
}
