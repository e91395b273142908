//! `response-rewrite`: changes the response to the client: its status, headers, and body
//! (replaced whole, or edited with regex `filters`).
//!
//! `{status_code, body, body_base64: false, headers: {set, add, remove}, vars, filters:
//! [{regex, replace, scope: once|global}]}`. With `vars`, only responses to requests matching
//! the conditions are rewritten. `filters` buffer the body (up to `max_resp_body_size`, 64 MiB; a larger body passes
//! through unchanged) and the response is sent chunked.

use std::sync::Arc;

use base64::Engine as _;
use bytes::{Bytes, BytesMut};
use regex::bytes::Regex;
use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::expr::Expr;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, Phases, PluginFactory, ResponseView, parse_config};
use sluice_core::{Ctx, Plugin};

use crate::proxy_rewrite::{Piece, header_map, render};
use crate::util::{Num, check_header_name, check_status};

/// Default of `max_resp_body_size`, the largest body the filters hold: APISIX's, 64 MiB.
const FILTER_MAX: u64 = 64 << 20;
/// Largest `max_resp_body_size`: 1 GiB.
const FILTER_MAX_LIMIT: u64 = 1 << 30;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    status_code: Option<Num>,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    body_base64: bool,
    /// `{set, add, remove}`, or APISIX's older flat form, a map of name to value to set.
    #[serde(default)]
    #[schemars(with = "Option<serde_json::Map<String, Value>>")]
    headers: Option<Value>,
    #[serde(default)]
    vars: Option<Value>,
    #[serde(default)]
    filters: Option<Vec<FilterConfig>>,
    /// Largest body the filters hold, in bytes (1 to 1 GiB; APISIX's default, 64 MiB). A
    /// larger one goes out unfiltered (APISIX truncates it).
    #[serde(default)]
    max_resp_body_size: Option<Num>,
}

#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct HeaderEdits {
    #[serde(default)]
    set: serde_json::Map<String, Value>,
    /// A map of name to value, or APISIX's list of `"Name: value"` lines (a name may repeat:
    /// `Set-Cookie` twice).
    #[serde(default)]
    add: Value,
    #[serde(default)]
    remove: Vec<String>,
}

/// `headers`: `{set, add, remove}`; or, when it names none of them, APISIX's older flat form
/// (`{X-Server: sluice}`), every field set.
fn header_edits(headers: Option<Value>, v: &mut Validator) -> Option<HeaderEdits> {
    match headers {
        None => Some(HeaderEdits::default()),
        Some(Value::Object(m))
            if !m.is_empty() && !["set", "add", "remove"].iter().any(|k| m.contains_key(*k)) =>
        {
            Some(HeaderEdits {
                set: m,
                ..HeaderEdits::default()
            })
        }
        Some(h) => v.field("headers", |v| parse_config(&h, v)),
    }
}

