//! The connections of a worker: its accept loops, each accepted connection handed to the
//! HTTP/1.1 engine (`conn`), HTTP/2 (`h2`) or a stream route (`stream`), the sweeper, and the
//! drain on shutdown. Depends on those; they depend only on the worker's state
//! (`worker.rs`), so the dispatch and the state do not import each other.

use std::future::Future;
use std::net::TcpListener as StdListener;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::warn;

use crate::client_io::{ClientIo, Rewind};
use crate::tls::Alpn;
use crate::worker::Worker;

/// How often idle upstream connections are checked (and a reload's access log settings
/// applied).
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// What a listening socket serves.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ListenKind {
    /// HTTP, over TLS or not; HTTP/2 too when `http2`. `listener`: its index in `listen`.
    Http {
        tls: bool,
        http2: bool,
        /// Each connection opens with a PROXY protocol header (`proxy_protocol.rs`).
        proxy_protocol: bool,
        listener: usize,
    },
    /// Stream routes configured with this listen address.
    Stream(std::net::SocketAddr),
}

/// One worker's sockets.
#[derive(Debug, Default)]
pub(crate) struct Sockets {
    pub(crate) tcp: Vec<(StdListener, ListenKind)>,
    /// UDP stream route sockets, with their configured address.
    pub(crate) udp: Vec<(std::net::UdpSocket, std::net::SocketAddr)>,
}

/// Runs a worker until shutdown is signalled and its connections have drained (or `drain`
/// has passed). Called on the worker's own thread.
pub(crate) fn run(
    worker: Worker,
    sockets: Sockets,
    mut shutdown: watch::Receiver<bool>,
    drain: Duration,
) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    let w = Rc::new(worker);
    // The worker's own loop runs as a task of its own, and the runtime waits on its handle:
    // `LocalSet::block_on` polls the future it is given at every turn of the event loop, woken
    // or not, and this loop's `select!` (two watch channels, each a `Notify` underneath) cost
    // about 300 instructions a turn, where polling a join handle costs a few loads
    // (docs/benchmarks.md, "The worker's own loop, polled at every turn").
    let main = local.spawn_local(async move {
        let listeners = sockets
            .tcp
            .into_iter()
            .map(|(l, kind)| Ok((Rc::new(TcpListener::from_std(l)?), kind)))
            .collect::<std::io::Result<Vec<_>>>()?;
        let mut udp = Some(
            sockets
                .udp
                .into_iter()
                .map(|(u, key)| Ok((tokio::net::UdpSocket::from_std(u)?, key)))
                .collect::<std::io::Result<Vec<_>>>()?,
        );
        // Accepting while the gate is open (a binary upgrade closes it while it hands this
        // process's state over, and a new process opens it once it has that state).
        let mut gate = crate::listener::gate();
        let mut accepting: Vec<tokio::task::JoinHandle<()>> = Vec::new();
        let mut udp_loops = Vec::new();
        let sweeper = {
            let w = w.clone();
            tokio::task::spawn_local(async move {
                let mut tick = tokio::time::interval(SWEEP_EVERY);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    w.sweep();
                    crate::conn::trim_busy();
                }
            })
        };
        // The access log's buffer goes out every `log.access.flush` (and when it fills).
        let flusher = {
            let w = w.clone();
            tokio::task::spawn_local(async move {
                loop {
                    tokio::time::sleep(w.log_flush_every()).await;
                    w.flush_log();
                }
            })
        };
        loop {
            let open = *gate.borrow_and_update();
            if open && accepting.is_empty() {
                for (l, kind) in &listeners {
                    accepting.push(tokio::task::spawn_local(accept_loop(
                        l.clone(),
                        *kind,
                        w.clone(),
                    )));
                }
                // UDP sockets are read from the first opening on (a pause leaves them be:
                // their sessions live in the loop).
                for (u, key) in udp.take().into_iter().flatten() {
                    udp_loops.push(tokio::task::spawn_local(crate::stream::udp_loop(
                        u,
                        key,
                        w.clone(),
                    )));
                }
            } else if !open {
                // Cancelled while waiting in `accept`: no connection is lost (it stays queued).
                for task in accepting.drain(..) {
                    task.abort();
                    let _ = task.await;
                }
            }
            tokio::select! {
                _ = shutdown.wait_for(|stop| *stop) => break,
                Ok(()) = gate.changed() => {}
            }
        }
        // Stop accepting first (dropping the sockets), then let connections finish.
        for task in accepting.iter().chain(&udp_loops) {
            task.abort();
        }
        for task in accepting.into_iter().chain(udp_loops) {
            let _ = task.await;
        }
        drop(listeners);
        w.begin_drain();
        let deadline = tokio::time::Instant::now() + drain;
        while w.conns.get() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if w.conns.get() > 0 {
            warn!(
                worker = w.index,
                open = w.conns.get(),
                "drain timeout: closing remaining connections"
            );
        }
        // Work plugins keep on the worker (the loggers' queued entries) goes out, for at least
        // a second however long the connections took.
        let deadline = std::time::Instant::now()
            + deadline
                .saturating_duration_since(tokio::time::Instant::now())
                .max(Duration::from_secs(1));
        sluice_core::plugin::worker_stopping(deadline).await;
        sweeper.abort();
        flusher.abort();
        w.flush_log();
        w.summarise_failures(true);
        Ok::<_, std::io::Error>(())
    });
    match local.block_on(&rt, main) {
        Ok(done) => done,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(std::io::Error::other(e)),
    }
}

