//! XML bodies as APISIX's body-transformer sees them: the table xml2lua's tree handler builds
//! (its `xmlhandler.tree` with `stripWS` and `expandEntities`), made here by `quick-xml` in
//! linear time. xml2lua's own parser is Lua string patterns, several of them quadratic on
//! input a client chooses (a long tag name, an unclosed `<?`), run inside C calls that the
//! interpreter's instruction budget cannot interrupt; this reproduces its tree instead:
//!
//! - an element is a table: its text pieces (trimmed, empty ones dropped) in its array part,
//!   each child name a list of the children of that name, `_attr` its attributes (names as
//!   written, `xmlns:x` included) when it has any;
//! - then reduced as xml2lua's `tree:reduce`: a table with exactly one text piece and no
//!   attributes becomes that text (children and all), and a list of one becomes its element.
//!
//! Then APISIX's `remove_namespace`: a name loses its prefix (`soap:Body` is `Body`, the
//! attribute `xmlns:ns2` is `ns2`) and an empty element is "". (APISIX does it in Lua with
//! `k:match(".*:(.*)")`, quadratic on a long name; here it is a search for the last colon.)
//! Malformed XML (an end tag that does not match, a broken tag) is an error.

use quick_xml::events::Event;

/// Deeper nesting is refused (the tree is built and reduced recursively).
const MAX_DEPTH: usize = 256;

/// An element, before reduction.
#[derive(Debug, Default)]
struct Node {
    texts: Vec<String>,
    /// Children by name, in the order the names first appear.
    children: Vec<(String, Vec<Node>)>,
    attrs: Option<Vec<(String, String)>>,
}

impl Node {
    fn push_child(&mut self, name: String, node: Node) {
        match self.children.iter_mut().find(|(n, _)| *n == name) {
            Some((_, list)) => list.push(node),
            None => self.children.push((name, vec![node])),
        }
    }
}

/// Lua's `%s`: space, tab, newline, vertical tab, form feed, carriage return.
fn strip(s: &str) -> &str {
    s.trim_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r'])
}

/// Parses `body` into xml2lua's tree, reduced. Err: why it is not XML xml2lua would take.
fn parse(body: &[u8]) -> Result<Node, String> {
    let mut reader = quick_xml::Reader::from_reader(body);
    reader.config_mut().check_end_names = true;
    let mut stack: Vec<(String, Node)> = vec![(String::new(), Node::default())];
    let mut text = String::new();
    // Text between tags is one piece, its references expanded, then trimmed.
    let flush = |text: &mut String, stack: &mut Vec<(String, Node)>| {
        let t = strip(text);
        if !t.is_empty()
            && let Some((_, top)) = stack.last_mut()
        {
            top.texts.push(t.to_owned());
        }
        text.clear();
    };
    let at = |reader: &quick_xml::Reader<&[u8]>| reader.buffer_position();
    loop {
        let event = reader
            .read_event()
            .map_err(|e| format!("{e} at byte {}", at(&reader)))?;
        match event {
            Event::Start(_) | Event::Empty(_) if stack.len() > MAX_DEPTH => {
                return Err(format!("elements nested deeper than {MAX_DEPTH}"));
            }
            Event::Start(e) => {
                flush(&mut text, &mut stack);
                let node = element(&e)?;
                let name = String::from_utf8_lossy(e.name().as_ref()).into_owned();
                stack.push((name, node));
            }
            Event::Empty(e) => {
                flush(&mut text, &mut stack);
                let node = element(&e)?;
                let name = String::from_utf8_lossy(e.name().as_ref()).into_owned();
                if let Some((_, top)) = stack.last_mut() {
                    top.push_child(name, node);
                }
            }
            Event::End(_) => {
                flush(&mut text, &mut stack);
                let Some((name, node)) = stack.pop() else {
                    return Err("an end tag without its start".into());
                };
                let Some((_, parent)) = stack.last_mut() else {
                    return Err("an end tag without its start".into());
                };
                parent.push_child(name, node);
            }
            Event::Text(t) => {
                let s = t.decode().map_err(|e| e.to_string())?;
                text.push_str(&s);
            }
            Event::GeneralRef(r) => {
                let name = r.decode().map_err(|e| e.to_string())?;
                match r.resolve_char_ref() {
                    Ok(Some(c)) => text.push(c),
                    _ => match quick_xml::escape::resolve_predefined_entity(&name) {
                        Some(v) => text.push_str(v),
                        // xml2lua leaves a reference it does not know as it is.
                        None => {
                            text.push('&');
                            text.push_str(&name);
                            text.push(';');
                        }
                    },
                }
            }
            Event::CData(c) => {
                flush(&mut text, &mut stack);
                let s = String::from_utf8_lossy(&c).into_owned();
                if let Some((_, top)) = stack.last_mut() {
                    top.texts.push(s);
                }
            }
            Event::Comment(_) | Event::Decl(_) | Event::PI(_) | Event::DocType(_) => {
                flush(&mut text, &mut stack);
            }
            Event::Eof => break,
        }
    }
    flush(&mut text, &mut stack);
    if stack.len() != 1 {
        return Err(format!("<{}> is not closed", stack.last().map_or("", |(n, _)| n.as_str())));
    }
    let (_, root) = stack.pop().unwrap_or_default();
    // xml2lua's reduce at the root indexes a parent the root does not have.
    if root.texts.len() == 1 {
        return Err("text outside the document's element".into());
    }
    Ok(root)
}

