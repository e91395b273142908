use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http_body_util::{BodyExt, Either, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response};
use parking_lot::Mutex;
use tokio::net::TcpListener;

/// What an origin received: one request, fully read.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    /// Path and query, as received.
    pub uri: String,
    pub version: hyper::Version,
    /// Header fields in order, names lowercased by hyper.
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}

impl Recorded {
    /// The first value of a header.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every value of a header.
    pub fn header_all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    pub fn has_header(&self, name: &str) -> bool {
        self.header(name).is_some()
    }
}

/// A response an origin sends.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    /// Send the body with chunked encoding, in these pieces (the body is ignored).
    pub chunks: Option<Vec<Bytes>>,
}

impl Reply {
    pub fn ok(body: impl Into<Bytes>) -> Reply {
        Reply {
            status: 200,
            headers: Vec::new(),
            body: body.into(),
            chunks: None,
        }
    }

    pub fn status(status: u16) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: Bytes::new(),
            chunks: None,
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    pub fn body(mut self, body: impl Into<Bytes>) -> Reply {
        self.body = body.into();
        self
    }

    pub fn chunked(mut self, chunks: &[&str]) -> Reply {
        self.chunks = Some(
            chunks
                .iter()
                .map(|c| Bytes::copy_from_slice(c.as_bytes()))
                .collect(),
        );
        self
    }
}

/// Computes a reply from the recorded request.
pub type Handler = Arc<dyn Fn(&Recorded) -> Reply + Send + Sync>;

/// A real HTTP/1.1 origin (hyper) on `127.0.0.1:0`. Records every request it receives and
/// counts the connections it accepted.
#[derive(Clone)]
pub struct TestOrigin {
    pub addr: SocketAddr,
    recorded: Arc<Mutex<Vec<Recorded>>>,
    connections: Arc<AtomicUsize>,
    task: Arc<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for TestOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestOrigin")
            .field("addr", &self.addr)
            .finish()
    }
}

/// Builds a [`TestOrigin`].
#[allow(missing_debug_implementations)]
pub struct Builder {
    name: String,
    routes: Vec<(String, Handler)>,
    http2: bool,
}

impl TestOrigin {
    pub fn http1() -> Builder {
        Builder {
            name: "origin".into(),
            routes: Vec::new(),
            http2: false,
        }
    }

    /// An origin that speaks HTTP/2 only (prior knowledge, cleartext).
    pub fn http2() -> Builder {
        Builder {
            http2: true,
            ..TestOrigin::http1()
        }
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.recorded.lock().clone()
    }

    /// The last request received.
    pub fn last(&self) -> Recorded {
        self.recorded
            .lock()
            .last()
            .cloned()
            .expect("the origin received a request")
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// `"127.0.0.1:port"`, for YAML.
    pub fn node(&self) -> String {
        self.addr.to_string()
    }

    /// Stops accepting (connections already open keep working until they close).
    pub fn stop(&self) {
        self.task.abort();
    }
}

impl Builder {
    /// Names the origin: every reply carries `x-origin: name`, and unrouted paths answer it.
    pub fn name(mut self, name: &str) -> Builder {
        self.name = name.to_owned();
        self
    }

    /// Answers requests whose path starts with `prefix` with `body`.
    pub fn route(self, prefix: &str, body: &'static str) -> Builder {
        self.handler(prefix, move |_| Reply::ok(body))
    }

    /// Answers requests whose path starts with `prefix` with what `f` returns.
    pub fn handler(
        mut self,
        prefix: &str,
        f: impl Fn(&Recorded) -> Reply + Send + Sync + 'static,
    ) -> Builder {
        self.routes.push((prefix.to_owned(), Arc::new(f)));
        self
    }

    pub async fn run(self) -> TestOrigin {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a test origin");
        let addr = listener.local_addr().unwrap();
        let recorded = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(AtomicUsize::new(0));
        let routes = Arc::new(self.routes);
        let name = Arc::new(self.name);
        let http2 = self.http2;
        let (rec, conns) = (recorded.clone(), connections.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((io, _)) = listener.accept().await else {
                    return;
                };
                conns.fetch_add(1, Ordering::SeqCst);
                let (rec, routes, name) = (rec.clone(), routes.clone(), name.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |req: Request<Incoming>| {
                        let (rec, routes, name) = (rec.clone(), routes.clone(), name.clone());
                        async move { Ok::<_, Infallible>(handle(req, &rec, &routes, &name).await) }
                    });
                    let io = hyper_util::rt::TokioIo::new(io);
                    if http2 {
                        let _ = hyper::server::conn::http2::Builder::new(
                            hyper_util::rt::TokioExecutor::new(),
                        )
                        .serve_connection(io, svc)
                        .await;
                    } else {
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(io, svc)
                            .await;
                    }
                });
            }
        });
        TestOrigin {
            addr,
            recorded,
            connections,
            task: Arc::new(task),
        }
    }
}

type Body = Either<
    Full<Bytes>,
    StreamBody<futures_util::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>>>,
>;

async fn handle(
    req: Request<Incoming>,
    rec: &Mutex<Vec<Recorded>>,
    routes: &[(String, Handler)],
    name: &str,
) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let r = Recorded {
        method: parts.method.to_string(),
        uri: parts.uri.to_string(),
        version: parts.version,
        headers: parts
            .headers
            .iter()
            .map(|(n, v)| {
                (
                    n.to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body,
    };
    rec.lock().push(r.clone());
    let path = parts.uri.path();
    let reply = routes
        .iter()
        .find(|(prefix, _)| path.starts_with(prefix.as_str()))
        .map(|(_, h)| h(&r))
        .unwrap_or_else(|| Reply::ok(name.to_owned()));
    let mut resp = Response::builder()
        .status(reply.status)
        .header("x-origin", name);
    for (n, v) in &reply.headers {
        resp = resp.header(n, v);
    }
    let body = match reply.chunks {
        Some(chunks) => {
            let frames: Vec<Result<Frame<Bytes>, Infallible>> =
                chunks.into_iter().map(|c| Ok(Frame::data(c))).collect();
            Either::Right(StreamBody::new(futures_util::stream::iter(frames)))
        }
        None => Either::Left(Full::new(reply.body)),
    };
    resp.body(body).unwrap()
}

/// A raw TCP origin for responses no well-behaved server would send: on each connection it
/// reads once (the request), writes `response` verbatim, waits 20 ms and closes, without
/// announcing the close.
pub async fn canned_origin(response: &'static [u8]) -> SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a canned origin");
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut b = [0u8; 4096];
                let _ = s.read(&mut b).await;
                let _ = s.write_all(response).await;
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            });
        }
    });
    addr
}
