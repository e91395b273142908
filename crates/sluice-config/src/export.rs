//! What APISIX adds to what it stores and exports, and Sluice leaves out when reading it. A
//! leaf below loading and the secret managers.

use serde_json::Value;

/// Takes out the fields APISIX adds to what it stores and exports (`create_time`,
/// `update_time`, etcd's `createdIndex`/`modifiedIndex`, `*_conf_version`): they say when and
/// in which revision, nothing Sluice acts on, so `curl /apisix/admin/routes` output loads.
pub(crate) fn strip_export_metadata(item: &mut Value) {
    if let Value::Object(m) = item {
        m.retain(|k, _| {
            !matches!(
                k.as_str(),
                "create_time" | "update_time" | "createdIndex" | "modifiedIndex"
            ) && !k.ends_with("_conf_version")
        });
        // A consumer's credentials are stored (and exported) as resources of their own.
        if let Some(Value::Array(creds)) = m.get_mut("credentials") {
            creds.iter_mut().for_each(strip_export_metadata);
        }
    }
}
