//! What every logger shares (APISIX's `log-util` and `batch-processor-manager`): the fields
//! common to them all, the log entry (APISIX's full log, or `log_format` from the plugin or its
//! `plugin_metadata`, with `log_format_extra`), the request and response bodies when asked
//! for, and the batch processor (`batch.rs`) that takes entries off the request path. A logger
//! is its own file with its own fields and a [`Sink`]; [`build`] does the rest.
//!
//! The common fields: `name`, `batch_max_size` (1000), `inactive_timeout` (5 s),
//! `buffer_duration` (60 s), `max_retry_count` (0), `retry_delay` (1 s), `log_format`,
//! `log_format_extra`, `include_req_body`, `include_req_body_expr`, `include_resp_body`,
//! `include_resp_body_expr`, `max_req_body_bytes` and `max_resp_body_bytes` (512 KiB). The
//! metadata: `log_format`, `log_format_extra`, `max_pending_entries` (8192 per worker).

mod batch;
pub(crate) mod net;
mod sink;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Map, Value};
use sluice_config::Validator;
use sluice_core::expr::{Expr, Responded};
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, Done, Phases, ResponseView, Timing, parse_config};
use sluice_core::vars::Var;
use sluice_core::{Ctx, Plugin};

pub(crate) use batch::Batching;
pub use batch::render_metrics;
pub(crate) use sink::{Failed, Logged, Sink};

use crate::util::{Num, text, whole_field};

/// The fields every logger has besides its own.
const COMMON: &[&str] = &[
    "name",
    "batch_max_size",
    "inactive_timeout",
    "buffer_duration",
    "max_retry_count",
    "retry_delay",
    "log_format",
    "log_format_extra",
    "include_req_body",
    "include_req_body_expr",
    "include_resp_body",
    "include_resp_body_expr",
    "max_req_body_bytes",
    "max_resp_body_bytes",
    "match",
];

/// The fields every logger has (see the module's documentation).
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Common {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    batch_max_size: Option<Num>,
    #[serde(default)]
    inactive_timeout: Option<Num>,
    #[serde(default)]
    buffer_duration: Option<Num>,
    #[serde(default)]
    max_retry_count: Option<Num>,
    #[serde(default)]
    retry_delay: Option<Num>,
    #[serde(default)]
    log_format: Option<Map<String, Value>>,
    #[serde(default)]
    log_format_extra: Option<Map<String, Value>>,
    #[serde(default)]
    include_req_body: bool,
    #[serde(default)]
    include_req_body_expr: Option<Value>,
    #[serde(default)]
    include_resp_body: bool,
    #[serde(default)]
    include_resp_body_expr: Option<Value>,
    #[serde(default)]
    max_req_body_bytes: Option<Num>,
    #[serde(default)]
    max_resp_body_bytes: Option<Num>,
    /// Log only requests one of these `vars` expressions holds for.
    #[serde(default, rename = "match")]
    only: Option<Vec<Value>>,
}

/// A logger's `plugin_metadata`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Metadata {
    #[serde(default)]
    log_format: Option<Map<String, Value>>,
    #[serde(default)]
    log_format_extra: Option<Map<String, Value>>,
    #[serde(default)]
    max_pending_entries: Option<Num>,
}

/// A logger's metadata, checked.
#[derive(Default)]
pub(crate) struct Meta {
    format: Option<Format>,
    extra: Option<Format>,
    max_pending: usize,
    /// The logger's own metadata fields ([`Kind::metadata`]), checked by [`Kind::check_metadata`].
    pub(crate) own: Map<String, Value>,
}

/// APISIX's largest bodies logged by default.
const MAX_BODY: u64 = 512 * 1024;

/// APISIX's deepest `log_format`.
const MAX_DEPTH: usize = 5;

