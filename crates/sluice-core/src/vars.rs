//! The request variables, in NGINX's and APISIX's names: `remote_addr`, `uri`, `http_x_user` (a
//! header), `arg_page` (a query argument), `cookie_session`, `post_arg_name` (the body),
//! `status`, `request_time`, ... One vocabulary for every place that reads one: route `vars`,
//! plugins' templates and keys, the limit plugins' keys, `chash` keys and the access log.
//! Names are parsed once, when the configuration loads ([`Var::parse`]); values are read through
//! one trait, [`Source`], which each place implements over what it has (a parsed request and
//! its context, an HTTP/2 head, a stream connection's addresses, a finished exchange).

use std::borrow::Cow;
use std::fmt;
use std::io::Write as _;
use std::net::SocketAddr;

use crate::body::BodyVar;

/// A variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Var {
    /// Client IP address.
    RemoteAddr,
    /// Client port (empty when a real address without a port replaced the peer's).
    RemotePort,
    /// The TCP peer's address, before `real-ip` or `real_ip` replaced it (`realip_remote_addr`).
    RealipRemoteAddr,
    /// The TCP peer's port (`realip_remote_port`).
    RealipRemotePort,
    /// IP address the request arrived on.
    ServerAddr,
    /// Port the request arrived on.
    ServerPort,
    /// `http` or `https`.
    Scheme,
    /// `ssl_client_s_dn`: the subject of the client certificate verified by mutual TLS.
    SslClientSubject,
    /// Path, without the query.
    Uri,
    /// Path and query as the client sent them (before rewrites).
    RequestUri,
    /// The host the request is for.
    Host,
    /// `server_name`: the host, as `chash` keys read it.
    ServerName,
    /// Method.
    RequestMethod,
    /// The query string without `?` (`args`, `query_string`).
    QueryString,
    /// `?` when the request has a query, else empty.
    IsArgs,
    /// `HTTP/1.1`, `HTTP/2.0`.
    ServerProtocol,
    /// The request line: `GET /a?b HTTP/1.1`.
    Request,
    /// A header field (`http_x_api_key` is `X-Api-Key`).
    Header(String),
    /// A field of the response sent (`sent_http_content_type`; lowercase, `-` for `_`): the
    /// loggers read it.
    SentHeader(String),
    /// A query argument.
    Arg(String),
    /// A cookie.
    Cookie(String),
    /// Read from the body: `post_arg_<name>`, `post_arg.<path>`, `graphql_*`.
    Body(BodyVar),
    /// Authenticated consumer's name.
    ConsumerName,
    /// Matched route's id.
    RouteId,
    /// The matched route's service's id (`service_id`).
    ServiceId,
    /// The identified consumer's group (`consumer_group_id`).
    ConsumerGroupId,
    /// The matched route's `name` (`route_name`).
    RouteName,
    /// The matched route's service's `name` (`service_name`).
    ServiceName,
    /// NGINX's `request_id`: 16 random bytes in hex, one per request, the same wherever read.
    RequestId,
    /// A claim of the token `jwt-auth` verified and kept (`store_in_ctx`): `jwt_claim_sub`.
    JwtClaim(String),
    /// What an AI plugin recorded of its exchange with a model (`llm_prompt_tokens`, ...).
    Llm(crate::llm::LlmVar),
    /// The response's status (none before there is a response).
    Status,
    /// The answering node's address (`balancer_ip`).
    BalancerIp,
    /// The answering node's port (`balancer_port`).
    BalancerPort,
    /// The answering node, `ip:port` (`upstream_addr`).
    UpstreamAddr,
    /// The answering node's status.
    UpstreamStatus,
    /// Seconds, with milliseconds, to the node's response head.
    UpstreamResponseTime,
    /// Bytes of the response body sent.
    BodyBytesSent,
    /// Bytes of the request body received.
    RequestBodyLength,
    /// Seconds, with milliseconds, from the request's first byte to its last response byte.
    RequestTime,
    /// `24/Nov/2026:06:37:09 +0000` (NGINX's; always UTC).
    TimeLocal,
    /// `2026-11-24T06:37:09.123Z`.
    TimeIso8601,
    /// Seconds since the epoch, with milliseconds.
    Msec,
    /// The request's trace id (32 hex digits), when it is traced.
    TraceId,
}

