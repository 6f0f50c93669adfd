//! `netpoller sweep`: one ICMP sweep from the command line, fping-style.
//!
//! Targets are IP addresses, ranges (`FIRST-LAST`, every address of it, as `fping -g
//! FIRST LAST` and a `[[host_ranges]]` entry's `range`; `192.0.2.1-254`), CIDR prefixes (their host addresses, as `fping -g` and
//! `[[host_ranges]]` take them: network and broadcast addresses excluded below /31, an
//! IPv6 network's address below /127) or `@file` (`@-`: standard input; one address, CIDR or range per line, `#`
//! comments; a byte order mark at its start, a Windows editor's or Excel's, is
//! ignored; files that list no address, comments alone, are refused rather than
//! swept as nothing, exit 0). Duplicate addresses are probed once. More than 2^20
//! addresses, or 2^24 probes, are refused unless `--force`. Hosts are printed as they complete (alive hosts first, silent ones
//! at the deadline), line by line on a terminal; Ctrl-C (or SIGTERM) prints the hosts
//! done so far, then those still probing as they stood (as fping does: the same line,
//! with the replies they had, a request awaiting its reply counted as lost; in JSON
//! `"cut_short": true`), and exits 130 (143), even while stdout is not read (the results are
//! written by a thread of their own, see [`Output`]), nor stderr (its last message
//! too: [`output::last_words`]). The sweep never waits for stdout;
//! what stdout has not taken yet is held in memory up to [`output::HELD_IN_MEMORY`]
//! (4 MiB), the rest in a temporary file. The global `--quiet` leaves out
//! the progress line, the notes and the closing totals on stderr, not the hosts' lines
//! (as `fping -q -c` prints each host's statistics, and its totals only with `-s`).
//! An ICMP error that came back for a host's requests (a router's "host unreachable", a
//! firewall's reject) is named at the end of its line and in `--json`'s `icmp_error`, as
//! fping prints them (once per host here, the last); the requests still count as lost.
//! Raw sockets and ping sockets alike ([`poller::icmp_driver`]).
//! `-a`/`-u` print only the hosts that answered / did not, their addresses alone, as
//! fping's -a and -u.

use std::collections::HashSet;
use std::io::Write;
use std::net::IpAddr;
use std::process::ExitCode;
use std::time::Duration;

use crate::config::span::{parse_range, Span};
use anyhow::{bail, Context};
use ipnet::IpNet;
use output::Output;
use poller::icmp_driver::{IcmpDriver, IcmpOptions, PingJob, PingStats, SocketKind};

mod output;

/// Most addresses expanded without `--force`.
pub const MAX_TARGETS: u64 = 1 << 20;

/// Arguments of `netpoller sweep`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Echo requests per host (Zabbix `packets`, 1..=10000).
    #[arg(short = 'c', long, default_value_t = 3)]
    pub count: u32,
    /// Instead of --count: one echo request per host, and another only when the one
    /// before went unanswered, N more at most (fping's default mode, Zabbix's
    /// icmppingretry: a host that answers costs one packet).
    #[arg(short = 'r', long, value_name = "N", conflicts_with = "count")]
    pub retries: Option<u32>,
    /// As --count N, and each host's line lists every request's round trip in ms, `-`
    /// for one not answered within the timeout, as `fping -C N` prints them
    /// (`192.0.2.1 : 0.031 0.029 -`, with fping's digits: 3 below 1 ms, 2 below 10, 1
    /// below 100; in --json, `"rtts_ms": [0.031, 0.029, null]`).
    #[arg(
        short = 'C',
        long = "per-request",
        value_name = "N",
        conflicts_with_all = ["count", "retries"]
    )]
    pub per_request: Option<u32>,
    /// With --retries: each request waits this many times longer than the one before
    /// (1.0 to 5.0, two decimals; fping's -B). [default: 1.0, icmppingretry's; fping's
    /// is 1.5]
    #[arg(short = 'B', long, value_name = "F", requires = "retries")]
    pub backoff: Option<f64>,
    /// Per-request reply timeout, e.g. "500ms", "1s" (Zabbix minimum 50ms). The
    /// default is Zabbix's, as the icmpping items use it; `fping -c` waits the interval
    /// (at most 2 s) instead, so a host answering in 0.5 to 1 s is lost here, not there.
    #[arg(short = 't', long, default_value = "500ms", value_parser = sink::config::parse_duration)]
    pub timeout: Duration,
    /// Spacing between one host's requests, e.g. "20ms", "1s" (Zabbix minimum 20ms).
    #[arg(short = 'i', long, default_value = "1s", value_parser = sink::config::parse_duration)]
    pub interval: Duration,
    /// Payload bytes per request (Zabbix `size`, 24..=65507).
    #[arg(short = 's', long, default_value_t = 56)]
    pub size: usize,
    /// Global send rate limit, probes per second over all hosts (0 = unpaced).
    #[arg(long, default_value_t = 100_000)]
    pub max_pps: u32,
    /// Socket receive buffer, bytes.
    #[arg(long, default_value_t = 16 << 20)]
    pub rcvbuf: usize,
    /// Send from this local address (fping's -S, Zabbix's SourceIP; one per family may
    /// be given). Default: the route's.
    #[arg(short = 'S', long = "source", value_name = "ADDR")]
    pub source: Vec<IpAddr>,
    /// One JSON object per host instead of text lines.
    #[arg(long)]
    pub json: bool,
    /// Print only the hosts that answered, their addresses alone, one per line (fping's
    /// -a: `sweep -a 10.0.0.0/24` lists what is up); with --json their objects.
    #[arg(short = 'a', long, conflicts_with = "unreachable")]
    pub alive: bool,
    /// Print only the hosts that did not answer, their addresses alone (fping's -u);
    /// with --json their objects. The exit status stays fping's: 1 when one did not.
    #[arg(short = 'u', long)]
    pub unreachable: bool,
    /// Until Ctrl-C, one echo request to every host every --interval, each reply (or
    /// timeout) a line as it comes, as `fping -l` prints them: `192.0.2.1 : [3], 64
    /// bytes, 0.031 ms (0.029 avg, 0% loss)`, `192.0.2.2 : [3], timed out (NaN avg, 100%
    /// loss)`; with --json, an object each: `{"time","addr","seq","rtt_ms","avg_ms",
    /// "loss_pct"}` (`rtt_ms` null for a timeout; `icmp_error` when one came back);
    /// then each host's totals on stderr (the summary line), and the exit status of a
    /// sweep: 1 when a host never answered.
    #[arg(
        short = 'l',
        long = "loop",
        conflicts_with_all = ["count", "per_request", "retries", "alive", "unreachable", "reachable"]
    )]
    pub looping: bool,
    /// With --loop: each line begins with the time, `[1764777600.12345] ` (Unix
    /// seconds), as fping's -D.
    #[arg(short = 'D', long, requires = "looping")]
    pub timestamp: bool,
    /// Exit 0 when at least N hosts answered, 1 when fewer did (fping's -x: "is enough
    /// of the network up?"), instead of 1 when any host did not answer; a line on
    /// stderr says which, `enough hosts alive (required 3, alive 4)` or `not enough
    /// ...`, also with --quiet.
    #[arg(short = 'x', long, value_name = "N")]
    pub reachable: Option<usize>,
    /// Sweep more than 2^20 addresses, or more than 2^24 probes (addresses × count),
    /// which are refused without it.
    #[arg(long)]
    pub force: bool,
    /// IP address, CIDR prefix (its host addresses: network and broadcast excluded below
    /// /31, as `fping -g`; an IPv6 prefix's network address below /127), range
    /// (FIRST-LAST, both included, as `fping -g FIRST LAST`; 192.0.2.1-254: the last
    /// number alone) or @file (one
    /// address, CIDR or range per line, `#` comments; files that list none are refused; @-
    /// reads them from standard input, as fping does without targets).
    #[arg(required = true, value_name = "TARGET")]
    pub targets: Vec<String>,
}

