//! Sluice configuration: the serde model of the YAML file (node settings, routes, upstreams),
//! loading, and validation that reports every error with its path
//! (`routes[3].upstream.nodes: must not be empty`).
//!
//! Owns: the shape and the rules of a configuration. Does not own: turning it into runtime
//! objects (that is `sluice-proxy`'s compile step), nor reading it from etcd or the admin API.
//! Pure: no I/O but [`load_file`], no async runtime.

#![warn(missing_docs, unreachable_pub)]

mod catalog;
mod credentials;
mod de;
pub mod encryption;
mod env;
mod error;
mod export;
mod files;
mod load;
pub mod log_format;
mod model;
mod parse;
mod positions;
mod report;
pub mod secrets;
mod text;
mod validate;
mod warnings;

pub use catalog::{CheckEnv, NoPlugins, PluginCatalog, PluginScope};
pub use credentials::credentials_of;
pub use de::{
    Dur, Id, OneOrMany, Size, Workers, check_id, check_username, parse_duration, parse_size,
};
pub use error::{ConfigError, ConfigErrors, Validator, io_reason};
pub use files::{FileSig, FileStamp, file_signature};
pub use load::{
    TOP_LEVEL_KEYS, fold_standalone_credentials, load_file, load_file_with, load_route_with,
    load_str, load_str_with, load_value, load_value_with,
};
pub use model::*;
pub use parse::{humanize, short_number};
pub use report::all_errors;
pub use text::{parse_json, parse_text, parse_text_all};
pub use validate::{RouteContext, check_upstream_value};
pub use warnings::warnings;

/// Deserializes one value (a resource, a plugin configuration) as `T`, recording every bad
/// field with its path below the validator's current one, in the user's words. None when
/// anything was wrong.
pub fn parse_value<T: serde::de::DeserializeOwned>(
    v: &mut Validator,
    value: serde_json::Value,
) -> Option<T> {
    parse::parse(v, value)
}
