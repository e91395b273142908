//! Connections to nodes: what one is ([`UpIo`]), how one is opened ([`connect_node`]), and how
//! bytes are written to it ([`send`]).

use std::task::{Context, Poll};

use tokio::net::TcpStream;

use super::model::Upstream;
use crate::error::{Error, Kind};

/// A connection to an upstream node: plain TCP, TLS over TCP, or a stream at a time of the
/// worker's HTTP/2 connection to the node (`h2_up.rs`).
#[derive(Debug)]
pub(crate) enum UpIo {
    Tcp(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
    /// A stream at a time over a multiplexed connection (`http2`).
    H2(Box<dyn Multiplexed>),
}

/// A pseudo-connection over a multiplexed one (HTTP/2 to a node, `h2_up.rs`): read and written
/// by the HTTP/1.1 engine as any connection, one exchange at a time.
pub(crate) trait Multiplexed:
    tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + std::fmt::Debug
{
    /// The next request's head, typed: what is written after it is its body (framed as the
    /// head says). Without it, the head is read from what is written.
    fn set_head(&mut self, head: Result<crate::h2_head::Head2, crate::h2_head::BadHead>);

    /// The answer's head, when the request's head was given typed (`set_head`): then the read
    /// that reaches it gives no bytes, and this gives the head typed, never written as HTTP/1.1
    /// bytes to be parsed back, within the limits of a parsed head (`max_size`; `fields`: a
    /// reused vector). Its body is read as bytes after it. The error says, as the engine's own
    /// head reading does, whether nothing was read.
    fn answer_head(
        &mut self,
        max_size: usize,
        fields: &mut Vec<sluice_core::http::HeaderPos>,
    ) -> Option<Result<sluice_core::http::response::ResponseHead, (crate::error::Error, bool)>>;

    /// True when it may carry another request: the last answer was read whole and the
    /// connection under it has not ended.
    fn still_open(&mut self) -> bool;
}

impl crate::relay::ReadReady for UpIo {
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self {
            UpIo::Tcp(s) => s.poll_read_ready(cx),
            UpIo::Tls(t) => crate::relay::ReadReady::poll_read_ready(&**t, cx),
            // No readiness to ask: a read tries (and registers the wake-up).
            UpIo::H2(_) => Poll::Ready(Ok(())),
        }
    }
}

impl tokio::io::AsyncRead for UpIo {
    #[inline]
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            UpIo::Tcp(s) => std::pin::Pin::new(s).poll_read(cx, buf),
            UpIo::Tls(s) => std::pin::Pin::new(&mut **s).poll_read(cx, buf),
            UpIo::H2(p) => std::pin::Pin::new(&mut **p).poll_read(cx, buf),
        }
    }
}

impl tokio::io::AsyncWrite for UpIo {
    #[inline]
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            UpIo::Tcp(s) => std::pin::Pin::new(s).poll_write(cx, buf),
            UpIo::Tls(s) => std::pin::Pin::new(&mut **s).poll_write(cx, buf),
            UpIo::H2(p) => std::pin::Pin::new(&mut **p).poll_write(cx, buf),
        }
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            UpIo::Tcp(_) | UpIo::H2(_) => Poll::Ready(Ok(())),
            UpIo::Tls(s) => std::pin::Pin::new(&mut **s).poll_flush(cx),
        }
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            UpIo::Tcp(s) => std::pin::Pin::new(s).poll_shutdown(cx),
            UpIo::Tls(s) => std::pin::Pin::new(&mut **s).poll_shutdown(cx),
            UpIo::H2(p) => std::pin::Pin::new(&mut **p).poll_shutdown(cx),
        }
    }
}

/// Writes all of `buf` to an upstream connection, flushed (TLS holds records until then).
#[inline]
pub(crate) async fn send(io: &mut UpIo, buf: &[u8]) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt;
    io.write_all(buf).await?;
    if let UpIo::Tls(_) = io {
        io.flush().await?;
    }
    Ok(())
}

/// Opens a connection to a node: TCP, then TLS when the upstream says so (the handshake is
/// part of connecting: it counts against the connect timeout, and its failure is a connect
/// failure, retried on the next node).
pub(crate) async fn connect_node(up: &Upstream, node: usize) -> Result<UpIo, Error> {
    let n = &up.nodes[node];
    let tcp = TcpStream::connect(n.addr)
        .await
        .map_err(|e| Error::with_cause(Kind::ConnectFailed, e))?;
    let _ = tcp.set_nodelay(true);
    match &up.tls {
        None => Ok(UpIo::Tcp(tcp)),
        Some(tls) => {
            let name = n
                .server_name
                .clone()
                .ok_or_else(|| Error::with_cause(Kind::ConnectFailed, "no server name for TLS"))?;
            tokio_rustls::TlsConnector::from(tls.config.clone())
                .connect(name, tcp)
                .await
                .map(|s| UpIo::Tls(Box::new(s)))
                .map_err(|e| {
                    let rejected = e
                        .get_ref()
                        .and_then(|i| i.downcast_ref::<rustls::Error>())
                        .is_some_and(|r| matches!(r, rustls::Error::InvalidCertificate(_)));
                    if rejected {
                        Error::with_cause(Kind::CertificateRejected, e)
                    } else {
                        Error::with_cause(Kind::ConnectFailed, format_args!("TLS: {e}"))
                    }
                })
        }
    }
}
