//! A connection's buffers, lent to it while it is busy.

use bytes::BytesMut;
use sluice_core::ResponseEdits;
use sluice_core::http::HeaderPos;

/// Initial size of a connection's read buffer; it grows to the header limit when needed.
pub(super) const READ_BUF: usize = 4096;

/// A connection's buffers, owned by a [`Busy`] and lent to the connection it serves.
#[derive(Debug, Default)]
pub(crate) struct Bufs {
    pub(super) buf: BytesMut,
    pub(super) out: Vec<u8>,
    pub(super) headers: Vec<HeaderPos>,
    pub(super) up_buf: BytesMut,
    pub(super) up_headers: Vec<HeaderPos>,
    pub(super) edits: ResponseEdits,
    /// This request's `Expect: 100-continue` was answered (while its body was read for
    /// conditions): forwarding must not answer it again.
    pub(super) continued: bool,
    /// When the current request began (`Worker::begin`), for its log phase.
    pub(super) started: Option<u64>,
}

/// Buffers that grew past this are not kept: the next connection starts from the usual sizes.
/// Twice a body read (64 KiB, `forward.rs`): a buffer that held a body's 64 KiB read plus what
/// was left in it, or a re-framed chunk, is kept rather than dropped on every busy period.
const KEEP_BUF: usize = 128 * 1024;

impl Bufs {
    pub(super) fn fresh() -> Self {
        Bufs {
            buf: BytesMut::with_capacity(READ_BUF),
            out: Vec::with_capacity(1024),
            headers: Vec::with_capacity(16),
            up_buf: BytesMut::new(),
            up_headers: Vec::with_capacity(16),
            edits: ResponseEdits::default(),
            started: None,
            continued: false,
        }
    }

    /// Empties the buffers for the next connection, dropping any that grew too large.
    pub(super) fn clean(&mut self) {
        self.buf.clear();
        self.out.clear();
        self.headers.clear();
        self.up_buf.clear();
        self.up_headers.clear();
        self.edits.clear();
        self.continued = false;
        if self.buf.capacity() > KEEP_BUF {
            self.buf = BytesMut::with_capacity(READ_BUF);
        }
        if self.out.capacity() > KEEP_BUF {
            self.out = Vec::with_capacity(1024);
        }
        if self.up_buf.capacity() > KEEP_BUF {
            self.up_buf = BytesMut::new();
        }
    }
}
