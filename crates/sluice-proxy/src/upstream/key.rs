//! The request key a `chash` upstream hashes (`hash_on` and `key`, APISIX's fields), compiled
//! once and read from whichever protocol path carries the request ([`KeySource`]). When the
//! key is absent from a request (no such header, cookie or consumer), the client's address is
//! hashed instead, as APISIX does.

use std::borrow::Cow;
use std::net::SocketAddr;

use sluice_config::Validator;

use super::balance::ring::key_hash;

/// A variable a key may name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Var {
    Uri,
    RequestUri,
    Host,
    ServerName,
    RemoteAddr,
    RemotePort,
    ServerAddr,
    ServerPort,
    Method,
    Scheme,
    QueryString,
    Arg(Box<str>),
    Http(Box<str>),
    Cookie(Box<str>),
}

impl Var {
    /// The variable of a name validation accepted.
    pub(crate) fn parse(name: &str) -> Option<Var> {
        Some(match name {
            "uri" => Var::Uri,
            "request_uri" => Var::RequestUri,
            "host" => Var::Host,
            "server_name" => Var::ServerName,
            "remote_addr" => Var::RemoteAddr,
            "remote_port" => Var::RemotePort,
            "server_addr" => Var::ServerAddr,
            "server_port" => Var::ServerPort,
            "request_method" => Var::Method,
            "scheme" => Var::Scheme,
            "query_string" => Var::QueryString,
            _ => {
                if let Some(a) = name.strip_prefix("arg_") {
                    Var::Arg(a.into())
                } else if let Some(h) = name.strip_prefix("http_") {
                    // NGINX's $http_x_user_id is the header X-User-Id.
                    Var::Http(h.replace('_', "-").into())
                } else if let Some(c) = name.strip_prefix("cookie_") {
                    Var::Cookie(c.into())
                } else {
                    return None;
                }
            }
        })
    }
}

/// What a `chash` upstream hashes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HashOn {
    Var(Var),
    Header(Box<str>),
    Cookie(Box<str>),
    Consumer,
    /// `$a$b`: the variables' values joined.
    Combination(Box<[Var]>),
}

/// The variables a `vars` key may name besides `arg_*`, `http_*` and `cookie_*`.
const HASH_VARS: &[&str] = &[
    "uri",
    "request_uri",
    "server_name",
    "server_addr",
    "server_port",
    "request_method",
    "remote_addr",
    "remote_port",
    "host",
    "scheme",
    "query_string",
];

fn hash_var_ok(name: &str) -> bool {
    HASH_VARS.contains(&name)
        || ["arg_", "http_", "cookie_"]
            .iter()
            .any(|p| name.strip_prefix(p).is_some_and(|rest| !rest.is_empty()))
}

impl HashOn {
    /// Checks APISIX's `hash_on` and `key` (`v` points at the upstream) and compiles them.
    pub(crate) fn check(
        hash_on: Option<&str>,
        key: Option<&str>,
        v: &mut Validator,
    ) -> Option<HashOn> {
        let on = hash_on.unwrap_or("vars");
        let before = v.error_count();
        match (on, key) {
            ("consumer", _) | ("vars", None) => {}
            ("vars", Some(k)) => {
                if !hash_var_ok(k) {
                    v.error_at(
                        "key",
                        format!(
                            "unknown variable \"{k}\": expected one of {}, or arg_*, http_*, cookie_*",
                            HASH_VARS.join(", ")
                        ),
                    );
                }
            }
            ("header" | "cookie" | "vars_combinations", None) => {
                v.error_at("key", format!("is required with hash_on: {on}"));
            }
            ("header" | "cookie", Some(k)) => {
                if k.is_empty()
                    || k.bytes()
                        .any(|b| b.is_ascii_control() || b == b' ' || b == b':')
                {
                    v.error_at("key", format!("invalid {on} name \"{k}\""));
                }
            }
            ("vars_combinations", Some(k)) => {
                let names: Vec<&str> = k
                    .split('$')
                    .skip(1)
                    .map(|p| {
                        p.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                            .next()
                            .unwrap_or("")
                    })
                    .collect();
                if names.is_empty() {
                    v.error_at("key", "must name variables, like \"$host$uri\"");
                }
                for n in names {
                    if !hash_var_ok(n) {
                        v.error_at("key", format!("unknown variable \"${n}\""));
                    }
                }
            }
            (other, _) => v.error_at(
                "hash_on",
                format!(
                    "unsupported value \"{other}\", expected vars, header, cookie, consumer or vars_combinations"
                ),
            ),
        }
        if v.error_count() > before {
            return None;
        }
        HashOn::compile(hash_on, key)
    }

