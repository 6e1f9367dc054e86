//! Which plugins this agent trusts: keys that may sign them, each limited to the plugin
//! names it may sign, and the lowest version of each plugin it accepts (no downgrade).
//!
//! The trust policy file (`--plugin-trust-policy`, TOML):
//!
//! ```toml
//! [[keys]]
//! name = "weft"          # shown in `weftd status` as the plugin's signer
//! public = "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c"
//! plugins = ["regeneration-policy", "sync-events"]   # omitted: every plugin
//!
//! [[keys]]
//! name = "acme"
//! public = "…"
//! plugins = ["acme-*"]   # a trailing `*` matches any rest of the name
//!
//! [plugins.regeneration-policy]
//! min_version = "0.2.0"  # a lower version is refused, signed or not
//! ```
//!
//! ```
//! use weft_plugins::TrustPolicy;
//! let policy = TrustPolicy::parse(r#"
//! [[keys]]
//! name = "acme"
//! public = "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c"
//! plugins = ["acme-*"]
//! [plugins.acme-policy]
//! min_version = "1.2.0"
//! "#).unwrap();
//! assert_eq!(policy.keys_for("acme-policy").count(), 1);
//! assert_eq!(policy.keys_for("other").count(), 0);
//! assert_eq!(policy.min_version("acme-policy").unwrap().to_string(), "1.2.0");
//! ```

use super::{Error, TrustPolicyError};
use ed25519_dalek::VerifyingKey;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A key that may sign plugins.
#[derive(Debug, Clone)]
pub struct TrustedKey {
    /// Its name, shown as the signer of the plugins it verifies.
    pub name: String,
    /// The ed25519 public key.
    pub key: VerifyingKey,
    /// The plugin names it may sign (`*` at the end matches any rest); empty: all.
    pub plugins: Vec<String>,
}

impl TrustedKey {
    /// Whether this key may sign plugin `name`.
    pub fn may_sign(&self, name: &str) -> bool {
        self.plugins.is_empty()
            || self.plugins.iter().any(|p| match p.strip_suffix('*') {
                Some(prefix) => name.starts_with(prefix),
                None => p == name,
            })
    }
}

