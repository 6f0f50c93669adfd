//! Logging setup: `tracing` events to stderr, human-readable or JSON (one object per
//! line), filtered by `--log-level`, else `RUST_LOG`, else `info`.
//!
//! Invariants:
//! * Logs go to stderr only; stdout stays free for command output (`check-config`,
//!   `poll-once` JSON) so it can be piped.
//! * In JSON mode every event is exactly one line holding one JSON object with at least
//!   `timestamp`, `level`, `target` and `message` (event fields are flattened to the top
//!   level next to `message`).
//! * Colours only when stderr is a terminal and `NO_COLOR` is unset.
//! * When stderr is journald's stream (`$JOURNAL_STREAM` names it: a systemd unit's
//!   default), each line starts with its level as a syslog priority (`<3>` error, `<4>`
//!   warn, `<6>` info, `<7>` debug and trace), which journald takes as the entry's
//!   `PRIORITY` and strips (`journalctl -p warning`), every line of a multi-line event
//!   alike; human lines then carry no time of their own (the journal's is the same).
//!   The commands' own lines outside the log (a fatal error, `check-config`'s
//!   warnings: [`eprint_at`], [`print_at`]) carry theirs likewise.
//! * The subscriber never sees secrets unless a call site logs them: call sites log
//!   host names and addresses, never SNMP communities or ClickHouse passwords.

use anyhow::Context as _;
use std::os::fd::AsFd as _;
use std::sync::atomic::{AtomicBool, Ordering};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

/// Log line format (`--log-format`). Default: `human`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// One readable line per event: time, level, target, message, fields.
    #[default]
    Human,
    /// One JSON object per line (for journald/Loki/Elasticsearch shippers).
    Json,
}

// Options every subcommand accepts (flattened into the top-level CLI, `global`). A plain
// comment on purpose: a doc comment here would replace the binary's `about` text.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct GlobalArgs {
    /// Log level or filter directives, e.g. `debug` or `info,poller=debug`.
    /// [default: $RUST_LOG, else `info` (`warn` with --quiet)]
    #[arg(long, global = true, value_name = "FILTER")]
    pub log_level: Option<String>,

    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Human)]
    pub log_format: LogFormat,

    /// Less output: no progress line, default log level `warn` instead of `info`, and
    /// commands print fewer notes (results stay: `sweep` prints each host's line, as
    /// `fping -q -c` its statistics).
    #[arg(short, long, global = true)]
    pub quiet: bool,
}

static QUIET: AtomicBool = AtomicBool::new(false);

/// Whether `--quiet` was given (set by [`GlobalArgs::init_logging`]); one-shot commands
/// pass it to [`crate::progress::Progress::new`].
#[allow(dead_code)] // read by the one-shot commands as they adopt progress lines
pub fn quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

impl GlobalArgs {
    /// Installs the global subscriber from these options (call once, early in `main`)
    /// and records `--quiet` for [`quiet`].
    pub fn init_logging(&self) -> anyhow::Result<()> {
        QUIET.store(self.quiet, Ordering::Relaxed);
        let default = if self.quiet { "warn" } else { "info" };
        let filter = resolve_filter(
            self.log_level.as_deref(),
            std::env::var("RUST_LOG").ok(),
            default,
        )?;
        install(self.log_format, filter)
    }
}

/// Installs the global subscriber writing to stderr. `level` (from `--log-level`) wins
/// over `RUST_LOG`; with neither, the level is `info`. Fails on an invalid filter or
/// when a global subscriber is already set.
#[allow(dead_code)] // the API named in issue 7; main uses GlobalArgs::init_logging
pub fn init(format: LogFormat, level: Option<&str>) -> anyhow::Result<()> {
    install(
        format,
        resolve_filter(level, std::env::var("RUST_LOG").ok(), "info")?,
    )
}

fn install(format: LogFormat, filter: EnvFilter) -> anyhow::Result<()> {
    let ansi = std::env::var_os("NO_COLOR").is_none()
        // SAFETY: isatty only inspects the descriptor number.
        && unsafe { libc::isatty(libc::STDERR_FILENO) } == 1;
    let journal = is_journal(
        std::io::stderr().as_fd(),
        std::env::var("JOURNAL_STREAM").ok().as_deref(),
    );
    let subscriber = build(format, filter, ansi, journal, std::io::stderr);
    tracing::subscriber::set_global_default(subscriber).context("installing the log subscriber")?;
    Ok(())
}

