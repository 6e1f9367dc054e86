//! The on-disk compile cache: a compiled component per module digest and engine.
//!
//! An entry is named `<module sha256>-<engine hash>.cwasm`, where the engine hash covers
//! wasmtime's own compatibility hash (version, target, compiler settings). Loading
//! native code from disk is only as safe as the file, so an entry is never trusted:
//! it carries an HMAC-SHA256 over its name and bytes under a key that only this node
//! holds (`.key`, mode 0600, made on first use). A truncated, altered, renamed or
//! foreign entry fails the check (or wasmtime's own), is ignored and rebuilt. The cache
//! keeps the [`MAX_ENTRIES`] entries last written or used: every plugin version ever
//! loaded would otherwise stay on disk.

#![allow(unsafe_code)] // `Component::deserialize`, guarded by the MAC; see `load`.

use super::runtime::Runtime;
use super::{CacheDirError, Error};
use hmac::{Hmac, Mac as _};
use sha2::Sha256;
use std::hash::{Hash as _, Hasher as _};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use wasmtime::component::Component;
use weft_sys::fsutil::write_atomically;

const MAGIC: &[u8; 8] = b"WEFTCC01";

/// The entries the cache keeps; the least recently written or used go first. Room for
/// every plugin and shadow a node runs, and the versions an operator moves between.
pub const MAX_ENTRIES: usize = 64;
const MAC_LEN: usize = 32;

/// How a component was obtained.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Loaded from the cache: no compilation.
    Hit,
    /// Not in the cache: compiled and stored.
    Miss,
    /// An entry was there but refused (why), then compiled and stored again.
    Rebuilt(String),
}

/// A directory of compiled components.
#[derive(Clone)]
pub struct CompileCache {
    dir: PathBuf,
    key: [u8; 32],
}

impl std::fmt::Debug for CompileCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompileCache")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl CompileCache {
    /// Opens (creating) the cache in `dir`, with its key.
    ///
    /// # Errors
    /// [`Error::Cache`] when the directory or its key cannot be made or read.
    pub fn open(dir: &Path) -> Result<Self, Error> {
        let err = |e: std::io::Error| Error::Cache {
            path: dir.into(),
            source: CacheDirError::Io(e.into()),
        };
        std::fs::create_dir_all(dir).map_err(err)?;
        // The directory holds the key that vouches for native code: anyone who owns
        // it could replace the key and forge entries. It must be a directory (not a
        // link to one) of this process's user.
        let meta = std::fs::symlink_metadata(dir).map_err(err)?;
        let me = nix::unistd::geteuid().as_raw();
        if !meta.is_dir() || std::os::unix::fs::MetadataExt::uid(&meta) != me {
            return Err(Error::Cache {
                path: dir.into(),
                source: CacheDirError::Owner {
                    me,
                    owner: std::os::unix::fs::MetadataExt::uid(&meta),
                },
            });
        }
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(err)?;
        let key_path = dir.join(".key");
        let key = match std::fs::read(&key_path) {
            Ok(bytes) if bytes.len() == 32 => bytes.try_into().expect("32 bytes"),
            _ => {
                let mut key = [0u8; 32];
                std::io::Read::read_exact(
                    &mut std::fs::File::open("/dev/urandom").map_err(err)?,
                    &mut key,
                )
                .map_err(err)?;
                write_atomically(&key_path, &key, 0o600).map_err(err)?;
                key
            }
        };
        Ok(Self {
            dir: dir.into(),
            key,
        })
    }

    /// The entry's path for module `digest` (hex) on `runtime`'s engine.
    pub fn entry_path(&self, runtime: &Runtime, digest: &str) -> PathBuf {
        let mut h = std::hash::DefaultHasher::new();
        runtime
            .engine()
            .precompile_compatibility_hash()
            .hash(&mut h);
        self.dir.join(format!("{digest}-{:016x}.cwasm", h.finish()))
    }

    /// The component of module `wasm` with digest `digest` (hex, already verified by
    /// the caller): from the cache when a valid entry is there, else compiled and
    /// stored.
    ///
    /// # Errors
    /// [`Error::Compile`] when the bytes do not compile. A cache that cannot be
    /// written is logged, not an error: the component still loads.
    pub fn load(
        &self,
        runtime: &Runtime,
        digest: &str,
        wasm: &[u8],
    ) -> Result<(Component, CacheOutcome), Error> {
        let path = self.entry_path(runtime, digest);
        let refused = match std::fs::read(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => Some(e.to_string()),
            Ok(bytes) => match self.check(&path, &bytes) {
                Err(e) => Some(e.to_string()),
                // SAFETY: wasmtime runs the bytes as native code. They are exactly
                // what `Component::serialize` wrote for this entry's name (the MAC
                // under this node's key proves it), and wasmtime checks its own
                // version and settings header before using them.
                Ok(payload) => match unsafe { Component::deserialize(runtime.engine(), payload) } {
                    Ok(c) => {
                        // Used now: the last to be pruned.
                        let _ = std::fs::File::options()
                            .write(true)
                            .open(&path)
                            .and_then(|f| f.set_modified(std::time::SystemTime::now()));
                        return Ok((c, CacheOutcome::Hit));
                    }
                    Err(e) => Some(format!("wasmtime refused it: {e:#}")),
                },
            },
        };
        if let Some(reason) = &refused {
            tracing::warn!(entry = %path.display(), %reason, "compile cache entry ignored; rebuilding");
        }
        let component = runtime.compile(wasm)?;
        match component.serialize() {
            Ok(payload) => {
                let mut file = Vec::with_capacity(MAGIC.len() + MAC_LEN + payload.len());
                file.extend_from_slice(MAGIC);
                file.extend_from_slice(&self.mac(&path, &payload));
                file.extend_from_slice(&payload);
                if let Err(e) = write_atomically(&path, &file, 0o600) {
                    tracing::warn!(entry = %path.display(), error = %e, "cannot write the compile cache");
                }
                prune(&self.dir, MAX_ENTRIES);
            }
            Err(e) => tracing::warn!(error = %e, "cannot serialise a compiled plugin"),
        }
        let outcome = refused.map_or(CacheOutcome::Miss, CacheOutcome::Rebuilt);
        Ok((component, outcome))
    }

    /// The payload of a well-formed entry whose MAC verifies.
    fn check<'a>(&self, path: &Path, bytes: &'a [u8]) -> Result<&'a [u8], EntryError> {
        let rest = bytes
            .strip_prefix(MAGIC.as_slice())
            .ok_or(EntryError::NotAnEntry)?;
        if rest.len() < MAC_LEN {
            return Err(EntryError::Truncated);
        }
        let (mac, payload) = rest.split_at(MAC_LEN);
        self.mac_state(path, payload)
            .verify_slice(mac)
            .map_err(|_| EntryError::Integrity)?;
        Ok(payload)
    }

    fn mac_state(&self, path: &Path, payload: &[u8]) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("any key length");
        let name = path
            .file_name()
            .map(|n| n.as_encoded_bytes())
            .unwrap_or(b"");
        mac.update(&(name.len() as u64).to_le_bytes());
        mac.update(name);
        mac.update(payload);
        mac
    }

    fn mac(&self, path: &Path, payload: &[u8]) -> [u8; MAC_LEN] {
        self.mac_state(path, payload).finalize().into_bytes().into()
    }
}

