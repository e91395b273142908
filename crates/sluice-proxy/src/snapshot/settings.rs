//! Node-level limits and timeouts, in runtime form.

use std::sync::Arc;
use std::time::Duration;

use sluice_config::Config;
use sluice_core::http::request::HeadLimits;
use sluice_core::realip::{From, RealIp, parse_net};

/// Node-level limits and timeouts, in runtime form.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) head: HeadLimits,
    pub(crate) max_body: u64,
    /// Largest body read for conditions on it.
    pub(crate) max_body_vars: u64,
    pub(crate) max_response_head: usize,
    pub(crate) client_header: Duration,
    pub(crate) client_body: Duration,
    pub(crate) client_send: Duration,
    pub(crate) keepalive: Duration,
    pub(crate) keepalive_requests: u32,
    pub(crate) http2: Http2Limits,
    /// `log.access`: workers compare it with what they opened, once a second.
    pub(crate) access_log: Option<Arc<sluice_config::AccessLogConfig>>,
    /// `log.failure_summary` (zero: every failure logged).
    pub(crate) failure_summary: Duration,
    /// `real_ip`: the client's address from a trusted proxy in front, before routing.
    pub(crate) real_ip: Option<Box<RealIp>>,
}

/// Per-connection HTTP/2 limits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Http2Limits {
    pub(crate) max_streams: u32,
    pub(crate) pings: u32,
    pub(crate) settings: u32,
    pub(crate) resets: u32,
}

impl Settings {
    pub(crate) fn from_config(cfg: &Config) -> Self {
        let l = &cfg.limits;
        let t = &cfg.timeouts;
        Settings {
            head: HeadLimits {
                max_request_line: l.max_request_line.0 as usize,
                max_header_size: l.max_header_size.0 as usize,
                max_headers: l.max_headers,
            },
            max_body: l.max_body_size.0,
            // Validation refused 0; beyond max_body_size a body gets 413 before it is read.
            max_body_vars: l.max_body_vars_size.0.min(l.max_body_size.0),
            max_response_head: l.max_response_header_size.0 as usize,
            client_header: t.client_header.0,
            client_body: t.client_body.0,
            client_send: t.client_send.0,
            keepalive: t.keepalive.0,
            keepalive_requests: l.keepalive_requests,
            http2: Http2Limits {
                max_streams: l.http2_max_streams,
                pings: l.http2_pings_per_second,
                settings: l.http2_settings_per_second,
                resets: l.http2_resets_per_second,
            },
            access_log: cfg.log.access.clone().map(Arc::new),
            failure_summary: cfg.log.failure_summary.0,
            // Validated: the header's name and the ranges parse.
            real_ip: cfg.real_ip.as_ref().and_then(|r| {
                Some(Box::new(RealIp {
                    from: From::header(&r.header).ok()?,
                    trusted: Some(r.from.iter().filter_map(|s| parse_net(s)).collect()),
                    recursive: r.recursive,
                }))
            }),
        }
    }
}
