//! `ip-restriction`: allows (`whitelist`) or denies (`blacklist`) clients by IPv4/IPv6 address
//! or CIDR range.
//!
//! The client is the TCP peer. When the peer is one of `trusted_addresses` (a load balancer in
//! front of Sluice), the client is instead the rightmost `X-Forwarded-For` entry that is not a
//! trusted address (the leftmost entry when all are trusted; the scan stops at an entry that
//! is not an address, and the last trusted one read is used): an untrusted peer cannot spoof
//! its address with that header.

use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;
use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, Phases, PluginFactory, Preread, StreamPlugin, parse_config};
use sluice_core::{Ctx, Flow, Plugin, Response};

use crate::util::{Num, check_status};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    whitelist: Option<Vec<String>>,
    #[serde(default)]
    blacklist: Option<Vec<String>>,
    #[serde(default = "default_message")]
    message: String,
    #[serde(default = "default_code")]
    response_code: Num,
    #[serde(default)]
    trusted_addresses: Vec<String>,
}

fn default_message() -> String {
    "Your IP address is not allowed".into()
}

fn default_code() -> Num {
    Num::Whole(403)
}

/// Parses a list of addresses and CIDR ranges (`v` points at the list).
pub(crate) fn parse_nets(list: &[String], v: &mut Validator) -> Option<Vec<IpNet>> {
    let mut out = Vec::with_capacity(list.len());
    let mut ok = true;
    for (i, s) in list.iter().enumerate() {
        match sluice_core::realip::parse_net(s) {
            Some(n) => out.push(n),
            None => {
                v.index(i, |v| {
                    v.error(format!("invalid IP address or CIDR range \"{s}\""))
                });
                ok = false;
            }
        }
    }
    ok.then_some(out)
}

pub(crate) struct Factory;

impl PluginFactory for Factory {
    crate::util::describe!("ip-restriction", 3000, Config);

    fn build(
        &self,
        config: &Value,
        _cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        let lists = lists(&c, v);
        let trusted = v.field("trusted_addresses", |v| parse_nets(&c.trusted_addresses, v));
        let code = v.field("response_code", |v| check_status(c.response_code, 200, v));
        let ((list, allow), trusted, code) = (lists?, trusted?, code?);
        Some(Arc::new(IpRestriction {
            list,
            allow,
            trusted,
            reject: Response::message(code, &c.message),
        }))
    }

    fn on_stream(&self) -> bool {
        true
    }

    /// On a stream route the client is the TCP peer (there is no header to trust); a refused
    /// connection is closed.
    fn build_stream(
        &self,
        config: &Value,
        _cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn StreamPlugin>> {
        let c: Config = parse_config(config, v)?;
        let (list, allow) = lists(&c, v)?;
        Some(Arc::new(StreamRule { list, allow }))
    }
}

/// The configured list, and whether it is a whitelist.
fn lists(c: &Config, v: &mut Validator) -> Option<(Vec<IpNet>, bool)> {
    let (list, allow) = match (&c.whitelist, &c.blacklist) {
            (Some(_), Some(_)) => {
                v.error("use either whitelist or blacklist, not both");
                return None;
            }
            (None, None) => {
                v.error("one of whitelist or blacklist is required");
                return None;
            }
            (Some(w), None) => (v.field("whitelist", |v| parse_nets(w, v)), true),
            (None, Some(b)) => (v.field("blacklist", |v| parse_nets(b, v)), false),
        };
    Some((list?, allow))
}

/// Whether `ip` (an IPv4 client seen through an IPv6 socket matched as IPv4) is let through.
fn admits(list: &[IpNet], allow: bool, ip: IpAddr) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    list.iter().any(|n| n.contains(&ip)) == allow
}

/// `ip-restriction` on a stream route.
struct StreamRule {
    list: Vec<IpNet>,
    allow: bool,
}

impl StreamPlugin for StreamRule {
    fn preread(&self, client: IpAddr) -> Preread {
        if admits(&self.list, self.allow, client) {
            Preread::Continue
        } else {
            Preread::Close("refused by ip-restriction")
        }
    }
}

struct IpRestriction {
    list: Vec<IpNet>,
    allow: bool,
    trusted: Vec<IpNet>,
    reject: Response,
}