/// `--log-level`, else `RUST_LOG` (when set and not empty), else `default`.
fn resolve_filter(
    level: Option<&str>,
    env: Option<String>,
    default: &str,
) -> anyhow::Result<EnvFilter> {
    match (level, env.filter(|e| !e.trim().is_empty())) {
        // The parser's error repeats its cause in its own text: one line, not a chain.
        (Some(l), _) => {
            EnvFilter::try_new(l).map_err(|err| anyhow::anyhow!("invalid --log-level {l:?}: {err}"))
        }
        (None, Some(e)) => {
            EnvFilter::try_new(&e).map_err(|err| anyhow::anyhow!("invalid RUST_LOG {e:?}: {err}"))
        }
        (None, None) => Ok(EnvFilter::new(default)),
    }
}

/// Whether `fd` is the journald stream `$JOURNAL_STREAM` names (`DEVICE:INODE`, as
/// systemd sets it for a unit whose stdout or stderr goes to the journal): not merely
/// whether the variable is set, which a child whose output was redirected inherits.
fn is_journal(fd: std::os::fd::BorrowedFd<'_>, journal_stream: Option<&str>) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    let Some((dev, ino)) = journal_stream.and_then(|v| v.split_once(':')) else {
        return false;
    };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else {
        return false;
    };
    let Ok(fd) = fd.try_clone_to_owned() else {
        return false;
    };
    std::fs::File::from(fd)
        .metadata()
        .is_ok_and(|m| m.dev() == dev && m.ino() == ino)
}

/// A writer for journald's stream: each line it is given starts with the syslog
/// priority of the event's level (sd-daemon's `<N>` prefixes).
struct Journal<M>(M);

impl<'a, M: MakeWriter<'a>> MakeWriter<'a> for Journal<M> {
    type Writer = Prefixed<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        Prefixed {
            inner: self.0.make_writer(),
            prefix: b"<6>",
            line_start: true,
        }
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> Self::Writer {
        Prefixed {
            inner: self.0.make_writer_for(meta),
            prefix: priority(*meta.level()),
            line_start: true,
        }
    }
}

/// `level` as a syslog priority prefix, which journald takes as the line's `PRIORITY`.
fn priority(level: tracing::Level) -> &'static [u8] {
    match level {
        tracing::Level::ERROR => b"<3>",
        tracing::Level::WARN => b"<4>",
        tracing::Level::INFO => b"<6>",
        _ => b"<7>",
    }
}

/// Prints `text` (and a newline) to stderr for the operator, outside the log: a
/// command's fatal error. Under journald (an `ExecStartPre=` check-config's, a
/// unit's) each line carries `level`'s priority, as the log's lines do: without it
/// journald took a config that fails the start at priority info, and `journalctl -p
/// err` showed nothing of why the unit failed.
pub fn eprint_at(level: tracing::Level, text: &str) {
    write_at(std::io::stderr(), level, text);
}

/// [`eprint_at`] for stdout: check-config's warnings (the stream is the journal's when
/// both go there, systemd's default).
pub fn print_at(level: tracing::Level, text: &str) {
    write_at(std::io::stdout(), level, text);
}

fn write_at<S: std::io::Write + std::os::fd::AsFd>(stream: S, level: tracing::Level, text: &str) {
    let journal = is_journal(
        stream.as_fd(),
        std::env::var("JOURNAL_STREAM").ok().as_deref(),
    );
    // Nowhere to report a failed write to the operator's own stream.
    let _ = write_lines(stream, journal.then(|| priority(level)), text);
}

/// `text` and a newline to `out`, each line prefixed with `prefix` when there is one.
fn write_lines(
    out: impl std::io::Write,
    prefix: Option<&'static [u8]>,
    text: &str,
) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut out = Prefixed {
        inner: out,
        prefix: prefix.unwrap_or(b""),
        line_start: true,
    };
    out.write_all(format!("{text}\n").as_bytes())?;
    out.flush()
}

/// Writes `prefix` before each line of what it is given.
struct Prefixed<W> {
    inner: W,
    prefix: &'static [u8],
    line_start: bool,
}

impl<W: std::io::Write> std::io::Write for Prefixed<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut out = Vec::with_capacity(buf.len() + 2 * self.prefix.len());
        for line in buf.split_inclusive(|&b| b == b'\n') {
            if self.line_start {
                out.extend_from_slice(self.prefix);
            }
            out.extend_from_slice(line);
            self.line_start = line.ends_with(b"\n");
        }
        // One write of the whole event, as the formatter made it: journald reads lines
        // from a stream that other threads' events share.
        self.inner.write_all(&out)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// The subscriber for `format`, writing through `writer` (stderr in the daemon, a
