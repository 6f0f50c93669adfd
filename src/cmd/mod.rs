//! One module per subcommand; each exposes `Args` (clap) and `run`.

pub mod check_config;
pub mod import_template;
pub mod poll_once;
pub mod run;
pub mod schema;
pub mod snmp;
pub mod spool;
pub mod sweep;

use std::path::PathBuf;

use anyhow::Context as _;

use std::sync::Arc;

use crate::config::{self, Config, ConfigErrors, Found};
use poller::daemon::Limits;
use poller::plan::Plan;

/// `-c FILE [--shard I/N]`: the config and the part of it this process polls
/// (`run` and `poll-once`).
#[derive(clap::Args, Debug, Clone)]
pub struct PlanArgs {
    /// Configuration file (TOML), or a directory of them: its *.toml files, read in
    /// the order of their names as one file (a conf.d).
    #[arg(short, long, value_name = "PATH")]
    pub config: PathBuf,
    /// Poll only the hosts of shard I of N (stable hash of the host name), e.g. `0/2`.
    /// Overrides `daemon.shard`.
    #[arg(long, value_name = "I/N", value_parser = config::parse_shard)]
    pub shard: Option<(u32, u32)>,
    /// `run` once started: the `daemon.icmp_batch_hosts` its ICMP engines take sweeps
    /// of (a setting that applies only at start). The plans of its reloads and re-plans
    /// group ICMP hosts into sweeps of that size, whatever the file says now: grouped
    /// for a larger one, a group was more hosts than one sweep takes, and its sweeps
    /// queued behind each other (late iterations until the restart).
    #[arg(skip)]
    pub started_icmp_batch_hosts: Option<usize>,
    /// `run`'s `--metrics-listen`, `--spool-dir` and `--discovery-file`: set in every
    /// config it loads (its start's, its reloads' and re-plans'), so that a reload
    /// compares like with like and warns of no change the command line keeps from
    /// applying.
    #[arg(skip)]
    pub daemon: DaemonOverrides,
}

/// The `[daemon]` settings `run`'s command line overrides: those each of several
/// processes sharing one file on one machine must have its own of (the discovery file
/// gets the share's name by itself; its folder may have to be the process's own, as in
/// the packaged template, whose instances run as users of their own).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct DaemonOverrides {
    /// Listen for `/metrics` and `/healthz` here instead of `daemon.metrics_listen`
    /// (`""`: no endpoint): one port per process when several (`--shard`) share one
    /// file on one machine (packaging/README.md, a drop-in per instance).
    #[arg(
        long,
        value_name = "IP:PORT",
        env = "NETPOLLER_METRICS_LISTEN",
        value_parser = metrics_address
    )]
    pub metrics_listen: Option<String>,
    /// Spool here instead of `daemon.spool_dir` (and keep there the trends hours a stop
    /// saves): each of several processes sharing one file on one machine needs its own.
    #[arg(long, value_name = "DIR")]
    pub spool_dir: Option<PathBuf>,
    /// Keep the rows discovery finds here instead of `daemon.discovery_file` (named by
    /// the share, as that is: `--shard 1/4` saves `NAME.shard-1-of-4.json`).
    #[arg(long, value_name = "FILE")]
    pub discovery_file: Option<PathBuf>,
}

impl DaemonOverrides {
    /// `cfg` with the settings given here in place of its file's.
    fn apply(&self, cfg: &mut Config) {
        if let Some(m) = &self.metrics_listen {
            cfg.daemon.metrics_listen.clone_from(m);
        }
        if let Some(d) = &self.spool_dir {
            cfg.daemon.spool_dir.clone_from(d);
        }
        if let Some(f) = &self.discovery_file {
            cfg.daemon.discovery_file.clone_from(f);
        }
    }
}

/// `--metrics-listen`: `""` or an address the endpoint can bind, as the file's
/// `daemon.metrics_listen` is checked.
fn metrics_address(s: &str) -> Result<String, String> {
    match s.is_empty() || s.parse::<std::net::SocketAddr>().is_ok() {
        true => Ok(s.to_string()),
        false => Err(format!(
            "{s:?} is not an IP:port address (e.g. 127.0.0.1:9465; \"\": no endpoint)"
        )),
    }
}

impl PlanArgs {
    /// Tests: `config`, all of it, as a command line of `-c config` gives it.
    #[cfg(test)]
    pub fn of(config: PathBuf) -> PlanArgs {
        PlanArgs {
            config,
            shard: None,
            started_icmp_batch_hosts: None,
            daemon: DaemonOverrides::default(),
        }
    }

