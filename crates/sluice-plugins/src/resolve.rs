//! APISIX's `core.utils.resolve_var` for plugin fields: a key made of variables
//! (`"${http_x_user}"`, `"$remote_addr $http_x_app"`) and a number given as one
//! (`"${http_x_count ?? 5}"`), compiled once and read per request. Shared by limit-conn's and
//! ai-rate-limiting's `rules`.

use serde::Deserialize;
use sluice_config::Validator;
use sluice_core::Ctx;
use sluice_core::http::RequestHead;

use crate::util::{Num, whole};

/// A number field that may be text with variables.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub(crate) enum Amount {
    Number(Num),
    Text(String),
}

/// A compiled [`Amount`].
pub(crate) enum Count {
    Fixed(u64),
    /// Read per request: the caller decides what a request whose text is not a whole number
    /// from `lo` to `hi` gets.
    Read(Template),
}

impl Count {
    /// `a` as a whole number from `lo` to `hi` (`unit` names it in errors), or its template.
    pub(crate) fn compile(
        a: &Amount,
        lo: u64,
        hi: u64,
        unit: &str,
        v: &mut Validator,
    ) -> Option<Count> {
        match a {
            Amount::Number(n) => whole(*n, lo, hi, unit, v).map(Count::Fixed),
            Amount::Text(t) => match t.trim().parse::<i64>() {
                Ok(n) => whole(Num::Whole(i128::from(n)), lo, hi, unit, v).map(Count::Fixed),
                Err(_) => match Template::parse(t) {
                    Ok(t) if t.0.iter().any(|p| matches!(p, Part::Var(..))) => Some(Count::Read(t)),
                    Ok(_) => {
                        v.error(format!(
                            "must be a whole number, or text with $variables (\"${{http_x_count ?? 5}}\"), got \"{t}\""
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

    /// The number for this request, if it is a whole number from `lo` to `hi`.
    pub(crate) fn value(&self, req: &RequestHead, cx: &Ctx<'_>, lo: u64, hi: u64) -> Option<u64> {
        match self {
            Count::Fixed(n) => Some(*n),
            Count::Read(t) => t
                .render(req, cx)
                .0
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|n| (lo..=hi).contains(n)),
        }
    }

    pub(crate) fn needs_body(&self) -> bool {
        matches!(self, Count::Read(t) if t.needs_body())
    }
}

/// APISIX's `core.utils.resolve_var` templates (`sluice_core::template`): `$name`, `${name}`,
/// `${name ?? default}`.
pub(crate) struct Template(pub(crate) Vec<Part>);

pub(crate) enum Part {
    Text(String),
    Var(sluice_core::expr::Var, Option<String>),
}

impl Template {
    pub(crate) fn parse(src: &str) -> Result<Template, String> {
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
    pub(crate) fn render(&self, req: &RequestHead, cx: &Ctx<'_>) -> (String, usize) {
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

    pub(crate) fn needs_body(&self) -> bool {
        self.0
            .iter()
            .any(|p| matches!(p, Part::Var(v, _) if v.needs_body()))
    }
}