/// `headers.add` as (name, value) pairs, in order: a map, or APISIX's `["Name: value", ...]`.
fn add_pairs(add: &Value, v: &mut Validator) -> Option<Vec<(String, Value)>> {
    match add {
        Value::Null => Some(Vec::new()),
        Value::Object(m) => Some(m.iter().map(|(k, x)| (k.clone(), x.clone())).collect()),
        Value::Array(lines) => {
            let mut out = Vec::with_capacity(lines.len());
            for (i, line) in lines.iter().enumerate() {
                match line.as_str().and_then(|l| l.split_once(':')) {
                    Some((name, value)) if !name.trim().is_empty() => out.push((
                        name.trim().to_owned(),
                        Value::String(value.trim_start().to_owned()),
                    )),
                    _ => {
                        v.index(i, |v| v.error("must be a line \"Name: value\""));
                        return None;
                    }
                }
            }
            Some(out)
        }
        _ => {
            v.error("must be a map of name to value, or a list of \"Name: value\" lines");
            None
        }
    }
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct FilterConfig {
    regex: String,
    replace: String,
    #[serde(default = "once")]
    scope: String,
}

fn once() -> String {
    "once".into()
}

pub(crate) struct Factory;

impl PluginFactory for Factory {
    crate::util::describe!("response-rewrite", 899, Config);

    fn build(
        &self,
        config: &Value,
        cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        let mut ok = true;
        let status = match c.status_code {
            Some(code) => {
                let status = v.field("status_code", |v| check_status(code, 200, v));
                ok &= status.is_some();
                status
            }
            None => None,
        };
        let body = match (&c.body, c.body_base64) {
            (Some(b), true) => match base64::engine::general_purpose::STANDARD.decode(b) {
                Ok(bytes) => Some(Bytes::from(bytes)),
                Err(e) => {
                    v.error_at("body", format!("invalid base64: {e}"));
                    return None;
                }
            },
            (Some(b), false) => Some(Bytes::from(b.clone().into_bytes())),
            (None, true) => {
                v.error_at("body_base64", "needs a body");
                return None;
            }
            (None, false) => None,
        };
        if body.is_some() && c.filters.is_some() {
            v.error("use either body or filters, not both");
            return None;
        }
        let filter_max = match c.max_resp_body_size {
            None => Some(FILTER_MAX),
            Some(n) => v.field("max_resp_body_size", |v| {
                crate::util::whole(n, 1, FILTER_MAX_LIMIT, " bytes", v)
            }),
        };
        let mut filters = Vec::new();
        if let Some(fs) = &c.filters {
            v.field("filters", |v| {
                for (i, f) in fs.iter().enumerate() {
                    v.index(i, |v| {
                        let global = match f.scope.as_str() {
                            "once" => false,
                            "global" => true,
                            other => {
                                v.error_at(
                                    "scope",
                                    format!("unknown scope \"{other}\", expected once or global"),
                                );
                                ok = false;
                                return;
                            }
                        };
                        match Regex::new(&f.regex) {
                            Ok(re) => filters.push((
                                re,
                                crate::util::apisix_replacement(&f.replace),
                                global,
                            )),
                            Err(e) => {
                                v.error_at("regex", format!("invalid regex: {e}"));
                                ok = false;
                            }
                        }
                    });
                }
            });
        }
        let edits = header_edits(c.headers, v)?;
        let (set, add) = v.field("headers", |v| {
            let set = v.field("set", |v| {
                header_map(&edits.set, false, &|n| cx.uri_param(n), v)
            });
            let add = v.field("add", |v| {
                let pairs = add_pairs(&edits.add, v)?;
                header_map(
                    pairs.iter().map(|(k, x)| (k, x)),
                    false,
                    &|n| cx.uri_param(n),
                    v,
                )
            });
            v.field("remove", |v| {
                for (i, name) in edits.remove.iter().enumerate() {
                    ok &= v.index(i, |v| check_header_name(name, v));
                }
            });
            (set, add)
        });
        let conds = match &c.vars {
            Some(vars) => v.field("vars", |v| Expr::parse(vars, v)),
            None => Some(Expr::default()),
        };
        let (mut set, mut add, conds): (Vec<(String, Vec<Piece>)>, Vec<_>, _) =
            (set?, add?, conds?);
        // APISIX runs add, then set, then remove, each over what the one before left: a
        // header that is set loses what `add` gave it, a removed one loses both. Here `remove`
        // and `set` take out the upstream's fields and `add` appends, so the same outcome is
        // the edits without the ones a later operation undoes, decided once here.
        let named = |list: &[String], n: &str| list.iter().any(|r| r.eq_ignore_ascii_case(n));
        let set_names: Vec<String> = set.iter().map(|(n, _)| n.clone()).collect();
        add.retain(|(n, _)| !named(&edits.remove, n) && !named(&set_names, n));
        set.retain(|(n, _)| !named(&edits.remove, n));
        let filter_max = filter_max?;
        ok.then(|| {
            Arc::new(ResponseRewrite {
                status,
                body,
                set,
                add,
                remove: edits.remove,
                conds,
                filters,
                filter_max: filter_max as usize,
            }) as Arc<dyn Plugin>
        })
    }
}

struct ResponseRewrite {
    status: Option<u16>,
    body: Option<Bytes>,
    set: Vec<(String, Vec<Piece>)>,
    add: Vec<(String, Vec<Piece>)>,
    remove: Vec<String>,
    conds: Expr,
    filters: Vec<(Regex, Vec<u8>, bool)>,
    filter_max: usize,
}

/// A request's body being held for the filters.
#[derive(Default)]
struct Held {
    active: bool,
    body: BytesMut,
}

impl Plugin for ResponseRewrite {
    fn needs_body(&self) -> bool {
        use crate::proxy_rewrite::reads_body;
        self.conds.needs_body() || self.set.iter().chain(&self.add).any(|(_, t)| reads_body(t))
    }

    fn phases(&self) -> Phases {
        let p = Phases::HEADER_FILTER;
        if self.filters.is_empty() {
            p
        } else {
            p.with(Phases::BODY_FILTER)
        }
    }

    fn header_filter(&self, req: &RequestHead, resp: ResponseView<'_>, cx: &mut Ctx<'_>) {
        // Checked on the response: `status` is the upstream's (or the gateway's) status.
        let env = sluice_core::expr::Responded {
            env: &*cx,
            status: resp.status(),
            done: None,
        };
        if !self.conds.matches(req, &env) {
            return;
        }
        if let Some(s) = self.status {
            cx.response.set_status(s);
        }
        for name in &self.remove {
            cx.response.remove_header(name);
        }
        for (name, t) in &self.set {
            let value = render(t, req, cx);
            cx.response.set_header(name, &value);
        }
        for (name, t) in &self.add {
            let value = render(t, req, cx);
            cx.response.add_header(name, &value);
        }
        if let Some(b) = &self.body {
            cx.response.set_body(b.clone());
        }
        if !self.filters.is_empty() {
            cx.slot::<Held>("response-rewrite").active = true;
        }
    }

    fn body_filter(&self, chunk: &mut Bytes, eos: bool, cx: &mut Ctx<'_>) {
        let held = cx.slot::<Held>("response-rewrite");
        if !held.active {
            return;
        }
        // Hold the body until its end, then apply the filters to the whole of it.
        held.body.extend_from_slice(chunk);
        if held.body.len() > self.filter_max {
            // Too large to hold: what was held goes out unfiltered, and the rest as it comes.
            *chunk = held.body.split().freeze();
            held.active = false;
            return;
        }
        if !eos {
            *chunk = Bytes::new();
            return;
        }
        let mut body = held.body.split().to_vec();
        for (re, replace, global) in &self.filters {
            body = if *global {
                re.replace_all(&body, replace.as_slice()).into_owned()
            } else {
                re.replace(&body, replace.as_slice()).into_owned()
            };
        }
        *chunk = Bytes::from(body);
    }
}

#[cfg(test)]
mod tests {
    use crate::tests::*;
    use bytes::Bytes;
    use sluice_config::PluginScope;
    use sluice_core::plugin::ResponseView;

    /// Runs the header filter of a plugin built from `yaml` on a GET and its own 200, then
    /// `then` with the plugin and what it did.
    fn headed<R>(
        yaml: &str,
        then: impl FnOnce(&dyn sluice_core::Plugin, &mut sluice_core::Ctx<'_>) -> R,
    ) -> R {
        let b = build("response-rewrite", yaml, &[]);
        let req = head("GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        let mut cx = ctx(&b.consumers, CLIENT);
        b.plugin.header_filter(
            &req,
            ResponseView::Own(&sluice_core::Response::new(200)),
            &mut cx,
        );
        then(&*b.plugin, &mut cx)
    }

    fn filtered(yaml: &str, check: impl FnOnce(&sluice_core::Ctx<'_>)) {
        headed(yaml, |_, cx| check(cx));
    }

    #[test]
    fn status_headers_and_body_are_replaced() {
        filtered(
            "{status_code: 201, body: \"{\\\"ok\\\":true}\", headers: {set: {X-Server: sluice}, remove: [X-Powered-By]}}",
            |cx| {
                assert_eq!(cx.response.status(), Some(201));
                assert_eq!(
                    cx.response.body().map(|b| &b[..]),
                    Some(&b"{\"ok\":true}"[..])
                );
                assert!(cx.response.removes(b"x-powered-by"));
                assert_eq!(
                    String::from_utf8_lossy(cx.response.added_bytes()),
                    "X-Server: sluice\r\n"
                );
            },
        );
    }

    #[test]
    fn header_operations_end_as_apisix_runs_them_add_then_set_then_remove() {
        // X-A: added and set → the set value alone; X-B: set and removed → gone; X-C: added
        // and removed → gone; X-D: added only → added beside the upstream's.
        filtered(
            "{headers: {add: {X-A: one, X-C: three, X-D: four}, set: {X-A: two, X-B: b}, remove: [X-B, x-c]}}",
            |cx| {
                for name in [&b"x-a"[..], b"x-b", b"x-c"] {
                    assert!(cx.response.removes(name), "{name:?}");
                }
                assert!(!cx.response.removes(b"x-d"));
                assert_eq!(
                    String::from_utf8_lossy(cx.response.added_bytes()),
                    "X-A: two\r\nX-D: four\r\n"
                );
            },
        );
    }

    #[test]
    fn the_older_flat_headers_form_sets_each_field() {
        // APISIX's real-ip and other pages write `headers: {Name: value}`.
        filtered(
            "{headers: {X-Server-id: 3, X-Client: $remote_addr}}",
            |cx| {
                assert!(cx.response.removes(b"x-server-id"));
                assert_eq!(
                    String::from_utf8_lossy(cx.response.added_bytes()),
                    "X-Server-id: 3\r\nX-Client: 192.0.2.10\r\n"
                );
            },
        );
        // Mixed forms are the structured one, with its unknown field named.
        let e = check(
            "response-rewrite",
            "{headers: {set: {A: b}, X-Other: c}}",
            PluginScope::Route,
        );
        assert!(e.iter().any(|e| e.contains("headers.X-Other")), "{e:?}");
    }

    #[test]
    fn apisix_lists_of_header_lines_are_added_in_order() {
        filtered(
            "{headers: {add: [\"Set-Cookie: a=1\", \"Set-Cookie: b=2\", \"X-Client: $remote_addr\"]}}",
            |cx| {
                assert_eq!(
                    String::from_utf8_lossy(cx.response.added_bytes()),
                    "Set-Cookie: a=1\r\nSet-Cookie: b=2\r\nX-Client: 192.0.2.10\r\n"
                );
            },
        );
        assert!(
            !check(
                "response-rewrite",
                "{headers: {add: [\"no colon\"]}}",
                PluginScope::Route
            )
            .is_empty()
        );
    }

    #[test]
    fn vars_limit_the_rewrite_to_matching_requests() {
        let b = build(
            "response-rewrite",
            "{status_code: 418, vars: [[\"arg_tea\", \"==\", \"1\"]]}",
            &[],
        );
        let mut cx = ctx(&b.consumers, CLIENT);
        let resp = sluice_core::Response::new(200);
        b.plugin.header_filter(
            &head("GET /?tea=0 HTTP/1.1\r\nHost: a\r\n\r\n"),
            ResponseView::Own(&resp),
            &mut cx,
        );
        assert_eq!(cx.response.status(), None);
        b.plugin.header_filter(
            &head("GET /?tea=1 HTTP/1.1\r\nHost: a\r\n\r\n"),
            ResponseView::Own(&resp),
            &mut cx,
        );
        assert_eq!(cx.response.status(), Some(418));
    }

    #[test]
    fn filters_edit_the_whole_body_across_chunks() {
        // The body, in three pieces, through the plugin configured by `yaml`.
        let filtered = |yaml: &str| {
            headed(yaml, |plugin, cx| {
                let mut out = Vec::new();
                for (piece, eos) in [("hello wo", false), ("rld, world", false), ("", true)] {
                    let mut c = Bytes::from(piece);
                    plugin.body_filter(&mut c, eos, cx);
                    out.extend_from_slice(&c);
                }
                String::from_utf8(out).unwrap()
            })
        };
        assert_eq!(
            filtered("{filters: [{regex: \"wor(ld)\", replace: \"there$1\", scope: global}]}"),
            "hello thereld, thereld"
        );
        // A body beyond max_resp_body_size goes out as it came.
        assert_eq!(
            filtered("{filters: [{regex: world, replace: there}], max_resp_body_size: 8}"),
            "hello world, world"
        );
    }

    #[test]
    fn configurations_are_checked_with_paths() {
        assert_eq!(
            check(
                "response-rewrite",
                "{status_code: 99, body: x, filters: []}",
                PluginScope::Route
            ),
            vec![
                "plugins.response-rewrite.status_code: must be a status code from 200 to 599, got 99",
                "plugins.response-rewrite: use either body or filters, not both"
            ]
        );
        assert_eq!(
            check(
                "response-rewrite",
                "{status_code: 99, vars: [[\"nope\", \"==\", 1]]}",
                PluginScope::Route
            )[0],
            "plugins.response-rewrite.status_code: must be a status code from 200 to 599, got 99"
        );
        // Past a 16-bit number too: the same message, not the number's type's range.
        assert_eq!(
            check(
                "response-rewrite",
                "{status_code: 18446744073709551615}",
                PluginScope::Route
            ),
            vec![
                "plugins.response-rewrite.status_code: must be a status code from 200 to 599, got 18446744073709551615"
            ]
        );
    }
}
