//! APISIX's templates (its `core.utils.resolve_var`): text with `$name`, `${name}` and
//! `${name ?? default}` references, split once when the configuration loads. A name is
//! letters, digits, `_` and `.` (`$post_arg.user.id`); `\$name` is not a reference (and is
//! written as it is, backslash included); a `$` that starts no reference is text. What a
//! name means is the caller's: most are variables ([`crate::vars::Var`]), some plugins add
//! their own (`uri_param_<name>`). One parser for every plugin that takes templates:
//! proxy-rewrite and response-rewrite values, fault-injection headers, limit-conn's rules,
//! redirect's `uri`. (The access log's formats are NGINX's `log_format`, parsed apart.)

/// A piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment<'a> {
    /// Text, written as it is.
    Text(String),
    /// A reference: its name and, with `??`, the text written when it has no value.
    Ref {
        /// The name, trimmed.
        name: &'a str,
        /// `${name ?? default}`'s default, trimmed.
        default: Option<&'a str>,
    },
}

/// Splits `src` into text and references, as APISIX's pattern
/// `(?<!\\)\$(\{\s*([^}]+?)\s*\}|([\w\.]+))` finds them.
pub fn split(src: &str) -> Vec<Segment<'_>> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut text = String::new();
    let mut i = 0;
    let mut copied = 0;
    while i < b.len() {
        if b[i] != b'$' || (i > 0 && b[i - 1] == b'\\') {
            i += 1;
            continue;
        }
        let found = if b.get(i + 1) == Some(&b'{') {
            src[i + 2..].find('}').and_then(|end| {
                let inner = &src[i + 2..i + 2 + end];
                (!inner.is_empty()).then(|| {
                    let (name, default) = match inner.split_once("??") {
                        Some((n, d)) => (n.trim(), Some(d.trim())),
                        None => (inner.trim(), None),
                    };
                    (name, default, i + 3 + end)
                })
            })
        } else {
            let len = b[i + 1..]
                .iter()
                .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_' || **c == b'.')
                .count();
            (len > 0).then(|| (&src[i + 1..i + 1 + len], None, i + 1 + len))
        };
        match found {
            Some((name, default, next)) => {
                text.push_str(&src[copied..i]);
                if !text.is_empty() {
                    out.push(Segment::Text(std::mem::take(&mut text)));
                }
                out.push(Segment::Ref { name, default });
                i = next;
                copied = next;
            }
            None => i += 1,
        }
    }
    text.push_str(&src[copied..]);
    if !text.is_empty() {
        out.push(Segment::Text(text));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r<'a>(name: &'a str, default: Option<&'a str>) -> Segment<'a> {
        Segment::Ref { name, default }
    }

    fn t(s: &str) -> Segment<'_> {
        Segment::Text(s.into())
    }

    #[test]
    fn references_are_found_as_apisix_finds_them() {
        assert_eq!(split("/v2$uri"), [t("/v2"), r("uri", None)]);
        assert_eq!(
            split("${uri}bar-${ http_x ?? none }"),
            [r("uri", None), t("bar-"), r("http_x", Some("none"))]
        );
        // A `$` that starts no reference is text; so is an escaped one, backslash and all.
        assert_eq!(split("a$ b $"), [t("a$ b $")]);
        assert_eq!(split("/foo$$uri"), [t("/foo$"), r("uri", None)]);
        assert_eq!(split("\\$uri/x$uri"), [t("\\$uri/x"), r("uri", None)]);
        assert_eq!(split("${unclosed"), [t("${unclosed")]);
        // Names take dots (`$post_arg.a.b`), and `${}` is text.
        assert_eq!(split("$post_arg.a.b!"), [r("post_arg.a.b", None), t("!")]);
        assert_eq!(split("${}x"), [t("${}x")]);
        assert_eq!(split("no refs"), [t("no refs")]);
        assert_eq!(split(""), Vec::<Segment<'_>>::new());
    }
}
