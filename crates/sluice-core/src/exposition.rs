//! Prometheus and OpenMetrics text exposition: what the data plane and the control plane both
//! write their metrics with.

use std::fmt::Write as _;

/// The exposition format a scraper asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text format 0.0.4.
    Prometheus,
    /// OpenMetrics 1.0 text.
    OpenMetrics,
}

impl Format {
    /// The format an `Accept` field asks for.
    pub fn from_accept(accept: &str) -> Format {
        if accept.contains("application/openmetrics-text") {
            Format::OpenMetrics
        } else {
            Format::Prometheus
        }
    }

    /// The `Content-Type` of the answer.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// Writes metric families: HELP and TYPE once, then the samples.
pub struct Writer<'a> {
    out: &'a mut String,
    format: Format,
}

impl std::fmt::Debug for Writer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("format", &self.format)
            .finish()
    }
}

impl<'a> Writer<'a> {
    /// A writer appending to `out`.
    pub fn new(out: &'a mut String, format: Format) -> Writer<'a> {
        Writer { out, format }
    }

    /// Starts a family. `kind`: counter, gauge, histogram or info. Counter names end in
    /// `_total` (OpenMetrics names the family without it).
    pub fn family(&mut self, name: &str, kind: &str, help: &str) {
        let family = match (self.format, kind) {
            (Format::OpenMetrics, "counter") => name.strip_suffix("_total").unwrap_or(name),
            (Format::OpenMetrics, "info") => name.strip_suffix("_info").unwrap_or(name),
            _ => name,
        };
        let kind = match (self.format, kind) {
            (Format::Prometheus, "info") => "gauge",
            _ => kind,
        };
        self.out.push_str("# HELP ");
        self.out.push_str(family);
        self.out.push(' ');
        // Prometheus escapes `\` and newlines in HELP; OpenMetrics quotes too.
        for c in help.chars() {
            match c {
                '\\' => self.out.push_str("\\\\"),
                '\n' => self.out.push_str("\\n"),
                '"' if self.format == Format::OpenMetrics => self.out.push_str("\\\""),
                c => self.out.push(c),
            }
        }
        self.out.push('\n');
        let _ = writeln!(self.out, "# TYPE {family} {kind}");
    }

    /// One sample: `name{labels} value`.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                self.out.push_str(k);
                self.out.push_str("=\"");
                escape_label(self.out, v);
                self.out.push('"');
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }

    /// A histogram's samples: `<name>_bucket` for each upper bound in `les` with the cumulative
    /// `counts`, then `_sum` and `_count`. The labels are written once and reused (a scrape of
    /// thousands of routes is mostly histograms).
    pub fn histogram(
        &mut self,
        name: &str,
        labels: &[(&str, &str)],
        les: &[&str],
        counts: &[u64],
        sum: f64,
    ) {
        let mut prefix = String::with_capacity(64);
        prefix.push('{');
        for (k, v) in labels {
            prefix.push_str(k);
            prefix.push_str("=\"");
            escape_label(&mut prefix, v);
            prefix.push_str("\",");
        }
        let mut n = itoa::Buffer::new();
        for (le, count) in les.iter().zip(counts) {
            self.out.push_str(name);
            self.out.push_str("_bucket");
            self.out.push_str(&prefix);
            self.out.push_str("le=\"");
            self.out.push_str(le);
            self.out.push_str("\"} ");
            self.out.push_str(n.format(*count));
            self.out.push('\n');
        }
        let total = counts.last().copied().unwrap_or(0);
        // The labels without the trailing comma.
        prefix.pop();
        let labels_only = if labels.is_empty() {
            ""
        } else {
            prefix.as_str()
        };
        let close = if labels.is_empty() { "" } else { "}" };
        let _ = writeln!(self.out, "{name}_sum{labels_only}{close} {sum}");
        let _ = writeln!(self.out, "{name}_count{labels_only}{close} {total}");
    }

    /// Ends the exposition (OpenMetrics needs `# EOF`).
    pub fn finish(self) {
        if self.format == Format::OpenMetrics {
            self.out.push_str("# EOF\n");
        }
    }
}

