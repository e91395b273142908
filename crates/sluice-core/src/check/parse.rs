//! Typed parsing that reports every bad field of an object, not only the first, in the user's
//! words.
//!
//! serde stops at the first error. To find the others, the bad value is taken out of the
//! document and the parse runs again, until it succeeds or nothing more can be taken out (a
//! required field that is missing, an error about the whole object). Each run costs one parse
//! of one resource, so a resource with N bad fields costs N + 1 parses: nothing on a path that
//! matters. serde's messages name Rust types (`expected u64`); [`humanize`] says what the field
//! accepts instead (`must be a whole number from 0 to 18446744073709551615, got -5`).

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::error::Validator;
use super::path::{PathSeg as Seg, render};

/// At most this many bad fields are reported per object (and as many re-parses made).
const MAX_ERRORS_PER_OBJECT: usize = 64;

/// Deserializes `value` as `T`, recording every bad field it can find, each with its path,
/// below the validator's current path. None when anything was wrong.
pub fn parse<T: DeserializeOwned>(v: &mut Validator, value: Value) -> Option<T> {
    match parse_trimmed(v, value) {
        Some((t, true)) => Some(t),
        _ => None,
    }
}

/// Like [`parse`], but a value with bad fields is also returned without them (`false`: it had
/// some), so that the checks after parsing still run on the rest of it (a route whose
/// `timeout` has the wrong type still has its `upstream_id` checked). None when even that
/// fails (a required field is missing, the value is not an object).
pub fn parse_trimmed<T: DeserializeOwned>(v: &mut Validator, value: Value) -> Option<(T, bool)> {
    // The common case, a valid value, costs one parse and no copy: the value is read by
    // reference, and copied only to look for more errors once one was found.
    if let Ok(t) = T::deserialize(&value) {
        return Some((t, true));
    }
    let mut value = value;
    // Original positions of removed list items, per list (in original indexes).
    let mut removed_items: Vec<(Vec<Seg>, Vec<usize>)> = Vec::new();
    let mut removed: Vec<Vec<Seg>> = Vec::new();
    let mut failed = false;
    for _ in 0..=MAX_ERRORS_PER_OBJECT {
        let err = match serde_path_to_error::deserialize::<_, T>(value.clone()) {
            Ok(t) => return Some((t, !failed)),
            Err(e) => e,
        };
        let mut segs: Vec<Seg> = err
            .path()
            .iter()
            .filter_map(|s| match s {
                serde_path_to_error::Segment::Seq { index } => Some(Seg::Index(*index)),
                serde_path_to_error::Segment::Map { key } => Some(Seg::Key(key.clone())),
                _ => None,
            })
            .collect();
        let message = err.into_inner().to_string();
        let at = if let Some(field) = between_backticks(&message, "missing field `") {
            let parent = original(&segs, &removed_items);
            let mut at = parent.clone();
            at.push(Seg::Key(field.to_owned()));
            // A required field this loop took out was reported already.
            if !removed.contains(&at) {
                v.nested(&render(&at), "is required");
            }
            // The object that lacks it is taken out, so that the fields after it are checked.
            parent
        } else {
            // serde reports an unknown field at its parent in some paths, at itself in others.
            if let Some(field) = between_backticks(&message, "unknown field `")
                && segs.last() != Some(&Seg::Key(field.to_owned()))
            {
                segs.push(Seg::Key(field.to_owned()));
            }
            let at = original(&segs, &removed_items);
            v.nested(&render(&at), humanize(&message));
            at
        };
        failed = true;
        if segs.is_empty() || !take_out(&mut value, &segs) {
            return None;
        }
        if let Some((Seg::Index(i), list)) = at.split_last() {
            match removed_items.iter_mut().find(|(p, _)| p == list) {
                Some((_, gone)) => gone.push(*i),
                None => removed_items.push((list.to_vec(), vec![*i])),
            }
        }
        removed.push(at);
    }
    None
}

