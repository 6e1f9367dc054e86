//! The lab's pods, made as a container runtime makes them: a network namespace, then
//! `weft-cni` run with the `CNI_*` environment and the network configuration on stdin.

use super::spec::{PodRef, Spec};
use std::io::Write as _;
use std::net::IpAddr;
use std::path::Path;
use std::process::{Command, Stdio};

/// Runs `weft-cni` ADD for pod `p`, whose namespace is `netns`, against the agent
/// whose state directory is `state_dir`: the pod's address.
///
/// # Errors
/// The plugin's error (its JSON), or why it could not run.
pub fn add(cni: &Path, state_dir: &Path, netns: &Path, p: PodRef) -> Result<IpAddr, String> {
    let name = Spec::pod_name(p);
    let text = run(cni, "ADD", state_dir, netns, p)?;
    let result: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    result["ips"][0]["address"]
        .as_str()
        .and_then(|a| a.split('/').next())
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| format!("weft-cni ADD {name}: no address in {text}"))
}

/// Runs `weft-cni` DEL for pod `p` (its namespace `netns`), as a runtime does before it
/// removes the namespace.
///
/// # Errors
/// The plugin's error (its JSON), or why it could not run.
pub fn del(cni: &Path, state_dir: &Path, netns: &Path, p: PodRef) -> Result<(), String> {
    run(cni, "DEL", state_dir, netns, p).map(drop)
}

/// Runs `weft-cni` with `command` for pod `p`: what it printed, when it succeeded.
fn run(
    cni: &Path,
    command: &str,
    state_dir: &Path,
    netns: &Path,
    p: PodRef,
) -> Result<String, String> {
    let name = Spec::pod_name(p);
    let conf = serde_json::json!({
        "cniVersion": "1.1.0", "name": "weft-lab", "type": "weft-cni",
        "socket": crate::api::socket_path(state_dir),
        "runtimeConfig": {"labels": {"app": Spec::pod_app(p)}},
    });
    let mut child = Command::new(cni)
        .env_clear()
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", &name)
        .env("CNI_IFNAME", "eth0")
        .env("CNI_PATH", cni.parent().unwrap_or(Path::new("/")))
        .env("CNI_NETNS", netns)
        .env(
            "CNI_ARGS",
            format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=lab;K8S_POD_NAME={name}"),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{}: {e}", cni.display()))?;
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(conf.to_string().as_bytes())
        .map_err(|e| e.to_string())?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(format!("weft-cni {command} {name}: {text}"));
    }
    Ok(text)
}
