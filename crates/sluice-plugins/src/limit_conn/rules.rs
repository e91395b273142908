//! APISIX 3's `rules` for limit-conn (their fields read by [`crate::resolve`]).

pub(super) use crate::resolve::{Amount, Count, Template};

/// A compiled rule.
pub(super) struct Rule {
    pub(super) conn: Count,
    pub(super) burst: Count,
    pub(super) key: Template,
}

/// Most requests `conn` and `burst` may each allow: their sum fits every counter (the stream
/// proxy counts in 32 bits).
pub(super) const MAX_CONN: u64 = 1_000_000_000;
