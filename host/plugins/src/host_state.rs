//! What a plugin instance may reach: logging, metrics, the mesh view and a clock, and
//! the WASI of [`super::wasi`]. Everything a plugin can make the host keep is bounded
//! ([`Bounds`]); a call that goes past a bound fails with [`LimitExceeded`].

use super::bindings::weft::plugin::{clock, log, mesh, metrics, types};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wasmtime::component::ResourceTable;
use wasmtime::{StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

/// The epoch tick: deadlines are counted in these, by the engine's epoch and by the
/// host's clock ([`HostState::begin_call`]).
pub(crate) const TICK: Duration = Duration::from_millis(1);
// `HostState::call_deadline` counts ticks as milliseconds.
const _: () = assert!(TICK.as_millis() == 1);

/// A deadline in epoch ticks.
pub(crate) fn ticks(d: Duration) -> u64 {
    (d.as_millis() / TICK.as_millis()).max(1) as u64 + 1
}

/// The mesh view a plugin can read.
pub type MeshView = Arc<dyn Fn() -> Vec<weft_hooks::ClusterSync> + Send + Sync>;

/// What one plugin instance may make the host hold or do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bounds {
    /// Linear memory, in bytes, of the instance's one memory.
    pub memory: usize,
    /// Elements of all its wasm tables together.
    pub table_elements: usize,
    /// Host resources (WASI timers, streams) it may hold at once.
    pub resources: usize,
    /// Log lines per call; the rest are dropped and counted (logging never fails a call).
    pub log_lines: u32,
    /// Bytes of log message and fields in the lines logged per call; a call that logs
    /// more fails.
    pub log_bytes: usize,
    /// Distinct counter and gauge names; a new name past it fails the call.
    pub metric_names: usize,
    /// Bytes of one metric name; a longer one fails the call.
    pub metric_name_len: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Self {
            memory: 32 << 20,
            table_elements: 20_000,
            resources: 1_024,
            log_lines: 100,
            log_bytes: 64 << 10,
            metric_names: 64,
            metric_name_len: 128,
        }
    }
}

/// A host-side bound a call went past. The call fails; the instance is replaced.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} over its limit of {limit}")]
pub struct LimitExceeded {
    /// What went over: `log bytes per call`, `metric names`, `metric name bytes`.
    pub what: &'static str,
    /// The bound.
    pub limit: usize,
}

/// The per-instance state behind a plugin's `Store`.
pub struct HostState {
    pub plugin: Arc<str>,
    pub limits: StoreLimits,
    bounds: Bounds,
    wasi: WasiCtx,
    table: ResourceTable,
    mesh: MeshView,
    started: Instant,
    /// The epoch's ticks (milliseconds), and the tick the current call must end by:
    /// WASI waits end there (the `wasi` module).
    clock: Arc<AtomicU64>,
    call_deadline_tick: u64,
    /// Counters and gauges the plugin reported.
    pub counters: BTreeMap<String, u64>,
    pub gauges: BTreeMap<String, i64>,
    /// Set when a counter changes; whoever copies the counters out clears it.
    pub counters_changed: bool,
    /// Log lines in the current call, and how many of them were dropped.
    pub log_lines: u32,
    log_bytes: usize,
}

impl HostState {
    pub fn new(plugin: Arc<str>, bounds: Bounds, mesh: MeshView, clock: Arc<AtomicU64>) -> Self {
        // Standard streams: stdin empty, stdout and stderr discard. No preopens, no
        // environment, no sockets (not linked either).
        let wasi = WasiCtxBuilder::new()
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        let mut table = ResourceTable::new();
        table.set_max_capacity(bounds.resources);
        Self {
            plugin,
            limits: StoreLimitsBuilder::new()
                .memory_size(bounds.memory)
                .table_elements(bounds.table_elements)
                .trap_on_grow_failure(true)
                // A component's core instances: the module and wit-component's shims.
                .instances(8)
                .tables(8)
                .memories(1)
                .build(),
            bounds,
            wasi,
            table,
            mesh,
            started: Instant::now(),
            clock,
            call_deadline_tick: 0,
            counters: BTreeMap::new(),
            gauges: BTreeMap::new(),
            counters_changed: false,
            log_lines: 0,
            log_bytes: 0,
        }
    }

    /// Starts a call that must end within `ticks` epoch ticks.
    pub fn begin_call(&mut self, ticks: u64) {
        self.call_deadline_tick = self.clock.load(Ordering::Relaxed) + ticks;
        self.log_lines = 0;
        self.log_bytes = 0;
    }

    /// When the current call must end, as an instant (read only when a WASI wait asks).
    pub fn call_deadline(&self) -> Instant {
        let left = self
            .call_deadline_tick
            .saturating_sub(self.clock.load(Ordering::Relaxed));
        Instant::now() + Duration::from_millis(left)
    }

    /// Log lines dropped in the current call.
    pub fn dropped_logs(&self) -> u32 {
        self.log_lines.saturating_sub(self.bounds.log_lines)
    }

    fn metric_name(&self, name: &str, known: bool) -> wasmtime::Result<()> {
        if name.len() > self.bounds.metric_name_len {
            return Err(LimitExceeded {
                what: "metric name bytes",
                limit: self.bounds.metric_name_len,
            }
            .into());
        }
        if !known && self.counters.len() + self.gauges.len() >= self.bounds.metric_names {
            return Err(LimitExceeded {
                what: "metric names",
                limit: self.bounds.metric_names,
            }
            .into());
        }
        Ok(())
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl types::Host for HostState {}

impl log::Host for HostState {
    fn log(
        &mut self,
        level: log::Level,
        message: String,
        fields: Vec<(String, String)>,
    ) -> wasmtime::Result<()> {
        self.log_lines += 1;
        if self.log_lines > self.bounds.log_lines {
            return Ok(()); // a flood is cut here, and counted by the caller
        }
        // What would reach the log is bounded: a call that logs more fails.
        self.log_bytes = fields.iter().map(|(k, v)| k.len() + v.len()).fold(
            self.log_bytes.saturating_add(message.len()),
            usize::saturating_add,
        );
        if self.log_bytes > self.bounds.log_bytes {
            return Err(LimitExceeded {
                what: "log bytes per call",
                limit: self.bounds.log_bytes,
            }
            .into());
        }
        let plugin = &*self.plugin;
        let fields = fields
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ");
        match level {
            log::Level::Debug => tracing::debug!(plugin, %fields, "{message}"),
            log::Level::Info => tracing::info!(plugin, %fields, "{message}"),
            log::Level::Warn => tracing::warn!(plugin, %fields, "{message}"),
            log::Level::Error => tracing::error!(plugin, %fields, "{message}"),
        }
        Ok(())
    }
}

impl metrics::Host for HostState {
    fn counter_add(&mut self, name: String, delta: u64) -> wasmtime::Result<()> {
        self.metric_name(&name, self.counters.contains_key(&name))?;
        let c = self.counters.entry(name).or_default();
        *c = c.saturating_add(delta);
        self.counters_changed = true;
        Ok(())
    }

    fn gauge_set(&mut self, name: String, value: i64) -> wasmtime::Result<()> {
        self.metric_name(&name, self.gauges.contains_key(&name))?;
        self.gauges.insert(name, value);
        Ok(())
    }
}

impl mesh::Host for HostState {
    fn status(&mut self) -> wasmtime::Result<Vec<types::ClusterSync>> {
        Ok((self.mesh)().into_iter().map(Into::into).collect())
    }
}

impl clock::Host for HostState {
    fn now_ns(&mut self) -> wasmtime::Result<u64> {
        Ok(u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }
}
