//! `netpoller`: the daemon and its one-shot tools.
//!
//! This binary only parses the command line, loads the configuration and wires the
//! library crates together; protocol logic lives in `icmp`, `snmp`, `poller` and `sink`.

mod cmd;
mod config;
mod discovery;
mod fsutil;
mod http;
mod privdrop;
mod progress;
mod sdnotify;
mod telemetry;
#[cfg(test)]
mod test_util;
mod walker;

use clap::{Parser, Subcommand};

const EXAMPLES: &str = "\
Examples:
  netpoller check-config -c /etc/netpoller/netpoller.toml   validate, list every error with its line
  netpoller check-config -c new.toml --against netpoller.toml   what a reload to new.toml changes
  netpoller poll-once -c netpoller.toml --json             poll each item once, print JSON lines
  netpoller run -c netpoller.toml --user netpoller         the daemon (HUP reloads, TERM flushes)
  netpoller run -c netpoller.toml --shard 0/2              this process polls half of the hosts
  netpoller sweep 192.0.2.0/24 --count 3 --timeout 1s      fping-style sweep of a prefix
  netpoller snmp get 192.0.2.1 1.3.6.1.2.1.1.3.0           like net-snmp's snmpget (-c public -v 2c)
  netpoller schema -c netpoller.toml --apply               create / verify the ClickHouse tables
  netpoller spool dump -c netpoller.toml                   spooled values as TSV

Docs: README.md (configuration reference), docs/production.md, BENCHMARKS.md";

/// ICMP and SNMP poller that writes Zabbix (Glaber) history into ClickHouse.
#[derive(Parser, Debug)]
#[command(name = "netpoller", version, about, long_about = None, after_help = EXAMPLES)]
struct Cli {
    #[command(flatten)]
    global: telemetry::GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the daemon: poll on schedule, write history to ClickHouse (or the spool),
    /// and hourly trends of numeric items (clickhouse.trends).
    ///
    /// Signals: SIGHUP reloads hosts, templates, items and their key defaults (an invalid
    /// file is rejected with every error and the running config stays; settings that
    /// apply only at start, such as `[clickhouse]` or `max_pps`, are named in a warning).
    /// SIGUSR1: the batches ClickHouse refused as bad data (rejected/) are tried again,
    /// once their cause is fixed (those refused again go back).
    /// SIGTERM/SIGINT: running iterations end, the trends hours still open are saved in
    /// the spool folder (the next start continues them), ClickHouse gets at most 10 s
    /// for what is in flight, the rest goes to the spool, exit 0. /metrics and /healthz
    /// on daemon.metrics_listen.
    Run(cmd::run::Args),
    /// Check a configuration file: exit 0 when valid, 1 with every error listed.
    CheckConfig(cmd::check_config::Args),
    /// Poll every item of a config once and print the results (no ClickHouse needed).
    ///
    /// The same engines, value conversion and preprocessing as the daemon: what would
    /// be stored, or the error that makes an item unsupported. A value the daemon would
    /// not store shows as polled, marked with the reason (one poll gives a change step
    /// such as CHANGE_PER_SECOND nothing to compare with; a step's error handler may
    /// discard it). Discovery rules are walked first (each host's rows on stderr), and
    /// their items polled for the rows found; a host's rows the loader refuses are
    /// left out, named on stderr, and the rest polled, then exit 1.
    ///
    /// An item that gets no value is a result, not a failed command: its line says
    /// `ERROR` and the error text the daemon has for it (with --json `"error"` and its
    /// class, `"reason"`), and the exit status stays 0 (1 for an invalid config or
    /// refused rows).
    PollOnce(cmd::poll_once::Args),
    /// Ping addresses, CIDRs, ranges or @files once (fping-style summary, or --json);
    /// exit 1 when a host did not answer, as fping.
    ///
    /// Examples: `netpoller sweep 192.0.2.0/24` (each host's line: alive or
    /// unreachable, loss, min/avg/max, and the ICMP error a router sent back, if one
    /// did); `netpoller sweep -a 192.0.2.1-254 > up.txt` (the addresses that answer);
    /// `netpoller sweep -C 5 -i 20ms 192.0.2.1` (each request's round trip, as `fping -C
    /// 5`); `netpoller sweep -l 192.0.2.1 192.0.2.2` (every second until Ctrl-C, as
    /// `fping -l`: watching hosts through a change); `netpoller sweep --json -c 1 @hosts.txt`; `... | netpoller sweep @-`.
    ///
    /// The sweep never waits for the reader of its results, which would make hosts read
    /// as lost: what stdout has not taken yet (`netpoller sweep ... | less` left on its
    /// first page) waits in memory up to 4 MiB, the rest in a temporary file in $TMPDIR.
    Sweep(cmd::sweep::Args),
    /// One-shot SNMP queries: `snmp get TARGET OID...`, `snmp walk TARGET [OID]`.
    Snmp(Box<cmd::snmp::Args>),
    /// Print the ClickHouse history DDL, or create (--apply) / verify (--check) it.
    Schema(cmd::schema::Args),
    /// Disk spool: `spool dump` (TSV), `spool replay` (load into ClickHouse).
    Spool(cmd::spool::Args),
    /// Print a Zabbix template export (YAML or JSON) as netpoller `[[templates]]`.
    ///
    /// ICMP simple checks and SNMP agent items with numeric OIDs, with their intervals
    /// and preprocessing, template macros resolved; every item written loads (the
    /// config loader checks each). A discovery rule becomes a template `TEMPLATE: RULE`
    /// of its item prototypes per table row ({#SNMPINDEX}) with a `discovery` rule that
    /// walks each host's rows (its filter, where netpoller can say it); a rule it cannot
    /// walk leaves the rows to each host's `indices`. A dependent item reading its row of a `walk[]` (SNMP_WALK_VALUE,
    /// Zabbix 6.4+ templates) polls the row's OID at the walk's interval. What cannot be
    /// imported (other item types, symbolic OIDs, steps netpoller does not run, other
    /// discovery macros) is listed with the reason, as a comment in the output and on
    /// stderr. Exit 1 when nothing is importable.
    ///
    /// Example: `netpoller import-template zbx_export_templates.yaml > templates.toml`
    ImportTemplate(cmd::import_template::Args),
}

