//! `key-auth`: identifies a consumer by an API key sent in a header or a query argument.
//!
//! Route: `{header: apikey, query: apikey, hide_credentials: false}`. Consumer:
//! `{key: "..."}`. A missing key is 401 `{"message":"Missing API key in request"}`, an unknown
//! one 401 `{"message":"Invalid API key in request"}`.

use std::any::Any;
use std::sync::Arc;

use rustc_hash::FxHashMap;
use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, Credential, Phases, PluginFactory, index_as, parse_config};
use sluice_core::{Ctx, Flow, Plugin, Response};

use crate::util::{check_header_name, credential_index};

/// Route configuration.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
struct Config {
    /// Request header carrying the key.
    header: String,
    /// Query argument checked when the header is absent.
    query: String,
    /// Remove the key from the request before it goes upstream.
    hide_credentials: bool,
    /// A consumer whose identity requests without a valid key take (APISIX 3).
    anonymous_consumer: Option<String>,
    /// APISIX's `realm`, in the `WWW-Authenticate` of a 401.
    realm: Option<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            header: "apikey".into(),
            query: "apikey".into(),
            hide_credentials: false,
            anonymous_consumer: None,
            realm: None,
        }
    }
}

/// Consumer credentials.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Cred {
    key: String,
}

/// Key → consumer index, built once per configuration version.
#[derive(Debug, Default)]
struct Keys(FxHashMap<Box<[u8]>, u32>);

pub(crate) struct Factory;

impl PluginFactory for Factory {
    crate::util::describe!("key-auth", 2500, Config, credentials: Cred);

    /// APISIX's `encrypt_fields`.
    fn encrypted_fields(&self) -> &'static [&'static str] {
        &["key"]
    }

    fn check_credential(&self, config: &Value, v: &mut Validator) {
        if let Some(c) = parse_config::<Cred>(config, v)
            && c.key.is_empty()
        {
            v.error_at("key", "must not be empty");
        }
    }

    fn consumer_index(
        &self,
        creds: &[Credential<'_>],
        v: &mut Validator,
    ) -> Option<Arc<dyn Any + Send + Sync>> {
        let keys = credential_index(creds, "key-auth", "key", v, |c: Cred, consumer| {
            Some((Box::<[u8]>::from(c.key.as_bytes()), consumer))
        });
        Some(Arc::new(Keys(keys)))
    }

    fn build(
        &self,
        config: &Value,
        cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        let ok = v.field("header", |v| check_header_name(&c.header, v));
        if c.query.is_empty() {
            v.error_at("query", "must not be empty");
            return None;
        }
        let keys = index_as::<Keys>((cx.indexes)("key-auth")).unwrap_or_default();
        let challenge = crate::util::realm_challenge("apikey", c.realm.as_deref(), "key", v)?;
        let anonymous = crate::util::anonymous_consumer(c.anonymous_consumer.as_deref(), cx, v)?;
        ok.then(|| {
            Arc::new(KeyAuth {
                header: c.header,
                query: c.query,
                hide: c.hide_credentials,
                keys,
                anonymous,
                challenge,
            }) as Arc<dyn Plugin>
        })
    }
}

struct KeyAuth {
    header: String,
    query: String,
    hide: bool,
    keys: Arc<Keys>,
    /// `anonymous_consumer`, when compiled.
    anonymous: Option<u32>,
    /// The `WWW-Authenticate` value of its 401s.
    challenge: Box<[u8]>,
}

impl Plugin for KeyAuth {
    fn phases(&self) -> Phases {
        Phases::REWRITE
    }

    fn rewrite(&self, req: &mut RequestHead, cx: &mut Ctx<'_>) -> Flow {
        let flow = self.authenticate(req, cx);
        crate::util::or_anonymous(flow, self.anonymous, &self.challenge, req, cx)
    }
}