/// Maps a path in the current (trimmed) value back to the original one: list indexes shift
/// as items are taken out.
fn original(segs: &[Seg], removed_items: &[(Vec<Seg>, Vec<usize>)]) -> Vec<Seg> {
    let mut out: Vec<Seg> = Vec::with_capacity(segs.len());
    for s in segs {
        match s {
            Seg::Key(k) => out.push(Seg::Key(k.clone())),
            Seg::Index(i) => {
                let gone = removed_items
                    .iter()
                    .find(|(p, _)| *p == out)
                    .map(|(_, g)| g.as_slice())
                    .unwrap_or_default();
                // The i-th item that is still there.
                let mut idx = *i;
                let mut sorted = gone.to_vec();
                sorted.sort_unstable();
                for g in sorted {
                    if g <= idx {
                        idx += 1;
                    }
                }
                out.push(Seg::Index(idx));
            }
        }
    }
    out
}

fn take_out(value: &mut Value, segs: &[Seg]) -> bool {
    let Some((last, parents)) = segs.split_last() else {
        return false;
    };
    let mut cur = value;
    for s in parents {
        cur = match (s, cur) {
            (Seg::Key(k), Value::Object(m)) => match m.get_mut(k) {
                Some(v) => v,
                None => return false,
            },
            (Seg::Index(i), Value::Array(a)) => match a.get_mut(*i) {
                Some(v) => v,
                None => return false,
            },
            _ => return false,
        };
    }
    match (last, cur) {
        (Seg::Key(k), Value::Object(m)) => m.shift_remove(k).is_some(),
        (Seg::Index(i), Value::Array(a)) if *i < a.len() => {
            a.remove(*i);
            true
        }
        _ => false,
    }
}

fn between_backticks<'a>(message: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = message.strip_prefix(prefix)?;
    rest.split_once('`').map(|(f, _)| f)
}

/// serde's message in the user's words: what the field accepts, what it got, no Rust type
/// names. Messages from our own types (already in the user's words) pass through.
pub fn humanize(message: &str) -> String {
    // The value quoted in `got` may hold ", expected " itself: split at the last one.
    if let Some(rest) = message.strip_prefix("invalid type: ")
        && let Some((got, expected)) = rest.rsplit_once(", expected ")
    {
        return format!("must be {}, got {}", accepts(expected), got_value(got));
    }
    if let Some(rest) = message.strip_prefix("invalid value: ")
        && let Some((got, expected)) = rest.rsplit_once(", expected ")
    {
        return format!("must be {}, got {}", accepts(expected), got_value(got));
    }
    if let Some(rest) = message.strip_prefix("unknown field `")
        && let Some((_, expected)) = rest.split_once("`, expected ")
    {
        return format!("unknown field, expected {}", expected.replace('`', ""));
    }
    if let Some(rest) = message.strip_prefix("unknown field `")
        && rest.contains("there are no fields")
    {
        return "unknown field: this object has no settings".into();
    }
    if let Some(rest) = message.strip_prefix("unknown variant `")
        && let Some((got, expected)) = rest.split_once("`, expected ")
    {
        return format!(
            "unknown value \"{got}\", expected {}",
            expected.replace('`', "")
        );
    }
    if let Some(rest) = message.strip_prefix("invalid length ")
        && let Some((n, expected)) = rest.split_once(", expected ")
    {
        return format!("must be {}, got {n} items", accepts(expected));
    }
    message.to_owned()
}

/// What a serde "expected" text means to a user.
fn accepts(expected: &str) -> String {
    let whole = |lo: i128, hi: i128| format!("a whole number from {lo} to {hi}");
    match expected {
        "u8" => whole(0, u8::MAX.into()),
        "u16" => whole(0, u16::MAX.into()),
        "u32" => whole(0, u32::MAX.into()),
        "u64" | "usize" => whole(0, u64::MAX.into()),
        "i8" => whole(i8::MIN.into(), i8::MAX.into()),
        "i16" => whole(i16::MIN.into(), i16::MAX.into()),
        "i32" => whole(i32::MIN.into(), i32::MAX.into()),
        "i64" | "isize" => whole(i64::MIN.into(), i64::MAX.into()),
        "f32" | "f64" => "a number".into(),
        "a boolean" => "true or false".into(),
        "a string" | "a borrowed string" => "text".into(),
        "a character" | "char" => "a single character".into(),
        "a sequence" => "a list".into(),
        "a map" => "a mapping".into(),
        "unit" => "empty".into(),
        s if s.starts_with("struct ") => "a mapping of settings".into(),
        s if s.starts_with("a sequence") || s.starts_with("tuple") => "a list".into(),
        s if s.starts_with("enum ") => "one of the documented values".into(),
        s => s.to_owned(),
    }
}

