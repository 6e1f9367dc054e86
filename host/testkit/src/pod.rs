//! The chart's pod run as a kubelet and a container runtime run it, as far as weft's
//! binaries can tell, on a node that is a network namespace of the test's:
//! - each container in a mount and a PID namespace of its own: when its main process
//!   dies, every process it started dies with it, as in a real container;
//! - its root filesystem read-only: the image (weft's binaries at `/usr/local/bin`,
//!   the signed default plugins at `/usr/lib/weft`, as `deploy/Dockerfile` lays them
//!   out) over this machine's root for the rest of the userland;
//! - the chart's volumes where the chart mounts them (host paths in a directory that
//!   stands for the node's filesystem, a private bpffs for `/sys/fs/bpf`; emptyDirs
//!   per pod, kept across container restarts; Secrets and ConfigMaps read-only);
//! - `/proc/sys` read-only and sysfs read-only, as runtimes mount them for an
//!   unprivileged container; only the capabilities the chart adds, no new privileges;
//! - the node's network namespace (`hostNetwork`), and the environment the chart
//!   sets (the downward API's fields from the test).
//!
//! Not simulated: seccomp, cgroups, image pulls. Init containers of other images
//! (the kubectl one) are given a stand-in by the test.

use super::chart::{self, command_line, environment, mounts, Mount};
use super::deploy_tools::root;
use super::netns::Netns;
use serde_yaml::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The image: weft's binaries as `deploy/Dockerfile` installs them.
const BINARIES: [&str; 3] = ["weftd", "weft-wg", "weft-cni"];

/// A pod of the chart's DaemonSet on one node.
pub struct Pod {
    dir: tempfile::TempDir,
    manifests: Vec<Value>,
    ds: Value,
    netns: PathBuf,
    node: BTreeMap<&'static str, String>,
    /// The container's main process as the runtime holds it (`unshare`, whose
    /// child is the container's PID 1).
    running: BTreeMap<String, Child>,
    bpffs: PathBuf,
    binaries: BTreeMap<&'static str, PathBuf>,
}

impl Pod {
    /// The pod of `manifests`' DaemonSet on the node `netns`, whose name and address
    /// the downward API gives (`spec.nodeName`, `status.hostIP`). `secrets` are the
    /// Secrets' contents by name and key. Nothing runs yet.
    pub fn new(
        manifests: &str,
        netns: &Netns,
        node_name: &str,
        host_ip: &str,
        secrets: &[(&str, &[(&str, &str)])],
    ) -> Pod {
        let dir = tempfile::Builder::new()
            .prefix("weft-pod")
            .tempdir()
            .unwrap();
        let manifests = chart::documents(manifests);
        let ds = manifests
            .iter()
            .find(|d| d["kind"] == "DaemonSet")
            .expect("a DaemonSet")
            .clone();
        // The node's bpffs: a bpffs of the pod's own, so that nothing else's pins
        // are touched.
        let bpffs = dir.path().join("node/sys/fs/bpf");
        std::fs::create_dir_all(&bpffs).unwrap();
        run(Command::new("mount").args(["-t", "bpf", "bpf"]).arg(&bpffs));
        let weftd = PathBuf::from(crate::bin::weftd());
        let binaries = BTreeMap::from([
            ("weftd", weftd.clone()),
            ("weft-wg", PathBuf::from(crate::bin::weft_wg())),
            ("weft-cni", super::cni::binary()),
        ]);
        let pod = Pod {
            dir,
            manifests,
            ds,
            netns: netns.path(),
            node: BTreeMap::from([
                ("spec.nodeName", node_name.to_owned()),
                ("status.hostIP", host_ip.to_owned()),
            ]),
            running: BTreeMap::new(),
            bpffs,
            binaries,
        };
        pod.make_image(&weftd);
        pod.make_volumes(secrets);
        pod
    }

    /// The image's files besides the binaries: the default plugins sealed and
    /// signed by `deploy/sign-defaults.sh`, as the Dockerfile does.
    fn make_image(&self, weftd: &Path) {
        let image = self.dir.path().join("image");
        std::fs::create_dir_all(image.join("usr/local/bin")).unwrap();
        for b in BINARIES {
            std::fs::write(image.join("usr/local/bin").join(b), "").unwrap();
        }
        // The image's /var/run is a directory: the chart mounts below it.
        std::fs::create_dir_all(image.join("var/run")).unwrap();
        run(Command::new(root().join("deploy/sign-defaults.sh"))
            .arg(image.join("usr/lib/weft"))
            .arg(weftd)
            .arg(root().join("plugins/target/wasm32-wasip2/release")));
    }

