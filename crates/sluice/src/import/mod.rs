//! `sluice import`: other gateways' configurations as Sluice's.

pub mod gateway_api;
pub mod kong;

use serde_json::{Value, json};

/// proxy-rewrite's (or redirect's) `regex_uri` that replaces the path prefix `prefix`
/// (without its trailing `/`) with `rep`: `/api` to `/v1` sends `/api/users` as
/// `/v1/users`, and `/api` to `/` sends it as `/users`.
pub(crate) fn prefix_rewrite(prefix: &str, rep: &str) -> Value {
    let (prefix, rep) = (regex::escape(prefix), rep.trim_end_matches('/'));
    if rep.is_empty() {
        json!([format!("^{prefix}/?(.*)$"), "/$1"])
    } else {
        json!([format!("^{prefix}(/.*)?$"), format!("{rep}$1")])
    }
}
