//! `redirect`: answers with a redirect instead of proxying, as APISIX's `redirect` plugin.
//!
//! `{http_to_https, uri, regex_uri: [regex, replacement], ret_code: 302, encode_uri: false,
//! append_query_string: false}`, exactly one of `http_to_https`, `uri` and `regex_uri`:
//!
//! - `http_to_https: true`: a request that is not HTTPS (its `X-Forwarded-Proto`, else the
//!   connection) goes to `https://$host$request_uri`, with `:port` unless it is 443: the port
//!   is `plugin_attr.redirect.https_port`, else the first TLS listener's (APISIX's order); 301
//!   for GET and HEAD, 308 otherwise (`ret_code` is not used).
//! - `uri`: the `Location`, with APISIX's variables (`$uri`, `${host}`, `$arg_page`, ...; one
//!   without a value is empty; `\$name` is written as it is). A name Sluice does not know is
//!   refused when the configuration loads, rather than redirecting to an empty piece.
//! - `regex_uri`: the request's path matched against the regex; when it matches, the
//!   `Location` is the path with the first match replaced (`$1`, `${1}`); when not, the
//!   request goes on to the upstream.
//!
//! `encode_uri` percent-encodes the `Location` before its query (`%XX` already in the path is
//! kept: Sluice's `$uri` is the path as sent); `append_query_string` adds the request's query.
//! Runs in the rewrite phase, so a route with only this plugin needs no upstream.

use std::sync::Arc;

use regex::bytes::Regex;
use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::expr::Var;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, Phases, PluginFactory, parse_config};
use sluice_core::template::Segment;
use sluice_core::{Ctx, Flow, Plugin, Response};

use crate::util::{Num, check_status};

const NAME: &str = "redirect";

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    http_to_https: Option<bool>,
    #[serde(default)]
    uri: Option<String>,
    #[serde(default)]
    regex_uri: Option<Vec<String>>,
    #[serde(default = "default_code")]
    ret_code: Num,
    #[serde(default)]
    encode_uri: bool,
    #[serde(default)]
    append_query_string: bool,
}

fn default_code() -> Num {
    Num::Whole(302)
}

/// `plugin_attr.redirect`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Attr {
    #[serde(default)]
    https_port: Option<Num>,
}

pub(crate) struct Factory;

impl PluginFactory for Factory {
    crate::util::describe!(NAME, 900, Config);

    /// `https_port`: the port of `http_to_https` redirects (443, the default, is left out).
    fn check_attr(&self, value: &Value, v: &mut Validator) {
        if let Some(a) = parse_config::<Attr>(value, v)
            && let Some(p) = a.https_port
        {
            v.field("https_port", |v| crate::util::whole(p, 1, 65_535, "", v));
        }
    }

    fn build(
        &self,
        config: &Value,
        cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        let given = [c.http_to_https.is_some(), c.uri.is_some(), c.regex_uri.is_some()];
        if given.iter().filter(|g| **g).count() != 1 {
            v.error("give exactly one of http_to_https, uri and regex_uri");
            return None;
        }
        if c.http_to_https.is_some() && c.append_query_string {
            v.error("only one of http_to_https and append_query_string can be configured");
            return None;
        }
        let code = v.field("ret_code", |v| check_status(c.ret_code, 200, v))?;
        let to = if let Some(https) = c.http_to_https {
            let port = cx
                .attr(NAME)
                .and_then(|a| serde_json::from_value::<Attr>(a.clone()).ok())
                .and_then(|a| a.https_port)
                .and_then(Num::whole)
                .map(|p| p as u16)
                // As APISIX: else the node's TLS port (the first), else 443.
                .or_else(|| cx.tls_ports.first().copied())
                .filter(|p| *p != 443);
            To::Https { on: https, port }
        } else if let Some(uri) = &c.uri {
            if uri.len() < 2 {
                v.error_at("uri", "must be at least 2 characters");
                return None;
            }
            To::Uri(v.field("uri", |v| parse_location(uri).map_err(|e| v.error(e)).ok())?)
        } else {
            let r = c.regex_uri.as_deref().unwrap_or_default();
            if r.len() != 2 {
                v.error_at("regex_uri", "must be [regex, replacement]");
                return None;
            }
            let re = Regex::new(&r[0])
                .map_err(|e| {
                    v.field("regex_uri", |v| {
                        v.error_at("0", format!("invalid regex: {e}"));
                    })
                })
                .ok()?;
            To::Regex(re, crate::util::apisix_replacement(&r[1]))
        };
        Some(Arc::new(Redirect {
            to,
            code,
            encode: c.encode_uri,
            append_query: c.append_query_string,
        }))
    }
}