fn parse_target(s: &str) -> anyhow::Result<Span> {
    // A range begins with an address (a name with a dash is a name, said to be one).
    if let Some(range) = parse_range(s) {
        return range.map_err(anyhow::Error::msg);
    }
    if s.contains('/') {
        // ipnet says "invalid IP address syntax" of a prefix too long for its family;
        // the config's hint says what is wrong instead, where it can.
        let net = s
            .parse::<IpNet>()
            .map_err(|e| match crate::config::cidr_hint(s) {
                hint if hint.is_empty() => anyhow::anyhow!("invalid CIDR {s:?}: {e}"),
                hint => anyhow::anyhow!("invalid CIDR {s:?}{hint}"),
            })?;
        poller::source::check_range(net.network(), net.broadcast()).map_err(anyhow::Error::msg)?;
        Ok(Span::Net(net))
    } else {
        let ip: IpAddr = s.parse().with_context(|| {
            // A host name, as fping takes it: said to be none, since nothing is
            // resolved (no DNS query leaves a poller).
            format!(
                "invalid target {s:?}: expected an IP address (names are not resolved: write the address), a CIDR, a range (FIRST-LAST) or @file"
            )
        })?;
        let ip = poller::source::check_address(ip).map_err(anyhow::Error::msg)?;
        Ok(Span::Net(IpNet::from(ip)))
    }
}

/// Expands targets into unique addresses, in order of first appearance (a CIDR's device
/// addresses and a range's addresses, as a host range's: [`Span`]), refusing too many
/// (for `count` packets each) before anything is allocated.
pub fn expand_targets(targets: &[String], count: u32, force: bool) -> anyhow::Result<Vec<IpAddr>> {
    let mut nets = Vec::new();
    for t in targets {
        if let Some(path) = t.strip_prefix('@') {
            // `@-`: standard input (fping reads its targets there: `... | fping`).
            let text = match path {
                "-" => std::io::read_to_string(std::io::stdin())
                    .context("reading targets from standard input")?,
                _ => std::fs::read_to_string(path)
                    .with_context(|| format!("reading target file {path}"))?,
            };
            for (n, line) in super::without_bom(&text).lines().enumerate() {
                let line = line.split('#').next().unwrap_or("").trim();
                if line.is_empty() {
                    continue;
                }
                nets.push(parse_target(line).with_context(|| format!("{path}:{}", n + 1))?);
            }
        } else {
            nets.push(parse_target(t.trim())?);
        }
    }
    // Only files can list nothing (every other target is at least one address). A
    // sweep of nothing would exit 0, "0 hosts, 0 alive": a script's `sweep @hosts.txt
    // || alert` would read an emptied list (a failed export) as every host up.
    if nets.is_empty() {
        bail!(
            "no address to sweep: {} list(s) none (only comments or blank lines)",
            targets.join(" ")
        );
    }
    let nets: Vec<_> = nets.into_iter().map(Span::hosts).collect();
    let total = nets.iter().fold(0u64, |acc, (hosts, _)| {
        acc.saturating_add(u64::try_from(*hosts).unwrap_or(u64::MAX))
    });
    if total > MAX_TARGETS && !force {
        bail!("targets expand to {total} addresses, more than {MAX_TARGETS} (2^20); pass --force to sweep them anyway");
    }
    // Duplicates make the addresses fewer, never more: this bounds what is allocated.
    check_probes(total, count, force)?;
    // At most what a sweep without --force may hold up front: with it, what the
    // addresses need as they come.
    let room = total.min(MAX_TARGETS) as usize;
    let mut seen = HashSet::with_capacity(room);
    let mut out = Vec::with_capacity(room);
    for (_, hosts) in nets {
        for ip in hosts {
            if seen.insert(ip) {
                out.push(ip);
            }
        }
    }
    Ok(out)
}

/// The limits a config's ICMP keys have (`poller::keys`), named by their flags; the
/// interval only matters with more than one request.
/// The probe `--retries` asks for, as the `icmppingretry` key of the same parameters
/// (its limits and errors); `None` without it.
fn retry_probe(args: &Args) -> anyhow::Result<Option<poller::keys::IcmpProbe>> {
    use poller::keys::{IcmpDefaults, IcmpKey, ItemKey};
    let Some(retries) = args.retries else {
        return Ok(None);
    };
    let backoff = args.backoff.map(|b| b.to_string()).unwrap_or_default();
    let key = format!(
        "icmppingretry[,{retries},{backoff},{},{}]",
        args.size,
        args.timeout.as_millis()
    );
    let parsed = ItemKey::parse(&key).map_err(anyhow::Error::msg)?;
    let k = IcmpKey::parse(&parsed, &IcmpDefaults::default())
        .map_err(|e| anyhow::anyhow!("--retries/--backoff/--size/--timeout: {e}"))?;
    Ok(Some(k.probe))
}

fn validate(args: &Args) -> anyhow::Result<()> {
    let probe = poller::keys::IcmpDefaults {
        packets: args.count,
        interval: args.interval,
        size: u32::try_from(args.size).unwrap_or(u32::MAX),
        timeout: args.timeout,
    };
    let wrong: Vec<String> = probe
        .check()
        .into_iter()
        .filter(|(what, _)| *what != "interval" || args.count > 1)
        .map(|(what, msg)| {
            let flag = match what {
                "packets" if args.per_request.is_some() => "per-request",
                "packets" => "count",
                other => other,
            };
            format!("--{flag}: {msg}")
        })
        .collect();
    if !wrong.is_empty() {
        bail!("{}", wrong.join("; "));
    }
    // Each limit may hold while their product does not: a sweep refuses a host whose
    // probes would last more than a day, and every host would read "unreachable 0/0".
    if args.retries.is_none() {
        let job = PingJob {
            addr: IpAddr::from([0, 0, 0, 0]),
            packets: args.count,
            interval: args.interval,
            size: args.size,
            timeout: args.timeout,
            retry: None,
        };
        if job.total_wait().is_none_or(|w| w > icmp::MAX_JOB_WAIT) {
            bail!(
                "--count {} x --interval {} ms + --timeout {} ms: one host's probes would last more than {} h, the most a sweep runs",
                args.count,
                args.interval.as_millis(),
                args.timeout.as_millis(),
                icmp::MAX_JOB_WAIT.as_secs() / 3600
            );
        }
    }
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// A duration in milliseconds with three decimals (µs), printed with integer arithmetic:
/// float formatting was a visible share of a large sweep's CPU.
struct Ms(Duration);

impl std::fmt::Display for Ms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let us = (self.0.as_nanos() + 500) / 1000;
        write!(f, "{}.{:03}", us / 1000, us % 1000)
    }
}

