//! `netpoller snmp get|walk`: one-shot SNMP queries printed like net-snmp's `snmpget -On`
//! / `snmpbulkwalk -On` (or JSON lines with `--json`).
//!
//! `get` runs through the daemon's own path (`poller::snmp_driver`), so it is also a
//! quick way to check what the daemon would read; one request beside it, over a
//! connected socket, learns a closed port as a walk does. `walk` uses GETBULK (v2c,
//! v3) or GETNEXT (v1) one request at a time over a connected UDP socket; for v3 it
//! discovers the agent's engine first.
//!
//! A failure is said once, in the words of the polled item's error (Zabbix's first:
//! `Timeout while connecting to ...`, `SNMP error: ...`), by `get` and `walk` alike:
//! on stderr after the OID, in `--json` as `{"oid","error","reason"}` on stdout (the
//! item's class as `poll-once --json` gives it, where a polled item fails so too); the
//! exit status is 1. An exception value (noSuchObject) prints in `--json` so too, in
//! the item's words (`No Such Object available on this agent at this OID
//! (noSuchObject)`, `unsupported`): one vocabulary for scripts reading `snmp get` and
//! `poll-once`.
//!
//! The community and the SNMPv3 passphrases are secrets: never printed, logged, or shown
//! in `--help` (no default or environment value is displayed). SNMPv3 options are
//! net-snmp's (`-u -l -a -A -x -X -n`) and checked like the config's.

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use poller::plan::SnmpParams;
use poller::snmp_driver::{SnmpDriver, SnmpDriverOptions, SnmpHostJob};
use poller::value::ErrorReason;
use snmp::v3::UsmUser;
use snmp::{Oid, VarValue, Version};

use crate::walker::{self, Target};

/// Arguments of `netpoller snmp`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub cmd: SnmpCmd,
}

#[derive(clap::Subcommand, Debug)]
pub enum SnmpCmd {
    /// GET the OIDs from TARGET and print `OID = TYPE: VALUE` lines.
    ///
    /// Exit 0 when every OID has its value (an exception such as noSuchObject is one,
    /// printed as snmpget prints it); 1 when one has none: its error, in the words of
    /// a polled item's, on stderr (with --json as {"oid","error","reason"} on stdout), the
    /// others printed; 2 for a wrong option, TARGET or OID, before anything is sent.
    Get(GetArgs),
    /// Walk the subtree under OID with GETBULK (GETNEXT for v1).
    ///
    /// Exit 0 when the walk ends at the subtree's end; 1 when it fails (or --indices
    /// finds no row): the rows printed so far stay, the error follows on stderr (with
    /// --json as {"oid","error","reason"} on stdout); 2 for a wrong option, TARGET or OID,
    /// refused before anything is sent, and for an --indices OID that is no table
    /// column.
    Walk(WalkArgs),
    /// Load generator for benchmarks (benches/snmp_get.sh): poll every target of a file
    /// N times through the daemon's SNMP driver and print one JSON line per iteration.
    #[command(hide = true)]
    Load(LoadArgs),
}

#[derive(clap::Args, Debug)]
pub struct LoadArgs {
    /// One host per line: `IP[:PORT] COMMUNITY OID [OID...]` (# comments).
    #[arg(long, value_name = "FILE")]
    pub targets: std::path::PathBuf,
    #[arg(long, default_value_t = 1)]
    pub iterations: u32,
    /// Timeout per attempt.
    #[arg(long, default_value = "1s", value_parser = snmp_timeout)]
    pub timeout: Duration,
    /// Retries after the first attempt (0..10).
    #[arg(long, default_value_t = 1, value_parser = snmp_retries())]
    pub retries: u32,
    /// OIDs per request.
    #[arg(long, default_value_t = 1)]
    pub max_oids: usize,
    /// Requests in flight per host.
    #[arg(long, default_value_t = 1)]
    pub max_inflight: usize,
    /// Global send rate (datagrams/s); default: the driver's.
    #[arg(long)]
    pub max_pps: Option<u32>,
    /// Pause between iterations.
    #[arg(long, default_value = "0s", value_parser = sink::config::parse_duration)]
    pub pause: Duration,
}

