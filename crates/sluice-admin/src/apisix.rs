//! APISIX's admin API, `/apisix/admin/...`, beside Sluice's own `/admin/...`: the same
//! resources and the same write path (validated, compiled, persisted, then installed), in
//! APISIX's shapes, so that its tools (ADC, the ingress controller, scripts written for
//! APISIX) drive Sluice unchanged.
//!
//! | call | answer |
//! |---|---|
//! | `GET /apisix/admin/<kind>` | `{"total", "list": [{"key", "value", "createdIndex", "modifiedIndex"}]}`, with `page`/`page_size` and the `name`, `label`, `uri` filters |
//! | `GET /apisix/admin/<kind>/<id>` | `{"key", "value", "createdIndex", "modifiedIndex"}`; 404 `{"message": "Key not found"}` |
//! | `PUT /apisix/admin/<kind>/<id>`, `PUT /apisix/admin/<kind>` (id in the body) | 201 created, 200 replaced: `{"key", "value"}` |
//! | `POST /apisix/admin/<kind>` | 201 with a generated id |
//! | `PATCH /apisix/admin/<kind>/<id>[/<field>...]` | merged (or the field replaced) |
//! | `DELETE /apisix/admin/<kind>/<id>` | `{"deleted": "1", "key"}` |
//! | `.../consumers/<username>/credentials[/<id>]` | a consumer's credentials, as their own resources |
//! | `GET /apisix/admin/plugins/list` | the plugin names |
//! | `GET /apisix/admin/schema/<kind>` | the resource's JSON schema |
//! | `GET /apisix/admin/schema/plugins/<name>` (or `/apisix/admin/plugins/<name>`) | a plugin's configuration schema; `?schema_type=consumer` its credentials' |
//!
//! Every answer carries `Server: APISIX/<version>` ([`APISIX_VERSION`]): ADC reads the version
//! from it to decide what the server supports. The key may be given as `?api_key=` too.

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Response, StatusCode};
use serde_json::{Map, Value, json};

use crate::control::{AdminError, Control, Kind};
use crate::serve::{invalid_message, reply};

/// The APISIX version Sluice answers as: the oldest one whose admin API has everything
/// Sluice serves here (consumer credentials came in 3.11; ADC checks for them).
pub const APISIX_VERSION: &str = "3.11.0";

/// Kinds APISIX has that Sluice does not: listed empty (there are none), refused on write.
const UNSUPPORTED: &[(&str, &str)] = &[(
    "protos",
    "protos are not supported: Sluice proxies gRPC as it is (no transcoding)",
)];

/// What `PUT /apisix/admin/configs` last wrote: its digest (the client's `X-Digest`), when,
/// and each resource list's `<kind>_conf_version`.
#[derive(Debug, Default)]
pub(crate) struct Standalone {
    digest: Option<String>,
    /// The configuration version the digest was applied at: a change made since through any
    /// other path makes the digest stale (the same digest again is then applied, not skipped).
    at_version: u64,
    last_modified: u64,
    versions: std::collections::HashMap<&'static str, u64>,
}

/// Held through every write of this API that reads, changes and writes back a resource (a
/// consumer's credentials, a sub-path PATCH): two at once would lose one's change.
static WRITES: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

/// Serves one `/apisix/admin/...` call; `rest` is the path after `/apisix/admin`.
pub(crate) fn handle(
    control: &Control,
    standalone: &parking_lot::Mutex<Standalone>,
    method: &Method,
    rest: &[&str],
    query: &str,
    headers: &hyper::HeaderMap,
    body: &[u8],
) -> Response<Full<Bytes>> {
    match (method, rest) {
        (_, ["configs", more @ ..]) => configs(control, standalone, method, more, headers, body),
        (&Method::GET, _) => route(control, method, rest, query, body),
        _ => {
            let _serial = WRITES.lock();
            route(control, method, rest, query, body)
        }
    }
}

/// A request body as JSON: a key written twice is an error at its path; anything else says
/// where the text went wrong (`invalid JSON: EOF while parsing ... at line 1 column 9`).
fn json_body(body: &[u8]) -> Result<Value, AdminError> {
    sluice_config::parse_json(body).map_err(|e| match e.iter().next() {
        Some(first) if !first.path.is_empty() => AdminError::Invalid(e),
        _ => AdminError::BadRequest(e.to_string()),
    })
}