/// buffer in tests); `journal`: `writer` is journald's stream ([`is_journal`]).
fn build<W>(
    format: LogFormat,
    filter: EnvFilter,
    ansi: bool,
    journal: bool,
    writer: W,
) -> Box<dyn tracing::Subscriber + Send + Sync>
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    match journal {
        // journald stamps each entry itself; its stream is no terminal.
        true => subscriber(format, filter, false, false, Journal(writer)),
        false => subscriber(format, filter, ansi, true, writer),
    }
}

/// [`build`]'s subscriber for `format` through `writer`, human lines with their time
/// when `time`.
fn subscriber<W>(
    format: LogFormat,
    filter: EnvFilter,
    ansi: bool,
    time: bool,
    writer: W,
) -> Box<dyn tracing::Subscriber + Send + Sync>
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    match format {
        LogFormat::Human if time => Box::new(b.with_ansi(ansi).finish()),
        LogFormat::Human => Box::new(b.with_ansi(ansi).without_time().finish()),
        LogFormat::Json => Box::new(
            b.json()
                .flatten_event(true)
                .with_current_span(true)
                .with_span_list(false)
                .finish(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_util::SharedBuf as Buf;

    fn capture(format: LogFormat, level: &str, f: impl FnOnce()) -> String {
        capture_to(format, level, false, f)
    }

    fn capture_to(format: LogFormat, level: &str, journal: bool, f: impl FnOnce()) -> String {
        let buf = Buf::default();
        let sub = build(
            format,
            resolve_filter(Some(level), None, "info").unwrap(),
            false,
            journal,
            buf.clone(),
        );
        tracing::dispatcher::with_default(&crate::test_util::dispatch(sub), f);
        buf.text()
    }

    #[test]
    fn json_is_one_object_per_line_with_level_and_message() {
        let out = capture(LogFormat::Json, "info", || {
            tracing::info!(engine = "icmp", hosts = 4000u64, "iteration done");
            let span = tracing::info_span!("shard", id = 3);
            let _g = span.enter();
            tracing::warn!("line with \"quotes\"\nand a newline");
            tracing::debug!("filtered out");
        });
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{out}");
        let a: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(a["level"], "INFO");
        assert_eq!(a["message"], "iteration done");
        assert_eq!(a["engine"], "icmp");
        assert_eq!(a["hosts"], 4000);
        assert!(a["timestamp"].is_string());
        let b: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(b["level"], "WARN");
        assert_eq!(b["message"], "line with \"quotes\"\nand a newline");
        assert_eq!(b["span"]["id"], 3);
    }

    #[test]
    fn human_format_has_level_message_fields_and_no_ansi() {
        let out = capture(LogFormat::Human, "debug", || {
            tracing::debug!(host = "core-1", "per-host detail");
            tracing::trace!("filtered out");
        });
        assert_eq!(out.lines().count(), 1, "{out}");
        assert!(
            out.contains("DEBUG")
                && out.contains("per-host detail")
                && out.contains("host=\"core-1\""),
            "{out}"
        );
        assert!(
            !out.contains('\x1b'),
            "ANSI escapes with ansi=false: {out:?}"
        );
        assert!(serde_json::from_str::<serde_json::Value>(out.trim()).is_err());
    }

    /// Under systemd, journald took every line at priority 6 (info), the daemon's
    /// errors and warnings too (`journalctl -p warning -u netpoller` showed none of a
    /// rejected reload's, verified under systemd 252), and each line carried a second
    /// timestamp.
    #[test]
    fn journal_lines_start_with_their_priority_and_carry_no_time() {
        let out = capture_to(LogFormat::Human, "debug", true, || {
            tracing::error!("rejected:\nline 17: unknown field");
            tracing::warn!(asked_kib = 16384, "buffer smaller");
            tracing::info!("started");
            tracing::debug!("detail");
        });
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 5, "{out}");
        for (line, prefix) in lines.iter().zip(["<3>", "<3>", "<4>", "<6>", "<7>"]) {
            assert!(line.starts_with(prefix), "{prefix}: {out}");
        }
        assert!(lines[0].contains("ERROR") && lines[2].contains("asked_kib=16384"));
        assert!(!out.contains("Z "), "a timestamp: {out}");
        let json = capture_to(LogFormat::Json, "info", true, || tracing::warn!("w"));
        let v: serde_json::Value = serde_json::from_str(json.strip_prefix("<4>").unwrap()).unwrap();
        assert!(v["timestamp"].is_string(), "{json}");
        // The variable alone is not the journal: stderr must be the stream it names.
        let stderr = std::io::stderr();
        assert!(!is_journal(stderr.as_fd(), None));
        assert!(!is_journal(stderr.as_fd(), Some("0:0")));
        assert!(!is_journal(stderr.as_fd(), Some("journal")));
        use std::os::unix::fs::MetadataExt as _;
        let fd = stderr.as_fd().try_clone_to_owned().unwrap();
        let m = std::fs::File::from(fd).metadata().unwrap();
        assert!(is_journal(
            stderr.as_fd(),
            Some(&format!("{}:{}", m.dev(), m.ino()))
        ));
    }

    /// A command's own lines (main's fatal error, check-config's warnings) went to
    /// journald with no priority: a config failing `ExecStartPre=` was logged at info.
    #[test]
    fn operator_lines_carry_their_priority_under_the_journal_only() {
        let mut out = Vec::new();
        let text = "netpoller: config.toml:3:1: unknown field\n  |\n3 | bogus = 1";
        write_lines(&mut out, Some(priority(tracing::Level::ERROR)), text).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "<3>netpoller: config.toml:3:1: unknown field\n<3>  |\n<3>3 | bogus = 1\n"
        );
        let mut out = Vec::new();
        write_lines(&mut out, None, "warning: no hosts").unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "warning: no hosts\n");
    }

    #[test]
    fn level_precedence_flag_then_env_then_default() {
        let env = Some("debug".to_string());
        assert_eq!(
            resolve_filter(Some("warn"), env.clone(), "info")
                .unwrap()
                .to_string(),
            "warn"
        );
        assert_eq!(
            resolve_filter(None, env, "info").unwrap().to_string(),
            "debug"
        );
        assert_eq!(
            resolve_filter(None, Some("  ".into()), "info")
                .unwrap()
                .to_string(),
            "info"
        );
        assert_eq!(
            resolve_filter(None, None, "warn").unwrap().to_string(),
            "warn"
        );
        let per_target = resolve_filter(Some("info,poller=debug"), None, "info")
            .unwrap()
            .to_string();
        assert!(per_target.contains("poller=debug"), "{per_target}");
    }

    #[test]
    fn invalid_filters_name_their_source() {
        let e = resolve_filter(Some("info,foo=notalevel"), None, "info").unwrap_err();
        assert!(format!("{e:#}").contains("--log-level"), "{e:#}");
        let e = resolve_filter(None, Some("foo=notalevel".into()), "info").unwrap_err();
        assert!(format!("{e:#}").contains("RUST_LOG"), "{e:#}");
    }

    #[test]
    fn global_args_parse_anywhere_on_the_command_line() {
        use clap::{Parser, Subcommand};
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            global: GlobalArgs,
            #[command(subcommand)]
            cmd: Cmd,
        }
        #[derive(Subcommand)]
        enum Cmd {
            Sweep,
        }
        let cli = Cli::try_parse_from([
            "netpoller",
            "sweep",
            "--log-format",
            "json",
            "-q",
            "--log-level",
            "debug",
        ])
        .unwrap();
        assert!(matches!(cli.cmd, Cmd::Sweep));
        assert_eq!(cli.global.log_format, LogFormat::Json);
        assert!(cli.global.quiet);
        assert_eq!(cli.global.log_level.as_deref(), Some("debug"));
        let cli = Cli::try_parse_from(["netpoller", "sweep"]).unwrap();
        assert_eq!(cli.global.log_format, LogFormat::Human);
        assert!(!cli.global.quiet);
        assert!(Cli::try_parse_from(["netpoller", "--log-format", "xml", "sweep"]).is_err());
        // Subcommands that declare their own `--quiet` (sweep, poll-once) share the value.
        #[derive(Parser)]
        struct Cli2 {
            #[command(flatten)]
            global: GlobalArgs,
            #[command(subcommand)]
            cmd: Cmd2,
        }
        #[derive(Subcommand)]
        enum Cmd2 {
            Sweep {
                #[arg(short, long)]
                quiet: bool,
            },
        }
        use clap::CommandFactory;
        Cli2::command().debug_assert();
        for argv in [["netpoller", "sweep", "-q"], ["netpoller", "-q", "sweep"]] {
            let cli = Cli2::try_parse_from(argv).unwrap();
            let Cmd2::Sweep { quiet } = cli.cmd;
            assert!(quiet && cli.global.quiet, "{argv:?}");
        }
    }
}
