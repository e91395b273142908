//! Balancers: one file per algorithm behind [`Balance`]. A balancer only chooses among the
//! nodes it is handed ([`NodeSet`]: in rotation, not yet tried by this request, of the best
//! priority available); health, priorities and retries are decided once, in
//! [`super::select`], for every algorithm (APISIX's balancers expose the same two calls:
//! `get(ctx)` and `after_balance(ctx, before_retry)`).

mod chash;
mod ewma;
mod least_conn;
mod pick;
pub(crate) mod ring;
mod roundrobin;
mod set;

pub(crate) use ewma::Ewma;
pub(crate) use least_conn::LeastConn;
pub(crate) use pick::{Balance, PickCx};
pub(crate) use roundrobin::RoundRobin;
pub(crate) use set::NodeSet;

/// One worker's balancer state for one upstream.
#[derive(Debug)]
pub(crate) enum LocalBalancer {
    RoundRobin(RoundRobin),
    /// `least_conn` and `ewma`: the worker's load counters of the upstream's nodes, in node
    /// order (each shared with the node's entry in the worker's table, keyed by address).
    Load(Vec<std::rc::Rc<super::pool::NodeStats>>),
}