/// The names [`Var::parse`] knows besides the prefixed families (`http_*`, `arg_*`,
/// `cookie_*`, `post_arg*`, `graphql_*`), for error messages and tests.
pub const NAMES: &[&str] = &[
    "remote_addr",
    "remote_port",
    "realip_remote_addr",
    "realip_remote_port",
    "server_addr",
    "server_port",
    "scheme",
    "ssl_client_s_dn",
    "uri",
    "request_uri",
    "host",
    "server_name",
    "request_method",
    "args",
    "query_string",
    "is_args",
    "server_protocol",
    "request",
    "content_type",
    "content_length",
    "consumer_name",
    "route_id",
    "service_id",
    "consumer_group_id",
    "route_name",
    "service_name",
    "request_id",
    "status",
    "balancer_ip",
    "balancer_port",
    "upstream_addr",
    "upstream_status",
    "upstream_response_time",
    "body_bytes_sent",
    "request_body_length",
    "request_time",
    "time_local",
    "time_iso8601",
    "msec",
    "trace_id",
    "request_type",
    "request_llm_model",
    "llm_model",
    "llm_time_to_first_token",
    "llm_latency",
    "llm_prompt_tokens",
    "llm_completion_tokens",
    "llm_total_tokens",
    "llm_reasoning_tokens",
    "llm_cache_read_input_tokens",
    "llm_cache_creation_input_tokens",
    "llm_provider",
    "llm_instance",
];

impl Var {
    /// Parses a variable name (without `$`).
    pub fn parse(name: &str) -> Result<Var, String> {
        let v = match name {
            "remote_addr" => Var::RemoteAddr,
            "remote_port" => Var::RemotePort,
            "realip_remote_addr" => Var::RealipRemoteAddr,
            "realip_remote_port" => Var::RealipRemotePort,
            "server_addr" => Var::ServerAddr,
            "server_port" => Var::ServerPort,
            "scheme" => Var::Scheme,
            "ssl_client_s_dn" => Var::SslClientSubject,
            "uri" => Var::Uri,
            "request_uri" => Var::RequestUri,
            "host" => Var::Host,
            "server_name" => Var::ServerName,
            "request_method" => Var::RequestMethod,
            "args" | "query_string" => Var::QueryString,
            "is_args" => Var::IsArgs,
            "server_protocol" => Var::ServerProtocol,
            "request" => Var::Request,
            "content_type" => Var::Header("content-type".into()),
            "content_length" => Var::Header("content-length".into()),
            "http_host" => Var::Header("host".into()),
            "consumer_name" => Var::ConsumerName,
            "route_id" => Var::RouteId,
            "service_id" => Var::ServiceId,
            "consumer_group_id" => Var::ConsumerGroupId,
            "route_name" => Var::RouteName,
            "service_name" => Var::ServiceName,
            "request_id" => Var::RequestId,
            "status" => Var::Status,
            "balancer_ip" => Var::BalancerIp,
            "balancer_port" => Var::BalancerPort,
            "upstream_addr" => Var::UpstreamAddr,
            "upstream_status" => Var::UpstreamStatus,
            "upstream_response_time" => Var::UpstreamResponseTime,
            "body_bytes_sent" => Var::BodyBytesSent,
            "request_body_length" => Var::RequestBodyLength,
            "request_time" => Var::RequestTime,
            "time_local" => Var::TimeLocal,
            "time_iso8601" => Var::TimeIso8601,
            "msec" => Var::Msec,
            "trace_id" => Var::TraceId,
            _ if let Some(b) = BodyVar::parse(name) => Var::Body(b?),
            _ if let Some(l) = crate::llm::LlmVar::parse(name) => Var::Llm(l),
            _ => {
                let valid = |s: &str| {
                    !s.is_empty()
                        && s.bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
                };
                if let Some(h) = name.strip_prefix("http_").filter(|s| valid(s)) {
                    Var::Header(h.replace('_', "-"))
                } else if let Some(h) = name.strip_prefix("sent_http_").filter(|s| valid(s)) {
                    Var::SentHeader(h.replace('_', "-").to_ascii_lowercase())
                } else if let Some(a) = name.strip_prefix("arg_").filter(|s| valid(s)) {
                    Var::Arg(a.to_owned())
                } else if let Some(c) = name.strip_prefix("cookie_").filter(|s| valid(s)) {
                    Var::Cookie(c.to_owned())
                } else if let Some(c) = name.strip_prefix("jwt_claim_").filter(|s| valid(s)) {
                    Var::JwtClaim(c.to_owned())
                } else {
                    return Err(format!(
                        "unknown variable \"{name}\", expected remote_addr, server_addr, consumer_name, uri, host, http_<header>, arg_<name>, cookie_<name>, jwt_claim_<name>, sent_http_<header> or another request variable"
                    ));
                }
            }
        };
        Ok(v)
    }

