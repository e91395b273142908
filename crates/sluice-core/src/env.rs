//! What a request's variables are read from besides the request itself ([`Env`]: the
//! connection, and once known the consumer, the route, the response), and a parsed request
//! in its context as the variable vocabulary reads it ([`Request`]).

use std::borrow::Cow;

use crate::body::RequestBody;
use crate::ctx::Ctx;
use crate::http::RequestHead;
use crate::plugin::Done;
use crate::vars::{Source, Var};

/// What variables are read from besides the request: the connection, and once known the
/// consumer and route. A plugin's [`Ctx`]; or, while the route is being chosen (route `vars`),
/// a [`ConnEnv`].
pub trait Env {
    /// The client's address.
    fn client(&self) -> std::net::SocketAddr;
    /// The TCP peer's address: the client's, unless a real address replaced it.
    fn peer(&self) -> std::net::SocketAddr {
        self.client()
    }
    /// The address the request arrived on.
    fn server(&self) -> std::net::SocketAddr;
    /// Whether the request came over TLS.
    fn is_https(&self) -> bool;
    /// The identified consumer's name.
    fn consumer_name(&self) -> Option<&str> {
        None
    }
    /// The matched route's id (empty while routing).
    fn route_id(&self) -> &str {
        ""
    }
    /// The matched route's service's id (empty without one, and while routing).
    fn service_id(&self) -> &str {
        ""
    }
    /// The identified consumer's group.
    fn consumer_group(&self) -> Option<&str> {
        None
    }
    /// The matched route's `name` and its service's (empty without, and while routing).
    fn route_names(&self) -> (&str, &str) {
        ("", "")
    }
    /// The request's `request_id` (none while routing: no request has its context yet).
    fn request_id(&self) -> Option<[u8; 16]> {
        None
    }
    /// The token payload `jwt-auth` kept (`store_in_ctx`).
    fn jwt_payload(&self) -> Option<&serde_json::Map<String, serde_json::Value>> {
        None
    }
    /// The subject of the client certificate verified by mutual TLS.
    fn client_cert_subject(&self) -> Option<&str> {
        None
    }
    /// The response's status, once there is a response (`status`).
    fn status(&self) -> Option<u16> {
        None
    }
    /// The node that answered, once it did (`balancer_ip`, `balancer_port`, `upstream_addr`).
    fn upstream_addr(&self) -> Option<std::net::SocketAddr> {
        None
    }
    /// The request's body, when it was read for conditions that need it (`post_arg_*`).
    fn body(&self) -> Option<&RequestBody> {
        None
    }
    /// How the answered request went, in the log phase (`body_bytes_sent`, `request_time`,
    /// `upstream_status`, ...).
    fn done(&self) -> Option<&Done> {
        None
    }
}

/// An environment with the response's status: conditions checked on a response (APISIX's
/// `status` in response-rewrite's `vars`), and in the log phase how the request went.
#[derive(Debug)]
pub struct Responded<'a, E: ?Sized> {
    /// The request's environment.
    pub env: &'a E,
    /// The response's status.
    pub status: u16,
    /// In the log phase: the rest of what is known of the answer.
    pub done: Option<&'a Done>,
}

impl<'a, E: ?Sized> Responded<'a, E> {
    /// The environment of the log phase.
    pub fn logged(env: &'a E, done: &'a Done) -> Self {
        Responded {
            env,
            status: done.status,
            done: Some(done),
        }
    }
}

