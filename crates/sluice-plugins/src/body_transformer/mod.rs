//! `body-transformer`: rewrites the request body before it goes upstream and the response body
//! before it reaches the client, through a template, as APISIX's `body-transformer`.
//!
//! `{request: {template, input_format, template_is_base64}, response: {...},
//! max_req_body_size: 67108864, max_resp_body_size: 67108864}`, at least one of the two.
//! Templates are APISIX's: lua-resty-template's syntax (`{{expr}}` escaped for HTML,
//! `{*expr*}` raw, `{% lua %}`), over the decoded body (`json`, `xml` as xml2lua's tree,
//! `encoded`, `args`, `multipart`, `plain`), with `_body`, `_ctx.var.<name>`, `_escape_json`
//! and `_escape_xml`. To run them as APISIX does, Sluice runs the same template library
//! (vendored in `lua/`, see `lua/NOTICE.md`) in an embedded Lua 5.4 (the `mlua` crate), one
//! interpreter per worker thread, sandboxed (`lua/glue.lua`): a template sees its data, the
//! safe base functions and read-only views of `string`, `table`, `math` and `utf8`, and
//! nothing else (no `io`, `os`, `require`, `load`, `pcall`, `rawset`, `debug`, nor the
//! library itself), and nothing it can change is shared with other templates. A template
//! is compiled as text only and never read as a file name. Each decode and each render may
//! run at most [`BUDGET`] Lua instructions (nothing can catch the error that ends it) and
//! the interpreter may hold at most [`MEMORY`] bytes. XML is parsed in Rust (`xml.rs`,
//! linear time) into xml2lua's tree, because xml2lua's own parser has quadratic patterns.
//!
//! Differences from APISIX, each a choice: templates compile when the configuration loads
//! (a broken one is refused with its path, where APISIX answers 503 per request); `_ctx`
//! has only `var`, whose variables are the ones the template names literally
//! (`_ctx.var.arg_name`, `_ctx.var["status"]`), read when the phase starts; `_multipart` is
//! the table of fields, not the parser object; numbers print as Lua 5.4 prints them (a
//! whole number as `30`, a division's result as `1.5` or `2.0`); malformed XML is refused
//! where xml2lua guesses; a response whose template fails is sent as the node sent it
//! (APISIX sends only its last chunk).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use base64::Engine as _;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, Phases, PluginFactory, parse_config};
use sluice_core::vars::Var;
use sluice_core::{Ctx, Flow, Plugin, Response, ResponseView};

use crate::util::Num;

/// Lua instructions one decode or render may run (about a tenth of a second).
const BUDGET: u32 = 20_000_000;
/// How often the instruction hook runs.
const HOOK_EVERY: u32 = 10_000;
/// Bytes one worker's interpreter may hold.
const MEMORY: usize = 256 << 20;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    request: Option<TransformConfig>,
    #[serde(default)]
    response: Option<TransformConfig>,
    #[serde(default)]
    max_req_body_size: Option<Num>,
    #[serde(default)]
    max_resp_body_size: Option<Num>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct TransformConfig {
    template: String,
    #[serde(default)]
    input_format: Option<String>,
    #[serde(default)]
    template_is_base64: bool,
}

/// How a body is decoded for the template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Xml,
    Json,
    Encoded,
    Args,
    Plain,
    Multipart,
}

impl Format {
    fn parse(s: &str) -> Option<Format> {
        Some(match s {
            "xml" => Format::Xml,
            "json" => Format::Json,
            "encoded" => Format::Encoded,
            "args" => Format::Args,
            "plain" => Format::Plain,
            "multipart" => Format::Multipart,
            _ => return None,
        })
    }

    /// APISIX's `set_input_format`: by `Content-Type` when not configured.
    fn of_content_type(ct: &[u8]) -> Option<Format> {
        // As APISIX: `text/xml` and `application/json` as written, the others in any case.
        let has = |needle: &[u8]| ct.windows(needle.len()).any(|w| w == needle);
        let has_lower = |needle: &[u8]| {
            ct.windows(needle.len())
                .any(|w| w.eq_ignore_ascii_case(needle))
        };
        if has(b"text/xml") {
            Some(Format::Xml)
        } else if has(b"application/json") {
            Some(Format::Json)
        } else if has_lower(b"application/x-www-form-urlencoded") {
            Some(Format::Encoded)
        } else if has_lower(b"multipart/") {
            Some(Format::Multipart)
        } else {
            None
        }
    }
}