/// What this agent trusts (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct TrustPolicy {
    keys: Vec<TrustedKey>,
    min_versions: BTreeMap<String, semver::Version>,
    allow_unsigned: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    #[serde(default)]
    keys: Vec<KeyEntry>,
    #[serde(default)]
    plugins: BTreeMap<String, PluginEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyEntry {
    name: String,
    public: String,
    #[serde(default)]
    plugins: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PluginEntry {
    min_version: String,
}

impl TrustPolicy {
    /// Trusts nothing: every plugin is refused, unless [`Self::allowing_unsigned`].
    pub fn none() -> Self {
        Self::default()
    }

    /// Loads unsigned plugins (`--plugin-allow-unsigned`); signatures are then not
    /// checked. Minimum versions still hold.
    #[must_use]
    pub fn allowing_unsigned(mut self) -> Self {
        self.allow_unsigned = true;
        self
    }

    /// Whether unsigned plugins load.
    pub fn allows_unsigned(&self) -> bool {
        self.allow_unsigned
    }

    /// Parses a trust policy file.
    ///
    /// # Errors
    /// [`Error::TrustPolicy`] naming the entry at fault (without a path; [`Self::read`]
    /// adds it).
    pub fn parse(text: &str) -> Result<Self, Error> {
        let bad = |source: TrustPolicyError| Error::TrustPolicy {
            path: PathBuf::new(),
            source,
        };
        let file: PolicyFile = toml::from_str(text).map_err(|e| bad(TrustPolicyError::Toml(e)))?;
        let mut policy = Self::default();
        for k in file.keys {
            let key = parse_public(&k.public)
                .ok_or_else(|| bad(TrustPolicyError::Key(k.name.clone())))?;
            policy.keys.push(TrustedKey {
                name: k.name,
                key,
                plugins: k.plugins,
            });
        }
        for (name, p) in file.plugins {
            let v = semver::Version::parse(&p.min_version).map_err(|source| {
                bad(TrustPolicyError::MinVersion {
                    plugin: name.clone(),
                    version: p.min_version.clone(),
                    source: source.into(),
                })
            })?;
            policy.min_versions.insert(name, v);
        }
        Ok(policy)
    }

    /// Reads the policy file at `path`.
    ///
    /// # Errors
    /// [`Error::TrustPolicy`] naming the file and the entry.
    pub fn read(path: &Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::TrustPolicy {
            path: path.into(),
            source: TrustPolicyError::Read(e.into()),
        })?;
        Self::parse(&text).map_err(|e| e.with_path(path))
    }

    /// Adds the keys of a trusted keys file (`--plugin-trusted-keys`: one hex public key
    /// per line, `#` comments), each allowed to sign every plugin and named by its
    /// first 8 hex digits.
    ///
    /// # Errors
    /// [`Error::TrustPolicy`] naming the file and the line.
    pub fn add_keys_file(&mut self, path: &Path) -> Result<(), Error> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::TrustPolicy {
            path: path.into(),
            source: TrustPolicyError::Read(e.into()),
        })?;
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let key = parse_public(line).ok_or_else(|| Error::TrustPolicy {
                path: path.into(),
                source: TrustPolicyError::KeyLine(n + 1),
            })?;
            self.add_key(TrustedKey {
                name: format!("key-{}", &line[..8]),
                key,
                plugins: Vec::new(),
            });
        }
        Ok(())
    }

    /// Adds a key.
    pub fn add_key(&mut self, key: TrustedKey) {
        self.keys.push(key);
    }

    /// Refuses versions of plugin `name` below `version`.
    pub fn set_min_version(&mut self, name: &str, version: semver::Version) {
        self.min_versions.insert(name.into(), version);
    }

    /// Whether any key is configured (signatures are then required).
    pub fn has_keys(&self) -> bool {
        !self.keys.is_empty()
    }

    /// The number of keys.
    pub fn key_count(&self) -> usize {
        self.keys.len()
    }

    /// The keys that may sign plugin `name`.
    pub fn keys_for<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a TrustedKey> + 'a {
        self.keys.iter().filter(move |k| k.may_sign(name))
    }

    /// Every key, whether or not it may sign a given plugin.
    pub fn keys(&self) -> &[TrustedKey] {
        &self.keys
    }

    /// The lowest version of plugin `name` accepted.
    pub fn min_version(&self, name: &str) -> Option<&semver::Version> {
        self.min_versions.get(name)
    }

    /// How plugins are trusted, in a line for `weftd status`.
    pub fn describe(&self) -> String {
        if self.has_keys() {
            format!("signatures required ({} trusted keys)", self.keys.len())
        } else if self.allow_unsigned {
            "unsigned plugins allowed (--plugin-allow-unsigned): signatures not checked".into()
        } else {
            "no trusted keys: every plugin is refused".into()
        }
    }
}

fn parse_public(hex_key: &str) -> Option<VerifyingKey> {
    hex::decode(hex_key.trim())
        .ok()
        .and_then(|b| <[u8; 32]>::try_from(b).ok())
        .and_then(|b| VerifyingKey::from_bytes(&b).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_scoped_and_bad_entries_named() {
        let k = ed25519_dalek::SigningKey::from_bytes(&[1; 32]).verifying_key();
        let key = TrustedKey {
            name: "acme".into(),
            key: k,
            plugins: vec!["acme-*".into(), "exact".into()],
        };
        assert!(key.may_sign("acme-x") && key.may_sign("exact"));
        assert!(!key.may_sign("exactly") && !key.may_sign("other"));
        let e = TrustPolicy::parse("[[keys]]\nname = \"bad\"\npublic = \"zz\"\n").unwrap_err();
        assert!(weft_sys::error_chain(&e).contains("key \"bad\""), "{e}");
        let e = TrustPolicy::parse("[plugins.p]\nmin_version = \"one\"\n").unwrap_err();
        assert!(
            weft_sys::error_chain(&e).contains("plugin \"p\": min_version"),
            "{e}"
        );
        let e = TrustPolicy::parse("[[keys]]\nname = \"k\"\npublick = \"00\"\n").unwrap_err();
        assert!(weft_sys::error_chain(&e).contains("publick"), "{e}");
    }
}
