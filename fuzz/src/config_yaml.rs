//! The YAML configuration loader with every built-in plugin: never panics, whatever the file.

/// One input.
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let plugins = sluice_plugins::shared();
    let _ = sluice_config::load_str_with(text, &*plugins);
}
