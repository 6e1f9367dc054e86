//! `weftd lab up`: makes the lab, part by part, each recorded in the state file before
//! it is made. The order matters: the underlay and each cluster's etcd first, then the
//! clusters' mesh directories, plugins and policies (so each agent starts with all of
//! them), then the nodes and their agents, then the pods through `weft-cni`.

use super::process::{self, free_port};
use super::spec::{netns_path, NodeRef, Spec};
use super::state::{LabState, Made};
use super::{netns, pods, underlay, LabError};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Where the lab's programs come from.
#[derive(Debug, Clone)]
pub struct Programs {
    /// `weftd` (also run for each node).
    pub weftd: PathBuf,
    /// `weft-cni`.
    pub cni: PathBuf,
    /// `weft-wg`, the userspace WireGuard helper.
    pub wg: PathBuf,
    /// The directory of the shipped plugins' components (`regeneration_policy.wasm`,
    /// `sync_events.wasm`).
    pub plugins: PathBuf,
}

impl Programs {
    /// The programs next to this executable, and the plugins in `plugins`.
    ///
    /// # Errors
    /// When this executable's path is unknown.
    pub fn beside_this(plugins: PathBuf) -> std::io::Result<Self> {
        let weftd = std::env::current_exe()?;
        let dir = weftd.parent().unwrap_or(Path::new("/")).to_owned();
        Ok(Self {
            cni: dir.join("weft-cni"),
            wg: dir.join("weft-wg"),
            weftd,
            plugins,
        })
    }
}

/// The policies every cluster follows: `app=web` pods admit `app=client` pods of any
/// cluster on the lab's port, and clients may reach web pods there and nothing else.
/// Both sides judge by identity: a pod whose remote peer's identity is missing from
/// its datapath drops the traffic (what the `restart` scenario shows).
const POLICIES: [(&str, &str); 2] = [
    (
        "web.yaml",
        "apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: web-from-clients, namespace: lab}
spec:
  endpointSelector: {matchLabels: {app: web}}
  ingress:
  - fromEndpoints: [{matchLabels: {app: client}}]
    toPorts: [{ports: [{port: '8080', protocol: TCP}]}]
",
    ),
    (
        "client.yaml",
        "apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: clients-to-web, namespace: lab}
spec:
  endpointSelector: {matchLabels: {app: client}}
  egress:
  - toEndpoints: [{matchLabels: {app: web}}]
    toPorts: [{ports: [{port: '8080', protocol: TCP}]}]
",
    ),
];

/// The shipped components the lab keeps (in `<lab>/components`): the two every agent
/// runs, and `critical_clusters` for the scenarios.
pub const COMPONENTS: [&str; 3] = ["regeneration_policy", "sync_events", "critical_clusters"];

/// The shipped plugins every agent runs, signed with the lab's key: (name, component,
/// priority).
const PLUGINS: [(&str, &str, i32); 2] = [
    ("regeneration-policy", "regeneration_policy", 0),
    ("sync-events", "sync_events", 5),
];

fn step(what: impl Into<String>) -> impl FnOnce(String) -> LabError {
    let what = what.into();
    move |reason| LabError::Step { what, reason }
}

/// Makes namespace `name`, recorded first and forgotten again when it cannot be made
/// (one that exists is not the lab's).
/// A namespace made again (a pod of the soak's churn) is recorded once.
pub(super) fn make_netns(state: &mut LabState, name: &str) -> Result<PathBuf, LabError> {
    let made = Made::Netns { name: name.into() };
    let recorded = !state.made.contains(&made);
    if recorded {
        state.record(made)?;
    }
    match netns::create(name) {
        Ok(path) => Ok(path),
        Err(e) => {
            if recorded {
                state.forget_last()?;
            }
            Err(step(format!("namespace {name}"))(e.to_string()))
        }
    }
}

/// Makes the lab of `spec` (its state file records every part): the etcd URL of each
/// cluster, by cluster.
///
/// # Errors
/// [`LabError`] naming the step; what was made stays recorded for `lab down`.
pub async fn make(spec: &Spec, programs: &Programs) -> Result<Vec<String>, LabError> {
    spec.check()?;
    if spec.state_file().exists() {
        return Err(LabError::Exists(spec.state_file()));
    }
    for (what, path) in [
        ("weftd", &programs.weftd),
        ("weft-cni", &programs.cni),
        ("weft-wg", &programs.wg),
    ] {
        if !path.is_file() {
            return Err(step(format!("finding {what}"))(format!(
                "{} does not exist (build it: cargo build -p weft -p weft-cni)",
                path.display()
            )));
        }
    }
    let mut state = LabState::create(spec.clone())?;
    make_netns(&mut state, &spec.underlay_netns())?;
    underlay::bridge(spec)
        .await
        .map_err(|e| step("the underlay's bridge")(e.to_string()))?;

    let mut urls = Vec::new();
    for c in 1..=spec.clusters {
        urls.push(start_etcd(&mut state, c).await?);
    }
    let trusted = lab_key(spec)?;
    keep_components(spec, programs)?;
    for c in 1..=spec.clusters {
        cluster_files(spec, c, &urls)?;
    }
    if spec.bpf_dir().exists() {
        return Err(step("the lab's bpffs directory")(format!(
            "{} exists and is not this lab's",
            spec.bpf_dir().display()
        )));
    }
    state.record(Made::Bpf {
        path: spec.bpf_dir(),
    })?;
    for n in spec.nodes().collect::<Vec<_>>() {
        start_node(
            &mut state,
            programs,
            n,
            &urls[usize::from(n.cluster) - 1],
            &trusted,
        )
        .await?;
    }
    Ok(urls)
}