/// Removes the entries (`*.cwasm`) of `dir` beyond the `keep` last modified: written,
/// or used (a hit touches its entry). What cannot be read or removed stays.
fn prune(dir: &Path, keep: usize) {
    let Ok(read) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<(std::time::SystemTime, PathBuf)> = read
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .collect();
    if entries.len() <= keep {
        return;
    }
    entries.sort_by_key(|e| std::cmp::Reverse(e.0));
    for (_, path) in entries.drain(keep..) {
        if let Err(e) = std::fs::remove_file(&path) {
            tracing::warn!(entry = %path.display(), error = %e, "cannot prune the compile cache");
        }
    }
}

/// Why a cache entry is not used: it is rebuilt, and the reason reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
enum EntryError {
    /// The file does not start with the entries' magic.
    #[error("not a weft compile cache entry")]
    NotAnEntry,
    /// Shorter than its MAC.
    #[error("truncated")]
    Truncated,
    /// The MAC does not verify under this node's key for this entry's name.
    #[error("integrity check failed (altered, renamed or from another node)")]
    Integrity,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_directory_of_another_user_or_a_link_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let ours = root.path().join("ours");
        assert!(CompileCache::open(&ours).is_ok(), "made here: ours");
        let link = root.path().join("link");
        std::os::unix::fs::symlink(&ours, &link).unwrap();
        let err = weft_sys::error_chain(&CompileCache::open(&link).unwrap_err());
        assert!(
            err.contains("not a directory of this process's user"),
            "{err}"
        );
        if !nix::unistd::geteuid().is_root() {
            return; // only root can give a directory away
        }
        let theirs = root.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), None).unwrap();
        let err = weft_sys::error_chain(&CompileCache::open(&theirs).unwrap_err());
        assert!(err.contains("uid 65534"), "{err}");
    }

    #[test]
    fn the_least_recently_written_or_used_entries_are_pruned() {
        let dir = tempfile::tempdir().unwrap();
        let t0 = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        for i in 0..5u64 {
            let path = dir.path().join(format!("m{i}-0.cwasm"));
            std::fs::write(&path, b"x").unwrap();
            let f = std::fs::File::options().write(true).open(&path).unwrap();
            f.set_modified(t0 + std::time::Duration::from_secs(i * 60))
                .unwrap();
        }
        std::fs::write(dir.path().join(".key"), [0u8; 32]).unwrap();
        prune(dir.path(), 3);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, [".key", "m2-0.cwasm", "m3-0.cwasm", "m4-0.cwasm"]);
    }
}
