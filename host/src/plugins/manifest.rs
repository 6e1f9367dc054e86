//! Plugin manifests and the checks a plugin passes before its bytes are compiled: the
//! digest always, the signature when trusted keys are configured.
//!
//! A plugin directory holds one `<anything>.toml` manifest per plugin:
//!
//! ```toml
//! name = "regeneration-policy"
//! version = "0.1.0"
//! wasm = "regeneration_policy.wasm"   # relative to the manifest's directory
//! sha256 = "9f86d081884c7d65..."      # of the .wasm, hex
//! priority = 0                        # higher runs first
//! config = ""                         # handed to the plugin's init
//! signature = "..."                   # optional: ed25519 over the 32-byte digest, hex
//! ```
//!
//! ```
//! let m = weft::plugins::Manifest::parse(
//!     "name = \"p\"\nversion = \"1\"\nwasm = \"p.wasm\"\nsha256 = \"00\"\n",
//! ).unwrap();
//! assert_eq!((m.priority, m.config.as_str(), m.signature), (0, "", None));
//! ```

use super::Error;
use ed25519_dalek::{Signature, Signer as _, SigningKey, Verifier as _, VerifyingKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use std::path::{Path, PathBuf};

/// One plugin's manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The plugin's name: lower-case letters, digits, `-` and `_`.
    pub name: String,
    /// Its version, shown in `weftd status`.
    pub version: String,
    /// The component, relative to the manifest's directory.
    pub wasm: PathBuf,
    /// The sha256 of the component, hex.
    pub sha256: String,
    /// Higher runs first.
    #[serde(default)]
    pub priority: i32,
    /// Handed to the plugin's `init`.
    #[serde(default)]
    pub config: String,
    /// An ed25519 signature over the 32 bytes of the digest, hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

impl Manifest {
    /// Parses a manifest and checks its name.
    ///
    /// # Errors
    /// [`Error::Manifest`] (without a path; [`Manifest::read`] adds it).
    pub fn parse(text: &str) -> Result<Self, Error> {
        let bad = |reason: String| Error::Manifest {
            path: PathBuf::new(),
            reason,
        };
        let m: Manifest = toml::from_str(text).map_err(|e| bad(e.message().to_owned()))?;
        let valid = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_';
        if m.name.is_empty() || !m.name.chars().all(valid) {
            return Err(bad(format!(
                "plugin name {:?} must be lower-case letters, digits, '-' or '_'",
                m.name
            )));
        }
        Ok(m)
    }

    /// Reads and parses the manifest at `path`.
    ///
    /// # Errors
    /// [`Error::Manifest`] naming the file.
    pub fn read(path: &Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::Manifest {
            path: path.into(),
            reason: e.to_string(),
        })?;
        Self::parse(&text).map_err(|e| match e {
            Error::Manifest { reason, .. } => Error::Manifest {
                path: path.into(),
                reason,
            },
            other => other,
        })
    }

    /// Where the component is, for a manifest read from `manifest_path`.
    pub fn wasm_path(&self, manifest_path: &Path) -> PathBuf {
        manifest_path
            .parent()
            .unwrap_or(Path::new("."))
            .join(&self.wasm)
    }

    /// Checks `wasm` against the digest, then the signature against `trusted`, and
    /// returns the digest (hex).
    ///
    /// With trusted keys configured every plugin must be signed by one of them;
    /// without, a signature is not checked (and the caller should say so).
    ///
    /// # Errors
    /// [`Error::Digest`], [`Error::Unsigned`] or [`Error::Signature`], each naming the
    /// plugin.
    pub fn verify(&self, wasm: &[u8], trusted: &TrustedKeys) -> Result<String, Error> {
        let digest: [u8; 32] = Sha256::digest(wasm).into();
        let actual = hex::encode(digest);
        if !actual.eq_ignore_ascii_case(self.sha256.trim()) {
            return Err(Error::Digest {
                plugin: self.name.clone(),
                expected: self.sha256.clone(),
                actual,
            });
        }
        if trusted.is_empty() {
            return Ok(actual);
        }
        let bad = |reason: String| Error::Signature {
            plugin: self.name.clone(),
            reason,
        };
        let Some(signature) = &self.signature else {
            return Err(Error::Unsigned {
                plugin: self.name.clone(),
            });
        };
        let bytes: [u8; 64] = hex::decode(signature.trim())
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| bad("not 64 bytes of hex".into()))?;
        let signature = Signature::from_bytes(&bytes);
        if trusted
            .keys
            .iter()
            .any(|k| k.verify(&digest, &signature).is_ok())
        {
            Ok(actual)
        } else {
            Err(bad(format!(
                "does not verify with any of the {} trusted keys",
                trusted.keys.len()
            )))
        }
    }
}

/// Packaging: fills in the manifest at `path` with the digest of its component and,
/// with `key`, a signature over the digest; writes it back and returns it. (Comments
/// in the file are not kept.)
///
/// # Errors
/// [`Error::Manifest`] or [`Error::Wasm`] naming the file that could not be used.
pub fn seal(path: &Path, key: Option<&SigningKey>) -> Result<Manifest, Error> {
    let mut m = Manifest::read(path)?;
    let wasm_path = m.wasm_path(path);
    let wasm = std::fs::read(&wasm_path).map_err(|e| Error::Wasm {
        plugin: m.name.clone(),
        path: wasm_path,
        reason: e.to_string(),
    })?;
    let digest: [u8; 32] = Sha256::digest(&wasm).into();
    m.sha256 = hex::encode(digest);
    m.signature = key.map(|k| hex::encode(k.sign(&digest).to_bytes()));
    let text = toml::to_string(&m).map_err(|e| Error::Manifest {
        path: path.into(),
        reason: e.to_string(),
    })?;
    std::fs::write(path, text).map_err(|e| Error::Manifest {
        path: path.into(),
        reason: e.to_string(),
    })?;
    Ok(m)
}

