//! netpoller's polling core: the plan, the sharded scheduler, the socket drivers for the
//! sans-IO `icmp` and `snmp` engines, and value conversion into Zabbix value types.
//!
//! This crate owns sockets, clocks and tasks; it knows nothing about ClickHouse.

pub mod daemon;
pub mod engine;
pub mod icmp_driver;
pub mod keys;
pub mod metrics;
pub mod plan;
pub mod plan_diff;
pub mod preprocess;
pub mod scheduler;
pub mod snmp_convert;
pub mod snmp_driver;
pub mod sockets;
pub mod source;
pub mod states;
pub mod trends;
pub mod tun_echo;
pub mod value;