/// A logger's JSON schema: its own fields and the common ones.
pub(crate) fn schema<T: schemars::JsonSchema>() -> Value {
    let mut own = crate::util::schema_of::<T>();
    let common = crate::util::schema_of::<Common>();
    if let (Some(p), Some(c)) = (
        own.get_mut("properties").and_then(Value::as_object_mut),
        common.get("properties").and_then(Value::as_object),
    ) {
        for (k, v) in c {
            p.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    own
}

/// Checks a logger's `plugin_metadata` (`v` points at the item).
pub(crate) fn check_metadata(kind: &Kind, fields: &Map<String, Value>, v: &mut Validator) {
    let _ = metadata_of(kind, fields, v);
}

/// The metadata's formats and queue bound, and the logger's own fields; errors at their fields.
fn metadata_of(kind: &Kind, fields: &Map<String, Value>, v: &mut Validator) -> Option<Meta> {
    let mut fields = fields.clone();
    fields.remove("id");
    let mut own = Map::new();
    for k in kind.metadata {
        if let Some(x) = fields.remove(*k) {
            own.insert((*k).to_owned(), x);
        }
    }
    let m: Metadata = parse_config(&Value::Object(fields), v)?;
    if let Some(check) = kind.check_metadata
        && !check(&own, v)
    {
        return None;
    }
    let format = m
        .log_format
        .as_ref()
        .filter(|f| !f.is_empty())
        .map(|f| v.field("log_format", |v| Format::compile(f, 1, v)));
    let extra = m
        .log_format_extra
        .as_ref()
        .filter(|f| !f.is_empty())
        .map(|f| v.field("log_format_extra", |v| Format::compile(f, 1, v)));
    let pending = whole_field(
        "max_pending_entries",
        m.max_pending_entries,
        8192,
        (1, 10_000_000),
        "",
        v,
    );
    Some(Meta {
        format: checked(format)?,
        extra: checked(extra)?,
        max_pending: pending? as usize,
        own,
    })
}

/// An optional field that was checked: None when it was there and wrong.
fn checked<T>(field: Option<Option<T>>) -> Option<Option<T>> {
    field.map(|f| f.ok_or(())).transpose().ok()
}

/// The common fields and the rest of a logger's configuration (its own fields, for the
/// logger to parse).
fn split(config: &Value) -> (Value, Value) {
    let mut own = match config {
        Value::Object(m) => m.clone(),
        _ => return (Value::Null, config.clone()),
    };
    let mut common = Map::new();
    for k in COMMON {
        if let Some(v) = own.remove(*k) {
            common.insert((*k).to_owned(), v);
        }
    }
    (Value::Object(common), Value::Object(own))
}

/// Checks a logger's own metadata fields (`v` points at the item); false when one is wrong.
pub(crate) type MetadataCheck = fn(&Map<String, Value>, &mut Validator) -> bool;

/// What a logger is: its name and priority, its batch processor's default `name`, and what
/// differs from the others.
pub(crate) struct Kind {
    pub(crate) plugin: &'static str,
    pub(crate) priority: i32,
    /// APISIX's `encrypt_fields`.
    pub(crate) encrypted: &'static [&'static str],
    pub(crate) default_name: &'static str,
    /// What an entry of a request no route matched has as `route_id` (http-logger's
    /// `no-matched`), if anything.
    pub(crate) unmatched_route: Option<&'static str>,
    /// The defaults of `batch_max_size` and `inactive_timeout` (APISIX's: 1000 and 5).
    pub(crate) batch: (u64, u64),
    /// Its own `plugin_metadata` fields beside the loggers' (file-logger's `path`).
    pub(crate) metadata: &'static [&'static str],
    /// Whether `log_format` and `log_format_extra` shape its entries (datadog reads the
    /// full entry only, and refuses them).
    pub(crate) formats: bool,
    /// Checks them (`v` points at the metadata item); false when one is wrong.
    pub(crate) check_metadata: Option<MetadataCheck>,
}

impl Kind {
    /// A logger with APISIX's usual defaults: nothing encrypted, batches of 1000 or after 5
    /// seconds, no metadata of its own.
    pub(crate) const fn named(
        plugin: &'static str,
        priority: i32,
        default_name: &'static str,
    ) -> Kind {
        Kind {
            plugin,
            priority,
            encrypted: &[],
            default_name,
            unmatched_route: None,
            batch: (1000, 5),
            metadata: &[],
            check_metadata: None,
            formats: true,
        }
    }
}

/// A logger's own part of the configuration turned into its sink (errors recorded at the
/// fields' paths), with the bytes it lets wait per worker if it bounds them.
pub(crate) type Own =
    fn(&Value, &Given<'_>, &mut Validator) -> Option<(Arc<dyn Sink>, Option<usize>)>;

/// What a logger's own part is built with besides its fields.
pub(crate) struct Given<'a> {
    /// `batch_max_size`.
    pub(crate) batch_max_size: usize,
    /// The path patterns of the route the logger is on (none elsewhere).
    pub(crate) route_paths: Vec<String>,
    /// Its `plugin_metadata`, checked.
    pub(crate) metadata: &'a Meta,
    /// `include_req_body`: the bytes of the body kept (`max_req_body_bytes`).
    pub(crate) req_body: Option<usize>,
}

