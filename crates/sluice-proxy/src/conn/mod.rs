//! One client connection: read a request head, route it, proxy it, repeat while keep-alive
//! allows. The request's life in order (docs/phases.md has the diagram):
//!
//! 1. wait for a head (keep-alive idle timeout, then the header timeout from the first byte);
//! 2. parse it strictly; a framing or limit violation is answered (400/408/413/414/417/431/
//!    501) and the connection closed;
//! 3. match a route against the snapshot taken for this request (404 when none);
//! 4. run its plugin phases (`phases.rs`) and proxy it (`forward/`), which writes the response;
//! 5. log it, and loop unless the connection must close.

mod body;
mod bufs;
mod forward;
mod idle;
mod outcome;
mod phases;
mod respond;
mod upgrade;

use std::cell::Cell;
use std::future::poll_fn;
use std::net::SocketAddr;
use std::pin::pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::time::Instant;

use crate::access_log::View;
use crate::client_io::ClientIo;
use crate::io::{Timer, new_timer, until};
use crate::metrics::Proto;
use crate::observe::{Client, Exchange};
use crate::snapshot::{Route, Settings, Snapshot};
use crate::worker::Worker;
use bufs::{Bufs, READ_BUF};
use idle::{Idle, close_notify, wait_idle};
pub(crate) use outcome::{Next, Outcome};
pub(crate) use phases::{Chains, Plugged, phase, request_phases};
use sluice_core::body::RequestBody;
use sluice_core::http::RequestHead;
use sluice_core::http::request::{self, Reject};
use sluice_core::{Ctx, Response};
use upgrade::{Logged, Tunnel};

/// The methods a 405 names in `Allow` (RFC 9110 §15.5.6): what any route serves by default.
const ALLOW: &[u8] = b"GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH";

/// A connection while it is busy: its [`Link`] and the buffers of the [`Busy`] serving it.
pub(crate) struct Conn<'b> {
    pub(crate) l: Box<Link>,
    pub(crate) b: &'b mut Bufs,
}

enum Head {
    Request(RequestHead),
    Reject(Reject),
    Closed,
}

/// Serves a client connection until it closes.
/// `pre`: bytes already read from the client (while telling HTTP/2 from HTTP/1.1).
///
/// A connection waiting for its next request holds no buffer and no request state: this
/// future keeps only the connection's [`Link`] (socket, addresses, timer) and waits for the
/// socket to become readable. Then it takes a [`Busy`] from the worker's pool (the future that
/// reads, routes and proxies requests, with its buffers), and gives it back once the connection
/// is idle again. NGINX does the same with a keep-alive connection's buffers. An idle
/// keep-alive connection went from ~21 KiB to ~1.5 KiB (bench/idle_memory.sh).
///
/// A plain function returning the future, rather than an `async fn`: an `async fn` keeps its
/// arguments and the locals they are moved into side by side for its whole life
/// (rust-lang/rust#62958), which would double the idle connection's state.
///
/// `hold`: what the caller keeps until the connection ends (guards that count it).
pub(crate) fn serve<G: 'static>(
    io: ClientIo,
    peer: SocketAddr,
    local: SocketAddr,
    pre: bytes::Bytes,
    listener: Option<usize>,
    w: Rc<Worker>,
    hold: G,
) -> impl std::future::Future<Output = ()> {
    let parks = io.parks();
    // A bridged HTTP/2 stream never waits idle: no keep-alive to read for it.
    let keepalive = if parks {
        w.snapshot().settings.keepalive
    } else {
        Duration::ZERO
    };
    let mut link = Box::new(Link {
        keepalive,
        listener,
        client_ip: match io.ip_text() {
            Some(ip) => ip.clone(),
            None => sluice_core::realip::ip_text(peer.ip()).into(),
        },
        client_subject: io.client_subject(),
        without_cert: io.without_cert(),
        peer,
        local,
        w,
        io,
        timer: new_timer(),
        served: 0,
        idle_slot: None,
        idle_until: None,
        tunnel: None,
        tcp: None,
    });
    let mut pre = Some(pre).filter(|p| !p.is_empty());
    async move {
        loop {
            if pre.is_none() && parks && !link.idle_wait().await {
                break;
            }
            let mut busy = take_busy();
            busy.mail.link.set(Some((link, pre.take())));
            let (back, verdict) = poll_fn(|cx| {
                let _ = busy.fut.as_mut().poll(cx);
                match busy.mail.done.take() {
                    Some(r) => Poll::Ready(r),
                    None => Poll::Pending,
                }
            })
            .await;
            link = back;
            put_busy(busy);
            match verdict {
                Verdict::Idle => {}
                Verdict::Close => break,
                Verdict::Tunnel => {
                    if let Some(mut t) = link.tunnel.take() {
                        // Boxed: only tunnels pay for its state, not every connection's future.
                        Box::pin(upgrade::relay(&mut link.io, &mut t)).await;
                        if let Some(log) = &t.log {
                            if let Some(parked) = t.parked.take() {
                                log_upgraded(log, *parked);
                            }
                            link.finish(
                                &log.head,
                                log.route.as_deref(),
                                &log.outcome,
                                log.started,
                                &log.snap,
                            );
                        }
                    }
                    break;
                }
            }
        }
        close_notify(&mut link.io, &mut link.timer).await;
        let w = link.w.clone();
        w.unregister_idle(&mut link.idle_slot);
        drop(hold);
    }
}

