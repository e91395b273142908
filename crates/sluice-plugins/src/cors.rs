//! `cors`: Cross-Origin Resource Sharing. Preflight requests (`OPTIONS` with `Origin` and
//! `Access-Control-Request-Method`) are answered by the gateway with `Allow-Methods`,
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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct Config {
    allow_origins: String,
    allow_methods: String,
    allow_headers: String,
    expose_headers: String,
    max_age: Num,
    allow_credential: bool,
    allow_origins_by_regex: Vec<String>,
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
        }
    }
}

/// Longest `max_age`: one year, as every duration in Sluice (browsers cap it far lower).
const MAX_AGE: i128 = 31_536_000;

const ALL_METHODS: &str = "GET,POST,PUT,DELETE,PATCH,HEAD,OPTIONS,CONNECT,TRACE";

pub(crate) struct Factory;

impl PluginFactory for Factory {
    fn name(&self) -> &'static str {
        "cors"
    }

    fn priority(&self) -> i32 {
        4000
    }

    fn build(
        &self,
        config: &Value,
        _cx: &mut BuildCx<'_>,
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
        let mut regexes = Vec::new();
        v.field("allow_origins_by_regex", |v| {
            for (i, r) in c.allow_origins_by_regex.iter().enumerate() {
                match Regex::new(r) {
                    Ok(re) => regexes.push(re),
                    Err(e) => {
                        v.index(i, |v| v.error(format!("invalid regex: {e}")));
                        ok = false;
                    }
                }
            }
        });
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
        let origins = list(&c.allow_origins);
        let wild = |s: &str| matches!(s.trim(), "*" | "**");
        let forced = origins.iter().any(|o| o == "**");
        Some(Arc::new(Cors {
            any_origin: forced || origins.iter().any(|o| o == "*"),
            echo_origin: forced || c.allow_credential,
            origins,
            regexes,
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
    methods: String,
    any_header: bool,
    headers: String,
    expose: String,
    max_age: String,
    credentials: bool,
}

impl Cors {
    /// The `Access-Control-Allow-Origin` value for this request, if its origin is allowed.
    fn allowed_origin<'a>(&self, req: &'a RequestHead) -> Option<&'a [u8]> {
        let origin = req.header("origin");
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
        let preflight = req.method() == Method::Options
            && req.header("origin").is_some()
            && req.header("access-control-request-method").is_some();
        if !preflight {
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
        let Some(origin) = self.allowed_origin(req) else {
            return;
        };
        cx.response
            .set_header("Access-Control-Allow-Origin", origin);
        if origin != b"*" {
            cx.response.add_header("Vary", b"Origin");
        }
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
