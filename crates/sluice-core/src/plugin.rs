//! The plugin contract: a load-time factory (name, priority, configuration, `build`) and a
//! compiled, immutable instance called in the request phases. Envoy's `FilterConfig`/`Filter`
//! split, written as Vector's `build()`; phase names from APISIX, signatures from Pingora.

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::check::Validator;
use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::ctx::{Ctx, UpstreamRef};
use crate::http::RequestHead;
use crate::http::response::ResponseHead;

/// What the engine does after a plugin's request phase.
#[derive(Debug)]
pub enum Flow {
    /// Go on with the next plugin.
    Continue,
    /// Stop and send this response (401, 403, 429, a CORS preflight, a mock). A denial is
    /// not an error and is not logged as one.
    Respond(Response),
    /// Wait this long, then go on (limit-req, limit-conn, fault-injection delays). The wait
    /// happens on the worker's event loop; nothing blocks.
    Sleep(Duration),
    /// Wait this long, then send this response (a mock or an injected fault with a delay).
    Delayed(Duration, Box<Response>),
}

/// A response a plugin (or the gateway) generates.
#[derive(Debug, Clone)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Header fields, in order.
    pub headers: Vec<(String, Vec<u8>)>,
    /// Body.
    pub body: Bytes,
}

impl Response {
    /// An empty response with `status`.
    pub fn new(status: u16) -> Response {
        Response {
            status,
            headers: Vec::new(),
            body: Bytes::new(),
        }
    }

    /// `{"error_msg": message}`, the gateway's error shape (APISIX's).
    pub fn error(status: u16, message: &str) -> Response {
        Response::json(status, &serde_json::json!({ "error_msg": message }))
    }

    /// `{"message": message}`, the shape APISIX's auth plugins answer with.
    pub fn message(status: u16, message: &str) -> Response {
        Response::json(status, &serde_json::json!({ "message": message }))
    }

    /// A JSON body.
    pub fn json(status: u16, v: &Value) -> Response {
        let mut body = v.to_string().into_bytes();
        body.push(b'\n');
        Response::new(status)
            .header("Content-Type", b"application/json")
            .body(body)
    }

    /// Adds a header field.
    pub fn header(mut self, name: &str, value: &[u8]) -> Response {
        self.headers.push((name.to_owned(), value.to_vec()));
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<Bytes>) -> Response {
        self.body = body.into();
        self
    }
}

/// The phases a plugin takes part in; the engine never calls the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Phases(u8);

impl Phases {
    /// Before authentication: rewrites, identification (APISIX runs auth here).
    pub const REWRITE: Phases = Phases(1);
    /// Access decisions: limits, restrictions. Consumer plugins join here.
    pub const ACCESS: Phases = Phases(2);
    /// Like `ACCESS`, but the plugin must wait on I/O (`access_async` is called instead).
    pub const ACCESS_ASYNC: Phases = Phases(4);
    /// Just before the upstream is chosen and connected.
    pub const BEFORE_PROXY: Phases = Phases(8);
    /// On the response head, before it is sent.
    pub const HEADER_FILTER: Phases = Phases(16);
    /// On each piece of the response body.
    pub const BODY_FILTER: Phases = Phases(32);
    /// After the response was sent.
    pub const LOG: Phases = Phases(64);
    /// Like `REWRITE`, but the plugin must wait on I/O (`rewrite_async` is called instead): an
    /// authentication that asks a directory (`ldap-auth`).
    pub const REWRITE_ASYNC: Phases = Phases(128);

    /// Both sets.
    pub const fn with(self, other: Phases) -> Phases {
        Phases(self.0 | other.0)
    }

    /// True when every phase of `other` is in the set.
    pub const fn contains(self, other: Phases) -> bool {
        self.0 & other.0 == other.0
    }
}

