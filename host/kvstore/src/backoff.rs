//! Exponential back-off for reconnects and retries.

use std::time::Duration;

/// Doubling delays from `min` to `max`, reset after a success.
///
/// # Example
/// ```
/// use std::time::Duration;
/// let mut b = weft_kvstore::Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
/// assert_eq!(b.next_delay(), Duration::from_millis(100));
/// assert_eq!(b.next_delay(), Duration::from_millis(200));
/// b.reset();
/// assert_eq!(b.next_delay(), Duration::from_millis(100));
/// ```
#[derive(Debug, Clone)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    /// Delays from `min`, doubling up to `max`.
    pub fn new(min: Duration, max: Duration) -> Self {
        Self {
            min,
            max,
            next: min,
        }
    }

    /// The delay before the next attempt.
    pub fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        d
    }

    /// Back to the shortest delay, after a success.
    pub fn reset(&mut self) {
        self.next = self.min;
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new(Duration::from_millis(100), Duration::from_secs(10))
    }
}
