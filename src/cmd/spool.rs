//! `netpoller spool`: look at and load the disk spool.
//!
//! `dump` prints every spooled row as TSV (`table, itemid, clock, ns, hostname,
//! itemname, value`, TabSeparated escaping) and works beside a running daemon.
//! `replay` loads the spool into the configured ClickHouse, oldest first, deleting each
//! segment once every record in it is confirmed; it refuses to run while a daemon holds
//! the same spool directory (its `rejected/` too: a running daemon sends those again
//! on SIGUSR1).

use anyhow::Context as _;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `netpoller spool`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub command: SpoolCommand,
}

/// `spool` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum SpoolCommand {
    /// Print spooled rows as TSV on stdout, no header: table, itemid, clock, ns,
    /// hostname, itemname, value (a trends row's value: `min=… max=… avg=… count=…`).
    Dump {
        /// Configuration file or directory, as `run -c` takes it (for
        /// `daemon.spool_dir`).
        #[arg(short, long, value_name = "PATH", required_unless_present = "dir")]
        config: Option<PathBuf>,
        /// Spool directory (overrides the config's `daemon.spool_dir`).
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// Dump the batches ClickHouse rejected as bad data (`<spool_dir>/rejected`).
        #[arg(long)]
        rejected: bool,
    },
    /// Load the spool into ClickHouse (the config's `[clickhouse]` section).
    ///
    /// For a spool no daemon runs with (stopped, or a shard removed): one a daemon runs
    /// with is refused (the daemon replays it itself once ClickHouse answers). The batches
    /// ClickHouse refused as bad data are under `<spool_dir>/rejected` (`--dir` there
    /// loads them; those refused again go to `rejected/rejected`); a running daemon
    /// sends them again on SIGUSR1 (`systemctl kill -s USR1 netpoller`). Exit 0 when
    /// everything was loaded, 1 when a segment could not be read (set aside, the rest
    /// loaded), 2 when ClickHouse stopped taking rows (the rest stays spooled).
    Replay {
        /// Configuration file or directory, as `run -c` takes it.
        #[arg(short, long, value_name = "PATH")]
        config: PathBuf,
        /// Spool directory (overrides the config's `daemon.spool_dir`).
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// Also write the trends hours a stop saved there (`trends-open-hours`), as a
        /// start without their items would: for the spool of a process that will not
        /// start again (a shard removed), whose hours nobody else takes back.
        #[arg(long)]
        open_hours: bool,
    },
}

/// `Ok` when the spool directory `dir` is there; else the error, with where a relative
/// one was looked for (the current directory, not the config file's nor the daemon's
/// working directory) and how to name the daemon's.
fn existing(dir: &std::path::Path) -> anyhow::Result<()> {
    sink::spool::existing_dir(dir).map_err(|e| {
        let cwd = std::env::current_dir().ok();
        match cwd.filter(|_| dir.is_relative()) {
            Some(cwd) => anyhow::anyhow!(
                "{e} (relative to the current directory, {}; the daemon's spool is under the directory it runs in: name it with --dir DIR)",
                cwd.display()
            ),
            None => anyhow::anyhow!("{e} (the daemon creates it when it starts; --dir DIR names another spool)"),
        }
    })
}

