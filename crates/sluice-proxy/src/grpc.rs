//! gRPC: HTTP/2 streams whose route's upstream says `scheme: grpc` go to the upstream over
//! HTTP/2 as they are: headers, every DATA frame as it comes (streaming calls both ways) and
//! trailers (`grpc-status`). Each worker keeps one multiplexed HTTP/2 connection per node and
//! opens another only when it breaks. The client's `grpc-timeout` is passed on and also
//! enforced here: past it the call ends with `grpc-status: 4` (DEADLINE_EXCEEDED).
//!
//! Route plugins run their request phases (authentication, limits, restrictions answer as
//! they do for HTTP, as gRPC statuses), and their edits to the request head (fields set, added
//! or removed, a rewritten path or host, credentials hidden) go upstream. Header filters edit
//! the response head (a replaced body is not applied: gRPC messages are framed); the log phase
//! and the access log see every call.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use h2::client::SendRequest;
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use http::{HeaderMap, HeaderValue, Request, Response};
use sluice_core::http::{RequestHead, response, write};
use sluice_core::plugin::ResponseView;
use sluice_core::{Chain, Ctx, ResponseEdits};
use tracing::debug;

use crate::access_log::View;
use crate::client_io::unless_gone;
use crate::conn::phase;
use crate::failures::Failure;
use crate::grpc_mirror::GrpcMirror;
use crate::h2_head::{Head2, TypedHead, given_authority, node_request, request_head};
use crate::h2_wire::{Peer, check_head, send};
use crate::metrics::Proto;
use crate::observe::{Exchange, Refused};
use crate::snapshot::{Route, Snapshot};
use crate::upstream::select::retry_loop;
use crate::upstream::{PickCx, Tried, Tries, Upstream};
use crate::worker::Worker;

/// gRPC status codes used by the gateway itself.
const CANCELLED: u32 = 1;
const DEADLINE_EXCEEDED: u32 = 4;
const UNAVAILABLE: u32 = 14;
const INTERNAL: u32 = 13;

