//! `csrf`: protects a route's unsafe methods against cross-site request forgery with a
//! double-submit cookie, as APISIX's `csrf`, its tokens interchangeable with APISIX's.
//!
//! `{key, expires: 7200, name: apisix-csrf-token}`. Every answer sets a fresh token in the
//! cookie `name` (`path=/; SameSite=Lax`, for `expires` seconds). A `POST`, `PUT`, `DELETE`,
//! ... (anything but `GET`, `HEAD`, `OPTIONS`) must send the cookie's token again in the header
//! `name`, unexpired and signed with `key`; else 401 `{"error_msg": ...}`: `no csrf token in
//! headers`, `no csrf cookie`, `csrf token mismatch` or `Failed to verify the csrf token
//! signature`.
//!
//! A token is APISIX's: base64 of `{"random": r, "expires": t, "sign": s}`, `t` the time it
//! was made, `s` the hex SHA-256 of `{expires:t,random:r,key:key}` with the numbers written as
//! Lua writes them (`%.14g`), so that APISIX and Sluice nodes behind one load balancer accept
//! each other's tokens.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;
use serde_json::Value;
use sha2::Digest as _;
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, Phases, PluginFactory, ResponseView, parse_config};
use sluice_core::{Ctx, Flow, Plugin, Response};

use crate::util::Num;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    key: String,
    #[serde(default)]
    expires: Option<Num>,
    #[serde(default = "default_name")]
    name: String,
}

fn default_name() -> String {
    "apisix-csrf-token".into()
}

pub(crate) struct Factory;

impl PluginFactory for Factory {
    crate::util::describe!("csrf", 2980, Config);

    fn encrypted_fields(&self) -> &'static [&'static str] {
        &["key"]
    }

    fn build(
        &self,
        config: &Value,
        _cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        let expires = match c.expires {
            None => Some(7200),
            Some(n) => v.field("expires", |v| {
                crate::util::whole(n, 0, 10 * 365 * 86_400, " seconds (0: never)", v)
            }),
        };
        let ok_name = v.field("name", |v| crate::util::check_header_name(&c.name, v));
        let expires = expires?;
        ok_name.then(|| {
            Arc::new(Csrf {
                key: c.key,
                expires,
                cookie_prefix: format!("{}=", c.name),
                name: c.name,
            }) as Arc<dyn Plugin>
        })
    }
}

struct Csrf {
    key: String,
    /// Seconds a token lives; 0: no expiry check (the cookie still gets `expires`).
    expires: u64,
    name: String,
    cookie_prefix: String,
}

/// A number as Lua 5.1 writes it (`%.14g`): what APISIX signs.
fn lua_number(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return if x == 0.0 { "0".into() } else { x.to_string() };
    }
    let sci = format!("{x:.13e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_owned()
        } else {
            s
        }
    };
    if (-4..14).contains(&exp) {
        trim(format!("{x:.prec$}", prec = (13 - exp).max(0) as usize))
    } else {
        let m = trim(mantissa.to_owned());
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{m}e{sign}{:02}", exp.abs())
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Csrf {
    fn sign(&self, random: &str, expires: &str) -> String {
        let digest = sha2::Sha256::digest(format!("{{expires:{expires},random:{random},key:{}}}", self.key));
        sluice_core::hex::encode(&digest)
    }

    /// A new token, made now.
    fn token(&self) -> String {
        // 14 significant digits in [0.1, 1), no trailing zero: Lua writes it back the same.
        let random = lua_number(0.1 + fastrand::f64() * 0.9);
        let t = now().to_string();
        let json = format!(
            "{{\"random\":{random},\"expires\":{t},\"sign\":\"{}\"}}",
            self.sign(&random, &t)
        );
        STANDARD.encode(json)
    }

    /// Whether `token` is one of ours, unexpired.
    fn verify(&self, token: &[u8]) -> bool {
        let Some(v) = STANDARD
            .decode(token)
            .ok()
            .and_then(|j| serde_json::from_slice::<Value>(&j).ok())
        else {
            return false;
        };
        let (Some(random), Some(expires)) = (
            v.get("random").and_then(Value::as_f64),
            v.get("expires").and_then(Value::as_f64),
        ) else {
            return false;
        };
        if self.expires > 0 && (now() as f64) - expires > self.expires as f64 {
            return false;
        }
        let expected = self.sign(&lua_number(random), &lua_number(expires));
        v.get("sign").and_then(Value::as_str).is_some_and(|s| {
            s.len() == expected.len()
                && s.bytes()
                    .zip(expected.bytes())
                    .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                    == 0
        })
    }
}

impl Plugin for Csrf {
    fn phases(&self) -> Phases {
        Phases::ACCESS.with(Phases::HEADER_FILTER)
    }

    fn access(&self, req: &mut RequestHead, _cx: &mut Ctx<'_>) -> Flow {
        if matches!(req.method_bytes(), b"GET" | b"HEAD" | b"OPTIONS") {
            return Flow::Continue;
        }
        let refuse = |m: &str| Flow::Respond(Response::error(401, m));
        let header = match req.header(&self.name) {
            Some(h) if !h.is_empty() => h,
            _ => return refuse("no csrf token in headers"),
        };
        let Some(cookie) = req.cookie(&self.name) else {
            return refuse("no csrf cookie");
        };
        if header != cookie {
            return refuse("csrf token mismatch");
        }
        if !self.verify(cookie) {
            return refuse("Failed to verify the csrf token signature");
        }
        Flow::Continue
    }

    fn header_filter(&self, _req: &RequestHead, _resp: ResponseView<'_>, cx: &mut Ctx<'_>) {
        // `expires: 0` (tokens never expire): a session cookie, not one expired at once.
        let cookie = if self.expires == 0 {
            format!("{}{};path=/;SameSite=Lax", self.cookie_prefix, self.token())
        } else {
            let until = SystemTime::now() + Duration::from_secs(self.expires);
            format!(
                "{}{};path=/;SameSite=Lax;Expires={}",
                self.cookie_prefix,
                self.token(),
                httpdate::fmt_http_date(until)
            )
        };
        cx.response.add_header("Set-Cookie", cookie.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csrf(expires: u64) -> Csrf {
        Csrf {
            key: "userkey".into(),
            expires,
            name: "apisix-csrf-token".into(),
            cookie_prefix: "apisix-csrf-token=".into(),
        }
    }

    #[test]
    fn numbers_are_written_as_lua_writes_them() {
        for (x, lua) in [
            (0.84018771676347, "0.84018771676347"),
            (0.5, "0.5"),
            (1700000000.0, "1700000000"),
            (0.000012345, "1.2345e-05"),
            (0.00012345678901234567, "0.00012345678901235"),
            (123456789012345678.0, "1.2345678901235e+17"),
        ] {
            assert_eq!(lua_number(x), lua, "{x}");
        }
    }

    #[test]
    fn tokens_verify_until_they_expire_and_not_with_another_key() {
        let c = csrf(7200);
        let t = c.token();
        assert!(c.verify(t.as_bytes()));
        let mut other = csrf(7200);
        other.key = "other".into();
        assert!(!other.verify(t.as_bytes()));
        // A token made three hours ago, signed as APISIX signs it.
        let old = (now() - 3 * 3600).to_string();
        let json = format!(
            "{{\"random\":0.25,\"expires\":{old},\"sign\":\"{}\"}}",
            c.sign("0.25", &old)
        );
        assert!(!c.verify(STANDARD.encode(&json).as_bytes()));
        assert!(csrf(0).verify(STANDARD.encode(&json).as_bytes()), "0: no expiry");
        assert!(!c.verify(b"%%%"));
    }
}
