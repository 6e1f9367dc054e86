//! One wasmtime engine for every plugin; each plugin instance in its own `Store` with a
//! memory cap and an epoch deadline per call.

use super::bindings::{self, v0_1};
use super::host_state::{ticks, HostState, MeshView, TICK};
use super::instance::{CallError, Hooks, Instance};
use super::{Config, Error};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Engine, Store};

/// The engine, the linker with the host's imports, and the clock that ends calls.
pub struct Runtime {
    engine: Engine,
    linker: Linker<HostState>,
    config: Config,
    ticking: Arc<AtomicBool>,
    /// The epoch's ticks, readable by the host: a call's deadline in ticks costs no
    /// clock read.
    clock: Arc<AtomicU64>,
}

impl Runtime {
    /// An engine with epoch interruption, and a thread that advances the epoch.
    ///
    /// # Errors
    /// [`Error::Engine`] when wasmtime cannot be set up.
    pub fn new(config: Config) -> Result<Self, Error> {
        let mut wc = wasmtime::Config::new();
        wc.wasm_component_model(true)
            .epoch_interruption(true)
            .allocation_strategy(allocation(&config));
        let engine = Engine::new(&wc).map_err(Error::engine)?;
        let mut linker = Linker::new(&engine);
        super::wasi::add_to_linker(&mut linker).map_err(Error::engine)?;
        // Both contract versions: their interfaces have distinct names (0.1 and 0.2 are
        // not semver-compatible), so one linker serves both.
        bindings::Plugin::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)
            .map_err(Error::engine)?;
        v0_1::Plugin::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)
            .map_err(Error::engine)?;
        let ticking = Arc::new(AtomicBool::new(true));
        let clock = Arc::new(AtomicU64::new(0));
        let (e, t, c) = (engine.clone(), ticking.clone(), clock.clone());
        std::thread::Builder::new()
            .name("weft-plugin-epoch".into())
            .spawn(move || {
                while t.load(Ordering::Relaxed) {
                    std::thread::sleep(TICK);
                    c.fetch_add(1, Ordering::Relaxed);
                    e.increment_epoch();
                }
            })
            .map_err(Error::engine)?;
        Ok(Self {
            engine,
            linker,
            config,
            ticking,
            clock,
        })
    }

    /// The runtime's limits.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The engine (for compiling and caching).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Compiles a component.
    ///
    /// # Errors
    /// [`Error::Compile`] when the bytes are not a valid component.
    pub fn compile(&self, wasm: &[u8]) -> Result<Component, Error> {
        Component::new(&self.engine, wasm).map_err(|e| Error::Compile {
            source: Arc::from(Box::<dyn std::error::Error + Send + Sync>::from(e)),
        })
    }

    /// The `weft:plugin` version `component` exports its hooks at (`0.1.0`), if any.
    pub fn exported_wit(&self, component: &Component) -> Option<String> {
        component
            .component_type()
            .exports(&self.engine)
            .find_map(|(name, _)| name.strip_prefix("weft:plugin/hooks@").map(str::to_owned))
    }

    /// Checks `component` once against the host's imports and the contract's
    /// exports, for plugin `name`: what makes later instantiations fast.
    ///
    /// # Errors
    /// [`Error::Instantiate`]: a missing import or export, or a WIT version this agent
    /// does not speak, said in those words.
    pub fn prepare(&self, name: &str, component: &Component) -> Result<Prepared, Error> {
        let refuse = |e: wasmtime::Error| Error::Instantiate {
            plugin: name.into(),
            misfit: describe_instantiate(component, &e),
        };
        let pre = self.linker.instantiate_pre(component).map_err(refuse)?;
        let pre = match self.exported_wit(component).as_deref() {
            Some(v0_1::VERSION) => HooksPre::V0_1(v0_1::PluginPre::new(pre).map_err(refuse)?),
            _ => HooksPre::Current(bindings::PluginPre::new(pre).map_err(refuse)?),
        };
        Ok(Prepared {
            name: name.into(),
            pre,
        })
    }

    /// Instantiates `component` as plugin `name` and calls its `init` with `config`:
    /// [`Self::prepare`] then [`Self::instantiate_prepared`].
    ///
    /// # Errors
    /// [`Error::Instantiate`] (a missing import or export, a WIT version this agent does
    /// not speak) or [`Error::Init`] (the plugin refused its config, or trapped).
    pub fn instantiate(
        &self,
        name: &str,
        component: &Component,
        plugin_config: &str,
        mesh: MeshView,
    ) -> Result<Instance, Error> {
        self.instantiate_prepared(&self.prepare(name, component)?, plugin_config, mesh)
    }

    /// A new instance of a prepared plugin, its `init` called with `plugin_config`.
    ///
    /// # Errors
    /// [`Error::Instantiate`] when instantiation traps or runs out of time or memory,
    /// [`Error::Init`] when the plugin refuses its config or traps in `init`.
    pub fn instantiate_prepared(
        &self,
        prepared: &Prepared,
        plugin_config: &str,
        mesh: MeshView,
    ) -> Result<Instance, Error> {
        let name = &prepared.name;
        let state = HostState::new(
            name.clone(),
            self.config.bounds.clone(),
            mesh,
            self.clock.clone(),
        );
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limits);
        store.epoch_deadline_trap();
        // Instantiation runs guest code too: it gets the same bound as a call.
        store.set_epoch_deadline(ticks(self.config.deadline));
        store.data_mut().begin_call(ticks(self.config.deadline));
        let hooks = match &prepared.pre {
            HooksPre::Current(pre) => pre.instantiate(&mut store).map(Hooks::Current),
            HooksPre::V0_1(pre) => pre.instantiate(&mut store).map(Hooks::V0_1),
        }
        .map_err(|e| Error::InstantiateFailed {
            plugin: name.to_string(),
            source: CallError::from_wasmtime(&e),
        })?;
        let mut instance = Instance::new(store, hooks, self.config.deadline);
        match instance.init(plugin_config) {
            Ok(Ok(())) => Ok(instance),
            Ok(Err(message)) => Err(Error::Init {
                plugin: name.to_string(),
                message,
            }),
            Err(source) => Err(Error::InitFailed {
                plugin: name.to_string(),
                source,
            }),
        }
    }
}

