//! The BPF datapath: the programs of `bpf/` loaded with aya, the ipcache map kept equal
//! to the resolved ipcache, and map generations.
//!
//! Everything lives under a bpffs directory (`/sys/fs/bpf/weft` in production):
//!
//! ```text
//! weft_config            the config map, shared by every generation (pinned by name)
//! gen-<N>/weft_ipcache   generation N's ipcache: the LPM trie (CIDRs)
//! gen-<N>/weft_ipcache_hosts  ... and the hash map (/32, /128)
//! gen-<N>/weft_to_netdev generation N's program, which reads that map
//! links/<endpoint>       an endpoint's TCX link: which generation serves it
//! ```
//!
//! **Generations**: on start the agent loads a new generation with an empty map and
//! fills it from the ipcache, while the links pinned by the previous agent keep
//! running the previous generation's program and map. Switching an endpoint is an
//! explicit step ([`Datapath::switch`], after the endpoint's wait): the link is updated
//! to the new program in one `BPF_LINK_UPDATE`, so a packet sees either the old
//! program with the old map or the new with the new, never a half-filled map. A
//! generation no link uses any more is unpinned, and the kernel frees it.
//!
//! Owns: the BPF programs (compiled from `bpf/` by the build script, embedded), their
//! maps and pins, the struct layouts shared with the C side (`layout`, pinned by
//! tests), generations and per-device switching, and the endpoint policy maps.
//! Must not know: etcd, the cluster mesh, plugins, WireGuard or the agent: it reads
//! the state stage (`weft-state`: the ipcache's changes, endpoint policies) and runs in
//! network namespaces through `weft-sys`.

#![deny(unsafe_code)]
#![warn(missing_docs)]

mod dump;
mod endpoint;
mod layout;
mod map_writer;
mod node;
mod objects;

pub use dump::{read_ipcache, MapDump, MapEntry};
pub use endpoint::{policy_entries, FROM_ENDPOINT, MAX_POLICY_ENTRIES, TO_ENDPOINT};
pub use layout::{
    ipcache_key, prefix_of, DatapathConfig, EndpointInfo, IpcacheKey, IpcacheKeyData, PolicyKey,
    RemoteEndpointInfo, CONFIG_NODE_ENCRYPTION, DIR_EGRESS, DIR_INGRESS, ENDPOINT_EGRESS_ENFORCED,
    ENDPOINT_INGRESS_ENFORCED, FAMILY_IPV4, FAMILY_IPV6, FLAG_TUNNEL_V6, IPCACHE_MAX_ENTRIES,
    KEY_FIXED_BITS,
};
pub use map_writer::{IpcacheMap, IpcacheMaps, MapWriter, WriterStats};
pub use node::{DatapathStatus, EndpointStatus, NodeDatapath, NodeDatapathConfig};
pub use objects::{BASELINE_OBJECT, GENERATION_OBJECT};
use weft_sys::netns::in_netns;

use aya::maps::{Array, LpmTrie, MapData};
use aya::programs::links::{FdLink, PinnedLink};
use aya::programs::tc::SchedClassifierLink;
use aya::programs::{SchedClassifier, TcAttachType};
use aya::{Ebpf, EbpfLoader};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The program's name in `bpf/to_netdev.c`.
pub const TO_NETDEV: &str = "weft_to_netdev";
const IPCACHE_MAP: &str = "weft_ipcache";
const IPCACHE_HOSTS_MAP: &str = "weft_ipcache_hosts";
const CONFIG_MAP: &str = "weft_config";