    /// Load and validate the config and build this process's plan from the hosts of
    /// its shard (moved out of the config, which keeps no second copy).
    ///
    /// Loading runs on the calling thread, so the loader's garbage is in the arena that
    /// `malloc_trim` returns to the system: the heap is trimmed as the plan takes the
    /// hosts (every [`config::PLAN_RELEASE_HOSTS`]) and once it is built, so the resident
    /// size is the plan's, and the peak is not config + plan. (On a thread of its
    /// own, the loader's ~100 MB at 1 M items went to a glibc arena of that thread,
    /// whose free top `malloc_trim` never returns: 170 MiB resident in some starts
    /// against 131 MiB in place; BENCHMARKS.md, run 9.)
    ///
    /// The items of discovery rules stand for the rows `found` gives; with `None`, the
    /// rows saved in `daemon.discovery_file` (none if it cannot be read, which is
    /// logged).
    pub fn load(&self, found: Option<&Found>) -> anyhow::Result<Result<Loaded, ConfigErrors>> {
        let none = Found::default();
        let (mut cfg, text) = match config::load_found(&self.config, found.unwrap_or(&none)) {
            Ok(c) => c,
            Err(e) => return Ok(Err(e)),
        };
        // (Before the discovery file is read; the configs parsed again below get them
        // in `plan`.)
        self.daemon.apply(&mut cfg);
        let found = match found {
            Some(f) => f.clone(),
            None if cfg.discovery.is_empty() => none,
            None => {
                let file = cfg.discovery_file(self.shard);
                let saved = match crate::discovery::read_file(&file) {
                    Ok(s) => {
                        for bad in &s.unreadable {
                            tracing::warn!(file = %file.display(), entry = %bad, "discovery: saved rows not used (walked again)");
                        }
                        // This process's hosts only: the file may be another share's
                        // (a reload changed `daemon.shard`, its rows saved where the
                        // start read them), whose hosts this plan drops.
                        let (i, n) = cfg.process_shard(self.shard);
                        let mut saved = s.for_rules(&cfg.discovery);
                        saved
                            .0
                            .retain(|host, _| poller::plan::host_in_process_shard(host, i, n));
                        self.rows_of_other_shares(&cfg, &mut saved);
                        saved
                    }
                    Err(e) => {
                        tracing::warn!(error = %format!("{e:#}"), "discovery: the rows saved before are not used (each host is walked again)");
                        Found::default()
                    }
                };
                if saved.0.is_empty() {
                    saved
                } else {
                    // Rows the loader refuses (past a limit) must not stop a start, nor
                    // keep out the other hosts' rows: those of the host rules refused
                    // are left out ([`crate::discovery::plan_rows`]).
                    let (mut taken, mut saved) = (Found::default(), saved);
                    let (took, refused) = self.plan_all_rows(&text, &mut taken, &mut saved);
                    if let Some(took) = took {
                        cfg = took;
                    }
                    for r in &refused {
                        tracing::warn!(file = %file.display(), host = %r.host, rule = %r.rule, "discovery: the rows saved before for this host are refused with the configuration, so not used (it is walked again):\n{}", r.why);
                    }
                    taken
                }
            }
        };
        Ok(Ok(self.plan(cfg, text, found)))
    }

    /// At a start, adds to `saved` (this share's rows) the rows the files of other
    /// shares hold of this share's hosts that have none in it: after a change of
    /// shares (another number of processes, a new `daemon.shard`), the hosts that moved
    /// here are polled at once, as a restart polls its own, not after their walks (a
    /// host's items missing from the start's plan also had the trends hour the last stop
    /// saved written at the start, and a second row of it after the walk). The newest
    /// file that has a host's rows gives them.
    fn rows_of_other_shares(&self, cfg: &Config, saved: &mut Found) {
        let (i, n) = cfg.process_shard(self.shard);
        let wanting = |saved: &Found, host: &str| {
            poller::plan::host_in_process_shard(host, i, n) && !saved.0.contains_key(host)
        };
        if !cfg.discovery.iter().any(|t| wanting(saved, &t.host)) {
            return;
        }
        for file in cfg.other_shares_discovery_files(self.shard) {
            let Ok(other) = crate::discovery::read_file(&file) else {
                continue;
            };
            let mut hosts = 0;
            for (host, rows) in other.for_rules(&cfg.discovery).0 {
                if wanting(saved, &host) {
                    saved.0.insert(host, rows);
                    hosts += 1;
                }
            }
            if hosts > 0 {
                tracing::info!(file = %file.display(), hosts, "discovery: rows of hosts new to this process shard taken from another share's file");
            }
        }
    }

