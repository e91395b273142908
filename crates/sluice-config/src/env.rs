//! Environment references in a configuration, as APISIX writes them, resolved when the
//! configuration is loaded (the document keeps the references: the file and the admin API show
//! what was written, never a resolved secret):
//!
//! - `${{NAME}}` and `${{NAME:=default}}` anywhere in a string (APISIX's configuration files):
//!   replaced by the variable's value; a string that was only the reference and now reads as a
//!   number or `true`/`false` becomes one (`port: ${{PORT}}`), as APISIX does.
//! - `$env://NAME` as a whole string (APISIX's secret references, in plugin settings such as a
//!   key-auth key), and `$env://NAME/field` for a variable holding a JSON object: replaced by
//!   the value (or the field), always a string.
//! - `$secret://<manager>/<id>/<name>/<key>`: read from the secret manager `<manager>/<id>` of
//!   the document's `secrets` (see [`crate::secrets`]).
//!
//! A missing variable (with no default) is an error at the value's path, as is a malformed
//! reference. Strings that merely contain `$` are left alone.

use serde_json::Value;

use crate::error::Validator;
use crate::model::SecretConfig;

/// Resolves every reference in `doc` with the process's environment. A `whole` document's
/// `secrets` (none when it has none) are resolved first (their own settings may use
/// `$env://`), then serve the `$secret://` references of the rest; a resource loaded alone
/// uses those of the last whole configuration that loaded.
pub(crate) fn resolve(doc: &mut Value, v: &mut Validator, whole: bool) {
    let lookup = |name: &str| std::env::var(name).ok();
    let list = if whole {
        doc.as_object_mut().and_then(|m| m.remove("secrets"))
    } else {
        None
    };
    let Some(mut list) = list else {
        return resolve_with(doc, v, &lookup, whole.then_some(&[]));
    };
    v.field("secrets", |v| {
        resolve_with(&mut list, v, &lookup, Some(&[]))
    });
    let managers = crate::secrets::managers_of(&list);
    resolve_with(doc, v, &lookup, Some(&managers));
    if let Some(m) = doc.as_object_mut() {
        m.insert("secrets".into(), list);
    }
}

/// Resolves every reference in `doc`, reading variables with `lookup` and secrets from
/// `managers` (None: the last whole document's).
pub(crate) fn resolve_with(
    doc: &mut Value,
    v: &mut Validator,
    lookup: &dyn Fn(&str) -> Option<String>,
    managers: Option<&[SecretConfig]>,
) {
    match doc {
        Value::Object(map) => {
            for (key, value) in map.iter_mut() {
                v.field(key, |v| resolve_with(value, v, lookup, managers));
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                v.index(i, |v| resolve_with(item, v, lookup, managers));
            }
        }
        Value::String(s) if s.contains('$') => match resolve_str(s, lookup, managers) {
            Ok(Some(new)) => *doc = new,
            Ok(None) => {}
            Err(e) => v.error(e),
        },
        _ => {}
    }
}

