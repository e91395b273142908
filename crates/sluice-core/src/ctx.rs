//! Per-request state shared by the engine and plugins.

use std::any::Any;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use bytes::Bytes;

use crate::consumer::Consumer;

/// An upstream chosen by a plugin (traffic-split, proxy-mirror): an index into the upstreams
/// of the configuration version the request runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UpstreamRef(pub u32);

/// A request to copy to a shadow upstream (proxy-mirror).
#[derive(Debug, Clone)]
pub struct Mirror {
    /// Where to send the copy.
    pub upstream: UpstreamRef,
    /// Target to use instead of the request's (path and query), if any.
    pub target: Option<Vec<u8>>,
}

/// A held slot of a concurrency limit (limit-conn): released when the request ends, however it
/// ends, because the context that holds it is dropped.
#[derive(Debug)]
pub struct Lease(Arc<AtomicI64>);

impl Lease {
    /// Takes a slot: increments `counter` and returns the new value with the lease.
    pub fn take(counter: Arc<AtomicI64>) -> (Lease, i64) {
        let n = counter.fetch_add(1, Ordering::AcqRel) + 1;
        (Lease(counter), n)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// No edits: what a response without plugins is written with.
pub static NO_EDITS: ResponseEdits = ResponseEdits {
    status: None,
    remove: Vec::new(),
    added: Vec::new(),
    body: None,
    content_changed: false,
};

/// A point in a request's [`ResponseEdits`] ([`ResponseEdits::mark`]).
#[derive(Debug, Clone, Copy)]
pub struct EditsMark {
    status: Option<u16>,
    removed: usize,
    added: usize,
    body: bool,
}

/// Changes plugins make to the response head (and body) sent to the client. Kept per
/// connection and cleared per request, so its buffers are reused.
#[derive(Debug, Default)]
pub struct ResponseEdits {
    pub(crate) status: Option<u16>,
    pub(crate) remove: Vec<Box<[u8]>>,
    /// Serialized `Name: value\r\n` lines.
    pub(crate) added: Vec<u8>,
    pub(crate) body: Option<Bytes>,
    /// A body filter at work may change the content of the node's body (not only its
    /// encoding, as a compressor does): what passes a filter before it is not what the client
    /// gets.
    pub(crate) content_changed: bool,
}

impl ResponseEdits {
    /// Says whether a body filter at work may change the body's content (the engine's, after
    /// the header filters).
    pub fn set_content_changed(&mut self, changed: bool) {
        self.content_changed = changed;
    }

    /// Whether a body filter at work may change the body's content: a cache must not keep
    /// what it saw of it.
    pub fn content_changed(&self) -> bool {
        self.content_changed
    }

    /// Replaces the status.
    pub fn set_status(&mut self, status: u16) {
        self.status = Some(status);
    }

    /// Removes the upstream's fields with this name.
    pub fn remove_header(&mut self, name: &str) {
        self.remove.push(name.as_bytes().into());
    }

    /// Adds a field.
    pub fn add_header(&mut self, name: &str, value: &[u8]) {
        self.added.extend_from_slice(name.as_bytes());
        self.added.extend_from_slice(b": ");
        self.added.extend_from_slice(value);
        self.added.extend_from_slice(b"\r\n");
    }

    /// Adds a field whose value is a number, without allocating.
    pub fn add_header_num(&mut self, name: &str, value: u64) {
        self.add_header(name, itoa::Buffer::new().format(value).as_bytes());
    }

    /// Replaces the upstream's fields with this name by one value.
    pub fn set_header(&mut self, name: &str, value: &[u8]) {
        self.remove_header(name);
        self.add_header(name, value);
    }

    /// Replaces the body (the upstream's body is discarded).
    pub fn set_body(&mut self, body: Bytes) {
        self.body = Some(body);
    }

    /// The serialized fields added so far (`Name: value\r\n` lines).
    pub fn added_bytes(&self) -> &[u8] {
        &self.added
    }

    /// The last value added for a field named `name`, if any.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        let mut found = None;
        for line in self.added.split(|&b| b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if let Some(i) = memchr::memchr(b':', line)
                && line[..i].eq_ignore_ascii_case(name.as_bytes())
            {
                found = Some(line[i + 1..].trim_ascii());
            }
        }
        found
    }

    /// The replacement body, if any.
    pub fn body(&self) -> Option<&Bytes> {
        self.body.as_ref()
    }

    /// The replacement status, if any.
    pub fn status(&self) -> Option<u16> {
        self.status
    }

    /// True when an upstream field named `name` is removed.
    #[inline]
    pub fn removes(&self, name: &[u8]) -> bool {
        !self.remove.is_empty() && self.remove.iter().any(|r| r.eq_ignore_ascii_case(name))
    }

    /// Where the edits stand now, to go back to with [`ResponseEdits::rewind`].
    pub fn mark(&self) -> EditsMark {
        EditsMark {
            status: self.status,
            removed: self.remove.len(),
            added: self.added.len(),
            body: self.body.is_some(),
        }
    }

    /// Forgets the edits made since `mark` (a node's answer failed after its header filters
    /// ran: the gateway's own 502 must not carry edits made for that answer).
    pub fn rewind(&mut self, mark: EditsMark) {
        self.status = mark.status;
        self.remove.truncate(mark.removed);
        self.added.truncate(mark.added);
        if !mark.body {
            self.body = None;
        }
    }

    /// True when nothing was changed.
    pub fn is_empty(&self) -> bool {
        self.status.is_none()
            && self.remove.is_empty()
            && self.added.is_empty()
            && self.body.is_none()
    }

    /// Forgets every change, keeping the buffers.
    pub fn clear(&mut self) {
        self.status = None;
        self.remove.clear();
        self.added.clear();
        self.body = None;
        self.content_changed = false;
    }
}

/// What one request carries through the phases.
#[derive(Debug)]
pub struct Ctx<'s> {
    client: SocketAddr,
    /// The TCP peer (the client's address until a real address replaces it).
    peer: SocketAddr,
    server: SocketAddr,
    route_id: &'s str,
    /// The matched route's names beside its id.
    names: RouteNames<'s>,
    consumers: &'s [Consumer],
    consumer: Option<u32>,
    /// The upstream to use instead of the route's (traffic-split).
    pub upstream: Option<UpstreamRef>,
    /// The largest request body this request may send, instead of the node's
    /// `limits.max_body_size` (client-control; `u64::MAX`: no limit).
    pub max_body: Option<u64>,
    /// Changes to the response head and body.
    pub response: ResponseEdits,
    /// A copy of the request to send to a shadow upstream.
    pub mirror: Option<Mirror>,
    /// The request's W3C trace id, when a tracing plugin traces it (for the access log).
    pub trace_id: Option<[u8; 16]>,
    /// What an AI plugin recorded of its exchange with a model.
    pub llm: Option<Box<crate::llm::LlmRecord>>,
    leases: Vec<Lease>,
    /// Per-request state of plugins that need some across phases or body chunks.
    slots: Vec<(&'static str, Box<dyn Any>)>,
    /// The request arrived over TLS.
    https: bool,
    /// The subject of the client certificate the TLS handshake verified (mutual TLS).
    client_cert: Option<std::rc::Rc<str>>,
    /// The node that answered, once its response head is in (`balancer_ip`).
    upstream_addr: Option<SocketAddr>,
    /// The request body, when read for conditions that need it (`post_arg_*`).
    body: Option<std::rc::Rc<crate::body::RequestBody>>,
    /// The matched route's and its service's configuration, for routes whose plugins read
    /// them (`opa`'s `with_route`, `with_service`).
    documents: Option<&'s Documents>,
    /// Plugins that no longer run for this request (`workflow` ran one as its action).
    skipped: Vec<&'static str>,
    /// The request's `request_id` (NGINX's: 16 random bytes), made when first read.
    request_id: std::cell::Cell<Option<[u8; 16]>>,
    /// The verified token's payload, when `jwt-auth` keeps it (`store_in_ctx`; `jwt_claim_*`).
    jwt_payload: Option<JwtPayload>,
    /// The body to forward instead of the client's (`body-transformer`).
    new_body: Option<Replaced>,
    /// Why a body filter asked for the response to be cut off ([`Ctx::cut_response`]).
    cut: Option<&'static str>,
}

/// A verified JSON Web Token's payload (`jwt-auth`'s `store_in_ctx`), shared with the access log.
pub type JwtPayload = std::rc::Rc<serde_json::Map<String, serde_json::Value>>;

/// A request body a plugin replaced ([`Ctx::set_request_body`]).
#[derive(Debug)]
pub struct Replaced {
    /// What goes upstream.
    pub body: Bytes,
    /// The bytes the client's body took in the connection's buffer, framing included (None:
    /// it was not read whole, and cannot be replaced).
    pub wire: Option<usize>,
    /// The length of the client's body (limits such as client-control's apply to it).
    pub original: u64,
}

/// The matched route's names beside its id (empty where it has none): its service's id, its
/// own `name` and its service's (`service_id`, `route_name`, `service_name`).
#[derive(Debug, Clone, Copy, Default)]
pub struct RouteNames<'s> {
    /// Its service's id.
    pub service_id: &'s str,
    /// Its `name`.
    pub name: &'s str,
    /// Its service's `name`.
    pub service_name: &'s str,
}

