//! The PROXY protocol (HAProxy's; v1 text, v2 binary) on listeners with `proxy_protocol: true`:
//! a load balancer in front (a cloud's, HAProxy, NGINX's `proxy_protocol on`) opens each
//! connection with a header naming the client; its source is the client's address for every
//! request of the connection, and its destination the address the request arrived on. The
//! header's parsing is the `ppp` crate's.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use ppp::{HeaderResult, PartialResult};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// The longest header read: v1's is at most 107 bytes; v2's is 16 and its addresses and TLVs
/// (a load balancer's TLVs are a few hundred bytes at most).
const MAX_HEADER: usize = 4096;

/// The longest v1 header, its CRLF included (the specification's 107 bytes).
const V1_MAX: usize = 107;

/// What a connection's header said.
#[derive(Debug)]
pub(crate) struct Proxied {
    /// The client and the address it connected to; None: the header named none (v1
    /// `UNKNOWN`, v2 `LOCAL` such as a health check, or a Unix socket): the TCP peer's stand.
    pub(crate) addrs: Option<(SocketAddr, SocketAddr)>,
    /// What came after the header (the first bytes of HTTP or TLS).
    pub(crate) rest: Bytes,
}

/// Reads the connection's PROXY header, within `timeout`. Err: none came in time, or it is
/// not one (the connection is closed, as NGINX and HAProxy do).
pub(crate) async fn read(io: &mut TcpStream, timeout: Duration) -> Result<Proxied, &'static str> {
    let mut buf = BytesMut::with_capacity(512);
    let read = async {
        loop {
            match io.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return Err("closed before its PROXY protocol header"),
                Ok(_) => {}
            }
            match parse(&buf) {
                Ok(Some((len, addrs))) => {
                    let _ = buf.split_to(len);
                    return Ok(Proxied {
                        addrs,
                        rest: buf.split().freeze(),
                    });
                }
                Ok(None) if buf.len() < MAX_HEADER => {}
                Ok(None) => return Err("PROXY protocol header too long"),
                Err(e) => return Err(e),
            }
        }
    };
    tokio::time::timeout(timeout, read)
        .await
        .unwrap_or(Err("no PROXY protocol header in time"))
}

pub(crate) type Addrs = Option<(SocketAddr, SocketAddr)>;

/// The header at the start of `buf`: its length and addresses; None: incomplete.
pub fn parse(buf: &[u8]) -> Result<Option<(usize, Addrs)>, &'static str> {
    // A v1 header is the line up to its first CRLF, at most 107 bytes: found here, so that
    // where it ends never depends on how reads split the bytes (`ppp` took a prefix ending in
    // a bare LF for a whole header).
    let buf = if buf.starts_with(b"PROXY ") {
        match memchr::memmem::find(&buf[..buf.len().min(V1_MAX)], b"\r\n") {
            Some(i) => &buf[..i + 2],
            None if buf.len() < V1_MAX => return Ok(None),
            None => return Err("broken PROXY protocol header"),
        }
    } else {
        buf
    };
    let header = HeaderResult::parse(buf);
    if header.is_incomplete() {
        return Ok(None);
    }
    match header {
        HeaderResult::V1(Ok(h)) => {
            let addrs = match h.addresses {
                ppp::v1::Addresses::Tcp4(a) => Some((
                    SocketAddr::from((a.source_address, a.source_port)),
                    SocketAddr::from((a.destination_address, a.destination_port)),
                )),
                ppp::v1::Addresses::Tcp6(a) => Some((
                    SocketAddr::from((a.source_address, a.source_port)),
                    SocketAddr::from((a.destination_address, a.destination_port)),
                )),
                ppp::v1::Addresses::Unknown => None,
            };
            if h.header.len() != buf.len() {
                return Err("broken PROXY protocol header");
            }
            Ok(Some((h.header.len(), addrs)))
        }
        HeaderResult::V2(Ok(h)) => {
            let addrs = match (h.command, h.addresses) {
                (ppp::v2::Command::Local, _) => None,
                (_, ppp::v2::Addresses::IPv4(a)) => Some((
                    SocketAddr::from((a.source_address, a.source_port)),
                    SocketAddr::from((a.destination_address, a.destination_port)),
                )),
                (_, ppp::v2::Addresses::IPv6(a)) => Some((
                    SocketAddr::from((a.source_address, a.source_port)),
                    SocketAddr::from((a.destination_address, a.destination_port)),
                )),
                _ => None,
            };
            Ok(Some((h.len(), addrs)))
        }
        HeaderResult::V1(Err(_)) | HeaderResult::V2(Err(_)) => Err("broken PROXY protocol header"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_of_both_versions_give_their_addresses_and_length() {
        let v1 = b"PROXY TCP4 203.0.113.7 10.0.0.1 51000 443\r\nGET / HTTP/1.1\r\n";
        let (len, addrs) = parse(v1).unwrap().unwrap();
        assert_eq!(&v1[len..len + 3], b"GET");
        let (src, dst) = addrs.unwrap();
        assert_eq!(src.to_string(), "203.0.113.7:51000");
        assert_eq!(dst.to_string(), "10.0.0.1:443");

        let v6 = b"PROXY TCP6 2001:db8::7 2001:db8::1 51000 443\r\n";
        let (_, addrs) = parse(v6).unwrap().unwrap();
        assert_eq!(addrs.unwrap().0.to_string(), "[2001:db8::7]:51000");
        assert_eq!(parse(b"PROXY UNKNOWN\r\nX").unwrap().unwrap().1, None);

        let mut v2 = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
        v2.extend([
            0x21, 0x11, 0, 12, 198, 51, 100, 9, 10, 0, 0, 1, 0x1f, 0x90, 0x01, 0xbb,
        ]);
        v2.extend(b"rest");
        let (len, addrs) = parse(&v2).unwrap().unwrap();
        assert_eq!(&v2[len..], b"rest");
        assert_eq!(addrs.unwrap().0.to_string(), "198.51.100.9:8080");
        // LOCAL (a load balancer's health check): no address.
        let mut local = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
        local.extend([0x20, 0x00, 0, 0]);
        assert_eq!(parse(&local).unwrap().unwrap(), (16, None));
    }

    #[test]
    fn partial_and_broken_headers_are_told_apart() {
        assert_eq!(parse(b"PROXY TCP4 1.2.3.4").unwrap(), None);
        assert_eq!(parse(b"\r\n\r\n\0\r").unwrap(), None);
        assert!(parse(b"GET / HTTP/1.1\r\n\r\n").is_err());
        assert!(parse(b"PROXY TCP4 1.2.3.999 10.0.0.1 1 2\r\n").is_err());
    }

    /// Found by the `proxy_protocol` fuzz target: `ppp` took `PROXY UNKNOWN / \n` for a
    /// whole header when the bytes so far ended there, and the longer header ending at the
    /// CRLF when more had come: where the header ends depended on how reads split the bytes.
    /// A v1 header ends at its CRLF (at most 107 bytes), whatever the reads.
    #[test]
    fn a_v1_header_ends_at_its_crlf_however_the_bytes_arrive() {
        let whole = b"PROXY UNKNOWN / \nGET / HTTP/1..HTTP\r\nrest";
        let (len, _) = parse(whole).unwrap().unwrap();
        assert_eq!(&whole[len..], b"rest");
        for k in 0..len {
            assert!(
                !matches!(parse(&whole[..k]), Ok(Some(_))),
                "{k} bytes: {:?}",
                parse(&whole[..k])
            );
        }
        assert!(parse(&[b"PROXY UNKNOWN ".as_slice(), &[b'x'; 100], b"\n"].concat()).is_err());
    }
}