/// A boxed future that stays on the worker's thread.
pub type LocalFuture<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// A read-only view of the response head for `header_filter`: the upstream's, or the one the
/// gateway or a plugin generated.
#[derive(Debug, Clone, Copy)]
pub enum ResponseView<'a> {
    /// From the upstream.
    Upstream(&'a ResponseHead),
    /// Generated here.
    Own(&'a Response),
}

impl ResponseView<'_> {
    /// Status code (before edits).
    pub fn status(&self) -> u16 {
        match self {
            ResponseView::Upstream(r) => r.status(),
            ResponseView::Own(r) => r.status,
        }
    }

    /// Every header field, in order.
    pub fn each_header(&self, mut f: impl FnMut(&[u8], &[u8])) {
        match self {
            ResponseView::Upstream(r) => {
                for h in r.fields() {
                    f(h.name(r.raw()), h.value(r.raw()));
                }
            }
            ResponseView::Own(r) => {
                for (n, v) in &r.headers {
                    f(n.as_bytes(), v);
                }
            }
        }
    }

    /// First value of a header field.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        match self {
            ResponseView::Upstream(r) => r.header(name),
            ResponseView::Own(r) => r
                .headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_slice()),
        }
    }
}

/// A compiled plugin instance: one per (route, plugin). Immutable, shared by all workers;
/// per-request state lives in [`Ctx`], state that outlives a request in atomics or in the
/// [`BuildCx::state`] registry.
pub trait Plugin: Send + Sync + 'static {
    /// Phases implemented.
    fn phases(&self) -> Phases;

    /// Runs after routing, before authentication. `Flow::Respond` ends the request.
    fn rewrite(&self, _req: &mut RequestHead, _cx: &mut Ctx<'_>) -> Flow {
        Flow::Continue
    }

    /// Runs after every plugin's rewrite, with consumer plugins merged in.
    fn access(&self, _req: &mut RequestHead, _cx: &mut Ctx<'_>) -> Flow {
        Flow::Continue
    }

    /// `rewrite` for plugins that must await I/O (declared with `Phases::REWRITE_ASYNC`).
    fn rewrite_async<'a>(
        &'a self,
        req: &'a mut RequestHead,
        cx: &'a mut Ctx<'_>,
    ) -> LocalFuture<'a, Flow> {
        Box::pin(std::future::ready(self.rewrite(req, cx)))
    }

    /// `access` for plugins that must await I/O (declared with `Phases::ACCESS_ASYNC`).
    fn access_async<'a>(
        &'a self,
        _req: &'a mut RequestHead,
        _cx: &'a mut Ctx<'_>,
    ) -> LocalFuture<'a, Flow> {
        Box::pin(async { Flow::Continue })
    }

    /// Runs last before the request goes upstream.
    fn before_proxy(&self, _req: &mut RequestHead, _cx: &mut Ctx<'_>) -> Flow {
        Flow::Continue
    }

    /// Sees the response head and edits it through `cx.response`.
    fn header_filter(&self, _req: &RequestHead, _resp: ResponseView<'_>, _cx: &mut Ctx<'_>) {}

    /// Sees each piece of the response body (`eos` on the last call, which may carry an empty
    /// chunk) and may replace it. A route with body filters is sent chunked.
    fn body_filter(&self, _chunk: &mut Bytes, _eos: bool, _cx: &mut Ctx<'_>) {}

    /// Runs after the response was sent; `done` says how it went.
    fn log(&self, _req: &RequestHead, _done: &Done, _cx: &Ctx<'_>) {}

    /// True when its conditions or keys read the request body (`post_arg_*`, `graphql_*`):
    /// the engine then reads the body before the phases.
    fn needs_body(&self) -> bool {
        false
    }

    /// True when it reads the matched route's and service's configuration
    /// ([`crate::ctx::Documents`], `opa`'s `with_route`): the routes it runs on keep them.
    fn reads_documents(&self) -> bool {
        false
    }

    /// Whether its body filter has work for this response, asked after the header filters
    /// ran: when no body filter has, the body goes out as the node framed it (its
    /// `Content-Length` kept) and the body filters are not called. A compressor that chose not
    /// to compress says no.
    fn filters_body(&self, _cx: &Ctx<'_>) -> bool {
        true
    }

    /// True when its body filter only reads the body and leaves every chunk as it was (a
    /// cache filling its entry): the body keeps the node's framing, its `Content-Length`
    /// included, as long as no other filter that works on this response rewrites.
    fn only_reads_body(&self) -> bool {
        false
    }

    /// True when its header and body filters run after every other plugin's, whatever its
    /// priority: a compressor (`gzip`, `brotli`) encodes the body the others produced, as
    /// NGINX's gzip filter runs after the Lua filters.
    fn filters_last(&self) -> bool {
        false
    }

    /// How the route is labelled in metrics, when this plugin decides it (APISIX's
    /// `prometheus` with `prefer_name`); see [`PluginFactory::labels_metrics`].
    fn metrics_label(&self) -> Option<MetricsLabel> {
        None
    }

    /// True when it may send a request elsewhere after its target answered or failed
    /// ([`Plugin::fallback`]): `ai-proxy-multi`'s instances.
    fn falls_back(&self) -> bool {
        false
    }

    /// Called when the request's target answered `why` (its status, or the gateway's 502/504
    /// for a failure), before anything of that answer reached the client. True: the plugin chose
    /// another target (`cx.upstream`), edited the request head and set its body
    /// ([`Ctx::set_request_body`]); the engine drops the answer and sends the request there.
    /// Only for plugins whose [`Plugin::falls_back`] is true, on a route's own chain.
    fn fallback(&self, _req: &mut RequestHead, _why: Fallback, _cx: &mut Ctx<'_>) -> bool {
        false
    }
}

/// What a target did that a plugin may fall back from ([`Plugin::fallback`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallback {
    /// It answered with this status.
    Status(u16),
    /// It could not be reached or did not answer in time: the gateway would answer this
    /// status (502, 504).
    Failed(u16),
}

