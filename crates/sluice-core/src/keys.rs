//! The keys the limit plugins count by (`key_type`: `var`, `var_combination`, `constant`),
//! hashed from the request without building the key's text.

use crate::env::Env;
use crate::http::RequestHead;
use crate::vars::Var;

/// A rate-limit key: one variable, several joined (`var_combination`), or a constant.
#[derive(Debug, Clone)]
pub enum Key {
    /// One variable; `remote_addr` is hashed from the address without formatting it.
    Var(Var),
    /// `"$remote_addr $http_x_user"`: the variables' values joined by the literal text.
    Combination(Vec<KeyPart>),
    /// The same key for every request.
    Constant(String),
}

/// A piece of a combined key.
#[derive(Debug, Clone)]
pub enum KeyPart {
    /// Literal text.
    Text(String),
    /// A variable.
    Var(Var),
}

impl Key {
    /// True when the key reads the request body.
    pub fn needs_body(&self) -> bool {
        match self {
            Key::Var(v) => v.needs_body(),
            Key::Combination(parts) => parts
                .iter()
                .any(|p| matches!(p, KeyPart::Var(v) if v.needs_body())),
            Key::Constant(_) => false,
        }
    }

    /// Parses APISIX's `key_type` (`var`, `var_combination`, `constant`) and `key`.
    pub fn parse(key_type: &str, key: &str) -> Result<Key, String> {
        match key_type {
            // `$consumer_name` as well as `consumer_name` (APISIX's own docs write the first,
            // which APISIX then finds no value for and keys by the client address instead).
            "var" => Var::parse(key.strip_prefix('$').unwrap_or(key)).map(Key::Var),
            "constant" => Ok(Key::Constant(key.to_owned())),
            "var_combination" => {
                let mut parts = Vec::new();
                let mut rest = key;
                while let Some(i) = rest.find('$') {
                    if i > 0 {
                        parts.push(KeyPart::Text(rest[..i].to_owned()));
                    }
                    let after = &rest[i + 1..];
                    let end = after
                        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .unwrap_or(after.len());
                    parts.push(KeyPart::Var(Var::parse(&after[..end])?));
                    rest = &after[end..];
                }
                if !rest.is_empty() {
                    parts.push(KeyPart::Text(rest.to_owned()));
                }
                if !parts.iter().any(|p| matches!(p, KeyPart::Var(_))) {
                    return Err(format!(
                        "\"{key}\" names no variable (write them as $remote_addr)"
                    ));
                }
                Ok(Key::Combination(parts))
            }
            other => Err(format!(
                "unknown key_type \"{other}\", expected var, var_combination or constant"
            )),
        }
    }

    /// Feeds the key for this request to `h`. Returns false when a variable is missing (the
    /// caller then falls back to the client address, as APISIX does).
    pub fn hash_into<H: std::hash::Hasher, E: Env + ?Sized>(
        &self,
        req: &RequestHead,
        cx: &E,
        h: &mut H,
    ) -> bool {
        use std::hash::Hash;
        match self {
            Key::Var(Var::RemoteAddr) => {
                cx.client().ip().hash(h);
                true
            }
            Key::Var(var) => match var.value(req, cx) {
                Some(v) => {
                    v.hash(h);
                    true
                }
                None => false,
            },
            Key::Constant(c) => {
                c.hash(h);
                true
            }
            Key::Combination(parts) => {
                let mut any = false;
                for p in parts {
                    match p {
                        KeyPart::Text(t) => t.hash(h),
                        KeyPart::Var(var) => {
                            if let Some(v) = var.value(req, cx) {
                                any = true;
                                v.hash(h);
                            } else {
                                0u8.hash(h);
                            }
                        }
                    }
                }
                any
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_var_key_may_be_written_with_its_dollar() {
        assert_eq!(
            format!("{:?}", Key::parse("var", "$consumer_name").unwrap()),
            format!("{:?}", Key::parse("var", "consumer_name").unwrap())
        );
        assert!(Key::parse("var", "$nope").is_err());
    }
}