impl<E: Env + ?Sized> Env for Responded<'_, E> {
    fn client(&self) -> std::net::SocketAddr {
        self.env.client()
    }
    fn peer(&self) -> std::net::SocketAddr {
        self.env.peer()
    }
    fn server(&self) -> std::net::SocketAddr {
        self.env.server()
    }
    fn is_https(&self) -> bool {
        self.env.is_https()
    }
    fn consumer_name(&self) -> Option<&str> {
        self.env.consumer_name()
    }
    fn route_id(&self) -> &str {
        self.env.route_id()
    }
    fn service_id(&self) -> &str {
        self.env.service_id()
    }
    fn consumer_group(&self) -> Option<&str> {
        self.env.consumer_group()
    }
    fn route_names(&self) -> (&str, &str) {
        self.env.route_names()
    }
    fn request_id(&self) -> Option<[u8; 16]> {
        self.env.request_id()
    }
    fn jwt_payload(&self) -> Option<&serde_json::Map<String, serde_json::Value>> {
        self.env.jwt_payload()
    }
    fn client_cert_subject(&self) -> Option<&str> {
        self.env.client_cert_subject()
    }
    fn status(&self) -> Option<u16> {
        Some(self.status)
    }
    fn upstream_addr(&self) -> Option<std::net::SocketAddr> {
        self.env.upstream_addr()
    }
    fn body(&self) -> Option<&RequestBody> {
        self.env.body()
    }
    fn done(&self) -> Option<&Done> {
        self.done
    }
}

impl Env for Ctx<'_> {
    fn client(&self) -> std::net::SocketAddr {
        Ctx::client(self)
    }
    fn peer(&self) -> std::net::SocketAddr {
        Ctx::peer(self)
    }
    fn server(&self) -> std::net::SocketAddr {
        Ctx::server(self)
    }
    fn is_https(&self) -> bool {
        Ctx::is_https(self)
    }
    fn consumer_name(&self) -> Option<&str> {
        Ctx::consumer_name(self)
    }
    fn route_id(&self) -> &str {
        Ctx::route_id(self)
    }
    fn service_id(&self) -> &str {
        Ctx::service_id(self)
    }
    fn consumer_group(&self) -> Option<&str> {
        self.consumer().and_then(|c| c.group.as_deref())
    }
    fn route_names(&self) -> (&str, &str) {
        let n = self.names();
        (n.name, n.service_name)
    }
    fn request_id(&self) -> Option<[u8; 16]> {
        Some(Ctx::request_id(self))
    }
    fn jwt_payload(&self) -> Option<&serde_json::Map<String, serde_json::Value>> {
        Ctx::jwt_payload(self)
    }
    fn client_cert_subject(&self) -> Option<&str> {
        Ctx::client_cert_subject(self)
    }
    fn upstream_addr(&self) -> Option<std::net::SocketAddr> {
        Ctx::upstream_addr(self)
    }
    fn body(&self) -> Option<&RequestBody> {
        Ctx::body(self)
    }
}

/// The connection a request came on, for route `vars` (no consumer or route yet).
#[derive(Debug, Clone, Copy)]
pub struct ConnEnv<'a> {
    /// The client's address.
    pub client: std::net::SocketAddr,
    /// The TCP peer (the client's, unless the node-wide `real_ip` replaced it).
    pub peer: std::net::SocketAddr,
    /// The address the request arrived on.
    pub server: std::net::SocketAddr,
    /// Over TLS.
    pub https: bool,
    /// The verified client certificate's subject.
    pub cert_subject: Option<&'a str>,
    /// The body, once read for a route whose `vars` need it.
    pub body: Option<&'a RequestBody>,
}

impl Env for ConnEnv<'_> {
    fn client(&self) -> std::net::SocketAddr {
        self.client
    }
    fn peer(&self) -> std::net::SocketAddr {
        self.peer
    }
    fn server(&self) -> std::net::SocketAddr {
        self.server
    }
    fn is_https(&self) -> bool {
        self.https
    }
    fn client_cert_subject(&self) -> Option<&str> {
        self.cert_subject
    }
    fn body(&self) -> Option<&RequestBody> {
        self.body
    }
}

/// A parsed request in its context, as variables read it.
#[derive(Debug)]
pub struct Request<'a, E: ?Sized> {
    /// The request.
    pub head: &'a RequestHead,
    /// What is known beside it.
    pub env: &'a E,
}

