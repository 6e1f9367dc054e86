//! The deployment's tools, as `make deps` installs them (`target/tools/venv`): Helm and
//! `kubernetes-validate`.

use std::path::PathBuf;
use std::process::Command;

/// The repository's root.
pub fn root() -> PathBuf {
    crate::bin::root().to_path_buf()
}

/// The tool `name` (`helm`, `kubernetes-validate`); panics naming `make deps` when
/// missing.
pub fn tool(name: &str) -> PathBuf {
    let path = root().join("target/tools/venv/bin").join(name);
    assert!(
        path.exists(),
        "{} is missing: run `make deps`",
        path.display()
    );
    path
}

/// `kubernetes-validate --strict` of `manifests` for Kubernetes `version`: whether
/// every resource passed, and what it said.
pub fn validate(manifests: &str, version: &str) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("manifests.yaml");
    std::fs::write(&file, manifests).unwrap();
    let out = Command::new(tool("kubernetes-validate"))
        .args(["--strict", "-k", version])
        .arg(&file)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}
