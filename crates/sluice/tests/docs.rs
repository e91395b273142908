//! Every YAML example in the README and docs/ goes through what `sluice validate` runs (load,
//! validate, compile), so the documentation cannot drift from the code again: the README's
//! first example once failed to validate.
//!
//! A block that is not a whole configuration is checked in its place: `plugins:` (a plugin
//! map) inside a route. A block that cannot be checked here says why on the line before it:
//! `<!-- docs-test: skip: the reason -->`; one whose certificate files are the reader's is
//! loaded and validated but not compiled: `<!-- docs-test: no-compile: the reason -->`.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use serde_json::Value;

fn markdown_files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = vec![root.join("README.md")];
    for dir in ["docs", "docs/plugins"] {
        let mut v: Vec<PathBuf> = std::fs::read_dir(root.join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "md"))
            .collect();
        v.sort();
        files.extend(v);
    }
    files
}

/// Each ```yaml block: (line number, the annotation before it, its text).
fn yaml_blocks(text: &str) -> Vec<(usize, Option<String>, String)> {
    let mut out = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim_start() == "```yaml" {
            let note = i
                .checked_sub(1)
                .map(|p| lines[p].trim())
                .and_then(|l| l.strip_prefix("<!-- docs-test:"))
                .and_then(|l| l.strip_suffix("-->"))
                .map(|l| l.trim().to_owned());
            let start = i + 1;
            let mut end = start;
            while end < lines.len() && lines[end].trim_start() != "```" {
                end += 1;
            }
            out.push((start, note, lines[start..end].join("\n") + "\n"));
            i = end;
        }
        i += 1;
    }
    out
}

/// The block as a whole configuration: a plugin map goes on a route.
fn as_document(block: &str) -> Value {
    let v = sluice_config::parse_text(block).unwrap_or_else(|e| panic!("not YAML: {e}"));
    let whole = v.as_object().is_some_and(|m| {
        m.keys()
            .all(|k| sluice_config::TOP_LEVEL_KEYS.contains(&k.as_str()))
    });
    if whole {
        return v;
    }
    match v.get("plugins") {
        Some(plugins) if v.as_object().is_some_and(|m| m.len() == 1) => serde_json::json!({
            "routes": [{
                "id": "example",
                "uri": "/*",
                "upstream": {"nodes": {"127.0.0.1:1980": 1}},
                "plugins": plugins,
            }]
        }),
        _ => panic!("neither a configuration nor a plugin map: annotate it"),
    }
}

#[test]
fn every_yaml_example_in_the_readme_and_docs_validates() {
    let plugins = sluice_plugins::builtin();
    let mut failures = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        for (line, note, block) in yaml_blocks(&text) {
            let place = format!("{}:{line}", file.display());
            if let Some(n) = &note
                && n.starts_with("skip:")
            {
                continue;
            }
            let compile = !note.as_ref().is_some_and(|n| n.starts_with("no-compile:"));
            let doc = match std::panic::catch_unwind(|| as_document(&block)) {
                Ok(d) => d,
                Err(_) => {
                    failures.push(format!("{place}: cannot be read as a configuration"));
                    continue;
                }
            };
            checked += 1;
            let result = sluice_config::load_value_with(doc, &plugins).and_then(|cfg| {
                if compile {
                    let state = sluice_core::state::StateRegistry::default();
                    sluice_proxy::compile(&cfg, &plugins, &state).map(|_| ())
                } else {
                    Ok(())
                }
            });
            if let Err(e) = result {
                failures.push(format!("{place} ({name}):\n{e}"));
            }
        }
    }
    assert!(checked >= 20, "only {checked} examples found");
    assert!(
        failures.is_empty(),
        "examples that do not validate:\n{}",
        failures.join("\n\n")
    );
}