/// Forwards one gRPC call (`route` matched it in `snap`).
pub(crate) async fn forward(
    req: Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    snap: &Snapshot,
    route: &Route,
    peer: &Peer,
    w: Rc<Worker>,
) {
    let started = w.begin();
    // The node-wide `real_ip`: the call's client is the address a trusted proxy gave.
    let real;
    let mut peer = peer;
    if let Some(r) = &snap.settings.real_ip
        && let Some(addr) = r.find(peer.addr.ip(), &PartsKey::of(&req, peer))
    {
        real = peer.with_client(addr);
        peer = &real;
    }
    let chain = &route.chain;
    let chains = crate::conn::Chains::of(chain, snap);
    // The HTTP/1.1 view of the head that plugins and the access log read; calls on routes
    // without plugins and without an access log skip it.
    let logged = w.access_log.borrow().is_some();
    let mut head = if chain.is_empty() && !logged {
        None
    } else {
        match request_view(&req, snap) {
            Some(h) => Some(h),
            // Only the access log wanted it: the call goes on (the log line is skipped rather
            // than the call refused because its head is beyond the HTTP/1.1 parser's limits).
            None if chain.is_empty() => {
                debug!(route = %route.id, "gRPC call head not readable as HTTP/1.1; not logged");
                None
            }
            None => {
                let answer = sluice_core::Response::error(400, "400 Bad Request");
                answer_grpc(&mut respond, &answer, &ResponseEdits::default());
                let refused = Refused {
                    proto: Proto::Grpc,
                    request: View::Line(b""),
                    method: sluice_router::Method::Post,
                    client: peer.client(),
                    route: Some(route),
                };
                w.refused(refused, started);
                return;
            }
        }
    };
    let mut cx = Ctx::new(
        peer.addr,
        peer.local,
        &route.id,
        &snap.consumers,
        Default::default(),
    );
    cx.set_names(route.names());
    if let Some(d) = route.documents() {
        cx.set_documents(d);
    }
    if let Some(tcp) = peer.tcp {
        cx.set_peer(tcp);
    }
    if peer.https {
        cx.set_tls(peer.subject.clone());
    }
    let status = Cell::new(200u16);
    let bytes = Cell::new(0u64);
    let node = Cell::new(None);
    let answer = Cell::new(None);
    let bytes_in = Cell::new(0u64);
    let plugged = match &mut head {
        Some(head) if !chain.is_empty() => {
            Some(plugins(&req, head, chains, &mut cx, peer, &w).await)
        }
        _ => None,
    };
    // `real-ip` gave the call its client's address: the log and metrics see it.
    let real_ip;
    if cx.client() != peer.addr {
        real_ip = peer.with_client(cx.client());
        peer = &real_ip;
    }
    let edited = match (plugged, &mut head) {
        (None, _) | (_, None) => None,
        (Some(plugged), Some(head)) => match plugged {
            Ok(edited) => Some(edited),
            Err(answer) => {
                let consumer = chains.consumer(&cx);
                for e in phase(chain, consumer, |c| &c.header_filter) {
                    e.plugin
                        .header_filter(head, ResponseView::Own(&answer), &mut cx);
                }
                status.set(cx.response.status().unwrap_or(answer.status));
                answer_grpc(&mut respond, &answer, &cx.response);
                let x = Call {
                    status: status.get(),
                    bytes: bytes.get(),
                    bytes_in: 0,
                    node: None,
                    answer: None,
                    tried: false,
                };
                finish(&w, snap, route, peer, Some(head), &cx, started, x);
                return;
            }
        },
    };
    // proxy-mirror's copy, filled as the call goes up.
    let copy = RefCell::new(cx.mirror.take().and_then(|m| {
        let up = snap.upstreams.get(m.upstream.0 as usize)?.clone();
        GrpcMirror::new(up, m.target)
    }));
    let deadline = req
        .headers()
        .get("grpc-timeout")
        .and_then(|v| parse_timeout(v.as_bytes()));
    let up = snap.upstreams[route.upstream.0 as usize].clone();
    let mut sent: Option<SendStream<Bytes>> = None;
    let sent_at = started.map(|_| crate::metrics::now_ns());
    let outcome = {
        // The route's header filters see the node's response head and edit it.
        let mut on_head = |parts: &mut http::response::Parts| {
            if let Some(head) = &head
                && !chain.is_empty()
            {
                header_filter(chain, head, parts, &mut cx, snap);
            }
            status.set(parts.status.as_u16());
            answer.set(Some((
                parts.status.as_u16(),
                sent_at.map_or(0, |t| crate::metrics::now_ns().saturating_sub(t)),
            )));
        };
        let call = exchange(
            req,
            edited,
            &mut respond,
            &mut sent,
            &up,
            route,
            peer,
            &w,
            Hooks {
                on_head: &mut on_head,
                bytes: &bytes,
                bytes_in: &bytes_in,
                node: &node,
                copy: &copy,
            },
        );
        match deadline {
            Some(d) => tokio::time::timeout(d, call)
                .await
                .unwrap_or(Err((DEADLINE_EXCEEDED, "deadline exceeded".to_owned()))),
            None => call.await,
        }
    };
    if let Err((code, message)) = outcome {
        if code == CANCELLED {
            // NGINX's "client closed request".
            status.set(499);
        }
        debug!(route = %route.id, status = code, %message, "gRPC call ended by the gateway");
        end_with_status(&mut respond, sent, code, &message);
    }
    if let Some(m) = copy.into_inner() {
        m.send(w.clone());
    }
    let x = Call {
        status: status.get(),
        bytes: bytes.get(),
        bytes_in: bytes_in.get(),
        node: node.get(),
        answer: answer.get(),
        tried: true,
    };
    finish(&w, snap, route, peer, head.as_ref(), &cx, started, x);
}

/// How a call ended.
struct Call {
    status: u16,
    bytes: u64,
    bytes_in: u64,
    node: Option<usize>,
    answer: crate::metrics::Answer,
    /// The upstream was tried (a plugin's own answer is not the upstream's).
    tried: bool,
}

/// What the call reports back while it runs.
struct Hooks<'h> {
    /// Called with the node's response head before it is sent on.
    on_head: &'h mut dyn FnMut(&mut http::response::Parts),
    /// Response body bytes sent to the client.
    bytes: &'h Cell<u64>,
    /// Request body bytes received from the client.
    bytes_in: &'h Cell<u64>,
    /// The node that took the call.
    node: &'h Cell<Option<usize>>,
    /// proxy-mirror's copy of the call, if it has one.
    copy: &'h RefCell<Option<GrpcMirror>>,
}

