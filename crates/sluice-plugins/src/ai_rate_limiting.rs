//! `ai-rate-limiting`: at most `limit` tokens per `time_window` seconds for each AI instance of
//! the route (`ai-proxy`'s, or each of `ai-proxy-multi`'s, with limits of their own under
//! `instances`), or, with `rules`, per key read from the request (`"${http_x_user}"`), each
//! rule with its own limit and window. Tokens are counted as the answer reports them
//! (`limit_strategy`: `total_tokens`, `prompt_tokens`, `completion_tokens`, or `expression`
//! over the usage fields), streamed answers included.
//!
//! A request reserves its prompt's estimated tokens when it starts (a token per four bytes of
//! its messages) on every limit that applies to it, and is refused when one of them has
//! reached its limit in the window (its reservations on the others are taken back); when it
//! ends, streamed or not, cut off or not, each reservation is replaced by what it used (an
//! answer cut off before its usage arrived counts its prompt estimate and a token per four
//! bytes of the text it got). So concurrent requests see each other's prompts at once, and a
//! limit is exceeded by at most the answers of the requests in flight when it was reached.
//!
//! Limits and windows are numbers, or text with variables read per request
//! (`"${http_x_limit ?? 500}"`, APISIX's templates); a request for which one does not read as
//! a whole number in range is answered 500 (or let through with `allow_degradation`), as is
//! one that no rule applies to: a client must not be able to switch its limit off.
//!
//! Windows are aligned on the clock. `policy: local` counts for this node (every worker
//! shares the counts); `redis`, `redis-cluster` and `redis-sentinel` count in Redis across
//! every node that shares it, one `INCRBY` when a request starts and one when it ends (no
//! leases: a model's answer takes far longer than a Redis call, and token counts vary too much
//! to lease). With `ai-proxy-multi` and its `fallback_strategy` naming rate limiting, an
//! instance over its limit is skipped for the next one (rules do not depend on the instance,
//! so a request over a rule's limit is refused).

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
use crate::limit::KeyMap;
use crate::resolve::{Amount, Count, Template};
use crate::util::{Num, check_status};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct InstanceLimit {
    name: String,
    limit: Amount,
    time_window: Amount,
}

/// One of `rules`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct RuleConfig {
    count: Amount,
    time_window: Amount,
    /// Text with variables; a request for which none has a value is not counted by the rule.
    key: String,
    /// Put after `X-AI-` in the quota headers' names (default: the rule's place, from 1).
    #[serde(default)]
    header_prefix: Option<String>,
}

crate::quota::with_redis_fields! {
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    limit: Option<Amount>,
    #[serde(default)]
    time_window: Option<Amount>,
    #[serde(default = "crate::util::yes")]
    show_limit_quota_header: bool,
    #[serde(default = "total_tokens")]
    limit_strategy: String,
    #[serde(default)]
    cost_expr: Option<String>,
    #[serde(default)]
    instances: Option<Vec<InstanceLimit>>,
    #[serde(default = "rejected_code")]
    rejected_code: Num,
    #[serde(default)]
    rejected_msg: Option<String>,
    #[serde(default = "local")]
    policy: String,
    #[serde(default)]
    allow_degradation: bool,
    #[serde(default)]
    rules: Option<Vec<RuleConfig>>,
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

/// `limit` and `time_window` (of the plugin, an instance or a rule), compiled.
fn spec(limit: &Amount, window: &Amount, limit_field: &str, v: &mut Validator) -> Option<Spec> {
    let l = v.field(limit_field, |v| {
        Count::compile(limit, 1, MAX_LIMIT, " tokens", v)
    });
    let w = v.field("time_window", |v| {
        Count::compile(window, 1, MAX_WINDOW, " seconds (one year)", v)
    });
    Some(Spec {
        limit: l?,
        window: w?,
    })
}

/// A header name's characters (RFC 9110's token).
fn token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c))
}

