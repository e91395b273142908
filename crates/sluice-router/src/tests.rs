use std::sync::Arc;

use super::*;

fn p(s: &str) -> PathPattern {
    PathPattern::parse(s).unwrap()
}

fn h(s: &str) -> HostPattern {
    HostPattern::parse(s).unwrap()
}

fn methods(ms: &[Method]) -> MethodSet {
    ms.iter().fold(MethodSet::empty(), |s, m| s.with(*m))
}

struct Table(RouterBuilder<&'static str>);

impl Table {
    fn new() -> Self {
        Table(RouterBuilder::new())
    }
    fn route(mut self, name: &'static str, uri: &str) -> Self {
        self.0.insert(&[p(uri)], &[], MethodSet::ANY, 0, name);
        self
    }
    fn full(
        mut self,
        name: &'static str,
        uris: &[&str],
        hosts: &[&str],
        ms: &[Method],
        priority: i32,
    ) -> Self {
        let uris: Vec<_> = uris.iter().map(|u| p(u)).collect();
        let hosts: Vec<_> = hosts.iter().map(|x| h(x)).collect();
        let ms = if ms.is_empty() {
            MethodSet::ANY
        } else {
            methods(ms)
        };
        self.0.insert(&uris, &hosts, ms, priority, name);
        self
    }
    fn build(self) -> Router<&'static str> {
        self.0.build()
    }
}

fn get<'a>(r: &'a Router<&'static str>, host: &str, path: &str) -> Option<&'a str> {
    r.find(host.as_bytes(), Method::Get, path.as_bytes())
        .copied()
}

#[test]
fn exact_paths_match_only_themselves() {
    let r = Table::new()
        .route("hello", "/hello")
        .route("hi", "/hello/there")
        .build();
    assert_eq!(get(&r, "x", "/hello"), Some("hello"));
    assert_eq!(get(&r, "x", "/hello/there"), Some("hi"));
    assert_eq!(get(&r, "x", "/hello/"), None);
    assert_eq!(get(&r, "x", "/hell"), None);
    assert_eq!(get(&r, "x", "/hellothere"), None);
}

#[test]
fn prefix_routes_match_any_continuation_longest_first() {
    let r = Table::new()
        .route("all", "/*")
        .route("api", "/api/*")
        .route("v1", "/api/v1/*")
        .route("exact", "/api/v1/users")
        .build();
    assert_eq!(get(&r, "x", "/"), Some("all"));
    assert_eq!(get(&r, "x", "/other"), Some("all"));
    assert_eq!(get(&r, "x", "/api"), Some("all"));
    assert_eq!(get(&r, "x", "/api/"), Some("api"));
    assert_eq!(get(&r, "x", "/api/v2/x"), Some("api"));
    assert_eq!(get(&r, "x", "/api/v1/"), Some("v1"));
    assert_eq!(get(&r, "x", "/api/v1/users"), Some("exact"));
    assert_eq!(get(&r, "x", "/api/v1/users/7"), Some("v1"));
}

#[test]
fn prefixes_need_not_end_at_a_slash() {
    let r = Table::new().route("foo", "/foo*").build();
    assert_eq!(get(&r, "x", "/foo"), Some("foo"));
    assert_eq!(get(&r, "x", "/foobar/baz"), Some("foo"));
    assert_eq!(get(&r, "x", "/fo"), None);
}

#[test]
fn parameters_match_one_segment_and_static_wins() {
    let r = Table::new()
        .route("user", "/users/:id")
        .route("me", "/users/me")
        .route("posts", "/users/:id/posts")
        .build();
    assert_eq!(get(&r, "x", "/users/42"), Some("user"));
    assert_eq!(get(&r, "x", "/users/me"), Some("me"));
    assert_eq!(get(&r, "x", "/users/mex"), Some("user"));
    assert_eq!(get(&r, "x", "/users/42/posts"), Some("posts"));
    assert_eq!(get(&r, "x", "/users/"), None);
    assert_eq!(get(&r, "x", "/users/42/"), None);
}

