//! `cors`: Cross-Origin Resource Sharing. `OPTIONS` requests (preflights, and as APISIX any
//! other) are answered by the gateway with `Allow-Methods`,
//! `Allow-Headers` and `Max-Age`; every response (the gateway's own too, such as a 401) gets
//! `Access-Control-Allow-Origin`, `Vary: Origin`, and `Allow-Credentials`/`Expose-Headers` when
//! configured, if the origin is allowed.
//!
//! `{allow_origins: "*", allow_methods: "*", allow_headers: "*", expose_headers: "",
//! max_age: 5, allow_credential: false, allow_origins_by_regex: []}`. Lists are comma
//! separated, as in APISIX. With `allow_credential: true`, `*` is refused at load time: browsers
//! reject credentials with wildcards, so the configuration could never work. `**` (APISIX's
//! "forced" wildcard, allowed with credentials) allows any origin by echoing it, every method,
//! or the headers the preflight asks for; in `expose_headers` it is sent as written, as APISIX
//! does. `max_age` is in
//! seconds, from 0 to 31,536,000 (one year), or -1 to ask browsers not to cache (APISIX's).

use std::sync::Arc;

use regex::bytes::Regex;
use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, Phases, PluginFactory, ResponseView, parse_config};
use sluice_core::{Ctx, Flow, Plugin, Response};
use sluice_router::Method;

use crate::util::Num;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
struct Config {
    allow_origins: String,
    allow_methods: String,
    allow_headers: String,
    expose_headers: String,
    max_age: Num,
    allow_credential: bool,
    allow_origins_by_regex: Vec<String>,
    allow_origins_by_metadata: Vec<String>,
    /// Origins allowed to see resource timing (`Timing-Allow-Origin`), as `allow_origins`.
    timing_allow_origins: Option<String>,
    /// Regexes of such origins; when given, `timing_allow_origins` is not used.
    timing_allow_origins_by_regex: Vec<String>,
}

/// `cors`'s `plugin_metadata`: named origin lists routes refer to with
/// `allow_origins_by_metadata` (APISIX's).
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
struct Metadata {
    allow_origins: std::collections::BTreeMap<String, String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            allow_origins: "*".into(),
            allow_methods: "*".into(),
            allow_headers: "*".into(),
            expose_headers: String::new(),
            max_age: Num::Whole(5),
            allow_credential: false,
            allow_origins_by_regex: Vec::new(),
            allow_origins_by_metadata: Vec::new(),
            timing_allow_origins: None,
            timing_allow_origins_by_regex: Vec::new(),
        }
    }
}

/// Longest `max_age`: one year, as every duration in Sluice (browsers cap it far lower).
const MAX_AGE: i128 = 31_536_000;

const ALL_METHODS: &str = "GET,POST,PUT,DELETE,PATCH,HEAD,OPTIONS,CONNECT,TRACE";

pub(crate) struct Factory;

impl PluginFactory for Factory {
    crate::util::describe!("cors", 4000, Config);

    fn check_metadata(&self, fields: &serde_json::Map<String, Value>, v: &mut Validator) {
        let Some(m) = parse_config::<Metadata>(&Value::Object(fields.clone()), v) else {
            return;
        };
        v.field("allow_origins", |v| {
            for (key, origins) in &m.allow_origins {
                if origins.trim().is_empty() || origins.bytes().any(|b| b.is_ascii_control()) {
                    v.error_at(
                        key,
                        "must be origins separated by commas (https://a.example,https://b.example) or *",
                    );
                }
            }
        });
    }

