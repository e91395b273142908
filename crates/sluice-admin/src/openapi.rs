//! The admin API's OpenAPI 3 document, generated from the configuration types themselves
//! (their doc comments become the schema's descriptions), so it cannot drift from what the
//! API accepts.

use schemars::generate::SchemaSettings;
use serde_json::{Value, json};
use sluice_config::{
    ConsumerConfig, GlobalRuleConfig, RouteConfig, ServiceConfig, SslConfig, StreamRouteConfig,
    UpstreamConfig,
};

use crate::control::Kind;

/// The JSON schema of one resource kind.
pub fn schema_of(kind: Kind) -> Value {
    let mut generator = SchemaSettings::draft2020_12().into_generator();
    let schema = match kind {
        Kind::Routes => generator.root_schema_for::<RouteConfig>(),
        Kind::Upstreams => generator.root_schema_for::<UpstreamConfig>(),
        Kind::Services => generator.root_schema_for::<ServiceConfig>(),
        Kind::Consumers => generator.root_schema_for::<ConsumerConfig>(),
        Kind::GlobalRules => generator.root_schema_for::<GlobalRuleConfig>(),
        Kind::Ssls => generator.root_schema_for::<SslConfig>(),
        Kind::StreamRoutes => generator.root_schema_for::<StreamRouteConfig>(),
        Kind::PluginConfigs | Kind::ConsumerGroups => {
            generator.root_schema_for::<sluice_config::PluginSetConfig>()
        }
        Kind::PluginMetadata => generator.root_schema_for::<sluice_config::PluginMetadataConfig>(),
        Kind::Secrets => generator.root_schema_for::<sluice_config::SecretConfig>(),
    };
    schema.to_value()
}