/// The log phase of an upgraded request's plugins, when its tunnel closed; then what they held
/// (limit-conn's slots) is let go.
fn log_upgraded(log: &Logged, parked: sluice_core::ctx::Parked) {
    let (snap, route) = (&*log.snap, log.route.as_deref());
    let chain = route.map_or(&snap.globals, |r| &r.chain);
    let chains = Chains::of(chain, snap);
    let cx = parked.resume(
        route.map_or("", |r| &*r.id),
        route.map(|r| r.names()).unwrap_or_default(),
        &snap.consumers,
    );
    let consumer = chains.consumer(&cx);
    let o = &log.outcome;
    let done = crate::observe::done(o.status, o.bytes, o.bytes_in, log.started, o.answer);
    for e in phase(chain, consumer, |c| &c.log) {
        e.plugin.log(&log.head, &done, &cx);
    }
}

/// What a connection keeps for its whole life; the rest of a [`Conn`] is lent while it is
/// busy.
pub(crate) struct Link {
    w: Rc<Worker>,
    io: ClientIo,
    peer: SocketAddr,
    local: SocketAddr,
    /// The client's address as text (shared with the HTTP/2 connection of a bridged stream).
    client_ip: Rc<str>,
    client_subject: Option<Rc<str>>,
    /// TLS without a client certificate: the name asked for (each path is checked against
    /// what its certificate lets such a connection ask for).
    without_cert: Option<Option<Rc<str>>>,
    timer: Timer,
    served: u32,
    idle_slot: Option<usize>,
    keepalive: Duration,
    /// When the current idle wait ends: set by its first wait, kept across wake-ups that
    /// bring no request bytes (a partial TLS record, a KeyUpdate), cleared by request bytes.
    idle_until: Option<Instant>,
    listener: Option<usize>,
    /// A WebSocket upgraded by the request just served, to run once the request future is
    /// given back.
    tunnel: Option<Box<Tunnel>>,
    /// The TCP peer and its text while the current request's real address (`real-ip`, the
    /// node-wide `real_ip`) stands in `peer` and `client_ip`: everything that reads the
    /// client (routing, the forwarded fields, `chash`, the access log) reads the real one.
    tcp: Option<Box<(SocketAddr, Rc<str>)>>,
}

impl Link {
    /// The current request's client is `real`, not the TCP peer (until [`Link::end_real`]).
    fn set_client(&mut self, real: SocketAddr) {
        if real == self.peer {
            return;
        }
        let ip: Rc<str> = sluice_core::realip::ip_text(real.ip()).into();
        let old_ip = std::mem::replace(&mut self.client_ip, ip);
        let old = std::mem::replace(&mut self.peer, real);
        if self.tcp.is_none() {
            self.tcp = Some(Box::new((old, old_ip)));
        }
    }

