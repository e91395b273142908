//! Cluster-wide quotas through Redis (`policy: redis`), without a Redis round trip per request.
//!
//! Each node leases quota: for a key and a window it asks Redis for `lease` units at once
//! (`INCRBY` on the window's counter, which every node shares) and then admits requests from
//! what it leased, locally. When its lease runs low it asks for the next one in the background,
//! so requests rarely wait. Redis only ever hands out what is left of `count`, so the cluster
//! never admits more than `count` per window. What a node leased and did not use by the end of
//! the window is lost: the cluster admits at least `count - nodes × 1.5 × lease` (the half is
//! the lease fetched ahead). The lease is `count / 50`, between 1 and 1,000: at most 3% below
//! the limit per node, one Redis call per 1,000 requests at high rates.
//!
//! Redis calls run on one background thread ("sluice-redis") that owns the connections;
//! workers hand it jobs and never block. When Redis cannot be reached, requests are let through
//! (`allow_degradation: true`) or answered 503 (the default), and the change is logged once;
//! Redis is tried again at most once a second.

mod hub;
mod lease;
pub(crate) mod target;

pub(crate) use hub::{Op, call, tell};
pub(crate) use lease::{Quota, Take, log_outage, stable_hash, unavailable};
pub(crate) use target::{RedisTarget, redis_target, with_redis_fields};
