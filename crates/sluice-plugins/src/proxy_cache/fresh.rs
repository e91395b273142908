//! RFC 9111's reading of a response and a request: `Cache-Control` directives, the freshness
//! lifetime a response gives itself (`s-maxage`, `max-age`, `Expires`, less its `Age`), and
//! the header names its `Vary` lists.

/// The directives of `Cache-Control` fields that matter here (RFC 9111 §5.2).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Directives {
    pub(super) no_store: bool,
    pub(super) no_cache: bool,
    pub(super) private: bool,
    pub(super) only_if_cached: bool,
    pub(super) max_age: Option<u64>,
    pub(super) s_maxage: Option<u64>,
    /// `max-stale` (a request's; without a value: any staleness).
    pub(super) max_stale: Option<u64>,
    pub(super) min_fresh: Option<u64>,
    pub(super) public: bool,
    pub(super) must_revalidate: bool,
}

/// The largest delta-seconds kept (RFC 9111 §1.2.2): a larger value counts as this.
pub(super) const MAX_DELTA: u64 = 1 << 31;

/// Delta-seconds (RFC 9111 §1.2.2), capped at [`MAX_DELTA`].
pub(super) fn delta_seconds(v: &[u8]) -> Option<u64> {
    let v = v.trim_ascii();
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(
        std::str::from_utf8(v)
            .ok()?
            .parse::<u64>()
            .unwrap_or(MAX_DELTA)
            .min(MAX_DELTA),
    )
}

impl Directives {
    /// Reads every `Cache-Control` value given. A directive's name is case-insensitive; a
    /// number that does not parse is ignored, as RFC 9111 §4.2.1 asks of a cache (except
    /// that `max-age` with a bad value makes a response stale: here it counts as 0).
    pub(super) fn parse<'a>(values: impl Iterator<Item = &'a [u8]>) -> Directives {
        let mut d = Directives::default();
        for value in values {
            for item in value.split(|&b| b == b',') {
                let item = item.trim_ascii();
                let (name, arg) = match item.iter().position(|&b| b == b'=') {
                    Some(i) => (item[..i].trim_ascii(), Some(item[i + 1..].trim_ascii())),
                    None => (item, None),
                };
                let secs = || {
                    let a = arg?;
                    let a = a.strip_prefix(b"\"").unwrap_or(a);
                    let a = a.strip_suffix(b"\"").unwrap_or(a);
                    delta_seconds(a)
                };
                let is = |n: &str| name.eq_ignore_ascii_case(n.as_bytes());
                if is("no-store") {
                    d.no_store = true;
                } else if is("no-cache") {
                    d.no_cache = true;
                } else if is("private") {
                    d.private = true;
                } else if is("public") {
                    d.public = true;
                } else if is("must-revalidate") {
                    d.must_revalidate = true;
                } else if is("only-if-cached") {
                    d.only_if_cached = true;
                } else if is("max-age") {
                    d.max_age = Some(secs().unwrap_or(0));
                } else if is("s-maxage") {
                    d.s_maxage = Some(secs().unwrap_or(0));
                } else if is("max-stale") {
                    d.max_stale = Some(if arg.is_some() {
                        secs().unwrap_or(0)
                    } else {
                        u64::MAX
                    });
                } else if is("min-fresh") {
                    d.min_fresh = secs();
                }
            }
        }
        d
    }
}

/// A response's freshness lifetime left, in seconds, from its own fields (RFC 9111 §4.2.1,
/// as a shared cache reads them): `s-maxage`, else `max-age`, else `Expires` less `Date` (or
/// now); less the `Age` it arrived with. None: the response gives none.
pub(super) fn lifetime(
    cc: &Directives,
    expires: Option<&[u8]>,
    date: Option<&[u8]>,
    age: u64,
    now: u64,
) -> Option<u64> {
    let given = if let Some(s) = cc.s_maxage.or(cc.max_age) {
        s
    } else {
        let expires = expires?;
        // An Expires that does not parse (0, "-1") means already expired (§5.3).
        let Some(at) = http_time(expires) else {
            return Some(0);
        };
        let from = date.and_then(http_time).unwrap_or(now);
        at.saturating_sub(from)
    };
    Some(given.saturating_sub(age))
}

/// An HTTP date (RFC 9110 §5.6.7) as Unix seconds.
pub(super) fn http_time(v: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(v).ok()?.trim();
    let t = httpdate::parse_http_date(s).ok()?;
    t.duration_since(std::time::UNIX_EPOCH)
        .ok()
        .map(|d| d.as_secs())
}

/// The header names a `Vary` lists, lowercase and sorted (the order the node gives does not
/// make another variant). None: `*`, which no request can match (RFC 9111 §4.1).
pub(super) fn vary_list<'a>(values: impl Iterator<Item = &'a [u8]>) -> Option<Vec<String>> {
    let mut names = Vec::new();
    for value in values {
        for item in value.split(|&b| b == b',') {
            let item = item.trim_ascii();
            if item == b"*" {
                return None;
            }
            if !item.is_empty() {
                names.push(String::from_utf8_lossy(item).to_ascii_lowercase());
            }
        }
    }
    names.sort_unstable();
    names.dedup();
    Some(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cc(s: &str) -> Directives {
        Directives::parse(std::iter::once(s.as_bytes()))
    }

    #[test]
    fn cache_control_is_read_as_rfc_9111_says() {
        let d = cc("Public, MAX-AGE=60, s-maxage=\"30\"");
        assert_eq!((d.max_age, d.s_maxage), (Some(60), Some(30)));
        assert!(cc("no-cache=\"set-cookie\"").no_cache);
        assert!(cc("private, no-store").no_store);
        assert_eq!(cc("max-age=nope").max_age, Some(0), "a bad max-age is stale");
        assert_eq!(cc("max-stale").max_stale, Some(u64::MAX));
        assert_eq!(cc("min-fresh=5").min_fresh, Some(5));
        assert_eq!(cc(""), Directives::default());
        assert_eq!(
            cc("max-age=99999999999999999999999").max_age,
            Some(MAX_DELTA),
            "past 2^31 is 2^31"
        );
        assert_eq!(delta_seconds(b"-5"), None);
    }

    #[test]
    fn the_lifetime_prefers_s_maxage_then_max_age_then_expires_less_age() {
        let now = 1_700_000_000;
        assert_eq!(lifetime(&cc("max-age=60, s-maxage=10"), None, None, 0, now), Some(10));
        assert_eq!(lifetime(&cc("max-age=60"), None, None, 15, now), Some(45));
        assert_eq!(lifetime(&cc("max-age=60"), None, None, 90, now), Some(0));
        let date = b"Tue, 14 Nov 2023 22:13:20 GMT"; // 1_700_000_000
        let expires = b"Tue, 14 Nov 2023 22:15:20 GMT";
        assert_eq!(lifetime(&cc(""), Some(expires), Some(date), 0, 0), Some(120));
        assert_eq!(lifetime(&cc(""), Some(b"0"), None, 0, now), Some(0));
        assert_eq!(lifetime(&cc("public"), None, None, 0, now), None);
    }

    #[test]
    fn vary_is_sorted_lowercase_and_star_is_never_reused() {
        let v = |s: &[&str]| vary_list(s.iter().map(|s| s.as_bytes()));
        assert_eq!(
            v(&["User-Agent, accept-encoding", "Accept-Encoding"]),
            Some(vec!["accept-encoding".to_owned(), "user-agent".to_owned()])
        );
        assert_eq!(v(&["Accept, *"]), None);
        assert_eq!(v(&[]), Some(vec![]));
    }
}
