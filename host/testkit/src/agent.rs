//! `weftd` as a child process: started with a state and a clustermesh directory of
//! its own, restartable over them, killed on drop (printing its log when the test
//! failed).

use super::Etcd;
use std::ffi::OsStr;
use std::process::{Child, Command, Stdio};

use crate::bin::weftd as executable;

pub struct Agent {
    child: Child,
    pub state: tempfile::TempDir,
    pub mesh_dir: tempfile::TempDir,
    cluster: String,
    id: u32,
    etcd_url: String,
    node_ip: String,
}

impl Agent {
    pub fn start(cluster: &str, id: u32, etcd: &Etcd) -> Agent {
        Self::start_with(cluster, id, etcd, &[])
    }

    /// [`Agent::start`] with `extra` flags.
    pub fn start_with(cluster: &str, id: u32, etcd: &Etcd, extra: &[&OsStr]) -> Agent {
        // Node addresses are data here: nothing is sent to them.
        Self::start_node(cluster, id, etcd, &format!("192.0.2.{id}"), extra)
    }

    /// [`Agent::start_with`] with the remote clusters `mesh` (name, etcd URL) in its
    /// mesh directory before it starts.
    pub fn start_meshed(
        cluster: &str,
        id: u32,
        etcd: &Etcd,
        mesh: &[(&str, String)],
        extra: &[&OsStr],
    ) -> Agent {
        Self::start_in(cluster, id, etcd, &format!("192.0.2.{id}"), mesh, extra)
    }

    /// [`Agent::start_with`] for a node with the address `node_ip`.
    pub fn start_node(
        cluster: &str,
        id: u32,
        etcd: &Etcd,
        node_ip: &str,
        extra: &[&OsStr],
    ) -> Agent {
        Self::start_in(cluster, id, etcd, node_ip, &[], extra)
    }

    /// A new agent with directories of its own, its mesh directory naming `mesh`.
    fn start_in(
        cluster: &str,
        id: u32,
        etcd: &Etcd,
        node_ip: &str,
        mesh: &[(&str, String)],
        extra: &[&OsStr],
    ) -> Agent {
        let state = tempfile::tempdir().unwrap();
        let mesh_dir = tempfile::tempdir().unwrap();
        for (name, url) in mesh {
            super::write_config_file(mesh_dir.path(), name, url);
        }
        let child = spawn(cluster, id, &etcd.url(), node_ip, &state, &mesh_dir, extra);
        Agent {
            child,
            state,
            mesh_dir,
            cluster: cluster.into(),
            id,
            etcd_url: etcd.url(),
            node_ip: node_ip.into(),
        }
    }

    /// Kills the agent (as a crash or an upgrade would) and starts it again over the
    /// same directories, with `extra` flags.
    pub fn restart(&mut self, extra: &[&OsStr]) {
        self.kill();
        self.start_again(extra);
    }

    /// Kills the agent; [`Self::start_again`] starts it over the same directories.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(self.state.path().join("weftd.sock"));
    }

    /// Stops the agent as its supervisor does (SIGTERM) and waits, at most 20 s, for it
    /// to exit; [`Self::start_again`] starts it over the same directories.
    pub fn stop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while self.child.try_wait().unwrap().is_none() {
            assert!(
                std::time::Instant::now() < deadline,
                "the agent did not stop within 20 s of SIGTERM"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// Starts a killed agent again over the same directories, with `extra` flags.
    pub fn start_again(&mut self, extra: &[&OsStr]) {
        self.child = spawn(
            &self.cluster,
            self.id,
            &self.etcd_url,
            &self.node_ip,
            &self.state,
            &self.mesh_dir,
            extra,
        );
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.state.path().join("weftd.log")).unwrap_or_default()
    }

    pub fn status_json(&self) -> Option<serde_json::Value> {
        self.json(&["status"])
    }

    pub fn json(&self, command: &[&str]) -> Option<serde_json::Value> {
        let out = Command::new(executable())
            .args(command)
            .args(["-o", "json", "--state-dir"])
            .arg(self.state.path())
            .output()
            .unwrap();
        out.status
            .success()
            .then(|| serde_json::from_slice(&out.stdout).unwrap())
    }
}

fn spawn(
    cluster: &str,
    id: u32,
    etcd_url: &str,
    node_ip: &str,
    state: &tempfile::TempDir,
    mesh_dir: &tempfile::TempDir,
    extra: &[&OsStr],
) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(state.path().join("weftd.log"))
        .unwrap();
    Command::new(executable())
        .arg("run")
        .env("WEFT_CLUSTER_NAME", cluster) // flags also come from the environment
        .args([
            "--cluster-id",
            &id.to_string(),
            "--kvstore-endpoints",
            etcd_url,
        ])
        .arg("--clustermesh-config")
        .arg(mesh_dir.path())
        .arg("--state-dir")
        .arg(state.path())
        .args([
            "--node-name",
            &format!("{cluster}-node"),
            "--node-ip",
            node_ip,
        ])
        .args(["--log-format", "json"])
        .args(extra)
        // Agents run side by side here: each on a port of its own unless told.
        .args(
            (!extra.iter().any(|a| *a == "--health-addr"))
                .then_some(["--health-addr", "127.0.0.1:0"])
                .into_iter()
                .flatten(),
        )
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