/// What a request's context hands its access log line when the request ends: its trace id,
/// its `request_id` if anything read it, and the token payload `jwt-auth` kept.
#[derive(Debug, Clone, Default)]
pub struct Carried {
    /// The W3C trace id, when a tracing plugin traced the request.
    pub trace_id: Option<[u8; 16]>,
    /// The `request_id` a phase read (the log makes one otherwise).
    pub request_id: Option<[u8; 16]>,
    /// `jwt-auth`'s payload, with `store_in_ctx`.
    pub jwt_payload: Option<JwtPayload>,
    /// What an AI plugin recorded of its exchange with a model (`llm_*` variables).
    pub llm: Option<Box<crate::llm::LlmRecord>>,
}

/// A new `request_id`: 16 random bytes, as NGINX's `$request_id` (not a secret, so the fast
/// per-thread generator is enough).
pub fn new_request_id() -> [u8; 16] {
    fastrand::u128(..).to_ne_bytes()
}

/// The JSON text of a token claim, as a variable reads it: a string as itself, anything else
/// as JSON.
pub fn claim_text<'a>(
    payload: &'a serde_json::Map<String, serde_json::Value>,
    name: &str,
) -> Option<std::borrow::Cow<'a, [u8]>> {
    match payload.get(name)? {
        serde_json::Value::String(s) => Some(s.as_bytes().into()),
        serde_json::Value::Null => None,
        other => Some(other.to_string().into_bytes().into()),
    }
}

