//! `weftd plugin new`: a plugin crate that builds as generated and has a test, with the
//! SDK this agent speaks copied beside it (so it builds without the weft repository).

use std::path::{Path, PathBuf};

/// The files of a new plugin crate, relative to its directory, with `{{name}}`
/// replaced. The cargo config is the one weft's own plugins build with (its stack
/// size); `weftd plugin build` runs cargo in the crate's directory so it applies.
const TEMPLATE: [(&str, &str); 5] = [
    (
        ".cargo/config.toml",
        include_str!("../../../../plugins/.cargo/config.toml"),
    ),
    ("Cargo.toml", include_str!("template/Cargo.toml.in")),
    ("src/lib.rs", include_str!("template/lib.rs")),
    ("plugin.toml", include_str!("template/plugin.toml")),
    ("README.md", include_str!("template/README.md")),
];

/// The SDK, as this agent was built with it.
const SDK: [(&str, &str); 4] = [
    (
        "weft-plugin-sdk/Cargo.toml",
        include_str!("../../../../plugin-sdk/Cargo.toml"),
    ),
    (
        "weft-plugin-sdk/src/lib.rs",
        include_str!("../../../../plugin-sdk/src/lib.rs"),
    ),
    (
        "weft-plugin-sdk/wit/weft-plugin.wit",
        include_str!("../../../../plugin-sdk/wit/weft-plugin.wit"),
    ),
    (
        "weft-plugin-sdk/README.md",
        include_str!("../../../../plugin-sdk/README.md"),
    ),
];

/// What `new` can refuse.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The name is not a plugin name.
    #[error("plugin name {name:?} must be lower-case letters, digits, '-' or '_', starting with a letter")]
    Name {
        /// The name given.
        name: String,
    },
    /// The directory exists: nothing is overwritten.
    #[error("{path} exists; choose another --dir or name")]
    Exists {
        /// The directory.
        path: PathBuf,
    },
    /// A file could not be written.
    #[error("cannot write {path}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Creates plugin crate `name` in `parent/name`; its directory.
///
/// # Errors
/// [`Error`] for a bad name, an existing directory, or a file that cannot be written.
pub fn new_plugin(parent: &Path, name: &str) -> Result<PathBuf, Error> {
    let valid = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_';
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) || !name.chars().all(valid) {
        return Err(Error::Name { name: name.into() });
    }
    let dir = parent.join(name);
    if dir.exists() {
        return Err(Error::Exists { path: dir });
    }
    let files = TEMPLATE
        .iter()
        .map(|(path, text)| (*path, text.replace("{{name}}", name)))
        .chain(SDK.iter().map(|(path, text)| (*path, (*text).to_owned())));
    for (path, text) in files {
        let path = dir.join(path);
        let write = |path: &Path| {
            std::fs::create_dir_all(path.parent().expect("files have a parent"))?;
            std::fs::write(path, &text)
        };
        write(&path).map_err(|source| Error::Write { path, source })?;
    }
    Ok(dir)
}
