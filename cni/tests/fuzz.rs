//! Fuzzing the CNI input a container runtime hands `weft-cni`: the `CNI_*` variables
//! and the network configuration on stdin, random bytes and mutated valid ones. With
//! no agent listening, every invocation must end in a specification error (JSON on
//! stdout, a non-zero status) or a version answer: never a panic. `WEFT_FUZZ_CASES`
//! sets the cases (default 2,000).

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::collections::HashMap;

const CONFIGS: &[&str] = &[
    r#"{"cniVersion":"1.1.0","name":"weft","type":"weft-cni","socket":"SOCKET"}"#,
    r#"{"cniVersion":"0.4.0","name":"weft","type":"weft-cni","socket":"SOCKET","prevResult":{"ips":[]}}"#,
    r#"{"cniVersion":"1.0.0","name":"weft","type":"weft-cni","socket":"SOCKET","runtimeConfig":{"portMappings":[]}}"#,
];

fn input() -> impl Strategy<Value = (String, Vec<u8>, bool)> {
    let command = prop::sample::select(vec![
        "ADD", "DEL", "CHECK", "GC", "STATUS", "VERSION", "", "add", "NOPE",
    ]);
    let seed = prop::sample::select(CONFIGS);
    let stdin = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..256),
        (
            seed.clone(),
            prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6)
        )
            .prop_map(|(s, flips)| {
                let mut b = s.as_bytes().to_vec();
                for (at, byte) in flips {
                    let i = at.index(b.len());
                    b[i] = byte;
                }
                b
            }),
        (seed, any::<prop::sample::Index>())
            .prop_map(|(s, at)| s.as_bytes()[..at.index(s.len() + 1)].to_vec()),
    ];
    (command.prop_map(str::to_owned), stdin, any::<bool>())
}

#[test]
fn any_runtime_input_ends_in_a_specification_answer() {
    let cases = std::env::var("WEFT_FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2_000);
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nobody-listens.sock");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&input(), |(command, stdin, with_vars)| {
            let stdin = String::from_utf8_lossy(&stdin)
                .replace("SOCKET", &socket.display().to_string())
                .into_bytes();
            let mut env = HashMap::from([("CNI_COMMAND".to_owned(), command.clone())]);
            if with_vars {
                for (k, v) in [
                    ("CNI_CONTAINERID", "c0ffee"),
                    ("CNI_NETNS", "/var/run/netns/nope"),
                    ("CNI_IFNAME", "eth0"),
                    ("CNI_PATH", "/opt/cni/bin"),
                ] {
                    env.insert(k.to_owned(), v.to_owned());
                }
            }
            let out = rt.block_on(weft_cni::run(&env, &stdin));
            if command == "VERSION" {
                prop_assert_eq!(out.status, 0);
            } else {
                prop_assert_ne!(out.status, 0, "no agent, no success: {}", out.stdout);
                let error: serde_json::Value = serde_json::from_str(&out.stdout)
                    .map_err(|e| TestCaseError::fail(format!("{e}: {}", out.stdout)))?;
                prop_assert!(error["code"].is_u64(), "{}", out.stdout);
            }
            Ok(())
        })
        .unwrap();
}