/// Options shared by `get` and `walk`. `Debug` shows no community or passphrase.
#[derive(clap::Args)]
pub struct Common {
    /// SNMP version: 1, 2c or 3.
    #[arg(
        short = 'v',
        long = "version",
        value_name = "1|2c|3",
        default_value = "2c"
    )]
    pub version: Version,
    /// SNMPv3 security name (the USM user).
    #[arg(short = 'u', long = "security-name", value_name = "USER")]
    pub security_name: Option<String>,
    /// SNMPv3 security level: noAuthNoPriv, authNoPriv or authPriv [default: what the
    /// passphrases given imply].
    #[arg(short = 'l', long = "security-level", value_name = "LEVEL")]
    pub security_level: Option<String>,
    /// SNMPv3 authentication protocol: MD5, SHA, SHA-224, SHA-256, SHA-384, SHA-512.
    #[arg(short = 'a', long = "auth-protocol", value_name = "PROTO")]
    pub auth_protocol: Option<String>,
    /// SNMPv3 authentication passphrase [or $NETPOLLER_SNMP_AUTH_PASSPHRASE, used with
    /// -v 3 when the security level authenticates].
    #[arg(short = 'A', long = "auth-passphrase", value_name = "PASS")]
    pub auth_passphrase: Option<String>,
    /// SNMPv3 privacy protocol: DES, AES (AES-128), AES-192, AES-256, or AES-192-C /
    /// AES-256-C (Cisco's key extension).
    #[arg(short = 'x', long = "priv-protocol", value_name = "PROTO")]
    pub priv_protocol: Option<String>,
    /// SNMPv3 privacy passphrase [or $NETPOLLER_SNMP_PRIV_PASSPHRASE, used with -v 3
    /// when the security level encrypts].
    #[arg(short = 'X', long = "priv-passphrase", value_name = "PASS")]
    pub priv_passphrase: Option<String>,
    /// SNMPv3 context name [default: the agent's default context].
    #[arg(short = 'n', long = "context", value_name = "NAME")]
    pub context_name: Option<String>,
    /// Community string [default: public, or $NETPOLLER_SNMP_COMMUNITY].
    #[arg(
        short = 'c',
        long,
        value_name = "C",
        env = "NETPOLLER_SNMP_COMMUNITY",
        hide_env_values = true,
        default_value = "public",
        hide_default_value = true
    )]
    pub community: String,
    /// UDP port (used when TARGET has none).
    #[arg(short = 'p', long, default_value_t = 161)]
    pub port: u16,
    /// Timeout per attempt, e.g. 1s or 500ms (10ms..10m).
    #[arg(short = 't', long, default_value = "1s", value_parser = snmp_timeout)]
    pub timeout: Duration,
    /// Retries after the first attempt (0..10).
    #[arg(short = 'r', long, default_value_t = 5, value_parser = snmp_retries())]
    pub retries: u32,
    /// Send from this local address (net-snmp's clientaddr, Zabbix's SourceIP), as
    /// `daemon.source_ip` does: to check what an agent's ACL lets through. Default: the
    /// route's.
    #[arg(long = "source", value_name = "ADDR")]
    pub source: Option<std::net::IpAddr>,
    /// Print one JSON object per line: {"oid","type","value"} or {"oid","error","reason"}
    /// (an exception too: the text and class of a polled item's error, as poll-once
    /// --json gives them; no reason where no item fails so); OIDs as -On prints them,
    /// with a leading dot.
    #[arg(long)]
    pub json: bool,
    /// Agent address: IP, IP:PORT or `[IPv6]:PORT` (names are not looked up).
    #[arg(value_name = "TARGET")]
    pub target: String,
}

/// `-r`: what the config would take for `snmp.retries`.
fn snmp_retries() -> clap::builder::RangedI64ValueParser<u32> {
    clap::value_parser!(u32).range(0..=i64::from(crate::config::SNMP_RETRIES_MAX))
}

/// `-t`: a duration the config would take for `snmp.timeout`.
fn snmp_timeout(s: &str) -> Result<Duration, String> {
    crate::config::check_snmp_timeout(sink::config::parse_duration(s)?)
}