/// The document.
pub fn document() -> Value {
    let mut generator = SchemaSettings::openapi3().into_generator();
    let mut schemas = serde_json::Map::new();
    for (name, schema) in [
        ("Route", generator.subschema_for::<RouteConfig>()),
        ("Upstream", generator.subschema_for::<UpstreamConfig>()),
        ("Service", generator.subschema_for::<ServiceConfig>()),
        ("Consumer", generator.subschema_for::<ConsumerConfig>()),
        ("GlobalRule", generator.subschema_for::<GlobalRuleConfig>()),
        ("Ssl", generator.subschema_for::<SslConfig>()),
        (
            "PluginConfig",
            generator.subschema_for::<sluice_config::PluginConfigConfig>(),
        ),
        (
            "ConsumerGroup",
            generator.subschema_for::<sluice_config::ConsumerGroupConfig>(),
        ),
        (
            "StreamRoute",
            generator.subschema_for::<StreamRouteConfig>(),
        ),
        (
            "PluginMetadata",
            generator.subschema_for::<sluice_config::PluginMetadataConfig>(),
        ),
        (
            "Secret",
            generator.subschema_for::<sluice_config::SecretConfig>(),
        ),
    ] {
        schemas.insert(name.to_owned(), schema.to_value());
    }
    for (k, v) in generator.take_definitions(true) {
        schemas.entry(k).or_insert(v);
    }
    schemas.insert(
        "Errors".into(),
        json!({
            "type": "object",
            "properties": {
                "error_msg": {"type": "string"},
                "errors": {"type": "array", "items": {
                    "type": "object",
                    "properties": {"path": {"type": "string"}, "message": {"type": "string"}}
                }}
            }
        }),
    );
    schemas.insert(
        "Error".into(),
        json!({"type": "object", "properties": {"error_msg": {"type": "string"}}}),
    );

    let mut paths = serde_json::Map::new();
    for kind in Kind::ALL {
        let schema = match kind {
            Kind::Routes => "Route",
            Kind::Upstreams => "Upstream",
            Kind::Services => "Service",
            Kind::Consumers => "Consumer",
            Kind::GlobalRules => "GlobalRule",
            Kind::Ssls => "Ssl",
            Kind::StreamRoutes => "StreamRoute",
            Kind::PluginConfigs => "PluginConfig",
            Kind::ConsumerGroups => "ConsumerGroup",
            Kind::PluginMetadata => "PluginMetadata",
            Kind::Secrets => "Secret",
        };
        let item = json!({"$ref": format!("#/components/schemas/{schema}")});
        let value = json!({"type": "object", "properties": {"value": item}});
        let ok = |what: &str| json!({"description": what, "content": {"application/json": {"schema": value}}});
        let errors = json!({
            "400": {"description": "invalid configuration", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Errors"}}}},
            "401": {"description": "missing or invalid X-API-KEY"}
        });
        let with = |mut base: Value, extra: Value| {
            base.as_object_mut()
                .expect("object")
                .extend(extra.as_object().expect("object").clone());
            base
        };
        let name = kind.name();
        paths.insert(
            format!("/admin/{name}"),
            json!({
                "get": {"summary": format!("List {name}"), "responses": {"200": {"description": "the list", "content": {"application/json": {"schema": {
                    "type": "object", "properties": {"total": {"type": "integer"}, "list": {"type": "array", "items": item}}}}}}}},
                "post": {"summary": format!("Create one of {name}, with a generated id"),
                    "requestBody": {"required": true, "content": {"application/json": {"schema": item}}},
                    "responses": with(json!({"201": ok("created"), "409": {"description": "already exists"}}), errors.clone())}
            }),
        );
        let id =
            json!([{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}]);
        paths.insert(
            format!("/admin/{name}/{{id}}"),
            json!({
                "parameters": id,
                "get": {"summary": "Read one", "responses": {"200": ok("the item"), "404": {"description": "not found"}}},
                "put": {"summary": "Create or replace", "requestBody": {"required": true, "content": {"application/json": {"schema": item}}},
                    "responses": with(json!({"200": ok("replaced"), "201": ok("created")}), errors.clone())},
                "patch": {"summary": "Merge a JSON merge patch (RFC 7396)", "requestBody": {"required": true, "content": {"application/merge-patch+json": {"schema": {"type": "object"}}}},
                    "responses": with(json!({"200": ok("patched"), "404": {"description": "not found"}}), errors.clone())},
                "delete": {"summary": "Delete", "responses": {"200": {"description": "deleted"}, "404": {"description": "not found"},
                    "409": {"description": "in use by another resource", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}}}
            }),
        );
    }
    paths.insert(
        "/admin/validate".into(),
        json!({"post": {"summary": "Check a whole configuration (YAML or JSON) without applying it",
            "requestBody": {"required": true, "content": {"application/yaml": {"schema": {"type": "string"}}}},
            "responses": {"200": {"description": "valid"}, "400": {"description": "invalid", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Errors"}}}}}}}),
    );
    paths.insert("/admin/reload".into(), json!({"post": {"summary": "Re-read the configuration file and the certificate files it names", "responses": {"200": {"description": "reloaded or unchanged"}, "400": {"description": "rejected; the previous configuration keeps serving"}}}}));
    paths.insert("/admin/status".into(), json!({"get": {"summary": "Configuration version, changes applied, reloads refused and admin writes refused", "responses": {"200": {"description": "status"}}}}));
    paths.insert(
        "/admin/upstreams/{id}/health".into(),
        json!({"get": {"summary": "The health of an upstream's nodes, as the data plane sees them",
            "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}],
            "responses": {"200": {"description": "each node with its state (and load shedding, with max_inflight)", "content": {"application/json": {"schema": {
                "type": "object", "properties": {"id": {"type": "string"}, "nodes": {"type": "array", "items": {"type": "object"}},
                "inflight": {"type": "integer"}, "max_inflight": {"type": "integer"}, "shed": {"type": "integer"}}}}}},
                "404": {"description": "no such upstream in service"}}}}),
    );
    paths.insert("/admin/metrics".into(), json!({"get": {"summary": "Prometheus metrics of the control plane", "responses": {"200": {"description": "metrics"}}}}));

    json!({
        "openapi": "3.0.3",
        "info": {"title": "Sluice admin API", "version": env!("CARGO_PKG_VERSION")},
        "security": [{"apiKey": []}],
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"apiKey": {"type": "apiKey", "in": "header", "name": "X-API-KEY"}}
        }
    })
}
