//! The WireGuard device, with one of two backends behind one interface:
//! - **kernel**, where the kernel has WireGuard: a `wireguard` link, configured over
//!   generic netlink in the device's namespace;
//! - **userspace** otherwise (these machines): a `weft-wg` process started detached
//!   when the device's UAPI socket does not answer, configured through that socket.
//!
//! Either outlives the agent, so a restarted agent finds its tunnels carrying traffic.

use super::{DeviceError, Error, NodeKey, PeerChange, FWMARK, LISTEN_PORT};
use std::collections::BTreeSet;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use weft_state::ipcache::Prefix;
use weft_sys::netns::in_netns;
use wireguard_control::{Backend, DeviceUpdate, InterfaceName, Key, PeerConfigBuilder};

/// Where userspace devices keep their sockets (boringtun and the control crate both
/// fix it); not per namespace, so device names must be unique on the machine. The
/// helper writes here, and so does the agent when it starts one (the helper's log).
pub const RUN_DIR: &str = "/var/run/wireguard";

/// How long a new helper gets to open its socket, and how long an agent waits for
/// one run outside it ([`WireGuardDevice::adopt`]).
pub const START_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a UAPI call may take: a helper that does not answer in this time is hung.
pub const UAPI_TIMEOUT: Duration = Duration::from_secs(2);

/// UAPI calls queued behind one in progress; past them, a call fails at once.
const UAPI_QUEUE: usize = 4;

/// What `weftd` sets `WG_USERSPACE_IMPLEMENTATION` to: the control crate starts that
/// program (as root) when a device's socket is missing, and weft starts its own
/// helper, never another. A path that cannot exist makes the crate's attempt fail.
pub const NO_USERSPACE_IMPLEMENTATION: &str = "/nonexistent/weft-starts-weft-wg-itself";

/// A WireGuard device, kernel or userspace.
#[derive(Debug, Clone)]
pub struct WireGuardDevice {
    name: String,
    iface: InterfaceName,
    backend: Backend,
    /// The namespace of a kernel device (netlink talks to the caller's namespace).
    netns: Option<PathBuf>,
    /// The thread that speaks UAPI to a userspace device.
    uapi: Uapi,
}

type UapiJob = Box<dyn FnOnce() + Send>;

/// One thread per device speaks UAPI (the control crate's socket calls have no
/// timeout): a caller waits at most [`UAPI_TIMEOUT`] for its answer, and while a hung
/// helper holds the thread, calls past a short queue fail at once. A hung helper
/// costs one thread, never one per `/status`.
#[derive(Clone)]
struct Uapi {
    jobs: std::sync::mpsc::SyncSender<UapiJob>,
}

impl std::fmt::Debug for Uapi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Uapi")
    }
}

impl Uapi {
    fn start(device: &str) -> Uapi {
        let (jobs, rx) = std::sync::mpsc::sync_channel::<UapiJob>(UAPI_QUEUE);
        std::thread::Builder::new()
            .name(format!("weft-uapi-{device}"))
            .spawn(move || {
                // Ends when the last clone of the device is dropped.
                for job in rx {
                    job();
                }
            })
            .expect("the UAPI thread starts");
        Uapi { jobs }
    }

    fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
    ) -> std::io::Result<T> {
        use std::io::{Error, ErrorKind};
        use std::sync::mpsc::{RecvTimeoutError, TrySendError};
        let (reply, answer) = std::sync::mpsc::sync_channel(1);
        let job: UapiJob = Box::new(move || {
            let _ = reply.send(f());
        });
        match self.jobs.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                return Err(Error::new(
                    ErrorKind::WouldBlock,
                    "the UAPI socket is still busy with earlier calls that have not answered",
                ))
            }
            Err(TrySendError::Disconnected(_)) => {
                return Err(Error::other("the UAPI thread is gone"))
            }
        }
        match answer.recv_timeout(UAPI_TIMEOUT) {
            Ok(result) => result,
            Err(RecvTimeoutError::Timeout) => Err(Error::new(
                ErrorKind::TimedOut,
                format!("the helper did not answer on its UAPI socket within {UAPI_TIMEOUT:?}"),
            )),
            Err(RecvTimeoutError::Disconnected) => Err(Error::other("the UAPI thread is gone")),
        }
    }
}