/// What the log phase knows of an answered request besides its context.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Done {
    /// The status sent.
    pub status: u16,
    /// Response body bytes sent.
    pub bytes_sent: u64,
    /// Request body bytes received.
    pub bytes_received: u64,
    /// Nanoseconds from the request's first byte to its last response byte (None: the worker
    /// does not time requests; see [`want_timing`]).
    pub elapsed_ns: Option<u64>,
    /// The node's status and the nanoseconds to its response head, when a node answered.
    pub upstream: Option<(u16, u64)>,
}

/// Plugins that read [`Done::elapsed_ns`] (the loggers), while any is in service.
static TIMING_WANTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Held by a plugin instance whose log phase reads how long requests took: while one is held,
/// workers time every request (otherwise they do only for metrics or an access log).
#[derive(Debug)]
pub struct Timing(());

/// Asks workers to time requests until the value is dropped.
pub fn want_timing() -> Timing {
    TIMING_WANTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Timing(())
}

impl Drop for Timing {
    fn drop(&mut self) {
        TIMING_WANTED.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Whether a plugin in service reads request times ([`want_timing`]). A relaxed load of a
/// value written only when configurations change.
#[inline]
pub fn timing_wanted() -> bool {
    TIMING_WANTED.load(std::sync::atomic::Ordering::Relaxed) != 0
}

/// What a worker runs when it stops, after its connections drained: plugins that keep work
/// of their own on the worker (the loggers' queues) finish it by the deadline.
pub type StopHook = fn(std::time::Instant) -> LocalFuture<'static, ()>;

static STOP_HOOKS: parking_lot::Mutex<Vec<StopHook>> = parking_lot::Mutex::new(Vec::new());

/// Registers `hook` (once, however often it is called with the same function).
pub fn on_worker_stop(hook: StopHook) {
    let mut hooks = STOP_HOOKS.lock();
    if !hooks.iter().any(|h| std::ptr::fn_addr_eq(*h, hook)) {
        hooks.push(hook);
    }
}

/// Runs the stop hooks on this worker, each until it is done or `deadline` passed.
pub async fn worker_stopping(deadline: std::time::Instant) {
    let hooks = STOP_HOOKS.lock().clone();
    for hook in hooks {
        hook(deadline).await;
    }
}

/// Runs a plugin's rewrite phase, waiting when it is declared async (`REWRITE_ASYNC`): the
/// one place that chooses between `rewrite` and `rewrite_async`, for the engine and for the
/// plugins that run others (`_meta`'s wrapper, multi-auth).
pub async fn run_rewrite(p: &dyn Plugin, req: &mut RequestHead, cx: &mut Ctx<'_>) -> Flow {
    if p.phases().contains(Phases::REWRITE_ASYNC) {
        p.rewrite_async(req, cx).await
    } else {
        p.rewrite(req, cx)
    }
}

/// Runs a plugin's access phase, waiting when it is declared async (`ACCESS_ASYNC`); see
/// [`run_rewrite`].
pub async fn run_access(p: &dyn Plugin, req: &mut RequestHead, cx: &mut Ctx<'_>) -> Flow {
    if p.phases().contains(Phases::ACCESS_ASYNC) {
        p.access_async(req, cx).await
    } else {
        p.access(req, cx)
    }
}

/// How a route is labelled in metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsLabel {
    /// By its id.
    Id,
    /// By its name, when it has one (else its id).
    Name,
}

/// What a stream plugin decides when a connection (or a UDP session) arrives: APISIX's
/// `preread` phase.
pub enum Preread {
    /// Go on with the next plugin.
    Continue,
    /// Go on after waiting this long, holding the value until the connection closes (a
    /// counted connection slot, given back when it is dropped).
    Hold(Box<dyn Any + Send>, Duration),
    /// Close the connection; the reason is logged at debug.
    Close(&'static str),
}

impl std::fmt::Debug for Preread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Preread::Continue => f.write_str("Continue"),
            Preread::Hold(_, wait) => write!(f, "Hold({wait:?})"),
            Preread::Close(why) => write!(f, "Close({why})"),
        }
    }
}

