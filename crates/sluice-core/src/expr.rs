//! Request variables and conditions, in APISIX's vocabulary: `remote_addr`, `uri`,
//! `http_x_user` (a header), `arg_page` (a query argument), `cookie_session`, ...; and the
//! `vars` conditions of lua-resty-expr: `[["http_x_canary", "==", "1"], ["arg_v", "~~", "^2"]]`.
//! Parsed at load time; evaluated without allocation except for address variables.

use std::borrow::Cow;
use std::fmt;

use regex::bytes::Regex;
use serde_json::Value;
use sluice_config::Validator;

use crate::ctx::Ctx;
use crate::http::RequestHead;

/// A request variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Var {
    /// Client IP address.
    RemoteAddr,
    /// Client port.
    RemotePort,
    /// IP address the request arrived on.
    ServerAddr,
    /// Port the request arrived on.
    ServerPort,
    /// Authenticated consumer's name.
    ConsumerName,
    /// Matched route's id.
    RouteId,
    /// Path, without the query (after rewrites).
    Uri,
    /// Path and query as the client sent them (before rewrites).
    RequestUri,
    /// `Host` without the port, lowercased.
    Host,
    /// Method.
    RequestMethod,
    /// Always `http` for now.
    Scheme,
    /// `ssl_client_s_dn`: the subject of the client certificate verified by mutual TLS.
    SslClientSubject,
    /// A header field (`http_x_api_key` is `X-Api-Key`).
    Header(String),
    /// A query argument.
    Arg(String),
    /// A cookie.
    Cookie(String),
}

impl Var {
    /// Parses a variable name.
    pub fn parse(name: &str) -> Result<Var, String> {
        let v = match name {
            "remote_addr" => Var::RemoteAddr,
            "remote_port" => Var::RemotePort,
            "server_addr" => Var::ServerAddr,
            "server_port" => Var::ServerPort,
            "consumer_name" => Var::ConsumerName,
            "route_id" => Var::RouteId,
            "uri" => Var::Uri,
            "request_uri" => Var::RequestUri,
            "host" => Var::Host,
            "request_method" => Var::RequestMethod,
            "scheme" => Var::Scheme,
            "ssl_client_s_dn" => Var::SslClientSubject,
            _ => {
                let valid = |s: &str| {
                    !s.is_empty()
                        && s.bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
                };
                if let Some(h) = name.strip_prefix("http_").filter(|s| valid(s)) {
                    Var::Header(h.replace('_', "-"))
                } else if let Some(a) = name.strip_prefix("arg_").filter(|s| valid(s)) {
                    Var::Arg(a.to_owned())
                } else if let Some(c) = name.strip_prefix("cookie_").filter(|s| valid(s)) {
                    Var::Cookie(c.to_owned())
                } else {
                    return Err(format!(
                        "unknown variable \"{name}\", expected remote_addr, server_addr, consumer_name, uri, host, http_<header>, arg_<name>, cookie_<name> or another request variable"
                    ));
                }
            }
        };
        Ok(v)
    }

    /// The variable's value for a request, if it has one.
    pub fn value<'a>(&self, req: &'a RequestHead, cx: &'a Ctx<'_>) -> Option<Cow<'a, [u8]>> {
        let owned = |s: String| Some(Cow::Owned(s.into_bytes()));
        match self {
            Var::RemoteAddr => owned(cx.client().ip().to_string()),
            Var::RemotePort => owned(cx.client().port().to_string()),
            Var::ServerAddr => owned(cx.server().ip().to_string()),
            Var::ServerPort => owned(cx.server().port().to_string()),
            Var::ConsumerName => cx.consumer_name().map(|n| Cow::Borrowed(n.as_bytes())),
            Var::RouteId => Some(Cow::Borrowed(cx.route_id().as_bytes())),
            Var::Uri => Some(Cow::Borrowed(req.path())),
            Var::RequestUri => Some(Cow::Borrowed(req.original_target())),
            Var::Host => {
                let h = sluice_router::host_without_port(req.host());
                Some(if h.iter().any(u8::is_ascii_uppercase) {
                    Cow::Owned(h.to_ascii_lowercase())
                } else {
                    Cow::Borrowed(h)
                })
            }
            Var::RequestMethod => Some(Cow::Borrowed(req.method_bytes())),
            Var::Scheme => Some(Cow::Borrowed(if cx.is_https() {
                b"https"
            } else {
                b"http"
            })),
            Var::SslClientSubject => cx
                .client_cert_subject()
                .map(|s| Cow::Borrowed(s.as_bytes())),
            Var::Header(h) => req.header(h).map(Cow::Borrowed),
            Var::Arg(a) => req.query_arg(a).map(Cow::Owned),
            Var::Cookie(c) => req.cookie(c).map(Cow::Borrowed),
        }
    }
}

