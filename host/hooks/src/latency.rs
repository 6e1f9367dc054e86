//! A latency histogram with fixed buckets, kept by the part that measures (a plugin's
//! record, the agent's waits) and carried in status, so that a scrape and `weftd
//! status` read the same numbers.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Bucket bounds for waits on remote state: 10 ms to 10 minutes, in microseconds.
pub const WAIT_BOUNDS_US: &[u64] = &[
    10_000,
    50_000,
    100_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    30_000_000,
    60_000_000,
    120_000_000,
    300_000_000,
    600_000_000,
];

/// Bucket bounds for plugin calls: 1 µs to 100 ms (a call's deadline is 50 ms by
/// default), in microseconds.
pub const CALL_BOUNDS_US: &[u64] = &[
    1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 5_000, 10_000, 50_000, 100_000,
];

/// Observations counted per bucket, with their sum.
///
/// # Example
/// ```
/// use std::time::Duration;
/// use weft_hooks::{Latency, CALL_BOUNDS_US};
/// let mut l = Latency::new(CALL_BOUNDS_US);
/// l.observe(Duration::from_micros(3));
/// l.observe(Duration::from_secs(1));
/// assert_eq!(l.count(), 2);
/// // By upper bound in seconds: 3 µs in the 5 µs bucket, 1 s in the last one.
/// assert_eq!(l.buckets()[2], (0.000_005, 1));
/// assert_eq!(*l.buckets().last().unwrap(), (f64::INFINITY, 1));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Latency {
    /// Each bucket's upper bound, in microseconds; a last bucket, above them all, is
    /// implicit.
    pub bounds_us: Vec<u64>,
    /// Observations per bucket (not cumulative): one more than `bounds_us`.
    pub counts: Vec<u64>,
    /// The sum of the observations, in microseconds.
    pub sum_us: u64,
}

impl Latency {
    /// An empty histogram with the buckets `bounds_us` (ascending).
    pub fn new(bounds_us: &[u64]) -> Self {
        Self {
            bounds_us: bounds_us.to_vec(),
            counts: vec![0; bounds_us.len() + 1],
            sum_us: 0,
        }
    }

    /// Counts one observation.
    pub fn observe(&mut self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let bucket = self.bounds_us.partition_point(|b| *b < us);
        if let Some(c) = self.counts.get_mut(bucket) {
            *c = c.saturating_add(1);
        }
        self.sum_us = self.sum_us.saturating_add(us);
    }

    /// Observations in all.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The sum, in seconds.
    pub fn sum_seconds(&self) -> f64 {
        self.sum_us as f64 / 1e6
    }

    /// Each bucket's upper bound in seconds (the last `+Inf`) and its own count, not
    /// cumulative: what `prometheus-client` encodes (it accumulates them itself).
    pub fn buckets(&self) -> Vec<(f64, u64)> {
        self.counts
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let bound = self
                    .bounds_us
                    .get(i)
                    .map_or(f64::INFINITY, |b| *b as f64 / 1e6);
                (bound, *c)
            })
            .collect()
    }

    /// The bound under which at least `q` (0–1) of the observations fall, in
    /// microseconds: a histogram's estimate of a quantile; `None` when empty or when it
    /// falls in the last bucket.
    pub fn quantile_bound_us(&self, q: f64) -> Option<u64> {
        let count = self.count();
        if count == 0 {
            return None;
        }
        let wanted = (count as f64 * q).ceil().max(1.0) as u64;
        let mut total = 0;
        for (i, c) in self.counts.iter().enumerate() {
            total += c;
            if total >= wanted {
                return self.bounds_us.get(i).copied();
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_the_first_bucket_whose_bound_holds_them() {
        let mut l = Latency::new(&[10, 100]);
        for us in [0, 10, 11, 100, 101, 5_000] {
            l.observe(Duration::from_micros(us));
        }
        assert_eq!(l.counts, vec![2, 2, 2]);
        assert_eq!(l.sum_us, 5_222);
        assert_eq!(
            l.buckets(),
            vec![(0.000_01, 2), (0.000_1, 2), (f64::INFINITY, 2)]
        );
        assert_eq!(l.quantile_bound_us(0.5), Some(100));
        assert_eq!(l.quantile_bound_us(0.3), Some(10));
        assert_eq!(l.quantile_bound_us(0.99), None, "in the last bucket");
        assert_eq!(Latency::new(&[1]).quantile_bound_us(0.5), None);
    }
}