/// serde's "unexpected" text (`integer \`-5\``, `string "high"`) as the user wrote the value.
fn got_value(got: &str) -> String {
    let ticked = |prefix: &str| {
        got.strip_prefix(prefix)
            .and_then(|r| r.strip_prefix('`'))
            .and_then(|r| r.strip_suffix('`'))
            .map(short_number)
    };
    if let Some(n) = ticked("integer ").or_else(|| ticked("floating point ")) {
        return n;
    }
    if let Some(s) = got.strip_prefix("string ") {
        return short_text(s);
    }
    if let Some(b) = ticked("boolean ") {
        return b;
    }
    match got {
        "sequence" => "a list".into(),
        "map" => "a mapping".into(),
        "unit value" | "null" => "nothing (null)".into(),
        other => other.to_owned(),
    }
}

/// A number as written, shortened when it is long (`1e300`, not 300 digits).
pub fn short_number(text: &str) -> String {
    match text.parse::<f64>() {
        Ok(f) if text.len() > 21 || text.contains(['e', 'E']) => format!("{f:e}"),
        _ => text.to_owned(),
    }
}

/// A quoted text value, cut when it is long.
fn short_text(quoted: &str) -> String {
    const MAX: usize = 80;
    if quoted.len() <= MAX {
        return quoted.to_owned();
    }
    let mut end = MAX;
    while !quoted.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…\" ({} characters)", &quoted[..end], quoted.len() - 2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Route {
        uri: String,
        #[serde(default)]
        methods: Vec<String>,
        #[serde(default)]
        priority: i32,
        #[serde(default)]
        upstream: Option<Up>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Up {
        retries: u32,
        #[serde(default)]
        weights: Vec<u16>,
    }

    fn errors_of(yaml: &str) -> Vec<String> {
        let mut v = Validator::new();
        let value: Value = yaml_serde::from_str(yaml).expect("yaml");
        assert!(parse::<Route>(&mut v, value).is_none());
        v.into_errors().iter().map(ToString::to_string).collect()
    }

    #[test]
    fn every_bad_field_of_one_object_is_reported() {
        assert_eq!(
            errors_of(
                "{uri: 5, methods: GET, priority: high, upstream: {retries: -5, weights: [1, x, 2, 70000]}, extra: 1}"
            ),
            vec![
                "uri: must be text, got 5",
                "methods: must be a list, got \"GET\"",
                "priority: must be a whole number from -2147483648 to 2147483647, got \"high\"",
                "upstream.retries: must be a whole number from 0 to 4294967295, got -5",
                "upstream.weights[1]: must be a whole number from 0 to 65535, got \"x\"",
                "upstream.weights[3]: must be a whole number from 0 to 65535, got 70000",
                "extra: unknown field, expected one of uri, methods, priority, upstream",
            ]
        );
    }

    #[test]
    fn a_missing_field_inside_an_object_does_not_hide_the_fields_after_it() {
        assert_eq!(
            errors_of("{uri: /a, upstream: {weights: [1]}, priority: high}"),
            vec![
                "upstream.retries: is required",
                "priority: must be a whole number from -2147483648 to 2147483647, got \"high\"",
            ]
        );
    }

    #[test]
    fn a_missing_field_is_reported_once() {
        assert_eq!(
            errors_of("{methods: [GET]}"),
            vec!["uri: is required".to_string()]
        );
        assert_eq!(
            errors_of("{uri: [1], priority: 1e300}"),
            vec![
                "uri: must be text, got a list",
                "priority: must be a whole number from -2147483648 to 2147483647, got 1e300",
            ]
        );
    }
}
