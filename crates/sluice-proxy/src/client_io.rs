//! The client side of a connection: plain TCP or TLS over TCP, behind one type so that the
//! HTTP engine is written once. An enum rather than a generic: one copy of the engine in the
//! binary, and a branch per read or write that the CPU predicts perfectly.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

use crate::h2_down::H2Client;

/// A client connection.
#[derive(Debug)]
pub(crate) enum ClientIo {
    Tcp(TcpStream),
    Tls(Box<TlsStream<Rewind<TcpStream>>>),
    /// One HTTP/2 stream, carried to the HTTP/1.1 engine as a connection of its own (see
    /// `h2_down.rs`).
    Bridged(Box<H2Client>),
}

impl ClientIo {
    /// The subject of the client certificate the TLS handshake verified (`CN=..., O=...`).
    pub(crate) fn client_subject(&self) -> Option<std::rc::Rc<str>> {
        let t = match self {
            ClientIo::Tls(t) => t,
            ClientIo::Bridged(b) => return b.subject.clone(),
            ClientIo::Tcp(_) => return None,
        };
        let cert = t.get_ref().1.peer_certificates()?.first()?;
        let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
        Some(parsed.subject().to_string().into())
    }

    /// A TLS connection without a client certificate: the name it asked for (SNI).
    /// (A bridged HTTP/2 stream was checked before it was bridged.)
    pub(crate) fn without_cert(&self) -> Option<Option<std::rc::Rc<str>>> {
        let ClientIo::Tls(t) = self else {
            return None;
        };
        let conn = t.get_ref().1;
        conn.peer_certificates()
            .is_none()
            .then(|| conn.server_name().map(Into::into))
    }

    /// Whether bytes written may sit in a buffer until flushed (TLS records do).
    #[inline]
    pub(crate) fn buffers_writes(&self) -> bool {
        !matches!(self, ClientIo::Tcp(_))
    }

    /// Whether the connection can wait for its next request without a buffer (see
    /// `conn::serve`): a socket can say when it is readable; a bridged stream cannot.
    #[inline]
    pub(crate) fn parks(&self) -> bool {
        !matches!(self, ClientIo::Bridged(_))
    }

    /// Ready when a read may find bytes: the socket is readable, or (TLS) plaintext or replayed
    /// bytes are already buffered. Reads nothing.
    pub(crate) fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            ClientIo::Tcp(s) => s.poll_read_ready(cx),
            // rustls' plaintext, then replayed bytes, then the socket.
            ClientIo::Tls(t) => crate::relay::ReadReady::poll_read_ready(&**t, cx),
            ClientIo::Bridged(_) => Poll::Ready(Ok(())),
        }
    }

    /// Whether this is an HTTP/2 stream carried through the engine.
    #[inline]
    pub(crate) fn is_bridged(&self) -> bool {
        matches!(self, ClientIo::Bridged(_))
    }

    /// The client's address as text, when its connection already formatted it (an HTTP/2
    /// stream: once per connection, not per stream).
    #[inline]
    pub(crate) fn ip_text(&self) -> Option<&std::rc::Rc<str>> {
        match self {
            ClientIo::Bridged(b) => Some(&b.ip),
            _ => None,
        }
    }

    /// An HTTP/2 stream's answer head, given typed rather than written as HTTP/1.1 bytes;
    /// false when the stream is gone (or this is not a stream).
    #[inline(never)]
    pub(crate) fn answer_typed(&mut self, a: crate::h2_head::TypedAnswer) -> bool {
        match self {
            ClientIo::Bridged(b) => b.answer(a).is_ok(),
            _ => false,
        }
    }

    /// Ready when the client is known to be gone: an HTTP/2 stream the client reset. An
    /// HTTP/1.1 client is not watched (its close is found by the next read or write; it
    /// cannot leave work behind and open more on the same connection, as a reset stream can).
    #[inline]
    pub(crate) fn poll_gone(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        match self {
            ClientIo::Bridged(b) => b.poll_gone(cx),
            _ => Poll::Pending,
        }
    }

    /// Whether the client is known to be gone now ([`ClientIo::poll_gone`], asked without
    /// waiting).
    #[cold]
    pub(crate) fn is_gone(&mut self) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        self.poll_gone(&mut cx).is_ready()
    }

    /// An HTTP/2 stream's answer head given typed and not sent yet is let go: the engine
    /// answers otherwise (a clean 502 when the node's body failed from its first bytes).
    #[cold]
    pub(crate) fn forget_answer(&mut self) {
        if let ClientIo::Bridged(b) = self {
            b.forget_answer();
        }
    }

    /// An HTTP/2 stream's request head, given typed: written into the engine's empty read
    /// buffer (`h2_down::H2Client::take_head`). None: not a stream, or taken already. (Read
    /// where the buffer is empty at a head's start, which an HTTP/1.1 connection never is:
    /// it waits in `conn::serve` for its first bytes.)
    #[cold]
    pub(crate) fn typed_head(
        &mut self,
        limits: &sluice_core::http::request::HeadLimits,
        buf: &mut bytes::BytesMut,
        fields: &mut Vec<sluice_core::http::HeaderPos>,
    ) -> Option<Result<sluice_core::http::RequestHead, sluice_core::http::request::Reject>> {
        match self {
            ClientIo::Bridged(b) => b.take_head(limits, buf, fields),
            _ => None,
        }
    }

    /// Whether the client's connection is TLS.
    #[inline]
    pub(crate) fn is_https(&self) -> bool {
        match self {
            ClientIo::Tcp(_) => false,
            ClientIo::Tls(_) => true,
            ClientIo::Bridged(b) => b.https,
        }
    }
}

