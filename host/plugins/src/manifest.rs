//! Plugin manifests and the checks a plugin passes before its bytes are compiled: the
//! digest, the minimum version, and the signature under the trust policy.
//!
//! A plugin directory holds one `<anything>.toml` manifest per plugin:
//!
//! ```toml
//! name = "regeneration-policy"
//! version = "0.2.0"                   # semver; the trust policy may set a minimum
//! wasm = "regeneration_policy.wasm"   # a regular file inside the plugin directory
//! sha256 = "9f86d081884c7d65..."      # of the .wasm, hex
//! wit = "0.2.0"                       # the weft:plugin version it was built against
//! priority = 0                        # higher runs first
//! config = ""                         # handed to the plugin's init
//! shadow = false                      # true: runs beside the live plugin, never acted on
//!
//! [signature]                         # `weftd plugin sign`
//! ed25519 = "..."                     # over the canonical encoding of the fields above
//! fields = { name = "1a2b3c4d", ... } # as signed: names a field changed since
//! ```
//!
//! The signature covers everything that changes what the plugin does: name, version,
//! digest, WIT version, priority, config and shadow ([`Manifest::signed_bytes`]). The
//! component's path does not: its bytes are covered by the digest.
//!
//! ```
//! let m = weft_plugins::Manifest::parse(
//!     "name = \"p\"\nversion = \"1.0.0\"\nwasm = \"p.wasm\"\nsha256 = \"00\"\n",
//! ).unwrap();
//! assert_eq!((m.priority, m.config.as_str(), m.wit), (0, "", None));
//! assert!(m.signature.is_none() && !m.shadow);
//! ```

use super::trust::TrustPolicy;
use super::{Error, ManifestError, SignatureError, SigningKeyError, WasmFileError};
use ed25519_dalek::{Signature, Signer as _, SigningKey, Verifier as _, VerifyingKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What the canonical encoding starts with: the format, so a signature over another
/// encoding never verifies over this one.
const SIGNED_MAGIC: &[u8] = b"weft-plugin-manifest/1\n";

/// One plugin's manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The plugin's name: lower-case letters, digits, `-` and `_`.
    pub name: String,
    /// Its version (semver), shown in `weftd status`.
    pub version: String,
    /// The component, relative to the manifest's directory.
    pub wasm: PathBuf,
    /// The sha256 of the component, hex.
    pub sha256: String,
    /// The version of `weft:plugin` the component exports. Checked against the
    /// component when given (`weftd plugin build` writes it); the digest covers the
    /// component, and so what it exports, either way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wit: Option<String>,
    /// Higher runs first.
    #[serde(default)]
    pub priority: i32,
    /// Handed to the plugin's `init`.
    #[serde(default)]
    pub config: String,
    /// Runs beside the live plugin of the same name on the same inputs; its answers are
    /// compared, never acted on.
    #[serde(default)]
    pub shadow: bool,
    /// The signature, by `weftd plugin sign`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<ManifestSignature>,
}

/// A manifest's signature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestSignature {
    /// ed25519 over [`Manifest::signed_bytes`], hex.
    pub ed25519: String,
    /// The first 8 hex digits of each signed field's sha256, as signed. Not trusted (the
    /// signature decides): it only names the field that changed when a signature fails.
    #[serde(default)]
    pub fields: BTreeMap<String, String>,
}

/// A manifest that passed [`Manifest::verify`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The component's sha256, hex.
    pub digest: String,
    /// The trusted key that signed it; `None` when loaded unsigned.
    pub signed_by: Option<String>,
}

impl Manifest {
    /// Parses a manifest and checks its name and version.
    ///
    /// # Errors
    /// [`Error::Manifest`] (without a path; [`Manifest::read`] adds it).
    pub fn parse(text: &str) -> Result<Self, Error> {
        let bad = |source: ManifestError| Error::Manifest {
            path: PathBuf::new(),
            source,
        };
        let m: Manifest = toml::from_str(text).map_err(|e| bad(ManifestError::Toml(e)))?;
        let valid = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_';
        if m.name.is_empty() || !m.name.chars().all(valid) {
            return Err(bad(ManifestError::Name(m.name)));
        }
        m.semver().map_err(|source| {
            bad(ManifestError::Version {
                version: m.version.clone(),
                source: source.into(),
            })
        })?;
        Ok(m)
    }