/// What can go wrong in the datapath.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The datapath's directory is not on a bpffs, and none can be mounted for it.
    #[error("bpffs directory {}: not on a bpffs (mount -t bpf bpf {BPFFS})", path.display())]
    NotBpffs {
        /// The directory.
        path: PathBuf,
    },
    /// A bpffs could not be mounted at `/sys/fs/bpf` for the datapath's directory.
    #[error("bpffs directory {}: mounting a bpffs at {BPFFS}", path.display())]
    Mount {
        /// The directory.
        path: PathBuf,
        /// The kernel's answer.
        #[source]
        source: nix::Error,
    },
    /// A directory of the datapath could not be made.
    #[error("bpffs directory {}", path.display())]
    Dir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// No generation, or not the one asked for, is pinned under the directory.
    #[error("bpffs directory {}: {}", root.display(), match generation {
        Some(g) => format!("no generation {g} pinned"),
        None => "no generation pinned".to_owned(),
    })]
    NoGeneration {
        /// The datapath's directory.
        root: PathBuf,
        /// The generation asked for; `None`: the newest.
        generation: Option<u64>,
    },
    /// The BPF object could not be loaded (verifier, permissions).
    #[error("cannot load the BPF object")]
    Load(#[source] aya::EbpfError),
    /// The BPF object has no map of this name (it and the loader disagree).
    #[error("the BPF object has no map {name}")]
    MissingMap {
        /// The map.
        name: &'static str,
    },
    /// The BPF object has no program of this name.
    #[error("the BPF object has no program {name}")]
    MissingProgram {
        /// The program.
        name: String,
    },
    /// A program could not be typed, loaded, inspected or run.
    #[error("BPF program {name}: {step}")]
    Program {
        /// The program.
        name: String,
        /// What failed: `type`, `load`, `info`, `test run`.
        step: &'static str,
        /// aya's error.
        #[source]
        source: aya::programs::ProgramError,
    },
    /// A program or map could not be pinned.
    #[error("pinning {}", path.display())]
    Pin {
        /// The pin.
        path: PathBuf,
        /// aya's error.
        #[source]
        source: aya::pin::PinError,
    },
    /// A map could not be opened, typed, read or written.
    #[error("BPF map {map}")]
    Map {
        /// The map (its pin's path when it was opened from one).
        map: String,
        /// aya's error.
        #[source]
        source: aya::maps::MapError,
    },
    /// A pinned ipcache map holds a key weft never writes.
    #[error("BPF map {map}: a key weft does not write: family {family}, length {prefix_len}")]
    ForeignKey {
        /// The map.
        map: String,
        /// The key's address family.
        family: u8,
        /// The key's prefix length.
        prefix_len: u32,
    },
    /// An endpoint's policy needs more entries than the policy map holds per endpoint.
    #[error(
        "endpoint ifindex {ifindex}: its policy needs more than {max} entries (wide port ranges)"
    )]
    PolicyTooLarge {
        /// The endpoint's host-side ifindex.
        ifindex: u32,
        /// The most entries an endpoint may have.
        max: usize,
    },
    /// The device to attach to is not there.
    #[error("endpoint {device}: no such device")]
    NoDevice {
        /// The device.
        device: String,
        /// The kernel's answer.
        #[source]
        source: nix::Error,
    },
    /// Attaching, switching or detaching an endpoint's program failed.
    #[error("endpoint {endpoint}: {step}")]
    Endpoint {
        /// The endpoint.
        endpoint: String,
        /// What failed: `attach to DEVICE`, `link update`, `pin`, `not attached`, ….
        step: String,
        /// aya's (or the system's) error: program, link and pin errors each have
        /// their own type.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A network namespace could not be entered.
    #[error(transparent)]
    Netns(#[from] weft_sys::netns::NetnsError),
}

/// Where a program is attached: a device, in a network namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// A name unique on the node (the link's pin is named after it).
    pub name: String,
    /// The network namespace (`/run/netns/NAME`, `/proc/PID/ns/net`); `None` for the
    /// agent's own.
    pub netns: Option<PathBuf>,
    /// The device, egress.
    pub device: String,
}

/// One generation: its programs and the maps they read.
struct Generation {
    id: u64,
    /// Holds the loaded programs.
    ebpf: Ebpf,
    ipcache: IpcacheMap,
    endpoints: endpoint::EndpointMaps,
}

/// The datapath of a node: the shared config, the current generation, and the
/// endpoints' links.
pub struct Datapath {
    root: PathBuf,
    config: Array<MapData, DatapathConfig>,
    current: Generation,
    /// The program each pinned link runs, by link name: read from the pins once at
    /// open, then kept by this value's switches and detaches, so that a switch does
    /// not read every link again (a restart switches every endpoint).
    linked: HashMap<String, u32>,
}

impl std::fmt::Debug for Datapath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Datapath")
            .field("root", &self.root)
            .field("generation", &self.current.id)
            .finish_non_exhaustive()
    }
}

