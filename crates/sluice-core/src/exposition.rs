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
}
