//! Where each item of a resource list stood in the document, as loading read it: what the
//! checks (`validate/`) and the report of every error (`report.rs`) map their paths with. A
//! leaf below loading and checking.

/// Where each parsed item of a resource list stood in the document, and the ids of items that
/// failed to parse (so that references to them do not report a second, misleading error).
#[derive(Debug, Default)]
pub(crate) struct Section {
    pub(crate) index: Vec<usize>,
    pub(crate) failed_ids: Vec<(String, usize)>,
    /// Where values that could not be read were left out of items kept without them.
    pub(crate) left_out: Vec<String>,
}

/// Positions of every resource list.
#[derive(Debug, Default)]
pub(crate) struct Positions {
    pub(crate) routes: Section,
    pub(crate) upstreams: Section,
    pub(crate) services: Section,
    pub(crate) global_rules: Section,
    pub(crate) consumers: Section,
    pub(crate) consumer_groups: Section,
    pub(crate) plugin_configs: Section,
    pub(crate) ssls: Section,
    pub(crate) stream_routes: Section,
    pub(crate) plugin_metadata: Section,
    pub(crate) secrets: Section,
    pub(crate) listen_failed: bool,
}

impl Positions {
    pub(crate) fn sections(&self) -> [&Section; 11] {
        [
            &self.routes,
            &self.upstreams,
            &self.services,
            &self.global_rules,
            &self.consumers,
            &self.consumer_groups,
            &self.plugin_configs,
            &self.ssls,
            &self.stream_routes,
            &self.plugin_metadata,
            &self.secrets,
        ]
    }
}