/// A compiled plugin on a stream route (L4), run once per connection or UDP session, before
/// the upstream is chosen. Built by [`PluginFactory::build_stream`].
pub trait StreamPlugin: Send + Sync + 'static {
    /// Decides on a connection from `client`.
    fn preread(&self, client: std::net::IpAddr) -> Preread;
}

/// Where a plugin configuration is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// On a route.
    Route,
    /// On a service (shared by its routes).
    Service,
    /// On a global rule (every request).
    GlobalRule,
    /// On a consumer: an auth plugin's credentials, or a plugin run once the consumer is known.
    Consumer,
    /// On a stream route (L4): run once per connection.
    StreamRoute,
}

/// One item of APISIX's `plugin_metadata`: a plugin's node-wide settings.
pub trait MetadataItem {
    /// The plugin's name (the item's id).
    fn plugin(&self) -> Option<&str>;
    /// Its fields.
    fn fields(&self) -> &serde_json::Map<String, Value>;
}

/// Where [`BuildCx::metadata`] finds a plugin's `plugin_metadata`: a list of items. A trait
/// object rather than a closure, so that a [`BuildCx`] can be narrowed to a shorter lifetime
/// (`workflow` builds its actions under an owner of their own).
pub trait MetadataSource {
    /// The fields of `plugin`'s item, if it has one.
    fn find(&self, plugin: &str) -> Option<&serde_json::Map<String, Value>>;
}

impl<T: MetadataItem> MetadataSource for &[T] {
    fn find(&self, plugin: &str) -> Option<&serde_json::Map<String, Value>> {
        self.iter()
            .find(|m| m.plugin() == Some(plugin))
            .map(MetadataItem::fields)
    }
}

/// Node-level plugin settings (APISIX's `plugin_attr`), by plugin name.
pub type PluginAttr = std::collections::BTreeMap<String, Value>;

/// The plugins a gateway knows, by name. The binary builds it; the engine only looks names up.
pub trait Plugins: Send + Sync + std::fmt::Debug {
    /// The factory of plugin `name`.
    fn get(&self, name: &str) -> Option<&dyn PluginFactory>;
    /// Every factory.
    fn all(&self) -> Vec<&dyn PluginFactory>;
}

