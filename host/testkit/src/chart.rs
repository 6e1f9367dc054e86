//! The Helm chart rendered by Helm (`helm template`), and the rendered DaemonSet read
//! as a kubelet reads it: its containers, their environment and their mounts.

use super::deploy_tools::{root, tool};
use serde::Deserialize as _;
use serde_yaml::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// This cluster's etcd, the one value the chart needs.
pub const ENDPOINTS: &str = "kvstore.endpoints=https://192.0.2.1:2379";

/// `helm template` of the chart with `sets`: the manifests, or Helm's error.
pub fn render(sets: &[&str]) -> Result<String, String> {
    let mut cmd = Command::new(tool("helm"));
    cmd.args(["template", "weft"])
        .arg(root().join("deploy/helm/weft"))
        .args(["--namespace", "kube-system"]);
    for s in sets {
        cmd.args(["--set", s]);
    }
    let out = cmd.output().unwrap();
    if out.status.success() {
        Ok(String::from_utf8(out.stdout).unwrap())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The manifests, one value each.
pub fn documents(manifests: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(manifests)
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

/// The DaemonSet of `manifests`.
pub fn daemonset(manifests: &str) -> Value {
    documents(manifests)
        .into_iter()
        .find(|d| d["kind"] == "DaemonSet")
        .expect("a DaemonSet")
}

/// The pod template's `containers` or `initContainers`.
pub fn containers<'a>(ds: &'a Value, which: &str) -> &'a Vec<Value> {
    ds["spec"]["template"]["spec"][which]
        .as_sequence()
        .unwrap_or_else(|| panic!("{which}"))
}

/// The (regular) container `name`.
pub fn container<'a>(ds: &'a Value, name: &str) -> &'a Value {
    containers(ds, "containers")
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

/// The literal value of `name` in a container's environment.
pub fn env<'a>(container: &'a Value, name: &str) -> Option<&'a str> {
    container["env"]
        .as_sequence()?
        .iter()
        .find(|e| e["name"] == name)?["value"]
        .as_str()
}

/// A container's environment as the kubelet gives it: literal values, and the
/// downward API's fields from `node` (`spec.nodeName`, `status.hostIP`).
pub fn environment(container: &Value, node: &BTreeMap<&str, String>) -> Vec<(String, String)> {
    container["env"]
        .as_sequence()
        .map(|e| e.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|e| {
            let name = e["name"].as_str().unwrap().to_owned();
            let value = match e["value"].as_str() {
                Some(v) => v.to_owned(),
                None => {
                    let field = e["valueFrom"]["fieldRef"]["fieldPath"]
                        .as_str()
                        .unwrap_or_else(|| panic!("{name}: only fieldRefs are known"));
                    node.get(field)
                        .unwrap_or_else(|| panic!("{name}: no value for {field}"))
                        .clone()
                }
            };
            (name, value)
        })
        .collect()
}

/// The container's command line: `command` then `args`.
pub fn command_line(container: &Value) -> Vec<String> {
    ["command", "args"]
        .iter()
        .flat_map(|k| {
            container[*k]
                .as_sequence()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(|v| v.as_str().unwrap().to_owned())
        })
        .collect()
}

/// One volume mount of a container, with its volume's kind.
#[derive(Debug, Clone)]
pub struct Mount {
    pub volume: String,
    pub path: String,
    pub read_only: bool,
    /// `hostPath`, `emptyDir`, `secret`, `configMap`, ...
    pub kind: String,
    /// The volume's definition.
    pub source: Value,
}

impl Mount {
    /// Whether the container can write under it: only host paths and empty
    /// directories are writable volumes (a Secret or ConfigMap is read-only whatever
    /// the mount says).
    pub fn writable(&self) -> bool {
        !self.read_only && matches!(self.kind.as_str(), "hostPath" | "emptyDir")
    }
}

/// A container's mounts, each with its volume.
pub fn mounts(ds: &Value, container: &Value) -> Vec<Mount> {
    let volumes = ds["spec"]["template"]["spec"]["volumes"]
        .as_sequence()
        .cloned()
        .unwrap_or_default();
    container["volumeMounts"]
        .as_sequence()
        .map(|m| m.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|m| {
            let volume = m["name"].as_str().unwrap().to_owned();
            let source = volumes
                .iter()
                .find(|v| v["name"].as_str() == Some(&volume))
                .unwrap_or_else(|| panic!("mount of an undefined volume {volume}"))
                .clone();
            let kind = source
                .as_mapping()
                .unwrap()
                .keys()
                .map(|k| k.as_str().unwrap())
                .find(|k| *k != "name")
                .unwrap()
                .to_owned();
            Mount {
                volume,
                path: m["mountPath"].as_str().unwrap().to_owned(),
                read_only: m["readOnly"].as_bool().unwrap_or(false),
                kind,
                source,
            }
        })
        .collect()
}

/// The mount `path` is under in a container: the deepest mount that holds it.
pub fn mount_of<'m>(mounts: &'m [Mount], path: &Path) -> Option<&'m Mount> {
    mounts
        .iter()
        .filter(|m| path.starts_with(&m.path))
        .max_by_key(|m| Path::new(&m.path).components().count())
}