    /// Every volume's directory: the node's host paths, emptyDirs, Secrets and
    /// ConfigMaps (from the rendered manifests).
    fn make_volumes(&self, secrets: &[(&str, &[(&str, &str)])]) {
        let volumes = self.ds["spec"]["template"]["spec"]["volumes"]
            .as_sequence()
            .unwrap();
        for v in volumes {
            let name = v["name"].as_str().unwrap();
            let Some(dir) = self.volume_dir(v) else {
                continue;
            };
            if v.get("secret").is_some() {
                std::fs::create_dir_all(&dir).unwrap();
                let secret = v["secret"]["secretName"].as_str().unwrap();
                let files = secrets
                    .iter()
                    .find(|(n, _)| *n == secret)
                    .map(|(_, f)| *f)
                    .unwrap_or_default();
                assert!(
                    !files.is_empty() || v["secret"]["optional"] == true,
                    "the pod needs the Secret {secret}"
                );
                for (key, value) in files {
                    write_mode(&dir.join(key), value, 0o400);
                }
            } else if v.get("configMap").is_some() {
                std::fs::create_dir_all(&dir).unwrap();
                let map = v["configMap"]["name"].as_str().unwrap();
                let found = self
                    .manifests
                    .iter()
                    .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == map);
                if let Some(m) = found {
                    for (k, value) in m["data"].as_mapping().unwrap() {
                        write_mode(
                            &dir.join(k.as_str().unwrap()),
                            value.as_str().unwrap(),
                            0o644,
                        );
                    }
                }
            } else if v.get("hostPath").is_some() {
                if v["hostPath"]["type"] == "DirectoryOrCreate" {
                    std::fs::create_dir_all(&dir).unwrap();
                }
                assert!(dir.exists(), "hostPath {name}: {} missing", dir.display());
            } else {
                std::fs::create_dir_all(&dir).unwrap();
            }
        }
    }

    /// Where a volume's files are on this machine.
    fn volume_dir(&self, v: &Value) -> Option<PathBuf> {
        let name = v["name"].as_str().unwrap();
        if let Some(path) = v["hostPath"]["path"].as_str() {
            return Some(self.host_path(path));
        }
        for kind in ["emptyDir", "secret", "configMap"] {
            if v.get(kind).is_some() {
                return Some(self.dir.path().join("volumes").join(kind).join(name));
            }
        }
        panic!("volume {name}: a kind the pod does not know")
    }

    /// Where the node's `path` is on this machine: devices and the node's
    /// `/proc/sys/net` are this machine's, the bpffs is the pod's own, and every other
    /// path is in the node's directory.
    pub fn host_path(&self, path: &str) -> PathBuf {
        match path {
            "/dev/net/tun" | "/proc/sys/net" => PathBuf::from(path),
            "/sys/fs/bpf" => self.bpffs.clone(),
            p => self.dir.path().join("node").join(p.trim_start_matches('/')),
        }
    }

    /// Where volume `name`'s files are on this machine.
    pub fn volume(&self, name: &str) -> PathBuf {
        let v = self.ds["spec"]["template"]["spec"]["volumes"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no volume {name}"));
        self.volume_dir(v).unwrap()
    }

    /// The container spec `name` (init or regular).
    fn spec(&self, name: &str) -> Value {
        ["initContainers", "containers"]
            .iter()
            .flat_map(|w| {
                self.ds["spec"]["template"]["spec"][*w]
                    .as_sequence()
                    .cloned()
                    .unwrap_or_default()
            })
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no container {name}"))
    }

    /// Runs the init containers in order, each to its end; `stand_in` takes the place
    /// of those whose image is not weft's (it returns whether it did one).
    pub fn run_init_containers(&mut self, stand_in: impl Fn(&str, &Pod) -> bool) {
        let image = self.ds["spec"]["template"]["spec"]["containers"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "weftd")
            .unwrap()["image"]
            .clone();
        let inits = self.ds["spec"]["template"]["spec"]["initContainers"]
            .as_sequence()
            .cloned()
            .unwrap_or_default();
        for c in inits {
            let name = c["name"].as_str().unwrap().to_owned();
            if c["image"] != image {
                assert!(
                    stand_in(&name, self),
                    "init container {name} has no stand-in"
                );
                continue;
            }
            let mut child = self.spawn(&name);
            let deadline = Instant::now() + Duration::from_secs(60);
            let status = loop {
                if let Some(s) = child.try_wait().unwrap() {
                    break s;
                }
                assert!(Instant::now() < deadline, "init container {name} hangs");
                std::thread::sleep(Duration::from_millis(20));
            };
            assert!(
                status.success(),
                "init container {name}: {status}\n{}",
                self.log(&name)
            );
        }
    }

    /// Starts the regular containers in the pod's order, as the kubelet does.
    pub fn start_containers(&mut self) {
        let names: Vec<String> = self.ds["spec"]["template"]["spec"]["containers"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_owned())
            .collect();
        for name in names {
            self.start(&name);
        }
    }

    /// Starts container `name` (again).
    pub fn start(&mut self, name: &str) {
        assert!(!self.running.contains_key(name), "{name} runs");
        let child = self.spawn(name);
        self.running.insert(name.to_owned(), child);
    }

    /// Kills container `name`: its PID 1 is killed, and with it every process of its
    /// PID namespace, as when a container is restarted.
    pub fn kill(&mut self, name: &str) {
        if let Some(mut child) = self.running.remove(name) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// A container restart: killed, then started again over the same volumes.
    pub fn restart(&mut self, name: &str) {
        self.kill(name);
        self.start(name);
    }

    /// Whether container `name`'s main process still runs.
    pub fn running(&mut self, name: &str) -> bool {
        self.running
            .get_mut(name)
            .is_some_and(|c| c.try_wait().unwrap().is_none())
    }

    /// Runs `argv` inside container `name` as `kubectl exec` would: in its mount, PID
    /// and network namespaces and its root (with this process's capabilities).
    pub fn exec(&self, name: &str, argv: &[&str]) -> std::process::Output {
        let runtime = self
            .running
            .get(name)
            .unwrap_or_else(|| panic!("{name} runs"));
        // The container's PID 1 is the `unshare` process's only child.
        let children =
            std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", runtime.id())).unwrap();
        let pid1 = children
            .split_whitespace()
            .next()
            .expect("the container's PID 1");
        Command::new("nsenter")
            .args(["-t", pid1, "-m", "-p", "-n", "-r", "-w", "--"])
            .args(argv)
            .output()
            .unwrap()
    }

    /// What container `name` wrote to its stdout and stderr, every run of it.
    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join("logs").join(format!("{name}.log")))
            .unwrap_or_default()
    }

    /// Starts container `name`: `nsenter` into the node's network namespace, then
    /// `unshare` a mount and a PID namespace, whose first process lays out the root
    /// filesystem and execs the container's command in it.
    fn spawn(&self, name: &str) -> Child {
        let c = self.spec(name);
        let dir = self.dir.path().join("containers").join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("start.sh");
        std::fs::write(&script, self.start_script(&c, &dir)).unwrap();
        let logs = self.dir.path().join("logs");
        std::fs::create_dir_all(&logs).unwrap();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(logs.join(format!("{name}.log")))
            .unwrap();
        Command::new("nsenter")
            .arg(format!("--net={}", self.netns.display()))
            .args([
                "--",
                "unshare",
                "--mount",
                "--pid",
                "--fork",
                "--kill-child",
                "--propagation",
                "private",
                "--",
                "/bin/sh",
            ])
            .arg(&script)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap()
    }

    /// The shell that lays out container `c`'s filesystem in its mount namespace and
    /// execs its command: the container runtime's part.
    fn start_script(&self, c: &Value, dir: &Path) -> String {
        let q = |p: &Path| shell_quote(&p.display().to_string());
        let scratch = dir.join("fs");
        std::fs::create_dir_all(&scratch).unwrap();
        let r = scratch.join("root");
        let image = self.dir.path().join("image");
        let mut s = String::from("set -eu\n");
        // A mount point must not lead out of the root (through a symlink of the
        // lower layer): mkdir and touch would make it on this machine.
        s += &format!(
            "inside() {{ case \"$(realpath -m \"$1\")\" in {}/*) ;; *) echo \"$1 leaves the root\" >&2; exit 99;; esac; }}\n",
            q(&r)
        );
        // Layers on a tmpfs: an overlay's layers may not sit inside one another.
        s += &format!("mount -t tmpfs -o mode=0755 tmpfs {}\n", q(&scratch));
        s += &format!(
            "mkdir {0}/image {0}/up {0}/work {0}/root\ncp -a {1}/. {0}/image/\n",
            q(&scratch),
            q(&image)
        );
        s += &format!(
            "mount -t overlay overlay -o lowerdir={0}/image:/,upperdir={0}/up,workdir={0}/work {1}\n",
            scratch.display(),
            q(&r)
        );
        for (b, path) in &self.binaries {
            let at = r.join("usr/local/bin").join(b);
            s += &format!("mount --bind {} {}\n", q(path), q(&at));
        }
        let mounts = mounts(&self.ds, c);
        // Mount points are made while the root is writable, as a runtime does.
        for m in &mounts {
            if m.path.starts_with("/dev/") {
                continue; // on the container's own /dev, below
            }
            let source = self.volume_dir(&m.source).unwrap();
            let target = r.join(m.path.trim_start_matches('/'));
            s += &format!("inside {}\n", q(&target));
            if source.is_dir() {
                s += &format!("mkdir -p {}\n", q(&target));
            } else {
                s += &format!(
                    "mkdir -p {}\ntouch {}\n",
                    q(target.parent().unwrap()),
                    q(&target)
                );
            }
        }
        let read_only = c["securityContext"]["readOnlyRootFilesystem"] == true;
        if read_only {
            s += &format!("mount -o remount,bind,ro {}\n", q(&r));
        }
        s += &format!("mount -t proc proc {0}/proc\nmount --bind {0}/proc/sys {0}/proc/sys\nmount -o remount,bind,ro {0}/proc/sys\n", q(&r));
        s += &format!(
            "mount -t tmpfs -o mode=0755,nosuid tmpfs {0}/dev\nmkdir {0}/dev/net\n",
            q(&r)
        );
        for d in ["null", "zero", "full", "random", "urandom", "tty"] {
            s += &format!(
                "touch {0}/dev/{d}\nmount --bind /dev/{d} {0}/dev/{d}\n",
                q(&r)
            );
        }
        s += &format!(
            "mount -t sysfs -o ro,nosuid,nodev,noexec sysfs {}/sys\n",
            q(&r)
        );
        let mut ordered: Vec<&Mount> = mounts.iter().collect();
        ordered.sort_by_key(|m| Path::new(&m.path).components().count());
        for m in ordered {
            let source = self.volume_dir(&m.source).unwrap();
            let target = r.join(m.path.trim_start_matches('/'));
            if m.path.starts_with("/dev/") {
                s += &format!("touch {}\n", q(&target));
            }
            s += &format!("mount --bind {} {}\n", q(&source), q(&target));
            // A Secret or a ConfigMap is read-only whatever the mount says.
            if m.read_only || !m.writable() {
                s += &format!("mount -o remount,bind,ro {}\n", q(&target));
            }
        }
        let caps: Vec<String> = c["securityContext"]["capabilities"]["add"]
            .as_sequence()
            .map(|a| a.as_slice())
            .unwrap_or_default()
            .iter()
            .map(|cap| format!("+{}", cap.as_str().unwrap().to_lowercase()))
            .collect();
        let bounding = std::iter::once("-all".to_owned())
            .chain(caps)
            .collect::<Vec<_>>()
            .join(",");
        let mut env = vec![
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_owned(),
            "HOME=/root".to_owned(),
        ];
        env.extend(
            environment(c, &self.node)
                .into_iter()
                .map(|(k, v)| format!("{k}={v}")),
        );
        let argv = command_line(c);
        s += &format!(
            "exec chroot {} /usr/bin/setpriv --no-new-privs --inh-caps=-all --ambient-caps=-all --bounding-set={bounding} /usr/bin/env -i {} {}\n",
            q(&r),
            env.iter().map(|e| shell_quote(e)).collect::<Vec<_>>().join(" "),
            argv.iter().map(|a| shell_quote(a)).collect::<Vec<_>>().join(" ")
        );
        s
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        let names: Vec<String> = self.running.keys().cloned().collect();
        for name in names {
            if std::thread::panicking() {
                eprintln!("--- container {name} ---\n{}", self.log(&name));
            }
            self.kill(&name);
        }
        let _ = Command::new("umount").arg(&self.bpffs).status();
    }
}

fn write_mode(path: &Path, value: &str, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::write(path, value).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