/// Where a request is sent.
enum To {
    /// `http_to_https` (`on: false` does nothing), with a port other than 443.
    Https { on: bool, port: Option<u16> },
    Uri(Vec<Piece>),
    /// The path's first match replaced.
    Regex(Regex, Vec<u8>),
}

/// A piece of a `uri`: text, or a variable's value (or its default).
enum Piece {
    Text(String),
    Var(Var, Option<String>),
}

/// Splits `uri` into text and variables (`sluice_core::template`: APISIX's redirect pattern
/// finds the same `$name`, `${name}` and `\$name`).
fn parse_location(uri: &str) -> Result<Vec<Piece>, String> {
    let mut out = Vec::new();
    for seg in sluice_core::template::split(uri) {
        out.push(match seg {
            Segment::Text(t) => Piece::Text(t),
            Segment::Ref { name, default } => {
                let var = Var::parse(name).map_err(|e| format!("${name}: {e}"))?;
                Piece::Var(var, default.map(str::to_owned))
            }
        });
    }
    Ok(out)
}

struct Redirect {
    to: To,
    code: u16,
    encode: bool,
    append_query: bool,
}

impl Plugin for Redirect {
    fn phases(&self) -> Phases {
        Phases::REWRITE
    }

    fn rewrite(&self, req: &mut RequestHead, cx: &mut Ctx<'_>) -> Flow {
        let mut code = self.code;
        let mut location = match &self.to {
            To::Https { on, port } => {
                let https = match req.header("x-forwarded-proto") {
                    Some(p) => p.eq_ignore_ascii_case(b"https"),
                    None => cx.is_https(),
                };
                if !on || https {
                    return Flow::Continue;
                }
                code = match req.method_bytes() {
                    b"GET" | b"HEAD" => 301,
                    _ => 308,
                };
                let host = Var::Host.value(req, cx).unwrap_or_default();
                let mut l = b"https://".to_vec();
                l.extend_from_slice(&host);
                if let Some(p) = port {
                    l.extend_from_slice(format!(":{p}").as_bytes());
                }
                l.extend_from_slice(req.original_target());
                l
            }
            To::Uri(pieces) => {
                let mut l = Vec::new();
                for p in pieces {
                    match p {
                        Piece::Text(t) => l.extend_from_slice(t.as_bytes()),
                        Piece::Var(var, default) => match (var.value(req, cx), default) {
                            (Some(v), _) => l.extend_from_slice(&v),
                            (None, Some(d)) => l.extend_from_slice(d.as_bytes()),
                            (None, None) => {}
                        },
                    }
                }
                l
            }
            To::Regex(re, replacement) => {
                let path = req.path();
                if !re.is_match(path) {
                    return Flow::Continue;
                }
                re.replace(path, replacement.as_slice()).into_owned()
            }
        };
        let query_at = memchr::memchr(b'?', &location);
        if self.encode {
            let end = query_at.unwrap_or(location.len());
            let mut encoded = escape_uri(&location[..end]);
            encoded.extend_from_slice(&location[end..]);
            location = encoded;
        }
        if self.append_query
            && let Some(q) = req.query()
        {
            location.push(if query_at.is_some() { b'&' } else { b'?' });
            location.extend_from_slice(q);
        }
        Flow::Respond(answer(code, &location))
    }
}

/// The redirect: `Location`, and for 3xx the small HTML page NGINX (so APISIX) sends with it.
fn answer(code: u16, location: &[u8]) -> Response {
    if !(300..400).contains(&code) {
        return Response::new(code).header("Location", location);
    }
    sluice_core::http::write::page(code).header("Location", location)
}

