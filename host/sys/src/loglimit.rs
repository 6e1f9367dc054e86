//! A rate limit for log lines that remote input drives (malformed values, refused
//! claims, failed map writes): a cluster writing garbage at etcd's speed must not
//! write the node's log at the same speed. What is held back is counted, and said
//! once the next line is let through.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// At most `burst` lines per `window`; the rest are counted.
///
/// # Example
/// ```
/// use std::time::Duration;
/// use weft_sys::loglimit::LogLimit;
/// let limit = LogLimit::new("malformed values", 2, Duration::from_secs(60));
/// assert!(limit.allow() && limit.allow());
/// assert!(!limit.allow(), "the third in the window is held back");
/// assert_eq!(limit.suppressed(), 1);
/// ```
#[derive(Debug)]
pub struct LogLimit {
    what: &'static str,
    burst: u32,
    window: Duration,
    state: Mutex<Window>,
}

#[derive(Debug)]
struct Window {
    started: Instant,
    lines: u32,
    /// Held back in this window, not yet said.
    held: u64,
    /// Held back since the start.
    suppressed: u64,
}

impl LogLimit {
    /// A limit of `burst` lines of `what` per `window`.
    pub fn new(what: &'static str, burst: u32, window: Duration) -> Self {
        Self {
            what,
            burst,
            window,
            state: Mutex::new(Window {
                started: Instant::now(),
                lines: 0,
                held: 0,
                suppressed: 0,
            }),
        }
    }

    /// The limit the agent uses for remote input: 10 lines a second.
    pub fn per_second(what: &'static str) -> Self {
        Self::new(what, 10, Duration::from_secs(1))
    }

    /// Whether to log one more line. When a new window opens after lines were held
    /// back, says how many first.
    pub fn allow(&self) -> bool {
        let mut w = self.state.lock().expect("log limit lock poisoned");
        if w.started.elapsed() >= self.window {
            if w.held > 0 {
                tracing::warn!(
                    what = self.what,
                    held_back = w.held,
                    "log lines held back by the rate limit"
                );
            }
            w.started = Instant::now();
            w.lines = 0;
            w.held = 0;
        }
        if w.lines < self.burst {
            w.lines += 1;
            true
        } else {
            w.held = w.held.saturating_add(1);
            w.suppressed = w.suppressed.saturating_add(1);
            false
        }
    }

    /// Lines held back since the start.
    pub fn suppressed(&self) -> u64 {
        self.state
            .lock()
            .expect("log limit lock poisoned")
            .suppressed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_window_lets_lines_through_again() {
        let limit = LogLimit::new("x", 3, Duration::from_millis(20));
        let first: Vec<bool> = (0..5).map(|_| limit.allow()).collect();
        assert_eq!(first, [true, true, true, false, false]);
        std::thread::sleep(Duration::from_millis(25)); // the window itself is time
        assert!(limit.allow());
        assert_eq!(limit.suppressed(), 2);
    }
}
