//! `proxy-rewrite`: changes the request before it goes upstream: its path (`uri`, `regex_uri`,
//! or stripping a prefix or leading segments, as Zuul's `prefix` and ServiceComb's
//! `prefixSegmentCount` do), `host`, `method` and headers.
//!
//! `{uri, regex_uri: [regex, replacement], strip_prefix, strip_segments, host, method,
//! headers: {set: {name: value}, add: {name: value}, remove: [name]}}`. `uri` and header values
//! may use request variables (`$remote_addr`, `$http_x_user`, `$arg_page`, ...); `regex_uri`
//! replacements use `$1`. The query string is kept unless the new `uri` has its own. Routing
//! already happened: a rewrite changes what the upstream sees, not which route serves.

use std::sync::Arc;

use regex::bytes::Regex;
use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::expr::Var;
use sluice_core::template::Segment;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, Phases, PluginFactory, parse_config};
use sluice_core::{Ctx, Flow, Plugin};
use sluice_router::Method;

use crate::util::{Num, check_header_name, check_header_value, whole};

/// Most leading segments `strip_segments` removes (a path with fewer becomes `/`): more than
/// any real path has, and the rewrite stops early once the path is used up.
const MAX_SEGMENTS: u64 = 1000;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    uri: Option<String>,
    #[serde(default)]
    regex_uri: Option<Vec<String>>,
    #[serde(default)]
    strip_prefix: Option<String>,
    #[serde(default)]
    strip_segments: Option<Num>,
    #[serde(default)]
    host: Option<String>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    headers: Option<Headers>,
}

#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Headers {
    #[serde(default)]
    set: indexmap_like::Map,
    #[serde(default)]
    add: indexmap_like::Map,
    #[serde(default)]
    remove: Vec<String>,
}

/// Header maps keep their configuration order.
mod indexmap_like {
    pub(crate) type Map = serde_json::Map<String, serde_json::Value>;
}

/// A value with `$variable` references, split at load time.
#[derive(Debug, Clone)]
pub(crate) enum Piece {
    Text(Vec<u8>),
    /// A variable, and what is written when it has no value (`${name ?? default}`).
    Var(Var, Option<Vec<u8>>),
    /// `$uri_param_<name>`: a segment of the request's path as routing matched it (the
    /// route's `:name` parameter).
    UriParam(usize),
}

/// True when a template reads the request body (`$post_arg_name`).
pub(crate) fn reads_body(t: &[Piece]) -> bool {
    t.iter()
        .any(|p| matches!(p, Piece::Var(v, _) if v.needs_body()))
}

/// Where the route's `:name` parameter is (see [`BuildCx::uri_param`]).
pub(crate) type Params<'a> = &'a dyn Fn(&str) -> Result<usize, String>;

/// Parses `text` as APISIX's templates are (`sluice_core::template`): `$name`, `${name}`,
/// `${name ?? default}`; `\$` is not a reference.
pub(crate) fn template(text: &str, params: Params<'_>) -> Result<Vec<Piece>, String> {
    let mut out = Vec::new();
    for seg in sluice_core::template::split(text) {
        out.push(match seg {
            Segment::Text(t) => Piece::Text(t.into_bytes()),
            Segment::Ref { name, default } => match name.strip_prefix("uri_param_") {
                Some(param) => Piece::UriParam(params(param)?),
                None => Piece::Var(Var::parse(name)?, default.map(|d| d.as_bytes().to_vec())),
            },
        });
    }
    Ok(out)
}

/// Renders a template for a request (a missing variable renders empty).
pub(crate) fn render<E: sluice_core::expr::Env + ?Sized>(
    pieces: &[Piece],
    req: &RequestHead,
    cx: &E,
) -> Vec<u8> {
    let mut out = Vec::new();
    for p in pieces {
        match p {
            Piece::Text(t) => out.extend_from_slice(t),
            Piece::Var(v, default) => match (v.value(req, cx), default) {
                (Some(val), _) => out.extend_from_slice(&val),
                (None, Some(d)) => out.extend_from_slice(d),
                (None, None) => {}
            },
            Piece::UriParam(at) => {
                // The path the route matched: the client's, normalized as routing does it
                // (`/x/../users/42` matched `/users/:id` as `/users/42`).
                let path = sluice_router::normalize_path(req.original_path());
                if let Some(seg) = path.split(|&b| b == b'/').nth(*at) {
                    out.extend_from_slice(seg);
                }
            }
        }
    }
    out
}