impl std::fmt::Debug for Common {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Common")
            .field("version", &self.version)
            .field("security_name", &self.security_name)
            .field("security_level", &self.security_level)
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl Common {
    /// The SNMPv3 user of `-u -l -a -A -x -X -n` (for `-v 3`), checked as the config's.
    fn usm_user(&self) -> anyhow::Result<Option<Arc<UsmUser>>> {
        if self.version != Version::V3 {
            // net-snmp takes -u/-A as a request for v3; polling v2c "public" instead
            // would answer a different question.
            if !crate::config::usm_of!(self).is_empty() {
                bail!("SNMPv3 options (-u -l -a -A -x -X -n) need -v 3");
            }
            return Ok(None);
        }
        // Passphrases kept in the environment (out of `ps` and the shell's history) serve
        // where the command line gives none and the level, given or implied, wants them:
        // exported for one agent, they must not spoil a v2c query or a lower level.
        let mut usm = crate::config::usm_of!(self);
        let from_env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        // The level as `user()` reads it (short forms too); a wrong one is its to report.
        use snmp::v3::SecurityLevel;
        let level = usm
            .security_level
            .as_deref()
            .map(str::parse::<SecurityLevel>);
        let (auth, privacy) = match level {
            Some(Ok(SecurityLevel::NoAuthNoPriv)) => (false, false),
            Some(Ok(SecurityLevel::AuthNoPriv)) => (true, false),
            Some(_) => (true, true),
            // No level: what the command line's protocols ask for (a passphrase in the
            // environment alone must not raise a noAuthNoPriv query's level).
            None => (usm.auth_protocol.is_some(), usm.priv_protocol.is_some()),
        };
        if auth && usm.auth_passphrase.is_none() {
            usm.auth_passphrase = from_env("NETPOLLER_SNMP_AUTH_PASSPHRASE");
        }
        if privacy && usm.priv_passphrase.is_none() {
            usm.priv_passphrase = from_env("NETPOLLER_SNMP_PRIV_PASSPHRASE");
        }
        let user = usm.user().map_err(|(field, msg)| {
            let flag = match field {
                "security_name" => "-u",
                "security_level" => "-l",
                "auth_protocol" => "-a",
                "auth_passphrase" => "-A",
                "priv_protocol" => "-x",
                _ => "-X",
            };
            anyhow::anyhow!("{flag} ({}): {msg}", field.replace('_', " "))
        })?;
        Ok(Some(Arc::new(user)))
    }

    /// The SNMP parameters of the command line for `addr`'s agent, at most `max_oids`
    /// OIDs (or GETBULK repetitions) per request.
    fn params(&self, addr: SocketAddr, max_oids: usize) -> anyhow::Result<SnmpParams> {
        Ok(SnmpParams {
            version: self.version,
            community: Arc::from(self.community.as_str()),
            usm: self.usm_user()?,
            port: addr.port(),
            timeout: self.timeout,
            retries: self.retries,
            max_oids_per_request: max_oids,
            max_inflight_per_host: 1,
        })
    }

    /// The target's address. Names are not looked up (as the config's `ip`): a typo
    /// must not become a DNS query, nor a query an agent somewhere else.
    fn addr(&self) -> anyhow::Result<SocketAddr> {
        let addr = match self.target.parse::<SocketAddr>() {
            Ok(a) => a,
            Err(_) => {
                let host = self.target.trim_start_matches('[').trim_end_matches(']');
                match host.parse::<std::net::IpAddr>() {
                    Ok(ip) => SocketAddr::new(ip, self.port),
                    Err(_) => bail!(
                        "target {:?} is not an IP address (IP, IP:PORT or [IPv6]:PORT; names are not looked up)",
                        self.target
                    ),
                }
            }
        };
        // Refused as the config refuses it, before anything is sent: the kernel's
        // words for it were `Invalid argument` (get) or `Transport endpoint is not
        // connected` (walk), said as the OID's failure.
        if addr.port() == 0 {
            bail!("target {addr}: {}", crate::config::PORT_ZERO);
        }
        poller::source::check_address(addr.ip()).map_err(anyhow::Error::msg)?;
        Ok(addr)
    }
}

#[derive(clap::Args, Debug)]
pub struct GetArgs {
    #[command(flatten)]
    pub common: Common,
    /// Most OIDs per request (split further on tooBig).
    #[arg(long, default_value_t = 64)]
    pub max_oids: usize,
    /// OIDs, numeric: .1.3.6.1.2.1.1.1.0 or 1.3.6.1.2.1.1.1.0 (no MIBs are read).
    #[arg(value_name = "OID", required = true, value_parser = cli_oid)]
    pub oids: Vec<Oid>,
}

#[derive(clap::Args, Debug)]
pub struct WalkArgs {
    #[command(flatten)]
    pub common: Common,
    /// GETBULK max-repetitions (v2c and v3; v1 has no GETBULK: one GETNEXT a row).
    #[arg(long, default_value_t = 10)]
    pub max_repetitions: u32,
    /// Subtree root, numeric (`.1` walks everything); default .1.3.6.1.2.1 (mib-2),
    /// like net-snmp.
    #[arg(value_name = "OID", default_value = ".1.3.6.1.2.1", value_parser = walk_root)]
    pub oid: String,
    /// Print only the table rows the walk found, as a config's `indices` value
    /// (`indices = "1-48,101"`; a table indexed by more than one arc lists each row,
    /// `"10.0.0.1,10.0.0.2"`): walk a column (ifDescr: 1.3.6.1.2.1.2.2.1.2) and paste
    /// the line into the host's item with `{#SNMPINDEX}`.
    #[arg(long)]
    pub indices: bool,
    /// Keep only the rows whose value matches this regular expression (the value as
    /// text: a string as it is, binary as Hex-STRING, numbers in decimal), as a Zabbix
    /// discovery filter would: `--matches '^(Gi|Te)'` on ifDescr.
    #[arg(long, value_name = "REGEX")]
    pub matches: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.cmd {
        SnmpCmd::Get(a) => get(a),
        SnmpCmd::Walk(a) => walk(a),
        SnmpCmd::Load(a) => load(a),
    }
}

/// One output line (text or JSON).
fn print_value(out: &mut impl Write, json: bool, oid: &str, v: &VarValue) -> std::io::Result<()> {
    if !json {
        return writeln!(out, "{oid} = {v}");
    }
    // An exception, or a value that does not decode, in a polled item's words and class
    // (poll-once's): the conversion fails only on these (a `str` item takes any value).
    let unreadable = v.exception_name().is_some() || matches!(v, VarValue::Undecodable { .. });
    let failed = unreadable
        .then(|| poller::snmp_convert::convert(v, poller::value::ValueType::Str).err())
        .flatten();
    let obj = match failed {
        Some(e) => error_json(oid, &e.text, Some(e.reason)),
        None => {
            let value = match v {
                VarValue::Integer(i) => serde_json::json!(i),
                VarValue::Counter32(n) | VarValue::Gauge32(n) | VarValue::TimeTicks(n) => {
                    serde_json::json!(n)
                }
                VarValue::Counter64(n) => serde_json::json!(n),
                VarValue::Null => serde_json::Value::Null,
                VarValue::Opaque(b) => match snmp::opaque_number(b) {
                    // Whole, not through a double (2^53 and more would round).
                    Some(snmp::OpaqueNumber::Int64(i)) => serde_json::json!(i),
                    Some(snmp::OpaqueNumber::UInt64(n) | snmp::OpaqueNumber::Counter64(n)) => {
                        serde_json::json!(n)
                    }
                    Some(n) => serde_json::json!(n.as_f64()),
                    None => serde_json::Value::String(snmp::hex_string(b)),
                },
                v => {
                    walker::value_text(v).map_or(serde_json::Value::Null, serde_json::Value::String)
                }
            };
            serde_json::json!({ "oid": oid, "type": v.net_snmp_type().unwrap_or("NULL"), "value": value })
        }
    };
    writeln!(out, "{obj}")
}

/// `{"oid","error","reason"}`: the error as a polled item's text, and its class as
/// `poll-once --json` gives it (`timeout`, `unsupported`, `decode`, `send`) where a
/// polled item fails so too (a closed port, a looping walk: no `reason`).
fn error_json(oid: &str, err: &str, reason: Option<ErrorReason>) -> serde_json::Value {
    let mut o = serde_json::json!({ "oid": oid, "error": err });
    if let Some(r) = reason {
        o["reason"] = serde_json::json!(r.as_str());
    }
    o
}

/// An OID's failure: on stderr after the OID, or with `--json` as [`error_json`] on
/// stdout.
fn print_error(
    out: &mut impl Write,
    json: bool,
    oid: &str,
    err: &str,
    reason: Option<ErrorReason>,
) -> std::io::Result<()> {
    if json {
        writeln!(out, "{}", error_json(oid, err, reason))
    } else {
        eprintln!("{oid}: {err}");
        Ok(())
    }
}

/// A walk's failure, [`print_error`]: with the class of a polled item's where it is one
/// ([`walker::ItemFailed`]).
fn print_walk_error(
    out: &mut impl Write,
    json: bool,
    oid: &str,
    e: &anyhow::Error,
) -> std::io::Result<()> {
    match e.downcast_ref::<walker::ItemFailed>() {
        Some(walker::ItemFailed(f)) => print_error(out, json, oid, &f.text, Some(f.reason)),
        None => print_error(out, json, oid, &format!("{e:#}"), None),
    }
}

fn get(a: GetArgs) -> anyhow::Result<ExitCode> {
    let c = &a.common;
    let addr = c.addr()?;
    let mut out = std::io::stdout().lock();
    Ok(
        if get_and_print(c, addr, &a.oids, a.max_oids, Before::Nothing, &mut out)? {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        },
    )
}

/// What [`get_and_print`]'s caller learnt of the agent before it: what decides the
/// closed-port probe and what an OID the agent has not means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Before {
    /// Nothing (`snmp get`): the port may be closed.
    Nothing,
    /// The agent answered a walk of the OID, which found nothing under it (snmpwalk
    /// then GETs the OID itself): the port is open, and SNMPv1's noSuchName means
    /// nothing there, as to snmpwalk.
    EmptyWalk,
}