fn load(path: &std::path::Path) -> Result<crate::config::Config, ExitCode> {
    crate::config::load(path).map_err(|e| {
        eprint!("{e}");
        ExitCode::from(1)
    })
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.command {
        SpoolCommand::Dump {
            config,
            dir,
            rejected,
        } => {
            let dir = match (dir, config) {
                (Some(d), _) => d,
                (None, Some(c)) => match load(&c) {
                    Ok(cfg) => cfg.daemon.spool_dir,
                    Err(code) => return Ok(code),
                },
                (None, None) => anyhow::bail!("give -c FILE or --dir DIR"),
            };
            // The spool must be there; its `rejected/` appears with the first
            // rejection.
            existing(&dir)?;
            let dir = if rejected {
                let r = dir.join("rejected");
                if !r.exists() {
                    eprintln!("{}: nothing was ever rejected", r.display());
                    return Ok(ExitCode::SUCCESS);
                }
                r
            } else {
                dir
            };
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            let report = sink::dump_tsv(&dir, &mut out)?;
            std::io::Write::flush(&mut out)?;
            let mut also = String::new();
            if report.confirmed_records > 0 {
                also += &format!(
                    ", {} record(s) already in ClickHouse not shown (a replay in progress)",
                    report.confirmed_records
                );
            }
            if report.unreadable_segments > 0 {
                also += &format!(
                    ", {} segment(s) that cannot be read",
                    report.unreadable_segments
                );
            }
            eprintln!(
                "{}: {} segment(s), {} row(s), {} corrupted record(s) skipped{also}",
                dir.display(),
                report.segments,
                report.rows,
                report.corrupt_records
            );
            Ok(if report.unreadable_segments > 0 {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            })
        }
        SpoolCommand::Replay {
            config,
            dir,
            open_hours,
        } => {
            let cfg = match load(&config) {
                Ok(c) => c,
                Err(code) => return Ok(code),
            };
            let Some(ch) = cfg.clickhouse.clone() else {
                anyhow::bail!(
                    "{}: no [clickhouse] section to replay into",
                    config.display()
                );
            };
            let mut spool = super::spool_config(&cfg);
            let dump_rejected = dump_rejected(dir.as_deref(), &config);
            if let Some(d) = dir {
                spool.dir = d;
            }
            existing(&spool.dir)?;
            let saved = spool.dir.join(super::run::OPEN_HOURS_FILE);
            if open_hours {
                if !ch.trends {
                    anyhow::bail!(
                        "{}: trends are off (clickhouse.trends = false): the open hours are not written",
                        config.display()
                    );
                }
                match spool_open_hours(&spool, &saved)? {
                    Some(n) => eprintln!(
                        "{}: {n} open trends hour(s) moved into the spool",
                        saved.display()
                    ),
                    None => eprintln!("{}: no open trends hours saved", saved.display()),
                }
            } else if saved.exists() {
                eprintln!(
                    "{}: open trends hours a stop saved, which the next start of its process takes back (left alone; for the spool of a process that will not start again, replay with --open-hours to write them)",
                    saved.display()
                );
            }
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            // Progress = spool bytes gone (segments are deleted once ClickHouse
            // confirmed them), sampled while the replay runs.
            let total = dir_bytes(&spool.dir);
            let mut progress = crate::progress::Progress::new(
                total,
                "replaying spool bytes",
                crate::telemetry::quiet(),
            );
            let result = rt.block_on(async {
                let replay = sink::replay_spool(&ch, &spool);
                tokio::pin!(replay);
                let mut tick = tokio::time::interval(std::time::Duration::from_millis(200));
                let mut done = 0;
                loop {
                    tokio::select! {
                        r = &mut replay => break r,
                        _ = tick.tick() => {
                            let now_done = total.saturating_sub(dir_bytes(&spool.dir));
                            progress.inc(now_done.saturating_sub(done));
                            done = done.max(now_done);
                        }
                    }
                }
            });
            progress.finish();
            let (report, failed) = match result {
                Ok(r) => (r, None),
                Err((e @ (sink::SinkError::Insert(_) | sink::SinkError::Closed), r)) => {
                    (r, Some(e))
                }
                Err((sink::SinkError::Spool(sink::spool::SpoolError::Locked(d, pid)), _)) => {
                    return Err(in_use(&d, pid));
                }
                // Nothing was loaded (no spool, a bad config): the error says it all.
                Err((e, _)) => return Err(e.into()),
            };
            println!("{}", replayed(&spool.dir, &report, &dump_rejected));
            match failed {
                // The rest stays spooled for a later run.
                Some(e) => Err(anyhow::Error::new(e).context("the rest stays in the spool")),
                None if report.unreadable_segments > 0 => Ok(ExitCode::from(1)),
                None => Ok(ExitCode::SUCCESS),
            }
        }
    }
}

/// The command that dumps the rows a replay of `dir` (the config's spool when `None`)
/// rejects: they go to `rejected/` under the directory replayed, also when that is a
/// `rejected/` itself.
fn dump_rejected(dir: Option<&std::path::Path>, config: &std::path::Path) -> String {
    match dir {
        Some(d) => format!("netpoller spool dump --dir {} --rejected", d.display()),
        None => format!("netpoller spool dump -c {} --rejected", config.display()),
    }
}

/// The line a replay of `dir` ends with: what it loaded, rejected and skipped, and the
/// command that dumps the rows rejected (`dump_rejected`) when there are any.
fn replayed(dir: &std::path::Path, report: &sink::ReplayReport, dump_rejected: &str) -> String {
    let see = match report.rejected_rows {
        0 => String::new(),
        _ => format!(" (see `{dump_rejected}`)"),
    };
    let mut also = String::new();
    if report.unreadable_segments > 0 {
        also += &format!(
            ", {} segment(s) that cannot be read set aside as *.seg.unreadable",
            report.unreadable_segments
        );
    }
    format!(
        "{}: replayed {} row(s) from {} segment(s); {} row(s) rejected{see}, {} corrupted record(s) skipped{also}",
        dir.display(),
        report.rows,
        report.segments,
        report.rejected_rows,
        report.corrupt_records
    )
}

