//! Request variables and conditions, in APISIX's vocabulary: `remote_addr`, `uri`,
//! `http_x_user` (a header), `arg_page` (a query argument), `cookie_session`, ...; and the
//! `vars` conditions of lua-resty-expr: `[["http_x_canary", "==", "1"], ["arg_v", "~~", "^2"]]`.
//! Parsed at load time; evaluated without allocation except for address variables.

use regex::bytes::Regex;
use serde_json::Value;

use crate::check::Validator;
pub use crate::env::{ConnEnv, Env, Request, Responded};
use crate::http::RequestHead;
pub use crate::keys::{Key, KeyPart};
pub use crate::vars::Var;

/// The right-hand value of `==` and `~=`, compared as lua-resty-expr compares: a number
/// with the variable read as a number, text with its text, `null` with its absence.
#[derive(Debug, Clone)]
enum Operand {
    Text(Vec<u8>),
    Number(f64),
    /// `null`: holds when the variable is missing.
    Nil,
    /// A boolean: never equal to a variable's text (Lua's `"true" == true` is false).
    Never,
}

#[derive(Debug, Clone)]
enum Op {
    Eq(Operand),
    Ne(Operand),
    Gt(f64),
    Ge(f64),
    Lt(f64),
    Le(f64),
    Regex(Regex),
    /// A regex that is plain text, anchored or not (`^/api`, `json$`, `beta`): matched
    /// without the regex engine (a few instructions instead of a few hundred).
    Literal {
        text: Vec<u8>,
        start: bool,
        end: bool,
    },
    In(Vec<Vec<u8>>),
    Has(Vec<u8>),
    IpMatch(Vec<ipnet::IpNet>),
}

/// One condition: `[var, op, value]`, `[var, "!", op, value]` for its negation, or
/// `[var, value]` (`==`, lua-resty-expr's short form).
#[derive(Debug, Clone)]
pub struct Cond {
    var: Var,
    negate: bool,
    op: Op,
}

/// A lua-resty-expr expression (APISIX's `vars`): a list of conditions that must all hold,
/// `["AND" | "OR" | "!AND" | "!OR", expr, expr, ...]`, nested at will.
#[derive(Debug, Clone)]
enum Node {
    Cond(Cond),
    Logic {
        any: bool,
        negate: bool,
        children: Vec<Node>,
    },
}

/// Deepest nesting of an expression: far beyond what anyone writes; a deeper one is refused
/// at load (rather than using up the stack evaluating it).
pub const MAX_DEPTH: usize = 32;

/// A `vars` expression, as lua-resty-expr reads it. Empty: always true.
#[derive(Debug, Clone, Default)]
pub struct Expr(Option<Node>);

/// fault-injection's `vars`: a list of expressions of which one must hold.
#[derive(Debug, Clone, Default)]
pub struct Conds(Vec<Expr>);

fn number_of(v: &[u8]) -> Option<f64> {
    std::str::from_utf8(v)
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
}

const OPERATORS: &str = "==, ~=, >, >=, <, <=, ~~, ~*, in, has, ipmatch";

