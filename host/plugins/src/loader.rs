//! From a manifest to a plugin ready to instantiate: read (safely), verify, compile
//! (through the cache), check the WIT version. Instantiation and `init` are the plugin
//! host's, so a plugin that compiles but fails there is refused by the same path.
//!
//! Everything here blocks (file reads, compilation): callers run it off the async
//! runtime.

use super::cache::{CacheOutcome, CompileCache};
use super::manifest::Manifest;
use super::runtime::Runtime;
use super::slot::LoadedPlugin;
use super::trust::TrustPolicy;
use super::{Error, FileError, ManifestError, WasmFileError};
use sha2::{Digest as _, Sha256};
use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Component, Path};
use std::sync::Arc;

/// The largest manifest read.
const MAX_MANIFEST_BYTES: u64 = 64 << 10;

/// The largest component read, unless configured otherwise.
pub const MAX_COMPONENT_BYTES: u64 = 32 << 20;

/// A manifest and its component as read from the plugin directory.
pub struct Read {
    /// Of the manifest's bytes and the component's (or why it could not be read): what
    /// tells the directory whether anything changed.
    pub fingerprint: [u8; 32],
    /// The manifest and the component's bytes, or why they cannot be used.
    pub result: Result<(Manifest, Vec<u8>), Error>,
}

/// Loads plugins for one runtime.
#[derive(Clone)]
pub struct Loader {
    runtime: Arc<Runtime>,
    cache: Option<CompileCache>,
    trust: TrustPolicy,
    max_component_bytes: u64,
}

impl Loader {
    /// A loader compiling on `runtime`, through `cache` when given, admitting what
    /// `trust` admits.
    pub fn new(runtime: Arc<Runtime>, cache: Option<CompileCache>, trust: TrustPolicy) -> Self {
        Self {
            runtime,
            cache,
            trust,
            max_component_bytes: MAX_COMPONENT_BYTES,
        }
    }

    /// Refuses components larger than `bytes`.
    #[must_use]
    pub fn with_max_component_bytes(mut self, bytes: u64) -> Self {
        self.max_component_bytes = bytes;
        self
    }

    /// The runtime the plugins are compiled for.
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    /// The trust policy.
    pub fn trust(&self) -> &TrustPolicy {
        &self.trust
    }

    /// Reads the manifest at `path` and its component ([`read_package`]).
    pub fn read(&self, path: &Path) -> Read {
        read_package(path, self.max_component_bytes)
    }

    /// [`Self::read`] then [`Self::load_bytes`].
    ///
    /// # Errors
    /// [`Error`] naming the check that failed.
    pub fn load(&self, path: &Path) -> Result<(LoadedPlugin, Option<CacheOutcome>), Error> {
        let (manifest, wasm) = self.read(path).result?;
        self.load_bytes(manifest, &wasm)
    }

    /// Checks digest, version and signature, compiles, and checks that the component
    /// exports the WIT version its manifest says, if it says one (`None` as outcome
    /// without a cache).
    ///
    /// # Errors
    /// [`Error`] naming the check that failed: digest, version, signature,
    /// compilation, WIT version.
    pub fn load_bytes(
        &self,
        manifest: Manifest,
        wasm: &[u8],
    ) -> Result<(LoadedPlugin, Option<CacheOutcome>), Error> {
        let verified = manifest.verify(wasm, &self.trust)?;
        if verified.signed_by.is_none() {
            tracing::warn!(plugin = %manifest.name, "plugin loaded unsigned (--plugin-allow-unsigned)");
        }
        let (component, outcome) = match &self.cache {
            Some(cache) => {
                let (c, o) = cache.load(&self.runtime, &verified.digest, wasm)?;
                (c, Some(o))
            }
            None => (self.runtime.compile(wasm)?, None),
        };
        let exported = self.runtime.exported_wit(&component);
        if let Some(said) = &manifest.wit {
            if exported.as_ref() != Some(said) {
                return Err(Error::Wit {
                    plugin: manifest.name,
                    manifest: said.clone(),
                    component: exported.map_or_else(
                        || "no weft:plugin/hooks".into(),
                        |v| format!("weft:plugin/hooks@{v}"),
                    ),
                });
            }
        }
        Ok((
            LoadedPlugin {
                name: manifest.name,
                version: manifest.version,
                digest: verified.digest,
                wit: exported.unwrap_or_default(),
                priority: manifest.priority,
                config: manifest.config,
                shadow: manifest.shadow,
                signed_by: verified.signed_by,
                component,
            },
            outcome,
        ))
    }
}

