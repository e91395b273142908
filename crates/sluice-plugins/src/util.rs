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
/// Whether a header name from a service's answer (an authorizer's, a policy's) may be set on a
/// request or a response: a token, and not one the gateway manages (framing, hop-by-hop).
pub(crate) fn settable_header(name: &str) -> bool {
    check_header_name(name, &mut Validator::new())
}

/// An RFC 9110 token (a field name, a cookie name): one or more of `tchar`.
pub(crate) fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

pub(crate) fn check_header_name(name: &str, v: &mut Validator) -> bool {
    if !is_token(name) {
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

/// `true`, for serde's `default` of fields that are on unless turned off.
pub(crate) fn yes() -> bool {
    true
}

/// A configured number as written (a whole number exactly, anything else as a float), read
/// without a range so that the plugin checks the range itself: every bad value of a field,
/// `-1` as well as `1e300` or `1.5`, gets the same message, which says what the field accepts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Num {
    /// A whole number as written (`18446744073709551615`, `-5`).
    Whole(i128),
    /// Any other number (`0.5`, `1e300`).
    Real(f64),
}

impl Num {
    /// The number as a float (whole numbers beyond 2^53 rounded).
    pub(crate) fn as_f64(self) -> f64 {
        match self {
            Num::Whole(n) => n as f64,
            Num::Real(f) => f,
        }
    }

    /// The number when it is whole (`5.0` is).
    pub(crate) fn whole(self) -> Option<i128> {
        match self {
            Num::Whole(n) => Some(n),
            Num::Real(f) if f.is_finite() && f.fract() == 0.0 && f.abs() < 1e30 => Some(f as i128),
            Num::Real(_) => None,
        }
    }
}

impl std::fmt::Display for Num {
    /// As the user wrote it; a float in the shortest form (`1e-300`, not 300 zeros).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Num::Whole(n) => write!(f, "{n}"),
            Num::Real(x) => f.write_str(&sluice_config::short_number(&x.to_string())),
        }
    }
}

impl<'de> serde::Deserialize<'de> for Num {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Num, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Num;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a number")
            }
            fn visit_u64<E>(self, n: u64) -> Result<Num, E> {
                Ok(Num::Whole(n.into()))
            }
            fn visit_i64<E>(self, n: i64) -> Result<Num, E> {
                Ok(Num::Whole(n.into()))
            }
            fn visit_f64<E>(self, x: f64) -> Result<Num, E> {
                Ok(Num::Real(x))
            }
        }
        d.deserialize_any(V)
    }
}

/// An optional whole-number field: `default` when absent, else [`whole`] at `field`.
pub(crate) fn whole_field(
    field: &str,
    n: Option<Num>,
    default: u64,
    (lo, hi): (u64, u64),
    unit: &str,
    v: &mut Validator,
) -> Option<u64> {
    match n {
        None => Some(default),
        Some(n) => v.field(field, |v| whole(n, lo, hi, unit, v)),
    }
}

/// APISIX's `max_req_body_size`-style fields: bytes, 1 to 1 TiB, 64 MiB when absent.
pub(crate) fn body_size_field(field: &str, n: Option<Num>, v: &mut Validator) -> Option<u64> {
    whole_field(field, n, 64 << 20, (1, 1 << 40), "", v)
}

/// Checks that `n` is a whole number from `lo` to `hi`; `unit` follows the range in the message
/// (`" seconds (one year)"`). `v` points at the field.
pub(crate) fn whole(n: Num, lo: u64, hi: u64, unit: &str, v: &mut Validator) -> Option<u64> {
    let got = n
        .whole()
        .filter(|w| (i128::from(lo)..=i128::from(hi)).contains(w));
    if got.is_none() {
        v.error(format!(
            "must be a whole number from {lo} to {hi}{unit}, got {n}"
        ));
    }
    got.map(|w| w as u64)
}

/// Checks that `n` is a number `accepted` holds for, described by `range` in the message
/// (`"from 0.001 to 1000000000 requests per second"`). `v` points at the field.
pub(crate) fn real(
    n: Num,
    accepted: impl Fn(f64) -> bool,
    range: &str,
    v: &mut Validator,
) -> Option<f64> {
    let x = n.as_f64();
    // NaN and infinities never pass, whatever `accepted` says.
    if x.is_finite() && accepted(x) {
        Some(x)
    } else {
        v.error(format!("must be {range}, got {n}"));
        None
    }
}