impl Datapath {
    /// Opens the datapath under `root` (on a bpffs) and loads a new generation with an
    /// empty ipcache map. Links and generations already pinned there keep running.
    ///
    /// # Errors
    /// [`Error::NotBpffs`], [`Error::Mount`] or [`Error::Dir`] for the directory;
    /// [`Error::Load`], [`Error::MissingMap`], [`Error::Pin`] or [`Error::Map`] for
    /// the object.
    pub fn open(root: &Path) -> Result<Self, Error> {
        let make_dir = |path: PathBuf| {
            std::fs::create_dir_all(&path).map_err(|source| Error::Dir { path, source })
        };
        ensure_bpffs(root)?;
        make_dir(root.join("links"))?;
        let id = generations(root).keys().max().map_or(1, |n| n + 1);
        let dir = root.join(format!("gen-{id}"));
        make_dir(dir.clone())?;
        let mut ebpf = EbpfLoader::new()
            .default_map_pin_directory(root)
            .load(GENERATION_OBJECT)
            .map_err(Error::Load)?;
        let map_err = |map: &str| {
            let map = map.to_owned();
            move |source| Error::Map { map, source }
        };
        let mut take_pinned = |name: &'static str| {
            let map = ebpf.take_map(name).ok_or(Error::MissingMap { name })?;
            let path = dir.join(name);
            map.pin(&path)
                .map_err(|source| Error::Pin { path, source })?;
            Ok::<_, Error>(map)
        };
        let prefixes =
            LpmTrie::try_from(take_pinned(IPCACHE_MAP)?).map_err(map_err(IPCACHE_MAP))?;
        let hosts = take_pinned(IPCACHE_HOSTS_MAP)?;
        let hosts = aya::maps::HashMap::try_from(hosts).map_err(map_err(IPCACHE_HOSTS_MAP))?;
        let endpoints = endpoint::EndpointMaps {
            endpoints: aya::maps::HashMap::try_from(take_pinned(endpoint::ENDPOINTS_MAP)?)
                .map_err(map_err(endpoint::ENDPOINTS_MAP))?,
            policy: aya::maps::HashMap::try_from(take_pinned(endpoint::POLICY_MAP)?)
                .map_err(map_err(endpoint::POLICY_MAP))?,
        };
        let config = ebpf
            .take_map(CONFIG_MAP)
            .ok_or(Error::MissingMap { name: CONFIG_MAP })?;
        let config = Array::try_from(config).map_err(map_err(CONFIG_MAP))?;
        program(&mut ebpf, &dir, TO_NETDEV)?;
        tracing::info!(root = %root.display(), generation = id, "datapath generation loaded");
        let linked = links(root)
            .iter()
            .filter_map(|p| Some((p.file_name()?.to_str()?.to_owned(), link_program(p)?)))
            .collect();
        let mut datapath = Self {
            root: root.into(),
            config,
            current: Generation {
                id,
                ebpf,
                ipcache: Arc::new(Mutex::new(IpcacheMaps { hosts, prefixes })),
                endpoints,
            },
            linked,
        };
        datapath.release_unused();
        Ok(datapath)
    }

    /// The bpffs directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The current (newest) generation.
    pub fn generation(&self) -> u64 {
        self.current.id
    }

    /// The current generation's ipcache map, for the [`MapWriter`].
    pub fn ipcache_map(&self) -> IpcacheMap {
        self.current.ipcache.clone()
    }

    /// Sets the config every generation reads.
    ///
    /// # Errors
    /// [`Error::Map`].
    pub fn set_config(&mut self, config: DatapathConfig) -> Result<(), Error> {
        self.config.set(0, config, 0).map_err(|source| Error::Map {
            map: CONFIG_MAP.into(),
            source,
        })
    }

    /// The names of the endpoints with a pinned link, sorted.
    pub fn linked(&self) -> Vec<String> {
        let mut names: Vec<String> = links(&self.root)
            .iter()
            .filter_map(|p| Some(p.file_name()?.to_string_lossy().into_owned()))
            .collect();
        names.sort();
        names
    }

    fn link_path(&self, endpoint: &str) -> PathBuf {
        self.root.join("links").join(endpoint)
    }

    /// Switches `endpoint` to the current generation: its existing link is updated
    /// atomically, or a new TCX egress link is made on its device and pinned. Then
    /// generations no link uses are released.
    ///
    /// # Errors
    /// [`Error::Endpoint`] or [`Error::Netns`].
    pub fn switch(&mut self, endpoint: &Endpoint) -> Result<(), Error> {
        self.switch_program(endpoint, TO_NETDEV, TcAttachType::Egress)
    }

    /// [`Self::switch`] for the current generation's program `name`, attached on
    /// `attach` (the endpoint programs: [`FROM_ENDPOINT`] on ingress, [`TO_ENDPOINT`]
    /// on egress of an endpoint's host side). The program is loaded and pinned in its
    /// generation on first use.
    ///
    /// # Errors
    /// [`Error::Endpoint`], [`Error::Load`] or [`Error::Netns`].
    pub fn switch_program(
        &mut self,
        endpoint: &Endpoint,
        name: &str,
        attach: TcAttachType,
    ) -> Result<(), Error> {
        let bad = |step: String| {
            let endpoint = endpoint.name.clone();
            move |e: Box<dyn std::error::Error + Send + Sync>| Error::Endpoint {
                endpoint,
                step,
                source: e,
            }
        };
        let path = self.link_path(&endpoint.name);
        let program = self.program(name)?;
        let program_id = program
            .info()
            .map_err(|source| Error::Program {
                name: name.into(),
                step: "info",
                source,
            })?
            .id();
        match PinnedLink::from_pin(&path) {
            Ok(pinned) => {
                let link = SchedClassifierLink::try_from(FdLink::from(pinned))
                    .map_err(|e| bad("pinned link is not a TCX link".into())(e.into()))?;
                let id = program
                    .attach_to_link(link)
                    .map_err(|e| bad("link update".into())(e.into()))?;
                // The pin still names the same (updated) link: the fd can go.
                drop(program.take_link(id));
            }
            Err(_) => {
                let device = endpoint.device.clone();
                let id = in_netns(endpoint.netns.as_deref(), || {
                    program.attach(&device, attach)
                })?
                .map_err(|e| bad(format!("attach to {device}"))(e.into()))?;
                let link = program
                    .take_link(id)
                    .map_err(|e| bad("take link".into())(e.into()))?;
                let link = FdLink::try_from(link).map_err(|e| bad("fd link".into())(e.into()))?;
                link.pin(&path).map_err(|e| bad("pin".into())(e.into()))?;
            }
        }
        tracing::info!(endpoint = %endpoint.name, generation = self.current.id, "endpoint switched");
        let before = self.linked.insert(endpoint.name.clone(), program_id);
        if let Some(before) = before.filter(|b| *b != program_id) {
            self.release_if_unused(before);
        }
        Ok(())
    }

    /// Which generation serves `endpoint`, if it is attached.
    pub fn generation_of(&self, endpoint: &str) -> Option<u64> {
        let program = link_program(&self.link_path(endpoint))?;
        program_generations(&self.root)
            .into_iter()
            .find(|(_, p)| *p == program)
            .map(|(g, _)| g)
    }

    /// Runs the current generation's program on `packet` (an Ethernet frame) with
    /// `mark` in the skb, `repeat` times (`BPF_PROG_TEST_RUN`): its action
    /// (`TC_ACT_OK` 0, `TC_ACT_REDIRECT` 7) and the kernel's average time per run.
    ///
    /// # Errors
    /// [`Error::Program`] when the program does not load or the kernel refuses the run.
    pub fn test_run(&mut self, packet: &[u8], mark: u32, repeat: u32) -> Result<TestRun, Error> {
        test_run(self.program(TO_NETDEV)?, packet, mark, repeat)
    }

    /// Writes endpoint `ifindex`'s identity and policy into the current generation
    /// (see [`policy_entries`]).
    ///
    /// # Errors
    /// [`Error::Map`] when the kernel refuses a write.
    pub fn set_endpoint(
        &mut self,
        ifindex: u32,
        info: EndpointInfo,
        keys: &std::collections::BTreeSet<PolicyKey>,
    ) -> Result<(), Error> {
        self.current.endpoints.set(ifindex, info, keys)
    }

    /// Forgets endpoint `ifindex` in the current generation.
    pub fn remove_endpoint(&mut self, ifindex: u32) {
        self.current.endpoints.remove(ifindex);
    }

    /// Runs the current generation's endpoint program `program` ([`FROM_ENDPOINT`] or
    /// [`TO_ENDPOINT`]) on `packet`, as seen on the host side with ifindex `ifindex`
    /// (a device of this namespace: 1, the loopback, in tests), `repeat` times.
    ///
    /// # Errors
    /// [`Error::Program`] when the program does not load or the kernel refuses the run.
    pub fn test_run_endpoint(
        &mut self,
        program: &str,
        packet: &[u8],
        ifindex: u32,
        repeat: u32,
    ) -> Result<TestRun, Error> {
        test_run_on(self.program(program)?, packet, 0, ifindex, repeat)
    }

    /// The current generation's program `name`, loaded and pinned in its generation's
    /// directory on first use (the pins are how generations know their programs).
    fn program(&mut self, name: &str) -> Result<&mut SchedClassifier, Error> {
        let dir = self.root.join(format!("gen-{}", self.current.id));
        program(&mut self.current.ebpf, &dir, name)
    }

    /// Detaches `endpoint`: its link is unpinned and closed.
    ///
    /// # Errors
    /// [`Error::Endpoint`] when it was not attached.
    pub fn detach(&mut self, endpoint: &str) -> Result<(), Error> {
        let pinned =
            PinnedLink::from_pin(self.link_path(endpoint)).map_err(|e| Error::Endpoint {
                endpoint: endpoint.into(),
                step: "not attached".into(),
                source: e.into(),
            })?;
        drop(pinned.unpin().map_err(|e| Error::Endpoint {
            endpoint: endpoint.into(),
            step: "unpin".into(),
            source: e.into(),
        })?);
        if let Some(before) = self.linked.remove(endpoint) {
            self.release_if_unused(before);
        }
        Ok(())
    }

    /// Releases the generation of `program` (no longer run by a link that ran it) if
    /// no other link runs one of its programs and it is not the current one.
    fn release_if_unused(&mut self, program: u32) {
        let programs = program_generations(&self.root);
        let Some(generation) = programs
            .iter()
            .find(|(_, p)| *p == program)
            .map(|(g, _)| *g)
        else {
            return;
        };
        let still_used = self
            .linked
            .values()
            .any(|p| programs.iter().any(|(g, q)| *g == generation && q == p));
        if generation != self.current.id && !still_used {
            let _ = std::fs::remove_dir_all(self.root.join(format!("gen-{generation}")));
            tracing::info!(generation, "datapath generation released");
        }
    }

    /// Unpins every generation other than the current one that no link runs; the
    /// kernel frees its program and map once nothing holds them. Returns them.
    pub fn release_unused(&mut self) -> Vec<u64> {
        let in_use: Vec<u32> = links(&self.root)
            .iter()
            .filter_map(|p| link_program(p))
            .collect();
        let used: std::collections::BTreeSet<u64> = program_generations(&self.root)
            .into_iter()
            .filter(|(_, program)| in_use.contains(program))
            .map(|(id, _)| id)
            .collect();
        let mut released = Vec::new();
        for id in generations(&self.root).into_keys() {
            if id != self.current.id
                && !used.contains(&id)
                && self.root.join(format!("gen-{id}")).join(TO_NETDEV).exists()
            {
                let _ = std::fs::remove_dir_all(self.root.join(format!("gen-{id}")));
                tracing::info!(generation = id, "datapath generation released");
                released.push(id);
            }
        }
        // A generation directory whose program pin is gone is debris of a crash.
        for (id, dir) in generations(&self.root) {
            if id != self.current.id && !dir.join(TO_NETDEV).exists() {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
        released
    }

    /// Removes everything under `root`: links (detaching them), generations and the
    /// config. For tests and for uninstalling.
    pub fn remove_all(root: &Path) {
        for link in links(root) {
            if let Ok(p) = PinnedLink::from_pin(&link) {
                let _ = p.unpin();
            }
        }
        let _ = std::fs::remove_dir_all(root);
    }
}

/// One `BPF_PROG_TEST_RUN`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TestRun {
    /// The program's return value.
    pub action: u32,
    /// The kernel's average per run.
    pub duration: std::time::Duration,
}

