//! The architecture test of every crate: at the level of files, no two files refer to each
//! other, directly or through others, inside any crate of the workspace (a module's own files
//! included: `control/mod.rs` and `control/watch.rs` may not need each other). A reference is
//! a path through `crate::`, `super::` or `self::` (in `use` or in code) that names an item of
//! another file; declaring a child (`mod x;`) is not one. What two files share goes into a
//! third below both (linkerd keeps shared types in `proxy/core` under the stacks that use them).
//!
//! Test code is left out: a `#[cfg(test)]` module, inline or in a file of its own, may build
//! what it tests with the help of any other file.
//!
//! There is none (issue 24 removed the seven there were); one fails here, with its files.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A crate's source files by module path (`["control", "crud"]` for `src/control/crud.rs`).
fn modules(src: &Path) -> BTreeMap<Vec<String>, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let rel = p.strip_prefix(src).unwrap();
            let mut path: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            let last = path.pop().unwrap();
            let stem = last.trim_end_matches(".rs");
            if !matches!(stem, "mod" | "lib" | "main") {
                path.push(stem.to_owned());
            }
            // `src/main.rs` and `src/bin/*` are crates of their own: left out.
            if stem == "main" || rel.starts_with("bin") {
                continue;
            }
            out.insert(path, p);
        }
    }
    out
}

/// The child modules a file declares (`mod x;`): paths may start with their names.
fn children(text: &str) -> Vec<String> {
    declared(text).into_iter().map(|(name, _)| name).collect()
}

/// The child modules a file declares, each with whether it is test code (`#[cfg(test)]` on the
/// line before).
fn declared(text: &str) -> Vec<(String, bool)> {
    let mut previous = "";
    text.lines()
        .filter_map(|l| {
            let test = previous.trim() == "#[cfg(test)]";
            previous = l;
            let l = l.trim_start();
            let l = l
                .strip_prefix("pub(crate) ")
                .or_else(|| l.strip_prefix("pub "))
                .unwrap_or(l);
            let name = l.strip_prefix("mod ")?.strip_suffix(';')?;
            Some((name.trim().to_owned(), test))
        })
        .collect()
}