impl Cond {
    fn parse(items: &[Value], val: &mut Validator) -> Option<Cond> {
        let (negate, var, op, value) = match items {
            [var, bang, op, value] if bang.as_str() == Some("!") => (true, var, Some(op), value),
            [_, _, _, _] => {
                val.error("a 4-item condition must be [variable, \"!\", operator, value]");
                return None;
            }
            [var, op, value] => (false, var, Some(op), value),
            // lua-resty-expr's short form: [var, value] is `==`.
            [var, value] if value.as_str().is_none_or(|s| !is_operator(s)) => {
                (false, var, None, value)
            }
            _ => {
                val.error("must be [variable, operator, value]");
                return None;
            }
        };
        let var = match var.as_str().map(Var::parse) {
            Some(Ok(var)) => var,
            Some(Err(e)) => {
                val.index(0, |val| val.error(e));
                return None;
            }
            None => {
                val.index(0, |val| val.error("must be a variable name"));
                return None;
            }
        };
        let opname = match op.map(|o| o.as_str().map(str::to_ascii_lowercase)) {
            None => "==".to_owned(),
            Some(Some(o)) => o,
            Some(None) => {
                val.error(format!("the operator must be text, one of {OPERATORS}"));
                return None;
            }
        };
        let num = |val: &mut Validator| -> Option<f64> {
            let n = value
                .as_f64()
                .or_else(|| value.as_str().and_then(|s| s.trim().parse().ok()));
            if n.is_none() {
                val.error(format!(
                    "operator \"{opname}\" compares numbers: the value must be a number, got {value}"
                ));
            }
            n
        };
        let operand = match value {
            Value::String(s) => Operand::Text(s.as_bytes().to_vec()),
            Value::Number(n) => n.as_f64().map_or(Operand::Never, Operand::Number),
            Value::Null => Operand::Nil,
            Value::Bool(_) => Operand::Never,
            _ => {
                if matches!(opname.as_str(), "==" | "~=") {
                    val.error(format!(
                        "operator \"{opname}\" needs a string, a number, a boolean or null"
                    ));
                    return None;
                }
                Operand::Never
            }
        };
        let op = match opname.as_str() {
            "==" => Op::Eq(operand),
            "~=" => Op::Ne(operand),
            ">" => Op::Gt(num(val)?),
            ">=" => Op::Ge(num(val)?),
            "<" => Op::Lt(num(val)?),
            "<=" => Op::Le(num(val)?),
            "~~" | "~*" => {
                let Some(src) = value.as_str() else {
                    val.error(format!("operator \"{opname}\" needs a regex (a string)"));
                    return None;
                };
                match literal(src).filter(|_| opname == "~~") {
                    Some(op) => op,
                    None => {
                        let src = if opname == "~*" {
                            format!("(?i){src}")
                        } else {
                            src.to_owned()
                        };
                        match Regex::new(&src) {
                            Ok(r) => Op::Regex(r),
                            Err(e) => {
                                val.error(format!("invalid regex: {e}"));
                                return None;
                            }
                        }
                    }
                }
            }
            "in" => match value.as_array() {
                Some(list) if list.iter().all(Value::is_string) => Op::In(
                    list.iter()
                        .filter_map(Value::as_str)
                        .map(|s| s.as_bytes().to_vec())
                        .collect(),
                ),
                Some(_) => {
                    // lua-resty-expr compares with Lua's `==`: a number never equals the
                    // variable's text, so such a condition could never hold.
                    val.error(
                        "operator \"in\" compares text: write each value as a string (\"1\", not 1)",
                    );
                    return None;
                }
                None => {
                    val.error("operator \"in\" needs a list of strings");
                    return None;
                }
            },
            "has" => match value.as_str() {
                Some(s) => Op::Has(s.as_bytes().to_vec()),
                None => {
                    val.error("operator \"has\" needs a string");
                    return None;
                }
            },
            "ipmatch" => {
                let list: Vec<&Value> = match value {
                    Value::Array(a) => a.iter().collect(),
                    other => vec![other],
                };
                let mut nets = Vec::with_capacity(list.len());
                for item in &list {
                    let parsed = item.as_str().and_then(|s| {
                        s.parse::<ipnet::IpNet>()
                            .ok()
                            .or_else(|| s.parse::<std::net::IpAddr>().ok().map(ipnet::IpNet::from))
                    });
                    match parsed {
                        Some(n) => nets.push(n),
                        None => {
                            val.error(format!(
                                "operator \"ipmatch\" needs IP addresses or CIDR ranges, got {item}"
                            ));
                            return None;
                        }
                    }
                }
                if nets.is_empty() {
                    val.error("operator \"ipmatch\" needs at least one IP address or CIDR range");
                    return None;
                }
                Op::IpMatch(nets)
            }
            other => {
                val.error(format!(
                    "unknown operator \"{other}\", expected one of {OPERATORS}"
                ));
                return None;
            }
        };
        Some(Cond { var, negate, op })
    }

