//! `ai-rate-limiting`: at most `limit` tokens per `time_window` seconds for each AI instance of
//! the route (`ai-proxy`'s, or each of `ai-proxy-multi`'s, with limits of their own under
//! `instances`). Tokens are counted as the answer reports them (`limit_strategy`:
//! `total_tokens`, `prompt_tokens`, `completion_tokens`, or `expression` over the usage
//! fields), streamed answers included.
//!
//! A request reserves its prompt's estimated tokens when it starts (a token per four bytes of
//! its messages) and is refused when the window's count has reached the limit; when it ends,
//! streamed or not, cut off or not, the reservation is replaced by what it used (an answer cut
//! off before its usage arrived counts its prompt estimate and a token per four bytes of
//! the text it got). So concurrent requests see each other's prompts at once, and the limit
//! is exceeded by at most the answers of the requests in flight when it was reached.
//!
//! Windows are aligned on the clock. `policy: local` counts for this node (every worker
//! shares the counts); `redis`, `redis-cluster` and `redis-sentinel` count in Redis across
//! every node that shares it, one `INCRBY` when a request starts and one when it ends (no
//! leases: a model's answer takes far longer than a Redis call, and token counts vary too much
//! to lease). With `ai-proxy-multi` and its `fallback_strategy` naming rate limiting, an
//! instance over its limit is skipped for the next one.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::llm::Usage;
use sluice_core::plugin::{BuildCx, LocalFuture, Phases, PluginFactory, parse_config};
use sluice_core::{Ctx, Flow, Plugin, Response};

use crate::ai::{self, Exchange};
use crate::util::{Num, check_status, whole};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct InstanceLimit {
    name: String,
    limit: Num,
    time_window: Num,
}

crate::quota::with_redis_fields! {
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    limit: Option<Num>,
    #[serde(default)]
    time_window: Option<Num>,
    #[serde(default = "crate::util::yes")]
    show_limit_quota_header: bool,
    #[serde(default = "total_tokens")]
    limit_strategy: String,
    #[serde(default)]
    cost_expr: Option<String>,
    #[serde(default)]
    instances: Vec<InstanceLimit>,
    #[serde(default = "rejected_code")]
    rejected_code: Num,
    #[serde(default)]
    rejected_msg: Option<String>,
    #[serde(default = "local")]
    policy: String,
    #[serde(default)]
    allow_degradation: bool,
    #[serde(default)]
    rules: Option<Value>,
}
}

fn total_tokens() -> String {
    "total_tokens".into()
}

fn rejected_code() -> Num {
    Num::Whole(503)
}

fn local() -> String {
    "local".into()
}

/// The largest limit (tokens) and window (a year), as limit-count's.
const MAX_LIMIT: u64 = 1_000_000_000_000;
const MAX_WINDOW: u64 = 31_536_000;

pub(crate) struct Factory;

impl PluginFactory for Factory {
    crate::util::describe!("ai-rate-limiting", 1030, Config);

