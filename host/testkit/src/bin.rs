//! The executables the tests start (`weftd`, `weft-wg`, `weft-cni`) and the
//! repository they are built from.
//!
//! This crate is not the package of any of them, so cargo hands it no
//! `CARGO_BIN_EXE_*`: the first call for each builds it once per test binary, with the
//! cargo that built the test and in its profile, into the target directory the test
//! runs from (a no-op when up to date), so that they sit side by side as `weftd lab`
//! and the chart's pod expect.
//!
//! `make test` sets `WEFT_TEST_BUILT_EXECUTABLES=1`: its `cargo test --workspace`
//! has built all three already, in its own parallel compile (each package has an
//! integration test, and cargo builds a package's executables for those), with the
//! test build's features. A nested `cargo build -p …` resolves features without the
//! tests' dev-dependencies (tokio's `test-util`, …), so it would build most of the
//! dependency graph a second time, one crate after another while the tests wait.

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

/// Set by `make test` when its test build has built the executables (see above).
const BUILT: &str = "WEFT_TEST_BUILT_EXECUTABLES";

/// Builds `packages` (cargo's `-p`/`--bin` words) in the test's profile and returns
/// the path of `name` in its directory.
fn build(packages: &[&str], name: &str) -> &'static str {
    let dir = profile_dir();
    if std::env::var_os(BUILT).is_some_and(|v| v == "1") {
        let path = dir.join(name);
        assert!(
            path.is_file(),
            "{BUILT}=1 but {} is missing: the test build did not build it",
            path.display()
        );
        return Box::leak(path.to_str().expect("a UTF-8 target directory").into());
    }
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