/// The paths a file names through `crate::`, `super::`, `self::` or one of its `children`, as
/// written (brace groups of `use` expanded), each as its segments (`self` first for a child's).
fn paths(text: &str, children: &[String]) -> Vec<Vec<String>> {
    let code: String = text
        .lines()
        .map(|l| {
            // Comments and doc comments out; a `//` inside a string stays (rare here).
            match l.find("//") {
                Some(i) if !l[..i].contains('"') => &l[..i],
                _ => l,
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    // Inline modules (`mod tests { ... }`): the brace depth inside each one open here. A
    // `super::` inside one names that module's parent, this file.
    let mut depth = 0usize;
    // (depth inside, whether it is test code)
    let mut inline: Vec<(usize, bool)> = Vec::new();
    while i < bytes.len() {
        // Inside a character of several bytes (`é`, `→` in comments and strings): nothing
        // starts there.
        if !code.is_char_boundary(i) {
            i += 1;
            continue;
        }
        match bytes[i] {
            b'{' => depth += 1,
            b'}' => {
                if inline.last().is_some_and(|(d, _)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
            }
            _ => {}
        }
        if code[i..].starts_with("mod ")
            && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_'))
        {
            let rest = &code[i + 4..];
            let name_end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            if rest[name_end..].trim_start().starts_with('{') {
                let before = code[..i].trim_end();
                let test = before.ends_with("#[cfg(test)]") || inline.last().is_some_and(|t| t.1);
                inline.push((depth + 1, test));
            }
        }
        // At the start of a path only: not after a letter, a digit, `_` or `::`.
        let boundary = i == 0
            || !(bytes[i - 1].is_ascii_alphanumeric()
                || bytes[i - 1] == b'_'
                || bytes[i - 1] == b':');
        let rooted = ["crate::", "super::", "self::"]
            .iter()
            .any(|p| code[i..].starts_with(*p));
        let child = children
            .iter()
            .any(|c| code[i..].starts_with(c.as_str()) && code[i + c.len()..].starts_with("::"));
        if boundary && (rooted || child) {
            let prefix = if rooted {
                Vec::new()
            } else {
                vec!["self".to_owned()]
            };
            let (found, end) = expand(&code, i, prefix);
            let in_test = inline.last().is_some_and(|t| t.1);
            for mut p in found.into_iter().filter(|_| !in_test) {
                // Inside inline modules, the first `super`s climb out of them, to this file;
                // `self::` there names the inline module, this file too.
                let levels = inline.len();
                if levels > 0 && p.first().is_some_and(|s| s == "self" || s == "super") {
                    let supers = p.iter().take_while(|s| *s == "super").count();
                    if supers <= levels {
                        continue;
                    }
                    p.drain(..levels);
                }
                out.push(p);
            }
            // The braces of a `use` group are the path's, not blocks.
            i = end.max(i + 1);
            continue;
        } else {
            i += 1;
        }
    }
    out
}

/// Reads one path at `at` (`a::b::{c, d::e}`): every path it names, and where it ends.
fn expand(code: &str, at: usize, prefix: Vec<String>) -> (Vec<Vec<String>>, usize) {
    let bytes = code.as_bytes();
    let mut segs = prefix;
    let mut i = at;
    loop {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if i < bytes.len() && bytes[i] == b'{' {
            // A group: each member with the path so far.
            let mut found = Vec::new();
            i += 1;
            loop {
                while i < bytes.len() && (bytes[i].is_ascii_whitespace() || bytes[i] == b',') {
                    i += 1;
                }
                if i >= bytes.len() || bytes[i] == b'}' {
                    return (found, i + 1);
                }
                let (more, end) = expand(code, i, segs.clone());
                found.extend(more);
                // A member that is no name (`*`): past it.
                i = end.max(i + 1);
            }
        }
        let start = i;
        while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
            i += 1;
        }
        if i == start {
            return (vec![segs], i);
        }
        segs.push(code[start..i].to_owned());
        if code[i..].starts_with("::") {
            i += 2;
        } else {
            return (vec![segs], i);
        }
    }
}

/// The file a path from module `from` names: the longest prefix of it that is a module. An
/// item the crate's root re-exports (`crate::Kind`, `pub use control::Kind` in lib.rs) is its
/// module's. None for the root itself: it declares and re-exports (an item defined there is
/// not followed).
fn target<'a>(
    mods: &'a BTreeMap<Vec<String>, PathBuf>,
    reexports: &'a BTreeMap<String, Vec<String>>,
    from: &[String],
    path: &[String],
) -> Option<&'a Vec<String>> {
    let mut abs: Vec<String> = Vec::new();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => rest = &rest[1..],
        Some("self") => {
            abs = from.to_vec();
            rest = &rest[1..];
        }
        Some("super") => {
            abs = from.to_vec();
            while rest.first().map(String::as_str) == Some("super") {
                abs.pop();
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    abs.extend(rest.iter().cloned());
    let found = (0..=abs.len())
        .rev()
        .find_map(|n| mods.get_key_value(&abs[..n]).map(|(k, _)| k))?;
    if found.is_empty() {
        return abs.first().and_then(|name| reexports.get(name));
    }
    Some(found)
}

/// What the crate's root re-exports: item name → the module that defines it.
fn reexports(mods: &BTreeMap<Vec<String>, PathBuf>, root: &str) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    let none = BTreeMap::new();
    for line in root.split(';') {
        let Some(at) = line.find("pub use ") else {
            continue;
        };
        let text = &line[at + "pub use ".len()..];
        let (found, _) = expand(text, 0, vec!["crate".to_owned()]);
        for p in found {
            let Some(name) = p.last().cloned() else {
                continue;
            };
            if let Some(m) = target(mods, &none, &[], &p)
                && !m.is_empty()
            {
                out.insert(name, m.clone());
            }
        }
    }
    out
}

/// The strongly connected components of more than one file (Tarjan's algorithm).
fn circles(deps: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<BTreeSet<Vec<String>>> {
    struct S<'a> {
        deps: &'a BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<&'a Vec<String>, usize>,
        low: BTreeMap<&'a Vec<String>, usize>,
        stack: Vec<&'a Vec<String>>,
        on: BTreeSet<&'a Vec<String>>,
        out: Vec<BTreeSet<Vec<String>>>,
    }
    fn visit<'a>(s: &mut S<'a>, v: &'a Vec<String>) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on.insert(v);
        for w in s.deps.get(v).into_iter().flatten() {
            let Some((w, _)) = s.deps.get_key_value(w) else {
                continue;
            };
            if !s.index.contains_key(w) {
                visit(s, w);
                let l = s.low[w].min(s.low[v]);
                s.low.insert(v, l);
            } else if s.on.contains(w) {
                let l = s.index[w].min(s.low[v]);
                s.low.insert(v, l);
            }
        }
        if s.low[v] == s.index[v] {
            let mut c = BTreeSet::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(w);
                c.insert(w.clone());
                if w == v {
                    break;
                }
            }
            if c.len() > 1 {
                s.out.push(c);
            }
        }
    }
    let mut s = S {
        deps,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in deps.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// Every crate's circles, each as its sorted files relative to `crates/`.
fn workspace_circles() -> Vec<Vec<String>> {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    let mut names: Vec<PathBuf> = std::fs::read_dir(&crates)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("src").is_dir())
        .collect();
    names.sort();
    for krate in names {
        let src = krate.join("src");
        let mods = modules(&src);
        let Some(root) = mods.get(&Vec::new()) else {
            continue;
        };
        let reexports = reexports(&mods, &std::fs::read_to_string(root).unwrap());
        // Modules that are test code, and everything below them.
        let mut tests: Vec<Vec<String>> = Vec::new();
        for (m, file) in &mods {
            for (child, test) in declared(&std::fs::read_to_string(file).unwrap()) {
                if test {
                    let mut t = m.clone();
                    t.push(child);
                    tests.push(t);
                }
            }
        }
        let mut deps: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
        for (m, file) in mods
            .iter()
            .filter(|(m, _)| !m.is_empty() && !tests.iter().any(|t| m.starts_with(t)))
        {
            let text = std::fs::read_to_string(file).unwrap();
            let entry = deps.entry(m.clone()).or_default();
            for p in paths(&text, &children(&text)) {
                if let Some(t) = target(&mods, &reexports, m, &p)
                    && t != m
                {
                    entry.insert(t.clone());
                }
            }
        }
        for c in circles(&deps) {
            let mut files: Vec<String> = c
                .iter()
                .map(|m| {
                    mods[m]
                        .strip_prefix(&crates)
                        .unwrap()
                        .to_string_lossy()
                        .into_owned()
                })
                .collect();
            files.sort();
            found.push(files);
        }
    }
    found.sort();
    found
}

#[test]
fn no_file_of_any_crate_is_in_an_import_circle() {
    let found = workspace_circles();
    assert!(
        found.is_empty(),
        "import circles (each a set of files, relative to crates/, that refer to each other):\n{}",
        found
            .iter()
            .map(|c| format!("  {}", c.join(", ")))
            .collect::<Vec<_>>()
            .join("\n"),
    );
}

#[test]
fn the_reader_of_paths_expands_groups_and_resolves_super() {
    let text = "mod doc;\nuse super::{body::{ReqBody, RespBody}, Conn};\nlet x = crate::a::b(); // crate::no\nuse doc::Doc; x::doc::Y\nmod tests {\n    use super::*;\n    fn f() { super::super::up::Z; }\n}\nuse super::after;";
    assert_eq!(children(text), ["doc"]);
    let p = paths(text, &children(text));
    let p: Vec<String> = p.iter().map(|s| s.join("::")).collect();
    assert_eq!(
        p,
        [
            "super::body::ReqBody",
            "super::body::RespBody",
            "super::Conn",
            "crate::a::b",
            "self::doc::Doc",
            "super::up::Z",
            "super::after"
        ]
    );
    let mut mods = BTreeMap::new();
    for m in [
        vec![],
        vec!["conn".to_owned()],
        vec!["conn".into(), "body".into()],
    ] {
        mods.insert(m, PathBuf::new());
    }
    let from = vec!["conn".to_owned(), "forward".to_owned()];
    let re = reexports(&mods, "pub use conn::body::{ReqBody, Other};\nmod conn;");
    assert_eq!(re.get("ReqBody"), Some(&vec!["conn".into(), "body".into()]));
    let t = |p: &str| {
        target(
            &mods,
            &re,
            &from,
            &p.split("::").map(str::to_owned).collect::<Vec<_>>(),
        )
        .cloned()
    };
    assert_eq!(
        t("super::body::ReqBody"),
        Some(vec!["conn".into(), "body".into()])
    );
    assert_eq!(t("super::Conn"), Some(vec!["conn".to_owned()]));
    assert_eq!(t("crate::Other"), Some(vec!["conn".into(), "body".into()]));
    assert_eq!(t("crate::nothing::X"), None);
}
