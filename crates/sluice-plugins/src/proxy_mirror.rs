//! `proxy-mirror`: copies requests to a shadow upstream, for testing a new version with real
//! traffic. The copy is sent after the real request got its answer, on its own connection; it
//! never delays the real request and its failures never reach the client.
//!
//! `{host: "http://127.0.0.1:9797", path, path_concat_mode: replace|prefix, sample_ratio: 1}`;
//! `host` may be `https://` (the shadow's certificate not checked, as APISIX's), or `grpc://`
//! and `grpcs://` for gRPC calls (`grpc_mirror.rs` in the proxy), the port the scheme's when
//! not given.
//! The copy is the request as it goes upstream (after rewrites, with the same `Host`), with
//! its path replaced by `path` (or `path` prepended, with `prefix`), the query kept. Requests
//! up to 1 MiB (head and body) are copied; a larger one is not mirrored. `sample_ratio` is from
//! 0.00001 to 1, as in APISIX.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, Phases, PluginFactory, parse_config};
use sluice_core::{Ctx, Flow, Mirror, Plugin, UpstreamRef};

use crate::util::{Num, real};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    host: String,
    #[serde(default)]
    path: Option<String>,
    #[serde(default = "replace")]
    path_concat_mode: String,
    #[serde(default = "all")]
    sample_ratio: Num,
}

fn replace() -> String {
    "replace".into()
}

fn all() -> Num {
    Num::Whole(1)
}

/// Smallest `sample_ratio` (APISIX's): one request in 100,000.
const MIN_RATIO: f64 = 0.00001;

pub(crate) struct Factory;

impl PluginFactory for Factory {
    crate::util::describe!("proxy-mirror", 1010, Config);

    fn build(
        &self,
        config: &Value,
        cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        let mut ok = true;
        let valid = |a: &str| !a.is_empty() && !a.contains('/');
        let (scheme, authority) = match c.host.split_once("://") {
            Some((s @ ("http" | "https" | "grpc" | "grpcs"), a)) if valid(a) => (s, a),
            _ => {
                v.error_at(
                    "host",
                    format!(
                        "must be http://, https://, grpc:// or grpcs:// and host[:port], got \"{}\"",
                        c.host
                    ),
                );
                return None;
            }
        };
        let prefix = match c.path_concat_mode.as_str() {
            "replace" => false,
            "prefix" => true,
            other => {
                v.error_at(
                    "path_concat_mode",
                    format!("unknown mode \"{other}\", expected replace or prefix"),
                );
                return None;
            }
        };
        if let Some(p) = &c.path
            && (!p.starts_with('/')
                || p.bytes()
                    .any(|b| b.is_ascii_control() || b == b' ' || b == b'?'))
        {
            v.error_at(
                "path",
                format!("must be a path starting with \"/\", got \"{p}\""),
            );
            ok = false;
        }
        let ratio = v.field("sample_ratio", |v| {
            real(
                c.sample_ratio,
                |r| (MIN_RATIO..=1.0).contains(&r),
                "from 0.00001 to 1",
                v,
            )
        });
        ok &= ratio.is_some();
        // An https shadow's certificate is not checked, as APISIX's (NGINX's
        // `proxy_ssl_verify off`): the copy is encrypted, its receiver not authenticated.
        // A grpc(s) shadow takes the copies of gRPC calls (over HTTP/2), an http(s) one those
        // of HTTP requests.
        let upstream = match scheme {
            "https" | "grpcs" => serde_json::json!({ "nodes": { authority: 1 }, "scheme": scheme, "tls": { "verify": false } }),
            _ => serde_json::json!({ "nodes": { authority: 1 }, "scheme": scheme }),
        };
        let upstream = v.field("host", |v| (cx.upstreams)(&upstream, v))?;
        ok.then(|| {
            Arc::new(ProxyMirror {
                upstream,
                path: c.path.map(String::into_bytes),
                prefix,
                ratio: ratio.unwrap_or(1.0),
            }) as Arc<dyn Plugin>
        })
    }
}