/// Checks a status code a plugin answers with (`v` points at the field).
pub(crate) fn check_status(code: Num, min: u16, v: &mut Validator) -> Option<u16> {
    let got = code
        .whole()
        .filter(|c| (i128::from(min)..=599).contains(c))
        .map(|c| c as u16);
    if got.is_none() {
        v.error(format!(
            "must be a status code from {min} to 599, got {code}"
        ));
    }
    got
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
    let mut first: rustc_hash::FxHashMap<K, String> = rustc_hash::FxHashMap::default();
    for c in creds {
        let Some(cred) = sluice_core::plugin::parse_config::<C>(c.config, &mut Validator::new())
        else {
            continue;
        };
        let Some((key, value)) = entry(cred, c.consumer) else {
            continue;
        };
        if let Some(other) = first.get(&key) {
            c.at(v, |v| {
                v.error_at_path(
                    &["plugins", plugin, field],
                    format!("{field} already used by {other}"),
                )
            });
            continue;
        }
        // The key is stored twice (position, entry): credential indexes are built once per
        // configuration, not per request.
        first.insert(key.clone(), c.place());
        out.insert(key, value);
    }
    out
}

/// Records the consumer an auth plugin identified and tells the upstream who it is, as APISIX
/// does: `X-Consumer-Username`, and `X-Consumer-Custom-ID` (the consumer's `custom_id` label).
/// Fields of those names from the client are replaced or removed.
pub(crate) fn attach_consumer(
    req: &mut sluice_core::http::RequestHead,
    cx: &mut sluice_core::Ctx<'_>,
    index: u32,
) {
    cx.set_consumer(index);
    if let Some(c) = cx.consumer() {
        req.set_header("X-Consumer-Username", c.username.as_bytes());
        match &c.custom_id {
            Some(id) => req.set_header("X-Consumer-Custom-ID", id.as_bytes()),
            None => req.remove_header("X-Consumer-Custom-ID"),
        }
    }
}

/// `anonymous_consumer` of an auth plugin: the consumer's index when compiling (None when
/// only checking: the consumers are not known then). A name no consumer has is logged, not
/// refused: APISIX looks the consumer up per request, so a route may be written before its
/// consumer (ADC writes routes first); until it exists such requests get the plugin's 401.
pub(crate) fn anonymous_consumer(
    name: Option<&str>,
    cx: &sluice_core::plugin::BuildCx<'_>,
    _v: &mut Validator,
) -> Option<Option<u32>> {
    let Some(name) = name else {
        return Some(None);
    };
    let names = sluice_core::plugin::index_as::<sluice_core::plugin::ConsumerNames>((cx.indexes)(
        sluice_core::plugin::CONSUMER_NAMES,
    ));
    let found = names.as_ref().and_then(|n| n.0.get(name).copied());
    if names.is_some() && found.is_none() {
        tracing::warn!(
            owner = cx.owner,
            consumer = name,
            "anonymous_consumer names no consumer: requests without valid credentials get 401 until it exists"
        );
    }
    Some(found)
}

/// An auth plugin's answer, with `anonymous_consumer`: a request it refused with 401 goes on
/// as that consumer instead (as APISIX).
pub(crate) fn or_anonymous(
    flow: sluice_core::Flow,
    anonymous: Option<u32>,
    challenge: &[u8],
    req: &mut sluice_core::http::RequestHead,
    cx: &mut sluice_core::Ctx<'_>,
) -> sluice_core::Flow {
    match (flow, anonymous) {
        (sluice_core::Flow::Respond(r), Some(i)) if r.status == 401 => {
            attach_consumer(req, cx, i);
            sluice_core::Flow::Continue
        }
        // APISIX: every 401 of an auth plugin names its scheme and realm.
        (sluice_core::Flow::Respond(r), None) if r.status == 401 => {
            sluice_core::Flow::Respond(r.header("WWW-Authenticate", challenge))
        }
        (f, _) => f,
    }
}

/// An auth plugin's `WWW-Authenticate` value, `<scheme> realm="<realm>"`, with APISIX's
/// `realm` (default `default`): printable ASCII but `"` and `\`, 1 to 128 characters (its schema's `maxLength`).
pub(crate) fn realm_challenge(
    scheme: &str,
    realm: Option<&str>,
    default: &str,
    v: &mut Validator,
) -> Option<Box<[u8]>> {
    let realm = realm.unwrap_or(default);
    let ok = !realm.is_empty()
        && realm.len() <= 128
        && realm
            .bytes()
            .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\');
    if !ok {
        v.error_at(
            "realm",
            format!(
                "invalid realm {realm:?}: 1 to 128 printable ASCII characters, without \" and \\"
            ),
        );
        return None;
    }
    Some(format!("{scheme} realm=\"{realm}\"").into_bytes().into())
}