    fn holds<E: Env + ?Sized>(&self, req: &RequestHead, cx: &E) -> bool {
        if let Op::Has(x) = &self.op {
            // Only a repeated query argument is a list (APISIX reads it as a table); other
            // variables are text, which `has` never matches.
            let found = match &self.var {
                Var::Arg(a) => req.query_args(a).any(|v| v == x.as_slice()),
                Var::Body(b) => cx.body().is_some_and(|body| body.has(b, req, x)),
                _ => false,
            };
            return found != self.negate;
        }
        // The client's or server's address against ranges: compared as an address, not
        // formatted to text and parsed back.
        if let Op::IpMatch(nets) = &self.op
            && let Some(ip) = match self.var {
                Var::RemoteAddr => Some(cx.client().ip()),
                Var::ServerAddr => Some(cx.server().ip()),
                _ => None,
            }
        {
            let ip = match ip {
                std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, Into::into),
                v4 => v4,
            };
            return nets.iter().any(|n| n.contains(&ip)) != self.negate;
        }
        let value = self.var.value(req, cx);
        let value = value.as_deref();
        let r = match (&self.op, value) {
            (Op::Eq(Operand::Nil), v) => v.is_none(),
            (Op::Ne(Operand::Nil), v) => v.is_some(),
            (Op::Ne(_), None) => true,
            (_, None) => false,
            (Op::Eq(Operand::Text(x)), Some(v)) => v == x.as_slice(),
            (Op::Eq(Operand::Number(x)), Some(v)) => number_of(v) == Some(*x),
            (Op::Eq(Operand::Never), Some(_)) => false,
            (Op::Ne(Operand::Text(x)), Some(v)) => v != x.as_slice(),
            (Op::Ne(Operand::Number(x)), Some(v)) => number_of(v) != Some(*x),
            (Op::Ne(Operand::Never), Some(_)) => true,
            (Op::Gt(x), Some(v)) => number_of(v).is_some_and(|n| n > *x),
            (Op::Ge(x), Some(v)) => number_of(v).is_some_and(|n| n >= *x),
            (Op::Lt(x), Some(v)) => number_of(v).is_some_and(|n| n < *x),
            (Op::Le(x), Some(v)) => number_of(v).is_some_and(|n| n <= *x),
            (Op::Regex(r), Some(v)) => r.is_match(v),
            (Op::Literal { text, start, end }, Some(v)) => match (start, end) {
                (true, true) => v == text.as_slice(),
                (true, false) => v.starts_with(text),
                (false, true) => v.ends_with(text),
                (false, false) => memchr::memmem::find(v, text).is_some(),
            },
            (Op::In(list), Some(v)) => list.iter().any(|x| x.as_slice() == v),
            (Op::IpMatch(nets), Some(v)) => std::str::from_utf8(v)
                .ok()
                .and_then(|s| s.parse::<std::net::IpAddr>().ok())
                .map(|ip| match ip {
                    std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, Into::into),
                    v4 => v4,
                })
                .is_some_and(|ip| nets.iter().any(|n| n.contains(&ip))),
            (Op::Has(_), _) => unreachable!("handled above"),
        };
        r != self.negate
    }
}

/// A regex with no special character but its anchors, as the text it matches.
fn literal(src: &str) -> Option<Op> {
    let (start, rest) = match src.strip_prefix('^') {
        Some(r) => (true, r),
        None => (false, src),
    };
    let (end, body) = match rest.strip_suffix('$') {
        Some(b) if !b.ends_with('\\') => (true, b),
        _ => (false, rest),
    };
    let special = |c: char| "\\.+*?()|[]{}^$".contains(c);
    (!body.is_empty() && !body.contains(special)).then(|| Op::Literal {
        text: body.as_bytes().to_vec(),
        start,
        end,
    })
}

fn is_operator(s: &str) -> bool {
    matches!(
        s.to_ascii_lowercase().as_str(),
        "==" | "~=" | ">" | ">=" | "<" | "<=" | "~~" | "~*" | "in" | "has" | "ipmatch" | "!"
    )
}

