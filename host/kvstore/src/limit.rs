//! Requests in flight and requests per second, shared by every request of a client.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// The limits of one client: a semaphore for requests in flight and a token bucket
/// for the request rate. Either may be off.
#[derive(Debug, Clone, Default)]
pub struct Limits {
    in_flight: Option<Arc<Semaphore>>,
    rate: Option<Arc<TokenBucket>>,
}

/// Held while a request is in flight.
#[derive(Debug)]
pub struct Permit(#[allow(dead_code)] Option<OwnedSemaphorePermit>);

impl Limits {
    /// `max_in_flight` requests at once and `qps` per second; 0 turns either off.
    pub fn new(max_in_flight: usize, qps: f64) -> Self {
        Self {
            in_flight: (max_in_flight > 0).then(|| Arc::new(Semaphore::new(max_in_flight))),
            rate: (qps > 0.0).then(|| Arc::new(TokenBucket::new(qps))),
        }
    }

    /// Waits for a rate token and an in-flight slot.
    pub async fn acquire(&self) -> Permit {
        if let Some(rate) = &self.rate {
            rate.take().await;
        }
        match &self.in_flight {
            // The semaphore is never closed.
            Some(s) => Permit(s.clone().acquire_owned().await.ok()),
            None => Permit(None),
        }
    }
}

/// A token bucket that hands out reservations: a caller takes a token even when the
/// bucket is empty and sleeps until its token would have been there, so callers are
/// served in order and nobody spins.
#[derive(Debug)]
struct TokenBucket {
    rate: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl TokenBucket {
    fn new(rate: f64) -> Self {
        let burst = rate.max(1.0);
        Self {
            rate,
            burst,
            state: Mutex::new((burst, Instant::now())),
        }
    }

    async fn take(&self) {
        let wait = {
            let mut state = self.state.lock().expect("token bucket lock poisoned");
            let now = Instant::now();
            let refill = now.duration_since(state.1).as_secs_f64() * self.rate;
            state.0 = (state.0 + refill).min(self.burst) - 1.0;
            state.1 = now;
            state.0
        };
        if wait < 0.0 {
            tokio::time::sleep(Duration::from_secs_f64(-wait / self.rate)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn rate_limit_spaces_requests_after_the_burst() {
        let limits = Limits::new(0, 10.0);
        let start = Instant::now();
        for _ in 0..10 {
            limits.acquire().await;
        }
        assert_eq!(start.elapsed(), Duration::ZERO, "the burst is free");
        for _ in 0..10 {
            limits.acquire().await;
        }
        let elapsed = start.elapsed();
        assert!(
            elapsed >= Duration::from_millis(990) && elapsed <= Duration::from_millis(1010),
            "10 more at 10 qps take one second, took {elapsed:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn zero_means_no_limit() {
        let limits = Limits::new(0, 0.0);
        let start = Instant::now();
        for _ in 0..10_000 {
            limits.acquire().await;
        }
        assert_eq!(start.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn in_flight_limit_blocks_the_next_request() {
        let limits = Limits::new(2, 0.0);
        let a = limits.acquire().await;
        let _b = limits.acquire().await;
        let third = tokio::time::timeout(Duration::from_millis(50), limits.acquire()).await;
        assert!(
            third.is_err(),
            "a third request must wait while two are in flight"
        );
        drop(a);
        tokio::time::timeout(Duration::from_secs(5), limits.acquire())
            .await
            .expect("a slot frees when a request ends");
    }
}
