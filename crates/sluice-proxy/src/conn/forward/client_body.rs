//! Reading the client's request body ahead of the phases (for `vars` and plugins that read it)
//! and as the exchange needs more of it.

use super::*;

impl Conn<'_> {
    /// Reads the request body for conditions that read it (`post_arg_*`, `graphql_*`): into
    /// the connection's buffer, where forwarding then takes it from as if it had just
    /// arrived, and a copy for the conditions. A body larger than `max_body_vars_size` (or
    /// framed wrong, which forwarding then refuses) is not read here: those conditions see
    /// none. Err: the client was too slow or went away, and was answered.
    pub(crate) async fn read_body_for_vars(
        &mut self,
        head: &RequestHead,
        s: &Settings,
    ) -> Result<sluice_core::body::RequestBody, Outcome> {
        use sluice_core::body::RequestBody;
        use sluice_core::http::chunked::{Decoder, Step};
        let cap = s.max_body_vars;
        // Chunk framing is kept in the buffer too (it is forwarded as it came): bounded apart,
        // so tiny chunks with long extensions cannot make it many times the cap.
        let raw_cap = cap.saturating_mul(2).saturating_add(64 * 1024);
        match head.framing() {
            Framing::None | Framing::Close => Ok(RequestBody::new(Some(Bytes::new()))),
            Framing::Length(n) if n > cap => Ok(RequestBody::new(None)),
            Framing::Length(n) => {
                while (self.b.buf.len() as u64) < n {
                    self.read_body_more(head, s).await?;
                }
                let raw = Bytes::copy_from_slice(&self.b.buf[..n as usize]);
                Ok(RequestBody::new(Some(raw)))
            }
            Framing::Chunked => {
                let mut decoder = Decoder::new();
                let (mut pos, mut out) = (0, Vec::new());
                loop {
                    match decoder.decode(&self.b.buf[pos..]) {
                        Ok(Step::Data {
                            consumed,
                            start,
                            end,
                        }) => {
                            out.extend_from_slice(&self.b.buf[pos + start..pos + end]);
                            pos += consumed;
                            if out.len() as u64 > cap {
                                return Ok(RequestBody::new(None));
                            }
                            continue;
                        }
                        Ok(Step::NeedMore { consumed }) => pos += consumed,
                        Ok(Step::Done { consumed }) => {
                            return Ok(RequestBody::framed(out.into(), pos + consumed));
                        }
                        Err(_) => return Ok(RequestBody::new(None)),
                    }
                    if self.b.buf.len() as u64 > raw_cap {
                        return Ok(RequestBody::new(None));
                    }
                    self.read_body_more(head, s).await?;
                }
            }
        }
    }

    /// Puts `new` in the place of the request body read ahead of the phases (`body-transformer`
    /// rewrote it): the old body's bytes leave the buffer, the new ones take their place, and
    /// the head declares its length (a chunked body is forwarded with a `Content-Length`).
    /// False: the body was not read whole, so there is nothing to replace.
    pub(crate) fn replace_request_body(
        &mut self,
        head: &mut RequestHead,
        wire: Option<usize>,
        new: Bytes,
    ) -> bool {
        let Some(wire) = wire else {
            return false;
        };
        let rest = self.b.buf.split_off(wire);
        self.b.buf.clear();
        self.b.buf.reserve(new.len() + rest.len());
        self.b.buf.extend_from_slice(&new);
        self.b.buf.extend_from_slice(&rest);
        head.set_body_length(new.len() as u64);
        true
    }

    /// One read of request body bytes into the buffer, within `timeouts.client_body`.
    pub(crate) async fn read_client_body(
        &mut self,
        s: &Settings,
    ) -> Result<std::io::Result<usize>, crate::io::Elapsed> {
        if self.b.buf.capacity() - self.b.buf.len() < 1024 {
            self.b.buf.reserve(BODY_CHUNK);
        }
        timed(
            &mut self.l.timer,
            s.client_body,
            self.l.io.read_buf(&mut self.b.buf),
        )
        .await
    }

    /// One read of request body bytes into the buffer, after answering `Expect: 100-continue`.
    pub(crate) async fn read_body_more(
        &mut self,
        head: &RequestHead,
        s: &Settings,
    ) -> Result<(), Outcome> {
        if head.expects_continue() && !self.b.continued {
            self.b.continued = true;
            let _ = timed(
                &mut self.l.timer,
                s.client_send,
                crate::client_io::send(&mut self.l.io, b"HTTP/1.1 100 Continue\r\n\r\n"),
            )
            .await;
        }
        match self.read_client_body(s).await {
            Err(_) => {
                let resp = Error::new(Kind::ClientTimeout).response();
                Err(self.respond(head, s, &resp, Some(false), None).await)
            }
            Ok(Ok(0)) | Ok(Err(_)) => Err(Outcome::new(Next::Close, 499)),
            Ok(Ok(_)) => Ok(()),
        }
    }

    /// Answers a request whose body the client sent wrong (too large, bad chunks, too slow).
    pub(crate) async fn client_body_error(
        &mut self,
        route: &Route,
        head: &RequestHead,
        s: &Settings,
        e: Error,
    ) -> Outcome {
        debug!(route = %route.id, cause = %e, "request body refused");
        let resp = e.response();
        self.respond(head, s, &resp, Some(false), None).await
    }
}