    fn encrypted_fields(&self) -> &'static [&'static str] {
        &["redis_password", "sentinel_password"]
    }

    fn build(
        &self,
        config: &Value,
        cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        let mut ok = true;
        if c.rules.is_some() {
            v.error_at(
                "rules",
                "rules are not supported yet: use limit and time_window, or instances",
            );
            ok = false;
        }
        let strategy = match c.limit_strategy.as_str() {
            "total_tokens" => Some(Strategy::Total),
            "prompt_tokens" => Some(Strategy::Prompt),
            "completion_tokens" => Some(Strategy::Completion),
            "expression" => match c.cost_expr.as_deref() {
                None | Some("") => {
                    v.error_at("cost_expr", "is required when limit_strategy is expression");
                    None
                }
                Some(e) => match CostExpr::parse(e) {
                    Ok(x) => Some(Strategy::Expression(x)),
                    Err(err) => {
                        v.error_at("cost_expr", format!("invalid expression: {err}"));
                        None
                    }
                },
            },
            other => {
                v.error_at("limit_strategy", format!("unknown strategy \"{other}\", expected total_tokens, prompt_tokens, completion_tokens or expression"));
                None
            }
        };
        let rejected = v.field("rejected_code", |v| check_status(c.rejected_code, 200, v));
        let global = match (c.limit, c.time_window) {
            (Some(l), Some(w)) => {
                let l = v.field("limit", |v| whole(l, 1, MAX_LIMIT, " tokens", v));
                let w = v.field("time_window", |v| {
                    whole(w, 1, MAX_WINDOW, " seconds (one year)", v)
                });
                match (l, w) {
                    (Some(l), Some(w)) => Some((l, w)),
                    _ => {
                        ok = false;
                        None
                    }
                }
            }
            (None, None) => None,
            (Some(_), None) => {
                v.error_at("time_window", "is required with limit");
                ok = false;
                None
            }
            (None, Some(_)) => {
                v.error_at("limit", "is required with time_window");
                ok = false;
                None
            }
        };
        let mut per = Vec::new();
        v.field("instances", |v| {
            for (i, inst) in c.instances.iter().enumerate() {
                v.index(i, |v| {
                    let l = v.field("limit", |v| whole(inst.limit, 1, MAX_LIMIT, " tokens", v));
                    let w = v.field("time_window", |v| {
                        whole(inst.time_window, 1, MAX_WINDOW, " seconds (one year)", v)
                    });
                    match (l, w) {
                        (Some(l), Some(w)) => per.push((inst.name.clone(), l, w)),
                        _ => ok = false,
                    }
                });
            }
        });
        if global.is_none() && per.is_empty() && c.rules.is_none() {
            v.error("needs limit and time_window, or instances");
            ok = false;
        }
        let redis = crate::quota::redis_target(&c.policy, c.redis_fields(), v);
        let (Some(strategy), Some(rejected), Some(redis), true) = (strategy, rejected, redis, ok)
        else {
            return None;
        };
        let owner = cx.owner.to_owned();
        let mut limits = Vec::new();
        let make = |name: Option<&str>, limit: u64, window: u64| -> Arc<Counter> {
            let key = format!(
                "ai-rate-limiting/{owner}/{}/{limit}/{window}",
                name.unwrap_or("*")
            );
            cx.state.get_or_insert(&key, || Counter {
                limit,
                window,
                redis_key: format!(
                    "sluice:ai-rate-limiting:{:x}",
                    crate::quota::stable_hash(&key)
                ),
                window_id: AtomicU64::new(0),
                used: AtomicI64::new(0),
            })
        };
        for (name, l, w) in &per {
            limits.push((
                Some(Arc::<str>::from(name.as_str())),
                make(Some(name), *l, *w),
            ));
        }
        let globals = global.map(|(l, w)| {
            let key = format!("ai-rate-limiting/{owner}/*/{l}/{w}");
            (l, w, cx.state.get_or_insert(&key, Globals::default))
        });
        Some(Arc::new(AiRateLimiting {
            limits,
            global: globals,
            owner,
            strategy,
            rejected: Response::error(
                rejected,
                c.rejected_msg.as_deref().unwrap_or("rate limit exceeded"),
            ),
            headers: c.show_limit_quota_header,
            redis,
            fail_open: c.allow_degradation,
        }))
    }
}

/// What counts against the limit.
#[derive(Debug)]
enum Strategy {
    Total,
    Prompt,
    Completion,
    Expression(CostExpr),
}

impl Strategy {
    fn cost(&self, u: &Usage) -> u64 {
        match self {
            Strategy::Total => u.total(),
            Strategy::Prompt => u.prompt,
            Strategy::Completion => u.completion,
            Strategy::Expression(e) => e.eval(u),
        }
    }

    /// What a request reserves when it starts, from its prompt's estimate.
    fn reserve(&self, prompt_estimate: u64) -> u64 {
        match self {
            Strategy::Completion => 0,
            _ => prompt_estimate,
        }
    }
}

/// One limit's count in this process: the window it is of and the tokens used in it.
#[derive(Debug)]
struct Counter {
    limit: u64,
    window: u64,
    redis_key: String,
    window_id: AtomicU64,
    used: AtomicI64,
}

impl Counter {
    fn window_of(&self, now: u64) -> u64 {
        now / self.window.max(1)
    }

    /// Seconds until the window of `now` ends.
    fn reset(&self, now: u64) -> u64 {
        self.window - now % self.window.max(1)
    }

    /// The tokens used in the window of `now` (a window begun since the last request starts
    /// at 0).
    fn current(&self, id: u64) -> &AtomicI64 {
        let seen = self.window_id.load(Ordering::Acquire);
        if seen != id
            && self
                .window_id
                .compare_exchange(seen, id, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            self.used.store(0, Ordering::Release);
        }
        &self.used
    }
}

/// This request's reservation, settled in the log phase.
#[derive(Debug, Default)]
struct Reserved {
    counter: Option<Arc<Counter>>,
    window: u64,
    tokens: u64,
}

