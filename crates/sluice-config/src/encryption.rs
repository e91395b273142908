//! APISIX's `data_encryption`: the fields APISIX encrypts before it writes them to etcd
//! (plugins' `encrypt_fields`, the private keys of `ssls`), decrypted when a configuration is
//! loaded so that a Sluice node serves from the etcd an APISIX control plane writes to.
//!
//! As APISIX does it (`apisix/core/data_encryption.lua`): AES-CBC with each keyring entry as
//! both key and IV (16 bytes: AES-128, 32: AES-256), PKCS#7 padding, base64. A value that no
//! key decrypts is kept as it is, as APISIX keeps it (it may never have been encrypted),
//! except a private key, which is an error: it is neither PEM nor anything the keyring opens.

use aes::cipher::{BlockDecryptMut, KeyIvInit, block_padding::Pkcs7};
use base64::Engine as _;
use serde_json::Value;

use crate::catalog::PluginCatalog;
use crate::error::Validator;

pub use crate::model::DEFAULT_KEYRING;

/// Resource lists whose items hold `plugins`.
const WITH_PLUGINS: &[&str] = &[
    "routes",
    "services",
    "consumers",
    "global_rules",
    "plugin_configs",
    "consumer_groups",
    "stream_routes",
];

/// Decrypts in place every encrypted field of the document's resources (the fields each
/// plugin of `catalog` declares), with the keyring of `etcd.data_encryption` (APISIX's default
/// when not given). Only in cluster mode (the document has `etcd`): a file never held
/// APISIX's encrypted values.
pub(crate) fn decrypt_doc(doc: &mut Value, catalog: &dyn PluginCatalog, v: &mut Validator) {
    let Some(keyring) = keyring_of(doc, v) else {
        return;
    };
    if keyring.is_empty() {
        return;
    }
    let Some(map) = doc.as_object_mut() else {
        return;
    };
    for list in WITH_PLUGINS {
        if let Some(Value::Array(items)) = map.get_mut(*list) {
            for item in items.iter_mut() {
                decrypt_plugins_of(item, &keyring, catalog);
                if let Some(Value::Array(creds)) = item.get_mut("credentials") {
                    for c in creds {
                        decrypt_plugins_of(c, &keyring, catalog);
                    }
                }
            }
        }
    }
    // Upstreams' client keys (APISIX encrypts `tls.client_key` as it does ssl keys): named
    // upstreams, and those inline in routes, services and stream routes.
    let client_key = |u: &mut Value, v: &mut Validator| {
        if let Some(tls) = u.get_mut("tls") {
            for f in ["client_key", "key"] {
                if let Some(k) = tls.get_mut(f) {
                    v.field("tls", |v| {
                        v.field(f, |v| decrypt_private_key(k, &keyring, v))
                    });
                }
            }
        }
    };
    if let Some(Value::Array(ups)) = map.get_mut("upstreams") {
        v.field("upstreams", |v| {
            for (i, u) in ups.iter_mut().enumerate() {
                v.index(i, |v| client_key(u, v));
            }
        });
    }
    for list in ["routes", "services", "stream_routes"] {
        if let Some(Value::Array(items)) = map.get_mut(list) {
            v.field(list, |v| {
                for (i, item) in items.iter_mut().enumerate() {
                    if let Some(u) = item.get_mut("upstream") {
                        v.index(i, |v| v.field("upstream", |v| client_key(u, v)));
                    }
                }
            });
        }
    }
    if let Some(Value::Array(ssls)) = map.get_mut("ssls") {
        v.field("ssls", |v| {
            for (i, ssl) in ssls.iter_mut().enumerate() {
                v.index(i, |v| {
                    if let Some(k) = ssl.get_mut("key") {
                        v.field("key", |v| decrypt_private_key(k, &keyring, v));
                    }
                    if let Some(Value::Array(keys)) = ssl.get_mut("keys") {
                        v.field("keys", |v| {
                            for (j, k) in keys.iter_mut().enumerate() {
                                v.index(j, |v| decrypt_private_key(k, &keyring, v));
                            }
                        });
                    }
                });
            }
        });
    }
}

/// The keys of `etcd.data_encryption.keyring`; None outside cluster mode.
fn keyring_of(doc: &Value, v: &mut Validator) -> Option<Vec<Vec<u8>>> {
    let etcd = doc.get("etcd")?;
    let given = etcd.get("data_encryption").and_then(|d| d.get("keyring"));
    let keys: Vec<String> = match given {
        None => DEFAULT_KEYRING.iter().map(|s| (*s).to_owned()).collect(),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|k| k.as_str().map(str::to_owned))
            .collect(),
        Some(_) => return None, // the etcd settings' own parse reports the type
    };
    let mut out = Vec::with_capacity(keys.len());
    for (i, k) in keys.iter().enumerate() {
        if matches!(k.len(), 16 | 32) {
            out.push(k.as_bytes().to_vec());
        } else {
            v.field("etcd", |v| {
                v.field("data_encryption", |v| {
                    v.field("keyring", |v| {
                        v.index(i, |v| {
                            v.error(format!(
                                "must be 16 characters (AES-128) or 32 (AES-256), got {}",
                                k.len()
                            ))
                        })
                    })
                })
            });
        }
    }
    Some(out)
}

