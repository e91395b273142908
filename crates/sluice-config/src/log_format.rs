//! Access log formats: NGINX-style variables (`$remote_addr "$request" $status`) compiled once,
//! at validation, into pieces the data plane writes without parsing anything per request.

pub use sluice_core::vars::Var;

/// The variables the access log writes by name (the core's vocabulary; `http_*`, `arg_*` and
/// `cookie_*` besides).
pub const VARIABLES: &[&str] = sluice_core::vars::NAMES;

/// The variable `name`, if the log can write it: any of the vocabulary but what is read from
/// the request body (which the log does not keep).
fn var_of(name: &str) -> Option<Var> {
    Var::parse(name).ok().filter(|v| !v.needs_body())
}

/// One piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Text written as it is.
    Text(Box<str>),
    /// A variable's value (`-` when it has none, as NGINX writes).
    Var(Var),
}

/// A compiled access log format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccessFormat {
    /// Sluice's own line: `time client "request" status bytes seconds route node [subject]`.
    Default,
    /// A template.
    Template(Vec<Piece>),
    /// One JSON object per line: (key, variable).
    Json(Vec<(Box<str>, Var)>),
}

/// NGINX's `combined` format (without `$remote_user`, which Sluice has not: `-`).
pub const COMBINED: &str = r#"$remote_addr - - [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent""#;

/// The fields of `format: json` when `fields` is not given.
pub const JSON_FIELDS: &[&str] = &[
    "time_iso8601",
    "remote_addr",
    "request",
    "status",
    "body_bytes_sent",
    "request_time",
    "host",
    "http_user_agent",
    "route_id",
    "upstream_addr",
    "upstream_status",
    "upstream_response_time",
    "consumer_name",
    "trace_id",
];

impl AccessFormat {
    /// Compiles `format` (and `fields`, for `json`). The error names what is wrong.
    pub fn parse(format: &str, fields: &[String]) -> Result<AccessFormat, String> {
        if !fields.is_empty() && format != "json" {
            return Err("`fields` is only for `format: json`".into());
        }
        match format {
            "default" => Ok(AccessFormat::Default),
            "combined" => template(COMBINED).map(AccessFormat::Template),
            "json" => {
                let names: Vec<&str> = if fields.is_empty() {
                    JSON_FIELDS.to_vec()
                } else {
                    fields.iter().map(|f| f.trim_start_matches('$')).collect()
                };
                let mut out = Vec::with_capacity(names.len());
                for n in names {
                    let var = var_of(n).ok_or_else(|| unknown(n))?;
                    out.push((n.into(), var));
                }
                Ok(AccessFormat::Json(out))
            }
            t => template(t).map(AccessFormat::Template),
        }
    }
}

fn unknown(name: &str) -> String {
    format!(
        "unknown variable ${name}: expected one of ${}, or $http_<header name>, $arg_<name>, $cookie_<name>, $jwt_claim_<name>",
        VARIABLES.join(", $")
    )
}

/// Splits a template into text and variables: `$name` (letters, digits, `_`) or `${name}`.
fn template(t: &str) -> Result<Vec<Piece>, String> {
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut rest = t;
    while let Some(i) = rest.find('$') {
        text.push_str(&rest[..i]);
        rest = &rest[i + 1..];
        let (name, after) = if let Some(r) = rest.strip_prefix('{') {
            let end = r.find('}').ok_or("`${` without a closing `}`")?;
            (&r[..end], &r[end + 1..])
        } else {
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            (&rest[..end], &rest[end..])
        };
        if name.is_empty() {
            return Err("`$` without a variable name (write `${name}`)".into());
        }
        let var = var_of(name).ok_or_else(|| unknown(name))?;
        if !text.is_empty() {
            pieces.push(Piece::Text(std::mem::take(&mut text).into()));
        }
        pieces.push(Piece::Var(var));
        rest = after;
    }
    text.push_str(rest);
    if !text.is_empty() {
        pieces.push(Piece::Text(text.into()));
    }
    if !pieces.iter().any(|p| matches!(p, Piece::Var(_))) {
        return Err("a format needs at least one $variable".into());
    }
    Ok(pieces)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_split_into_text_and_variables() {
        let f =
            AccessFormat::parse(r#"$remote_addr "${request}"x $http_x_request_id"#, &[]).unwrap();
        assert_eq!(
            f,
            AccessFormat::Template(vec![
                Piece::Var(Var::RemoteAddr),
                Piece::Text(" \"".into()),
                Piece::Var(Var::Request),
                Piece::Text("\"x ".into()),
                Piece::Var(Var::Header("x-request-id".into())),
            ])
        );
    }

    #[test]
    fn bad_formats_say_why() {
        assert!(
            AccessFormat::parse("$nope", &[])
                .unwrap_err()
                .contains("unknown variable $nope")
        );
        assert!(AccessFormat::parse("${status", &[]).is_err());
        assert!(AccessFormat::parse("no variables", &[]).is_err());
        assert!(AccessFormat::parse("$ x", &[]).is_err());
        assert!(AccessFormat::parse("$http_", &[]).is_err());
        assert!(AccessFormat::parse("default", &["status".into()]).is_err());
        assert!(
            AccessFormat::parse("json", &["status".into(), "bogus".into()])
                .unwrap_err()
                .contains("$bogus")
        );
        assert!(AccessFormat::parse("combined", &[]).is_ok());
    }
}
