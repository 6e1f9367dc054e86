//! `weft-cni` run as a container runtime runs it (the `CNI_*` environment, the
//! configuration on stdin), against an agent stand-in on a unix socket that records
//! what arrives and answers what the test says: the specification's framing —
//! versions, required variables, error codes, result layouts — checked on the real
//! executable's stdout and exit status.

use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use weft_api::cni::{CniAnswer, CniCall, Failure};

/// Runs the executable with `env` (and nothing inherited) and `stdin`: its stdout as
/// JSON (null when empty) and its exit status.
fn cni(env: &[(&str, &str)], stdin: &str) -> (Value, i32) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_weft-cni"))
        .env_clear()
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let value = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
    };
    (value, out.status.code().unwrap())
}

fn add_env<'a>() -> Vec<(&'a str, &'a str)> {
    vec![
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", "c0ffee"),
        ("CNI_NETNS", "/run/netns/pod"),
        ("CNI_IFNAME", "eth0"),
        ("CNI_PATH", "/opt/cni/bin"),
        (
            "CNI_ARGS",
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web-0",
        ),
    ]
}

fn conf(version: &str, socket: &Path) -> String {
    json!({"cniVersion": version, "name": "weft", "type": "weft-cni", "socket": socket}).to_string()
}

type Answer = Box<dyn Fn(&CniCall) -> Result<CniAnswer, Failure> + Send + Sync>;

/// An agent stand-in answering with `answer`, recording each call.
fn agent(dir: &Path, answer: Answer) -> (std::path::PathBuf, Arc<Mutex<Vec<CniCall>>>) {
    let socket = dir.join("weftd.sock");
    let calls = Arc::new(Mutex::new(Vec::new()));
    let seen = calls.clone();
    let answer = Arc::new(answer);
    let router = Router::new().route(
        weft_api::cni::ROUTE,
        post(move |Json(call): Json<CniCall>| {
            let answer = answer.clone();
            seen.lock().unwrap().push(call.clone());
            async move {
                match answer(&call) {
                    Ok(a) => (axum::http::StatusCode::OK, Json(json!(a))),
                    Err(f) => (
                        axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                        Json(json!(f)),
                    ),
                }
            }
        }),
    );
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async move {
                let listener = tokio::net::UnixListener::from_std(listener).unwrap();
                axum::serve(listener, router).await.unwrap();
            })
    });
    (socket, calls)
}

fn attachment() -> CniAnswer {
    serde_json::from_value(json!({"result": {
        "interfaces": [{"name": "eth0", "mac": "02:00:00:00:00:01", "sandbox": "/run/netns/pod"}],
        "ips": [{"interface": 0, "address": "10.1.0.5/32", "gateway": "10.1.0.1"}],
        "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.1"}]
    }}))
    .unwrap()
}

