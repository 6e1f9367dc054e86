//! The state stage (the `weft-state` crate).

pub use weft_state::{pair_fact, LocalKvStore, State, Totals};
