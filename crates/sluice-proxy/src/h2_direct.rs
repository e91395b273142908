//! The HTTP/2 fast path: a stream without a body, on a route without plugins, to an HTTP/1.1
//! upstream, is proxied straight from the stream to a pooled upstream connection, without the
//! in-memory pipe to the engine (`h2.rs` bridges everything else). It keeps the engine's rules:
//! the same forwarded fields, the same balancer, connect retries, failed-node marks and pool,
//! a pooled connection found closed before any response byte replaced by a new one (a request
//! without a body can be sent again), and the same error statuses and bodies.

use std::rc::Rc;

use bytes::{Bytes, BytesMut};
use h2::RecvStream;
use h2::server::SendResponse;
use http::{Request, Response};
use tokio::io::AsyncReadExt;

use crate::access_log::View;
use crate::client_io::unless_gone;
use crate::error::{Error, Kind};
use crate::failures::Failure;
use crate::h2_wire::Peer;
use crate::metrics::Proto;
use crate::observe::Exchange;
use crate::snapshot::{Route, Snapshot};
use crate::upstream::select::retry_loop;
use crate::upstream::{PassHostRt, PickCx, Tried, Tries, UpIo, Upstream, send as send_up};
use crate::worker::Worker;
use sluice_core::http::response::{self, ResponseHead};
use sluice_core::http::{Framing, write};

/// Whether a stream that [`may_take`] the fast path takes it on `route`.
pub(crate) fn eligible(route: &Route, snap: &Snapshot) -> bool {
    route.chain.is_empty()
        // The node-wide `real_ip` is applied by the engine.
        && snap.settings.real_ip.is_none()
        && snap.upstreams[route.upstream.0 as usize]
            .balancer
            .hash_on()
            .is_none()
}

/// Whether the stream itself may take the fast path, whatever its route: no body, not a
/// tunnel.
pub(crate) fn may_take(req: &Request<RecvStream>) -> bool {
    req.body().is_end_stream() && req.method() != http::Method::CONNECT
}

/// Proxies the stream; answers errors itself. Counted and logged as every request is
/// (`observe.rs`).
pub(crate) async fn proxy(
    req: Request<RecvStream>,
    respond: SendResponse<Bytes>,
    snap: &Snapshot,
    route: &Route,
    peer: &Peer,
    w: &Rc<Worker>,
) {
    let started = w.begin();
    // The body (already ended) is kept until the answer is out.
    let (parts, _body) = req.into_parts();
    let mut done = Done {
        status: 0,
        bytes: 0,
        node: None,
        answer: None,
        tried: false,
    };
    forward(&parts, respond, snap, route, peer, w, started, &mut done).await;
    let up = &snap.upstreams[route.upstream.0 as usize];
    w.finish(&Exchange {
        proto: Proto::Http2,
        request: View::H2(&parts.method, &parts.uri, &parts.headers),
        version: 2,
        method: sluice_router::Method::from_bytes(parts.method.as_str().as_bytes()),
        client: peer.client(),
        route: Some(route),
        status: done.status,
        bytes_in: 0,
        bytes_out: done.bytes,
        started,
        upstream: done.tried.then_some((up, done.node, done.answer)),
        consumer: None,
        carried: Default::default(),
    });
}

/// How a stream ended.
struct Done {
    status: u16,
    bytes: u64,
    node: Option<usize>,
    answer: crate::metrics::Answer,
    /// A node was to be picked (not shed, not malformed).
    tried: bool,
}