/// GETs `oids` from `addr` (at most `max_oids` per request) and prints each result;
/// `false` when one had none (an error is printed in its place). After an empty walk
/// ([`Before::EmptyWalk`]), an OID an SNMPv1 agent has not (noSuchName) is neither
/// printed nor a failure.
///
/// The daemon's driver asks on a socket it does not connect (the daemon's are shared
/// by every agent), and waits out a request's attempts whatever ICMP error comes back
/// (it only words the timeout, as net-snmp waits too): a closed port would take the
/// whole timeout, where `walk` says at once that it is unreachable. A probe beside it asks
/// as a walk does ([`walker::port_unreachable`]) and stops the driver when the port
/// proves unreachable: the OIDs not answered then say so. After a walk the agent
/// answered, no probe: the port is open, and it would be one request more.
fn get_and_print(
    c: &Common,
    addr: SocketAddr,
    oids: &[Oid],
    max_oids: usize,
    before: Before,
    out: &mut impl Write,
) -> anyhow::Result<bool> {
    let absent_ok = before == Before::EmptyWalk && c.version == snmp::Version::V1;
    let params = c.params(addr, max_oids.max(1))?;
    let job = params.job(addr, oids.to_vec());
    let source = super::source_addrs(c.source.as_slice(), &[addr.ip()])?;
    let target = Target {
        ip: addr.ip(),
        snmp: &params,
        max_repetitions: 1,
        source,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut results: Vec<Option<Result<VarValue, poller::value::ItemError>>> =
        vec![None; oids.len()];
    // Set when the probe found the port unreachable (and stopped the driver).
    let refused = std::cell::Cell::new(false);
    // Ends the probe's wait once the driver is done.
    let done = std::sync::atomic::AtomicBool::new(false);
    let (tell, told) = tokio::sync::oneshot::channel();
    let report = std::thread::scope(|scope| {
        match before {
            Before::Nothing => {
                scope.spawn(|| {
                    let _ = tell.send(walker::port_unreachable(&target, &oids[0], &done));
                });
            }
            // No word ever comes: the driver's requests tell.
            Before::EmptyWalk => drop(tell),
        }
        let report = rt.block_on(async {
            let opts = SnmpDriverOptions {
                sockets: 1,
                rcvbuf: 1 << 20,
                source,
                ..Default::default()
            };
            let mut driver = SnmpDriver::open(opts).context("opening a UDP socket")?;
            let jobs = [job];
            let unreachable = async {
                match told.await {
                    Ok(true) => refused.set(true),
                    // Reachable, or no word: the driver's requests tell.
                    _ => std::future::pending().await,
                }
            };
            anyhow::Ok(
                driver
                    .run_iteration_until(&jobs, unreachable, Duration::ZERO, |_, i, r| {
                        results[i] = Some(r)
                    })
                    .await,
            )
        });
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        report
    })?;
    tracing::debug!(?report, refused = refused.get(), "snmp get done");
    let mut all = true;
    for (oid, r) in oids.iter().zip(results) {
        let oid = oid.to_string();
        match r {
            Some(Ok(v)) => {
                all &= v.undecodable().is_none();
                print_value(out, c.json, &oid, &v)?
            }
            Some(Err(e)) if absent_ok && e.reason == poller::value::ErrorReason::Unsupported => {}
            Some(Err(e)) => {
                all = false;
                // The item's text as the daemon has it, Zabbix's words first; the
                // class before it said a timeout twice (`timeout: Timeout while`).
                print_error(out, c.json, &oid, &e.text, Some(e.reason))?;
            }
            None => {
                all = false;
                let why = match refused.get() {
                    true => walker::PortUnreachable(addr).to_string(),
                    false => "no result".to_string(),
                };
                print_error(out, c.json, &oid, &why, None)?;
            }
        }
    }
    Ok(all)
}

/// An OID of the command line, or why not (a name: how to get its number).
fn cli_oid(text: &str) -> Result<Oid, String> {
    crate::config::numeric_oid(text, "1.3.6.1.2.1.1.1.0")
}

/// The walk's root of the command line, as typed: a top arc (`1`, `.2`) or an OID,
/// refused as `get` refuses its OIDs (a name: how to get its number), a usage error
/// before anything is sent (exit 2). A walk said so as its failure, exit 1, where
/// `get` and `walk --indices` exit 2.
fn walk_root(text: &str) -> Result<String, String> {
    match text.strip_prefix('.').unwrap_or(text).parse::<u32>() {
        Ok(0..=2) => {}
        Ok(_) => return Err(format!("{text:?}: the first arc must be 0, 1 or 2")),
        Err(_) => {
            cli_oid(text)?;
        }
    }
    Ok(text.to_string())
}

/// The walk's root as the lines print OIDs (net-snmp's `-On`, `get`'s and each row's
/// form: a leading dot), whether or not it was typed with one. It is an OID or a top
/// arc: [`walk_root`] refused anything else.
fn dotted(root: &str) -> String {
    match root.parse::<Oid>() {
        Ok(oid) => oid.to_string(),
        // A top arc (`2`), which is no OID to parse.
        Err(_) => format!(".{}", root.strip_prefix('.').unwrap_or(root)),
    }
}

fn walk(a: WalkArgs) -> anyhow::Result<ExitCode> {
    let c = &a.common;
    let addr = c.addr()?;
    // Its errors name it as `get` names its OIDs, and as the rows are printed.
    let shown = dotted(&a.oid);
    let snmp = c.params(addr, a.max_repetitions as usize)?;
    let t = Target {
        ip: addr.ip(),
        snmp: &snmp,
        max_repetitions: a.max_repetitions,
        source: super::source_addrs(c.source.as_slice(), &[addr.ip()])?,
    };
    let matches = a
        .matches
        .as_deref()
        .map(regex::Regex::new)
        .transpose()
        .context("--matches")?;
    // A value (as text; `None`: an exception) that --matches takes.
    let takes = |v: Option<&str>| {
        let m = matches.as_ref();
        m.is_none_or(|m| v.is_some_and(|t| m.is_match(t)))
    };
    // No one stops a walk of the command line but its own timeouts.
    let stop = std::sync::atomic::AtomicBool::new(false);
    let mut out = std::io::stdout().lock();
    if a.indices {
        let column = match a.oid.parse::<Oid>() {
            Ok(col) if col.arcs().count() > 2 => col,
            _ => bail!(
                "--indices: {:?} is not a table column to walk (ifDescr: 1.3.6.1.2.1.2.2.1.2)",
                a.oid
            ),
        };
        // As a walk: exit 1 when it fails (the error said, in --json as an object)
        // or finds no row (an `indices` value lists one at least); a walk of what is
        // not a column (a table, its entry) is refused as a wrong OID, exit 2.
        let rows = match walker::table_rows(&t, &column, takes, &stop) {
            Ok(rows) => crate::config::Indices::from_rows(rows),
            Err(e) if e.downcast_ref::<walker::NotAColumn>().is_some() => return Err(e),
            Err(e) => {
                print_walk_error(&mut out, c.json, &shown, &e)?;
                return Ok(ExitCode::from(1));
            }
        };
        if rows.is_empty() {
            let why = match &a.matches {
                Some(m) => format!("no rows whose value matches {m:?}"),
                None => "no rows".to_string(),
            };
            print_error(&mut out, c.json, &shown, &why, None)?;
            return Ok(ExitCode::from(1));
        }
        let indices = rows.to_string();
        let n = rows.len();
        match c.json {
            true => writeln!(
                out,
                "{}",
                serde_json::json!({ "indices": indices, "rows": n })
            )?,
            false => {
                let s = if n == 1 { "" } else { "s" };
                writeln!(out, "indices = \"{indices}\"  # {n} row{s}")?
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut seen = 0usize;
    let walked = walker::walk(&t, &a.oid, &stop, |oid, v| {
        seen += 1;
        if takes(walker::value_text(&v).as_deref()) {
            print_value(&mut out, c.json, &oid.to_string(), &v)?;
        }
        Ok(())
    });
    if let Err(e) = walked {
        // As snmpwalk: the rows printed so far stay, the error is said (in --json as
        // an object of its own, as `get` gives one), exit 1.
        print_walk_error(&mut out, c.json, &shown, &e)?;
        return Ok(ExitCode::from(1));
    }
    if seen == 0 {
        // Nothing under it: the OID itself, as snmpwalk then GETs it (a scalar's
        // instance, `sysUpTime.0`), or the agent's "No Such Object". SNMPv1 has no
        // such exception: its error (noSuchName) means nothing there, and snmpwalk
        // prints nothing and exits 0. A top arc (`2`) is no OID to GET (one has two
        // arcs at least): nothing under it prints nothing either, exit 0.
        let bare = a.oid.strip_prefix('.').unwrap_or(&a.oid);
        if bare.parse::<u32>().is_ok() {
            return Ok(ExitCode::SUCCESS);
        }
        let root: Oid = a.oid.parse().context("the walk's OID")?;
        if !get_and_print(c, addr, &[root], 1, Before::EmptyWalk, &mut out)? {
            return Ok(ExitCode::from(1));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// (user, system) CPU time of this process.
fn cpu_times() -> (Duration, Duration) {
    // SAFETY: getrusage fills the struct we pass; RUSAGE_SELF is always valid.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    (tv(ru.ru_utime), tv(ru.ru_stime))
}

/// Resident set size in KiB (from /proc/self/statm).
fn rss_kib() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4
}

fn load(a: LoadArgs) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&a.targets)
        .with_context(|| format!("reading {}", a.targets.display()))?;
    let mut jobs = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut f = line.split_whitespace();
        let (Some(addr), Some(community)) = (f.next(), f.next()) else {
            bail!(
                "{}:{}: expected `IP[:PORT] COMMUNITY OID...`",
                a.targets.display(),
                n + 1
            );
        };
        let addr: SocketAddr = addr
            .parse()
            .or_else(|_| {
                addr.parse::<std::net::IpAddr>()
                    .map(|ip| SocketAddr::new(ip, 161))
            })
            .with_context(|| format!("{}:{}: bad address", a.targets.display(), n + 1))?;
        poller::source::check_address(addr.ip())
            .map_err(|e| anyhow::anyhow!("{}:{}: {e}", a.targets.display(), n + 1))?;
        let oids = f
            .map(|o| {
                o.parse::<Oid>()
                    .with_context(|| format!("{}:{}: OID {o:?}", a.targets.display(), n + 1))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let mut job = SnmpHostJob::new(addr, Arc::from(community), oids);
        job.timeout = a.timeout;
        job.retries = a.retries;
        job.max_oids = a.max_oids.max(1);
        job.max_inflight = a.max_inflight.max(1);
        jobs.push(job);
    }
    let items: usize = jobs.iter().map(|j| j.oids.len()).sum();
    let mut opts = SnmpDriverOptions::default();
    if let Some(pps) = a.max_pps {
        opts.max_pps = pps;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut out = std::io::stdout().lock();
    let mut driver = SnmpDriver::open(opts).context("opening UDP sockets")?;
    let (mut total_cpu, mut total_wall, mut total_req) = (Duration::ZERO, Duration::ZERO, 0u64);
    let (user0, sys0) = cpu_times();
    for i in 1..=a.iterations {
        let (u, s) = cpu_times();
        let cpu0 = u + s;
        let (mut ok, mut failed) = (0u64, 0u64);
        let report = rt.block_on(driver.run_iteration(&jobs, |_, _, r| {
            if r.is_ok() {
                ok += 1;
            } else {
                failed += 1;
            }
        }));
        let (u, s) = cpu_times();
        let cpu = u + s - cpu0;
        let s = report.stats;
        total_cpu += cpu;
        total_wall += report.wall;
        total_req += s.requests;
        let line = serde_json::json!({
            "iteration": i, "hosts": jobs.len(), "items": items, "ok": ok, "failed": failed,
            "wall_s": report.wall.as_secs_f64(), "cpu_s": cpu.as_secs_f64(),
            "requests": s.requests, "retries": s.retries, "timeouts": s.timeouts,
            "hosts_timed_out": s.hosts_timed_out, "responses": s.responses,
            "malformed": s.malformed, "stale": s.stale, "unknown_request_id": s.unknown_request_id,
            "wrong_source": s.wrong_source, "wrong_community": s.wrong_community,
            "too_big": s.too_big, "silent_too_big": s.silent_too_big, "probes": s.probes,
            "probes_answered": s.probes_answered, "icmp_errors": s.unreachable,
            "socket_errors": report.socket_errors,
            "would_block": report.would_block, "rss_kib": rss_kib(),
        });
        writeln!(out, "{line}")?;
        if !a.pause.is_zero() {
            std::thread::sleep(a.pause);
        }
    }
    let (user1, sys1) = cpu_times();
    let per_k = |d: Duration| {
        if total_req == 0 {
            0.0
        } else {
            d.as_secs_f64() * 1000.0 / total_req as f64
        }
    };
    let summary = serde_json::json!({
        "summary": true, "iterations": a.iterations, "requests": total_req,
        "req_per_s": total_req as f64 / total_wall.as_secs_f64().max(1e-9),
        "cpu_s_per_1000_requests": per_k(total_cpu), "wall_s_total": total_wall.as_secs_f64(),
        "cpu_us_per_request": per_k(total_cpu) * 1000.0,
        "user_us_per_request": per_k(user1 - user0) * 1000.0, "sys_us_per_request": per_k(sys1 - sys0) * 1000.0,
        "rss_kib": rss_kib(),
    });
    writeln!(out, "{summary}")?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A MIB name typed as snmpget takes it is told how to get its number; it was only
    /// `OID arc "sysDescr" is not a number`.
    #[test]
    fn a_mib_name_is_told_how_to_get_its_number() {
        let why = cli_oid("IF-MIB::ifDescr.1").unwrap_err();
        assert_eq!(
            why,
            "\"IF-MIB::ifDescr.1\" is a name, not a numeric OID like 1.3.6.1.2.1.1.1.0: netpoller reads no MIBs (`snmptranslate -On IF-MIB::ifDescr.1` gives the number)"
        );
        assert!(cli_oid(".sysDescr.0")
            .unwrap_err()
            .contains("`snmptranslate -On sysDescr.0`"));
        // A numeric typo keeps the parser's reason.
        let why = cli_oid("1.3.6..1").unwrap_err();
        assert!(
            why.ends_with("like 1.3.6.1.2.1.1.1.0: OID arc \"\" is not a number in 0..=4294967295"),
            "{why}"
        );
        assert_eq!(
            cli_oid(".1.3.6.1.2.1.1.1.0").unwrap().to_string(),
            ".1.3.6.1.2.1.1.1.0"
        );
    }

    /// `--json` gives an Opaque-wrapped integer whole (through a double, u64::MAX would
    /// come out as 18446744073709552000) and a float as a number; they were hex.
    #[test]
    fn json_opaque_numbers_are_whole() {
        let json = |b: Vec<u8>| {
            let mut out = Vec::new();
            print_value(&mut out, true, ".1.3.6.1.4.1.99.1", &VarValue::Opaque(b)).unwrap();
            let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
            assert_eq!(v["type"], "Opaque", "{v}");
            v["value"].clone()
        };
        let u64_max = vec![
            0x9f, 0x7b, 9, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        ];
        assert_eq!(json(u64_max), serde_json::json!(u64::MAX));
        let c64 = vec![0x9f, 0x76, 8, 0, 0x20, 0, 0, 0, 0, 0, 1];
        assert_eq!(json(c64), serde_json::json!((1u64 << 53) + 1));
        let min = vec![0x9f, 0x7a, 8, 0x80, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(json(min), serde_json::json!(i64::MIN));
        let half = [&[0x9f, 0x78, 4][..], &0.5f32.to_be_bytes()].concat();
        assert_eq!(json(half), serde_json::json!(0.5));
    }
}