    fn build(
        &self,
        config: &Value,
        cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        let mut ok = true;
        if c.allow_credential {
            for (field, value) in [
                ("allow_origins", &c.allow_origins),
                ("allow_methods", &c.allow_methods),
                ("allow_headers", &c.allow_headers),
                ("expose_headers", &c.expose_headers),
            ] {
                if value.split(',').any(|s| s.trim() == "*") {
                    v.error_at(
                        field,
                        "\"*\" cannot be used with allow_credential: true; list the values",
                    );
                    ok = false;
                }
            }
        }
        let max_age = c
            .max_age
            .whole()
            .filter(|a| *a == -1 || (0..=MAX_AGE).contains(a));
        if max_age.is_none() {
            v.error_at(
                "max_age",
                format!(
                    "must be -1 (no caching) or a whole number from 0 to {MAX_AGE} seconds (one year), got {}",
                    c.max_age
                ),
            );
            ok = false;
        }
        let mut compile = |field: &str, list: &[String], v: &mut Validator| {
            let mut out = Vec::new();
            v.field(field, |v| {
                for (i, r) in list.iter().enumerate() {
                    match Regex::new(r) {
                        Ok(re) => out.push(re),
                        Err(e) => {
                            v.index(i, |v| v.error(format!("invalid regex: {e}")));
                            ok = false;
                        }
                    }
                }
            });
            out
        };
        let regexes = compile("allow_origins_by_regex", &c.allow_origins_by_regex, v);
        let timing_regexes = compile(
            "timing_allow_origins_by_regex",
            &c.timing_allow_origins_by_regex,
            v,
        );
        if c.allow_credential
            && c.timing_allow_origins
                .as_deref()
                .is_some_and(|t| t.split(',').any(|s| s.trim() == "*"))
        {
            v.error_at(
                "timing_allow_origins",
                "\"*\" cannot be used with allow_credential: true; list the values",
            );
            ok = false;
        }
        for (field, value) in [
            ("allow_methods", &c.allow_methods),
            ("allow_headers", &c.allow_headers),
            ("expose_headers", &c.expose_headers),
        ] {
            if value.bytes().any(|b| b == b'\r' || b == b'\n') {
                v.error_at(field, "must not contain CR or LF");
                ok = false;
            }
        }
        if !ok {
            return None;
        }
        let list = |s: &str| -> Vec<String> {
            s.split(',')
                .map(|x| x.trim().to_owned())
                .filter(|x| !x.is_empty())
                .collect()
        };
        // APISIX's order (cors.lua, header_filter): the metadata's lists named by
        // allow_origins_by_metadata first (a `*` there lets any origin in, answered with
        // itself; a name the metadata lacks adds nothing, as the metadata may come later and
        // the route is rebuilt then); then, unless those were named and allow_origins is the
        // default `*`, allow_origins_by_regex when given (alone: allow_origins is not used
        // then), else allow_origins.
        let mut metadata = Vec::new();
        let mut metadata_any = false;
        if !c.allow_origins_by_metadata.is_empty() {
            let named = cx
                .metadata("cors")
                .and_then(|m| serde_json::from_value::<Metadata>(Value::Object(m.clone())).ok())
                .unwrap_or_default();
            for key in &c.allow_origins_by_metadata {
                for o in named
                    .allow_origins
                    .get(key)
                    .map(|t| list(t))
                    .unwrap_or_default()
                {
                    if o == "*" {
                        metadata_any = true;
                    } else {
                        metadata.push(o);
                    }
                }
            }
        }
        let local = c.allow_origins_by_metadata.is_empty() || c.allow_origins.trim() != "*";
        let (origins, regexes) = match (local, regexes.is_empty()) {
            (false, _) => (Vec::new(), Vec::new()),
            (true, true) => (list(&c.allow_origins), regexes),
            (true, false) => (Vec::new(), regexes),
        };
        let wild = |s: &str| matches!(s.trim(), "*" | "**");
        let forced = origins.iter().any(|o| o == "**");
        Some(Arc::new(Cors {
            any_origin: forced || origins.iter().any(|o| o == "*"),
            echo_origin: forced || c.allow_credential,
            origins,
            regexes,
            metadata,
            metadata_any,
            vary: c.allow_origins.trim() != "*",
            timing: match (&c.timing_allow_origins, timing_regexes.is_empty()) {
                (_, false) => Timing::Regexes(timing_regexes),
                (Some(t), true) => Timing::List(list(t)),
                (None, true) => Timing::None,
            },
            methods: if wild(&c.allow_methods) {
                ALL_METHODS.to_owned()
            } else {
                c.allow_methods.clone()
            },
            any_header: wild(&c.allow_headers),
            headers: c.allow_headers.clone(),
            expose: c.expose_headers.clone(),
            max_age: max_age.unwrap_or(5).to_string(),
            credentials: c.allow_credential,
        }))
    }
}

struct Cors {
    any_origin: bool,
    /// Any origin is answered with itself rather than `*` (with credentials, or `**`).
    echo_origin: bool,
    origins: Vec<String>,
    regexes: Vec<Regex>,
    /// Origins of the metadata's lists named by allow_origins_by_metadata.
    metadata: Vec<String>,
    /// One of those lists is `*`.
    metadata_any: bool,
    /// `Vary: Origin` on every answer (allow_origins is not `*`, as APISIX).
    vary: bool,
    /// Who may see resource timing.
    timing: Timing,
    methods: String,
    any_header: bool,
    headers: String,
    expose: String,
    max_age: String,
    credentials: bool,
}

