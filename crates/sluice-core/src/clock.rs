//! The wall clock as logs write it: RFC 3339 UTC (`time_iso8601`), NGINX's `time_local`, and
//! `msec`, for the access log and the loggers' `log_format`.

use std::io::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::vars::{Var, digits};

/// The time since the epoch, now.
pub fn now() -> std::time::Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// Writes a wall-clock variable (`time_local`, `time_iso8601`, `msec`) for the time `at`
/// since the epoch. False for any other variable.
pub fn write_time(var: &Var, at: std::time::Duration, out: &mut Vec<u8>) -> bool {
    match var {
        Var::TimeLocal => write_time_local(out, at.as_secs()),
        Var::TimeIso8601 => write_iso_millis(out, at),
        Var::Msec => {
            out.extend_from_slice(itoa::Buffer::new().format(at.as_secs()).as_bytes());
            out.push(b'.');
            digits(out, u64::from(at.subsec_millis()), 3);
        }
        _ => return false,
    }
    true
}

/// RFC 3339 UTC with milliseconds: `2026-11-22T06:07:44.123Z`.
pub fn write_iso_millis(out: &mut Vec<u8>, at: std::time::Duration) {
    write_second(out, at.as_secs());
    out.push(b'.');
    digits(out, u64::from(at.subsec_millis()), 3);
    out.push(b'Z');
}

/// Writes second `secs` since the epoch as RFC 3339 UTC without its fraction.
pub fn write_second(out: &mut Vec<u8>, secs: u64) {
    let (y, m, day) = civil_from_days((secs / 86_400) as i64);
    let s = secs % 86_400;
    let _ = write!(
        out,
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}",
        s / 3600,
        (s / 60) % 60,
        s % 60
    );
}

/// Writes second `secs` as NGINX's `$time_local`, in UTC: `24/Nov/2026:06:37:09 +0000`.
pub fn write_time_local(out: &mut Vec<u8>, secs: u64) {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let (y, m, day) = civil_from_days((secs / 86_400) as i64);
    let s = secs % 86_400;
    let _ = write!(
        out,
        "{day:02}/{}/{y:04}:{:02}:{:02}:{:02} +0000",
        MONTHS[(m - 1) as usize],
        s / 3600,
        (s / 60) % 60,
        s % 60
    );
}

/// Days since 1970-01-01 to (year, month, day), Howard Hinnant's algorithm.
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}
