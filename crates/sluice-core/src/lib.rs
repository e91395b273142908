//! Sluice's shared model: the HTTP/1.1 head and its codec, and the plugin contract.
//!
//! Owns: request and response heads (parsed once into offsets, with an edit overlay), the
//! strict HTTP/1.1 parsers and serialisers, the [`plugin::Plugin`] and
//! [`plugin::PluginFactory`] traits, the per-request [`ctx::Ctx`], consumers, request
//! variables and conditions. Does not own: sockets, pools or workers (the engine), nor any
//! particular plugin (`sluice-plugins`). Pure: no async runtime.

#![warn(missing_docs, unreachable_pub)]

pub mod body;
pub mod check;
pub mod clock;
pub mod consumer;
pub mod ctx;
pub mod env;
pub mod exposition;
pub mod expr;
pub mod hex;
pub mod http;
pub mod keys;
pub mod llm;
pub mod meta;
pub mod plugin;
pub mod realip;
pub mod state;
pub mod template;
pub mod tls_client;
pub mod vars;

pub use consumer::Consumer;
pub use ctx::{Ctx, Lease, Mirror, ResponseEdits, UpstreamRef};
pub use plugin::{
    Chain, ChainEntry, Flow, Phases, Plugin, PluginFactory, Response, ResponseView, Scope,
};

/// Bumped by SIGUSR1 (after logrotate moved the files): the access log and the file loggers
/// reopen their files by their paths at their next write.
pub static REOPEN_LOGS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
