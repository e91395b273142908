//! `consumer-restriction`: after an auth plugin identified the consumer, allows (`whitelist`)
//! or denies (`blacklist`) the request by the consumer's name, its group, the route or the
//! route's service (APISIX's `type`: `consumer_name`, `consumer_group_id`, `route_id`,
//! `service_id`), optionally per method (`allowed_by_methods`, by that value).
//!
//! `{type: consumer_name, whitelist, blacklist, allowed_by_methods: [{user, methods}],
//! rejected_code: 403, rejected_msg}`. A request without that value (no consumer, a route
//! without a service) is 401, as APISIX.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, Phases, PluginFactory, parse_config};
use sluice_core::{Ctx, Flow, Plugin, Response};
use sluice_router::{Method, MethodSet};

use crate::util::{Num, check_status};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default = "consumer_name", rename = "type")]
    kind: String,
    #[serde(default)]
    whitelist: Option<Vec<String>>,
    #[serde(default)]
    blacklist: Option<Vec<String>>,
    #[serde(default)]
    allowed_by_methods: Vec<ByMethod>,
    #[serde(default = "forbidden")]
    rejected_code: Num,
    #[serde(default)]
    rejected_msg: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct ByMethod {
    user: String,
    methods: Vec<String>,
}

fn consumer_name() -> String {
    "consumer_name".into()
}

fn forbidden() -> Num {
    Num::Whole(403)
}

pub(crate) struct Factory;

impl PluginFactory for Factory {
    crate::util::describe!("consumer-restriction", 2400, Config);

    fn build(
        &self,
        config: &Value,
        _cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        let mut ok = true;
        let kind = match c.kind.as_str() {
            "consumer_name" => Kind::ConsumerName,
            "route_id" => Kind::RouteId,
            "service_id" => Kind::ServiceId,
            "consumer_group_id" => Kind::ConsumerGroupId,
            other => {
                v.error_at(
                    "type",
                    format!(
                        "unsupported type \"{other}\", expected consumer_name, route_id, service_id or consumer_group_id"
                    ),
                );
                ok = false;
                Kind::ConsumerName
            }
        };
        let (names, allow) = match (c.whitelist, c.blacklist) {
            (Some(_), Some(_)) => {
                v.error("use either whitelist or blacklist, not both");
                return None;
            }
            (Some(w), None) => (w, true),
            (None, Some(b)) => (b, false),
            (None, None) if !c.allowed_by_methods.is_empty() => (Vec::new(), false),
            (None, None) => {
                v.error("one of whitelist, blacklist or allowed_by_methods is required");
                return None;
            }
        };
        let mut by_method = Vec::new();
        v.field("allowed_by_methods", |v| {
            for (i, m) in c.allowed_by_methods.iter().enumerate() {
                v.index(i, |v| {
                    let mut set = MethodSet::empty();
                    for (j, name) in m.methods.iter().enumerate() {
                        match Method::from_config(name) {
                            Some(method) => set = set.with(method),
                            None => {
                                v.field("methods", |v| {
                                    v.index(j, |v| v.error(format!("unknown method \"{name}\"")))
                                });
                                ok = false;
                            }
                        }
                    }
                    by_method.push((m.user.clone(), set));
                });
            }
        });
        let code = v.field("rejected_code", |v| check_status(c.rejected_code, 200, v));
        let msg = c
            .rejected_msg
            .unwrap_or_else(|| format!("The {} is forbidden.", c.kind));
        let code = code.filter(|_| ok)?;
        Some(Arc::new(ConsumerRestriction {
            kind,
            names,
            allow,
            by_method,
            reject: Response::message(code, &msg),
            unknown: Response::message(
                401,
                &format!(
                    "The request is rejected, please check the {} for this request",
                    c.kind
                ),
            ),
        }))
    }
}

/// What the lists name (APISIX's `type`).
#[derive(Debug, Clone, Copy)]
enum Kind {
    ConsumerName,
    RouteId,
    ServiceId,
    ConsumerGroupId,
}

