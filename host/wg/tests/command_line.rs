//! `weft-wg`'s command line as the chart's `wireguard` container and the agent run it:
//! what it prints, and the exit status and message of each misuse, before it touches
//! a device (none of these needs root).

use std::process::{Command, Output};

fn weft_wg(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weft-wg"))
        .args(args)
        .output()
        .expect("weft-wg runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn print_written_paths_names_the_run_directory_and_exits() {
    let out = weft_wg(&["--print-written-paths"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let line = String::from_utf8(out.stdout).unwrap();
    let (path, what) = line.trim_end().split_once('\t').expect("path<TAB>what");
    assert_eq!(path, weft_wireguard::RUN_DIR);
    assert!(what.contains("UAPI socket"), "{what}");
}

#[test]
fn no_device_name_is_a_usage_error() {
    let out = weft_wg(&[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("usage: weft-wg NAME"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn an_unknown_flag_is_named() {
    let out = weft_wg(&["wg-test", "--netnz", "/nowhere"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("unknown flag --netnz"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_flag_without_its_value_is_a_usage_error() {
    let out = weft_wg(&["wg-test", "--netns"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("usage:"), "{}", stderr(&out));
}

#[test]
fn a_missing_network_namespace_is_named_and_no_device_is_made() {
    let dir = tempfile::tempdir().unwrap();
    let ns = dir.path().join("no-such-netns");
    let out = weft_wg(&["wg-test", "--netns", ns.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("cannot enter network namespace") && err.contains(ns.to_str().unwrap()),
        "{err}"
    );
}
