//! Worker-local upstream state: the balancer's weights, failed-node marks and the keep-alive
//! pool of each node. Nothing here is shared between workers, so nothing here locks.

use std::collections::VecDeque;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tokio::net::TcpStream;

use crate::snapshot::Upstream;

/// A node that failed to connect is skipped for this long (NGINX's `fail_timeout`), unless it
/// is the upstream's only node.
pub(crate) const FAIL_TIMEOUT: Duration = Duration::from_secs(10);

/// One worker's state for one upstream.
#[derive(Debug)]
pub(crate) struct LocalUpstream {
    /// Smooth weighted round-robin `current_weight` per node.
    current: Vec<i64>,
    nodes: Vec<LocalNode>,
    /// Number of nodes with a `down_until` set, so the common case skips the clock.
    down: usize,
}

#[derive(Debug, Default)]
struct LocalNode {
    idle: VecDeque<Idle>,
    down_until: Option<Instant>,
}

/// A connection to an upstream node: plain TCP, TLS over TCP, or a pipe to a stream of the
/// worker's HTTP/2 connection to the node ([`crate::h2_up`]).
#[derive(Debug)]
pub(crate) enum UpIo {
    Tcp(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
    H2(Pipe),
}

/// The engine's end of a pipe to an HTTP/2 stream task. Dropping it tells the task at once,
/// whatever the task is waiting for (the node's answer, flow-control window), so that it
/// resets the stream rather than hold it.
#[derive(Debug)]
pub(crate) struct Pipe {
    pub(crate) io: tokio::io::DuplexStream,
    pub(crate) _alive: tokio::sync::watch::Sender<()>,
}

impl tokio::io::AsyncRead for UpIo {
    #[inline]
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            UpIo::Tcp(s) => std::pin::Pin::new(s).poll_read(cx, buf),
            UpIo::Tls(s) => std::pin::Pin::new(&mut **s).poll_read(cx, buf),
            UpIo::H2(p) => std::pin::Pin::new(&mut p.io).poll_read(cx, buf),
        }
    }
}

impl tokio::io::AsyncWrite for UpIo {
    #[inline]
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            UpIo::Tcp(s) => std::pin::Pin::new(s).poll_write(cx, buf),
            UpIo::Tls(s) => std::pin::Pin::new(&mut **s).poll_write(cx, buf),
            UpIo::H2(p) => std::pin::Pin::new(&mut p.io).poll_write(cx, buf),
        }
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            UpIo::Tcp(_) | UpIo::H2(_) => Poll::Ready(Ok(())),
            UpIo::Tls(s) => std::pin::Pin::new(&mut **s).poll_flush(cx),
        }
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            UpIo::Tcp(s) => std::pin::Pin::new(s).poll_shutdown(cx),
            UpIo::Tls(s) => std::pin::Pin::new(&mut **s).poll_shutdown(cx),
            UpIo::H2(p) => std::pin::Pin::new(&mut p.io).poll_shutdown(cx),
        }
    }
}

/// Writes all of `buf` to an upstream connection, flushed (TLS holds records until then).
#[inline]
pub(crate) async fn send(io: &mut UpIo, buf: &[u8]) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt;
    io.write_all(buf).await?;
    if let UpIo::Tls(_) = io {
        io.flush().await?;
    }
    Ok(())
}

/// An idle pooled connection.
#[derive(Debug)]
pub(crate) struct Idle {
    pub(crate) io: UpIo,
    pub(crate) since: Instant,
    pub(crate) served: u32,
}

impl LocalUpstream {
    pub(crate) fn new(up: &Upstream) -> Self {
        LocalUpstream {
            current: vec![0; up.nodes.len()],
            nodes: (0..up.nodes.len()).map(|_| LocalNode::default()).collect(),
            down: 0,
        }
    }

    /// Picks a node by smooth weighted round-robin (NGINX's `ngx_http_upstream_get_peer`),
    /// skipping nodes with weight 0, nodes marked failed, and those in `tried` (a bit per
    /// node index, for retries). `None`: no healthy node.
    pub(crate) fn select(&mut self, up: &Upstream, tried: u64) -> Option<usize> {
        if up.nodes.len() == 1 {
            return (up.nodes[0].weight > 0 && tried & 1 == 0).then_some(0);
        }
        let now = if self.down > 0 {
            Some(Instant::now())
        } else {
            None
        };
        let mut total: i64 = 0;
        let mut best: Option<usize> = None;
        for (i, node) in up.nodes.iter().enumerate() {
            if node.weight == 0 || (i < 64 && tried & (1 << i) != 0) {
                continue;
            }
            if let (Some(now), Some(until)) = (now, self.nodes[i].down_until) {
                if now < until {
                    continue;
                }
                self.nodes[i].down_until = None;
                self.down -= 1;
            }
            let w = i64::from(node.weight);
            self.current[i] += w;
            total += w;
            if best.is_none_or(|b| self.current[i] > self.current[b]) {
                best = Some(i);
            }
        }
        let b = best?;
        self.current[b] -= total;
        Some(b)
    }

    /// Marks a node failed after a connect error, unless it is the only node (then there is
    /// nothing else to try, and marking it would only turn 502s into 503s).
    pub(crate) fn mark_failed(&mut self, up: &Upstream, node: usize) {
        if up.nodes.len() > 1 && self.nodes[node].down_until.is_none() {
            self.nodes[node].down_until = Some(Instant::now() + FAIL_TIMEOUT);
            self.down += 1;
            // Its idle connections are suspect too.
            self.nodes[node].idle.clear();
        }
    }

