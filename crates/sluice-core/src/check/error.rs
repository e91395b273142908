//! Configuration errors: each one names where the bad input is.

use std::fmt;

/// One problem in a configuration, with the path from the document root to the bad value
/// (`routes[3].upstream.nodes`) and a lowercase message without a final period.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Where the bad value is, from the document root; empty for the document itself.
    pub path: String,
    /// What is wrong and what was expected.
    pub message: String,
}

impl ConfigError {
    /// An error at `path`. The message is made one line (errors are printed one per line).
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: one_line(message.into()),
        }
    }
}

/// Why an I/O call failed, in words: the system's message without `(os error N)`.
pub fn io_reason(e: &std::io::Error) -> String {
    let text = e.to_string();
    match text.rsplit_once(" (os error ") {
        Some((words, _)) => words.to_owned(),
        None => text,
    }
}

/// A message on one line: a library's multi-line message (the regex crate draws a caret under
/// the pattern) keeps its words, not its drawing: `invalid regex: ([: unclosed character
/// class`.
fn one_line(message: String) -> String {
    if !message.contains('\n') {
        return message;
    }
    let lines: Vec<&str> = message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.chars().all(|c| c == '^' || c == '~'))
        .collect();
    // regex: "<prefix>regex parse error:", the pattern, "error: <what>".
    if let [head, pattern, what] = lines.as_slice()
        && let Some(prefix) = head.strip_suffix("regex parse error:")
        && let Some(what) = what.strip_prefix("error: ")
    {
        return format!("{prefix}{pattern}: {what}");
    }
    lines.join(" ")
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Every error found in one configuration, in document order. A configuration with any error
/// is rejected whole: nothing of it is applied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    /// Number of errors.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when no error was found.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many, in words: "1 error", "3 errors".
    pub fn count_text(&self) -> String {
        match self.0.len() {
            1 => "1 error".to_owned(),
            n => format!("{n} errors"),
        }
    }

    /// Every error on one line, joined by `; ` (a log record is one line).
    pub fn one_line(&self) -> String {
        let mut out = String::new();
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                out.push_str("; ");
            }
            out.push_str(&e.to_string().replace(['\n', '\r'], " "));
        }
        out
    }

    /// The errors, in document order.
    pub fn iter(&self) -> std::slice::Iter<'_, ConfigError> {
        self.0.iter()
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

impl From<ConfigError> for ConfigErrors {
    fn from(e: ConfigError) -> Self {
        Self(vec![e])
    }
}

/// Collects errors while walking a configuration, keeping the current path.
#[derive(Debug, Default)]
pub struct Validator {
    path: Vec<Segment>,
    errors: Vec<ConfigError>,
    /// Files read while compiling (certificates, keys, CA bundles), to see later whether
    /// they changed.
    files: Vec<super::files::FileStamp>,
}

#[derive(Debug, Clone)]
enum Segment {
    Field(String),
    Index(usize),
    Key(String),
}

impl Validator {
    /// A validator at the document root.
    pub fn new() -> Self {
        Self::default()
    }

    /// The current path as text: `routes[3].upstream.nodes["a:80"]`.
    pub fn path(&self) -> String {
        render(&self.path)
    }

    /// The path of `field` below the current one, without entering it.
    pub fn path_of(&self, field: &str) -> String {
        let mut p = self.path.clone();
        p.push(Segment::Field(field.to_owned()));
        render(&p)
    }

    /// Runs `f` with `field` appended to the path.
    pub fn field<R>(&mut self, field: &str, f: impl FnOnce(&mut Self) -> R) -> R {
        self.path.push(Segment::Field(field.to_owned()));
        let r = f(self);
        self.path.pop();
        r
    }

    /// Runs `f` with `[index]` appended to the path.
    pub fn index<R>(&mut self, index: usize, f: impl FnOnce(&mut Self) -> R) -> R {
        self.path.push(Segment::Index(index));
        let r = f(self);
        self.path.pop();
        r
    }

    /// Runs `f` with `["key"]` appended to the path.
    pub fn key<R>(&mut self, key: &str, f: impl FnOnce(&mut Self) -> R) -> R {
        self.path.push(Segment::Key(key.to_owned()));
        let r = f(self);
        self.path.pop();
        r
    }

    /// Records an error at the current path.
    pub fn error(&mut self, message: impl Into<String>) {
        let path = self.path();
        self.errors.push(ConfigError::new(path, message));
    }

    /// Records an error at `field` below the current path.
    pub fn error_at(&mut self, field: &str, message: impl Into<String>) {
        let path = self.path_of(field);
        self.errors.push(ConfigError::new(path, message));
    }