enum PathRule {
    Uri(Vec<Piece>),
    Regex(Regex, Vec<u8>),
    StripPrefix(Vec<u8>),
    StripSegments(usize),
}

pub(crate) struct Factory;

/// Parses a header map (`set` or `add`), checking names and values (also response-rewrite's).
/// With `lists`, a value may be a list (proxy-rewrite, as APISIX: `add` adds each, `set`
/// replaces the header with them all); its items come out as consecutive entries of one name.
pub(crate) fn header_map<'a>(
    map: impl IntoIterator<Item = (&'a String, &'a serde_json::Value)>,
    lists: bool,
    params: Params<'_>,
    v: &mut Validator,
) -> Option<Vec<(String, Vec<Piece>)>> {
    let mut out = Vec::new();
    let mut ok = true;
    let text_of = |value: &serde_json::Value| {
        value
            .as_str()
            .map(str::to_owned)
            .or_else(|| value.as_number().map(|n| n.to_string()))
    };
    for (name, value) in map {
        v.field(name, |v| {
            let texts: Vec<String> = match value.as_array() {
                Some(items) if lists && !items.is_empty() => {
                    let texts: Vec<Option<String>> = items.iter().map(text_of).collect();
                    if let Some(bad) = texts.iter().position(Option::is_none) {
                        v.index(bad, |v| v.error("must be a string"));
                        ok = false;
                        return;
                    }
                    texts.into_iter().flatten().collect()
                }
                _ => match text_of(value) {
                    Some(t) => vec![t],
                    None => {
                        v.error(if lists {
                            "must be a string or a non-empty list of strings"
                        } else {
                            "must be a string"
                        });
                        ok = false;
                        return;
                    }
                },
            };
            if !check_header_name(name, v) {
                ok = false;
                return;
            }
            for text in texts {
                if !check_header_value(&text, v) {
                    ok = false;
                    return;
                }
                match template(&text, params) {
                    Ok(t) => out.push((name.clone(), t)),
                    Err(e) => {
                        v.error(e);
                        ok = false;
                        return;
                    }
                }
            }
        });
    }
    ok.then_some(out)
}

impl PluginFactory for Factory {
    crate::util::describe!("proxy-rewrite", 1008, Config);

    fn build(
        &self,
        config: &Value,
        cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        let given = [
            c.uri.is_some(),
            c.regex_uri.is_some(),
            c.strip_prefix.is_some(),
            c.strip_segments.is_some(),
        ];
        if given.iter().filter(|g| **g).count() > 1 {
            v.error("use only one of uri, regex_uri, strip_prefix and strip_segments");
            return None;
        }
        let mut ok = true;
        let path = if let Some(u) = &c.uri {
            if !u.starts_with('/') || u.bytes().any(|b| b.is_ascii_control() || b == b' ') {
                v.error_at(
                    "uri",
                    format!("must be a path starting with \"/\", got \"{u}\""),
                );
                return None;
            }
            match template(u, &|n| cx.uri_param(n)) {
                Ok(t) => Some(PathRule::Uri(t)),
                Err(e) => {
                    v.error_at("uri", e);
                    return None;
                }
            }
        } else if let Some(r) = &c.regex_uri {
            if r.len() != 2 {
                v.error_at("regex_uri", "must be [regex, replacement]");
                return None;
            }
            match Regex::new(&r[0]) {
                Ok(re) => Some(PathRule::Regex(re, crate::util::apisix_replacement(&r[1]))),
                Err(e) => {
                    v.field("regex_uri", |v| {
                        v.index(0, |v| v.error(format!("invalid regex: {e}")))
                    });
                    return None;
                }
            }
        } else if let Some(p) = &c.strip_prefix {
            if !p.starts_with('/') || p.len() < 2 {
                v.error_at("strip_prefix", "must be a path prefix like /api");
                return None;
            }
            Some(PathRule::StripPrefix(
                p.trim_end_matches('/').as_bytes().to_vec(),
            ))
        } else if let Some(n) = c.strip_segments {
            let n = v.field("strip_segments", |v| whole(n, 1, MAX_SEGMENTS, "", v))?;
            Some(PathRule::StripSegments(n as usize))
        } else {
            None
        };
        if let Some(h) = &c.host
            && (h.is_empty()
                || h.bytes()
                    .any(|b| b.is_ascii_control() || b == b' ' || b == b'/'))
        {
            v.error_at("host", format!("invalid host \"{h}\""));
            ok = false;
        }
        if let Some(m) = &c.method
            && Method::from_config(m).is_none()
        {
            v.error_at(
                "method",
                format!(
                    "unknown method \"{m}\", expected one of {}",
                    Method::known_names().join(", ")
                ),
            );
            ok = false;
        }
        let headers = c.headers.unwrap_or_default();
        let (set, add) = v.field("headers", |v| {
            let set = v.field("set", |v| {
                header_map(&headers.set, true, &|n| cx.uri_param(n), v)
            });
            let add = v.field("add", |v| {
                header_map(&headers.add, true, &|n| cx.uri_param(n), v)
            });
            v.field("remove", |v| {
                for (i, name) in headers.remove.iter().enumerate() {
                    if !v.index(i, |v| check_header_name(name, v)) {
                        ok = false;
                    }
                }
            });
            (set, add)
        });
        let (set, add) = (set?, add?);
        ok.then(|| {
            Arc::new(ProxyRewrite {
                path,
                host: c.host,
                method: c.method,
                set,
                add,
                remove: headers.remove,
            }) as Arc<dyn Plugin>
        })
    }
}

