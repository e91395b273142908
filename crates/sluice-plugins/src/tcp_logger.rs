//! `tcp-logger`: sends log entries to a TCP server in batches, as APISIX's `tcp-logger`.
//!
//! `{host, port, tls: false, tls_options, timeout: 1000}` and the loggers' common fields
//! (`logger/mod.rs`). A batch is one connection: a JSON array of entries (the entry itself
//! when `batch_max_size` is 1), written and closed within `timeout` milliseconds; with `tls`,
//! over TLS whose certificate is not checked (`tls_options`: the server name sent).

use std::sync::Arc;
use std::time::Duration;

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
    #[serde(default)]
    tls: bool,
    #[serde(default)]
    tls_options: Option<String>,
    #[serde(default)]
    timeout: Option<Num>,
}

const KIND: Kind = Kind::named("tcp-logger", 405, "tcp logger");

crate::logger::factory!(KIND, Config, own);

/// Its own fields, checked, as its sink.
fn own(own: &Value, given: &crate::logger::Given<'_>, v: &mut Validator) -> Option<(Arc<dyn Sink>, Option<usize>)> {
    let c: Config = parse_config(own, v)?;
    let timeout = whole_field("timeout", c.timeout, 1000, (1, 3_600_000), " ms", v);
    let tls = c.tls.then_some(c.tls_options.as_deref());
    let peer = Peer::new(&c.host, c.port, tls, v)?;
    let sink = Tcp {
        peer,
        timeout: Duration::from_millis(timeout?),
        single: given.batch_max_size == 1,
    };
    Some((Arc::new(sink) as Arc<dyn Sink>, None))
}

struct Tcp {
    peer: Peer,
    timeout: Duration,
    single: bool,
}

impl Sink for Tcp {
    fn send<'a>(&'a self, batch: &'a [Bytes]) -> LocalFuture<'a, Result<(), Failed>> {
        Box::pin(async move {
            let data = json_batch(batch, self.single);
            self.peer
                .send_tcp(&data, self.timeout)
                .await
                .map_err(Failed::all)
        })
    }
}
