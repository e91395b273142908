//! HTTP/1.1 calls from a plugin to a service of the operator's (forward-auth's authorizer):
//! over TCP or TLS, on the worker's own runtime (the request waits, the worker does not), with
//! a keep-alive pool per worker thread and target (no lock shared between workers), the whole
//! call bounded by one timeout, the answer's body read up to a cap.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1::SendRequest;
use rustc_hash::FxHashMap;

/// The largest answer body read from a service.
pub(crate) const MAX_ANSWER: usize = 1 << 20;

/// Where calls go: parsed and its TLS set up when the configuration loads.
#[derive(Clone)]
pub(crate) struct Target {
    /// `host:port` (the pool's key, with `tls`).
    addr: String,
    /// The `Host` of its requests.
    pub(crate) authority: String,
    /// Path and query of `uri`.
    pub(crate) path: String,
    tls: Option<(
        Arc<rustls::ClientConfig>,
        rustls::pki_types::ServerName<'static>,
    )>,
    /// The pool's key: the address, and how it is reached (plain, TLS checked or not: a
    /// connection made without checking the certificate is never given to a caller that asks
    /// for the check); made once here, not per call.
    key: String,
}

impl Target {
    /// `http://host[:port]/path` or `https://...` (`verify`: check the certificate against the
    /// system's CAs).
    pub(crate) fn parse(uri: &str, verify: bool) -> Result<Target, String> {
        let u: http::Uri = uri.parse().map_err(|e| format!("invalid URI: {e}"))?;
        let https = match u.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err("must be an http:// or https:// URI".into()),
        };
        let host = u.host().ok_or("has no host")?.to_owned();
        let port = u.port_u16().unwrap_or(if https { 443 } else { 80 });
        let bare = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let tls = if https {
            let cfg = sluice_core::tls_client::http1_config(verify)
                .ok_or("no system CA certificates to verify it with (install ca-certificates, or set ssl_verify: false)")?;
            let name = rustls::pki_types::ServerName::try_from(bare.clone())
                .map_err(|e| format!("invalid host name: {e}"))?;
            Some((cfg, name))
        } else {
            None
        };
        let how = match (https, verify) {
            (false, _) => "http",
            (true, true) => "https",
            (true, false) => "https-unverified",
        };
        let key = format!("{how}://{host}:{port}");
        Ok(Target {
            addr: format!("{host}:{port}"),
            authority: u.authority().map_or(host, |a| a.as_str().to_owned()),
            // `http://h?x=1` has no path: the request target is `/?x=1`.
            path: match u.path_and_query().map_or("/", |p| p.as_str()) {
                p if p.starts_with('/') => p.to_owned(),
                p => format!("/{p}"),
            },
            key,
            tls,
        })
    }
}

/// Keep-alive settings of a caller: idle connections kept per worker, and for how long.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeepAlive {
    pub(crate) pool: usize,
    pub(crate) idle: Duration,
}

/// The call settings forward-auth and opa share, in APISIX's names and ranges: `timeout` (ms,
/// 1 to 60,000, default 3,000), `keepalive`, `keepalive_timeout` (ms, at least 1,000, default
/// 60,000) and `keepalive_pool` (1 to 10,000, default 5). Errors point at the field.
pub(crate) fn settings(
    timeout: Option<crate::util::Num>,
    keepalive: bool,
    keepalive_timeout: Option<crate::util::Num>,
    keepalive_pool: Option<crate::util::Num>,
    v: &mut sluice_config::Validator,
) -> Option<(Duration, Option<KeepAlive>)> {
    let mut num =
        |field: &str, n: Option<crate::util::Num>, default: u64, lo: u64, hi: u64, unit: &str| {
            crate::util::whole_field(field, n, default, (lo, hi), unit, v)
        };
    let timeout = num("timeout", timeout, 3000, 1, 60_000, " ms");
    let idle = num(
        "keepalive_timeout",
        keepalive_timeout,
        60_000,
        1000,
        86_400_000,
        " ms",
    );
    let pool = num("keepalive_pool", keepalive_pool, 5, 1, 10_000, "");
    let (timeout, idle, pool) = (timeout?, idle?, pool?);
    Some((
        Duration::from_millis(timeout),
        keepalive.then_some(KeepAlive {
            pool: pool as usize,
            idle: Duration::from_millis(idle),
        }),
    ))
}