    /// The request that had a real address is done: the TCP peer is the client again.
    #[cold]
    fn end_real(&mut self) {
        if let Some(t) = self.tcp.take() {
            (self.peer, self.client_ip) = *t;
        }
    }

    /// The TCP peer, whatever address the current request has.
    fn tcp_peer(&self) -> SocketAddr {
        self.tcp.as_ref().map_or(self.peer, |t| t.0)
    }
}

impl Link {
    /// Waits, holding no buffer, until the connection is readable. False when it should close:
    /// idle too long, or the worker is draining. (An error is found by the read that follows.)
    fn idle_wait(&mut self) -> impl std::future::Future<Output = bool> + '_ {
        let Link {
            w,
            io,
            timer,
            idle_slot,
            listener,
            keepalive,
            idle_until,
            ..
        } = self;
        let mut idle = Idle::new(w, timer, idle_slot, *listener, *keepalive, idle_until);
        poll_fn(move |cx| match io.poll_read_ready(cx) {
            Poll::Ready(_) => Poll::Ready(true),
            Poll::Pending => idle.poll(cx),
        })
    }
}

/// The worker's [`Busy`] futures not lent to a connection; and how many are lent now, and at
/// most since the last trim. Per thread, and so per worker: one worker's pool is never touched
/// by another.
struct Pool {
    free: Vec<Busy>,
    lent: usize,
    peak: usize,
}

thread_local! {
    static POOL: std::cell::RefCell<Pool> = const {
        std::cell::RefCell::new(Pool {
            free: Vec::new(),
            lent: 0,
            peak: 0,
        })
    };
}

/// A request future with its buffers, for a connection that has bytes to read.
#[inline]
fn take_busy() -> Busy {
    let b = POOL.with_borrow_mut(|p| {
        p.lent += 1;
        p.peak = p.peak.max(p.lent);
        p.free.pop()
    });
    b.unwrap_or_else(Busy::new)
}

/// Takes back what [`take_busy`] lent.
#[inline]
fn put_busy(b: Busy) {
    POOL.with_borrow_mut(|p| {
        p.lent -= 1;
        p.free.push(b);
    });
}

/// Keeps as many free [`Busy`] futures as were lent at the busiest moment since the last call,
/// beyond those lent now: a burst's memory is given back a second or two after it. Called by
/// the worker's sweep, every second.
pub(crate) fn trim_busy() {
    let dropped = POOL.with_borrow_mut(|p| {
        let keep = p.peak.saturating_sub(p.lent);
        p.peak = p.lent;
        p.free.split_off(keep.min(p.free.len()))
    });
    // Dropped outside the borrow: a future's drop may not reach the pool, but need not know.
    drop(dropped);
}

/// How a busy period of a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Nothing more to read for now: wait for the next request without buffers.
    Idle,
    Close,
    /// A WebSocket was upgraded ([`Link::tunnel`]): its tunnel runs without the request
    /// future and its buffers (an idle tunnel held ~21 KiB with them, bench/idle_memory.sh),
    /// then the connection closes.
    Tunnel,
}

/// Why a route could not be chosen at once.
#[derive(Debug, Clone, Copy)]
enum Slow {
    /// The connection has no client certificate, and the path needs one.
    NoCert,
    /// A candidate route's `vars` read the body.
    Body,
}

/// Where a connection and a busy future meet: the link is put in (with bytes read before), and
/// comes back with the verdict once the connection has nothing more to do for now.
#[derive(Default)]
struct Mailbox {
    link: Cell<Option<(Box<Link>, Option<bytes::Bytes>)>>,
    done: Cell<Option<(Box<Link>, Verdict)>>,
}

/// The future that serves requests, reused from connection to connection: it loops taking a
/// link from its mailbox, serving the connection with its buffers until it is idle or closed,
/// and handing the link back. Polled by the connection's own task: no hand-off between tasks,
/// and no allocation per request (a fresh request future per request would allocate and copy
/// its ~10 KiB each time).
pub(crate) struct Busy {
    fut: std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>,
    mail: Rc<Mailbox>,
}

impl std::fmt::Debug for Busy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Busy")
    }
}