    /// Read from the request body, which must be read first.
    pub fn needs_body(&self) -> bool {
        matches!(self, Var::Body(_))
    }

    /// Whether its value is a number (JSON writes it unquoted).
    pub fn is_number(&self) -> bool {
        if let Var::Llm(l) = self {
            return l.is_number();
        }
        matches!(
            self,
            Var::RemotePort
                | Var::RealipRemotePort
                | Var::ServerPort
                | Var::Msec
                | Var::Status
                | Var::BalancerPort
                | Var::BodyBytesSent
                | Var::RequestBodyLength
                | Var::RequestTime
                | Var::UpstreamStatus
                | Var::UpstreamResponseTime
        )
    }

    /// The value in `src`, borrowed where it can be. None: the variable has no value there.
    pub fn value_in<'a, S: Source<'a> + ?Sized>(&self, src: &S) -> Option<Cow<'a, [u8]>> {
        match self.text(src) {
            Text::Value(v) => Some(v),
            Text::Absent => None,
            Text::Formatted => {
                let mut out = Vec::new();
                self.write_formatted(src, &mut out)
                    .then_some(Cow::Owned(out))
            }
        }
    }

    /// Appends the value in `src` to `out`; false (nothing written) when it has none. Numbers,
    /// addresses and times are written without an allocation.
    pub fn write<'a, S: Source<'a> + ?Sized>(&self, src: &S, out: &mut Vec<u8>) -> bool {
        match self.text(src) {
            Text::Value(v) => {
                out.extend_from_slice(&v);
                true
            }
            Text::Absent => false,
            Text::Formatted => self.write_formatted(src, out),
        }
    }

    /// The value of a text variable; `Formatted` for the others.
    fn text<'a, S: Source<'a> + ?Sized>(&self, src: &S) -> Text<'a> {
        let found: Option<Cow<'a, [u8]>> = match self {
            Var::Scheme => Some(Cow::Borrowed(if src.is_https() {
                b"https"
            } else {
                b"http"
            })),
            Var::SslClientSubject => src.client_cert_subject().map(|s| s.as_bytes().into()),
            Var::Uri => src.path().map(Cow::Borrowed),
            Var::RequestUri => src.target().map(Cow::Borrowed),
            Var::Host | Var::ServerName => src.host(),
            Var::RequestMethod => src.method().map(Cow::Borrowed),
            Var::QueryString => src.query().map(Cow::Borrowed),
            Var::IsArgs => Some(Cow::Borrowed(if src.query().is_some() {
                b"?"
            } else {
                b""
            })),
            Var::ServerProtocol => src.protocol().map(Cow::Borrowed),
            Var::Header(h) => src.header(h).map(Cow::Borrowed),
            Var::SentHeader(h) => src.sent_header(h).map(Cow::Borrowed),
            Var::Arg(a) => src.arg(a),
            Var::Cookie(c) => src.cookie(c).map(Cow::Borrowed),
            Var::Body(b) => src.body_var(b),
            Var::ConsumerName => src.consumer_name().map(|n| n.as_bytes().into()),
            Var::RouteId => src.route_id().map(|n| n.as_bytes().into()),
            Var::ServiceId => src.service_id().map(|n| n.as_bytes().into()),
            Var::ConsumerGroupId => src.consumer_group().map(|n| n.as_bytes().into()),
            Var::RouteName => src.route_name().map(|n| n.as_bytes().into()),
            Var::ServiceName => src.service_name().map(|n| n.as_bytes().into()),
            Var::JwtClaim(c) => src.jwt_claim(c),
            Var::Llm(l) => src.llm(*l).map(|v| Cow::Owned(v.into_bytes())),
            _ => return Text::Formatted,
        };
        match found {
            Some(v) => Text::Value(v),
            None => Text::Absent,
        }
    }

    /// Writes a number, an address, a time or the request line.
    fn write_formatted<'a, S: Source<'a> + ?Sized>(&self, src: &S, out: &mut Vec<u8>) -> bool {
        let num = |out: &mut Vec<u8>, n: u64| {
            out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes())
        };
        match self {
            Var::RemoteAddr => match src.client_text() {
                Some(t) => out.extend_from_slice(t),
                None => {
                    let _ = write!(out, "{}", src.client().ip());
                }
            },
            // NGINX writes no port for an address given without one (port 0).
            Var::RemotePort => match src.client().port() {
                0 => return false,
                p => num(out, u64::from(p)),
            },
            Var::RealipRemoteAddr => {
                let _ = write!(out, "{}", src.peer().ip());
            }
            Var::RealipRemotePort => num(out, u64::from(src.peer().port())),
            Var::ServerAddr => {
                let _ = write!(out, "{}", src.server().ip());
            }
            Var::ServerPort => num(out, u64::from(src.server().port())),
            Var::Request => {
                let (Some(m), Some(t)) = (src.method(), src.target()) else {
                    return false;
                };
                out.extend_from_slice(m);
                out.push(b' ');
                out.extend_from_slice(t);
                out.push(b' ');
                out.extend_from_slice(src.protocol().unwrap_or_default());
            }
            Var::Status => match src.status() {
                Some(s) => num(out, u64::from(s)),
                None => return false,
            },
            Var::BalancerIp | Var::BalancerPort | Var::UpstreamAddr => {
                match (self, src.upstream_text(), src.upstream_addr()) {
                    (Var::UpstreamAddr, Some(t), _) => out.extend_from_slice(t.as_bytes()),
                    (_, _, None) => return false,
                    (Var::BalancerIp, _, Some(a)) => {
                        let _ = write!(out, "{}", a.ip());
                    }
                    (Var::BalancerPort, _, Some(a)) => num(out, u64::from(a.port())),
                    (_, _, Some(a)) => {
                        let _ = write!(out, "{a}");
                    }
                }
            }
            Var::UpstreamStatus => match src.upstream_status() {
                Some(s) => num(out, u64::from(s)),
                None => return false,
            },
            Var::UpstreamResponseTime => match src.upstream_response_ns() {
                Some(ns) => write_seconds(out, ns, 3),
                None => return false,
            },
            Var::BodyBytesSent => match src.bytes_sent() {
                Some(n) => num(out, n),
                None => return false,
            },
            Var::RequestBodyLength => match src.bytes_received() {
                Some(n) => num(out, n),
                None => return false,
            },
            Var::RequestTime => match src.request_ns() {
                Some(ns) => write_seconds(out, ns, 3),
                None => return false,
            },
            Var::TimeLocal | Var::TimeIso8601 | Var::Msec => return src.write_time(self, out),
            Var::RequestId => match src.request_id() {
                Some(id) => crate::hex::push(out, &id),
                None => return false,
            },
            Var::TraceId => match src.trace_id() {
                Some(id) => crate::hex::push(out, &id),
                None => return false,
            },
            // Text variables are written by `write`.
            _ => return false,
        }
        true
    }
}

