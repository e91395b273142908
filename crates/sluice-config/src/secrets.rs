//! APISIX's secret managers (`secrets`) and the `$secret://<manager>/<id>/<name>/<key>`
//! references that read from them.
//!
//! A reference is replaced by the secret's value when the configuration loads, as `$env://`
//! references are: plugins compile with the value, and a request never waits for a secret
//! manager. The fetching itself (HTTP to Vault, AWS or GCP) is the binary's: it installs it with
//! [`set_fetcher`]. Without one (`sluice validate --config-only`), references are checked (the
//! manager exists, the reference is well formed) and left as they are.
//!
//! A reference that cannot be read is an error at its path, and the configuration is not
//! applied (APISIX logs it and uses the reference's text as the value).

use std::sync::OnceLock;

use parking_lot::RwLock;
use serde_json::Value;

use crate::error::Validator;
use crate::model::SecretConfig;

/// The managers Sluice can read from.
pub const MANAGERS: [&str; 3] = ["vault", "aws", "gcp"];

/// Reads `path` (`<name>/<key>`, as the reference has it after the manager's id) from the
/// manager `id` (`vault/1`), configured as `manager`. Installed once by the binary.
pub type Fetcher = dyn Fn(&str, &SecretConfig, &str) -> Result<String, String> + Send + Sync;

static FETCHER: OnceLock<Box<Fetcher>> = OnceLock::new();

/// The managers of the last whole configuration that loaded, for resources loaded alone (one
/// route through the admin API), whose document has no `secrets`.
static KNOWN: RwLock<Vec<SecretConfig>> = RwLock::new(Vec::new());

/// Installs the fetcher (once; later calls are ignored).
pub fn set_fetcher(f: Box<Fetcher>) {
    let _ = FETCHER.set(f);
}

/// Remembers the managers of a whole configuration just loaded.
pub(crate) fn remember(managers: &[SecretConfig]) {
    *KNOWN.write() = managers.to_vec();
}

/// A raw `secrets` list, parsed as far as it parses (its errors are reported where the list is
/// checked).
pub(crate) fn managers_of(list: &Value) -> Vec<SecretConfig> {
    let items = match list {
        Value::Array(items) => &items[..],
        one => std::slice::from_ref(one),
    };
    items
        .iter()
        .filter_map(|item| {
            let mut item = item.clone();
            crate::export::strip_export_metadata(&mut item);
            serde_json::from_value(item).ok()
        })
        .collect()
}

/// The value `s` (a `$secret://` reference) stands for; None when no fetcher is installed.
pub(crate) fn resolve(s: &str, managers: Option<&[SecretConfig]>) -> Result<Option<Value>, String> {
    let rest = s.strip_prefix("$secret://").unwrap_or(s);
    let mut parts = rest.splitn(3, '/');
    let (manager, id, path) = (parts.next(), parts.next(), parts.next());
    let (Some(manager), Some(id), Some(path)) = (manager, id, path) else {
        return Err(format!(
            "\"{s}\": a secret reference is $secret://<manager>/<id>/<name>/<key>"
        ));
    };
    if !MANAGERS.contains(&manager) {
        return Err(format!(
            "\"{s}\": unknown secret manager \"{manager}\", expected vault, aws or gcp"
        ));
    }
    if id.is_empty() || !path.contains('/') || path.starts_with('/') || path.ends_with('/') {
        return Err(format!(
            "\"{s}\": a secret reference is $secret://<manager>/<id>/<name>/<key>"
        ));
    }
    let full = format!("{manager}/{id}");
    let known;
    let managers = match managers {
        Some(m) => m,
        None => {
            known = KNOWN.read().clone();
            &known[..]
        }
    };
    let Some(config) = managers.iter().find(|m| m.id.as_deref() == Some(&full)) else {
        return Err(format!(
            "\"{s}\": no secret manager \"{full}\" (define it under secrets, with id: {full})"
        ));
    };
    let Some(fetch) = FETCHER.get() else {
        return Ok(None);
    };
    fetch(&full, config, path)
        .map(|v| Some(Value::String(v)))
        .map_err(|e| format!("cannot read \"{s}\" from {full}: {e}"))
}

