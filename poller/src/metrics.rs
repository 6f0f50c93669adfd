//! The metric primitives and the Prometheus text writer the engines and the daemon
//! record and render with: the workspace's one implementation, the `exposition` crate
//! (the sink renders with it too).

pub use exposition::*;