/// One direction's template.
struct Transform {
    /// Its key in each worker's compiled templates.
    id: u64,
    text: Arc<str>,
    /// The template decoded from base64, used when the request's input format is other than
    /// `encoded` and `args` (with no `input_format` configured).
    alt: Option<Arc<str>>,
    format: Option<Format>,
    /// The variables it reads as `_ctx.var.<name>`.
    vars: Vec<(Box<str>, Var)>,
    /// "request" or "response", in errors.
    side: &'static str,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

pub(crate) struct Factory;

impl PluginFactory for Factory {
    crate::util::describe!("body-transformer", 1080, Config);

    fn build(
        &self,
        config: &Value,
        _cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        if c.request.is_none() && c.response.is_none() {
            v.error("give request, response or both");
            return None;
        }
        let max_req = crate::util::body_size_field("max_req_body_size", c.max_req_body_size, v);
        let max_resp = crate::util::body_size_field("max_resp_body_size", c.max_resp_body_size, v);
        let mut ok = true;
        let mut side = |t: Option<TransformConfig>, name: &'static str, v: &mut Validator| {
            let t = t?;
            let built = v.field(name, |v| transform(t, name, v));
            ok &= built.is_some();
            built
        };
        let request = side(c.request, "request", v);
        let response = side(c.response, "response", v);
        (ok && max_req.is_some() && max_resp.is_some()).then(|| {
            Arc::new(BodyTransformer {
                request,
                response,
                max_req: max_req.unwrap_or_default(),
                max_resp: max_resp.unwrap_or_default(),
            }) as Arc<dyn Plugin>
        })
    }
}

/// Checks and compiles one direction's template.
fn transform(t: TransformConfig, side: &'static str, v: &mut Validator) -> Option<Transform> {
    let format = match t.input_format.as_deref() {
        None => None,
        Some(f) => match Format::parse(f) {
            Some(f) => Some(f),
            None => {
                v.error_at(
                    "input_format",
                    format!(
                        "unknown format \"{f}\", expected xml, json, encoded, args, plain or multipart"
                    ),
                );
                return None;
            }
        },
    };
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(t.template.trim())
        .ok()
        .and_then(|b| String::from_utf8(b).ok());
    let compiles = |text: &str| with_engine(|e| e.check(text)).and_then(|r| r);
    // APISIX decodes a template flagged as base64, and tries to whenever the request's input
    // format (configured, or found from its Content-Type) is other than `encoded` and `args`,
    // keeping the text when it is not base64.
    let (text, alt) = if t.template_is_base64 {
        match decoded {
            Some(s) => (s, None),
            None => {
                v.error_at("template", "template_is_base64 is set, but it is not base64 text");
                return None;
            }
        }
    } else {
        match format {
            Some(Format::Encoded | Format::Args) => (t.template, None),
            Some(_) => (decoded.unwrap_or(t.template), None),
            // Decided per request; a decoding that does not compile was not meant as base64.
            None => (t.template, decoded.filter(|d| compiles(d).is_ok())),
        }
    };
    if let Err(e) = compiles(&text) {
        v.error_at("template", format!("does not compile: {e}"));
        return None;
    }
    let mut vars = ctx_vars(&text);
    for extra in alt.as_deref().map(ctx_vars).unwrap_or_default() {
        if !vars.iter().any(|(n, _)| *n == extra.0) {
            vars.push(extra);
        }
    }
    Some(Transform {
        id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        text: text.into(),
        alt: alt.map(Into::into),
        format,
        vars,
        side,
    })
}

