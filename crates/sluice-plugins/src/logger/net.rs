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

/// `host:port` (`[v6]:port`) of a configured `host` and `port`; errors at `host` and `port`.
/// The socket loggers' and kafka-logger's brokers'.
pub(crate) fn address(host: &str, port: Num, v: &mut Validator) -> Option<String> {
    let port = v.field("port", |v| whole(port, 1, 65_535, "", v));
    if host.is_empty() || host.bytes().any(|b| b.is_ascii_whitespace() || b == b'/') {
        v.error_at("host", "must be a host name or an IP address");
        return None;
    }
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    Some(if bare.contains(':') {
        format!("[{bare}]:{}", port?)
    } else {
        format!("{bare}:{}", port?)
    })
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
        let addr = address(host, port, v);
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
        Some(Peer { addr: addr?, tls })
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

/// An HTTP logger's servers: one is chosen at random for each batch (APISIX's
/// `endpoint_addrs`).
pub(crate) struct Endpoints(Vec<crate::callout::Target>);

impl Endpoints {
    /// One server.
    pub(crate) fn one(t: crate::callout::Target) -> Endpoints {
        Endpoints(vec![t])
    }

    /// Each of `uris` with `path` appended (`""`: as written), parsed; errors at `field[i]`.
    pub(crate) fn parse(
        field: &str,
        uris: &[String],
        path: &str,
        verify: bool,
        v: &mut Validator,
    ) -> Option<Endpoints> {
        if uris.is_empty() {
            v.error_at(field, "must list at least one server");
            return None;
        }
        let mut out = Vec::with_capacity(uris.len());
        let mut ok = true;
        v.field(field, |v| {
            for (i, u) in uris.iter().enumerate() {
                match crate::callout::Target::parse(&format!("{u}{path}"), verify) {
                    Ok(t) => out.push(t),
                    Err(e) => {
                        v.index(i, |v| v.error(e));
                        ok = false;
                    }
                }
            }
        });
        ok.then_some(Endpoints(out))
    }

    /// POSTs `body` to one of them with `headers`, within `timeout`; Err unless the answer's
    /// status is one `ok` accepts.
    pub(crate) async fn post(
        &self,
        headers: &[(String, String)],
        body: bytes::Bytes,
        timeout: Duration,
        keepalive: Option<crate::callout::KeepAlive>,
        ok: impl Fn(u16) -> bool,
    ) -> Result<(), String> {
        let target = &self.0[fastrand::usize(..self.0.len())];
        let mut req =
            http::Request::post(&target.path).header(http::header::HOST, &target.authority);
        for (n, v) in headers {
            req = req.header(n.as_str(), v.as_str());
        }
        let req = req
            .body(http_body_util::Full::new(body))
            .map_err(|e| e.to_string())?;
        let call = crate::callout::call(target, req, keepalive);
        match tokio::time::timeout(timeout, call).await {
            Err(_) => Err(format!(
                "no answer from {} within {timeout:?}",
                target.authority
            )),
            Ok(Err(e)) => Err(e),
            Ok(Ok((parts, answer))) if !ok(parts.status.as_u16()) => Err(format!(
                "{} answered {}: {}",
                target.authority,
                parts.status.as_u16(),
                String::from_utf8_lossy(&answer[..answer.len().min(200)])
            )),
            Ok(Ok(_)) => Ok(()),
        }
    }
}
