//! The HTTP/1.1 request head parser: never panics; a head it accepts lies within the input,
//! and its framing follows from its own fields (RFC 9112 §6.3).

use sluice_core::http::Framing;
use sluice_core::http::request::{HeadLimits, parse};

/// One input.
pub fn check(data: &[u8]) {
    let limits = HeadLimits {
        max_request_line: 8192,
        max_header_size: 16384,
        max_headers: 100,
    };
    let mut headers = Vec::new();
    let Ok(Some(mut head)) = parse(data, &limits, &mut headers) else {
        return;
    };
    assert!(head.head_len() <= data.len());
    // The engine moves the head's bytes out of its buffer before reading fields.
    let mut buf = bytes::BytesMut::from(data);
    head.take_bytes(&mut buf);
    let te = head.header_values("transfer-encoding").count() > 0;
    let cl = head.header("content-length");
    match head.framing() {
        Framing::Chunked => assert!(te, "chunked without Transfer-Encoding"),
        Framing::Length(n) => {
            assert!(!te, "a length with Transfer-Encoding");
            let given: u64 = std::str::from_utf8(cl.expect("a length without Content-Length"))
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            assert_eq!(given, n);
        }
        Framing::None => assert!(!te, "Transfer-Encoding without a body"),
        Framing::Close => panic!("a request's body is never framed by the connection's close"),
    }
    let _ = (
        head.method(),
        head.path(),
        head.query(),
        head.host(),
        head.keep_alive(),
    );
}
