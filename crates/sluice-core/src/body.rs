//! The request body as conditions read it: APISIX's `post_arg_<name>` (a form field),
//! `post_arg.<path>` (a field of a JSON, form or multipart body, with JSONPath wildcards) and
//! `graphql_operation`, `graphql_name`, `graphql_root_fields`.
//!
//! The engine reads a body only for a route or plugin whose conditions use one of these, and
//! only up to `limits.max_body_vars_size`; each form of it (the parsed table, the GraphQL
//! summary) is made once, on first use.

use std::borrow::Cow;
use std::sync::OnceLock;

use bytes::Bytes;
use serde_json::Value;
use serde_json_path::JsonPath;

use crate::http::RequestHead;

/// A body variable, parsed at load time.
#[derive(Debug, Clone)]
pub struct BodyVar {
    /// As written (`post_arg.messages[*].type`).
    name: Box<str>,
    kind: BodyKind,
}

#[derive(Debug, Clone)]
enum BodyKind {
    /// `post_arg_<name>`: a field of an `application/x-www-form-urlencoded` body.
    FormArg(String),
    /// `post_arg.a.b`: keys, one level each.
    Keys(Vec<String>),
    /// `post_arg.a[*].b`, `post_arg..b`: a JSONPath query (its results are a list).
    Query(Box<JsonPath>),
    /// `graphql_operation`, `graphql_name`, `graphql_root_fields`.
    Graphql(GraphqlField),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GraphqlField {
    Operation,
    Name,
    RootFields,
}

impl PartialEq for BodyVar {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}
impl Eq for BodyVar {}

impl BodyVar {
    /// Parses a body variable's name; None: not one.
    pub fn parse(name: &str) -> Option<Result<BodyVar, String>> {
        let kind = if let Some(field) = name.strip_prefix("post_arg_") {
            if field.is_empty() {
                return Some(Err("\"post_arg_\" needs a field name after it".into()));
            }
            BodyKind::FormArg(field.to_owned())
        } else if let Some(path) = name.strip_prefix("post_arg.") {
            if path.is_empty() {
                return Some(Err("\"post_arg.\" needs a path after it".into()));
            }
            // As APISIX: a path with `[`, `*` or `..` is a JSONPath query; others are keys.
            if path.contains(['[', '*']) || path.contains("..") {
                match JsonPath::parse(&format!("$.{path}")) {
                    Ok(p) => BodyKind::Query(Box::new(p)),
                    Err(e) => return Some(Err(format!("\"{name}\": invalid JSONPath: {e}"))),
                }
            } else {
                BodyKind::Keys(path.split('.').map(str::to_owned).collect())
            }
        } else {
            let field = match name {
                "graphql_operation" => GraphqlField::Operation,
                "graphql_name" => GraphqlField::Name,
                "graphql_root_fields" => GraphqlField::RootFields,
                _ => return None,
            };
            BodyKind::Graphql(field)
        };
        Some(Ok(BodyVar {
            name: name.into(),
            kind,
        }))
    }

    /// The name as written.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// A request's body, read before routing or the plugins that need it.
#[derive(Debug, Default)]
pub struct RequestBody {
    /// None: larger than the limit, or framed wrong: no body variable has a value.
    raw: Option<Bytes>,
    /// The bytes the body took in the connection's buffer, framing included (a chunked
    /// body's chunk lines and trailers): what a replacement body takes the place of.
    wire: usize,
    table: OnceLock<Option<Value>>,
    graphql: OnceLock<Option<Graphql>>,
}

/// What the GraphQL variables read: the first definition's operation, name and root fields.
#[derive(Debug)]
struct Graphql {
    operation: String,
    name: String,
    root_fields: Vec<String>,
}

fn content_type(req: &RequestHead) -> &[u8] {
    req.header("content-type").unwrap_or_default()
}

fn text(v: &Value) -> Option<Cow<'_, [u8]>> {
    match v {
        Value::String(s) => Some(Cow::Borrowed(s.as_bytes())),
        Value::Number(n) => Some(Cow::Owned(n.to_string().into_bytes())),
        Value::Bool(b) => Some(Cow::Borrowed(if *b { b"true" } else { b"false" })),
        // Lists and objects are tables in APISIX: no text, though `has` looks into lists.
        _ => None,
    }
}

impl RequestBody {
    /// A body as read; None when it was not (too large).
    pub fn new(raw: Option<Bytes>) -> Self {
        RequestBody {
            wire: raw.as_ref().map_or(0, Bytes::len),
            raw,
            ..Default::default()
        }
    }