/// Validates a logger's configuration and builds it: the common fields here, its own by
/// `own`, given the configuration without the common fields. `own` also says how many bytes
/// may wait per worker (syslog's `drop_limit`), if it bounds them.
pub(crate) fn build(
    kind: &Kind,
    config: &Value,
    cx: &BuildCx<'_>,
    v: &mut Validator,
    own: Own,
) -> Option<Arc<dyn Plugin>> {
    if !config.is_object() && !config.is_null() {
        v.error("must be an object");
        return None;
    }
    let (common, rest) = split(config);
    let c: Common = parse_config(&common, v)?;
    let size = c
        .batch_max_size
        .and_then(Num::whole)
        .map_or(kind.batch.0 as usize, |n| n.clamp(1, 1_000_000) as usize);
    let metadata = match cx.metadata(kind.plugin) {
        Some(m) => v.field("plugin_metadata", |v| metadata_of(kind, m, v))?,
        None => Meta {
            max_pending: 8192,
            ..Meta::default()
        },
    };
    let given = Given {
        batch_max_size: size,
        route_paths: cx
            .route_paths
            .iter()
            .map(|p| p.as_str().to_owned())
            .collect(),
        metadata: &metadata,
        req_body: c.include_req_body.then(|| {
            c.max_req_body_bytes
                .and_then(Num::whole)
                .map_or(MAX_BODY as usize, |n| n.clamp(1, 1 << 30) as usize)
        }),
    };
    let sink = own(&rest, &given, v);
    let mut num = |field: &str, n: Option<Num>, default: u64, lo: u64, hi: u64, unit: &str| {
        whole_field(field, n, default, (lo, hi), unit, v)
    };
    let max_size = num("batch_max_size", c.batch_max_size, 1000, 1, 1_000_000, "");
    let inactive = num(
        "inactive_timeout",
        c.inactive_timeout,
        5,
        1,
        86_400,
        " seconds",
    );
    let buffer = num(
        "buffer_duration",
        c.buffer_duration,
        60,
        1,
        86_400,
        " seconds",
    );
    let retries = num("max_retry_count", c.max_retry_count, 0, 0, 1_000_000, "");
    let retry_delay = num("retry_delay", c.retry_delay, 1, 0, 86_400, " seconds");
    let max_req = num(
        "max_req_body_bytes",
        c.max_req_body_bytes,
        MAX_BODY,
        1,
        1 << 30,
        "",
    );
    let max_resp = num(
        "max_resp_body_bytes",
        c.max_resp_body_bytes,
        MAX_BODY,
        1,
        1 << 30,
        "",
    );
    let format = c
        .log_format
        .as_ref()
        .map(|f| v.field("log_format", |v| Format::compile(f, 1, v)));
    let extra = c
        .log_format_extra
        .as_ref()
        .map(|f| v.field("log_format_extra", |v| Format::compile(f, 1, v)));
    let req_expr = c
        .include_req_body_expr
        .as_ref()
        .map(|e| v.field("include_req_body_expr", |v| Expr::parse(e, v)));
    let resp_expr = c
        .include_resp_body_expr
        .as_ref()
        .map(|e| v.field("include_resp_body_expr", |v| Expr::parse(e, v)));
    let only = c.only.as_ref().map(|list| {
        v.field("match", |v| {
            let mut ok = true;
            let mut out = Vec::with_capacity(list.len());
            for (i, e) in list.iter().enumerate() {
                match v.index(i, |v| Expr::parse(e, v)) {
                    Some(e) => out.push(e),
                    None => ok = false,
                }
            }
            ok.then_some(out)
        })
    });
    let name = c.name.unwrap_or_else(|| kind.default_name.to_owned());
    let batching = Batching {
        name,
        max_size: max_size? as usize,
        inactive: Duration::from_secs(inactive?),
        buffer_duration: Duration::from_secs(buffer?),
        retries: retries? as u32,
        retry_delay: Duration::from_secs(retry_delay?),
        max_pending: metadata.max_pending,
        max_pending_bytes: usize::MAX,
    };
    if !kind.formats {
        for (field, set) in [
            ("log_format", c.log_format.is_some()),
            ("log_format_extra", c.log_format_extra.is_some()),
        ] {
            if set {
                v.error_at(field, format!("{} has no {field}", kind.plugin));
                return None;
            }
        }
    }
    let metadata_format = metadata.format.filter(|_| kind.formats);
    let metadata_extra = metadata.extra.filter(|_| kind.formats);
    let format = checked(format)?.or(metadata_format);
    // The route's own `log_format_extra` wins, even empty, over the metadata's.
    let extra = checked(extra)?.or(metadata_extra);
    let only = checked(only)?;
    let (req_expr, resp_expr) = (checked(req_expr)?, checked(resp_expr)?);
    let (max_req, max_resp, (sink, max_bytes)) = (max_req?, max_resp?, sink?);
    let mut batching = batching;
    if let Some(b) = max_bytes {
        batching.max_pending_bytes = b;
    }
    let shape = Shape {
        format,
        extra: extra.filter(|e| !e.0.is_empty()),
        req_body: c.include_req_body.then_some((req_expr, max_req as usize)),
        max_req_body: max_req as usize,
        resp_body: c
            .include_resp_body
            .then_some((resp_expr, max_resp as usize)),
        unmatched_route: kind.unmatched_route,
        only,
    };
    Some(Arc::new(Logger {
        processor: Arc::new(batch::Processor::new(kind.plugin, batching, sink)),
        shape,
        _timing: sluice_core::plugin::want_timing(),
    }))
}

