//! Consumers: usernames and their credentials.

use std::collections::HashMap;

use super::plugins;
use crate::catalog::{CheckEnv, PluginCatalog, PluginScope};
use crate::error::Validator;
use crate::load::Positions;
use crate::model::{Config, ConsumerConfig};

pub(super) fn check(
    cfg: &Config,
    pos: &Positions,
    catalog: &dyn PluginCatalog,
    env: &CheckEnv<'_>,
    v: &mut Validator,
) {
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
