//! The client's real address, as a proxy in front of the gateway sent it: APISIX's `real-ip`
//! plugin and the node-wide `real_ip` setting (NGINX's `real_ip_header`, `set_real_ip_from`,
//! `real_ip_recursive`) read it by the same rules, here.
//!
//! - Only a peer in the trusted ranges is believed (the plugin without `trusted_addresses`
//!   believes every peer, as APISIX's does).
//! - `X-Forwarded-For` (its last field when there are several): the last address; with
//!   `recursive`, the last one that is not trusted (the first when all are).
//! - Any other source is a variable (`http_x_real_ip`, `arg_realip`, ...) holding one address,
//!   with an optional port (`1.1.1.1:80`, `[::1]:80`, `::1`).
//! - An address that is missing or does not parse leaves the client's as it was; so does a
//!   port outside 1..=65535. An address without a port has port 0 (`remote_port` is empty, as
//!   NGINX's).

use std::borrow::Cow;
use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;

use crate::vars::{Source, Var};

/// Where the real address is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum From {
    /// `X-Forwarded-For`, a list (`http_x_forwarded_for`).
    ForwardedFor,
    /// A variable holding one address.
    Var(Var),
}

impl From {
    /// A variable's name (`http_x_forwarded_for`, `http_x_real_ip`, `arg_realip`).
    pub fn parse(name: &str) -> Result<From, String> {
        match Var::parse(name)? {
            Var::Header(h) if h.eq_ignore_ascii_case("x-forwarded-for") => Ok(From::ForwardedFor),
            v => Ok(From::Var(v)),
        }
    }

    /// A header field's name (NGINX's `real_ip_header X-Real-IP`).
    pub fn header(name: &str) -> Result<From, String> {
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(format!("invalid header field name \"{name}\""));
        }
        From::parse(&format!(
            "http_{}",
            name.replace('-', "_").to_ascii_lowercase()
        ))
    }
}

/// How a real address is found.
#[derive(Debug, Clone)]
pub struct RealIp {
    /// Where it is read.
    pub from: From,
    /// The peers believed; None: every peer.
    pub trusted: Option<Vec<IpNet>>,
    /// `X-Forwarded-For`: skip trusted addresses from the end.
    pub recursive: bool,
}

impl RealIp {
    /// The real address of a request from `peer`, when there is one to believe.
    pub fn find<'a, S: Source<'a> + ?Sized>(&self, peer: IpAddr, src: &S) -> Option<SocketAddr> {
        if !self.trusts(peer) {
            return None;
        }
        let text: Cow<'_, [u8]> = match &self.from {
            From::ForwardedFor => {
                let list = src.last_header("x-forwarded-for")?;
                Cow::Borrowed(self.pick_in_list(list))
            }
            From::Var(v) => v.value_in(src)?,
        };
        parse_addr(&text)
    }

    fn trusts(&self, ip: IpAddr) -> bool {
        match &self.trusted {
            None => true,
            Some(nets) => {
                let ip = canonical(ip);
                nets.iter().any(|n| n.contains(&ip))
            }
        }
    }

    /// The entry of an `X-Forwarded-For` list to believe.
    fn pick_in_list<'l>(&self, list: &'l [u8]) -> &'l [u8] {
        let mut entries = list.rsplit(|b| *b == b',').map(<[u8]>::trim_ascii);
        if !(self.recursive && self.trusted.is_some()) {
            return entries.next().unwrap_or_default();
        }
        let mut last = &b""[..];
        for e in entries {
            last = e;
            let trusted = parse_addr(e).is_some_and(|a| self.trusts(a.ip()));
            if !trusted {
                return e;
            }
        }
        last
    }
}

/// An address as text, an IPv4 one without `fmt` (its `Display` cost ~1,000 instructions per
/// request where a real address replaces the peer's).
pub fn ip_text(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => {
            let mut out = String::with_capacity(15);
            let mut digits = itoa::Buffer::new();
            for (i, o) in v4.octets().iter().enumerate() {
                if i > 0 {
                    out.push('.');
                }
                out.push_str(digits.format(*o));
            }
            out
        }
        v6 => v6.to_string(),
    }
}

/// An address or a CIDR range (`10.0.0.0/8`, `127.0.0.1`, `::1/128`).
pub fn parse_net(s: &str) -> Option<IpNet> {
    s.parse::<IpNet>()
        .ok()
        .or_else(|| s.parse::<IpAddr>().ok().map(IpNet::from))
}

