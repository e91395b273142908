//! A small etcd v3 client over etcd's HTTP/JSON gateway (`/v3/kv/range`, `/v3/kv/txn`,
//! `/v3/watch`), which every etcd since 3.3 serves on its client port.
//!
//! Written by hand rather than with `etcd-client` because that crate compiles etcd's protobuf
//! files at build time and so needs `protoc` installed wherever Sluice is built, and brings
//! tonic and prost (a long build on two cores) for the four calls Sluice makes. APISIX talks
//! to etcd the same way (lua-resty-etcd uses the JSON gateway).

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, StatusCode, Uri};
use serde_json::{Value, json};
use tokio::net::TcpStream;

/// The longest a connection to one endpoint may take to set up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// One key and its value as etcd holds it.
#[derive(Debug, Clone)]
pub struct Kv {
    /// The key.
    pub key: String,
    /// The value (empty for a deletion event).
    pub value: Vec<u8>,
    /// Revision of the key's creation: orders resources as they were added.
    pub create_revision: i64,
    /// Revision of the key's last change.
    pub mod_revision: i64,
}

/// A change seen by a watch.
#[derive(Debug, Clone)]
pub enum Event {
    /// A key was created or changed.
    Put(Kv),
    /// A key was deleted (its `mod_revision` is the deletion's).
    Delete(Kv),
}

/// Why an etcd call failed.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    /// No endpoint could be reached, or the call timed out.
    #[error("etcd unreachable: {0}")]
    Unreachable(String),
    /// etcd answered with an error.
    #[error("etcd error: {0}")]
    Server(String),
    /// The watch start revision was compacted away: read everything again.
    #[error("etcd compacted revision {0}")]
    Compacted(i64),
}

/// The client: endpoints tried in order, a timeout per call; with etcd's user/password
/// authentication and TLS when configured.
#[derive(Debug, Clone)]
pub struct Etcd {
    endpoints: Vec<Uri>,
    timeout: Duration,
    /// User and password, for `/v3/auth/authenticate`.
    auth: Option<(String, String)>,
    /// The token etcd gave, shared by clones (the watch and the writes).
    token: std::sync::Arc<parking_lot::Mutex<Option<String>>>,
    /// For `https://` endpoints.
    tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    /// The name verified and sent (SNI) instead of the endpoint's host.
    sni: Option<String>,
}

/// A connection to etcd: plain or TLS.
trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Stream for T {}

fn b64(s: &[u8]) -> String {
    B64.encode(s)
}

fn num(v: &Value) -> i64 {
    match v {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

fn kv(v: &Value) -> Kv {
    let text = |f: &str| v.get(f).and_then(Value::as_str).unwrap_or_default();
    Kv {
        key: String::from_utf8_lossy(&B64.decode(text("key")).unwrap_or_default()).into_owned(),
        value: B64.decode(text("value")).unwrap_or_default(),
        create_revision: num(v.get("create_revision").unwrap_or(&Value::Null)),
        mod_revision: num(v.get("mod_revision").unwrap_or(&Value::Null)),
    }
}

/// A range answer's revision and keys (etcd's JSON gateway: numbers as strings, keys and
/// values in base64).
fn range_of(v: &Value) -> (i64, Vec<Kv>) {
    let revision = num(&v["header"]["revision"]);
    let kvs = v
        .get("kvs")
        .and_then(Value::as_array)
        .map(|a| a.iter().map(kv).collect())
        .unwrap_or_default();
    (revision, kvs)
}

/// A watch answer's events.
fn events_of(result: &Value) -> Vec<Event> {
    result
        .get("events")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|e| {
                    let kv = kv(e.get("kv").unwrap_or(&Value::Null));
                    if e.get("type").and_then(Value::as_str) == Some("DELETE") {
                        Event::Delete(kv)
                    } else {
                        Event::Put(kv)
                    }
                })
                .collect()
        })
        .unwrap_or_default()
}

/// An answer's body read as the client reads it: as a range answer (its revision and keys)
/// and as a watch answer's `result` (its events).
#[doc(hidden)]
#[derive(Debug)]
pub struct Decoded {
    /// The range answer's revision.
    pub revision: i64,
    /// The range answer's keys.
    pub kvs: Vec<Kv>,
    /// The watch answer's events.
    pub events: Vec<Event>,
}

/// [`Decoded`] from an answer's body; None when it is not JSON. For the fuzz targets; not an
/// API.
#[doc(hidden)]
pub fn decode_for_fuzzing(body: &[u8]) -> Option<Decoded> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let events = v.get("result").map(events_of).unwrap_or_default();
    let (revision, kvs) = range_of(&v);
    Some(Decoded {
        revision,
        kvs,
        events,
    })
}

