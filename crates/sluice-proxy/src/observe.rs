//! The one place every answered request passes, whatever carried it (HTTP/1.1, HTTP/2
//! bridged or on the fast path, gRPC) and whoever answered (a node, a plugin, the gateway
//! itself, or the parser refusing a head): each path describes the exchange once, in an
//! [`Exchange`], and [`Worker::finish`] counts it in the worker's metrics and writes its access
//! log line. Stream route sessions are counted by `stream.rs` through the same shard.

use std::net::SocketAddr;

use crate::access_log::{Entry, View};
use crate::metrics::{self, Proto};
use crate::snapshot::Route;
use crate::upstream::Upstream;
use crate::worker::Worker;

/// One request and its answer.
#[derive(Debug)]
pub(crate) struct Exchange<'a> {
    pub(crate) proto: Proto,
    pub(crate) request: View<'a>,
    /// 0: HTTP/1.0, 1: HTTP/1.1, 2: HTTP/2.
    pub(crate) version: u8,
    pub(crate) method: sluice_router::Method,
    pub(crate) client: Client<'a>,
    pub(crate) route: Option<&'a Route>,
    pub(crate) status: u16,
    pub(crate) bytes_in: u64,
    pub(crate) bytes_out: u64,
    /// From [`Worker::begin`] (monotonic nanoseconds).
    pub(crate) started: Option<u64>,
    /// The upstream tried, the node used, and its answer (status, time to its head).
    pub(crate) upstream: Option<(&'a Upstream, Option<usize>, metrics::Answer)>,
    pub(crate) consumer: Option<&'a sluice_core::Consumer>,
    /// What the request's context hands its log line (trace id, `request_id`, token payload).
    pub(crate) carried: sluice_core::ctx::Carried,
}

/// Who sent the request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Client<'a> {
    /// The address as text.
    pub(crate) ip: &'a [u8],
    pub(crate) peer: SocketAddr,
    /// The TCP peer, when a real address (`real-ip`, `real_ip`) stands in `ip` and `peer`.
    pub(crate) tcp: Option<&'a SocketAddr>,
    pub(crate) local: SocketAddr,
    pub(crate) https: bool,
    /// The verified client certificate's subject (mutual TLS).
    pub(crate) subject: Option<&'a str>,
}

/// An HTTP/2 request the gateway refused before anything else happened (a malformed head): its
/// protocol, view, method, client and route (if one was found).
#[derive(Debug)]
pub(crate) struct Refused<'a> {
    pub(crate) proto: Proto,
    pub(crate) request: View<'a>,
    pub(crate) method: sluice_router::Method,
    pub(crate) client: Client<'a>,
    pub(crate) route: Option<&'a Route>,
}

/// What the log phase is told of an answered request (`started`: from [`Worker::begin`]).
pub(crate) fn done(
    status: u16,
    bytes_sent: u64,
    bytes_received: u64,
    started: Option<u64>,
    upstream: metrics::Answer,
) -> sluice_core::plugin::Done {
    sluice_core::plugin::Done {
        status,
        bytes_sent,
        bytes_received,
        elapsed_ns: started.map(|t| metrics::now_ns().saturating_sub(t)),
        upstream,
    }
}

impl Worker {
    /// Counts and logs a refused HTTP/2 request as a 400 with no body.
    pub(crate) fn refused(&self, r: Refused<'_>, started: Option<u64>) {
        self.finish(&Exchange {
            proto: r.proto,
            request: r.request,
            version: 2,
            method: r.method,
            client: r.client,
            route: r.route,
            status: 400,
            bytes_in: 0,
            bytes_out: 0,
            started,
            upstream: None,
            consumer: None,
            carried: Default::default(),
        });
    }

    /// A request begins: counted in flight; the clock is read when anything will use it.
    #[inline]
    pub(crate) fn begin(&self) -> Option<u64> {
        if self.metrics.enabled() {
            self.metrics.shard.inflight.add(1);
        }
        (self.timed.get() || sluice_core::plugin::timing_wanted()).then(metrics::now_ns)
    }

    /// A request begun with [`Worker::begin`] is answered: counted, and logged.
    #[inline]
    pub(crate) fn finish(&self, x: &Exchange<'_>) {
        let elapsed_ns = x.started.map_or(0, |t| metrics::now_ns().saturating_sub(t));
        if self.metrics.enabled() {
            self.metrics.shard.inflight.add(-1);
            self.metrics.request(&metrics::Request {
                proto: x.proto,
                route: x.route.map(|r| (r.label().unwrap_or(&r.id), &r.metric)),
                method: x.method,
                status: x.status,
                elapsed_ns,
                bytes_in: x.bytes_in,
                bytes_out: x.bytes_out,
                upstream: x
                    .upstream
                    .map(|(u, _, answer)| (&*u.label, &u.metric, answer)),
            });
            if let Some(l) = x.carried.llm.as_deref() {
                self.metrics
                    .llm(x.route.map(|r| (r.label().unwrap_or(&r.id), &r.metric)), l);
            }
        }
        if let Some(log) = self.access_log.borrow_mut().as_mut() {
            log.record(&Entry {
                request: x.request,
                version: x.version,
                client: x.client.ip,
                peer: x.client.peer,
                tcp: x.client.tcp,
                local: x.client.local,
                https: x.client.https,
                status: x.status,
                bytes: x.bytes_out,
                bytes_in: x.bytes_in,
                elapsed_ns,
                route: x.route.map(|r| &*r.id),
                upstream: x
                    .upstream
                    .and_then(|(u, n, _)| Some(&*u.nodes.get(n?)?.authority)),
                answer: x.upstream.and_then(|(_, _, a)| a),
                consumer: x.consumer.map(|c| &*c.username),
                consumer_group: x.consumer.and_then(|c| c.group.as_deref()),
                names: x.route.map(|r| r.names()).unwrap_or_default(),
                carried: &x.carried,
                client_cert: x.client.subject,
            });
        }
    }
}
