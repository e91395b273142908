//! APISIX's `_meta` on every plugin entry: `disable`, `priority`, `filter` (run the plugin only
//! on the requests an expression picks) and `error_response` (the body of the plugin's
//! refusals, whatever the plugin says). Split off the configuration when it loads
//! ([`split_meta`]); `filter` and `error_response` wrap the built plugin ([`Entry::wrap`]), so
//! plugins without them run as they are.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;

use crate::check::Validator;
use crate::ctx::Ctx;
use crate::expr::Expr;
use crate::http::RequestHead;
use crate::plugin::{Flow, LocalFuture, MetricsLabel, Phases, Plugin, Response, ResponseView};

/// Why a stream route refuses `_meta.filter` and `_meta.error_response`.
pub const NOT_ON_STREAMS: &str = "filter and error_response are for HTTP routes: a stream route has no request to read or answer";

/// A plugin entry split into its configuration and APISIX's `_meta` settings.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The configuration without `_meta`.
    pub config: Value,
    /// `_meta.disable`: configured but not run.
    pub disabled: bool,
    /// `_meta.priority`: overrides the plugin's priority on this resource.
    pub priority: Option<i32>,
    /// `_meta.filter`: the plugin runs only for requests for which it holds.
    pub filter: Option<Arc<Expr>>,
    /// `_meta.error_response`: the body (and its type) of the plugin's 4xx and 5xx answers.
    pub error_response: Option<(Bytes, &'static str)>,
}

/// Splits `_meta` off a plugin configuration, checking it (`v` points at the plugin entry).
pub fn split_meta(config: &Value, v: &mut Validator) -> Option<Entry> {
    let mut config = if config.is_null() {
        Value::Object(Default::default())
    } else {
        config.clone()
    };
    let Some(map) = config.as_object_mut() else {
        v.error("must be a mapping of settings");
        return None;
    };
    let mut entry = Entry {
        config: Value::Null,
        disabled: false,
        priority: None,
        filter: None,
        error_response: None,
    };
    if let Some(meta) = map.remove("_meta") {
        let mut ok = true;
        v.field("_meta", |v| match meta.as_object() {
            None => {
                v.error("must be a mapping with disable, priority, filter or error_response");
                ok = false;
            }
            Some(m) => {
                for (k, val) in m {
                    match (k.as_str(), val) {
                        ("disable", Value::Bool(b)) => entry.disabled = *b,
                        ("priority", Value::Number(n))
                            if n.as_i64().is_some_and(|p| i32::try_from(p).is_ok()) =>
                        {
                            entry.priority = n.as_i64().map(|p| p as i32)
                        }
                        ("disable", _) => {
                            v.error_at("disable", "must be true or false");
                            ok = false;
                        }
                        ("priority", _) => {
                            v.error_at("priority", "must be a whole number");
                            ok = false;
                        }
                        ("filter", f) => match v.field("filter", |v| Expr::parse(f, v)) {
                            Some(e) if e.is_empty() => {}
                            Some(e) => entry.filter = Some(Arc::new(e)),
                            None => ok = false,
                        },
                        ("error_response", Value::String(s)) => {
                            entry.error_response =
                                Some((Bytes::from(s.clone()), "text/plain; charset=utf-8"))
                        }
                        ("error_response", o @ Value::Object(_)) => {
                            let mut body = o.to_string();
                            body.push('\n');
                            entry.error_response = Some((Bytes::from(body), "application/json"))
                        }
                        ("error_response", _) => {
                            v.error_at("error_response", "must be a string or an object");
                            ok = false;
                        }
                        (other, _) => {
                            v.error_at(
                                other,
                                "unknown field, expected one of disable, priority, filter, error_response",
                            );
                            ok = false;
                        }
                    }
                }
            }
        });
        if !ok {
            return None;
        }
    }
    entry.config = config;
    Some(entry)
}

impl Entry {
    /// The plugin as this entry runs it: as built, or within its `filter` and
    /// `error_response`.
    pub fn wrap(&self, plugin: Arc<dyn Plugin>) -> Arc<dyn Plugin> {
        if self.filter.is_none() && self.error_response.is_none() {
            return plugin;
        }
        Arc::new(Wrapped {
            inner: plugin,
            filter: self.filter.clone(),
            error_response: self.error_response.clone(),
        })
    }
}

/// A plugin with `_meta.filter` or `_meta.error_response`.
struct Wrapped {
    inner: Arc<dyn Plugin>,
    filter: Option<Arc<Expr>>,
    error_response: Option<(Bytes, &'static str)>,
}

/// The filters' results of one request, by wrapper (its address), decided once: the first
/// phase the plugin runs in decides for the later ones, as APISIX caches it per request.
#[derive(Default)]
struct Decided(Vec<(usize, bool)>);

const DECIDED: &str = "_meta.filter";

impl Wrapped {
    fn id(&self) -> usize {
        self as *const Wrapped as usize
    }