    /// A body read whole that took `wire` bytes of the buffer, framing included (chunked).
    pub fn framed(raw: Bytes, wire: usize) -> Self {
        RequestBody {
            raw: Some(raw),
            wire,
            ..Default::default()
        }
    }

    /// The bytes the body took in the connection's buffer, when it was read whole.
    pub fn wire_len(&self) -> Option<usize> {
        self.raw.as_ref().map(|_| self.wire)
    }

    /// The bytes read, if the body was.
    pub fn raw(&self) -> Option<&[u8]> {
        self.raw.as_deref()
    }

    /// [`RequestBody::raw`] as shared bytes, to keep or forward without a copy.
    pub fn bytes(&self) -> Option<&Bytes> {
        self.raw.as_ref()
    }

    /// The variable's value: text, as the other variables.
    pub fn value<'a>(&'a self, var: &BodyVar, req: &'a RequestHead) -> Option<Cow<'a, [u8]>> {
        match &var.kind {
            BodyKind::FormArg(name) => {
                if !content_type(req).starts_with(b"application/x-www-form-urlencoded") {
                    return None;
                }
                let v = self.table(req)?.get(name)?;
                match v {
                    Value::Array(list) => list.first().and_then(text),
                    v => text(v),
                }
            }
            BodyKind::Keys(keys) => text(self.walk(keys, req)?),
            // Always a list (APISIX's results table): never text.
            BodyKind::Query(_) => None,
            BodyKind::Graphql(f) => {
                let g = self.graphql(req)?;
                match f {
                    GraphqlField::Operation => Some(Cow::Borrowed(g.operation.as_bytes())),
                    GraphqlField::Name => Some(Cow::Borrowed(g.name.as_bytes())),
                    GraphqlField::RootFields => None,
                }
            }
        }
    }

    /// lua-resty-expr's `has`: the variable is a list holding `needle`.
    pub fn has(&self, var: &BodyVar, req: &RequestHead, needle: &[u8]) -> bool {
        let eq = |v: &Value| text(v).is_some_and(|t| *t == *needle);
        match &var.kind {
            BodyKind::Keys(keys) => match self.walk(keys, req) {
                Some(Value::Array(list)) => list.iter().any(eq),
                _ => false,
            },
            BodyKind::Query(q) => self
                .table(req)
                .is_some_and(|t| q.query(t).all().into_iter().any(eq)),
            BodyKind::Graphql(GraphqlField::RootFields) => self
                .graphql(req)
                .is_some_and(|g| g.root_fields.iter().any(|f| f.as_bytes() == needle)),
            BodyKind::FormArg(_) | BodyKind::Graphql(_) => false,
        }
    }

    fn walk(&self, keys: &[String], req: &RequestHead) -> Option<&Value> {
        keys.iter()
            .try_fold(self.table(req)?, |v, k| v.as_object()?.get(k))
    }

    /// The body as a table, by its `Content-Type` (JSON, form or multipart), as APISIX's
    /// `get_request_body_table`.
    fn table(&self, req: &RequestHead) -> Option<&Value> {
        self.table
            .get_or_init(|| {
                let raw = self.raw.as_ref()?;
                let ct = content_type(req);
                let has = |t: &[u8]| memchr::memmem::find(ct, t).is_some();
                if has(b"application/json") {
                    serde_json::from_slice(raw).ok()
                } else if has(b"application/x-www-form-urlencoded") {
                    let mut map = serde_json::Map::new();
                    for (k, v) in form_urlencoded::parse(raw) {
                        add_field(&mut map, k.into_owned(), v.into_owned());
                    }
                    Some(Value::Object(map))
                } else if has(b"multipart/form-data") {
                    multipart(raw.clone(), std::str::from_utf8(ct).ok()?)
                } else {
                    None
                }
            })
            .as_ref()
    }