fn main() -> std::process::ExitCode {
    // Before anything else, while the process has one thread: a SIGHUP (or SIGUSR1) that
    // comes while `run` starts is a reload (a retry) to take once it has started, not the
    // end of the process (their default action). Held from `run`'s own start only, one sent right after the
    // exec (`systemctl start` then `reload`, Type=simple) still met the default action
    // during the command line's parsing and the logging's set-up: status 129.
    cmd::run::hold_control_signals(true);
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            if let Some(tip) = config_tip(&e, &args) {
                eprintln!("{tip}");
            }
            std::process::exit(e.exit_code());
        }
    };
    if !matches!(cli.command, Command::Run(_)) {
        // Only the daemon takes SIGHUP and SIGUSR1: a one-shot command ends with its terminal.
        cmd::run::hold_control_signals(false);
        // The one-shot commands print for pipelines: `netpoller snmp walk … | head` ends
        // quietly, as `cat` would, not with a panic or an error about the pipe. (Rust
        // ignores SIGPIPE; sockets send with MSG_NOSIGNAL either way. The daemon keeps
        // ignoring it: its logs may go to a pipe that must not stop the polling.)
        // SAFETY: setting a signal's disposition to its default, before any thread.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    if let Err(e) = cli.global.init_logging() {
        telemetry::eprint_at(tracing::Level::ERROR, &format!("netpoller: {e:#}"));
        return std::process::ExitCode::from(2);
    }
    let result = match cli.command {
        Command::Run(args) => cmd::run::run(args),
        Command::CheckConfig(args) => cmd::check_config::run(args),
        Command::PollOnce(args) => cmd::poll_once::run(args),
        Command::Sweep(args) => cmd::sweep::run(args),
        Command::Snmp(args) => cmd::snmp::run(*args),
        Command::Schema(args) => cmd::schema::run(args),
        Command::Spool(args) => cmd::spool::run(args),
        Command::ImportTemplate(args) => cmd::import_template::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            telemetry::eprint_at(tracing::Level::ERROR, &format!("netpoller: {e:#}"));
            std::process::ExitCode::from(2)
        }
    }
}