/// Writes one plain output line: `ADDR alive|unreachable sent/received loss% min/avg/max ms`,
/// then `; ` and the ICMP error that came back for one of its requests, if one did
/// (fping prints "ICMP Host Unreachable from ... for ICMP Echo sent to ..." per
/// request; here once per host, the last, on its line).
fn write_text<W: Write>(out: &mut W, addr: IpAddr, s: &PingStats) -> std::io::Result<()> {
    let (sent, received) = (s.sent, s.received);
    // A whole percentage, truncated as fping prints it (1 of 3 lost: 33%, 2: 66%).
    let loss = match sent {
        0 => 0,
        _ => u64::from(sent.saturating_sub(received)) * 100 / u64::from(sent),
    };
    match s.avg() {
        Some(avg) => write!(
            out,
            "{addr} alive {sent}/{received} {loss}% {}/{}/{} ms",
            Ms(s.min),
            Ms(avg),
            Ms(s.max)
        )?,
        None => write!(out, "{addr} unreachable {sent}/{received} {loss}% -/-/- ms")?,
    }
    match &s.error {
        Some(error) => writeln!(out, "; {error}"),
        None => writeln!(out),
    }
}

/// Writes `ADDR : RTT RTT -`, each request's round trip as `fping -C` prints it
/// (`rtts`: the host's requests, `count` of them; none when it was not probed: each a
/// `-` then).
fn write_rtts<W: Write>(
    out: &mut W,
    addr: IpAddr,
    count: u32,
    rtts: impl Iterator<Item = Option<Duration>>,
) -> std::io::Result<()> {
    write!(out, "{addr} :")?;
    let mut n = 0;
    for rtt in rtts {
        n += 1;
        match rtt {
            Some(rtt) => write!(out, " {}", FpingMs(rtt))?,
            None => write!(out, " -")?,
        }
    }
    for _ in n..count {
        write!(out, " -")?;
    }
    writeln!(out)
}

/// A round trip in milliseconds with fping's digits (its `sprint_tm`): 3 decimals below
/// 1 ms, 2 below 10, 1 below 100, none above, so that `-C`'s columns read as fping's.
struct FpingMs(Duration);

impl std::fmt::Display for FpingMs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let t = ms(self.0);
        match t {
            t if t < 1.0 => write!(f, "{t:.3}"),
            t if t < 10.0 => write!(f, "{t:.2}"),
            t if t < 100.0 => write!(f, "{t:.1}"),
            t => write!(f, "{t:.0}"),
        }
    }
}