/// One consumer's credentials for an auth plugin, handed to [`PluginFactory::consumer_index`].
#[derive(Debug)]
pub struct Credential<'a> {
    /// Index of the consumer in the snapshot's consumer table.
    pub consumer: u32,
    /// Position of the consumer in the configuration's `consumers` (for error paths).
    pub position: usize,
    /// Its index in the consumer's `credentials`; None: in the consumer's own `plugins`.
    pub credential: Option<usize>,
    /// The consumer's username.
    pub username: &'a str,
    /// The plugin's configuration on that consumer.
    pub config: &'a Value,
}

impl Credential<'_> {
    /// Where it is written: `consumers[2]` or `consumers[2].credentials[0]`.
    pub fn place(&self) -> String {
        match self.credential {
            None => format!("consumers[{}]", self.position),
            Some(j) => format!("consumers[{}].credentials[{j}]", self.position),
        }
    }

    /// Runs `f` with `v` pointing at the consumer or credential that holds it (the parent of
    /// its `plugins`), as `v` points at `consumers`.
    pub fn at<R>(&self, v: &mut Validator, f: impl FnOnce(&mut Validator) -> R) -> R {
        v.index(self.position, |v| match self.credential {
            None => f(v),
            Some(j) => v.field("credentials", |v| v.index(j, f)),
        })
    }
}

/// The [`Credential`]s of what `sluice_config::credentials_of` found.
pub fn as_credentials<'a>(
    found: &'a [(u32, usize, Option<usize>, &'a str, Value)],
) -> Vec<Credential<'a>> {
    found
        .iter()
        .map(
            |(consumer, position, credential, username, config)| Credential {
                consumer: *consumer,
                position: *position,
                credential: *credential,
                username,
                config,
            },
        )
        .collect()
}

/// What `build` may ask of the compiler.
pub struct BuildCx<'a> {
    /// Where the configuration is.
    pub scope: Scope,
    /// The resource that owns this configuration, unique in the configuration:
    /// `route:<id>`, `service:<id>`, `global_rule:<id>` or `consumer:<username>`. Plugins
    /// key state that outlives a configuration version with it (two consumers with the same
    /// limit settings must not share a counter).
    pub owner: &'a str,
    /// Per-plugin consumer indexes built by [`PluginFactory::consumer_index`], by plugin name.
    pub indexes: &'a dyn Fn(&str) -> Option<Arc<dyn Any + Send + Sync>>,
    /// Resolves an upstream (an id string or an inline upstream object) to a reference the
    /// engine can use; errors are recorded at the path given.
    pub upstreams: &'a mut dyn FnMut(&Value, &mut Validator) -> Option<UpstreamRef>,
    /// Registry of state that outlives one configuration version (rate-limit counters).
    pub state: &'a crate::state::StateRegistry,
    /// Node-level plugin settings (`plugin_attr`), by plugin name, each checked by its
    /// plugin's [`PluginFactory::check_attr`]; [`BuildCx::attr`] finds a plugin's.
    pub plugin_attr: &'a PluginAttr,
    /// APISIX's `plugin_metadata`: every plugin's node-wide settings (checked by
    /// [`PluginFactory::check_metadata`]); [`BuildCx::metadata`] finds a plugin's.
    pub plugin_metadata: &'a dyn MetadataSource,
    /// Ports of the node's TLS listeners (APISIX's `apisix.ssl.listen`), for plugins that send
    /// clients there (`redirect`'s `http_to_https`). Empty when only checking.
    pub tls_ports: &'a [u16],
    /// The path patterns of the route whose own plugin this is (empty elsewhere): where its
    /// `:name` parameters are, for `$uri_param_<name>`.
    pub route_paths: &'a [sluice_router::PathPattern],
}

