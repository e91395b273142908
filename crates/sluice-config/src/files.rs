//! The signatures of the files a configuration reads, from the core.

pub use sluice_core::check::{FileSig, FileStamp, file_signature};