/// The variables a template names literally: `_ctx.var.name`, `_ctx.var["name"]`.
fn ctx_vars(text: &str) -> Vec<(Box<str>, Var)> {
    let mut out: Vec<(Box<str>, Var)> = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("_ctx.var") {
        rest = &rest[i + 8..];
        let name = if let Some(r) = rest.strip_prefix('.') {
            r
        } else if let Some(r) = rest
            .strip_prefix("[\"")
            .or_else(|| rest.strip_prefix("['"))
        {
            r
        } else {
            continue;
        };
        let end = name
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(name.len());
        let name = &name[..end];
        if name.is_empty() || out.iter().any(|(n, _)| &**n == name) {
            continue;
        }
        // A name the vocabulary lacks is nil, as an unknown NGINX variable in APISIX.
        if let Some(var) = Var::parse(name).ok().filter(|v| !v.needs_body()) {
            out.push((name.into(), var));
        }
    }
    out
}

struct BodyTransformer {
    request: Option<Transform>,
    response: Option<Transform>,
    max_req: u64,
    max_resp: u64,
}

/// What the response side keeps between its header and body filters.
#[derive(Default)]
struct Held {
    /// The response is transformed (the template and its input's format were decided).
    on: bool,
    format: Option<Format>,
    content_type: Option<Vec<u8>>,
    /// `_ctx.var` as read when the response head came, and the request's query (`args`).
    vars: Vec<(Box<str>, Option<String>)>,
    query: Vec<u8>,
    body: Vec<u8>,
    truncated: bool,
}

impl Plugin for BodyTransformer {
    fn phases(&self) -> Phases {
        let response = Phases::HEADER_FILTER.with(Phases::BODY_FILTER);
        match (self.request.is_some(), self.response.is_some()) {
            (true, false) => Phases::REWRITE,
            (false, _) => response,
            (true, true) => Phases::REWRITE.with(response),
        }
    }

    fn needs_body(&self) -> bool {
        self.request.is_some()
    }

    fn rewrite(&self, req: &mut RequestHead, cx: &mut Ctx<'_>) -> Flow {
        let Some(t) = &self.request else {
            return Flow::Continue;
        };
        let body = match cx.body().and_then(|b| b.raw()) {
            Some(b) if (b.len() as u64) <= self.max_req => b,
            _ => return Flow::Respond(Response::message(413, "request body too large")),
        };
        let get = req.method_bytes() == b"GET";
        let format = if get {
            Some(Format::Args)
        } else {
            t.format
                .or_else(|| Format::of_content_type(req.header("content-type")?))
        };
        let vars = read_vars(&t.vars, req, &*cx);
        let input = Input {
            // APISIX reads an empty body as none.
            body: (!body.is_empty()).then_some(body),
            get,
            format,
            content_type: req.header("content-type"),
            query: req.query().unwrap_or_default(),
            vars: &vars,
        };
        match run(t, &input) {
            Ok(out) => {
                cx.set_request_body(Bytes::from(out));
                Flow::Continue
            }
            Err((status, msg)) => {
                tracing::error!(route = cx.route_id(), error = %msg, "body-transformer");
                Flow::Respond(Response::message(status, &msg))
            }
        }
    }

    fn header_filter(&self, req: &RequestHead, resp: ResponseView<'_>, cx: &mut Ctx<'_>) {
        let Some(t) = &self.response else {
            return;
        };
        // Answers without a body keep it so (a template would render one from nothing).
        let status = resp.status();
        if req.method_bytes() == b"HEAD" || status < 200 || status == 204 || status == 304 {
            return;
        }
        let ct = resp.header("content-type");
        let format = t.format.or_else(|| ct.and_then(Format::of_content_type));
        let env = sluice_core::expr::Responded {
            env: &*cx,
            status: resp.status(),
            done: None,
        };
        let vars = read_vars(&t.vars, req, &env);
        let held = cx.slot::<Held>("body-transformer");
        *held = Held {
            on: true,
            format,
            content_type: ct.map(<[u8]>::to_vec),
            vars,
            // Only `args` reads the request's query from a response template.
            query: match format {
                Some(Format::Args) => req.query().unwrap_or_default().to_vec(),
                _ => Vec::new(),
            },
            ..Held::default()
        };
        // APISIX's `clear_header_as_body_modified`.
        for name in ["content-length", "content-encoding", "last-modified", "etag"] {
            cx.response.remove_header(name);
        }
    }