    /// Records an error at `fields` (a path of field names) below the current path.
    pub fn error_at_path(&mut self, fields: &[&str], message: impl Into<String>) {
        let mut p = self.path.clone();
        p.extend(fields.iter().map(|f| Segment::Field((*f).to_owned())));
        self.errors.push(ConfigError::new(render(&p), message));
    }

    /// Records an error at the current path unless `ok` holds.
    pub fn ensure(&mut self, ok: bool, message: impl Into<String>) {
        if !ok {
            self.error(message);
        }
    }

    /// Records an error found by a nested parse, whose path is relative to the current one.
    pub fn nested(&mut self, relative_path: &str, message: impl Into<String>) {
        let mut path = self.path();
        if !relative_path.is_empty() && relative_path != "." {
            if !path.is_empty() && !relative_path.starts_with('[') {
                path.push('.');
            }
            path.push_str(relative_path);
        }
        self.errors.push(ConfigError::new(path, message));
    }

    /// Reads a file the configuration names (a certificate, a key, a CA bundle) and remembers
    /// it as read (see [`Validator::take_files`]). The error says which file and why.
    pub fn read_file(&mut self, path: &str) -> Result<Vec<u8>, String> {
        let (bytes, stamp) = super::files::FileStamp::read(path)
            .map_err(|e| format!("cannot read {path}: {}", io_reason(&e)))?;
        if !self.files.iter().any(|f| f.path == stamp.path) {
            self.files.push(stamp);
        }
        Ok(bytes)
    }

    /// The files read so far, as they were read.
    pub fn take_files(&mut self) -> Vec<super::files::FileStamp> {
        std::mem::take(&mut self.files)
    }

    /// How many errors were recorded so far.
    pub fn error_count(&self) -> usize {
        self.errors.len()
    }

    /// The paths of the errors recorded after the first `n` (an unknown field does not count:
    /// it was no setting, and taking it out changed nothing).
    pub fn paths_since(&self, n: usize) -> Vec<String> {
        self.errors[n.min(self.errors.len())..]
            .iter()
            .filter(|e| !e.message.starts_with("unknown field"))
            .map(|e| e.path.clone())
            .collect()
    }

    /// Drops the errors recorded after the first `n` whose path is one of `left_out`, or lies
    /// inside or around one: a later stage's word on a value an earlier one refused and left
    /// out (a default took its place) would only mislead.
    pub fn drop_errors_near(&mut self, n: usize, left_out: &[String]) {
        if left_out.is_empty() || n >= self.errors.len() {
            return;
        }
        let related = |a: &str, b: &str| {
            let inside = |inner: &str, outer: &str| {
                inner
                    .strip_prefix(outer)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
            };
            inside(a, b) || inside(b, a)
        };
        let later = self.errors.split_off(n);
        self.errors.extend(
            later
                .into_iter()
                .filter(|e| !left_out.iter().any(|p| related(&e.path, p))),
        );
    }

    /// True when an error was recorded.
    pub fn has_errors(&self) -> bool {
        !self.errors.is_empty()
    }

    /// The errors recorded so far.
    pub fn finish(self) -> Result<(), ConfigErrors> {
        if self.errors.is_empty() {
            Ok(())
        } else {
            Err(ConfigErrors(self.errors))
        }
    }

    /// Takes the errors recorded so far.
    pub fn into_errors(self) -> Vec<ConfigError> {
        self.errors
    }
}

fn render(path: &[Segment]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Segment::Field(f) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(f);
            }
            Segment::Index(i) => {
                out.push('[');
                out.push_str(&i.to_string());
                out.push(']');
            }
            Segment::Key(k) => {
                out.push_str("[\"");
                out.push_str(k);
                out.push_str("\"]");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_one_line() {
        // The regex crate's message (sluice-plugins' proxy-rewrite test sees the real one).
        let e = "regex parse error:\n    ([\n     ^\nerror: unclosed character class";
        assert_eq!(
            ConfigError::new("vars[0]", format!("invalid regex: {e}")).message,
            "invalid regex: ([: unclosed character class"
        );
        assert_eq!(ConfigError::new("", "a\n  b").message, "a b");
    }

    #[test]
    fn paths_render_fields_indexes_and_keys() {
        let mut v = Validator::new();
        v.field("routes", |v| {
            v.index(3, |v| {
                v.field("upstream", |v| v.key("a:80", |v| v.error("bad")));
            })
        });
        v.nested("", "at root");
        let errs = v.finish().unwrap_err();
        assert_eq!(
            errs.to_string(),
            "routes[3].upstream[\"a:80\"]: bad\nat root"
        );
    }
}