/// Decrypts one route's plugin fields (a route change from etcd, checked on its own).
pub(crate) fn decrypt_route(route: &mut Value, keyring: &[Vec<u8>], catalog: &dyn PluginCatalog) {
    if !keyring.is_empty() {
        decrypt_plugins_of(route, keyring, catalog);
    }
}

fn decrypt_plugins_of(item: &mut Value, keyring: &[Vec<u8>], catalog: &dyn PluginCatalog) {
    let Some(Value::Object(plugins)) = item.get_mut("plugins") else {
        return;
    };
    for (name, conf) in plugins.iter_mut() {
        let Value::Object(conf) = conf else {
            continue;
        };
        for f in catalog.encrypted_fields(name) {
            decrypt_field(conf, f, keyring);
        }
    }
}

/// Decrypts the field at `path` (`auth.password`: nested) as APISIX's `process_encrypt_field`
/// does: a string, each string of an array, or each string value of an object.
fn decrypt_field(conf: &mut serde_json::Map<String, Value>, path: &str, keyring: &[Vec<u8>]) {
    let (head, rest) = match path.split_once('.') {
        Some((h, r)) => (h, Some(r)),
        None => (path, None),
    };
    let Some(value) = conf.get_mut(head) else {
        return;
    };
    let one = |s: &mut String| {
        if let Some(plain) = decrypt(s, keyring) {
            *s = plain;
        }
    };
    match (value, rest) {
        (Value::Object(inner), Some(rest)) => decrypt_field(inner, rest, keyring),
        // An array on the way: each of its objects (kafka-logger's `brokers.sasl_config.password`).
        (Value::Array(items), Some(rest)) => items.iter_mut().for_each(|item| {
            if let Value::Object(inner) = item {
                decrypt_field(inner, rest, keyring)
            }
        }),
        (Value::String(s), None) => one(s),
        (Value::Array(a), None) => a.iter_mut().for_each(|v| {
            if let Value::String(s) = v {
                one(s)
            }
        }),
        (Value::Object(m), None) => m.values_mut().for_each(|v| {
            if let Value::String(s) = v {
                one(s)
            }
        }),
        _ => {}
    }
}

fn decrypt_private_key(k: &mut Value, keyring: &[Vec<u8>], v: &mut Validator) {
    let Value::String(s) = k else { return };
    // PEM (leading space allowed) and file paths are not encrypted; what APISIX encrypted is
    // base64 of whole AES blocks, anything else is left to the key's own checks.
    let t = s.trim();
    let looks_encrypted = !t.starts_with("---")
        && t.len() >= 24
        && base64::engine::general_purpose::STANDARD
            .decode(t)
            .is_ok_and(|b| !b.is_empty() && b.len() % 16 == 0);
    if !looks_encrypted {
        return;
    }
    match decrypt(s, keyring) {
        Some(plain) => *s = plain,
        None => v.error(
            "is neither a PEM private key nor a value the keyring decrypts (etcd.data_encryption.keyring: give the keys APISIX encrypted it with)",
        ),
    }
}

/// `value` decrypted by the first key that opens it, as text.
pub fn decrypt(value: &str, keyring: &[Vec<u8>]) -> Option<String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(value.trim())
        .ok()?;
    if bytes.is_empty() || bytes.len() % 16 != 0 {
        return None;
    }
    keyring.iter().find_map(|key| {
        let plain = match key.len() {
            16 => cbc::Decryptor::<aes::Aes128>::new_from_slices(key, key)
                .ok()?
                .decrypt_padded_vec_mut::<Pkcs7>(&bytes)
                .ok()?,
            32 => cbc::Decryptor::<aes::Aes256>::new_from_slices(key, &key[..16])
                .ok()?
                .decrypt_padded_vec_mut::<Pkcs7>(&bytes)
                .ok()?,
            _ => return None,
        };
        String::from_utf8(plain).ok()
    })
}

