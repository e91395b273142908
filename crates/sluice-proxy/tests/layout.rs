//! The data plane's modules depend on each other one way only: no two top-level modules of
//! `sluice-proxy` refer to each other, directly or through others (references inside one
//! module's own files, such as `upstream/` or `conn/`, are that module's business). A new
//! `crate::x` reference that closes a loop fails here, with the loop.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

fn module_of(rel: &Path) -> String {
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_owned()
}

fn walk(dir: &Path, root: &Path, deps: &mut BTreeMap<String, BTreeSet<String>>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            walk(&p, root, deps);
            continue;
        }
        if p.extension().is_none_or(|x| x != "rs") {
            continue;
        }
        let rel = p.strip_prefix(root).unwrap();
        let me = module_of(rel);
        if me == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        let entry = deps.entry(me.clone()).or_default();
        for line in text.lines() {
            let code = line.split("//").next().unwrap_or("");
            let mut rest = code;
            while let Some(i) = rest.find("crate::") {
                rest = &rest[i + "crate::".len()..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() && name != me {
                    entry.insert(name);
                }
            }
        }
    }
}

/// A path from `from` back to `to`, if there is one.
fn path(
    deps: &BTreeMap<String, BTreeSet<String>>,
    from: &str,
    to: &str,
    seen: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    for next in deps.get(from).into_iter().flatten() {
        if next == to {
            return Some(vec![from.to_owned(), next.clone()]);
        }
        if seen.insert(next.clone())
            && let Some(mut p) = path(deps, next, to, seen)
        {
            p.insert(0, from.to_owned());
            return Some(p);
        }
    }
    None
}

#[test]
fn no_two_modules_import_each_other() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut deps = BTreeMap::new();
    walk(&root, &root, &mut deps);
    assert!(deps.contains_key("conn") && deps.contains_key("upstream"));
    for m in deps.keys() {
        if let Some(p) = path(&deps, m, m, &mut BTreeSet::new()) {
            panic!("import loop: {}", p.join(" -> "));
        }
    }
}
