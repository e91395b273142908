//! Consumers: usernames, their credentials and their groups.

use std::collections::{HashMap, HashSet};

use super::common::plugins;
use crate::catalog::{CheckEnv, PluginCatalog, PluginScope};
use crate::error::Validator;
use crate::model::{Config, ConsumerConfig};
use crate::positions::Positions;

pub(super) fn check(
    cfg: &Config,
    pos: &Positions,
    catalog: &dyn PluginCatalog,
    env: &CheckEnv<'_>,
    v: &mut Validator,
) {
    let group_ids = super::common::unique_ids(
        v,
        "consumer_groups",
        "consumer group",
        &pos.consumer_groups,
        cfg.consumer_groups
            .iter()
            .map(|g| g.id.as_ref().map(|i| i.0.as_str())),
    );
    v.field("consumer_groups", |v| {
        for (g, &i) in cfg.consumer_groups.iter().zip(&pos.consumer_groups.index) {
            v.index(i, |v| {
                v.field("plugins", |v| {
                    for name in g.plugins.keys().filter(|n| catalog.is_auth(n)) {
                        v.error_at(
                            name,
                            "is an authentication plugin: its credentials belong on consumers, not on their group",
                        );
                    }
                });
                let others: serde_json::Map<_, _> = g
                    .plugins
                    .iter()
                    .filter(|(n, _)| !catalog.is_auth(n))
                    .map(|(n, c)| (n.clone(), c.clone()))
                    .collect();
                plugins(&others, PluginScope::Consumer, catalog, env, v);
            });
        }
    });
    let mut groups: HashSet<&str> = group_ids.keys().map(String::as_str).collect();
    groups.extend(
        pos.consumer_groups
            .failed_ids
            .iter()
            .map(|(id, _)| id.as_str()),
    );

    let mut usernames: HashMap<&str, usize> = HashMap::new();
    v.field("consumers", |v| {
        for (c, &i) in cfg.consumers.iter().zip(&pos.consumers.index) {
            v.index(i, |v| {
                if let Err(e) = crate::de::check_username(&c.username) {
                    v.error_at("username", e);
                } else if let Some(first) = usernames.get(c.username.as_str()) {
                    v.error_at(
                        "username",
                        format!(
                            "duplicate username \"{}\" (first at consumers[{first}])",
                            c.username
                        ),
                    );
                } else {
                    usernames.insert(&c.username, i);
                }
                plugins(&c.plugins, PluginScope::Consumer, catalog, env, v);
                if let Some(id) = &c.group_id
                    && !groups.contains(id.0.as_str())
                {
                    v.error_at("group_id", format!("consumer group \"{}\" not found", id.0));
                }
                credentials(c, catalog, env, v);
            });
        }
        let all: Vec<(usize, &ConsumerConfig)> = pos
            .consumers
            .index
            .iter()
            .copied()
            .zip(cfg.consumers.iter())
            .collect();
        catalog.check_consumers(&all, v);
    });
}

/// A consumer's `credentials`: ids unique among them, auth plugins only.
fn credentials(
    c: &ConsumerConfig,
    catalog: &dyn PluginCatalog,
    env: &CheckEnv<'_>,
    v: &mut Validator,
) {
    let mut ids: HashMap<&str, usize> = HashMap::new();
    v.field("credentials", |v| {
        for (j, cred) in c.credentials.iter().enumerate() {
            v.index(j, |v| {
                if let Some(id) = &cred.id {
                    if let Err(e) = crate::de::check_id(&id.0) {
                        v.error_at("id", e);
                    } else if let Some(first) = ids.insert(&id.0, j) {
                        v.error_at(
                            "id",
                            format!(
                                "duplicate credential id \"{}\" (first at credentials[{first}])",
                                id.0
                            ),
                        );
                    }
                }
                if cred.plugins.is_empty() {
                    v.error_at("plugins", "must hold one authentication plugin");
                }
                v.field("plugins", |v| {
                    for (name, config) in &cred.plugins {
                        v.field(name, |v| {
                            if catalog.is_auth(name) {
                                catalog.check_plugin(name, config, PluginScope::Consumer, env, v);
                            } else {
                                v.error(
                                    "is not an authentication plugin: a credential holds key-auth, basic-auth or jwt-auth; put other plugins in the consumer's plugins",
                                );
                            }
                        });
                    }
                });
            });
        }
    });
}