    fn body_filter(&self, chunk: &mut Bytes, eos: bool, cx: &mut Ctx<'_>) {
        let Some(t) = &self.response else {
            return;
        };
        let route = cx.route_id();
        let held = cx.slot::<Held>("body-transformer");
        if !held.on {
            return;
        }
        let room = (self.max_resp as usize).saturating_sub(held.body.len());
        if chunk.len() > room {
            held.truncated = true;
        }
        held.body
            .extend_from_slice(&chunk[..chunk.len().min(room)]);
        if !eos {
            *chunk = Bytes::new();
            return;
        }
        let held = std::mem::take(held);
        let input = Input {
            body: (!held.body.is_empty()).then_some(&held.body[..]),
            get: false,
            format: held.format,
            content_type: held.content_type.as_deref(),
            query: &held.query,
            vars: &held.vars,
        };
        *chunk = match run(t, &input) {
            Ok(out) => Bytes::from(out),
            Err((_, msg)) => {
                // Sent as the node sent it (up to `max_resp_body_size`).
                tracing::error!(route, error = %msg, "body-transformer: the response is sent untransformed");
                Bytes::from(held.body)
            }
        };
        if held.truncated {
            tracing::warn!(
                route,
                max = self.max_resp,
                "body-transformer: the response body was cut at max_resp_body_size"
            );
        }
    }
}

/// The `_ctx.var` values a template names.
fn read_vars<E: sluice_core::env::Env + ?Sized>(
    vars: &[(Box<str>, Var)],
    req: &RequestHead,
    env: &E,
) -> Vec<(Box<str>, Option<String>)> {
    vars.iter()
        .map(|(n, v)| {
            let value = v
                .value(req, env)
                .map(|b| String::from_utf8_lossy(&b).into_owned());
            (n.clone(), value)
        })
        .collect()
}

/// What one transformation reads.
struct Input<'a> {
    body: Option<&'a [u8]>,
    /// A GET request: decoded even without a body (its arguments).
    get: bool,
    format: Option<Format>,
    content_type: Option<&'a [u8]>,
    query: &'a [u8],
    vars: &'a [(Box<str>, Option<String>)],
}

thread_local! {
    /// Each worker thread's interpreter, made on first use.
    static ENGINE: RefCell<Option<Engine>> = const { RefCell::new(None) };
}

/// Runs `f` on this thread's interpreter (made on first use). Err: it could not start.
fn with_engine<R>(f: impl FnOnce(&mut Engine) -> R) -> Result<R, String> {
    ENGINE.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            let e = Engine::new().map_err(|e| format!("the Lua interpreter failed to start: {e}"))?;
            *slot = Some(e);
        }
        Ok(f(slot.as_mut().expect("made above")))
    })
}

/// Transforms one body. Err: the status and message to answer.
fn run(t: &Transform, input: &Input<'_>) -> Result<Vec<u8>, (u16, String)> {
    with_engine(|e| e.run(t, input)).map_err(|e| (503, e))?
}

/// A sandboxed Lua interpreter with the template libraries loaded.
struct Engine {
    lua: mlua::Lua,
    glue: mlua::Table,
    /// Compiled templates by [`Transform::id`].
    compiled: HashMap<u64, mlua::Function>,
    /// Hook calls left in the current run.
    left: std::rc::Rc<std::cell::Cell<u32>>,
}