/// The real client address: the peer, or, behind trusted proxies, the rightmost
/// `X-Forwarded-For` entry that is not a trusted proxy.
pub(crate) fn real_client(req: &RequestHead, cx: &Ctx<'_>, trusted: &[IpNet]) -> IpAddr {
    let peer = cx.client().ip();
    if trusted.is_empty() || !trusted.iter().any(|n| n.contains(&peer)) {
        return peer;
    }
    let mut client = peer;
    let entries: Vec<&[u8]> = req
        .header_values("x-forwarded-for")
        .flat_map(|v| v.split(|&b| b == b','))
        .collect();
    for e in entries.iter().rev() {
        let Some(ip) = std::str::from_utf8(e)
            .ok()
            .and_then(|s| s.trim().parse::<IpAddr>().ok())
        else {
            break;
        };
        client = ip;
        if !trusted.iter().any(|n| n.contains(&ip)) {
            break;
        }
    }
    client
}

impl Plugin for IpRestriction {
    fn phases(&self) -> Phases {
        Phases::ACCESS
    }

    fn access(&self, req: &mut RequestHead, cx: &mut Ctx<'_>) -> Flow {
        let ip = real_client(req, cx, &self.trusted);
        if admits(&self.list, self.allow, ip) {
            Flow::Continue
        } else {
            Flow::Respond(self.reject.clone())
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::tests::*;
    use sluice_config::PluginScope;

    fn status(yaml: &str, client: &str, xff: Option<&str>) -> u16 {
        let b = build("ip-restriction", yaml, &[]);
        let raw = match xff {
            Some(x) => format!("GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: {x}\r\n\r\n"),
            None => "GET / HTTP/1.1\r\nHost: a\r\n\r\n".to_owned(),
        };
        let mut cx = ctx(&b.consumers, client);
        run(&*b.plugin, &mut head(&raw), &mut cx).map_or(200, |r| r.status)
    }

    #[test]
    fn whitelists_and_blacklists_match_addresses_and_ranges() {
        let w = "{whitelist: [10.0.0.0/8, \"2001:db8::/32\", 192.0.2.10]}";
        assert_eq!(status(w, "10.1.2.3:1", None), 200);
        assert_eq!(status(w, "192.0.2.10:1", None), 200);
        assert_eq!(status(w, "[2001:db8::1]:1", None), 200);
        assert_eq!(status(w, "192.0.2.11:1", None), 403);
        let b = "{blacklist: [192.0.2.0/24], response_code: 401, message: go away}";
        assert_eq!(status(b, "192.0.2.99:1", None), 401);
        assert_eq!(status(b, "198.51.100.1:1", None), 200);
    }

    #[test]
    fn forwarded_for_counts_only_behind_trusted_proxies() {
        let cfg = "{whitelist: [203.0.113.7], trusted_addresses: [127.0.0.1, 10.0.0.0/8]}";
        // Through a trusted proxy chain: the rightmost untrusted entry is the client.
        assert_eq!(
            status(cfg, "127.0.0.1:1", Some("1.2.3.4, 203.0.113.7, 10.0.0.5")),
            200
        );
        assert_eq!(
            status(cfg, "127.0.0.1:1", Some("203.0.113.7, 6.6.6.6")),
            403
        );
        // From an untrusted peer, the header is ignored.
        assert_eq!(status(cfg, "198.51.100.1:1", Some("203.0.113.7")), 403);
    }

    #[test]
    fn configurations_are_checked_with_paths() {
        assert_eq!(
            check(
                "ip-restriction",
                "{whitelist: [10.0.0.0/33, nope]}",
                PluginScope::Route
            ),
            vec![
                "plugins.ip-restriction.whitelist[0]: invalid IP address or CIDR range \"10.0.0.0/33\"",
                "plugins.ip-restriction.whitelist[1]: invalid IP address or CIDR range \"nope\""
            ]
        );
        assert_eq!(
            check("ip-restriction", "{}", PluginScope::Route),
            vec!["plugins.ip-restriction: one of whitelist or blacklist is required"]
        );
        for (code, shown) in [
            ("199", "199"),
            ("600", "600"),
            ("65536", "65536"),
            ("-403", "-403"),
            ("403.5", "403.5"),
        ] {
            assert_eq!(
                check(
                    "ip-restriction",
                    &format!("{{whitelist: [10.0.0.1], response_code: {code}}}"),
                    PluginScope::Route
                ),
                vec![format!(
                    "plugins.ip-restriction.response_code: must be a status code from 200 to 599, got {shown}"
                )]
            );
        }
    }
}
