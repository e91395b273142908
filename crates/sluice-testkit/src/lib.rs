//! Test harness for Sluice (dev-only): the real gateway started in-process from a YAML string,
//! real origins (hyper servers) on `127.0.0.1:0` that record what they receive, a hyper
//! client, and a raw-bytes client for wire-level cases. No fixed ports, no mocks.

#![allow(missing_docs, clippy::unwrap_used)]

mod client;
mod gateway;
mod llm;
mod origin;
mod raw;

pub use client::{Client, TestResponse};
pub use gateway::Gateway;
pub use llm::{
    BEDROCK_KEY_ID, BEDROCK_SECRET, CACHE_WRITE_TOKENS, CACHED_TOKENS, COMPLETION_TOKENS,
    EMBEDDING_TOKENS, LlmFixture, LlmRequest, PIECES, PROMPT_TOKENS, REASONING_TOKENS,
};
pub use origin::{Handler, Recorded, Reply, TestOrigin, canned_origin};
pub use raw::{RawClient, RawResponse};

/// Logs to the test output when `RUST_LOG` is set.
pub fn init_logging() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}
