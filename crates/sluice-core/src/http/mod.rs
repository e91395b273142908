//! HTTP/1.1 wire format, written for the proxy's needs.
//!
//! Why not hyper here: a proxy built on hyper's server and client pays for a `HeaderMap` and
//! an `http::Request` per side, boxed bodies, and a spawned connection task for the upstream
//! side. Measured in the same run (bench/run.sh --with-hyper, docs/benchmarks.md), a
//! straightforward hyper proxy costs about 1.26 times NGINX's CPU per request, this engine
//! about 0.88 times. Here a request head is parsed once by `httparse` into offsets into the
//! read buffer, checked for ambiguous framing (RFC 9112 §6, the smuggling cases in
//! RELIABILITY.md, which hyper accepted in several releases), and re-serialised straight into
//! the upstream write buffer. hyper stays in the test suite as an independent peer.

pub mod chunked;
mod fields;
mod head;
pub mod request;
pub mod response;
pub mod write;

pub use fields::{Framing, HeaderKind, HeaderPos, classify, for_each_token, parse_content_length};
pub use head::{RequestHead, percent_decode};
#[cfg(test)]
pub(crate) use request::test_head;
