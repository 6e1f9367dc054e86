//! Hash maps keyed by what remote clusters choose: etcd keys and prefixes, by the
//! hundred thousand.
//!
//! std's SipHash was 8 % of the agent's CPU while it read half a million remote
//! entries (every key hashed on each lookup, and again on each growth of the map). aHash,
//! seeded at random per map as here, is built to resist keys chosen to collide (it was
//! hashbrown's default for that reason) at a fraction of SipHash's cost on short keys.
//!
//! # Example
//! ```
//! let mut prefixes: weft_sys::seeded::HashMap<&str, u32> = Default::default();
//! prefixes.insert("cilium/state/ip/v1/default/10.2.0.7", 7);
//! assert_eq!(prefixes["cilium/state/ip/v1/default/10.2.0.7"], 7);
//! ```

/// A `HashMap` hashed with aHash under a random seed of its own.
pub type HashMap<K, V> = std::collections::HashMap<K, V, ahash::RandomState>;

/// A hash of `value` that stays the same for the life of the process (and differs
/// between processes, so that a remote cluster cannot aim values at one digest).
///
/// # Example
/// ```
/// assert_eq!(weft_sys::seeded::digest(&("10.2.0.7", 7)), weft_sys::seeded::digest(&("10.2.0.7", 7)));
/// ```
pub fn digest<T: std::hash::Hash + ?Sized>(value: &T) -> u64 {
    static STATE: std::sync::LazyLock<ahash::RandomState> =
        std::sync::LazyLock::new(ahash::RandomState::new);
    STATE.hash_one(value)
}