fn escape_label(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Counters and histograms carried over a binary upgrade, so that none goes backwards.
///
/// The process that is replaced sends its exposition (Prometheus text) as it stands when it
/// stops taking connections, then again once it has drained. The new process adds those
/// values to its own series of the same name and labels, in every counter and histogram
/// family (`_bucket`, `_sum`, `_count`), and writes the old series it has none of as they
/// were; gauges are its own. So a scraper that reads the old process last and the new one
/// next sees every counter at least where it was, and the sum of both once the old process
/// has gone: `rate()` sees no reset. The old process's own exposition includes what it was
/// given in turn, so a chain of upgrades adds up.
pub mod carried {
    use std::collections::{HashMap, HashSet};
    use std::sync::Arc;
    use std::time::Duration;

    use parking_lot::{Condvar, Mutex, RwLock};

    use super::Format;

    #[derive(Debug, Default)]
    struct Family {
        /// The `# HELP` line as the old process wrote it (Prometheus text).
        help: String,
        kind: String,
        samples: Vec<(String, String)>,
        index: HashMap<String, usize>,
    }

    /// The carried families, by their Prometheus name (`x_total` for a counter).
    #[derive(Debug, Default)]
    struct Base {
        order: Vec<String>,
        families: HashMap<String, Family>,
    }

    static BASE: RwLock<Option<Arc<Base>>> = RwLock::new(None);
    /// True from [`expect`] until [`set`].
    static PENDING: Mutex<bool> = Mutex::new(false);
    static SET: Condvar = Condvar::new();

    /// A process started by an upgrade: its expositions wait for [`set`] (see [`wait`]).
    pub fn expect() {
        *PENDING.lock() = true;
    }

    /// The old process's exposition (Prometheus text): from now on added to this process's.
    /// A later call replaces an earlier one (the old process's values only grow).
    pub fn set(text: &str) {
        let base = parse(text);
        *BASE.write() = Some(Arc::new(base));
        *PENDING.lock() = false;
        SET.notify_all();
    }

    /// Waits up to `timeout` while an upgrade's carried values are still to come; false when
    /// they did not come.
    pub fn wait(timeout: Duration) -> bool {
        let mut pending = PENDING.lock();
        SET.wait_while_for(&mut pending, |p| *p, timeout);
        !*pending
    }

    fn parse(text: &str) -> Base {
        let mut base = Base::default();
        let mut help: HashMap<&str, &str> = HashMap::new();
        let mut current: Option<String> = None;
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let name = rest.split(' ').next().unwrap_or_default();
                help.insert(name, line);
                current = None;
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut it = rest.split(' ');
                let (name, kind) = (it.next().unwrap_or_default(), it.next().unwrap_or_default());
                current = None;
                if kind == "counter" || kind == "histogram" {
                    base.order.push(name.to_owned());
                    base.families.insert(
                        name.to_owned(),
                        Family {
                            help: help.get(name).copied().unwrap_or_default().to_owned(),
                            kind: kind.to_owned(),
                            ..Family::default()
                        },
                    );
                    current = Some(name.to_owned());
                }
            } else if line.starts_with('#') || line.is_empty() {
                continue;
            } else if let (Some(name), Some((key, value))) = (&current, line.rsplit_once(' '))
                && let Some(f) = base.families.get_mut(name)
            {
                f.index.insert(key.to_owned(), f.samples.len());
                f.samples.push((key.to_owned(), value.to_owned()));
            }
        }
        base
    }

    /// `own + carried`, as integers when both are, else as reals; `own` when either is not a
    /// number.
    fn add(own: &str, carried: &str) -> String {
        if let (Ok(a), Ok(b)) = (own.parse::<u64>(), carried.parse::<u64>()) {
            return a.saturating_add(b).to_string();
        }
        match (own.parse::<f64>(), carried.parse::<f64>()) {
            (Ok(a), Ok(b)) if a.is_finite() && b.is_finite() => (a + b).to_string(),
            _ => own.to_owned(),
        }
    }

    /// Writes a carried family's series this process did not write.
    fn rest(out: &mut String, f: &Family, seen: &HashSet<usize>) {
        for (i, (key, value)) in f.samples.iter().enumerate() {
            if !seen.contains(&i) {
                out.push_str(key);
                out.push(' ');
                out.push_str(value);
                out.push('\n');
            }
        }
    }

    /// A carried family this process wrote nothing of, whole, in `format`.
    fn whole(out: &mut String, name: &str, f: &Family, format: Format) {
        let family = match format {
            Format::OpenMetrics if f.kind == "counter" => {
                name.strip_suffix("_total").unwrap_or(name)
            }
            _ => name,
        };
        if let Some(text) = f
            .help
            .strip_prefix("# HELP ")
            .and_then(|h| h.split_once(' '))
        {
            out.push_str("# HELP ");
            out.push_str(family);
            out.push(' ');
            match format {
                Format::OpenMetrics => out.push_str(&text.1.replace('"', "\\\"")),
                Format::Prometheus => out.push_str(text.1),
            }
            out.push('\n');
        }
        out.push_str("# TYPE ");
        out.push_str(family);
        out.push(' ');
        out.push_str(&f.kind);
        out.push('\n');
        rest(out, f, &HashSet::new());
    }

    /// `text` (this process's exposition in `format`) with the carried values added; `text`
    /// itself when nothing was carried.
    pub fn merge(text: String, format: Format) -> String {
        let Some(base) = BASE.read().clone() else {
            return text;
        };
        let mut out = String::with_capacity(text.len() + text.len() / 4);
        let mut written: HashSet<&str> = HashSet::new();
        // The carried family being written, and which of its series this process wrote.
        let mut current: Option<(&Family, HashSet<usize>)> = None;
        let mut ended = false;
        for line in text.lines() {
            if line.starts_with('#') {
                if let Some((f, seen)) = current.take() {
                    rest(&mut out, f, &seen);
                }
                if line == "# EOF" {
                    ended = true;
                    break;
                }
                if let Some(rest) = line.strip_prefix("# TYPE ") {
                    let mut it = rest.split(' ');
                    let (name, kind) =
                        (it.next().unwrap_or_default(), it.next().unwrap_or_default());
                    let total = format!("{name}_total");
                    let key = if kind == "counter" && !base.families.contains_key(name) {
                        total.as_str()
                    } else {
                        name
                    };
                    if let Some((k, f)) = base.families.get_key_value(key) {
                        written.insert(k.as_str());
                        current = Some((f, HashSet::new()));
                    }
                }
                out.push_str(line);
                out.push('\n');
                continue;
            }
            match (&mut current, line.rsplit_once(' ')) {
                (Some((f, seen)), Some((key, value))) => match f.index.get(key) {
                    Some(&i) => {
                        seen.insert(i);
                        out.push_str(key);
                        out.push(' ');
                        out.push_str(&add(value, &f.samples[i].1));
                        out.push('\n');
                    }
                    None => {
                        out.push_str(line);
                        out.push('\n');
                    }
                },
                _ => {
                    out.push_str(line);
                    out.push('\n');
                }
            }
        }
        if let Some((f, seen)) = current.take() {
            rest(&mut out, f, &seen);
        }
        for name in &base.order {
            if !written.contains(name.as_str())
                && let Some(f) = base.families.get(name)
            {
                whole(&mut out, name, f, format);
            }
        }
        if ended || format == Format::OpenMetrics {
            out.push_str("# EOF\n");
        }
        out
    }

    #[cfg(test)]
    pub(crate) fn clear() {
        *BASE.write() = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        let mut out = String::new();
        let mut w = Writer::new(&mut out, Format::Prometheus);
        w.sample("m", &[("route", "a\"b\\c\nd")], 1);
        assert_eq!(out, "m{route=\"a\\\"b\\\\c\\nd\"} 1\n");
    }

    #[test]
    fn histograms_write_cumulative_buckets_sum_and_count() {
        let mut out = String::new();
        let mut w = Writer::new(&mut out, Format::Prometheus);
        w.histogram("h", &[("route", "r")], &["0.5", "+Inf"], &[1, 3], 1.25);
        w.histogram("g", &[], &["+Inf"], &[0], 0.0);
        assert_eq!(
            out,
            "h_bucket{route=\"r\",le=\"0.5\"} 1\nh_bucket{route=\"r\",le=\"+Inf\"} 3\nh_sum{route=\"r\"} 1.25\nh_count{route=\"r\"} 3\ng_bucket{le=\"+Inf\"} 0\ng_sum 0\ng_count 0\n"
        );
    }

    #[test]
    fn help_is_escaped() {
        let mut out = String::new();
        let mut w = Writer::new(&mut out, Format::OpenMetrics);
        w.family("x_total", "counter", "a \"b\" c\\d\ne");
        assert_eq!(out, "# HELP x a \\\"b\\\" c\\\\d\\ne\n# TYPE x counter\n");
        let mut out = String::new();
        let mut w = Writer::new(&mut out, Format::Prometheus);
        w.family("x_total", "counter", "a \"b\"");
        assert_eq!(out, "# HELP x_total a \"b\"\n# TYPE x_total counter\n");
    }

    #[test]
    fn openmetrics_names_counter_families_without_total() {
        let mut out = String::new();
        let mut w = Writer::new(&mut out, Format::OpenMetrics);
        w.family("x_total", "counter", "X.");
        w.sample("x_total", &[], 1);
        w.finish();
        assert_eq!(out, "# HELP x X.\n# TYPE x counter\nx_total 1\n# EOF\n");
    }

    /// One test for the process-wide carried values (tests run on threads of one process).
    #[test]
    fn carried_counters_and_histograms_add_up_and_gauges_do_not() {
        let old = "# HELP req_total Requests \"served\".\n# TYPE req_total counter\nreq_total{route=\"a b\"} 5\nreq_total{route=\"gone\"} 2\n# HELP open Open.\n# TYPE open gauge\nopen 9\n# HELP lat Latency.\n# TYPE lat histogram\nlat_bucket{le=\"0.5\"} 1\nlat_bucket{le=\"+Inf\"} 2\nlat_sum 0.75\nlat_count 2\n# HELP old_only_total Only old.\n# TYPE old_only_total counter\nold_only_total 4\n";
        carried::set(old);
        let own = |format| {
            let mut out = String::new();
            let mut w = Writer::new(&mut out, format);
            w.family("req_total", "counter", "Requests \"served\".");
            w.sample("req_total", &[("route", "a b")], 1);
            w.family("open", "gauge", "Open.");
            w.sample("open", &[], 1);
            w.family("lat", "histogram", "Latency.");
            w.histogram("lat", &[], &["0.5", "+Inf"], &[0, 1], 0.5);
            w.finish();
            carried::merge(out, format)
        };
        assert_eq!(
            own(Format::Prometheus),
            "# HELP req_total Requests \"served\".\n# TYPE req_total counter\nreq_total{route=\"a b\"} 6\nreq_total{route=\"gone\"} 2\n# HELP open Open.\n# TYPE open gauge\nopen 1\n# HELP lat Latency.\n# TYPE lat histogram\nlat_bucket{le=\"0.5\"} 1\nlat_bucket{le=\"+Inf\"} 3\nlat_sum 1.25\nlat_count 3\n# HELP old_only_total Only old.\n# TYPE old_only_total counter\nold_only_total 4\n"
        );
        assert_eq!(
            own(Format::OpenMetrics),
            "# HELP req Requests \\\"served\\\".\n# TYPE req counter\nreq_total{route=\"a b\"} 6\nreq_total{route=\"gone\"} 2\n# HELP open Open.\n# TYPE open gauge\nopen 1\n# HELP lat Latency.\n# TYPE lat histogram\nlat_bucket{le=\"0.5\"} 1\nlat_bucket{le=\"+Inf\"} 3\nlat_sum 1.25\nlat_count 3\n# HELP old_only Only old.\n# TYPE old_only counter\nold_only_total 4\n# EOF\n"
        );
        carried::clear();
        assert_eq!(
            carried::merge("x_total 1\n".into(), Format::Prometheus),
            "x_total 1\n"
        );
    }
}