impl WireGuardDevice {
    /// The device `name` in `netns` (the agent's own when `None`):
    /// - a userspace device whose socket answers is kept (a restarted agent finds its
    ///   tunnels intact);
    /// - else a kernel device, found or created, where the kernel has WireGuard;
    /// - else a new `weft-wg` started detached from this process, from the binary
    ///   `helper`.
    ///
    /// # Errors
    /// [`Error::Device`] when the helper cannot start or its socket does not answer in
    /// time.
    pub fn ensure(name: &str, netns: Option<&Path>, helper: &Path) -> Result<Self, Error> {
        let bad = |source: DeviceError| Error::Device {
            device: name.into(),
            source,
        };
        let mut device = Self::named(name)?;
        if device.answers() {
            tracing::info!(
                device = name,
                backend = "userspace",
                "WireGuard device found running: kept"
            );
            return Ok(device);
        }
        let kernel = {
            let iface = device.iface;
            // Creating a link that exists is no error: it is then found.
            in_netns(netns, move || {
                DeviceUpdate::new().apply(&iface, Backend::Kernel)
            })
        };
        match kernel {
            Ok(Ok(())) => {
                device.backend = Backend::Kernel;
                device.netns = netns.map(Path::to_path_buf);
                tracing::info!(device = name, backend = "kernel", "WireGuard device ready");
                return Ok(device);
            }
            Ok(Err(e)) => {
                tracing::info!(device = name, reason = %e, "no kernel WireGuard: userspace device")
            }
            Err(e) => return Err(bad(DeviceError::Netns(e))),
        }
        // A socket left by a helper that died: it would only refuse connections.
        let _ = std::fs::remove_file(device.socket_path());
        let mut cmd = std::process::Command::new(helper);
        cmd.arg(name);
        if let Some(ns) = netns {
            cmd.arg("--netns").arg(ns);
        }
        let log_path = Path::new(RUN_DIR).join(format!("{name}.log"));
        let log_error = |source| {
            bad(DeviceError::Log {
                path: log_path.clone(),
                source,
            })
        };
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .or_else(|_| {
                std::fs::create_dir_all(RUN_DIR)?;
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&log_path)
            })
            .map_err(log_error)?;
        // Its own process group: a signal to the agent's group does not reach it.
        let mut child = cmd
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().map_err(log_error)?)
            .stderr(log)
            .process_group(0)
            .spawn()
            .map_err(|source| {
                bad(DeviceError::Start {
                    helper: helper.into(),
                    source,
                })
            })?;
        let deadline = Instant::now() + START_TIMEOUT;
        while !device.answers() {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(bad(DeviceError::Exited {
                    status,
                    log: log_path,
                }));
            }
            if Instant::now() > deadline {
                return Err(bad(DeviceError::NoSocket {
                    pid: child.id(),
                    socket: device.socket_path(),
                    within: START_TIMEOUT,
                }));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        tracing::info!(
            device = name,
            backend = "userspace",
            pid = child.id(),
            "WireGuard device started"
        );
        // Reaped when it exits (else a zombie for the agent's life); the stage then
        // finds the device gone and starts another. An agent that ends first leaves it
        // running, to init.
        let device_name = name.to_owned();
        std::thread::Builder::new()
            .name(format!("weft-wg-reaper-{name}"))
            .spawn(move || match child.wait() {
                Ok(status) => tracing::warn!(device = %device_name, %status, "weft-wg exited"),
                Err(e) => tracing::warn!(device = %device_name, error = %e, "weft-wg not reaped"),
            })
            .map_err(|e| bad(DeviceError::Reaper(e)))?;
        Ok(device)
    }

    /// The userspace device `name` run by someone else (the chart's `wireguard`
    /// container runs `weft-wg`, so that an agent container's restart leaves the
    /// device and its tunnels up): waits up to `within` for its socket to answer.
    /// Nothing is ever started, neither a helper (it would live and die in the
    /// agent's container) nor a kernel device.
    ///
    /// # Errors
    /// [`Error::Device`] naming the socket when it does not answer in time.
    pub fn adopt(name: &str, within: Duration) -> Result<Self, Error> {
        let device = Self::named(name)?;
        let deadline = Instant::now() + within;
        while !device.answers() {
            if Instant::now() > deadline {
                return Err(Error::Device {
                    device: name.into(),
                    source: DeviceError::NotAdopted {
                        socket: device.socket_path(),
                        within,
                    },
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        tracing::info!(
            device = name,
            backend = "userspace",
            "WireGuard device run outside the agent: adopted"
        );
        Ok(device)
    }

    /// The userspace device `name`, running or not; nothing is started. For stopping
    /// a device an agent started.
    ///
    /// # Errors
    /// [`Error::Device`] when `name` is not a valid interface name.
    pub fn named(name: &str) -> Result<Self, Error> {
        let iface = name.parse().map_err(|e| Error::Device {
            device: name.into(),
            source: DeviceError::Name(e),
        })?;
        Ok(Self {
            name: name.into(),
            iface,
            backend: Backend::Userspace,
            netns: None,
            uapi: Uapi::start(name),
        })
    }

    /// `kernel` or `userspace`.
    pub fn backend(&self) -> &'static str {
        match self.backend {
            Backend::Userspace => "userspace",
            _ => "kernel",
        }
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn socket_path(&self) -> PathBuf {
        Path::new(RUN_DIR).join(format!("{}.sock", self.name))
    }

    fn answers(&self) -> bool {
        // A helper that stops accepting can make even a connect block, once its
        // backlog is full: on the UAPI thread, bounded like every call.
        let socket = self.socket_path();
        self.uapi
            .call(move || UnixStream::connect(socket).map(drop))
            .is_ok()
    }

    /// Sets the private key and the listen port, then the firewall mark (in a second
    /// update: set with the port, the listen sockets stay unmarked). What the device
    /// already has is not sent again: a new port reopens the sockets of a device that
    /// a restarted agent found carrying traffic.
    ///
    /// # Errors
    /// [`Error::Device`] when the device refuses an update.
    pub fn configure(&self, key: &NodeKey) -> Result<(), Error> {
        let now = self.get()?;
        if now.private_key.as_ref() != Some(key.private()) || now.listen_port != Some(LISTEN_PORT) {
            self.apply(
                DeviceUpdate::new()
                    .set_private_key(key.private().clone())
                    .set_listen_port(LISTEN_PORT),
            )?;
        }
        if now.fwmark != Some(FWMARK) {
            self.apply(DeviceUpdate::new().set_fwmark(FWMARK))?;
        }
        Ok(())
    }

    /// Applies an update: over the UAPI socket, or netlink for a kernel device.
    ///
    /// # Errors
    /// [`Error::Device`].
    pub fn apply(&self, update: DeviceUpdate) -> Result<(), Error> {
        let (iface, backend) = (self.iface, self.backend);
        let result = match backend {
            Backend::Userspace => {
                let socket = self.socket_path();
                self.uapi.call(move || {
                    // Without its socket the control crate would start a userspace
                    // implementation itself: the device is gone, and the stage opens
                    // it again with weft's own helper.
                    UnixStream::connect(&socket).map_err(|e| {
                        std::io::Error::new(
                            e.kind(),
                            format!("the device's UAPI socket is gone ({e})"),
                        )
                    })?;
                    update.apply(&iface, backend)
                })
            }
            _ => self.in_netns(move || update.apply(&iface, backend)),
        };
        result.map_err(|e| Error::Device {
            device: self.name.clone(),
            source: DeviceError::Update(e),
        })
    }

    /// Runs `f` where a kernel device's netlink must be spoken; in place otherwise.
    fn in_netns<T: Send>(
        &self,
        f: impl FnOnce() -> std::io::Result<T> + Send,
    ) -> std::io::Result<T> {
        match (self.backend, &self.netns) {
            (Backend::Userspace, _) | (_, None) => f(),
            (_, Some(ns)) => in_netns(Some(ns), f).map_err(std::io::Error::other)?,
        }
    }

    /// The device as its backend reports it.
    ///
    /// # Errors
    /// [`Error::Device`].
    pub fn get(&self) -> Result<wireguard_control::Device, Error> {
        let (iface, backend) = (self.iface, self.backend);
        let result = match backend {
            Backend::Userspace => self
                .uapi
                .call(move || wireguard_control::Device::get(&iface, backend)),
            _ => self.in_netns(move || wireguard_control::Device::get(&iface, backend)),
        };
        result.map_err(|e| Error::Device {
            device: self.name.clone(),
            source: DeviceError::Get(e),
        })
    }

    /// The device's peers with their AllowedIPs: what a restarted agent restores.
    ///
    /// # Errors
    /// [`Error::Device`].
    pub fn peers(&self) -> Result<Vec<(Key, BTreeSet<Prefix>)>, Error> {
        Ok(self
            .get()?
            .peers
            .into_iter()
            .map(|p| {
                let allowed = p
                    .config
                    .allowed_ips
                    .iter()
                    .filter_map(|a| Prefix::new(a.address, a.cidr))
                    .collect();
                (p.config.public_key, allowed)
            })
            .collect())
    }

    /// Sends `changes` in one UAPI update (one round trip).
    ///
    /// # Errors
    /// [`Error::Device`]; the device may then hold part of the update.
    pub fn apply_changes(&self, changes: &[PeerChange]) -> Result<(), Error> {
        if changes.is_empty() {
            return Ok(());
        }
        let mut update = DeviceUpdate::new();
        for change in changes {
            update = match change {
                PeerChange::Upsert {
                    key,
                    endpoint,
                    allowed_ips,
                    replace_allowed_ips,
                } => {
                    let mut peer = PeerConfigBuilder::new(key);
                    if *replace_allowed_ips {
                        peer = peer.replace_allowed_ips();
                    }
                    if let Some(endpoint) = endpoint {
                        peer = peer.set_endpoint(*endpoint);
                    }
                    for p in allowed_ips {
                        peer = peer.add_allowed_ip(p.addr(), p.prefix_len());
                    }
                    update.add_peer(peer)
                }
                PeerChange::Remove { key } => update.remove_peer_by_key(key),
            };
        }
        self.apply(update)
    }

    /// Stops the helper (the device and its tunnels go with it). For tests and for
    /// uninstalling; a restarting agent never calls it.
    pub fn stop(&self) {
        if self.backend != Backend::Userspace {
            let iface = &self.iface;
            let deleted =
                self.in_netns(move || wireguard_control::backends::kernel::delete_interface(iface));
            if let Err(e) = deleted {
                tracing::warn!(device = %self.name, error = %e, "WireGuard device not deleted");
            }
            return;
        }
        let pid_file = Path::new(RUN_DIR).join(format!("{}.pid", self.name));
        if let Some(pid) = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok())
        {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let _ = std::fs::remove_file(pid_file);
        let _ = std::fs::remove_file(self.socket_path());
        let _ = std::fs::remove_file(Path::new(RUN_DIR).join(format!("{}.log", self.name)));
    }
}
