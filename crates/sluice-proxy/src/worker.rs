//! A worker: one OS thread, one single-threaded tokio runtime, its own listening sockets, its
//! own upstream pools. A request is accepted, proxied and answered on one thread: the client
//! side and the upstream side share one event loop (seeds/004: no hand-off between threads).

use std::cell::{Cell, RefCell};
use std::net::TcpListener as StdListener;
use std::rc::Rc;
use std::sync::Arc;
use std::task::Waker;
use std::time::Duration;

use arc_swap::ArcSwap;
use rustc_hash::FxHashMap;
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};
use tracing::warn;

use crate::access_log::AccessLog;
use crate::client_io::{ClientIo, Rewind};
use crate::snapshot::Snapshot;
use crate::tls::Alpn;
use crate::upstream::{LocalBalancer, LocalNodes};

/// How often idle upstream connections are checked and the access log is flushed.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// State of one worker, shared by its connection tasks (never by other workers).
#[derive(Debug)]
pub(crate) struct Worker {
    pub(crate) index: usize,
    live: Arc<ArcSwap<Snapshot>>,
    /// The snapshot this worker uses, wrapped in an `Rc` on purpose: cloning it per request
    /// bumps a worker-local count, where cloning the `Arc` would write a cache line shared
    /// with every other worker.
    #[allow(clippy::redundant_allocation)]
    current: RefCell<Rc<Arc<Snapshot>>>,
    /// Keep-alive pools and balancer counters, by node (its pool key: address and connection
    /// settings), not by position, so node lists can change at run time.
    pub(crate) nodes: RefCell<LocalNodes>,
    /// Balancer state (round-robin weights, or the load counters of the nodes in order), by
    /// upstream uid.
    pub(crate) balancers: RefCell<FxHashMap<u64, LocalBalancer>>,
    /// Retry budgets, by upstream uid.
    pub(crate) budgets: RefCell<FxHashMap<u64, crate::upstream::shed::Budget>>,
    pub(crate) draining: Cell<bool>,
    idle: RefCell<IdleWakers>,
    conns: Cell<usize>,
    max_conns: usize,
    slot_free: Notify,
    pub(crate) access_log: Option<RefCell<AccessLog>>,
    /// HTTP/2 connections to upstream nodes (`http2`, `grpc`), by node pool key: one
    /// multiplexed connection each.
    pub(crate) h2_conns: RefCell<FxHashMap<u64, crate::h2_up::H2Conn>>,
    /// Held while a connection to a node is being opened (one attempt at a time).
    pub(crate) h2_connecting: RefCell<FxHashMap<u64, ConnectTurn>>,
}

/// Taken by the request that opens a worker's HTTP/2 connection to a node; holds the last
/// failed attempt (when, and why) for the requests that waited on it.
pub(crate) type ConnectTurn =
    Rc<tokio::sync::Mutex<Option<(std::time::Instant, crate::error::Error)>>>;

impl Worker {
    pub(crate) fn new(
        index: usize,
        live: Arc<ArcSwap<Snapshot>>,
        max_conns: usize,
        access_log: Option<AccessLog>,
    ) -> Self {
        let current = Rc::new(live.load_full());
        Worker {
            index,
            live,
            current: RefCell::new(current),
            nodes: RefCell::new(LocalNodes::default()),
            balancers: RefCell::new(FxHashMap::default()),
            budgets: RefCell::new(FxHashMap::default()),
            draining: Cell::new(false),
            idle: RefCell::new(IdleWakers::default()),
            conns: Cell::new(0),
            max_conns,
            slot_free: Notify::new(),
            access_log: access_log.map(RefCell::new),
            h2_conns: RefCell::new(FxHashMap::default()),
            h2_connecting: RefCell::new(FxHashMap::default()),
        }
    }

    /// The snapshot a new request uses. Reads the shared `ArcSwap` without writing to any
    /// shared cache line; the worker keeps its own reference count.
    #[inline]
    #[allow(clippy::redundant_allocation)]
    pub(crate) fn snapshot(&self) -> Rc<Arc<Snapshot>> {
        let latest = self.live.load();
        let mut cur = self.current.borrow_mut();
        if !Arc::ptr_eq(&latest, &cur) {
            *cur = Rc::new(arc_swap::Guard::into_inner(latest));
        }
        cur.clone()
    }