    /// A pooled connection to `node` that is still open, newest first.
    pub(crate) fn take(&mut self, node: usize, idle_timeout: Duration) -> Option<Idle> {
        let pool = &mut self.nodes[node].idle;
        if pool.is_empty() {
            return None;
        }
        let now = Instant::now();
        while let Some(mut c) = pool.pop_back() {
            if now.duration_since(c.since) < idle_timeout && still_open(&mut c.io) {
                return Some(c);
            }
        }
        None
    }

    /// Returns a connection to the pool, unless the pool is full.
    pub(crate) fn put(&mut self, node: usize, io: UpIo, served: u32, size: usize) {
        let pool = &mut self.nodes[node].idle;
        if pool.len() >= size {
            // Drop the oldest rather than the newest: the newest is the warmest.
            if size == 0 {
                return;
            }
            pool.pop_front();
        }
        pool.push_back(Idle {
            io,
            since: Instant::now(),
            served,
        });
    }

    /// Closes idle connections that expired or that the upstream closed.
    pub(crate) fn sweep(&mut self, idle_timeout: Duration) {
        let now = Instant::now();
        for node in &mut self.nodes {
            node.idle.retain_mut(|c| {
                now.duration_since(c.since) < idle_timeout && still_open(&mut c.io)
            });
        }
    }

    /// Number of idle connections held.
    #[cfg(test)]
    pub(crate) fn idle_count(&self) -> usize {
        self.nodes.iter().map(|n| n.idle.len()).sum()
    }
}

/// True when an idle connection has seen no event: no FIN, no RST, no stray bytes. Checks the
/// readiness the event loop already recorded, so the common case costs no system call.
fn still_open(io: &mut UpIo) -> bool {
    let mut cx = Context::from_waker(Waker::noop());
    let io = match io {
        UpIo::Tcp(s) => &*s,
        UpIo::Tls(s) => s.get_ref().0,
        UpIo::H2(pipe) => {
            // Open while nothing is readable: the far end writes only answers.
            let mut b = [0u8; 1];
            let mut rb = tokio::io::ReadBuf::new(&mut b);
            return tokio::io::AsyncRead::poll_read(
                std::pin::Pin::new(&mut pipe.io),
                &mut cx,
                &mut rb,
            )
            .is_pending();
        }
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
    use crate::snapshot::{Keepalive, Node, PassHostRt, UpstreamTimeouts};

    fn upstream(weights: &[u32]) -> Upstream {
        Upstream {
            uid: 1,
            nodes: weights
                .iter()
                .enumerate()
                .map(|(i, w)| Node {
                    addr: ([127, 0, 0, 1], 1000 + i as u16).into(),
                    weight: *w,
                    authority: format!("n{i}").into(),
                    server_name: None,
                })
                .collect(),
            pass_host: PassHostRt::Pass,
            timeouts: UpstreamTimeouts {
                connect: Duration::from_secs(1),
                send: Duration::from_secs(1),
                read: Duration::from_secs(1),
            },
            retries: 0,
            retry_timeout: None,
            keepalive: Keepalive {
                size: 1,
                idle: Duration::from_secs(1),
                requests: 1,
            },
            grpc: false,
            http2: false,
            tls: None,
        }
    }

    #[test]
    fn smooth_weighted_round_robin_interleaves_like_nginx() {
        // NGINX's documented example: weights 5, 1, 1 give a a b a c a a.
        let up = upstream(&[5, 1, 1]);
        let mut l = LocalUpstream::new(&up);
        let picks: Vec<usize> = (0..7).map(|_| l.select(&up, 0).unwrap()).collect();
        assert_eq!(picks, vec![0, 0, 1, 0, 2, 0, 0]);
    }

    #[test]
    fn zero_weight_failed_and_tried_nodes_are_skipped() {
        let up = upstream(&[1, 0, 1]);
        let mut l = LocalUpstream::new(&up);
        for _ in 0..10 {
            assert_ne!(l.select(&up, 0), Some(1));
        }
        l.mark_failed(&up, 0);
        for _ in 0..5 {
            assert_eq!(l.select(&up, 0), Some(2));
        }
        assert_eq!(l.select(&up, 1 << 2), None);
        let all_zero = upstream(&[0, 0]);
        assert_eq!(LocalUpstream::new(&all_zero).select(&all_zero, 0), None);
    }

    #[test]
    fn a_single_node_is_never_marked_failed() {
        let up = upstream(&[1]);
        let mut l = LocalUpstream::new(&up);
        l.mark_failed(&up, 0);
        assert_eq!(l.select(&up, 0), Some(0));
        assert_eq!(l.select(&up, 1), None);
    }

    #[tokio::test]
    async fn the_pool_hands_out_only_open_connections() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let up = upstream(&[1]);
        let mut l = LocalUpstream::new(&up);
        let client = TcpStream::connect(addr).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        l.put(0, UpIo::Tcp(client), 1, 4);
        assert_eq!(l.idle_count(), 1);
        drop(server); // the upstream closes its side
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            l.take(0, Duration::from_secs(60)).is_none(),
            "a closed connection was handed out"
        );

        let client = TcpStream::connect(addr).await.unwrap();
        let (_server, _) = listener.accept().await.unwrap();
        l.put(0, UpIo::Tcp(client), 1, 4);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(l.take(0, Duration::from_secs(60)).is_some());
    }

    #[tokio::test]
    async fn expired_connections_are_not_reused() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let up = upstream(&[1]);
        let mut l = LocalUpstream::new(&up);
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (_server, _) = listener.accept().await.unwrap();
        l.put(0, UpIo::Tcp(client), 1, 4);
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(l.take(0, Duration::from_millis(10)).is_none());
    }
}
