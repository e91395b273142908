//! What to do with the `n`th request in flight: admit it, delay it, or refuse it.

use std::time::Duration;

use sluice_core::Flow;

/// `conn`, `burst` and the delay: what to do with the `n`th request in flight.
#[derive(Clone, Copy)]
pub(super) struct Admit {
    pub(super) conn: i64,
    pub(super) burst: i64,
    pub(super) delay: Duration,
    pub(super) only_default: bool,
}

impl Admit {
    /// None: refused; otherwise how long it waits first.
    pub(super) fn wait(&self, n: i64) -> Option<Duration> {
        if n > self.conn.saturating_add(self.burst) {
            return None;
        }
        if n <= self.conn {
            return Some(Duration::ZERO);
        }
        let times = if self.only_default {
            1
        } else {
            u32::try_from(n - self.conn).unwrap_or(u32::MAX)
        };
        Some(self.delay.saturating_mul(times))
    }

    pub(super) fn flow(wait: Duration) -> Flow {
        if wait.is_zero() {
            Flow::Continue
        } else {
            Flow::Sleep(wait)
        }
    }
}