/// `timing_allow_origins(_by_regex)`.
enum Timing {
    None,
    List(Vec<String>),
    Regexes(Vec<Regex>),
}

impl Timing {
    /// The `Timing-Allow-Origin` value for a request from `origin`, if any (APISIX's).
    fn value<'a>(&self, origin: Option<&'a [u8]>) -> Option<&'a [u8]> {
        match self {
            Timing::None => None,
            Timing::List(list) => {
                if list.iter().any(|o| o == "*") {
                    return Some(b"*");
                }
                let o = origin?;
                (list.iter().any(|l| l == "**" || l.as_bytes() == o)).then_some(o)
            }
            Timing::Regexes(res) => {
                let o = origin?;
                res.iter().any(|r| r.is_match(o)).then_some(o)
            }
        }
    }
}

impl Cors {
    /// The `Access-Control-Allow-Origin` value for this request, if its origin is allowed.
    fn allowed_origin<'a>(&self, req: &'a RequestHead) -> Option<&'a [u8]> {
        let origin = req.header("origin");
        if let Some(o) = origin
            && (self.metadata_any || self.metadata.iter().any(|m| m.as_bytes() == o))
        {
            return Some(o);
        }
        if self.any_origin {
            return Some(if self.echo_origin { origin? } else { b"*" });
        }
        let origin = origin?;
        let listed = self.origins.iter().any(|o| o.as_bytes() == origin)
            || self.regexes.iter().any(|r| r.is_match(origin));
        listed.then_some(origin)
    }
}

impl Plugin for Cors {
    fn phases(&self) -> Phases {
        Phases::REWRITE.with(Phases::HEADER_FILTER)
    }

    fn rewrite(&self, req: &mut RequestHead, _cx: &mut Ctx<'_>) -> Flow {
        // APISIX answers every OPTIONS itself (a preflight or not).
        if req.method() != Method::Options {
            return Flow::Continue;
        }
        // The answer's CORS headers come from header_filter, like any other response's.
        let mut r = Response::new(200);
        r.headers.push((
            "Access-Control-Max-Age".into(),
            self.max_age.clone().into_bytes(),
        ));
        r.headers.push((
            "Access-Control-Allow-Methods".into(),
            self.methods.clone().into_bytes(),
        ));
        let headers = if self.any_header {
            req.header("access-control-request-headers")
                .map(<[u8]>::to_vec)
        } else {
            Some(self.headers.clone().into_bytes())
        };
        if let Some(h) = headers {
            r.headers.push(("Access-Control-Allow-Headers".into(), h));
        }
        Flow::Respond(r)
    }