impl AsyncRead for ClientIo {
    #[inline]
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientIo::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            ClientIo::Tls(s) => Pin::new(&mut **s).poll_read(cx, buf),
            ClientIo::Bridged(b) => Pin::new(&mut **b).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ClientIo {
    #[inline]
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ClientIo::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            ClientIo::Tls(s) => Pin::new(&mut **s).poll_write(cx, buf),
            ClientIo::Bridged(b) => Pin::new(&mut **b).poll_write(cx, buf),
        }
    }

    #[inline]
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientIo::Tcp(_) => Poll::Ready(Ok(())),
            ClientIo::Tls(s) => Pin::new(&mut **s).poll_flush(cx),
            ClientIo::Bridged(b) => Pin::new(&mut **b).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientIo::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            ClientIo::Tls(s) => Pin::new(&mut **s).poll_shutdown(cx),
            ClientIo::Bridged(b) => Pin::new(&mut **b).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ClientIo::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            ClientIo::Tls(s) => Pin::new(&mut **s).poll_write_vectored(cx, bufs),
            ClientIo::Bridged(b) => Pin::new(&mut **b).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            ClientIo::Tcp(s) => s.is_write_vectored(),
            ClientIo::Tls(s) => s.is_write_vectored(),
            ClientIo::Bridged(b) => b.is_write_vectored(),
        }
    }
}

/// Writes all of `buf` to the client, flushed (TLS holds written bytes in records until
/// flushed; plain TCP has nothing to flush).
#[inline]
pub(crate) async fn send(io: &mut ClientIo, buf: &[u8]) -> io::Result<()> {
    use tokio::io::AsyncWriteExt;
    io.write_all(buf).await?;
    if io.buffers_writes() {
        io.flush().await?;
    }
    Ok(())
}

/// A stream that first gives back bytes already read from it (a ClientHello read to find the
/// server name), then reads on. Writes go straight through.
#[derive(Debug)]
pub(crate) struct Rewind<T> {
    pre: Bytes,
    inner: T,
}

impl<T> Rewind<T> {
    pub(crate) fn new(pre: Bytes, inner: T) -> Self {
        Rewind { pre, inner }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Rewind<T> {
    #[inline]
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if !me.pre.is_empty() {
            crate::io::give(&mut me.pre, buf);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut me.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Rewind<T> {
    #[inline]
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl crate::relay::ReadReady for ClientIo {
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ClientIo::poll_read_ready(self, cx)
    }
}

impl<T: crate::relay::ReadReady> crate::relay::ReadReady for Rewind<T> {
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.pre.is_empty() {
            return Poll::Ready(Ok(()));
        }
        self.inner.poll_read_ready(cx)
    }
}

/// Reads a TLS ClientHello from `io` without answering it: returns the bytes read (to be
/// replayed with [`Rewind`]) and the server name asked for. `Ok((bytes, None))` for a
/// ClientHello without SNI; `Err` with the bytes read when they are not TLS at all, or the
/// connection closed first. rustls parses; nothing here reads TLS by hand.
pub(crate) async fn read_client_hello(
    io: &mut TcpStream,
    max: usize,
) -> Result<(Bytes, Option<String>), Bytes> {
    use tokio::io::AsyncReadExt;
    let mut buf = bytes::BytesMut::with_capacity(2048);
    let mut acceptor = rustls::server::Acceptor::default();
    let mut fed = 0;
    loop {
        match io.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return Err(buf.freeze()),
            Ok(_) => {}
        }
        while fed < buf.len() {
            let mut rest = &buf[fed..];
            match acceptor.read_tls(&mut rest) {
                Ok(0) => return Err(buf.freeze()),
                Ok(n) => fed += n,
                Err(_) => return Err(buf.freeze()),
            }
        }
        match acceptor.accept() {
            Ok(Some(accepted)) => {
                let name = accepted.client_hello().server_name().map(str::to_owned);
                return Ok((buf.freeze(), name));
            }
            Ok(None) if buf.len() < max => {}
            Ok(None) | Err(_) => return Err(buf.freeze()),
        }
    }
}

/// `fut` (a wait for a node's answer), unless `gone` finds the client gone while it waits:
/// then None. `gone` is asked only while `fut` is pending (for an HTTP/2 stream, h2's
/// `poll_reset`, which registers the task to be woken by a reset). Used by every path that
/// waits for a node for an HTTP/2 client: the engine ([`ClientIo::poll_gone`]), the fast path
/// and gRPC. A stream the client reset no longer holds the node's connection and a task until
/// the node answers or times out, while the client opens more streams in its place (the shape
/// of rapid reset, CVE-2023-44487, past the streams `h2` bounds).
pub(crate) async fn unless_gone<F: std::future::Future>(
    fut: F,
    mut gone: impl FnMut(&mut Context<'_>) -> bool,
) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    std::future::poll_fn(|cx| match fut.as_mut().poll(cx) {
        Poll::Ready(r) => Poll::Ready(Some(r)),
        Poll::Pending if gone(cx) => Poll::Ready(None),
        Poll::Pending => Poll::Pending,
    })
    .await
}
