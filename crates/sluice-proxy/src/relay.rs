//! Copying both ways between two connections until either closes or nothing moves for an idle
//! timeout: stream routes, WebSocket tunnels and the splice relay share it.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Copy buffer per direction of a WebSocket tunnel: small messages, and many idle tunnels.
pub(crate) const WEBSOCKET_BUFFER: usize = 8 << 10;

/// What a relay moved, however it ended.
#[derive(Debug)]
pub(crate) struct Moved {
    /// Bytes read from `a` (a client: its bytes in).
    pub(crate) from_a: u64,
    /// Bytes written to `a`.
    pub(crate) to_a: u64,
    /// How it ended: `Ok` when either side closed, an error of kind `TimedOut` when idle.
    pub(crate) end: std::io::Result<()>,
}

/// Copies both ways between `a` and `b` until either closes or nothing moves either way for
/// `idle` (noticed between `idle` and twice that after the last byte: activity is counted, not
/// timed, so that moving bytes costs no clock read). Used by stream routes and WebSocket
/// tunnels.
pub(crate) async fn copy_with_idle<A, B>(a: &mut A, b: &mut B, idle: Duration, buf: usize) -> Moved
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let moved = Rc::new(Cell::new(0u64));
    let bytes = Rc::new(Cell::new((0u64, 0u64)));
    let mut a = Active {
        inner: a,
        moved: moved.clone(),
        bytes: bytes.clone(),
    };
    let copy = tokio::io::copy_bidirectional_with_sizes(&mut a, b, buf, buf);
    let end = until_idle(copy, &moved, idle).await.map(drop);
    let (from_a, to_a) = bytes.get();
    Moved { from_a, to_a, end }
}

/// Runs `work` (which counts what it moves in `moved`) until it ends, or until `moved` has
/// not changed for `idle` (an error of kind `TimedOut`).
pub(crate) async fn until_idle<T>(
    work: impl std::future::Future<Output = std::io::Result<T>>,
    moved: &Cell<u64>,
    idle: Duration,
) -> std::io::Result<T> {
    tokio::pin!(work);
    loop {
        let seen = moved.get();
        tokio::select! {
            r = &mut work => return r,
            () = tokio::time::sleep(idle) => {
                if moved.get() == seen {
                    return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, format!("idle for {idle:?}")));
                }
            }
        }
    }
}

/// Counts reads and writes on the client side (bytes moving either way pass through it).
struct Active<C> {
    inner: C,
    moved: Rc<Cell<u64>>,
    /// Bytes read from and written to `inner`.
    bytes: Rc<Cell<(u64, u64)>>,
}

impl<C: AsyncRead + Unpin> AsyncRead for Active<C> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            self.moved.set(self.moved.get() + 1);
            let (i, o) = self.bytes.get();
            self.bytes.set((i + n as u64, o));
        }
        r
    }
}

impl<C: AsyncWrite + Unpin> AsyncWrite for Active<C> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_write(cx, buf);
        if let std::task::Poll::Ready(Ok(n)) = r
            && n > 0
        {
            self.moved.set(self.moved.get() + 1);
            let (i, o) = self.bytes.get();
            self.bytes.set((i, o + n as u64));
        }
        r
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