/// `TC_ACT_OK`.
pub const TC_ACT_OK: u32 = 0;
/// `TC_ACT_REDIRECT`.
pub const TC_ACT_REDIRECT: u32 = 7;

/// Runs a loaded tc program on `packet` with `mark` (see [`Datapath::test_run`]).
///
/// # Errors
/// [`Error::Program`] when the kernel refuses the run.
pub fn test_run(
    program: &SchedClassifier,
    packet: &[u8],
    mark: u32,
    repeat: u32,
) -> Result<TestRun, Error> {
    test_run_on(program, packet, mark, 0, repeat)
}

/// [`test_run`] on the device with ifindex `ifindex` (0: the kernel's default).
fn test_run_on(
    program: &SchedClassifier,
    packet: &[u8],
    mark: u32,
    ifindex: u32,
    repeat: u32,
) -> Result<TestRun, Error> {
    use aya::programs::{TestRun as _, TestRunOptions};
    // `struct __sk_buff` up to `ifindex` (len, pkt_type, mark, …, ingress_ifindex,
    // ifindex at 40): the kernel takes what is not given as zero, and allows only
    // these fields to be set.
    let mut ctx = [0u8; 44];
    ctx[8..12].copy_from_slice(&mark.to_ne_bytes());
    ctx[40..44].copy_from_slice(&ifindex.to_ne_bytes());
    let mut opts = TestRunOptions::new();
    opts.data_in = Some(packet);
    opts.ctx_in = Some(&ctx);
    opts.repeat = repeat;
    let r = program.test_run(opts).map_err(|source| Error::Program {
        name: program.info().map_or_else(
            |_| "?".into(),
            |i| i.name_as_str().unwrap_or("?").to_owned(),
        ),
        step: "test run",
        source,
    })?;
    Ok(TestRun {
        action: r.return_value,
        duration: r.duration,
    })
}

