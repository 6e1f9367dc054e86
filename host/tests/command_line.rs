//! `weftd`'s own commands run as an operator runs them, on the built executable:
//! signing keys made and read back, the paths a configuration writes, and misuse that
//! names what is wrong. None of these starts the agent (the end-to-end tests do, in
//! `weft-e2e`).

use std::path::Path;
use std::process::{Command, Output};

fn weftd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weftd"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("weftd runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn a_signing_key_is_made_once_and_its_public_key_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("signing.key");
    let key = key.to_str().unwrap();

    let made = weftd(&["plugin", "keygen", "--out", key]);
    assert!(made.status.success(), "{}", text(&made.stderr));
    let public = text(&made.stdout).trim().to_string();
    assert_eq!(public.len(), 64, "an ed25519 public key in hex: {public}");
    assert!(public.bytes().all(|b| b.is_ascii_hexdigit()), "{public}");
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(key).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "the secret key is the owner's alone");
    }

    let read = weftd(&["plugin", "public", key]);
    assert!(read.status.success(), "{}", text(&read.stderr));
    assert_eq!(text(&read.stdout).trim(), public);

    let secret = std::fs::read(key).unwrap();
    let again = weftd(&["plugin", "keygen", "--out", key]);
    assert!(
        !again.status.success(),
        "an existing key is not overwritten"
    );
    assert!(text(&again.stderr).contains(key), "{}", text(&again.stderr));
    assert_eq!(std::fs::read(key).unwrap(), secret, "the key is unchanged");
}

#[test]
fn a_missing_signing_key_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("absent.key");
    let out = weftd(&["plugin", "public", key.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains(key.to_str().unwrap()),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn print_written_paths_lists_the_state_directory_and_exits() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let out = weftd(&[
        "run",
        "--state-dir",
        state.to_str().unwrap(),
        "--print-written-paths",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let paths: Vec<String> = text(&out.stdout)
        .lines()
        .map(|l| l.split_once('\t').expect("path<TAB>what").0.to_string())
        .collect();
    assert!(
        paths.iter().any(|p| Path::new(p).starts_with(&state)),
        "{paths:?}"
    );
    assert!(!state.exists(), "printing the paths writes nothing");
}

#[test]
fn a_malformed_argument_names_its_flag() {
    let out = weftd(&["run", "--cluster-id", "seven"]);
    assert_eq!(out.status.code(), Some(2), "clap's usage error");
    let err = text(&out.stderr);
    assert!(
        err.contains("--cluster-id") && err.contains("seven"),
        "{err}"
    );

    let out = weftd(&["run", "--clustermesh-sync-timeout", "soon"]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("--clustermesh-sync-timeout") && err.contains("soon"),
        "{err}"
    );
}

#[test]
fn the_sync_timeout_has_the_established_name_and_the_seeds_as_alias() {
    let help = text(&weftd(&["run", "--help"]).stdout);
    assert!(help.contains("--clustermesh-sync-timeout"), "{help}");
    assert!(
        help.contains("clustermesh-ip-identities-sync-timeout"),
        "{help}"
    );
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    for name in [
        "--clustermesh-sync-timeout",
        "--clustermesh-ip-identities-sync-timeout",
    ] {
        let out = weftd(&[
            "run",
            name,
            "5s",
            "--state-dir",
            state.to_str().unwrap(),
            "--print-written-paths",
        ]);
        assert!(out.status.success(), "{name}: {}", text(&out.stderr));
    }
}

#[test]
fn a_label_pattern_that_is_not_a_regex_is_named() {
    let out = weftd(&["run", "--labels", "k8s:app k8s:(unclosed"]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("k8s:(unclosed") && err.contains("--labels"),
        "{err}"
    );
}

/// `--ipam kubernetes` reads the pod CIDRs from the Node: without a Kubernetes API the
/// agent says so and stops before it starts anything.
#[test]
fn ipam_kubernetes_without_the_api_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_weftd"))
        .args([
            "run",
            "--ipam",
            "kubernetes",
            "--kvstore-endpoints",
            "http://127.0.0.1:9",
        ])
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .args(["--health-addr", "127.0.0.1:0"])
        .env("KUBECONFIG", dir.path().join("no-kubeconfig"))
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("RUST_LOG")
        .output()
        .expect("weftd runs");
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("--ipam kubernetes") && err.contains("Kubernetes API"),
        "{err}"
    );

    let both = weftd(&["run", "--ipam", "kubernetes", "--pod-cidr", "10.0.0.0/24"]);
    assert_eq!(
        both.status.code(),
        Some(2),
        "the two sources of pod CIDRs conflict"
    );
}
