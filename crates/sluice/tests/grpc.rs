//! gRPC through Sluice, end to end: a tonic server behind a route with `scheme: grpc`, a
//! tonic client in front, over HTTP/2 cleartext. Unary and bidirectional streaming calls,
//! trailers (`grpc-status` after messages), deadlines, plugins, and an unreachable node.

#![allow(clippy::unwrap_used)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use sluice_testkit::Gateway;
use tokio_stream::StreamExt;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::codegen::{BoxFuture, Service, http};
use tonic::server::{Grpc as GrpcServer, NamedService, StreamingService, UnaryService};
use tonic::{Code, Request, Response, Status, Streaming};
use tonic_prost::ProstCodec;

/// The test service's one message type.
#[derive(Clone, PartialEq, prost::Message)]
struct Msg {
    #[prost(string, tag = "1")]
    text: String,
}

fn msg(text: &str) -> Msg {
    Msg {
        text: text.to_owned(),
    }
}

/// `Echo` answers unary calls, echoes streams (ending them with ABORTED after the messages, so
/// the status travels in trailers), and has a slow method for deadlines.
#[derive(Clone)]
struct Echo;

impl NamedService for Echo {
    const NAME: &'static str = "test.Echo";
}

struct Unary;
impl UnaryService<Msg> for Unary {
    type Response = Msg;
    type Future = BoxFuture<Response<Msg>, Status>;
    fn call(&mut self, r: Request<Msg>) -> Self::Future {
        // "meta": answers with the metadata the call arrived with.
        let meta = |name: &str| {
            r.metadata()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("-")
                .to_owned()
        };
        let seen = format!(
            "apikey={} x-route={} xff={}",
            meta("apikey"),
            meta("x-route"),
            meta("x-forwarded-for")
        );
        let text = r.into_inner().text;
        Box::pin(async move {
            match text.as_str() {
                "slow" => {
                    tokio::time::sleep(Duration::from_secs(3)).await;
                    Ok(Response::new(msg("too late")))
                }
                "fail" => Err(Status::not_found("no such thing")),
                "meta" => Ok(Response::new(msg(&seen))),
                _ => Ok(Response::new(msg(&format!("echo: {text}")))),
            }
        })
    }
}

struct Bidi;
impl StreamingService<Msg> for Bidi {
    type Response = Msg;
    type ResponseStream =
        std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<Msg, Status>> + Send>>;
    type Future = BoxFuture<Response<Self::ResponseStream>, Status>;
    fn call(&mut self, r: Request<Streaming<Msg>>) -> Self::Future {
        let mut input = r.into_inner();
        Box::pin(async move {
            let out = async_stream(move |tx| async move {
                while let Ok(Some(m)) = input.message().await {
                    if tx.send(Ok(msg(&format!("got {}", m.text)))).await.is_err() {
                        return;
                    }
                }
                let _ = tx.send(Err(Status::aborted("stream over"))).await;
            });
            Ok(Response::new(out))
        })
    }
}

/// A stream fed by a task.
fn async_stream<F, Fut>(
    f: F,
) -> std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<Msg, Status>> + Send>>
where
    F: FnOnce(tokio::sync::mpsc::Sender<Result<Msg, Status>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    tokio::spawn(f(tx));
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}

impl Service<http::Request<tonic::body::Body>> for Echo {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        Box::pin(async move {
            let mut g = GrpcServer::new(ProstCodec::<Msg, Msg>::default());
            Ok(match req.uri().path() {
                "/test.Echo/Unary" => g.unary(Unary, req).await,
                "/test.Echo/Bidi" => g.streaming(Bidi, req).await,
                _ => Status::unimplemented("no such method").into_http(),
            })
        })
    }
}

async fn grpc_server() -> SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(Echo)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(l)),
    );
    addr
}

async fn client(addr: SocketAddr) -> tonic::client::Grpc<tonic::transport::Channel> {
    let ch = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    tonic::client::Grpc::new(ch)
}

async fn unary(
    c: &mut tonic::client::Grpc<tonic::transport::Channel>,
    req: Request<Msg>,
) -> Result<Msg, Status> {
    c.ready().await.unwrap();
    c.unary(
        req,
        PathAndQuery::from_static("/test.Echo/Unary"),
        ProstCodec::<Msg, Msg>::default(),
    )
    .await
    .map(Response::into_inner)
}

