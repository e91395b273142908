//! Router cost by table size: compile time, lookup time and the cost of changing one route (on
//! a copy of the table, as a live update does) for 1, 5,000 and 100,000 routes.
//! A plain timing loop (no criterion): `cargo bench -p sluice-router`. Lookup cost must not
//! grow with the number of routes; compiling 100,000 routes must take well under a second.

#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::time::Instant;

use sluice_router::{HostPattern, Method, MethodSet, PathPattern, RouteKey, RouterBuilder};

fn build(n: usize, with_hosts: bool) -> (sluice_router::Router<usize>, f64) {
    let patterns: Vec<(PathPattern, Vec<HostPattern>)> = (0..n)
        .map(|i| {
            let uri = match i % 4 {
                0 => format!("/hello{i}"),
                1 => format!("/api/v{i}/*"),
                2 => format!("/users{i}/:id/posts"),
                _ => format!("/static/{i}/index.html"),
            };
            let hosts = if with_hosts && i % 2 == 0 {
                vec![HostPattern::parse(&format!("svc{i}.example.com")).unwrap()]
            } else {
                vec![]
            };
            (PathPattern::parse(&uri).unwrap(), hosts)
        })
        .collect();
    let start = Instant::now();
    let mut b = RouterBuilder::new();
    for (i, (p, h)) in patterns.iter().enumerate() {
        b.insert(std::slice::from_ref(p), h, MethodSet::ANY, 0, i);
    }
    b.insert(
        &[PathPattern::parse("/hello").unwrap()],
        &[],
        MethodSet::ANY,
        0,
        usize::MAX,
    );
    let r = b.build();
    (r, start.elapsed().as_secs_f64())
}

fn main() {
    println!(
        "{:>8} {:>6} {:>12} {:>16} {:>16} {:>16}",
        "routes", "hosts", "compile ms", "hit ns/lookup", "miss ns/lookup", "change µs"
    );
    for &with_hosts in &[false, true] {
        for &n in &[1usize, 5_000, 100_000] {
            let (r, secs) = build(n, with_hosts);
            let iters = 2_000_000;
            let t = Instant::now();
            for _ in 0..iters {
                black_box(r.find(
                    black_box(b"127.0.0.1:9080"),
                    Method::Get,
                    black_box(b"/hello"),
                ));
            }
            let hit = t.elapsed().as_nanos() as f64 / iters as f64;
            let t = Instant::now();
            for _ in 0..iters {
                black_box(r.find(
                    black_box(b"127.0.0.1:9080"),
                    Method::Get,
                    black_box(b"/nothing/here"),
                ));
            }
            let miss = t.elapsed().as_nanos() as f64 / iters as f64;
            // One route changed on a copy of the table in service: what a live update costs.
            let changes = 1000;
            let t = Instant::now();
            for k in 0..changes {
                let mut next = r.clone();
                let old = [PathPattern::parse("/hello").unwrap()];
                let key = |order| RouteKey {
                    paths: &old,
                    hosts: &[],
                    methods: MethodSet::ANY,
                    priority: 0,
                    order,
                };
                assert!(next.remove(key(n as u64)));
                next.insert(key(n as u64), std::sync::Arc::new(k));
                black_box(next);
            }
            let change = t.elapsed().as_secs_f64() * 1e6 / changes as f64;
            println!(
                "{n:>8} {with_hosts:>6} {:>12.1} {hit:>16.1} {miss:>16.1} {change:>16.1}",
                secs * 1000.0
            );
        }
    }
}
