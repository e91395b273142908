//! Deserialization that reports every bad field in the user's words, from the core.

pub use sluice_core::check::{humanize, short_number};
pub(crate) use sluice_core::check::{parse_trimmed, parse_value as parse};
