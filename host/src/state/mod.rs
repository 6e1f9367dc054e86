//! The state stage (the `weft-state` crate), and the reflector of this cluster's own
//! kvstore that feeds it.

mod local_kvstore;

pub use local_kvstore::run_local_kvstore;
pub use weft_state::{pair_fact, State, Totals};