/// `--loop`: rounds of one echo request to every host, a round every `--interval` (or
/// as soon as the one before ends, when it lasted longer), each reply or timeout
/// printed as it comes ([`write_round`]), until SIGINT or SIGTERM; then each host's
/// totals (its requests of every round, a request awaiting its reply as lost) on
/// stderr, and the exit status of a sweep.
async fn run_loop(
    args: &Args,
    addrs: &[IpAddr],
    jobs: &[PingJob],
    driver: &mut IcmpDriver,
    quiet: bool,
) -> anyhow::Result<ExitCode> {
    let jobs: Vec<PingJob> = jobs.iter().map(|j| PingJob { packets: 1, ..*j }).collect();
    // Line by line wherever stdout goes: a loop is watched, or filtered as it runs
    // (`| grep timed`, `| tee`).
    let mut out = results_output(true)?;
    let width = addrs.iter().map(|a| a.to_string().len()).max().unwrap_or(0);
    let mut per_host = vec![PingStats::default(); addrs.len()];
    let started = std::time::Instant::now();
    let signal = super::interrupted();
    tokio::pin!(signal);
    for round in 0u64.. {
        let start = tokio::time::Instant::now();
        let line = Round {
            seq: round,
            bytes: args.size + icmp::wire::HEADER_LEN,
            width,
            timestamp: args.timestamp,
            json: args.json,
        };
        let swept = driver.sweep_until(
            &jobs,
            |i, stats| {
                per_host[i].merge(stats);
                out.line(|b| write_round(b, &line, addrs[i], stats, &per_host[i]));
            },
            &mut signal,
        );
        if let Err(stopped) = swept.await {
            for (i, stats) in &stopped.unfinished {
                per_host[*i].merge(stats);
            }
            break;
        }
        // Nobody reads any more (`| head`): the loop ends, as fping's by SIGPIPE.
        if out.gone() {
            break;
        }
        tokio::select! {
            () = tokio::time::sleep_until(start + args.interval) => {}
            _ = &mut signal => break,
        }
    }
    out.close();
    // The lines still to be written, for as long as stdout takes them.
    let _ = tokio::time::timeout(INTERRUPT_GRACE, out.finished()).await;
    let mut summary = Vec::new();
    if !quiet {
        for (addr, stats) in addrs.iter().zip(&per_host) {
            write_text(&mut summary, *addr, stats)?;
        }
    }
    let alive = per_host.iter().filter(|s| s.is_alive()).count();
    if !quiet {
        let told = per_host
            .iter()
            .filter(|s| !s.is_alive() && s.error.is_some())
            .count();
        writeln!(
            summary,
            "{}",
            totals(addrs.len(), alive, told, started.elapsed())
        )?;
    }
    output::last_words(
        String::from_utf8_lossy(&summary).into_owned(),
        INTERRUPT_GRACE,
    );
    Ok(if alive == addrs.len() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The sweep's totals line: `N hosts, N alive, N unreachable (M with an ICMP error) in
/// T s` (`told`: the unreachable hosts an ICMP error came back for).
fn totals(hosts: usize, alive: usize, told: usize, wall: Duration) -> String {
    let told = match told {
        0 => String::new(),
        n => format!(" ({n} with an ICMP error)"),
    };
    format!(
        "{hosts} host{}, {alive} alive, {} unreachable{told} in {:.3} s",
        if hosts == 1 { "" } else { "s" },
        hosts - alive,
        wall.as_secs_f64()
    )
}

/// The thread that writes the hosts' lines to stdout, never blocking the sweep: line by
/// line when `live` (each host as it is done, fping's way), in blocks otherwise.
fn results_output(live: bool) -> anyhow::Result<Output> {
    Output::start(
        live,
        output::stdout(),
        output::HELD_IN_MEMORY,
        tempfile::tempfile,
    )
    .context("starting the thread writing the results")
}

/// What a `--loop` round's lines share.
struct Round {
    /// The round, from 0: fping's `[N]`.
    seq: u64,
    /// A reply's ICMP bytes (header and payload), as fping counts them.
    bytes: usize,
    /// The widest address: the columns line up, as fping pads its names.
    width: usize,
    /// `-D`: the time first.
    timestamp: bool,
    /// `--json`: an object per line.
    json: bool,
}

/// One `--loop` line, as `fping -l` prints it: `ADDR : [N], B bytes, RTT ms (AVG avg,
/// L% loss)`, or `ADDR : [N], timed out (AVG avg, L% loss)` (then the ICMP error that
/// came back for it, if one did); `total`: the host's statistics so far, this round's
/// included.
fn write_round(
    out: &mut Vec<u8>,
    line: &Round,
    addr: IpAddr,
    this: &PingStats,
    total: &PingStats,
) -> std::io::Result<()> {
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64()
    };
    if line.json {
        let round = JsonRound {
            time: (now() * 1e6).round() / 1e6,
            addr: addr.to_string(),
            seq: line.seq,
            rtt_ms: json_ms(this.avg()),
            avg_ms: json_ms(total.avg()),
            loss_pct: total.loss_pct(),
            icmp_error: this.error.as_ref().map(JsonIcmpError::of),
        };
        return writeln!(out, "{}", serde_json::to_string(&round).unwrap_or_default());
    }
    if line.timestamp {
        write!(out, "[{:.5}] ", now())?;
    }
    let (seq, width) = (line.seq, line.width);
    write!(out, "{:<width$} : [{seq}], ", addr.to_string())?;
    match this.avg() {
        Some(rtt) => write!(out, "{} bytes, {} ms", line.bytes, FpingMs(rtt))?,
        None => write!(out, "timed out")?,
    }
    // fping prints a mean of no reply as NaN (a script reads it as a float).
    let avg = total.avg().map_or("NaN".into(), |a| FpingMs(a).to_string());
    // A whole percentage, truncated as fping prints it.
    let lost = u64::from(total.sent.saturating_sub(total.received));
    let loss = lost * 100 / u64::from(total.sent.max(1));
    write!(out, " ({avg} avg, {loss}% loss)")?;
    match (this.avg(), &this.error) {
        (None, Some(error)) => writeln!(out, "; {error}"),
        _ => writeln!(out),
    }
}

/// Which hosts' lines a sweep prints, and how.
#[derive(Debug, Clone, Copy)]
struct Lines {
    /// `--json`: one object per host.
    json: bool,
    /// `--alive` (`Some(true)`), `--unreachable` (`Some(false)`): only those hosts,
    /// their addresses alone in text, as fping's -a and -u print them.
    only: Option<bool>,
    /// `-C N`: each request's round trip, of N requests.
    per_request: Option<u32>,
}

impl Lines {
    fn of(args: &Args) -> Self {
        let only = match (args.alive, args.unreachable) {
            (true, _) => Some(true),
            (_, true) => Some(false),
            _ => None,
        };
        Lines {
            json: args.json,
            only,
            per_request: args.per_request,
        }
    }

    /// Writes one host's line, text or `--json`, if it is one to print; whether it
    /// was. `cut_short`: a host a signal cut short, its statistics as they stood (the
    /// same text line, as fping prints it; in JSON, `"cut_short": true`). `rtts`: its
    /// requests' round trips, with `-C`.
    fn write(
        self,
        out: &mut Vec<u8>,
        addr: IpAddr,
        s: &PingStats,
        rtts: impl Iterator<Item = Option<Duration>>,
        cut_short: bool,
    ) -> std::io::Result<bool> {
        let rtts = self.per_request.map(|count| (count, rtts));
        match (self.only, rtts) {
            (Some(alive), _) if alive != s.is_alive() => return Ok(false),
            (Some(_), _) if !self.json => writeln!(out, "{addr}")?,
            (_, rtts) if self.json => {
                let rtts = rtts.map(|(count, rtts)| padded(count, rtts));
                writeln!(out, "{}", json_line(addr, s, rtts, cut_short))?
            }
            (_, Some((count, rtts))) => write_rtts(out, addr, count, rtts)?,
            (_, None) => write_text(out, addr, s)?,
        }
        Ok(true)
    }
}

/// `rtts` in milliseconds (µs resolution), `count` of them: a host not probed has none,
/// each request of it unanswered then.
fn padded(count: u32, rtts: impl Iterator<Item = Option<Duration>>) -> Vec<Option<f64>> {
    let mut v: Vec<Option<f64>> = rtts.map(json_ms).collect();
    v.resize(v.len().max(count as usize), None);
    v
}

/// A round trip as `--json` gives it: milliseconds, microsecond resolution (what the
/// clock gives; more digits are noise).
fn json_ms(d: Option<Duration>) -> Option<f64> {
    d.map(|d| (ms(d) * 1000.0).round() / 1000.0)
}

/// One `--json` line; field order as documented.
#[derive(serde::Serialize)]
struct JsonHost {
    addr: String,
    sent: u32,
    received: u32,
    loss_pct: f64,
    rtt_min_ms: Option<f64>,
    rtt_avg_ms: Option<f64>,
    rtt_max_ms: Option<f64>,
    /// Only on a host a signal cut short.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    cut_short: bool,
    /// Only on a host an ICMP error came back for (the last).
    #[serde(skip_serializing_if = "Option::is_none")]
    icmp_error: Option<JsonIcmpError>,
    /// Only with `-C`: each request's round trip, `null` for one unanswered.
    #[serde(skip_serializing_if = "Option::is_none")]
    rtts_ms: Option<Vec<Option<f64>>>,
}

/// A `--loop --json` line: a request's reply or timeout, and its host's figures so far.
#[derive(serde::Serialize)]
struct JsonRound {
    /// Unix seconds, when it was printed.
    time: f64,
    addr: String,
    seq: u64,
    /// `null`: not answered within the timeout.
    rtt_ms: Option<f64>,
    avg_ms: Option<f64>,
    loss_pct: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    icmp_error: Option<JsonIcmpError>,
}

/// `"icmp_error"` of a `--json` line.
#[derive(serde::Serialize)]
struct JsonIcmpError {
    /// [`icmp::UnreachableKind::name`]: `host-unreachable`, `admin-prohibited`, ...
    kind: &'static str,
    /// Who sent it: a router on the way, a firewall, the host.
    from: String,
    /// The text line's words for it.
    message: String,
}

impl JsonIcmpError {
    fn of(e: &icmp::Unreachable) -> Self {
        JsonIcmpError {
            kind: e.kind.name(),
            from: e.from.to_string(),
            message: e.to_string(),
        }
    }
}

fn json_line(
    addr: IpAddr,
    s: &PingStats,
    rtts_ms: Option<Vec<Option<f64>>>,
    cut_short: bool,
) -> String {
    let rtt = json_ms;
    let host = JsonHost {
        addr: addr.to_string(),
        sent: s.sent,
        received: s.received,
        loss_pct: s.loss_pct(),
        rtt_min_ms: rtt(s.is_alive().then_some(s.min)),
        rtt_avg_ms: rtt(s.avg()),
        rtt_max_ms: rtt(s.is_alive().then_some(s.max)),
        cut_short,
        icmp_error: s.error.as_ref().map(JsonIcmpError::of),
        rtts_ms,
    };
    serde_json::to_string(&host).unwrap_or_default()
}

/// The notes on stderr after a sweep: what was ignored or failed, and why the kernel
/// refused the first probe it refused (a host that reads as down for it: no route, a
/// firewall rule, a broadcast address), as the daemon logs it.
fn notes(report: &poller::icmp_driver::SweepReport) -> Vec<String> {
    let c = &report.counters;
    // Foreign replies (other pingers' on this host: every raw ICMP socket sees them all,
    // Zabbix's fping or a monitoring agent beside a sweep) say nothing of this sweep:
    // they are counted in the line, but do not make one.
    let ignored = c.stale + c.spoofed + c.redirected + c.malformed + c.duplicate + c.late;
    let failed = c.send_errors > 0 || report.recv_errors > 0 || report.receive_drops > 0;
    // Each part headed for what it counts: send errors alone were headed "ignored
    // replies", which they are not.
    let mut parts = Vec::new();
    if ignored > 0 {
        parts.push(format!(
            "ignored replies: {} stale, {} foreign, {} spoofed, {} redirected, {} malformed, {} duplicate, {} late",
            c.stale, c.foreign, c.spoofed, c.redirected, c.malformed, c.duplicate, c.late
        ));
    }
    if failed {
        parts.push(format!(
            "sockets: {} send errors, {} receive errors, {} datagrams dropped for a full receive buffer",
            c.send_errors, report.recv_errors, report.receive_drops
        ));
    }
    let mut out = Vec::new();
    if !parts.is_empty() {
        out.push(parts.join("; "));
    }
    if let Some((target, error)) = &report.first_send_error {
        out.push(format!(
            "the kernel refused to send probes (counted as sent and lost), the first to {target}: {error}"
        ));
    }
    out
}

/// How long an interrupted sweep waits for its last lines to reach stdout, and then
/// for its last message to reach stderr: a reader takes them at once, and one that
/// does not (a pager left on its first page, `2>&1` for the message) must not keep
/// Ctrl-C from ending the sweep.
const INTERRUPT_GRACE: Duration = Duration::from_millis(500);

/// Most probes of one sweep without `--force`: each keeps 16 bytes of state (2^24: 256
/// MiB), and one sweep holds at most 2^32.
pub const MAX_PROBES: u64 = 1 << 24;

/// Refuses a sweep of `hosts × count` probes past [`MAX_PROBES`] (unless `force`) or
/// past what one sweep can hold, before anything is allocated or sent.
fn check_probes(hosts: u64, count: u32, force: bool) -> anyhow::Result<()> {
    let probes = hosts.saturating_mul(u64::from(count));
    if probes > u64::from(u32::MAX) {
        bail!(
            "{hosts} hosts x {count} packets = {probes} probes: more than one sweep holds (2^32)"
        );
    }
    if probes > MAX_PROBES && !force {
        bail!("{hosts} hosts x {count} packets = {probes} probes, more than {MAX_PROBES} (2^24, 256 MiB of state); pass --force to sweep them anyway");
    }
    Ok(())
}

/// Runs `netpoller sweep`.
pub fn run(mut args: Args) -> anyhow::Result<ExitCode> {
    // -C N: N requests, as -c N.
    if let Some(n) = args.per_request {
        args.count = n;
    }
    validate(&args)?;
    // The global --quiet: no progress line, no notes and no totals (the hosts' lines
    // stay: they are the results, as fping -q -c prints each host's statistics).
    let quiet = crate::telemetry::quiet();
    let retry = retry_probe(&args)?;
    let packets = retry.map_or(args.count, |p| p.packets);
    let addrs = expand_targets(&args.targets, packets, args.force)?;
    let opts = IcmpOptions {
        max_pps: args.max_pps,
        rcvbuf: args.rcvbuf,
        ident_filter: false,
        source: super::source_addrs(&args.source, &addrs)?,
    };
    let mut driver = IcmpDriver::open(opts)?;
    if addrs.iter().any(IpAddr::is_ipv6) {
        if let Err(why) = driver.ipv6() {
            bail!("IPv6 targets given but ICMPv6 is unavailable: {why}");
        }
    }
    if driver.kind() == SocketKind::Datagram && !quiet {
        eprintln!("netpoller: no CAP_NET_RAW, using unprivileged ICMP datagram sockets");
    }
    let jobs: Vec<PingJob> = addrs
        .iter()
        .map(|&addr| match retry {
            Some(probe) => probe.job(addr),
            None => PingJob {
                addr,
                packets: args.count,
                interval: args.interval,
                size: args.size,
                timeout: args.timeout,
                retry: None,
            },
        })
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    if args.looping {
        return rt.block_on(run_loop(&args, &addrs, &jobs, &mut driver, quiet));
    }
    // On a terminal, each host's line as it completes (fping's way).
    let mut out = results_output(crate::progress::stdout_is_tty())?;
    let mut progress =
        crate::progress::Progress::beside_results(jobs.len() as u64, "sweeping", quiet);
    let (mut finished, mut alive) = (0usize, 0usize);
    // Hosts that did not answer and for which an ICMP error came back (the totals say
    // how many of the unreachable were told so: a router's, not silence).
    let mut told = 0usize;
    let started = std::time::Instant::now();
    // The hosts cut short by a signal: printed as they stood.
    let mut cut_short = 0usize;
    // Lines handed to stdout (all hosts', or --alive's or --unreachable's).
    let mut printed = 0u64;
    let lines = Lines::of(&args);
    let (report, written) = rt.block_on(async {
        // One listener for the sweep and the wait after it: a signal between the two is
        // not missed.
        let signal = super::interrupted();
        tokio::pin!(signal);
        let sweep = driver.sweep_with_rtts(
            &jobs,
            lines.per_request.is_some(),
            |i, stats, rtts| {
                progress.inc(1);
                finished += 1;
                alive += usize::from(stats.is_alive());
                told += usize::from(!stats.is_alive() && stats.error.is_some());
                out.line(|b| {
                    printed += u64::from(lines.write(b, addrs[i], stats, rtts.iter(), false)?);
                    Ok(())
                });
            },
            &mut signal,
        );
        // A signal: the hosts still probing are printed with what they have so far, as
        // fping prints them.
        let report = sweep.await.map_err(|stopped| {
            for (k, (i, stats)) in stopped.unfinished.iter().enumerate() {
                cut_short += 1;
                alive += usize::from(stats.is_alive());
                let rtts = stopped.rtts.get(k).into_iter().flatten().copied();
                out.line(|b| {
                    printed += u64::from(lines.write(b, addrs[*i], stats, rtts, true)?);
                    Ok(())
                });
            }
            stopped.by
        });
        out.close();
        // The lines still to be written: all of them after a whole sweep (a signal
        // meanwhile ends the wait, as it ends the sweep), the hosts done so far and
        // those cut short after a signal, for as long as stdout takes them
        // (INTERRUPT_GRACE at most).
        let written = match report {
            Ok(_) => tokio::select! {
                w = out.finished() => Some(w),
                signal = &mut signal => return (Err(signal), None),
            },
            Err(_) => tokio::select! {
                w = out.finished() => Some(w),
                () = tokio::time::sleep(INTERRUPT_GRACE) => None,
                _ = super::interrupted() => None,
            },
        };
        (report, written)
    });
    progress.finish();
    // None: stdout did not take the last lines in time after a signal.
    let all_written = match written {
        Some(Err(e)) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            return Err(e).context("writing results")
        }
        Some(_) => true,
        None => false,
    };
    let report = match report {
        Ok(report) => report,
        Err(signal) => {
            // Ctrl-C or SIGTERM: the hosts done so far are printed, then the others as
            // they stood.
            let lines = printed;
            let held = lines.saturating_sub(out.written());
            let held = if all_written || held == 0 {
                String::new()
            } else {
                format!(" ({held} of the {lines} lines not printed: standard output was not read)")
            };
            let others = match cut_short {
                0 => String::new(),
                n => format!(", the other {n} cut short (printed with the replies they had: a request awaiting its reply counted as lost)"),
            };
            let message = format!(
                "interrupted after {:.3} s: {finished} of {} hosts done{others}, {alive} alive{held}\n",
                started.elapsed().as_secs_f64(),
                jobs.len(),
            );
            // stderr may be the pipe stdout did not take the lines from (`2>&1 | less`):
            // the message is not waited for past the grace; nor are the threads writing
            // (blocked for good, maybe): the process ends without them.
            output::last_words(message, INTERRUPT_GRACE);
            return Ok(ExitCode::from(128 + signal));
        }
    };
    for (i, why) in &report.rejected {
        eprintln!("netpoller: {} not probed: {why}", addrs[*i]);
    }
    if !quiet {
        for note in notes(&report) {
            eprintln!("{note}");
        }
    }
    let c = &report.counters;
    // The engine's own figures, for benches/icmp_sweep.sh: not among a command line
    // tool's results (fping prints nothing between its hosts and its totals).
    tracing::debug!(
        sent = c.sent,
        received = c.received,
        send_time_s = report.send_time.as_secs_f64(),
        wall_s = report.wall.as_secs_f64(),
        "sweep done"
    );
    // The totals: fping prints its own only with -s, not with -q -c.
    if !quiet {
        eprintln!("{}", totals(report.hosts, report.alive, told, report.wall));
    }
    // As fping: 1 when a host did not answer (or could not be probed), for scripts;
    // with -x, 1 when fewer than that many did.
    let ok = match args.reachable {
        Some(required) => {
            let enough = report.alive >= required;
            let what = if enough { "enough" } else { "not enough" };
            eprintln!(
                "{what} hosts alive (required {required}, alive {})",
                report.alive
            );
            enough
        }
        None => report.alive == report.hosts && report.rejected.is_empty(),
    };
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    fn ips(v: &[&str]) -> Vec<IpAddr> {
        v.iter().map(|a| a.parse().unwrap()).collect()
    }

    /// `sweep`'s flags as clap reads them, on their own.
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        sweep: Args,
    }

    /// The help clap gives of the flag `id`.
    fn help_of(id: &str) -> String {
        use clap::CommandFactory;
        let cmd = Cli::command();
        let arg = cmd.get_arguments().find(|a| a.get_id() == id).unwrap();
        arg.get_help().unwrap().to_string()
    }

    /// `sweep FLAGS 127.0.0.1` as read.
    fn parse(flags: &[&str]) -> Args {
        use clap::Parser;
        let args = ["sweep"].iter().chain(flags).chain(&["127.0.0.1"]);
        Cli::try_parse_from(args).unwrap().sweep
    }

    /// `--help` names both limits `--force` lifts: it named the addresses' alone, and
    /// a sweep refused for its probes (addresses × count) seemed not to be its business.
    #[test]
    fn the_help_of_force_names_both_limits() {
        let help = help_of("force");
        let probes = MAX_PROBES.trailing_zeros();
        let addrs = MAX_TARGETS.trailing_zeros();
        assert!(
            help.contains(&format!("2^{addrs} addresses"))
                && help.contains(&format!("2^{probes} probes")),
            "{help}"
        );
    }

    #[test]
    fn flags_have_the_limits_of_the_configs_keys() {
        let check = |flags: &[&str]| validate(&parse(flags)).map_err(|e| e.to_string());
        assert!(check(&[]).is_ok());
        assert_eq!(
            check(&["-c", "0", "-t", "10ms"]).unwrap_err(),
            "--count: packets 0 outside Zabbix's limits 1..10000; --timeout: timeout 10 ms below Zabbix's minimum of 50 ms"
        );
        assert_eq!(
            check(&["-c", "2", "-i", "11m"]).unwrap_err(),
            "--interval: interval 660000 ms above the maximum of 600000 ms (10 min)"
        );
        // One request per host: no spacing to check (as fping -c 1 -p 1).
        assert!(check(&["-c", "1", "-i", "1ms"]).is_ok());
        assert!(check(&["-s", "23"])
            .unwrap_err()
            .starts_with("--size: size 23"));
        // Each flag within its limits, their product not: refused here, not swept as
        // hosts "unreachable 0/0 0%" (the sweep does not probe a host for over a day).
        let e = check(&["-c", "10000", "-i", "10s"]).unwrap_err();
        assert!(e.contains("more than 24 h"), "{e}");
        assert!(
            check(&["-c", "8640", "-i", "10s"]).is_ok(),
            "a day less the timeout"
        );
    }

    /// FIRST-LAST: every address of it, both ends and whatever lies between (network
    /// and broadcast addresses too, as fping -g FIRST LAST), across octets; LAST may be
    /// an IPv4 address's last number alone. Backwards, mixed or malformed: refused,
    /// saying why.
    #[test]
    fn ranges_expand_to_every_address_of_them() {
        let got =
            expand_targets(&s(&["127.77.0.254-127.77.1.1", "127.77.2.1-3"]), 1, false).unwrap();
        let want = ips(&[
            "127.77.0.254",
            "127.77.0.255",
            "127.77.1.0",
            "127.77.1.1",
            "127.77.2.1",
            "127.77.2.2",
            "127.77.2.3",
        ]);
        assert_eq!(got, want);
        let v6 = expand_targets(&s(&["::1-::1"]), 1, false).unwrap();
        assert_eq!(v6, ips(&["::1"]));
        let err = |t: &str| format!("{:#}", expand_targets(&s(&[t]), 1, false).unwrap_err());
        // A range's own errors (config::span's tests) reach the user as they are.
        assert_eq!(
            err("127.77.0.9-127.77.0.1"),
            "invalid range \"127.77.0.9-127.77.0.1\": it runs backwards (write the lower address first)"
        );
        assert!(err("host-1").contains("names are not resolved"));
        // Past the limit without --force, before anything is allocated.
        assert!(err("10.0.0.0-10.255.255.255").contains("more than 1048576"));
    }

    #[test]
    fn expands_ips_cidrs_and_files_without_duplicates() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("t.txt");
        std::fs::write(
            &f,
            "# lab\n127.77.1.0/30\n\n127.77.0.1 # dup\n::1\n127.77.2.0/31\n",
        )
        .unwrap();
        let got =
            expand_targets(&s(&["127.77.0.1", &format!("@{}", f.display())]), 1, false).unwrap();
        // A /30's network and broadcast addresses are left out (fping -g); a /31 has
        // neither.
        let want = ips(&[
            "127.77.0.1",
            "127.77.1.1",
            "127.77.1.2",
            "::1",
            "127.77.2.0",
            "127.77.2.1",
        ]);
        assert_eq!(got, want);
        // A list saved by a Windows editor or Excel starts with a byte order mark: not
        // part of its first address.
        std::fs::write(&f, "\u{feff}127.77.0.1\r\n127.77.0.2\r\n").unwrap();
        let got = expand_targets(&s(&[&format!("@{}", f.display())]), 1, false).unwrap();
        assert_eq!(
            got,
            ["127.77.0.1", "127.77.0.2"].map(|a| a.parse::<IpAddr>().unwrap())
        );
        assert_eq!(
            expand_targets(&s(&["127.77.0.0/20"]), 1, false)
                .unwrap()
                .len(),
            4094
        );
    }

    /// `help sweep` gives --backoff's default, icmppingretry's 1.0, which is not
    /// fping's 1.5 (it gave none; an Option has no clap default to show).
    #[test]
    fn the_help_of_backoff_gives_its_default() {
        let help = help_of("backoff");
        assert!(
            help.contains("[default: 1.0, icmppingretry's; fping's is 1.5]"),
            "{help}"
        );
        // That default is the key's: without -B, the probe retries at 1.0.
        let probe = |flags: &[&str]| {
            let args = parse(&[&["-r", "2"], flags].concat());
            retry_probe(&args).unwrap().unwrap()
        };
        assert_eq!(probe(&[]), probe(&["-B", "1.0"]));
        assert_ne!(probe(&[]), probe(&["-B", "1.5"]));
    }

    /// Target files that list no address (an export that failed, a list emptied) are
    /// an error, not a sweep of nothing that exits 0 as if every host answered.
    #[test]
    fn refuses_target_files_that_list_no_address() {
        let dir = tempfile::tempdir().unwrap();
        let (empty, comments) = (dir.path().join("empty"), dir.path().join("comments"));
        std::fs::write(&empty, "").unwrap();
        std::fs::write(&comments, "# core\r\n\r\n   # edge\n").unwrap();
        let (empty, comments) = (
            format!("@{}", empty.display()),
            format!("@{}", comments.display()),
        );
        let e = expand_targets(&s(&[&empty, &comments]), 1, false).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("no address to sweep: {empty} {comments} list(s) none (only comments or blank lines)")
        );
        // One empty file beside a target is no error: the others are swept.
        let got = expand_targets(&s(&[&empty, "127.77.0.1"]), 1, false).unwrap();
        assert_eq!(got, vec!["127.77.0.1".parse::<IpAddr>().unwrap()]);
    }

    #[test]
    fn refuses_huge_expansions_and_bad_targets() {
        let e = expand_targets(&s(&["127.0.0.0/11"]), 1, false).unwrap_err();
        assert!(e.to_string().contains("--force"), "{e}");
        assert!(
            expand_targets(&s(&["127.0.0.0/12"]), 1, false).is_ok(),
            "2^20 exactly is allowed"
        );
        let e = expand_targets(&s(&["fd00::/64"]), 1, false).unwrap_err();
        assert!(e.to_string().contains("2^20"), "{e}");
        // fping resolves a name; sweep says it does not.
        assert_eq!(
            expand_targets(&s(&["example.org"]), 1, false)
                .unwrap_err()
                .to_string(),
            "invalid target \"example.org\": expected an IP address (names are not resolved: write the address), a CIDR, a range (FIRST-LAST) or @file"
        );
        // A prefix too long: said as the config says it, not as an address's syntax.
        let e = expand_targets(&s(&["127.0.0.0/33"]), 1, false).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid CIDR \"127.0.0.0/33\": the prefix length is at most 32"
        );
        let e = expand_targets(&s(&["fd00::/129"]), 1, false).unwrap_err();
        assert!(e.to_string().ends_with("at most 128"), "{e}");
        assert!(expand_targets(&s(&["@/nonexistent/file"]), 1, false).is_err());
        // Probes: hosts x count, checked before anything is allocated.
        assert!(check_probes(1 << 20, 16, false).is_ok());
        let e = check_probes(1 << 20, 17, false).unwrap_err();
        assert!(e.to_string().contains("--force"), "{e}");
        assert!(check_probes(1 << 20, 17, true).is_ok());
        let e = check_probes(524_286, 10_000, true).unwrap_err();
        assert!(e.to_string().contains("more than one sweep holds"), "{e}");
        // --force lifts the 2^20 limit, not the sweep's 2^32: refused before anything
        // is allocated (a /64 asked for exabytes and aborted).
        let e = expand_targets(&s(&["fd00::/64"]), 1, true).unwrap_err();
        assert!(e.to_string().contains("more than one sweep holds"), "{e}");
        let e = expand_targets(&s(&["127.0.0.0/12"]), 4097, true).unwrap_err();
        assert!(e.to_string().contains("more than one sweep holds"), "{e}");
        // An IPv6 range's network address is a router's (Subnet-Router anycast), and
        // `::` no device's: ::1/127 would have probed it (and read ::1's reply as
        // redirected).
        let got = expand_targets(&s(&["fd00::/126", "fd00::10/127"]), 1, false).unwrap();
        let want = ips(&["fd00::1", "fd00::2", "fd00::3", "fd00::10", "fd00::11"]);
        assert_eq!(got, want);
        let e = expand_targets(&s(&["::/127"]), 1, false).unwrap_err();
        assert!(e.to_string().contains("the unspecified address ::"), "{e}");
        // IPv4-mapped: the kernel would send them as IPv6, via the default route.
        for mapped in ["::ffff:127.0.0.1", "::ffff:127.0.0.0/120"] {
            let e = expand_targets(&s(&[mapped]), 1, false).unwrap_err();
            assert!(e.to_string().contains("IPv4-mapped"), "{e}");
        }
    }

    /// A probe the kernel refuses counts as lost: the notes say why (a bare count of
    /// send errors left a host "unreachable" with no reason).
    #[test]
    fn notes_name_the_first_refused_probe() {
        let mut report = poller::icmp_driver::SweepReport::default();
        assert!(notes(&report).is_empty());
        report.counters.send_errors = 2;
        report.first_send_error = Some((
            "127.255.255.255".parse().unwrap(),
            "Permission denied (os error 13)".into(),
        ));
        let got = notes(&report);
        assert_eq!(got.len(), 2, "{got:?}");
        // Send errors alone are not headed "ignored replies" (no reply was ignored).
        assert_eq!(
            got[0],
            "sockets: 2 send errors, 0 receive errors, 0 datagrams dropped for a full receive buffer"
        );
        assert!(
            got[1].ends_with("the first to 127.255.255.255: Permission denied (os error 13)"),
            "{got:?}"
        );
        // A reply of ours from another address is said as such, not as a forgery.
        let mut report = poller::icmp_driver::SweepReport::default();
        report.counters.redirected = 1;
        let got = notes(&report);
        assert_eq!(
            got[0],
            "ignored replies: 0 stale, 0 foreign, 0 spoofed, 1 redirected, 0 malformed, 0 duplicate, 0 late"
        );
        // Both: one line, each part headed for what it counts.
        report.receive_drops = 3;
        let got = notes(&report);
        assert!(
            got[0].ends_with(" 0 late; sockets: 0 send errors, 0 receive errors, 3 datagrams dropped for a full receive buffer"),
            "{got:?}"
        );
        // Other pingers' replies alone make no note (a sweep beside fping printed one,
        // and a test of the sweep's stderr failed while another test swept).
        let mut report = poller::icmp_driver::SweepReport::default();
        report.counters.foreign = 126;
        assert!(notes(&report).is_empty(), "{:?}", notes(&report));
        report.counters.late = 1;
        assert!(
            notes(&report)[0].contains(" 126 foreign,"),
            "{:?}",
            notes(&report)
        );
    }

    /// A sweep whose stdout takes nothing (`netpoller sweep ... | sleep 1000`) goes on
    /// at its own pace, every host answering in time, and holds no more than its bound
    /// of results in memory (it held them all); they are printed once stdout reads.
    /// On a terminal's footing: each line handed over as its host is done.
    #[test]
    fn a_sweep_whose_stdout_is_not_read_goes_on_and_holds_a_bounded_backlog() {
        let addrs: Vec<IpAddr> = (1..=254u8)
            .map(|k| IpAddr::from([127, 0, 163, k]))
            .collect();
        let jobs: Vec<PingJob> = addrs
            .iter()
            .map(|&addr| PingJob {
                addr,
                packets: 2,
                interval: Duration::from_millis(20),
                size: 56,
                timeout: Duration::from_secs(2),
                retry: None,
            })
            .collect();
        let printed = crate::test_util::SharedBuf::default();
        let (stdout, open) = crate::test_util::gated(printed.clone());
        let bound = 1024;
        let mut out = Output::start(true, stdout, bound, tempfile::tempfile).unwrap();
        let mut driver = IcmpDriver::open(IcmpOptions::default()).expect("raw ICMP socket");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let report = rt.block_on(driver.sweep(&jobs, |i, stats| {
            out.line(|b| write_text(b, addrs[i], stats));
        }));
        assert_eq!((report.hosts, report.alive), (254, 254), "{report:?}");
        let (peak, spilled, _) = out.backlog();
        assert!(
            peak <= bound,
            "{peak} bytes held in memory, more than {bound}"
        );
        assert!(spilled > 0);
        open.send(()).unwrap();
        out.close();
        rt.block_on(out.finished()).unwrap();
        let text = printed.text();
        let mut lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 254, "{text}");
        lines.sort_by_key(|l| l.split(' ').next().unwrap().parse::<IpAddr>().unwrap());
        for (line, addr) in lines.iter().zip(&addrs) {
            assert!(line.starts_with(&format!("{addr} alive 2/2 0% ")), "{line}");
        }
    }

    /// `-C`'s round trips have fping's digits (its `sprint_tm`), and a host never
    /// probed (rejected: no IPv6 socket) shows each of its requests as `-`.
    #[test]
    fn per_request_lines_read_as_fpings() {
        let us = |v: u64| Duration::from_micros(v);
        let shown: Vec<String> = [
            31, 999, 1_000, 3_456, 9_999, 12_345, 99_949, 123_456, 2_000_000,
        ]
        .into_iter()
        .map(|v| FpingMs(us(v)).to_string())
        .collect();
        assert_eq!(
            shown,
            ["0.031", "0.999", "1.00", "3.46", "10.00", "12.3", "99.9", "123", "2000"]
        );
        let line = |rtts: &[Option<Duration>]| {
            let mut b = Vec::new();
            write_rtts(
                &mut b,
                IpAddr::from([192, 0, 2, 1]),
                3,
                rtts.iter().copied(),
            )
            .unwrap();
            String::from_utf8(b).unwrap()
        };
        assert_eq!(
            line(&[Some(us(31)), None, Some(us(1_500))]),
            "192.0.2.1 : 0.031 - 1.50\n"
        );
        assert_eq!(line(&[]), "192.0.2.1 : - - -\n");
        assert_eq!(
            padded(3, std::iter::once(Some(us(31)))),
            [Some(0.031), None, None]
        );
    }

    fn text_line(a: IpAddr, st: &PingStats) -> String {
        let mut v = Vec::new();
        write_text(&mut v, a, st).unwrap();
        String::from_utf8(v).unwrap().trim_end().to_string()
    }

    /// The loss is a whole percentage truncated, as fping prints it (scripts and
    /// thresholds compare the two).
    #[test]
    fn loss_is_truncated_as_fping_prints_it() {
        let a: IpAddr = "127.77.0.3".parse().unwrap();
        let mut st = PingStats {
            sent: 3,
            ..Default::default()
        };
        st.record(Duration::from_micros(500));
        assert!(
            text_line(a, &st).contains(" 3/1 66% "),
            "{}",
            text_line(a, &st)
        );
        st.sent = 7;
        for _ in 0..5 {
            st.record(Duration::from_micros(500));
        }
        assert!(
            text_line(a, &st).contains(" 7/6 14% "),
            "{}",
            text_line(a, &st)
        );
    }

    #[test]
    fn output_lines() {
        let mut st = PingStats {
            sent: 3,
            ..Default::default()
        };
        let a: IpAddr = "127.77.0.3".parse().unwrap();
        assert_eq!(
            text_line(a, &st),
            "127.77.0.3 unreachable 3/0 100% -/-/- ms"
        );
        let j: serde_json::Value = serde_json::from_str(&json_line(a, &st, None, false)).unwrap();
        assert_eq!(j["rtt_avg_ms"], serde_json::Value::Null);
        assert_eq!(j["loss_pct"], 100.0);
        st.record(Duration::from_micros(1500));
        st.record(Duration::from_micros(500));
        assert_eq!(
            text_line(a, &st),
            "127.77.0.3 alive 3/2 33% 0.500/1.000/1.500 ms"
        );
        let j: serde_json::Value = serde_json::from_str(&json_line(a, &st, None, false)).unwrap();
        assert_eq!(
            (
                j["addr"].as_str(),
                j["sent"].as_u64(),
                j["received"].as_u64()
            ),
            (Some("127.77.0.3"), Some(3), Some(2))
        );
        assert_eq!(
            (j["rtt_min_ms"].as_f64(), j["rtt_max_ms"].as_f64()),
            (Some(0.5), Some(1.5))
        );
        // Rounded to the nearest microsecond, like `{:.3}` of the milliseconds.
        st.record(Duration::from_nanos(12_345_678));
        assert!(
            text_line(a, &st).ends_with(" 0.500/4.782/12.346 ms"),
            "{}",
            text_line(a, &st)
        );
    }
}