#[allow(clippy::too_many_arguments)]
async fn forward(
    req: &http::request::Parts,
    mut respond: SendResponse<Bytes>,
    snap: &Snapshot,
    route: &Route,
    peer: &Peer,
    w: &Rc<Worker>,
    started: Option<u64>,
    done: &mut Done,
) {
    let up = &snap.upstreams[route.upstream.0 as usize];
    // The authority as HTTP/1.1 takes a `Host` (the engine's path refuses the same): `http`
    // accepts RFC 3986's sub-delimiters, which Sluice's own parser refuses (found by the
    // h2_frames fuzz target: `:authority: !.test` went to the node as `Host: !.test`).
    if let Some(a) = req.uri.authority()
        && !sluice_core::http::request::valid_host(a.as_str().as_bytes())
    {
        done.status = 400;
        return answer(
            &mut respond,
            sluice_core::Response::error(400, "invalid Host"),
        );
    }
    let Some(fields) = request_fields(req, peer) else {
        // Malformed (RFC 9113 §8.2): the stream is reset; counted as a 400, as the engine
        // counts a head it refuses.
        respond.send_reset(h2::Reason::PROTOCOL_ERROR);
        done.status = 400;
        return;
    };
    let _admitted = match route.admit(up) {
        Ok(a) => a,
        Err(e) => {
            done.status = e.status();
            return answer_error(&mut respond, &e);
        }
    };
    let is_head = req.method == http::Method::HEAD;
    let sent_at = started.map(|_| crate::metrics::now_ns());
    let timeouts = route.timeouts.unwrap_or(up.timeouts);
    let mut tries = Tries::new(up);
    done.tried = true;
    let idempotent =
        sluice_router::Method::from_bytes(req.method.as_str().as_bytes()).is_idempotent();
    let tried = retry_loop!(
        &mut tries,
        (&w.up, up, &PickCx::default()),
        |node, fresh| {
            async {
                let mut out = Vec::with_capacity(fields.len() + 64);
                out.extend_from_slice(req.method.as_str().as_bytes());
                out.push(b' ');
                out.extend_from_slice(
                    req.uri
                        .path_and_query()
                        .map_or("/", |p| p.as_str())
                        .as_bytes(),
                );
                out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
                match (&up.pass_host, req.uri.authority()) {
                    (PassHostRt::Rewrite(h), _) => out.extend_from_slice(h),
                    (PassHostRt::Pass, Some(a)) => out.extend_from_slice(a.as_str().as_bytes()),
                    _ => out.extend_from_slice(up.nodes[node].host_header()),
                }
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(&fields);
                out.extend_from_slice(b"\r\n");
                // A pooled connection first, unless this is the resend after a stale one.
                let idle = if fresh {
                    None
                } else {
                    w.up.nodes.borrow_mut().take(up.nodes[node].pool_key)
                };
                let (mut io, reused, served) = match idle {
                    Some(c) => (c.io, true, c.served),
                    None => {
                        let connect = crate::h2_up::connect(w, up, node);
                        match tokio::time::timeout(timeouts.connect, connect).await {
                            Ok(Ok(io)) => (io, false, 0),
                            Ok(Err(e)) => return Tried::Failed(e),
                            Err(_) => {
                                return Tried::Failed(Error::with_cause(
                                    Kind::ConnectTimeout,
                                    format_args!("after {:?}", timeouts.connect),
                                ));
                            }
                        }
                    }
                };
                match exchange(&mut io, &out, is_head, snap, timeouts, &mut respond).await {
                    Ok(Some((head, buf))) => {
                        let status = head.status();
                        Tried::Answered(Some((io, node, head, buf, served)), Some(status))
                    }
                    // The client reset the stream first: the node's connection goes with it.
                    Err(e) if e.kind() == Kind::ClientGone => {
                        done.node = Some(node);
                        Tried::Ended(None)
                    }
                    // Closed before any response byte: an idempotent request may go again, on a
                    // new connection after a pooled one, or to the next node after a new one
                    // (which counts against the node); anything else is answered.
                    Ok(None) => {
                        let e = Error::with_cause(Kind::UpstreamClosed, "before any response byte");
                        Tried::Failed(e.before_answer(reused, idempotent))
                    }
                    Err(e) => Tried::Failed(e),
                }
            }
            .await
        }
    );
    let (mut io, node, head, mut buf, served) = match tried {
        Ok(Some(got)) => got,
        Ok(None) => {
            done.status = Error::new(Kind::ClientGone).status();
            return;
        }
        Err((node, e)) => {
            if let Some(node) = node {
                w.failed(Failure::of(
                    "request failed",
                    &route.id,
                    &up.nodes[node].authority,
                    &e,
                ));
            }
            done.status = e.status();
            done.node = node;
            return answer_error(&mut respond, &e);
        }
    };
    done.status = head.status();
    done.node = Some(node);
    done.answer = Some((
        head.status(),
        sent_at.map_or(0, |t| crate::metrics::now_ns().saturating_sub(t)),
    ));
    let framing = head.framing();
    let keep = head.keep_alive();
    let mut resp = Response::builder()
        .status(head.status())
        .body(())
        .unwrap_or_default();
    *resp.headers_mut() = crate::h2_head::response_headers(&head);
    let empty = is_head || matches!(framing, Framing::None | Framing::Length(0));
    let Ok(mut stream) = respond.send_response(resp, empty) else {
        return;
    };
    let keep = keep && served + 1 < up.keepalive.requests;
    if empty {
        put_back(w, up, node, io, served, keep && buf.is_empty());
        return;
    }
    let done = match crate::h2_wire::pump_body(
        &mut io,
        &mut buf,
        framing,
        &mut stream,
        Some(timeouts.read),
        &mut done.bytes,
    )
    .await
    {
        Ok(clean) => clean,
        Err(_) => {
            stream.send_reset(h2::Reason::INTERNAL_ERROR);
            false
        }
    };
    put_back(w, up, node, io, served, done && keep);
}

/// Returns a connection whose exchange ended cleanly to the worker's pool.
fn put_back(w: &Worker, up: &Upstream, node: usize, io: UpIo, served: u32, reusable: bool) {
    if reusable {
        w.up.nodes
            .borrow_mut()
            .put(up.nodes[node].pool_key, io, served + 1, up.keepalive.size);
    }
}

