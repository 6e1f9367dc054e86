//! What the fault-injection tests share: a seed that replays a run, and a small
//! deterministic generator drawing the faults from it.

use std::time::Duration;

/// The run's seed: `WEFT_FAULT_SEED` when set (a replay), else the clock. Printed, so
/// that a failed run can be replayed.
pub fn seed() -> u64 {
    let seed = std::env::var("WEFT_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    println!("fault injection seed {seed} (WEFT_FAULT_SEED={seed} replays it)");
    seed
}

/// A small deterministic generator (xorshift): the run is replayable from its seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn millis(&mut self, from: u64, to: u64) -> Duration {
        Duration::from_millis(from + self.below(to - from))
    }
}