/// Starts cluster `c`'s etcd and writes its cluster config: its URL.
async fn start_etcd(state: &mut LabState, c: u8) -> Result<String, LabError> {
    let spec = state.spec.clone();
    let what = format!("etcd of {}", Spec::cluster_name(c));
    let dir = spec.cluster_dir(c);
    std::fs::create_dir_all(&dir).map_err(|e| step(&what)(e.to_string()))?;
    let (client, peer) = (
        free_port().map_err(|e| step(&what)(e.to_string()))?,
        free_port().map_err(|e| step(&what)(e.to_string()))?,
    );
    let url = format!("http://127.0.0.1:{client}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    let name = format!("weft-lab-{}", Spec::cluster_name(c));
    let mut cmd = Command::new("etcd");
    cmd.arg("--name")
        .arg(&name)
        .arg("--data-dir")
        .arg(dir.join("etcd"))
        .args([
            "--listen-client-urls",
            &url,
            "--advertise-client-urls",
            &url,
        ])
        .args([
            "--listen-peer-urls",
            &peer_url,
            "--initial-advertise-peer-urls",
            &peer_url,
        ])
        .arg("--initial-cluster")
        .arg(format!("{name}={peer_url}"))
        .args(["--log-level", "error", "--logger", "zap"]);
    state.record(Made::Process {
        what: what.clone(),
        pid: 0,
    })?;
    let pid = process::spawn(cmd, &dir.join("etcd.log"))
        .map_err(|e| step(&what)(format!("etcd (Debian etcd-server): {e}")))?;
    state.started(&what, pid)?;
    let config = crate::model::ClusterConfig {
        id: u32::from(c),
        capabilities: crate::model::Capabilities {
            // The lab's agents run with the default `--max-connected-clusters`.
            max_connected_clusters: crate::clustermesh::DEFAULT_MAX_CONNECTED_CLUSTERS,
            ..Default::default()
        },
    };
    // Written once etcd answers: the first attempts meet a process still starting.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        match tokio::time::timeout(
            Duration::from_secs(2),
            write_cluster_config(&url, &Spec::cluster_name(c), &config),
        )
        .await
        {
            Ok(Ok(())) => return Ok(url),
            _ if tokio::time::Instant::now() < deadline && process::runs(pid, &url) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Ok(Err(e)) => return Err(step(&what)(e.to_string())),
            Err(_) => return Err(step(&what)("it does not answer".into())),
        }
    }
}

/// The lab's plugin signing key (made once) and the trusted keys file holding its
/// public half.
fn lab_key(spec: &Spec) -> Result<PathBuf, LabError> {
    let key = spec.dir.join("vendor.key");
    let trusted = spec.dir.join("trusted-keys");
    let public = crate::plugins::generate_signing_key(&key)
        .map_err(|e| step("the lab's plugin key")(weft_sys::error_chain(&e)))?;
    std::fs::write(&trusted, format!("{}\n", hex::encode(public.as_bytes())))
        .map_err(|e| step("the trusted keys file")(e.to_string()))?;
    Ok(trusted)
}

/// Cluster `c`'s mesh directory (every other cluster), plugins (signed) and policy.
fn cluster_files(spec: &Spec, c: u8, urls: &[String]) -> Result<(), LabError> {
    let dir = spec.cluster_dir(c);
    let io = |what: &str| {
        let what = format!("{what} of {}", Spec::cluster_name(c));
        move |e: std::io::Error| step(what)(e.to_string())
    };
    let mesh = dir.join("mesh");
    std::fs::create_dir_all(&mesh).map_err(io("mesh directory"))?;
    for (i, url) in urls.iter().enumerate() {
        let other = u8::try_from(i + 1).expect("at most 9 clusters");
        if other != c {
            std::fs::write(
                mesh.join(Spec::cluster_name(other)),
                format!("endpoints:\n- {url}\n"),
            )
            .map_err(io("mesh directory"))?;
        }
    }
    let policies = dir.join("policies");
    std::fs::create_dir_all(&policies).map_err(io("policies"))?;
    for (file, policy) in POLICIES {
        std::fs::write(policies.join(file), policy).map_err(io("policies"))?;
    }
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins).map_err(io("plugins"))?;
    for (name, component, priority) in PLUGINS {
        install_plugin(spec, c, name, component, priority, "")?;
    }
    Ok(())
}