/// Checks a secret manager's settings (`v` points at it), as APISIX's schemas do.
pub(crate) fn check(s: &SecretConfig, v: &mut Validator) {
    let Some(id) = s.id.as_deref() else {
        return; // "is required", said where ids are checked
    };
    let Some((manager, name)) = id.split_once('/') else {
        v.error_at(
            "id",
            format!("\"{id}\": must be <manager>/<id>, such as vault/1, aws/1 or gcp/1"),
        );
        return;
    };
    let valid_name = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if !valid_name {
        v.error_at(
            "id",
            format!("\"{id}\": the part after {manager}/ must be 1 to 64 letters, digits, \".\", \"-\" and \"_\""),
        );
    }
    let given = set_fields(s);
    let (required, allowed): (&[&str], &[&str]) = match manager {
        "vault" => (&["uri", "prefix", "token"], &["namespace"]),
        "aws" => (
            &["access_key_id", "secret_access_key"],
            &["session_token", "region", "endpoint_url"],
        ),
        "gcp" => (&[], &["auth_config", "auth_file", "ssl_verify"]),
        other => {
            v.error_at(
                "id",
                format!("unknown secret manager \"{other}\", expected vault, aws or gcp"),
            );
            return;
        }
    };
    for field in required {
        if !given.contains(field) {
            v.error_at(
                field,
                format!("is required by the {manager} secret manager"),
            );
        }
    }
    for field in &given {
        if !required.contains(field) && !allowed.contains(field) {
            v.error_at(
                field,
                format!(
                    "is not a setting of the {manager} secret manager (expected {})",
                    required
                        .iter()
                        .chain(allowed)
                        .copied()
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
        }
    }
    let url = |v: &mut Validator, field: &str, value: &Option<String>| {
        if let Some(u) = value
            && !(u.starts_with("http://") || u.starts_with("https://"))
        {
            v.error_at(
                field,
                format!("\"{u}\": must be an http:// or https:// URL"),
            );
        }
    };
    url(v, "uri", &s.uri);
    url(v, "endpoint_url", &s.endpoint_url);
    if manager == "gcp" {
        match (&s.auth_config, &s.auth_file) {
            (None, None) => v.error("the gcp secret manager needs auth_config or auth_file"),
            (Some(_), Some(_)) => v.error("give auth_config or auth_file, not both"),
            (Some(a), None) => {
                v.field("auth_config", |v| {
                    url(v, "token_uri", &a.token_uri);
                    url(v, "entries_uri", &a.entries_uri);
                });
            }
            (None, Some(_)) => {}
        }
    }
}

/// The manager-specific settings that are set, by their names.
fn set_fields(s: &SecretConfig) -> Vec<&'static str> {
    [
        ("uri", s.uri.is_some()),
        ("prefix", s.prefix.is_some()),
        ("token", s.token.is_some()),
        ("namespace", s.namespace.is_some()),
        ("access_key_id", s.access_key_id.is_some()),
        ("secret_access_key", s.secret_access_key.is_some()),
        ("session_token", s.session_token.is_some()),
        ("region", s.region.is_some()),
        ("endpoint_url", s.endpoint_url.is_some()),
        ("auth_config", s.auth_config.is_some()),
        ("auth_file", s.auth_file.is_some()),
        ("ssl_verify", s.ssl_verify.is_some()),
    ]
    .into_iter()
    .filter_map(|(k, set)| set.then_some(k))
    .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    /// A whole document reads its own managers only (none when it has none), not those of a
    /// configuration loaded before.
    #[test]
    fn a_whole_document_reads_only_its_own_managers() {
        let upstreams =
            json!([{"id": "u", "desc": "$secret://vault/1/a/b", "nodes": {"127.0.0.1:1": 1}}]);
        let with = json!({
            "secrets": [{"id": "vault/1", "uri": "http://127.0.0.1:1", "prefix": "kv", "token": "t"}],
            "upstreams": upstreams,
        });
        crate::load_value(with).unwrap();
        let e = crate::load_value(json!({ "upstreams": upstreams }))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no secret manager \"vault/1\""), "{e}");
    }
}
