//! Request and response bodies on their way through the engine: Content-Length and chunked
//! framing decoded, moved between buffers, and re-encoded for the other side when needed.

use bytes::{Buf, BytesMut};

use crate::error::{Error, Kind};
use sluice_core::http::Framing;
use sluice_core::http::chunked::{self, Decoder};
use sluice_core::http::write;

/// Progress of the request body towards the upstream.
#[derive(Debug)]
pub(super) enum ReqBody {
    Length {
        remaining: u64,
        total: u64,
    },
    Chunked {
        decoder: Decoder,
        total: u64,
    },
    /// With the body's size.
    Done(u64),
}

impl ReqBody {
    pub(super) fn new(f: Framing) -> Self {
        match f {
            Framing::Length(n) => ReqBody::Length {
                remaining: n,
                total: n,
            },
            Framing::Chunked => ReqBody::Chunked {
                decoder: Decoder::new(),
                total: 0,
            },
            Framing::None | Framing::Close => ReqBody::Done(0),
        }
    }

    pub(super) fn is_done(&self) -> bool {
        matches!(self, ReqBody::Done(_))
    }

    /// Body bytes received so far.
    pub(super) fn received(&self) -> u64 {
        match self {
            ReqBody::Length { remaining, total } => total - remaining,
            ReqBody::Chunked { total, .. } => *total,
            ReqBody::Done(n) => *n,
        }
    }

    /// Moves the body bytes available in `buf` to `out`, re-encoding chunks.
    /// For a Content-Length body: how many of the `available` bytes read are body, counted as
    /// moved (the caller writes them from its read buffer instead of copying them to `out`).
    /// None for a chunked body, which is decoded through `pump`.
    pub(super) fn take_length(&mut self, available: usize) -> Option<usize> {
        let ReqBody::Length { remaining, total } = self else {
            return None;
        };
        let n = (*remaining).min(available as u64);
        *remaining -= n;
        if *remaining == 0 {
            *self = ReqBody::Done(*total);
        }
        Some(n as usize)
    }

    pub(super) fn pump(
        &mut self,
        buf: &mut BytesMut,
        out: &mut Vec<u8>,
        max: u64,
    ) -> Result<(), Error> {
        match self {
            ReqBody::Done(_) => Ok(()),
            ReqBody::Length { remaining, total } => {
                pump_length(remaining, buf, out);
                if *remaining == 0 {
                    *self = ReqBody::Done(*total);
                }
                Ok(())
            }
            ReqBody::Chunked { decoder, total } => {
                let (n, done) = pump_chunks(decoder, buf, out, true, Kind::InvalidBody)?;
                *total += n;
                if *total > max {
                    return Err(Error::new(Kind::BodyTooLarge));
                }
                if done {
                    *self = ReqBody::Done(*total);
                }
                Ok(())
            }
        }
    }
}

/// Progress of the response body towards the client.
#[derive(Debug)]
pub(super) enum RespBody {
    Length {
        remaining: u64,
    },
    Chunked {
        decoder: Decoder,
        rechunk: bool,
    },
    /// Until the upstream closes.
    Close {
        rechunk: bool,
    },
    Done,
}

impl RespBody {
    pub(super) fn new(f: Framing, rechunk: bool) -> Self {
        match f {
            Framing::None | Framing::Length(0) => RespBody::Done,
            Framing::Length(n) => RespBody::Length { remaining: n },
            Framing::Chunked => RespBody::Chunked {
                decoder: Decoder::new(),
                rechunk,
            },
            Framing::Close => RespBody::Close { rechunk },
        }
    }

    pub(super) fn is_done(&self) -> bool {
        matches!(self, RespBody::Done)
    }

    /// Moves body bytes from `buf` to `out`; returns the payload bytes moved.
    /// As [`ReqBody::take_length`], for a response.
    pub(super) fn take_length(&mut self, available: usize) -> Option<usize> {
        let RespBody::Length { remaining } = self else {
            return None;
        };
        let n = (*remaining).min(available as u64);
        *remaining -= n;
        if *remaining == 0 {
            *self = RespBody::Done;
        }
        Some(n as usize)
    }

    pub(super) fn pump(&mut self, buf: &mut BytesMut, out: &mut Vec<u8>) -> Result<u64, Error> {
        match self {
            RespBody::Done => Ok(0),
            RespBody::Length { remaining } => {
                let n = pump_length(remaining, buf, out);
                if *remaining == 0 {
                    *self = RespBody::Done;
                }
                Ok(n)
            }
            RespBody::Close { rechunk } => {
                let n = buf.len();
                if n > 0 {
                    if *rechunk {
                        write::chunk_header(out, n);
                    }
                    out.extend_from_slice(buf);
                    if *rechunk {
                        out.extend_from_slice(b"\r\n");
                    }
                    buf.clear();
                }
                Ok(n as u64)
            }
            RespBody::Chunked { decoder, rechunk } => {
                let (n, done) = pump_chunks(decoder, buf, out, *rechunk, Kind::InvalidResponse)?;
                if done {
                    *self = RespBody::Done;
                }
                Ok(n)
            }
        }
    }

    /// The upstream closed: fine for a close-delimited body (finish it), a truncation
    /// otherwise.
    pub(super) fn on_eof(&mut self, out: &mut Vec<u8>) -> bool {
        match self {
            RespBody::Close { rechunk } => {
                if *rechunk {
                    out.extend_from_slice(b"0\r\n\r\n");
                }
                *self = RespBody::Done;
                true
            }
            _ => false,
        }
    }
}

/// Moves up to `remaining` bytes of a Content-Length body from `buf` to `out`.
fn pump_length(remaining: &mut u64, buf: &mut BytesMut, out: &mut Vec<u8>) -> u64 {
    let n = (*remaining).min(buf.len() as u64);
    out.extend_from_slice(&buf[..n as usize]);
    buf.advance(n as usize);
    *remaining -= n;
    n
}

/// Decodes the chunks available in `buf` and moves their payload to `out`, re-encoded as chunks
/// when `rechunk` (chunk extensions and trailers are dropped). Returns the payload bytes moved
/// and whether the body ended; a framing error becomes `bad`.
fn pump_chunks(
    decoder: &mut Decoder,
    buf: &mut BytesMut,
    out: &mut Vec<u8>,
    rechunk: bool,
    bad: Kind,
) -> Result<(u64, bool), Error> {
    let mut moved = 0;
    loop {
        match decoder.decode(buf).map_err(|e| Error::with_cause(bad, e))? {
            chunked::Step::Data {
                consumed,
                start,
                end,
            } => {
                if rechunk {
                    write::chunk_header(out, end - start);
                }
                out.extend_from_slice(&buf[start..end]);
                if rechunk {
                    out.extend_from_slice(b"\r\n");
                }
                moved += (end - start) as u64;
                buf.advance(consumed);
            }
            chunked::Step::NeedMore { consumed } => {
                buf.advance(consumed);
                return Ok((moved, false));
            }
            chunked::Step::Done { consumed } => {
                buf.advance(consumed);
                if rechunk {
                    out.extend_from_slice(b"0\r\n\r\n");
                }
                return Ok((moved, true));
            }
        }
    }
}
