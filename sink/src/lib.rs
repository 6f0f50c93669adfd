//! sink crate (being built).