/// The configuration of a route and of its service as APISIX's admin API shows them, without
/// their upstreams: kept (once per configuration version) for the routes whose plugins say
/// they read them ([`crate::Plugin::reads_documents`]), none for the others.
#[derive(Debug, Default)]
pub struct Documents {
    /// The route's.
    pub route: serde_json::Value,
    /// Its service's, when it has one.
    pub service: Option<std::sync::Arc<serde_json::Value>>,
}

impl<'s> Ctx<'s> {
    /// A context for a request from `client` to `server` on route `route_id`.
    pub fn new(
        client: SocketAddr,
        server: SocketAddr,
        route_id: &'s str,
        consumers: &'s [Consumer],
        response: ResponseEdits,
    ) -> Ctx<'s> {
        Ctx {
            client,
            peer: client,
            server,
            route_id,
            names: RouteNames::default(),
            consumers,
            consumer: None,
            upstream: None,
            max_body: None,
            response,
            mirror: None,
            trace_id: None,
            leases: Vec::new(),
            slots: Vec::new(),
            https: false,
            client_cert: None,
            upstream_addr: None,
            body: None,
            documents: None,
            skipped: Vec::new(),
            request_id: std::cell::Cell::new(None),
            jwt_payload: None,
            new_body: None,
            cut: None,
            llm: None,
        }
    }

    /// Gives conditions the request's body, read before the phases.
    pub fn set_body(&mut self, body: std::rc::Rc<crate::body::RequestBody>) {
        self.body = Some(body);
    }

    /// Takes plugin `name` out of the rest of this request's access phase (APISIX's
    /// `skip_plugin`): `workflow` ran it as its action, and it must not count the request twice.
    pub fn skip(&mut self, name: &'static str) {
        self.skipped.push(name);
    }

    /// Whether plugin `name` was taken out of this request.
    #[inline]
    pub fn skips(&self, name: &str) -> bool {
        !self.skipped.is_empty() && self.skipped.contains(&name)
    }

    /// Gives the phases the matched route's configuration documents.
    pub fn set_documents(&mut self, documents: &'s Documents) {
        self.documents = Some(documents);
    }

    /// The matched route's configuration documents, when its plugins read them.
    pub fn documents(&self) -> Option<&'s Documents> {
        self.documents
    }

    /// Forwards `body` instead of the client's (which was read before the phases: the plugin
    /// that calls this says [`crate::Plugin::needs_body`]).
    /// Later phases read the new body (`post_arg_*`), as in APISIX.
    pub fn set_request_body(&mut self, body: Bytes) {
        let (wire, original) = match &self.new_body {
            // Replaced twice: what the client sent is still what leaves the buffer.
            Some(r) => (r.wire, r.original),
            None => {
                let b = self.body.as_deref();
                (
                    b.and_then(crate::body::RequestBody::wire_len),
                    b.and_then(|b| b.raw()).map_or(0, |r| r.len() as u64),
                )
            }
        };
        self.body = Some(std::rc::Rc::new(crate::body::RequestBody::new(Some(
            body.clone(),
        ))));
        self.new_body = Some(Replaced {
            body,
            wire,
            original,
        });
    }

    /// The body to forward instead of the client's, once (the engine takes it).
    pub fn take_request_body(&mut self) -> Option<Replaced> {
        self.new_body.take()
    }

    /// The request's body, when it was read (`post_arg_*`, `graphql_*`).
    pub fn body(&self) -> Option<&crate::body::RequestBody> {
        self.body.as_deref()
    }

    /// Records the node whose response is being answered (before the header filters).
    pub fn set_upstream_addr(&mut self, addr: SocketAddr) {
        self.upstream_addr = Some(addr);
    }

    /// The node whose response is being answered, once there is one.
    pub fn upstream_addr(&self) -> Option<SocketAddr> {
        self.upstream_addr
    }

    /// Records that the request came over TLS, and the subject of the client certificate
    /// the handshake verified, if any.
    pub fn set_tls(&mut self, client_cert: Option<std::rc::Rc<str>>) {
        self.https = true;
        self.client_cert = client_cert;
    }

    /// Whether the request came over TLS.
    pub fn is_https(&self) -> bool {
        self.https
    }

    /// The verified client certificate's subject (`CN=..., O=...`), with mutual TLS.
    pub fn client_cert_subject(&self) -> Option<&str> {
        self.client_cert.as_deref()
    }

    /// The client's address: the TCP peer's, or the real address a proxy in front gave
    /// (`real-ip`, the node-wide `real_ip`).
    pub fn client(&self) -> SocketAddr {
        self.client
    }

    /// The TCP peer's address, whatever replaced the client's (`realip_remote_addr`).
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// Replaces the client's address with the real one (`real-ip`); every later phase, the
    /// node's forwarded fields and the access log see it.
    pub fn set_client(&mut self, real: SocketAddr) {
        self.client = real;
    }

    /// Records the TCP peer when the node-wide `real_ip` gave the context its client.
    pub fn set_peer(&mut self, peer: SocketAddr) {
        self.peer = peer;
    }

    /// The address the request arrived on.
    pub fn server(&self) -> SocketAddr {
        self.server
    }

    /// The matched route's id (empty when no route matched).
    pub fn route_id(&self) -> &'s str {
        self.route_id
    }

    /// Records the matched route's names.
    pub fn set_names(&mut self, names: RouteNames<'s>) {
        self.names = names;
    }

    /// The matched route's names (empty where it has none).
    pub fn names(&self) -> RouteNames<'s> {
        self.names
    }

    /// The matched route's service's id (empty without one).
    pub fn service_id(&self) -> &'s str {
        self.names.service_id
    }

    /// The request's `request_id`, made the first time it is read.
    pub fn request_id(&self) -> [u8; 16] {
        match self.request_id.get() {
            Some(id) => id,
            None => {
                let id = new_request_id();
                self.request_id.set(Some(id));
                id
            }
        }
    }

    /// Keeps the verified token's payload for later phases and the log (`store_in_ctx`).
    pub fn set_jwt_payload(&mut self, payload: JwtPayload) {
        self.jwt_payload = Some(payload);
    }

    /// Asks the engine to stop the response after this piece, as a node that cut it off
    /// would be (the client sees a truncated answer): `ai-proxy`'s `max_stream_duration_ms`.
    pub fn cut_response(&mut self, why: &'static str) {
        self.cut.get_or_insert(why);
    }

    /// Why a body filter asked for the response to be cut off, if one did.
    pub fn cut(&self) -> Option<&'static str> {
        self.cut
    }

    /// The token payload `jwt-auth` kept, if any.
    pub fn jwt_payload(&self) -> Option<&serde_json::Map<String, serde_json::Value>> {
        self.jwt_payload.as_deref()
    }

    /// What the access log line takes from the context.
    pub fn carried(&self) -> Carried {
        Carried {
            trace_id: self.trace_id,
            request_id: self.request_id.get(),
            jwt_payload: self.jwt_payload.clone(),
            llm: self.llm.clone(),
        }
    }

    /// The authenticated consumer, once an auth plugin identified one.
    pub fn consumer(&self) -> Option<&'s Consumer> {
        self.consumer.map(|i| &self.consumers[i as usize])
    }

    /// The identified consumer's index in the snapshot's consumers, if any.
    pub fn consumer_index(&self) -> Option<u32> {
        self.consumer
    }

    /// The consumer's name, if any.
    pub fn consumer_name(&self) -> Option<&'s str> {
        self.consumer().map(|c| &*c.username)
    }

    /// Records the consumer an auth plugin identified (an index from its consumer index).
    pub fn set_consumer(&mut self, index: u32) {
        self.consumer = Some(index);
    }

    /// Keeps a concurrency slot until the request ends.
    pub fn hold(&mut self, lease: Lease) {
        self.leases.push(lease);
    }

    /// Sets the context aside, with what plugins hold in it (limit-conn's slots, a trace's
    /// span), without its borrows of the configuration: an upgraded connection keeps it while
    /// its tunnel is open, and the log phase runs on it when the tunnel closes, as in APISIX.
    pub fn park(self) -> Parked {
        Parked(Ctx {
            client: self.client,
            peer: self.peer,
            server: self.server,
            route_id: "",
            names: RouteNames::default(),
            consumers: &[],
            consumer: self.consumer,
            upstream: self.upstream,
            max_body: self.max_body,
            response: self.response,
            mirror: self.mirror,
            trace_id: self.trace_id,
            leases: self.leases,
            slots: self.slots,
            https: self.https,
            client_cert: self.client_cert,
            upstream_addr: self.upstream_addr,
            body: self.body,
            documents: None,
            skipped: self.skipped,
            request_id: self.request_id,
            jwt_payload: self.jwt_payload,
            new_body: None,
            cut: None,
            llm: None,
        })
    }

    /// A plugin's per-request state, created empty on first use (the name keeps plugins apart).
    pub fn slot<T: Default + 'static>(&mut self, name: &'static str) -> &mut T {
        let i = match self
            .slots
            .iter()
            .position(|(n, s)| *n == name && s.is::<T>())
        {
            Some(i) => i,
            None => {
                self.slots.push((name, Box::new(T::default())));
                self.slots.len() - 1
            }
        };
        self.slots[i]
            .1
            .downcast_mut::<T>()
            .expect("the slot holds a T")
    }

    /// A plugin's per-request state, if it made one.
    pub fn slot_ref<T: 'static>(&self, name: &'static str) -> Option<&T> {
        self.slots
            .iter()
            .find(|(n, s)| *n == name && s.is::<T>())
            .and_then(|(_, s)| s.downcast_ref::<T>())
    }

    /// Gives the response edits back (for reuse by the next request).
    pub fn into_response(self) -> ResponseEdits {
        self.response
    }
}

/// A request's context set aside ([`Ctx::park`]).
pub struct Parked(Ctx<'static>);

impl std::fmt::Debug for Parked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parked")
            .field("client", &self.0.client)
            .finish()
    }
}

impl Parked {
    /// The context again, with the route, service and consumers it was made with (from the
    /// same snapshot).
    pub fn resume<'s>(
        self,
        route_id: &'s str,
        names: RouteNames<'s>,
        consumers: &'s [Consumer],
    ) -> Ctx<'s> {
        Ctx {
            route_id,
            names,
            consumers,
            ..self.0
        }
    }
}