/// Copies the shipped components into the lab (`<lab>/components`).
fn keep_components(spec: &Spec, programs: &Programs) -> Result<(), LabError> {
    let dir = spec.dir.join("components");
    std::fs::create_dir_all(&dir).map_err(|e| step("components")(e.to_string()))?;
    for component in COMPONENTS {
        let wasm = programs.plugins.join(format!("{component}.wasm"));
        std::fs::copy(&wasm, dir.join(format!("{component}.wasm"))).map_err(|e| {
            step(format!("plugin component {component}"))(format!(
                "{}: {e} (build the plugins: make plugins)",
                wasm.display()
            ))
        })?;
    }
    Ok(())
}

/// Installs the lab's `component` as plugin `name` (version 0.1.0) of cluster `c`,
/// sealed and signed with the lab's key: the manifest is renamed into place whole, as
/// an operator's tooling would.
///
/// # Errors
/// [`LabError::Step`] naming the plugin.
pub fn install_plugin(
    spec: &Spec,
    c: u8,
    name: &str,
    component: &str,
    priority: i32,
    config: &str,
) -> Result<(), LabError> {
    install_plugin_version(spec, c, (name, "0.1.0"), component, priority, config, false)
}

/// [`install_plugin`] of `version`; with `tamper`, the component is changed after
/// signing (an agent must refuse it).
///
/// # Errors
/// [`LabError::Step`] naming the plugin.
pub fn install_plugin_version(
    spec: &Spec,
    c: u8,
    (name, version): (&str, &str),
    component: &str,
    priority: i32,
    config: &str,
    tamper: bool,
) -> Result<(), LabError> {
    let fail = |e: String| step(format!("plugin {name} of {}", Spec::cluster_name(c)))(e);
    let plugins = spec.cluster_dir(c).join("plugins");
    std::fs::create_dir_all(&plugins).map_err(|e| fail(e.to_string()))?;
    // A file per version: the running version's component stays as it was.
    let wasm_name = format!("{component}-{version}.wasm");
    std::fs::copy(
        spec.dir
            .join("components")
            .join(format!("{component}.wasm")),
        plugins.join(&wasm_name),
    )
    .map_err(|e| fail(e.to_string()))?;
    let key = crate::plugins::read_signing_key(&spec.dir.join("vendor.key"))
        .map_err(|e| fail(weft_sys::error_chain(&e)))?;
    let staged = plugins.join(format!(".{name}.toml"));
    std::fs::write(
        &staged,
        format!(
            "name = {name:?}\nversion = {version:?}\nwasm = {wasm_name:?}\nsha256 = \"\"\npriority = {priority}\nconfig = {config:?}\n"
        ),
    )
    .map_err(|e| fail(e.to_string()))?;
    crate::plugins::seal(&staged, Some(&key)).map_err(|e| fail(weft_sys::error_chain(&e)))?;
    if tamper {
        let wasm = plugins.join(&wasm_name);
        let mut bytes = std::fs::read(&wasm).map_err(|e| fail(e.to_string()))?;
        bytes.extend_from_slice(b"tampered");
        std::fs::write(&wasm, bytes).map_err(|e| fail(e.to_string()))?;
    }
    std::fs::rename(&staged, plugins.join(format!("{name}.toml"))).map_err(|e| fail(e.to_string()))
}

/// Removes plugin `name` of cluster `c` (its manifest: the agents unload it).
///
/// # Errors
/// [`LabError::Step`] when the manifest cannot be removed.
pub fn remove_plugin(spec: &Spec, c: u8, name: &str) -> Result<(), LabError> {
    let manifest = spec
        .cluster_dir(c)
        .join("plugins")
        .join(format!("{name}.toml"));
    std::fs::remove_file(&manifest)
        .map_err(|e| step(format!("removing plugin {name}"))(e.to_string()))
}

