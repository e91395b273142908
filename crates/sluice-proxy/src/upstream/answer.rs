//! What a discovery query resolved to (DNS in `discover.rs`, Eureka in `eureka.rs`): shared by
//! both, below both.

use std::net::IpAddr;

/// One address a query resolved to. SRV answers carry their port, weight and priority.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Target {
    pub(crate) ip: IpAddr,
    pub(crate) port: Option<u16>,
    pub(crate) weight: Option<u32>,
    /// Higher first (an SRV record's priority, negated: lower is preferred there).
    pub(crate) priority: i32,
    /// The SRV target's name.
    pub(crate) name: Option<String>,
}

/// What a query resolved to last: addresses, or why not.
pub(crate) type Answer = Result<Vec<Target>, String>;

/// Marks answers that say the name has no address (NXDOMAIN, no records), as opposed to a
/// failure to get an answer (a lost packet, SERVFAIL, a timeout).
pub(crate) const GONE: &str = "[gone] ";