/// The log phase of the route's plugins, then the call is counted and logged (`observe.rs`).
#[allow(clippy::too_many_arguments)]
fn finish(
    w: &Worker,
    snap: &Snapshot,
    route: &Route,
    peer: &Peer,
    head: Option<&RequestHead>,
    cx: &Ctx<'_>,
    started: Option<u64>,
    x: Call,
) {
    if let Some(head) = head {
        let consumer = crate::conn::Chains::of(&route.chain, snap).consumer(cx);
        if !route.chain.log.is_empty() || consumer.is_some_and(|c| !c.log.is_empty()) {
            let done = crate::observe::done(x.status, x.bytes, x.bytes_in, started, x.answer);
            for e in phase(&route.chain, consumer, |c| &c.log) {
                e.plugin.log(head, &done, cx);
            }
        }
    }
    let up = &snap.upstreams[route.upstream.0 as usize];
    w.finish(&Exchange {
        proto: Proto::Grpc,
        request: head.map_or(View::Line(b""), View::Head),
        version: 2,
        method: sluice_router::Method::Post,
        client: peer.client(),
        route: Some(route),
        status: x.status,
        bytes_in: x.bytes_in,
        bytes_out: x.bytes,
        started,
        upstream: x.tried.then_some((up, x.node, x.answer)),
        consumer: cx.consumer(),
        carried: cx.carried(),
    });
}

/// The call's head as plugins and logs read a request head (built from its fields, as the
/// engine is given a carried stream's). None: malformed, or beyond the engine's head limits.
fn request_view(req: &Request<RecvStream>, snap: &Snapshot) -> Option<RequestHead> {
    check_head(req).ok()?;
    let mut buf = BytesMut::new();
    let mut fields = Vec::with_capacity(16);
    let mut head = request_head(
        req.method(),
        req.uri(),
        req.headers(),
        false,
        false,
        &snap.settings.head,
        &mut buf,
        &mut fields,
    )
    .ok()?;
    head.take_bytes(&mut buf);
    Some(head)
}

/// Runs the route's request phases. `Err`: a plugin answered. `Ok`: the head to send, with
/// the plugins' edits and the forwarded fields applied by the same writer as HTTP/1.1 uses.
async fn plugins(
    req: &Request<RecvStream>,
    head: &mut RequestHead,
    chains: crate::conn::Chains<'_>,
    cx: &mut Ctx<'_>,
    peer: &Peer,
    w: &Worker,
) -> Result<Head2, sluice_core::Response> {
    crate::conn::request_phases(chains, head, cx, w).await?;
    // `real-ip` may have given the call its client's address.
    let real_ip;
    let client_ip = if cx.client() == peer.addr {
        peer.ip.as_bytes()
    } else {
        real_ip = cx.client().ip().to_string();
        real_ip.as_bytes()
    };
    let host = head
        .upstream_host()
        .map(<[u8]>::to_vec)
        .unwrap_or_else(|| head.host().to_vec());
    let fwd = write::Forwarded {
        host: &host,
        client_ip,
        websocket: false,
        https: peer.https,
    };
    // Typed for the stream (`Host` becomes the authority, framing fields go), by the same rule
    // as HTTP/1.1 heads; `te: trailers` (hop-by-hop in HTTP/1.1, required by gRPC) goes again
    // if the client sent it.
    let mut typed = TypedHead::default();
    write::upstream_head(&mut typed, head, &fwd, None);
    match typed.build() {
        Ok(mut h) => {
            if req.headers().contains_key(http::header::TE) {
                h.headers
                    .insert(http::header::TE, http::HeaderValue::from_static("trailers"));
            }
            Ok(h)
        }
        Err(_) => Err(sluice_core::Response::error(400, "400 Bad Request")),
    }
}