/// Where the kernel's bpffs is mounted by convention.
const BPFFS: &str = "/sys/fs/bpf";

fn is_bpffs(path: &Path) -> bool {
    nix::sys::statfs::statfs(path)
        .is_ok_and(|fs| fs.filesystem_type() == nix::sys::statfs::BPF_FS_MAGIC)
}

/// Checks that `root` is (or will be) on a bpffs, mounting one at `/sys/fs/bpf` when
/// `root` is below it and nothing is mounted there yet, as an agent on a fresh node
/// must.
fn ensure_bpffs(root: &Path) -> Result<(), Error> {
    // Two datapaths opening at once must not mount twice.
    static MOUNTING: Mutex<()> = Mutex::new(());
    let _guard = MOUNTING.lock().unwrap_or_else(|e| e.into_inner());
    let existing = root
        .ancestors()
        .find(|p| p.exists())
        .unwrap_or(Path::new("/"));
    if is_bpffs(existing) {
        return Ok(());
    }
    if root.starts_with(BPFFS) && Path::new(BPFFS).is_dir() {
        nix::mount::mount(
            Some("bpf"),
            BPFFS,
            Some("bpf"),
            nix::mount::MsFlags::empty(),
            None::<&str>,
        )
        .map_err(|source| Error::Mount {
            path: root.into(),
            source,
        })?;
        tracing::info!("mounted a bpffs at {BPFFS}");
        return Ok(());
    }
    Err(Error::NotBpffs { path: root.into() })
}

