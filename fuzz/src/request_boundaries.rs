//! Differential: the same bytes through Sluice's request parser and through httparse alone,
//! read as NGINX and RFC 9112 frame a request (Content-Length, or chunked). Where both
//! accept, the head ends at the same byte; Sluice never accepts a head httparse refuses, and
//! where it accepts, the body's framing is the one RFC 9112 §6.3 gives (a request with both
//! Transfer-Encoding and Content-Length, or an unknown coding, is refused, never guessed).

use sluice_core::http::Framing;
use sluice_core::http::request::{HeadLimits, parse};

/// One input.
pub fn check(data: &[u8]) {
    let limits = HeadLimits {
        max_request_line: 65536,
        max_header_size: 65536,
        max_headers: 64,
    };
    let mut headers = Vec::new();
    let ours = parse(data, &limits, &mut headers);
    let mut raw = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut raw);
    let theirs = req.parse(data);
    match (&ours, &theirs) {
        (Ok(Some(h)), Ok(httparse::Status::Complete(n))) => {
            assert_eq!(h.head_len(), *n, "the head ends at another byte");
            let te: Vec<&[u8]> = req
                .headers
                .iter()
                .filter(|f| f.name.eq_ignore_ascii_case("transfer-encoding"))
                .map(|f| f.value)
                .collect();
            let cl: Vec<&[u8]> = req
                .headers
                .iter()
                .filter(|f| f.name.eq_ignore_ascii_case("content-length"))
                .map(|f| f.value)
                .collect();
            if !te.is_empty() {
                assert!(
                    cl.is_empty(),
                    "Transfer-Encoding and Content-Length both accepted"
                );
                assert_eq!(h.framing(), Framing::Chunked);
                let last = te.last().unwrap();
                let last = last.rsplit(|&b| b == b',').next().unwrap().trim_ascii();
                assert!(
                    last.eq_ignore_ascii_case(b"chunked"),
                    "a final coding other than chunked"
                );
            } else if let Some(v) = cl.first() {
                // RFC 9110 §8.6: repeated values are accepted only when they are one number.
                let num = |c: &&[u8]| {
                    std::str::from_utf8(c)
                        .unwrap()
                        .trim()
                        .parse::<u64>()
                        .unwrap()
                };
                let n = num(v);
                assert!(
                    cl.iter().all(|c| num(c) == n),
                    "differing Content-Lengths accepted"
                );
                assert_eq!(
                    h.framing(),
                    if n == 0 {
                        Framing::None
                    } else {
                        Framing::Length(n)
                    }
                );
            } else {
                assert_eq!(h.framing(), Framing::None);
            }
        }
        (Ok(Some(_)), other) => panic!("Sluice accepted a head httparse gives {other:?}"),
        _ => {}
    }
}
