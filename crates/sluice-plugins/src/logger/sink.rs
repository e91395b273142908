//! What a logger's sink is: where its batches go ([`Sink`]), and a request's entry as the
//! sink frames it before it is queued ([`Logged`]).

use bytes::Bytes;
use serde_json::{Map, Value};
use sluice_core::Ctx;
use sluice_core::expr::Responded;
use sluice_core::http::RequestHead;
use sluice_core::plugin::LocalFuture;
use sluice_core::vars::Var;

use crate::util::text;

/// Where a logger's batches go.
pub(crate) trait Sink: Send + Sync + 'static {
    /// A request's entry as it is queued (on the worker, in the log phase): its JSON unless
    /// the sink frames it (syslog's RFC 5424 line, Loki's labels).
    fn envelope(&self, e: Logged<'_>) -> Vec<u8> {
        e.json()
    }

    /// Sends one batch (each entry one encoded log entry). Err: how many of the first entries
    /// were delivered anyway, and why the rest were not.
    fn send<'a>(&'a self, batch: &'a [Bytes]) -> LocalFuture<'a, Result<(), Failed>>;
}

/// A batch not (wholly) delivered.
#[derive(Debug)]
pub(crate) struct Failed {
    /// Entries delivered from the start of the batch.
    pub(crate) delivered: usize,
    /// Why not the rest.
    pub(crate) why: String,
}

impl Failed {
    /// Nothing was delivered.
    pub(crate) fn all(why: impl Into<String>) -> Failed {
        Failed {
            delivered: 0,
            why: why.into(),
        }
    }
}

/// A request's entry as a sink turns it into what is queued ([`Sink::envelope`]).
pub(crate) struct Logged<'a> {
    /// The entry: the full log, or the `log_format`'s.
    pub(crate) entry: Map<String, Value>,
    /// From a `log_format` (the route's or the metadata's).
    pub(crate) custom: bool,
    pub(crate) req: &'a RequestHead,
    /// The request in its context, for variables.
    pub(crate) env: &'a Responded<'a, Ctx<'a>>,
}

impl Logged<'_> {
    /// A variable's value, as text.
    pub(crate) fn var(&self, v: &Var) -> Option<String> {
        v.value(self.req, self.env).map(|b| text(&b))
    }

    /// The entry as JSON.
    pub(crate) fn json(&self) -> Vec<u8> {
        serde_json::to_vec(&self.entry).unwrap_or_default()
    }
}