/// Turns the open trends hours a stop saved at `saved` into trends rows appended to the
/// spool (taking its lock, so not beside the daemon that uses it), then removes the
/// file: the replay that follows loads them with the rest, and a failed one leaves them
/// spooled. `None`: there is no such file.
fn spool_open_hours(
    spool: &sink::SpoolConfig,
    saved: &std::path::Path,
) -> anyhow::Result<Option<usize>> {
    let bytes = match std::fs::read(saved) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(anyhow::Error::new(e).context(format!("reading {}", saved.display()))),
    };
    // A plan without items: every hour is written, as by a start that polls none of them.
    let mut trends =
        poller::trends::Trends::new(std::sync::Arc::new(poller::plan::Plan::build(Vec::new())));
    let hour = poller::engine::clock_now().0 / 3600;
    let mut rows = Vec::new();
    trends
        .restore_open(&bytes, hour, poller::trends::SavedBy::Stop, &mut rows)
        .map_err(|e| anyhow::anyhow!("{}: {e}", saved.display()))?;
    let n = rows.len();
    let mut sp =
        match sink::spool::Spool::open(spool, std::sync::Arc::new(sink::SinkMetrics::default())) {
            Ok(sp) => sp,
            Err(sink::spool::SpoolError::Locked(d, pid)) => return Err(in_use(&d, pid)),
            Err(e) => return Err(e.into()),
        };
    let limits = sink::batch::Limits {
        rows: usize::MAX,
        bytes: usize::MAX,
        age: std::time::Duration::MAX,
    };
    let mut pending =
        [sink::Table::TrendsDbl, sink::Table::TrendsUint].map(sink::batch::Pending::new);
    for r in rows {
        let (table, row) = super::run::trend_row(r);
        let at = usize::from(table == sink::Table::TrendsUint);
        pending[at].push(&row, tokio::time::Instant::now, &limits);
    }
    for batch in pending.iter_mut().filter_map(sink::batch::Pending::take) {
        sp.append(&batch)?;
    }
    // Synced before the file goes: the hours are in the spool or still in the file.
    sp.close();
    drop(sp);
    crate::fsutil::remove(saved).with_context(|| {
        format!(
            "removing {} (its hours are spooled: remove it before its process starts again)",
            saved.display()
        )
    })?;
    Ok(Some(n))
}

/// `spool replay` of a spool whose lock another process holds: a daemon running with
/// it, which replays its spool itself, and its reject spool (`rejected/`, also locked
/// while it runs) when sent SIGUSR1. The spool's own words for a lock held (a
/// `spool_dir` per process) are advice for a second daemon, not for this command.
fn in_use(dir: &std::path::Path, pid: Option<u32>) -> anyhow::Error {
    let (whose, kill) = match pid {
        Some(pid) => (format!("pid {pid}: "), format!("kill -USR1 {pid}")),
        None => (String::new(), "kill -USR1 <pid>".to_string()),
    };
    anyhow::anyhow!(
        "spool {} is in use by a running netpoller ({whose}lock held on spool.lock): a \
         daemon replays its spool itself once ClickHouse answers, and sends its reject \
         spool (rejected/), which it holds too, again when sent SIGUSR1 (`{kill}`, or \
         `systemctl kill -s USR1 netpoller`): no need to stop it",
        dir.display()
    )
}

/// Bytes of the spool's segment files (not descending into `rejected/`).
fn dir_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|it| {
            it.filter_map(Result::ok)
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// The replay's line names the dump of the rows it rejected, the directory replayed
    /// (`--dir <spool>/rejected` puts them under `<spool>/rejected/rejected`, which
    /// `spool dump -c FILE --rejected` does not show) or else the config; and only when
    /// it rejected some: "0 row(s) rejected (see `netpoller spool dump ...`)" sent the
    /// operator to dump nothing.
    #[test]
    fn the_replay_names_the_dump_only_of_rows_it_rejected() {
        let spool = Path::new("/var/lib/netpoller/spool/rejected");
        let config = Path::new("/etc/netpoller/hosts.toml");
        let by_dir = dump_rejected(Some(spool), config);
        assert_eq!(
            by_dir,
            "netpoller spool dump --dir /var/lib/netpoller/spool/rejected --rejected"
        );
        assert_eq!(
            dump_rejected(None, config),
            "netpoller spool dump -c /etc/netpoller/hosts.toml --rejected"
        );
        let mut report = sink::ReplayReport {
            segments: 2,
            rows: 10,
            ..Default::default()
        };
        assert_eq!(
            replayed(spool, &report, &by_dir),
            "/var/lib/netpoller/spool/rejected: replayed 10 row(s) from 2 segment(s); 0 row(s) rejected, 0 corrupted record(s) skipped"
        );
        report.rejected_rows = 3;
        assert_eq!(
            replayed(spool, &report, &by_dir),
            format!("/var/lib/netpoller/spool/rejected: replayed 10 row(s) from 2 segment(s); 3 row(s) rejected (see `{by_dir}`), 0 corrupted record(s) skipped")
        );
    }
}