#[test]
fn version_lists_the_supported_versions() {
    let (out, status) = cni(&[("CNI_COMMAND", "VERSION")], r#"{"cniVersion":"1.0.0"}"#);
    assert_eq!(status, 0);
    let supported = out["supportedVersions"].as_array().unwrap();
    for v in ["0.3.1", "0.4.0", "1.0.0", "1.1.0"] {
        assert!(supported.contains(&json!(v)), "{v} in {out}");
    }
}

#[test]
fn framing_errors_carry_the_specifications_codes() {
    let dir = tempfile::tempdir().unwrap();
    let nowhere = dir.path().join("none.sock");
    let good = conf("1.0.0", &nowhere);
    /// What is wrong, the environment, stdin, the expected code.
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, String, u64);
    let cases: Vec<Case> = vec![
        ("no command", vec![], good.clone(), 4),
        (
            "unknown command",
            vec![("CNI_COMMAND", "ATTACH")],
            good.clone(),
            4,
        ),
        (
            "ADD without CNI_NETNS",
            add_env()
                .into_iter()
                .filter(|(k, _)| *k != "CNI_NETNS")
                .collect(),
            good.clone(),
            4,
        ),
        ("stdin not JSON", add_env(), "{not json".into(), 6),
        ("version too old", add_env(), conf("0.2.0", &nowhere), 1),
        (
            "version from the future",
            add_env(),
            conf("9.0.0", &nowhere),
            1,
        ),
        (
            "CHECK before 0.4.0",
            vec![
                ("CNI_COMMAND", "CHECK"),
                ("CNI_CONTAINERID", "c0ffee"),
                ("CNI_NETNS", "/run/netns/pod"),
                ("CNI_IFNAME", "eth0"),
            ],
            conf("0.3.1", &nowhere),
            1,
        ),
        (
            "a bad network name",
            add_env(),
            json!({"cniVersion": "1.0.0", "name": "-bad name", "type": "weft-cni"}).to_string(),
            7,
        ),
        (
            "CNI_ARGS not KEY=VALUE",
            add_env()
                .into_iter()
                .map(|(k, v)| {
                    if k == "CNI_ARGS" {
                        (k, "K8S_POD_NAME")
                    } else {
                        (k, v)
                    }
                })
                .collect(),
            good.clone(),
            4,
        ),
        ("ADD with no agent", add_env(), good.clone(), 11),
        (
            "STATUS with no agent",
            vec![("CNI_COMMAND", "STATUS")],
            conf("1.1.0", &nowhere),
            50,
        ),
    ];
    for (what, env, stdin, code) in cases {
        let (out, status) = cni(&env, &stdin);
        assert_ne!(status, 0, "{what}: {out}");
        assert_eq!(out["code"], code, "{what}: {out}");
        assert!(
            out["msg"].as_str().is_some_and(|m| !m.is_empty()),
            "{what}: {out}"
        );
        assert!(out["cniVersion"].is_string(), "{what}: {out}");
    }
}

#[test]
fn add_relays_the_call_and_prints_the_result_in_the_negotiated_layout() {
    let dir = tempfile::tempdir().unwrap();
    let (socket, calls) = agent(dir.path(), Box::new(|_| Ok(attachment())));
    let (out, status) = cni(&add_env(), &conf("1.0.0", &socket));
    assert_eq!(status, 0, "{out}");
    assert_eq!(out["cniVersion"], "1.0.0");
    assert_eq!(out["interfaces"][0]["sandbox"], "/run/netns/pod");
    assert_eq!(out["ips"][0]["address"], "10.1.0.5/32");
    assert!(
        out["ips"][0].get("version").is_none(),
        "1.0.0 has no ip version"
    );

    let (legacy, status) = cni(&add_env(), &conf("0.4.0", &socket));
    assert_eq!(status, 0, "{legacy}");
    assert_eq!(legacy["cniVersion"], "0.4.0");
    assert_eq!(legacy["ips"][0]["version"], "4", "0.4.0's layout: {legacy}");

    let calls = calls.lock().unwrap();
    let call = &calls[0];
    assert_eq!(call.container_id, "c0ffee");
    assert_eq!(call.netns.as_deref(), Some("/run/netns/pod"));
    assert_eq!(call.ifname, "eth0");
    assert_eq!(call.arg("K8S_POD_NAMESPACE"), Some("shop"));
    assert_eq!(call.arg("K8S_POD_NAME"), Some("web-0"));
}

#[test]
fn the_agents_failure_is_printed_with_its_code_and_del_prints_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (socket, _) = agent(
        dir.path(),
        Box::new(|call| match call.command {
            weft_api::cni::Command::Add => Err(Failure::new(
                weft_api::cni::code::ADDRESSES_EXHAUSTED,
                "no addresses left",
                "pod CIDR 10.1.0.0/30 is full",
            )),
            _ => Ok(CniAnswer::default()),
        }),
    );
    let (out, status) = cni(&add_env(), &conf("1.1.0", &socket));
    assert_eq!(status, 1);
    assert_eq!(out["code"], 100, "{out}");
    assert_eq!(out["msg"], "no addresses left");
    assert!(out["details"].as_str().unwrap().contains("10.1.0.0/30"));

    let del = [
        ("CNI_COMMAND", "DEL"),
        ("CNI_CONTAINERID", "c0ffee"),
        ("CNI_IFNAME", "eth0"),
    ];
    let (out, status) = cni(&del, &conf("1.1.0", &socket));
    assert_eq!(
        (out, status),
        (Value::Null, 0),
        "DEL without CNI_NETNS is allowed"
    );
}
