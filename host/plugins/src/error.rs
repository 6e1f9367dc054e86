//! What can go wrong setting up or loading a plugin: the thing at fault as typed fields,
//! the underlying error as the source (render the whole chain with
//! `weft_sys::error_chain`). Sources that are not `Clone` are shared (`Arc`), so that a
//! refusal can be kept in a report and also returned.

use crate::instance::CallError;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// An underlying error of any kind (wasmtime's, a thread's), shared.
pub type Cause = Arc<dyn std::error::Error + Send + Sync>;

/// What can go wrong setting up or loading a plugin.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// wasmtime (or the engine's epoch ticker) could not be set up.
    #[error("cannot set up the plugin engine")]
    Engine {
        /// wasmtime's error, or the ticker thread's.
        #[source]
        source: Cause,
    },
    /// The thread a plugin runs on could not be started.
    #[error("cannot start the thread of plugin {plugin:?}")]
    Thread {
        /// The plugin.
        plugin: String,
        /// The operating system's error.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// The thread a plugin runs on ended before it answered that it had started.
    #[error("the thread of plugin {plugin:?} ended during start-up")]
    ThreadEnded {
        /// The plugin.
        plugin: String,
    },
    /// The blocking task compiling a plugin failed (it panicked or was cancelled).
    #[error("the compile task of plugin {plugin:?} failed")]
    CompileTask {
        /// The plugin.
        plugin: String,
        /// tokio's error.
        #[source]
        source: Arc<tokio::task::JoinError>,
    },
    /// The bytes are not a valid component.
    #[error("cannot compile plugin")]
    Compile {
        /// wasmtime's error (its chain says where in the component).
        #[source]
        source: Cause,
    },
    /// The component does not fit the contract.
    #[error("plugin {plugin:?} refused: {misfit}")]
    Instantiate {
        /// The plugin.
        plugin: String,
        /// What does not fit (a missing export, an incompatible WIT version, an
        /// import outside the sandbox), in words for the plugin's author: the text is
        /// the data.
        misfit: String,
    },
    /// Instantiating the component ran guest code that trapped or went past a bound.
    #[error("plugin {plugin:?} refused: instantiation failed")]
    InstantiateFailed {
        /// The plugin.
        plugin: String,
        /// How it failed.
        #[source]
        source: CallError,
    },
    /// The plugin's `init` returned an error: its own text, which is the data.
    #[error("plugin {plugin:?} init failed: {message}")]
    Init {
        /// The plugin.
        plugin: String,
        /// What the plugin said.
        message: String,
    },
    /// The plugin's `init` trapped or went past a bound.
    #[error("plugin {plugin:?} init failed")]
    InitFailed {
        /// The plugin.
        plugin: String,
        /// How it failed.
        #[source]
        source: CallError,
    },
    /// Instantiation and `init` did not return in time: the thread is abandoned.
    #[error("plugin {plugin:?} init failed: instantiation and init did not return within {after:?}; its thread is abandoned")]
    InitStalled {
        /// The plugin.
        plugin: String,
        /// How long the host waited.
        after: Duration,
    },
    /// A manifest cannot be read, parsed or written.
    #[error("bad plugin manifest {}", path.display())]
    Manifest {
        /// The manifest (empty when parsed from text).
        path: PathBuf,
        /// What is wrong with it.
        #[source]
        source: ManifestError,
    },
    /// The trust policy (or trusted keys) file cannot be read or parsed.
    #[error("bad plugin trust policy {}", path.display())]
    TrustPolicy {
        /// The file (empty when parsed from text).
        path: PathBuf,
        /// What is wrong with it, naming the entry or line.
        #[source]
        source: TrustPolicyError,
    },
    /// The component file cannot be used: outside the plugin directory, not a regular
    /// file, too large, or unreadable.
    #[error("plugin {plugin:?} refused: wasm {}", path.display())]
    Wasm {
        /// The plugin.
        plugin: String,
        /// The file, as the manifest names it.
        path: PathBuf,
        /// Why it cannot be used.
        #[source]
        source: WasmFileError,
    },
    /// The component is not the one the manifest names.
    #[error("plugin {plugin:?} refused: wrong digest: the manifest says sha256 {expected}, the file has {actual}")]
    Digest {
        /// The plugin.
        plugin: String,
        /// The manifest's digest.
        expected: String,
        /// The file's.
        actual: String,
    },
    /// The component exports another WIT version than its manifest says.
    #[error("plugin {plugin:?} refused: wit: the manifest says {manifest}, the component exports {component}")]
    Wit {
        /// The plugin.
        plugin: String,
        /// The manifest's `wit`.
        manifest: String,
        /// What the component exports.
        component: String,
    },
    /// The version is below the trust policy's minimum for this plugin.
    #[error("plugin {plugin:?} refused: version {version} is below the trust policy's min_version {minimum} (no downgrade)")]
    Downgrade {
        /// The plugin.
        plugin: String,
        /// The manifest's version.
        version: String,
        /// The policy's minimum.
        minimum: String,
    },
    /// The manifest carries no signature and unsigned plugins are not allowed.
    #[error("plugin {plugin:?} refused: unsigned: {}", if *.no_keys {
        "no trusted keys are configured (--plugin-trust-policy, --plugin-trusted-keys) and --plugin-allow-unsigned is not given"
    } else {
        "the trust policy requires a signature"
    })]
    Unsigned {
        /// The plugin.
        plugin: String,
        /// Whether no key is trusted at all (so that no plugin could be signed for
        /// this agent), rather than a policy that requires a signature.
        no_keys: bool,
    },
    /// The signature is malformed, does not cover the manifest as it stands, or was
    /// made by a key not allowed to sign this plugin.
    #[error("plugin {plugin:?} refused: bad signature")]
    Signature {
        /// The plugin.
        plugin: String,
        /// What is wrong with it.
        #[source]
        source: SignatureError,
    },
    /// The compile cache directory cannot be used.
    #[error("plugin compile cache {}", path.display())]
    Cache {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: CacheDirError,
    },
    /// A signing key file cannot be read, parsed or written.
    #[error("signing key {}", path.display())]
    SigningKey {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: SigningKeyError,
    },
    /// The hook recording cannot be written or read.
    #[error("plugin recording {}", path.display())]
    Record {
        /// The directory or file.
        path: PathBuf,
        /// Why (with the line, when reading).
        #[source]
        source: RecordError,
    },
    /// Two manifests name the same plugin.
    #[error("plugin {plugin:?} refused: its name is already used by {}", other.display())]
    DuplicateName {
        /// The plugin.
        plugin: String,
        /// The other manifest.
        other: PathBuf,
    },
}