/// Says the answer comes from APISIX (`Server: APISIX/<version>`), as every answer of its
/// API does.
pub(crate) fn claim_server(r: &mut Response<Full<Bytes>>) {
    if let Ok(v) = hyper::header::HeaderValue::from_str(&format!("APISIX/{APISIX_VERSION}")) {
        r.headers_mut().insert(hyper::header::SERVER, v);
    }
}

fn route(
    control: &Control,
    method: &Method,
    rest: &[&str],
    query: &str,
    body: &[u8],
) -> Response<Full<Bytes>> {
    match (method, rest) {
        (&Method::GET, ["plugins", "list"]) => reply(StatusCode::OK, json!(control.plugin_names())),
        (&Method::GET, ["schema", "plugins", name] | ["plugins", name]) if *name != "list" => {
            let consumer = query.split('&').any(|kv| kv == "schema_type=consumer");
            // APISIX's answers: 404 for a plugin it does not have, 400 for a schema a plugin
            // has not (a consumer schema of a plugin that is not an auth plugin).
            match control.plugin_schema(name, consumer) {
                Some(schema) => reply(StatusCode::OK, schema),
                None if !control.plugin_names().contains(name) => reply(
                    StatusCode::NOT_FOUND,
                    json!({"error_msg": "plugin not found in subsystem http"}),
                ),
                None => reply(
                    StatusCode::BAD_REQUEST,
                    json!({"error_msg": "not found schema"}),
                ),
            }
        }
        (&Method::GET, ["schema", kind]) => match Kind::from_name(kind) {
            Some(k) => reply(StatusCode::OK, crate::openapi::schema_of(k)),
            None => message(StatusCode::NOT_FOUND, &format!("no schema for {kind}")),
        },
        (_, ["consumers", username, "credentials", cred @ ..]) => {
            credentials(control, method, username, cred, body)
        }
        // A secret manager's id is `<manager>/<id>`: two segments of the path.
        (_, ["secrets", manager, id, rest @ ..]) => {
            let id = format!("{manager}/{id}");
            let mut path = vec![id.as_str()];
            path.extend_from_slice(rest);
            resource(control, method, Kind::Secrets, &path, query, body)
        }
        // `PUT /secrets/<manager>` with the id in the body.
        (&Method::PUT, ["secrets", manager]) => {
            match sluice_config::parse_json(body).ok().and_then(|v| {
                let id = v.get("id").and_then(text)?;
                Some((format!("{manager}/{id}"), v))
            }) {
                Some((id, mut v)) => {
                    v["id"] = Value::String(id.clone());
                    answer(put(control, Kind::Secrets, &id, v))
                }
                None => error(StatusCode::BAD_REQUEST, "missing secret id"),
            }
        }
        (_, [kind, rest @ ..]) => match Kind::from_name(kind) {
            Some(k) => resource(control, method, k, rest, query, body),
            None => match UNSUPPORTED.iter().find(|(name, _)| name == kind) {
                Some(_) if method == Method::GET && rest.is_empty() => {
                    reply(StatusCode::OK, json!({"total": 0, "list": []}))
                }
                Some(_) if method == Method::GET => message(StatusCode::NOT_FOUND, "Key not found"),
                Some((_, why)) => error(StatusCode::BAD_REQUEST, why),
                None => error(
                    StatusCode::NOT_FOUND,
                    &format!("unknown resource \"{kind}\""),
                ),
            },
        },
        _ => error(StatusCode::NOT_FOUND, "no such admin endpoint"),
    }
}

/// APISIX's etcd key of a resource, which its admin answers name.
fn key_of(kind: Kind, id: &str) -> String {
    format!("/apisix/{}/{id}", kind.name())
}

/// A resource as APISIX shows it: a consumer without its credentials (they are resources of
/// their own there).
fn shown(kind: Kind, mut value: Value) -> Value {
    if kind == Kind::Consumers
        && let Some(o) = value.as_object_mut()
    {
        o.remove("credentials");
    }
    value
}

fn node(kind: Kind, id: &str, value: Value, rev: i64) -> Value {
    json!({
        "key": key_of(kind, id),
        "value": shown(kind, value),
        "createdIndex": rev,
        "modifiedIndex": rev,
    })
}

