//! The executables the tests start (`weftd`, `weft-wg`, `weft-cni`) and the
//! repository they are built from.
//!
//! This crate is not the package of any of them, so cargo hands it no
//! `CARGO_BIN_EXE_*`: the first call for each builds it once per test binary, with the
//! cargo that built the test and in its profile, into the target directory the test
//! runs from (a no-op when up to date), so that they sit side by side as `weftd lab`
//! and the chart's pod expect.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The repository's root.
pub fn root() -> &'static Path {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .canonicalize()
            .expect("the repository root")
    })
}

/// `<target>/<profile>`: where the test binary runs from (`<target>/<profile>/deps`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let deps = exe.parent().expect("the test binary's directory");
    deps.parent().expect("the profile directory").to_path_buf()
}

/// Builds `packages` (cargo's `-p`/`--bin` words) in the test's profile and returns
/// the path of `name` in its directory.
fn build(packages: &[&str], name: &str) -> &'static str {
    let dir = profile_dir();
    let mut cargo = Command::new(env!("CARGO"));
    cargo.arg("build").args(packages).current_dir(root());
    if dir.ends_with("release") {
        cargo.arg("--release");
    }
    let status = cargo.status().expect("cargo runs");
    assert!(status.success(), "cargo build {packages:?} failed");
    let path = dir.join(name);
    Box::leak(path.to_str().expect("a UTF-8 target directory").into())
}

/// The agent's executable, with the two it starts beside it (`weft-wg` for the
/// WireGuard device, `weft-cni` for the lab's pods).
pub fn weftd() -> &'static str {
    static PATH: OnceLock<&str> = OnceLock::new();
    PATH.get_or_init(|| {
        let words = [
            "-p", "weft", "--bin", "weftd", "-p", "weft-wg", "-p", "weft-cni",
        ];
        build(&words, "weftd")
    })
}

/// The userspace WireGuard device's executable.
pub fn weft_wg() -> &'static str {
    static PATH: OnceLock<&str> = OnceLock::new();
    PATH.get_or_init(|| build(&["-p", "weft-wg"], "weft-wg"))
}

/// The CNI plugin's executable.
pub fn weft_cni() -> &'static str {
    static PATH: OnceLock<&str> = OnceLock::new();
    PATH.get_or_init(|| build(&["-p", "weft-cni"], "weft-cni"))
}
