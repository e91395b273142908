//! The instruments a worker writes: counters, gauges and latency histograms, each written by
//! one thread and read by the scraper.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

/// A counter one thread writes and any thread reads.
#[derive(Debug, Default)]
pub(crate) struct Counter(AtomicU64);

impl Counter {
    #[inline]
    pub(crate) fn add(&self, n: u64) {
        // One writer: a load and a store, no read-modify-write instruction.
        self.0.store(self.0.load(Relaxed).wrapping_add(n), Relaxed);
    }

    pub(crate) fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

/// A gauge one thread writes and any thread reads.
#[derive(Debug, Default)]
pub(crate) struct Gauge(AtomicI64);

impl Gauge {
    #[inline]
    pub(crate) fn add(&self, n: i64) {
        self.0.store(self.0.load(Relaxed).wrapping_add(n), Relaxed);
    }

    pub(crate) fn get(&self) -> i64 {
        self.0.load(Relaxed)
    }
}

/// Upper bounds of the latency buckets, in nanoseconds (0.5 ms to 10 s).
pub(super) const BOUNDS_NS: [u64; 14] = [
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];

/// The monotonic clock in nanoseconds: one vDSO call, and differences are plain
/// subtractions (`Instant` costs ~40 instructions more per read and difference, callgrind).
#[inline]
pub(crate) fn now_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    (t.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(t.tv_nsec as u64)
}

/// A latency histogram: counts per bucket (not cumulative; summed when rendered) and the sum.
#[derive(Debug, Default)]
pub(crate) struct Histogram {
    pub(super) buckets: [Counter; BOUNDS_NS.len() + 1],
    /// In microseconds: 584,000 years of request time before it wraps.
    pub(super) sum_us: Counter,
}

impl Histogram {
    #[inline]
    pub(crate) fn observe(&self, ns: u64) {
        // Most requests land in the first buckets: a scan from the start is shortest.
        let i = BOUNDS_NS
            .iter()
            .position(|&b| ns <= b)
            .unwrap_or(BOUNDS_NS.len());
        self.buckets[i].add(1);
        self.sum_us.add(ns / 1_000);
    }
}

/// Summed over workers when scraped.
#[derive(Debug, Clone, Default)]
pub(super) struct HistSum {
    pub(super) buckets: [u64; BOUNDS_NS.len() + 1],
    pub(super) sum_us: u64,
}

impl HistSum {
    pub(super) fn add(&mut self, h: &Histogram) {
        for (s, b) in self.buckets.iter_mut().zip(&h.buckets) {
            *s = s.wrapping_add(b.get());
        }
        self.sum_us = self.sum_us.wrapping_add(h.sum_us.get());
    }
}
