//! Host bindings generated from the WIT contract, `plugin-sdk/wit/weft-plugin.wit`.
#![allow(missing_docs)]

wasmtime::component::bindgen!({
    path: "../plugin-sdk/wit",
    world: "plugin",
    additional_derives: [PartialEq, Eq],
    // Host functions return `wasmtime::Result`: going past a bound fails the call.
    imports: { default: trappable },
});