struct AiRateLimiting {
    /// `instances`' own limits, by instance name.
    limits: Vec<(Option<Arc<str>>, Arc<Counter>)>,
    /// `limit` and `time_window`: each instance without its own gets a count of this, made
    /// when it is first seen (kept across reloads with the same settings).
    global: Option<(u64, u64, Arc<Globals>)>,
    owner: String,
    strategy: Strategy,
    rejected: Response,
    headers: bool,
    redis: Option<crate::quota::RedisTarget>,
    fail_open: bool,
}

/// The counts of `limit` and `time_window`, by instance.
#[derive(Debug, Default)]
struct Globals(dashmap::DashMap<Arc<str>, Arc<Counter>>);

const SLOT: &str = "ai-rate-limiting";

fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl AiRateLimiting {
    fn counter(&self, instance: &Arc<str>) -> Option<Arc<Counter>> {
        if let Some((_, c)) = self
            .limits
            .iter()
            .find(|(n, _)| n.as_deref() == Some(&**instance))
        {
            return Some(c.clone());
        }
        let (limit, window, globals) = self.global.as_ref()?;
        let c = globals.0.entry(instance.clone()).or_insert_with(|| {
            let key = format!(
                "ai-rate-limiting/{}/{instance}/{limit}/{window}",
                self.owner
            );
            Arc::new(Counter {
                limit: *limit,
                window: *window,
                redis_key: format!(
                    "sluice:ai-rate-limiting:{:x}",
                    crate::quota::stable_hash(&key)
                ),
                window_id: AtomicU64::new(0),
                used: AtomicI64::new(0),
            })
        });
        Some(c.clone())
    }

    fn quota_headers(&self, cx: &mut Ctx<'_>, name: &str, limit: u64, used: u64, reset: u64) {
        if self.headers {
            cx.response.set_header(
                &format!("X-AI-RateLimit-Limit-{name}"),
                limit.to_string().as_bytes(),
            );
            cx.response.set_header(
                &format!("X-AI-RateLimit-Remaining-{name}"),
                limit.saturating_sub(used).to_string().as_bytes(),
            );
            cx.response.set_header(
                &format!("X-AI-RateLimit-Reset-{name}"),
                reset.to_string().as_bytes(),
            );
        }
    }

    /// Reserves for the request's instance. Ok(true): admitted; Ok(false): over the limit;
    /// Err: Redis could not be asked.
    async fn take(
        &self,
        instance: &Arc<str>,
        reserve: u64,
        cx: &mut Ctx<'_>,
    ) -> Result<bool, String> {
        let Some(counter) = self.counter(instance) else {
            return Ok(true);
        };
        let now = unix_secs();
        let window = counter.window_of(now);
        let reset = counter.reset(now);
        let before = match &self.redis {
            None => {
                let used = counter.current(window);
                let before = used.load(Ordering::Acquire).max(0) as u64;
                if before >= counter.limit {
                    before
                } else {
                    used.fetch_add(reserve as i64, Ordering::AcqRel).max(0) as u64
                }
            }
            Some(target) => {
                let key = format!("{}:{window}", counter.redis_key);
                let after = crate::quota::call(
                    target,
                    key.clone(),
                    crate::quota::Op::Add {
                        delta: reserve as i64,
                        ttl: counter.window,
                    },
                )
                .await
                .map_err(|e| e.to_string())??;
                let before = (after - reserve as i64).max(0) as u64;
                if before >= counter.limit && reserve > 0 {
                    crate::quota::tell(
                        target,
                        key,
                        crate::quota::Op::Add {
                            delta: -(reserve as i64),
                            ttl: counter.window,
                        },
                    );
                }
                before
            }
        };
        let admitted = before < counter.limit;
        let used = if admitted { before + reserve } else { before };
        self.quota_headers(cx, instance, counter.limit, used, reset);
        if admitted {
            *cx.slot::<Reserved>(SLOT) = Reserved {
                counter: Some(counter),
                window,
                tokens: reserve,
            };
        }
        Ok(admitted)
    }
}

impl Plugin for AiRateLimiting {
    fn phases(&self) -> Phases {
        Phases::ACCESS_ASYNC.with(Phases::LOG)
    }

