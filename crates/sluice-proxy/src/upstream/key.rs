//! The request key a `chash` upstream hashes (`hash_on` and `key`, APISIX's fields), compiled
//! once and read through the core's variable vocabulary ([`Source`]) from whichever protocol
//! path carries the request. When the
//! key is absent from a request (no such header, cookie or consumer), the client's address is
//! hashed instead, as APISIX does.

use std::borrow::Cow;
use std::net::SocketAddr;

use sluice_config::Validator;
use sluice_core::vars::{Source, Var};

use super::balance::ring::key_hash;

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

/// Whether a `vars` key may name `name`: any variable of the vocabulary.
fn hash_var_ok(name: &str) -> bool {
    Var::parse(name).is_ok()
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
                if let Err(e) = Var::parse(k) {
                    v.error_at("key", e);
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
            ("vars", Some(k)) => HashOn::Var(Var::parse(k).ok()?),
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
                        Var::parse(name).ok()
                    })
                    .collect(),
            ),
            _ => return None,
        })
    }
}

/// The hash of an address: of its bytes, without formatting it (the common key).
fn ip_hash(ip: std::net::IpAddr) -> u64 {
    match ip {
        std::net::IpAddr::V4(v4) => key_hash(&v4.octets()),
        std::net::IpAddr::V6(v6) => key_hash(&v6.octets()),
    }
}

/// The hash of the request's key (of the client's address when the key is absent).
pub(crate) fn request_key<'a>(on: &HashOn, r: &impl Source<'a>) -> u64 {
    let found: Option<Cow<'a, [u8]>> = match on {
        HashOn::Var(Var::RemoteAddr) => return ip_hash(r.client().ip()),
        HashOn::Var(v) => v.value_in(r),
        HashOn::Header(h) => r.header(h).map(Cow::Borrowed),
        HashOn::Cookie(c) => r.cookie(c).map(Cow::Borrowed),
        HashOn::Consumer => r.consumer_name().map(|c| Cow::Borrowed(c.as_bytes())),
        HashOn::Combination(vars) => {
            let mut all = Vec::new();
            for v in vars.iter() {
                v.write(r, &mut all);
            }
            (!all.is_empty()).then_some(Cow::Owned(all))
        }
    };
    match found.filter(|k| !k.is_empty()) {
        Some(k) => key_hash(&k),
        None => ip_hash(r.client().ip()),
    }
}

/// A stream connection: only its addresses are known.
pub(crate) struct Addresses {
    pub(crate) remote: SocketAddr,
    pub(crate) local: SocketAddr,
}

impl Source<'static> for Addresses {
    fn client(&self) -> SocketAddr {
        self.remote
    }
    fn server(&self) -> SocketAddr {
        self.local
    }
}