impl fmt::Display for Var {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Var::Header(h) => write!(f, "http_{}", h.replace('-', "_")),
            Var::Arg(a) => write!(f, "arg_{a}"),
            Var::Cookie(c) => write!(f, "cookie_{c}"),
            other => write!(f, "{}", format!("{other:?}").to_lowercase()),
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Eq(Vec<u8>),
    Ne(Vec<u8>),
    Gt(f64),
    Ge(f64),
    Lt(f64),
    Le(f64),
    Regex(Regex),
    In(Vec<Vec<u8>>),
    Has(Vec<u8>),
}

/// One condition: `[var, op, value]`, or `[var, "!", op, value]` for its negation.
#[derive(Debug, Clone)]
pub struct Cond {
    var: Var,
    negate: bool,
    op: Op,
}

/// A `vars` expression: conditions that must all hold (`[[var, op, value], ...]`), or, in
/// APISIX's nested form, groups of them of which one must hold
/// (`[[[var, op, value], ...], [...]]`).
#[derive(Debug, Clone, Default)]
pub struct Conds(Vec<Vec<Cond>>);

fn scalar(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::String(s) => Some(s.as_bytes().to_vec()),
        Value::Number(n) => Some(n.to_string().into_bytes()),
        Value::Bool(b) => Some(b.to_string().into_bytes()),
        _ => None,
    }
}

impl Cond {
    fn parse(v: &Value, val: &mut Validator) -> Option<Cond> {
        let Some(items) = v.as_array() else {
            val.error("must be a list like [\"http_x_canary\", \"==\", \"1\"]");
            return None;
        };
        let (negate, rest) = match items.get(1).and_then(Value::as_str) {
            Some("!") => (true, [&items[..1], &items[2..]].concat()),
            _ => (false, items.clone()),
        };
        if rest.len() != 3 {
            val.error("must have a variable, an operator and a value");
            return None;
        }
        let var = match rest[0].as_str().map(Var::parse) {
            Some(Ok(var)) => var,
            Some(Err(e)) => {
                val.index(0, |val| val.error(e));
                return None;
            }
            None => {
                val.index(0, |val| val.error("must be a variable name"));
                return None;
            }
        };
        let opname = rest[1].as_str().unwrap_or("");
        let value = &rest[2];
        let num = |val: &mut Validator| -> Option<f64> {
            let n = value
                .as_f64()
                .or_else(|| value.as_str().and_then(|s| s.parse().ok()));
            if n.is_none() {
                val.error(format!("operator \"{opname}\" needs a number"));
            }
            n
        };
        let op = match opname {
            "==" | "~=" | "has" => match scalar(value) {
                Some(s) => match opname {
                    "==" => Op::Eq(s),
                    "~=" => Op::Ne(s),
                    _ => Op::Has(s),
                },
                None => {
                    val.error(format!(
                        "operator \"{opname}\" needs a string, a number or a boolean"
                    ));
                    return None;
                }
            },
            ">" => Op::Gt(num(val)?),
            ">=" => Op::Ge(num(val)?),
            "<" => Op::Lt(num(val)?),
            "<=" => Op::Le(num(val)?),
            "~~" | "~*" => {
                let Some(src) = value.as_str() else {
                    val.error("a regex operator needs a string");
                    return None;
                };
                let src = if opname == "~*" {
                    format!("(?i){src}")
                } else {
                    src.to_owned()
                };
                match Regex::new(&src) {
                    Ok(r) => Op::Regex(r),
                    Err(e) => {
                        val.error(format!("invalid regex: {e}"));
                        return None;
                    }
                }
            }
            "in" => match value
                .as_array()
                .map(|a| a.iter().map(scalar).collect::<Option<Vec<_>>>())
            {
                Some(Some(list)) => Op::In(list),
                _ => {
                    val.error("operator \"in\" needs a list of strings or numbers");
                    return None;
                }
            },
            other => {
                val.error(format!(
                    "unknown operator \"{other}\", expected one of ==, ~=, >, >=, <, <=, ~~, ~*, in, has"
                ));
                return None;
            }
        };
        Some(Cond { var, negate, op })
    }