enum Text<'a> {
    Value(Cow<'a, [u8]>),
    Absent,
    Formatted,
}

/// `n` in exactly `width` digits (zero-padded; `n` must fit).
pub fn digits(out: &mut Vec<u8>, n: u64, width: usize) {
    let mut tmp = [b'0'; 20];
    let mut n = n;
    for i in (0..width).rev() {
        tmp[i] = b'0' + (n % 10) as u8;
        n /= 10;
    }
    out.extend_from_slice(&tmp[..width]);
}

/// Seconds with `decimals` (3 or 6) decimals, from nanoseconds, without floating point.
pub fn write_seconds(out: &mut Vec<u8>, ns: u64, decimals: u32) {
    out.extend_from_slice(itoa::Buffer::new().format(ns / 1_000_000_000).as_bytes());
    out.push(b'.');
    let frac = ns % 1_000_000_000 / 10u64.pow(9 - decimals);
    digits(out, frac, decimals as usize);
}

impl fmt::Display for Var {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Var::Header(h) => write!(f, "http_{}", h.replace('-', "_")),
            Var::SentHeader(h) => write!(f, "sent_http_{}", h.replace('-', "_")),
            Var::Arg(a) => write!(f, "arg_{a}"),
            Var::Cookie(c) => write!(f, "cookie_{c}"),
            Var::JwtClaim(c) => write!(f, "jwt_claim_{c}"),
            Var::Llm(l) => f.write_str(l.name()),
            Var::Body(b) => f.write_str(b.name()),
            Var::QueryString => f.write_str("query_string"),
            Var::SslClientSubject => f.write_str("ssl_client_s_dn"),
            other => {
                // The name is the variant's, in snake case: `RequestUri` is `request_uri`.
                let debug = format!("{other:?}");
                let mut name = String::with_capacity(debug.len() + 4);
                for (i, c) in debug.chars().enumerate() {
                    if c.is_ascii_uppercase() && i > 0 {
                        name.push('_');
                    }
                    name.push(c.to_ascii_lowercase());
                }
                f.write_str(&name)
            }
        }
    }
}

