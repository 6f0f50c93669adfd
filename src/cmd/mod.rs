//! One module per subcommand; each exposes `Args` (clap) and `run`.

pub mod check_config;
pub mod sweep;
