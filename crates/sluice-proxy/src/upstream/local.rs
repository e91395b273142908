//! One worker's upstream state: pools and load counters by node, balancer state and retry
//! budgets by upstream, HTTP/2 connections by node. Owned by the worker, never shared with
//! another, so nothing here locks; the upstream lifecycle (`select.rs`) and the protocol paths
//! reach it through the worker.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rustc_hash::{FxHashMap, FxHashSet};
use tokio::sync::watch;

use super::balance::Balance;
use super::model::Upstream;
use super::pool::LocalNodes;
use super::shed::Budget;

/// A worker's HTTP/2 connection to a node (`http2`, `grpc`).
#[derive(Clone)]
pub(crate) struct H2Conn {
    pub(crate) send: h2::client::SendRequest<Bytes>,
    /// Turns true when the connection ended (the node's GOAWAY, a reset, an error).
    pub(crate) ended: watch::Receiver<bool>,
}

impl std::fmt::Debug for H2Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H2Conn")
            .field("ended", &*self.ended.borrow())
            .finish()
    }
}

/// Taken by the request that opens a worker's HTTP/2 connection to a node; holds the last
/// failed attempt (when, and why) for the requests that waited on it.
pub(crate) type ConnectTurn =
    Rc<tokio::sync::Mutex<Option<(std::time::Instant, crate::error::Error)>>>;

/// One worker's upstream state.
#[derive(Debug, Default)]
pub(crate) struct Local {
    /// Keep-alive pools and load counters, by node (its pool key: address and connection
    /// settings), not by position, so node lists can change at run time.
    pub(crate) nodes: RefCell<LocalNodes>,
    /// Balancer state (round-robin weights, or the load counters of the nodes in order), by
    /// upstream uid.
    pub(crate) balancers: RefCell<FxHashMap<u64, Box<dyn Balance>>>,
    /// Retry budgets, by upstream uid.
    pub(crate) budgets: RefCell<FxHashMap<u64, Budget>>,
    /// HTTP/2 connections to nodes, by pool key: one multiplexed connection each.
    pub(crate) h2_conns: RefCell<FxHashMap<u64, H2Conn>>,
    /// Held while a connection to a node is being opened (one attempt at a time).
    pub(crate) h2_connecting: RefCell<FxHashMap<u64, ConnectTurn>>,
}

impl Local {
    /// Closes expired idle connections, and forgets the state of nodes and upstreams the
    /// configuration in service (`upstreams`) no longer has (an HTTP/2 connection closes once
    /// the last request using it lets go).
    pub(crate) fn sweep(&self, upstreams: &[Arc<Upstream>]) {
        let mut live: FxHashMap<u64, Duration> = FxHashMap::default();
        let mut uids = FxHashSet::default();
        for u in upstreams {
            uids.insert(u.uid);
            for n in u.nodes.iter() {
                live.insert(n.pool_key, u.keepalive.idle);
            }
        }
        self.nodes.borrow_mut().sweep(&live);
        self.h2_conns
            .borrow_mut()
            .retain(|key, _| live.contains_key(key));
        self.h2_connecting
            .borrow_mut()
            .retain(|key, _| live.contains_key(key));
        self.balancers
            .borrow_mut()
            .retain(|uid, _| uids.contains(uid));
        self.budgets
            .borrow_mut()
            .retain(|uid, _| uids.contains(uid));
    }
}
