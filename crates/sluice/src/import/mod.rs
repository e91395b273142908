//! `sluice import`: other gateways' configurations as Sluice's.

pub mod kong;
