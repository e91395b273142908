//! L4: stream routes. TCP connections are copied both ways to an upstream node, chosen with
//! the same balancer, failed-node marks and connect retries as HTTP; UDP datagrams are relayed
//! per client address. On a listen address shared by several routes, the route is chosen by the
//! server name in the TLS ClientHello, read without terminating TLS (passthrough) unless the
//! route terminates it (`tls: true`).
//!
//! A stream route is looked up in the snapshot when a connection arrives; a reload changes
//! where new connections go and never touches connections already open.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ipnet::IpNet;
use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use sluice_config::{Config, StreamProtocol, StreamRouteConfig, Validator};
use sluice_core::state::StateRegistry;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpStream, UdpSocket};
use tokio::time::Instant;
use tracing::debug;

use crate::client_io::{Rewind, read_client_hello};
use crate::error::{Error, Kind};
use crate::upstream::{PickCx, Tries, Upstream};
use crate::worker::Worker;

/// Default idle timeout of a TCP stream connection (NGINX's `proxy_timeout`).
const TCP_IDLE: Duration = Duration::from_secs(600);
/// Default idle timeout of a UDP session.
const UDP_IDLE: Duration = Duration::from_secs(30);
/// Largest ClientHello read to find a server name.
const MAX_HELLO: usize = 16 << 10;
/// Copy buffer per direction of a stream connection: NGINX's `proxy_buffer_size`. Measured
/// against tokio's default of 8 KiB: 15 to 20% less CPU per byte on 64 KiB and 1 MiB
/// transfers, the same on small messages (docs/benchmarks.md).
const STREAM_BUFFER: usize = 16 << 10;
/// Copy buffer per direction of a WebSocket tunnel: small messages, and many idle tunnels.
pub(crate) const WEBSOCKET_BUFFER: usize = 8 << 10;
/// Largest UDP datagram relayed.
const MAX_DATAGRAM: usize = 65_535;
/// UDP sessions per listen address and worker; datagrams from new clients beyond it are
/// dropped (each session holds a socket), until sessions idle out.
const MAX_UDP_SESSIONS: usize = 16_384;

/// The stream routes of one configuration version, by listen address.
#[derive(Debug, Default)]
pub(crate) struct StreamTable {
    pub(crate) tcp: HashMap<SocketAddr, Group>,
    pub(crate) udp: HashMap<SocketAddr, Arc<StreamRoute>>,
}

/// The TCP routes of one listen address.
#[derive(Debug, Default)]
pub(crate) struct Group {
    exact: HashMap<Box<str>, Arc<StreamRoute>>,
    /// `*.example.com` stored as `example.com`.
    wildcard: HashMap<Box<str>, Arc<StreamRoute>>,
    /// The route without `sni`: connections no other route takes.
    rest: Option<Arc<StreamRoute>>,
    /// Whether the ClientHello must be read before choosing (a route has `sni` or `tls`).
    needs_hello: bool,
}

impl Group {
    fn by_name(&self, name: Option<&str>) -> Option<&Arc<StreamRoute>> {
        let found = name.and_then(|n| {
            let n = n.trim_end_matches('.').to_ascii_lowercase();
            self.exact.get(n.as_str()).or_else(|| {
                let (_, parent) = n.split_once('.')?;
                self.wildcard.get(parent)
            })
        });
        found.or(self.rest.as_ref())
    }
}

/// A compiled stream route.
#[derive(Debug)]
pub(crate) struct StreamRoute {
    pub(crate) id: Box<str>,
    /// Index of the upstream in the snapshot (whose nodes may change with DNS).
    upstream: u32,
    /// Terminate TLS with the snapshot's certificates.
    tls: bool,
    /// Relay with splice(2) (never with `tls`).
    splice: bool,
    idle: Duration,
    ip: Option<IpRule>,
    conns: Option<ConnLimit>,
}

/// `ip-restriction` on a stream route.
#[derive(Debug)]
struct IpRule {
    nets: Vec<IpNet>,
    /// Whitelist (true) or blacklist.
    allow: bool,
}

impl IpRule {
    fn admits(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        self.nets.iter().any(|n| n.contains(&ip)) == self.allow
    }
}

