//! Consumers: identities that auth plugins recognise. Their own plugins are the engine's
//! (a chain per consumer, beside this table in the snapshot), so that this leaf knows nothing
//! of the plugin contract that reads it.

/// A compiled consumer.
#[derive(Debug)]
pub struct Consumer {
    /// Unique name.
    pub username: Box<str>,
    /// Its `custom_id` label, sent upstream in `X-Consumer-Custom-ID` (as APISIX).
    pub custom_id: Option<Box<str>>,
    /// Its consumer group's id (`group_id`), for consumer-restriction's `consumer_group_id`.
    pub group: Option<Box<str>>,
    /// Its `labels`.
    pub labels: Box<[Label]>,
}

/// One of a consumer's labels.
#[derive(Debug)]
pub struct Label {
    /// Its key.
    pub key: Box<str>,
    /// Its value as written.
    pub raw: Box<str>,
    /// Its values as APISIX's `acl` reads them ([`label_values`]), split once when the
    /// configuration compiles.
    pub values: Box<[Box<str>]>,
}

/// A label's values as APISIX's `acl` reads a string label: a JSON array of strings, values
/// separated by commas (spaces around them dropped), or the one value.
pub fn label_values(label: &str) -> Box<[Box<str>]> {
    if label.starts_with('[') {
        return serde_json::from_str::<Vec<serde_json::Value>>(label)
            .map(|a| a.iter().filter_map(|x| x.as_str().map(Box::from)).collect())
            .unwrap_or_default();
    }
    if label.contains(',') {
        return label.split(',').map(|s| Box::from(s.trim())).collect();
    }
    Box::new([Box::from(label)])
}

#[cfg(test)]
mod tests {
    #[test]
    fn label_values_are_read_as_apisix_reads_them() {
        let v = |s: &str| {
            super::label_values(s)
                .iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(v("admin"), ["admin"]);
        assert_eq!(v("a, b ,c"), ["a", "b", "c"]);
        assert_eq!(v(r#"["x","y"]"#), ["x", "y"]);
        assert!(v("[broken").is_empty());
    }
}
