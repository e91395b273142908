//! `udp-logger`: sends log entries to a UDP server in batches, as APISIX's `udp-logger`.
//!
//! `{host, port, timeout: 3}` and the loggers' common fields (`logger/mod.rs`). A batch is one
//! datagram: a JSON array of entries (the entry itself when `batch_max_size` is 1). A datagram
//! is sent once (UDP says nothing of its arrival); one larger than the network takes (64 KiB
//! on loopback) fails the batch, so keep `batch_max_size` small.

use std::sync::Arc;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::plugin::{LocalFuture, parse_config};

use crate::logger::net::{Peer, json_batch};
use crate::logger::{Failed, Kind, Sink};
use crate::util::{Num, whole_field};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    host: String,
    port: Num,
    /// Accepted as APISIX has it (seconds); a datagram is sent without waiting for anything.
    #[serde(default)]
    timeout: Option<Num>,
}

const KIND: Kind = Kind::named("udp-logger", 400, "udp logger");

crate::logger::factory!(KIND, Config, own);

/// Its own fields, checked, as its sink.
fn own(own: &Value, given: &crate::logger::Given<'_>, v: &mut Validator) -> Option<(Arc<dyn Sink>, Option<usize>)> {
    let c: Config = parse_config(own, v)?;
    whole_field("timeout", c.timeout, 3, (1, 3600), " seconds", v)?;
    let peer = Peer::new(&c.host, c.port, None, v)?;
    let sink = Udp {
        peer,
        single: given.batch_max_size == 1,
    };
    Some((Arc::new(sink) as Arc<dyn Sink>, None))
}

struct Udp {
    peer: Peer,
    single: bool,
}

impl Sink for Udp {
    fn send<'a>(&'a self, batch: &'a [Bytes]) -> LocalFuture<'a, Result<(), Failed>> {
        Box::pin(async move {
            let data = json_batch(batch, self.single);
            self.peer
                .send_udp(std::iter::once(&data[..]))
                .await
                .map_err(|(_, why)| Failed::all(why))
        })
    }
}