impl KeyAuth {
    fn authenticate(&self, req: &mut RequestHead, cx: &mut Ctx<'_>) -> Flow {
        let (consumer, from_query) = match req.header(&self.header) {
            Some(k) => (self.keys.0.get(k).copied(), false),
            None => match req.query_arg(&self.query) {
                Some(k) => (self.keys.0.get(k.as_slice()).copied(), true),
                None => return Flow::Respond(Response::message(401, "Missing API key in request")),
            },
        };
        let Some(consumer) = consumer else {
            return Flow::Respond(Response::message(401, "Invalid API key in request"));
        };
        crate::util::attach_consumer(req, cx, consumer);
        if self.hide {
            if from_query {
                crate::util::remove_query_arg(req, &self.query);
            } else {
                req.remove_header(&self.header);
            }
        }
        Flow::Continue
    }
}

#[cfg(test)]
mod tests {
    use crate::tests::*;
    use sluice_config::PluginScope;

    const JACK: (&str, &str) = ("jack", "{key-auth: {key: user-key}}");

    #[test]
    fn a_known_key_identifies_the_consumer() {
        let b = build(
            "key-auth",
            "{}",
            &[JACK, ("jill", "{key-auth: {key: other}}")],
        );
        let mut req = head("GET /hello HTTP/1.1\r\nHost: a\r\napikey: user-key\r\n\r\n");
        let mut cx = ctx(&b.consumers, CLIENT);
        assert!(run(&*b.plugin, &mut req, &mut cx).is_none());
        assert_eq!(cx.consumer_name(), Some("jack"));
        assert_eq!(req.header("apikey"), Some(&b"user-key"[..]));
    }

    #[test]
    fn missing_and_wrong_keys_get_401() {
        let b = build("key-auth", "{}", &[JACK]);
        let mut cx = ctx(&b.consumers, CLIENT);
        let r = run(
            &*b.plugin,
            &mut head("GET / HTTP/1.1\r\nHost: a\r\n\r\n"),
            &mut cx,
        )
        .unwrap();
        assert_eq!(
            (r.status, body(&r).as_str()),
            (401, "{\"message\":\"Missing API key in request\"}\n")
        );
        let r = run(
            &*b.plugin,
            &mut head("GET / HTTP/1.1\r\nHost: a\r\napikey: nope\r\n\r\n"),
            &mut cx,
        )
        .unwrap();
        assert_eq!(
            (r.status, body(&r).as_str()),
            (401, "{\"message\":\"Invalid API key in request\"}\n")
        );
        assert_eq!(cx.consumer_name(), None);
    }

    #[test]
    fn the_key_may_come_from_the_query_and_be_hidden() {
        let b = build(
            "key-auth",
            "{header: X-Key, query: k, hide_credentials: true}",
            &[JACK],
        );
        let mut cx = ctx(&b.consumers, CLIENT);
        let mut req = head("GET /p?a=1&k=user-key&b=2 HTTP/1.1\r\nHost: a\r\n\r\n");
        assert!(run(&*b.plugin, &mut req, &mut cx).is_none());
        assert_eq!(req.target(), b"/p?a=1&b=2");
        let mut req = head("GET /p HTTP/1.1\r\nHost: a\r\nX-Key: user-key\r\n\r\n");
        assert!(run(&*b.plugin, &mut req, &mut cx).is_none());
        assert_eq!(req.header("x-key"), None);
    }

    #[test]
    fn configurations_are_checked_with_paths() {
        assert_eq!(
            check("key-auth", "{header: \"bad header\"}", PluginScope::Route),
            vec!["plugins.key-auth.header: invalid header name \"bad header\""]
        );
        assert_eq!(
            check("key-auth", "{key: \"\"}", PluginScope::Consumer),
            vec!["plugins.key-auth.key: must not be empty"]
        );
        assert_eq!(
            check("key-auth", "{headr: x}", PluginScope::Route),
            vec![
                "plugins.key-auth.headr: unknown field, expected one of header, query, hide_credentials, anonymous_consumer, realm"
            ]
        );
        assert_eq!(
            check("key-auth", "{realm: 'a\"b'}", PluginScope::Route),
            vec![
                "plugins.key-auth.realm: invalid realm \"a\\\"b\": 1 to 128 printable ASCII characters, without \" and \\"
            ]
        );
    }
}
