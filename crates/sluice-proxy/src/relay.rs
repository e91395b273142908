//! Copying both ways between two connections until either closes or nothing moves for an idle
//! timeout: stream routes, WebSocket tunnels and the splice relay share it.

use std::cell::{Cell, RefCell};
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

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

/// A connection that can say whether a read may find bytes without reading, so without a
/// buffer: a tunnel waits on it between bursts holding none.
pub(crate) trait ReadReady {
    /// Ready when a read may find bytes (or the end, or an error); it may still find none.
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
}

impl ReadReady for TcpStream {
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        TcpStream::poll_read_ready(self, cx)
    }
}

/// Readable when rustls holds plaintext already (it wants no more TLS bytes), or the socket
/// is.
fn tls_read_ready<T: ReadReady>(
    io: &T,
    wants_read: bool,
    cx: &mut Context<'_>,
) -> Poll<io::Result<()>> {
    if !wants_read {
        return Poll::Ready(Ok(()));
    }
    io.poll_read_ready(cx)
}

impl<T: ReadReady> ReadReady for tokio_rustls::server::TlsStream<T> {
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let (io, session) = self.get_ref();
        tls_read_ready(io, session.wants_read(), cx)
    }
}

impl<T: ReadReady> ReadReady for tokio_rustls::client::TlsStream<T> {
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let (io, session) = self.get_ref();
        tls_read_ready(io, session.wants_read(), cx)
    }
}

impl<T: ReadReady> ReadReady for &mut T {
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        (**self).poll_read_ready(cx)
    }
}

/// Copies both ways between `a` and `b` until either closes or nothing moves either way for
/// `idle` (noticed between `idle` and twice that after the last byte: activity is counted, not
/// timed, so that moving bytes costs no clock read). Used by stream routes and WebSocket
/// tunnels. A direction holds a copy buffer of `buf` bytes only while bytes move: it waits
/// for readability without one, takes one from the worker's pool for the burst, and gives it
/// back when a read finds nothing more (an idle WebSocket tunnel held 16 KiB of buffers).
pub(crate) async fn copy_with_idle<A, B>(a: &mut A, b: &mut B, idle: Duration, buf: usize) -> Moved
where
    A: AsyncRead + AsyncWrite + ReadReady + Unpin,
    B: AsyncRead + AsyncWrite + ReadReady + Unpin,
{
    let moved = Rc::new(Cell::new(0u64));
    let bytes = Rc::new(Cell::new((0u64, 0u64)));
    let mut a = Active {
        inner: a,
        moved: moved.clone(),
        bytes: bytes.clone(),
    };
    let mut a_to_b = Half::new(buf);
    let mut b_to_a = Half::new(buf);
    let copy = std::future::poll_fn(|cx| {
        let one = a_to_b.poll(cx, &mut a, b)?;
        let other = b_to_a.poll(cx, b, &mut a)?;
        if one.is_ready() && other.is_ready() {
            Poll::Ready(Ok(()))
        } else {
            Poll::Pending
        }
    });
    let end = until_idle(copy, &moved, idle).await;
    a_to_b.give_back();
    b_to_a.give_back();
    let (from_a, to_a) = bytes.get();
    Moved { from_a, to_a, end }
}

/// Copy buffers kept per worker thread and size for tunnels' bursts (as many as move bytes
/// at once, up to the cap).
const POOLED_BUFFERS: usize = 32;

/// Buffers by size: one pool per size (WebSocket tunnels and stream routes use different ones).
type Pools = Vec<(usize, Vec<Box<[u8]>>)>;

thread_local! {
    static BUFFERS: RefCell<Pools> = const { RefCell::new(Vec::new()) };
}

fn take_buffer(size: usize) -> Box<[u8]> {
    BUFFERS
        .with_borrow_mut(|pools| {
            let (_, pool) = pools.iter_mut().find(|(s, _)| *s == size)?;
            pool.pop()
        })
        .unwrap_or_else(|| vec![0; size].into_boxed_slice())
}

fn give_buffer(buf: Box<[u8]>) {
    BUFFERS.with_borrow_mut(|pools| {
        let size = buf.len();
        let i = match pools.iter().position(|(s, _)| *s == size) {
            Some(i) => i,
            None => {
                pools.push((size, Vec::new()));
                pools.len() - 1
            }
        };
        if pools[i].1.len() < POOLED_BUFFERS {
            pools[i].1.push(buf);
        }
    });
}

/// One direction of a tunnel.
struct Half {
    size: usize,
    /// Held only during a burst.
    buf: Option<Box<[u8]>>,
    /// Bytes of `buf` written so far, and read.
    pos: usize,
    end: usize,
    /// Written since the last flush.
    unflushed: bool,
    /// The reader ended: shut the writer down, then done.
    eof: bool,
    done: bool,
}

impl Half {
    fn new(size: usize) -> Half {
        Half {
            size,
            buf: None,
            pos: 0,
            end: 0,
            unflushed: false,
            eof: false,
            done: false,
        }
    }