/// `limit-conn` on a stream route, keyed by client address, counted across workers (one limit
/// per node). A lock per connection opened or closed, never per byte.
#[derive(Debug)]
struct ConnLimit {
    conn: u32,
    burst: u32,
    delay: Duration,
    counts: Arc<Mutex<FxHashMap<IpAddr, u32>>>,
}

/// A connection counted by a [`ConnLimit`]; uncounted when dropped.
struct ConnPermit {
    counts: Arc<Mutex<FxHashMap<IpAddr, u32>>>,
    ip: IpAddr,
}

impl Drop for ConnPermit {
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

impl ConnLimit {
    /// Counts a connection from `ip`: `Err` when over `conn + burst`, else the permit and how
    /// long to wait first (over `conn`: `default_conn_delay`).
    fn acquire(&self, ip: IpAddr) -> Result<(ConnPermit, Duration), ()> {
        let mut c = self.counts.lock();
        let n = c.entry(ip).or_insert(0);
        // Validation keeps each at most 1,000,000,000; saturating keeps a sum past 32 bits
        // from wrapping (or panicking) whatever the limit is given.
        if *n >= self.conn.saturating_add(self.burst) {
            if *n == 0 {
                c.remove(&ip);
            }
            return Err(());
        }
        *n += 1;
        let wait = if *n > self.conn {
            self.delay
        } else {
            Duration::ZERO
        };
        drop(c);
        Ok((
            ConnPermit {
                counts: self.counts.clone(),
                ip,
            },
            wait,
        ))
    }
}

/// Compiles the stream routes (`v` points at the root). `upstream` resolves a route's
/// upstream into the snapshot's table.
pub(crate) fn compile(
    cfg: &Config,
    state: &StateRegistry,
    upstream: &mut dyn FnMut(&StreamRouteConfig, &mut Validator) -> Option<u32>,
    v: &mut Validator,
) -> StreamTable {
    let mut table = StreamTable::default();
    v.field("stream_routes", |v| {
        for (i, r) in cfg.stream_routes.iter().enumerate() {
            v.index(i, |v| {
                let Some(addr) = r.addr else { return };
                let up = upstream(r, v);
                let ip = v.field("plugins", |v| v.field("ip-restriction", |v| ip_rule(r, v)));
                let conns = v.field("plugins", |v| {
                    v.field("limit-conn", |v| conn_limit(r, state, v))
                });
                let Some(up) = up else { return };
                let route = Arc::new(StreamRoute {
                    id: r.id().into(),
                    upstream: up,
                    tls: r.tls,
                    splice: r.splice && !r.tls,
                    idle: r.idle_timeout.map(|d| d.0).unwrap_or(match r.protocol {
                        StreamProtocol::Tcp => TCP_IDLE,
                        StreamProtocol::Udp => UDP_IDLE,
                    }),
                    ip,
                    conns,
                });
                match r.protocol {
                    StreamProtocol::Udp => {
                        table.udp.insert(addr, route);
                    }
                    StreamProtocol::Tcp => {
                        let g = table.tcp.entry(addr).or_default();
                        g.needs_hello |= r.sni.is_some() || r.tls;
                        match &r.sni {
                            None => g.rest = Some(route),
                            Some(name) => {
                                let name = name.trim_end_matches('.').to_ascii_lowercase();
                                match name.strip_prefix("*.") {
                                    Some(parent) => g.wildcard.insert(parent.into(), route),
                                    None => g.exact.insert(name.into(), route),
                                };
                            }
                        }
                    }
                }
            });
        }
    });
    table
}

fn ip_rule(r: &StreamRouteConfig, v: &mut Validator) -> Option<IpRule> {
    #[derive(serde::Deserialize)]
    struct C {
        #[serde(default)]
        whitelist: Option<Vec<String>>,
        #[serde(default)]
        blacklist: Option<Vec<String>>,
    }
    let c: C = serde_json::from_value(r.plugins.get("ip-restriction")?.clone())
        .map_err(|e| v.error(e.to_string()))
        .ok()?;
    let (list, allow) = match (c.whitelist, c.blacklist) {
        (Some(w), None) => (w, true),
        (None, Some(b)) => (b, false),
        _ => {
            v.error("use one of whitelist or blacklist");
            return None;
        }
    };
    let mut nets = Vec::with_capacity(list.len());
    for s in &list {
        match s
            .parse::<IpNet>()
            .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
        {
            Ok(n) => nets.push(n),
            Err(_) => v.error(format!("invalid IP address or CIDR range \"{s}\"")),
        }
    }
    Some(IpRule { nets, allow })
}

fn conn_limit(
    r: &StreamRouteConfig,
    state: &StateRegistry,
    v: &mut Validator,
) -> Option<ConnLimit> {
    let c = r.plugins.get("limit-conn")?;
    let num = |k: &str| c.get(k).and_then(serde_json::Value::as_f64);
    let key = c
        .get("key")
        .and_then(|k| k.as_str())
        .unwrap_or("remote_addr");
    if key != "remote_addr" {
        v.error_at("key", "stream routes count connections by remote_addr only");
        return None;
    }
    let conn = num("conn").unwrap_or(0.0);
    if conn < 1.0 {
        v.error_at("conn", "must be > 0");
        return None;
    }
    let burst = num("burst").unwrap_or(0.0).max(0.0);
    let delay = num("default_conn_delay").unwrap_or(0.0).clamp(0.0, 60.0);
    // Counts survive reloads while the route and its limit are unchanged.
    let counts = state.get_or_insert(&format!("stream-limit-conn/{}/{c}", r.id()), || {
        Mutex::new(FxHashMap::default())
    });
    Some(ConnLimit {
        conn: conn as u32,
        burst: burst as u32,
        delay: Duration::from_secs_f64(delay),
        counts,
    })
}

/// Serves one TCP connection accepted on the stream listener configured as `key`.
pub(crate) async fn serve(mut io: TcpStream, peer: SocketAddr, key: SocketAddr, w: Rc<Worker>) {
    let snap = w.snapshot();
    let Some(group) = snap.streams.tcp.get(&key) else {
        debug!(listen = %key, "no stream route on this address any more; closing");
        return;
    };
    let (pre, route) = if group.needs_hello {
        let hello = tokio::time::timeout(
            snap.settings.client_header,
            read_client_hello(&mut io, MAX_HELLO),
        )
        .await;
        match hello {
            Ok(Ok((bytes, name))) => match group.by_name(name.as_deref()) {
                Some(r) => (bytes, r),
                None => {
                    debug!(listen = %key, sni = ?name, "no stream route for this server name");
                    return;
                }
            },
            // Not TLS: only a route without sni or tls may take it.
            Ok(Err(bytes)) => match &group.rest {
                Some(r) if !r.tls && !bytes.is_empty() => (bytes, r),
                _ => return,
            },
            Err(_) => return,
        }
    } else {
        match &group.rest {
            Some(r) => (Bytes::new(), r),
            None => return,
        }
    };
    let _permit = match admit(route, peer.ip()).await {
        Some(p) => p,
        None => return,
    };
    let up = snap.upstreams[route.upstream as usize].clone();
    // The upstream's `max_inflight` counts connections here.
    let _admitted = match up.limit.as_ref().map(|l| l.admit()) {
        Some(None) => {
            debug!(route = %route.id, "stream route: upstream max_inflight reached; connection closed");
            return;
        }
        other => other.flatten(),
    };
    let Some(mut up) = connect(&w, route, &up, peer, key).await else {
        return;
    };
    if route.splice {
        // The bytes read to find the server name go first, then the kernel moves the rest.
        if !pre.is_empty() && up.write_all(&pre).await.is_err() {
            return;
        }
        if let Err(e) = crate::splice::relay(&io, &up, route.idle).await {
            debug!(route = %route.id, cause = %e, "stream connection ended");
        }
        return;
    }
    let client = Rewind::new(pre, io);
    if route.tls {
        let Some(tls) = crate::tls::accept(
            client,
            &snap.tls,
            snap.settings.client_header,
            crate::tls::Alpn::None,
        )
        .await
        else {
            return;
        };
        relay(tls, &mut up, route).await;
    } else {
        relay(client, &mut up, route).await;
    }
}

/// Applies the route's connection-level plugins. None: refused (the connection is closed).
async fn admit(route: &StreamRoute, ip: IpAddr) -> Option<Option<ConnPermit>> {
    if let Some(rule) = &route.ip
        && !rule.admits(ip)
    {
        debug!(route = %route.id, client = %ip, "stream connection refused by ip-restriction");
        return None;
    }
    match &route.conns {
        None => Some(None),
        Some(limit) => match limit.acquire(ip) {
            Ok((permit, wait)) => {
                if !wait.is_zero() {
                    tokio::time::sleep(wait).await;
                }
                Some(Some(permit))
            }
            Err(()) => {
                debug!(route = %route.id, client = %ip, "stream connection refused by limit-conn");
                None
            }
        },
    }
}

/// Connects to a node of the route's upstream, trying the next node on a failure as the
/// upstream lifecycle allows (`retries`, `retry_timeout`).
async fn connect(
    w: &Worker,
    route: &StreamRoute,
    up: &Upstream,
    peer: SocketAddr,
    local: SocketAddr,
) -> Option<TcpStream> {
    let mut tries = Tries::new(up);
    let cx = pick_cx(up, peer, local);
    loop {
        let Some(node) = tries.pick(&w.up, up, &cx) else {
            tracing::error!(route = %route.id, "stream route: no healthy upstream node");
            return None;
        };
        let addr = up.nodes[node].addr;
        let err = match tokio::time::timeout(up.timeouts.connect, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => {
                let _ = s.set_nodelay(true);
                tries.succeeded(up, node, None);
                return Some(s);
            }
            Ok(Err(e)) => Error::with_cause(Kind::ConnectFailed, e),
            Err(_) => Error::with_cause(
                Kind::ConnectTimeout,
                format_args!("after {:?}", up.timeouts.connect),
            ),
        };
        if tries.failed(&w.up, up, node, &err).is_none() {
            tracing::error!(route = %route.id, node = %up.nodes[node].authority, cause = %err, "stream route: cannot connect upstream");
            return None;
        }
        debug!(route = %route.id, node = %up.nodes[node].authority, cause = %err, "connect failed; trying the next node");
    }
}

/// A stream connection's pick: `chash` can hash its addresses only (`remote_addr` and the
/// like); other keys fall back to the client's address.
fn pick_cx(up: &Upstream, remote: SocketAddr, local: SocketAddr) -> PickCx {
    match up.balancer.hash_on() {
        None => PickCx::default(),
        Some(on) => PickCx {
            key: crate::upstream::key::request_key(
                on,
                &crate::upstream::key::Addresses { remote, local },
            ),
        },
    }
}

/// Copies both ways until either side closes or nothing moves for the route's idle timeout.
async fn relay<C: AsyncRead + AsyncWrite + Unpin>(
    mut client: C,
    up: &mut TcpStream,
    route: &StreamRoute,
) {
    if let Err(e) = copy_with_idle(&mut client, up, route.idle, STREAM_BUFFER).await {
        debug!(route = %route.id, cause = %e, "stream connection ended");
    }
    let _ = client.shutdown().await;
}

/// Copies both ways between `a` and `b` until either closes (returns the bytes moved each
/// way) or nothing moves either way for `idle` (an error of kind `TimedOut`; noticed between
/// `idle` and twice that after the last byte: activity is counted, not timed, so that moving
/// bytes costs no clock read). Used by stream routes and WebSocket tunnels.
pub(crate) async fn copy_with_idle<A, B>(
    a: &mut A,
    b: &mut B,
    idle: Duration,
    buf: usize,
) -> std::io::Result<(u64, u64)>
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let moved = Rc::new(Cell::new(0u64));
    let mut a = Active {
        inner: a,
        moved: moved.clone(),
    };
    let copy = tokio::io::copy_bidirectional_with_sizes(&mut a, b, buf, buf);
    until_idle(copy, &moved, idle).await
}

