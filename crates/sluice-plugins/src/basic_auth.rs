//! `basic-auth`: identifies a consumer by HTTP Basic credentials (RFC 7617).
//!
//! Route: `{hide_credentials: false}`. Consumer: `{username, password}`. A missing or malformed
//! `Authorization` is 401 with `WWW-Authenticate: Basic realm="basic"` (APISIX's `realm`);
//! wrong credentials are 401 too. Passwords are compared in constant time.

use std::any::Any;
use std::sync::Arc;

use base64::Engine as _;
use rustc_hash::FxHashMap;
use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, Credential, Phases, PluginFactory, index_as, parse_config};
use sluice_core::{Ctx, Flow, Plugin, Response};

use crate::util::credential_index;

#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
struct Config {
    hide_credentials: bool,
    /// A consumer whose identity requests without valid credentials take (APISIX 3).
    anonymous_consumer: Option<String>,
    /// APISIX's `realm`, in the `WWW-Authenticate` of a 401.
    realm: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Cred {
    username: String,
    password: String,
}

/// Username → (password, consumer index).
#[derive(Debug, Default)]
struct Users(FxHashMap<String, (Vec<u8>, u32)>);

pub(crate) struct Factory;

impl PluginFactory for Factory {
    crate::util::describe!("basic-auth", 2520, Config, credentials: Cred);

    /// APISIX's `encrypt_fields`.
    fn encrypted_fields(&self) -> &'static [&'static str] {
        &["password"]
    }

    fn check_credential(&self, config: &Value, v: &mut Validator) {
        if let Some(c) = parse_config::<Cred>(config, v) {
            if c.username.is_empty() || c.username.contains(':') {
                v.error_at("username", "must not be empty or contain \":\"");
            }
            if c.password.is_empty() {
                v.error_at("password", "must not be empty");
            }
        }
    }

    fn consumer_index(
        &self,
        creds: &[Credential<'_>],
        v: &mut Validator,
    ) -> Option<Arc<dyn Any + Send + Sync>> {
        let users = credential_index(creds, "basic-auth", "username", v, |c: Cred, consumer| {
            Some((c.username, (c.password.into_bytes(), consumer)))
        });
        Some(Arc::new(Users(users)))
    }

    fn build(
        &self,
        config: &Value,
        cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        let users = index_as::<Users>((cx.indexes)("basic-auth")).unwrap_or_default();
        let challenge = crate::util::realm_challenge("Basic", c.realm.as_deref(), "basic", v)?;
        let anonymous = crate::util::anonymous_consumer(c.anonymous_consumer.as_deref(), cx, v)?;
        Some(Arc::new(BasicAuth {
            hide: c.hide_credentials,
            users,
            anonymous,
            challenge,
        }))
    }
}

struct BasicAuth {
    hide: bool,
    users: Arc<Users>,
    /// `anonymous_consumer`, when compiled.
    anonymous: Option<u32>,
    /// The `WWW-Authenticate` value of its 401s.
    challenge: Box<[u8]>,
}

/// A 401 (its `WWW-Authenticate` is added by `or_anonymous`).
fn challenge(message: &str) -> Flow {
    Flow::Respond(Response::message(401, message))
}

/// Compares without returning early on the first difference.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Plugin for BasicAuth {
    fn phases(&self) -> Phases {
        Phases::REWRITE
    }

    fn rewrite(&self, req: &mut RequestHead, cx: &mut Ctx<'_>) -> Flow {
        let flow = self.authenticate(req, cx);
        crate::util::or_anonymous(flow, self.anonymous, &self.challenge, req, cx)
    }
}

impl BasicAuth {
    fn authenticate(&self, req: &mut RequestHead, cx: &mut Ctx<'_>) -> Flow {
        let Some(value) = req.header("authorization") else {
            return challenge("Missing authorization in request");
        };
        let encoded = match value.split_at_checked(6) {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case(b"basic ") => rest.trim_ascii(),
            _ => return challenge("Invalid authorization in request"),
        };
        let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(encoded) else {
            return challenge("Invalid authorization in request");
        };
        let Some(colon) = memchr::memchr(b':', &decoded) else {
            return challenge("Invalid authorization in request");
        };
        let (user, password) = (&decoded[..colon], &decoded[colon + 1..]);
        let found = std::str::from_utf8(user)
            .ok()
            .and_then(|u| self.users.0.get(u));
        match found {
            Some((expected, consumer)) if same(expected, password) => {
                crate::util::attach_consumer(req, cx, *consumer);
                if self.hide {
                    req.remove_header("authorization");
                }
                Flow::Continue
            }
            _ => challenge("Invalid user authorization"),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::tests::*;
    use sluice_config::PluginScope;

    const USERS: [(&str, &str); 2] = [
        ("alice", "{basic-auth: {username: alice, password: s3cret}}"),
        ("bob", "{basic-auth: {username: bob, password: pw}}"),
    ];

    fn status(hide: bool, auth: Option<&str>) -> (u16, Option<String>, bool) {
        let b = build(
            "basic-auth",
            if hide {
                "{hide_credentials: true}"
            } else {
                "{}"
            },
            &USERS,
        );
        let raw = match auth {
            Some(a) => format!("GET / HTTP/1.1\r\nHost: a\r\nAuthorization: {a}\r\n\r\n"),
            None => "GET / HTTP/1.1\r\nHost: a\r\n\r\n".into(),
        };
        let mut req = head(&raw);
        let mut cx = ctx(&b.consumers, CLIENT);
        let r = run(&*b.plugin, &mut req, &mut cx);
        (
            r.map_or(200, |r| r.status),
            cx.consumer_name().map(str::to_owned),
            req.header("authorization").is_some(),
        )
    }

    #[test]
    fn good_credentials_identify_the_consumer() {
        // alice:s3cret
        assert_eq!(
            status(false, Some("Basic YWxpY2U6czNjcmV0")),
            (200, Some("alice".into()), true)
        );
        assert_eq!(
            status(true, Some("basic YWxpY2U6czNjcmV0")),
            (200, Some("alice".into()), false)
        );
    }

    #[test]
    fn bad_or_missing_credentials_get_401() {
        assert_eq!(status(false, None).0, 401);
        assert_eq!(status(false, Some("Basic YWxpY2U6d3Jvbmc=")).0, 401); // alice:wrong
        assert_eq!(status(false, Some("Basic !!!")).0, 401);
        assert_eq!(status(false, Some("Bearer x")).0, 401);
        assert_eq!(status(false, Some("Basic bm9jb2xvbg==")).0, 401); // nocolon
    }

    #[test]
    fn configurations_are_checked_with_paths() {
        assert_eq!(
            check(
                "basic-auth",
                "{username: \"a:b\", password: \"\"}",
                PluginScope::Consumer
            ),
            vec![
                "plugins.basic-auth.username: must not be empty or contain \":\"",
                "plugins.basic-auth.password: must not be empty"
            ]
        );
    }
}