/// Reads a signing key: 32 bytes of hex, as [`generate_signing_key`] writes.
///
/// # Errors
/// [`Error::SigningKey`] naming the file.
pub fn read_signing_key(path: &Path) -> Result<SigningKey, Error> {
    let bad = |reason: String| Error::SigningKey {
        path: path.into(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let bytes: [u8; 32] = hex::decode(text.trim())
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| bad("not 32 bytes of hex".into()))?;
    Ok(SigningKey::from_bytes(&bytes))
}

/// Makes a signing key from the kernel's randomness, writes it to `path` (mode 0600,
/// never over an existing file) and returns its public key.
///
/// # Errors
/// [`Error::SigningKey`] naming the file.
pub fn generate_signing_key(path: &Path) -> Result<VerifyingKey, Error> {
    use std::io::{Read as _, Write as _};
    use std::os::unix::fs::OpenOptionsExt as _;
    let bad = |e: std::io::Error| Error::SigningKey {
        path: path.into(),
        reason: e.to_string(),
    };
    let mut secret = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut secret))
        .map_err(bad)?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(bad)?;
    writeln!(file, "{}", hex::encode(secret)).map_err(bad)?;
    Ok(SigningKey::from_bytes(&secret).verifying_key())
}

/// The sha256 of `wasm`, hex: what a manifest's `sha256` holds.
pub fn digest_hex(wasm: &[u8]) -> String {
    hex::encode(Sha256::digest(wasm))
}

/// The ed25519 public keys plugins may be signed with (`--plugin-trusted-keys`).
#[derive(Debug, Clone, Default)]
pub struct TrustedKeys {
    keys: Vec<VerifyingKey>,
}

impl TrustedKeys {
    /// No keys: signatures are not required.
    pub fn none() -> Self {
        Self::default()
    }

    /// Whether no key is configured.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Parses one hex public key per line; blank lines and `#` comments are skipped.
    ///
    /// # Errors
    /// [`Error::TrustedKeys`] naming the line.
    pub fn parse(text: &str) -> Result<Self, Error> {
        let mut keys = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let key = hex::decode(line)
                .ok()
                .and_then(|b| <[u8; 32]>::try_from(b).ok())
                .and_then(|b| VerifyingKey::from_bytes(&b).ok())
                .ok_or_else(|| Error::TrustedKeys {
                    path: PathBuf::new(),
                    reason: format!("line {}: not an ed25519 public key in hex", n + 1),
                })?;
            keys.push(key);
        }
        Ok(Self { keys })
    }

    /// Reads the keys file at `path`.
    ///
    /// # Errors
    /// [`Error::TrustedKeys`] naming the file (and the line).
    pub fn read(path: &Path) -> Result<Self, Error> {
        let with_path = |reason: String| Error::TrustedKeys {
            path: path.into(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| with_path(e.to_string()))?;
        Self::parse(&text).map_err(|e| match e {
            Error::TrustedKeys { reason, .. } => with_path(reason),
            other => other,
        })
    }

    /// The keys from raw public keys (for tests and tools).
    pub fn from_keys(keys: Vec<VerifyingKey>) -> Self {
        Self { keys }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(wasm: &[u8]) -> Manifest {
        Manifest {
            name: "p".into(),
            version: "1".into(),
            wasm: "p.wasm".into(),
            sha256: digest_hex(wasm),
            priority: 0,
            config: String::new(),
            signature: None,
        }
    }

    #[test]
    fn digest_then_signature_are_checked() {
        let wasm = b"not really wasm";
        let key = SigningKey::from_bytes(&[7; 32]);
        let trusted = TrustedKeys::from_keys(vec![key.verifying_key()]);
        let mut m = manifest(wasm);
        assert_eq!(m.verify(wasm, &TrustedKeys::none()), Ok(digest_hex(wasm)));
        assert!(matches!(
            m.verify(b"other bytes", &trusted),
            Err(Error::Digest { .. })
        ));
        assert!(matches!(
            m.verify(wasm, &trusted),
            Err(Error::Unsigned { .. })
        ));
        let digest: [u8; 32] = Sha256::digest(wasm).into();
        m.signature = Some(hex::encode(key.sign(&digest).to_bytes()));
        assert_eq!(m.verify(wasm, &trusted), Ok(digest_hex(wasm)));
        let stranger = SigningKey::from_bytes(&[8; 32]);
        m.signature = Some(hex::encode(stranger.sign(&digest).to_bytes()));
        assert!(matches!(
            m.verify(wasm, &trusted),
            Err(Error::Signature { .. })
        ));
    }

    #[test]
    fn bad_names_fields_and_keys_are_refused_with_the_reason() {
        let e =
            Manifest::parse("name = \"Bad Name\"\nversion = \"1\"\nwasm = \"x\"\nsha256 = \"\"")
                .unwrap_err();
        assert!(e.to_string().contains("Bad Name"), "{e}");
        let e =
            Manifest::parse("name = \"p\"\nversion = \"1\"\nwasm = \"x\"\nsha256 = \"\"\nshaa = 1")
                .unwrap_err();
        assert!(e.to_string().contains("shaa"), "{e}");
        let e = TrustedKeys::parse("# ops team\n\nzz\n").unwrap_err();
        assert!(e.to_string().contains("line 3"), "{e}");
    }
}
