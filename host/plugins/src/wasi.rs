//! The WASI a plugin gets: only what a `wasm32-wasip2` component needs to start and to
//! use `std`'s clocks, randomness and standard streams. No filesystem, sockets or name
//! lookup are linked, so a plugin importing them is refused at load, naming the import.
//!
//! Blocking is bounded: WASI's `poll` and `pollable.block` (behind `std::thread::sleep`)
//! wait at most until the current call's deadline, then fail the call as
//! [`super::CallError::Deadline`]. The epoch deadline cannot do this by itself: it
//! interrupts guest code, not a host call the guest is blocked in. The standard
//! streams are empty (stdin) or discard what is written (stdout, stderr), so they never
//! block; the environment and arguments are empty.

use super::host_state::HostState;
use std::time::Instant;
use wasmtime::component::{HasData, Linker, Resource, ResourceTable};
use wasmtime_wasi::cli::{WasiCli, WasiCliView};
use wasmtime_wasi::clocks::{WasiClocks, WasiClocksView};
use wasmtime_wasi::p2::bindings::{cli, clocks, random, sync::io};
use wasmtime_wasi::random::{WasiRandom, WasiRandomView};
use wasmtime_wasi::WasiView;
use wasmtime_wasi_io::bindings::wasi::io::poll as async_poll;
use wasmtime_wasi_io::poll::DynPollable;

/// A host call that would have blocked past the call's deadline. Turned into
/// [`super::CallError::Deadline`] where the call's error is classified.
#[derive(Debug, thiserror::Error)]
#[error("blocked in a WASI call past the call's deadline")]
pub struct BlockedPastDeadline;

/// Adds the plugin's WASI to `linker`.
///
/// # Errors
/// wasmtime's, when an interface cannot be defined.
pub fn add_to_linker(l: &mut Linker<HostState>) -> wasmtime::Result<()> {
    wasmtime_wasi_io::bindings::wasi::io::error::add_to_linker::<HostState, Table>(l, |s| {
        s.ctx().table
    })?;
    io::streams::add_to_linker::<HostState, Table>(l, |s| s.ctx().table)?;
    io::poll::add_to_linker::<HostState, Bounded>(l, |s| {
        let deadline = s.call_deadline();
        BoundedPoll {
            table: s.ctx().table,
            deadline,
        }
    })?;
    clocks::wall_clock::add_to_linker::<HostState, WasiClocks>(
        l,
        <HostState as WasiClocksView>::clocks,
    )?;
    clocks::monotonic_clock::add_to_linker::<HostState, WasiClocks>(
        l,
        <HostState as WasiClocksView>::clocks,
    )?;
    random::random::add_to_linker::<HostState, WasiRandom>(
        l,
        <HostState as WasiRandomView>::random,
    )?;
    random::insecure::add_to_linker::<HostState, WasiRandom>(
        l,
        <HostState as WasiRandomView>::random,
    )?;
    random::insecure_seed::add_to_linker::<HostState, WasiRandom>(
        l,
        <HostState as WasiRandomView>::random,
    )?;
    cli::exit::add_to_linker::<HostState, WasiCli>(l, <HostState as WasiCliView>::cli)?;
    cli::environment::add_to_linker::<HostState, WasiCli>(l, <HostState as WasiCliView>::cli)?;
    cli::stdin::add_to_linker::<HostState, WasiCli>(l, <HostState as WasiCliView>::cli)?;
    cli::stdout::add_to_linker::<HostState, WasiCli>(l, <HostState as WasiCliView>::cli)?;
    cli::stderr::add_to_linker::<HostState, WasiCli>(l, <HostState as WasiCliView>::cli)?;
    cli::terminal_input::add_to_linker::<HostState, WasiCli>(l, <HostState as WasiCliView>::cli)?;
    cli::terminal_output::add_to_linker::<HostState, WasiCli>(l, <HostState as WasiCliView>::cli)?;
    cli::terminal_stdin::add_to_linker::<HostState, WasiCli>(l, <HostState as WasiCliView>::cli)?;
    cli::terminal_stdout::add_to_linker::<HostState, WasiCli>(l, <HostState as WasiCliView>::cli)?;
    cli::terminal_stderr::add_to_linker::<HostState, WasiCli>(l, <HostState as WasiCliView>::cli)?;
    Ok(())
}

/// The resource table, for the interfaces wasmtime-wasi implements on it directly.
struct Table;

impl HasData for Table {
    type Data<'a> = &'a mut ResourceTable;
}

/// `wasi:io/poll`, bounded by the call's deadline.
struct Bounded;

impl HasData for Bounded {
    type Data<'a> = BoundedPoll<'a>;
}

struct BoundedPoll<'a> {
    table: &'a mut ResourceTable,
    deadline: Instant,
}

/// Runs `f`, one of wasmtime-wasi's own waits, for no longer than the call has left.
fn within<T>(
    deadline: Instant,
    f: impl std::future::Future<Output = wasmtime::Result<T>>,
) -> wasmtime::Result<T> {
    let deadline = tokio::time::Instant::from_std(deadline);
    wasmtime_wasi::runtime::in_tokio(async move {
        match tokio::time::timeout_at(deadline, f).await {
            Ok(result) => result,
            Err(_) => Err(wasmtime::Error::new(BlockedPastDeadline)),
        }
    })
}

impl io::poll::Host for BoundedPoll<'_> {
    fn poll(&mut self, pollables: Vec<Resource<DynPollable>>) -> wasmtime::Result<Vec<u32>> {
        within(self.deadline, async_poll::Host::poll(self.table, pollables))
    }
}

impl io::poll::HostPollable for BoundedPoll<'_> {
    fn ready(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<bool> {
        within(
            self.deadline,
            async_poll::HostPollable::ready(self.table, pollable),
        )
    }

    fn block(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<()> {
        within(
            self.deadline,
            async_poll::HostPollable::block(self.table, pollable),
        )
    }

    fn drop(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<()> {
        async_poll::HostPollable::drop(self.table, pollable)
    }
}
