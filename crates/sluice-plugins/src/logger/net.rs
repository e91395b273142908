//! Where the socket loggers (`tcp-logger`, `udp-logger`, `syslog`) send: a host and port,
//! over TCP (with TLS when asked, its certificate not checked, as APISIX's loggers do) or UDP.
//! A batch goes over a connection of its own, as APISIX's do.

use std::sync::Arc;
use std::time::Duration;

use sluice_config::Validator;
use tokio::io::AsyncWriteExt;

use crate::util::{Num, whole};

/// A log server's address, and how it is reached over TCP.
pub(crate) struct Peer {
    addr: String,
    tls: Option<(
        tokio_rustls::TlsConnector,
        rustls::pki_types::ServerName<'static>,
    )>,
}

impl Peer {
    /// `host` and `port` as configured; `tls`: the server name to send (the host when none).
    /// Errors at `host` and `port`.
    pub(crate) fn new(
        host: &str,
        port: Num,
        tls: Option<Option<&str>>,
        v: &mut Validator,
    ) -> Option<Peer> {
        let port = v.field("port", |v| whole(port, 1, 65_535, "", v));
        if host.is_empty() || host.bytes().any(|b| b.is_ascii_whitespace() || b == b'/') {
            v.error_at("host", "must be a host name or an IP address");
            return None;
        }
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let tls = match tls {
            None => None,
            Some(name) => {
                let name = name.unwrap_or(bare);
                let Ok(server) = rustls::pki_types::ServerName::try_from(name.to_owned()) else {
                    v.error_at("tls_options", format!("\"{name}\" is not a server name"));
                    return None;
                };
                let cfg = sluice_core::tls_client::config(false)?;
                Some((tokio_rustls::TlsConnector::from(Arc::new(cfg)), server))
            }
        };
        let addr = if bare.contains(':') {
            format!("[{bare}]:{}", port?)
        } else {
            format!("{bare}:{}", port?)
        };
        Some(Peer { addr, tls })
    }

    /// Connects, writes `data` and closes, within `timeout`.
    pub(crate) async fn send_tcp(&self, data: &[u8], timeout: Duration) -> Result<(), String> {
        let call = async {
            let tcp = tokio::net::TcpStream::connect(&self.addr)
                .await
                .map_err(|e| format!("connect {}: {e}", self.addr))?;
            let _ = tcp.set_nodelay(true);
            match &self.tls {
                None => write_all(tcp, data).await,
                Some((connector, name)) => {
                    let tls = connector
                        .connect(name.clone(), tcp)
                        .await
                        .map_err(|e| format!("TLS handshake with {}: {e}", self.addr))?;
                    write_all(tls, data).await
                }
            }
            .map_err(|e| format!("send to {}: {e}", self.addr))
        };
        tokio::time::timeout(timeout, call)
            .await
            .map_err(|_| format!("{} did not take the batch within {timeout:?}", self.addr))?
    }

    /// Sends each datagram (a failed one ends the batch: Err with how many went).
    pub(crate) async fn send_udp(
        &self,
        datagrams: impl Iterator<Item = &[u8]>,
    ) -> Result<(), (usize, String)> {
        let local = if self.addr.starts_with('[') {
            "[::]:0"
        } else {
            "0.0.0.0:0"
        };
        let sock = tokio::net::UdpSocket::bind(local)
            .await
            .map_err(|e| (0, e.to_string()))?;
        sock.connect(&self.addr)
            .await
            .map_err(|e| (0, format!("{}: {e}", self.addr)))?;
        for (i, d) in datagrams.enumerate() {
            sock.send(d)
                .await
                .map_err(|e| (i, format!("send to {}: {e}", self.addr)))?;
        }
        Ok(())
    }
}

async fn write_all<S: tokio::io::AsyncWrite + Unpin>(mut s: S, data: &[u8]) -> std::io::Result<()> {
    s.write_all(data).await?;
    s.flush().await?;
    s.shutdown().await
}

/// A batch as APISIX's tcp-logger and udp-logger send it: one entry as itself when
/// `batch_max_size` is 1, else a JSON array.
pub(crate) fn json_batch(batch: &[bytes::Bytes], single: bool) -> Vec<u8> {
    if single && batch.len() == 1 {
        return batch[0].to_vec();
    }
    let mut out = Vec::with_capacity(batch.iter().map(|e| e.len() + 1).sum::<usize>() + 2);
    out.push(b'[');
    for (i, e) in batch.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(e);
    }
    out.push(b']');
    out
}