/// A compiled `log_format`: keys and what each holds.
#[derive(Debug, Clone)]
struct Format(Vec<(String, Field)>);

#[derive(Debug, Clone)]
enum Field {
    /// `"$name"`: a variable (absent when it has no value).
    Var(Var),
    /// `"$request_body"`.
    RequestBody,
    /// Anything else, as written.
    Const(Value),
    /// An object of fields.
    Nested(Format),
    /// An array of fields (`"$var"` read in it as in an object).
    List(Vec<Field>),
}

impl Field {
    /// A value of `log_format` at nesting `depth` (1: the top object's values). Past APISIX's
    /// depth, an object or array is written `{}`, as APISIX does.
    fn compile(value: &Value, depth: usize, v: &mut Validator) -> Option<Field> {
        match value {
            Value::String(s) if s.starts_with('$') => match &s[1..] {
                "request_body" => Some(Field::RequestBody),
                name => match Var::parse(name) {
                    Ok(var) => Some(Field::Var(var)),
                    Err(e) => {
                        v.error(e);
                        None
                    }
                },
            },
            Value::Object(_) | Value::Array(_) if depth >= MAX_DEPTH => {
                Some(Field::Const(Value::Object(Map::new())))
            }
            Value::Object(m) => Format::compile(m, depth + 1, v).map(Field::Nested),
            Value::Array(a) => {
                let mut ok = true;
                let mut out = Vec::with_capacity(a.len());
                for (i, x) in a.iter().enumerate() {
                    match v.index(i, |v| Field::compile(x, depth + 1, v)) {
                        Some(f) => out.push(f),
                        None => ok = false,
                    }
                }
                ok.then_some(Field::List(out))
            }
            other => Some(Field::Const(other.clone())),
        }
    }

    fn reads_body(&self) -> bool {
        match self {
            Field::RequestBody => true,
            Field::Var(v) => matches!(v, Var::Body(_)),
            Field::Nested(n) => n.reads_body(),
            Field::List(l) => l.iter().any(Field::reads_body),
            Field::Const(_) => false,
        }
    }

    /// Its value for a request; None: a variable without one.
    fn render(
        &self,
        req: &RequestHead,
        env: &Responded<'_, Ctx<'_>>,
        body: &BodyText<'_>,
    ) -> Option<Value> {
        match self {
            Field::Var(Var::SentHeader(h)) => body.sent.and_then(|m| m.get(h)).cloned(),
            Field::Var(var) => var.value(req, env).map(|b| Value::String(text(&b))),
            Field::RequestBody => body.get(),
            Field::Const(c) => Some(c.clone()),
            Field::Nested(f) => Some(Value::Object(f.render(req, env, body))),
            Field::List(l) => Some(Value::Array(
                l.iter()
                    .map(|f| f.render(req, env, body).unwrap_or(Value::Null))
                    .collect(),
            )),
        }
    }
}

