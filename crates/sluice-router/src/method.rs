//! HTTP methods as a small enum and a bit set, so a route's method check is one AND.

use std::fmt;

/// A request method. Methods outside the common set are `Other` (they match only routes
/// without a `methods` list).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Method {
    /// GET
    Get = 0,
    /// HEAD
    Head,
    /// POST
    Post,
    /// PUT
    Put,
    /// DELETE
    Delete,
    /// CONNECT
    Connect,
    /// OPTIONS
    Options,
    /// TRACE
    Trace,
    /// PATCH
    Patch,
    /// PURGE
    Purge,
    /// Any other token.
    Other,
}

const NAMES: [&str; 10] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH", "PURGE",
];
const ALL: [Method; 10] = [
    Method::Get,
    Method::Head,
    Method::Post,
    Method::Put,
    Method::Delete,
    Method::Connect,
    Method::Options,
    Method::Trace,
    Method::Patch,
    Method::Purge,
];

impl Method {
    /// The method named by a request line token (case-sensitive, as RFC 9110 says).
    #[inline]
    pub fn from_bytes(b: &[u8]) -> Method {
        match b {
            b"GET" => Method::Get,
            b"POST" => Method::Post,
            b"HEAD" => Method::Head,
            b"PUT" => Method::Put,
            b"DELETE" => Method::Delete,
            b"OPTIONS" => Method::Options,
            b"PATCH" => Method::Patch,
            b"CONNECT" => Method::Connect,
            b"TRACE" => Method::Trace,
            b"PURGE" => Method::Purge,
            _ => Method::Other,
        }
    }

    /// The method named in a configuration (`GET`, `post` is not accepted: methods are
    /// case-sensitive).
    pub fn from_config(name: &str) -> Option<Method> {
        NAMES.iter().position(|n| *n == name).map(|i| ALL[i])
    }

    /// The known method names, for error messages.
    pub fn known_names() -> &'static [&'static str] {
        &NAMES
    }

    /// True for methods RFC 9110 calls idempotent: a request that failed before any response
    /// byte may be sent again.
    #[inline]
    pub fn is_idempotent(self) -> bool {
        matches!(
            self,
            Method::Get
                | Method::Head
                | Method::Put
                | Method::Delete
                | Method::Options
                | Method::Trace
        )
    }

    #[inline]
    fn bit(self) -> u16 {
        1 << (self as u8)
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Method::Other => f.write_str("OTHER"),
            m => f.write_str(NAMES[*m as usize]),
        }
    }
}

/// A set of methods; the empty list in a configuration means every method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MethodSet(u16);

impl MethodSet {
    /// Every method, including unknown ones.
    pub const ANY: MethodSet = MethodSet(u16::MAX);

    /// No method yet; add some with [`MethodSet::with`].
    pub const fn empty() -> Self {
        MethodSet(0)
    }

    /// This set plus `m`.
    pub fn with(self, m: Method) -> Self {
        MethodSet(self.0 | m.bit())
    }

    /// This set without `m`.
    pub fn without(self, m: Method) -> Self {
        MethodSet(self.0 & !m.bit())
    }

    /// True when `m` is in the set.
    #[inline]
    pub fn contains(self, m: Method) -> bool {
        self.0 & m.bit() != 0
    }
}

impl Default for MethodSet {
    fn default() -> Self {
        Self::ANY
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_sets_match_members_only() {
        let s = MethodSet::empty().with(Method::Get).with(Method::Post);
        assert!(s.contains(Method::Get));
        assert!(!s.contains(Method::Put));
        assert!(!s.contains(Method::Other));
        assert!(MethodSet::ANY.contains(Method::Other));
        assert_eq!(Method::from_bytes(b"get"), Method::Other);
        assert_eq!(Method::from_config("PATCH"), Some(Method::Patch));
    }
}