/// For a file named where clap wanted none (`netpoller check-config bad.toml`), to a
/// command that takes `-c FILE`: how to write it. clap says only that the argument was
/// unexpected.
fn config_tip(e: &clap::Error, args: &[std::ffi::OsString]) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    use clap::CommandFactory;
    if e.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    if arg.starts_with('-') {
        return None;
    }
    let args: Vec<&str> = args.iter().skip(1).filter_map(|a| a.to_str()).collect();
    // With a -c already, the file is not what is missing.
    if args
        .iter()
        .any(|a| a.starts_with("-c") || a.starts_with("--config"))
    {
        return None;
    }
    let cli = Cli::command();
    let (name, sub) = args
        .iter()
        .find_map(|a| cli.find_subcommand(a).map(|sub| (a, sub)))?;
    let takes_config = sub.get_arguments().any(|a| a.get_id() == "config");
    takes_config
        .then(|| format!("\ntip: the configuration file goes after -c: netpoller {name} -c {arg}"))
}

#[cfg(test)]
mod tests {
    /// A file given without `-c` to a command that takes one is told how to write it;
    /// other unexpected arguments, and commands without `-c`, are left to clap's words.
    #[test]
    fn a_config_file_without_c_gets_a_tip() {
        use clap::Parser;
        let tip = |line: &str| {
            let args: Vec<std::ffi::OsString> = line.split(' ').map(Into::into).collect();
            let e = super::Cli::try_parse_from(&args).err()?;
            super::config_tip(&e, &args)
        };
        assert_eq!(
            tip("netpoller check-config bad.toml").as_deref(),
            Some("\ntip: the configuration file goes after -c: netpoller check-config -c bad.toml")
        );
        assert!(tip("netpoller poll-once netpoller.toml")
            .unwrap()
            .ends_with("netpoller poll-once -c netpoller.toml"));
        assert!(tip("netpoller --quiet check-config bad.toml")
            .unwrap()
            .ends_with("netpoller check-config -c bad.toml"));
        assert_eq!(tip("netpoller check-config -c a.toml --bogus"), None);
        assert_eq!(tip("netpoller check-config -c a.toml extra"), None);
        assert_eq!(tip("netpoller sweep 127.0.0.1 --bogus"), None);
        assert_eq!(tip("netpoller check-config -c a.toml"), None);
    }

    /// The README's lint commands are CI's (scripts/test.sh with NETPOLLER_LINT=1): it
    /// gave `cargo fmt` and `cargo clippy` without `--all` / `--workspace`, which at
    /// the workspace's root check the netpoller package alone, not the five crates.
    #[test]
    fn the_readme_lints_as_ci_does() {
        let readme = crate::test_util::readme().replace("\n  ", " ");
        let script = crate::test_util::doc("scripts/test.sh");
        let block = script
            .split_once("if [[ ${NETPOLLER_LINT:-0} == 1 ]]; then")
            .and_then(|(_, rest)| rest.split_once("\nfi"))
            .expect("the lint step of scripts/test.sh")
            .0;
        let lints: Vec<&str> = block
            .lines()
            .filter_map(|l| l.trim().strip_prefix("run "))
            .filter_map(|l| l.split_once(' ').map(|(_, cmd)| cmd))
            .map(|cmd| cmd.strip_prefix("env ").unwrap_or(cmd))
            .collect();
        assert_eq!(lints.len(), 3, "{lints:?}");
        for cmd in lints {
            assert!(readme.contains(&format!("`{cmd}`")), "README lacks `{cmd}`");
        }
    }