    fn graphql(&self, req: &RequestHead) -> Option<&Graphql> {
        self.graphql
            .get_or_init(|| {
                let src: Cow<'_, [u8]> = match req.method() {
                    sluice_router::Method::Get => req.query_arg_ref("query")?,
                    sluice_router::Method::Post => {
                        let raw = self.raw.as_deref()?;
                        if content_type(req) == b"application/json" {
                            let v: Value = serde_json::from_slice(raw).ok()?;
                            Cow::Owned(v.get("query")?.as_str()?.as_bytes().to_vec())
                        } else {
                            Cow::Borrowed(raw)
                        }
                    }
                    _ => return None,
                };
                graphql(std::str::from_utf8(&src).ok()?)
            })
            .as_ref()
    }
}

/// A repeated field becomes a list, as in APISIX's tables.
fn add_field(map: &mut serde_json::Map<String, Value>, k: String, v: String) {
    match map.get_mut(&k) {
        Some(Value::Array(list)) => list.push(Value::String(v)),
        Some(first) => {
            let first = first.take();
            map.insert(k, Value::Array(vec![first, Value::String(v)]));
        }
        None => {
            map.insert(k, Value::String(v));
        }
    }
}

/// A `multipart/form-data` body's fields by name (multer, over the bytes already read); a
/// repeated field is a list. None: not a multipart body with this `Content-Type`.
pub fn multipart(raw: Bytes, ct: &str) -> Option<Value> {
    let boundary = multer::parse_boundary(ct).ok()?;
    let stream = futures_util::stream::once(async move { Ok::<_, std::io::Error>(raw) });
    let mut parts = multer::Multipart::new(stream, boundary);
    // The whole body is in memory: every poll is ready, so this never waits.
    futures_executor::block_on(async move {
        let mut map = serde_json::Map::new();
        while let Some(field) = parts.next_field().await.ok()? {
            let name = field.name().unwrap_or_default().to_owned();
            let value = field.text().await.ok()?;
            add_field(&mut map, name, value);
        }
        Some(Value::Object(map))
    })
}

