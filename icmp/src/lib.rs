//! icmp crate (being built).