    /// Parses the manifest text read from `path`.
    ///
    /// # Errors
    /// [`Error::Manifest`] naming the file.
    pub fn parse_at(text: &str, path: &Path) -> Result<Self, Error> {
        Self::parse(text).map_err(|e| e.with_path(path))
    }

    /// Reads and parses the manifest at `path`.
    ///
    /// # Errors
    /// [`Error::Manifest`] naming the file.
    pub fn read(path: &Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::Manifest {
            path: path.into(),
            source: ManifestError::Read(e.into()),
        })?;
        Self::parse_at(&text, path)
    }

    /// The version, parsed.
    ///
    /// # Errors
    /// semver's, when the version is not semver.
    pub fn semver(&self) -> Result<semver::Version, semver::Error> {
        semver::Version::parse(&self.version)
    }

    /// Where the component is, for a manifest read from `manifest_path`.
    pub fn wasm_path(&self, manifest_path: &Path) -> PathBuf {
        manifest_path
            .parent()
            .unwrap_or(Path::new("."))
            .join(&self.wasm)
    }

    /// The fields the signature covers, in their signed order and form.
    pub fn signed_fields(&self) -> [(&'static str, String); 7] {
        [
            ("name", self.name.clone()),
            ("version", self.version.clone()),
            ("sha256", self.sha256.trim().to_ascii_lowercase()),
            ("wit", self.wit.clone().unwrap_or_default()),
            ("priority", self.priority.to_string()),
            ("config", self.config.clone()),
            ("shadow", self.shadow.to_string()),
        ]
    }

    /// The canonical encoding the signature covers: a magic line, then each signed
    /// field as its name and its value, each preceded by its length (u32, big endian).
    /// Unambiguous, and independent of how the TOML is written.
    pub fn signed_bytes(&self) -> Vec<u8> {
        let mut out = SIGNED_MAGIC.to_vec();
        for (field, value) in self.signed_fields() {
            for part in [field.as_bytes(), value.as_bytes()] {
                let len = u32::try_from(part.len()).unwrap_or(u32::MAX);
                out.extend_from_slice(&len.to_be_bytes());
                out.extend_from_slice(part);
            }
        }
        out
    }

    /// Signs the manifest as it stands with `key`.
    pub fn sign(&mut self, key: &SigningKey) {
        self.signature = Some(ManifestSignature {
            ed25519: hex::encode(key.sign(&self.signed_bytes()).to_bytes()),
            fields: self
                .signed_fields()
                .into_iter()
                .map(|(field, value)| (field.to_owned(), field_hint(&value)))
                .collect(),
        });
    }

    /// Checks `wasm` against the digest, the version against the policy's minimum,
    /// then the signature against the keys the policy allows to sign this plugin.
    ///
    /// Without keys, a plugin loads only when the policy allows unsigned plugins, and
    /// its signature, if any, is not checked.
    ///
    /// # Errors
    /// [`Error::Digest`], [`Error::Downgrade`], [`Error::Unsigned`] or
    /// [`Error::Signature`], each naming the plugin and what failed.
    pub fn verify(&self, wasm: &[u8], policy: &TrustPolicy) -> Result<Verified, Error> {
        let digest: [u8; 32] = Sha256::digest(wasm).into();
        let actual = hex::encode(digest);
        if !actual.eq_ignore_ascii_case(self.sha256.trim()) {
            return Err(Error::Digest {
                plugin: self.name.clone(),
                expected: self.sha256.clone(),
                actual,
            });
        }
        if let Some(minimum) = policy.min_version(&self.name) {
            let version = self.semver().map_err(|source| Error::Manifest {
                path: PathBuf::new(),
                source: ManifestError::Version {
                    version: self.version.clone(),
                    source: source.into(),
                },
            })?;
            if version < *minimum {
                return Err(Error::Downgrade {
                    plugin: self.name.clone(),
                    version: self.version.clone(),
                    minimum: minimum.to_string(),
                });
            }
        }
        if !policy.has_keys() {
            return if policy.allows_unsigned() {
                Ok(Verified {
                    digest: actual,
                    signed_by: None,
                })
            } else {
                Err(Error::Unsigned {
                    plugin: self.name.clone(),
                    no_keys: true,
                })
            };
        }
        let signed_by = self.check_signature(policy)?;
        Ok(Verified {
            digest: actual,
            signed_by: Some(signed_by),
        })
    }

    /// The name of the key that signed this manifest, among those `policy` allows to
    /// sign it.
    fn check_signature(&self, policy: &TrustPolicy) -> Result<String, Error> {
        let bad = |source: SignatureError| Error::Signature {
            plugin: self.name.clone(),
            source,
        };
        let Some(sig) = &self.signature else {
            return Err(Error::Unsigned {
                plugin: self.name.clone(),
                no_keys: false,
            });
        };
        let bytes: [u8; 64] = hex::decode(sig.ed25519.trim())
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| bad(SignatureError::Malformed))?;
        let signature = Signature::from_bytes(&bytes);
        let message = self.signed_bytes();
        let verifies = |k: &VerifyingKey| k.verify(&message, &signature).is_ok();
        if let Some(k) = policy.keys_for(&self.name).find(|k| verifies(&k.key)) {
            return Ok(k.name.clone());
        }
        if let Some(k) = policy.keys().iter().find(|k| verifies(&k.key)) {
            return Err(bad(SignatureError::KeyNotAllowed {
                key: k.name.clone(),
                plugin: self.name.clone(),
            }));
        }
        let changed: Vec<&'static str> = self
            .signed_fields()
            .into_iter()
            .filter(|(field, value)| {
                sig.fields
                    .get(*field)
                    .is_some_and(|hint| *hint != field_hint(value))
            })
            .map(|(field, _)| field)
            .collect();
        if changed.is_empty() {
            Err(bad(SignatureError::NoKey {
                keys: policy.keys_for(&self.name).count(),
                plugin: self.name.clone(),
            }))
        } else {
            Err(bad(SignatureError::Changed { fields: changed }))
        }
    }
}

