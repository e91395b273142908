//! hyper-baseline LISTEN ORIGIN: one thread, one current-thread runtime; hyper's HTTP/1.1
//! server in front, hyper-util's pooled client behind, bodies streamed, the same forwarded
//! headers as Sluice adds.
use std::convert::Infallible;
use std::net::SocketAddr;

use hyper::body::Incoming;
use hyper::header::{HeaderValue, HOST};
use hyper::{Request, Response};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};

fn main() {
    let mut args = std::env::args().skip(1);
    let listen: SocketAddr = args.next().expect("listen address").parse().unwrap();
    let origin: String = args.next().expect("origin address");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(listen).await.unwrap();
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client: Client<HttpConnector, Incoming> =
            Client::builder(TokioExecutor::new()).pool_max_idle_per_host(320).build(connector);
        loop {
            let (io, peer) = listener.accept().await.unwrap();
            io.set_nodelay(true).unwrap();
            let client = client.clone();
            let origin = origin.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |mut req: Request<Incoming>| {
                    let client = client.clone();
                    let origin = origin.clone();
                    async move {
                        let path = req.uri().path_and_query().map_or("/", |p| p.as_str()).to_owned();
                        *req.uri_mut() = format!("http://{origin}{path}").parse().unwrap();
                        let host = req.headers().get(HOST).cloned();
                        let ip = HeaderValue::from_str(&peer.ip().to_string()).unwrap();
                        let h = req.headers_mut();
                        h.insert("x-forwarded-for", ip.clone());
                        h.insert("x-real-ip", ip);
                        h.insert("x-forwarded-proto", HeaderValue::from_static("http"));
                        if let Some(host) = host {
                            h.insert("x-forwarded-host", host);
                        }
                        let resp = match client.request(req).await {
                            Ok(r) => r.map(http_body_util::Either::Left),
                            Err(_) => Response::builder()
                                .status(502)
                                .body(http_body_util::Either::Right(http_body_util::Empty::<bytes::Bytes>::new()))
                                .unwrap(),
                        };
                        Ok::<_, Infallible>(resp)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(io), svc).await;
            });
        }
    });
}
