//! A worker's view of a node's load (what `least_conn` and `ewma` read) and the request in
//! flight that counts in it: a leaf below the pools and the balancers.

use std::time::{Duration, Instant};

/// A worker's view of a node's load: requests waiting for its answer, and the peak-EWMA of
/// its answer time.
#[derive(Debug, Default)]
pub(crate) struct NodeStats {
    pub(crate) inflight: std::cell::Cell<u32>,
    /// Peak-EWMA of the time to the response head, in microseconds.
    pub(crate) ewma: std::cell::Cell<f64>,
    pub(crate) sampled: std::cell::Cell<Option<Instant>>,
}

/// Half-life-like decay of the EWMA (Finagle's and linkerd's default is 10 s).
const EWMA_DECAY: Duration = Duration::from_secs(10);

impl NodeStats {
    /// Records an answer time: a slower one is taken at once (the peak), a faster one decays
    /// the average towards it.
    pub(crate) fn sample(&self, rtt: Duration, now: Instant) {
        let rtt = rtt.as_secs_f64() * 1e6;
        let old = self.ewma.get();
        let next = match self.sampled.get() {
            Some(at) if rtt < old => {
                let x = now.saturating_duration_since(at).as_secs_f64() / EWMA_DECAY.as_secs_f64();
                // e^-x; between samples close together (x is about 1e-5 at 10,000 requests a
                // second) its second-order series is exact to 1e-10 and much cheaper.
                let w = if x < 0.01 {
                    1.0 - x + x * x / 2.0
                } else {
                    (-x).exp()
                };
                old * w + rtt * (1.0 - w)
            }
            _ => rtt,
        };
        self.ewma.set(next);
        self.sampled.set(Some(now));
    }

    /// The `ewma` balancer's cost: the expected wait behind the requests already in flight.
    pub(crate) fn cost(&self) -> f64 {
        self.ewma.get() * f64::from(self.inflight.get() + 1)
    }
}

/// A request in flight to a node; counted until dropped.
#[derive(Debug)]
pub(crate) struct InFlight {
    stats: std::rc::Rc<NodeStats>,
    /// When it started, for `ewma` (None: no clock read for `least_conn`).
    since: Option<Instant>,
}

impl InFlight {
    /// Counts a request to the node; `timed`: its answer time will be a sample.
    pub(crate) fn start(stats: &std::rc::Rc<NodeStats>, timed: bool) -> InFlight {
        stats.inflight.set(stats.inflight.get() + 1);
        InFlight {
            stats: stats.clone(),
            since: timed.then(Instant::now),
        }
    }

    /// The node answered: its answer time is a sample.
    pub(crate) fn answered(&self) {
        if let Some(since) = self.since {
            let now = Instant::now();
            self.stats.sample(now.saturating_duration_since(since), now);
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let n = self.stats.inflight.get();
        self.stats.inflight.set(n.saturating_sub(1));
    }
}