    /// Whether the plugin runs for this request (the filter decided on first use).
    fn admits(&self, req: &RequestHead, cx: &mut Ctx<'_>) -> bool {
        let Some(f) = &self.filter else {
            return true;
        };
        let id = self.id();
        if let Some(d) = cx.slot_ref::<Decided>(DECIDED)
            && let Some(&(_, r)) = d.0.iter().find(|(i, _)| *i == id)
        {
            return r;
        }
        let r = f.matches(req, cx);
        cx.slot::<Decided>(DECIDED).0.push((id, r));
        r
    }

    /// The decision of an earlier phase (none: not admitted).
    fn admitted(&self, cx: &Ctx<'_>) -> bool {
        self.filter.is_none()
            || cx
                .slot_ref::<Decided>(DECIDED)
                .and_then(|d| d.0.iter().find(|(i, _)| *i == self.id()))
                .is_some_and(|&(_, r)| r)
    }

    /// A refusal with `error_response`'s body.
    fn answer(&self, flow: Flow) -> Flow {
        let Some((body, kind)) = &self.error_response else {
            return flow;
        };
        let replace = |mut r: Response| -> Response {
            if r.status >= 400 {
                r.headers
                    .retain(|(n, _)| !n.eq_ignore_ascii_case("content-type"));
                r.headers
                    .push(("Content-Type".into(), kind.as_bytes().to_vec()));
                r.body = body.clone();
            }
            r
        };
        match flow {
            Flow::Respond(r) => Flow::Respond(replace(r)),
            Flow::Delayed(d, r) => Flow::Delayed(d, Box::new(replace(*r))),
            other => other,
        }
    }
}

impl Plugin for Wrapped {
    fn phases(&self) -> Phases {
        let inner = self.inner.phases();
        // A plugin that sees only the response body decides at the response head, where the
        // request is still at hand.
        if self.filter.is_some()
            && inner.contains(Phases::BODY_FILTER)
            && !inner.contains(Phases::HEADER_FILTER)
        {
            inner.with(Phases::HEADER_FILTER)
        } else {
            inner
        }
    }

    fn rewrite(&self, req: &mut RequestHead, cx: &mut Ctx<'_>) -> Flow {
        if !self.admits(req, cx) {
            return Flow::Continue;
        }
        self.answer(self.inner.rewrite(req, cx))
    }

    fn rewrite_async<'a>(
        &'a self,
        req: &'a mut RequestHead,
        cx: &'a mut Ctx<'_>,
    ) -> LocalFuture<'a, Flow> {
        Box::pin(async move {
            if !self.admits(req, cx) {
                return Flow::Continue;
            }
            let flow = crate::plugin::run_rewrite(&*self.inner, req, cx).await;
            self.answer(flow)
        })
    }

    fn access(&self, req: &mut RequestHead, cx: &mut Ctx<'_>) -> Flow {
        if !self.admits(req, cx) {
            return Flow::Continue;
        }
        self.answer(self.inner.access(req, cx))
    }

    fn access_async<'a>(
        &'a self,
        req: &'a mut RequestHead,
        cx: &'a mut Ctx<'_>,
    ) -> LocalFuture<'a, Flow> {
        Box::pin(async move {
            if !self.admits(req, cx) {
                return Flow::Continue;
            }
            let flow = self.inner.access_async(req, cx).await;
            self.answer(flow)
        })
    }

    fn before_proxy(&self, req: &mut RequestHead, cx: &mut Ctx<'_>) -> Flow {
        if !self.admits(req, cx) {
            return Flow::Continue;
        }
        self.answer(self.inner.before_proxy(req, cx))
    }

    fn header_filter(&self, req: &RequestHead, resp: ResponseView<'_>, cx: &mut Ctx<'_>) {
        if self.admits(req, cx) && self.inner.phases().contains(Phases::HEADER_FILTER) {
            self.inner.header_filter(req, resp, cx);
        }
    }

    fn body_filter(&self, chunk: &mut Bytes, eos: bool, cx: &mut Ctx<'_>) {
        if self.admitted(cx) {
            self.inner.body_filter(chunk, eos, cx);
        }
    }

    fn log(&self, req: &RequestHead, done: &crate::plugin::Done, cx: &Ctx<'_>) {
        let run = match &self.filter {
            None => true,
            // A plugin that runs only here decides here.
            Some(f) => cx
                .slot_ref::<Decided>(DECIDED)
                .and_then(|d| d.0.iter().find(|(i, _)| *i == self.id()))
                .map(|&(_, r)| r)
                .unwrap_or_else(|| f.matches(req, cx)),
        };
        if run {
            self.inner.log(req, done, cx);
        }
    }

    fn needs_body(&self) -> bool {
        self.inner.needs_body() || self.filter.as_ref().is_some_and(|f| f.needs_body())
    }

    fn reads_documents(&self) -> bool {
        self.inner.reads_documents()
    }

    fn filters_last(&self) -> bool {
        self.inner.filters_last()
    }

    fn filters_body(&self, cx: &Ctx<'_>) -> bool {
        self.admitted(cx) && self.inner.filters_body(cx)
    }

    fn metrics_label(&self) -> Option<MetricsLabel> {
        self.inner.metrics_label()
    }
}