    /// `netpoller --help`'s examples fit clap's width off a terminal (100 columns, as in
    /// `--help | less`): the `run --user` line was 103 and its description broke onto a
    /// line of its own, under the commands.
    #[test]
    fn the_help_examples_fit_on_their_lines() {
        use clap::CommandFactory;
        let help = super::Cli::command().render_long_help().to_string();
        let examples = help.split_once("Examples:").unwrap().1;
        for line in examples.lines().filter(|l| !l.is_empty()) {
            assert!(
                line.starts_with("  netpoller ") || line.starts_with("Docs: "),
                "an example's line broke: {line:?}"
            );
        }
    }

    /// The README's "Command line" section, and the command line as clap builds it
    /// (global arguments reaching the subcommands).
    fn command_table_and_cli() -> (String, clap::Command) {
        use clap::CommandFactory;
        let readme = crate::test_util::readme();
        let start = readme.find("## Command line").unwrap();
        let end = readme.find("## Configuration reference").unwrap();
        let mut cli = super::Cli::command();
        cli.build();
        (readme[start..end].to_string(), cli)
    }

    /// Every command an operator is shown, by its path (`""` the root, `" snmp get"`):
    /// hidden commands (`snmp load`, a benchmark's) are not the operator's.
    fn shown_commands(cli: &clap::Command) -> Vec<(String, &clap::Command)> {
        let mut todo = vec![(String::new(), cli)];
        let mut all = Vec::new();
        while let Some((path, cmd)) = todo.pop() {
            let shown = cmd
                .get_subcommands()
                .filter(|s| s.get_name() != "help" && !s.is_hide_set());
            for sub in shown {
                todo.push((format!("{path} {}", sub.get_name()), sub));
            }
            all.push((path, cmd));
        }
        all
    }

    /// Tuning knobs with working defaults, which `help <command>` explains and the
    /// README's command table leaves out.
    const HELP_ONLY: &[&str] = &["rcvbuf", "max-oids", "max-repetitions"];

    /// The README's command table names every option of every command (by its long
    /// name or its short one), but for the tuning ones below, which `help <command>`
    /// explains: `schema --server-version` and `spool --dir` / `--rejected` were
    /// missing, and docs/production.md sent operators to `spool dump --rejected`.
    #[test]
    fn the_readme_names_every_option() {
        let (table, cli) = command_table_and_cli();
        let mut missing = Vec::new();
        for (path, cmd) in shown_commands(&cli) {
            for arg in cmd.get_arguments() {
                let Some(long) = arg.get_long().filter(|_| !arg.is_hide_set()) else {
                    continue;
                };
                if long == "help"
                    || (long == "version" && path.is_empty())
                    || HELP_ONLY.contains(&long)
                {
                    continue;
                }
                let named = table.contains(&format!("--{long}"))
                    || arg
                        .get_short()
                        .is_some_and(|c| table.contains(&format!("-{c} ")));
                if !named {
                    missing.push(format!("{path}: --{long}"));
                }
            }
        }
        assert!(
            missing.is_empty(),
            "not in the README's command table: {missing:?}"
        );
    }

