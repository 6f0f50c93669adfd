//! `netpoller check-config`: validate a file the way `run` would, and say what it holds.

use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `netpoller check-config`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Configuration file (TOML).
    #[arg(short, long, value_name = "FILE")]
    pub config: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match crate::config::load(&args.config) {
        Ok(cfg) => {
            let snmp_hosts = cfg.hosts.iter().filter(|h| h.snmp.is_some()).count();
            println!(
                "{}: OK: {} hosts ({} with SNMP), {} items, clickhouse: {}",
                args.config.display(),
                cfg.hosts.len(),
                snmp_hosts,
                cfg.item_count(),
                if cfg.clickhouse.is_some() {
                    "configured"
                } else {
                    "none (values go to the spool)"
                }
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprint!("{e}");
            Ok(ExitCode::from(1))
        }
    }
}
