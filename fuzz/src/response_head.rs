//! The upstream response head parser: never panics; an accepted head lies within the input.

use sluice_core::http::response::parse;

/// One input.
pub fn check(data: &[u8]) {
    let Some((&flags, input)) = data.split_first() else {
        return;
    };
    let mut headers = Vec::new();
    if let Ok(Some(mut head)) = parse(input, flags & 1 == 1, 16384, &mut headers) {
        // The engine moves the head's bytes out of its buffer before reading fields.
        let mut buf = bytes::BytesMut::from(input);
        head.take_bytes(&mut buf);
        assert!(head.raw().len() <= input.len());
        let _ = (
            head.status(),
            head.reason(),
            head.framing(),
            head.keep_alive(),
        );
    }
}