fn gateway(upstream: &str, plugins: &str) -> Gateway {
    Gateway::start(&format!(
        "listen: [{{addr: 127.0.0.1:0, http2: true}}]\nworkers: 1\nroutes:\n  - uri: /test.Echo/*\n    upstream: {{scheme: grpc, nodes: {{\"{upstream}\": 1}}}}\n{plugins}consumers:\n  - {{username: app, plugins: {{key-auth: {{key: app-key}}}}}}\n"
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unary_and_streaming_calls_pass_with_their_trailers() {
    let server = grpc_server().await;
    let gw = gateway(&server.to_string(), "");
    let mut c = client(gw.addr()).await;
    assert_eq!(
        unary(&mut c, Request::new(msg("hi"))).await.unwrap().text,
        "echo: hi"
    );
    // An error status from the server reaches the client as it was.
    let e = unary(&mut c, Request::new(msg("fail"))).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    assert_eq!(e.message(), "no such thing");

    // Bidirectional streaming: three messages up, three down, then the status in trailers.
    c.ready().await.unwrap();
    let up = tokio_stream::iter(vec![msg("a"), msg("b"), msg("c")]);
    let mut down = c
        .streaming(
            Request::new(up),
            PathAndQuery::from_static("/test.Echo/Bidi"),
            ProstCodec::<Msg, Msg>::default(),
        )
        .await
        .unwrap()
        .into_inner();
    let mut got = Vec::new();
    let status = loop {
        match down.next().await {
            Some(Ok(m)) => got.push(m.text),
            Some(Err(s)) => break s,
            None => panic!("the stream ended without its status"),
        }
    };
    assert_eq!(got, vec!["got a", "got b", "got c"]);
    assert_eq!(status.code(), Code::Aborted);
    assert_eq!(status.message(), "stream over");

    // Many calls share the worker's one connection to the node.
    for i in 0..50 {
        let m = unary(&mut c, Request::new(msg(&i.to_string())))
            .await
            .unwrap();
        assert_eq!(m.text, format!("echo: {i}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadlines_plugins_and_unreachable_nodes() {
    let server = grpc_server().await;
    let gw = gateway(
        &server.to_string(),
        "    plugins: {key-auth: {header: apikey}}\n",
    );
    let mut c = client(gw.addr()).await;
    // key-auth answers 401: the client sees UNAUTHENTICATED.
    let e = unary(&mut c, Request::new(msg("hi"))).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    let with_key = |m: Msg| {
        let mut r = Request::new(m);
        r.metadata_mut()
            .insert("apikey", "app-key".parse().unwrap());
        r
    };
    assert_eq!(
        unary(&mut c, with_key(msg("hi"))).await.unwrap().text,
        "echo: hi"
    );
    // The client's deadline (grpc-timeout) is enforced by the gateway: a node that never
    // answers, and a raw HTTP/2 client (tonic's client and server both enforce deadlines too,
    // which would hide who ended the call).
    let silent = silent_h2_server().await;
    let gw2 = gateway(&silent.to_string(), "");
    let started = std::time::Instant::now();
    let status = raw_call(gw2.addr(), "hi", "200m").await;
    assert_eq!(
        status.as_deref(),
        Some("4"),
        "DEADLINE_EXCEEDED from the gateway"
    );
    assert!(started.elapsed() < Duration::from_secs(2));

    // A node nobody listens on: UNAVAILABLE.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let gw = gateway(&dead.to_string(), "");
    let mut c = client(gw.addr()).await;
    let e = unary(&mut c, Request::new(msg("hi"))).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    // Over HTTP/1.1, a gRPC route answers 502.
    let r = gw.client().get("/test.Echo/Unary").await;
    assert_eq!(r.status, 502);
}

/// A unary call to /test.Echo/Unary over a bare HTTP/2 connection with `grpc-timeout`;
/// returns the `grpc-status` the client received (headers or trailers).
async fn raw_call(addr: SocketAddr, text: &str, timeout: &str) -> Option<String> {
    use prost::Message;
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    let mut client = client.ready().await.unwrap();
    let req = http::Request::builder()
        .method("POST")
        .uri(format!("http://{addr}/test.Echo/Unary"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("apikey", "app-key")
        .header("grpc-timeout", timeout)
        .body(())
        .unwrap();
    let (resp, mut body) = client.send_request(req, false).unwrap();
    let payload = msg(text).encode_to_vec();
    let mut frame = vec![0u8];
    frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    frame.extend_from_slice(&payload);
    body.send_data(frame.into(), true).unwrap();
    let resp = resp.await.unwrap();
    let in_headers = resp
        .headers()
        .get("grpc-status")
        .map(|v| v.to_str().unwrap().to_owned());
    if in_headers.is_some() {
        return in_headers;
    }
    let mut rbody = resp.into_body();
    while let Some(chunk) = rbody.data().await {
        let _ = chunk.unwrap();
    }
    rbody
        .trailers()
        .await
        .unwrap()
        .and_then(|t| t.get("grpc-status").map(|v| v.to_str().unwrap().to_owned()))
}

/// An HTTP/2 server that accepts every stream and never answers.
async fn silent_h2_server() -> SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            tokio::spawn(async move {
                let Ok(mut conn) = h2::server::handshake(s).await else {
                    return;
                };
                let mut held = Vec::new();
                while let Some(Ok(stream)) = conn.accept().await {
                    held.push(stream);
                }
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_edits_to_the_request_reach_the_grpc_server() {
    let server = grpc_server().await;
    let gw = gateway(
        &server.to_string(),
        "    plugins:\n      key-auth: {header: apikey, hide_credentials: true}\n      proxy-rewrite: {headers: {set: {x-route: grpc-route}}}\n",
    );
    let mut c = client(gw.addr()).await;
    let mut r = Request::new(msg("meta"));
    r.metadata_mut()
        .insert("apikey", "app-key".parse().unwrap());
    let seen = unary(&mut c, r).await.unwrap().text;
    // The key was checked and then hidden; the rewrite's field and the forwarded fields are
    // there; and the call still worked (te: trailers kept).
    assert_eq!(seen, "apikey=- x-route=grpc-route xff=127.0.0.1");
}

/// `real-ip` on a gRPC route, and the node-wide `real_ip`: the node is told the real address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_calls_carry_the_real_client_address() {
    let server = grpc_server().await;
    let call = |addr: SocketAddr, header: &'static str, value: &'static str| async move {
        let mut c = client(addr).await;
        let mut r = Request::new(msg("meta"));
        r.metadata_mut().insert(header, value.parse().unwrap());
        unary(&mut c, r).await.unwrap().text
    };
    let gw = gateway(
        &server.to_string(),
        "    plugins:\n      real-ip: {source: http_x_real_ip, trusted_addresses: [127.0.0.1]}\n",
    );
    assert_eq!(
        call(gw.addr(), "x-real-ip", "9.9.9.9").await,
        "apikey=- x-route=- xff=9.9.9.9"
    );
    let node_wide = Gateway::start(&format!(
        "listen: [{{addr: 127.0.0.1:0, http2: true}}]\nworkers: 1\nreal_ip: {{header: X-Forwarded-For, from: [127.0.0.1]}}\nroutes:\n  - uri: /test.Echo/*\n    upstream: {{scheme: grpc, nodes: {{\"{server}\": 1}}}}\n"
    ));
    assert_eq!(
        call(node_wide.addr(), "x-forwarded-for", "8.8.8.8").await,
        "apikey=- x-route=- xff=8.8.8.8, 8.8.8.8"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_plugins_and_the_access_log_see_grpc_calls() {
    let server = grpc_server().await;
    let dir = std::env::temp_dir().join(format!("sluice-grpc-log-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let access = dir.join("access.log");
    let gw = Gateway::start(&format!(
        "listen: [{{addr: 127.0.0.1:0, http2: true}}]\nworkers: 1\nlog: {{access: {{path: \"{}\"}}}}\nroutes:\n  - id: echo\n    uri: /test.Echo/*\n    upstream: {{scheme: grpc, nodes: {{\"{server}\": 1}}}}\n    plugins:\n      key-auth: {{header: apikey}}\n      limit-count: {{count: 100, time_window: 60}}\n      response-rewrite: {{headers: {{set: {{x-edited: \"yes\"}}}}}}\nconsumers:\n  - {{username: app, plugins: {{key-auth: {{key: app-key}}}}}}\n",
        access.display()
    ));
    let mut c = client(gw.addr()).await;
    // The node's answer carries the header filters' edits.
    let mut req = Request::new(msg("hi"));
    req.metadata_mut()
        .insert("apikey", "app-key".parse().unwrap());
    c.ready().await.unwrap();
    let resp = c
        .unary(
            req,
            PathAndQuery::from_static("/test.Echo/Unary"),
            ProstCodec::<Msg, Msg>::default(),
        )
        .await
        .unwrap();
    let meta = resp.metadata().clone();
    assert_eq!(resp.into_inner().text, "echo: hi");
    assert_eq!(meta.get("x-edited").unwrap(), "yes");
    assert_eq!(meta.get("x-ratelimit-limit").unwrap(), "100");
    assert_eq!(meta.get("x-ratelimit-remaining").unwrap(), "99");
    // So does the gateway's own answer (key-auth's refusal).
    let e = unary(&mut c, Request::new(msg("hi"))).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated);
    assert_eq!(e.metadata().get("x-edited").unwrap(), "yes");

    gw.shutdown();
    let log = std::fs::read_to_string(&access).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 2, "{log}");
    assert!(
        lines[0].contains("\"POST /test.Echo/Unary HTTP/2.0\" 200 ") && lines[0].contains(" echo "),
        "{log}"
    );
    assert!(lines[0].contains(&server.to_string()), "the node: {log}");
    assert!(
        lines[1].contains("\"POST /test.Echo/Unary HTTP/2.0\" 401 "),
        "{log}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A gRPC shadow: an HTTP/2 server that records each call (its path and message bytes) and
/// answers it with status 0.
async fn recording_h2_server() -> (SocketAddr, Arc<parking_lot::Mutex<Vec<(String, Vec<u8>)>>>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let record = seen.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let record = record.clone();
            tokio::spawn(async move {
                let Ok(mut conn) = h2::server::handshake(s).await else {
                    return;
                };
                while let Some(Ok((req, mut respond))) = conn.accept().await {
                    let record = record.clone();
                    tokio::spawn(async move {
                        let path = req.uri().path().to_owned();
                        let mut body = req.into_body();
                        let mut bytes = Vec::new();
                        while let Some(Ok(chunk)) = body.data().await {
                            let _ = body.flow_control().release_capacity(chunk.len());
                            bytes.extend_from_slice(&chunk);
                        }
                        record.lock().push((path, bytes));
                        let head = http::Response::builder()
                            .status(200)
                            .header("content-type", "application/grpc")
                            .body(())
                            .unwrap();
                        if let Ok(mut s) = respond.send_response(head, false) {
                            let mut t = http::HeaderMap::new();
                            t.insert("grpc-status", "0".parse().unwrap());
                            let _ = s.send_trailers(t);
                        }
                    });
                }
            });
        }
    });
    (addr, seen)
}

/// proxy-mirror with a `grpc://` shadow: each call goes to the node as usual, and a copy (its
/// messages, after the route's plugins) to the shadow, which cannot slow or fail the call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_mirror_copies_grpc_calls_to_a_grpc_shadow() {
    let server = grpc_server().await;
    let (shadow, seen) = recording_h2_server().await;
    let gw = gateway(
        &server.to_string(),
        &format!("    plugins:\n      proxy-mirror: {{host: \"grpc://{shadow}\"}}\n"),
    );
    let mut c = client(gw.addr()).await;
    assert_eq!(
        unary(&mut c, Request::new(msg("hello")))
            .await
            .unwrap()
            .text,
        "echo: hello"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        if !seen.lock().is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the shadow saw no call"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (path, bytes) = seen.lock()[0].clone();
    assert_eq!(path, "/test.Echo/Unary");
    // One length-prefixed message whose payload holds the text.
    assert_eq!(bytes[0], 0, "uncompressed");
    assert!(bytes.windows(5).any(|w| w == b"hello"), "{bytes:?}");
    // A shadow that is gone costs the call nothing.
    drop(seen);
    let gone = gateway(
        &server.to_string(),
        "    plugins:\n      proxy-mirror: {host: \"grpc://127.0.0.1:1\"}\n",
    );
    let mut c = client(gone.addr()).await;
    assert_eq!(
        unary(&mut c, Request::new(msg("still")))
            .await
            .unwrap()
            .text,
        "echo: still"
    );
}