type Idle = Vec<(SendRequest<Full<Bytes>>, Instant)>;

thread_local! {
    /// Each worker's idle connections, by target.
    static IDLE: RefCell<FxHashMap<String, Idle>> = RefCell::new(FxHashMap::default());
    /// When this worker last closed every target's expired connections.
    static SWEPT: std::cell::Cell<Option<Instant>> = const { std::cell::Cell::new(None) };
}

/// One call: the request, and the answer's head and body. Err: why it failed (no connection,
/// a broken one, an answer body over [`MAX_ANSWER`]).
pub(crate) async fn call(
    target: &Target,
    req: http::Request<Full<Bytes>>,
    keepalive: Option<KeepAlive>,
) -> Result<(http::response::Parts, Bytes), String> {
    let key = target.key.clone();
    let pooled = keepalive.and_then(|k| {
        IDLE.with_borrow_mut(|idle| {
            // Every target's expired connections closed, at most once per idle period: a
            // target no route names any more keeps none open.
            let now = Instant::now();
            if SWEPT.get().is_none_or(|t| now.duration_since(t) >= k.idle) {
                SWEPT.set(Some(now));
                idle.retain(|_, list| {
                    list.retain(|(s, since)| since.elapsed() < k.idle && !s.is_closed());
                    !list.is_empty()
                });
            }
            let list = idle.get_mut(&key)?;
            while let Some((s, since)) = list.pop() {
                if since.elapsed() < k.idle && !s.is_closed() {
                    return Some(s);
                }
            }
            None
        })
    });
    let was_pooled = pooled.is_some();
    let mut send = match pooled {
        Some(s) => s,
        None => connect(target).await?,
    };
    send.ready().await.map_err(|e| e.to_string())?;
    let resp = match send.try_send_request(req).await {
        Ok(r) => r,
        // A kept connection the service closed meanwhile, before the request went out: once
        // more on a new one.
        Err(mut e) => match (was_pooled, e.take_message()) {
            (true, Some(req)) => {
                send = connect(target).await?;
                send.ready().await.map_err(|e| e.to_string())?;
                send.send_request(req).await.map_err(|e| e.to_string())?
            }
            _ => return Err(e.into_error().to_string()),
        },
    };
    let (parts, body) = resp.into_parts();
    let body = Limited::new(body, MAX_ANSWER)
        .collect()
        .await
        .map_err(|e| format!("answer body: {e}"))?
        .to_bytes();
    if let Some(k) = keepalive
        && !send.is_closed()
    {
        IDLE.with_borrow_mut(|idle| {
            let list = idle.entry(key).or_default();
            list.retain(|(s, since)| since.elapsed() < k.idle && !s.is_closed());
            if list.len() < k.pool {
                list.push((send, Instant::now()));
            }
        });
    }
    Ok((parts, body))
}

async fn connect(target: &Target) -> Result<SendRequest<Full<Bytes>>, String> {
    let tcp = tokio::net::TcpStream::connect(target.addr.as_str())
        .await
        .map_err(|e| format!("connect {}: {e}", target.addr))?;
    let _ = tcp.set_nodelay(true);
    match &target.tls {
        None => handshake(tcp).await,
        Some((cfg, name)) => {
            let tls = tokio_rustls::TlsConnector::from(cfg.clone())
                .connect(name.clone(), tcp)
                .await
                .map_err(|e| format!("TLS with {}: {e}", target.addr))?;
            handshake(tls).await
        }
    }
}

async fn handshake<T>(io: T) -> Result<SendRequest<Full<Bytes>>, String>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io))
        .await
        .map_err(|e| e.to_string())?;
    // On the worker's runtime: the connection lives while the pool keeps its sender.
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(send)
}
