use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request, StatusCode};
use tokio::net::TcpStream;

/// A minimal HTTP/1.1 client (hyper) bound to one address. Each request opens its own
/// connection unless sent through [`Client::connection`].
#[derive(Debug, Clone)]
pub struct Client {
    addr: SocketAddr,
}

/// A fully read response.
#[derive(Debug)]
pub struct TestResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl TestResponse {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// A keep-alive connection: requests go one after another on the same socket.
pub struct Connection {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    host: String,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("host", &self.host)
            .finish()
    }
}

impl Client {
    pub fn new(addr: SocketAddr) -> Self {
        Client { addr }
    }

    pub async fn get(&self, path: &str) -> TestResponse {
        self.send(Method::GET, path, &[], Bytes::new()).await
    }

    pub async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> TestResponse {
        let mut c = self.connection().await;
        c.send(method, path, headers, body)
            .await
            .expect("request failed")
    }

    pub async fn connection(&self) -> Connection {
        let io = TcpStream::connect(self.addr)
            .await
            .expect("connect to the gateway");
        let (sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io))
                .await
                .expect("handshake");
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Connection {
            sender,
            host: self.addr.to_string(),
        }
    }
}

impl Connection {
    pub async fn get(&mut self, path: &str) -> Result<TestResponse, hyper::Error> {
        self.send(Method::GET, path, &[], Bytes::new()).await
    }

    /// Sends a request; a `host` header in `headers` replaces the default one.
    pub async fn send(
        &mut self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> Result<TestResponse, hyper::Error> {
        let mut req = Request::builder().method(method).uri(path);
        if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
            req = req.header("host", &self.host);
        }
        let mut req = req.body(Full::new(body.into())).unwrap();
        for (n, v) in headers {
            req.headers_mut().append(
                HeaderName::from_bytes(n.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        self.sender.ready().await?;
        let resp = self.sender.send_request(req).await?;
        let (parts, body) = resp.into_parts();
        let body = body.collect().await?.to_bytes();
        Ok(TestResponse {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    }
}
