//! Consumers: identities that auth plugins recognise. Their own plugins are the engine's
//! (a chain per consumer, beside this table in the snapshot), so that this leaf knows nothing
//! of the plugin contract that reads it.

/// A compiled consumer.
#[derive(Debug)]
pub struct Consumer {
    /// Unique name.
    pub username: Box<str>,
    /// Its `custom_id` label, sent upstream in `X-Consumer-Custom-ID` (as APISIX).
    pub custom_id: Option<Box<str>>,
    /// Its consumer group's id (`group_id`), for consumer-restriction's `consumer_group_id`.
    pub group: Option<Box<str>>,
    /// Its `labels`, for `acl`.
    pub labels: Box<[(Box<str>, Box<str>)]>,
}
