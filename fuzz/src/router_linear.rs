//! The router against a linear matcher: a random table of routes (paths with static parts,
//! `:param` segments and `*` ends; exact and wildcard hosts; methods; priorities), some of them
//! removed again, and random requests. The tree must give a route that matches the request
//! and has the highest priority among all routes that do, and none only when none matches:
//! what checking every route in turn gives. (Ties between equal priorities are ordered by
//! specificity, which the router's unit tests cover.)

use std::sync::Arc;

use arbitrary::{Arbitrary, Unstructured};
use sluice_router::{
    HostPattern, Method, MethodSet, PathPattern, RouteKey, Router, host_without_port,
};

/// Route pieces from a small alphabet, so that routes and requests meet often.
const SEGMENTS: &[&str] = &["a", "b", "ab", "a.b", ":p", ":q", "", "%41", "x-y"];
const HOSTS: &[&str] = &[
    "a.test",
    "b.a.test",
    "*.a.test",
    "*.test",
    "A.Test",
    "c.b.a.test",
];
const METHODS: &[Method] = &[Method::Get, Method::Post, Method::Put, Method::Delete];

struct Route {
    paths: Vec<PathPattern>,
    hosts: Vec<HostPattern>,
    methods: MethodSet,
    priority: i32,
    order: u64,
}

impl Route {
    fn key(&self) -> RouteKey<'_> {
        RouteKey {
            paths: &self.paths,
            hosts: &self.hosts,
            methods: self.methods,
            priority: self.priority,
            order: self.order,
        }
    }
}

fn pick<'a, T>(u: &mut Unstructured<'_>, from: &'a [T]) -> arbitrary::Result<&'a T> {
    u.choose(from)
}

fn path_pattern(u: &mut Unstructured<'_>) -> arbitrary::Result<Option<PathPattern>> {
    let mut text = String::new();
    for _ in 0..u.int_in_range(0..=3)? {
        text.push('/');
        text.push_str(pick(u, SEGMENTS)?);
    }
    if bool::arbitrary(u)? {
        text.push_str("/*");
    } else if text.is_empty() {
        text.push('/');
    }
    Ok(PathPattern::parse(&text).ok())
}

fn route(u: &mut Unstructured<'_>, order: u64) -> arbitrary::Result<Option<Route>> {
    let mut paths = Vec::new();
    for _ in 0..u.int_in_range(1..=2)? {
        if let Some(p) = path_pattern(u)? {
            paths.push(p);
        }
    }
    let mut hosts = Vec::new();
    for _ in 0..u.int_in_range(0..=2)? {
        hosts.push(HostPattern::parse(pick(u, HOSTS)?).expect("a valid host"));
    }
    let mut methods = if bool::arbitrary(u)? {
        MethodSet::ANY
    } else {
        MethodSet::empty()
    };
    for m in METHODS {
        if bool::arbitrary(u)? {
            methods = methods.with(*m);
        }
    }
    let priority = i32::from(u.int_in_range(-2i8..=2)?);
    Ok((!paths.is_empty()).then_some(Route {
        paths,
        hosts,
        methods,
        priority,
        order,
    }))
}

/// Whether `path` matches `pattern`, read off its text as the documentation states it:
/// static text as is, `:name` one non-empty segment, a `*` end any continuation.
fn path_matches(pattern: &str, path: &[u8]) -> bool {
    let (body, prefix) = match pattern.strip_suffix('*') {
        Some(b) => (b, true),
        None => (pattern, false),
    };
    fn go(pat: &[u8], path: &[u8], prefix: bool) -> bool {
        match pat.first() {
            None => prefix || path.is_empty(),
            Some(b':') => {
                let end = pat.iter().position(|&c| c == b'/').unwrap_or(pat.len());
                let seg = path.iter().position(|&c| c == b'/').unwrap_or(path.len());
                seg > 0 && go(&pat[end..], &path[seg..], prefix)
            }
            Some(_) => {
                // Static text runs to a `:` that follows a `/` (a parameter), as the
                // pattern parser reads it.
                let end = (1..pat.len())
                    .find(|&i| pat[i] == b':' && pat[i - 1] == b'/')
                    .unwrap_or(pat.len());
                path.starts_with(&pat[..end]) && go(&pat[end..], &path[end..], prefix)
            }
        }
    }
    go(body.as_bytes(), path, prefix)
}

fn host_matches(hosts: &[HostPattern], host: &[u8]) -> bool {
    if hosts.is_empty() {
        return true;
    }
    let h = host_without_port(host).to_ascii_lowercase();
    if h.len() > 255 {
        return false;
    }
    hosts.iter().any(|p| match p {
        HostPattern::Exact(name) => *h == **name,
        HostPattern::Wildcard(suffix) => h.ends_with(suffix),
    })
}

/// One input.
pub fn check(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(n) = u.int_in_range(0..=12u64) else {
        return;
    };
    let mut routes = Vec::new();
    for order in 0..n {
        match route(&mut u, order) {
            Ok(Some(r)) => routes.push(r),
            Ok(None) => {}
            Err(_) => return,
        }
    }
    let mut table: Router<u64> = Router::new();
    for r in &routes {
        table.insert(r.key(), Arc::new(r.order));
    }
    // Some routes removed again, from a clone: the original must still answer as before.
    let before = table.clone();
    let mut kept = Vec::new();
    for r in &routes {
        if u.ratio(1, 4).unwrap_or(false) {
            assert!(
                table.remove(r.key()),
                "route {} not found to remove",
                r.order
            );
        } else {
            kept.push(r);
        }
    }
    assert_eq!(table.len(), kept.len());
    let all: Vec<&Route> = routes.iter().collect();
    for _ in 0..8 {
        let Ok(path) = path_pattern_text(&mut u) else {
            return;
        };
        let Ok(host) = pick(
            &mut u,
            &[
                "a.test",
                "b.a.test:8080",
                "c.b.a.test.",
                "x.test",
                "a.test",
                "B.A.TEST",
            ],
        ) else {
            return;
        };
        let Ok(method) = pick(&mut u, METHODS) else {
            return;
        };
        for (t, list) in [(&table, &kept), (&before, &all)] {
            let found = t.find(host.as_bytes(), *method, path.as_bytes()).copied();
            let matching: Vec<&&Route> = list
                .iter()
                .filter(|r| {
                    r.methods.contains(*method)
                        && host_matches(&r.hosts, host.as_bytes())
                        && r.paths
                            .iter()
                            .any(|p| path_matches(p.as_str(), path.as_bytes()))
                })
                .collect();
            let best = matching.iter().map(|r| r.priority).max();
            match found {
                None => assert!(
                    matching.is_empty(),
                    "{method} {host}{path}: none found, but {:?} match",
                    matching.iter().map(|r| r.order).collect::<Vec<_>>()
                ),
                Some(order) => {
                    let r = matching
                        .iter()
                        .find(|r| r.order == order)
                        .unwrap_or_else(|| {
                            panic!("{method} {host}{path}: route {order} does not match")
                        });
                    assert_eq!(
                        Some(r.priority),
                        best,
                        "{method} {host}{path}: route {order} is not the highest priority"
                    );
                }
            }
        }
    }
}

/// A request path from the same alphabet.
fn path_pattern_text(u: &mut Unstructured<'_>) -> arbitrary::Result<String> {
    let mut text = String::new();
    for _ in 0..u.int_in_range(0..=4)? {
        text.push('/');
        let seg = pick(u, SEGMENTS)?;
        text.push_str(seg.trim_start_matches(':'));
    }
    if text.is_empty() || bool::arbitrary(u)? {
        text.push('/');
    }
    Ok(text)
}