fn graphql(src: &str) -> Option<Graphql> {
    use graphql_parser::query::{Definition, OperationDefinition, Selection};
    let doc = graphql_parser::query::parse_query::<&str>(src).ok()?;
    // As APISIX: only the first definition is read.
    let (operation, name, set) = match doc.definitions.first()? {
        Definition::Operation(op) => match op {
            OperationDefinition::SelectionSet(s) => ("query", None, s),
            OperationDefinition::Query(q) => ("query", q.name, &q.selection_set),
            OperationDefinition::Mutation(m) => ("mutation", m.name, &m.selection_set),
            OperationDefinition::Subscription(s) => ("subscription", s.name, &s.selection_set),
        },
        Definition::Fragment(f) => ("", Some(f.name), &f.selection_set),
    };
    let root_fields = set
        .items
        .iter()
        .filter_map(|s| match s {
            Selection::Field(f) => Some(f.name.to_owned()),
            Selection::FragmentSpread(f) => Some(f.fragment_name.to_owned()),
            Selection::InlineFragment(_) => None,
        })
        .collect();
    Some(Graphql {
        operation: operation.to_owned(),
        name: name.unwrap_or_default().to_owned(),
        root_fields,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::http::test_head as head;

    fn var(name: &str) -> BodyVar {
        BodyVar::parse(name).unwrap().unwrap()
    }

    fn value(b: &RequestBody, v: &str, req: &RequestHead) -> Option<String> {
        b.value(&var(v), req)
            .map(|c| String::from_utf8(c.into_owned()).unwrap())
    }

    #[test]
    fn form_fields_are_read_only_from_a_form_body() {
        let b = RequestBody::new(Some(Bytes::from_static(b"name=json&x=a+b&x=2")));
        let form = head(
            "POST /_post HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 19\r\n\r\n",
        );
        assert_eq!(value(&b, "post_arg_name", &form).as_deref(), Some("json"));
        assert_eq!(value(&b, "post_arg_x", &form).as_deref(), Some("a b"));
        assert_eq!(value(&b, "post_arg_y", &form), None);
        let json = head(
            "POST /_post HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 19\r\n\r\n",
        );
        let b = RequestBody::new(Some(Bytes::from_static(b"{\"name\":\"json\"}")));
        assert_eq!(value(&b, "post_arg_name", &json), None);
        assert_eq!(value(&b, "post_arg.name", &json).as_deref(), Some("json"));
    }

    #[test]
    fn json_paths_and_wildcards() {
        let req = head(
            "POST /_post HTTP/1.1\r\nHost: x\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: 1\r\n\r\n",
        );
        let b = RequestBody::new(Some(Bytes::from_static(
            br#"{"model":"deepseek","n":3,"a":{"b":{"c":"deep"}},"tags":["x","y"],
                "messages":[{"role":"system","content":[{"type":"text"},{"type":"image_url"}]}]}"#,
        )));
        assert_eq!(
            value(&b, "post_arg.model", &req).as_deref(),
            Some("deepseek")
        );
        assert_eq!(value(&b, "post_arg.n", &req).as_deref(), Some("3"));
        assert_eq!(value(&b, "post_arg.a.b.c", &req).as_deref(), Some("deep"));
        assert_eq!(value(&b, "post_arg.a.x.c", &req), None);
        let q = var("post_arg.messages[*].content[*].type");
        assert!(b.has(&q, &req, b"image_url"));
        assert!(!b.has(&q, &req, b"audio"));
        assert!(b.has(&var("post_arg.tags"), &req, b"y"));
        assert!(!b.has(&var("post_arg.model"), &req, b"deepseek"));
        // A list has no text.
        assert_eq!(value(&b, "post_arg.tags", &req), None);
    }

    #[test]
    fn multipart_fields() {
        let body =
            "--XyZ\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\nmulti\r\n--XyZ--\r\n";
        let req = head(&format!(
            "POST /_post HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=XyZ\r\nContent-Length: {}\r\n\r\n",
            body.len()
        ));
        let b = RequestBody::new(Some(Bytes::from(body)));
        assert_eq!(value(&b, "post_arg.name", &req).as_deref(), Some("multi"));
    }

    #[test]
    fn graphql_from_body_json_and_query() {
        let q = "query getRepo { owner { name } repo { created } }";
        let req = head(
            "POST /graphql HTTP/1.1\r\nHost: x\r\nContent-Type: application/graphql\r\nContent-Length: 1\r\n\r\n",
        );
        let b = RequestBody::new(Some(Bytes::from(q)));
        assert_eq!(
            value(&b, "graphql_operation", &req).as_deref(),
            Some("query")
        );
        assert_eq!(value(&b, "graphql_name", &req).as_deref(), Some("getRepo"));
        assert!(b.has(&var("graphql_root_fields"), &req, b"owner"));
        assert!(!b.has(&var("graphql_root_fields"), &req, b"name"));

        let req = head(
            "POST /graphql HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1\r\n\r\n",
        );
        let b = RequestBody::new(Some(Bytes::from(
            r#"{"query": "mutation M { addStar { id } }"}"#,
        )));
        assert_eq!(
            value(&b, "graphql_operation", &req).as_deref(),
            Some("mutation")
        );

        let req = head(
            "GET /graphql?query=query%20getRepo%20%7B%20owner%20%7Bname%20%7D%7D HTTP/1.1\r\nHost: x\r\n\r\n",
        );
        let b = RequestBody::new(None);
        assert_eq!(value(&b, "graphql_name", &req).as_deref(), Some("getRepo"));

        // Not GraphQL: no values, no panic.
        let req = head(
            "POST /graphql HTTP/1.1\r\nHost: x\r\nContent-Type: application/graphql\r\nContent-Length: 1\r\n\r\n",
        );
        let b = RequestBody::new(Some(Bytes::from("{{{ not graphql")));
        assert_eq!(value(&b, "graphql_operation", &req), None);
        assert!(!b.has(&var("graphql_root_fields"), &req, b"owner"));
    }

    #[test]
    fn bad_names_are_refused() {
        assert!(BodyVar::parse("post_arg_").unwrap().is_err());
        assert!(BodyVar::parse("post_arg.").unwrap().is_err());
        assert!(BodyVar::parse("post_arg.a[").unwrap().is_err());
        assert!(BodyVar::parse("graphql_other").is_none());
        // A body that was too large to read: nothing matches.
        let req = head(
            "POST /_post HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1\r\n\r\n",
        );
        assert_eq!(value(&RequestBody::new(None), "post_arg.a", &req), None);
    }
}