async fn accept_loop(listener: Rc<TcpListener>, kind: ListenKind, w: Rc<Worker>) {
    loop {
        if w.conns.get() >= w.max_conns {
            // At the limit: leave new connections in the kernel backlog until one closes.
            w.slot_free.notified().await;
            continue;
        }
        match listener.accept().await {
            Ok((io, peer)) => {
                let _ = io.set_nodelay(true);
                w.conns.set(w.conns.get() + 1);
                match kind {
                    ListenKind::Http {
                        tls: false,
                        http2: false,
                        proxy_protocol: false,
                        listener,
                    } => tokio::task::spawn_local(plain(io, peer, listener, w.clone())),
                    // `handle` is the one entry point; the plain path is spawned directly only
                    // to keep its task small.
                    _ => tokio::task::spawn_local(handle(io, peer, kind, w.clone())),
                };
            }
            Err(e) => {
                // EMFILE/ENFILE and the like: back off instead of spinning.
                warn!(worker = w.index, error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Serves a connection of a plain HTTP/1.1 listener: the most common, and the one most often
/// held idle by the thousand, so its task holds the connection's state once and nothing else
/// (`handle`, an `async fn`, would keep its arguments beside what they are moved into).
fn plain(
    io: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    listener: usize,
    w: Rc<Worker>,
) -> impl Future<Output = ()> {
    let slot = ConnSlot(w.clone());
    let open = Open::new(&w, listener, 0);
    let local = io.local_addr().unwrap_or(peer);
    crate::conn::serve(
        ClientIo::Tcp(io),
        peer,
        local,
        Bytes::new(),
        Some(listener),
        w,
        (slot, open),
    )
}

/// A connection's place in the worker's connection count, freed when it ends, whatever the
/// path.
struct ConnSlot(Rc<Worker>);

impl Drop for ConnSlot {
    fn drop(&mut self) {
        self.0.conn_closed();
    }
}

/// Serves one accepted connection; its slot in the worker's connection count is freed when it
/// ends, whatever the path. This future lives as long as the connection: the HTTP/1.1 path
/// (`conn::serve`) is small while idle, and the larger futures of the other paths are boxed so
/// that they do not make every connection's future as large as theirs.
async fn handle(
    io: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    kind: ListenKind,
    w: Rc<Worker>,
) {
    if let ListenKind::Http {
        tls: false,
        http2: false,
        proxy_protocol: false,
        listener,
    } = kind
    {
        return plain(io, peer, listener, w).await;
    }
    let _slot = ConnSlot(w.clone());
    let mut io = io;
    let mut peer = peer;
    let mut local = io.local_addr().unwrap_or(peer);
    // What came after a PROXY protocol header: the connection's first bytes.
    let mut first = Bytes::new();
    if let ListenKind::Http {
        proxy_protocol: true,
        ..
    } = kind
    {
        let timeout = w.snapshot().settings.client_header;
        match crate::proxy_protocol::read(&mut io, timeout).await {
            Ok(p) => {
                if let Some((client, to)) = p.addrs {
                    (peer, local) = (client, to);
                }
                first = p.rest;
            }
            Err(why) => {
                tracing::debug!(%peer, cause = why, "connection closed");
                return;
            }
        }
    }
    match kind {
        ListenKind::Http {
            tls: false,
            http2: false,
            listener,
            ..
        } => {
            let _open = Open::new(&w, listener, 0);
            crate::conn::serve(ClientIo::Tcp(io), peer, local, first, Some(listener), w, ()).await;
        }
        ListenKind::Http {
            tls: false,
            http2: true,
            listener,
            ..
        } => {
            // Cleartext HTTP/2 with prior knowledge starts with the preface; anything else
            // is HTTP/1.1.
            let (pre, is_h2) = sniff_preface(&mut io, first).await;
            if is_h2 {
                let _open = Open::new(&w, listener, 1);
                let io = Rewind::new(pre, io);
                Box::pin(crate::h2::serve(
                    io,
                    crate::h2_wire::Peer::new(peer, local, false, None, None),
                    listener,
                    w,
                ))
                .await;
            } else {
                let _open = Open::new(&w, listener, 0);
                crate::conn::serve(ClientIo::Tcp(io), peer, local, pre, Some(listener), w, ())
                    .await;
            }
        }
        ListenKind::Http {
            tls: true,
            http2,
            listener,
            ..
        } => {
            let alpn = if http2 { Alpn::H2 } else { Alpn::Http1 };
            let accepted = Box::pin(handshake(io, first, alpn, &w)).await;
            if let Some(tls) = accepted {
                let io = ClientIo::Tls(tls);
                let subject = io.client_subject();
                let without_cert = io.without_cert();
                let ClientIo::Tls(tls) = io else {
                    return;
                };
                if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
                    let _open = Open::new(&w, listener, 1);
                    Box::pin(crate::h2::serve(
                        *tls,
                        crate::h2_wire::Peer::new(peer, local, true, subject, without_cert),
                        listener,
                        w,
                    ))
                    .await;
                } else {
                    let _open = Open::new(&w, listener, 0);
                    crate::conn::serve(
                        ClientIo::Tls(tls),
                        peer,
                        local,
                        Bytes::new(),
                        Some(listener),
                        w,
                        (),
                    )
                    .await;
                }
            }
        }
        ListenKind::Stream(key) => Box::pin(crate::stream::serve(io, peer, key, w)).await,
    }
}

/// The TLS handshake, counted; the session boxed (it is large and lives with the connection).
async fn handshake(
    io: tokio::net::TcpStream,
    first: Bytes,
    alpn: Alpn,
    w: &Worker,
) -> Option<Box<tokio_rustls::server::TlsStream<Rewind<tokio::net::TcpStream>>>> {
    let snap = w.snapshot();
    let io = Rewind::new(first, io);
    let accepted = crate::tls::accept(io, &snap.tls, snap.settings.client_header, alpn).await;
    if w.metrics.enabled() {
        match &accepted {
            Some(_) => w.metrics.shard.tls_ok.add(1),
            None => w.metrics.shard.tls_failed.add(1),
        }
    }
    accepted.map(Box::new)
}

/// An open client connection in the metrics' `sluice_connections` gauge (`proto`: 0 HTTP/1.1,
/// 1 HTTP/2), for as long as it lives.
struct Open {
    w: Rc<Worker>,
    listener: usize,
    proto: usize,
}

impl Open {
    fn new(w: &Rc<Worker>, listener: usize, proto: usize) -> Option<Open> {
        let g = w.metrics.shard.conns.get(listener)?;
        g.open[proto].add(1);
        Some(Open {
            w: w.clone(),
            listener,
            proto,
        })
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.w.metrics.shard.conns[self.listener].open[self.proto].add(-1);
    }
}

/// Reads until the bytes (after `first`, read before) either are the HTTP/2 preface or cannot
/// be; returns them and which.
async fn sniff_preface(io: &mut tokio::net::TcpStream, first: Bytes) -> (bytes::Bytes, bool) {
    use tokio::io::AsyncReadExt;
    let mut buf = bytes::BytesMut::with_capacity(4096.max(first.len()));
    buf.extend_from_slice(&first);
    loop {
        let n = buf.len().min(crate::h2_wire::PREFACE.len());
        if buf[..n] != crate::h2_wire::PREFACE[..n] {
            return (buf.freeze(), false);
        }
        if n == crate::h2_wire::PREFACE.len() {
            return (buf.freeze(), true);
        }
        match io.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return (buf.freeze(), false),
            Ok(_) => {}
        }
    }
}
