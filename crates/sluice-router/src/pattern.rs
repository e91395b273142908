//! Route patterns as written in a configuration, parsed once at load time.
//!
//! Paths follow APISIX: `/hello` (exact), `/api/*` and `/*` (prefix: any continuation, so
//! `/api/*` matches `/api/` and `/api/v1/x` but not `/api`; `/api/*rest`, a named wildcard,
//! is the same), `/users/:id` (a parameter matches one non-empty segment). Hosts: `example.com` (exact) and `*.example.com` (any subdomain, at
//! any depth, but not `example.com` itself).

use std::borrow::Cow;
use std::fmt;

/// Longest path pattern accepted.
pub const MAX_PATTERN_LEN: usize = 4096;

/// A parsed path pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathPattern {
    pub(crate) tokens: Vec<Token>,
    pub(crate) prefix: bool,
    text: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Token {
    Static(Vec<u8>),
    Param,
}

impl PathPattern {
    /// Parses a `uri` value; the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<PathPattern, String> {
        if !text.starts_with('/') {
            return Err(format!("must start with \"/\", got \"{text}\""));
        }
        if text.len() > MAX_PATTERN_LEN {
            return Err(format!("must be at most {MAX_PATTERN_LEN} bytes"));
        }
        if let Some(c) = text
            .chars()
            .find(|c| c.is_ascii_control() || *c == ' ' || *c == '?' || *c == '#')
        {
            return Err(format!("must not contain {c:?} (\"{text}\")"));
        }
        // `/files/*path`: radixtree's named wildcard, a prefix like `/files/*` (the name is
        // for APISIX's captures; Sluice has none).
        let named_wildcard = text.rsplit_once("/*").filter(|(_, name)| {
            !name.is_empty() && name.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_')
        });
        let (body, prefix) = match (named_wildcard, text.strip_suffix('*')) {
            (Some((head, _)), _) => (&text[..head.len() + 1], true),
            (None, Some(b)) => (b, true),
            (None, None) => (text, false),
        };
        if body.contains('*') {
            return Err(format!("\"*\" is only allowed at the end (\"{text}\")"));
        }
        let bytes = body.as_bytes();
        let mut tokens = Vec::new();
        let mut stat = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            if b == b':' && i > 0 && bytes[i - 1] == b'/' {
                let end = bytes[i + 1..]
                    .iter()
                    .position(|&c| c == b'/')
                    .map_or(bytes.len(), |p| i + 1 + p);
                let name = &body[i + 1..end];
                if name.is_empty() || !name.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_')
                {
                    return Err(format!(
                        "parameter name must be letters, digits or \"_\" (\"{text}\")"
                    ));
                }
                if prefix && end == bytes.len() {
                    return Err(format!(
                        "a parameter cannot be followed by \"*\" (\"{text}\")"
                    ));
                }
                if !stat.is_empty() {
                    tokens.push(Token::Static(std::mem::take(&mut stat)));
                }
                tokens.push(Token::Param);
                i = end;
            } else {
                stat.push(b);
                i += 1;
            }
        }
        if !stat.is_empty() {
            tokens.push(Token::Static(stat));
        }
        Ok(PathPattern {
            tokens,
            prefix,
            text: text.to_owned(),
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// True for `.../*` patterns.
    pub fn is_prefix(&self) -> bool {
        self.prefix
    }
}

impl fmt::Display for PathPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A parsed host pattern.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HostPattern {
    /// `api.example.com`, lowercased.
    Exact(Box<[u8]>),
    /// `*.example.com`, stored as the suffix `.example.com`, lowercased.
    Wildcard(Box<[u8]>),
}

impl HostPattern {
    /// Parses a `host`/`hosts` value.
    pub fn parse(text: &str) -> Result<HostPattern, String> {
        let lower = text.to_ascii_lowercase();
        let (wild, name) = match lower.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, lower.as_str()),
        };
        let name = name.strip_suffix('.').unwrap_or(name);
        let valid_dns = !name.is_empty()
            && name.len() <= 253
            && name.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label
                        .bytes()
                        .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
            });
        let valid_v6 = !wild
            && name.starts_with('[')
            && name.ends_with(']')
            && name[1..name.len() - 1]
                .parse::<std::net::Ipv6Addr>()
                .is_ok();
        if !(valid_dns || valid_v6) {
            return Err(format!(
                "invalid host \"{text}\": expected a name like api.example.com or *.example.com, without a port"
            ));
        }
        Ok(if wild {
            let mut s = Vec::with_capacity(name.len() + 1);
            s.push(b'.');
            s.extend_from_slice(name.as_bytes());
            HostPattern::Wildcard(s.into())
        } else {
            HostPattern::Exact(name.as_bytes().into())
        })
    }
}

/// The host part of a `Host` header value: port and a trailing dot removed. Not lowercased.
#[inline]
pub fn host_without_port(host: &[u8]) -> &[u8] {
    let h = if host.first() == Some(&b'[') {
        match memchr::memchr(b']', host) {
            Some(end) => &host[..=end],
            None => host,
        }
    } else {
        match memchr::memrchr(b':', host) {
            Some(colon) => &host[..colon],
            None => host,
        }
    };
    h.strip_suffix(b".").unwrap_or(h)
}

