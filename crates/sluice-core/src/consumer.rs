//! Consumers: identities that auth plugins recognise, with plugins of their own.

use crate::plugin::Chain;

/// A compiled consumer.
#[derive(Debug)]
pub struct Consumer {
    /// Unique name.
    pub username: Box<str>,
    /// Its `custom_id` label, sent upstream in `X-Consumer-Custom-ID` (as APISIX).
    pub custom_id: Option<Box<str>>,
    /// Its consumer group's id (`group_id`), for consumer-restriction's `consumer_group_id`.
    pub group: Option<Box<str>>,
    /// Plugins run for requests of this consumer (merged into the route's from the access
    /// phase on; the consumer's configuration of a plugin wins over the route's).
    pub chain: Chain,
}