    /// From checked `hash_on` and `key`.
    pub(crate) fn compile(hash_on: Option<&str>, key: Option<&str>) -> Option<HashOn> {
        Some(match (hash_on.unwrap_or("vars"), key) {
            ("vars", None) => HashOn::Var(Var::RemoteAddr),
            ("vars", Some(k)) => HashOn::Var(Var::parse(k)?),
            ("header", Some(k)) => HashOn::Header(k.into()),
            ("cookie", Some(k)) => HashOn::Cookie(k.into()),
            ("consumer", _) => HashOn::Consumer,
            ("vars_combinations", Some(k)) => HashOn::Combination(
                k.split('$')
                    .skip(1)
                    .filter_map(|p| {
                        let name = p
                            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                            .next()?;
                        Var::parse(name)
                    })
                    .collect(),
            ),
            _ => return None,
        })
    }
}

/// A request as a key is read from it.
pub(crate) trait KeySource {
    fn path(&self) -> &[u8];
    fn target(&self) -> &[u8];
    fn query(&self) -> Option<&[u8]>;
    fn arg(&self, name: &str) -> Option<Vec<u8>>;
    fn host(&self) -> &[u8];
    fn method(&self) -> &[u8];
    fn header(&self, name: &str) -> Option<&[u8]>;
    fn cookie(&self, name: &str) -> Option<&[u8]>;
    fn remote(&self) -> SocketAddr;
    fn local(&self) -> SocketAddr;
    fn https(&self) -> bool;
    fn consumer(&self) -> Option<&str>;
}

fn var<'a>(v: &Var, r: &'a impl KeySource) -> Option<Cow<'a, [u8]>> {
    Some(match v {
        Var::Uri => Cow::Borrowed(r.path()),
        Var::RequestUri => Cow::Borrowed(r.target()),
        Var::Host | Var::ServerName => Cow::Borrowed(r.host()),
        Var::RemoteAddr => Cow::Owned(r.remote().ip().to_string().into_bytes()),
        Var::RemotePort => Cow::Owned(r.remote().port().to_string().into_bytes()),
        Var::ServerAddr => Cow::Owned(r.local().ip().to_string().into_bytes()),
        Var::ServerPort => Cow::Owned(r.local().port().to_string().into_bytes()),
        Var::Method => Cow::Borrowed(r.method()),
        Var::Scheme => Cow::Borrowed(if r.https() { b"https" } else { b"http" }),
        Var::QueryString => Cow::Borrowed(r.query()?),
        Var::Arg(a) => Cow::Owned(r.arg(a)?),
        Var::Http(h) => Cow::Borrowed(r.header(h)?),
        Var::Cookie(c) => Cow::Borrowed(r.cookie(c)?),
    })
}

/// The hash of an address: of its bytes, without formatting it (the common key).
fn ip_hash(ip: std::net::IpAddr) -> u64 {
    match ip {
        std::net::IpAddr::V4(v4) => key_hash(&v4.octets()),
        std::net::IpAddr::V6(v6) => key_hash(&v6.octets()),
    }
}

/// The hash of the request's key (of the client's address when the key is absent).
pub(crate) fn request_key(on: &HashOn, r: &impl KeySource) -> u64 {
    let found: Option<Cow<'_, [u8]>> = match on {
        HashOn::Var(Var::RemoteAddr) => return ip_hash(r.remote().ip()),
        HashOn::Var(v) => var(v, r),
        HashOn::Header(h) => r.header(h).map(Cow::Borrowed),
        HashOn::Cookie(c) => r.cookie(c).map(Cow::Borrowed),
        HashOn::Consumer => r.consumer().map(|c| Cow::Borrowed(c.as_bytes())),
        HashOn::Combination(vars) => {
            let mut all = Vec::new();
            for v in vars.iter() {
                if let Some(x) = var(v, r) {
                    all.extend_from_slice(&x);
                }
            }
            (!all.is_empty()).then_some(Cow::Owned(all))
        }
    };
    match found.filter(|k| !k.is_empty()) {
        Some(k) => key_hash(&k),
        None => ip_hash(r.remote().ip()),
    }
}

/// A stream connection: only its addresses are known.
pub(crate) struct Addresses {
    pub(crate) remote: SocketAddr,
    pub(crate) local: SocketAddr,
}

impl KeySource for Addresses {
    fn path(&self) -> &[u8] {
        b""
    }
    fn target(&self) -> &[u8] {
        b""
    }
    fn query(&self) -> Option<&[u8]> {
        None
    }
    fn arg(&self, _: &str) -> Option<Vec<u8>> {
        None
    }
    fn host(&self) -> &[u8] {
        b""
    }
    fn method(&self) -> &[u8] {
        b""
    }
    fn header(&self, _: &str) -> Option<&[u8]> {
        None
    }
    fn cookie(&self, _: &str) -> Option<&[u8]> {
        None
    }
    fn remote(&self) -> SocketAddr {
        self.remote
    }
    fn local(&self) -> SocketAddr {
        self.local
    }
    fn https(&self) -> bool {
        false
    }
    fn consumer(&self) -> Option<&str> {
        None
    }
}