/// A replacement as APISIX writes it (ngx.re.sub's: `$1`, `${1}`, `$0` for the whole match,
/// `$$` for a dollar) in the `regex` crate's syntax. They differ where a group number is
/// followed by a letter, a digit or `_`: `$1_$2` is group 1, `_`, group 2 for APISIX, and a
/// group named `1_` for the `regex` crate. Numbers are braced; any other `$` is literal.
pub(crate) fn apisix_replacement(template: &str) -> Vec<u8> {
    let b = template.as_bytes();
    let mut out = Vec::with_capacity(b.len() + 8);
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'$' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        let digits = b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if digits > 0 {
            out.extend_from_slice(b"${");
            out.extend_from_slice(&b[i + 1..i + 1 + digits]);
            out.push(b'}');
            i += 1 + digits;
        } else if b.get(i + 1) == Some(&b'{') {
            match b[i..].iter().position(|&c| c == b'}') {
                Some(end) => {
                    out.extend_from_slice(&b[i..i + end + 1]);
                    i += end + 1;
                }
                None => {
                    out.extend_from_slice(b"$$");
                    i += 1;
                }
            }
        } else if b.get(i + 1) == Some(&b'$') {
            out.extend_from_slice(b"$$");
            i += 2;
        } else {
            out.extend_from_slice(b"$$");
            i += 1;
        }
    }
    out
}

impl schemars::JsonSchema for Num {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Number".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "number"})
    }
}

/// A plugin configuration's JSON schema (what `/apisix/admin/schema/plugins/<name>` answers).
pub(crate) fn schema_of<T: schemars::JsonSchema>() -> serde_json::Value {
    let mut v = schemars::generate::SchemaSettings::draft07()
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value();
    // The Rust structure's name means nothing to a reader of the plugin's schema.
    if let Some(m) = v.as_object_mut() {
        m.remove("title");
    }
    v
}

/// Regex rules (`v` points at their list) compiled into one set, matched in linear time:
/// `regex` syntax, so PCRE's look-around and back-references are refused here. Each rule is
/// 1 to `max_len` bytes; `case_insensitive` adds `(?i)`.
pub(crate) fn rule_set(
    rules: &[String],
    max_len: usize,
    case_insensitive: bool,
    v: &mut Validator,
) -> Option<regex::bytes::RegexSet> {
    let mut ok = true;
    for (i, r) in rules.iter().enumerate() {
        if r.is_empty() || r.len() > max_len {
            v.index(i, |v| v.error(format!("must be 1 to {max_len} characters")));
            ok = false;
        } else if let Err(e) = regex::bytes::Regex::new(r) {
            v.index(i, |v| v.error(format!("invalid regex: {e}")));
            ok = false;
        } else if rules[..i].contains(r) {
            v.index(i, |v| v.error("repeats an earlier rule"));
            ok = false;
        }
    }
    if !ok {
        return None;
    }
    regex::bytes::RegexSetBuilder::new(rules)
        .case_insensitive(case_insensitive)
        .build()
        .map_err(|e| v.error(format!("invalid rules: {e}")))
        .ok()
}

/// An allow or deny list's judgement (APISIX's restriction plugins): what a request lacks
/// passes only with `bypass_missing`; what it has passes when it matches an allow list, or
/// does not match a deny list.
pub(crate) struct ListGuard {
    pub(crate) allow: bool,
    pub(crate) bypass_missing: bool,
    pub(crate) reject: sluice_core::Response,
}

impl ListGuard {
    /// The list (`allow` or `deny` given, exactly one: its field name, entries and whether it
    /// allows) and the guard, with `message` as the refusal.
    pub(crate) fn new<'a>(
        allow: (&'static str, &'a Option<Vec<String>>),
        deny: (&'static str, &'a Option<Vec<String>>),
        bypass_missing: bool,
        message: &str,
        v: &mut Validator,
    ) -> Option<(&'static str, &'a [String], ListGuard)> {
        let (field, list, allows) = match (allow.1, deny.1) {
            (Some(l), None) => (allow.0, l, true),
            (None, Some(l)) => (deny.0, l, false),
            _ => {
                v.error(format!("give exactly one of {} and {}", allow.0, deny.0));
                return None;
            }
        };
        if list.is_empty() {
            v.error_at(field, "must list at least one entry");
            return None;
        }
        if message.is_empty() || message.len() > 1024 {
            v.error_at("message", "must be 1 to 1024 characters");
            return None;
        }
        let guard = ListGuard {
            allow: allows,
            bypass_missing,
            reject: sluice_core::Response::message(403, message),
        };
        Some((field, list, guard))
    }

    /// `matched`: None when the request lacks what the list is about.
    pub(crate) fn judge(&self, matched: Option<bool>) -> sluice_core::Flow {
        let passes = match matched {
            None => self.bypass_missing,
            Some(m) => m == self.allow,
        };
        if passes {
            sluice_core::Flow::Continue
        } else {
            sluice_core::Flow::Respond(self.reject.clone())
        }
    }
}

