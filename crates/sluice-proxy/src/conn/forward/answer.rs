//! Phases D and E of forwarding: the upstream's response head (1xx forwarded or dropped, 101
//! to a tunnel), then the head and body to the client (header filters, a body replaced by a
//! plugin, body filters, re-framing), and the upstream connection back to its pool when the
//! exchange ended cleanly.

use bytes::{Buf, Bytes};
use sluice_router::Method;
use tokio::io::AsyncReadExt;

use std::time::Duration;

use super::{BODY_CHUNK, Target, UpConn};
use crate::client_io::unless_gone;
use crate::conn::body::RespBody;
use crate::conn::{Chains, Conn, Next, Outcome, Plugged, phase};
use crate::error::{Error, Kind};
use crate::failures::Failure;
use crate::io::timed;
use crate::snapshot::Settings;
use crate::upstream::UpIo;
use sluice_core::Ctx;
use sluice_core::ctx::NO_EDITS;
use sluice_core::http::response::{self, ResponseHead};
use sluice_core::http::write::{self, ClientFraming, ConnectionHeader};
use sluice_core::http::{Framing, RequestHead};
use sluice_core::plugin::ResponseView;

/// Room kept free in a read buffer before each read.
const READ_CHUNK: usize = 16 * 1024;

impl Conn<'_> {
    /// Reads up to a final response head, forwarding or dropping 1xx. The error says whether
    /// nothing at all was read (a stale pooled connection).
    pub(super) async fn read_response_head(
        &mut self,
        upc: &mut UpConn,
        head: &RequestHead,
        s: &Settings,
        read_timeout: Duration,
        websocket: bool,
    ) -> Result<ResponseHead, (Error, bool)> {
        self.b.up_buf.clear();
        let mut got_any = false;
        loop {
            if !self.b.up_buf.is_empty() {
                let is_head = head.method() == Method::Head;
                match response::parse(
                    &self.b.up_buf,
                    is_head,
                    s.max_response_head,
                    &mut self.b.up_headers,
                ) {
                    Ok(Some(mut resp)) => {
                        resp.take_bytes(&mut self.b.up_buf);
                        if resp.status() == 101 && !(websocket && resp.is_websocket_upgrade()) {
                            let e = Error::with_cause(
                                Kind::InvalidResponse,
                                "101 without a WebSocket upgrade request",
                            );
                            return Err((e, false));
                        }
                        if resp.status() >= 200 || resp.status() == 101 {
                            return Ok(resp);
                        }
                        // 1xx: 100 is ours to send (we answered Expect), others go to HTTP/1.1
                        // clients as they are.
                        if resp.status() != 100 && head.version() == 1 {
                            self.interim_head(&resp);
                            let _ = timed(
                                &mut self.l.timer,
                                s.client_send,
                                crate::client_io::send(&mut self.l.io, &self.b.out),
                            )
                            .await;
                        }
                        let mut hs = resp.into_fields();
                        hs.clear();
                        self.b.up_headers = hs;
                        continue;
                    }
                    Ok(None) => {}
                    Err(bad) => return Err((Error::with_cause(Kind::InvalidResponse, bad), false)),
                }
            }
            if self.b.up_buf.capacity() - self.b.up_buf.len() < 1024 {
                self.b.up_buf.reserve(READ_CHUNK);
            }
            let read = upc.io.read_buf(&mut self.b.up_buf);
            let read = if self.l.io.is_bridged() {
                // An HTTP/2 stream is watched for a reset while it waits (HTTP/1.1 is not:
                // `ClientIo::poll_gone`; the wrapper measured 40 instructions per request).
                let io = &mut self.l.io;
                let watched = unless_gone(read, |cx| io.poll_gone(cx).is_ready());
                // Gone: read as a failed read, told apart below (`ClientIo::is_gone`).
                let aborted = || Err(std::io::ErrorKind::ConnectionAborted.into());
                timed(&mut self.l.timer, read_timeout, watched)
                    .await
                    .map(|r| r.unwrap_or_else(aborted))
            } else {
                timed(&mut self.l.timer, read_timeout, read).await
            };
            match read {
                Ok(Ok(0)) => {
                    // An HTTP/2 node's answer head comes typed, never parsed from bytes: its
                    // read ends with none (here, off the HTTP/1.1 path's way).
                    if let UpIo::H2(m) = &mut upc.io
                        && let Some(typed) =
                            m.answer_head(s.max_response_head, &mut self.b.up_headers)
                    {
                        return typed;
                    }
                    return Err((Error::new(Kind::UpstreamClosed), !got_any));
                }
                Ok(Ok(_)) => got_any = true,
                Ok(Err(_)) if self.l.io.is_gone() => {
                    return Err((Error::new(Kind::ClientGone), false));
                }
                Ok(Err(e)) => return Err((Error::with_cause(Kind::ReadFailed, e), !got_any)),
                Err(_) => {
                    let e = Error::with_cause(
                        Kind::ReadTimeout,
                        format_args!("after {read_timeout:?}"),
                    );
                    return Err((e, !got_any));
                }
            }
        }
    }

    /// Phase E: the response to the client. Header filters see the head first; a body
    /// replaced by a plugin goes out with its own length; body filters get each piece.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn respond_upstream(
        &mut self,
        t: &Target<'_>,
        head: &RequestHead,
        s: &Settings,
        resp: ResponseHead,
        mut upc: UpConn,
        request_done: bool,
        websocket: bool,
        mut plugged: Plugged<'_, '_>,
    ) -> Outcome {
        let up = &**t.up;
        let node = upc.node;
        let used = Some((t.up_ref, node as u32));
        if resp.status() == 101 && websocket {
            return self.tunnel(t, resp, upc, s).await;
        }
        let mut filters = false;
        // Whether a body filter at work may change the body (else the node's length holds).
        let mut rewrites = false;
        let mut mark = None;
        if let Some((chains, cx)) = plugged.as_mut() {
            mark = Some(cx.response.mark());
            cx.set_upstream_addr(up.nodes[node].addr);
            let consumer = chains.consumer(cx);
            for e in phase(chains.route, consumer, |c| &c.header_filter) {
                e.plugin
                    .header_filter(head, ResponseView::Upstream(&resp), cx);
            }
            let mut changes = false;
            for e in phase(chains.route, consumer, |c| &c.body_filter) {
                if e.plugin.filters_body(cx) {
                    filters = true;
                    let writes = !e.plugin.only_reads_body();
                    rewrites |= writes;
                    // A compressor (which runs last) changes the encoding, not the content.
                    changes |= writes && !e.plugin.filters_last();
                }
            }
            cx.response.set_content_changed(changes);
        }
        let edits = plugged.as_ref().map_or(&NO_EDITS, |(_, cx)| &cx.response);
        let node_body = resp.framing() != Framing::None;
        // A status a plugin set without a body (204, 304) drops the node's, as a replaced body
        // does: the client must never get bytes its framing does not expect.
        let silenced = node_body && edits.status().is_some_and(write::bodiless);
        let replaced = if silenced {
            Some(Bytes::new())
        } else {
            edits.body().filter(|_| node_body).cloned()
        };
        let client_framing = match (resp.framing(), &replaced) {
            (Framing::None, _) => ClientFraming::NoBody,
            _ if silenced => ClientFraming::NoBody,
            (_, Some(b)) => ClientFraming::Fixed(b.len() as u64),
            (Framing::Length(_), None) if !rewrites => ClientFraming::Length,
            _ if head.version() == 1 => ClientFraming::Chunked,
            _ => ClientFraming::Close,
        };
        let keep =
            request_done && client_framing != ClientFraming::Close && self.may_keep_alive(head, s);
        let connection = self.connection_header(head, keep);
        self.b.out.clear();
        // An HTTP/2 stream takes its head typed (its own function: inlined, its set-up would
        // cost every HTTP/1.1 answer). The stream holds it until the engine writes or reads
        // again, as an HTTP/1.1 head waits in `out`: a clean 502 may still replace it.
        let given = if self.l.io.is_bridged() {
            self.answer_typed(&resp, client_framing, connection, edits)
        } else {
            write::client_response(&mut self.b.out, &resp, client_framing, connection, edits);
            true
        };
        let status = edits.status().unwrap_or(resp.status());
        let mut o = Outcome {
            next: Next::Close,
            status,
            bytes: 0,
            node: used,
            ..Outcome::new(Next::Close, 0)
        };
        if !given {
            // The stream is gone.
            return o;
        }

        if let Some(b) = replaced {
            // The upstream's body is not read: this connection cannot be reused.
            if head.method() != Method::Head {
                self.b.out.extend_from_slice(&b);
            }
            self.b.up_buf.clear();
            if timed(
                &mut self.l.timer,
                s.client_send,
                crate::client_io::send(&mut self.l.io, &self.b.out),
            )
            .await
            .is_ok_and(|r| r.is_ok())
            {
                o.bytes = b.len() as u64;
                o.next = Next::after(keep, request_done);
            }
            return o;
        }

        let rechunk = client_framing == ClientFraming::Chunked && !filters;
        let mut body = RespBody::new(resp.framing(), rechunk);
        let upstream_keep = resp.keep_alive();
        let mut payload = Vec::new();
        let mut first = true;
        loop {
            // Move what the buffer holds to `out`, through the body filters when there are;
            // after the head, a Content-Length body goes out from the read buffer instead.
            let direct = if !first && !filters && self.b.out.is_empty() {
                body.take_length(self.b.up_buf.len())
            } else {
                None
            };
            let pumped = if let Some(n) = direct {
                if n > 0 && !self.write_direct(s, n).await {
                    return o;
                }
                self.b.up_buf.advance(n);
                Ok(n as u64)
            } else if filters {
                payload.clear();
                body.pump(&mut self.b.up_buf, &mut payload)
            } else {
                body.pump(&mut self.b.up_buf, &mut self.b.out)
            };
            match pumped {
                Ok(n) => o.bytes += n,
                // Nothing was sent yet: the client gets a clean 502.
                Err(e) if first => {
                    self.l.io.forget_answer();
                    // The 502 is the gateway's: not the edits made for the node's answer.
                    if let (Some((_, cx)), Some(m)) = (plugged.as_mut(), mark) {
                        cx.response.rewind(m);
                    }
                    return self
                        .fail(t, head, s, Some(node), e, request_done, plugged)
                        .await;
                }
                Err(e) => {
                    aborted(&self.l.w, t, node, status, &e);
                    return o;
                }
            }
            first = false;
            let mut done = body.is_done();
            if !done {
                // Filtered first, then written: a piece goes out before the next read waits
                // (a streamed answer through a body filter keeps streaming).
                let mut cut = None;
                if filters && let Some((chain, cx)) = plugged.as_mut() {
                    self.filter_body(chain, cx, &mut payload, false, client_framing);
                    cut = cx.cut();
                }
                if !self.b.out.is_empty() && !self.write_out(s).await {
                    return o;
                }
                if let Some(why) = cut {
                    // A filter's limit (`max_stream_duration_ms`): cut off as a node that
                    // stopped would be, never ended cleanly.
                    aborted(
                        &self.l.w,
                        t,
                        node,
                        status,
                        &Error::with_cause(Kind::ReadFailed, why),
                    );
                    return o;
                }
                if self.b.up_buf.capacity() - self.b.up_buf.len() < 4096 {
                    self.b.up_buf.reserve(BODY_CHUNK);
                }
                let read = timed(
                    &mut self.l.timer,
                    t.timeouts.read,
                    upc.io.read_buf(&mut self.b.up_buf),
                )
                .await;
                let failure = match read {
                    Ok(Ok(0)) => {
                        done = body.on_eof(if filters {
                            &mut payload
                        } else {
                            &mut self.b.out
                        });
                        (!done).then(|| {
                            Error::with_cause(Kind::UpstreamClosed, "response body truncated")
                        })
                    }
                    Ok(Ok(_)) => None,
                    Ok(Err(e)) => Some(Error::with_cause(Kind::ReadFailed, e)),
                    Err(_) => Some(Error::with_cause(
                        Kind::ReadTimeout,
                        "while reading the response body",
                    )),
                };
                if let Some(e) = failure {
                    // The head is already out: the client must see a truncated response, never
                    // a clean end. Closing without the final chunk or missing bytes does that.
                    aborted(&self.l.w, t, node, status, &e);
                    return o;
                }
                if !done {
                    continue;
                }
            }
            if filters && let Some((chain, cx)) = plugged.as_mut() {
                self.filter_body(chain, cx, &mut payload, true, client_framing);
            }
            if !self.b.out.is_empty() && !self.write_out(s).await {
                return o;
            }
            break;
        }
        // The exchange ended cleanly: keep the upstream connection if it allows.
        let mut hs = resp.into_fields();
        hs.clear();
        self.b.up_headers = hs;
        upc.served += 1;
        if upstream_keep
            && request_done
            && self.b.up_buf.is_empty()
            && upc.served < up.keepalive.requests
        {
            self.l.w.up.nodes.borrow_mut().put(
                up.nodes[node].pool_key,
                upc.io,
                upc.served,
                up.keepalive.size,
            );
        } else {
            self.b.up_buf.clear();
        }
        o.next = Next::after(keep, request_done);
        o
    }

    /// Gives an HTTP/2 stream its answer head typed: the fields `write::client_response`
    /// keeps for an HTTP/1.1 client, never written as bytes for the stream to parse back.
    #[inline(never)]
    fn answer_typed(
        &mut self,
        resp: &ResponseHead,
        framing: ClientFraming,
        connection: ConnectionHeader,
        edits: &sluice_core::ResponseEdits,
    ) -> bool {
        // The node's length passed on is given as a length: the stream is not left to read it
        // back from the fields (which a plugin may have removed).
        let framing = match (framing, resp.framing()) {
            (ClientFraming::Length, Framing::Length(n)) => ClientFraming::Fixed(n),
            (f, _) => f,
        };
        let mut typed = crate::h2_head::TypedAnswer::default();
        write::client_response(&mut typed, resp, framing, connection, edits);
        self.l.io.answer_typed(typed)
    }

    /// Puts an interim or upgrade response's head (1xx, 101) in `out`, as the upstream sent it.
    pub(super) fn interim_head(&mut self, resp: &ResponseHead) {
        self.b.out.clear();
        write::client_response(
            &mut self.b.out,
            resp,
            ClientFraming::NoBody,
            ConnectionHeader::None,
            &NO_EDITS,
        );
    }

    /// Writes `out` to the client and clears it; false when the client is gone.
    async fn write_out(&mut self, s: &Settings) -> bool {
        let ok = timed(
            &mut self.l.timer,
            s.client_send,
            crate::client_io::send(&mut self.l.io, &self.b.out),
        )
        .await
        .is_ok_and(|r| r.is_ok());
        self.b.out.clear();
        ok
    }

    /// Writes the first `n` bytes of the upstream read buffer to the client (a body passed
    /// through unchanged); false when the client is gone.
    async fn write_direct(&mut self, s: &Settings, n: usize) -> bool {
        timed(
            &mut self.l.timer,
            s.client_send,
            crate::client_io::send(&mut self.l.io, &self.b.up_buf[..n]),
        )
        .await
        .is_ok_and(|r| r.is_ok())
    }

    /// Passes one piece of payload through the body filters and frames the result into `out`.
    fn filter_body(
        &mut self,
        chain: &Chains<'_>,
        cx: &mut Ctx<'_>,
        payload: &mut Vec<u8>,
        eos: bool,
        framing: ClientFraming,
    ) {
        let mut chunk = Bytes::from(std::mem::take(payload));
        let consumer = chain.consumer(cx);
        for e in phase(chain.route, consumer, |c| &c.body_filter) {
            e.plugin.body_filter(&mut chunk, eos, cx);
        }
        if framing == ClientFraming::NoBody {
            // A HEAD, 204 or 304 answer has no body, whatever a filter made: bytes after its
            // head would be read as the next response.
            chunk.clear();
        }
        let chunked = framing == ClientFraming::Chunked;
        if !chunk.is_empty() {
            if chunked {
                write::chunk_header(&mut self.b.out, chunk.len());
            }
            self.b.out.extend_from_slice(&chunk);
            if chunked {
                self.b.out.extend_from_slice(b"\r\n");
            }
        }
        if eos && chunked {
            self.b.out.extend_from_slice(b"0\r\n\r\n");
        }
    }
}

/// A response cut off after its head went out: logged (summarised).
fn aborted(w: &crate::worker::Worker, t: &Target<'_>, node: usize, status: u16, e: &Error) {
    w.failed(Failure {
        status: Some(status),
        ..Failure::of(
            "response aborted",
            &t.route.id,
            &t.up.nodes[node].authority,
            e,
        )
    });
}