fn resource(
    control: &Control,
    method: &Method,
    kind: Kind,
    rest: &[&str],
    query: &str,
    body: &[u8],
) -> Response<Full<Bytes>> {
    let json_body = || json_body(body);
    let result = match (method, rest) {
        (&Method::GET, []) => return list(control, kind, query),
        (&Method::GET, [id]) => {
            return match control.get_with_rev(kind, id) {
                Some((v, rev)) => reply(StatusCode::OK, node(kind, id, v, rev)),
                None => message(StatusCode::NOT_FOUND, "Key not found"),
            };
        }
        (&Method::PUT, []) => json_body().and_then(|v| {
            let id = v.get(kind.id_field()).and_then(text).ok_or_else(|| {
                AdminError::BadRequest(format!("missing {} id", kind.name().trim_end_matches('s')))
            })?;
            put(control, kind, &id, v)
        }),
        (&Method::PUT, [id]) => json_body().and_then(|v| put(control, kind, id, v)),
        (&Method::POST, []) => json_body().and_then(|v| {
            control.create(kind, v).map(|v| {
                let id = v.get(kind.id_field()).and_then(text).unwrap_or_default();
                (
                    StatusCode::CREATED,
                    json!({"key": key_of(kind, &id), "value": shown(kind, v)}),
                )
            })
        }),
        (&Method::PATCH, [id]) => json_body().and_then(|patch| {
            control.patch(kind, id, patch).map(|v| {
                (
                    StatusCode::OK,
                    json!({"key": key_of(kind, id), "value": shown(kind, v)}),
                )
            })
        }),
        // A sub-path replaces that field (`PATCH /routes/1/methods` with `["GET"]`).
        (&Method::PATCH, [id, field @ ..]) => json_body().and_then(|value| {
            let mut current = control
                .get(kind, id)
                .ok_or_else(|| AdminError::NotFound(format!("{} \"{id}\"", kind.name())))?;
            set_at(&mut current, field, value);
            control.put(kind, id, current).map(|(v, _)| {
                (
                    StatusCode::OK,
                    json!({"key": key_of(kind, id), "value": shown(kind, v)}),
                )
            })
        }),
        (&Method::DELETE, [id]) => control.delete(kind, id).map(|()| {
            (
                StatusCode::OK,
                json!({"deleted": "1", "key": key_of(kind, id)}),
            )
        }),
        _ => {
            return error(
                StatusCode::METHOD_NOT_ALLOWED,
                &format!("not supported `{method}` method for {}", kind.name()),
            );
        }
    };
    answer(result)
}

/// Sets the field at `path` (objects made on the way) to `value`.
fn set_at(target: &mut Value, path: &[&str], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        *target = value;
        return;
    };
    let mut at = target;
    for name in parents {
        if !at.is_object() {
            *at = Value::Object(Map::new());
        }
        at = at
            .as_object_mut()
            .expect("an object")
            .entry((*name).to_owned())
            .or_insert(Value::Object(Map::new()));
    }
    if !at.is_object() {
        *at = Value::Object(Map::new());
    }
    at.as_object_mut()
        .expect("an object")
        .insert((*last).to_owned(), value);
}

fn put(
    control: &Control,
    kind: Kind,
    id: &str,
    mut value: Value,
) -> Result<(StatusCode, Value), AdminError> {
    // APISIX keeps a consumer's credentials under their own keys: writing the consumer
    // leaves them as they are.
    if kind == Kind::Consumers
        && let (Some(o), Some(current)) = (value.as_object_mut(), control.get(kind, id))
        && !o.contains_key("credentials")
        && let Some(creds) = current.get("credentials")
    {
        o.insert("credentials".into(), creds.clone());
    }
    control.put(kind, id, value).map(|(v, created)| {
        (
            if created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            },
            json!({"key": key_of(kind, id), "value": shown(kind, v)}),
        )
    })
}

