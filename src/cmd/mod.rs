//! One module per subcommand; each exposes `Args` (clap) and `run`.

pub mod check_config;
pub mod poll_once;
pub mod run;
pub mod schema;
pub mod snmp;
pub mod spool;
pub mod sweep;

use crate::config::{self, Config};
use poller::daemon::Limits;
use poller::plan::Plan;

pub fn parse_shard_arg(s: &str) -> Result<(u32, u32), String> {
    config::parse_shard(s)
}

/// Plan for this process: the config's hosts of our shard.
pub fn build_plan(cfg: &mut Config, shard: Option<(u32, u32)>) -> Plan {
    let shard = cfg.process_shard(shard);
    Plan::build(cfg.take_hosts_for_shard(shard))
}

pub fn limits(cfg: &Config) -> Limits {
    Limits {
        icmp_batch_hosts: cfg.daemon.icmp_batch_hosts as u64,
        snmp_batch_requests: cfg.daemon.snmp_batch_requests as u64,
        batch_window: cfg.daemon.batch_window,
        ..Limits::default()
    }
}

/// The sink's spool settings from `[daemon]`.
pub fn spool_config(cfg: &Config) -> sink::SpoolConfig {
    sink::SpoolConfig {
        dir: cfg.daemon.spool_dir.clone(),
        max_bytes: cfg.daemon.spool_max_bytes,
        fsync_interval: cfg.daemon.spool_fsync_interval,
    }
}

/// Open `count` ICMP drivers (raw sockets, else ping sockets). Call before the runtime
/// starts and before dropping privileges. When the config has no ICMP items an open
/// failure is only logged (a reload may add ICMP items later, which then cannot run).
pub fn open_icmp_drivers(
    cfg: &Config,
    count: usize,
    required: bool,
) -> anyhow::Result<Vec<poller::icmp_driver::IcmpDriver>> {
    let opts = poller::icmp_driver::IcmpOptions {
        max_pps: cfg.icmp.max_pps.div_ceil(count.max(1) as u32),
        ident_filter: count > 1,
        ..Default::default()
    };
    let mut out = Vec::with_capacity(count);
    for _ in 0..count.max(1) {
        match poller::icmp_driver::IcmpDriver::open(opts) {
            Ok(d) => out.push(d),
            Err(e) if required => {
                return Err(anyhow::Error::new(e).context("opening the ICMP socket"))
            }
            Err(e) => {
                tracing::warn!(error = %e, "no ICMP socket: ICMP items added by a reload will not be polled");
                break;
            }
        }
    }
    Ok(out)
}

/// Open the shared SNMP sockets.
pub fn open_snmp_driver(cfg: &Config) -> anyhow::Result<poller::snmp_driver::SnmpDriver> {
    let opts = poller::snmp_driver::SnmpDriverOptions {
        max_pps: cfg.snmp.max_pps,
        ..Default::default()
    };
    poller::snmp_driver::SnmpDriver::open(opts)
        .map_err(|e| anyhow::anyhow!("opening SNMP sockets: {e}"))
}