impl Drop for Agent {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- weftd log ---\n{}", self.log());
            eprintln!("--- weftd status ---\n{:?}", self.status_json());
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `weftd cluster-config` for cluster `name` in `etcd`.
pub fn cluster_config(name: &str, id: u32, etcd: &Etcd, canaries: bool) {
    let mut cmd = Command::new(executable());
    cmd.args([
        "cluster-config",
        "--cluster-name",
        name,
        "--cluster-id",
        &id.to_string(),
    ])
    .args(["--kvstore-endpoints", &etcd.url()]);
    if canaries {
        cmd.arg("--synced-canaries");
    }
    assert!(cmd.status().unwrap().success());
}

/// Runs `weftd args...`; its standard output.
pub fn weftd(args: &[&OsStr]) -> String {
    let out = Command::new(executable()).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "weftd {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Copies plugin `file` into `dir` with a manifest, sealed and signed by `key` with
/// `weftd plugin seal`.
pub fn package(
    dir: &std::path::Path,
    name: &str,
    file: &str,
    version: &str,
    priority: i32,
    key: &std::path::Path,
) {
    std::fs::copy(super::plugin_wasm(file), dir.join(format!("{file}.wasm"))).unwrap();
    let tmp = dir.join(format!(".{name}.toml"));
    std::fs::write(
        &tmp,
        format!("name = {name:?}\nversion = {version:?}\nwasm = \"{file}.wasm\"\nsha256 = \"\"\npriority = {priority}\n"),
    )
    .unwrap();
    weftd(&[
        "plugin".as_ref(),
        "seal".as_ref(),
        tmp.as_os_str(),
        "--key".as_ref(),
        key.as_os_str(),
    ]);
    // Renamed into place whole, as an operator's tooling (or a ConfigMap) would.
    std::fs::rename(&tmp, dir.join(format!("{name}.toml"))).unwrap();
}

/// Sets the config of the plugin `name` packaged in `dir` and signs its manifest again
/// with `key`, as a vendor changing a plugin's config would.
pub fn configure(dir: &std::path::Path, name: &str, config: &str, key: &std::path::Path) {
    let manifest = dir.join(format!("{name}.toml"));
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(
        &manifest,
        text.replace("config = \"\"", &format!("config = {config:?}")),
    )
    .unwrap();
    weftd(&[
        "plugin".as_ref(),
        "sign".as_ref(),
        manifest.as_os_str(),
        "--key".as_ref(),
        key.as_os_str(),
    ]);
}

/// A vendor's signing key made with `weftd plugin keygen`, and the file of trusted keys
/// that holds its public key.
pub struct VendorKey {
    _dir: tempfile::TempDir,
    /// The signing key.
    pub key: std::path::PathBuf,
    /// The public key, hex.
    pub public: String,
    /// A trusted keys file with the public key.
    pub trusted: std::path::PathBuf,
}

impl VendorKey {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("vendor.key");
        let public = weftd(&[
            "plugin".as_ref(),
            "keygen".as_ref(),
            "--out".as_ref(),
            key.as_os_str(),
        ]);
        let trusted = dir.path().join("trusted");
        std::fs::write(&trusted, &public).unwrap();
        Self {
            _dir: dir,
            key,
            public: public.trim().to_owned(),
            trusted,
        }
    }
}

/// The time of the first JSON log line (`--log-format json`) containing every one of
/// `needles`.
pub fn logged_at(log: &str, needles: &[&str]) -> Option<std::time::SystemTime> {
    let line = log
        .lines()
        .find(|l| needles.iter().all(|n| l.contains(n)))?;
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    humantime::parse_rfc3339_weak(v["timestamp"].as_str()?.trim_end_matches('Z')).ok()
}

/// `weftd run` as the sync benches start it, `cmd` being the program (weftd, or a
/// wrapper such as `taskset … weftd`): local cluster 1, no kvstore limits, health on an
/// ephemeral port, the given clustermesh and state directories, its log off. Returns
/// once its API socket accepts.
pub async fn start_unlimited(
    mut cmd: Command,
    mesh: &std::path::Path,
    state: &std::path::Path,
) -> Child {
    let child = cmd
        .args(["run", "--cluster-name", "local", "--cluster-id", "1"])
        .args(["--health-addr", "127.0.0.1:0"])
        .args(["--kvstore-qps", "0", "--kvstore-max-in-flight", "0"])
        .arg("--clustermesh-config")
        .arg(mesh)
        .arg("--state-dir")
        .arg(state)
        .env("RUST_LOG", "warn")
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let socket = weft_api::socket_path(state);
    crate::eventually("weftd answers", std::time::Duration::from_secs(30), || {
        std::os::unix::net::UnixStream::connect(&socket).ok()
    })
    .await;
    child
}

/// The agent's status as JSON (what `weftd status -o json` prints), through its API
/// socket in `state_dir`.
pub async fn status(state_dir: &std::path::Path) -> Result<serde_json::Value, weft_api::Error> {
    weft_api::Client::new(weft_api::socket_path(state_dir))
        .get("/status")
        .await
}
