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
    /// An error at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
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
    files: Vec<crate::files::FileStamp>,
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
        let (bytes, stamp) =
            crate::files::FileStamp::read(path).map_err(|e| format!("cannot read {path}: {e}"))?;
        if !self.files.iter().any(|f| f.path == stamp.path) {
            self.files.push(stamp);
        }
        Ok(bytes)
    }

    /// The files read so far, as they were read.
    pub fn take_files(&mut self) -> Vec<crate::files::FileStamp> {
        std::mem::take(&mut self.files)
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