    fn holds(&self, req: &RequestHead, cx: &Ctx<'_>) -> bool {
        let value = self.var.value(req, cx);
        let number = |v: &[u8]| {
            std::str::from_utf8(v)
                .ok()
                .and_then(|s| s.trim().parse::<f64>().ok())
        };
        let r = match (&self.op, value.as_deref()) {
            (Op::Ne(_), None) => true,
            (_, None) => false,
            (Op::Eq(x), Some(v)) => v == x.as_slice(),
            (Op::Ne(x), Some(v)) => v != x.as_slice(),
            (Op::Gt(x), Some(v)) => number(v).is_some_and(|n| n > *x),
            (Op::Ge(x), Some(v)) => number(v).is_some_and(|n| n >= *x),
            (Op::Lt(x), Some(v)) => number(v).is_some_and(|n| n < *x),
            (Op::Le(x), Some(v)) => number(v).is_some_and(|n| n <= *x),
            (Op::Regex(r), Some(v)) => r.is_match(v),
            (Op::In(list), Some(v)) => list.iter().any(|x| x.as_slice() == v),
            (Op::Has(x), Some(v)) => v
                .split(|&b| b == b',')
                .any(|p| p.trim_ascii() == x.as_slice()),
        };
        r != self.negate
    }
}

impl Conds {
    /// Parses a `vars` list (`v` points at it).
    pub fn parse(value: &Value, v: &mut Validator) -> Option<Conds> {
        let Some(items) = value.as_array() else {
            v.error("must be a list of conditions");
            return None;
        };
        let nested = items
            .first()
            .and_then(Value::as_array)
            .and_then(|c| c.first())
            .is_some_and(Value::is_array);
        if !nested {
            return Self::all(items, v).map(|all| {
                Conds(if all.is_empty() {
                    Vec::new()
                } else {
                    vec![all]
                })
            });
        }
        let mut groups = Vec::with_capacity(items.len());
        let mut ok = true;
        for (i, group) in items.iter().enumerate() {
            let parsed = v.index(i, |v| match group.as_array() {
                Some(conds) => Self::all(conds, v),
                None => {
                    v.error("must be a list of conditions");
                    None
                }
            });
            match parsed {
                Some(g) => groups.push(g),
                None => ok = false,
            }
        }
        ok.then_some(Conds(groups))
    }