struct ProxyMirror {
    upstream: UpstreamRef,
    path: Option<Vec<u8>>,
    prefix: bool,
    ratio: f64,
}

impl Plugin for ProxyMirror {
    fn phases(&self) -> Phases {
        Phases::BEFORE_PROXY
    }

    fn before_proxy(&self, req: &mut RequestHead, cx: &mut Ctx<'_>) -> Flow {
        if self.ratio < 1.0 && fastrand::f64() >= self.ratio {
            return Flow::Continue;
        }
        let target = self.path.as_ref().map(|p| {
            let mut t = p.clone();
            if self.prefix {
                t.extend_from_slice(req.path());
            }
            if let Some(q) = req.query() {
                t.push(b'?');
                t.extend_from_slice(q);
            }
            t
        });
        cx.mirror = Some(Mirror {
            upstream: self.upstream,
            target,
        });
        Flow::Continue
    }
}

#[cfg(test)]
mod tests {
    use crate::tests::*;
    use sluice_config::PluginScope;

    #[test]
    fn requests_are_marked_for_mirroring_with_their_path() {
        let b = build(
            "proxy-mirror",
            "{host: \"http://127.0.0.1:9797\", path: /shadow, path_concat_mode: prefix}",
            &[],
        );
        assert_eq!(
            b.upstreams[0],
            serde_json::json!({"nodes": {"127.0.0.1:9797": 1}, "scheme": "http"})
        );
        let mut cx = ctx(&b.consumers, CLIENT);
        run(
            &*b.plugin,
            &mut head("GET /api/x?q=1 HTTP/1.1\r\nHost: a\r\n\r\n"),
            &mut cx,
        );
        let m = cx.mirror.unwrap();
        assert_eq!(m.target.as_deref(), Some(&b"/shadow/api/x?q=1"[..]));
        let b = build(
            "proxy-mirror",
            "{host: \"http://127.0.0.1:9797\", sample_ratio: 0.5}",
            &[],
        );
        let mirrored = (0..2000)
            .filter(|_| {
                let mut cx = ctx(&b.consumers, CLIENT);
                run(
                    &*b.plugin,
                    &mut head("GET / HTTP/1.1\r\nHost: a\r\n\r\n"),
                    &mut cx,
                );
                cx.mirror.is_some()
            })
            .count();
        assert!((850..1150).contains(&mirrored), "{mirrored} of 2000");
    }

    #[test]
    fn configurations_are_checked_with_paths() {
        assert_eq!(
            check(
                "proxy-mirror",
                "{host: \"ftp://x:1\", sample_ratio: 2}",
                PluginScope::Route
            ),
            vec![
                "plugins.proxy-mirror.host: must be http://, https://, grpc:// or grpcs:// and host[:port], got \"ftp://x:1\""
            ]
        );
        assert!(
            check("proxy-mirror", "{host: \"grpc://x:1\"}", PluginScope::Route).is_empty()
        );
        assert_eq!(
            check(
                "proxy-mirror",
                "{host: \"http://x:1\", path: nope, sample_ratio: 0}",
                PluginScope::Route
            ),
            vec![
                "plugins.proxy-mirror.path: must be a path starting with \"/\", got \"nope\"",
                "plugins.proxy-mirror.sample_ratio: must be from 0.00001 to 1, got 0"
            ]
        );
        // APISIX's smallest ratio is the smallest here; smaller never mirrors anything.
        for (ratio, shown) in [
            ("1e-300", "1e-300"),
            ("0.000009", "0.000009"),
            ("1.5", "1.5"),
        ] {
            assert_eq!(
                check(
                    "proxy-mirror",
                    &format!("{{host: \"http://x:1\", sample_ratio: {ratio}}}"),
                    PluginScope::Route
                ),
                vec![format!(
                    "plugins.proxy-mirror.sample_ratio: must be from 0.00001 to 1, got {shown}"
                )]
            );
        }
        assert_eq!(
            check(
                "proxy-mirror",
                "{host: \"http://x:1\", sample_ratio: 0.00001}",
                PluginScope::Route
            ),
            Vec::<String>::new()
        );
    }
}