impl BuildCx<'_> {
    /// Where the route's paths have parameter `name`: its segment (1 for `/:name/...`), the same
    /// in every path of the route that has it. An error says why not.
    pub fn uri_param(&self, name: &str) -> Result<usize, String> {
        // The dry build of validation (owner "check") does not know the route's paths: the
        // compilation checks them.
        if self.owner == "check" {
            return Ok(usize::MAX);
        }
        let mut at = None;
        for p in self.route_paths {
            let found = p
                .as_str()
                .split('/')
                .position(|seg| seg.strip_prefix(':') == Some(name));
            match (at, found) {
                (_, None) => {}
                (None, Some(i)) => at = Some(i),
                (Some(a), Some(i)) if a == i => {}
                (Some(_), Some(_)) => {
                    return Err(format!(
                        "uri_param_{name}: the route's paths have :{name} at different places"
                    ));
                }
            }
        }
        at.ok_or_else(|| match self.scope {
            Scope::Route if !self.route_paths.is_empty() => {
                format!("uri_param_{name}: the route's paths have no :{name} parameter")
            }
            _ => format!("uri_param_{name} works in a route's own plugins, whose path has :{name}"),
        })
    }

    /// The `plugin_attr` entry of `plugin`, when there is one.
    pub fn attr(&self, plugin: &str) -> Option<&Value> {
        self.plugin_attr.get(plugin)
    }

    /// The `plugin_metadata` of `plugin`, when there is one.
    pub fn metadata(&self, plugin: &str) -> Option<&serde_json::Map<String, Value>> {
        self.plugin_metadata.find(plugin)
    }
}

impl std::fmt::Debug for BuildCx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuildCx")
            .field("scope", &self.scope)
            .field("owner", &self.owner)
            .finish()
    }
}

/// Load-time side of a plugin, used once per configuration version; never on a request.
pub trait PluginFactory: Send + Sync + 'static {
    /// Name as written in YAML, kebab-case: `"limit-count"`.
    fn name(&self) -> &'static str;

    /// Higher runs first (APISIX's numbers where the plugin exists there); unique.
    fn priority(&self) -> i32;

    /// Validates `config` (errors recorded in `v`, which points at the plugin's config) and
    /// builds the instance. `None` when an error was recorded.
    fn build(
        &self,
        config: &Value,
        cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>>;

    /// The JSON schema of the plugin's configuration on a route, service or global rule
    /// (APISIX's `/apisix/admin/schema/plugins/<name>`).
    fn schema(&self) -> Option<Value> {
        None
    }

    /// The fields of its configuration that APISIX encrypts before writing them to etcd
    /// (its `encrypt_fields`), decrypted when a configuration loads.
    fn encrypted_fields(&self) -> &'static [&'static str] {
        &[]
    }

    /// Whether it works on stream routes (L4); [`PluginFactory::build_stream`] builds it there.
    fn on_stream(&self) -> bool {
        false
    }

    /// Validates a stream route's configuration (`v` points at it) and builds the instance run
    /// on its connections. Called only for plugins whose `on_stream` is true.
    fn build_stream(
        &self,
        _config: &Value,
        _cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn StreamPlugin>> {
        v.error("does not work on stream routes");
        None
    }

    /// Checks its node-wide settings under `plugin_attr` (`v` points at them). Plugins
    /// without any refuse them.
    fn check_attr(&self, _value: &Value, v: &mut Validator) {
        v.error(format!("{} has no settings in plugin_attr", self.name()));
    }

    /// Whether the route's metrics label follows this plugin (APISIX's `prometheus`): with
    /// `metrics.routes: plugin` only routes where it is configured get their own label, and
    /// disabled on a route (`_meta.disable`) it gives the route none.
    fn labels_metrics(&self) -> bool {
        false
    }

    /// Auth plugins: the JSON schema of a consumer's credentials (`?schema_type=consumer`).
    fn consumer_schema(&self) -> Option<Value> {
        None
    }

    /// Checks this plugin's `plugin_metadata` (`v` points at the item). Plugins without
    /// metadata refuse it.
    fn check_metadata(&self, _fields: &serde_json::Map<String, Value>, v: &mut Validator) {
        v.error_at("id", format!("{} has no plugin metadata", self.name()));
    }

    /// Auth plugins: checks one consumer's credentials (`v` points at them). Others refuse
    /// to be configured on a consumer unless they can run there.
    fn check_credential(&self, _config: &Value, v: &mut Validator) {
        v.error("is not an authentication plugin; it cannot be configured with credentials here");
    }

    /// Auth plugins: whether a configuration on a consumer is credentials (true) or a plugin
    /// to run for that consumer (false, the default).
    fn is_auth(&self) -> bool {
        false
    }

    /// Auth plugins: builds the lookup from credentials to consumers, once per configuration
    /// version; errors (a key used twice) go to `v` at the consumers' paths.
    fn consumer_index(
        &self,
        _creds: &[Credential<'_>],
        _v: &mut Validator,
    ) -> Option<Arc<dyn Any + Send + Sync>> {
        None
    }
}

/// Deserializes a plugin configuration, recording type errors with their paths in `v`.
pub fn parse_config<T: DeserializeOwned>(config: &Value, v: &mut Validator) -> Option<T> {
    let value = if config.is_null() {
        Value::Object(Default::default())
    } else {
        config.clone()
    };
    crate::check::parse_value(v, value)
}

/// One plugin in a chain.
#[derive(Clone)]
pub struct ChainEntry {
    /// Plugin name.
    pub name: &'static str,
    /// Effective priority (the factory's, or `_meta.priority`).
    pub priority: i32,
    /// The instance.
    pub plugin: Arc<dyn Plugin>,
}

impl std::fmt::Debug for ChainEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.name, self.priority)
    }
}

