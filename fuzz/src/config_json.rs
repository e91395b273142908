//! JSON configuration documents as the admin API and etcd give them: never panics. The bytes
//! are parsed, then loaded as a whole configuration with every built-in plugin.

/// One input.
pub fn check(data: &[u8]) {
    let Ok(doc) = sluice_config::parse_json(data) else {
        return;
    };
    let plugins = sluice_plugins::shared();
    let _ = sluice_config::load_str_with(&doc.to_string(), &*plugins);
}
