//! L4: stream routes. TCP connections are copied both ways to an upstream node, chosen with
//! the same balancer, failed-node marks and connect retries as HTTP; UDP datagrams are relayed
//! per client address. On a listen address shared by several routes, the route is chosen by the
//! server name in the TLS ClientHello, read without terminating TLS (passthrough) unless the
//! route terminates it (`tls: true`).
//!
//! A stream route is looked up in the snapshot when a connection arrives; a reload changes
//! where new connections go and never touches connections already open.

use std::cell::{Cell, RefCell};
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;

use bytes::Bytes;
use rustc_hash::FxHashMap;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio::time::Instant;
use tracing::debug;

use crate::client_io::{Rewind, read_client_hello};
use crate::error::{Error, Kind};
use crate::failures::Failure;
use crate::stream_table::StreamRoute;
use crate::upstream::select::retry_loop;
use crate::upstream::{PickCx, Tried, Tries, Upstream};
use crate::worker::Worker;
use sluice_core::plugin::Preread;

/// Largest ClientHello read to find a server name.
const MAX_HELLO: usize = 16 << 10;
/// Copy buffer per direction of a stream connection: NGINX's `proxy_buffer_size`. Measured
/// against tokio's default of 8 KiB: 15 to 20% less CPU per byte on 64 KiB and 1 MiB
/// transfers, the same on small messages (docs/benchmarks.md).
const STREAM_BUFFER: usize = 16 << 10;
/// Largest UDP datagram relayed.
const MAX_DATAGRAM: usize = 65_535;
/// UDP sessions per listen address and worker; datagrams from new clients beyond it are
/// dropped (each session holds a socket), until sessions idle out.
const MAX_UDP_SESSIONS: usize = 16_384;

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
            Ok(Ok((bytes, name))) => match group.by_name(name.as_deref(), peer.ip()) {
                Some(r) => (bytes, r),
                None => {
                    debug!(listen = %key, sni = ?name, "no stream route for this server name");
                    return;
                }
            },
            // Not TLS: only a route without sni or tls may take it.
            Ok(Err(bytes)) => match group.rest.for_client(peer.ip()) {
                Some(r) if !r.tls && !bytes.is_empty() => (bytes, r),
                _ => return,
            },
            Err(_) => return,
        }
    } else {
        match group.rest.for_client(peer.ip()) {
            Some(r) => (Bytes::new(), r),
            None => {
                debug!(listen = %key, client = %peer, "no stream route for this client");
                return;
            }
        }
    };
    let Some((_held, wait)) = admit(route, peer.ip(), "stream connection") else {
        return;
    };
    if !wait.is_zero() {
        tokio::time::sleep(wait).await;
    }
    let up = snap.upstreams[route.upstream as usize].clone();
    // The upstream's `max_inflight` counts connections here.
    let _admitted = match up.limit.as_ref().map(|l| l.admit()) {
        Some(None) => {
            debug!(route = %route.id, "stream route: upstream max_inflight reached; connection closed");
            return;
        }
        other => other.flatten(),
    };
    let Some((tcp, node)) = connect(&w, route, &up, peer, key).await else {
        return;
    };
    let session = Counted::open(&w, route, "tcp");
    if route.splice && up.tls.is_none() {
        let mut up = tcp;
        // The bytes read to find the server name go first, then the kernel moves the rest.
        if !pre.is_empty() && up.write_all(&pre).await.is_err() {
            return;
        }
        let moved = crate::splice::relay(&io, &up, route.idle).await;
        session.moved(moved.from_a + pre.len() as u64, moved.to_a);
        if let Err(e) = moved.end {
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
        to_node(&w, tls, tcp, node, &up, route, &session).await;
    } else {
        to_node(&w, client, tcp, node, &up, route, &session).await;
    }
}

/// Relays `client` to the node `tcp` reached: as it is, or over TLS (`scheme: tls`, the node
/// named as the upstream's HTTPS nodes are).
async fn to_node<C: AsyncRead + AsyncWrite + crate::relay::ReadReady + Unpin>(
    w: &Worker,
    client: C,
    mut tcp: TcpStream,
    node: usize,
    up: &Upstream,
    route: &StreamRoute,
    session: &Counted,
) {
    let Some(t) = &up.tls else {
        return relay(client, &mut tcp, route, session).await;
    };
    let n = &up.nodes[node];
    let Some(name) = n.server_name.clone() else {
        w.failed(stream_failure(
            "stream route: no server name for TLS to the node",
            route,
            &n.authority,
            "no server name",
            &"give the upstream's tls.sni, or name its nodes",
        ));
        return;
    };
    let handshake = tokio_rustls::TlsConnector::from(t.config.clone()).connect(name, tcp);
    match tokio::time::timeout(up.timeouts.connect, handshake).await {
        Ok(Ok(mut tls)) => relay(client, &mut tls, route, session).await,
        Ok(Err(e)) => w.failed(stream_failure(
            "stream route: TLS to the node failed",
            route,
            &n.authority,
            "TLS failed",
            &e,
        )),
        Err(_) => w.failed(stream_failure(
            "stream route: TLS to the node timed out",
            route,
            &n.authority,
            "TLS timed out",
            &format_args!("after {:?}", up.timeouts.connect),
        )),
    }
}

/// A stream session in the metrics, from its node's connection to its end.
struct Counted {
    series: Option<std::sync::Arc<crate::metrics::StreamSeries>>,
    bytes: Cell<(u64, u64)>,
}

impl Counted {
    fn open(w: &Worker, route: &StreamRoute, proto: &'static str) -> Counted {
        let series = w.metrics.enabled().then(|| {
            let s = w.metrics.stream(&route.id, &route.metric, proto);
            s.opened();
            s
        });
        Counted {
            series,
            bytes: Cell::new((0, 0)),
        }
    }