/// Program `name` of `ebpf`, loaded and pinned in `dir` on first use.
fn program<'a>(
    ebpf: &'a mut Ebpf,
    dir: &Path,
    name: &str,
) -> Result<&'a mut SchedClassifier, Error> {
    let program: &mut SchedClassifier = ebpf
        .program_mut(name)
        .ok_or_else(|| Error::MissingProgram { name: name.into() })?
        .try_into()
        .map_err(|source| Error::Program {
            name: name.into(),
            step: "type",
            source,
        })?;
    if program.fd().is_err() {
        program.load().map_err(|source| Error::Program {
            name: name.into(),
            step: "load",
            source,
        })?;
        let path = dir.join(name);
        program
            .pin(&path)
            .map_err(|source| Error::Pin { path, source })?;
    }
    Ok(program)
}

/// The generation directories under `root`, by number.
fn generations(root: &Path) -> BTreeMap<u64, PathBuf> {
    std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let id = name.strip_prefix("gen-")?.parse().ok()?;
            Some((id, e.path()))
        })
        .collect()
}

/// Each generation's program IDs, from its pinned programs.
fn program_generations(root: &Path) -> Vec<(u64, u32)> {
    generations(root)
        .into_iter()
        .flat_map(|(id, dir)| {
            [TO_NETDEV, FROM_ENDPOINT, TO_ENDPOINT]
                .into_iter()
                .filter_map(move |name| {
                    let p = SchedClassifier::from_pin(dir.join(name)).ok()?;
                    Some((id, p.info().ok()?.id()))
                })
        })
        .collect()
}

fn links(root: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(root.join("links"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect()
}

/// The program a pinned link runs.
fn link_program(path: &Path) -> Option<u32> {
    let link = FdLink::from(PinnedLink::from_pin(path).ok()?);
    Some(link.info().ok()?.program_id())
}
