//! Configuration fixtures: every `invalid/<case>.yaml` must fail with exactly the messages in
//! `<case>.err`, one `path: message` per line; every `valid/<case>.yaml` must load.
//! `BLESS=1 cargo test -p sluice-config --test fixtures` rewrites the `.err` files (review the
//! diff before committing).

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

fn cases(dir: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(dir);
    let mut v: Vec<_> = std::fs::read_dir(&dir)
        .expect("fixtures directory exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    v.sort();
    assert!(!v.is_empty(), "no fixtures in {}", dir.display());
    v
}

#[test]
fn invalid_configs_fail_with_the_expected_messages() {
    let bless = std::env::var_os("BLESS").is_some();
    let mut failures = Vec::new();
    for case in cases("invalid") {
        let errs = match sluice_config::load_file(&case) {
            Ok(_) => {
                failures.push(format!("{}: loaded, but must fail", case.display()));
                continue;
            }
            Err(e) => e.to_string() + "\n",
        };
        let expected_path = case.with_extension("err");
        if bless {
            std::fs::write(&expected_path, &errs).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&expected_path)
            .unwrap_or_else(|_| panic!("missing {}", expected_path.display()));
        if expected != errs {
            failures.push(format!(
                "{}:\n--- expected\n{expected}--- got\n{errs}",
                case.display()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn valid_configs_load() {
    for case in cases("valid") {
        if let Err(e) = sluice_config::load_file(&case) {
            panic!("{} must load:\n{e}", case.display());
        }
    }
}

#[test]
fn the_full_example_reads_every_setting() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/valid/full.yaml");
    let cfg = sluice_config::load_file(&path).unwrap();
    assert_eq!(cfg.listen.len(), 2);
    assert_eq!(cfg.workers, sluice_config::Workers::Count(2));
    assert_eq!(cfg.timeouts.client_body, sluice_config::Dur::secs(30));
    assert_eq!(cfg.limits.max_request_line, sluice_config::Size(4096));
    assert_eq!(cfg.limits.max_body_size, sluice_config::Size(1 << 20));
    assert_eq!(
        cfg.log.access.as_ref().unwrap().flush,
        sluice_config::Dur::millis(500)
    );
    let up = &cfg.upstreams[0];
    assert_eq!(up.nodes.0.len(), 2);
    assert_eq!(up.nodes.0[0].weight, 3);
    assert_eq!(up.keepalive_pool.requests, 100);
    let listed = &cfg.upstreams[1];
    assert_eq!(listed.nodes.0[1].port, 1983);
    assert_eq!(listed.nodes.0[1].weight, 1);
    assert_eq!(cfg.routes[1].id(), "7");
    assert_eq!(cfg.routes[1].matcher.paths.len(), 2);
    assert_eq!(cfg.routes[1].matcher.hosts.len(), 2);
    assert_eq!(cfg.routes[2].id(), "routes[2]");
    assert_eq!(cfg.routes[2].status, 0);
}

#[test]
fn seed_scenario_4_with_5000_generated_routes_loads_as_generated() {
    // The exact text the APISIX benchmark script writes (api7/apisix-benchmark case 4).
    let mut text = String::from("routes:\n");
    for i in 1..=5000 {
        text.push_str(&format!(
            "\n  - id: {i}\n    uri: /hello{i}\n    upstream:\n      nodes:\n        \"127.0.0.1:1980\": 1\n      type: roundrobin\n"
        ));
    }
    text.push_str("#END\n");
    let cfg = sluice_config::load_str(&text).unwrap();
    assert_eq!(cfg.routes.len(), 5000);
    assert_eq!(cfg.routes[4999].id(), "5000");
    assert_eq!(cfg.routes[4999].uri.as_deref(), Some("/hello5000"));
}

#[test]
fn an_empty_document_is_a_valid_config_with_defaults() {
    let cfg = sluice_config::load_str("").unwrap();
    assert!(cfg.routes.is_empty());
    assert_eq!(cfg.listen[0].addr.to_string(), "0.0.0.0:9080");
    assert_eq!(cfg.limits.max_headers, 100);
}
