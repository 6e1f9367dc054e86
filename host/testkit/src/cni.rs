//! `weft-cni` as a container runtime runs it.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A policy: `app=web` in `shop` admits `app=client` on TCP 80, and nothing else.
pub const WEB_FROM_CLIENTS: &str = "
apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: web-from-clients, namespace: shop}
spec:
  endpointSelector: {matchLabels: {app: web}}
  ingress:
  - fromEndpoints: [{matchLabels: {app: client}}]
    toPorts: [{ports: [{port: '80', protocol: TCP}]}]
";

/// The `weft-cni` executable beside `weftd`, built once per test binary.
pub fn binary() -> PathBuf {
    PathBuf::from(crate::bin::weft_cni())
}

/// Runs `command` for container `container` (its pod: `namespace`/`container`), with
/// the network namespace `netns` when given and `conf` on stdin: stdout and the exit
/// status.
pub fn run(
    command: &str,
    container: &str,
    namespace: &str,
    netns: Option<&Path>,
    conf: &str,
) -> (String, i32) {
    let mut cmd = Command::new(binary());
    cmd.env_clear()
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", container)
        .env("CNI_IFNAME", "eth0")
        .env("CNI_PATH", "/opt/cni/bin")
        .env(
            "CNI_ARGS",
            format!("IgnoreUnknown=1;K8S_POD_NAMESPACE={namespace};K8S_POD_NAME={container}"),
        );
    if let Some(n) = netns {
        cmd.env("CNI_NETNS", n);
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(conf.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        out.status.code().unwrap_or(-1),
    )
}

/// Adds pod `container` (in `namespace`, labelled `app=<app>`) in `netns` through
/// `agent`'s socket, as a runtime would: the pod's IPv4 address.
pub fn add(
    agent: &super::agent::Agent,
    container: &str,
    namespace: &str,
    netns: &super::netns::Netns,
    app: &str,
) -> std::net::IpAddr {
    let conf = serde_json::json!({
        "cniVersion": "1.0.0", "name": "weft", "type": "weft-cni",
        "socket": agent.state.path().join("weftd.sock"),
        "runtimeConfig": {"labels": {"app": app}},
    });
    let (out, status) = run(
        "ADD",
        container,
        namespace,
        Some(&netns.path()),
        &conf.to_string(),
    );
    assert_eq!(status, 0, "ADD {container}: {out}");
    let result: serde_json::Value = serde_json::from_str(&out).unwrap();
    result["ips"][0]["address"]
        .as_str()
        .and_then(|a| a.split('/').next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("ADD {container}: no address in {out}"))
}

/// `key`'s (`<container>/<ifname>`) last regeneration as `weftd endpoint list` shows
/// it, once `done` says it is the one awaited.
pub async fn regeneration(
    agent: &super::agent::Agent,
    key: &str,
    what: &str,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    super::eventually(
        &format!("{key}: {what}"),
        std::time::Duration::from_secs(60),
        || {
            let listed = agent.json(&["endpoint", "list"])?;
            let r = listed.as_array()?.iter().find(|e| e["key"] == key)?["regeneration"].clone();
            done(&r).then_some(r)
        },
    )
    .await
}

/// Whether a regeneration is over (its endpoint switched or refused).
pub fn ended(r: &serde_json::Value) -> bool {
    r["result"].as_str().is_some_and(|s| s != "waiting")
}

/// [`run`] for pod `shop/<pod>` with `conf` as JSON: stdout as JSON (null when empty)
/// and the exit status.
pub fn call(
    command: &str,
    pod: &str,
    netns: Option<&Path>,
    conf: &serde_json::Value,
) -> (serde_json::Value, i32) {
    let (text, status) = run(command, pod, "shop", netns, &conf.to_string());
    let value = if text.is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::from_str(&text).unwrap()
    };
    (value, status)
}