impl Busy {
    pub(crate) fn new() -> Self {
        let mail = Rc::new(Mailbox::default());
        let m = mail.clone();
        let fut = Box::pin(async move {
            let mut bufs = Bufs::fresh();
            loop {
                let (link, pre) = poll_fn(|_| match m.link.take() {
                    Some(l) => Poll::Ready(l),
                    None => Poll::Pending,
                })
                .await;
                let mut c = Conn {
                    l: link,
                    b: &mut bufs,
                };
                if let Some(pre) = pre {
                    c.b.buf.extend_from_slice(&pre);
                }
                let verdict = c.run().await;
                let link = c.l;
                bufs.clean();
                m.done.set(Some((link, verdict)));
            }
        });
        Busy { fut, mail }
    }
}

impl Conn<'_> {
    /// Serves requests until the connection must close or has nothing to read.
    async fn run(&mut self) -> Verdict {
        let mut first = true;
        loop {
            if self.b.buf.is_empty() && self.l.io.parks() {
                if !first {
                    // Served, nothing pipelined: wait in `serve`, without buffers. No read is
                    // tried here: the read of the request drained the socket (a short read),
                    // and if bytes came since, the wait ends at once.
                    return Verdict::Idle;
                }
                // Readable, said the wait: one try, which may still find nothing.
                let mut read = pin!(self.l.io.read_buf(&mut self.b.buf));
                match poll_fn(|cx| Poll::Ready(read.as_mut().poll(cx))).await {
                    Poll::Pending => return Verdict::Idle,
                    Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Verdict::Close,
                    Poll::Ready(Ok(_)) => self.l.idle_until = None,
                }
            }
            first = false;
            let snap = self.l.w.snapshot();
            let mut head = match self.read_head(&snap.settings).await {
                Head::Request(h) => h,
                Head::Closed => return Verdict::Close,
                Head::Reject(r) => {
                    self.reject(r, &snap.settings).await;
                    return Verdict::Close;
                }
            };
            let started = self.l.w.begin();
            self.b.started = started;
            head.take_bytes(&mut self.b.buf);
            self.l.served += 1;
            let (route, mut outcome) = self.handle(&snap, &mut head).await;
            self.l.keepalive = snap.settings.keepalive;
            if outcome.status == 101
                && let Some(tunnel) = self.l.tunnel.as_mut()
            {
                // Logged when the tunnel closes, as NGINX logs an upgraded request.
                tunnel.log = Some(Logged {
                    snap: Arc::clone(&snap),
                    route: route.cloned(),
                    head,
                    outcome,
                    started,
                });
                return Verdict::Tunnel;
            }
            let route = route.map(|r| &**r);
            self.l.finish(&head, route, &outcome, started, &snap);
            if self.l.tcp.is_some() {
                self.l.end_real();
            }
            let mut headers = head.into_fields();
            headers.clear();
            self.b.headers = headers;
            if outcome.next == Next::KeepAlive && self.l.w.draining.get() {
                outcome.next = Next::Close;
            }
            match outcome.next {
                Next::KeepAlive => {}
                Next::Close => return Verdict::Close,
                Next::Linger => {
                    self.linger().await;
                    return Verdict::Close;
                }
            }
        }
    }

    async fn handle<'s>(
        &mut self,
        snap: &'s Snapshot,
        head: &mut RequestHead,
    ) -> (Option<&'s Arc<Route>>, Outcome) {
        self.b.continued = false;
        if let Some(real) = &snap.settings.real_ip {
            self.node_real_ip(real, head);
        }
        let (route, body) = match self.choose(snap, head, None) {
            Ok(route) => (route, None),
            // Rare: a path this connection may not ask for, or a route whose `vars` read the
            // body. (Boxed: kept out of every request's future.)
            Err(slow) => match Box::pin(self.choose_slowly(snap, head, slow)).await {
                Ok(chosen) => chosen,
                Err(outcome) => return (None, outcome),
            },
        };
        let outcome = match route {
            // The common case: no plugin anywhere, no context to set up.
            Some(r) if r.chain.is_empty() => self.proxy(snap, r, head, None).await,
            None if head.method() == sluice_router::Method::Trace => {
                let resp =
                    Response::error(405, "TRACE is not allowed: no route lists it in methods")
                        .header("Allow", ALLOW);
                self.respond(head, &snap.settings, &resp, None, None).await
            }
            None if snap.globals.is_empty() => {
                let resp = Response::error(404, "404 Route Not Found");
                self.respond(head, &snap.settings, &resp, None, None).await
            }
            _ => {
                self.with_plugins(snap, route.map(|r| &**r), head, body)
                    .await
            }
        };
        (route, outcome)
    }

    /// The route for a request, when it can be chosen at once (`body`: the request's body,
    /// once read). Err: the slow path must answer or read first. (Always inlined: called on
    /// every request, a call of its own measured 18 instructions per request.)
    #[inline(always)]
    fn choose<'s>(
        &self,
        snap: &'s Snapshot,
        head: &RequestHead,
        body: Option<&RequestBody>,
    ) -> Result<Option<&'s Arc<Route>>, Slow> {
        let path = sluice_router::normalize_path(head.original_path());
        if let Some(sni) = &self.l.without_cert
            && let Some(allowed) = snap.tls.no_cert_paths(sni.as_deref())
            && !allowed.is_match(&path)
        {
            return Err(Slow::NoCert);
        }
        let wants_body = Cell::new(false);
        let found = snap
            .router
            .find_with(head.host(), head.method(), &path, |r| {
                // Most routes have no conditions: nothing to set up for them.
                if r.admit.is_none() {
                    return true;
                }
                if body.is_none() && r.vars_need_body() {
                    wants_body.set(true);
                    return false;
                }
                let env = sluice_core::expr::ConnEnv {
                    client: self.l.peer,
                    peer: self.l.tcp_peer(),
                    server: self.l.local,
                    https: self.l.io.is_https(),
                    cert_subject: self.l.client_subject.as_deref(),
                    body,
                };
                r.admits(head, &env)
            });
        // A route before any found reads the body: read it, and choose again.
        if wants_body.get() {
            return Err(Slow::Body);
        }
        Ok(found)
    }

    /// The node-wide `real_ip`: the request's client is the address a trusted proxy in front
    /// gave (NGINX's realip module), before routing.
    #[cold]
    #[inline(never)]
    fn node_real_ip(&mut self, real: &sluice_core::realip::RealIp, head: &RequestHead) {
        let env = sluice_core::expr::ConnEnv {
            client: self.l.peer,
            peer: self.l.peer,
            server: self.l.local,
            https: self.l.io.is_https(),
            cert_subject: None,
            body: None,
        };
        let src = sluice_core::env::Request { head, env: &env };
        if let Some(addr) = real.find(self.l.peer.ip(), &src) {
            self.l.set_client(addr);
        }
    }

    /// What [`Conn::choose`] could not do at once: refuse a path that needs a client
    /// certificate, or read the body and choose again.
    async fn choose_slowly<'s>(
        &mut self,
        snap: &'s Snapshot,
        head: &RequestHead,
        slow: Slow,
    ) -> Result<(Option<&'s Arc<Route>>, Option<Rc<RequestBody>>), Outcome> {
        match slow {
            Slow::NoCert => {
                tracing::debug!(client = %self.l.peer, "no client certificate, and the path needs one");
                let resp = Response::error(400, crate::tls::NO_CLIENT_CERT);
                Err(self.respond(head, &snap.settings, &resp, None, None).await)
            }
            Slow::Body => {
                let body = Rc::new(self.read_body_for_vars(head, &snap.settings).await?);
                let route = self.choose(snap, head, Some(&body)).ok().flatten();
                Ok((route, Some(body)))
            }
        }
    }

    /// Runs a request through its plugins' phases: rewrite, access (with the consumer's
    /// plugins merged in once an auth plugin identified one), before_proxy, then the proxy
    /// (which runs header_filter and body_filter), then log.
    async fn with_plugins(
        &mut self,
        snap: &Snapshot,
        route: Option<&Route>,
        head: &mut RequestHead,
        mut body: Option<Rc<RequestBody>>,
    ) -> Outcome {
        let chain = route.map_or(&snap.globals, |r| &r.chain);
        let chains = Chains::of(chain, snap);
        if chain.needs_body && body.is_none() {
            match Box::pin(self.read_body_for_vars(head, &snap.settings)).await {
                Ok(b) => body = Some(Rc::new(b)),
                Err(outcome) => return outcome,
            }
        }
        let route_id = route.map_or("", |r| &*r.id);
        let edits = std::mem::take(&mut self.b.edits);
        let mut cx = Ctx::new(self.l.peer, self.l.local, route_id, &snap.consumers, edits);
        if self.l.tcp.is_some() {
            cx.set_peer(self.l.tcp_peer());
        }
        if let Some(r) = route {
            cx.set_names(r.names());
            if let Some(d) = r.documents() {
                cx.set_documents(d);
            }
        }
        if self.l.io.is_https() {
            cx.set_tls(self.l.client_subject.clone());
        }
        if let Some(b) = body {
            cx.set_body(b);
        }
        let s = &snap.settings;
        let phases = request_phases(chains, head, &mut cx, &self.l.w).await;
        // `real-ip` gave the request its client's address.
        if cx.client() != self.l.peer {
            self.l.set_client(cx.client());
        }
        let outcome = match phases {
            Err(r) => {
                self.respond(head, s, &r, None, Some((chains, &mut cx)))
                    .await
            }
            Ok(()) => match route {
                Some(r) => {
                    let replaced = match cx.take_request_body() {
                        // client-control's limit is on the client's body, not on the new one.
                        Some(r) if r.original > cx.max_body.unwrap_or(s.max_body) => false,
                        Some(r) => self.replace_request_body(head, r.wire, r.body),
                        None => true,
                    };
                    if replaced {
                        self.proxy(snap, r, head, Some((chains, &mut cx))).await
                    } else {
                        // A plugin replaced a body that was not read whole: refused rather
                        // than sent with the wrong framing (the plugins refuse first).
                        let resp = Response::error(413, "413 Request Entity Too Large");
                        self.respond(head, s, &resp, Some(false), Some((chains, &mut cx)))
                            .await
                    }
                }
                None => {
                    let resp = Response::error(404, "404 Route Not Found");
                    self.respond(head, s, &resp, None, Some((chains, &mut cx)))
                        .await
                }
            },
        };
        let mut outcome = outcome;
        outcome.consumer = cx.consumer_index();
        if let Some(t) = self.l.tunnel.as_mut() {
            outcome.carried = cx.carried();
            // Upgraded: the context, with what plugins hold in it (limit-conn's slots, a
            // trace's span), is kept while the tunnel is open; its log phase runs when the
            // tunnel closes (`log_upgraded`).
            let mut edits = std::mem::take(&mut cx.response);
            edits.clear();
            self.b.edits = edits;
            t.parked = Some(Box::new(cx.park()));
            return outcome;
        }
        let consumer = chains.consumer(&cx);
        let mut log = phase(chain, consumer, |c| &c.log).peekable();
        if log.peek().is_some() {
            let o = &outcome;
            let done =
                crate::observe::done(o.status, o.bytes, o.bytes_in, self.b.started, o.answer);
            for e in log {
                e.plugin.log(head, &done, &cx);
            }
        }
        // After the log phase: a `request_id` first read there is the log line's too.
        outcome.carried = cx.carried();
        // Dropping the context releases what it held (limit-conn slots).
        self.b.edits = cx.into_response();
        self.b.edits.clear();
        outcome
    }

    /// Waits for and parses the next request head.
    async fn read_head(&mut self, s: &Settings) -> Head {
        let mut deadline: Option<Instant> = None;
        loop {
            if !self.b.buf.is_empty() {
                match request::parse(&self.b.buf, &s.head, &mut self.b.headers) {
                    Ok(Some(h)) => return Head::Request(h),
                    Ok(None) => {}
                    Err(r) => return Head::Reject(r),
                }
            }
            if self.b.buf.capacity() - self.b.buf.len() < 1024 {
                self.b.buf.reserve(READ_BUF.max(self.b.buf.len()));
            }
            if self.b.buf.is_empty() {
                // An HTTP/2 stream's head, given typed (never for HTTP/1.1: its bytes come
                // before the request future is lent, `conn::serve`).
                if let Some(head) = self.typed_head(s) {
                    return head;
                }
                if !self.idle_read(s.keepalive).await {
                    return Head::Closed;
                }
                continue;
            }
            // Part of a head is here: the rest must arrive by the header deadline.
            let at = *deadline.get_or_insert_with(|| Instant::now() + s.client_header);
            match until(&mut self.l.timer, at, self.l.io.read_buf(&mut self.b.buf)).await {
                Err(_) => {
                    return Head::Reject(Reject {
                        status: 408,
                        message: "request header timeout",
                    });
                }
                Ok(Ok(0)) | Ok(Err(_)) => return Head::Closed,
                Ok(Ok(_)) => {}
            }
        }
    }

    /// An HTTP/2 stream's head, given typed into the empty read buffer, and with it the
    /// body's first DATA if it is here, as one read of a connection would give them (sent to
    /// the node together). None: not a stream, or its head was taken. (Not `async`: a state
    /// of its own in `read_head`'s future cost every HTTP/1.1 request 13 instructions.)
    #[inline(never)]
    fn typed_head(&mut self, s: &Settings) -> Option<Head> {
        let head = self
            .l
            .io
            .typed_head(&s.head, &mut self.b.buf, &mut self.b.headers)?;
        Some(match head {
            Ok(h) => {
                if h.framing() != sluice_core::http::Framing::None {
                    // One try: the engine's next read waits with its own waker.
                    let mut cx = Context::from_waker(std::task::Waker::noop());
                    let mut read = pin!(self.l.io.read_buf(&mut self.b.buf));
                    let _ = read.as_mut().poll(&mut cx);
                }
                Head::Request(h)
            }
            Err(r) => Head::Reject(r),
        })
    }

    /// Waits on an idle keep-alive connection for the first byte of a request (a connection
    /// that cannot wait without its buffer: a bridged HTTP/2 stream). False when the
    /// connection should close: the client closed it, it stayed idle too long, or the worker
    /// is draining (bytes that already arrived are still served first).
    async fn idle_read(&mut self, keepalive: Duration) -> bool {
        let Link {
            w,
            io,
            timer,
            idle_slot,
            listener,
            ..
        } = &mut *self.l;
        wait_idle(
            w,
            io,
            &mut self.b.buf,
            timer,
            idle_slot,
            *listener,
            keepalive,
        )
        .await
    }
}