/// A factory's name, priority and configuration schema (from its typed `Config`): the three
/// methods every plugin's factory has, written once (`crate::util::describe!("cors", 4000,
/// Config);` in its `impl PluginFactory`).
macro_rules! describe {
    ($name:expr, $priority:expr) => {
        fn name(&self) -> &'static str {
            $name
        }

        fn priority(&self) -> i32 {
            $priority
        }
    };
    ($name:expr, $priority:expr, $config:ty) => {
        crate::util::describe!($name, $priority);

        fn schema(&self) -> Option<serde_json::Value> {
            Some(crate::util::schema_of::<$config>())
        }
    };
    // An auth plugin: its consumers' credentials too.
    ($name:expr, $priority:expr, $config:ty, credentials: $cred:ty) => {
        crate::util::describe!($name, $priority, $config);

        fn consumer_schema(&self) -> Option<serde_json::Value> {
            Some(crate::util::schema_of::<$cred>())
        }

        fn is_auth(&self) -> bool {
            true
        }
    };
}
pub(crate) use describe;

/// Fields (or arguments) as APISIX's tables: a name to its value, an array of values when it
/// repeats.
pub(crate) fn insert(
    out: &mut serde_json::Map<String, serde_json::Value>,
    name: String,
    value: String,
) {
    insert_value(out, name, serde_json::Value::String(value));
}

/// [`insert`] of any value (a query argument without `=` is `true` in APISIX's tables).
pub(crate) fn insert_value(
    out: &mut serde_json::Map<String, serde_json::Value>,
    name: String,
    value: serde_json::Value,
) {
    match out.get_mut(&name) {
        None => {
            out.insert(name, value);
        }
        Some(serde_json::Value::Array(a)) => a.push(value),
        Some(slot) => {
            let first = slot.take();
            *slot = serde_json::Value::Array(vec![first, value]);
        }
    }
}

/// A query string as APISIX's `get_uri_args` reads it: names to values (percent-decoded, `+`
/// a space), an array when a name repeats, `true` for a name without `=`.
pub(crate) fn args_object(query: &[u8]) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for part in query.split(|&b| b == b'&').filter(|p| !p.is_empty()) {
        let Some((name, value)) = form_urlencoded::parse(part).next() else {
            continue;
        };
        let value = if part.contains(&b'=') {
            serde_json::Value::String(value.into_owned())
        } else {
            serde_json::Value::Bool(true)
        };
        insert_value(&mut out, name.into_owned(), value);
    }
    serde_json::Value::Object(out)
}

/// Text of a field's bytes (valid UTF-8 is the rule: the lossy path is the exception).
pub(crate) fn text(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) => s.to_owned(),
        Err(_) => String::from_utf8_lossy(b).into_owned(),
    }
}

/// The request's header fields, names lowercased.
pub(crate) fn headers_object(req: &sluice_core::http::RequestHead) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for f in req.fields() {
        if f.kind == sluice_core::http::HeaderKind::Removed {
            continue;
        }
        let mut name = text(f.name(req.raw()));
        name.make_ascii_lowercase();
        insert(&mut out, name, text(f.value(req.raw())));
    }
    for (name, value) in req.added_fields() {
        let mut name = text(name);
        name.make_ascii_lowercase();
        insert(&mut out, name, text(value));
    }
    serde_json::Value::Object(out)
}

/// A rule's optional condition (workflow's `case`, traffic-label's `match`): absent, every
/// request (`Some(None)`); given, route `vars`' expression, which must not be empty. None: an
/// error was recorded at `field`.
pub(crate) fn rule_condition(
    value: &Option<serde_json::Value>,
    field: &str,
    v: &mut Validator,
) -> Option<Option<sluice_core::expr::Expr>> {
    match value {
        None => Some(None),
        Some(serde_json::Value::Array(a)) if a.is_empty() => {
            v.error_at(
                field,
                "must not be empty (leave it out to match every request)",
            );
            None
        }
        Some(e) => v
            .field(field, |v| sluice_core::expr::Expr::parse(e, v))
            .map(Some),
    }
}

#[cfg(test)]
mod replacement_tests {
    #[test]
    fn apisix_replacements_mean_what_they_mean_in_apisix() {
        let re = regex::bytes::Regex::new("^/test/(.*)/(.*)/(.*)").unwrap();
        let apply = |t: &str| {
            String::from_utf8(
                re.replace(b"/test/a/b/c", super::apisix_replacement(t).as_slice())
                    .into_owned(),
            )
            .unwrap()
        };
        // APISIX's docs: "/$1_$2_$3" gives /a_b_c (the regex crate alone gives /c).
        assert_eq!(apply("/$1_$2_$3"), "/a_b_c");
        assert_eq!(apply("/${1}x/$2"), "/ax/b");
        assert_eq!(apply("$0!"), "/test/a/b/c!");
        assert_eq!(apply("/cost$$5/$name"), "/cost$5/$name");
    }
}
