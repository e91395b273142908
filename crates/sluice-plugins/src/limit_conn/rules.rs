//! `conn` and `burst` as numbers or read per request, and APISIX 3's `rules`.

use serde::Deserialize;
use sluice_config::Validator;
use sluice_core::Ctx;
use sluice_core::http::RequestHead;

use crate::util::{Num, whole};

/// `conn` or `burst`: a number, or text with variables read per request.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub(super) enum Amount {
    Number(Num),
    Text(String),
}

/// A compiled `conn` or `burst`.
pub(super) enum Count {
    Fixed(i64),
    /// Read per request; a request whose text is not a whole number in range is not counted
    /// by the rule (APISIX's way).
    Read(Template),
}

impl Count {
    pub(super) fn compile(a: &Amount, lo: u64, v: &mut Validator) -> Option<Count> {
        match a {
            Amount::Number(n) => whole(*n, lo, MAX_CONN, "", v).map(|n| Count::Fixed(n as i64)),
            Amount::Text(t) => match t.trim().parse::<i64>() {
                Ok(n) => whole(Num::Whole(i128::from(n)), lo, MAX_CONN, "", v)
                    .map(|n| Count::Fixed(n as i64)),
                Err(_) => match Template::parse(t) {
                    Ok(t) if t.0.iter().any(|p| matches!(p, Part::Var(..))) => Some(Count::Read(t)),
                    Ok(_) => {
                        v.error(format!(
                            "must be a whole number, or text with $variables (\"${{http_x_conn ?? 5}}\"), got \"{t}\""
                        ));
                        None
                    }
                    Err(e) => {
                        v.error(e);
                        None
                    }
                },
            },
        }
    }

    pub(super) fn value(&self, req: &RequestHead, cx: &Ctx<'_>, lo: i64) -> Option<i64> {
        match self {
            Count::Fixed(n) => Some(*n),
            Count::Read(t) => t
                .render(req, cx)
                .0
                .trim()
                .parse::<i64>()
                .ok()
                .filter(|n| (lo..=MAX_CONN as i64).contains(n)),
        }
    }
}

/// APISIX's `core.utils.resolve_var` templates (`sluice_core::template`): `$name`, `${name}`,
/// `${name ?? default}`.
pub(super) struct Template(pub(super) Vec<Part>);

pub(super) enum Part {
    Text(String),
    Var(sluice_core::expr::Var, Option<String>),
}

impl Template {
    pub(super) fn parse(src: &str) -> Result<Template, String> {
        let mut parts = Vec::new();
        for seg in sluice_core::template::split(src) {
            parts.push(match seg {
                sluice_core::template::Segment::Text(t) => Part::Text(t),
                sluice_core::template::Segment::Ref { name, default } => Part::Var(
                    sluice_core::expr::Var::parse(name)?,
                    default.map(str::to_owned),
                ),
            });
        }
        Ok(Template(parts))
    }

    /// The text, and how many variables had a value (or a default).
    pub(super) fn render(&self, req: &RequestHead, cx: &Ctx<'_>) -> (String, usize) {
        let mut out = String::new();
        let mut resolved = 0;
        for p in &self.0 {
            match p {
                Part::Text(t) => out.push_str(t),
                Part::Var(var, default) => match (var.value(req, cx), default) {
                    (Some(v), _) => {
                        out.push_str(&String::from_utf8_lossy(&v));
                        resolved += 1;
                    }
                    (None, Some(d)) => {
                        out.push_str(d);
                        resolved += 1;
                    }
                    (None, None) => {}
                },
            }
        }
        (out, resolved)
    }

    pub(super) fn needs_body(&self) -> bool {
        self.0
            .iter()
            .any(|p| matches!(p, Part::Var(v, _) if v.needs_body()))
    }
}

/// A compiled rule.
pub(super) struct Rule {
    pub(super) conn: Count,
    pub(super) burst: Count,
    pub(super) key: Template,
}

/// Most requests `conn` and `burst` may each allow: their sum fits every counter (the stream
/// proxy counts in 32 bits).
pub(super) const MAX_CONN: u64 = 1_000_000_000;