#[test]
fn a_method_mismatch_falls_back_to_a_less_specific_route() {
    let r = Table::new()
        .full("post-only", &["/api/users"], &[], &[Method::Post], 0)
        .full("api", &["/api/*"], &[], &[], 0)
        .build();
    assert_eq!(
        r.find(b"x", Method::Post, b"/api/users").copied(),
        Some("post-only")
    );
    assert_eq!(
        r.find(b"x", Method::Get, b"/api/users").copied(),
        Some("api")
    );
    let r = Table::new()
        .full("post-only", &["/api/users"], &[], &[Method::Post], 0)
        .build();
    assert_eq!(r.find(b"x", Method::Get, b"/api/users").copied(), None);
}

#[test]
fn hosts_exact_then_wildcard_then_any() {
    let r = Table::new()
        .full("any", &["/*"], &[], &[], 0)
        .full("wild", &["/*"], &["*.example.com"], &[], 0)
        .full("deep", &["/*"], &["*.api.example.com"], &[], 0)
        .full("exact", &["/*"], &["www.example.com"], &[], 0)
        .build();
    assert_eq!(get(&r, "www.example.com", "/x"), Some("exact"));
    assert_eq!(get(&r, "WWW.Example.COM:8080", "/x"), Some("exact"));
    assert_eq!(get(&r, "shop.example.com", "/x"), Some("wild"));
    assert_eq!(get(&r, "a.b.example.com", "/x"), Some("wild"));
    assert_eq!(get(&r, "v1.api.example.com", "/x"), Some("deep"));
    assert_eq!(get(&r, "example.com", "/x"), Some("any"));
    assert_eq!(get(&r, "other.org", "/x"), Some("any"));
}

#[test]
fn a_host_route_is_not_served_on_other_hosts() {
    let r = Table::new()
        .full("only", &["/hello"], &["api.example.com"], &[], 0)
        .build();
    assert_eq!(get(&r, "api.example.com", "/hello"), Some("only"));
    assert_eq!(get(&r, "example.com", "/hello"), None);
    assert_eq!(get(&r, "", "/hello"), None);
}

#[test]
fn the_highest_priority_wins_among_matching_routes() {
    let r = Table::new()
        .full("exact-low", &["/api/users"], &[], &[], 0)
        .full("prefix-high", &["/api/*"], &[], &[], 10)
        .full("same-path-a", &["/x"], &[], &[], 1)
        .full("same-path-b", &["/x"], &[], &[], 5)
        .full("tie-first", &["/t"], &[], &[], 3)
        .full("tie-second", &["/t"], &[], &[], 3)
        .build();
    assert_eq!(get(&r, "h", "/api/users"), Some("prefix-high"));
    assert_eq!(get(&r, "h", "/x"), Some("same-path-b"));
    assert_eq!(get(&r, "h", "/t"), Some("tie-first"));
}

#[test]
fn routes_with_several_uris_and_hosts_match_each() {
    let r = Table::new()
        .full("multi", &["/a", "/b/*"], &["one.test", "two.test"], &[], 0)
        .build();
    assert_eq!(get(&r, "one.test", "/a"), Some("multi"));
    assert_eq!(get(&r, "two.test", "/b/c"), Some("multi"));
    assert_eq!(get(&r, "three.test", "/a"), None);
}

#[test]
fn the_seed_scenario_with_5000_routes_finds_the_last_one() {
    let mut b = RouterBuilder::new();
    for i in 1..=5000u32 {
        b.insert(&[p(&format!("/hello{i}"))], &[], MethodSet::ANY, 0, i);
    }
    let r = b.build();
    assert_eq!(r.len(), 5000);
    assert_eq!(
        r.find(b"127.0.0.1:9080", Method::Get, b"/hello5000"),
        Some(&5000)
    );
    assert_eq!(r.find(b"127.0.0.1:9080", Method::Get, b"/hello1"), Some(&1));
    assert_eq!(r.find(b"127.0.0.1:9080", Method::Get, b"/hello50000"), None);
    assert_eq!(r.find(b"127.0.0.1:9080", Method::Get, b"/hello"), None);
}