    /// Registers an idle connection's waker, so that draining can wake it.
    #[inline]
    pub(crate) fn register_idle(&self, slot: &mut Option<usize>, waker: &Waker) {
        self.idle.borrow_mut().register(slot, waker);
    }

    pub(crate) fn unregister_idle(&self, slot: &mut Option<usize>) {
        if let Some(i) = slot.take() {
            self.idle.borrow_mut().remove(i);
        }
    }

    fn begin_drain(&self) {
        self.draining.set(true);
        self.idle.borrow_mut().wake_all();
    }

    pub(crate) fn conn_closed(&self) {
        let n = self.conns.get();
        self.conns.set(n - 1);
        if n == self.max_conns {
            self.slot_free.notify_one();
        }
    }

    fn sweep(&self) {
        let snap = self.snapshot();
        let mut nodes = self.nodes.borrow_mut();
        let mut h2 = self.h2_conns.borrow_mut();
        // The nodes of the configuration in service, with their idle timeouts: state of any
        // other node goes (an HTTP/2 connection closes once the last request using it lets
        // go); the round-robin weights of upstreams no longer in service too.
        let mut live: FxHashMap<u64, Duration> = FxHashMap::default();
        let mut uids = rustc_hash::FxHashSet::default();
        for u in snap.upstreams.iter() {
            uids.insert(u.uid);
            for n in u.nodes.iter() {
                live.insert(n.pool_key, u.keepalive.idle);
            }
        }
        nodes.sweep(&live);
        h2.retain(|key, _| live.contains_key(key));
        self.h2_connecting
            .borrow_mut()
            .retain(|key, _| live.contains_key(key));
        self.balancers
            .borrow_mut()
            .retain(|uid, _| uids.contains(uid));
        self.budgets
            .borrow_mut()
            .retain(|uid, _| uids.contains(uid));
        drop((nodes, h2));
        if let Some(log) = &self.access_log {
            log.borrow_mut().flush();
        }
    }

    /// A worker with an empty configuration, for unit tests of per-worker state.
    #[cfg(test)]
    pub(crate) fn for_tests() -> Worker {
        #[derive(Debug)]
        struct NoPlugins;
        impl sluice_core::plugin::Plugins for NoPlugins {
            fn get(&self, _: &str) -> Option<&dyn sluice_core::plugin::PluginFactory> {
                None
            }
            fn all(&self) -> Vec<&dyn sluice_core::plugin::PluginFactory> {
                Vec::new()
            }
        }
        let cfg = sluice_config::Config::default();
        let snap = crate::snapshot::compile(
            &cfg,
            &NoPlugins,
            &sluice_core::state::StateRegistry::default(),
        )
        .expect("empty configuration");
        Worker::new(0, Arc::new(ArcSwap::from_pointee(snap)), 16, None)
    }
}

/// Wakers of idle connections, in a slab.
#[derive(Debug, Default)]
struct IdleWakers {
    slots: Vec<Option<Waker>>,
    free: Vec<usize>,
}

impl IdleWakers {
    fn register(&mut self, slot: &mut Option<usize>, waker: &Waker) {
        match *slot {
            Some(i) => {
                if let Some(w) = &mut self.slots[i]
                    && !w.will_wake(waker)
                {
                    w.clone_from(waker);
                }
            }
            None => {
                let i = match self.free.pop() {
                    Some(i) => {
                        self.slots[i] = Some(waker.clone());
                        i
                    }
                    None => {
                        self.slots.push(Some(waker.clone()));
                        self.slots.len() - 1
                    }
                };
                *slot = Some(i);
            }
        }
    }

    fn remove(&mut self, i: usize) {
        self.slots[i] = None;
        self.free.push(i);
    }

    fn wake_all(&mut self) {
        for w in self.slots.iter().flatten() {
            w.wake_by_ref();
        }
    }
}