impl Engine {
    fn new() -> mlua::Result<Engine> {
        use mlua::{HookTriggers, Lua, LuaOptions, StdLib, VmState};
        let lua = Lua::new_with(
            StdLib::TABLE | StdLib::STRING | StdLib::MATH | StdLib::UTF8,
            LuaOptions::default(),
        )?;
        let g = lua.globals();
        // No template may reach the string library through a string's metatable.
        lua.load("getmetatable('').__metatable = false").exec()?;
        // lua-resty-template keeps `io.write`/`io.open` at load; there is no `io` here.
        g.set("io", lua.create_table()?)?;
        let template = lua
            .load(include_str!("lua/template.lua"))
            .set_name("=template.lua")
            .eval::<mlua::Table>()?;
        let escape_json = lua.create_function(|lua, v: mlua::Value| {
            let json: Value = mlua::LuaSerdeExt::from_value(lua, v)?;
            Ok(json.to_string())
        })?;
        let raw_load: mlua::Function = g.get("load")?;
        let glue: mlua::Table = lua
            .load(include_str!("lua/glue.lua"))
            .set_name("=glue.lua")
            .call((template, escape_json, raw_load))?;
        // Templates see only glue.lua's SAFE table; the globals go too, in case.
        for name in [
            "io",
            "load",
            "dofile",
            "loadfile",
            "collectgarbage",
            "print",
            "require",
            "pcall",
            "xpcall",
            "rawset",
        ] {
            g.set(name, mlua::Nil)?;
        }
        g.get::<mlua::Table>("string")?.set("dump", mlua::Nil)?;
        let left = std::rc::Rc::new(std::cell::Cell::new(0u32));
        let counter = left.clone();
        // Nothing in the sandbox can catch the error (no pcall), so the run ends there.
        lua.set_hook(
            HookTriggers::new().every_nth_instruction(HOOK_EVERY),
            move |_, _| match counter.get() {
                0 => Err(mlua::Error::runtime(
                    "the template ran too long (more than 20 million Lua instructions)",
                )),
                n => {
                    counter.set(n - 1);
                    Ok(VmState::Continue)
                }
            },
        )?;
        lua.set_memory_limit(MEMORY)?;
        Ok(Engine {
            lua,
            glue,
            compiled: HashMap::new(),
            left,
        })
    }

    /// Whether `text` compiles.
    fn check(&mut self, text: &str) -> Result<(), String> {
        self.arm();
        let compile: mlua::Function = self.glue.get("compile").map_err(|e| e.to_string())?;
        compile
            .call::<mlua::Function>(text)
            .map(drop)
            .map_err(|e| {
                // `template:5: unexpected symbol near ')'`: the parser's complaint, about the
                // Lua the template became.
                let line = first_line(&e);
                match line.split_once("template:") {
                    Some((_, why)) => format!("in the Lua it becomes, line {why}"),
                    None => line,
                }
            })
    }

    fn arm(&self) {
        self.left.set(BUDGET / HOOK_EVERY);
    }

    /// Decodes the input and renders `t` over it. Err: the status and message to answer.
    fn run(&mut self, t: &Transform, input: &Input<'_>) -> Result<Vec<u8>, (u16, String)> {
        self.arm();
        let fail = |status: u16, what: &str, e: &mlua::Error| {
            (status, format!("{} {what}: {}", t.side, first_line(e)))
        };
        if self.compiled.len() > 1024 {
            // Templates of configurations gone; they are compiled again when next used.
            self.compiled.clear();
        }
        let (key, text) = match &t.alt {
            Some(alt) if input.format.is_some_and(|f| f != Format::Encoded && f != Format::Args) => {
                (t.id | 1 << 63, alt)
            }
            _ => (t.id, &t.text),
        };
        let render = match self.compiled.get(&key) {
            Some(f) => f.clone(),
            None => {
                let compile: mlua::Function = self
                    .glue
                    .get("compile")
                    .map_err(|e| fail(503, "template compile", &e))?;
                let f: mlua::Function = compile
                    .call(&**text)
                    .map_err(|e| fail(503, "template compile", &e))?;
                self.compiled.insert(key, f.clone());
                f
            }
        };
        let lua = &self.lua;
        let out = self
            .decode(input)
            .map_err(|e| fail(400, "body decode", &e))?;
        let (ctx, multipart) = self
            .context(input, &out)
            .map_err(|e| fail(503, "template rendering", &e))?;
        let body = match input.body {
            Some(b) => mlua::Value::String(lua.create_string(b).map_err(|e| fail(503, "template rendering", &e))?),
            None => mlua::Nil,
        };
        let table = match out {
            Some(mlua::Value::Table(t)) => t,
            // A decoded scalar (a JSON string or number body) is not a table to render over.
            _ => lua.create_table().map_err(|e| fail(503, "template rendering", &e))?,
        };
        // Decoding and rendering have a budget each.
        self.arm();
        let glue_render: mlua::Function = self
            .glue
            .get("render")
            .map_err(|e| fail(503, "template rendering", &e))?;
        let text: mlua::LuaString = glue_render
            .call((render, table, ctx, body, multipart))
            .map_err(|e| fail(503, "template rendering", &e))?;
        Ok(text.as_bytes().to_vec())
    }

