//! Where a value is in a document, as error messages write it: `routes[0].upstream.nodes["a:80"]`.

/// Appends a mapping key to a path as the error paths write it: `a.b` for a plain name,
/// `a["x:1"]` for anything else.
pub fn push_key(path: &mut String, key: &str) {
    let plain = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if plain {
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(key);
    } else {
        path.push_str("[\"");
        path.push_str(key);
        path.push_str("\"]");
    }
}

/// One step of a path: a mapping key or a list position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathSeg {
    /// A mapping key.
    Key(String),
    /// A list index.
    Index(usize),
}

/// A path as the error messages write it: `routes[0].upstream.nodes["a:80"]`.
pub fn render(path: &[PathSeg]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            PathSeg::Key(k) => push_key(&mut out, k),
            PathSeg::Index(i) => {
                out.push('[');
                out.push_str(&i.to_string());
                out.push(']');
            }
        }
    }
    out
}