/// A start tag's node: its attributes, values unescaped.
fn element(e: &quick_xml::events::BytesStart<'_>) -> Result<Node, String> {
    let mut attrs = Vec::new();
    for a in e.attributes() {
        let a = a.map_err(|e| e.to_string())?;
        let name = String::from_utf8_lossy(a.key.as_ref()).into_owned();
        let value = a.unescape_value().map_err(|e| e.to_string())?.into_owned();
        match attrs.iter_mut().find(|(n, _): &&mut (String, String)| *n == name) {
            Some(slot) => slot.1 = value,
            None => attrs.push((name, value)),
        }
    }
    Ok(Node {
        attrs: (!attrs.is_empty()).then_some(attrs),
        ..Node::default()
    })
}

/// xml2lua's reduce of a child list: each element reduced, and a list of one is its element.
fn reduce_list(list: Vec<Node>) -> Value {
    let mut items: Vec<Value> = list.into_iter().map(reduce_node).collect();
    if items.len() == 1 {
        items.pop().unwrap_or(Value::Text(String::new()))
    } else {
        Value::List(items)
    }
}

/// An element with exactly one text piece and no attributes becomes that text.
fn reduce_node(mut n: Node) -> Value {
    if n.texts.len() == 1 && n.attrs.is_none() {
        return Value::Text(n.texts.pop().unwrap_or_default());
    }
    Value::Table {
        texts: n.texts,
        children: n
            .children
            .into_iter()
            .map(|(name, list)| (name, reduce_list(list)))
            .collect(),
        attrs: n.attrs,
    }
}

/// The reduced tree.
enum Value {
    Text(String),
    List(Vec<Value>),
    Table {
        texts: Vec<String>,
        children: Vec<(String, Value)>,
        attrs: Option<Vec<(String, String)>>,
    },
}

/// A name without its namespace prefix: what follows its last colon.
fn local(name: &str) -> &str {
    name.rsplit_once(':').map_or(name, |(_, l)| l)
}

fn to_lua(lua: &mlua::Lua, v: Value) -> mlua::Result<mlua::Value> {
    Ok(match v {
        Value::Table {
            texts,
            children,
            attrs: None,
        } if texts.is_empty() && children.is_empty() => {
            mlua::Value::String(lua.create_string("")?)
        }
        Value::Text(t) => mlua::Value::String(lua.create_string(&t)?),
        Value::List(items) => {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.into_iter().enumerate() {
                t.raw_set(i + 1, to_lua(lua, item)?)?;
            }
            mlua::Value::Table(t)
        }
        Value::Table {
            texts,
            children,
            attrs,
        } => {
            let t = lua.create_table_with_capacity(texts.len(), children.len() + 1)?;
            for (i, s) in texts.into_iter().enumerate() {
                t.raw_set(i + 1, s)?;
            }
            for (name, child) in children {
                t.raw_set(local(&name), to_lua(lua, child)?)?;
            }
            if let Some(attrs) = attrs {
                let a = lua.create_table_with_capacity(0, attrs.len())?;
                for (k, v) in attrs {
                    a.raw_set(local(&k), v)?;
                }
                t.raw_set("_attr", a)?;
            }
            mlua::Value::Table(t)
        }
    })
}

/// The body as xml2lua's reduced tree, in Lua, namespaces removed.
pub(super) fn decode(lua: &mlua::Lua, body: &[u8]) -> mlua::Result<mlua::Value> {
    let root = parse(body).map_err(mlua::Error::runtime)?;
    // The root itself is never reduced (it has no parent); its children are.
    let root = Value::Table {
        texts: root.texts,
        children: root
            .children
            .into_iter()
            .map(|(name, list)| (name, reduce_list(list)))
            .collect(),
        attrs: None,
    };
    match root {
        // The root itself is kept a table, even empty.
        Value::Table { texts, children, .. } if texts.is_empty() && children.is_empty() => {
            lua.create_table().map(mlua::Value::Table)
        }
        root => to_lua(lua, root),
    }
}
