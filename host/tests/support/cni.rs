//! `weft-cni` as a container runtime runs it.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Once;

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

/// The `weft-cni` executable beside `weftd`, built once per binary in `weftd`'s profile.
pub fn binary() -> PathBuf {
    static BUILD: Once = Once::new();
    let weftd = Path::new(env!("CARGO_BIN_EXE_weftd"));
    BUILD.call_once(|| {
        let mut cargo = Command::new(env!("CARGO"));
        cargo.args(["build", "-p", "weft-cni"]);
        if weftd.parent().is_some_and(|d| d.ends_with("release")) {
            cargo.arg("--release");
        }
        assert!(cargo.status().unwrap().success(), "cargo build -p weft-cni");
    });
    weftd.with_file_name("weft-cni")
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