/// Runs the header filters on the node's response head and applies their edits to it: the
/// status, fields removed, fields added. A replaced body is not applied (gRPC messages are
/// framed; a plugin's body would break the call).
fn header_filter(
    chain: &Chain,
    head: &RequestHead,
    parts: &mut http::response::Parts,
    cx: &mut Ctx<'_>,
    snap: &Snapshot,
) {
    let mut raw = Vec::with_capacity(256);
    crate::h2_up::h1_response_head(&mut raw, parts.status, &parts.headers);
    raw.extend_from_slice(b"\r\n");
    let mut fields = Vec::with_capacity(parts.headers.len());
    let Ok(Some(view)) = response::parse(&raw, false, snap.settings.max_response_head, &mut fields)
    else {
        return;
    };
    let consumer = crate::conn::Chains::of(chain, snap).consumer(cx);
    for e in phase(chain, consumer, |c| &c.header_filter) {
        e.plugin
            .header_filter(head, ResponseView::Upstream(&view), cx);
    }
    apply_edits(&cx.response, &mut parts.status, &mut parts.headers);
}

/// Applies response edits to an HTTP/2 head: status, removals, then additions.
fn apply_edits(edits: &ResponseEdits, status: &mut http::StatusCode, headers: &mut HeaderMap) {
    if let Some(s) = edits
        .status()
        .and_then(|s| http::StatusCode::from_u16(s).ok())
    {
        *status = s;
    }
    let removed: Vec<http::HeaderName> = headers
        .keys()
        .filter(|n| edits.removes(n.as_str().as_bytes()))
        .cloned()
        .collect();
    for n in removed {
        headers.remove(n);
    }
    for line in edits.added_bytes().split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let value = line[colon + 1..].trim_ascii_start();
        if let (Ok(n), Ok(v)) = (
            http::HeaderName::from_bytes(&line[..colon]),
            HeaderValue::from_bytes(value),
        ) {
            headers.append(n, v);
        }
    }
}