    /// Bytes from the client (`i`) and to it (`o`).
    fn moved(&self, i: u64, o: u64) {
        let (a, b) = self.bytes.get();
        self.bytes.set((a + i, b + o));
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        if let Some(s) = &self.series {
            let (i, o) = self.bytes.get();
            s.closed(i, o);
        }
    }
}

/// What a connection's plugins hold until it closes (counted slots).
type Held = Vec<Box<dyn std::any::Any + Send>>;

/// Runs the route's plugins' `preread` on a connection (or UDP session, `what`) from `ip`:
/// what they hold and how long they ask it to wait. None: refused (it is closed).
fn admit(route: &StreamRoute, ip: IpAddr, what: &str) -> Option<(Held, std::time::Duration)> {
    let mut held = Held::new();
    let mut wait = std::time::Duration::ZERO;
    for p in route.plugins.iter() {
        match p.preread(ip) {
            Preread::Continue => {}
            Preread::Hold(h, w) => {
                held.push(h);
                wait += w;
            }
            Preread::Close(why) => {
                debug!(route = %route.id, client = %ip, "{what} {why}");
                return None;
            }
        }
    }
    Some((held, wait))
}

/// Connects to a node of the route's upstream, trying the next node on a failure as the
/// upstream lifecycle allows (`retries`, `retry_timeout`).
async fn connect(
    w: &Worker,
    route: &StreamRoute,
    up: &Upstream,
    peer: SocketAddr,
    local: SocketAddr,
) -> Option<(TcpStream, usize)> {
    let mut tries = Tries::new(up);
    let cx = pick_cx(up, peer, local);
    let tried = retry_loop!(&mut tries, (&w.up, up, &cx), |node, _| {
        async {
            let addr = up.nodes[node].addr;
            match tokio::time::timeout(up.timeouts.connect, TcpStream::connect(addr)).await {
                Ok(Ok(s)) => {
                    let _ = s.set_nodelay(true);
                    Tried::Answered((s, node), None)
                }
                Ok(Err(e)) => Tried::Failed(Error::with_cause(Kind::ConnectFailed, e)),
                Err(_) => Tried::Failed(Error::with_cause(
                    Kind::ConnectTimeout,
                    format_args!("after {:?}", up.timeouts.connect),
                )),
            }
        }
        .await
    });
    match tried {
        Ok(got) => Some(got),
        Err((None, e)) => {
            w.failed(Failure {
                status: None,
                ..Failure::of("stream route: no upstream node", &route.id, "-", &e)
            });
            None
        }
        Err((Some(node), err)) => {
            w.failed(Failure {
                status: None,
                ..Failure::of(
                    "stream route: cannot connect upstream",
                    &route.id,
                    &up.nodes[node].authority,
                    &err,
                )
            });
            None
        }
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
async fn relay<C, U>(mut client: C, up: &mut U, route: &StreamRoute, session: &Counted)
where
    C: AsyncRead + AsyncWrite + crate::relay::ReadReady + Unpin,
    U: AsyncRead + AsyncWrite + crate::relay::ReadReady + Unpin,
{
    let moved = crate::relay::copy_with_idle(&mut client, up, route.idle, STREAM_BUFFER).await;
    session.moved(moved.from_a, moved.to_a);
    if let Err(e) = moved.end {
        debug!(route = %route.id, cause = %e, "stream connection ended");
    }
    let _ = client.shutdown().await;
}

// === UDP ===

/// One client's UDP session: a socket connected to the chosen node.
struct Session {
    up: Rc<UdpSocket>,
    last: Rc<Cell<Instant>>,
    counted: Rc<Counted>,
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
            .map(|s| (s.up.clone(), s.last.clone(), s.counted.clone()));
        if let Some((up, last, counted)) = existing {
            last.set(Instant::now());
            counted.moved(n as u64, 0);
            let _ = up.send(&buf[..n]).await;
            continue;
        }
        if sessions.borrow().len() >= MAX_UDP_SESSIONS {
            debug!(listen = %key, client = %client, "udp: session limit reached; datagram dropped");
            continue;
        }
        let snap = w.snapshot();
        let Some(route) = snap
            .streams
            .udp
            .get(&key)
            .and_then(|c| c.for_client(client.ip()))
            .cloned()
        else {
            continue;
        };
        // A session does not wait: datagrams keep arriving.
        let Some((held, _)) = admit(&route, client.ip(), "udp session") else {
            continue;
        };
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
        let counted = Rc::new(Counted::open(&w, &route, "udp"));
        counted.moved(n as u64, 0);
        let _ = upsock.send(&buf[..n]).await;
        sessions.borrow_mut().insert(
            client,
            Session {
                up: upsock.clone(),
                last: last.clone(),
                counted: counted.clone(),
            },
        );
        let (sock, sessions) = (sock.clone(), sessions.clone());
        tokio::task::spawn_local(async move {
            // Counted slots are given back when the session ends.
            let _held = held;
            let mut rbuf = vec![0u8; MAX_DATAGRAM];
            loop {
                let deadline = last.get() + route.idle;
                tokio::select! {
                    r = upsock.recv(&mut rbuf) => match r {
                        Ok(m) => {
                            last.set(Instant::now());
                            counted.moved(0, m as u64);
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

/// A stream route's failure that is not an [`Error`], for the error log.
fn stream_failure<'a>(
    what: &'static str,
    route: &'a StreamRoute,
    node: &'a str,
    kind: &'static str,
    cause: &'a dyn std::fmt::Display,
) -> Failure<'a> {
    Failure {
        level: crate::failures::Level::Error,
        what,
        route: &route.id,
        node,
        status: None,
        side: "upstream",
        kind,
        cause,
    }
}