/// The value `s` stands for, or None when it holds no reference.
fn resolve_str(
    s: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
    managers: Option<&[SecretConfig]>,
) -> Result<Option<Value>, String> {
    if let Some(rest) = s.strip_prefix("$env://") {
        let (name, field) = match rest.split_once('/') {
            Some((n, f)) => (n, Some(f)),
            None => (rest, None),
        };
        check_name(name, s)?;
        let value = lookup(name).ok_or_else(|| {
            format!("environment variable {name} is not set (referenced as \"{s}\")")
        })?;
        let Some(field) = field else {
            return Ok(Some(Value::String(value)));
        };
        let json: Value = serde_json::from_str(&value).map_err(|_| {
            format!("environment variable {name} must hold a JSON object for \"{s}\"")
        })?;
        return match json.get(field) {
            Some(Value::String(f)) => Ok(Some(Value::String(f.clone()))),
            Some(other) => Ok(Some(Value::String(other.to_string()))),
            None => Err(format!(
                "environment variable {name} has no field \"{field}\" (referenced as \"{s}\")"
            )),
        };
    }
    if s.starts_with("$secret://") {
        return crate::secrets::resolve(s, managers);
    }
    if !s.contains("${{") {
        return Ok(None);
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(start) = rest.find("${{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 3..];
        let end = after
            .find("}}")
            .ok_or_else(|| format!("\"{s}\": a ${{{{ without its closing }}}}"))?;
        let inner = after[..end].trim();
        let (name, default) = match inner.split_once(":=") {
            Some((n, d)) => (n.trim(), Some(d.trim())),
            None => (inner, None),
        };
        check_name(name, s)?;
        match (lookup(name), default) {
            (Some(value), _) => out.push_str(&value),
            (None, Some(d)) => out.push_str(d),
            (None, None) => {
                return Err(format!(
                    "environment variable {name} is not set (referenced as \"{s}\"; give a default with ${{{{{name}:=value}}}})"
                ));
            }
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    // A string that was only the reference takes the type its value reads as.
    let whole =
        s.trim().starts_with("${{") && s.trim().ends_with("}}") && s.matches("${{").count() == 1;
    if whole {
        if let Ok(n) = out.parse::<i64>() {
            return Ok(Some(Value::from(n)));
        }
        if let Some(n) = out
            .parse::<f64>()
            .ok()
            .filter(|f| f.is_finite())
            .and_then(serde_json::Number::from_f64)
        {
            return Ok(Some(Value::Number(n)));
        }
        match out.as_str() {
            "true" => return Ok(Some(Value::Bool(true))),
            "false" => return Ok(Some(Value::Bool(false))),
            _ => {}
        }
    }
    Ok(Some(Value::String(out)))
}

fn check_name(name: &str, s: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !name.as_bytes()[0].is_ascii_digit();
    if ok {
        Ok(())
    } else {
        Err(format!(
            "\"{s}\": \"{name}\" is not an environment variable name (letters, digits and _)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(mut doc: Value) -> Result<Value, String> {
        let vars = |n: &str| match n {
            "KEY" => Some("s3cret".to_owned()),
            "PORT" => Some("9080".to_owned()),
            "ON" => Some("true".to_owned()),
            "HOST" => Some("api.example.com".to_owned()),
            "JSON" => Some(r#"{"user": "ann", "n": 3}"#.to_owned()),
            _ => None,
        };
        let mut v = Validator::new();
        resolve_with(&mut doc, &mut v, &vars, Some(&[]));
        v.finish().map(|()| doc).map_err(|e| e.to_string())
    }

    #[test]
    fn references_are_replaced_by_their_values() {
        let doc = json!({
            "listen": "127.0.0.1:${{PORT}}",
            "port": "${{PORT}}",
            "flag": "${{ ON }}",
            "fallback": "${{MISSING:=7}}",
            "text_default": "${{MISSING:=a b}}",
            "routes": [{"host": "${{HOST}}", "plugins": {"key-auth": {"key": "$env://KEY"}}}],
            "field": "$env://JSON/user",
            "number_field": "$env://JSON/n",
            "plain": "costs $5",
            "two": "${{HOST}}:${{PORT}}",
        });
        assert_eq!(
            run(doc).unwrap(),
            json!({
                "listen": "127.0.0.1:9080",
                "port": 9080,
                "flag": true,
                "fallback": 7,
                "text_default": "a b",
                "routes": [{"host": "api.example.com", "plugins": {"key-auth": {"key": "s3cret"}}}],
                "field": "ann",
                "number_field": "3",
                "plain": "costs $5",
                "two": "api.example.com:9080",
            })
        );
    }

    #[test]
    fn a_missing_variable_or_a_bad_reference_is_an_error_at_its_path() {
        let e = run(json!({"routes": [{}, {"plugins": {"key-auth": {"key": "$env://NOPE"}}}]}))
            .unwrap_err();
        assert!(
            e.contains("routes[1].plugins.key-auth.key: environment variable NOPE is not set"),
            "{e}"
        );
        let e = run(json!({"listen": "${{NOPE}}"})).unwrap_err();
        assert!(
            e.contains("listen: environment variable NOPE is not set"),
            "{e}"
        );
        let e = run(json!({"a": "$secret://vault/1/key"})).unwrap_err();
        assert!(
            e.contains("a: \"$secret://vault/1/key\": a secret reference is $secret://<manager>/<id>/<name>/<key>"),
            "{e}"
        );
        let e = run(json!({"a": "$secret://vault/1/jack/key"})).unwrap_err();
        assert!(
            e.contains("a: \"$secret://vault/1/jack/key\": no secret manager \"vault/1\""),
            "{e}"
        );
        let e = run(json!({"a": "$secret://hsm/1/jack/key"})).unwrap_err();
        assert!(e.contains("unknown secret manager \"hsm\""), "{e}");
        let e = run(json!({"a": "${{KEY"})).unwrap_err();
        assert!(e.contains("without its closing"), "{e}");
        let e = run(json!({"a": "$env://bad-name"})).unwrap_err();
        assert!(e.contains("is not an environment variable name"), "{e}");
        let e = run(json!({"a": "$env://JSON/none"})).unwrap_err();
        assert!(e.contains("has no field \"none\""), "{e}");
        let e = run(json!({"a": "$env://KEY/field"})).unwrap_err();
        assert!(e.contains("must hold a JSON object"), "{e}");
        // Every error, not the first only.
        let e = run(json!({"a": "$env://NOPE", "b": "${{NOPE2}}"})).unwrap_err();
        assert!(e.contains("NOPE ") && e.contains("NOPE2"), "{e}");
    }
}