    /// The defaults the README's command table gives (`` `--timeout` 500ms ``, `` `-r` 5
    /// ``) are clap's, which `--help` prints, for every option that has one: `sweep
    /// --count` and `snmp get`'s `-t`, `-r` and `-p` were given nowhere but there, then
    /// `sweep --max-pps`, `snmp -v` and `-c`, `walk`'s OID and `--log-format`.
    #[test]
    fn the_readme_gives_the_commands_defaults_as_clap_has_them() {
        let (table, cli) = command_table_and_cli();
        let mut wrong = Vec::new();
        for (path, cmd) in shown_commands(&cli) {
            // Flags (whose default is `false`) take no value; a global option is the
            // root's, given once.
            let options = cmd.get_arguments().filter(|a| {
                !a.is_hide_set()
                    && a.get_action().takes_values()
                    && (path.is_empty() || !a.is_global_set())
                    && !a.get_long().is_some_and(|l| HELP_ONLY.contains(&l))
            });
            for arg in options {
                let [default] = arg.get_default_values() else {
                    continue;
                };
                let default = default.to_string_lossy();
                let long = arg.get_long().map(|l| format!("`--{l}` {default}"));
                let short = arg.get_short().map(|c| format!("`-{c}` {default}"));
                // A positional argument by its value name (`OID`).
                let positional = arg.get_value_names().and_then(|names| {
                    (arg.get_long().is_none() && arg.get_short().is_none())
                        .then(|| format!("`{}` {default}", names[0]))
                });
                let mut spellings = [long, short, positional].into_iter().flatten();
                if !spellings.any(|s| table.contains(&s)) {
                    wrong.push(format!("{path}: {} {default}", arg.get_id()));
                }
            }
        }
        assert!(
            wrong.is_empty(),
            "the README's command table does not give these defaults: {wrong:?}"
        );
    }

    /// Every subcommand's `--quiet` is the global one, with its help: poll-once had a
    /// flag of its own whose help said "No progress line", while `-q` also lowered
    /// the log level to `warn` there, as everywhere.
    #[test]
    fn every_quiet_is_the_global_one() {
        use clap::CommandFactory;
        let mut cli = super::Cli::command();
        // Global arguments reach the subcommands when the command is built.
        cli.build();
        for sub in cli.get_subcommands().filter(|s| s.get_name() != "help") {
            let quiet = sub
                .get_arguments()
                .find(|a| a.get_id() == "quiet")
                .unwrap_or_else(|| panic!("{} has no --quiet", sub.get_name()));
            let help = quiet.get_help().unwrap().to_string();
            assert!(
                quiet.is_global_set() && help.contains("default log level `warn`"),
                "{}: --quiet: {help}",
                sub.get_name()
            );
        }
    }

    /// The shard template's drop-in (packaging/netpoller@.service.d/shard.conf) runs
    /// command lines netpoller takes, for an instance `0-4` (`%I` is `0/4`), and
    /// systemd reads it with the unit under the template's name (`systemd-analyze
    /// verify`: an unknown key, a bad value; the binary itself is not installed here,
    /// which is all it may say).
    #[test]
    fn the_shard_template_runs_command_lines_netpoller_takes_and_systemd_reads() {
        use clap::Parser;
        let dropin = crate::test_util::doc("packaging/netpoller@.service.d/shard.conf");
        let lines: Vec<&str> = (dropin.lines())
            .filter_map(|l| {
                l.strip_prefix("ExecStart=")
                    .or(l.strip_prefix("ExecStartPre="))
            })
            .filter(|l| !l.is_empty())
            .collect();
        assert_eq!(lines.len(), 2, "{dropin}");
        for line in lines {
            let line = line.replace("%I", "0/4").replace("%i", "0-4");
            let args: Vec<&str> = line.split(' ').collect();
            assert_eq!(args[0], "/usr/local/bin/netpoller", "{line}");
            let cli = super::Cli::try_parse_from(&args).unwrap_or_else(|e| panic!("{line}: {e}"));
            match cli.command {
                super::Command::Run(a) => {
                    assert_eq!(a.plan.shard, Some((0, 4)));
                    assert_eq!(
                        a.daemon.spool_dir.unwrap(),
                        std::path::Path::new("/var/lib/netpoller-0-4/spool")
                    );
                    assert!(a
                        .daemon
                        .discovery_file
                        .unwrap()
                        .starts_with("/var/lib/netpoller-0-4/"));
                }
                super::Command::CheckConfig(a) => assert_eq!(a.shard, Some((0, 4))),
                _ => panic!("{line}"),
            }
        }
        let units = tempfile::tempdir().unwrap();
        let dir = units.path().join("netpoller@.service.d");
        std::fs::create_dir(&dir).unwrap();
        let unit = crate::test_util::doc("packaging/netpoller.service");
        std::fs::write(units.path().join("netpoller@.service"), unit).unwrap();
        std::fs::write(dir.join("shard.conf"), &dropin).unwrap();
        let out = std::process::Command::new("systemd-analyze")
            .args(["verify", "--man=no", "netpoller@0-4.service"])
            .env("SYSTEMD_UNIT_PATH", format!("{}:", units.path().display()))
            .output()
            .expect("systemd-analyze (Debian's systemd)");
        let said = String::from_utf8_lossy(&out.stderr).to_string()
            + &String::from_utf8_lossy(&out.stdout);
        let other: Vec<&str> = (said.lines())
            .filter(|l| !l.contains("Command /usr/local/bin/netpoller is not executable"))
            .collect();
        assert!(other.is_empty(), "{said}");
    }