/// What a signature records of a field's value: enough to say which changed.
fn field_hint(value: &str) -> String {
    hex::encode(&Sha256::digest(value.as_bytes())[..4])
}

/// Packaging: fills in the manifest at `path` with the digest of its component and,
/// with `key`, signs it; writes it back and returns it. (Comments in the file are not
/// kept.)
///
/// # Errors
/// [`Error::Manifest`] or [`Error::Wasm`] naming the file that could not be used.
pub fn seal(path: &Path, key: Option<&SigningKey>) -> Result<Manifest, Error> {
    let mut m = Manifest::read(path)?;
    let wasm_path = m.wasm_path(path);
    let wasm = std::fs::read(&wasm_path).map_err(|e| Error::Wasm {
        plugin: m.name.clone(),
        path: wasm_path,
        source: WasmFileError::Read(e.into()),
    })?;
    m.sha256 = digest_hex(&wasm);
    m.signature = None;
    if let Some(key) = key {
        m.sign(key);
    }
    // A manifest that parsed always serializes: its fields are strings and tables.
    let text = toml::to_string(&m).expect("a manifest serializes as TOML");
    std::fs::write(path, text).map_err(|e| Error::Manifest {
        path: path.into(),
        source: ManifestError::Write(e.into()),
    })?;
    Ok(m)
}

