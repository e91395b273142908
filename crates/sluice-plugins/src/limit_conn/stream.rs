//! `limit-conn` on stream routes: connections counted per client address across every worker
//! (one limit per node). A lock per connection opened or closed, never per byte.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use sluice_core::plugin::{Preread, StreamPlugin};

/// Open connections per client address.
pub(super) type Counts = Mutex<FxHashMap<IpAddr, u32>>;

/// The compiled limit.
pub(super) struct ConnLimit {
    pub(super) conn: u32,
    pub(super) burst: u32,
    /// Waited by a connection over `conn` (within `conn + burst`).
    pub(super) delay: Duration,
    pub(super) counts: Arc<Counts>,
}

/// A counted connection; uncounted when dropped (the connection closed).
struct Permit {
    counts: Arc<Counts>,
    ip: IpAddr,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut c = self.counts.lock();
        if let Some(n) = c.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                c.remove(&self.ip);
            }
        }
    }
}

impl StreamPlugin for ConnLimit {
    /// Over `conn + burst`: closed. Over `conn`: held after `default_conn_delay`.
    fn preread(&self, ip: IpAddr) -> Preread {
        let mut c = self.counts.lock();
        let n = c.entry(ip).or_insert(0);
        // Validation keeps each at most 1,000,000,000; saturating keeps a sum past 32 bits
        // from wrapping (or panicking) whatever the limit is given.
        if *n >= self.conn.saturating_add(self.burst) {
            if *n == 0 {
                c.remove(&ip);
            }
            return Preread::Close("refused by limit-conn");
        }
        *n += 1;
        let wait = if *n > self.conn {
            self.delay
        } else {
            Duration::ZERO
        };
        drop(c);
        let permit = Permit {
            counts: self.counts.clone(),
            ip,
        };
        Preread::Hold(Box::new(permit), wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(p: Preread) -> (Box<dyn std::any::Any + Send>, Duration) {
        match p {
            Preread::Hold(h, d) => (h, d),
            other => panic!("expected a held slot, got {other:?}"),
        }
    }

    #[test]
    fn connections_over_conn_wait_over_burst_close_and_closing_frees_a_slot() {
        let limit = ConnLimit {
            conn: 1,
            burst: 1,
            delay: Duration::from_millis(100),
            counts: Arc::default(),
        };
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let (first, wait) = held(limit.preread(ip));
        assert_eq!(wait, Duration::ZERO);
        let (_second, wait) = held(limit.preread(ip));
        assert_eq!(wait, Duration::from_millis(100));
        assert!(matches!(limit.preread(ip), Preread::Close(_)));
        // Another client has its own count.
        let (_other, wait) = held(limit.preread("192.0.2.2".parse().unwrap()));
        assert_eq!(wait, Duration::ZERO);
        drop(first);
        let (_third, wait) = held(limit.preread(ip));
        assert_eq!(wait, Duration::from_millis(100));
        assert_eq!(limit.counts.lock().get(&ip), Some(&2));
    }
}
