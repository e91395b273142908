//! proxy-mirror's copy of a gRPC call (`host: grpc://...` or `grpcs://`): its head as it went to
//! the node, its messages and trailers, filled as the call goes up and sent over HTTP/2 on a
//! task of its own once the call ended. It can neither delay nor fail the call; a call whose
//! messages pass 1 MiB is not mirrored.

use std::sync::Arc;

use bytes::Bytes;
use http::HeaderMap;
use tracing::debug;

use crate::upstream::Upstream;
use crate::worker::Worker;

/// Most message bytes copied; a larger call is not mirrored.
const MAX: usize = 1 << 20;

/// A call's copy for a gRPC shadow.
pub(crate) struct GrpcMirror {
    upstream: Arc<Upstream>,
    /// Another path for the copy (`path`), else the call's.
    target: Option<Vec<u8>>,
    head: Option<(http::Method, String, HeaderMap)>,
    body: Vec<Bytes>,
    size: usize,
    trailers: Option<HeaderMap>,
    /// The call's request ended (its end of stream or trailers came), within [`MAX`].
    complete: bool,
    too_large: bool,
}

impl GrpcMirror {
    /// A copy for `upstream` when it speaks gRPC; None for an HTTP/1.1 shadow (a gRPC call is
    /// not an HTTP/1.1 request).
    pub(crate) fn new(upstream: Arc<Upstream>, target: Option<Vec<u8>>) -> Option<GrpcMirror> {
        if !upstream.grpc {
            debug!("proxy-mirror: an http(s):// shadow does not take gRPC calls; not mirrored");
            return None;
        }
        Some(GrpcMirror {
            upstream,
            target,
            head: None,
            body: Vec::new(),
            size: 0,
            trailers: None,
            complete: false,
            too_large: false,
        })
    }

    /// The head as it goes to the node.
    pub(crate) fn head(&mut self, req: &http::Request<()>) {
        let path = match &self.target {
            Some(t) => String::from_utf8_lossy(t).into_owned(),
            None => req
                .uri()
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .to_owned(),
        };
        self.head = Some((req.method().clone(), path, req.headers().clone()));
    }

    /// A piece of the call's messages.
    pub(crate) fn data(&mut self, chunk: &Bytes) {
        if self.too_large {
            return;
        }
        self.size += chunk.len();
        if self.size > MAX {
            self.too_large = true;
            self.body = Vec::new();
            return;
        }
        self.body.push(chunk.clone());
    }

    /// The call's request ended, with these trailers if any.
    pub(crate) fn end(&mut self, trailers: Option<HeaderMap>) {
        self.trailers = trailers;
        self.complete = true;
    }

    /// Sends the copy on its own task to the shadow's first node, bounded by its timeouts.
    pub(crate) fn send(self, w: std::rc::Rc<Worker>) {
        if !self.complete || self.too_large {
            return;
        }
        let Some((method, path, headers)) = self.head else {
            return;
        };
        let up = self.upstream;
        let Some(node) = up
            .nodes
            .iter()
            .position(|n| n.weight > 0)
            .or((!up.nodes.is_empty()).then_some(0))
        else {
            return;
        };
        let (addr, timeouts) = (up.nodes[node].addr, up.timeouts);
        let (body, trailers) = (self.body, self.trailers);
        tokio::task::spawn_local(async move {
            let exchange = async {
                let conn = crate::h2_up::sender(&w, &up, node)
                    .await
                    .map_err(|e| e.to_string())?;
                let authority = up.nodes[node].h2_authority().map_err(|e| e.to_string())?;
                let req = crate::h2_head::node_request(
                    up.tls.is_some(),
                    method,
                    authority,
                    path,
                    headers,
                )
                .map_err(|e| e.to_string())?;
                let mut send = conn.send.ready().await.map_err(|e| e.to_string())?;
                let end = body.is_empty() && trailers.is_none();
                let (answer, mut stream) =
                    send.send_request(req, end).map_err(|e| e.to_string())?;
                if !end {
                    for chunk in body {
                        crate::h2_wire::send(&mut stream, chunk, false)
                            .await
                            .map_err(|e| e.to_string())?;
                    }
                    match trailers {
                        Some(t) => stream.send_trailers(t).map_err(|e| e.to_string())?,
                        None => crate::h2_wire::send(&mut stream, Bytes::new(), true)
                            .await
                            .map_err(|e| e.to_string())?,
                    }
                }
                // The answer is read to its end, as a client would.
                let mut body = answer.await.map_err(|e| e.to_string())?.into_body();
                while let Some(chunk) = body.data().await {
                    let chunk = chunk.map_err(|e| e.to_string())?;
                    let _ = body.flow_control().release_capacity(chunk.len());
                }
                Ok::<_, String>(())
            };
            match tokio::time::timeout(timeouts.connect + timeouts.read, exchange).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => debug!(mirror = %addr, cause = %e, "gRPC mirror call failed"),
                Err(_) => debug!(mirror = %addr, "gRPC mirror call timed out"),
            }
        });
    }
}