/// Runs `work` (which counts what it moves in `moved`) until it ends, or until `moved` has
/// not changed for `idle` (an error of kind `TimedOut`).
pub(crate) async fn until_idle<T>(
    work: impl std::future::Future<Output = std::io::Result<T>>,
    moved: &Cell<u64>,
    idle: Duration,
) -> std::io::Result<T> {
    tokio::pin!(work);
    loop {
        let seen = moved.get();
        tokio::select! {
            r = &mut work => return r,
            () = tokio::time::sleep(idle) => {
                if moved.get() == seen {
                    return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, format!("idle for {idle:?}")));
                }
            }
        }
    }
}

/// Counts reads and writes on the client side (bytes moving either way pass through it).
struct Active<C> {
    inner: C,
    moved: Rc<Cell<u64>>,
}

impl<C: AsyncRead + Unpin> AsyncRead for Active<C> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.moved.set(self.moved.get() + 1);
        }
        r
    }
}

impl<C: AsyncWrite + Unpin> AsyncWrite for Active<C> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, std::task::Poll::Ready(Ok(n)) if n > 0) {
            self.moved.set(self.moved.get() + 1);
        }
        r
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

// === UDP ===

/// One client's UDP session: a socket connected to the chosen node.
struct Session {
    up: Rc<UdpSocket>,
    last: Rc<Cell<Instant>>,
}