    /// Plans the rows `found` on top of those the loader took before (`applied`), round
    /// after round ([`crate::discovery::plan_all_rows`]): the config of the last plan the
    /// loader took (`None` if it took none: `applied` is then as it was), and the host
    /// rules refused.
    fn plan_all_rows(
        &self,
        text: &str,
        applied: &mut Found,
        found: &mut Found,
    ) -> (Option<Config>, Vec<crate::discovery::Refused>) {
        let mut cfg = None;
        let refused = crate::discovery::plan_all_rows(applied, found, |rows| {
            cfg = Some(config::parse_text(&self.config, text, rows)?);
            Ok(())
        });
        (cfg, refused)
    }

    /// Builds the plan again from the `text` loaded before, with other rows `found`.
    pub fn replan(&self, text: Arc<str>, found: &Found) -> Result<Loaded, ConfigErrors> {
        let cfg = config::parse_text(&self.config, &text, found)?;
        Ok(self.plan(cfg, text, found.clone()))
    }

    fn plan(&self, mut cfg: Config, text: Arc<str>, found: Found) -> Loaded {
        self.daemon.apply(&mut cfg);
        // The file's value stays in `cfg` (a reload names it as changed).
        let asked = cfg.daemon.icmp_batch_hosts;
        if let Some(started) = self.started_icmp_batch_hosts {
            cfg.daemon.icmp_batch_hosts = started;
        }
        let plan = cfg.take_plan(self.shard, trim_heap);
        cfg.daemon.icmp_batch_hosts = asked;
        trim_heap();
        Loaded {
            cfg,
            plan,
            text,
            found,
        }
    }
}

/// What the file may well not mean but is valid: its [`Config::warnings`], and a
/// `plan` of no hosts (`shard`: this process's), which polls nothing. Not refused as a
/// reload refuses it (an empty or half-written file would stop the polling it
/// replaces): a start has no polling to keep, and `check-config` passes what `run`
/// starts with.
pub fn warnings(cfg: &Config, plan: &Plan, shard: (u32, u32)) -> Vec<String> {
    let mut out: Vec<String> = cfg.warnings.iter().map(ToString::to_string).collect();
    if plan.hosts.is_empty() {
        let theirs = match shard.1 {
            1 => "",
            _ => ", or none of their hosts is this shard's",
        };
        out.push(format!(
            "no hosts{}: it polls nothing (no [[hosts]] or [[host_ranges]] in the file{theirs})",
            shard_words("in", shard)
        ));
    }
    out
}

/// Logs the [`warnings`] (`check-config` prints the same lines): at a start, a reload
/// and `poll-once`, where nobody ran `check-config`.
pub fn warn_of(cfg: &Config, plan: &Plan, shard: (u32, u32)) {
    for w in warnings(cfg, plan, shard) {
        tracing::warn!("configuration: {w}");
    }
}

/// ` of shard 1/2` (with `prep` "of"), or nothing without shards.
pub fn shard_words(prep: &str, (i, n): (u32, u32)) -> String {
    match n {
        1 => String::new(),
        _ => format!(" {prep} shard {i}/{n}"),
    }
}

/// A config loaded for polling.
pub struct Loaded {
    pub cfg: Config,
    /// This process's plan (its shard's hosts, moved out of `cfg`).
    pub plan: Plan,
    /// The file's text, to re-plan from when discovery finds other rows.
    pub text: Arc<str>,
    /// The rows the plan's discovered items stand for.
    pub found: Found,
}

/// Completes at the first SIGINT (Ctrl-C) or SIGTERM, with its number: a one-shot
/// command's stop, for it to say what it has before it exits (with 128 + the number,
/// as a shell reports a process the signal stopped). Never completes when the handlers
/// cannot be installed (the signals then stop the process as by default).
pub async fn interrupted() -> u8 {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => libc::SIGINT as u8,
        _ = term.recv() => libc::SIGTERM as u8,
    }
}

/// `text` without its byte order mark, if it starts with one: a file saved by a Windows
/// editor or Excel (a target list, a template export) begins with U+FEFF, which is not
/// its content.
pub fn without_bom(text: &str) -> &str {
    text.strip_prefix('\u{feff}').unwrap_or(text)
}