/// Reads the manifest at `path` and its component, at most `max_component_bytes`. The component must be a regular
/// file inside the manifest's directory (symlinks are followed, as a ConfigMap
/// mount needs, but must stay inside) and no larger than the limit; a FIFO or a
/// device is refused without being read.
pub fn read_package(path: &Path, max_component_bytes: u64) -> Read {
    let mut h = Sha256::new();
    let result = (|| {
        let text = read_regular(path, MAX_MANIFEST_BYTES).map_err(|e| Error::Manifest {
            path: path.into(),
            source: ManifestError::Read(FileError::read(e)),
        })?;
        h.update(&text);
        let text = String::from_utf8(text).map_err(|_| Error::Manifest {
            path: path.into(),
            source: ManifestError::NotUtf8,
        })?;
        let manifest = Manifest::parse_at(&text, path)?;
        let wasm = read_component(&manifest, path, max_component_bytes);
        match &wasm {
            Ok(bytes) => h.update(bytes),
            Err(e) => h.update(weft_sys::error_chain(e)),
        }
        Ok((manifest, wasm?))
    })();
    Read {
        fingerprint: h.finalize().into(),
        result,
    }
}

fn read_component(manifest: &Manifest, manifest_path: &Path, max: u64) -> Result<Vec<u8>, Error> {
    let refuse = |source: WasmFileError| Error::Wasm {
        plugin: manifest.name.clone(),
        path: manifest.wasm.clone(),
        source,
    };
    let relative_inside = manifest
        .wasm
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if !relative_inside {
        return Err(refuse(WasmFileError::NotRelative));
    }
    let dir = manifest_path.parent().unwrap_or(Path::new("."));
    let canonical = |p: &Path| {
        std::fs::canonicalize(p).map_err(|e| {
            refuse(WasmFileError::Resolve {
                path: p.into(),
                source: e.into(),
            })
        })
    };
    let (dir, file) = (
        canonical(dir)?,
        canonical(&manifest.wasm_path(manifest_path))?,
    );
    if !file.starts_with(&dir) {
        return Err(refuse(WasmFileError::Outside {
            resolved: file,
            dir,
        }));
    }
    read_regular(&file, max).map_err(|e| refuse(WasmFileError::Read(FileError::read(e))))
}

/// Why a plugin's file was not read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    /// It cannot be opened or its type read.
    #[error(transparent)]
    Open(std::io::Error),
    /// A directory, FIFO, device or socket.
    #[error("not a regular file")]
    NotRegular,
    /// Larger than the limit.
    #[error("{len} bytes, over the limit of {max}")]
    TooLarge { len: u64, max: u64 },
    /// Reading it failed.
    #[error(transparent)]
    Read(std::io::Error),
    /// It grew past the limit while read.
    #[error("grew over the limit of {max} bytes while read")]
    Grew { max: u64 },
}

/// Reads `path` if it is a regular file of at most `max` bytes. Opened non-blocking, so
/// a FIFO cannot hold the reader; its type is checked on the open file.
fn read_regular(path: &Path, max: u64) -> Result<Vec<u8>, ReadError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(path)
        .map_err(ReadError::Open)?;
    let meta = file.metadata().map_err(ReadError::Open)?;
    if !meta.is_file() {
        return Err(ReadError::NotRegular);
    }
    if meta.len() > max {
        return Err(ReadError::TooLarge {
            len: meta.len(),
            max,
        });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(ReadError::Read)?;
    if bytes.len() as u64 > max {
        return Err(ReadError::Grew { max });
    }
    Ok(bytes)
}
