//! Access log formats: NGINX-style variables (`$remote_addr "$request" $status`) compiled once,
//! at validation, into pieces the data plane writes without parsing anything per request.

/// A value the access log can write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Var {
    /// `$remote_addr`: the client's address.
    RemoteAddr,
    /// `$remote_port`.
    RemotePort,
    /// `$server_addr`: the address the request came in on.
    ServerAddr,
    /// `$server_port`.
    ServerPort,
    /// `$time_local`: `24/Nov/2026:06:37:09 +0000` (NGINX's; always UTC).
    TimeLocal,
    /// `$time_iso8601`: `2026-11-24T06:37:09.123Z`.
    TimeIso8601,
    /// `$msec`: seconds since the epoch, with milliseconds.
    Msec,
    /// `$request`: the request line, `GET /a?b=1 HTTP/1.1`.
    Request,
    /// `$request_method`.
    RequestMethod,
    /// `$request_uri`: the target as the client sent it, with its query.
    RequestUri,
    /// `$uri`: the path, without the query.
    Uri,
    /// `$args`: the query, without `?`.
    Args,
    /// `$server_protocol`: `HTTP/1.1`, `HTTP/2.0`.
    ServerProtocol,
    /// `$scheme`: `http` or `https`.
    Scheme,
    /// `$status`: the status sent to the client.
    Status,
    /// `$body_bytes_sent`: response body bytes sent to the client.
    BodyBytesSent,
    /// `$request_body_length`: request body bytes received.
    RequestBodyLength,
    /// `$request_time`: seconds from the request's first byte to its last response byte.
    RequestTime,
    /// `$upstream_addr`: the node that answered.
    UpstreamAddr,
    /// `$upstream_status`: the status the node answered.
    UpstreamStatus,
    /// `$upstream_response_time`: seconds until the node's response head.
    UpstreamResponseTime,
    /// `$host`: the `Host` field (or HTTP/2 `:authority`).
    Host,
    /// `$route_id`.
    RouteId,
    /// `$consumer_name`: the consumer an auth plugin identified.
    ConsumerName,
    /// `$trace_id`: the W3C trace id of the request, when it is traced.
    TraceId,
    /// `$ssl_client_s_dn`: the verified client certificate's subject (mutual TLS).
    SslClientSDn,
    /// `$http_<name>`: a request header field (`$http_user_agent`: `user-agent`).
    Http(Box<str>),
}

/// Every variable name but `http_<name>`, for errors and documentation.
pub const VARIABLES: &[&str] = &[
    "remote_addr",
    "remote_port",
    "server_addr",
    "server_port",
    "time_local",
    "time_iso8601",
    "msec",
    "request",
    "request_method",
    "request_uri",
    "uri",
    "args",
    "server_protocol",
    "scheme",
    "status",
    "body_bytes_sent",
    "request_body_length",
    "request_time",
    "upstream_addr",
    "upstream_status",
    "upstream_response_time",
    "host",
    "route_id",
    "consumer_name",
    "trace_id",
    "ssl_client_s_dn",
];

impl Var {
    /// The variable named `name` (without `$`).
    pub fn from_name(name: &str) -> Option<Var> {
        Some(match name {
            "remote_addr" => Var::RemoteAddr,
            "remote_port" => Var::RemotePort,
            "server_addr" => Var::ServerAddr,
            "server_port" => Var::ServerPort,
            "time_local" => Var::TimeLocal,
            "time_iso8601" => Var::TimeIso8601,
            "msec" => Var::Msec,
            "request" => Var::Request,
            "request_method" => Var::RequestMethod,
            "request_uri" => Var::RequestUri,
            "uri" => Var::Uri,
            "args" | "query_string" => Var::Args,
            "server_protocol" => Var::ServerProtocol,
            "scheme" => Var::Scheme,
            "status" => Var::Status,
            "body_bytes_sent" => Var::BodyBytesSent,
            "request_body_length" => Var::RequestBodyLength,
            "request_time" => Var::RequestTime,
            "upstream_addr" => Var::UpstreamAddr,
            "upstream_status" => Var::UpstreamStatus,
            "upstream_response_time" => Var::UpstreamResponseTime,
            "host" => Var::Host,
            "route_id" => Var::RouteId,
            "consumer_name" => Var::ConsumerName,
            "trace_id" => Var::TraceId,
            "ssl_client_s_dn" => Var::SslClientSDn,
            _ => {
                let field = name.strip_prefix("http_")?;
                if field.is_empty() {
                    return None;
                }
                Var::Http(field.replace('_', "-").into())
            }
        })
    }

    /// Whether the value is a number (JSON writes it unquoted).
    pub fn is_number(&self) -> bool {
        matches!(
            self,
            Var::RemotePort
                | Var::ServerPort
                | Var::Msec
                | Var::Status
                | Var::BodyBytesSent
                | Var::RequestBodyLength
                | Var::RequestTime
                | Var::UpstreamStatus
                | Var::UpstreamResponseTime
        )
    }
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
                    let var = Var::from_name(n).ok_or_else(|| unknown(n))?;
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
        "unknown variable ${name}: expected one of ${}, or $http_<header name>",
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
        let var = Var::from_name(name).ok_or_else(|| unknown(name))?;
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
                Piece::Var(Var::Http("x-request-id".into())),
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