/// Sends a plugin's answer (401, 429, ...) as a gRPC status (a trailers-only response), the
/// HTTP status mapped as gRPC's HTTP-to-status table does and the answer's text as
/// `grpc-message`; the plugin's header fields (rate-limit counters, `WWW-Authenticate`) go
/// along, with the header filters' `edits` to them.
fn answer_grpc(
    respond: &mut SendResponse<Bytes>,
    r: &sluice_core::Response,
    edits: &ResponseEdits,
) {
    let code: u32 = match r.status {
        400 => INTERNAL,
        401 => 16, // UNAUTHENTICATED
        403 => 7,  // PERMISSION_DENIED
        404 => 12, // UNIMPLEMENTED
        429 => 8,  // RESOURCE_EXHAUSTED
        502..=504 => UNAVAILABLE,
        _ => 2, // UNKNOWN
    };
    let text = String::from_utf8_lossy(&r.body);
    let message: String = text
        .trim()
        .bytes()
        .map(|b| {
            if (0x20..0x7f).contains(&b) && b != b'%' {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    let mut resp = Response::new(());
    let headers = resp.headers_mut();
    for (n, v) in &r.headers {
        if n.eq_ignore_ascii_case("content-type") || n.eq_ignore_ascii_case("content-length") {
            continue;
        }
        if let (Ok(n), Ok(v)) = (
            http::HeaderName::from_bytes(n.as_bytes()),
            HeaderValue::from_bytes(v),
        ) {
            headers.append(n, v);
        }
    }
    headers.insert("content-type", HeaderValue::from_static("application/grpc"));
    headers.insert("grpc-status", HeaderValue::from(code));
    if let Ok(v) = HeaderValue::from_str(&message) {
        headers.insert("grpc-message", v);
    }
    // A gRPC answer's HTTP status stays 200: its status is `grpc-status`.
    let mut ok = http::StatusCode::OK;
    apply_edits(edits, &mut ok, headers);
    let _ = respond.send_response(resp, true);
}

/// Ends a call with a gRPC status: a trailers-only response when nothing was sent yet, else
/// trailers after what was.
fn end_with_status(
    respond: &mut SendResponse<Bytes>,
    sent: Option<SendStream<Bytes>>,
    status: u32,
    msg: &str,
) {
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from(status));
    if let Ok(v) = HeaderValue::from_str(msg) {
        trailers.insert("grpc-message", v);
    }
    if let Some(mut stream) = sent {
        if stream.send_trailers(trailers).is_err() {
            stream.send_reset(Reason::CANCEL);
        }
        return;
    }
    let mut resp = Response::new(());
    *resp.headers_mut() = trailers;
    resp.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/grpc"));
    let _ = respond.send_response(resp, true);
}

type CallError = (u32, String);

/// The call itself: request to the node, response back, trailers included.
#[allow(clippy::too_many_arguments)]
async fn exchange(
    req: Request<RecvStream>,
    edited: Option<Head2>,
    respond: &mut SendResponse<Bytes>,
    sent: &mut Option<SendStream<Bytes>>,
    up: &Arc<Upstream>,
    route: &Route,
    peer: &Peer,
    w: &Worker,
    hooks: Hooks<'_>,
) -> Result<(), CallError> {
    let (parts, body) = req.into_parts();
    let _admitted = route
        .admit(up)
        .map_err(|e| (UNAVAILABLE, e.public_message().to_owned()))?;
    let pick = match up.balancer.hash_on() {
        None => PickCx::default(),
        Some(on) => PickCx {
            key: crate::upstream::key::request_key(
                on,
                &PartsKey {
                    method: &parts.method,
                    uri: &parts.uri,
                    headers: &parts.headers,
                    peer,
                },
            ),
        },
    };
    let mut tries = Tries::new(up);
    let (mut sender, node) = sender(w, up, route, &mut tries, &pick).await?;
    hooks.node.set(Some(node));
    let tls = up.tls.is_some();
    let bad = |e: http::Error| (INTERNAL, e.to_string());
    if let Some(e) = edited {
        // The plugins' head: their edits and the forwarded fields are in it already.
        let authority = match e.authority {
            Some(a) => given_authority(a),
            None => up.nodes[node].h2_authority(),
        }
        .map_err(bad)?;
        let out = node_request(tls, parts.method, authority, e.path, e.headers).map_err(bad)?;
        return call(
            &mut sender,
            out,
            body,
            respond,
            sent,
            hooks,
            (&w.up, &**up, node, &mut tries),
        )
        .await;
    }
    let authority = match parts.uri.authority() {
        Some(a) => a.clone(),
        None => up.nodes[node].h2_authority().map_err(bad)?,
    };
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let mut fields = HeaderMap::with_capacity(parts.headers.len() + 3);
    for (name, value) in &parts.headers {
        if name == http::header::HOST {
            continue;
        }
        fields.append(name.clone(), value.clone());
    }
    let mut out = node_request(tls, parts.method, authority, path, fields).map_err(bad)?;
    let headers = out.headers_mut();
    let client = &*peer.ip;
    let xff = match parts
        .headers
        .get("x-forwarded-for")
        .and_then(|v| v.to_str().ok())
    {
        Some(prev) => format!("{prev}, {client}"),
        None => client.to_owned(),
    };
    if let Ok(v) = HeaderValue::from_str(&xff) {
        headers.insert("x-forwarded-for", v);
    }
    if let Ok(v) = HeaderValue::from_str(client) {
        headers.insert("x-real-ip", v);
    }
    headers.insert(
        "x-forwarded-proto",
        HeaderValue::from_static(if peer.https { "https" } else { "http" }),
    );
    let lifecycle = (&w.up, &**up, node, &mut tries);
    call(&mut sender, out, body, respond, sent, hooks, lifecycle).await
}

/// Sends the call's head, then its messages up while the response comes down; the node's
/// answer (or its failure) is recorded in the upstream lifecycle.
#[allow(clippy::too_many_arguments)]
async fn call(
    sender: &mut SendRequest<Bytes>,
    out: Request<()>,
    mut body: RecvStream,
    respond: &mut SendResponse<Bytes>,
    sent: &mut Option<SendStream<Bytes>>,
    hooks: Hooks<'_>,
    (local, up, node, tries): (&crate::upstream::Local, &Upstream, usize, &mut Tries),
) -> Result<(), CallError> {
    let end = body.is_end_stream();
    if let Some(m) = hooks.copy.borrow_mut().as_mut() {
        m.head(&out);
        if end {
            m.end(None);
        }
    }
    let (response, mut upload) = sender
        .send_request(out, end)
        .map_err(|e| (UNAVAILABLE, format!("upstream refused the stream: {e}")))?;
    // The request body goes up while the response comes down (streaming calls).
    let up_body = async {
        if end {
            return;
        }
        while let Some(chunk) = body.data().await {
            let Ok(chunk) = chunk else {
                upload.send_reset(Reason::CANCEL);
                return;
            };
            let _ = body.flow_control().release_capacity(chunk.len());
            hooks
                .bytes_in
                .set(hooks.bytes_in.get() + chunk.len() as u64);
            if let Some(m) = hooks.copy.borrow_mut().as_mut() {
                m.data(&chunk);
            }
            if send(&mut upload, chunk, false).await.is_err() {
                return;
            }
        }
        match body.trailers().await {
            Ok(Some(t)) => {
                if let Some(m) = hooks.copy.borrow_mut().as_mut() {
                    m.end(Some(t.clone()));
                }
                let _ = upload.send_trailers(t);
            }
            Ok(None) => {
                if let Some(m) = hooks.copy.borrow_mut().as_mut() {
                    m.end(None);
                }
                let _ = send(&mut upload, Bytes::new(), true).await;
            }
            Err(_) => {
                let _ = send(&mut upload, Bytes::new(), true).await;
            }
        }
    };
    let down = async {
        // The node's answer (its head) is the outcome the lifecycle records; unless the
        // client cancels the call first (resets its stream): then the node's stream is reset
        // too (dropped), not left to run to its answer (`client_io::unless_gone`).
        let answered = unless_gone(response, |cx| respond.poll_reset(cx).is_ready());
        let Some(answered) = answered.await else {
            return Err((CANCELLED, "the client cancelled the call".to_owned()));
        };
        let resp = match answered {
            Ok(r) => {
                tries.succeeded(up, node, Some(r.status().as_u16()));
                r
            }
            // The upload's side reset the node's stream on the client's reset: cancelled, not
            // the node's failure.
            Err(_)
                if respond
                    .poll_reset(&mut std::task::Context::from_waker(std::task::Waker::noop()))
                    .is_ready() =>
            {
                return Err((CANCELLED, "the client cancelled the call".to_owned()));
            }
            Err(e) => {
                let err = crate::error::Error::with_cause(crate::error::Kind::ReadFailed, &e);
                let _ = tries.failed(local, up, node, &err);
                return Err((UNAVAILABLE, format!("upstream: {e}")));
            }
        };
        let (mut parts, mut rbody) = resp.into_parts();
        (hooks.on_head)(&mut parts);
        let mut head = Response::builder()
            .status(parts.status)
            .body(())
            .map_err(|e| (INTERNAL, e.to_string()))?;
        *head.headers_mut() = parts.headers;
        let ended = rbody.is_end_stream();
        let stream = sent.insert(
            respond
                .send_response(head, ended)
                .map_err(|e| (INTERNAL, e.to_string()))?,
        );
        if ended {
            *sent = None;
            return Ok(());
        }
        while let Some(chunk) = rbody.data().await {
            let chunk = chunk.map_err(|e| (UNAVAILABLE, format!("upstream: {e}")))?;
            let _ = rbody.flow_control().release_capacity(chunk.len());
            hooks.bytes.set(hooks.bytes.get() + chunk.len() as u64);
            send(stream, chunk, false)
                .await
                .map_err(|e| (INTERNAL, e.to_string()))?;
        }
        let r = match rbody.trailers().await {
            Ok(Some(t)) => stream
                .send_trailers(t)
                .map_err(|e| (INTERNAL, e.to_string())),
            Ok(None) => send(stream, Bytes::new(), true)
                .await
                .map_err(|e| (INTERNAL, e.to_string())),
            Err(e) => return Err((UNAVAILABLE, format!("upstream: {e}"))),
        };
        *sent = None;
        r
    };
    tokio::pin!(up_body);
    tokio::pin!(down);
    let mut up_done = false;
    loop {
        tokio::select! {
            // The answer first: a client's reset wakes both, and the upload's side would reset
            // the node's stream, making it look failed rather than cancelled.
            biased;
            r = &mut down => return r,
            () = &mut up_body, if !up_done => up_done = true,
        }
    }
}

/// A ready HTTP/2 sender to a node of `up`: the worker's connection to it, or a new one
/// (the next node on a connect failure, as the upstream lifecycle allows).
async fn sender(
    w: &Worker,
    up: &Upstream,
    route: &Route,
    tries: &mut Tries,
    pick: &PickCx,
) -> Result<(SendRequest<Bytes>, usize), CallError> {
    // The node's answer is recorded when it comes (`call`), not when its connection is ready.
    let tried = retry_loop!(tries, (&w.up, up, pick), |node, _| {
        match crate::h2_up::sender(w, up, node).await {
            Ok(c) => Tried::Ended((c.send, node)),
            Err(e) => Tried::Failed(e),
        }
    });
    tried.map_err(|gave_up| match gave_up {
        (Some(node), err) => unreachable(w, route, up, node, &err),
        (None, _) => (UNAVAILABLE, "no healthy upstream node".to_owned()),
    })
}

/// No node could be reached: logged (summarised), and the call's answer.
fn unreachable(
    w: &Worker,
    route: &Route,
    up: &Upstream,
    node: usize,
    err: &crate::error::Error,
) -> CallError {
    w.failed(Failure {
        status: None,
        ..Failure::of(
            "cannot reach gRPC upstream",
            &route.id,
            &up.nodes[node].authority,
            err,
        )
    });
    (UNAVAILABLE, format!("cannot reach upstream: {err}"))
}

/// A gRPC call's head as a `chash` key is read from it.
struct PartsKey<'a> {
    method: &'a http::Method,
    uri: &'a http::Uri,
    headers: &'a HeaderMap,
    peer: &'a Peer,
}

impl<'a> PartsKey<'a> {
    fn of<B>(req: &'a Request<B>, peer: &'a Peer) -> Self {
        PartsKey {
            method: req.method(),
            uri: req.uri(),
            headers: req.headers(),
            peer,
        }
    }
}

impl<'a> sluice_core::vars::Source<'a> for PartsKey<'a> {
    fn client(&self) -> std::net::SocketAddr {
        self.peer.addr
    }
    fn peer(&self) -> std::net::SocketAddr {
        self.peer.tcp.unwrap_or(self.peer.addr)
    }
    fn server(&self) -> std::net::SocketAddr {
        self.peer.local
    }
    fn is_https(&self) -> bool {
        self.peer.https
    }
    fn method(&self) -> Option<&'a [u8]> {
        Some(self.method.as_str().as_bytes())
    }
    fn path(&self) -> Option<&'a [u8]> {
        Some(self.uri.path().as_bytes())
    }
    fn target(&self) -> Option<&'a [u8]> {
        Some(
            self.uri
                .path_and_query()
                .map_or(b"/", |p| p.as_str().as_bytes()),
        )
    }
    fn query(&self) -> Option<&'a [u8]> {
        self.uri.query().map(str::as_bytes)
    }
    fn host(&self) -> Option<std::borrow::Cow<'a, [u8]>> {
        Some(
            self.uri
                .authority()
                .map_or(&b""[..], |a| a.as_str().as_bytes())
                .into(),
        )
    }
    fn protocol(&self) -> Option<&'a [u8]> {
        Some(b"HTTP/2.0")
    }
    fn header(&self, name: &str) -> Option<&'a [u8]> {
        self.headers.get(name).map(|v| v.as_bytes())
    }
    fn last_header(&self, name: &str) -> Option<&'a [u8]> {
        self.headers
            .get_all(name)
            .iter()
            .next_back()
            .map(|v| v.as_bytes())
    }
    fn arg(&self, name: &str) -> Option<std::borrow::Cow<'a, [u8]>> {
        self.uri.query()?.split('&').find_map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (k == name).then(|| v.as_bytes().into())
        })
    }
    fn cookie(&self, name: &str) -> Option<&'a [u8]> {
        self.headers
            .get_all(http::header::COOKIE)
            .iter()
            .flat_map(|v| v.as_bytes().split(|b| *b == b';'))
            .find_map(|pair| {
                let pair = pair.trim_ascii();
                let eq = pair.iter().position(|b| *b == b'=')?;
                (&pair[..eq] == name.as_bytes()).then(|| &pair[eq + 1..])
            })
    }
}

/// `grpc-timeout`: up to 8 digits and a unit (H, M, S, m, u, n).
fn parse_timeout(v: &[u8]) -> Option<Duration> {
    let (&unit, digits) = v.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_parse_with_their_units() {
        assert_eq!(parse_timeout(b"100m"), Some(Duration::from_millis(100)));
        assert_eq!(parse_timeout(b"2S"), Some(Duration::from_secs(2)));
        assert_eq!(parse_timeout(b"1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_timeout(b"5u"), Some(Duration::from_micros(5)));
        assert_eq!(parse_timeout(b"m"), None);
        assert_eq!(parse_timeout(b"123456789S"), None);
        assert_eq!(parse_timeout(b"10x"), None);
    }
}