impl Link {
    /// Counts and logs an answered request (`observe.rs`). (Inlined: on every request, and a
    /// call of its own measured ~100 instructions per request in scenario 1.)
    #[inline(always)]
    pub(crate) fn finish(
        &self,
        head: &RequestHead,
        route: Option<&Route>,
        o: &Outcome,
        started: Option<u64>,
        snap: &Snapshot,
    ) {
        let upstream = o.node.map(|(u, _)| u).or(o.upstream).map(|u| {
            (
                &*snap.upstreams[u as usize],
                o.node.map(|(_, n)| n as usize),
                o.answer,
            )
        });
        self.w.finish(&Exchange {
            proto: self.proto(),
            request: View::Head(head),
            version: head.version(),
            method: head.method(),
            client: self.client(),
            route,
            status: o.status,
            bytes_in: o.bytes_in,
            bytes_out: o.bytes,
            started,
            upstream,
            consumer: o.consumer.and_then(|i| snap.consumers.get(i as usize)),
            carried: o.carried.clone(),
        });
    }

    pub(crate) fn proto(&self) -> Proto {
        if self.io.is_bridged() {
            Proto::Http2
        } else {
            Proto::Http1
        }
    }

    pub(crate) fn client(&self) -> Client<'_> {
        Client {
            ip: self.client_ip.as_bytes(),
            peer: self.peer,
            tcp: self.tcp.as_ref().map(|t| &t.0),
            local: self.local,
            https: self.io.is_https(),
            subject: self.client_subject.as_deref(),
        }
    }
}

impl std::fmt::Debug for Conn<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("client_ip", &self.l.client_ip)
            .finish()
    }
}