/// What variables are read from. Each place that reads variables implements it over what it
/// has; what it does not have is absent (the defaults).
pub trait Source<'a> {
    /// The client's address.
    fn client(&self) -> SocketAddr;
    /// The TCP peer's address: the client's, unless a real address replaced it.
    fn peer(&self) -> SocketAddr {
        self.client()
    }
    /// The address the request arrived on.
    fn server(&self) -> SocketAddr;
    /// Whether the request came over TLS.
    fn is_https(&self) -> bool {
        false
    }
    /// The client's address as text, when the source keeps it written (the access log).
    fn client_text(&self) -> Option<&'a [u8]> {
        None
    }
    /// The method.
    fn method(&self) -> Option<&'a [u8]> {
        None
    }
    /// The path without the query (`uri`).
    fn path(&self) -> Option<&'a [u8]> {
        None
    }
    /// Path and query as sent (`request_uri`).
    fn target(&self) -> Option<&'a [u8]> {
        None
    }
    /// The query string, without `?`.
    fn query(&self) -> Option<&'a [u8]> {
        None
    }
    /// The host the request is for (`host`).
    fn host(&self) -> Option<Cow<'a, [u8]>> {
        None
    }
    /// `HTTP/1.1`, `HTTP/2.0`.
    fn protocol(&self) -> Option<&'a [u8]> {
        None
    }
    /// The first value of a header field.
    fn header(&self, _name: &str) -> Option<&'a [u8]> {
        None
    }
    /// A field of the response sent (lowercase name), where the source has the response.
    fn sent_header(&self, _name: &str) -> Option<&'a [u8]> {
        None
    }
    /// The last value of a header field (the one the nearest proxy wrote).
    fn last_header(&self, name: &str) -> Option<&'a [u8]> {
        self.header(name)
    }
    /// A query argument's value.
    fn arg(&self, _name: &str) -> Option<Cow<'a, [u8]>> {
        None
    }
    /// A cookie's value.
    fn cookie(&self, _name: &str) -> Option<&'a [u8]> {
        None
    }
    /// A value read from the request body.
    fn body_var(&self, _var: &BodyVar) -> Option<Cow<'a, [u8]>> {
        None
    }
    /// The identified consumer's name.
    fn consumer_name(&self) -> Option<&'a str> {
        None
    }
    /// The matched route's id.
    fn route_id(&self) -> Option<&'a str> {
        None
    }
    /// The matched route's service's id, when it has one.
    fn service_id(&self) -> Option<&'a str> {
        None
    }
    /// The identified consumer's group, when it has one.
    fn consumer_group(&self) -> Option<&'a str> {
        None
    }
    /// The matched route's `name`, when it has one.
    fn route_name(&self) -> Option<&'a str> {
        None
    }
    /// The matched route's service's `name`, when it has one.
    fn service_name(&self) -> Option<&'a str> {
        None
    }
    /// The request's `request_id` (the same each time it is read).
    fn request_id(&self) -> Option<[u8; 16]> {
        None
    }
    /// A claim of the token `jwt-auth` kept.
    fn jwt_claim(&self, _name: &str) -> Option<Cow<'a, [u8]>> {
        None
    }
    /// What an AI plugin recorded of the exchange with a model, once the request ended.
    fn llm(&self, _var: crate::llm::LlmVar) -> Option<String> {
        None
    }
    /// The subject of the client certificate verified by mutual TLS.
    fn client_cert_subject(&self) -> Option<&'a str> {
        None
    }
    /// The response's status, once there is one.
    fn status(&self) -> Option<u16> {
        None
    }
    /// The node that answered, once one did.
    fn upstream_addr(&self) -> Option<SocketAddr> {
        None
    }
    /// The node that answered as the log names it (`upstream_addr`), when the source has it
    /// written.
    fn upstream_text(&self) -> Option<&'a str> {
        None
    }
    /// The node's status.
    fn upstream_status(&self) -> Option<u16> {
        None
    }
    /// Nanoseconds to the node's response head.
    fn upstream_response_ns(&self) -> Option<u64> {
        None
    }
    /// Bytes of the response body sent.
    fn bytes_sent(&self) -> Option<u64> {
        None
    }
    /// Bytes of the request body received.
    fn bytes_received(&self) -> Option<u64> {
        None
    }
    /// Nanoseconds from the request's first byte to its last response byte.
    fn request_ns(&self) -> Option<u64> {
        None
    }
    /// The request's trace id.
    fn trace_id(&self) -> Option<[u8; 16]> {
        None
    }
    /// Writes a wall-clock variable (`time_local`, `time_iso8601`, `msec`); a source that
    /// writes many keeps the text of the current second. False: the source has no clock.
    fn write_time(&self, _var: &Var, _out: &mut Vec<u8>) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Conn;

    impl Source<'static> for Conn {
        fn client(&self) -> SocketAddr {
            "192.0.2.7:5000".parse().unwrap()
        }
        fn server(&self) -> SocketAddr {
            "127.0.0.1:9080".parse().unwrap()
        }
        fn path(&self) -> Option<&'static [u8]> {
            Some(b"/a")
        }
        fn query(&self) -> Option<&'static [u8]> {
            Some(b"x=1")
        }
        fn request_ns(&self) -> Option<u64> {
            Some(412_345)
        }
    }

    #[test]
    fn every_name_parses_and_prints_back() {
        for name in NAMES {
            let v = Var::parse(name).unwrap_or_else(|e| panic!("{e}"));
            let printed = v.to_string();
            let again = Var::parse(&printed).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(again, v, "{name} prints as {printed}");
        }
        for name in [
            "http_x_user",
            "arg_page",
            "cookie_sid",
            "post_arg_name",
            "jwt_claim_sub",
        ] {
            assert_eq!(Var::parse(name).unwrap().to_string(), name);
        }
        assert!(Var::parse("nope").is_err());
        assert!(Var::parse("http_").is_err());
    }

    #[test]
    fn values_are_read_from_what_the_source_has() {
        let text = |v: &str| {
            Var::parse(v)
                .unwrap()
                .value_in(&Conn)
                .map(|c| String::from_utf8(c.into_owned()).unwrap())
        };
        assert_eq!(text("remote_addr").as_deref(), Some("192.0.2.7"));
        assert_eq!(text("remote_port").as_deref(), Some("5000"));
        assert_eq!(text("server_port").as_deref(), Some("9080"));
        assert_eq!(text("uri").as_deref(), Some("/a"));
        assert_eq!(text("is_args").as_deref(), Some("?"));
        assert_eq!(text("args").as_deref(), Some("x=1"));
        assert_eq!(text("scheme").as_deref(), Some("http"));
        assert_eq!(text("request_time").as_deref(), Some("0.000"));
        assert_eq!(text("status"), None);
        assert_eq!(text("http_x_user"), None);
        assert_eq!(text("request"), None, "no method: no request line");
        let mut out = b"t=".to_vec();
        assert!(Var::RequestTime.write(&Conn, &mut out));
        assert_eq!(out, b"t=0.000");
        let mut out = Vec::new();
        write_seconds(&mut out, 1_234_567_890, 6);
        assert_eq!(out, b"1.234567");
    }
}
