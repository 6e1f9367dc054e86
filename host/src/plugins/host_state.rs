//! What a plugin instance may reach: logging, metrics, the mesh view and a clock; WASI
//! only as far as instantiating a `wasm32-wasip2` component needs (no files, no
//! environment, no network).

use super::bindings::weft::plugin::{clock, log, mesh, metrics, types};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;
use wasmtime::component::ResourceTable;
use wasmtime::{StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

/// The mesh view a plugin can read.
pub type MeshView = Arc<dyn Fn() -> Vec<types::ClusterSync> + Send + Sync>;

/// The per-instance state behind a plugin's `Store`.
pub struct HostState {
    pub plugin: Arc<str>,
    pub limits: StoreLimits,
    wasi: WasiCtx,
    table: ResourceTable,
    mesh: MeshView,
    started: Instant,
    /// Counters and gauges the plugin reported.
    pub counters: BTreeMap<String, u64>,
    pub gauges: BTreeMap<String, i64>,
    /// Log calls in the current hook call; past the budget they are dropped.
    pub log_calls: u32,
    pub log_budget: u32,
}

impl HostState {
    pub fn new(plugin: Arc<str>, memory_cap: usize, mesh: MeshView, log_budget: u32) -> Self {
        let wasi = WasiCtxBuilder::new()
            .allow_tcp(false)
            .allow_udp(false)
            .build();
        Self {
            plugin,
            limits: StoreLimitsBuilder::new()
                .memory_size(memory_cap)
                .trap_on_grow_failure(true)
                .instances(4)
                .tables(16)
                .memories(2)
                .build(),
            wasi,
            table: ResourceTable::new(),
            mesh,
            started: Instant::now(),
            counters: BTreeMap::new(),
            gauges: BTreeMap::new(),
            log_calls: 0,
            log_budget,
        }
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
    fn log(&mut self, level: log::Level, message: String, fields: Vec<(String, String)>) {
        self.log_calls += 1;
        if self.log_calls > self.log_budget {
            return; // a flood is cut here, and counted by the caller
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
    }
}

impl metrics::Host for HostState {
    fn counter_add(&mut self, name: String, delta: u64) {
        let c = self.counters.entry(name).or_default();
        *c = c.saturating_add(delta);
    }

    fn gauge_set(&mut self, name: String, value: i64) {
        self.gauges.insert(name, value);
    }
}

impl mesh::Host for HostState {
    fn status(&mut self) -> Vec<types::ClusterSync> {
        (self.mesh)()
    }
}

impl clock::Host for HostState {
    fn now_ns(&mut self) -> u64 {
        u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}
