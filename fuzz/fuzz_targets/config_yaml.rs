//! The YAML configuration loader with every built-in plugin: never panics, whatever the file.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let plugins = sluice_plugins::shared();
    let _ = sluice_config::load_str_with(text, &*plugins);
});