/// The end of the range of keys that start with `prefix`.
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// What a conditional write did.
#[derive(Debug, PartialEq, Eq)]
pub enum Written {
    /// Done, at this revision.
    At(i64),
    /// The condition failed: someone else wrote first.
    Conflict,
}

impl Etcd {
    /// A client of `endpoints` (`http://host:port`, or `https://` with the system's CAs).
    pub fn new(endpoints: &[String], timeout: Duration) -> Result<Etcd, String> {
        let endpoints = endpoints
            .iter()
            .map(|e| {
                let uri: Uri = e
                    .parse()
                    .map_err(|err| format!("invalid etcd endpoint {e:?}: {err}"))?;
                if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.authority().is_none()
                {
                    return Err(format!(
                        "invalid etcd endpoint {e:?}: expected http://host:port or https://host:port"
                    ));
                }
                Ok(uri)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Etcd {
            endpoints,
            timeout,
            auth: None,
            token: Default::default(),
            tls: None,
            sni: None,
        })
    }

    /// A client as the configuration's `etcd` says: endpoints, timeout, user and password;
    /// `tls`, the client configuration built from `etcd.tls` (by the data plane's TLS code, as
    /// for upstreams), used for `https://` endpoints.
    pub fn from_config(
        c: &sluice_config::EtcdConfig,
        tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    ) -> Result<Etcd, String> {
        let mut e = Etcd::new(&c.endpoints, c.timeout.0)?;
        if let (Some(u), Some(p)) = (&c.user, &c.password) {
            e.auth = Some((u.clone(), p.clone()));
        }
        e.sni = c.tls.as_ref().and_then(|t| t.sni.clone());
        e.tls = tls;
        if e.tls.is_none() && e.endpoints.iter().any(|u| u.scheme_str() == Some("https")) {
            return Err("etcd: https:// endpoints need a TLS client configuration".into());
        }
        Ok(e)
    }

    async fn connect(
        &self,
    ) -> Result<(hyper::client::conn::http1::SendRequest<Full<Bytes>>, String), EtcdError> {
        let mut last = String::from("no endpoint configured");
        for uri in &self.endpoints {
            let authority = uri.authority().map(|a| a.to_string()).unwrap_or_default();
            let host = uri.host().unwrap_or_default().trim_matches(['[', ']']);
            let attempt = async {
                let tcp = TcpStream::connect(&authority).await?;
                tcp.set_nodelay(true)?;
                let io: Box<dyn Stream> = match (&self.tls, uri.scheme_str()) {
                    (Some(tls), Some("https")) => {
                        let name = self.sni.as_deref().unwrap_or(host).to_owned();
                        let name = rustls::pki_types::ServerName::try_from(name)
                            .map_err(std::io::Error::other)?;
                        Box::new(
                            tokio_rustls::TlsConnector::from(tls.clone())
                                .connect(name, tcp)
                                .await?,
                        )
                    }
                    _ => Box::new(tcp),
                };
                let (send, conn) =
                    hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io))
                        .await
                        .map_err(std::io::Error::other)?;
                tokio::spawn(conn);
                Ok::<_, std::io::Error>(send)
            };
            // A connection is set up within a round trip or two: an endpoint that does not
            // answer (a partition drops the packets) is left after at most 2 s, not the call's
            // whole timeout, so that the next is tried while there is time.
            match tokio::time::timeout(self.timeout.min(CONNECT_TIMEOUT), attempt).await {
                Ok(Ok(send)) => return Ok((send, authority)),
                Ok(Err(e)) => last = format!("{authority}: {e}"),
                Err(_) => last = format!("{authority}: connect timed out"),
            }
        }
        Err(EtcdError::Unreachable(last))
    }

    /// The token for the next call: the one held, or a new one (None without auth).
    async fn token(&self, fresh: bool) -> Result<Option<String>, EtcdError> {
        let Some((user, password)) = &self.auth else {
            return Ok(None);
        };
        if !fresh && let Some(t) = self.token.lock().clone() {
            return Ok(Some(t));
        }
        let v = self
            .post(
                "/v3/auth/authenticate",
                &json!({"name": user, "password": password}),
                None,
            )
            .await
            .map_err(|e| match e {
                EtcdError::Server(m) => EtcdError::Server(format!(
                    "authentication as etcd.user \"{user}\" failed: {m}"
                )),
                other => other,
            })?;
        let token = v
            .get("token")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                EtcdError::Server("/v3/auth/authenticate: no token in the answer".into())
            })?
            .to_owned();
        *self.token.lock() = Some(token.clone());
        Ok(Some(token))
    }

    /// POSTs a JSON call and returns the JSON answer; with auth, renews the token once when
    /// etcd says it is not valid (expired, or etcd restarted).
    async fn call(&self, path: &str, body: Value) -> Result<Value, EtcdError> {
        let token = self.token(false).await?;
        match self.post(path, &body, token.as_deref()).await {
            Err(EtcdError::Server(m)) if self.auth.is_some() && token_refused(&m) => {
                let token = self.token(true).await?;
                self.post(path, &body, token.as_deref()).await
            }
            other => other,
        }
    }

    async fn post(
        &self,
        path: &str,
        body: &Value,
        token: Option<&str>,
    ) -> Result<Value, EtcdError> {
        let (mut send, host) = self.connect().await?;
        let mut req = Request::post(path)
            .header("host", &host)
            .header("content-type", "application/json");
        if let Some(t) = token {
            req = req.header("authorization", t);
        }
        let req = req
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| EtcdError::Server(e.to_string()))?;
        let exchange = async {
            let resp = send.send_request(req).await?;
            let status = resp.status();
            let body = resp.into_body().collect().await?.to_bytes();
            Ok::<_, hyper::Error>((status, body))
        };
        let (status, body) = tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| EtcdError::Unreachable(format!("{host}: {path} timed out")))?
            .map_err(|e| EtcdError::Unreachable(format!("{host}: {e}")))?;
        let v: Value = serde_json::from_slice(&body)
            .map_err(|e| EtcdError::Server(format!("{path}: invalid answer ({e})")))?;
        if status != StatusCode::OK {
            let msg = v
                .get("message")
                .or_else(|| v.get("error"))
                .and_then(Value::as_str)
                .unwrap_or("");
            return Err(EtcdError::Server(format!("{path}: {status} {msg}")));
        }
        Ok(v)
    }

    /// A linearizable read of one key (`key`, whether it exists or not): it succeeds only
    /// where a member answers with a quorum behind it. Returns the store's revision.
    pub async fn probe(&self, key: &str) -> Result<i64, EtcdError> {
        let v = self
            .call(
                "/v3/kv/range",
                json!({"key": b64(key.as_bytes()), "keys_only": true, "limit": "1"}),
            )
            .await?;
        Ok(num(&v["header"]["revision"]))
    }

    /// Every key under `prefix`, and the store's revision.
    pub async fn range_prefix(&self, prefix: &str) -> Result<(i64, Vec<Kv>), EtcdError> {
        let v = self
            .call(
                "/v3/kv/range",
                json!({"key": b64(prefix.as_bytes()), "range_end": b64(&prefix_end(prefix))}),
            )
            .await?;
        Ok(range_of(&v))
    }

    /// Writes `key` (or deletes it, when `value` is None) and touches `guard`, only if
    /// `guard` was last changed at `guard_revision` (0: never written). Every Sluice write goes
    /// through the same guard key, so two writers cannot both succeed from the same view.
    pub async fn write_guarded(
        &self,
        guard: &str,
        guard_revision: i64,
        key: &str,
        value: Option<&[u8]>,
    ) -> Result<Written, EtcdError> {
        self.write_guarded_with(guard, guard_revision, key, value, &[])
            .await
    }

    /// As [`Etcd::write_guarded`], deleting in the same transaction every key under each of
    /// `delete_prefixes` (a consumer's credentials stored under it, APISIX's way).
    pub async fn write_guarded_with(
        &self,
        guard: &str,
        guard_revision: i64,
        key: &str,
        value: Option<&[u8]>,
        delete_prefixes: &[String],
    ) -> Result<Written, EtcdError> {
        self.write_guarded_ops(guard, guard_revision, &[(key, value)], delete_prefixes, key)
            .await
    }

    /// Like [`Etcd::write_guarded_with`], several keys at once (each put, or deleted with
    /// `None`); the guard then names `main`.
    pub async fn write_guarded_ops(
        &self,
        guard: &str,
        guard_revision: i64,
        ops: &[(&str, Option<&[u8]>)],
        delete_prefixes: &[String],
        main: &str,
    ) -> Result<Written, EtcdError> {
        let mut success: Vec<Value> = ops
            .iter()
            .map(|(key, value)| match value {
                Some(v) => json!({"request_put": {"key": b64(key.as_bytes()), "value": b64(v)}}),
                None => json!({"request_delete_range": {"key": b64(key.as_bytes())}}),
            })
            .collect();
        for p in delete_prefixes {
            success.push(json!({"request_delete_range": {
                "key": b64(p.as_bytes()),
                "range_end": b64(&prefix_end(p)),
            }}));
        }
        success.push(
            json!({"request_put": {"key": b64(guard.as_bytes()), "value": b64(main.as_bytes())}}),
        );
        let body = json!({
            "compare": [{"key": b64(guard.as_bytes()), "target": "MOD", "result": "EQUAL", "mod_revision": guard_revision.to_string()}],
            "success": success,
        });
        let v = self.call("/v3/kv/txn", body).await?;
        if v.get("succeeded").and_then(Value::as_bool) == Some(true) {
            Ok(Written::At(num(&v["header"]["revision"])))
        } else {
            Ok(Written::Conflict)
        }
    }

    /// Watches keys under `prefix` from `revision` on, calling `on_events` with each batch
    /// and its revision. Returns only on an error (the connection lost, a compaction).
    pub async fn watch(
        &self,
        prefix: &str,
        revision: i64,
        mut on_events: impl FnMut(i64, Vec<Event>),
    ) -> EtcdError {
        let token = match self.token(false).await {
            Ok(t) => t,
            Err(e) => return e,
        };
        let (mut send, host) = match self.connect().await {
            Ok(c) => c,
            Err(e) => return e,
        };
        let body = json!({"create_request": {
            "key": b64(prefix.as_bytes()),
            "range_end": b64(&prefix_end(prefix)),
            "start_revision": revision.to_string(),
            "progress_notify": true,
        }});
        let mut req = Request::post("/v3/watch")
            .header("host", &host)
            .header("content-type", "application/json");
        if let Some(t) = &token {
            req = req.header("authorization", t.as_str());
        }
        let req = match req.body(Full::new(Bytes::from(body.to_string()))) {
            Ok(r) => r,
            Err(e) => return EtcdError::Server(e.to_string()),
        };
        let resp = match tokio::time::timeout(self.timeout, send.send_request(req)).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return EtcdError::Unreachable(format!("{host}: {e}")),
            Err(_) => return EtcdError::Unreachable(format!("{host}: watch timed out")),
        };
        let mut body = resp.into_body();
        let mut buf: Vec<u8> = Vec::new();
        loop {
            let frame = match body.frame().await {
                Some(Ok(f)) => f,
                Some(Err(e)) => return EtcdError::Unreachable(format!("{host}: watch: {e}")),
                None => return EtcdError::Unreachable(format!("{host}: watch stream ended")),
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            buf.extend_from_slice(&data);
            // The gateway writes one JSON object per line.
            while let Some(end) = buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = buf.drain(..=end).collect();
                let Ok(v) = serde_json::from_slice::<Value>(&line) else {
                    continue;
                };
                let Some(result) = v.get("result") else {
                    if let Some(e) = v.get("error") {
                        let e = e.to_string();
                        if token_refused(&e) {
                            // The next attempt authenticates again.
                            *self.token.lock() = None;
                        }
                        return EtcdError::Server(format!("watch: {e}"));
                    }
                    continue;
                };
                let compacted = num(result.get("compact_revision").unwrap_or(&Value::Null));
                if compacted > 0 {
                    return EtcdError::Compacted(compacted);
                }
                if result.get("canceled").and_then(Value::as_bool) == Some(true) {
                    return EtcdError::Server(format!("watch canceled: {result}"));
                }
                let events = events_of(result);
                let revision = num(&result["header"]["revision"]);
                if !events.is_empty() {
                    let last = events
                        .iter()
                        .map(|e| match e {
                            Event::Put(kv) | Event::Delete(kv) => kv.mod_revision,
                        })
                        .max()
                        .unwrap_or(revision);
                    on_events(last, events);
                }
            }
        }
    }
}

/// Whether etcd refused the call for its token (expired, revoked, or none given).
fn token_refused(msg: &str) -> bool {
    msg.contains("invalid auth token")
        || msg.contains("user name is empty")
        || msg.contains("auth token")
        || msg.contains("401")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_ranges_end_after_every_key_with_the_prefix() {
        assert_eq!(prefix_end("/sluice/"), b"/sluice0".to_vec());
        assert_eq!(prefix_end("a\u{7f}"), b"a\x80".to_vec());
        assert_eq!(prefix_end(""), vec![0]);
    }

    #[test]
    fn endpoints_must_be_http_urls() {
        assert!(Etcd::new(&["http://127.0.0.1:2379".into()], Duration::from_secs(1)).is_ok());
        let e = Etcd::new(&["127.0.0.1:2379".into()], Duration::from_secs(1)).unwrap_err();
        assert!(
            e.contains("expected http://host:port or https://host:port"),
            "{e}"
        );
    }
}