/// Hands the heap's free pages back to the system (glibc; elsewhere nothing).
pub fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free heap memory; no pointer is invalidated.
    unsafe {
        libc::malloc_trim(0);
    }
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
        max_pps: cfg.icmp.max_pps,
        ident_filter: count > 1,
        source: cfg.daemon.source_addrs(),
        ..Default::default()
    };
    // Several sockets share one `max_pps`: a sweep running alone gets all of it.
    let pacer = (count > 1)
        .then(|| {
            poller::icmp_driver::SharedPacer::shared(
                cfg.icmp.max_pps,
                poller::icmp_driver::SEND_BURST,
            )
        })
        .flatten();
    let mut out = Vec::with_capacity(count);
    for _ in 0..count.max(1) {
        match poller::icmp_driver::IcmpDriver::open(opts) {
            Ok(mut d) => {
                if let Some(p) = &pacer {
                    d.share_pacer(p.clone());
                }
                out.push(d)
            }
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

/// The command line's `--source` addresses, at most one per family, each of the family
/// of at least one of `targets` (a source that applies to none would answer "the ACL
/// lets us in" from another address).
pub fn source_addrs(
    given: &[std::net::IpAddr],
    targets: &[std::net::IpAddr],
) -> anyhow::Result<poller::source::SourceAddrs> {
    let out = poller::source::SourceAddrs::of(given.iter().copied())
        .map_err(|wrong| anyhow::anyhow!("--source: {}", wrong.join("; ")))?;
    for ip in given {
        anyhow::ensure!(
            targets.iter().any(|t| t.is_ipv6() == ip.is_ipv6()),
            "--source {ip}: no target of its family (IPv{})",
            if ip.is_ipv6() { 6 } else { 4 }
        );
    }
    out.check()?;
    Ok(out)
}

/// Whether this host has the config's source addresses (`daemon.source_ip`): checked
/// before anything is sent, so that nothing leaves from another address.
pub fn check_sources(cfg: &Config) -> anyhow::Result<()> {
    cfg.daemon
        .source_addrs()
        .check()
        .context("daemon.source_ip")
}

/// Open the shared SNMP sockets.
pub fn open_snmp_driver(cfg: &Config) -> anyhow::Result<poller::snmp_driver::SnmpDriver> {
    poller::snmp_driver::SnmpDriver::open(snmp_driver_options(cfg))
        .map_err(|e| anyhow::anyhow!("opening SNMP sockets: {e}"))
}

fn snmp_driver_options(cfg: &Config) -> poller::snmp_driver::SnmpDriverOptions {
    poller::snmp_driver::SnmpDriverOptions {
        max_pps: cfg.snmp.max_pps,
        source: cfg.daemon.source_addrs(),
        ..Default::default()
    }
}

/// The daemon's SNMP drivers: `daemon.snmp_concurrent_iterations` of them, and up to
/// [`EXTRA_SNMP_DRIVERS`] times as many more for when slow devices hold them all, all
/// sharing one `snmp.max_pps`.
pub fn open_snmp_drivers(cfg: &Config) -> anyhow::Result<poller::daemon::SnmpDrivers> {
    let opts = snmp_driver_options(cfg);
    let pacer =
        poller::icmp_driver::SharedPacer::shared(opts.max_pps, poller::snmp_driver::SEND_BURST);
    let open = move || {
        let mut d = poller::snmp_driver::SnmpDriver::open(opts)?;
        if let Some(p) = &pacer {
            d.share_pacer(p.clone());
        }
        Ok(d)
    };
    let n = cfg.daemon.snmp_concurrent_iterations;
    let base = (0..n)
        .map(|_| open().map_err(|e| anyhow::anyhow!("opening SNMP sockets: {e}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(poller::daemon::SnmpDrivers {
        base,
        extra: n * EXTRA_SNMP_DRIVERS,
        open: Box::new(open),
    })
}

/// See [`open_snmp_drivers`].
pub const EXTRA_SNMP_DRIVERS: usize = 3;

#[cfg(test)]
mod tests {
    use super::*;

    /// Starts with the file of `one_host_past_the_item_limit` and `extra` hosts of its
    /// template, after a run saved the discovered rows `saved`: what the start planned,
    /// and its log.
    fn start_with_saved(extra: &[(&str, &str)], saved: &[(&str, &str, &str)]) -> (Loaded, String) {
        start_shard_with_saved(None, extra, saved)
    }

    /// [`start_with_saved`] for process shard `shard` (`run --shard`), whose file it is.
    fn start_shard_with_saved(
        shard: Option<(u32, u32)>,
        extra: &[(&str, &str)],
        saved: &[(&str, &str, &str)],
    ) -> (Loaded, String) {
        start_shard_with_saved_by(shard, shard, extra, saved)
    }

    /// [`start_shard_with_saved`], the rows saved in the file of share `saved_by`.
    fn start_shard_with_saved_by(
        saved_by: Option<(u32, u32)>,
        shard: Option<(u32, u32)>,
        extra: &[(&str, &str)],
        saved: &[(&str, &str, &str)],
    ) -> (Loaded, String) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("netpoller.toml");
        let daemon = format!(
            "discovery_file = \"{}/discovered.json\"",
            dir.path().display()
        );
        let mut text = crate::test_util::one_host_past_the_item_limit(&daemon);
        for (name, ip) in extra {
            text.push_str(&format!(
                "[[hosts]]\nname = \"{name}\"\nip = \"{ip}\"\ntemplates = [\"t\"]\nsnmp = {{ community = \"public\" }}\n"
            ));
        }
        std::fs::write(&path, text).unwrap();
        // Every host's targets: another process may have saved the file.
        let targets = PlanArgs::of(path.clone())
            .load(Some(&Found::default()))
            .unwrap()
            .unwrap()
            .cfg
            .discovery;
        let mut args = PlanArgs::of(path);
        args.shard = shard;
        let saved = crate::test_util::found(saved);
        let file = crate::config::load(&args.config)
            .unwrap()
            .discovery_file(saved_by);
        crate::discovery::write_file(&file, &saved, &targets).unwrap();
        let (loaded, text) = crate::test_util::logged(|| args.load(None));
        (loaded.unwrap().unwrap_or_else(|e| panic!("{e}")), text)
    }

    /// `run --discovery-file` (and `--spool-dir`, `--metrics-listen`) stand for the
    /// file's settings from the start on: the rows saved at the command line's path
    /// are the ones a start plans, not those of the file's `discovery_file`.
    #[test]
    fn the_command_lines_daemon_settings_stand_for_the_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("netpoller.toml");
        let daemon = format!(
            "discovery_file = \"{}/discovered.json\"",
            dir.path().display()
        );
        std::fs::write(
            &path,
            crate::test_util::one_host_past_the_item_limit(&daemon),
        )
        .unwrap();
        let bare = PlanArgs::of(path.clone());
        let targets = bare
            .load(Some(&Found::default()))
            .unwrap()
            .unwrap()
            .cfg
            .discovery;
        let saved = crate::test_util::found(&[("small", "if", "1-3")]);
        let own = dir.path().join("shard-state").join("rows.json");
        std::fs::create_dir_all(own.parent().unwrap()).unwrap();
        crate::discovery::write_file(&own, &saved, &targets).unwrap();
        let mut args = PlanArgs::of(path);
        args.daemon = DaemonOverrides {
            metrics_listen: Some(String::new()),
            spool_dir: Some(dir.path().join("shard-state").join("spool")),
            discovery_file: Some(own.clone()),
        };
        let loaded = args.load(None).unwrap().unwrap();
        assert_eq!(loaded.found, saved);
        assert_eq!(loaded.cfg.daemon.discovery_file, own);
        assert_eq!(loaded.cfg.daemon.metrics_listen, "");
        assert_eq!(
            loaded.cfg.daemon.spool_dir,
            dir.path().join("shard-state/spool")
        );
        // Without them: the file's, where nothing was saved.
        let loaded = bare.load(None).unwrap().unwrap();
        assert_eq!(loaded.found, Found::default());
        assert_eq!(loaded.cfg.daemon.metrics_listen, "127.0.0.1:9464");
    }

    /// A start whose saved rows of one host take the file past the loader's item
    /// limit leaves out that host's rows only: the other hosts' saved rows are planned
    /// at once (all of them were dropped, each host waiting for its walk).
    #[test]
    fn a_start_leaves_out_the_saved_rows_of_a_refused_host_only() {
        let saved = [("big", "if", "1-65536"), ("small", "if", "1-3")];
        let (loaded, text) = start_with_saved(&[], &saved);
        assert_eq!(loaded.plan.items.len(), 129 * 3);
        let want = crate::test_util::found(&[("small", "if", "1-3")]);
        assert_eq!(loaded.found, want);
        assert!(
            text.contains("past the") && text.contains("host=big rule=if"),
            "{text}"
        );
    }

    /// Many hosts' saved rows refused at a start: the others' are planned however many
    /// plans it takes to single the refused ones out (a round of the daemon's re-plan
    /// stops after a few, and left the rest, here `small`'s rows, out until a walk).
    #[test]
    fn a_start_plans_the_saved_rows_of_every_host_not_refused() {
        let names: Vec<(String, String)> = (1..=8)
            .map(|i| (format!("a{i}"), format!("127.0.51.{}", 10 + i)))
            .collect();
        let extra: Vec<(&str, &str)> = names.iter().map(|(n, ip)| (&n[..], &ip[..])).collect();
        let mut saved: Vec<(&str, &str, &str)> =
            extra.iter().map(|(h, _)| (*h, "if", "1-65536")).collect();
        saved.extend([("big", "if", "1-65536"), ("small", "if", "1-3")]);
        let (loaded, _) = start_with_saved(&extra, &saved);
        let want = crate::test_util::found(&[("small", "if", "1-3")]);
        assert_eq!(loaded.found, want);
        assert_eq!(loaded.plan.items.len(), 129 * 3);
    }

    /// A process shard's start takes the saved rows of its own hosts only. A file may
    /// hold other hosts' rows: the other shard's file after a reload changed
    /// `daemon.shard` (the rows are saved where the start read them) and a restart
    /// took the new share's name. Before, the start kept them all: planned for nothing
    /// (the plan drops the other shard's hosts) and saved again at each re-plan, the
    /// file then holding both shards' hosts.
    #[test]
    fn a_shards_start_takes_the_saved_rows_of_its_own_hosts_only() {
        let names: Vec<(String, String)> = (1..=8)
            .map(|i| (format!("a{i}"), format!("127.0.51.{}", 10 + i)))
            .collect();
        let extra: Vec<(&str, &str)> = names.iter().map(|(n, ip)| (&n[..], &ip[..])).collect();
        let saved: Vec<(&str, &str, &str)> = extra.iter().map(|(h, _)| (*h, "if", "1-3")).collect();
        let (loaded, _) = start_shard_with_saved(Some((1, 2)), &extra, &saved);
        let mine: Vec<(&str, &str, &str)> = saved
            .iter()
            .copied()
            .filter(|(h, _, _)| poller::plan::host_in_process_shard(h, 1, 2))
            .collect();
        assert!(!mine.is_empty() && mine.len() < saved.len(), "{mine:?}");
        assert_eq!(loaded.found, crate::test_util::found(&mine));
        assert_eq!(
            loaded.plan.items.len(),
            mine.len() * 3 * 129,
            "only the share's hosts are planned"
        );
    }

    /// A start after a change of shares (2 processes, then 3) takes the rows of the
    /// hosts that moved to its share from the file of the share that had them: they
    /// are polled at once, as a restart's own hosts are. Before, it read its own
    /// share's file only, which did not exist: every host waited for its walk, and the
    /// trends hours of its items that the last stop saved were written at the start,
    /// then again after the walk (two rows of the hour).
    #[test]
    fn a_start_after_a_change_of_shares_takes_its_hosts_rows_from_the_other_files() {
        let names: Vec<(String, String)> = (1..=8)
            .map(|i| (format!("a{i}"), format!("127.0.51.{}", 10 + i)))
            .collect();
        let extra: Vec<(&str, &str)> = names.iter().map(|(n, ip)| (&n[..], &ip[..])).collect();
        let saved: Vec<(&str, &str, &str)> = extra.iter().map(|(h, _)| (*h, "if", "1-3")).collect();
        let (loaded, log) = start_shard_with_saved_by(Some((0, 2)), Some((1, 3)), &extra, &saved);
        let mine: Vec<(&str, &str, &str)> = saved
            .iter()
            .copied()
            .filter(|(h, _, _)| poller::plan::host_in_process_shard(h, 1, 3))
            .collect();
        assert!(!mine.is_empty() && mine.len() < saved.len(), "{mine:?}");
        assert_eq!(loaded.found, crate::test_util::found(&mine), "{log}");
        assert!(log.contains("discovered.shard-0-of-2.json"), "{log}");
        // And back to one process: its file is `discovered.json`.
        let (loaded, _) = start_shard_with_saved_by(Some((1, 3)), None, &extra, &saved);
        assert_eq!(loaded.found, crate::test_util::found(&saved));
    }
}