/// Reads a signing key: 32 bytes of hex, as [`generate_signing_key`] writes.
///
/// # Errors
/// [`Error::SigningKey`] naming the file.
pub fn read_signing_key(path: &Path) -> Result<SigningKey, Error> {
    let bad = |source: SigningKeyError| Error::SigningKey {
        path: path.into(),
        source,
    };
    let text = std::fs::read_to_string(path).map_err(|e| bad(SigningKeyError::Io(e.into())))?;
    let bytes: [u8; 32] = hex::decode(text.trim())
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| bad(SigningKeyError::NotHex))?;
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
        source: SigningKeyError::Io(e.into()),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TrustedKey;

    fn manifest(wasm: &[u8]) -> Manifest {
        Manifest::parse(&format!(
            "name = \"p\"\nversion = \"1.0.0\"\nwasm = \"p.wasm\"\nsha256 = \"{}\"\n",
            digest_hex(wasm)
        ))
        .unwrap()
    }

    fn policy(key: &SigningKey, plugins: &[&str]) -> TrustPolicy {
        let mut p = TrustPolicy::none();
        p.add_key(TrustedKey {
            name: "vendor".into(),
            key: key.verifying_key(),
            plugins: plugins.iter().map(|s| s.to_string()).collect(),
        });
        p
    }

    #[test]
    fn the_signature_covers_every_field_that_changes_behaviour() {
        let wasm = b"not really wasm";
        let key = SigningKey::from_bytes(&[7; 32]);
        let trusted = policy(&key, &[]);
        let mut m = manifest(wasm);
        m.sign(&key);
        assert_eq!(
            m.verify(wasm, &trusted).unwrap().signed_by.as_deref(),
            Some("vendor")
        );
        type Edit = fn(&mut Manifest);
        let tamper: [(&str, Edit); 6] = [
            ("version", |m| m.version = "1.0.1".into()),
            ("wit", |m| m.wit = Some("0.2.0".into())),
            ("priority", |m| m.priority = 1000),
            ("config", |m| m.config = "c9".into()),
            ("shadow", |m| m.shadow = true),
            ("name", |m| m.name = "q".into()),
        ];
        for (field, change) in tamper {
            let mut t = m.clone();
            change(&mut t);
            let e = t.verify(wasm, &trusted).unwrap_err();
            assert!(
                matches!(&e, Error::Signature { source: SignatureError::Changed { fields }, .. } if fields == &[field]),
                "{field}: {e}"
            );
        }
        // A digest that does not match the component is refused before the signature.
        assert!(matches!(
            m.verify(b"other bytes", &trusted),
            Err(Error::Digest { .. })
        ));
    }

    #[test]
    fn keys_are_scoped_unsigned_plugins_need_leave_and_versions_a_minimum() {
        let wasm = b"w";
        let key = SigningKey::from_bytes(&[7; 32]);
        let mut m = manifest(wasm);
        assert!(matches!(
            m.verify(wasm, &TrustPolicy::none()),
            Err(Error::Unsigned { .. })
        ));
        let unsigned_ok = TrustPolicy::none().allowing_unsigned();
        assert_eq!(m.verify(wasm, &unsigned_ok).unwrap().signed_by, None);
        assert!(matches!(
            m.verify(wasm, &policy(&key, &[])),
            Err(Error::Unsigned { .. })
        ));
        m.sign(&key);
        let e = m.verify(wasm, &policy(&key, &["acme-*"])).unwrap_err();
        assert!(
            weft_sys::error_chain(&e).contains("does not allow to sign \"p\""),
            "{e}"
        );
        let stranger = SigningKey::from_bytes(&[8; 32]);
        let e = m.verify(wasm, &policy(&stranger, &[])).unwrap_err();
        assert!(
            weft_sys::error_chain(&e).contains("any of the 1 keys"),
            "{e}"
        );
        let mut floor = policy(&key, &[]);
        floor.set_min_version("p", semver::Version::new(1, 2, 0));
        let e = m.verify(wasm, &floor).unwrap_err();
        assert!(
            matches!(&e, Error::Downgrade { version, minimum, .. } if version == "1.0.0" && minimum == "1.2.0"),
            "{e}"
        );
    }

    #[test]
    fn bad_names_versions_and_fields_are_refused_with_the_reason() {
        let e = Manifest::parse(
            "name = \"Bad Name\"\nversion = \"1.0.0\"\nwasm = \"x\"\nsha256 = \"\"",
        )
        .unwrap_err();
        assert!(weft_sys::error_chain(&e).contains("Bad Name"), "{e}");
        let e = Manifest::parse("name = \"p\"\nversion = \"1\"\nwasm = \"x\"\nsha256 = \"\"")
            .unwrap_err();
        assert!(weft_sys::error_chain(&e).contains("version \"1\""), "{e}");
        let e = Manifest::parse(
            "name = \"p\"\nversion = \"1.0.0\"\nwasm = \"x\"\nsha256 = \"\"\nshaa = 1",
        )
        .unwrap_err();
        assert!(weft_sys::error_chain(&e).contains("shaa"), "{e}");
    }
}