impl Format {
    fn compile(f: &Map<String, Value>, depth: usize, v: &mut Validator) -> Option<Format> {
        let mut out = Vec::with_capacity(f.len());
        let mut ok = true;
        for (k, value) in f {
            match v.field(k, |v| Field::compile(value, depth, v)) {
                Some(field) => out.push((k.clone(), field)),
                None => ok = false,
            }
        }
        ok.then_some(Format(out))
    }

    fn render(
        &self,
        req: &RequestHead,
        env: &Responded<'_, Ctx<'_>>,
        body: &BodyText<'_>,
    ) -> Map<String, Value> {
        let mut out = Map::with_capacity(self.0.len() + 2);
        for (k, field) in &self.0 {
            if let Some(value) = field.render(req, env, body) {
                out.insert(k.clone(), value);
            }
        }
        out
    }
}

/// What an entry reads beside the variables: the request body (cut at the logger's limit)
/// and the response's fields the header filter kept (`sent_http_*`).
struct BodyText<'a> {
    cx: &'a Ctx<'a>,
    max: usize,
    sent: Option<&'a Map<String, Value>>,
}

impl BodyText<'_> {
    fn get(&self) -> Option<Value> {
        let raw = self.cx.body()?.raw()?;
        Some(Value::String(text(&raw[..raw.len().min(self.max)])))
    }
}

/// What an entry holds.
struct Shape {
    format: Option<Format>,
    extra: Option<Format>,
    /// `include_req_body`: its condition and limit.
    req_body: Option<(Option<Expr>, usize)>,
    /// `max_req_body_bytes` (`$request_body` is cut there too).
    max_req_body: usize,
    /// `include_resp_body`: its condition and limit.
    resp_body: Option<(Option<Expr>, usize)>,
    unmatched_route: Option<&'static str>,
    /// `match`: only requests one of these holds for are logged.
    only: Option<Vec<Expr>>,
}

/// A logger: builds each request's entry in the log phase and queues it.
struct Logger {
    processor: Arc<batch::Processor>,
    shape: Shape,
    _timing: Timing,
}

/// What each logger of a request (a route's and a global rule's may both run) kept of the
/// response, by its processor.
#[derive(Default)]
struct Captures(Vec<(u64, Captured)>);

const CAPTURES: &str = "logger";

/// The response as the log phase sees it: what the header and body filters kept.
#[derive(Default)]
struct Captured {
    headers: Map<String, Value>,
    /// The body so far, while it is collected.
    body: Option<Vec<u8>>,
}

impl Plugin for Logger {
    fn phases(&self) -> Phases {
        let mut p = Phases::LOG;
        if self.keeps_headers() || self.shape.resp_body.is_some() {
            p = p.with(Phases::HEADER_FILTER);
        }
        if self.shape.resp_body.is_some() {
            p = p.with(Phases::BODY_FILTER);
        }
        p
    }

    fn needs_body(&self) -> bool {
        let sh = &self.shape;
        sh.req_body.is_some()
            || sh.format.as_ref().is_some_and(Format::reads_body)
            || sh.extra.as_ref().is_some_and(Format::reads_body)
            || [&sh.req_body, &sh.resp_body]
                .into_iter()
                .flatten()
                .any(|(e, _)| e.as_ref().is_some_and(Expr::needs_body))
            || sh.only.iter().flatten().any(Expr::needs_body)
    }

    fn header_filter(&self, req: &RequestHead, resp: ResponseView<'_>, cx: &mut Ctx<'_>) {
        let collect = match &self.shape.resp_body {
            Some((None, _)) => true,
            Some((Some(e), _)) => {
                let env = Responded {
                    env: &*cx,
                    status: resp.status(),
                    done: None,
                };
                e.matches(req, &env)
            }
            None => false,
        };
        let mut headers = Map::new();
        if self.keeps_headers() {
            resp.each_header(|n, v| {
                let mut name = text(n);
                name.make_ascii_lowercase();
                crate::util::insert(&mut headers, name, text(v));
            });
        }
        let c = self.captured(cx);
        c.headers = headers;
        c.body = collect.then(Vec::new);
    }

    /// Only while it keeps the response's body (`include_resp_body`, its condition held).
    fn filters_body(&self, cx: &Ctx<'_>) -> bool {
        self.kept(cx).is_some_and(|c| c.body.is_some())
    }