    fn header_filter(&self, req: &RequestHead, _resp: ResponseView<'_>, cx: &mut Ctx<'_>) {
        if let Some(t) = self.timing.value(req.header("origin")) {
            cx.response.set_header("Timing-Allow-Origin", t);
        }
        let origin = self.allowed_origin(req);
        // APISIX varies whenever allow_origins is not `*`; an echoed origin varies too.
        if self.vary || origin.is_some_and(|o| o != b"*") {
            cx.response.add_header("Vary", b"Origin");
        }
        let Some(origin) = origin else {
            return;
        };
        cx.response
            .set_header("Access-Control-Allow-Origin", origin);
        if self.credentials {
            cx.response
                .set_header("Access-Control-Allow-Credentials", b"true");
        }
        if !self.expose.is_empty() {
            cx.response
                .set_header("Access-Control-Expose-Headers", self.expose.as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::tests::*;
    use sluice_config::PluginScope;
    use sluice_core::plugin::ResponseView;

    /// Runs the plugin on `raw`; returns the status and the response fields it added.
    fn exchange(yaml: &str, raw: &str) -> (u16, String) {
        let b = build("cors", yaml, &[]);
        let mut req = head(raw);
        let mut cx = ctx(&b.consumers, CLIENT);
        let own = run(&*b.plugin, &mut req, &mut cx);
        let upstream = sluice_core::Response::new(200);
        let resp = own.clone().unwrap_or(upstream);
        b.plugin
            .header_filter(&req, ResponseView::Own(&resp), &mut cx);
        let mut fields: String = resp
            .headers
            .iter()
            .map(|(n, v)| format!("{n}: {}\r\n", String::from_utf8_lossy(v)))
            .collect();
        fields.push_str(&String::from_utf8_lossy(cx.response.added_bytes()));
        (resp.status, fields)
    }

    /// The `Access-Control-Allow-Origin` a GET from `origin` gets.
    fn allowed_with_metadata(yaml: &str, metadata: &str, origin: &str) -> Option<String> {
        let b = build_with_metadata("cors", yaml, metadata);
        let mut req = head(&format!(
            "GET /x HTTP/1.1\r\nHost: a\r\nOrigin: {origin}\r\n\r\n"
        ));
        let mut cx = ctx(&b.consumers, CLIENT);
        assert!(run(&*b.plugin, &mut req, &mut cx).is_none());
        let resp = sluice_core::Response::new(200);
        b.plugin
            .header_filter(&req, ResponseView::Own(&resp), &mut cx);
        let added = String::from_utf8_lossy(cx.response.added_bytes()).to_string();
        added
            .lines()
            .find_map(|l| l.strip_prefix("Access-Control-Allow-Origin: "))
            .map(str::to_owned)
    }

    #[test]
    fn origins_by_metadata_as_apisix() {
        // APISIX's docs: the metadata names origin lists, the route picks some by name.
        let meta = "[{id: cors, allow_origins: {key_1: \"https://domain.com\", key_2: \"https://sub.domain.com,https://sub2.domain.com\", key_3: \"*\"}}]";
        let by = |keys: &str, extra: &str, origin: &str| {
            allowed_with_metadata(
                &format!("{{allow_origins_by_metadata: {keys}{extra}}}"),
                meta,
                origin,
            )
        };
        assert_eq!(
            by("[key_1]", "", "https://domain.com").as_deref(),
            Some("https://domain.com")
        );
        // The default allow_origins "*" does not let others in once lists are named.
        assert_eq!(by("[key_1]", "", "https://other.com"), None);
        assert_eq!(
            by("[key_1, key_2]", "", "https://sub2.domain.com").as_deref(),
            Some("https://sub2.domain.com")
        );
        // A "*" list lets any origin in, answered with itself.
        assert_eq!(
            by("[key_3]", "", "https://x.org").as_deref(),
            Some("https://x.org")
        );
        // allow_origins set to a list still applies beside the metadata's.
        assert_eq!(
            by(
                "[key_1]",
                ", allow_origins: \"https://mine.test\"",
                "https://mine.test"
            )
            .as_deref(),
            Some("https://mine.test")
        );
        // A name the metadata does not have adds nothing (APISIX); no metadata at all either.
        assert_eq!(by("[nope]", "", "https://domain.com"), None);
        assert_eq!(
            allowed_with_metadata(
                "{allow_origins_by_metadata: [key_1]}",
                "[]",
                "https://domain.com"
            ),
            None
        );
        assert_eq!(
            metadata_errors("{id: cors, allow_origins: {k: \"\"}, extra: 1}"),
            vec!["plugin_metadata[0].extra: unknown field, expected allow_origins"]
        );
        assert_eq!(
            metadata_errors("{id: cors, allow_origins: {k: \" \"}}"),
            vec![
                "plugin_metadata[0].allow_origins.k: must be origins separated by commas (https://a.example,https://b.example) or *"
            ]
        );
        assert_eq!(
            metadata_errors("{id: key-auth}"),
            vec!["plugin_metadata[0].id: key-auth has no plugin metadata"]
        );
    }

    #[test]
    fn preflights_are_answered_by_the_gateway() {
        let (status, h) = exchange(
            "{allow_origins: \"https://a.test\", allow_methods: \"GET,POST\", max_age: 60}",
            "OPTIONS /x HTTP/1.1\r\nHost: a\r\nOrigin: https://a.test\r\nAccess-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: X-Token\r\n\r\n",
        );
        assert_eq!(status, 200);
        assert!(
            h.contains("Access-Control-Allow-Origin: https://a.test\r\n"),
            "{h}"
        );
        assert!(
            h.contains("Access-Control-Allow-Methods: GET,POST\r\n"),
            "{h}"
        );
        assert!(
            h.contains("Access-Control-Allow-Headers: X-Token\r\n"),
            "{h}"
        );
        assert!(h.contains("Access-Control-Max-Age: 60\r\n"), "{h}");
        assert!(h.contains("Vary: Origin\r\n"), "{h}");
    }

    #[test]
    fn simple_requests_get_headers_only_for_allowed_origins() {
        let cfg = "{allow_origins: \"https://a.test\", allow_origins_by_regex: [\"^https://.*\\\\.b\\\\.test$\"], allow_credential: true, allow_methods: GET, allow_headers: X-A, expose_headers: X-Total}";
        let (_, h) = exchange(
            cfg,
            "GET / HTTP/1.1\r\nHost: a\r\nOrigin: https://x.b.test\r\n\r\n",
        );
        assert!(
            h.contains("Access-Control-Allow-Origin: https://x.b.test\r\n"),
            "{h}"
        );
        assert!(
            h.contains("Access-Control-Allow-Credentials: true\r\n"),
            "{h}"
        );
        assert!(
            h.contains("Access-Control-Expose-Headers: X-Total\r\n"),
            "{h}"
        );
        let (_, h) = exchange(
            cfg,
            "GET / HTTP/1.1\r\nHost: a\r\nOrigin: https://evil.test\r\n\r\n",
        );
        assert!(!h.contains("Access-Control"), "{h}");
        let (_, h) = exchange(
            "{}",
            "GET / HTTP/1.1\r\nHost: a\r\nOrigin: https://any.test\r\n\r\n",
        );
        assert!(h.contains("Access-Control-Allow-Origin: *\r\n"), "{h}");
    }

    #[test]
    fn a_forced_wildcard_allows_any_origin_with_credentials_as_apisix() {
        // APISIX's `**`: any origin, echoed (it matched only an Origin of "**" before).
        let cfg = "{allow_origins: \"**\", allow_methods: \"**\", allow_headers: \"**\", allow_credential: true}";
        let (status, h) = exchange(
            cfg,
            "OPTIONS /x HTTP/1.1\r\nHost: a\r\nOrigin: https://any.test\r\nAccess-Control-Request-Method: PUT\r\nAccess-Control-Request-Headers: X-Token\r\n\r\n",
        );
        assert_eq!(status, 200);
        for want in [
            "Access-Control-Allow-Origin: https://any.test\r\n",
            "Access-Control-Allow-Credentials: true\r\n",
            "Access-Control-Allow-Methods: GET,POST,PUT,DELETE,PATCH,HEAD,OPTIONS,CONNECT,TRACE\r\n",
            "Access-Control-Allow-Headers: X-Token\r\n",
            "Vary: Origin\r\n",
        ] {
            assert!(h.contains(want), "{want}: {h}");
        }
        let (_, h) = exchange(
            "{allow_origins: \"**\"}",
            "GET / HTTP/1.1\r\nHost: a\r\nOrigin: https://other.test\r\n\r\n",
        );
        assert!(
            h.contains("Access-Control-Allow-Origin: https://other.test\r\n"),
            "{h}"
        );
    }

    #[test]
    fn wildcards_with_credentials_are_refused_at_load_time() {
        assert_eq!(
            check("cors", "{allow_credential: true}", PluginScope::Route),
            vec![
                "plugins.cors.allow_origins: \"*\" cannot be used with allow_credential: true; list the values",
                "plugins.cors.allow_methods: \"*\" cannot be used with allow_credential: true; list the values",
                "plugins.cors.allow_headers: \"*\" cannot be used with allow_credential: true; list the values"
            ]
        );
    }

    #[test]
    fn max_age_is_a_year_at_most_or_minus_one() {
        for (age, shown) in [
            ("-2", "-2"),
            ("31536001", "31536001"),
            ("-9223372036854775808", "-9223372036854775808"),
            ("1.5", "1.5"),
        ] {
            assert_eq!(
                check("cors", &format!("{{max_age: {age}}}"), PluginScope::Route),
                vec![format!(
                    "plugins.cors.max_age: must be -1 (no caching) or a whole number from 0 to 31536000 seconds (one year), got {shown}"
                )]
            );
        }
        let (_, h) = exchange(
            "{max_age: -1}",
            "OPTIONS /x HTTP/1.1\r\nHost: a\r\nOrigin: https://a.test\r\nAccess-Control-Request-Method: GET\r\n\r\n",
        );
        assert!(h.contains("Access-Control-Max-Age: -1\r\n"), "{h}");
    }
}