fn logic_op(v: &Value) -> Option<(bool, bool)> {
    match v.as_str()?.to_ascii_uppercase().as_str() {
        "AND" => Some((false, false)),
        "OR" => Some((true, false)),
        "!AND" => Some((false, true)),
        "!OR" => Some((true, true)),
        _ => None,
    }
}

impl Node {
    /// One rule of lua-resty-expr's `compile`: a list whose first item is a list (all of
    /// them), a logic operator (it over the rest), or a condition.
    fn parse(items: &[Value], depth: usize, v: &mut Validator) -> Option<Node> {
        if depth > MAX_DEPTH {
            v.error(format!(
                "nested more than {MAX_DEPTH} levels deep; write the expression flatter"
            ));
            return None;
        }
        if items.is_empty() {
            v.error("an empty expression: write a condition, or leave vars out");
            return None;
        }
        if items[0].is_array() {
            return Self::children(items, 0, depth, v).map(|children| Node::Logic {
                any: false,
                negate: false,
                children,
            });
        }
        if let Some((any, negate)) = logic_op(&items[0]) {
            if items.len() < 3 {
                v.error(format!(
                    "\"{}\" needs at least two expressions after it",
                    items[0].as_str().unwrap_or_default()
                ));
                return None;
            }
            return Self::children(&items[1..], 1, depth, v).map(|children| Node::Logic {
                any,
                negate,
                children,
            });
        }
        Cond::parse(items, v).map(Node::Cond)
    }

    fn children(
        items: &[Value],
        offset: usize,
        depth: usize,
        v: &mut Validator,
    ) -> Option<Vec<Node>> {
        let mut out = Vec::with_capacity(items.len());
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            let parsed = v.index(i + offset, |v| match item.as_array() {
                Some(list) => Self::parse(list, depth + 1, v),
                None => {
                    v.error(format!(
                        "must be a condition or an expression (a list), got {item}"
                    ));
                    None
                }
            });
            match parsed {
                Some(n) => out.push(n),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    fn eval<E: Env + ?Sized>(&self, req: &RequestHead, cx: &E) -> bool {
        match self {
            Node::Cond(c) => c.holds(req, cx),
            Node::Logic {
                any,
                negate,
                children,
            } => {
                let r = if *any {
                    children.iter().any(|c| c.eval(req, cx))
                } else {
                    children.iter().all(|c| c.eval(req, cx))
                };
                r != *negate
            }
        }
    }

    fn needs_body(&self) -> bool {
        match self {
            Node::Cond(c) => c.var.needs_body(),
            Node::Logic { children, .. } => children.iter().any(Node::needs_body),
        }
    }

    fn conditions(&self) -> usize {
        match self {
            Node::Cond(_) => 1,
            Node::Logic { children, .. } => children.iter().map(Node::conditions).sum(),
        }
    }
}

impl Expr {
    /// Parses a `vars` expression (`v` points at it), as lua-resty-expr's `new`: `[]` is
    /// always true; otherwise a list of conditions (`[[var, op, value], ...]`, all must
    /// hold) or a logic form (`["OR", [...], [...]]`).
    pub fn parse(value: &Value, v: &mut Validator) -> Option<Expr> {
        let Some(items) = value.as_array() else {
            v.error("must be a list of conditions, like [[\"arg_name\", \"==\", \"jack\"]]");
            return None;
        };
        if items.is_empty() {
            return Some(Expr(None));
        }
        if !items[0].is_array() && logic_op(&items[0]).is_none() {
            v.error(
                "must be a list of conditions, each in brackets: [[\"arg_name\", \"==\", \"jack\"]], not [\"arg_name\", \"==\", \"jack\"]",
            );
            return None;
        }
        Node::parse(items, 0, v).map(|n| Expr(Some(n)))
    }

    /// True when the expression holds for this request (always, when empty).
    pub fn matches<E: Env + ?Sized>(&self, req: &RequestHead, cx: &E) -> bool {
        self.0.as_ref().is_none_or(|n| n.eval(req, cx))
    }

    /// True when there is no condition.
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// True when a condition reads the request body (which must then be read first).
    pub fn needs_body(&self) -> bool {
        self.0.as_ref().is_some_and(Node::needs_body)
    }

    /// How many conditions it has.
    pub fn conditions(&self) -> usize {
        self.0.as_ref().map_or(0, Node::conditions)
    }
}

impl Conds {
    /// Parses fault-injection's `vars` (`v` points at it): a list of expressions
    /// (`[[[var, op, value], ...], [...]]`), of which one must hold. A plain list of conditions
    /// is taken as one expression.
    pub fn parse(value: &Value, v: &mut Validator) -> Option<Conds> {
        let Some(items) = value.as_array() else {
            v.error("must be a list of expressions");
            return None;
        };
        let nested = items
            .first()
            .and_then(Value::as_array)
            .and_then(|c| c.first())
            .is_some_and(|x| x.is_array() || logic_op(x).is_some());
        if !nested {
            return Expr::parse(value, v).map(|e| Conds(vec![e]));
        }
        let mut out = Vec::with_capacity(items.len());
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            match v.index(i, |v| Expr::parse(item, v)) {
                Some(e) => out.push(e),
                None => ok = false,
            }
        }
        ok.then_some(Conds(out))
    }

    /// True when there is no expression, or when one of them holds.
    pub fn matches<E: Env + ?Sized>(&self, req: &RequestHead, cx: &E) -> bool {
        self.0.is_empty() || self.0.iter().any(|e| e.matches(req, cx))
    }

    /// True when there is no condition.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(Expr::is_empty)
    }