/// NGINX's `ngx_escape_uri` (`NGX_ESCAPE_URI`, what APISIX's `encode_uri` calls): control
/// characters, space, `#`, `?`, DEL and non-ASCII bytes as `%XX`; `%` too, unless it already
/// starts an escape.
fn escape_uri(s: &[u8]) -> Vec<u8> {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = Vec::with_capacity(s.len() + 8);
    for (i, &b) in s.iter().enumerate() {
        let escaped_already = b == b'%'
            && s.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
            && s.get(i + 2).is_some_and(u8::is_ascii_hexdigit);
        let escape = b <= 0x20 || b >= 0x7f || matches!(b, b'#' | b'?') || (b == b'%' && !escaped_already);
        if escape {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        } else {
            out.push(b);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::tests::*;
    use sluice_config::PluginScope;

    /// Status and Location for `raw` on a plain connection.
    fn redirect(yaml: &str, raw: &str) -> Option<(u16, String)> {
        let b = build("redirect", yaml, &[]);
        let mut cx = ctx(&b.consumers, "192.0.2.1:1");
        run(&*b.plugin, &mut head(raw), &mut cx).map(|r| {
            let l = r
                .headers
                .iter()
                .find(|(n, _)| n == "Location")
                .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_default();
            (r.status, l)
        })
    }

    fn get(target: &str) -> String {
        format!("GET {target} HTTP/1.1\r\nHost: Foo.COM:9080\r\n\r\n")
    }

    #[test]
    fn uri_templates_read_variables_as_apisix_does() {
        // APISIX's t/plugin/redirect.t: "$uri/test/add", "${uri}bar", "\$uri/foo$uri\$uri/bar".
        assert_eq!(
            redirect("{uri: \"$uri/test/add\", ret_code: 301}", &get("/hello?x=1")),
            Some((301, "/hello/test/add".into()))
        );
        assert_eq!(
            redirect("{uri: \"${uri}bar\"}", &get("/hello")),
            Some((302, "/hellobar".into()))
        );
        assert_eq!(
            redirect("{uri: \"\\\\$uri/foo$uri\\\\$uri/bar\"}", &get("/hello")),
            Some((302, "\\$uri/foo/hello\\$uri/bar".into()))
        );
        assert_eq!(
            redirect("{uri: \"/foo$$uri\"}", &get("/hello")),
            Some((302, "/foo$/hello".into()))
        );
        // A variable without a value is empty; the query is added with append_query_string.
        assert_eq!(
            redirect(
                "{uri: \"https://$host/x/$arg_missing$http_x_none\", append_query_string: true}",
                &get("/a?k=v")
            ),
            Some((302, "https://foo.com/x/?k=v".into()))
        );
        assert_eq!(
            redirect("{uri: \"/x?a=1\", append_query_string: true}", &get("/a?k=v")),
            Some((302, "/x?a=1&k=v".into()))
        );
    }

    #[test]
    fn http_to_https_keeps_the_target_and_picks_301_or_308() {
        let cfg = "{http_to_https: true}";
        assert_eq!(
            redirect(cfg, &get("/hello?x=1")),
            Some((301, "https://foo.com/hello?x=1".into()))
        );
        let post = "POST /hello HTTP/1.1\r\nHost: foo.com\r\nContent-Length: 0\r\n\r\n";
        assert_eq!(
            redirect(cfg, post),
            Some((308, "https://foo.com/hello".into()))
        );
        // Already HTTPS for the proxy in front: passed on.
        let forwarded = "GET /hello HTTP/1.1\r\nHost: foo.com\r\nX-Forwarded-Proto: HTTPS\r\n\r\n";
        assert_eq!(redirect(cfg, forwarded), None);
        assert_eq!(redirect("{http_to_https: false}", &get("/a")), None);
    }

    #[test]
    fn regex_uri_redirects_only_what_matches_and_encode_uri_escapes() {
        let cfg = "{regex_uri: [\"^/test/(.*)\", \"http://test.com/${1}\"], ret_code: 301, encode_uri: true}";
        assert_eq!(
            redirect(cfg, &get("/test/with%20space")),
            Some((301, "http://test.com/with%20space".into()))
        );
        assert_eq!(redirect(cfg, &get("/other")), None);
        assert_eq!(
            String::from_utf8(super::escape_uri("/a b#c?%zz%41é".as_bytes())).unwrap(),
            "/a%20b%23c%3F%25zz%41%C3%A9"
        );
        assert_eq!(
            redirect("{regex_uri: [\"^/(a)(b)\", \"/$2_$1\"]}", &get("/ab/c")),
            Some((302, "/b_a/c".into()))
        );
    }

    #[test]
    fn bad_configurations_are_refused_with_paths() {
        let e = |yaml: &str| check("redirect", yaml, PluginScope::Route);
        assert_eq!(
            e("{uri: /a, http_to_https: true}"),
            ["plugins.redirect: give exactly one of http_to_https, uri and regex_uri"]
        );
        assert_eq!(
            e("{}"),
            ["plugins.redirect: give exactly one of http_to_https, uri and regex_uri"]
        );
        assert_eq!(
            e("{http_to_https: true, append_query_string: true}"),
            ["plugins.redirect: only one of http_to_https and append_query_string can be configured"]
        );
        assert_eq!(
            e("{uri: /a, ret_code: 99}"),
            ["plugins.redirect.ret_code: must be a status code from 200 to 599, got 99"]
        );
        assert_eq!(e("{uri: /}"), ["plugins.redirect.uri: must be at least 2 characters"]);
        assert_eq!(
            e("{regex_uri: [\"(\"]}"),
            ["plugins.redirect.regex_uri: must be [regex, replacement]"]
        );
        assert!(e("{regex_uri: [\"(\", x]}")[0]
            .starts_with("plugins.redirect.regex_uri.0: invalid regex: "));
        assert!(e("{uri: \"/$nope_var\"}")[0]
            .starts_with("plugins.redirect.uri: $nope_var: unknown variable \"nope_var\""));
    }
}