fn list(control: &Control, kind: Kind, query: &str) -> Response<Full<Bytes>> {
    let args: Vec<(String, String)> = url_args(query);
    let arg = |name: &str| {
        args.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let items: Vec<Value> = control
        .list_with_rev(kind)
        .into_iter()
        .filter(|(v, _)| {
            let name_ok = arg("name").is_none_or(|n| {
                v.get("name")
                    .and_then(Value::as_str)
                    .is_some_and(|x| x.contains(n))
            });
            let label_ok = arg("label").is_none_or(|l| {
                let (k, want) = match l.split_once(':') {
                    Some((k, w)) => (k, Some(w)),
                    None => (l, None),
                };
                v.get("labels")
                    .and_then(|ls| ls.get(k))
                    .and_then(Value::as_str)
                    .is_some_and(|x| want.is_none_or(|w| w == x))
            });
            let uri_ok = arg("uri").is_none_or(|u| {
                let one = v.get("uri").and_then(Value::as_str).map(|x| x.contains(u));
                let many = v
                    .get("uris")
                    .and_then(Value::as_array)
                    .map(|xs| xs.iter().filter_map(Value::as_str).any(|x| x.contains(u)));
                one.or(many).unwrap_or(false)
            });
            name_ok && label_ok && uri_ok
        })
        .map(|(v, rev)| {
            let id = v.get(kind.id_field()).and_then(text).unwrap_or_default();
            node(kind, &id, v, rev)
        })
        .collect();
    let total = items.len();
    let page: Option<usize> = arg("page").and_then(|p| p.parse().ok()).filter(|p| *p > 0);
    let size: usize = arg("page_size")
        .and_then(|p| p.parse().ok())
        .filter(|s| (10..=500).contains(s))
        .unwrap_or(10);
    let items = match page {
        Some(p) => items
            .into_iter()
            .skip((p - 1).saturating_mul(size))
            .take(size)
            .collect(),
        None => items,
    };
    reply(StatusCode::OK, json!({"total": total, "list": items}))
}

/// `consumers/<username>/credentials[/<id>]`: the consumer's `credentials`, each addressed
/// as APISIX addresses it.
fn credentials(
    control: &Control,
    method: &Method,
    username: &str,
    rest: &[&str],
    body: &[u8],
) -> Response<Full<Bytes>> {
    let key = |id: &str| format!("/apisix/consumers/{username}/credentials/{id}");
    let Some((consumer, rev)) = control.get_with_rev(Kind::Consumers, username) else {
        return error(StatusCode::NOT_FOUND, "consumer not found");
    };
    let creds: Vec<Value> = consumer
        .get("credentials")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let find = |id: &str| {
        creds
            .iter()
            .position(|c| c.get("id").and_then(text).as_deref() == Some(id))
    };
    let write = |creds: Vec<Value>| -> Result<(), AdminError> {
        let mut value = consumer.clone();
        if let Some(o) = value.as_object_mut() {
            if creds.is_empty() {
                o.remove("credentials");
            } else {
                o.insert("credentials".into(), Value::Array(creds));
            }
        }
        control.put(Kind::Consumers, username, value).map(|_| ())
    };
    let result = match (method, rest) {
        (&Method::GET, []) => {
            let list: Vec<Value> = creds
                .iter()
                .map(|c| {
                    let id = c.get("id").and_then(text).unwrap_or_default();
                    json!({"key": key(&id), "value": c, "createdIndex": rev, "modifiedIndex": rev})
                })
                .collect();
            return reply(StatusCode::OK, json!({"total": list.len(), "list": list}));
        }
        (&Method::GET, [id]) => {
            return match find(id) {
                Some(i) => reply(
                    StatusCode::OK,
                    json!({"key": key(id), "value": creds[i], "createdIndex": rev, "modifiedIndex": rev}),
                ),
                None => message(StatusCode::NOT_FOUND, "Key not found"),
            };
        }
        (&Method::PUT, [id]) => json_body(body).and_then(|mut v| {
            let Some(o) = v.as_object_mut() else {
                return Err(AdminError::BadRequest(
                    "the body must be a JSON object".into(),
                ));
            };
            match o.get("id").and_then(text) {
                Some(given) if given != *id => {
                    return Err(AdminError::BadRequest(format!(
                        "wrong credential id: {given} in the body, {id} in the URL"
                    )));
                }
                _ => {
                    o.insert("id".into(), Value::String((*id).to_owned()));
                }
            }
            let mut next = creds.clone();
            let created = match find(id) {
                Some(i) => {
                    next[i] = v.clone();
                    false
                }
                None => {
                    next.push(v.clone());
                    true
                }
            };
            write(next).map(|()| {
                (
                    if created {
                        StatusCode::CREATED
                    } else {
                        StatusCode::OK
                    },
                    json!({"key": key(id), "value": v}),
                )
            })
        }),
        (&Method::DELETE, [id]) => match find(id) {
            Some(i) => {
                let mut next = creds.clone();
                next.remove(i);
                write(next).map(|()| (StatusCode::OK, json!({"deleted": "1", "key": key(id)})))
            }
            None => return message(StatusCode::NOT_FOUND, "Key not found"),
        },
        _ => {
            return error(
                StatusCode::METHOD_NOT_ALLOWED,
                &format!("not supported `{method}` method for credentials"),
            );
        }
    };
    answer(result)
}

/// `/apisix/admin/configs`: the whole configuration at once, as APISIX's standalone admin API
/// (`apisix/admin/standalone.lua`) serves it to ADC and the ingress controller: PUT with an
/// `X-Digest` (the same digest again: 204, nothing done), `<kind>_conf_version` per list (an
/// equal one keeps the list in service, a lower one is refused), 202 when applied; GET gives
/// it back with the versions; HEAD its digest; `POST .../validate` checks without applying.
fn configs(
    control: &Control,
    standalone: &parking_lot::Mutex<Standalone>,
    method: &Method,
    rest: &[&str],
    headers: &hyper::HeaderMap,
    body: &[u8],
) -> Response<Full<Bytes>> {
    let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
    let stamp = |mut r: Response<Full<Bytes>>, st: &Standalone| {
        for (name, value) in [
            ("x-digest", st.digest.clone().unwrap_or_default()),
            ("x-last-modified", st.last_modified.to_string()),
        ] {
            if let Ok(v) = hyper::header::HeaderValue::from_str(&value) {
                r.headers_mut().insert(name, v);
            }
        }
        r
    };
    let parse = || -> Result<Map<String, Value>, Refusal> {
        let text = String::from_utf8_lossy(body);
        if text.trim().is_empty() {
            return Err(boxed_error(
                StatusCode::BAD_REQUEST,
                "invalid request body: empty request body",
            ));
        }
        let yaml = header("content-type").is_some_and(|c| c.starts_with("application/yaml"));
        let parsed = if yaml {
            sluice_config::parse_text(&text)
        } else {
            sluice_config::parse_json(body)
        };
        match parsed {
            Ok(Value::Object(m)) => Ok(m),
            Ok(_) => Err(boxed_error(
                StatusCode::BAD_REQUEST,
                "invalid request body: not an object",
            )),
            Err(e) => Err(boxed_error(
                StatusCode::BAD_REQUEST,
                &format!("invalid request body: {e}"),
            )),
        }
    };
    // The lists of `m`, checked against what Sluice serves.
    let lists_of = |m: &Map<String, Value>| -> Result<Vec<(Kind, Vec<Value>)>, Refusal> {
        for (name, why) in UNSUPPORTED {
            if m.get(*name)
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty())
            {
                return Err(Box::new(error(
                    StatusCode::BAD_REQUEST,
                    &format!("{name}: {why}"),
                )));
            }
        }
        // Credentials listed among consumers (`<username>/credentials/<id>`) go under them.
        let mut consumers = json!({"consumers": m.get("consumers").cloned().unwrap_or(json!([]))});
        let mut v = sluice_config::Validator::new();
        sluice_config::fold_standalone_credentials(&mut consumers, &mut v);
        if let Err(e) = v.finish() {
            return Err(Box::new(invalid_message(&e)));
        }
        let whole = Value::Object(m.clone());
        let mut out = Vec::new();
        for k in Kind::ALL {
            let from = if k == Kind::Consumers {
                &consumers
            } else {
                &whole
            };
            let items = match from.get(k.name()) {
                None => Vec::new(),
                Some(Value::Array(a)) => a.clone(),
                Some(other) => {
                    return Err(boxed_error(
                        StatusCode::BAD_REQUEST,
                        &format!("{}: must be a list, got {other}", k.name()),
                    ));
                }
            };
            out.push((k, items));
        }
        Ok(out)
    };
    match (method, rest) {
        (&Method::GET, []) => {
            let st = standalone.lock();
            let mut out = Map::new();
            for k in Kind::ALL {
                out.insert(k.name().into(), Value::Array(control.list(k)));
                out.insert(
                    format!("{}_conf_version", k.name()),
                    json!(st.versions.get(k.name()).copied().unwrap_or(0)),
                );
            }
            stamp(reply(StatusCode::OK, Value::Object(out)), &st)
        }
        (&Method::HEAD, []) => {
            let st = standalone.lock();
            stamp(reply(StatusCode::OK, json!({})), &st)
        }
        (&Method::POST, ["validate"]) => {
            let m = match parse() {
                Ok(m) => m,
                Err(r) => return *r,
            };
            let lists = match lists_of(&m) {
                Ok(l) => l,
                Err(r) => return *r,
            };
            let mut doc = Map::new();
            for (k, items) in lists {
                doc.insert(k.name().into(), Value::Array(items));
            }
            match control.check_resources(doc) {
                Ok(()) => reply(StatusCode::OK, json!({"message": "configuration is valid"})),
                Err(e) => invalid_message(&e),
            }
        }
        (&Method::PUT, []) => {
            let Some(digest) = header("x-digest").map(str::to_owned) else {
                return error(StatusCode::BAD_REQUEST, "missing digest header");
            };
            let m = match parse() {
                Ok(m) => m,
                Err(r) => return *r,
            };
            let mut st = standalone.lock();
            let version = control.stats().version;
            if st.digest.as_deref() == Some(digest.as_str()) && st.at_version == version {
                return stamp(
                    Response::builder()
                        .status(StatusCode::NO_CONTENT)
                        .body(Full::new(Bytes::new()))
                        .expect("a valid response"),
                    &st,
                );
            }
            let lists = match lists_of(&m) {
                Ok(l) => l,
                Err(r) => return *r,
            };
            let mut versions = st.versions.clone();
            let mut changed = Vec::new();
            for (k, items) in lists {
                let key = format!("{}_conf_version", k.name());
                let current = st.versions.get(k.name()).copied().unwrap_or(0);
                let next = match m.get(&key) {
                    None => current + 1,
                    Some(given) => match given.as_u64() {
                        Some(v) if v < current => {
                            return error(
                                StatusCode::BAD_REQUEST,
                                &format!("{key} must be greater than or equal to ({current})"),
                            );
                        }
                        Some(v) => v,
                        None => {
                            return error(
                                StatusCode::BAD_REQUEST,
                                &format!("{key} must be a whole number, got {given}"),
                            );
                        }
                    },
                };
                versions.insert(k.name(), next);
                // An unchanged version keeps the list in service.
                if next != current {
                    changed.push((k, items));
                }
            }
            match control.replace_lists(changed) {
                Ok(version) => {
                    st.digest = Some(digest);
                    st.at_version = version;
                    st.versions = versions;
                    st.last_modified = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_secs())
                        .unwrap_or(0);
                    stamp(reply(StatusCode::ACCEPTED, json!({})), &st)
                }
                Err(e) => answer(Err(e)),
            }
        }
        _ => error(StatusCode::NOT_FOUND, "Not found"),
    }
}