/// Sends the request and reads the response head (1xx passed on to the client, 100 dropped).
/// `Ok(None)`: the connection was closed before any response byte (a stale pooled connection).
async fn exchange(
    io: &mut UpIo,
    out: &[u8],
    is_head: bool,
    snap: &Snapshot,
    timeouts: crate::upstream::UpstreamTimeouts,
    respond: &mut SendResponse<Bytes>,
) -> Result<Option<(ResponseHead, BytesMut)>, Error> {
    let (send_timeout, read_timeout) = (timeouts.send, timeouts.read);
    match tokio::time::timeout(send_timeout, send_up(io, out)).await {
        Ok(Ok(())) => {}
        Ok(Err(_)) => return Ok(None),
        Err(_) => return Err(Error::new(Kind::SendTimeout)),
    }
    let mut buf = BytesMut::with_capacity(8192);
    let mut fields = Vec::with_capacity(16);
    // Once a byte came back (a 1xx included), the node has the request: no resend.
    let mut got_any = false;
    loop {
        // The read, unless the client resets the stream first.
        let read = unless_gone(io.read_buf(&mut buf), |cx| {
            respond.poll_reset(cx).is_ready()
        });
        let read = match tokio::time::timeout(read_timeout, read).await {
            Ok(None) => return Err(Error::new(Kind::ClientGone)),
            Ok(Some(r)) => Ok(r),
            Err(e) => Err(e),
        };
        match read {
            Ok(Ok(0)) | Ok(Err(_)) if !got_any => return Ok(None),
            Ok(Ok(0)) => return Err(Error::new(Kind::UpstreamClosed)),
            Ok(Err(e)) => return Err(Error::with_cause(Kind::ReadFailed, e)),
            Ok(Ok(_)) => got_any = true,
            Err(_) => return Err(Error::new(Kind::ReadTimeout)),
        }
        // Every head this read completed: a 1xx, then often the answer in the same bytes.
        loop {
            match response::parse(&buf, is_head, snap.settings.max_response_head, &mut fields) {
                Ok(Some(mut h)) => {
                    h.take_bytes(&mut buf);
                    if h.status() >= 200 {
                        return Ok(Some((h, buf)));
                    }
                    // A node's 100 is not passed on: this path has no body to wait for.
                    if h.status() != 100 {
                        crate::h2_head::send_interim(respond, &h);
                    }
                    fields = h.into_fields();
                    fields.clear();
                }
                Ok(None) => break,
                Err(e) => return Err(Error::with_cause(Kind::InvalidResponse, e)),
            }
        }
    }
}

/// The request's fields as HTTP/1.1 lines (after `Host`), checked as RFC 9113 §8.2 asks, with
/// the forwarded fields added as the engine adds them. None: malformed.
fn request_fields(req: &http::request::Parts, peer: &Peer) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(256);
    let mut xff: Option<&[u8]> = None;
    let (fields, cookie) = crate::h2_wire::checked_fields(&req.headers).ok()?;
    for (name, v) in fields {
        match name {
            "host"
            | "content-length"
            | "x-real-ip"
            | "x-forwarded-proto"
            | "x-forwarded-host"
            | "proxy-authorization" => continue,
            "x-forwarded-for" => {
                xff = Some(v);
                continue;
            }
            _ => {}
        }
        write::line(&mut out, name.as_bytes(), v);
    }
    if let Some(c) = cookie {
        write::line(&mut out, b"cookie", &c);
    }
    let ip = &peer.ip;
    out.extend_from_slice(b"X-Forwarded-For: ");
    if let Some(x) = xff {
        out.extend_from_slice(x);
        out.extend_from_slice(b", ");
    }
    out.extend_from_slice(ip.as_bytes());
    out.extend_from_slice(b"\r\nX-Real-IP: ");
    out.extend_from_slice(ip.as_bytes());
    out.extend_from_slice(if peer.https {
        b"\r\nX-Forwarded-Proto: https\r\n"
    } else {
        b"\r\nX-Forwarded-Proto: http\r\n"
    });
    if let Some(a) = req.uri.authority() {
        out.extend_from_slice(b"X-Forwarded-Host: ");
        out.extend_from_slice(a.as_str().as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    Some(out)
}

/// The engine's error answer (status and small JSON body), over HTTP/2.
fn answer_error(respond: &mut SendResponse<Bytes>, e: &Error) {
    answer(respond, e.response());
}

/// An answer of the gateway's own (status, fields, small body), over HTTP/2.
pub(crate) fn answer(respond: &mut SendResponse<Bytes>, r: sluice_core::Response) {
    let mut resp = Response::builder().status(r.status);
    for (n, v) in &r.headers {
        resp = resp.header(n.as_str(), v.as_slice());
    }
    if let Ok(resp) = resp.body(())
        && let Ok(mut s) = respond.send_response(resp, false)
    {
        let _ = s.send_data(r.body, true);
    }
}
