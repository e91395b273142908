//! The link to etcd a node in cluster mode writes through (guarded writes on the cluster
//! thread's runtime), and the rule that keeps resources out of its file. A leaf below the
//! control plane's files.

use serde_json::Value;

use super::doc::id_text;
use super::kind::Kind;
use crate::etcd::{Etcd, EtcdError, Written};

/// Cluster mode: where admin writes go.
#[derive(Debug)]
pub struct EtcdLink {
    /// The client.
    pub client: Etcd,
    /// Key prefix (`/sluice`).
    pub prefix: String,
    /// The runtime etcd calls run on (the cluster thread's).
    pub handle: tokio::runtime::Handle,
    /// Timeout of one call.
    pub timeout: std::time::Duration,
}

impl EtcdLink {
    pub(super) fn guard(&self) -> String {
        format!("{}/_guard", self.prefix)
    }

    pub(super) fn key(&self, kind: Kind, id: &str) -> String {
        format!("{}/{}/{id}", self.prefix, kind.name())
    }

    /// Runs a guarded write on the cluster thread's runtime and waits for it.
    pub(super) fn write(
        &self,
        guard_rev: i64,
        kind: Kind,
        id: &str,
        value: Option<Vec<u8>>,
    ) -> Result<Written, EtcdError> {
        let (tx, rx) = std::sync::mpsc::channel();
        let client = self.client.clone();
        let guard = self.guard();
        let key = self.key(kind, id);
        // A consumer's credentials are written as APISIX 3 writes them, each under its own key
        // (`<consumer>/credentials/<id>`), so an APISIX node reading the same etcd sees them;
        // keys of credentials it no longer has are deleted in the same transaction.
        let (value, credentials) = match (kind, value) {
            (Kind::Consumers, Some(v)) => split_credentials(&v),
            (_, v) => (v, Vec::new()),
        };
        let consumer_deleted = kind == Kind::Consumers && value.is_none();
        self.handle.spawn(async move {
            let under = format!("{key}/credentials/");
            let result = async {
                if consumer_deleted {
                    return client
                        .write_guarded_with(&guard, guard_rev, &key, None, &[under])
                        .await;
                }
                let stale: Vec<String> = if kind == Kind::Consumers {
                    let (_, held) = client.range_prefix(&under).await?;
                    held.into_iter()
                        .map(|kv| kv.key)
                        .filter(|k| {
                            !credentials
                                .iter()
                                .any(|(id, _)| *k == format!("{under}{id}"))
                        })
                        .collect()
                } else {
                    Vec::new()
                };
                let keys: Vec<String> = credentials
                    .iter()
                    .map(|(id, _)| format!("{under}{id}"))
                    .collect();
                let mut ops: Vec<(&str, Option<&[u8]>)> = vec![(&key, value.as_deref())];
                for ((_, c), k) in credentials.iter().zip(&keys) {
                    ops.push((k, Some(c)));
                }
                for k in &stale {
                    ops.push((k, None));
                }
                client
                    .write_guarded_ops(&guard, guard_rev, &ops, &[], &key)
                    .await
            }
            .await;
            let _ = tx.send(result);
        });
        rx.recv_timeout(self.timeout * 2)
            .unwrap_or_else(|_| Err(EtcdError::Unreachable("the write timed out".into())))
    }
}

/// The error for resources in the file when etcd holds them.
pub const RESOURCES_IN_ETCD: &str = "not allowed in the file when etcd is configured: resources are stored in etcd (write them through the admin API)";

/// A credential as written to etcd: its id and its value.
type CredentialValue = (String, Vec<u8>);

/// A consumer's value as written to etcd: without its credentials, and each credential apart.
fn split_credentials(value: &[u8]) -> (Option<Vec<u8>>, Vec<CredentialValue>) {
    let Ok(Value::Object(mut o)) = serde_json::from_slice::<Value>(value) else {
        return (Some(value.to_vec()), Vec::new());
    };
    let Some(Value::Array(list)) = o.remove("credentials") else {
        return (Some(value.to_vec()), Vec::new());
    };
    let credentials = list
        .into_iter()
        .filter_map(|c| {
            let id = c.get("id").and_then(id_text)?;
            Some((id, serde_json::to_vec(&c).ok()?))
        })
        .collect();
    (serde_json::to_vec(&Value::Object(o)).ok(), credentials)
}
