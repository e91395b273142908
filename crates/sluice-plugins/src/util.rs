//! Small checks and helpers shared by plugins.

use sluice_config::Validator;

/// Header fields the engine manages: plugins may not set or remove them.
const MANAGED: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
    "x-real-ip",
    "expect",
];

/// Checks a header name a plugin will set, add or remove.
pub(crate) fn check_header_name(name: &str, v: &mut Validator) -> bool {
    let token = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    if !token {
        v.error(format!("invalid header name \"{name}\""));
        return false;
    }
    if MANAGED.iter().any(|m| m.eq_ignore_ascii_case(name)) {
        v.error(format!(
            "header \"{name}\" is managed by the gateway and cannot be changed here"
        ));
        return false;
    }
    true
}

/// Checks a header value a plugin will send.
pub(crate) fn check_header_value(value: &str, v: &mut Validator) -> bool {
    if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
        v.error("header values must not contain CR, LF or NUL");
        return false;
    }
    true
}

/// Checks a status code a plugin answers with.
pub(crate) fn check_status(code: u16, min: u16, v: &mut Validator) -> bool {
    if !(min..=599).contains(&code) {
        v.error(format!("must be a status code from {min} to 599"));
        return false;
    }
    true
}

/// A fast non-cryptographic hash (FxHash) of a rate-limit key: keys are not attacker-chosen
/// in a way that matters here (collisions only merge two clients' counters).
pub(crate) type KeyHasher = rustc_hash::FxHasher;

/// Removes every occurrence of query argument `name` from the request's target.
pub(crate) fn remove_query_arg(req: &mut sluice_core::http::RequestHead, name: &str) {
    let Some(q) = req.query() else { return };
    let kept: Vec<&[u8]> = q
        .split(|&b| b == b'&')
        .filter(|pair| {
            let k = &pair[..memchr::memchr(b'=', pair).unwrap_or(pair.len())];
            sluice_core::http::percent_decode(k) != name.as_bytes()
        })
        .collect();
    let mut target = req.path().to_vec();
    if !kept.is_empty() {
        target.push(b'?');
        target.extend_from_slice(&kept.join(&b'&'));
    }
    req.set_target(target);
}

/// An auth plugin's credential index: each consumer's credential parsed and turned into an
/// entry by `entry` (None: skipped; its own errors were reported by `check_credential`); a key
/// that a consumer before it already uses is an error at `consumers[i].plugins.<plugin>.<field>`.
pub(crate) fn credential_index<C, K, V>(
    creds: &[sluice_core::plugin::Credential<'_>],
    plugin: &str,
    field: &str,
    v: &mut Validator,
    mut entry: impl FnMut(C, u32) -> Option<(K, V)>,
) -> rustc_hash::FxHashMap<K, V>
where
    C: serde::de::DeserializeOwned,
    K: std::hash::Hash + Eq + Clone,
{
    let mut out: rustc_hash::FxHashMap<K, V> = rustc_hash::FxHashMap::default();
    let mut first: rustc_hash::FxHashMap<K, usize> = rustc_hash::FxHashMap::default();
    for c in creds {
        let Some(cred) = sluice_core::plugin::parse_config::<C>(c.config, &mut Validator::new())
        else {
            continue;
        };
        let Some((key, value)) = entry(cred, c.consumer) else {
            continue;
        };
        if let Some(other) = first.get(&key) {
            v.index(c.position, |v| {
                v.error_at_path(
                    &["plugins", plugin, field],
                    format!("{field} already used by consumers[{other}]"),
                )
            });
            continue;
        }
        // The key is stored twice (position, entry): credential indexes are built once per
        // configuration, not per request.
        first.insert(key.clone(), c.position);
        out.insert(key, value);
    }
    out
}