/// Relays datagrams arriving on the UDP listener configured as `key`: each client address gets
/// a session (a socket connected to one node); replies go back from the listener's address.
/// With `SO_REUSEPORT` the kernel sends one client's datagrams to the same worker.
pub(crate) async fn udp_loop(sock: UdpSocket, key: SocketAddr, w: Rc<Worker>) {
    let sock = Rc::new(sock);
    let sessions: Rc<RefCell<FxHashMap<SocketAddr, Session>>> = Rc::default();
    let mut buf = vec![0u8; MAX_DATAGRAM];
    loop {
        let (n, client) = match sock.recv_from(&mut buf).await {
            Ok(x) => x,
            Err(e) => {
                debug!(listen = %key, cause = %e, "udp receive failed");
                continue;
            }
        };
        let existing = sessions
            .borrow()
            .get(&client)
            .map(|s| (s.up.clone(), s.last.clone()));
        if let Some((up, last)) = existing {
            last.set(Instant::now());
            let _ = up.send(&buf[..n]).await;
            continue;
        }
        if sessions.borrow().len() >= MAX_UDP_SESSIONS {
            debug!(listen = %key, client = %client, "udp: session limit reached; datagram dropped");
            continue;
        }
        let snap = w.snapshot();
        let Some(route) = snap.streams.udp.get(&key).cloned() else {
            continue;
        };
        if route.ip.as_ref().is_some_and(|r| !r.admits(client.ip())) {
            continue;
        }
        let up = &*snap.upstreams[route.upstream as usize];
        let Some(node) = Tries::new(up).pick(&w.up, up, &pick_cx(up, client, key)) else {
            continue;
        };
        let addr = up.nodes[node].addr;
        let bind: SocketAddr = if addr.is_ipv4() {
            ([0, 0, 0, 0], 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let upsock = match UdpSocket::bind(bind).await {
            Ok(s) => s,
            Err(e) => {
                debug!(route = %route.id, cause = %e, "udp: cannot open an upstream socket");
                continue;
            }
        };
        if let Err(e) = upsock.connect(addr).await {
            debug!(route = %route.id, cause = %e, "udp: cannot reach node");
            continue;
        }
        let upsock = Rc::new(upsock);
        let last = Rc::new(Cell::new(Instant::now()));
        let _ = upsock.send(&buf[..n]).await;
        sessions.borrow_mut().insert(
            client,
            Session {
                up: upsock.clone(),
                last: last.clone(),
            },
        );
        let (sock, sessions) = (sock.clone(), sessions.clone());
        tokio::task::spawn_local(async move {
            let mut rbuf = vec![0u8; MAX_DATAGRAM];
            loop {
                let deadline = last.get() + route.idle;
                tokio::select! {
                    r = upsock.recv(&mut rbuf) => match r {
                        Ok(m) => {
                            last.set(Instant::now());
                            let _ = sock.send_to(&rbuf[..m], client).await;
                        }
                        // ICMP port unreachable and the like: the node is gone.
                        Err(_) => break,
                    },
                    () = tokio::time::sleep_until(deadline) => {
                        if last.get() + route.idle <= Instant::now() {
                            break;
                        }
                    }
                }
            }
            sessions.borrow_mut().remove(&client);
        });
    }
}
