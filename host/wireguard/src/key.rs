//! The node's WireGuard private key: kept in the state directory (mode 0600), made
//! when missing, never logged. It is written whole or not at all (a crash cannot leave
//! an empty key behind), and a key file others may read is refused, not used.

use super::{Error, KeyError};
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use wireguard_control::Key;

/// A private key and its public key. `Debug` shows the public half only.
#[derive(Clone, PartialEq, Eq)]
pub struct NodeKey {
    private: Key,
    public: Key,
}

impl std::fmt::Debug for NodeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeKey")
            .field("public", &self.public.to_base64())
            .finish_non_exhaustive()
    }
}

impl NodeKey {
    /// Reads the key at `path`, or makes one and writes it there (0600, written to a
    /// temporary file, synced and renamed) when the file does not exist or is empty
    /// (what an older agent's crash could leave).
    ///
    /// # Errors
    /// [`Error::Key`] when the file cannot be read or written, holds no key, or may be
    /// read by others than its owner.
    pub fn load_or_create(path: &Path) -> Result<Self, Error> {
        let bad = |source: KeyError| Error::Key {
            path: path.into(),
            source,
        };
        let existing = match std::fs::metadata(path) {
            Ok(meta) => {
                let mode = meta.permissions().mode() & 0o777;
                if mode & 0o077 != 0 {
                    return Err(bad(KeyError::Mode { mode }));
                }
                let text = std::fs::read_to_string(path).map_err(|e| bad(KeyError::Io(e)))?;
                (!text.trim().is_empty()).then_some(text)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(bad(KeyError::Io(e))),
        };
        let private = match existing {
            Some(text) => Key::from_base64(text.trim()).map_err(|_| bad(KeyError::NotBase64))?,
            None => {
                let key = Key::generate_private();
                weft_sys::fsutil::write_atomically(
                    path,
                    format!("{}\n", key.to_base64()).as_bytes(),
                    0o600,
                )
                .map_err(|e| bad(KeyError::Io(e)))?;
                tracing::info!(path = %path.display(), "WireGuard private key generated");
                key
            }
        };
        let public = private.get_public();
        Ok(Self { private, public })
    }

    /// The public key, as published in the node record.
    pub fn public(&self) -> &Key {
        &self.public
    }

    pub(crate) fn private(&self) -> &Key {
        &self.private
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_made_0600_whole_and_read_back_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wg.key");
        let made = NodeKey::load_or_create(&path).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(NodeKey::load_or_create(&path).unwrap(), made);
        // Nothing half-written beside it.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn an_empty_key_file_is_replaced_and_an_open_or_garbled_one_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wg.key");
        std::fs::write(&path, "").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let made = NodeKey::load_or_create(&path).expect("an empty file is no key");
        assert_eq!(NodeKey::load_or_create(&path).unwrap(), made);

        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = weft_sys::error_chain(&NodeKey::load_or_create(&path).unwrap_err());
        assert!(e.contains("mode 0644"), "{e}");

        std::fs::write(&path, "not a key\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let e = weft_sys::error_chain(&NodeKey::load_or_create(&path).unwrap_err());
        assert!(e.contains("not a base64 WireGuard key"), "{e}");
    }
}