struct ConsumerRestriction {
    kind: Kind,
    names: Vec<String>,
    allow: bool,
    by_method: Vec<(String, MethodSet)>,
    reject: Response,
    /// The request has no value of `kind` (no consumer, no service...): 401, as APISIX.
    unknown: Response,
}

impl Plugin for ConsumerRestriction {
    fn phases(&self) -> Phases {
        Phases::ACCESS
    }

    fn access(&self, req: &mut RequestHead, cx: &mut Ctx<'_>) -> Flow {
        let value = match self.kind {
            Kind::ConsumerName => cx.consumer_name(),
            Kind::RouteId => Some(cx.route_id()).filter(|r| !r.is_empty()),
            Kind::ServiceId => Some(cx.service_id()).filter(|s| !s.is_empty()),
            Kind::ConsumerGroupId => cx.consumer().and_then(|c| c.group.as_deref()),
        };
        let Some(name) = value else {
            return Flow::Respond(self.unknown.clone());
        };
        if !self.names.is_empty() || self.allow {
            let listed = self.names.iter().any(|n| n == name);
            if listed != self.allow {
                return Flow::Respond(self.reject.clone());
            }
        }
        if let Some((_, methods)) = self.by_method.iter().find(|(u, _)| u == name)
            && !methods.contains(req.method())
        {
            return Flow::Respond(self.reject.clone());
        }
        Flow::Continue
    }
}

#[cfg(test)]
mod tests {
    use crate::tests::*;
    use sluice_config::PluginScope;

    fn status(yaml: &str, consumer: Option<u32>, method: &str) -> u16 {
        let b = build(
            "consumer-restriction",
            yaml,
            &[("jack", "{}"), ("rose", "{}")],
        );
        let mut cx = ctx(&b.consumers, CLIENT);
        if let Some(c) = consumer {
            cx.set_consumer(c);
        }
        run(
            &*b.plugin,
            &mut head(&format!("{method} / HTTP/1.1\r\nHost: a\r\n\r\n")),
            &mut cx,
        )
        .map_or(200, |r| r.status)
    }

    #[test]
    fn consumers_are_allowed_or_denied_by_name_and_method() {
        assert_eq!(status("{whitelist: [jack]}", Some(0), "GET"), 200);
        assert_eq!(status("{whitelist: [jack]}", Some(1), "GET"), 403);
        assert_eq!(
            status("{blacklist: [jack], rejected_code: 401}", Some(0), "GET"),
            401
        );
        assert_eq!(status("{blacklist: [jack]}", Some(1), "GET"), 200);
        let by_method = "{allowed_by_methods: [{user: rose, methods: [GET]}]}";
        assert_eq!(status(by_method, Some(1), "GET"), 200);
        assert_eq!(status(by_method, Some(1), "POST"), 403);
        assert_eq!(status(by_method, Some(0), "POST"), 200);
        assert_eq!(status("{whitelist: [jack]}", None, "GET"), 401);
        // By route (the test context's route is r1): APISIX's types other than the name.
        assert_eq!(
            status("{type: route_id, whitelist: [r1]}", Some(0), "GET"),
            200
        );
        assert_eq!(
            status("{type: route_id, blacklist: [r1]}", Some(0), "GET"),
            403
        );
    }

    #[test]
    fn configurations_are_checked_with_paths() {
        assert_eq!(
            check(
                "consumer-restriction",
                "{type: host, whitelist: [a], allowed_by_methods: [{user: a, methods: [FETCH]}]}",
                PluginScope::Route
            ),
            vec![
                "plugins.consumer-restriction.type: unsupported type \"host\", expected consumer_name, route_id, service_id or consumer_group_id",
                "plugins.consumer-restriction.allowed_by_methods[0].methods[0]: unknown method \"FETCH\""
            ]
        );
        assert_eq!(
            check(
                "consumer-restriction",
                "{whitelist: [a], rejected_code: 1e300}",
                PluginScope::Route
            ),
            vec![
                "plugins.consumer-restriction.rejected_code: must be a status code from 200 to 599, got 1e300"
            ]
        );
    }
}