    fn body_filter(&self, chunk: &mut Bytes, _eos: bool, cx: &mut Ctx<'_>) {
        let max = self.shape.resp_body.as_ref().map_or(0, |r| r.1);
        if let Some(body) = self.captured(cx).body.as_mut() {
            let room = max.saturating_sub(body.len());
            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        }
    }

    fn log(&self, req: &RequestHead, done: &Done, cx: &Ctx<'_>) {
        if let Some(only) = &self.shape.only {
            let env = Responded::logged(cx, done);
            if !only.iter().any(|e| e.matches(req, &env)) {
                return;
            }
        }
        let entry = self.entry(req, done, cx);
        let env = Responded::logged(cx, done);
        let logged = Logged {
            entry,
            custom: self.shape.format.is_some(),
            req,
            env: &env,
        };
        let bytes = self.processor.sink().envelope(logged);
        self.processor.push(Bytes::from(bytes));
    }
}

impl Format {
    fn reads_body(&self) -> bool {
        self.0.iter().any(|(_, f)| f.reads_body())
    }

    /// True when it reads the response's fields (`$sent_http_*`).
    fn reads_sent(&self) -> bool {
        fn sent(f: &Field) -> bool {
            match f {
                Field::Var(Var::SentHeader(_)) => true,
                Field::Nested(n) => n.reads_sent(),
                Field::List(l) => l.iter().any(sent),
                _ => false,
            }
        }
        self.0.iter().any(|(_, f)| sent(f))
    }
}

impl Logger {
    /// Whether its entries read the response's fields: the full entry, or `$sent_http_*`.
    fn keeps_headers(&self) -> bool {
        let sh = &self.shape;
        sh.format.as_ref().is_none_or(Format::reads_sent)
            || sh.extra.as_ref().is_some_and(Format::reads_sent)
    }

    /// What this logger kept of the request's response, in the log phase.
    fn kept<'c>(&self, cx: &'c Ctx<'_>) -> Option<&'c Captured> {
        let all = cx.slot_ref::<Captures>(CAPTURES)?;
        all.0
            .iter()
            .find(|(id, _)| *id == self.processor.id())
            .map(|(_, c)| c)
    }

    /// What this logger keeps of the request's response.
    fn captured<'c>(&self, cx: &'c mut Ctx<'_>) -> &'c mut Captured {
        let id = self.processor.id();
        let all = &mut cx.slot::<Captures>(CAPTURES).0;
        let i = match all.iter().position(|(i, _)| *i == id) {
            Some(i) => i,
            None => {
                all.push((id, Captured::default()));
                all.len() - 1
            }
        };
        &mut all[i].1
    }

    /// The request's log entry.
    fn entry(&self, req: &RequestHead, done: &Done, cx: &Ctx<'_>) -> Map<String, Value> {
        let env = Responded::logged(cx, done);
        let sent = self.kept(cx).map(|c| &c.headers);
        let body = BodyText {
            cx,
            max: self.shape.max_req_body,
            sent,
        };
        let route_id = Some(cx.route_id())
            .filter(|r| !r.is_empty())
            .or(self.shape.unmatched_route);
        let mut entry = match &self.shape.format {
            Some(f) => {
                let mut e = f.render(req, &env, &body);
                if !cx.service_id().is_empty() {
                    e.insert("service_id".into(), cx.service_id().into());
                }
                if let Some(r) = route_id {
                    e.insert("route_id".into(), r.into());
                }
                e
            }
            None => self.full(req, done, cx, &env, &body, route_id),
        };
        if let Some(extra) = &self.shape.extra
            && self.shape.format.is_none()
        {
            for (k, value) in extra.render(req, &env, &body) {
                entry.entry(k).or_insert(value);
            }
        }
        entry
    }

