//! `acl`: allows or denies identified consumers by their labels, as APISIX's `acl`.
//!
//! `{allow_labels: {team: [payments, ops]}, deny_labels: {status: [suspended]},
//! rejected_code: 403, rejected_msg}`. After an auth plugin identified the consumer, its
//! `labels` decide: one that matches `deny_labels` is refused; with `allow_labels`, one that
//! matches none is refused. A label matches when its key is listed and one of its values is:
//! a label's value is one value, or several written as a JSON array (`["a","b"]`) or separated
//! by commas (`a, b`). A request without a consumer is 401 `{"message":"Missing
//! authentication."}`; a refused one `rejected_code` with `{"message":"The consumer is
//! forbidden."}` (or `rejected_msg`).
//!
//! APISIX's `external_user_label_field*` fields (labels of a user an OpenID provider
//! identified) are checked and kept; Sluice has no plugin that identifies such users yet, so
//! they change nothing.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, Phases, PluginFactory, parse_config};
use sluice_core::{Ctx, Flow, Plugin, Response};

use crate::util::{Num, check_status};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    allow_labels: Option<serde_json::Map<String, Value>>,
    #[serde(default)]
    deny_labels: Option<serde_json::Map<String, Value>>,
    #[serde(default = "forbidden")]
    rejected_code: Num,
    #[serde(default)]
    rejected_msg: Option<String>,
    #[serde(default)]
    external_user_label_field: Option<String>,
    #[serde(default)]
    external_user_label_field_key: Option<String>,
    #[serde(default)]
    external_user_label_field_parser: Option<String>,
    #[serde(default)]
    external_user_label_field_separator: Option<String>,
}

fn forbidden() -> Num {
    Num::Whole(403)
}

/// Label keys and the values wanted for each.
type Labels = Vec<(String, Vec<String>)>;

pub(crate) struct Factory;

impl PluginFactory for Factory {
    crate::util::describe!("acl", 2410, Config);

    fn build(
        &self,
        config: &Value,
        _cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        let mut ok = true;
        if c.allow_labels.is_none() && c.deny_labels.is_none() {
            v.error("give allow_labels, deny_labels or both");
            return None;
        }
        let mut lists = |field: &str, m: &Option<serde_json::Map<String, Value>>, v: &mut Validator| {
            let Some(m) = m else {
                return Some(Vec::new());
            };
            v.field(field, |v| {
                if m.is_empty() {
                    v.error("must name at least one label");
                    return None;
                }
                let mut out: Labels = Vec::with_capacity(m.len());
                for (key, values) in m {
                    let list: Option<Vec<String>> = values.as_array().and_then(|a| {
                        a.iter().map(|x| x.as_str().map(str::to_owned)).collect()
                    });
                    match list {
                        Some(l) if !l.is_empty() => out.push((key.clone(), l)),
                        _ => {
                            v.error_at(key, "must be a non-empty list of strings");
                            ok = false;
                        }
                    }
                }
                Some(out)
            })
        };
        let allow = lists("allow_labels", &c.allow_labels, v);
        let deny = lists("deny_labels", &c.deny_labels, v);
        let code = v.field("rejected_code", |v| check_status(c.rejected_code, 200, v));
        for (field, value) in [
            ("external_user_label_field", &c.external_user_label_field),
            ("external_user_label_field_key", &c.external_user_label_field_key),
            ("external_user_label_field_separator", &c.external_user_label_field_separator),
        ] {
            if value.as_deref() == Some("") {
                v.error_at(field, "must not be empty");
                ok = false;
            }
        }
        match c.external_user_label_field_parser.as_deref() {
            None | Some("json" | "table") => {}
            Some("segmented_text") if c.external_user_label_field_separator.is_none() => {
                v.error_at(
                    "external_user_label_field_separator",
                    "is required with external_user_label_field_parser: segmented_text",
                );
                ok = false;
            }
            Some("segmented_text") => {}
            Some(other) => {
                v.error_at(
                    "external_user_label_field_parser",
                    format!("unknown parser \"{other}\", expected segmented_text, json or table"),
                );
                ok = false;
            }
        }
        let (allow, deny, code) = (allow?, deny?, code?);
        let message = c
            .rejected_msg
            .unwrap_or_else(|| "The consumer is forbidden.".into());
        ok.then(|| {
            Arc::new(Acl {
                allow: (!allow.is_empty()).then_some(allow),
                deny,
                refused: Response::message(code, &message),
            }) as Arc<dyn Plugin>
        })
    }
}

struct Acl {
    /// None: every consumer not denied is allowed.
    allow: Option<Labels>,
    deny: Labels,
    refused: Response,
}

/// Whether one of the consumer's labels has a wanted value.
/// (The consumer's label values were split when the configuration compiled.)
fn matches(wanted: &Labels, labels: &[sluice_core::consumer::Label]) -> bool {
    wanted.iter().any(|(key, want)| {
        labels
            .iter()
            .find(|l| *l.key == **key)
            .is_some_and(|l| l.values.iter().any(|v| want.iter().any(|w| **w == **v)))
    })
}

impl Plugin for Acl {
    fn phases(&self) -> Phases {
        Phases::ACCESS
    }

    fn access(&self, _req: &mut RequestHead, cx: &mut Ctx<'_>) -> Flow {
        let Some(consumer) = cx.consumer() else {
            return Flow::Respond(Response::message(401, "Missing authentication."));
        };
        let labels = &consumer.labels;
        if matches(&self.deny, labels)
            || self.allow.as_ref().is_some_and(|a| !matches(a, labels))
        {
            return Flow::Respond(self.refused.clone());
        }
        Flow::Continue
    }
}
