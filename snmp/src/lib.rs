//! snmp crate (being built).
