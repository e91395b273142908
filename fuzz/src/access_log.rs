//! The access log formatter: a format (a template of variables, `combined`, or `json` with
//! fields) compiled, then a line written for a request parsed from the rest of the input.
//! Never panics; every line is one line (a request's bytes never start another: log
//! injection: a format's own text may hold line breaks, a request's bytes may not), and a `json` line is one JSON object with the fields asked for.

use sluice_proxy::fuzzing::access_log_line;

/// One input: the format's text, a 0xFF byte, the request's bytes. A format `json:a,b` means
/// `format: json` with `fields: [a, b]`.
pub fn check(data: &[u8]) {
    let (format, request) = match data.iter().position(|&b| b == 0xff) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"[..]),
    };
    let Ok(format) = std::str::from_utf8(format) else {
        return;
    };
    let (format, fields): (&str, Vec<String>) = match format.strip_prefix("json:") {
        Some(list) => ("json", list.split(',').map(str::to_owned).collect()),
        None => (format, Vec::new()),
    };
    let Some(line) = access_log_line(format, &fields, request) else {
        return;
    };
    assert!(line.ends_with(b"\n"), "a line without its end");
    // Line breaks come only from the format's own text (its author's choice), never from
    // the request.
    let own = format.bytes().filter(|&b| b == b'\n').count();
    assert_eq!(
        line.iter().filter(|&&b| b == b'\n').count(),
        1 + own,
        "the request's bytes broke the line: {:?}",
        String::from_utf8_lossy(&line)
    );
    if format == "json" {
        let v: serde_json::Value = serde_json::from_slice(&line)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", String::from_utf8_lossy(&line)));
        let object = v.as_object().expect("a JSON object");
        for f in &fields {
            // Named with or without the `$`, written without.
            let key = f.trim_start_matches('$');
            assert!(object.contains_key(key), "field {key} missing");
        }
    }
}
