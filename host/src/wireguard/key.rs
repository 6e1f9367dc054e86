//! The node's WireGuard private key: kept in the state directory (mode 0600), made
//! when missing, never logged.

use super::Error;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
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
    /// Reads the key at `path`, or makes one and writes it there (0600) when the file
    /// does not exist.
    ///
    /// # Errors
    /// [`Error::Key`] when the file cannot be read or written, or holds no key.
    pub fn load_or_create(path: &Path) -> Result<Self, Error> {
        let bad = |reason: String| Error::Key {
            path: path.into(),
            reason,
        };
        let private = match std::fs::read_to_string(path) {
            Ok(text) => Key::from_base64(text.trim())
                .map_err(|_| bad("not a base64 WireGuard key".into()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let key = Key::generate_private();
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(path)
                    .map_err(|e| bad(e.to_string()))?;
                writeln!(f, "{}", key.to_base64()).map_err(|e| bad(e.to_string()))?;
                tracing::info!(path = %path.display(), "WireGuard private key generated");
                key
            }
            Err(e) => return Err(bad(e.to_string())),
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
