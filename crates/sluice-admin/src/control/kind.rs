//! The kinds of resources (`routes`, `upstreams`...), as the admin API, the file and etcd name
//! them. A leaf below every file of `control/`.

/// A resource kind of the admin API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `routes`
    Routes,
    /// `upstreams`
    Upstreams,
    /// `services`
    Services,
    /// `consumers` (identified by `username`)
    Consumers,
    /// `global_rules`
    GlobalRules,
    /// `ssls` (certificates)
    Ssls,
    /// `stream_routes` (L4)
    StreamRoutes,
    /// `plugin_configs` (plugins shared by routes)
    PluginConfigs,
    /// `consumer_groups` (plugins shared by consumers)
    ConsumerGroups,
    /// `plugin_metadata` (a plugin's node-wide settings; the id is the plugin's name)
    PluginMetadata,
    /// `secrets` (secret managers; the id is `<manager>/<id>`)
    Secrets,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 11] = [
        Kind::Routes,
        Kind::Upstreams,
        Kind::Services,
        Kind::Consumers,
        Kind::GlobalRules,
        Kind::Ssls,
        Kind::StreamRoutes,
        Kind::PluginConfigs,
        Kind::ConsumerGroups,
        Kind::PluginMetadata,
        Kind::Secrets,
    ];

    /// The kind named in a URL or a document.
    pub fn from_name(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The list's key in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Routes => "routes",
            Kind::Upstreams => "upstreams",
            Kind::Services => "services",
            Kind::Consumers => "consumers",
            Kind::GlobalRules => "global_rules",
            Kind::Ssls => "ssls",
            Kind::StreamRoutes => "stream_routes",
            Kind::PluginConfigs => "plugin_configs",
            Kind::ConsumerGroups => "consumer_groups",
            Kind::PluginMetadata => "plugin_metadata",
            Kind::Secrets => "secrets",
        }
    }

    /// The field that identifies an item.
    pub fn id_field(self) -> &'static str {
        if self == Kind::Consumers {
            "username"
        } else {
            "id"
        }
    }
}