/// Makes node `n`: its namespace on the underlay, and its agent.
async fn start_node(
    state: &mut LabState,
    programs: &Programs,
    n: NodeRef,
    url: &str,
    trusted: &Path,
) -> Result<(), LabError> {
    let spec = state.spec.clone();
    let name = spec.node_netns(n);
    make_netns(state, &name)?;
    underlay::join(&spec, n)
        .await
        .map_err(|e| step(format!("{name} on the underlay"))(e.to_string()))?;
    let device = spec.wireguard_device(n);
    if crate::wireguard::WireGuardDevice::named(&device).is_ok_and(|d| d.get().is_ok()) {
        return Err(step(format!("WireGuard device {device}"))(
            "it exists and is not this lab's".into(),
        ));
    }
    state.record(Made::WireGuard {
        device: device.clone(),
    })?;
    let dir = spec.node_dir(n);
    let cluster = spec.cluster_dir(n.cluster);
    std::fs::create_dir_all(&dir)
        .map_err(|e| step(format!("{name}'s directory"))(e.to_string()))?;
    let health = free_port().map_err(|e| step(format!("{name}'s health port"))(e.to_string()))?;
    let mut cmd = Command::new(&programs.weftd);
    cmd.arg("run")
        .args(["--cluster-name", &Spec::cluster_name(n.cluster)])
        .args(["--cluster-id", &n.cluster.to_string()])
        .args(["--kvstore-endpoints", url])
        .arg("--clustermesh-config")
        .arg(cluster.join("mesh"))
        .arg("--state-dir")
        .arg(dir.join("state"))
        .args(["--node-name", &Spec::node_name(n)])
        .args(["--node-ip", &Spec::node_ip(n).to_string()])
        .args(["--pod-cidr", &Spec::pod_cidr(n).to_string()])
        .args(["--wireguard", "--wireguard-device", &device])
        .arg("--wireguard-helper")
        .arg(&programs.wg)
        .args(["--native-device", "eth0"])
        .arg("--datapath-netns")
        .arg(netns_path(&name))
        .arg("--bpf-root")
        .arg(spec.bpf_root(n))
        .arg("--policy-dir")
        .arg(cluster.join("policies"))
        .arg("--plugin-dir")
        .arg(cluster.join("plugins"))
        .arg("--plugin-trusted-keys")
        .arg(trusted)
        .arg("--plugin-cache-dir")
        .arg(dir.join("plugin-cache"))
        // The agents run side by side in the lab's own namespace: a port each.
        .args(["--health-addr", &format!("127.0.0.1:{health}")])
        .args(["--log-format", "json"]);
    let what = format!("weftd of {}", Spec::node_name(n));
    state.record(Made::Process {
        what: what.clone(),
        pid: 0,
    })?;
    let pid =
        process::spawn(cmd, &dir.join("weftd.log")).map_err(|e| step(&what)(e.to_string()))?;
    state.started(&what, pid)?;
    Ok(())
}

/// Makes every pod through `weft-cni`, once each agent answers: their addresses, by
/// pod.
///
/// # Errors
/// [`LabError`] naming the pod.
pub async fn make_pods(
    state: &mut LabState,
    programs: &Programs,
) -> Result<Vec<(super::spec::PodRef, std::net::IpAddr)>, LabError> {
    let spec = state.spec.clone();
    for n in spec.nodes() {
        let state_dir = spec.node_dir(n).join("state");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while crate::api::fetch_status(&state_dir).await.is_err() {
            if tokio::time::Instant::now() > deadline {
                return Err(step(format!("weftd of {}", Spec::node_name(n)))(format!(
                    "it does not answer; see {}",
                    spec.node_dir(n).join("weftd.log").display()
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let mut made = Vec::new();
    for p in spec.pods().collect::<Vec<_>>() {
        let name = spec.pod_netns(p);
        let path = make_netns(state, &name)?;
        let state_dir = spec.node_dir(p.node).join("state");
        let cni = programs.cni.clone();
        // The agent may still be connecting to its etcd (CNI says "try again", 11), or
        // a step may fail once while it starts: retried until the deadline, as a
        // container runtime retries a pod sandbox (each failed ADD is undone).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let ip = loop {
            let (c, s, n) = (cni.clone(), state_dir.clone(), path.clone());
            let added = tokio::task::spawn_blocking(move || pods::add(&c, &s, &n, p))
                .await
                .map_err(|e| step(format!("pod {name}"))(e.to_string()))?;
            match added {
                Ok(ip) => break ip,
                Err(e) if tokio::time::Instant::now() < deadline => {
                    if !e.contains("\"code\":11") {
                        tracing::warn!(pod = name, error = e, "pod ADD failed; tried again");
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => return Err(step(format!("pod {name}"))(e)),
            }
        };
        made.push((p, ip));
    }
    Ok(made)
}

/// Writes cluster `name`'s config to the etcd at `url`, as `weftd cluster-config` does.
async fn write_cluster_config(
    url: &str,
    name: &str,
    config: &crate::model::ClusterConfig,
) -> Result<(), crate::kvstore::Error> {
    let endpoints = crate::kvstore::Endpoints {
        urls: vec![url.to_owned()],
        ..Default::default()
    };
    let client =
        crate::kvstore::Client::connect(&endpoints, &crate::kvstore::Config::default()).await?;
    crate::clustermesh::write_cluster_config(&client, name, config).await
}
