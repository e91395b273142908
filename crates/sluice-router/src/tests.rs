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
