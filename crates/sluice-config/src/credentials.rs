//! Where consumers keep an auth plugin's credentials: in their own `plugins`, and in their
//! `credentials` (APISIX 3's credential resources).

use serde_json::Value;
use sluice_core::meta::split_meta;

use crate::error::Validator;
use crate::model::ConsumerConfig;

/// Every enabled configuration of auth plugin `plugin` held by `consumers` (index in the
/// consumer table, position in the configuration, consumer), in the consumer's `plugins` and
/// in its `credentials`: (consumer index, position, credential index, username, configuration
/// without `_meta`). Build `sluice_core::plugin::Credential`s from them
/// (`sluice_core::plugin::as_credentials`).
pub fn credentials_of<'a>(
    plugin: &str,
    consumers: impl IntoIterator<Item = (usize, usize, &'a ConsumerConfig)>,
) -> Vec<(u32, usize, Option<usize>, &'a str, Value)> {
    let mut out = Vec::new();
    for (i, pos, c) in consumers {
        let own = std::iter::once((None, &c.plugins));
        let creds = c
            .credentials
            .iter()
            .enumerate()
            .map(|(j, cred)| (Some(j), &cred.plugins));
        for (credential, plugins) in own.chain(creds) {
            let Some(entry) = plugins
                .get(plugin)
                .and_then(|cfg| split_meta(cfg, &mut Validator::new()))
            else {
                continue;
            };
            // A disabled credential identifies nobody.
            if !entry.disabled {
                out.push((i as u32, pos, credential, c.username.as_str(), entry.config));
            }
        }
    }
    out
}