    fn all(items: &[Value], v: &mut Validator) -> Option<Vec<Cond>> {
        let mut out = Vec::with_capacity(items.len());
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            match v.index(i, |v| Cond::parse(item, v)) {
                Some(c) => out.push(c),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    /// True when there is no condition, or when every condition of one group holds.
    pub fn matches(&self, req: &RequestHead, cx: &Ctx<'_>) -> bool {
        self.0.is_empty()
            || self
                .0
                .iter()
                .any(|all| all.iter().all(|c| c.holds(req, cx)))
    }

    /// True when there is no condition.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A rate-limit key: one variable, several joined (`var_combination`), or a constant.
#[derive(Debug, Clone)]
pub enum Key {
    /// One variable; `remote_addr` is hashed from the address without formatting it.
    Var(Var),
    /// `"$remote_addr $http_x_user"`: the variables' values joined by the literal text.
    Combination(Vec<KeyPart>),
    /// The same key for every request.
    Constant(String),
}

/// A piece of a combined key.
#[derive(Debug, Clone)]
pub enum KeyPart {
    /// Literal text.
    Text(String),
    /// A variable.
    Var(Var),
}

impl Key {
    /// Parses APISIX's `key_type` (`var`, `var_combination`, `constant`) and `key`.
    pub fn parse(key_type: &str, key: &str) -> Result<Key, String> {
        match key_type {
            "var" => Var::parse(key).map(Key::Var),
            "constant" => Ok(Key::Constant(key.to_owned())),
            "var_combination" => {
                let mut parts = Vec::new();
                let mut rest = key;
                while let Some(i) = rest.find('$') {
                    if i > 0 {
                        parts.push(KeyPart::Text(rest[..i].to_owned()));
                    }
                    let after = &rest[i + 1..];
                    let end = after
                        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .unwrap_or(after.len());
                    parts.push(KeyPart::Var(Var::parse(&after[..end])?));
                    rest = &after[end..];
                }
                if !rest.is_empty() {
                    parts.push(KeyPart::Text(rest.to_owned()));
                }
                if !parts.iter().any(|p| matches!(p, KeyPart::Var(_))) {
                    return Err(format!(
                        "\"{key}\" names no variable (write them as $remote_addr)"
                    ));
                }
                Ok(Key::Combination(parts))
            }
            other => Err(format!(
                "unknown key_type \"{other}\", expected var, var_combination or constant"
            )),
        }
    }

    /// Feeds the key for this request to `h`. Returns false when a variable is missing (the
    /// caller then falls back to the client address, as APISIX does).
    pub fn hash_into<H: std::hash::Hasher>(
        &self,
        req: &RequestHead,
        cx: &Ctx<'_>,
        h: &mut H,
    ) -> bool {
        use std::hash::Hash;
        match self {
            Key::Var(Var::RemoteAddr) => {
                cx.client().ip().hash(h);
                true
            }
            Key::Var(var) => match var.value(req, cx) {
                Some(v) => {
                    v.hash(h);
                    true
                }
                None => false,
            },
            Key::Constant(c) => {
                c.hash(h);
                true
            }
            Key::Combination(parts) => {
                let mut any = false;
                for p in parts {
                    match p {
                        KeyPart::Text(t) => t.hash(h),
                        KeyPart::Var(var) => {
                            if let Some(v) = var.value(req, cx) {
                                any = true;
                                v.hash(h);
                            } else {
                                0u8.hash(h);
                            }
                        }
                    }
                }
                any
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ResponseEdits;

    fn matches(vars: &str, raw: &str) -> bool {
        let value: Value = serde_json::from_str(vars).unwrap();
        let mut v = Validator::new();
        let conds = Conds::parse(&value, &mut v).unwrap_or_else(|| panic!("{:?}", v.into_errors()));
        let limits = crate::http::request::HeadLimits {
            max_request_line: 4096,
            max_header_size: 4096,
            max_headers: 32,
        };
        let mut buf = bytes::BytesMut::from(raw.as_bytes());
        let mut req = crate::http::request::parse(&buf.clone(), &limits, &mut Vec::new())
            .unwrap()
            .unwrap();
        req.take_bytes(&mut buf);
        let cx = Ctx::new(
            "192.0.2.1:5".parse().unwrap(),
            "127.0.0.1:80".parse().unwrap(),
            "r",
            &[],
            ResponseEdits::default(),
        );
        conds.matches(&req, &cx)
    }

    const REQ: &str = "GET /api/v2?page=3&tag=a HTTP/1.1\r\nHost: Shop.Example.com:8080\r\nX-User: jack\r\nCookie: s=1\r\n\r\n";

    #[test]
    fn operators_compare_variables() {
        assert!(matches(
            r#"[["http_x_user", "==", "jack"], ["arg_page", ">", 2], ["host", "==", "shop.example.com"]]"#,
            REQ
        ));
        assert!(!matches(
            r#"[["http_x_user", "==", "jack"], ["arg_page", ">", 3]]"#,
            REQ
        ));
        assert!(matches(
            r#"[["uri", "~~", "^/api/v[0-9]+$"], ["arg_tag", "in", ["a", "b"]], ["cookie_s", "~=", "2"]]"#,
            REQ
        ));
        assert!(matches(
            r#"[["http_x_user", "~*", "^JACK$"], ["remote_addr", "==", "192.0.2.1"]]"#,
            REQ
        ));
        assert!(matches(
            r#"[["http_x_missing", "~=", "x"], ["http_x_user", "!", "==", "jill"]]"#,
            REQ
        ));
        assert!(!matches(r#"[["http_x_missing", "==", "x"]]"#, REQ));
        assert!(matches("[]", REQ));
    }

    #[test]
    fn the_nested_form_is_any_of_all_of() {
        assert!(matches(
            r#"[[["arg_page", "==", "9"]], [["http_x_user", "==", "jack"], ["arg_tag", "==", "a"]]]"#,
            REQ
        ));
        assert!(!matches(
            r#"[[["arg_page", "==", "9"]], [["http_x_user", "==", "jill"]]]"#,
            REQ
        ));
    }

    #[test]
    fn bad_conditions_are_reported_with_paths() {
        let value: Value =
            serde_json::from_str(r#"[["nope", "==", 1], ["uri", "<>", 1], ["uri", "~~", "("]]"#)
                .unwrap();
        let mut v = Validator::new();
        v.field("vars", |v| Conds::parse(&value, v));
        let errs: Vec<String> = v.into_errors().iter().map(ToString::to_string).collect();
        assert!(
            errs[0].starts_with("vars[0][0]: unknown variable \"nope\""),
            "{errs:?}"
        );
        assert_eq!(
            errs[1],
            "vars[1]: unknown operator \"<>\", expected one of ==, ~=, >, >=, <, <=, ~~, ~*, in, has"
        );
        assert!(errs[2].starts_with("vars[2]: invalid regex"), "{errs:?}");
    }
}