/// An IPv4-mapped IPv6 address as the IPv4 one (a dual-stack listener's peers).
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// `1.1.1.1`, `1.1.1.1:80`, `::1`, `[::1]`, `[::1]:80`. None: not an address, or a port
/// outside 1..=65535.
pub fn parse_addr(text: &[u8]) -> Option<SocketAddr> {
    let s = std::str::from_utf8(text).ok()?.trim();
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(SocketAddr::new(ip, 0));
    }
    if let Some(inner) = s.strip_prefix('[').and_then(|r| r.strip_suffix(']'))
        && let Ok(ip) = inner.parse::<std::net::Ipv6Addr>()
    {
        return Some(SocketAddr::new(IpAddr::V6(ip), 0));
    }
    let (ip, port) = s.rsplit_once(':')?;
    let ip = match ip.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        Some(v6) => IpAddr::V6(v6.parse().ok()?),
        None => IpAddr::V4(ip.parse().ok()?),
    };
    if port.is_empty() || port.len() > 5 || !port.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let port: u32 = port.parse().ok()?;
    (1..=65_535)
        .contains(&port)
        .then(|| SocketAddr::new(ip, port as u16))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::{RequestHead, request};

    fn head(fields: &str) -> RequestHead {
        request::test_head(&format!(
            "GET /a?realip=9.9.9.9:77 HTTP/1.1\r\nHost: x\r\n{fields}\r\n"
        ))
    }

    struct Src<'a>(&'a RequestHead);

    impl<'a> Source<'a> for Src<'a> {
        fn client(&self) -> SocketAddr {
            "127.0.0.1:5000".parse().unwrap()
        }
        fn server(&self) -> SocketAddr {
            "127.0.0.1:9080".parse().unwrap()
        }
        fn header(&self, name: &str) -> Option<&'a [u8]> {
            self.0.header(name)
        }
        fn last_header(&self, name: &str) -> Option<&'a [u8]> {
            self.0.last_header(name)
        }
        fn arg(&self, name: &str) -> Option<Cow<'a, [u8]>> {
            self.0.query_arg_ref(name)
        }
    }

    fn real(from: &str, trusted: Option<&[&str]>, recursive: bool, fields: &str) -> Option<String> {
        let r = RealIp {
            from: From::parse(from).unwrap(),
            trusted: trusted.map(|t| t.iter().map(|n| n.parse().unwrap()).collect()),
            recursive,
        };
        let h = head(fields);
        r.find("127.0.0.1".parse().unwrap(), &Src(&h))
            .map(|a| a.to_string())
    }

    #[test]
    fn addresses_are_written_as_display_writes_them() {
        for ip in [
            "0.0.0.0",
            "203.0.113.7",
            "255.255.255.255",
            "::1",
            "2001:db8::7",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(ip_text(ip), ip.to_string());
        }
    }

    #[test]
    fn addresses_parse_with_and_without_ports() {
        let p = |s: &str| parse_addr(s.as_bytes()).map(|a| a.to_string());
        assert_eq!(p("1.1.1.1").as_deref(), Some("1.1.1.1:0"));
        assert_eq!(p("1.1.1.1:80").as_deref(), Some("1.1.1.1:80"));
        assert_eq!(p("::2").as_deref(), Some("[::2]:0"));
        assert_eq!(p("[::1]").as_deref(), Some("[::1]:0"));
        assert_eq!(p("[::1]:8080").as_deref(), Some("[::1]:8080"));
        for bad in [
            "1.1.1.1.1",
            "1.1.1.1:65536",
            "1.1.1.1:0",
            "1.1.1.1:",
            "x",
            "",
            "::1:99999",
        ] {
            assert_eq!(p(bad), None, "{bad}");
        }
    }

    #[test]
    fn forwarded_for_gives_its_last_address_or_the_last_untrusted_one() {
        let xff = "X-Forwarded-For: 1.1.1.1, 192.128.1.1, 127.0.0.1\r\n";
        let t = Some(&["192.128.0.0/16", "127.0.0.0/24"][..]);
        assert_eq!(
            real("http_x_forwarded_for", t, false, xff).as_deref(),
            Some("127.0.0.1:0")
        );
        assert_eq!(
            real("http_x_forwarded_for", t, true, xff).as_deref(),
            Some("1.1.1.1:0")
        );
        // Every entry trusted: the first.
        let all = "X-Forwarded-For: 127.0.0.2, 127.0.0.3\r\n";
        assert_eq!(
            real("http_x_forwarded_for", t, true, all).as_deref(),
            Some("127.0.0.2:0")
        );
        // Several fields: the last one.
        let two = "X-Forwarded-For: 5.5.5.5\r\nX-Forwarded-For: 6.6.6.6, 7.7.7.7\r\n";
        assert_eq!(
            real("http_x_forwarded_for", None, false, two).as_deref(),
            Some("7.7.7.7:0")
        );
    }

    #[test]
    fn an_untrusted_peer_or_a_bad_address_changes_nothing() {
        let xff = "X-Forwarded-For: 1.1.1.1\r\n";
        assert_eq!(
            real("http_x_forwarded_for", Some(&["10.0.0.0/8"]), false, xff),
            None
        );
        assert_eq!(real("http_xff", None, false, "XFF: 1.1.1.1.1\r\n"), None);
        assert_eq!(
            real("http_xff", None, false, "XFF: 1.1.1.1:65536\r\n"),
            None
        );
        assert_eq!(real("http_xff", None, false, ""), None);
    }

    #[test]
    fn other_sources_are_variables() {
        assert_eq!(
            real("arg_realip", None, false, "").as_deref(),
            Some("9.9.9.9:77")
        );
        assert_eq!(
            real(
                "http_x_real_ip",
                Some(&["127.0.0.0/8"]),
                false,
                "X-Real-IP: [::2]:99\r\n"
            )
            .as_deref(),
            Some("[::2]:99")
        );
        assert_eq!(From::header("X-Forwarded-For").unwrap(), From::ForwardedFor);
        assert!(From::header("bad header").is_err());
        assert!(From::parse("no_such_var").is_err());
    }
}
