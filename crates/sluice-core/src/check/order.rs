//! Errors in document order: the checks run by stage and by kind of resource (references
//! after shapes, consumers after routes), but a reader goes down the file. Each error's path is
//! looked up in the document it came from; a place the document does not have (a missing
//! field) comes after what its parent has.

use serde_json::Value;

use super::error::{ConfigError, ConfigErrors};

/// One step of an error's path.
#[derive(Debug, PartialEq, Eq)]
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

/// The steps of a path as the errors write it: `routes[3].plugins.limit-count.count`,
/// `upstreams[0].nodes["a:80"]`.
fn steps(path: &str) -> Vec<Step<'_>> {
    let mut out = Vec::new();
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("[\"") {
            // A key written as ["..."] ends at the first "] (keys hold no `"]`).
            let end = r.find("\"]").unwrap_or(r.len());
            out.push(Step::Key(&r[..end]));
            rest = r.get(end + 2..).unwrap_or("");
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']').unwrap_or(r.len());
            match r[..end].parse() {
                Ok(i) => out.push(Step::Index(i)),
                Err(_) => out.push(Step::Key(&r[..end])),
            }
            rest = r.get(end + 1..).unwrap_or("");
        } else {
            let r = rest.strip_prefix('.').unwrap_or(rest);
            let end = r.find(['.', '[']).unwrap_or(r.len());
            out.push(Step::Key(&r[..end]));
            rest = &r[end..];
        }
    }
    out
}

/// Where a path is in `doc`: the position of each step among its siblings.
fn position(doc: &Value, path: &str) -> Vec<usize> {
    let mut at = Some(doc);
    let mut out = Vec::new();
    for step in steps(path) {
        let found = match (&step, at) {
            (Step::Key(k), Some(Value::Object(m))) => {
                m.iter().position(|(key, _)| key == k).map(|i| (i, &m[*k]))
            }
            (Step::Index(i), Some(Value::Array(a))) => a.get(*i).map(|v| (*i, v)),
            _ => None,
        };
        match found {
            Some((i, v)) => {
                out.push(i);
                at = Some(v);
            }
            // Not in the document (a missing field, or a document of which only the top is
            // known): after its siblings; list positions still in their order.
            None => {
                out.push(match step {
                    Step::Index(i) => i,
                    Step::Key(_) => usize::MAX,
                });
                at = None;
            }
        }
    }
    out
}

impl ConfigErrors {
    /// Puts the errors in the order of their places in `doc` (the document they came from),
    /// errors at one place in the order they were found; the same error twice is kept once.
    pub fn sort_by_document(&mut self, doc: &Value) {
        let mut keyed: Vec<(Vec<usize>, ConfigError)> = std::mem::take(&mut self.0)
            .into_iter()
            .map(|e| (position(doc, &e.path), e))
            .collect();
        keyed.sort_by(|a, b| a.0.cmp(&b.0));
        let mut seen = std::collections::HashSet::new();
        self.0 = keyed
            .into_iter()
            .map(|(_, e)| e)
            .filter(|e| seen.insert((e.path.clone(), e.message.clone())))
            .collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_read_back_into_steps() {
        assert_eq!(
            steps(r#"routes[3].upstream.nodes["a:80"].weight"#),
            [
                Step::Key("routes"),
                Step::Index(3),
                Step::Key("upstream"),
                Step::Key("nodes"),
                Step::Key("a:80"),
                Step::Key("weight"),
            ]
        );
        assert_eq!(steps(""), []);
        assert_eq!(
            steps("plugins.limit-count.count"),
            [
                Step::Key("plugins"),
                Step::Key("limit-count"),
                Step::Key("count"),
            ]
        );
    }

    #[test]
    fn errors_follow_the_document() {
        let doc: Value = serde_json::from_str(
            r#"{"status": {"allow": ["x"]}, "log": {"level": "x"}, "routes": [{"uri": 5, "id": "a"}, {"id": "b"}]}"#,
        )
        .unwrap();
        let mut errors = ConfigErrors(
            [
                ("routes[1]", "one of uri or uris is required"),
                ("log.level", "unknown level"),
                ("routes[0].id", "duplicate"),
                ("routes[0].upstream_id", "missing"),
                ("routes[0].uri", "must be text"),
                ("status.allow[0]", "bad"),
                ("log.level", "unknown level"),
                ("", "document"),
            ]
            .into_iter()
            .map(|(p, m)| ConfigError::new(p, m))
            .collect(),
        );
        errors.sort_by_document(&doc);
        let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "",
                "status.allow[0]",
                "log.level",
                "routes[0].uri",
                "routes[0].id",
                "routes[0].upstream_id",
                "routes[1]",
            ]
        );
    }
}
