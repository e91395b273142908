//! A compiled node of an upstream: a leaf below the upstream model and the balancers.

use std::net::SocketAddr;
use std::sync::Arc;

use super::health::NodeHealth;

#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) addr: SocketAddr,
    pub(crate) weight: u32,
    /// `host:port` as configured: the name in logs.
    pub(crate) authority: Box<str>,
    /// `authority` as an HTTP/2 request's `:authority`, parsed once here rather than per
    /// request (None when `http` refuses it: such a request fails as before, at its send).
    pub(crate) uri_authority: Option<http::uri::Authority>,
    /// How much of `authority` is the `Host` for `pass_host: node`: all of it, or the host
    /// alone when the port is the scheme's own (as APISIX: `Host: api.example`, not
    /// `api.example:443`).
    pub(crate) host_len: u16,
    /// With TLS: the name sent (SNI) and verified.
    pub(crate) server_name: Option<rustls::pki_types::ServerName<'static>>,
    /// The key of this node's keep-alive pool in each worker: its address and everything that
    /// makes a connection to it (scheme, TLS settings, server name). Nodes of different
    /// upstreams, or of successive versions of one, with the same key share a pool.
    pub(crate) pool_key: u64,
    /// Shared by all workers; kept across reloads that keep the node.
    pub(crate) health: Arc<NodeHealth>,
    /// Higher first: lower ones are backups.
    pub(crate) priority: i32,
}

impl Node {
    /// The node as an HTTP/2 request's `:authority` (parsed once, at compile time).
    pub(crate) fn h2_authority(&self) -> Result<http::uri::Authority, http::Error> {
        match &self.uri_authority {
            Some(a) => Ok(a.clone()),
            None => Ok(http::uri::Authority::try_from(&*self.authority)?),
        }
    }

    /// The `Host` sent for `pass_host: node`.
    pub(crate) fn host_header(&self) -> &[u8] {
        let a = self.authority.as_bytes();
        &a[..a.len().min(usize::from(self.host_len))]
    }
}
