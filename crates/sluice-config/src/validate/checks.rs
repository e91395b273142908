//! Range checks every part uses. A leaf of `validate/`.

use crate::de::Dur;
use crate::error::Validator;

pub(super) fn positive(v: &mut Validator, field: &str, d: Dur) {
    if d.0.is_zero() {
        v.error_at(field, "must be > 0");
    }
}

pub(super) fn range(
    v: &mut Validator,
    field: &str,
    n: u64,
    lo: u64,
    hi: u64,
    lo_s: &str,
    hi_s: &str,
) {
    if n < lo || n > hi {
        v.error_at(field, format!("must be from {lo_s} to {hi_s}"));
    }
}
