//! Upstreams: what a compiled upstream is (`model.rs`), how a request goes through its nodes
//! (`select.rs`: the one lifecycle of every protocol path), how a node is chosen
//! (`balance/`: one file per algorithm), the health table shared by all workers
//! (`health.rs`), each worker's pools and counters keyed by node address (`pool.rs`), and how
//! a connection is opened (`connect.rs`), the active checkers (`check.rs`), and the request
//! key `chash` hashes (`key.rs`).

mod answer;
mod balance;
mod check;
mod connect;
pub(crate) mod discover;
pub(crate) mod discovery;
pub(crate) mod health;
pub(crate) mod key;
mod local;
mod model;
mod node;
mod pool;
pub(crate) mod select;
pub(crate) mod shed;
mod stats;

pub(crate) use balance::PickCx;
pub(crate) use check::{FirstRound, start as start_checks};
pub(crate) use connect::{Multiplexed, UpIo, connect_node, send};
pub(crate) use local::{H2Conn, Local};
pub(crate) use model::{PassHostRt, Upstream, UpstreamTimeouts, build_upstream, upstream_uid};
pub(crate) use select::{Tried, Tries};