/// The limits the docs state for ids and usernames are the binary's: each "ids are 1 to N" and
/// "usernames 1 to N" in the docs is checked at N (accepted) and N + 1 (refused). The docs once
/// said 100 for usernames where the binary (and APISIX) allow 256.
#[test]
fn the_id_and_username_lengths_the_docs_state_are_the_binarys() {
    let mut checked = 0;
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).unwrap().replace('\n', " ");
        for (what, check) in [
            (
                "usernames 1 to ",
                sluice_config::check_username as fn(&str) -> Result<(), String>,
            ),
            ("Ids are 1 to ", sluice_config::check_id),
            ("ids are 1 to ", sluice_config::check_id),
        ] {
            for (at, _) in text.match_indices(what) {
                let rest = &text[at + what.len()..];
                let n: usize = rest
                    .split(|c: char| !c.is_ascii_digit())
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap_or_else(|_| panic!("{}: {what}<number>", file.display()));
                assert!(
                    check(&"a".repeat(n)).is_ok(),
                    "{}: {what}{n}, but {n} is refused",
                    file.display()
                );
                assert!(
                    check(&"a".repeat(n + 1)).is_err(),
                    "{}: {what}{n}, but {} is accepted",
                    file.display(),
                    n + 1
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 3, "only {checked} statements found");
}

/// The plugin table of docs/plugins/README.md is the registry's: every plugin has a row with
/// its priority, rows sorted by priority (highest first), and a page. Adding a plugin needs no
/// list edited anywhere else; this test says what its docs lack.
#[test]
fn the_plugin_table_and_pages_are_the_registrys() {
    use sluice_core::plugin::Plugins;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/plugins");
    let text = std::fs::read_to_string(root.join("README.md")).unwrap();
    let mut rows: Vec<(String, i32)> = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("| [") else {
            continue;
        };
        let cells: Vec<&str> = rest.split('|').map(str::trim).collect();
        let name = cells[0].split(']').next().unwrap().to_owned();
        let priority = cells[1].parse().unwrap_or_else(|_| panic!("{line}"));
        rows.push((name, priority));
    }
    let registry = sluice_plugins::builtin();
    let mut failures = Vec::new();
    for f in registry.all() {
        let name = f.name();
        match rows.iter().find(|(n, _)| n == name) {
            None => failures.push(format!("{name}: no row in docs/plugins/README.md")),
            Some((_, p)) if *p != f.priority() => failures.push(format!(
                "{name}: the table says priority {p}, the plugin {}",
                f.priority()
            )),
            Some(_) => {}
        }
        if !root.join(format!("{name}.md")).exists() {
            failures.push(format!("{name}: no page docs/plugins/{name}.md"));
        }
    }
    for (name, _) in &rows {
        if registry.get(name).is_none() {
            failures.push(format!("{name}: in the table, but not a plugin"));
        }
    }
    for pair in rows.windows(2) {
        if pair[0].1 < pair[1].1 {
            failures.push(format!(
                "{} ({}) is listed before {} ({}): sort the table by priority",
                pair[0].0, pair[0].1, pair[1].0, pair[1].1
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every quote of the code in the docs (a ```rust block after `<!-- docs-test: from PATH -->`,
/// as docs/architecture.md's worked examples are) is in that file as written: a quote that
/// drifted from the code fails here with its place.
#[test]
fn quotes_of_the_code_are_the_code() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut failures = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let Some(path) = line
                .trim()
                .strip_prefix("<!-- docs-test: from ")
                .and_then(|r| r.strip_suffix("-->"))
                .map(str::trim)
            else {
                continue;
            };
            let place = format!("{}:{}", file.display(), i + 1);
            if lines.get(i + 1) != Some(&"```rust") {
                failures.push(format!("{place}: no ```rust block after it"));
                continue;
            }
            let end = lines[i + 2..].iter().position(|l| *l == "```");
            let Some(end) = end else {
                failures.push(format!("{place}: the block does not end"));
                continue;
            };
            let quote = lines[i + 2..i + 2 + end].join("\n");
            match std::fs::read_to_string(root.join(path)) {
                Ok(code) if code.contains(&quote) => checked += 1,
                Ok(_) => failures.push(format!("{place}: not in {path} as quoted:\n{quote}")),
                Err(e) => failures.push(format!("{place}: {path}: {e}")),
            }
        }
    }
    assert!(checked >= 10, "only {checked} quotes found");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