    /// True when a condition reads the request body.
    pub fn needs_body(&self) -> bool {
        self.0.iter().any(Expr::needs_body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ResponseEdits;
    use crate::ctx::Ctx;

    fn matches(vars: &str, raw: &str) -> bool {
        let value: Value = serde_json::from_str(vars).unwrap();
        let mut v = Validator::new();
        let expr = Expr::parse(&value, &mut v).unwrap_or_else(|| panic!("{:?}", v.into_errors()));
        let req = crate::http::test_head(raw);
        let cx = Ctx::new(
            "192.0.2.1:5".parse().unwrap(),
            "127.0.0.1:80".parse().unwrap(),
            "r",
            &[],
            ResponseEdits::default(),
        );
        expr.matches(&req, &cx)
    }

    /// The errors of parsing `vars` at `vars`.
    fn errors(vars: &str) -> Vec<String> {
        let value: Value = serde_json::from_str(vars).unwrap();
        let mut v = Validator::new();
        v.field("vars", |v| Expr::parse(&value, v));
        v.into_errors().iter().map(ToString::to_string).collect()
    }

    const REQ: &str = "GET /api/v2?page=3&tag=a&tag=b HTTP/1.1\r\nHost: Shop.Example.com:8080\r\nX-User: jack\r\nX-Age: 17\r\nCookie: s=1\r\n\r\n";

    #[test]
    fn every_operator_as_lua_resty_expr() {
        for (vars, want) in [
            (r#"[["http_x_user", "==", "jack"]]"#, true),
            (r#"[["http_x_user", "==", "jill"]]"#, false),
            (r#"[["arg_page", "==", 3]]"#, true),
            (r#"[["arg_page", "==", 3.0]]"#, true),
            (r#"[["http_x_user", "==", 3]]"#, false),
            (r#"[["http_x_user", "~=", "jill"]]"#, true),
            (r#"[["arg_page", "~=", 3]]"#, false),
            (r#"[["arg_page", ">", 2]]"#, true),
            (r#"[["arg_page", ">", "2"]]"#, true),
            (r#"[["arg_page", ">=", 3]]"#, true),
            (r#"[["arg_page", "<", 3]]"#, false),
            (r#"[["arg_page", "<=", 3]]"#, true),
            (r#"[["uri", "~~", "^/api/v[0-9]+$"]]"#, true),
            (r#"[["uri", "~~", "^/api/"]]"#, true),
            (r#"[["uri", "~~", "^/v2"]]"#, false),
            (r#"[["uri", "~~", "v2$"]]"#, true),
            (r#"[["uri", "~~", "pi/v"]]"#, true),
            (r#"[["uri", "~~", "^/api/v2$"]]"#, true),
            (r#"[["uri", "~~", "^/api$"]]"#, false),
            (r#"[["http_x_user", "~~", "^JACK$"]]"#, false),
            (r#"[["http_x_user", "~*", "^JACK$"]]"#, true),
            (r#"[["arg_tag", "in", ["a", "c"]]]"#, true),
            (r#"[["arg_page", "in", ["1", "2"]]]"#, false),
            // `has`: a repeated query argument is a list; other variables are text.
            (r#"[["arg_tag", "has", "b"]]"#, true),
            (r#"[["arg_tag", "has", "z"]]"#, false),
            (r#"[["http_x_user", "has", "jack"]]"#, false),
            (r#"[["remote_addr", "ipmatch", ["192.0.2.0/24"]]]"#, true),
            (r#"[["remote_addr", "ipmatch", "10.0.0.1"]]"#, false),
            (
                r#"[["host", "==", "shop.example.com"], ["request_method", "==", "GET"]]"#,
                true,
            ),
            (
                r#"[["server_port", "==", 80], ["query_string", "~~", "page=3"]]"#,
                true,
            ),
            (r#"[["http_x_user", "!", "==", "jill"]]"#, true),
            (r#"[["http_x_user", "!", "==", "jack"]]"#, false),
            // The short form [var, value] is `==`; operators are case-insensitive.
            (r#"[["http_x_user", "jack"]]"#, true),
            (r#"[["arg_tag", "IN", ["a"]]]"#, true),
            (r#"[]"#, true),
        ] {
            assert_eq!(matches(vars, REQ), want, "{vars}");
        }
    }

    #[test]
    fn a_missing_variable_or_a_word_where_a_number_is_wanted_does_not_match() {
        for (vars, want) in [
            (r#"[["http_x_missing", "==", "x"]]"#, false),
            (r#"[["http_x_missing", "~=", "x"]]"#, true),
            (r#"[["http_x_missing", "~=", 1]]"#, true),
            (r#"[["http_x_missing", "==", null]]"#, true),
            (r#"[["http_x_user", "==", null]]"#, false),
            (r#"[["http_x_missing", ">", 1]]"#, false),
            (r#"[["http_x_missing", "~~", "."]]"#, false),
            (r#"[["http_x_missing", "in", ["x"]]]"#, false),
            (r#"[["http_x_missing", "ipmatch", "0.0.0.0/0"]]"#, false),
            (r#"[["http_x_user", ">", 1]]"#, false),
            (r#"[["http_x_user", "<", 1]]"#, false),
            (r#"[["http_x_user", "==", true]]"#, false),
        ] {
            assert_eq!(matches(vars, REQ), want, "{vars}");
        }
    }

    #[test]
    fn and_or_and_their_negations_nest() {
        for (vars, want) in [
            (
                r#"["OR", ["arg_page", "==", "9"], ["http_x_user", "==", "jack"]]"#,
                true,
            ),
            (
                r#"["OR", ["arg_page", "==", "9"], ["http_x_user", "==", "jill"]]"#,
                false,
            ),
            (
                r#"["AND", ["arg_page", "==", "3"], ["http_x_user", "==", "jack"]]"#,
                true,
            ),
            (
                r#"["!AND", ["arg_page", "==", "3"], ["http_x_user", "==", "jack"]]"#,
                false,
            ),
            (
                r#"["!OR", ["arg_page", "==", "9"], ["http_x_user", "==", "jill"]]"#,
                true,
            ),
            (
                r#"["and", ["arg_page", "==", "3"], ["http_x_user", "==", "jack"]]"#,
                true,
            ),
            (
                r#"["AND", ["OR", ["arg_page", "==", "9"], ["http_x_age", ">=", 17]], ["!OR", ["http_x_user", "==", "jill"], ["arg_tag", "==", "z"]]]"#,
                true,
            ),
            // A list of lists is all of them (lua-resty-expr), not one of them.
            (
                r#"[[["arg_page", "==", "9"]], [["http_x_user", "==", "jack"]]]"#,
                false,
            ),
            (
                r#"[[["arg_page", "==", "3"]], [["http_x_user", "==", "jack"]]]"#,
                true,
            ),
        ] {
            assert_eq!(matches(vars, REQ), want, "{vars}");
        }
    }

    #[test]
    fn bad_expressions_are_reported_with_paths() {
        let errs = errors(r#"[["nope", "==", 1], ["uri", "<>", 1], ["uri", "~~", "("]]"#);
        assert!(
            errs[0].starts_with("vars[0][0]: unknown variable \"nope\""),
            "{errs:?}"
        );
        assert_eq!(
            errs[1],
            "vars[1]: unknown operator \"<>\", expected one of ==, ~=, >, >=, <, <=, ~~, ~*, in, has, ipmatch"
        );
        assert!(errs[2].starts_with("vars[2]: invalid regex"), "{errs:?}");
        for (vars, want) in [
            (
                r#"["arg_a", "==", "1"]"#,
                "vars: must be a list of conditions, each in brackets",
            ),
            (
                r#"["OR", ["arg_a", "==", "1"]]"#,
                "vars: \"OR\" needs at least two expressions after it",
            ),
            (
                r#"[["arg_a", ">", "many"]]"#,
                "vars[0]: operator \">\" compares numbers: the value must be a number, got \"many\"",
            ),
            (
                r#"[["arg_a", "in", [1, 2]]]"#,
                "vars[0]: operator \"in\" compares text",
            ),
            (
                r#"[["arg_a", "in", "1"]]"#,
                "vars[0]: operator \"in\" needs a list of strings",
            ),
            (
                r#"[["remote_addr", "ipmatch", ["300.1.1.1"]]]"#,
                "vars[0]: operator \"ipmatch\" needs IP addresses or CIDR ranges",
            ),
            (
                r#"[["arg_a", "x", "==", "1"]]"#,
                "vars[0]: a 4-item condition must be",
            ),
            (
                r#"[["arg_a"]]"#,
                "vars[0]: must be [variable, operator, value]",
            ),
            (
                r#"[["post_arg.a[", "==", "1"]]"#,
                "vars[0][0]: \"post_arg.a[\": invalid JSONPath",
            ),
            (r#"[[]]"#, "vars[0]: an empty expression"),
            (
                r#"[5]"#,
                "vars: must be a list of conditions, each in brackets",
            ),
            (
                r#"[["arg_a", "==", "1"], 5]"#,
                "vars[1]: must be a condition or an expression (a list), got 5",
            ),
        ] {
            let errs = errors(vars);
            assert!(errs.iter().any(|e| e.starts_with(want)), "{vars}: {errs:?}");
        }
    }

    #[test]
    fn nesting_beyond_the_bound_is_refused_not_overflowed() {
        // Built as a value: serde_json's reader stops at 128 levels itself.
        let mut deep: Value = serde_json::json!(["arg_a", "==", "1"]);
        for _ in 0..1000 {
            deep = Value::Array(vec![deep]);
        }
        let mut v = Validator::new();
        v.field("vars", |v| Expr::parse(&deep, v));
        let errs: Vec<String> = v.into_errors().iter().map(ToString::to_string).collect();
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(
            errs[0].ends_with("nested more than 32 levels deep; write the expression flatter"),
            "{errs:?}"
        );
        let mut ok = String::from(r#"["arg_a", "==", "1"]"#);
        for _ in 0..MAX_DEPTH {
            ok = format!("[{ok}]");
        }
        assert!(errors(&ok).is_empty());
    }
}