struct ProxyRewrite {
    path: Option<PathRule>,
    host: Option<String>,
    method: Option<String>,
    set: Vec<(String, Vec<Piece>)>,
    add: Vec<(String, Vec<Piece>)>,
    remove: Vec<String>,
}

impl ProxyRewrite {
    fn new_target(&self, req: &RequestHead, cx: &Ctx<'_>) -> Option<Vec<u8>> {
        let path = req.path();
        let new_path = match self.path.as_ref()? {
            PathRule::Uri(t) => render(t, req, cx),
            PathRule::Regex(re, replacement) => {
                if !re.is_match(path) {
                    return None;
                }
                re.replace(path, replacement.as_slice()).into_owned()
            }
            PathRule::StripPrefix(p) => match path.strip_prefix(p.as_slice()) {
                Some(rest) if rest.is_empty() || rest[0] == b'/' => {
                    if rest.is_empty() {
                        b"/".to_vec()
                    } else {
                        rest.to_vec()
                    }
                }
                _ => return None,
            },
            PathRule::StripSegments(n) => {
                let mut rest = path;
                for _ in 0..*n {
                    if rest.is_empty() {
                        break;
                    }
                    let after = rest.strip_prefix(b"/").unwrap_or(rest);
                    rest = &after[memchr::memchr(b'/', after).unwrap_or(after.len())..];
                }
                if rest.is_empty() {
                    b"/".to_vec()
                } else {
                    rest.to_vec()
                }
            }
        };
        let mut target = new_path;
        if !target.contains(&b'?')
            && let Some(q) = req.query()
        {
            target.push(b'?');
            target.extend_from_slice(q);
        }
        Some(target)
    }
}

impl Plugin for ProxyRewrite {
    fn needs_body(&self) -> bool {
        let uri = match &self.path {
            Some(PathRule::Uri(t)) => reads_body(t),
            _ => false,
        };
        uri || self.set.iter().chain(&self.add).any(|(_, t)| reads_body(t))
    }

    fn phases(&self) -> Phases {
        Phases::REWRITE
    }

    fn rewrite(&self, req: &mut RequestHead, cx: &mut Ctx<'_>) -> Flow {
        if let Some(t) = self.new_target(req, cx) {
            req.set_target(t);
        }
        if let Some(h) = &self.host {
            req.set_upstream_host(h.as_bytes());
        }
        if let Some(m) = &self.method {
            req.set_method(m);
        }
        // APISIX's order: add, then set, then remove (a removed name loses what was added or
        // set; a set one loses what was added).
        for (name, t) in &self.add {
            let value = render(t, req, cx);
            req.add_header(name, &value);
        }
        // A list's items are consecutive entries of one name: the first replaces, the others add.
        let mut previous: Option<&str> = None;
        for (name, t) in &self.set {
            let value = render(t, req, cx);
            if previous == Some(name.as_str()) {
                req.add_header(name, &value);
            } else {
                req.set_header(name, &value);
            }
            previous = Some(name);
        }
        for name in &self.remove {
            req.remove_header(name);
        }
        Flow::Continue
    }
}

#[cfg(test)]
mod tests {
    use crate::tests::*;
    use sluice_config::PluginScope;