/// The path used for matching: `%XX` escapes of unreserved characters decoded and dot-segments
/// removed (RFC 3986 §6.2.2), so that `/%61dmin` and `/x/../admin` match the routes of `/admin`.
/// Encoded slashes stay encoded. The request is forwarded with its original target.
pub fn normalize_path(path: &[u8]) -> Cow<'_, [u8]> {
    let needs = memchr::memchr(b'%', path).is_some() || memchr::memmem::find(path, b"/.").is_some();
    if !needs {
        return Cow::Borrowed(path);
    }
    let mut decoded = Vec::with_capacity(path.len());
    let mut i = 0;
    while i < path.len() {
        let b = path[i];
        if b == b'%'
            && i + 2 < path.len()
            && let (Some(h), Some(l)) = (hex(path[i + 1]), hex(path[i + 2]))
        {
            let c = h * 16 + l;
            if c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~') {
                decoded.push(c);
                i += 3;
                continue;
            }
            // Keep reserved escapes, but in upper case so equal paths compare equal.
            decoded.extend_from_slice(&[
                b'%',
                path[i + 1].to_ascii_uppercase(),
                path[i + 2].to_ascii_uppercase(),
            ]);
            i += 3;
            continue;
        }
        decoded.push(b);
        i += 1;
    }
    Cow::Owned(remove_dot_segments(&decoded))
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

fn remove_dot_segments(path: &[u8]) -> Vec<u8> {
    if !path.starts_with(b"/") {
        return path.to_vec();
    }
    let segs: Vec<&[u8]> = path.split(|&c| c == b'/').skip(1).collect();
    let ends_with_dot = matches!(segs.last(), Some(&s) if s == b"." || s == b"..");
    let mut out: Vec<&[u8]> = Vec::with_capacity(segs.len());
    for seg in segs {
        match seg {
            b"." => {}
            b".." => {
                out.pop();
            }
            s => out.push(s),
        }
    }
    let mut res = Vec::with_capacity(path.len());
    for s in &out {
        res.push(b'/');
        res.extend_from_slice(s);
    }
    // `/a/b/..` is `/a/`, and nothing at all is `/`.
    if (ends_with_dot || res.is_empty()) && !res.ends_with(b"/") {
        res.push(b'/');
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_patterns_parse_static_params_and_prefix() {
        let p = PathPattern::parse("/users/:id/posts").unwrap();
        assert_eq!(
            p.tokens,
            vec![
                Token::Static(b"/users/".to_vec()),
                Token::Param,
                Token::Static(b"/posts".to_vec())
            ]
        );
        assert!(!p.prefix);
        let p = PathPattern::parse("/api/*").unwrap();
        assert!(p.prefix);
        assert_eq!(p.tokens, vec![Token::Static(b"/api/".to_vec())]);
        assert!(PathPattern::parse("/*").unwrap().prefix);
        // radixtree's named wildcard is a prefix like `*`.
        let p = PathPattern::parse("/files/*path").unwrap();
        assert!(p.prefix);
        assert_eq!(p.tokens, vec![Token::Static(b"/files/".to_vec())]);
        assert_eq!(p.as_str(), "/files/*path");
        let p = PathPattern::parse("/u/:id/*rest").unwrap();
        assert!(p.prefix);
        assert_eq!(
            p.tokens,
            vec![
                Token::Static(b"/u/".to_vec()),
                Token::Param,
                Token::Static(b"/".to_vec())
            ]
        );
        assert!(PathPattern::parse("/files/*pa-th").is_err());
        assert!(PathPattern::parse("/files*path").is_err());
    }

    #[test]
    fn path_patterns_report_what_is_wrong() {
        assert_eq!(
            PathPattern::parse("hello").unwrap_err(),
            "must start with \"/\", got \"hello\""
        );
        assert_eq!(
            PathPattern::parse("/a*/b").unwrap_err(),
            "\"*\" is only allowed at the end (\"/a*/b\")"
        );
        assert!(PathPattern::parse("/users/:/x").is_err());
        assert!(PathPattern::parse("/a?b=1").is_err());
        assert!(PathPattern::parse("/users/:id*").is_err());
    }

    #[test]
    fn host_patterns_lowercase_and_split_wildcards() {
        assert_eq!(
            HostPattern::parse("API.Example.com").unwrap(),
            HostPattern::Exact((*b"api.example.com").into())
        );
        assert_eq!(
            HostPattern::parse("*.example.com").unwrap(),
            HostPattern::Wildcard((*b".example.com").into())
        );
        assert!(HostPattern::parse("example.com:80").is_err());
        assert!(HostPattern::parse("*").is_err());
        assert!(HostPattern::parse("a..b").is_err());
    }

    #[test]
    fn hosts_lose_their_port() {
        assert_eq!(host_without_port(b"example.com:8080"), b"example.com");
        assert_eq!(host_without_port(b"example.com."), b"example.com");
        assert_eq!(host_without_port(b"[::1]:80"), b"[::1]");
        assert_eq!(host_without_port(b"example.com"), b"example.com");
    }

    #[test]
    fn paths_are_normalized_for_matching() {
        assert_eq!(&*normalize_path(b"/hello"), b"/hello");
        assert_eq!(&*normalize_path(b"/%61dmin"), b"/admin");
        assert_eq!(&*normalize_path(b"/x/../admin"), b"/admin");
        assert_eq!(&*normalize_path(b"/a/./b/"), b"/a/b/");
        assert_eq!(&*normalize_path(b"/a/b/.."), b"/a/");
        assert_eq!(&*normalize_path(b"/../.."), b"/");
        assert_eq!(&*normalize_path(b"/a%2fb"), b"/a%2Fb");
        assert_eq!(&*normalize_path(b"/a%2"), b"/a%2");
        assert_eq!(&*normalize_path(b"/.hidden"), b"/.hidden");
    }
}
