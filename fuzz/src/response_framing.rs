//! Differential on the upstream side: a node's response head through Sluice's parser and
//! through httparse alone, its body framed as RFC 9112 §6.3 says. Where Sluice accepts: no
//! body after HEAD, 1xx, 204 or 304; `Transfer-Encoding` ending in `chunked` is chunked and
//! wins over `Content-Length` (or the head is refused); a `Content-Length` is one number
//! (repeated only as the same number); otherwise the body runs to the connection's close, and
//! then the connection is never reused. A reused connection whose body end was guessed is
//! how a node's answer desyncs the next request's.

use sluice_core::http::Framing;
use sluice_core::http::response::parse;

/// One input: the first byte's low bit says whether the request was HEAD, the rest is the
/// response head.
pub fn check(data: &[u8]) {
    let Some((&flags, input)) = data.split_first() else {
        return;
    };
    let head_request = flags & 1 == 1;
    let mut fields = Vec::new();
    let Ok(Some(ours)) = parse(input, head_request, 65536, &mut fields) else {
        return;
    };
    // As many fields as Sluice takes (fewer made a head of 132 fields look like one Sluice
    // accepts and httparse refuses: the fuzzer's first finding here, in this check).
    let mut raw = vec![httparse::EMPTY_HEADER; sluice_core::http::response::MAX_RESPONSE_HEADERS];
    let mut theirs = httparse::Response::new(&mut raw);
    let Ok(httparse::Status::Complete(_)) = theirs.parse(input) else {
        panic!("Sluice accepted a head httparse does not");
    };
    let status = theirs.code.expect("a status");
    assert_eq!(ours.status(), status);
    let values = |name: &str| -> Vec<&[u8]> {
        theirs
            .headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
            .collect()
    };
    let te = values("transfer-encoding");
    let cl = values("content-length");
    let framing = ours.framing();
    if head_request || (100..200).contains(&status) || status == 204 || status == 304 {
        assert_eq!(framing, Framing::None, "a body where none may be");
    } else if !te.is_empty() {
        let last = te.last().expect("a coding");
        let last = last
            .rsplit(|&b| b == b',')
            .next()
            .expect("a coding")
            .trim_ascii();
        if last.eq_ignore_ascii_case(b"chunked") {
            assert_eq!(framing, Framing::Chunked);
        } else {
            assert_eq!(framing, Framing::Close, "a final coding other than chunked");
        }
    } else if let Some(first) = cl.first() {
        let num = |v: &&[u8]| std::str::from_utf8(v).ok()?.trim().parse::<u64>().ok();
        let n = num(first).expect("an accepted Content-Length is a number");
        assert!(
            cl.iter().all(|v| num(v) == Some(n)),
            "differing lengths accepted"
        );
        match framing {
            Framing::Length(m) => assert_eq!(m, n),
            Framing::None => assert_eq!(n, 0),
            other => panic!("Content-Length {n} framed as {other:?}"),
        }
    } else {
        assert_eq!(framing, Framing::Close);
    }
    if framing == Framing::Close {
        assert!(
            !ours.keep_alive(),
            "a body read to the close, and the connection kept"
        );
    }
}