    /// The body as the template's table (None: nothing decoded).
    fn decode(&self, input: &Input<'_>) -> mlua::Result<Option<mlua::Value>> {
        let format = match input.format {
            Some(f) if f != Format::Plain && (input.body.is_some() || input.get) => f,
            _ => return Ok(None),
        };
        let body = input.body.unwrap_or_default();
        let json = match format {
            Format::Json => serde_json::from_slice::<Value>(body).map_err(mlua::Error::external)?,
            Format::Encoded => crate::util::args_object(body),
            Format::Args => crate::util::args_object(input.query),
            Format::Multipart => {
                let ct = input
                    .content_type
                    .and_then(|c| std::str::from_utf8(c).ok())
                    .unwrap_or_default();
                sluice_core::body::multipart(Bytes::copy_from_slice(body), ct).ok_or_else(|| {
                    mlua::Error::runtime("not a multipart body with this Content-Type")
                })?
            }
            Format::Xml => return xml::decode(&self.lua, body).map(Some),
            Format::Plain => unreachable!("returned above"),
        };
        to_lua(&self.lua, &json).map(Some)
    }

    /// `_ctx` (with its `var`) and `_multipart`.
    fn context(
        &self,
        input: &Input<'_>,
        out: &Option<mlua::Value>,
    ) -> mlua::Result<(mlua::Table, mlua::Value)> {
        let var = self.lua.create_table()?;
        for (name, value) in input.vars {
            if let Some(v) = value {
                var.set(&**name, v.as_str())?;
            }
        }
        let ctx = self.lua.create_table()?;
        ctx.set("var", var)?;
        let multipart = match (input.format, out) {
            (Some(Format::Multipart), Some(v)) => v.clone(),
            _ => mlua::Nil,
        };
        Ok((ctx, multipart))
    }
}

/// A JSON value as Lua sees it after cjson: objects and arrays are tables, `null` is
/// `cjson.null` (a light userdata, not nil); a whole number is an integer, so that it prints
/// as `30` and not `30.0`.
fn to_lua(lua: &mlua::Lua, v: &Value) -> mlua::Result<mlua::Value> {
    Ok(match v {
        Value::Null => mlua::Value::NULL,
        Value::Bool(b) => mlua::Value::Boolean(*b),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => mlua::Value::Integer(i),
            (None, Some(f)) if f.fract() == 0.0 && f.abs() < 9.0e15 => {
                mlua::Value::Integer(f as i64)
            }
            (None, Some(f)) => mlua::Value::Number(f),
            (None, None) => mlua::Value::Nil,
        },
        Value::String(s) => mlua::Value::String(lua.create_string(s)?),
        Value::Array(a) => {
            let t = lua.create_table_with_capacity(a.len(), 0)?;
            for (i, x) in a.iter().enumerate() {
                t.raw_set(i + 1, to_lua(lua, x)?)?;
            }
            mlua::Value::Table(t)
        }
        Value::Object(o) => {
            let t = lua.create_table_with_capacity(0, o.len())?;
            for (k, x) in o {
                t.raw_set(k.as_str(), to_lua(lua, x)?)?;
            }
            mlua::Value::Table(t)
        }
    })
}

/// A Lua error's message without its traceback.
fn first_line(e: &mlua::Error) -> String {
    let text = match e {
        mlua::Error::CallbackError { cause, .. } => cause.to_string(),
        other => other.to_string(),
    };
    text.lines().next().unwrap_or_default().to_owned()
}

mod xml;

#[cfg(test)]
mod tests;