    fn rewritten(yaml: &str, raw: &str) -> sluice_core::http::RequestHead {
        let b = build("proxy-rewrite", yaml, &[]);
        let mut req = head(raw);
        let mut cx = ctx(&b.consumers, CLIENT);
        assert!(run(&*b.plugin, &mut req, &mut cx).is_none());
        req
    }

    #[test]
    fn paths_are_rewritten_keeping_the_query() {
        let r = rewritten(
            "{uri: \"/v2/$arg_id\"}",
            "GET /old?id=7 HTTP/1.1\r\nHost: a\r\n\r\n",
        );
        assert_eq!(r.target(), b"/v2/7?id=7");
        let r = rewritten(
            "{regex_uri: [\"^/api/(.*)/(.*)\", \"/$2/$1\"]}",
            "GET /api/a/b?q HTTP/1.1\r\nHost: a\r\n\r\n",
        );
        assert_eq!(r.target(), b"/b/a?q");
        let r = rewritten(
            "{regex_uri: [\"^/nomatch\", \"/x\"]}",
            "GET /api HTTP/1.1\r\nHost: a\r\n\r\n",
        );
        assert_eq!(r.target(), b"/api");
    }

    /// APISIX's templates (`resolve_var`): `${name}`, `${name ?? default}`, `$$name` (a `$`,
    /// then the variable), `\$name` (not a reference: written as it is).
    #[test]
    fn templates_read_references_as_apisix_does() {
        let get = "GET /old?id=7 HTTP/1.1\r\nHost: a\r\n\r\n";
        let header = |yaml: &str| {
            let r = rewritten(yaml, get);
            String::from_utf8(r.header("x-t").unwrap().to_vec()).unwrap()
        };
        assert_eq!(header("{headers: {set: {X-T: \"${arg_id}x\"}}}"), "7x");
        assert_eq!(
            header("{headers: {set: {X-T: \"${http_x_none ?? anon}-${arg_id ?? 0}\"}}}"),
            "anon-7"
        );
        assert_eq!(header("{headers: {set: {X-T: \"a$$arg_id\"}}}"), "a$7");
        assert_eq!(
            header("{headers: {set: {X-T: \"\\\\$arg_id $arg_id\"}}}"),
            "\\$arg_id 7"
        );
        assert_eq!(
            rewritten("{uri: \"/v2${uri}\"}", get).target(),
            b"/v2/old?id=7"
        );
    }

    #[test]
    fn prefixes_and_segments_are_stripped() {
        assert_eq!(
            rewritten(
                "{strip_prefix: /api}",
                "GET /api/users/1 HTTP/1.1\r\nHost: a\r\n\r\n"
            )
            .target(),
            b"/users/1"
        );
        assert_eq!(
            rewritten(
                "{strip_prefix: /api/}",
                "GET /api HTTP/1.1\r\nHost: a\r\n\r\n"
            )
            .target(),
            b"/"
        );
        assert_eq!(
            rewritten(
                "{strip_prefix: /api}",
                "GET /apix/1 HTTP/1.1\r\nHost: a\r\n\r\n"
            )
            .target(),
            b"/apix/1"
        );
        assert_eq!(
            rewritten(
                "{strip_segments: 2}",
                "GET /svc/v1/users?x=1 HTTP/1.1\r\nHost: a\r\n\r\n"
            )
            .target(),
            b"/users?x=1"
        );
        assert_eq!(
            rewritten(
                "{strip_segments: 3}",
                "GET /svc/v1 HTTP/1.1\r\nHost: a\r\n\r\n"
            )
            .target(),
            b"/"
        );
        // The most segments: the path is used up at once, the rest of the count skipped.
        assert_eq!(
            rewritten(
                "{strip_segments: 1000}",
                "GET /svc/v1?q=1 HTTP/1.1\r\nHost: a\r\n\r\n"
            )
            .target(),
            b"/?q=1"
        );
    }

    #[test]
    fn strip_segments_is_bounded() {
        // 18446744073709551615 was accepted, and each request looped that many times.
        for (n, shown) in [
            ("0", "0"),
            ("1001", "1001"),
            ("18446744073709551615", "18446744073709551615"),
            ("-1", "-1"),
            ("1.5", "1.5"),
        ] {
            assert_eq!(
                check(
                    "proxy-rewrite",
                    &format!("{{strip_segments: {n}}}"),
                    PluginScope::Route
                ),
                vec![format!(
                    "plugins.proxy-rewrite.strip_segments: must be a whole number from 1 to 1000, got {shown}"
                )]
            );
        }
    }

