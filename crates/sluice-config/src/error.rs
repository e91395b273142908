//! The checking vocabulary, from the core (which every crate checks through).

pub use sluice_core::check::{ConfigError, ConfigErrors, Validator, io_reason};