    /// The shard template's state directory, as systemd 252 set it up in a container
    /// (docs/production.md, "verified under systemd"): nested in the plain unit's
    /// (`netpoller/%i`), an instance failed to start (238/STATE_DIRECTORY, "File
    /// exists") on a machine that had run netpoller.service, whose dynamic user's
    /// /var/lib/netpoller is a symlink, and that unit after an instance; and the
    /// drop-in's empty `StateDirectory=` reset the unit's `StateDirectoryMode=0750` to
    /// 0755. The paths the command line writes are in that directory.
    #[test]
    fn the_shard_template_state_directory_is_beside_the_units_with_its_mode() {
        let unit = crate::test_util::doc("packaging/netpoller.service");
        let dropin = crate::test_util::doc("packaging/netpoller@.service.d/shard.conf");
        let values = |text: &str, key: &str| -> Vec<String> {
            (text.lines())
                .filter_map(|l| l.strip_prefix(&format!("{key}=")))
                .map(str::to_string)
                .collect()
        };
        assert_eq!(values(&unit, "StateDirectory"), ["netpoller"]);
        let state = values(&dropin, "StateDirectory");
        assert_eq!(state, ["", "netpoller-%i"], "{dropin}");
        assert_eq!(
            values(&dropin, "StateDirectoryMode"),
            values(&unit, "StateDirectoryMode"),
            "the drop-in's empty StateDirectory= resets the mode"
        );
        let dir = format!("/var/lib/{}/", state[1]);
        assert_eq!(
            values(&dropin, "WorkingDirectory"),
            [dir.trim_end_matches('/')]
        );
        let run = values(&dropin, "ExecStart").pop().unwrap();
        for flag in ["--spool-dir", "--discovery-file"] {
            let path = run.split(' ').skip_while(|a| *a != flag).nth(1);
            assert!(path.unwrap().starts_with(&dir), "{flag}: {run}");
        }
    }

    /// packaging/README.md names each file setting whose path the daemon writes, and
    /// must have under the unit's only writable directory: it named `daemon.spool_dir`
    /// alone, and a `daemon.discovery_file` elsewhere was never saved (each restart
    /// walked every host again). The trends checkpoint is in the spool.
    #[test]
    fn the_packaging_readme_names_every_path_the_daemon_writes() {
        let text = crate::test_util::doc("packaging/README.md");
        for key in ["daemon.spool_dir", "daemon.discovery_file"] {
            assert!(
                text.contains(&format!("`{key}`")),
                "packaging/README.md does not name `{key}`"
            );
        }
    }

    /// The quick start names the Rust the build needs: Debian 12's own rustc is older
    /// than the workspace's `rust-version`, and "with Rust" sent a fresh machine's
    /// `scripts/lab.sh` into a build that Cargo refuses.
    #[test]
    fn the_quick_start_names_the_rust_version() {
        let readme = crate::test_util::readme();
        let start = readme.find("## Quick start").expect("a quick start");
        let quick_start = &readme[start..start + readme[start..].find("```").unwrap()];
        let needed = format!("Rust {} or later", env!("CARGO_PKG_RUST_VERSION"));
        assert!(
            quick_start.contains(&needed),
            "the quick start does not say {needed:?}:\n{quick_start}"
        );
    }
}