    #[test]
    fn host_method_and_headers_change() {
        let r = rewritten(
            "{host: backend.internal, method: POST, headers: {set: {X-Client: $remote_addr, X-Keep: new}, add: {X-Multi: two}, remove: [X-Secret]}}",
            "GET / HTTP/1.1\r\nHost: a\r\nX-Secret: s\r\nX-Keep: old\r\nX-Multi: one\r\n\r\n",
        );
        assert_eq!(r.upstream_host(), Some(&b"backend.internal"[..]));
        assert_eq!(r.method_bytes(), b"POST");
        assert_eq!(r.header("x-secret"), None);
        assert_eq!(r.header("x-keep"), Some(&b"new"[..]));
        assert_eq!(r.header("x-client"), Some(&b"192.0.2.10"[..]));
        assert_eq!(
            r.header_values("x-multi").collect::<Vec<_>>(),
            vec![&b"one"[..], &b"two"[..]]
        );
    }

    #[test]
    fn header_values_may_be_lists_as_in_apisix() {
        // APISIX's docs: `set: {X-Api-Version: [v1, v2]}` replaces the client's value with both;
        // `add` with a list adds each.
        let r = rewritten(
            "{headers: {set: {X-Api-Version: [v1, v2], X-One: solo}, add: {X-Tag: [a, 2]}}}",
            "GET / HTTP/1.1\r\nHost: a\r\nX-Api-Version: v9\r\nX-Tag: c\r\n\r\n",
        );
        assert_eq!(
            r.header_values("x-api-version").collect::<Vec<_>>(),
            vec![&b"v1"[..], b"v2"]
        );
        assert_eq!(
            r.header_values("x-one").collect::<Vec<_>>(),
            vec![&b"solo"[..]]
        );
        assert_eq!(
            r.header_values("x-tag").collect::<Vec<_>>(),
            vec![&b"c"[..], b"a", b"2"]
        );
        let e = check(
            "proxy-rewrite",
            "{headers: {set: {X-A: [], X-B: [ok, {no: 1}]}}}",
            sluice_config::PluginScope::Route,
        );
        assert_eq!(
            e,
            vec![
                "plugins.proxy-rewrite.headers.set.X-A: must be a string or a non-empty list of strings",
                "plugins.proxy-rewrite.headers.set.X-B[1]: must be a string"
            ]
        );
    }

    #[test]
    fn header_operations_run_add_then_set_then_remove_as_apisix() {
        let r = rewritten(
            "{headers: {add: {X-A: added, X-C: added}, set: {X-A: set, X-B: set}, remove: [X-B, X-C]}}",
            "GET / HTTP/1.1\r\nHost: a\r\nX-A: client\r\nX-C: client\r\n\r\n",
        );
        assert_eq!(
            r.header_values("x-a").collect::<Vec<_>>(),
            vec![&b"set"[..]]
        );
        assert_eq!(r.header("x-b"), None);
        assert_eq!(r.header("x-c"), None);
    }

    #[test]
    fn configurations_are_checked_with_paths() {
        assert_eq!(
            check(
                "proxy-rewrite",
                "{headers: {set: {Host: x, \"X-Ok\": \"a\\nb\"}, remove: [Content-Length]}}",
                PluginScope::Route
            ),
            vec![
                "plugins.proxy-rewrite.headers.set.Host: header \"Host\" is managed by the gateway and cannot be changed here",
                "plugins.proxy-rewrite.headers.set.X-Ok: header values must not contain CR, LF or NUL",
                "plugins.proxy-rewrite.headers.remove[0]: header \"Content-Length\" is managed by the gateway and cannot be changed here"
            ]
        );
        assert_eq!(
            check(
                "proxy-rewrite",
                "{uri: /a, strip_segments: 1}",
                PluginScope::Route
            ),
            vec![
                "plugins.proxy-rewrite: use only one of uri, regex_uri, strip_prefix and strip_segments"
            ]
        );
        assert_eq!(
            check(
                "proxy-rewrite",
                "{regex_uri: [\"(\", x], method: FETCH}",
                PluginScope::Route
            )[0],
            "plugins.proxy-rewrite.regex_uri[0]: invalid regex: (: unclosed group"
        );
    }
}
