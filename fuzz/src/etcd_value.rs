//! The etcd decoder: an answer of etcd's JSON gateway (a range's `kvs`, a watch's `events`;
//! keys and values in base64) read as the cluster client reads it, then the resources under
//! `/apisix` turned into a configuration document and loaded with every built-in plugin, as
//! a node's first configuration is. Never panics, whatever etcd holds.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;

/// One input. First byte even: the rest is an answer's body as etcd would send it. Odd: the
/// rest is keys and values separated by 0xFF (`routes/1`, then its value, ...), wrapped in a
/// well-formed range answer so that the resources themselves are what varies.
pub fn check(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let body = if mode % 2 == 0 {
        rest.to_vec()
    } else {
        let parts: Vec<&[u8]> = rest.split(|&b| b == 0xff).collect();
        let kvs: Vec<serde_json::Value> = parts
            .chunks(2)
            .enumerate()
            .map(|(i, kv)| {
                let mut key = b"/apisix/".to_vec();
                key.extend_from_slice(kv[0]);
                serde_json::json!({
                    "key": B64.encode(&key),
                    "value": B64.encode(kv.get(1).copied().unwrap_or_default()),
                    "create_revision": (i + 2).to_string(),
                    "mod_revision": (i + 2).to_string(),
                })
            })
            .collect();
        serde_json::to_vec(&serde_json::json!({"header": {"revision": "99"}, "kvs": kvs}))
            .expect("JSON")
    };
    let Some(decoded) = sluice_admin::etcd::decode_for_fuzzing(&body) else {
        return;
    };
    let doc = sluice_admin::etcd_resources("/apisix", decoded.kvs);
    let text = serde_json::Value::Object(doc).to_string();
    let plugins = sluice_plugins::shared();
    let _ = sluice_config::load_str_with(&text, &*plugins);
}