/// `value` encrypted with `key` as APISIX writes it (for tests, and for writing back).
pub fn encrypt(value: &str, key: &[u8]) -> String {
    use aes::cipher::BlockEncryptMut;
    let bytes = match key.len() {
        32 => cbc::Encryptor::<aes::Aes256>::new_from_slices(key, &key[..16])
            .expect("a 32-byte key")
            .encrypt_padded_vec_mut::<Pkcs7>(value.as_bytes()),
        _ => cbc::Encryptor::<aes::Aes128>::new_from_slices(key, key)
            .expect("a 16-byte key")
            .encrypt_padded_vec_mut::<Pkcs7>(value.as_bytes()),
    };
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apisix_test_vectors_decrypt() {
        // apache/apisix t/node/data_encrypt.t, keyring [edd1c9f0985e76a2].
        let keyring = vec![b"edd1c9f0985e76a2".to_vec()];
        assert_eq!(
            decrypt("77+NmbYqNfN+oLm0aX5akg==", &keyring).as_deref(),
            Some("bar")
        );
        assert_eq!(
            decrypt("vU/ZHVJw7b0XscDJ1Fhtig==", &keyring).as_deref(),
            Some("auth-two")
        );
        assert_eq!(
            encrypt("bar", b"edd1c9f0985e76a2"),
            "77+NmbYqNfN+oLm0aX5akg=="
        );
    }

    /// A catalog that declares the encrypted fields of three plugins, as the registry's do.
    struct Declared;

    impl PluginCatalog for Declared {
        fn check_plugin(
            &self,
            _: &str,
            _: &Value,
            _: crate::PluginScope,
            _: &crate::CheckEnv<'_>,
            _: &mut Validator,
        ) {
        }

        fn encrypted_fields(&self, name: &str) -> &'static [&'static str] {
            match name {
                "key-auth" => &["key"],
                "basic-auth" => &["password"],
                "limit-count" => &["redis_password", "sentinel_password"],
                "elasticsearch-logger" => &["auth.password", "headers"],
                _ => &[],
            }
        }
    }

    #[test]
    fn values_apisix_encrypted_are_decrypted_with_its_keyring() {
        let keyring: Vec<Vec<u8>> = DEFAULT_KEYRING
            .iter()
            .map(|k| k.as_bytes().to_vec())
            .collect();
        // Encrypted with the second key: every key is tried, as APISIX does.
        let e = encrypt("auth-one", keyring[1].as_slice());
        assert_eq!(decrypt(&e, &keyring).as_deref(), Some("auth-one"));
        assert_eq!(decrypt(&e, &keyring[..1]), None);
        // Plain values stay plain.
        assert_eq!(decrypt("auth-one", &keyring), None);
        let mut doc = serde_json::json!({
            "etcd": {"endpoints": ["http://127.0.0.1:2379"]},
            "consumers": [{"username": "jack", "plugins": {"key-auth": {"key": e}},
                           "credentials": [{"id": "c", "plugins": {"basic-auth": {"username": "j", "password": encrypt("pw", keyring[0].as_slice())}}}]}],
            "routes": [{"uri": "/", "plugins": {"limit-count": {"redis_password": encrypt("r", keyring[0].as_slice()), "count": 1},
                        "elasticsearch-logger": {"auth": {"username": "u", "password": encrypt("espw", keyring[0].as_slice())},
                                                 "headers": {"X-A": encrypt("h1", keyring[0].as_slice())}}}}],
            "ssls": [{"key": "bm90IGEga2V5bm90IGEga2V5bm90IGEga2V5bm90IGE="}, {"key": " -----BEGIN PRIVATE KEY-----"}, {"key": "certs/site.key"}],
            "upstreams": [{"id": "u", "tls": {"client_key": encrypt("-----BEGIN PRIVATE KEY-----x", keyring[0].as_slice())}}]
        });
        let mut v = Validator::new();
        decrypt_doc(&mut doc, &Declared, &mut v);
        assert_eq!(
            doc["consumers"][0]["plugins"]["key-auth"]["key"],
            "auth-one"
        );
        assert_eq!(
            doc["consumers"][0]["credentials"][0]["plugins"]["basic-auth"]["password"],
            "pw"
        );
        assert_eq!(
            doc["routes"][0]["plugins"]["limit-count"]["redis_password"],
            "r"
        );
        // Nested fields and an object's values, as APISIX's process_encrypt_field reads them.
        let es = &doc["routes"][0]["plugins"]["elasticsearch-logger"];
        assert_eq!(es["auth"]["password"], "espw");
        assert_eq!(es["headers"]["X-A"], "h1");
        let errs: Vec<String> = v.into_errors().iter().map(ToString::to_string).collect();
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(
            errs[0].starts_with("ssls[0].key: is neither a PEM private key"),
            "{errs:?}"
        );
        // A wrong keyring: the key stays as it was written (as in APISIX), and a bad entry
        // is an error at its path.
        let mut doc = serde_json::json!({
            "etcd": {"data_encryption": {"keyring": ["0123456789abcdef", "short"]}},
            "consumers": [{"username": "jack", "plugins": {"key-auth": {"key": encrypt("x", keyring[0].as_slice())}}}]
        });
        let mut v = Validator::new();
        decrypt_doc(&mut doc, &Declared, &mut v);
        assert_ne!(doc["consumers"][0]["plugins"]["key-auth"]["key"], "x");
        let errs: Vec<String> = v.into_errors().iter().map(ToString::to_string).collect();
        assert_eq!(
            errs,
            [
                "etcd.data_encryption.keyring[1]: must be 16 characters (AES-128) or 32 (AES-256), got 5"
            ]
        );
    }
}
