//! `netpoller check-config`: validate a file the way `run` would, and say what it holds.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tracing::Level;

use poller::plan::{Engine, Plan};
use poller::plan_diff::PlanDiff;

use super::shard_words;
use crate::config::{DaemonSection, IcmpPhases};
use crate::telemetry::{eprint_at, print_at};

/// Arguments of `netpoller check-config`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Configuration file (TOML), or a directory of them: its *.toml files, read in
    /// the order of their names as one file (a conf.d).
    #[arg(short, long, value_name = "PATH")]
    pub config: PathBuf,
    /// Also say what loading FILE in place of RUNNING would change: hosts and items
    /// added, removed and changed, as the daemon's reload log line counts them (a
    /// host is matched by name, an item by itemid), and the hosts moved to other slots
    /// (their ICMP sweeps regrouped: polled at another offset of their interval), and
    /// the settings changed that only a restart applies (`needs a restart: ...`, as the
    /// reload warns). For a look before `systemctl reload`. Items of discovery rules
    /// are not compared: their rows come from walks.
    #[arg(long, value_name = "RUNNING")]
    pub against: Option<PathBuf>,
    /// Check as `run --shard I/N` would run it: the load and `--against` for the hosts
    /// of shard I of N only. Overrides `daemon.shard`.
    #[arg(long, value_name = "I/N", value_parser = crate::config::parse_shard)]
    pub shard: Option<(u32, u32)>,
    /// Instead of the report, the hosts the file polls (`--shard`'s share), one per
    /// line, tab-separated: name, address, items, engines (`icmp`, `snmp` or
    /// `icmp,snmp`): what ranges, their `exclude`s and templates come to, for a look or
    /// a script. Warnings go to stderr; a file with errors lists them, exit 1, as
    /// without. (Items of discovery rules come from walks: not counted.)
    #[arg(long, conflicts_with = "against")]
    pub hosts: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match crate::config::load(&args.config) {
        Ok(mut cfg) => {
            // A host whose SNMP items all stand for discovered rows polls SNMP too.
            let walked: std::collections::HashSet<&str> =
                cfg.discovery.iter().map(|t| &*t.host).collect();
            let snmp_hosts = cfg
                .hosts
                .iter()
                .filter(|h| h.snmp.is_some() || walked.contains(&*h.name))
                .count();
            let n = cfg.hosts.len();
            let ok = format!(
                "{}: OK: {} host{} ({} with SNMP), {} item{}, clickhouse: {}",
                args.config.display(),
                n,
                if n == 1 { "" } else { "s" },
                snmp_hosts,
                cfg.item_count(),
                if cfg.item_count() == 1 { "" } else { "s" },
                if cfg.clickhouse.is_some() {
                    "configured"
                } else {
                    "none (values go to the spool)"
                }
            );
            // The load this process would carry (its shard only: `--shard`, else
            // `daemon.shard`), for sizing
            // (docs/production.md): rates, not item counts, decide the CPU.
            // (Before the plan takes the hosts.)
            let families = (
                cfg.hosts.iter().any(|h| h.ip.is_ipv4()),
                cfg.hosts.iter().any(|h| h.ip.is_ipv6()),
            );
            let shard = cfg.process_shard(args.shard);
            let plan = cfg.take_plan(args.shard, super::trim_heap);
            if args.hosts {
                for w in super::warnings(&cfg, &plan, shard) {
                    eprint_at(Level::WARN, &format!("warning: {w}"));
                }
                let mut out = std::io::BufWriter::new(std::io::stdout().lock());
                write_hosts(&mut out, &plan)?;
                std::io::Write::flush(&mut out)?;
                return Ok(ExitCode::SUCCESS);
            }
            println!("{ok}");
            // A directory: what it was read from (a file dropped in the wrong folder, or
            // named `.toml.bak`, is not among them).
            if !cfg.files.is_empty() {
                println!("files, in the order read: {}", cfg.files.join(", "));
            }
            for w in super::warnings(&cfg, &plan, shard) {
                warning(&w);
            }
            // Before the other lines: it is what the option was asked for, and a
            // running config that does not load fails the command.
            if let Some(running) = &args.against {
                match crate::config::load(running) {
                    Ok(mut old_cfg) => {
                        // The shard the running daemon polls: its file's, or the CLI's.
                        let old = old_cfg.take_plan(args.shard, super::trim_heap);
                        let diff = PlanDiff::between(&old, &plan);
                        println!("{}", against(running, &diff));
                        // What the reload would warn of: changed, but not applied by it.
                        if let Some(line) = needs_restart(&old_cfg, &cfg) {
                            println!("{line}");
                        }
                        // As the daemon's reload refuses it (an empty or half-written
                        // file): this check must not pass what the reload will not.
                        if plan.hosts.is_empty() && !old.hosts.is_empty() {
                            let whose = shard_words("in", shard);
                            eprint_at(
                                Level::ERROR,
                                &format!(
                                    "--against {}: a reload to {} is refused: it has no hosts{whose} (an empty or half-written file?)",
                                    running.display(),
                                    args.config.display()
                                ),
                            );
                            return Ok(ExitCode::from(1));
                        }
                    }
                    Err(e) => {
                        let text =
                            format!("--against {}: it does not load:\n{e}", running.display());
                        eprint_at(Level::ERROR, text.trim_end());
                        return Ok(ExitCode::from(1));
                    }
                }
            }
            let (icmp, snmp) = (
                plan.values_per_second(Engine::Icmp),
                plan.values_per_second(Engine::Snmp),
            );
            // The lines below are this process's share: say so under a shard.
            let whose = shard_words("of", shard);
            println!(
                "load{whose}: {} values/s (ICMP {}, SNMP {}); {} ICMP echo requests/s",
                rate(icmp + snmp),
                rate(icmp),
                rate(snmp),
                rate(plan.icmp_probe_rate())
            );
            for w in over_rate(&plan, cfg.icmp.max_pps, cfg.snmp.max_pps) {
                warning(&w);
            }
            for line in icmp_sweeps(&plan, &cfg.daemon) {
                println!("{line}");
            }
            if let Some(line) = discovery(&cfg, args.shard) {
                println!("{line}");
            }
            if let Some(line) = sources(&cfg.daemon, families) {
                println!("{line}");
            }
            // As `source_ip`: the config may be checked on another host than it runs on.
            if let Some(user) = &cfg.daemon.user {
                if let Err(e) = crate::privdrop::lookup_user(user) {
                    println!("daemon.user: {e}: `run` would not start on this host");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprint_at(Level::ERROR, e.to_string().trim_end());
            Ok(ExitCode::from(1))
        }
    }
}

/// One of the file's warnings on stdout, at the journal's priority warning under
/// systemd ([`print_at`]).
/// `--hosts`: each host of `plan`, `NAME\tIP\tITEMS\tENGINES`, in the plan's order.
fn write_hosts(out: &mut impl std::io::Write, plan: &Plan) -> std::io::Result<()> {
    let mut per_host = vec![(0usize, false, false); plan.hosts.len()];
    for t in &plan.tasks {
        let (items, icmp, snmp) = &mut per_host[t.host as usize];
        *items += t.items.len();
        *icmp |= t.engine == Engine::Icmp;
        *snmp |= t.engine == Engine::Snmp;
    }
    for (h, (items, icmp, snmp)) in plan.hosts.iter().zip(per_host) {
        let engines = match (icmp, snmp) {
            (true, true) => "icmp,snmp",
            (true, false) => "icmp",
            (false, true) => "snmp",
            (false, false) => "-",
        };
        writeln!(out, "{}\t{}\t{items}\t{engines}", h.name, h.ip)?;
    }
    Ok(())
}

fn warning(w: &str) {
    print_at(Level::WARN, &format!("warning: {w}"));
}

/// Where requests leave from (`daemon.source_ip`), and whether this host has the
/// addresses (a bind, nothing sent). Not an error: a config may be checked elsewhere
/// than where it runs. `(v4, v6)`: whether hosts of each family are polled, whose
/// requests leave from the route's address when their family has no source.
fn sources(daemon: &DaemonSection, (v4, v6): (bool, bool)) -> Option<String> {
    let s = daemon.source_addrs();
    let mut parts: Vec<String> = s
        .iter()
        .map(|ip| {
            // Bound as the engines' sockets are (an IPv6 one IPv6 only).
            match poller::source::SourceAddrs::from(ip).check() {
                Err(e) => format!("{ip} ({e}: `run` would not start on this host)"),
                Ok(()) if ip.is_loopback() => {
                    format!("{ip} (a loopback address: only this host's own addresses answer it)")
                }
                Ok(()) => ip.to_string(),
            }
        })
        .collect();
    if !parts.is_empty() {
        for (polled, set, family) in [(v4, s.v4.is_some(), 4), (v6, s.v6.is_some(), 6)] {
            if polled && !set {
                parts.push(format!(
                    "IPv{family} hosts from the route's address (no IPv{family} source)"
                ));
            }
        }
    }
    (!parts.is_empty())
        .then(|| format!("daemon.source_ip: requests leave from {}", parts.join(", ")))
}

/// The engines whose send-rate cap is below what the plan needs: their polls would run
/// ever later (the scheduler skips the slots missed), which the load line alone leaves
/// to the reader to see.
fn over_rate(plan: &Plan, icmp_max: u32, snmp_max: u32) -> Vec<String> {
    let mut out = Vec::new();
    for (need, max, what, key) in [
        (
            plan.icmp_probe_rate(),
            icmp_max,
            "ICMP echo requests/s",
            "icmp.max_pps",
        ),
        (
            plan.snmp_request_rate(),
            snmp_max,
            "SNMP requests/s at the least",
            "snmp.max_pps",
        ),
    ] {
        // 0: no cap.
        if max > 0 && need > f64::from(max) {
            out.push(format!(
                "{} {what} needed, over {key} = {max}: polls would run late and slots be skipped (raise it, lengthen intervals or shard)",
                rate(need)
            ));
        }
    }
    out
}

/// How the ICMP targets of each interval are swept (`daemon.icmp_phases`): with grouped
/// phases the number of sweeps per interval, which sizing and `icmp_batch_hosts` go by.
fn icmp_sweeps(plan: &Plan, daemon: &DaemonSection) -> Vec<String> {
    plan.icmp_intervals(daemon.icmp_batch_hosts)
        .into_iter()
        .map(|g| {
            let every = humantime::format_duration(Duration::from_millis(g.interval_ms));
            let targets = match g.tasks {
                1 => "1 target".to_string(),
                n => format!("{n} targets"),
            };
            match daemon.icmp_phases {
                IcmpPhases::Grouped => {
                    let s = if g.groups == 1 { "" } else { "s" };
                    format!(
                        "ICMP every {every}: {targets} in {} sweep{s} per interval",
                        g.groups
                    )
                }
                IcmpPhases::Spread => format!(
                    "ICMP every {every}: {targets} spread over the interval, \
                     swept every {} (icmp_phases = \"spread\")",
                    humantime::format_duration(daemon.batch_window)
                ),
            }
        })
        .collect()
}

/// What discovery will walk, if anything: each rule and the hosts it is walked on (a
/// rule of one template is not every host's). The items of its rules are not counted
/// above (they stand for the rows found on each host). `shard`: `--shard`'s, which names
/// the file as `run --shard` does.
fn discovery(cfg: &crate::config::Config, shard: Option<(u32, u32)>) -> Option<String> {
    let mut hosts: std::collections::BTreeMap<&str, usize> = Default::default();
    for r in cfg.discovery.iter().flat_map(|t| &t.rules) {
        *hosts.entry(&*r.name).or_default() += 1;
    }
    let walked: Vec<String> = (hosts.iter().enumerate())
        .map(|(k, (rule, n))| match k {
            0 => format!("{rule} on {n} host(s)"),
            _ => format!("{rule} on {n}"),
        })
        .collect();
    (!hosts.is_empty()).then(|| {
        format!(
            "discovery: {} rule(s) walked ({}); their items are planned for the rows found (`run` saves them in {}, `poll-once` walks them first)",
            hosts.len(),
            walked.join(", "),
            cfg.discovery_file(shard).display()
        )
    })
}

/// `against FILE: hosts +4 -0 ~1, items +12 -0 ~2 (added: sw-101, ...; changed: core-1)`,
/// and `, 310 host(s) moved to other slots, ...` when ICMP sweeps are regrouped.
fn against(running: &std::path::Path, d: &PlanDiff) -> String {
    let what = if d.is_empty() {
        "no host or item changed".to_string()
    } else {
        let moved = match d.hosts_moved {
            0 => String::new(),
            n => format!(", {n} host(s) moved to other slots, ICMP sweeps regrouped"),
        };
        format!(
            "hosts +{} -{} ~{}, items +{} -{} ~{}{moved} ({d})",
            d.hosts_added,
            d.hosts_removed,
            d.hosts_changed,
            d.items_added,
            d.items_removed,
            d.items_changed
        )
    };
    format!("against {}: {what}", running.display())
}

/// `needs a restart: daemon.shards, [clickhouse] (...)`: the settings changed from
/// `running` that a reload does not apply ([`super::run::restart_only_changes`], which
/// the reload's warning names), if any.
fn needs_restart(running: &crate::config::Config, new: &crate::config::Config) -> Option<String> {
    let keys = super::run::restart_only_changes(running, new);
    (!keys.is_empty()).then(|| {
        format!(
            "needs a restart: {} (changed, but applied only at start: a reload keeps the running values)",
            keys.join(", ")
        )
    })
}

/// A rate for people: whole numbers from 10 up, one decimal below, two below 1, and
/// `<0.01` for a load there is but two decimals would show as none (one SNMP item
/// every 5 minutes printed `SNMP 0.00`).
fn rate(r: f64) -> String {
    match r {
        r if r >= 10.0 => format!("{r:.0}"),
        r if r >= 1.0 => format!("{r:.1}"),
        r if r > 0.0 && r < 0.005 => "<0.01".to_string(),
        r => format!("{r:.2}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn daemon(source_ip: &str) -> DaemonSection {
        let text = format!("[daemon]\nsource_ip = {source_ip}\n");
        crate::config::parse(&text)
            .unwrap_or_else(|e| panic!("{e:?}"))
            .daemon
    }

    #[test]
    fn the_source_line_says_where_each_familys_requests_leave_from() {
        assert_eq!(sources(&DaemonSection::default(), (true, true)), None);
        let v4 = daemon(r#""127.0.0.9""#);
        let only_v4 = "daemon.source_ip: requests leave from 127.0.0.9 (a loopback address: only this host's own addresses answer it)";
        assert_eq!(sources(&v4, (true, false)).as_deref(), Some(only_v4));
        assert_eq!(
            sources(&v4, (true, true)).unwrap(),
            format!("{only_v4}, IPv6 hosts from the route's address (no IPv6 source)")
        );
        let both = daemon(r#"["::1", "127.0.0.9"]"#);
        assert!(!sources(&both, (true, true)).unwrap().contains("route's"));
        // An address this host lacks: said, not an error.
        let gone = sources(&daemon(r#""192.0.2.77""#), (true, false)).unwrap();
        assert!(
            gone.contains("192.0.2.77 (source address 192.0.2.77: not an address of this host"),
            "{gone}"
        );
    }

    /// The discovery line names the file `run` saves to: under `--shard 1/2`, the
    /// shard's own, as `run --shard 1/2` names it.
    #[test]
    fn the_discovery_line_names_the_shards_file() {
        let cfg = crate::config::parse(
            "[daemon]\ndiscovery_file = \"/var/lib/netpoller/discovered.json\"\n[[templates]]\nname = \"t\"\ndiscovery = [ { name = \"r\", oid = \"1.3.6.1.2.1.2.2.1.2\" } ]\nitems = [ { key = \"x[{#SNMPINDEX}]\", oid = \"1.3.6.1.2.1.2.2.1.10.{#SNMPINDEX}\", type = \"uint\", interval = \"1m\", discovery = \"r\" } ]\n[[hosts]]\nname = \"h\"\nip = \"127.0.20.1\"\ntemplates = [\"t\"]\nsnmp = { community = \"public\" }\n",
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
        let line = discovery(&cfg, Some((1, 2))).unwrap();
        assert!(
            line.ends_with("saves them in /var/lib/netpoller/discovered.shard-1-of-2.json, `poll-once` walks them first)"),
            "{line}"
        );
        assert_eq!(
            cfg.discovery_file(Some((1, 2))),
            std::path::Path::new("/var/lib/netpoller/discovered.shard-1-of-2.json"),
            "run --shard 1/2's"
        );
        let line = discovery(&cfg, None).unwrap();
        assert!(
            line.contains("saves them in /var/lib/netpoller/discovered.json,"),
            "{line}"
        );
    }

    /// Each rule is counted on the hosts it is walked on: a rule of one template of two
    /// is not every host's (`2 rule(s) (a, b) walked on 3 host(s)` said b was walked on
    /// all three).
    #[test]
    fn the_discovery_line_counts_each_rules_hosts() {
        let template = |name: &str, rule: &str| {
            format!("[[templates]]\nname = \"{name}\"\ndiscovery = [ {{ name = \"{rule}\", oid = \"1.3.6.1.2.1.2.2.1.2\" }} ]\nitems = [ {{ key = \"{rule}[{{#SNMPINDEX}}]\", oid = \"1.3.6.1.2.1.2.2.1.10.{{#SNMPINDEX}}\", type = \"uint\", interval = \"1m\", discovery = \"{rule}\" }} ]\n")
        };
        let host = |name: &str, ip: &str, templates: &str| {
            format!("[[hosts]]\nname = \"{name}\"\nip = \"{ip}\"\ntemplates = {templates}\nsnmp = {{ community = \"public\" }}\n")
        };
        let text = format!(
            "{}{}{}{}{}",
            template("if", "if"),
            template("fs", "fs"),
            host("a", "127.0.220.1", r#"["if", "fs"]"#),
            host("b", "127.0.220.2", r#"["if"]"#),
            host("c", "127.0.220.3", r#"["if"]"#),
        );
        let cfg = crate::config::parse(&text).unwrap_or_else(|e| panic!("{e:?}"));
        let line = discovery(&cfg, None).unwrap();
        assert!(
            line.starts_with("discovery: 2 rule(s) walked (fs on 1 host(s), if on 3); "),
            "{line}"
        );
    }

    /// A load too small for two decimals is not shown as none.
    #[test]
    fn a_small_rate_is_not_printed_as_zero() {
        assert_eq!(rate(1.0 / 300.0), "<0.01");
        assert_eq!(rate(1.0 / 86_400.0), "<0.01");
        assert_eq!(rate(0.0), "0.00");
        assert_eq!(rate(0.02), "0.02");
        assert_eq!(rate(0.005), "0.01");
        assert_eq!(rate(4.2), "4.2");
    }

    /// `snmp.max_pps = 0` is no cap: there is no rate to be over.
    #[test]
    fn an_uncapped_snmp_rate_is_not_exceeded() {
        let mut cfg = crate::config::parse("[snmp]\nmax_pps = 0\n[[hosts]]\nname = \"h\"\nip = \"127.0.20.1\"\nitems = [ { key = \"up\", oid = \"1.3.6.1.2.1.1.3.0\", type = \"uint\", interval = \"1s\" } ]\n")
            .unwrap_or_else(|e| panic!("{e:?}"));
        let (icmp, snmp) = (cfg.icmp.max_pps, cfg.snmp.max_pps);
        let plan = cfg.take_plan(None, || {});
        assert_eq!(over_rate(&plan, icmp, snmp), Vec::<String>::new());
    }
}