impl<'a, E: Env + ?Sized> Source<'a> for Request<'a, E> {
    fn client(&self) -> std::net::SocketAddr {
        self.env.client()
    }
    fn peer(&self) -> std::net::SocketAddr {
        self.env.peer()
    }
    fn server(&self) -> std::net::SocketAddr {
        self.env.server()
    }
    fn is_https(&self) -> bool {
        self.env.is_https()
    }
    fn method(&self) -> Option<&'a [u8]> {
        Some(self.head.method_bytes())
    }
    /// After rewrites.
    fn path(&self) -> Option<&'a [u8]> {
        Some(self.head.path())
    }
    fn target(&self) -> Option<&'a [u8]> {
        Some(self.head.original_target())
    }
    fn query(&self) -> Option<&'a [u8]> {
        self.head.query()
    }
    /// Without the port, lowercased (NGINX's `$host`).
    fn host(&self) -> Option<Cow<'a, [u8]>> {
        let h = sluice_router::host_without_port(self.head.host());
        Some(if h.iter().any(u8::is_ascii_uppercase) {
            Cow::Owned(h.to_ascii_lowercase())
        } else {
            Cow::Borrowed(h)
        })
    }
    fn protocol(&self) -> Option<&'a [u8]> {
        Some(if self.head.version() == 0 {
            b"HTTP/1.0"
        } else {
            b"HTTP/1.1"
        })
    }
    fn header(&self, name: &str) -> Option<&'a [u8]> {
        self.head.header(name)
    }
    fn last_header(&self, name: &str) -> Option<&'a [u8]> {
        self.head.last_header(name)
    }
    fn arg(&self, name: &str) -> Option<Cow<'a, [u8]>> {
        self.head.query_arg_ref(name)
    }
    fn cookie(&self, name: &str) -> Option<&'a [u8]> {
        self.head.cookie(name)
    }
    fn body_var(&self, var: &crate::body::BodyVar) -> Option<Cow<'a, [u8]>> {
        self.env.body()?.value(var, self.head)
    }
    fn consumer_name(&self) -> Option<&'a str> {
        self.env.consumer_name()
    }
    fn route_id(&self) -> Option<&'a str> {
        Some(self.env.route_id())
    }
    fn service_id(&self) -> Option<&'a str> {
        Some(self.env.service_id()).filter(|s| !s.is_empty())
    }
    fn consumer_group(&self) -> Option<&'a str> {
        self.env.consumer_group()
    }
    fn route_name(&self) -> Option<&'a str> {
        Some(self.env.route_names().0).filter(|s| !s.is_empty())
    }
    fn service_name(&self) -> Option<&'a str> {
        Some(self.env.route_names().1).filter(|s| !s.is_empty())
    }
    fn request_id(&self) -> Option<[u8; 16]> {
        self.env.request_id()
    }
    fn jwt_claim(&self, name: &str) -> Option<Cow<'a, [u8]>> {
        crate::ctx::claim_text(self.env.jwt_payload()?, name)
    }
    fn client_cert_subject(&self) -> Option<&'a str> {
        self.env.client_cert_subject()
    }
    fn status(&self) -> Option<u16> {
        self.env.status()
    }
    fn upstream_addr(&self) -> Option<std::net::SocketAddr> {
        self.env.upstream_addr()
    }
    fn upstream_status(&self) -> Option<u16> {
        self.env.done()?.upstream.map(|u| u.0)
    }
    fn upstream_response_ns(&self) -> Option<u64> {
        self.env.done()?.upstream.map(|u| u.1)
    }
    fn bytes_sent(&self) -> Option<u64> {
        self.env.done().map(|d| d.bytes_sent)
    }
    fn bytes_received(&self) -> Option<u64> {
        self.env.done().map(|d| d.bytes_received)
    }
    fn request_ns(&self) -> Option<u64> {
        self.env.done()?.elapsed_ns
    }
    /// The wall clock now (in the log phase, as the access log's).
    fn write_time(&self, var: &Var, out: &mut Vec<u8>) -> bool {
        crate::clock::write_time(var, crate::clock::now(), out)
    }
}

impl Var {
    /// The variable's value for a request in its context, if it has one.
    pub fn value<'a, E: Env + ?Sized>(
        &self,
        req: &'a RequestHead,
        cx: &'a E,
    ) -> Option<Cow<'a, [u8]>> {
        self.value_in(&Request { head: req, env: cx })
    }
}
