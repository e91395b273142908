//! References between resources. Owns: finding what refers to a resource (routes, services
//! and stream routes naming an upstream, also inside plugin settings; routes naming a
//! service or a plugin config; consumers naming a group), so that deleting it can be refused.

use serde_json::Value;

use super::Kind;
use super::doc::{Doc, id_text};

/// What refers to resource `id` of `kind`, described for a 409, or None.
pub(super) fn users_of(doc: &Doc, kind: Kind, id: &str) -> Option<String> {
    let mut users = Vec::new();
    let mut scan = |list: Kind, field: &str| {
        for (item_id, item) in doc.list(list).into_iter().flatten() {
            let item = &item.value();
            let direct = item.get(field).and_then(id_text).as_deref() == Some(id);
            // traffic-split (and the like) name upstreams inside plugin settings.
            let in_plugins = field == "upstream_id"
                && item
                    .get("plugins")
                    .is_some_and(|p| mentions(p, "upstream_id", id));
            if direct || in_plugins {
                users.push(format!("{} \"{item_id}\"", list.name()));
            }
        }
    };
    match kind {
        Kind::Upstreams => {
            scan(Kind::Routes, "upstream_id");
            scan(Kind::Services, "upstream_id");
            scan(Kind::StreamRoutes, "upstream_id");
        }
        Kind::Services => {
            scan(Kind::Routes, "service_id");
            scan(Kind::StreamRoutes, "service_id");
        }
        Kind::PluginConfigs => scan(Kind::Routes, "plugin_config_id"),
        Kind::ConsumerGroups => scan(Kind::Consumers, "group_id"),
        _ => {}
    }
    (!users.is_empty()).then(|| users.join(", "))
}

fn mentions(v: &Value, field: &str, id: &str) -> bool {
    match v {
        Value::Object(m) => m.iter().any(|(k, v)| {
            (k == field && id_text(v).as_deref() == Some(id)) || mentions(v, field, id)
        }),
        Value::Array(a) => a.iter().any(|v| mentions(v, field, id)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Map;

    #[test]
    fn users_are_found_directly_and_inside_plugins() {
        let doc: Map<String, Value> = serde_json::from_value(serde_json::json!({
            "routes": [
                {"id": "r1", "upstream_id": "u1"},
                {"id": "r2", "plugins": {"traffic-split": {"rules": [{"weighted_upstreams": [{"upstream_id": "u2"}]}]}}},
                {"id": "r3", "service_id": "s1"}
            ],
            "services": [{"id": "s1", "upstream_id": "u1"}]
        }))
        .unwrap();
        let doc = Doc::from_map(doc);
        assert_eq!(
            users_of(&doc, Kind::Upstreams, "u1").unwrap(),
            "routes \"r1\", services \"s1\""
        );
        assert_eq!(
            users_of(&doc, Kind::Upstreams, "u2").unwrap(),
            "routes \"r2\""
        );
        assert_eq!(
            users_of(&doc, Kind::Services, "s1").unwrap(),
            "routes \"r3\""
        );
        assert!(users_of(&doc, Kind::Upstreams, "u3").is_none());
    }
}