/// The plugins of a route (or a consumer), sorted by priority and split by phase at compile
/// time: nothing is sorted or looked up per request, and an empty phase costs nothing.
#[derive(Debug, Default, Clone)]
pub struct Chain {
    /// Every entry, highest priority first.
    pub all: Box<[ChainEntry]>,
    /// Entries with a rewrite phase.
    pub rewrite: Box<[ChainEntry]>,
    /// Entries with an access phase (sync or async).
    pub access: Box<[ChainEntry]>,
    /// Entries with a before_proxy phase.
    pub before_proxy: Box<[ChainEntry]>,
    /// Entries with a header_filter phase.
    pub header_filter: Box<[ChainEntry]>,
    /// Entries with a body_filter phase.
    pub body_filter: Box<[ChainEntry]>,
    /// Entries with a log phase.
    pub log: Box<[ChainEntry]>,
    /// Entries that may send a request elsewhere after an answer ([`Plugin::falls_back`]).
    pub fallback: Box<[ChainEntry]>,
    /// An entry reads the request body: it is read before the phases.
    pub needs_body: bool,
}

impl Chain {
    /// Sorts `entries` (highest priority first, then by name) and splits them by phase.
    pub fn new(mut entries: Vec<ChainEntry>) -> Chain {
        // A plugin that runs in no phase (`prometheus`, which only labels metrics) is not part
        // of the chain: a route whose only plugin it is keeps the plugin-free path.
        entries.retain(|e| e.plugin.phases() != Phases::default());
        entries.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.name.cmp(b.name)));
        let pick = |p: Phases| -> Box<[ChainEntry]> {
            entries
                .iter()
                .filter(|e| e.plugin.phases().contains(p))
                .cloned()
                .collect()
        };
        let access: Box<[ChainEntry]> = entries
            .iter()
            .filter(|e| {
                let ph = e.plugin.phases();
                ph.contains(Phases::ACCESS) || ph.contains(Phases::ACCESS_ASYNC)
            })
            .cloned()
            .collect();
        let rewrite: Box<[ChainEntry]> = entries
            .iter()
            .filter(|e| {
                let ph = e.plugin.phases();
                ph.contains(Phases::REWRITE) || ph.contains(Phases::REWRITE_ASYNC)
            })
            .cloned()
            .collect();
        // Filters that must see the others' result go last (stable: by priority among them).
        let last = |mut v: Box<[ChainEntry]>| -> Box<[ChainEntry]> {
            v.sort_by_key(|e| e.plugin.filters_last());
            v
        };
        Chain {
            needs_body: entries.iter().any(|e| e.plugin.needs_body()),
            rewrite,
            access,
            before_proxy: pick(Phases::BEFORE_PROXY),
            header_filter: last(pick(Phases::HEADER_FILTER)),
            body_filter: last(pick(Phases::BODY_FILTER)),
            log: pick(Phases::LOG),
            fallback: entries
                .iter()
                .filter(|e| e.plugin.falls_back())
                .cloned()
                .collect(),
            all: entries.into(),
        }
    }

    /// True when the chain has no plugin at all.
    pub fn is_empty(&self) -> bool {
        self.all.is_empty()
    }

    /// True when an entry with this name is in the chain.
    pub fn has(&self, name: &str) -> bool {
        self.all.iter().any(|e| e.name == name)
    }
}

