use sluice_config::PluginScope;

use crate::tests::{check, metadata_errors};

#[test]
fn bad_logger_settings_are_refused_with_their_paths() {
    let errors = |yaml: &str| check("http-logger", yaml, PluginScope::Route);
    assert_eq!(
        errors("{uri: \"http://127.0.0.1:1/l\"}"),
        Vec::<String>::new()
    );
    assert_eq!(
        errors(
            "{uri: \"http://127.0.0.1:1/l\", batch_max_size: 0, inactive_timeout: -1, retry_delay: 1.5}"
        ),
        vec![
            "plugins.http-logger.batch_max_size: must be a whole number from 1 to 1000000, got 0",
            "plugins.http-logger.inactive_timeout: must be a whole number from 1 to 86400 seconds, got -1",
            "plugins.http-logger.retry_delay: must be a whole number from 0 to 86400 seconds, got 1.5",
        ]
    );
    assert_eq!(
        errors("{uri: \"ftp://x/l\", concat_method: csv}"),
        vec![
            "plugins.http-logger.uri: must be an http:// or https:// URI",
            "plugins.http-logger.concat_method: must be json or new_line, got \"csv\"",
        ]
    );
    // Past five levels APISIX writes `{}`: accepted, as APISIX accepts it.
    let e = errors(
        "{uri: \"http://x/l\", log_format: {a: \"$nope\", b: {c: {d: {e: {f: {g: 1}}}}}, l: [\"$host\", 1, \"$nope2\"]}}",
    );
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(
        e[0].starts_with("plugins.http-logger.log_format.a: "),
        "{e:?}"
    );
    assert!(
        e[1].starts_with("plugins.http-logger.log_format.l[2]: "),
        "{e:?}"
    );
    let e = errors(
        "{uri: \"http://x/l\", include_req_body: true, include_req_body_expr: [[arg_a, \"~~\", \"(\"]]}",
    );
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].starts_with("plugins.http-logger.include_req_body_expr"),
        "{e:?}"
    );
    let e = errors("{uri: \"http://x/l\", unknown_field: 1}");
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].contains("unknown_field"), "{e:?}");
}

#[test]
fn logger_metadata_is_checked() {
    assert_eq!(
        metadata_errors("{id: http-logger, max_pending_entries: 0}"),
        vec![
            "plugin_metadata[0].max_pending_entries: must be a whole number from 1 to 10000000, got 0"
        ]
    );
    assert_eq!(
        metadata_errors("{id: http-logger, log_format: {h: \"$host\"}, max_pending_entries: 100}"),
        Vec::<String>::new()
    );
}
