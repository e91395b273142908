//! Each worker's state per node: the keep-alive pool and the counters balancers read, keyed by
//! the node's [`pool_key`](super::model::Node::pool_key) (its address and connection
//! settings), not by its position in an upstream, so that a node list can change at run time
//! and a node kept by a reload keeps its warm connections. Nothing here is shared between
//! workers, so nothing here locks.

use std::collections::VecDeque;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use super::connect::UpIo;
use super::stats::NodeStats;

/// One worker's state for one node.
#[derive(Debug, Default)]
pub(crate) struct LocalNode {
    idle: VecDeque<Idle>,
    /// What `least_conn` and `ewma` read; shared with the requests in flight to the node.
    stats: std::rc::Rc<NodeStats>,
}

/// One worker's nodes, by pool key.
#[derive(Debug, Default)]
pub(crate) struct LocalNodes {
    nodes: FxHashMap<u64, LocalNode>,
}

/// An idle pooled connection.
#[derive(Debug)]
pub(crate) struct Idle {
    pub(crate) io: UpIo,
    pub(crate) since: Instant,
    pub(crate) served: u32,
}

impl LocalNodes {
    /// The node's load counters in this worker (shared with the balancers that read them).
    pub(crate) fn stats(&mut self, key: u64) -> std::rc::Rc<NodeStats> {
        self.nodes.entry(key).or_default().stats.clone()
    }

    /// A pooled connection to the node that is still open, newest first.
    ///
    /// Expiry is the sweep's (once a second, [`LocalNodes::sweep`]): reading the clock here
    /// for every request cost more than the check is worth, and a connection idle a little
    /// past `idle_timeout` is refused anyway when the node closed it (`still_open`).
    pub(crate) fn take(&mut self, key: u64) -> Option<Idle> {
        let pool = &mut self.nodes.get_mut(&key)?.idle;
        while let Some(mut c) = pool.pop_back() {
            if still_open(&mut c.io) {
                return Some(c);
            }
        }
        None
    }

    /// Returns a connection to the node's pool, unless the pool is full.
    pub(crate) fn put(&mut self, key: u64, io: UpIo, served: u32, size: usize) {
        if size == 0 {
            return;
        }
        let pool = &mut self.nodes.entry(key).or_default().idle;
        if pool.len() >= size {
            // Drop the oldest rather than the newest: the newest is the warmest.
            pool.pop_front();
        }
        pool.push_back(Idle {
            io,
            since: Instant::now(),
            served,
        });
    }

    /// Closes the node's idle connections (it failed: they are suspect too).
    pub(crate) fn clear(&mut self, key: u64) {
        if let Some(n) = self.nodes.get_mut(&key) {
            n.idle.clear();
        }
    }

    /// Closes idle connections that expired or that the node closed, and forgets the nodes no
    /// upstream of the configuration in service has (`live`: their keys and idle timeouts).
    pub(crate) fn sweep(&mut self, live: &FxHashMap<u64, Duration>) {
        let now = Instant::now();
        self.nodes.retain(|key, node| match live.get(key) {
            Some(idle_timeout) => {
                node.idle.retain_mut(|c| {
                    now.duration_since(c.since) < *idle_timeout && still_open(&mut c.io)
                });
                true
            }
            None => false,
        });
    }

    /// The keys of the nodes this worker holds state for.
    #[cfg(test)]
    pub(crate) fn keys(&self) -> rustc_hash::FxHashSet<u64> {
        self.nodes.keys().copied().collect()
    }

    /// Number of idle connections held.
    #[cfg(test)]
    pub(crate) fn idle_count(&self) -> usize {
        self.nodes.values().map(|n| n.idle.len()).sum()
    }
}

/// True when an idle connection has seen no event: no FIN, no RST, no stray bytes. Checks the
/// readiness the event loop already recorded, so the common case costs no system call.
fn still_open(io: &mut UpIo) -> bool {
    let mut cx = Context::from_waker(Waker::noop());
    let io = match io {
        UpIo::Tcp(s) => &*s,
        UpIo::Tls(s) => s.get_ref().0,
        UpIo::H2(m) => return m.still_open(),
    };
    match io.poll_read_ready(&mut cx) {
        Poll::Pending => true,
        Poll::Ready(Err(_)) => false,
        Poll::Ready(Ok(())) => {
            let mut b = [0u8; 1];
            matches!(io.try_read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpStream;

    #[tokio::test]
    async fn the_pool_hands_out_only_open_connections() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut l = LocalNodes::default();
        let client = TcpStream::connect(addr).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        l.put(7, UpIo::Tcp(client), 1, 4);
        assert_eq!(l.idle_count(), 1);
        drop(server); // the upstream closes its side
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(l.take(7).is_none(), "a closed connection was handed out");

        let client = TcpStream::connect(addr).await.unwrap();
        let (_server, _) = listener.accept().await.unwrap();
        l.put(7, UpIo::Tcp(client), 1, 4);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(l.take(8).is_none(), "another node's pool");
        assert!(l.take(7).is_some());
    }

    #[tokio::test]
    async fn expired_connections_are_not_reused_and_removed_nodes_are_forgotten() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut l = LocalNodes::default();
        let mut servers = Vec::new();
        for key in [1, 2] {
            let client = TcpStream::connect(listener.local_addr().unwrap())
                .await
                .unwrap();
            servers.push(listener.accept().await.unwrap());
            l.put(key, UpIo::Tcp(client), 1, 4);
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
        // Node 1's connection is past its idle timeout; node 2 left the configuration.
        let live: FxHashMap<u64, Duration> = [(1, Duration::from_millis(10))].into_iter().collect();
        l.sweep(&live);
        assert!(
            l.take(1).is_none(),
            "an expired connection survived the sweep"
        );
        assert_eq!(l.keys(), [1].into_iter().collect());
    }
}