    /// APISIX's full log (`log-util.get_full_log`).
    fn full(
        &self,
        req: &RequestHead,
        done: &Done,
        cx: &Ctx<'_>,
        env: &Responded<'_, Ctx<'_>>,
        body: &BodyText<'_>,
        route_id: Option<&str>,
    ) -> Map<String, Value> {
        let var = |v: Var| v.value(req, env).map(|b| text(&b)).unwrap_or_default();
        let captured = self.kept(cx);
        let url = format!(
            "{}://{}:{}{}",
            var(Var::Scheme),
            var(Var::Host),
            cx.server().port(),
            text(req.original_target())
        );
        let mut request = Map::new();
        request.insert("url".into(), url.into());
        request.insert("uri".into(), text(req.original_target()).into());
        request.insert("method".into(), text(req.method_bytes()).into());
        request.insert("headers".into(), crate::util::headers_object(req));
        request.insert(
            "querystring".into(),
            crate::util::args_object(req.query().unwrap_or_default()),
        );
        request.insert(
            "size".into(),
            (req.raw().len() as u64 + done.bytes_received).into(),
        );
        if let Some((cond, _)) = &self.shape.req_body
            && cond.as_ref().is_none_or(|e| e.matches(req, env))
            && let Some(b) = body.get()
        {
            request.insert("body".into(), b);
        }
        let mut response = Map::new();
        response.insert("status".into(), done.status.into());
        response.insert(
            "headers".into(),
            Value::Object(captured.map(|c| c.headers.clone()).unwrap_or_default()),
        );
        response.insert("size".into(), done.bytes_sent.into());
        if let Some(b) = captured.and_then(|c| c.body.as_ref()) {
            response.insert("body".into(), text(b).into());
        }
        let mut server = Map::new();
        server.insert("hostname".into(), hostname().into());
        server.insert("version".into(), env!("CARGO_PKG_VERSION").into());
        let mut e = Map::new();
        e.insert("request".into(), request.into());
        e.insert("response".into(), response.into());
        e.insert("server".into(), server.into());
        if let Some(up) = cx.upstream_addr() {
            e.insert("upstream".into(), up.to_string().into());
        }
        let service_id = if route_id.is_some() && !cx.route_id().is_empty() {
            cx.service_id().to_owned()
        } else {
            var(Var::Host)
        };
        e.insert("service_id".into(), service_id.into());
        if let Some(r) = route_id {
            e.insert("route_id".into(), r.into());
        }
        if let Some(name) = cx.consumer_name() {
            let mut c = Map::new();
            c.insert("username".into(), name.into());
            e.insert("consumer".into(), c.into());
        }
        e.insert("client_ip".into(), cx.client().ip().to_string().into());
        let now = sluice_core::clock::now();
        let elapsed = Duration::from_nanos(done.elapsed_ns.unwrap_or(0));
        let start_ms = now.saturating_sub(elapsed).as_millis() as u64;
        e.insert("start_time".into(), start_ms.into());
        let latency = elapsed.as_secs_f64() * 1000.0;
        e.insert("latency".into(), number(latency));
        match done.upstream {
            Some((_, ns)) => {
                let up = ns as f64 / 1e6;
                e.insert("upstream_latency".into(), number(up));
                e.insert("apisix_latency".into(), number((latency - up).max(0.0)));
            }
            None => {
                e.insert("apisix_latency".into(), number(latency));
            }
        }
        e
    }
}

/// A JSON number of milliseconds, to the microsecond.
fn number(ms: f64) -> Value {
    serde_json::Number::from_f64((ms * 1000.0).round() / 1000.0).map_or(Value::Null, Value::Number)
}

/// This machine's name, read once.
pub(crate) fn hostname() -> &'static str {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_owned())
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "localhost".into())
    })
}

#[cfg(test)]
mod tests;

/// A logger's `PluginFactory`, from its [`Kind`], its own configuration's type (for the
/// schema) and its [`Own`] function: `crate::logger::factory!(KIND, Config, own);`.
macro_rules! factory {
    ($kind:expr, $config:ty, $own:expr) => {
        pub(crate) struct Factory;

        impl sluice_core::plugin::PluginFactory for Factory {
            fn name(&self) -> &'static str {
                $kind.plugin
            }

            fn priority(&self) -> i32 {
                $kind.priority
            }

            fn schema(&self) -> Option<serde_json::Value> {
                Some(crate::logger::schema::<$config>())
            }

            fn encrypted_fields(&self) -> &'static [&'static str] {
                $kind.encrypted
            }

            fn check_metadata(
                &self,
                fields: &serde_json::Map<String, serde_json::Value>,
                v: &mut sluice_config::Validator,
            ) {
                crate::logger::check_metadata(&$kind, fields, v);
            }

            fn build(
                &self,
                config: &serde_json::Value,
                cx: &mut sluice_core::plugin::BuildCx<'_>,
                v: &mut sluice_config::Validator,
            ) -> Option<std::sync::Arc<dyn sluice_core::Plugin>> {
                crate::logger::build(&$kind, config, cx, v, $own)
            }
        }
    };
}
pub(crate) use factory;
