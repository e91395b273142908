//! `syslog`: sends log entries to a syslog server as RFC 5424 messages, as APISIX's `syslog`.
//!
//! `{host, port, sock_type: tcp, tls: false, timeout: 3000, flush_limit: 4096, drop_limit:
//! 1048576, pool_size: 5}` and the loggers' common fields (`logger/mod.rs`). Each entry is
//! one message, as APISIX writes it: `<46>1 TIME HOST apisix PID - - {json}` (facility
//! syslog, severity info; HOST the request's host). Over TCP (RFC 6587, each message ended by
//! a line feed; RFC 5425 with `tls`, the certificate not checked) a batch is one connection;
//! over UDP (RFC 5426) each message is a datagram. `drop_limit` bounds the bytes waiting per
//! worker; `flush_limit` and `pool_size` are accepted as APISIX has them (batches are formed
//! by the batch processor's fields, and each goes over a connection of its own).

use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::plugin::{LocalFuture, parse_config};

use crate::logger::net::Peer;
use crate::logger::{Failed, Kind, Sink};
use crate::util::{Num, whole_field};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    host: String,
    port: Num,
    #[serde(default)]
    sock_type: Option<String>,
    #[serde(default)]
    tls: bool,
    #[serde(default)]
    timeout: Option<Num>,
    #[serde(default)]
    flush_limit: Option<Num>,
    #[serde(default)]
    drop_limit: Option<Num>,
    #[serde(default)]
    pool_size: Option<Num>,
}

const KIND: Kind = Kind::named("syslog", 401, "sys logger");

crate::logger::factory!(KIND, Config, own);

/// Its own fields, checked, as its sink.
fn own(own: &Value, _given: &crate::logger::Given<'_>, v: &mut Validator) -> Option<(Arc<dyn Sink>, Option<usize>)> {
    let c: Config = parse_config(own, v)?;
    let udp = match c.sock_type.as_deref() {
        None | Some("tcp") => Some(false),
        Some("udp") => Some(true),
        Some(other) => {
            v.error_at("sock_type", format!("must be tcp or udp, got \"{other}\""));
            None
        }
    };
    let timeout = whole_field("timeout", c.timeout, 3000, (1, 3_600_000), " ms", v);
    let flush = whole_field("flush_limit", c.flush_limit, 4096, (1, 1 << 30), "", v);
    let drop = whole_field("drop_limit", c.drop_limit, 1 << 20, (1, 1 << 34), "", v);
    let pool = whole_field("pool_size", c.pool_size, 5, (5, 10_000), "", v);
    if c.tls && udp == Some(true) {
        v.error_at("tls", "works with sock_type: tcp only");
        return None;
    }
    let peer = Peer::new(&c.host, c.port, c.tls.then_some(None), v)?;
    let (udp, timeout, _, drop, _) = (udp?, timeout?, flush?, drop?, pool?);
    let sink = Syslog {
        peer,
        udp,
        timeout: Duration::from_millis(timeout),
    };
    Some((Arc::new(sink) as Arc<dyn Sink>, Some(drop as usize)))
}

/// An entry as an RFC 5424 message, as APISIX's `rfc5424.encode("SYSLOG", "INFO", host,
/// "apisix", pid, msg)` writes it, line feed included.
fn rfc5424(entry: &[u8], host: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(entry.len() + 80);
    // Facility syslog (5) times 8, plus severity info (6).
    out.extend_from_slice(b"<46>1 ");
    sluice_core::clock::write_iso_millis(&mut out, sluice_core::clock::now());
    // HOSTNAME is printable US-ASCII without spaces (RFC 5424, 6.2.4), at most 255.
    let host: String = host
        .chars()
        .filter(|c| c.is_ascii_graphic())
        .take(255)
        .collect();
    let host = if host.is_empty() { "-".into() } else { host };
    let _ = write!(out, " {host} apisix {} - - ", std::process::id());
    out.extend_from_slice(entry);
    out.push(b'\n');
    out
}

struct Syslog {
    peer: Peer,
    udp: bool,
    timeout: Duration,
}

impl Sink for Syslog {
    fn envelope(&self, e: crate::logger::Logged<'_>) -> Vec<u8> {
        let host = e.var(&sluice_core::vars::Var::Host);
        rfc5424(&e.json(), host.as_deref().unwrap_or("-"))
    }

    fn send<'a>(&'a self, batch: &'a [Bytes]) -> LocalFuture<'a, Result<(), Failed>> {
        Box::pin(async move {
            if self.udp {
                let datagrams = batch.iter().map(|m| m.strip_suffix(b"\n").unwrap_or(m));
                return self
                    .peer
                    .send_udp(datagrams)
                    .await
                    .map_err(|(delivered, why)| Failed { delivered, why });
            }
            let data = batch.concat();
            self.peer
                .send_tcp(&data, self.timeout)
                .await
                .map_err(Failed::all)
        })
    }
}
