//! Sluice configuration: the serde model of the YAML file (node settings, routes, upstreams),
//! loading, and validation that reports every error with its path
//! (`routes[3].upstream.nodes: must not be empty`).
//!
//! Owns: the shape and the rules of a configuration. Does not own: turning it into runtime
//! objects (that is `sluice-proxy`'s compile step), nor reading it from etcd or the admin API.
//! Pure: no I/O but [`load_file`], no async runtime.

#![warn(missing_docs, unreachable_pub)]

mod de;
mod error;
mod load;
mod model;
mod validate;

pub use de::{Dur, Id, OneOrMany, Size, Workers, parse_duration, parse_size};
pub use error::{ConfigError, ConfigErrors, Validator};
pub use load::{TOP_LEVEL_KEYS, load_file, load_str, load_value};
pub use model::*;
