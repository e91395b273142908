//! One HTTP/1.1 exchange with a control-plane service (a secret manager): over TCP or TLS,
//! bounded by one timeout, the body read whole. Not for proxied traffic.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};

/// Largest answer read: far beyond a secret or a token.
pub const MAX_ANSWER: usize = 1 << 20;

/// What came back: the status and the body.
pub type Answer = (u16, Bytes);

/// How long an exchange may take.
#[derive(Debug, Clone, Copy)]
pub struct Deadlines {
    /// To connect.
    pub connect: Duration,
    /// For the whole exchange, connecting included.
    pub total: Duration,
}

/// Sends `method url` with `headers` and `body`, and reads the answer, within `deadlines`.
/// `verify`: check an `https://` server's certificate against the system's CAs.
pub async fn request(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
    verify: bool,
    deadlines: Deadlines,
) -> Result<Answer, String> {
    let total = deadlines.total;
    tokio::time::timeout(
        total,
        exchange(method, url, headers, body, verify, deadlines.connect),
    )
    .await
    .map_err(|_| format!("no answer within {} ms", total.as_millis()))?
}

async fn exchange(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
    verify: bool,
    connect: Duration,
) -> Result<Answer, String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("invalid URL {url}: {e}"))?;
    let https = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => return Err(format!("{url}: not an http:// or https:// URL")),
    };
    let host = uri.host().ok_or_else(|| format!("{url}: no host"))?;
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let authority = uri.authority().map_or(host, |a| a.as_str()).to_owned();
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut req = http::Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::HOST, authority);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let tcp = tokio::time::timeout(
        connect,
        tokio::net::TcpStream::connect((host.as_str(), port)),
    )
    .await
    .map_err(|_| {
        format!(
            "no connection to {host}:{port} within {} ms",
            connect.as_millis()
        )
    })?
    .map_err(|e| format!("cannot connect to {host}:{port}: {e}"))?;
    let _ = tcp.set_nodelay(true);
    if https {
        let cfg = crate::tls::client_config(
            &sluice_config::UpstreamTlsConfig {
                verify,
                ..Default::default()
            },
            false,
            &mut sluice_config::Validator::new(),
        )
        .ok_or("no TLS client configuration (no system CA certificates?)")?;
        let name = rustls::pki_types::ServerName::try_from(host.clone())
            .map_err(|e| format!("{host}: {e}"))?;
        let tls = tokio_rustls::TlsConnector::from(cfg)
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS with {host}:{port}: {e}"))?;
        send(tls, req).await
    } else {
        send(tcp, req).await
    }
}

async fn send<IO>(io: IO, req: http::Request<Full<Bytes>>) -> Result<Answer, String>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io))
            .await
            .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let body = http_body_util::Limited::new(resp.into_body(), MAX_ANSWER)
        .collect()
        .await
        .map_err(|e| format!("reading the answer: {e}"))?
        .to_bytes();
    Ok((status, body))
}
