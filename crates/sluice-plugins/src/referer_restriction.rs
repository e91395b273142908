//! `referer-restriction`: allows or denies requests by the host of their `Referer`, as
//! APISIX's `referer-restriction`.
//!
//! `{whitelist | blacklist: [host, ...], bypass_missing: false, message: "Your referer host is
//! not allowed"}`, exactly one list. A host is a name (`example.com`) or a wildcard
//! (`*.example.com`, any name ending in `.example.com`). The `Referer`'s host is read as
//! lua-resty-http's `parse_uri` reads it (`http://`, `https://` or `//`, then the host); a
//! missing or malformed `Referer` passes only with `bypass_missing`. A refusal is 403
//! `{"message": message}`.

use std::sync::Arc;

use rustc_hash::FxHashSet;
use serde::Deserialize;
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, Phases, PluginFactory, parse_config};
use sluice_core::{Ctx, Flow, Plugin};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    whitelist: Option<Vec<String>>,
    #[serde(default)]
    blacklist: Option<Vec<String>>,
    #[serde(default)]
    bypass_missing: bool,
    #[serde(default = "default_message")]
    message: String,
}

fn default_message() -> String {
    "Your referer host is not allowed".into()
}

pub(crate) struct Factory;

impl PluginFactory for Factory {
    crate::util::describe!("referer-restriction", 2990, Config);

    fn build(
        &self,
        config: &serde_json::Value,
        _cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        let (field, list, guard) = crate::util::ListGuard::new(
            ("whitelist", &c.whitelist),
            ("blacklist", &c.blacklist),
            c.bypass_missing,
            &c.message,
            v,
        )?;
        let hosts = v.field(field, |v| {
            let mut hosts = Hosts::default();
            let mut ok = true;
            for (i, h) in list.iter().enumerate() {
                // APISIX's host_def: `^\*?[0-9a-zA-Z-._\[\]:]+$`.
                let name = h.strip_prefix('*').unwrap_or(h);
                let valid = !name.is_empty()
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-._[]:".contains(&b));
                if !valid {
                    v.index(i, |v| v.error(format!("invalid host \"{h}\"")));
                    ok = false;
                } else if h.starts_with('*') {
                    hosts.suffixes.push(name.to_ascii_lowercase());
                } else {
                    hosts.exact.insert(name.to_ascii_lowercase());
                }
            }
            ok.then_some(hosts)
        })?;
        Some(Arc::new(RefererRestriction { hosts, guard }))
    }
}

#[derive(Default)]
struct Hosts {
    exact: FxHashSet<String>,
    /// `*.example.com` as `.example.com`.
    suffixes: Vec<String>,
}

impl Hosts {
    fn matches(&self, host: &str) -> bool {
        self.exact.contains(host) || self.suffixes.iter().any(|s| host.ends_with(s.as_str()))
    }
}

/// The host of a `Referer`, lowercased, as lua-resty-http's `parse_uri` finds it: an optional
/// `http:` or `https:`, then `//`, then a name up to `:`, `/`, `?` (or an `[IPv6]`).
fn referer_host(referer: &[u8]) -> Option<String> {
    let s = std::str::from_utf8(referer).ok()?;
    let rest = s
        .strip_prefix("https:")
        .or_else(|| s.strip_prefix("http:"))
        .unwrap_or(s);
    let rest = rest.strip_prefix("//")?;
    let host = if rest.starts_with('[') {
        &rest[..=rest.find(']')?]
    } else {
        let end = rest
            .find([':', '/', '?', '[', ']'])
            .unwrap_or(rest.len());
        &rest[..end]
    };
    (!host.is_empty()).then(|| host.to_ascii_lowercase())
}

struct RefererRestriction {
    hosts: Hosts,
    guard: crate::util::ListGuard,
}

impl Plugin for RefererRestriction {
    fn phases(&self) -> Phases {
        Phases::ACCESS
    }

    fn access(&self, req: &mut RequestHead, _cx: &mut Ctx<'_>) -> Flow {
        let host = req.header("referer").and_then(referer_host);
        self.guard.judge(host.map(|h| self.hosts.matches(&h)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn referer_hosts_are_read_as_lua_resty_http_reads_them() {
        let h = |s: &str| referer_host(s.as_bytes());
        assert_eq!(h("http://www.Example.com/a?b").as_deref(), Some("www.example.com"));
        assert_eq!(h("https://x.test:8443/").as_deref(), Some("x.test"));
        assert_eq!(h("//cdn.test").as_deref(), Some("cdn.test"));
        assert_eq!(h("http://[::1]:80/").as_deref(), Some("[::1]"));
        for bad in ["example.com", "ftp://example.com", "http:/x", "http://", ""] {
            assert_eq!(h(bad), None, "{bad}");
        }
    }
}
