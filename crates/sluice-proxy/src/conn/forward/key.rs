//! An HTTP/1.1 request as a `chash` key reads it (the variable vocabulary's `Source`).

use sluice_core::http::RequestHead;

/// An HTTP/1.1 request as a `chash` key is read from it.
pub(super) struct HeadKey<'a> {
    pub(super) head: &'a RequestHead,
    pub(super) conn: &'a super::super::Link,
    pub(super) consumer: Option<&'a str>,
}

/// As the HTTP/1.1 engine reads it: the path after rewrites, the `Host` as sent.
impl<'a> sluice_core::vars::Source<'a> for HeadKey<'a> {
    fn client(&self) -> std::net::SocketAddr {
        self.conn.peer
    }
    fn peer(&self) -> std::net::SocketAddr {
        self.conn.tcp_peer()
    }
    fn server(&self) -> std::net::SocketAddr {
        self.conn.local
    }
    fn is_https(&self) -> bool {
        self.conn.io.is_https()
    }
    fn method(&self) -> Option<&'a [u8]> {
        Some(self.head.method_bytes())
    }
    fn path(&self) -> Option<&'a [u8]> {
        Some(self.head.path())
    }
    fn target(&self) -> Option<&'a [u8]> {
        Some(self.head.target())
    }
    fn query(&self) -> Option<&'a [u8]> {
        self.head.query()
    }
    fn host(&self) -> Option<std::borrow::Cow<'a, [u8]>> {
        Some(self.head.host().into())
    }
    fn header(&self, name: &str) -> Option<&'a [u8]> {
        self.head.header(name)
    }
    fn arg(&self, name: &str) -> Option<std::borrow::Cow<'a, [u8]>> {
        self.head.query_arg(name).map(Into::into)
    }
    fn cookie(&self, name: &str) -> Option<&'a [u8]> {
        self.head.cookie(name)
    }
    fn consumer_name(&self) -> Option<&'a str> {
        self.consumer
    }
}