impl Error {
    /// An engine error from wasmtime's (or a thread's) error.
    pub(crate) fn engine(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Error::Engine {
            source: Arc::from(e.into()),
        }
    }

    /// The same error naming the file `path`, for the errors about a file read.
    pub(crate) fn with_path(self, path: &std::path::Path) -> Self {
        match self {
            Error::Manifest { source, .. } => Error::Manifest {
                path: path.into(),
                source,
            },
            Error::TrustPolicy { source, .. } => Error::TrustPolicy {
                path: path.into(),
                source,
            },
            other => other,
        }
    }
}

/// What is wrong with a manifest.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ManifestError {
    /// It cannot be read.
    #[error("cannot read it")]
    Read(#[source] FileError),
    /// It is not UTF-8.
    #[error("not UTF-8")]
    NotUtf8,
    /// It is not TOML of a manifest (toml's message, without its excerpt).
    #[error("{}", .0.message())]
    Toml(toml::de::Error),
    /// Its name has characters outside the allowed set.
    #[error("name {0:?} must be lower-case letters, digits, '-' or '_'")]
    Name(String),
    /// Its version is not semver.
    #[error("version {version:?}")]
    Version {
        /// The manifest's version.
        version: String,
        /// semver's error.
        #[source]
        source: Arc<semver::Error>,
    },
    /// It cannot be written back (sealing).
    #[error("cannot write it")]
    Write(#[source] FileError),
}

/// What is wrong with a trust policy or trusted keys file.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TrustPolicyError {
    /// It cannot be read.
    #[error("cannot read it")]
    Read(#[source] FileError),
    /// It is not TOML of a trust policy (toml's message, without its excerpt).
    #[error("{}", .0.message())]
    Toml(toml::de::Error),
    /// A policy's key entry holds no ed25519 public key.
    #[error("key {0:?}: not an ed25519 public key in hex")]
    Key(String),
    /// A trusted keys file's line holds no ed25519 public key.
    #[error("line {0}: not an ed25519 public key in hex")]
    KeyLine(usize),
    /// A plugin's `min_version` is not semver.
    #[error("plugin {plugin:?}: min_version {version:?}")]
    MinVersion {
        /// The plugin.
        plugin: String,
        /// The policy's text.
        version: String,
        /// semver's error.
        #[source]
        source: Arc<semver::Error>,
    },
}

/// Why a plugin's component file cannot be used.
#[derive(Debug, Clone, thiserror::Error)]
pub enum WasmFileError {
    /// The manifest names an absolute path or one with `..`.
    #[error("must be a path inside the plugin directory (relative, without '..')")]
    NotRelative,
    /// A path on the way cannot be resolved.
    #[error("{}", path.display())]
    Resolve {
        /// The path.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: FileError,
    },
    /// It resolves (through a link) outside the plugin directory.
    #[error("resolves to {}, outside the plugin directory {}", resolved.display(), dir.display())]
    Outside {
        /// Where it resolves to.
        resolved: PathBuf,
        /// The plugin directory.
        dir: PathBuf,
    },
    /// It cannot be read.
    #[error("cannot read it")]
    Read(#[source] FileError),
}

/// What is wrong with a manifest's signature.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// The `ed25519` field is not a signature.
    #[error("ed25519 is not 64 bytes of hex")]
    Malformed,
    /// A trusted key made it, but the policy does not let that key sign this plugin.
    #[error("signed by key {key:?}, which the trust policy does not allow to sign {plugin:?}")]
    KeyNotAllowed {
        /// The key's name.
        key: String,
        /// The plugin.
        plugin: String,
    },
    /// Signed fields changed since the signature was made.
    #[error("{} changed since it was signed", fields.join(", "))]
    Changed {
        /// The fields, in the order they are signed.
        fields: Vec<&'static str>,
    },
    /// No allowed key verifies it, and no signed field can be named as changed.
    #[error("does not verify with any of the {keys} keys allowed to sign {plugin:?}")]
    NoKey {
        /// How many keys may sign the plugin.
        keys: usize,
        /// The plugin.
        plugin: String,
    },
}

/// Why the compile cache directory cannot be used.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CacheDirError {
    /// It (or its key) cannot be made, read or restricted.
    #[error("cannot use it")]
    Io(#[source] FileError),
    /// It is not a directory of this process's user, whose owner could forge entries.
    #[error("not a directory of this process's user (uid {me}): its owner (uid {owner}) could forge compiled entries")]
    Owner {
        /// This process's effective user.
        me: u32,
        /// The directory's owner.
        owner: u32,
    },
}

/// Why a signing key file cannot be used.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SigningKeyError {
    /// It cannot be read, made or written.
    #[error("cannot use it")]
    Io(#[source] FileError),
    /// It does not hold a key.
    #[error("not 32 bytes of hex")]
    NotHex,
}

/// Why a hook recording cannot be written or read.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RecordError {
    /// The directory or a file cannot be made, listed or read.
    #[error("cannot use it")]
    Io(#[source] FileError),
    /// A line is not a recorded event.
    #[error("line {line}")]
    Line {
        /// The line, from 1.
        line: usize,
        /// serde_json's error.
        #[source]
        source: Arc<serde_json::Error>,
    },
}

/// A file's error, shared: the operating system's, or the plugin reader's limits.
#[derive(Debug, Clone, thiserror::Error)]
#[error(transparent)]
pub struct FileError(Arc<dyn std::error::Error + Send + Sync>);

impl From<std::io::Error> for FileError {
    fn from(e: std::io::Error) -> Self {
        FileError(Arc::new(e))
    }
}

impl FileError {
    /// One of the reader's own errors (not a regular file, over the limit).
    pub(crate) fn read(e: crate::loader::ReadError) -> Self {
        FileError(Arc::new(e))
    }
}