    fn access_async<'a>(
        &'a self,
        req: &'a mut RequestHead,
        cx: &'a mut Ctx<'_>,
    ) -> LocalFuture<'a, Flow> {
        Box::pin(async move {
            // An instance over its limit is left for the next when ai-proxy-multi says so;
            // at most as many times as there are instances.
            for _ in 0..64 {
                let ex = cx.slot::<Exchange>(ai::SLOT);
                let Some(instance) = ex.instance.clone() else {
                    return Flow::Continue;
                };
                let reserve = self.strategy.reserve(ex.prompt_estimate);
                let repick = ex.repick.clone().filter(|r| r.on_rate_limit());
                match self.take(&instance, reserve, cx).await {
                    Ok(true) => return Flow::Continue,
                    Ok(false) => {
                        if let Some(r) = repick
                            && r.repick(req, cx)
                        {
                            tracing::debug!(instance = %instance, "over its token limit: the next instance");
                            continue;
                        }
                        return Flow::Respond(self.rejected.clone());
                    }
                    Err(e) => {
                        if let Some(t) = &self.redis {
                            crate::quota::log_outage("ai-rate-limiting", t, self.fail_open, &e);
                        }
                        return if self.fail_open {
                            Flow::Continue
                        } else {
                            Flow::Respond(crate::quota::unavailable())
                        };
                    }
                }
            }
            Flow::Respond(self.rejected.clone())
        })
    }

    fn log(&self, _req: &RequestHead, _done: &sluice_core::plugin::Done, cx: &Ctx<'_>) {
        let Some(r) = cx.slot_ref::<Reserved>(SLOT) else {
            return;
        };
        let Some(counter) = &r.counter else {
            return;
        };
        // What the answer used (or, for an answer that never came, nothing but the prompt
        // estimate the record holds).
        let used = cx
            .llm
            .as_deref()
            .map_or(r.tokens, |l| self.strategy.cost(&l.usage));
        let delta = used as i64 - r.tokens as i64;
        if delta == 0 {
            return;
        }
        match &self.redis {
            None => {
                let now_window = counter.window_of(unix_secs());
                if now_window == r.window {
                    counter.current(r.window).fetch_add(delta, Ordering::AcqRel);
                } else {
                    // The window ended meanwhile: what the answer used counts in this one.
                    counter
                        .current(now_window)
                        .fetch_add(used as i64, Ordering::AcqRel);
                }
            }
            Some(target) => crate::quota::tell(
                target,
                format!("{}:{}", counter.redis_key, r.window),
                crate::quota::Op::Add {
                    delta,
                    ttl: counter.window,
                },
            ),
        }
    }
}

/// `cost_expr`: arithmetic over the usage (`+ - * /`, parentheses, numbers, `min`, `max`,
/// `floor`, `ceil`, `abs`), its names those of the providers' usage fields: `prompt_tokens`,
/// `completion_tokens`, `total_tokens`, `input_tokens`, `output_tokens`,
/// `cache_read_input_tokens`, `cache_creation_input_tokens`, `cached_tokens`,
/// `reasoning_tokens`. Unknown names are 0, as APISIX's. Parsed once; a negative or
/// non-finite result counts 0.
#[derive(Debug)]
pub(crate) struct CostExpr(Node);

#[derive(Debug)]
enum Node {
    Num(f64),
    Var(String),
    Neg(Box<Node>),
    Bin(u8, Box<Node>, Box<Node>),
    Call(String, Vec<Node>),
}

impl CostExpr {
    pub(crate) fn parse(s: &str) -> Result<CostExpr, String> {
        let toks = tokens(s)?;
        let mut p = Parser { toks, at: 0 };
        let n = p.sum()?;
        if p.at != p.toks.len() {
            return Err(format!("unexpected {:?}", p.toks[p.at]));
        }
        Ok(CostExpr(n))
    }

    pub(crate) fn eval(&self, u: &Usage) -> u64 {
        let x = eval(&self.0, u);
        if x.is_finite() && x > 0.0 {
            (x + 0.5).floor() as u64
        } else {
            0
        }
    }
}

fn usage_field(u: &Usage, name: &str) -> f64 {
    (match name {
        "prompt_tokens" => u.prompt,
        "completion_tokens" | "output_tokens" => u.completion,
        "total_tokens" => u.total(),
        "input_tokens" => u
            .prompt
            .saturating_sub(u.cached)
            .saturating_sub(u.cache_written),
        "cache_read_input_tokens" | "cached_tokens" => u.cached,
        "cache_creation_input_tokens" => u.cache_written,
        "reasoning_tokens" => u.reasoning,
        _ => 0,
    }) as f64
}

