//! Checking configuration: the [`Validator`] that collects every error with its path, the
//! errors themselves, deserialization that reports each bad field in the user's words, and
//! the signatures of the files a configuration reads. The configuration crate, the plugins
//! and the engine all check through it; it knows nothing of the configuration's model.

mod error;
mod files;
mod order;
mod parse;
mod path;

pub use error::{ConfigError, ConfigErrors, Validator, io_reason};
pub use files::{FileSig, FileStamp, file_signature};
pub use parse::{humanize, parse as parse_value, parse_trimmed, short_number};
pub use path::{PathSeg, push_key, render};
