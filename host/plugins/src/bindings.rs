//! Host bindings generated from the WIT contract: the current one,
//! `plugin-sdk/wit/weft-plugin.wit` (0.2.0), and the previous one, frozen in
//! `plugin-sdk/wit-0.1.0/` (loaded through the adapter in `v0_1`).
#![allow(missing_docs)]

wasmtime::component::bindgen!({
    path: "../../plugin-sdk/wit",
    world: "plugin",
    additional_derives: [PartialEq, Eq, serde::Serialize, serde::Deserialize],
    // Host functions return `wasmtime::Result`: going past a bound fails the call.
    imports: { default: trappable },
});

/// The contract version above (pinned to the WIT file by a test).
pub const VERSION: &str = "0.2.0";

/// `weft:plugin@0.1.0`.
pub mod v0_1 {
    /// This contract version.
    pub const VERSION: &str = "0.1.0";

    wasmtime::component::bindgen!({
        path: "../../plugin-sdk/wit-0.1.0",
        world: "plugin",
        additional_derives: [PartialEq, Eq],
        imports: { default: trappable },
    });
}

#[cfg(test)]
mod tests {
    #[test]
    fn versions_are_the_wit_files_packages() {
        for (dir, version) in [("wit", super::VERSION), ("wit-0.1.0", super::v0_1::VERSION)] {
            let path = format!(
                "{}/../../plugin-sdk/{dir}/weft-plugin.wit",
                env!("CARGO_MANIFEST_DIR")
            );
            let wit = std::fs::read_to_string(&path).unwrap();
            assert!(
                wit.contains(&format!("package weft:plugin@{version};")),
                "{path} is not {version}"
            );
        }
    }
}