    fn give_back(&mut self) {
        if let Some(b) = self.buf.take() {
            give_buffer(b);
        }
    }

    /// Flushes what was written (a TLS writer may keep a record until then) before waiting.
    fn flush<W: AsyncWrite + Unpin>(
        &mut self,
        cx: &mut Context<'_>,
        w: &mut W,
    ) -> Poll<io::Result<()>> {
        if self.unflushed {
            ready!(Pin::new(w).poll_flush(cx))?;
            self.unflushed = false;
        }
        Poll::Ready(Ok(()))
    }

    fn poll<R, W>(&mut self, cx: &mut Context<'_>, r: &mut R, w: &mut W) -> Poll<io::Result<()>>
    where
        R: AsyncRead + ReadReady + Unpin,
        W: AsyncWrite + Unpin,
    {
        loop {
            if self.done {
                return Poll::Ready(Ok(()));
            }
            if let Some(buf) = &self.buf
                && self.pos < self.end
            {
                let n = ready!(Pin::new(&mut *w).poll_write(cx, &buf[self.pos..self.end]))?;
                if n == 0 {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                self.pos += n;
                self.unflushed = true;
                continue;
            }
            if self.eof {
                ready!(Pin::new(&mut *w).poll_shutdown(cx))?;
                self.done = true;
                continue;
            }
            if self.buf.is_none() {
                if r.poll_read_ready(cx)?.is_pending() {
                    ready!(self.flush(cx, w))?;
                    return Poll::Pending;
                }
                self.buf = Some(take_buffer(self.size));
            }
            let buf = self.buf.as_mut().expect("taken above");
            let mut rb = ReadBuf::new(buf);
            match Pin::new(&mut *r).poll_read(cx, &mut rb) {
                Poll::Ready(Ok(())) => {
                    let n = rb.filled().len();
                    (self.pos, self.end) = (0, n);
                    if n == 0 {
                        self.eof = true;
                        self.give_back();
                    }
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {
                    // Nothing more for now: the buffer goes back until the next burst.
                    self.give_back();
                    ready!(self.flush(cx, w))?;
                    return Poll::Pending;
                }
            }
        }
    }
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

impl<C: ReadReady> ReadReady for Active<C> {
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.inner.poll_read_ready(cx)
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    async fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        (c, s)
    }

    fn pooled() -> usize {
        BUFFERS.with_borrow(|p| p.iter().map(|(_, pool)| pool.len()).sum())
    }

    /// A tunnel holds copy buffers only while bytes move: between bursts both are back in the
    /// worker's pool (with tokio's copy they stayed with the tunnel for its life). Bytes cross
    /// both ways at once intact, and an end on either side reaches the other.
    #[tokio::test(flavor = "current_thread")]
    async fn a_tunnel_holds_its_buffers_only_while_bytes_move() {
        // Two buffers in the pool, one per direction: a buffer taken is one of them, so what
        // the pool holds says how many a tunnel holds.
        give_buffer(vec![0; 8192].into());
        give_buffer(vec![0; 8192].into());
        let (client, mut a) = pair().await;
        let (mut b, origin) = pair().await;
        let up: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let down: Vec<u8> = (0..200_000u32).map(|i| (i % 241) as u8).collect();
        let (up_len, down_len) = (up.len() as u64, down.len() as u64);
        let relay = copy_with_idle(&mut a, &mut b, Duration::from_secs(10), 8192);
        let test = async move {
            let (mut client, mut origin) = (client, origin);
            {
                let (mut cr, mut cw) = client.split();
                let (mut or, mut ow) = origin.split();
                let mut got_up = vec![0; up.len()];
                let mut got_down = vec![0; down.len()];
                let (w1, r1, w2, r2) = tokio::join!(
                    cw.write_all(&up),
                    or.read_exact(&mut got_up),
                    ow.write_all(&down),
                    cr.read_exact(&mut got_down),
                );
                w1.unwrap();
                r1.unwrap();
                w2.unwrap();
                r2.unwrap();
                assert!(got_up == up, "client to origin: bytes differ");
                assert!(got_down == down, "origin to client: bytes differ");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert_eq!(pooled(), 2, "an idle tunnel still holds a copy buffer");
            // The client's end reaches the origin; the origin's, the client.
            client.shutdown().await.unwrap();
            let mut rest = Vec::new();
            origin.read_to_end(&mut rest).await.unwrap();
            assert!(rest.is_empty());
            drop(origin);
            client.read_to_end(&mut rest).await.unwrap();
            assert!(rest.is_empty());
        };
        let (moved, ()) = tokio::join!(relay, test);
        assert!(moved.end.is_ok(), "{:?}", moved.end);
        assert_eq!((moved.from_a, moved.to_a), (up_len, down_len));
        assert_eq!(pooled(), 2);
    }
}
