//! The variable vocabulary and APISIX's `vars` expressions: a name or an expression (JSON)
//! never panics when parsed.

use sluice_config::Validator;
use sluice_core::expr::Expr;
use sluice_core::vars::Var;

/// One input.
pub fn check(data: &[u8]) {
    if let Ok(name) = std::str::from_utf8(data) {
        let _ = Var::parse(name);
    }
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) {
        let mut v = Validator::new();
        let _ = Expr::parse(&value, &mut v);
    }
}