fn eval(n: &Node, u: &Usage) -> f64 {
    match n {
        Node::Num(x) => *x,
        Node::Var(v) => usage_field(u, v),
        Node::Neg(a) => -eval(a, u),
        Node::Bin(op, a, b) => {
            let (a, b) = (eval(a, u), eval(b, u));
            match op {
                b'+' => a + b,
                b'-' => a - b,
                b'*' => a * b,
                _ => a / b,
            }
        }
        Node::Call(f, args) => {
            let xs: Vec<f64> = args.iter().map(|a| eval(a, u)).collect();
            match f.as_str() {
                "min" => xs.iter().copied().fold(f64::INFINITY, f64::min),
                "max" => xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                "floor" => xs.first().map_or(0.0, |x| x.floor()),
                "ceil" => xs.first().map_or(0.0, |x| x.ceil()),
                _ => xs.first().map_or(0.0, |x| x.abs()),
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(f64),
    Name(String),
    Op(u8),
}

fn tokens(s: &str) -> Result<Vec<Tok>, String> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() || c == b'.' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.') {
                i += 1;
            }
            let x: f64 = s[start..i]
                .parse()
                .map_err(|_| format!("bad number {}", &s[start..i]))?;
            out.push(Tok::Num(x));
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'.') {
                i += 1;
            }
            out.push(Tok::Name(
                s[start..i].trim_start_matches("math.").to_owned(),
            ));
        } else if b"+-*/(),".contains(&c) {
            out.push(Tok::Op(c));
            i += 1;
        } else {
            return Err(format!("unexpected character {:?}", c as char));
        }
    }
    Ok(out)
}

struct Parser {
    toks: Vec<Tok>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.at)
    }

    fn sum(&mut self) -> Result<Node, String> {
        let mut a = self.product()?;
        while let Some(Tok::Op(op @ (b'+' | b'-'))) = self.peek().cloned() {
            self.at += 1;
            a = Node::Bin(op, Box::new(a), Box::new(self.product()?));
        }
        Ok(a)
    }

    fn product(&mut self) -> Result<Node, String> {
        let mut a = self.unary()?;
        while let Some(Tok::Op(op @ (b'*' | b'/'))) = self.peek().cloned() {
            self.at += 1;
            a = Node::Bin(op, Box::new(a), Box::new(self.unary()?));
        }
        Ok(a)
    }

    fn unary(&mut self) -> Result<Node, String> {
        if self.peek() == Some(&Tok::Op(b'-')) {
            self.at += 1;
            return Ok(Node::Neg(Box::new(self.unary()?)));
        }
        self.atom()
    }

    fn atom(&mut self) -> Result<Node, String> {
        let t = self
            .peek()
            .cloned()
            .ok_or("the expression ends too early")?;
        self.at += 1;
        match t {
            Tok::Num(x) => Ok(Node::Num(x)),
            Tok::Op(b'(') => {
                let n = self.sum()?;
                if self.peek() != Some(&Tok::Op(b')')) {
                    return Err("a ( is not closed".into());
                }
                self.at += 1;
                Ok(n)
            }
            Tok::Name(name) if self.peek() == Some(&Tok::Op(b'(')) => {
                if !["min", "max", "floor", "ceil", "abs"].contains(&name.as_str()) {
                    return Err(format!("unknown function {name}"));
                }
                self.at += 1;
                let mut args = vec![self.sum()?];
                while self.peek() == Some(&Tok::Op(b',')) {
                    self.at += 1;
                    args.push(self.sum()?);
                }
                if self.peek() != Some(&Tok::Op(b')')) {
                    return Err(format!("{name}( is not closed"));
                }
                self.at += 1;
                Ok(Node::Call(name, args))
            }
            Tok::Name(name) => Ok(Node::Var(name)),
            Tok::Op(c) => Err(format!("unexpected {:?}", c as char)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_expressions_count_the_usage_fields() {
        let u = Usage {
            prompt: 100,
            completion: 50,
            cached: 30,
            reasoning: 10,
            cache_written: 20,
        };
        let e = |s: &str| CostExpr::parse(s).unwrap().eval(&u);
        assert_eq!(
            e("input_tokens + cache_creation_input_tokens + output_tokens"),
            50 + 20 + 50
        );
        assert_eq!(e("prompt_tokens * 0.5 + completion_tokens * 2"), 150);
        assert_eq!(
            e("max(prompt_tokens, completion_tokens) - (cached_tokens)"),
            70
        );
        assert_eq!(e("math.floor(total_tokens / 4)"), 37);
        assert_eq!(e("unknown_field + 1"), 1);
        assert_eq!(e("0 - total_tokens"), 0);
        assert!(CostExpr::parse("prompt_tokens +").is_err());
        assert!(CostExpr::parse("os.exit(1)").is_err());
        assert!(CostExpr::parse("(1").is_err());
    }
}