#[test]
fn an_empty_router_matches_nothing() {
    let r: Router<u32> = RouterBuilder::new().build();
    assert!(r.find(b"h", Method::Get, b"/").is_none());
}

fn key<'a>(
    paths: &'a [PathPattern],
    hosts: &'a [HostPattern],
    priority: i32,
    order: u64,
) -> RouteKey<'a> {
    RouteKey {
        paths,
        hosts,
        methods: MethodSet::ANY,
        priority,
        order,
    }
}

#[test]
fn a_changed_clone_leaves_the_original_untouched() {
    let paths = [p("/a"), p("/b/*")];
    let hosts = [h("x.example.com")];
    let mut r1: Router<&str> = Router::new();
    r1.insert(key(&paths[..1], &[], 0, 1), Arc::new("a"));
    r1.insert(key(&paths[1..], &hosts, 0, 2), Arc::new("b"));
    let mut r2 = r1.clone();
    assert!(r2.remove(key(&paths[..1], &[], 0, 1)));
    r2.insert(key(&[p("/c")], &[], 0, 3), Arc::new("c"));
    assert_eq!(get(&r1, "x", "/a"), Some("a"));
    assert_eq!(get(&r1, "x", "/c"), None);
    assert_eq!(get(&r2, "x", "/a"), None);
    assert_eq!(get(&r2, "x", "/c"), Some("c"));
    assert_eq!(get(&r2, "x.example.com", "/b/1"), Some("b"));
    assert_eq!((r1.len(), r2.len()), (2, 2));
    // Removing something that is not there changes nothing.
    assert!(!r2.remove(key(&paths[..1], &[], 0, 1)));
    assert_eq!(r2.len(), 2);
}

#[test]
fn removal_falls_back_and_recomputes_the_top_priority() {
    let exact = [p("/api/users")];
    let prefix = [p("/api/*")];
    let mut r: Router<&str> = Router::new();
    r.insert(key(&prefix, &[], 0, 1), Arc::new("prefix"));
    r.insert(key(&exact, &[], 10, 2), Arc::new("exact"));
    r.insert(key(&prefix, &[], 5, 3), Arc::new("prefix5"));
    assert_eq!(get(&r, "x", "/api/users"), Some("exact"));
    assert!(r.remove(key(&exact, &[], 10, 2)));
    // The highest priority left is 5: the walk must not stop early at the priority-0 route.
    assert_eq!(get(&r, "x", "/api/users"), Some("prefix5"));
    assert!(r.remove(key(&prefix, &[], 5, 3)));
    assert_eq!(get(&r, "x", "/api/users"), Some("prefix"));
}

#[test]
fn a_host_route_removed_stops_shadowing_nothing() {
    let paths = [p("/")];
    let hosts = [h("a.test"), h("*.b.test")];
    let mut r: Router<&str> = Router::new();
    r.insert(key(&paths, &hosts, 0, 1), Arc::new("host"));
    r.insert(key(&paths, &[], 0, 2), Arc::new("any"));
    assert_eq!(get(&r, "a.test", "/"), Some("host"));
    assert_eq!(get(&r, "x.b.test", "/"), Some("host"));
    assert!(r.remove(key(&paths, &hosts, 0, 1)));
    assert_eq!(get(&r, "a.test", "/"), Some("any"));
    assert_eq!(get(&r, "x.b.test", "/"), Some("any"));
}