/// What a listening socket serves.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ListenKind {
    /// HTTP, over TLS or not; HTTP/2 too when `http2`.
    Http { tls: bool, http2: bool },
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
    local.block_on(&rt, async move {
        let mut accepting = Vec::new();
        for (l, kind) in sockets.tcp {
            let l = TcpListener::from_std(l)?;
            accepting.push(tokio::task::spawn_local(accept_loop(l, kind, w.clone())));
        }
        for (u, key) in sockets.udp {
            let u = tokio::net::UdpSocket::from_std(u)?;
            accepting.push(tokio::task::spawn_local(crate::stream::udp_loop(
                u,
                key,
                w.clone(),
            )));
        }
        let sweeper = {
            let w = w.clone();
            tokio::task::spawn_local(async move {
                let mut tick = tokio::time::interval(SWEEP_EVERY);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    w.sweep();
                }
            })
        };
        let _ = shutdown.wait_for(|stop| *stop).await;
        // Stop accepting first (dropping the sockets), then let connections finish.
        for task in &accepting {
            task.abort();
        }
        for task in accepting {
            let _ = task.await;
        }
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
        sweeper.abort();
        if let Some(log) = &w.access_log {
            log.borrow_mut().flush();
        }
        Ok::<_, std::io::Error>(())
    })
}

async fn accept_loop(listener: TcpListener, kind: ListenKind, w: Rc<Worker>) {
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
                tokio::task::spawn_local(handle(io, peer, kind, w.clone()));
            }
            Err(e) => {
                // EMFILE/ENFILE and the like: back off instead of spinning.
                warn!(worker = w.index, error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Serves one accepted connection; its slot in the worker's connection count is freed when it
/// ends, whatever the path.
async fn handle(
    io: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    kind: ListenKind,
    w: Rc<Worker>,
) {
    struct Slot(Rc<Worker>);
    impl Drop for Slot {
        fn drop(&mut self) {
            self.0.conn_closed();
        }
    }
    let _slot = Slot(w.clone());
    let local = io.local_addr().unwrap_or(peer);
    match kind {
        ListenKind::Http {
            tls: false,
            http2: false,
        } => {
            crate::conn::serve(ClientIo::Tcp(io), peer, local, bytes::Bytes::new(), w).await;
        }
        ListenKind::Http {
            tls: false,
            http2: true,
        } => {
            // Cleartext HTTP/2 with prior knowledge starts with the preface; anything else
            // is HTTP/1.1.
            let mut io = io;
            let (pre, is_h2) = sniff_preface(&mut io).await;
            if is_h2 {
                let io = Rewind::new(pre, io);
                crate::h2::serve(io, peer, local, false, None, w).await;
            } else {
                crate::conn::serve(ClientIo::Tcp(io), peer, local, pre, w).await;
            }
        }
        ListenKind::Http { tls: true, http2 } => {
            let snap = w.snapshot();
            let io = Rewind::new(bytes::Bytes::new(), io);
            let alpn = if http2 { Alpn::H2 } else { Alpn::Http1 };
            if let Some(tls) = crate::tls::accept(io, &snap, alpn).await {
                drop(snap);
                let io = ClientIo::Tls(Box::new(tls));
                let subject = io.client_subject();
                let ClientIo::Tls(tls) = io else {
                    return;
                };
                if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
                    crate::h2::serve(*tls, peer, local, true, subject, w).await;
                } else {
                    crate::conn::serve(ClientIo::Tls(tls), peer, local, bytes::Bytes::new(), w)
                        .await;
                }
            }
        }
        ListenKind::Stream(key) => crate::stream::serve(io, peer, key, w).await,
    }
}

/// Reads until the bytes either are the HTTP/2 preface or cannot be; returns them and which.
async fn sniff_preface(io: &mut tokio::net::TcpStream) -> (bytes::Bytes, bool) {
    use tokio::io::AsyncReadExt;
    let mut buf = bytes::BytesMut::with_capacity(4096);
    loop {
        let n = buf.len().min(crate::h2::PREFACE.len());
        if buf[..n] != crate::h2::PREFACE[..n] {
            return (buf.freeze(), false);
        }
        if n == crate::h2::PREFACE.len() {
            return (buf.freeze(), true);
        }
        match io.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return (buf.freeze(), false),
            Ok(_) => {}
        }
    }
}