impl Factory {
    /// `rules`, compiled (None: an error was reported).
    fn rules(list: &[RuleConfig], v: &mut Validator) -> Option<Vec<Rule>> {
        if list.is_empty() {
            v.error_at("rules", "must have at least one rule");
            return None;
        }
        let mut ok = true;
        let mut rules: Vec<Rule> = Vec::with_capacity(list.len());
        v.field("rules", |v| {
            for (i, r) in list.iter().enumerate() {
                v.index(i, |v| {
                    let spec = spec(&r.count, &r.time_window, "count", v);
                    // Two rules with one key would count a request twice in one counter.
                    if let Some(j) = list[..i].iter().position(|o| o.key == r.key) {
                        v.error_at(
                            "key",
                            format!("duplicate key \"{}\" (rules[{j}] has it)", r.key),
                        );
                        ok = false;
                    }
                    let key = v.field("key", |v| {
                        Template::parse(&r.key).map_err(|e| v.error(e)).ok()
                    });
                    let prefix = r.header_prefix.clone().unwrap_or_else(|| (i + 1).to_string());
                    if !token(&prefix) {
                        v.error_at(
                            "header_prefix",
                            format!("\"{prefix}\" cannot be in a header name (letters, digits and -._ and the like)"),
                        );
                        ok = false;
                    }
                    match (spec, key) {
                        (Some(spec), Some(key)) => rules.push(Rule {
                            spec,
                            key,
                            headers: [
                                format!("X-AI-{prefix}-RateLimit-Limit"),
                                format!("X-AI-{prefix}-RateLimit-Remaining"),
                                format!("X-AI-{prefix}-RateLimit-Reset"),
                            ],
                        }),
                        _ => ok = false,
                    }
                });
            }
        });
        ok.then_some(rules)
    }
}

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
        let global = match (&c.limit, &c.time_window) {
            (Some(l), Some(w)) => {
                let s = spec(l, w, "limit", v);
                ok &= s.is_some();
                s
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
        let mut instances = Vec::new();
        if let Some(list) = &c.instances {
            if list.is_empty() {
                v.error_at("instances", "must have at least one instance");
                ok = false;
            }
            v.field("instances", |v| {
                for (i, inst) in list.iter().enumerate() {
                    v.index(i, |v| {
                        match spec(&inst.limit, &inst.time_window, "limit", v) {
                            Some(s) => instances.push((Arc::<str>::from(inst.name.as_str()), s)),
                            None => ok = false,
                        }
                    });
                }
            });
        }
        let per_instance = c.limit.is_some() || c.time_window.is_some() || c.instances.is_some();
        let rules = match &c.rules {
            // APISIX's oneOf: limits per instance, or rules.
            Some(_) if per_instance => {
                v.error("give limit and time_window (or instances), or rules, not both");
                ok = false;
                Vec::new()
            }
            Some(list) => Factory::rules(list, v).unwrap_or_else(|| {
                ok = false;
                Vec::new()
            }),
            None if !per_instance => {
                v.error("needs limit and time_window, instances, or rules");
                ok = false;
                Vec::new()
            }
            None => Vec::new(),
        };
        let redis = crate::quota::redis_target(&c.policy, c.redis_fields(), v);
        let (Some(strategy), Some(rejected), Some(redis), true) = (strategy, rejected, redis, ok)
        else {
            return None;
        };
        let owner = cx.owner.to_owned();
        // Counts outlive reloads: keyed by the route (or service) and each limit's key and
        // window, so changing a limit keeps what was used.
        let counts = cx
            .state
            .get_or_insert(&format!("ai-rate-limiting/{owner}"), Counts::default);
        Some(Arc::new(AiRateLimiting {
            instances,
            global,
            rules,
            counts,
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

/// A limit: tokens per window, each fixed or read per request.
struct Spec {
    limit: Count,
    window: Count,
}

impl Spec {
    /// This request's limit and window; None when one does not read as a number in range.
    fn read(&self, req: &RequestHead, cx: &Ctx<'_>) -> Option<(u64, u64)> {
        Some((
            self.limit.value(req, cx, 1, MAX_LIMIT)?,
            self.window.value(req, cx, 1, MAX_WINDOW)?,
        ))
    }

    fn needs_body(&self) -> bool {
        self.limit.needs_body() || self.window.needs_body()
    }
}

/// A rule: its limit, its key, and its quota headers' names.
struct Rule {
    spec: Spec,
    key: Template,
    headers: [String; 3],
}

/// One key's count in this process: the window it is of and the tokens used in it.
#[derive(Debug)]
struct Counter {
    window: u64,
    redis_key: String,
    window_id: AtomicU64,
    used: AtomicI64,
}

impl Counter {
    /// The tokens used in the window `id` (a window begun since the last request starts at 0).
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

/// Every count of a route's limits, by key and window; those of windows long over are
/// forgotten as the map grows.
#[derive(Debug, Default)]
struct Counts(KeyMap<Arc<Counter>>);

/// A limit that applies to this request.
struct Check<'a> {
    key: &'a str,
    limit: u64,
    window: u64,
    headers: Headers<'a>,
}

/// Which quota headers a check writes.
enum Headers<'a> {
    /// `X-AI-RateLimit-Limit-<instance>` and the others.
    Instance(&'a str),
    /// A rule's.
    Rule(&'a [String; 3]),
}

/// A reservation, settled in the log phase (or taken back when another limit refuses).
#[derive(Debug)]
struct Taken {
    counter: Arc<Counter>,
    window_id: u64,
    tokens: u64,
}

/// This request's reservations.
#[derive(Debug, Default)]
struct Reserved(Vec<Taken>);

struct AiRateLimiting {
    /// `instances`' own limits, by instance name.
    instances: Vec<(Arc<str>, Spec)>,
    /// `limit` and `time_window`: for each instance without its own.
    global: Option<Spec>,
    /// `rules` (then neither of the above).
    rules: Vec<Rule>,
    counts: Arc<Counts>,
    owner: String,
    strategy: Strategy,
    rejected: Response,
    headers: bool,
    redis: Option<crate::quota::RedisTarget>,
    fail_open: bool,
}

const SLOT: &str = "ai-rate-limiting";

fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Why a request's limits could not be read.
const NO_RULE: &str = "failed to get rate limit rules";

impl AiRateLimiting {
    /// The limits that apply to a request sent to `instance`. Err: a limit read from the
    /// request is not a number in range, or no rule applies.
    fn checks<'a>(
        &'a self,
        instance: &'a str,
        keys: &'a mut Vec<String>,
        req: &RequestHead,
        cx: &Ctx<'_>,
    ) -> Result<Vec<Check<'a>>, ()> {
        if self.rules.is_empty() {
            let spec = self
                .instances
                .iter()
                .find(|(n, _)| &**n == instance)
                .map(|(_, s)| s)
                .or(self.global.as_ref());
            let Some(spec) = spec else {
                return Ok(Vec::new());
            };
            let (limit, window) = spec.read(req, cx).ok_or(())?;
            return Ok(vec![Check {
                key: instance,
                limit,
                window,
                headers: Headers::Instance(instance),
            }]);
        }
        let mut read = Vec::with_capacity(self.rules.len());
        for r in &self.rules {
            let (key, resolved) = r.key.render(req, cx);
            if resolved == 0 {
                continue;
            }
            let (limit, window) = r.spec.read(req, cx).ok_or(())?;
            keys.push(key);
            read.push((limit, window, &r.headers));
        }
        if read.is_empty() {
            return Err(());
        }
        let keys: &'a Vec<String> = keys;
        Ok(read
            .into_iter()
            .zip(keys.iter())
            .map(|((limit, window, h), key)| Check {
                key,
                limit,
                window,
                headers: Headers::Rule(h),
            })
            .collect())
    }

    fn counter(&self, key: &str, window: u64) -> Arc<Counter> {
        // The text hashed is the counter's identity (and its Redis key's), so it must stay
        // the same across versions; it is written into a buffer kept per thread.
        thread_local! {
            static NAME: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
        }
        let id = NAME.with_borrow_mut(|name| {
            use std::fmt::Write as _;
            name.clear();
            let _ = write!(name, "ai-rate-limiting/{}/{key}/{window}", self.owner);
            crate::quota::stable_hash(name)
        });
        if let Some(c) = self.counts.0.map.get(&id) {
            return c.clone();
        }
        let now = unix_secs();
        // Counts of windows over (by more than one) are of no use to anyone.
        self.counts
            .0
            .sweep(|c| c.window_id.load(Ordering::Relaxed) + 1 >= now / c.window.max(1));
        self.counts
            .0
            .map
            .entry(id)
            .or_insert_with(|| {
                Arc::new(Counter {
                    window,
                    redis_key: format!("sluice:ai-rate-limiting:{id:x}"),
                    window_id: AtomicU64::new(now / window.max(1)),
                    used: AtomicI64::new(0),
                })
            })
            .clone()
    }

    fn quota_headers(&self, cx: &mut Ctx<'_>, h: &Headers<'_>, limit: u64, used: u64, reset: u64) {
        if !self.headers {
            return;
        }
        let values = [
            limit.to_string(),
            limit.saturating_sub(used).to_string(),
            reset.to_string(),
        ];
        match h {
            Headers::Instance(name) => {
                // One buffer for the three names.
                let mut header = String::with_capacity(32 + name.len());
                for (kind, value) in ["Limit", "Remaining", "Reset"].iter().zip(&values) {
                    header.clear();
                    header.push_str("X-AI-RateLimit-");
                    header.push_str(kind);
                    header.push('-');
                    header.push_str(name);
                    cx.response.set_header(&header, value.as_bytes());
                }
            }
            Headers::Rule(names) => {
                for (name, value) in names.iter().zip(&values) {
                    cx.response.set_header(name, value.as_bytes());
                }
            }
        }
    }

    /// Reserves `reserve` tokens under one limit. Ok(Some): admitted; Ok(None): over the
    /// limit; Err: Redis could not be asked.
    async fn take(
        &self,
        c: &Check<'_>,
        reserve: u64,
        cx: &mut Ctx<'_>,
    ) -> Result<Option<Taken>, String> {
        let counter = self.counter(c.key, c.window);
        let now = unix_secs();
        let window_id = now / c.window;
        let reset = c.window - now % c.window;
        let before = match &self.redis {
            None => {
                let used = counter.current(window_id);
                let before = used.load(Ordering::Acquire).max(0) as u64;
                if before >= c.limit {
                    before
                } else {
                    used.fetch_add(reserve as i64, Ordering::AcqRel).max(0) as u64
                }
            }
            Some(target) => {
                let key = format!("{}:{window_id}", counter.redis_key);
                let after = crate::quota::call(
                    target,
                    key.clone(),
                    crate::quota::Op::Add {
                        delta: reserve as i64,
                        ttl: c.window,
                    },
                )
                .await
                .map_err(|e| e.to_string())??;
                let before = (after - reserve as i64).max(0) as u64;
                if before >= c.limit && reserve > 0 {
                    crate::quota::tell(
                        target,
                        key,
                        crate::quota::Op::Add {
                            delta: -(reserve as i64),
                            ttl: c.window,
                        },
                    );
                }
                before
            }
        };
        let admitted = before < c.limit;
        let used = if admitted { before + reserve } else { before };
        self.quota_headers(cx, &c.headers, c.limit, used, reset);
        Ok(admitted.then_some(Taken {
            counter,
            window_id,
            tokens: reserve,
        }))
    }

    /// Adds `delta` tokens to a reservation's count: in its window, or (the window having
    /// ended meanwhile) `fresh` to the window now.
    fn settle(&self, t: &Taken, delta: i64, fresh: u64) {
        if delta == 0 {
            return;
        }
        let c = &t.counter;
        match &self.redis {
            None => {
                let now_window = unix_secs() / c.window.max(1);
                if now_window == t.window_id {
                    c.current(t.window_id).fetch_add(delta, Ordering::AcqRel);
                } else if fresh > 0 {
                    c.current(now_window)
                        .fetch_add(fresh as i64, Ordering::AcqRel);
                }
            }
            Some(target) => crate::quota::tell(
                target,
                format!("{}:{}", c.redis_key, t.window_id),
                crate::quota::Op::Add {
                    delta,
                    ttl: c.window,
                },
            ),
        }
    }

    /// Reserves under every limit that applies to the request's instance, or none.
    async fn take_all(
        &self,
        instance: &str,
        reserve: u64,
        req: &RequestHead,
        cx: &mut Ctx<'_>,
    ) -> Result<bool, Flow> {
        let mut keys = Vec::new();
        let Ok(checks) = self.checks(instance, &mut keys, req, cx) else {
            tracing::warn!(
                plugin = "ai-rate-limiting",
                "{NO_RULE}: no rule applies, or a limit read from the request is not a number in range"
            );
            return Err(if self.fail_open {
                Flow::Continue
            } else {
                Flow::Respond(Response::error(500, NO_RULE))
            });
        };
        let mut taken = Vec::with_capacity(checks.len());
        for c in &checks {
            match self.take(c, reserve, cx).await {
                Ok(Some(t)) => taken.push(t),
                Ok(None) => {
                    for t in &taken {
                        self.settle(t, -(t.tokens as i64), 0);
                    }
                    return Ok(false);
                }
                Err(e) => {
                    for t in &taken {
                        self.settle(t, -(t.tokens as i64), 0);
                    }
                    if let Some(t) = &self.redis {
                        crate::quota::log_outage("ai-rate-limiting", t, self.fail_open, &e);
                    }
                    return Err(if self.fail_open {
                        Flow::Continue
                    } else {
                        Flow::Respond(crate::quota::unavailable())
                    });
                }
            }
        }
        *cx.slot::<Reserved>(SLOT) = Reserved(taken);
        Ok(true)
    }
}

impl Plugin for AiRateLimiting {
    fn needs_body(&self) -> bool {
        self.global.as_ref().is_some_and(Spec::needs_body)
            || self.instances.iter().any(|(_, s)| s.needs_body())
            || self
                .rules
                .iter()
                .any(|r| r.spec.needs_body() || r.key.needs_body())
    }

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
                let repick = ex
                    .repick
                    .clone()
                    .filter(|r| self.rules.is_empty() && r.on_rate_limit());
                match self.take_all(&instance, reserve, req, cx).await {
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
                    Err(flow) => return flow,
                }
            }
            Flow::Respond(self.rejected.clone())
        })
    }

    fn log(&self, _req: &RequestHead, _done: &sluice_core::plugin::Done, cx: &Ctx<'_>) {
        let Some(r) = cx.slot_ref::<Reserved>(SLOT) else {
            return;
        };
        for t in &r.0 {
            // What the answer used (or, for an answer that never came, nothing but the
            // prompt estimate the record holds).
            let used = cx
                .llm
                .as_deref()
                .map_or(t.tokens, |l| self.strategy.cost(&l.usage));
            self.settle(t, used as i64 - t.tokens as i64, used);
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