/// Walks `route` and `consumer` entries together by priority; a route entry whose plugin the
/// consumer also configures is skipped (the consumer's configuration wins, as in APISIX).
pub fn merged<'a>(
    route: &'a [ChainEntry],
    consumer: &'a [ChainEntry],
    consumer_all: &'a [ChainEntry],
) -> impl Iterator<Item = &'a ChainEntry> + 'a {
    let mut r = route
        .iter()
        .filter(move |e| !consumer_all.iter().any(|c| c.name == e.name))
        .peekable();
    let mut c = consumer.iter().peekable();
    // Filters that run last (compressors) after every other, then by priority.
    let key = |e: &ChainEntry| (!e.plugin.filters_last(), e.priority);
    std::iter::from_fn(move || match (r.peek(), c.peek()) {
        (Some(a), Some(b)) if key(b) > key(a) => c.next(),
        (Some(_), _) => r.next(),
        (None, _) => c.next(),
    })
}

/// The index name under which the compiler offers [`ConsumerNames`] (not a plugin's name).
pub const CONSUMER_NAMES: &str = "@consumers";

/// Consumers by username (their index in the snapshot's consumer table), for plugins that
/// name one (`anonymous_consumer`). Offered when compiling, not when only checking.
#[derive(Debug, Default)]
pub struct ConsumerNames(pub std::collections::HashMap<Box<str>, u32>);

/// Accessor for [`Any`] indexes: downcasts or returns `None`.
pub fn index_as<T: Any + Send + Sync>(idx: Option<Arc<dyn Any + Send + Sync>>) -> Option<Arc<T>> {
    idx.and_then(|a| a.downcast::<T>().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Probe(bool);

    impl Plugin for Probe {
        fn phases(&self) -> Phases {
            Phases::BODY_FILTER
        }
        fn filters_last(&self) -> bool {
            self.0
        }
    }

    fn entry(name: &'static str, priority: i32, last: bool) -> ChainEntry {
        ChainEntry {
            name,
            priority,
            plugin: Arc::new(Probe(last)),
        }
    }

    #[test]
    fn filters_that_run_last_stay_last_when_a_consumers_plugins_join() {
        let route = Chain::new(vec![entry("gzip", 995, true), entry("low", 10, false)]);
        let consumer = Chain::new(vec![entry("rewrite", 899, false)]);
        let order: Vec<&str> = merged(&route.body_filter, &consumer.body_filter, &consumer.all)
            .map(|e| e.name)
            .collect();
        assert_eq!(order, ["rewrite", "low", "gzip"]);
        // And a consumer's compressor after the route's filters.
        let route = Chain::new(vec![entry("rewrite", 899, false)]);
        let consumer = Chain::new(vec![entry("gzip", 995, true)]);
        let order: Vec<&str> = merged(&route.body_filter, &consumer.body_filter, &consumer.all)
            .map(|e| e.name)
            .collect();
        assert_eq!(order, ["rewrite", "gzip"]);
    }
}