/// Random inserts and removals on a persistent table answer every lookup exactly as a table
/// built from scratch with the same routes does.
#[test]
fn incremental_changes_match_a_full_rebuild() {
    let uris = [
        "/", "/*", "/a", "/a/*", "/a/b", "/ab", "/abc/*", "/a/:x", "/a/:x/c", "/a/:x/*", "/u/:id",
        "/u/me", "/hello", "/hello1", "/hello12", "/help", "/he*",
    ];
    let host_pool = ["", "a.test", "*.test", "b.a.test"];
    let requests = [
        "/",
        "/a",
        "/a/",
        "/a/b",
        "/a/b/c",
        "/a/zz/c",
        "/ab",
        "/abc",
        "/abc/d",
        "/u/me",
        "/u/9",
        "/hello",
        "/hello1",
        "/hello12",
        "/hello123",
        "/help",
        "/hex",
        "/nothing",
    ];
    let req_hosts = ["a.test", "x.test", "b.a.test", "other"];
    let methods_pool = [
        MethodSet::ANY,
        methods(&[Method::Get]),
        methods(&[Method::Post]),
    ];
    let mut rng = fastrand::Rng::with_seed(7);
    type Spec = (Vec<PathPattern>, Vec<HostPattern>, MethodSet, i32);
    let mut live: Vec<(u64, Spec)> = Vec::new();
    let mut r: Router<u64> = Router::new();
    let mut next = 0u64;
    for step in 0..3000 {
        if live.is_empty() || rng.u8(..3) > 0 {
            let paths: Vec<PathPattern> = (0..rng.usize(1..3))
                .map(|_| p(uris[rng.usize(..uris.len())]))
                .collect();
            let host = host_pool[rng.usize(..host_pool.len())];
            let hosts = if host.is_empty() {
                vec![]
            } else {
                vec![h(host)]
            };
            let spec = (paths, hosts, methods_pool[rng.usize(..3)], rng.i32(0..3));
            next += 1;
            r.insert(
                RouteKey {
                    paths: &spec.0,
                    hosts: &spec.1,
                    methods: spec.2,
                    priority: spec.3,
                    order: next,
                },
                Arc::new(next),
            );
            live.push((next, spec));
        } else {
            let (order, spec) = live.remove(rng.usize(..live.len()));
            let before = r.clone();
            assert!(r.remove(RouteKey {
                paths: &spec.0,
                hosts: &spec.1,
                methods: spec.2,
                priority: spec.3,
                order,
            }));
            // The table that was in service still holds the route.
            assert_eq!(before.len(), r.len() + 1);
        }
        if step % 10 != 0 {
            continue;
        }
        let mut full = RouterBuilder::new();
        for (order, (paths, hosts, ms, prio)) in &live {
            full.insert(paths, hosts, *ms, *prio, *order);
        }
        let full = full.build();
        assert_eq!(full.len(), r.len());
        for path in requests {
            for host in req_hosts {
                for m in [Method::Get, Method::Post] {
                    assert_eq!(
                        r.find(host.as_bytes(), m, path.as_bytes()),
                        full.find(host.as_bytes(), m, path.as_bytes()),
                        "step {step}: {m} {host} {path}"
                    );
                }
            }
        }
    }
}

#[test]
fn a_candidate_its_own_conditions_refuse_gives_way_to_the_next() {
    // Route vars (APISIX): the higher-priority route is skipped when its conditions fail.
    let paths = [p("/a")];
    let mut r: Router<&str> = Router::new();
    r.insert(key(&paths, &[], 10, 1), Arc::new("canary"));
    r.insert(key(&paths, &[], 0, 2), Arc::new("stable"));
    let pick = |ok: bool| {
        r.find_with(b"x", Method::Get, b"/a", |v| ok || *v != "canary")
            .map(|v| **v)
    };
    assert_eq!(pick(true), Some("canary"));
    assert_eq!(pick(false), Some("stable"));
    assert_eq!(r.find_with(b"x", Method::Get, b"/a", |_| false), None);
}
