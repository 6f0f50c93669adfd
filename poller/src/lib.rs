//! poller crate (being built).