/// A component checked against the contract, ready to instantiate.
#[derive(Clone)]
pub struct Prepared {
    name: Arc<str>,
    pre: HooksPre,
}

/// A component checked against one version of the contract.
#[derive(Clone)]
enum HooksPre {
    Current(bindings::PluginPre<HostState>),
    V0_1(v0_1::PluginPre<HostState>),
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("name", &self.name)
            .finish()
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.ticking.store(false, Ordering::Relaxed);
    }
}

/// Instances from pools reserved once: a new instance (after a failed call, a reload)
/// costs no `mmap` or page-table setup. Sized for `config.pooled_instances` plugin
/// instances at once, each with one memory of the instance's cap; an instantiation
/// past that fails like any other (the plugin's call fails, the default answers).
/// Without pooled instances, each instance maps its own.
fn allocation(config: &Config) -> wasmtime::InstanceAllocationStrategy {
    let n = config.pooled_instances;
    if n == 0 {
        return wasmtime::InstanceAllocationStrategy::OnDemand;
    }
    let mut p = wasmtime::PoolingAllocationConfig::default();
    p.total_component_instances(n)
        // A component's core instances: the module and wit-component's shims.
        .total_core_instances(n * 8)
        .total_memories(n)
        .total_tables(n * 8)
        .max_memories_per_component(1)
        .max_tables_per_component(8)
        .max_memory_size(config.bounds.memory)
        // Reset by memset, not madvise, for what an instance of a small plugin
        // touches: no page faults when its slot is reused.
        .linear_memory_keep_resident(KEEP_RESIDENT)
        .table_keep_resident(KEEP_RESIDENT)
        .table_elements(config.bounds.table_elements);
    wasmtime::InstanceAllocationStrategy::Pooling(p)
}

/// Bytes of a pooled memory or table reset by `memset` on reuse.
const KEEP_RESIDENT: usize = 128 << 10;

/// The functions of `weft:plugin/hooks`, as the WIT names them.
const HOOKS: [&str; 8] = [
    "init",
    "on-identities-synced",
    "on-nodes-synced",
    "on-ipcache-synced",
    "on-services-synced",
    "on-cluster-disconnected",
    "regeneration-policy",
    "peer-gc-policy",
];

/// Says what does not fit: another WIT version, a missing interface, missing
/// functions, or (wasmtime's words) a function of the wrong type.
fn describe_instantiate(component: &Component, e: &wasmtime::Error) -> String {
    use wasmtime::component::types::ComponentItem;
    let engine = component.engine();
    // An import outside the sandbox: say which, and that it is deliberate.
    let denied: Vec<String> = component
        .component_type()
        .imports(engine)
        .map(|(name, _)| name.to_owned())
        .filter(|name| {
            ["wasi:filesystem/", "wasi:sockets/", "wasi:http/"]
                .iter()
                .any(|p| name.starts_with(p))
        })
        .collect();
    if !denied.is_empty() {
        return format!(
            "imports {}, which the plugin sandbox does not provide (no filesystem, network or sockets)",
            denied.join(", ")
        );
    }
    let ours = format!("weft:plugin/hooks@{}", bindings::VERSION);
    let ours_old = format!("weft:plugin/hooks@{}", v0_1::VERSION);
    let ty = component.component_type();
    let exports: Vec<(String, ComponentItem)> = ty
        .exports(engine)
        .map(|(name, item)| (name.to_owned(), item.ty))
        .collect();
    match exports
        .iter()
        .find(|(n, _)| n.starts_with("weft:plugin/hooks@"))
    {
        Some((other, _)) if *other != ours && *other != ours_old => {
            format!(
                "incompatible WIT version: the plugin exports {other}, this agent speaks {ours} and {ours_old}"
            )
        }
        None => {
            let names: Vec<&str> = exports.iter().map(|(n, _)| n.as_str()).collect();
            format!("missing export {ours} (the plugin exports {names:?})")
        }
        Some((exported, ComponentItem::ComponentInstance(hooks))) => {
            let present: Vec<&str> = hooks.exports(engine).map(|(n, _)| n).collect();
            let expected = if *exported == ours {
                &HOOKS[..]
            } else {
                &HOOKS[..7] // 0.1.0 has no peer-gc-policy
            };
            let missing: Vec<&str> = expected
                .iter()
                .copied()
                .filter(|h| !present.contains(h))
                .collect();
            if missing.is_empty() {
                format!("{exported} does not match the contract: {e:#}")
            } else {
                format!("missing export {} in {exported}", missing.join(", "))
            }
        }
        Some((exported, _)) => format!("{exported} is not an interface instance: {e:#}"),
    }
}
