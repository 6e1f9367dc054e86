//! weft's end-to-end tests live beside this file, one test binary each (see
//! `Cargo.toml`); the support they share is the `weft-testkit` crate.
