//! `sluice import`: other gateways' configurations as Sluice's.

pub mod gateway_api;
pub mod kong;