fn answer(result: Result<(StatusCode, Value), AdminError>) -> Response<Full<Bytes>> {
    match result {
        Ok((status, v)) => reply(status, v),
        Err(AdminError::Invalid(e)) => invalid_message(&e),
        Err(AdminError::NotFound(_)) => message(StatusCode::NOT_FOUND, "Key not found"),
        Err(e @ AdminError::Conflict(_)) => error(StatusCode::BAD_REQUEST, &e.to_string()),
        Err(e @ AdminError::BadRequest(_)) => error(StatusCode::BAD_REQUEST, &e.to_string()),
        Err(e @ (AdminError::Store(_) | AdminError::Unavailable(_))) => {
            error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string())
        }
    }
}

/// An answer that ends a call early (boxed: it is large).
type Refusal = Box<Response<Full<Bytes>>>;

fn boxed_error(status: StatusCode, msg: &str) -> Refusal {
    Box::new(error(status, msg))
}

fn error(status: StatusCode, msg: &str) -> Response<Full<Bytes>> {
    reply(status, json!({"error_msg": msg}))
}

fn message(status: StatusCode, msg: &str) -> Response<Full<Bytes>> {
    reply(status, json!({"message": msg}))
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The query's `name=value` pairs, percent-decoded.
pub(crate) fn url_args(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            let dec = |s: &str| {
                percent_encoding::percent_decode_str(&s.replace('+', " "))
                    .decode_utf8_lossy()
                    .into_owned()
            };
            (dec(k), dec(v))
        })
        .collect()
}
