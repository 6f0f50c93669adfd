//! The configuration file: TOML shape, defaults, validation and resolution into hosts.
//!
//! Loading happens in one place ([`load`] / [`parse`]) and in three steps:
//! 1. TOML syntax; a syntax error stops here (with its line).
//! 2. Shape: every section and every template, host and range is deserialized on its
//!    own (`deny_unknown_fields` everywhere), so one typo does not hide the next problem.
//! 3. Meaning: IPs, CIDRs, templates, OIDs, item keys and Zabbix's ICMP limits,
//!    duplicates of host names, keys and itemids.
//!
//! Every problem found in steps 2 and 3 is reported, each with the key path it concerns
//! (`hosts[2].ip`) and the line of that key in the file; but a template, host or range
//! that step 2 refused a value of is not checked in step 3 (what it would find there
//! may be an echo of the refused value: `delay` for `interval` is "no interval"). The
//! other pieces are, whatever that one's problems. Steps 2–3 resolve templates,
//! host ranges and defaults into [`poller::plan::HostSpec`]s: the daemon never looks at
//! the TOML again.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use poller::keys::{IcmpDefaults, IcmpKey, IcmpMetric, ItemKey};
use poller::plan::{
    derive_itemid, host_in_process_shard, HostSpec, ItemKind, ItemSpec, SnmpParams, SnmpVersion,
};
use poller::value::ValueType;
use serde::Deserialize;

mod indices;
pub use indices::{Indices, Row};
pub mod span;
pub use span::{Addresses, Span};

/// Most addresses `host_ranges` may expand to in one file (1,048,576).
pub const MAX_RANGE_HOSTS: usize = 1 << 20;

/// Most indices one item may stand for (`indices`).
pub const MAX_INDICES: u64 = 1 << 16;

/// Most items one file may expand to (8,388,608: ~1.4 GB resolved; `indices` and
/// `host_ranges` multiply).
pub const MAX_ITEMS: usize = 1 << 23;

/// The longest item key Zabbix stores (`items.key_`, `ITEM_KEY_LEN`), in characters.
pub const MAX_KEY_CHARS: usize = 2048;

/// Zabbix's low-level discovery macro for an SNMP table row, which `indices` fills.
pub const SNMPINDEX: &str = "{#SNMPINDEX}";

/// Hosts between two releases of memory while the plan is built: ~10 MB of resolved
/// config at 3 ICMP items per host, and ~10 releases (`malloc_trim`, a few ms each)
/// at 1 M items.
pub const PLAN_RELEASE_HOSTS: usize = 32_768;

/// `[daemon]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DaemonSection {
    /// Scheduler shards: due-queues with a lock each. Default 4.
    pub shards: usize,
    /// Scale-out: `"i/N"` polls only the hosts in shard i of N (see `--shard`). Default: all.
    pub shard: Option<String>,
    /// Prometheus `/metrics` and `/healthz` listen address; `""` disables. Default
    /// `127.0.0.1:9464`.
    pub metrics_listen: String,
    /// Spool folder: batches ClickHouse has not confirmed (or all values, without a
    /// `[clickhouse]` section). Default `./spool`.
    pub spool_dir: PathBuf,
    /// Spool size cap; the oldest spooled data beyond it is dropped and counted.
    /// Default 1 GiB.
    pub spool_max_bytes: u64,
    /// How often spool files are fsynced: the most a crash can lose. Default `1s`.
    #[serde(with = "sink::config::duration_str")]
    pub spool_fsync_interval: Duration,
    /// Values buffered between the engines and the sink (the channel holds
    /// `channel_capacity / 1024` batches, at least one, of up to
    /// [`poller::engine::EMIT_BATCH`]). Default 65,536.
    pub channel_capacity: usize,
    /// Most hosts in one ICMP sweep. Default 4,096.
    pub icmp_batch_hosts: usize,
    /// Most SNMP OIDs requested in one SNMP iteration. Default 8,000.
    pub snmp_batch_requests: usize,
    /// An iteration takes every task due within this window (polling it up to this
    /// much early), so sweeps are large and the engines start about one iteration per
    /// window. Default `1s`; at most `10s`.
    #[serde(with = "sink::config::duration_str")]
    pub batch_window: Duration,
    /// How the ICMP tasks of one interval are placed in it. Default `"grouped"`.
    pub icmp_phases: IcmpPhases,
    /// ICMP sweeps that may run at once, each on its own socket. Default 2: a sweep lasts
    /// at least its timeout, so with one sweep at a time and 1 s timeouts the tasks that
    /// come due every `batch_window` wait for the previous sweep and start late (measured:
    /// 40,960 hosts every 10 s ran ~1.2 s late with 1, on time with 2+). Every raw ICMP
    /// socket receives every echo reply on the machine; with more than one, each socket
    /// gets a kernel filter on its sweep's identifier so none reads the others' replies
    /// (replies to other programs' pings are then dropped by the kernel rather than
    /// counted); they share `icmp.max_pps` (a sweep running alone gets all of it).
    pub icmp_concurrent_sweeps: usize,
    /// SNMP iterations that may run at once. Default 2.
    pub snmp_concurrent_iterations: usize,
    /// Switch to this user after opening raw sockets, holding no capability (`run
    /// --user`). Default: none.
    pub user: Option<String>,
    /// Where `run` keeps the table rows discovery found (`[[templates.discovery]]`), so
    /// that a restart polls them at once. Default `./discovered.json`.
    pub discovery_file: PathBuf,
    /// How often `run` saves the trends hours still open (`<spool_dir>/trends-checkpoint`),
    /// so that a crash (SIGKILL, the OOM killer, a power loss) loses at most this much of
    /// each item's hour rather than all of it. Default `5m`; `0s`: never.
    #[serde(with = "sink::config::duration_str")]
    pub trends_checkpoint: Duration,
    /// The local address ICMP probes and SNMP requests (discovery walks included) leave
    /// from, Zabbix's `SourceIP`: `"192.0.2.10"`, or one per family,
    /// `["192.0.2.10", "2001:db8::10"]`. Default: the kernel's choice (the route's).
    pub source_ip: Option<OneOrMany>,
}

/// A string or a list of them.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn items(&self) -> &[String] {
        match self {
            OneOrMany::One(s) => std::slice::from_ref(s),
            OneOrMany::Many(v) => v,
        }
    }
}

impl DaemonSection {
    /// `source_ip` as addresses per family (as checked by the loader, which refuses
    /// anything else).
    pub fn source_addrs(&self) -> poller::source::SourceAddrs {
        poller::source::SourceAddrs::of(self.source_ips().filter_map(Result::ok))
            .unwrap_or_default()
    }

    /// Each `source_ip` entry as an address, or itself when it is none.
    fn source_ips(&self) -> impl Iterator<Item = Result<IpAddr, &String>> {
        self.source_ip
            .iter()
            .flat_map(OneOrMany::items)
            .map(|s| s.trim().parse::<IpAddr>().map_err(|_| s))
    }
}

impl Default for DaemonSection {
    fn default() -> Self {
        DaemonSection {
            shards: 4,
            shard: None,
            metrics_listen: "127.0.0.1:9464".into(),
            spool_dir: PathBuf::from("./spool"),
            spool_max_bytes: 1 << 30,
            spool_fsync_interval: Duration::from_secs(1),
            channel_capacity: 65_536,
            icmp_batch_hosts: 4_096,
            snmp_batch_requests: 8_000,
            batch_window: Duration::from_secs(1),
            icmp_phases: IcmpPhases::Grouped,
            icmp_concurrent_sweeps: 2,
            snmp_concurrent_iterations: 2,
            user: None,
            discovery_file: PathBuf::from("./discovered.json"),
            trends_checkpoint: Duration::from_secs(300),
            source_ip: None,
        }
    }
}

/// `daemon.icmp_phases`: when in its interval each ICMP host is polled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IcmpPhases {
    /// The hosts of an interval are polled together, in as few sweeps as
    /// `icmp_batch_hosts` allows, spaced evenly over the interval
    /// ([`poller::plan::Plan::group_icmp_phases`]): the cheapest per probe.
    Grouped,
    /// Every host on its own hashed offset in the interval, as Zabbix spreads items:
    /// an even load, swept as many small batches (one per `batch_window`).
    Spread,
}

/// `[icmp]`: defaults for ICMP keys that leave a parameter empty.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IcmpSection {
    /// Wait for replies after a host's last probe. Default `1s` (Zabbix minimum 50 ms).
    #[serde(deserialize_with = "sink::config::duration_str::deserialize_millis_first")]
    pub timeout: Duration,
    /// Probes per host. Default 3 (1..10000).
    pub packets: u32,
    /// Spacing of one host's probes. Default `20ms` (Zabbix minimum).
    #[serde(deserialize_with = "sink::config::duration_str::deserialize_millis_first")]
    pub interval: Duration,
    /// ICMP payload bytes. Default 68 (24..65507).
    pub size: u32,
    /// Send rate cap for the whole process, packets per second. Default 100,000.
    pub max_pps: u32,
}

impl Default for IcmpSection {
    fn default() -> Self {
        let d = IcmpDefaults::default();
        IcmpSection {
            timeout: d.timeout,
            packets: d.packets,
            interval: d.interval,
            size: d.size,
            max_pps: 100_000,
        }
    }
}

impl IcmpSection {
    pub fn key_defaults(&self) -> IcmpDefaults {
        IcmpDefaults {
            packets: self.packets,
            interval: self.interval,
            size: self.size,
            timeout: self.timeout,
        }
    }
}

/// SNMP version as written in the config: one of [`SnmpVersion::SPELLINGS`] (`"1"`,
/// `"2c"`, `"3"`, `"v2c"`, ...), or the integers 1, 2 (v2c, as
/// prometheus-snmp-exporter's `version: 2`) and 3.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VersionName(pub SnmpVersion);

impl<'de> Deserialize<'de> for VersionName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = VersionName;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an SNMP version: \"1\", \"2c\" or \"3\"")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<VersionName, E> {
                s.parse().map(VersionName).map_err(E::custom)
            }
            // An integer is read as the same digits in a string: one parser, one message.
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<VersionName, E> {
                self.visit_str(&n.to_string())
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<VersionName, E> {
                self.visit_str(&n.to_string())
            }
        }
        d.deserialize_any(V)
    }
}

impl From<VersionName> for SnmpVersion {
    fn from(v: VersionName) -> Self {
        v.0
    }
}

/// `[snmp]`: defaults for SNMP hosts.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SnmpSection {
    /// `"1"`, `"2c"` or `"3"`. Default `"2c"`.
    pub version: VersionName,
    /// Community (v1, v2c). Default `"public"`. Never logged.
    pub community: String,
    /// SNMPv3: the USM user (net-snmp's `-u`).
    pub security_name: Option<String>,
    /// SNMPv3: `noAuthNoPriv`, `authNoPriv` or `authPriv`; by default what the
    /// passphrases given imply.
    pub security_level: Option<String>,
    /// SNMPv3: `MD5`, `SHA` (SHA-1), `SHA-224`, `SHA-256`, `SHA-384`, `SHA-512`.
    pub auth_protocol: Option<String>,
    /// SNMPv3, secret: never logged or printed.
    pub auth_passphrase: Option<String>,
    /// SNMPv3: `DES`, `AES` (AES-128), `AES-192`, `AES-256`, `AES-192-C`, `AES-256-C`.
    pub priv_protocol: Option<String>,
    /// SNMPv3, secret: never logged or printed.
    pub priv_passphrase: Option<String>,
    /// SNMPv3: default empty, the agent's default context.
    pub context_name: Option<String>,
    /// Agent UDP port. Default 161.
    pub port: u16,
    /// Wait for one response. Default `2s`.
    #[serde(with = "sink::config::duration_str")]
    pub timeout: Duration,
    /// Re-sends after a timeout, within the iteration. Default 1.
    pub retries: u32,
    /// Most OIDs in one GET PDU (halved per host on tooBig). Default 32.
    pub max_oids_per_request: usize,
    /// Requests in flight to one host: 1 = hybrid async (in series). Default 1.
    pub max_inflight_per_host: usize,
    /// Send rate cap for SNMP requests, per second. Default 20,000.
    pub max_pps: u32,
}

impl Default for SnmpSection {
    fn default() -> Self {
        SnmpSection {
            version: VersionName(SnmpVersion::V2c),
            community: "public".into(),
            security_name: None,
            security_level: None,
            auth_protocol: None,
            auth_passphrase: None,
            priv_protocol: None,
            priv_passphrase: None,
            context_name: None,
            port: 161,
            timeout: Duration::from_secs(2),
            retries: 1,
            max_oids_per_request: 32,
            max_inflight_per_host: 1,
            max_pps: 20_000,
        }
    }
}

impl fmt::Debug for SnmpSection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SnmpSection")
            .field("version", &self.version)
            .field("community", &"<redacted>")
            .field("port", &self.port)
            .field("timeout", &self.timeout)
            .field("retries", &self.retries)
            .finish_non_exhaustive()
    }
}

/// The SNMPv3 keys of `[snmp]`, of a host's `snmp = { ... }` (Zabbix's names for the
/// fields of an SNMPv3 interface) or of `netpoller snmp`'s options, gathered by
/// [`usm_of!`]; [`UsmSection::wrong_values`] (each value by itself) and
/// [`UsmSection::user`] (the values together) are where they are checked.
/// Equal sections (passphrases included) describe one user.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub(crate) struct UsmSection {
    pub(crate) security_name: Option<String>,
    pub(crate) security_level: Option<String>,
    pub(crate) auth_protocol: Option<String>,
    pub(crate) auth_passphrase: Option<String>,
    pub(crate) priv_protocol: Option<String>,
    pub(crate) priv_passphrase: Option<String>,
    pub(crate) context_name: Option<String>,
}

/// The SNMPv3 fields of a [`SnmpSection`] or a [`SnmpOverride`] (serde's `flatten`
/// would share them, but cannot be combined with `deny_unknown_fields`).
macro_rules! usm_of {
    ($s:expr) => {
        $crate::config::UsmSection {
            security_name: $s.security_name.clone(),
            security_level: $s.security_level.clone(),
            auth_protocol: $s.auth_protocol.clone(),
            auth_passphrase: $s.auth_passphrase.clone(),
            priv_protocol: $s.priv_protocol.clone(),
            priv_passphrase: $s.priv_passphrase.clone(),
            context_name: $s.context_name.clone(),
        }
    };
}
pub(crate) use usm_of;

impl UsmSection {
    /// `self`'s fields, each falling back to `d`'s.
    fn or(&self, d: &UsmSection) -> UsmSection {
        let pick = |a: &Option<String>, b: &Option<String>| a.clone().or_else(|| b.clone());
        UsmSection {
            security_name: pick(&self.security_name, &d.security_name),
            security_level: pick(&self.security_level, &d.security_level),
            auth_protocol: pick(&self.auth_protocol, &d.auth_protocol),
            auth_passphrase: pick(&self.auth_passphrase, &d.auth_passphrase),
            priv_protocol: pick(&self.priv_protocol, &d.priv_protocol),
            priv_passphrase: pick(&self.priv_passphrase, &d.priv_passphrase),
            context_name: pick(&self.context_name, &d.context_name),
        }
    }

    /// No SNMPv3 field is given.
    pub(crate) fn is_empty(&self) -> bool {
        *self == UsmSection::default()
    }

    /// Each field given whose value is wrong by itself, whatever the others say (an
    /// unknown protocol or level, a passphrase too short, a user name too long), and
    /// why, in the order of the fields (passphrases never appear in a message). What is
    /// written wrong is wrong wherever it is written: these are checked in every table,
    /// the rest of [`Self::user`] only where a host polls SNMP.
    pub(crate) fn wrong_values(&self) -> Vec<(&'static str, String)> {
        use snmp::usm::{AuthProtocol, PrivProtocol};
        use snmp::v3::{SecurityLevel, UsmUser, MIN_PASSPHRASE_LEN};
        /// `T`'s refusal of `value`, if given and refused, naming the spelling it is a
        /// typo of (told as `name` spells it, by `unknown`).
        fn refused_name<T: std::str::FromStr<Err = String> + Copy>(
            value: Option<&str>,
            spellings: &[(&'static str, T)],
            name: fn(T) -> &'static str,
            unknown: fn(&str, Option<&str>) -> String,
        ) -> Option<String> {
            let value = value?;
            let refusal = value.parse::<T>().err()?;
            let names = spellings.iter().map(|&(s, t)| (s, name(t)));
            Some(refused_or_meant(refusal, value, names, unknown))
        }
        let short = |field: &'static str, p: &Option<String>| {
            given(p).filter(|p| p.len() < MIN_PASSPHRASE_LEN).map(|_| {
                let why = format!("must have at least {MIN_PASSPHRASE_LEN} characters (RFC 3414)");
                (field, why)
            })
        };
        let name = given(&self.security_name).and_then(|n| UsmUser::new(n, None, None).err());
        // An unknown name, with the one it is a typo of.
        let level = refused_name(
            self.security_level.as_deref(),
            &SecurityLevel::SPELLINGS,
            SecurityLevel::as_str,
            SecurityLevel::unknown,
        );
        let auth = refused_name(
            given(&self.auth_protocol),
            &AuthProtocol::SPELLINGS,
            AuthProtocol::as_str,
            AuthProtocol::unknown,
        );
        let privacy = refused_name(
            given(&self.priv_protocol),
            &PrivProtocol::SPELLINGS,
            PrivProtocol::as_str,
            PrivProtocol::unknown,
        );
        // A Zabbix user macro left in (`{$SNMPV3_USER}`, copied from a Zabbix interface):
        // said as such, before whatever else its text would be wrong as.
        let left = |field: &'static str, v: &Option<String>| {
            given(v)
                .filter(|v| zabbix_macro(v))
                .map(|_| (field, macro_left("an SNMPv3 setting")))
        };
        [
            left("security_name", &self.security_name).or(name.map(|e| ("security_name", e))),
            left("security_level", &self.security_level).or(level.map(|e| ("security_level", e))),
            left("auth_protocol", &self.auth_protocol).or(auth.map(|e| ("auth_protocol", e))),
            left("auth_passphrase", &self.auth_passphrase)
                .or_else(|| short("auth_passphrase", &self.auth_passphrase)),
            left("priv_protocol", &self.priv_protocol).or(privacy.map(|e| ("priv_protocol", e))),
            left("priv_passphrase", &self.priv_passphrase)
                .or_else(|| short("priv_passphrase", &self.priv_passphrase)),
            left("context_name", &self.context_name),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// The user these fields describe, or the field at fault and why (passphrases never
    /// appear in the message): the first of [`Self::wrong_values`], or what the fields
    /// lack together.
    pub(crate) fn user(&self) -> Result<snmp::v3::UsmUser, (&'static str, String)> {
        use snmp::usm::{AuthProtocol, PrivProtocol};
        use snmp::v3::{SecurityLevel, UsmUser};
        if let Some(wrong) = self.wrong_values().into_iter().next() {
            return Err(wrong);
        }
        let name = given(&self.security_name).ok_or((
            "security_name",
            "SNMPv3 needs a security_name (the USM user)".to_string(),
        ))?;
        let level = match &self.security_level {
            Some(l) => l.parse().map_err(|e| ("security_level", e))?,
            None if given(&self.priv_passphrase).is_some() => SecurityLevel::AuthPriv,
            None if given(&self.auth_passphrase).is_some() => SecurityLevel::AuthNoPriv,
            None => SecurityLevel::NoAuthNoPriv,
        };
        // A protocol without its passphrase, or passphrases under a lower level, is a
        // half-written user: polling at a lower level than meant would fail or, worse,
        // succeed without privacy. Say so instead of guessing.
        let unused = |field: &'static str, what: &str| {
            Err((
                field,
                format!(
                    "{what} is set, but the security level is {} (an empty value drops an inherited one)",
                    level.as_str()
                ),
            ))
        };
        if level == SecurityLevel::NoAuthNoPriv
            && (given(&self.auth_protocol).is_some() || given(&self.auth_passphrase).is_some())
        {
            return unused("auth_passphrase", "authentication");
        }
        if level != SecurityLevel::AuthPriv
            && (given(&self.priv_protocol).is_some() || given(&self.priv_passphrase).is_some())
        {
            return unused("priv_passphrase", "privacy");
        }
        let needs = |field: &'static str, what: &str| {
            (
                field,
                format!("security level {} needs {field} ({what})", level.as_str()),
            )
        };
        let auth = if level == SecurityLevel::NoAuthNoPriv {
            None
        } else {
            let proto: AuthProtocol = given(&self.auth_protocol)
                .ok_or_else(|| {
                    needs(
                        "auth_protocol",
                        "MD5, SHA, SHA-224, SHA-256, SHA-384 or SHA-512",
                    )
                })?
                .parse()
                .map_err(|e| ("auth_protocol", e))?;
            // Its length is one of the wrong values, checked above.
            let pass = given(&self.auth_passphrase)
                .ok_or_else(|| needs("auth_passphrase", "the passphrase"))?;
            Some((proto, pass))
        };
        let privacy = if level == SecurityLevel::AuthPriv {
            let proto: PrivProtocol = given(&self.priv_protocol)
                .ok_or_else(|| {
                    needs(
                        "priv_protocol",
                        "DES, AES, AES-192, AES-256, AES-192-C or AES-256-C",
                    )
                })?
                .parse()
                .map_err(|e| ("priv_protocol", e))?;
            let pass = given(&self.priv_passphrase)
                .ok_or_else(|| needs("priv_passphrase", "the passphrase"))?;
            Some((proto, pass))
        } else {
            None
        };
        let user = UsmUser::new(name, auth, privacy).map_err(|e| ("security_name", e))?;
        Ok(user.with_context(self.context_name.as_deref().unwrap_or("")))
    }
}

/// Whether `value` is, whole, a Zabbix user macro (`{$SNMP_COMMUNITY}`,
/// `{$SNMPV3_AUTHPASS:"core"}`): Zabbix resolves it per host, netpoller has no macros,
/// so it would be sent to the agent as written (`import-template` resolves a
/// template's own macros; a host's interface fields are copied by hand).
pub(crate) fn zabbix_macro(value: &str) -> bool {
    let Some(inside) = value
        .trim()
        .strip_prefix("{$")
        .and_then(|v| v.strip_suffix('}'))
    else {
        return false;
    };
    let name = inside.split(':').next().unwrap_or_default();
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_' || c == '.')
}

/// Why a Zabbix user macro (`what`: "the community", "an SNMPv3 setting") is refused,
/// without quoting it (it stands where a secret goes).
fn macro_left(what: &str) -> String {
    format!("{what} is a Zabbix user macro ({{$...}}): netpoller resolves no macros, so the agent would get it as written and every poll would fail; write the macro's value (Zabbix: the host's or template's Macros tab, or Administration → Macros)")
}

/// A text field's value, unless it is not given or empty (which drops an inherited one).
fn given(s: &Option<String>) -> Option<&str> {
    s.as_deref().filter(|s| !s.is_empty())
}

/// A host's `snmp = { ... }`: any field overrides `[snmp]`.
#[derive(Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnmpOverride {
    pub version: Option<VersionName>,
    pub community: Option<String>,
    pub security_name: Option<String>,
    pub security_level: Option<String>,
    pub auth_protocol: Option<String>,
    pub auth_passphrase: Option<String>,
    pub priv_protocol: Option<String>,
    pub priv_passphrase: Option<String>,
    pub context_name: Option<String>,
    pub port: Option<u16>,
    #[serde(default, with = "sink::config::duration_str::option")]
    pub timeout: Option<Duration>,
    pub retries: Option<u32>,
    pub max_oids_per_request: Option<usize>,
    pub max_inflight_per_host: Option<usize>,
}

impl fmt::Debug for SnmpOverride {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SnmpOverride")
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

/// One item in a template, a host or a range.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ItemEntry {
    /// Zabbix item key (`icmpping[,3]`, or any key for an SNMP item).
    pub key: String,
    /// SNMP OID (`1.3.6...` or `.1.3.6...`); absent for ICMP keys.
    pub oid: Option<String>,
    /// `float`, `uint` or `str`. ICMP keys default to Zabbix's type; SNMP items must say.
    #[serde(rename = "type")]
    pub value_type: Option<ValueType>,
    /// Poll interval (`10s`, `1m`). Required unless a template item with the same key
    /// gives it.
    #[serde(default, with = "sink::config::duration_str::option")]
    pub interval: Option<Duration>,
    /// Zabbix itemid; default: derived from (host name, key), stable across restarts.
    pub itemid: Option<u64>,
    /// Zabbix preprocessing steps, in order, as Zabbix exports them:
    /// `[{ type = "CHANGE_PER_SECOND" }, { type = "MULTIPLIER", parameters = ["8"] }]`.
    /// Absent: the template item's; `[]`: none.
    pub preprocessing: Option<Vec<PreprocessingEntry>>,
    /// SNMP table rows this item stands for (`"1-48,101"`; rows of more than one arc
    /// listed each, `"10.0.0.1,10.0.0.2"`): one item per index, with `{#SNMPINDEX}` in
    /// its key and at its OID's end replaced by the index (Zabbix's discovery macro; the
    /// rows are listed here).
    pub indices: Option<String>,
    /// The discovery rule (`[[templates.discovery]]`, by name) whose rows this item
    /// with `{#SNMPINDEX}` stands for, on each host: rows found by walking the host's
    /// agent, instead of `indices`.
    pub discovery: Option<String>,
}

/// One preprocessing step of an item.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PreprocessingEntry {
    /// One of the types [`poller::preprocess::Step::parse`] names (Zabbix's export
    /// names, any case).
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub parameters: Vec<String>,
    /// Zabbix's "Custom on fail": `ORIGINAL_ERROR` (default), `DISCARD_VALUE`,
    /// `CUSTOM_VALUE` or `CUSTOM_ERROR` (any case).
    pub error_handler: Option<String>,
    /// The value of `CUSTOM_VALUE`, the message of `CUSTOM_ERROR`.
    pub error_handler_params: Option<String>,
}

/// `[[templates]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplateEntry {
    pub name: String,
    #[serde(default)]
    pub items: Vec<ItemEntry>,
    /// Tables whose rows the daemon finds on each host (Zabbix's low-level discovery).
    #[serde(default)]
    pub discovery: Vec<DiscoveryEntry>,
}

/// `[[templates.discovery]]`: a table whose rows are found on each host that uses
/// it by walking one of its columns, as Zabbix's SNMP discovery rule does. Items with
/// `discovery = NAME` and `{#SNMPINDEX}` are polled for each row found.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiscoveryEntry {
    /// Unique in the file; items name it.
    pub name: String,
    /// The column walked (ifDescr: `1.3.6.1.2.1.2.2.1.2`): a row is its arcs under it.
    pub oid: String,
    /// Only rows whose value matches this regular expression (a string as it is,
    /// binary as Hex-STRING, numbers in decimal), like a Zabbix discovery filter.
    pub matches: Option<String>,
    /// Only rows whose value does not match this one.
    pub not_matches: Option<String>,
    /// How often each host's table is walked again. Default `1h`.
    #[serde(
        default = "default_discovery_interval",
        with = "sink::config::duration_str"
    )]
    pub interval: Duration,
    /// Conditions on other columns of the row, all of which must hold (Zabbix's filter
    /// of a rule with several macros, "and").
    #[serde(default)]
    pub filter: Vec<FilterEntry>,
}

/// One condition of a discovery rule's `filter`: the row's value in column `oid`
/// matches `matches` and does not match `not_matches` (one of them at least). A row
/// with no value in that column fails it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilterEntry {
    pub oid: String,
    pub matches: Option<String>,
    pub not_matches: Option<String>,
}

fn default_discovery_interval() -> Duration {
    Duration::from_secs(3600)
}

/// A checked `[[templates.discovery]]` rule.
#[derive(Debug)]
pub struct DiscoveryRule {
    pub name: Arc<str>,
    pub column: snmp::Oid,
    pub matches: Option<regex::Regex>,
    pub not_matches: Option<regex::Regex>,
    pub interval: Duration,
    pub filter: Vec<Condition>,
}

impl DiscoveryRule {
    /// What the rows found depend on (column and filters, not the interval), as text:
    /// rows saved for another fingerprint are not taken.
    pub fn fingerprint(&self) -> String {
        let re = |r: &Option<regex::Regex>| r.as_ref().map(|r| r.as_str().to_owned());
        let part = |column: &snmp::Oid, m: &Option<regex::Regex>, n: &Option<regex::Regex>| {
            format!("{column} {:?} {:?}", re(m), re(n))
        };
        let mut parts = vec![part(&self.column, &self.matches, &self.not_matches)];
        parts.extend(
            self.filter
                .iter()
                .map(|c| part(&c.column, &c.matches, &c.not_matches)),
        );
        parts.join("; ")
    }

    /// Whether a row with this value in the rule's column is one (before `filter`):
    /// every row without `matches` or `not_matches`.
    pub fn takes(&self, value: Option<&str>) -> bool {
        (self.matches.is_none() && self.not_matches.is_none())
            || passes(self.matches.as_ref(), self.not_matches.as_ref(), value)
    }
}

/// A checked filter condition.
#[derive(Debug)]
pub struct Condition {
    pub column: snmp::Oid,
    pub matches: Option<regex::Regex>,
    pub not_matches: Option<regex::Regex>,
}

impl Condition {
    /// Whether a row's value (as text; `None`: the row has none) passes.
    pub fn holds(&self, value: Option<&str>) -> bool {
        passes(self.matches.as_ref(), self.not_matches.as_ref(), value)
    }
}

/// A value (`None`: none) that matches `matches` (if any) and not `not_matches`.
fn passes(
    matches: Option<&regex::Regex>,
    not_matches: Option<&regex::Regex>,
    value: Option<&str>,
) -> bool {
    value.is_some_and(|v| {
        matches.is_none_or(|m| m.is_match(v)) && !not_matches.is_some_and(|m| m.is_match(v))
    })
}

/// A host whose items stand for the rows of discovery rules: whom the daemon walks.
#[derive(Debug, Clone)]
pub struct DiscoveryTarget {
    pub host: Arc<str>,
    pub ip: IpAddr,
    pub snmp: Arc<SnmpParams>,
    /// The rules its items use, each once.
    pub rules: Vec<Arc<DiscoveryRule>>,
    /// Where its walks leave from (`daemon.source_ip`).
    pub source: poller::source::SourceAddrs,
}

/// The rows found for each host and discovery rule: host name → rule name → rows. The
/// loader gives the items of a rule one item per row found; a host with no rows known
/// for a rule has none of its items yet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Found(pub HashMap<Arc<str>, HashMap<Arc<str>, Rows>>);

/// Table rows, shared by the items that stand for them.
pub type Rows = Arc<Indices>;

impl Found {
    /// The rows known for `host`'s `rule`.
    pub fn rows(&self, host: &str, rule: &str) -> Option<&Rows> {
        self.0.get(host)?.get(rule)
    }

    /// Sets `host`'s `rule` to `rows`; whether that changed the items they stand for
    /// (no rows known and none found is no change).
    pub fn set(&mut self, host: &Arc<str>, rule: &Arc<str>, rows: Indices) -> bool {
        let per_host = self.0.entry(host.clone()).or_default();
        let changed = per_host
            .get(&**rule)
            .map_or(!rows.is_empty(), |b| **b != rows);
        per_host.insert(rule.clone(), Arc::new(rows));
        changed
    }

    /// As a TOML-free text map, for the discovery file: host → rule → `"1-48,101"`.
    pub fn to_text(
        &self,
    ) -> std::collections::BTreeMap<&str, std::collections::BTreeMap<&str, String>> {
        self.0
            .iter()
            .map(|(h, rules)| {
                let r = rules
                    .iter()
                    .map(|(n, rows)| (&**n, rows.to_string()))
                    .collect();
                (&**h, r)
            })
            .collect()
    }

    /// Reads [`Self::to_text`]'s map back; an unreadable rows value is left out, and
    /// said (`host/rule: why`).
    pub fn from_text(
        m: std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>,
    ) -> (Found, Vec<String>) {
        let (mut out, mut bad) = (HashMap::new(), Vec::new());
        for (h, rules) in m {
            let mut r = HashMap::new();
            for (n, rows) in rules {
                // "": the walk found no rows (which is not an `indices` value).
                let parsed = match rows.trim() {
                    "" => Ok(Indices::default()),
                    _ => Indices::parse(&rows),
                };
                match parsed {
                    Ok(rows) => {
                        r.insert(Arc::from(n), Arc::new(rows));
                    }
                    Err(e) => bad.push(format!("{h}/{n}: {e}")),
                }
            }
            out.insert(Arc::from(h), r);
        }
        (Found(out), bad)
    }
}

/// `[[hosts]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostEntry {
    /// Unique host name (Zabbix `hostname` column).
    pub name: String,
    /// IP literal (names are never resolved).
    pub ip: String,
    #[serde(default)]
    pub templates: Vec<String>,
    pub snmp: Option<SnmpOverride>,
    /// Items added to or overriding (same key) the templates' items.
    #[serde(default)]
    pub items: Vec<ItemEntry>,
}

/// `[[host_ranges]]`: one host per address of a CIDR's devices or of a range
/// ([`Span`]): `cidr` or `range`, one of them.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostRangeEntry {
    pub cidr: Option<String>,
    /// `FIRST-LAST`: every address from one to the other ([`span::parse_range`]).
    pub range: Option<String>,
    /// Addresses of it not to poll: addresses, CIDRs or ranges
    /// ([`span::parse_exclusion`]).
    #[serde(default)]
    pub exclude: Vec<String>,
    /// Host name pattern; `{ip}` is replaced by the address. Default `"{ip}"`.
    #[serde(default = "default_range_name")]
    pub name: String,
    #[serde(default)]
    pub templates: Vec<String>,
    pub snmp: Option<SnmpOverride>,
    #[serde(default)]
    pub items: Vec<ItemEntry>,
}

fn default_range_name() -> String {
    "{ip}".into()
}

/// What a host's `ip` that does not parse most likely is: a network (a range's), or a
/// name (never resolved: a poller must not depend on DNS, nor poll what it resolves to
/// today).
fn ip_hint(ip: &str) -> &'static str {
    let ip = ip.trim();
    match ip.split_once('/') {
        Some((a, _)) if a.parse::<IpAddr>().is_ok() => {
            ": a network is a [[host_ranges]] entry's cidr; a host has one address"
        }
        _ if span::parse_range(ip).is_some() => {
            ": a run of addresses is a [[host_ranges]] entry's range; a host has one address"
        }
        _ if ip.starts_with(|c: char| c.is_ascii_alphabetic()) && !ip.contains(':') => {
            ": names are never resolved, write the device's address"
        }
        // `192.0.2.1:1161`, `[2001:db8::1]:161`: a Prometheus or snmp_exporter target.
        _ if ip.parse::<std::net::SocketAddr>().is_ok() => {
            ": write the address alone, the SNMP port as snmp = { port = ... }"
        }
        // Zabbix's `{HOST.IP}`, `{HOST.CONN}`, `{$SWITCH_IP}`: resolved per host there.
        _ if ip.starts_with('{') && ip.ends_with('}') => {
            ": a Zabbix macro; netpoller resolves none: write the device's address"
        }
        _ => "",
    }
}

/// What is wrong with a `cidr` that does not parse, when it can be said: an address
/// without its prefix length, or a prefix length too long for its family (`sweep`
/// says it of its targets alike).
pub(crate) fn cidr_hint(cidr: &str) -> String {
    let cidr = cidr.trim();
    let (addr, len) = match cidr.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (cidr, None),
    };
    let Ok(ip) = addr.parse::<IpAddr>() else {
        return String::new();
    };
    let max = if ip.is_ipv4() { 32 } else { 128 };
    match len.map(str::parse::<u32>) {
        None => format!(": no prefix length (a network, {addr}/{max} for this address alone, or list it as a [[hosts]] entry)"),
        Some(Ok(l)) if l > max => format!(": the prefix length is at most {max}"),
        Some(_) => String::new(),
    }
}

/// `text` as an OID, or why not, for people: the form (`like`), and for a name such as
/// `IF-MIB::ifDescr` (netpoller reads no MIBs) the net-snmp command that gives its
/// number. The config's OIDs and the `snmp` commands' say it alike.
pub(crate) fn numeric_oid(text: &str, like: &str) -> Result<snmp::Oid, String> {
    text.parse().map_err(|e| {
        let mut name = text.trim_start_matches('.');
        // Zabbix 6.4+'s forms of an SNMP item's OID field, copied by hand: `get[OID]` is
        // the OID (a name in it is told as a name); `walk[...]` and 6.0's
        // `discovery[...]` read a table, which is rows of items here. A user macro
        // (`.{$IFINDEX}`) has a value only in Zabbix.
        if let Some(inner) = name.strip_prefix("get[").and_then(|r| r.strip_suffix(']')) {
            if let Ok(oid) = inner.trim().parse::<snmp::Oid>() {
                let oid = oid.to_string();
                let oid = oid.trim_start_matches('.');
                return format!("{text:?} is Zabbix's get[] form of an SNMP item's OID: write {oid}");
            }
            name = inner.trim().trim_start_matches('.');
        }
        if ["walk[", "discovery["].iter().any(|p| name.starts_with(p)) {
            return format!(
                "{text:?} is a Zabbix SNMP walk or discovery of a table, not one OID: here each row is an item (`indices`, or a template's `discovery` rule; `import-template` makes them of a Zabbix template)"
            );
        }
        if let Some(at) = text.find("{$") {
            let end = text[at..].find('}').map_or(text.len(), |e| at + e + 1);
            return format!(
                "{text:?} holds the Zabbix user macro {}: netpoller resolves no macros; write its value (`import-template` resolves a template's own)",
                &text[at..end]
            );
        }
        // snmpwalk's default output (`iso.3.6.1.2.1.1.1.0 = STRING: ...`), pasted: its
        // first arc named, the rest numbers, and the number meant plain.
        let meant = name.strip_prefix("iso.").map(|rest| format!("1.{rest}"));
        if let Some(meant) = meant.filter(|m| m.parse::<snmp::Oid>().is_ok()) {
            return format!(
                "{text:?} is {meant} as net-snmp prints it (iso is 1; netpoller reads no MIBs): write {meant}"
            );
        }
        match name.starts_with(|c: char| c.is_ascii_alphabetic()) {
            true => format!(
                "{text:?} is a name, not a numeric OID like {like}: netpoller reads no MIBs (`snmptranslate -On {name}` gives the number)"
            ),
            false => format!("{text:?} is not a numeric OID like {like}: {e}"),
        }
    })
}

/// The loaded, validated configuration.
#[derive(Debug)]
pub struct Config {
    pub path: Option<PathBuf>,
    /// A directory config's files, in the order they were read ([`read_config`]);
    /// none for a file.
    pub files: Vec<Arc<str>>,
    pub daemon: DaemonSection,
    pub clickhouse: Option<sink::ClickHouseConfig>,
    pub icmp: IcmpSection,
    pub snmp: SnmpSection,
    /// Every host of the file, resolved (before `--shard` selection).
    pub hosts: Vec<HostSpec>,
    /// The hosts whose items stand for discovered rows (before `--shard` selection).
    pub discovery: Vec<DiscoveryTarget>,
    /// What the file may well not mean but is valid (`check-config` prints them): a
    /// `[[host_ranges]]` entry inside or overlapping another's, whose addresses each
    /// range polls, a
    /// `[[hosts]]` address inside one, a host or range that polls nothing.
    pub warnings: Vec<ConfigError>,
}

/// One problem in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Key path, e.g. `hosts[2].ip`.
    pub path: String,
    /// 1-based line of that key, when known (in `file`, when one is named).
    pub line: Option<usize>,
    /// The file of a directory config that the line is of ([`read_config`]).
    pub file: Option<Arc<str>>,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.file, self.line) {
            (Some(file), Some(l)) => write!(f, "{file}, line {l}: ")?,
            (None, Some(l)) => write!(f, "line {l}: ")?,
            (Some(file), None) => write!(f, "{file}: ")?,
            (None, None) => {}
        }
        match self.path.is_empty() {
            false => write!(f, "{}: {}", self.path, self.message),
            true => f.write_str(&self.message),
        }
    }
}

/// All problems of a file.
#[derive(Debug)]
pub struct ConfigErrors {
    pub source: String,
    pub errors: Vec<ConfigError>,
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}: {} error(s)", self.source, self.errors.len())?;
        for e in &self.errors {
            writeln!(f, "  {e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// Read and validate a config file (or directory: [`read_config`]).
pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
    load_found(path, &Found::default()).map(|(c, _)| c)
}

/// [`load`] with the rows discovery has `found`; also returns the file's text (the
/// daemon re-plans from it when discovery finds other rows).
pub fn load_found(path: &Path, found: &Found) -> Result<(Config, Arc<str>), ConfigErrors> {
    let text = read_config(path)?;
    let cfg = parse_text(path, &text, found)?;
    Ok((cfg, text.into()))
}

/// The line that begins each file of a directory config in its text: what places an
/// error's line in its file ([`file_starts`]). A comment, for TOML.
const FILE_MARK: &str = "#netpoller: file ";

/// The text of the config at `path`: a file's, or a directory's, whose `*.toml` files
/// (not hidden ones, not in folders under it) are read in the order of their names
/// as one file, as `conf.d` folders are: a file per site or team, dropped in by
/// configuration management. Each file is checked on its own first, so that its
/// errors of TOML syntax are said at its own lines, and every file but the first must
/// begin with a table header: its keys would otherwise be read under the last header
/// of the file before it.
pub fn read_config(path: &Path) -> Result<String, ConfigErrors> {
    let fail = |file: Option<&str>, line: Option<usize>, message: String| ConfigErrors {
        source: path.display().to_string(),
        errors: vec![ConfigError {
            path: String::new(),
            line,
            file: file.map(Into::into),
            message,
        }],
    };
    let read = |p: &Path| std::fs::read_to_string(p).map_err(|e| format!("cannot read: {e}"));
    if !path.is_dir() {
        return read(path).map_err(|e| fail(None, None, e));
    }
    let entries =
        std::fs::read_dir(path).map_err(|e| fail(None, None, format!("cannot read: {e}")))?;
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.ends_with(".toml") && !n.starts_with('.') && path.join(n).is_file())
        .collect();
    names.sort();
    if names.is_empty() {
        return Err(fail(
            None,
            None,
            "no *.toml file in this directory (a directory config is its *.toml files, read in the order of their names as one file)".into(),
        ));
    }
    let mut text = String::new();
    for (k, name) in names.iter().enumerate() {
        let body = read(&path.join(name)).map_err(|e| fail(Some(name), None, e))?;
        let body = crate::cmd::without_bom(&body);
        if let Err(e) = body.parse::<toml::Table>() {
            let line = e
                .span()
                .map(|s| body[..s.start.min(body.len())].matches('\n').count() + 1);
            return Err(fail(Some(name), line, e.message().to_string()));
        }
        let first = body
            .lines()
            .enumerate()
            .map(|(n, l)| (n + 1, l.trim()))
            .find(|(_, l)| !l.is_empty() && !l.starts_with('#'));
        if let Some((line, l)) = first.filter(|(_, l)| k > 0 && !l.starts_with('[')) {
            return Err(fail(
                Some(name),
                Some(line),
                format!(
                    "{l:?} comes before any table header: in a directory, each file but the first begins with one ([daemon], [[hosts]], ...), or its keys would be read under the last header of {}",
                    names[k - 1]
                ),
            ));
        }
        text.push_str(FILE_MARK);
        text.push_str(name);
        text.push('\n');
        text.push_str(body);
        if !body.ends_with('\n') {
            text.push('\n');
        }
    }
    Ok(text)
}

/// Where each file of a directory config's text begins: the line of its
/// [`FILE_MARK`] and its name, in order; none for a file's text (which does not begin
/// with one).
fn file_starts(text: &str) -> Vec<(usize, Arc<str>)> {
    if !text.starts_with(FILE_MARK) {
        return Vec::new();
    }
    text.lines()
        .enumerate()
        .filter_map(|(n, l)| Some((n + 1, l.strip_prefix(FILE_MARK)?.into())))
        .collect()
}

/// `line` of a config's text as the file it is in and its line there.
fn place(starts: &[(usize, Arc<str>)], line: usize) -> (Option<Arc<str>>, usize) {
    match starts.iter().rev().find(|(at, _)| *at < line) {
        Some((at, file)) => (Some(file.clone()), line - at),
        None => (None, line),
    }
}

/// Parses the `text` read from `path` (named in errors).
pub fn parse_text(path: &Path, text: &str, found: &Found) -> Result<Config, ConfigErrors> {
    let mut cfg = parse_found(text, found).map_err(|errors| ConfigErrors {
        source: path.display().to_string(),
        errors,
    })?;
    cfg.path = Some(path.to_path_buf());
    Ok(cfg)
}

/// Maps key paths to lines using the spans of a second, span-keeping parse.
struct Locator<'a> {
    text: &'a str,
    root: Option<toml::Spanned<toml::de::DeTable<'a>>>,
    /// A directory config's files ([`file_starts`]).
    files: Vec<(usize, Arc<str>)>,
}

#[derive(Debug, Clone)]
enum Seg<'s> {
    Key(&'s str),
    Index(usize),
}

/// `path` followed by `more`.
fn under<'s>(path: &[Seg<'s>], more: impl IntoIterator<Item = Seg<'s>>) -> Vec<Seg<'s>> {
    let mut p = path.to_vec();
    p.extend(more);
    p
}

impl<'a> Locator<'a> {
    fn new(text: &'a str) -> Self {
        Locator {
            text,
            root: toml::de::DeTable::parse(text).ok(),
            files: file_starts(text),
        }
    }

    fn line_of_offset(&self, off: usize) -> usize {
        self.text[..off.min(self.text.len())]
            .bytes()
            .filter(|&b| b == b'\n')
            .count()
            + 1
    }

    /// Line of the deepest existing prefix of `path`.
    fn line(&self, path: &[Seg<'_>]) -> Option<usize> {
        use toml::de::DeValue;
        let root = self.root.as_ref()?;
        let mut table = root.get_ref();
        let mut best = None;
        let mut value: Option<&toml::Spanned<DeValue<'_>>> = None;
        for seg in path {
            let next = match (seg, value.map(|v| v.get_ref())) {
                (Seg::Key(k), None) => table
                    .iter()
                    .find(|(kk, _)| kk.get_ref() == k)
                    .map(|(kk, v)| (kk.span(), v)),
                (Seg::Key(k), Some(DeValue::Table(t))) => {
                    table = t;
                    table
                        .iter()
                        .find(|(kk, _)| kk.get_ref() == k)
                        .map(|(kk, v)| (kk.span(), v))
                }
                (Seg::Index(i), Some(DeValue::Array(a))) => a.get(*i).map(|v| (v.span(), v)),
                _ => None,
            };
            let Some((span, v)) = next else { break };
            best = Some(self.line_of_offset(span.start));
            value = Some(v);
        }
        best
    }
}

struct Collector<'a> {
    loc: Locator<'a>,
    errors: Vec<ConfigError>,
    /// What loads but is likely not meant ([`Config::warnings`]).
    warnings: Vec<ConfigError>,
}

impl Collector<'_> {
    fn push(&mut self, path: &[Seg<'_>], message: impl Into<String>) {
        let e = self.at(path, message);
        self.errors.push(e);
    }

    fn warn(&mut self, path: &[Seg<'_>], message: impl Into<String>) {
        let e = self.at(path, message);
        self.warnings.push(e);
    }

    fn at(&self, path: &[Seg<'_>], message: impl Into<String>) -> ConfigError {
        ConfigError {
            path: render_path(path),
            line: self.loc.line(path),
            file: None,
            message: message.into(),
        }
    }

    /// Deserialize one piece on its own, recording its errors instead of stopping.
    ///
    /// serde stops at a piece's first refused value; so that one `check-config` shows
    /// every refused value, the refused key or array element is taken out and the
    /// piece read again (at most [`MAX_ERRORS_PER_PIECE`] times). Paths of later
    /// errors are mapped back past the elements taken out, so they keep the file's
    /// indices. A `missing field` error naming a key taken out is the removal's echo,
    /// not the file's: it ends the search.
    fn de<T: serde::de::DeserializeOwned>(
        &mut self,
        path: &[Seg<'_>],
        v: toml::Value,
    ) -> Option<T> {
        self.de_rest(path, v)
            .filter(|(_, whole)| *whole)
            .map(|(t, _)| t)
    }

    /// [`Self::de`], and the piece as read without what it refused (`false`: something
    /// was taken out): for a section whose every key has a valid default, the checks of
    /// the keys it did read then run too, and report what they find in the same run.
    fn de_section<T: serde::de::DeserializeOwned + Default>(
        &mut self,
        path: &[Seg<'_>],
        v: toml::Value,
    ) -> T {
        self.de_rest(path, v).map(|(t, _)| t).unwrap_or_default()
    }

    fn de_rest<T: serde::de::DeserializeOwned>(
        &mut self,
        path: &[Seg<'_>],
        mut v: toml::Value,
    ) -> Option<(T, bool)> {
        let mut taken: Vec<Taken> = Vec::new();
        for round in 0..=MAX_ERRORS_PER_PIECE {
            // The deserializer takes its value; the copy is what is read again.
            let e = match serde_path_to_error::deserialize::<_, T>(v.clone()) {
                Ok(t) => return Some((t, taken.is_empty())),
                Err(e) => e,
            };
            if round == MAX_ERRORS_PER_PIECE {
                self.push(
                    path,
                    format!(
                        "more refused values not listed (at most {MAX_ERRORS_PER_PIECE} of one \
                         piece): fix these and check again"
                    ),
                );
                return None;
            }
            let message = e.inner().message().to_string();
            if taken
                .iter()
                .any(|t| matches!(t, Taken::Key(k) if message == format!("missing field `{k}`")))
            {
                return None;
            }
            let mut at: Vec<Seg<'_>> = e
                .path()
                .iter()
                .filter_map(|seg| match seg {
                    serde_path_to_error::Segment::Map { key } => Some(Seg::Key(key)),
                    serde_path_to_error::Segment::Seq { index } => Some(Seg::Index(*index)),
                    _ => None,
                })
                .collect();
            let took = take_out(&mut v, &at);
            // Where inside the piece the value was refused (`daemon.icmp_phases` on its
            // own line, not `daemon` at the section's header), as the file numbers it.
            for t in taken.iter().rev() {
                if let Taken::Element(array, len, k) = t {
                    if let Some(&Seg::Index(i)) = at.get(*len) {
                        if i >= *k && render_path(&at[..*len]) == *array {
                            at[*len] = Seg::Index(i + 1);
                        }
                    }
                }
            }
            let message = match unknown_key_hint(&message) {
                Some((key, hint, rest)) => format!("unknown field `{key}` ({hint}){rest}"),
                None if matches!(at.last(), Some(Seg::Key(k)) if SECRET_KEYS.contains(k)) => {
                    secret_refused(&message)
                }
                // `snmp = "s3cret"`: a community written as the table itself. Its value
                // is a secret, and serde's "struct SnmpOverride" no word of the file.
                None if matches!(at.last(), Some(Seg::Key("snmp"))) => secret_refused(&message)
                    .replace(
                        "expected struct SnmpOverride",
                        "expected a table of SNMP settings: write snmp = { community = \"...\" }",
                    ),
                None => list_hint(variant_hint(message)),
            };
            self.push(&under(path, at), message);
            match took {
                Some(t) => taken.push(t),
                None => return None,
            }
        }
        None
    }
}

/// serde's message about one string where a list is wanted (`templates = "if-mib"`),
/// with the list to write, about one table where a list of them is (`items = { ... }`),
/// about a whole number where a string is (`shard = 4`, `name = 101`), with the
/// string, and about a number in quotes where a number is (`port = "161"`), without
/// them; any other message as it is.
fn list_hint(message: String) -> String {
    let one = message
        .strip_prefix("invalid type: string ")
        .and_then(|m| m.strip_suffix(", expected a sequence"));
    let number = message
        .strip_prefix("invalid type: integer `")
        .and_then(|m| m.strip_suffix("`, expected a string"));
    let quoted = (message.strip_prefix("invalid type: string \""))
        .and_then(|m| m.split_once("\", expected "))
        .filter(|(n, ty)| NUMBER_TYPES.contains(ty) && n.trim().parse::<f64>().is_ok())
        .map(|(n, _)| n.trim().to_string());
    match (one, number, quoted) {
        (Some(value), _, _) => format!("{message}: write a list, [{value}]"),
        (_, Some(n), _) => format!("{message}: write it quoted, \"{n}\""),
        (_, _, Some(n)) => format!("{message}: write the number unquoted, {n}"),
        // One inline table where a list of them is wanted (`items = { key = ... }`).
        _ if message == "invalid type: map, expected a sequence" => {
            format!("{message}: write a list of tables, [{{ ... }}], around it")
        }
        _ => message,
    }
}

/// The number types serde names as the one a value was expected to be (`expected u16`).
const NUMBER_TYPES: &[&str] = &[
    "u8", "u16", "u32", "u64", "usize", "i32", "i64", "f32", "f64",
];

/// Keys whose values are secrets: a message about one never shows its value.
const SECRET_KEYS: &[&str] = &[
    "community",
    "auth_passphrase",
    "priv_passphrase",
    "password",
];

/// serde's message about a refused secret without the value it quotes (a passphrase
/// or community written as a TOML number: "invalid type: integer `12345678`, expected a
/// string" would print it to the terminal and, at a reload, to the journal).
fn secret_refused(message: &str) -> String {
    let (what, expected) = message
        .rsplit_once(", expected ")
        .map_or((message, String::new()), |(w, e)| {
            (w, format!(", expected {e}"))
        });
    // serde quotes the value (`8675309`, "text"): what comes before is its type.
    let what = what.split(['`', '"']).next().unwrap_or_default().trim_end();
    format!("{what} (the value of a secret is not shown){expected}")
}

/// Keys other tools name otherwise, the one place an unknown key's name here is looked
/// up: (their name, ours, whose name it is). Zabbix's item `delay`, `value_type`,
/// `snmp_oid`, a host's `host` (its technical name), a preprocessing step's `params`
/// (as the API calls it) and its SNMP interface's fields; net-snmp's and
/// snmp_exporter's SNMPv3 ones (`-u` user, `-l` level; `username`, `password`,
/// `priv_password`); a row applies where its name here is a key of the table.
const OTHER_NAMES: &[(&str, &str, &str)] = &[
    ("delay", "interval", "Zabbix's"),
    ("value_type", "type", "Zabbix's"),
    ("snmp_oid", "oid", "Zabbix's"),
    ("host", "name", "Zabbix's"),
    ("hostname", "name", ""),
    ("address", "ip", ""),
    ("ip_address", "ip", ""),
    ("dns", "ip", "Zabbix's"),
    ("params", "parameters", "Zabbix's"),
    ("snmp_community", "community", "Zabbix's"),
    ("community_string", "community", ""),
    ("snmp_version", "version", ""),
    ("snmpv3_securityname", "security_name", "Zabbix's"),
    ("snmpv3_securitylevel", "security_level", "Zabbix's"),
    ("snmpv3_authprotocol", "auth_protocol", "Zabbix's"),
    ("snmpv3_authpassphrase", "auth_passphrase", "Zabbix's"),
    ("snmpv3_privprotocol", "priv_protocol", "Zabbix's"),
    ("snmpv3_privpassphrase", "priv_passphrase", "Zabbix's"),
    ("snmpv3_contextname", "context_name", "Zabbix's"),
    ("user", "security_name", "the SNMPv3"),
    ("username", "security_name", "snmp_exporter's"),
    ("level", "security_level", "the SNMPv3"),
    ("password", "auth_passphrase", "snmp_exporter's"),
    ("auth_password", "auth_passphrase", ""),
    ("auth_pass", "auth_passphrase", ""),
    ("priv_password", "priv_passphrase", "snmp_exporter's"),
    ("priv_pass", "priv_passphrase", ""),
    ("context", "context_name", ""),
    ("username", "user", ""),
];

/// For serde's "unknown field `k`, expected …": `k`, a hint (the name another tool's
/// `k` has here, or the expected key `k` is a typo of) and the rest of the message.
fn unknown_key_hint(message: &str) -> Option<(&str, String, &str)> {
    let (key, rest) = message.strip_prefix("unknown field `")?.split_once('`')?;
    let expected: Vec<&str> = backquoted(rest).collect();
    // A host's or range's SNMP setting written beside `snmp` instead of in it.
    let beside_snmp = |k: &str| snmp_keys().contains(&k) && expected.contains(&"snmp");
    let in_snmp = |k: &str| format!("an SNMP setting: write it in `snmp = {{ {k} = ... }}`");
    // Another tool's name of a key of this table or, in a host or range, of its `snmp`.
    for (_, ours, whose) in OTHER_NAMES.iter().filter(|(o, _, _)| *o == key) {
        let name = other_name(whose, key, ours);
        if expected.contains(ours) {
            return Some((key, name, rest));
        }
        if beside_snmp(ours) {
            return Some((key, format!("{name}, {}", in_snmp(ours)), rest));
        }
    }
    if beside_snmp(key) {
        return Some((key, in_snmp(key), rest));
    }
    // A key of another table (`timeout` in `[daemon]`, an item's `interval` beside a
    // host's name): where it goes, before a typo of this table's that it is not; a
    // typo of another table's key after one of this table's.
    let other = elsewhere(key, &expected);
    if let Some((_, places)) = other.as_ref().filter(|(k, _)| *k == key) {
        return Some((key, format!("{places}, not of this table"), rest));
    }
    if let Some(close) = closest(key, expected.iter().copied()) {
        return Some((key, format!("did you mean `{close}`?"), rest));
    }
    let (close, places) = other?;
    Some((
        key,
        format!("did you mean `{close}`? {places}, not of this table"),
        rest,
    ))
}

/// The tables of a file, as a message names them, with the keys each takes (as serde
/// reads them: a new field is named without a list to keep).
fn key_places() -> [(&'static str, &'static [&'static str]); 12] {
    [
        ("`[daemon]`", field_names::<DaemonSection>()),
        ("`[clickhouse]`", field_names::<sink::ClickHouseConfig>()),
        ("`[icmp]`", field_names::<IcmpSection>()),
        ("`[snmp]`", field_names::<SnmpSection>()),
        ("a host's `snmp = { ... }`", snmp_keys()),
        ("`[[templates]]`", field_names::<TemplateEntry>()),
        ("`[[hosts]]`", field_names::<HostEntry>()),
        ("`[[host_ranges]]`", field_names::<HostRangeEntry>()),
        ("an item (`items = [{ ... }]`)", field_names::<ItemEntry>()),
        ("a preprocessing step", field_names::<PreprocessingEntry>()),
        (
            "a discovery rule (`discovery = [{ ... }]`)",
            field_names::<DiscoveryEntry>(),
        ),
        ("a discovery filter", field_names::<FilterEntry>()),
    ]
}

/// For `key`, unknown in the table whose keys are `expected`: the key of another table
/// it is (or, when none has it, is a typo of), and a hint naming the tables that have
/// it (``a key of `[icmp]` and `[snmp]` ``).
fn elsewhere(key: &str, expected: &[&str]) -> Option<(&'static str, String)> {
    let others: Vec<(&str, &[&str])> = key_places()
        .into_iter()
        .filter(|(_, keys)| !keys.is_empty() && *keys != expected)
        .collect();
    let all = || others.iter().flat_map(|(_, keys)| keys.iter().copied());
    let found = all().find(|k| *k == key).or_else(|| closest(key, all()))?;
    let places: Vec<&str> = others
        .iter()
        .filter(|(_, keys)| keys.contains(&found))
        .map(|(place, _)| *place)
        .collect();
    let listed = match places.split_last() {
        Some((last, [])) => (*last).to_string(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => return None,
    };
    Some((found, format!("a key of {listed}")))
}

/// The keys of a host's `snmp = { ... }` table: [`SnmpOverride`]'s fields as serde
/// reads them, so that a new field is named by the hint without a list to keep.
fn snmp_keys() -> &'static [&'static str] {
    field_names::<SnmpOverride>()
}

/// The keys a struct's derived `Deserialize` accepts (`rename`d names, and `alias`es):
/// the `fields` it hands to [`serde::Deserializer::deserialize_struct`], which
/// [`FieldNames`] returns as its error instead of reading anything. Empty for any other
/// shape (a `flatten`ed field makes serde read a map, whose keys it does not list).
/// A call costs no allocation: the list is the derive's static `FIELDS`.
fn field_names<T: for<'de> Deserialize<'de>>() -> &'static [&'static str] {
    match T::deserialize(FieldNames) {
        Err(FieldNamesOf(fields)) => fields,
        Ok(_) => &[],
    }
}

/// A deserializer that reads nothing: it fails, with the field names when asked for a
/// struct ([`field_names`]).
struct FieldNames;

/// [`FieldNames`]'s error: the field names it was given, or none.
#[derive(Debug)]
struct FieldNamesOf(&'static [&'static str]);

impl fmt::Display for FieldNamesOf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "fields {:?}", self.0)
    }
}

impl std::error::Error for FieldNamesOf {}

impl serde::de::Error for FieldNamesOf {
    fn custom<M: fmt::Display>(_: M) -> Self {
        FieldNamesOf(&[])
    }
}

impl<'de> serde::Deserializer<'de> for FieldNames {
    type Error = FieldNamesOf;

    fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, FieldNamesOf> {
        Err(FieldNamesOf(&[]))
    }

    fn deserialize_struct<V: serde::de::Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, FieldNamesOf> {
        Err(FieldNamesOf(fields))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
        byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
        identifier ignored_any
    }
}

/// The file of process share `(i, n)` for `f`: `f` itself for a single process, else
/// `NAME.shard-I-of-N.EXT` beside it.
fn share_file(f: &std::path::Path, (i, n): (u32, u32)) -> PathBuf {
    if n == 1 {
        return f.to_path_buf();
    }
    let stem = f.file_stem().unwrap_or_default().to_string_lossy();
    let name = match f.extension() {
        Some(ext) => format!("{stem}.shard-{i}-of-{n}.{}", ext.to_string_lossy()),
        None => format!("{stem}.shard-{i}-of-{n}"),
    };
    f.with_file_name(name)
}

/// The one of `expected` that `key` is a typo of (at most one edit per three letters).
fn closest<'a>(key: &str, expected: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    expected
        .map(|e| (strsim::osa_distance(key, e), e))
        .filter(|(d, _)| *d <= (key.chars().count() / 3).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, e)| e)
}

/// A parser's `refusal` of `value` or, when `value` is a typo ([`closest`], in any
/// case) of a spelling the parser takes, `unknown`'s message naming the one meant:
/// `names` pairs each spelling with the name to tell for it (`("sha-256",
/// "SHA-256")`). A spelling it takes, refused for another reason (a handler without
/// its parameter), keeps its refusal; so does a value close to none, or close only to
/// names of another thing ([`names_another`]).
fn refused_or_meant<'n>(
    refusal: String,
    value: &str,
    names: impl IntoIterator<Item = (&'n str, &'n str)>,
    unknown: impl FnOnce(&str, Option<&str>) -> String,
) -> String {
    let names: Vec<(String, &str)> = (names.into_iter())
        .map(|(s, n)| (s.to_ascii_lowercase(), n))
        .collect();
    let lower = value.to_ascii_lowercase();
    let near = closest(
        &lower,
        (names.iter().map(|(s, _)| s.as_str())).filter(|s| !names_another(&lower, s)),
    )
    .filter(|n| *n != lower);
    match near.and_then(|near| names.iter().find(|(s, _)| s == near)) {
        Some((_, meant)) => unknown(value, Some(meant)),
        None => refusal,
    }
}

/// Whether `value` and `name` (both in lower case), a few letters apart, name different
/// things: their digits differ (`sha3` is not `sha`, `3des` not `des`, `md4` not `md5`;
/// `sha265` is a typo of `sha256`) or one says "no" once more (`nopriv` is not `priv`).
/// A hint across these would point the engineer at the opposite of what was meant.
fn names_another(value: &str, name: &str) -> bool {
    let digits = |s: &str| {
        let mut d: Vec<char> = s.chars().filter(char::is_ascii_digit).collect();
        d.sort_unstable();
        d
    };
    digits(value) != digits(name) || value.matches("no").count() != name.matches("no").count()
}

/// Values other tools name otherwise, of the settings serde reads as a few names: an
/// item's `type` in Zabbix's words (`value_type: UNSIGNED`, `TEXT`, ...) and a
/// programmer's. (their name in lower case, ours, whose name it is), as
/// [`OTHER_NAMES`] has keys.
const OTHER_VALUES: &[(&str, &str, &str)] = &[
    ("unsigned", "uint", "Zabbix's"),
    ("char", "str", "Zabbix's"),
    ("character", "str", "Zabbix's"),
    ("text", "str", "Zabbix's"),
    ("log", "str", "Zabbix's"),
    ("string", "str", ""),
    ("integer", "uint", ""),
    ("u64", "uint", ""),
    ("double", "float", ""),
];

/// serde's "unknown variant `x`, expected ..." (an item's `type`, `icmp_phases`), with
/// the name another tool's `x` has here ([`OTHER_VALUES`]) or the variant `x` is a
/// typo of (in any case) after it; any other message as it is.
fn variant_hint(message: String) -> String {
    let Some((value, rest)) =
        (message.strip_prefix("unknown variant `")).and_then(|m| m.split_once('`'))
    else {
        return message;
    };
    let lower = value.to_ascii_lowercase();
    let expected: Vec<&str> = backquoted(rest).collect();
    let other = (OTHER_VALUES.iter()).find(|(o, ours, _)| *o == lower && expected.contains(ours));
    let hint = match (other, closest(&lower, expected.iter().copied())) {
        (Some((_, ours, whose)), _) => other_name(whose, value, ours),
        (None, Some(m)) => format!("did you mean `{m}`?"),
        (None, None) => return message,
    };
    format!("unknown variant `{value}` ({hint}){rest}")
}

/// The hint for another tool's name of a key or value (a row of [`OTHER_NAMES`] or
/// [`OTHER_VALUES`]): "Zabbix's `delay` is `interval` here", or without `whose` (empty
/// for a name several tools use) "`address` is `ip` here".
fn other_name(whose: &str, theirs: &str, ours: &str) -> String {
    match whose {
        "" => format!("`{theirs}` is `{ours}` here"),
        whose => format!("{whose} `{theirs}` is `{ours}` here"),
    }
}

/// The names a serde message lists, each between backquotes (", expected one of `a`,
/// `b`" or ", expected `a` or `b`"): every other piece.
fn backquoted(text: &str) -> impl Iterator<Item = &str> {
    text.split('`').skip(1).step_by(2)
}

/// Templates an unknown template's message lists: an imported file defines hundreds
/// (one per Zabbix discovery rule), and a line of them all hides the one meant.
const LISTED_TEMPLATES: usize = 10;

/// The message for a host's or range's template `name` that no `[[templates]]` defines:
/// the defined name it is a typo of, if one is, and the names defined (`known`, sorted;
/// the first [`LISTED_TEMPLATES`] of them).
fn unknown_template(name: &str, known: &[&str]) -> String {
    let hint = closest(name, known.iter().copied())
        .map(|c| format!(": did you mean {c:?}?"))
        .unwrap_or_default();
    let shown = &known[..known.len().min(LISTED_TEMPLATES)];
    let more = match known.len() - shown.len() {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    format!("unknown template {name:?}{hint} (defined: {shown:?}{more})")
}

/// The `[[hosts]]` entries inside a range that a warning names each (the others are
/// counted): [`Resolver::hosts_in_ranges`].
const LISTED_HOSTS_IN_RANGES: usize = 10;

/// The engines a host polls with ([`Resolver::hosts_in_ranges`]): ICMP, SNMP.
#[derive(Debug, Clone, Copy, Default)]
struct Engines {
    icmp: bool,
    snmp: bool,
}

impl Engines {
    fn of(h: &HostSpec) -> Engines {
        Engines {
            icmp: h
                .items
                .iter()
                .any(|i| matches!(i.kind, ItemKind::Icmp { .. })),
            snmp: h.snmp.is_some(),
        }
    }

    /// Their names, as a warning says them; `None` for none.
    fn named(self) -> Option<&'static str> {
        match (self.icmp, self.snmp) {
            (true, true) => Some("ICMP and SNMP"),
            (true, false) => Some("ICMP"),
            (false, true) => Some("SNMP"),
            (false, false) => None,
        }
    }
}

impl std::ops::BitAnd for Engines {
    type Output = Engines;
    fn bitand(self, o: Engines) -> Engines {
        Engines {
            icmp: self.icmp && o.icmp,
            snmp: self.snmp && o.snmp,
        }
    }
}

impl std::ops::BitOrAssign for Engines {
    fn bitor_assign(&mut self, o: Engines) {
        self.icmp |= o.icmp;
        self.snmp |= o.snmp;
    }
}

/// `host_ranges[i].cidr` or `host_ranges[i].range`: the key that gave range `i` its
/// addresses `sp`.
fn range_key(i: usize, sp: Span) -> [Seg<'static>; 3] {
    [Seg::Key("host_ranges"), Seg::Index(i), Seg::Key(sp.key())]
}

/// Where [`derive_itemid`]'s range starts: explicit itemids stay below it.
const DERIVED_ITEMIDS: u64 = 1 << 62;

/// How many refused values of one piece (a section, a template, a host) are reported.
const MAX_ERRORS_PER_PIECE: usize = 32;

/// What [`Collector::de`] took out of a piece to read the rest.
enum Taken {
    /// A key of a table.
    Key(String),
    /// The element at an index of an array: the array's path ([`render_path`]) and
    /// length in segments, and the index (as the piece then numbered it).
    Element(String, usize, usize),
}

/// Removes the value at `path` (a key of a table or an element of an array) from `v`;
/// what was removed, or `None` when `path` names nothing removable in `v`.
fn take_out(v: &mut toml::Value, path: &[Seg<'_>]) -> Option<Taken> {
    let (last, parent) = path.split_last()?;
    let mut at = v;
    for seg in parent {
        at = match (seg, at) {
            (Seg::Key(k), toml::Value::Table(t)) => t.get_mut(*k)?,
            (Seg::Index(i), toml::Value::Array(a)) => a.get_mut(*i)?,
            _ => return None,
        };
    }
    match (last, at) {
        (Seg::Key(k), toml::Value::Table(t)) => t.remove(*k).map(|_| Taken::Key(k.to_string())),
        (Seg::Index(i), toml::Value::Array(a)) if *i < a.len() => {
            a.remove(*i);
            Some(Taken::Element(render_path(parent), parent.len(), *i))
        }
        _ => None,
    }
}

fn render_path(path: &[Seg<'_>]) -> String {
    let mut s = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(k);
            }
            Seg::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

const SECTIONS: &[&str] = &[
    "daemon",
    "clickhouse",
    "icmp",
    "snmp",
    "templates",
    "hosts",
    "host_ranges",
];

/// Parse and validate config text; on failure, every problem found. Items of
/// discovery rules have no rows (see [`parse_found`]).
pub fn parse(text: &str) -> Result<Config, Vec<ConfigError>> {
    parse_found(text, &Found::default())
}

/// [`parse`], with the rows discovery has `found` for the items of discovery rules.
pub fn parse_found(text: &str, found: &Found) -> Result<Config, Vec<ConfigError>> {
    let mut table: toml::Table = match text.parse() {
        Ok(t) => t,
        Err(e) => {
            let e: toml::de::Error = e;
            let line = e
                .span()
                .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
            let mut message = e.message().to_string();
            // Each file of a directory read on its own first: a duplicate now is
            // another file's.
            if message.starts_with("duplicate key") && text.starts_with(FILE_MARK) {
                message.push_str(": a file before this one gives it too (a [table] is written in one file; [[hosts]] and the other arrays of tables may be in several)");
            }
            let error = ConfigError {
                path: String::new(),
                line,
                file: None,
                message,
            };
            return Err(in_files(&file_starts(text), vec![error]));
        }
    };
    let mut c = Collector {
        loc: Locator::new(text),
        errors: Vec::new(),
        warnings: Vec::new(),
    };
    for k in table.keys() {
        if !SECTIONS.contains(&k.as_str()) {
            // A key written above every table header (meant for `[daemon]`, say) is
            // read as a section of its own: named where it goes.
            let hint = match closest(k, SECTIONS.iter().copied()) {
                Some(s) => format!(" (did you mean `{s}`?)"),
                None => match elsewhere(k, &[]) {
                    Some((found, places)) if found == k.as_str() => {
                        format!(" ({places}: write it under its table's header)")
                    }
                    Some((found, places)) => format!(
                        " (did you mean `{found}`? {places}: write it under its table's header)"
                    ),
                    None => String::new(),
                },
            };
            c.push(
                &[Seg::Key(k)],
                format!(
                    "unknown section `{k}`{hint}, expected one of: {}",
                    SECTIONS.join(", ")
                ),
            );
        }
    }
    let mut section = |c: &mut Collector<'_>, name: &'static str| -> Option<toml::Value> {
        let v = table.remove(name)?;
        let _ = c;
        Some(v)
    };
    let daemon: DaemonSection = match section(&mut c, "daemon") {
        Some(v) => c.de_section(&[Seg::Key("daemon")], v),
        None => DaemonSection::default(),
    };
    let clickhouse: Option<sink::ClickHouseConfig> = match section(&mut c, "clickhouse") {
        Some(v) => c.de(&[Seg::Key("clickhouse")], v),
        None => None,
    };
    let icmp: IcmpSection = match section(&mut c, "icmp") {
        Some(v) => c.de_section(&[Seg::Key("icmp")], v),
        None => IcmpSection::default(),
    };
    let snmp: SnmpSection = match section(&mut c, "snmp") {
        Some(v) => c.de_section(&[Seg::Key("snmp")], v),
        None => SnmpSection::default(),
    };
    let list = |c: &mut Collector<'_>,
                v: Option<toml::Value>,
                name: &'static str|
     -> Vec<(usize, toml::Value)> {
        match v {
            None => Vec::new(),
            Some(toml::Value::Array(a)) => a.into_iter().enumerate().collect(),
            Some(_) => {
                c.push(
                    &[Seg::Key(name)],
                    format!("`{name}` must be an array of tables ([[{name}]])"),
                );
                Vec::new()
            }
        }
    };
    let t = section(&mut c, "templates");
    let templates_raw = list(&mut c, t, "templates");
    let h = section(&mut c, "hosts");
    let hosts_raw = list(&mut c, h, "hosts");
    let r = section(&mut c, "host_ranges");
    let ranges_raw = list(&mut c, r, "host_ranges");

    check_daemon(&mut c, &daemon);
    if let Some(ch) = &clickhouse {
        for (field, msg) in ch.validate() {
            c.push(&[Seg::Key("clickhouse"), Seg::Key(field)], msg);
        }
    }
    for (what, msg) in icmp.key_defaults().check() {
        c.push(&[Seg::Key("icmp"), Seg::Key(what)], msg);
    }
    if icmp.max_pps == 0 {
        c.push(
            &[Seg::Key("icmp"), Seg::Key("max_pps")],
            "must be at least 1",
        );
    }
    check_snmp_limits(
        &mut c,
        &[Seg::Key("snmp")],
        SnmpLimits {
            max_oids: Some(snmp.max_oids_per_request),
            max_inflight: Some(snmp.max_inflight_per_host),
            port: Some(snmp.port),
            timeout: Some(snmp.timeout),
            retries: Some(snmp.retries),
        },
    );

    // Names of the templates that could not be read, whose errors are reported there:
    // a host using one is not told the name is unknown as well.
    let mut unreadable: HashSet<String> = HashSet::new();
    let templates: Vec<(usize, TemplateEntry)> = templates_raw
        .into_iter()
        .filter_map(|(i, v)| {
            let name = v.get("name").and_then(|n| n.as_str()).map(str::to_string);
            let t = c.de(&[Seg::Key("templates"), Seg::Index(i)], v);
            if let (None, Some(name)) = (&t, name) {
                unreadable.insert(name);
            }
            t.map(|t| (i, t))
        })
        .collect();
    let hosts: Vec<(usize, HostEntry)> = hosts_raw
        .into_iter()
        .filter_map(|(i, v)| c.de(&[Seg::Key("hosts"), Seg::Index(i)], v).map(|t| (i, t)))
        .collect();
    let ranges: Vec<(usize, HostRangeEntry)> = ranges_raw
        .into_iter()
        .filter_map(|(i, v)| {
            c.de(&[Seg::Key("host_ranges"), Seg::Index(i)], v)
                .map(|t| (i, t))
        })
        .collect();

    let (resolved, mut discovery) =
        Resolver::new(&mut c, &icmp, &snmp, found, unreadable).resolve(&templates, &hosts, &ranges);
    let source = daemon.source_addrs();
    for t in &mut discovery {
        t.source = source;
    }
    if c.errors.is_empty() {
        Ok(Config {
            path: None,
            files: c.loc.files.iter().map(|(_, f)| f.clone()).collect(),
            daemon,
            clickhouse,
            icmp,
            snmp,
            hosts: resolved,
            discovery,
            warnings: in_files(&c.loc.files, c.warnings),
        })
    } else {
        c.errors.sort_by_key(|e| e.line.unwrap_or(usize::MAX));
        Err(in_files(&c.loc.files, c.errors))
    }
}

/// `errors` (at lines of the config's text) placed in the files of a directory config,
/// which begin where `starts` says ([`file_starts`]).
fn in_files(starts: &[(usize, Arc<str>)], mut errors: Vec<ConfigError>) -> Vec<ConfigError> {
    for e in errors.iter_mut().filter(|_| !starts.is_empty()) {
        if let Some(line) = e.line {
            let (file, line) = place(starts, line);
            (e.file, e.line) = (file, Some(line));
        }
    }
    errors
}

fn check_daemon(c: &mut Collector<'_>, d: &DaemonSection) {
    let p = |k: &'static str| [Seg::Key("daemon"), Seg::Key(k)];
    if d.shards == 0 || d.shards > 1024 {
        c.push(&p("shards"), format!("{} is outside 1..1024", d.shards));
    }
    if let Some(s) = &d.shard {
        if let Err(e) = parse_shard(s) {
            c.push(&p("shard"), e);
        }
    }
    if d.batch_window > Duration::from_secs(10) {
        c.push(&p("batch_window"), "must be at most 10s");
    }
    if d.spool_max_bytes == 0 {
        c.push(
            &p("spool_max_bytes"),
            "0 would keep nothing while ClickHouse is down (the default is 1 GiB)",
        );
    }
    if !d.trends_checkpoint.is_zero() && d.trends_checkpoint < Duration::from_secs(1) {
        c.push(&p("trends_checkpoint"), "must be 0s (never) or at least 1s");
    }
    if !d.metrics_listen.is_empty() && d.metrics_listen.parse::<SocketAddr>().is_err() {
        c.push(
            &p("metrics_listen"),
            format!("{:?} is not an IP:port address", d.metrics_listen),
        );
    }
    let mut ips = Vec::new();
    for ip in d.source_ips() {
        match ip {
            Ok(ip) => ips.push(ip),
            Err(s) => c.push(
                &p("source_ip"),
                format!("{s:?} is not an IP address (names are not resolved)"),
            ),
        }
    }
    for wrong in poller::source::SourceAddrs::of(ips)
        .err()
        .into_iter()
        .flatten()
    {
        c.push(&p("source_ip"), wrong);
    }
    for (k, v) in [
        ("channel_capacity", d.channel_capacity),
        ("icmp_batch_hosts", d.icmp_batch_hosts),
        ("snmp_batch_requests", d.snmp_batch_requests),
        ("icmp_concurrent_sweeps", d.icmp_concurrent_sweeps),
        ("snmp_concurrent_iterations", d.snmp_concurrent_iterations),
    ] {
        if v == 0 {
            c.push(&p(k), "must be at least 1");
        }
    }
}

/// An SNMP request's timeout: at least 10 ms (a loopback agent's answer), at most
/// Zabbix 7's longest item timeout, 10 minutes.
const SNMP_TIMEOUT_MIN: Duration = Duration::from_millis(10);
const SNMP_TIMEOUT_MAX: Duration = Duration::from_secs(600);

/// Whether `timeout` may be an SNMP request's (the config's and `snmp -t`'s).
pub fn check_snmp_timeout(timeout: Duration) -> Result<Duration, String> {
    if (SNMP_TIMEOUT_MIN..=SNMP_TIMEOUT_MAX).contains(&timeout) {
        Ok(timeout)
    } else {
        Err(format!(
            "{} is outside 10ms..10m",
            humantime::format_duration(timeout)
        ))
    }
}

/// SNMP settings a section or a host sets (`None`: not set there, checked where it is).
struct SnmpLimits {
    max_oids: Option<usize>,
    max_inflight: Option<usize>,
    port: Option<u16>,
    timeout: Option<Duration>,
    retries: Option<u32>,
}

/// Most re-sends of one request: each costs a whole timeout of a dead host's iteration.
pub const SNMP_RETRIES_MAX: u32 = 10;

/// Why an agent's port may not be 0 (the config's `port` and `snmp` TARGET's).
pub const PORT_ZERO: &str = "UDP port 0 cannot be sent to";

fn check_snmp_limits(c: &mut Collector<'_>, path: &[Seg<'_>], l: SnmpLimits) {
    if let Some(Err(e)) = l.timeout.map(check_snmp_timeout) {
        c.push(&under(path, [Seg::Key("timeout")]), e);
    }
    if l.port == Some(0) {
        c.push(&under(path, [Seg::Key("port")]), PORT_ZERO);
    }
    if let Some(n) = l.max_oids.filter(|n| !(1..=256).contains(n)) {
        let p = under(path, [Seg::Key("max_oids_per_request")]);
        c.push(&p, format!("{n} is outside 1..256"));
    }
    if let Some(n) = l.max_inflight.filter(|n| !(1..=64).contains(n)) {
        let p = under(path, [Seg::Key("max_inflight_per_host")]);
        c.push(&p, format!("{n} is outside 1..64"));
    }
    if let Some(n) = l.retries.filter(|&n| n > SNMP_RETRIES_MAX) {
        let p = under(path, [Seg::Key("retries")]);
        c.push(&p, format!("{n} is outside 0..{SNMP_RETRIES_MAX}"));
    }
}

/// Parse `"i/N"` (0 ≤ i < N).
pub fn parse_shard(s: &str) -> Result<(u32, u32), String> {
    let (i, n) = s
        .split_once('/')
        .ok_or_else(|| format!("{s:?} is not of the form i/N (e.g. 0/2)"))?;
    let i: u32 = i
        .trim()
        .parse()
        .map_err(|_| format!("{s:?}: shard index is not a number"))?;
    let n: u32 = n
        .trim()
        .parse()
        .map_err(|_| format!("{s:?}: shard count is not a number"))?;
    if n == 0 || i >= n {
        return Err(format!("{s:?}: need 0 <= i < N"));
    }
    Ok((i, n))
}

/// The entry a host comes from (for messages). `u32`: one per host at 1 M items.
#[derive(Clone, Copy)]
enum Origin {
    Host(u32),
    Range(u32),
}

impl Origin {
    fn path(self) -> [Seg<'static>; 2] {
        match self {
            Origin::Host(i) => [Seg::Key("hosts"), Seg::Index(i as usize)],
            Origin::Range(i) => [Seg::Key("host_ranges"), Seg::Index(i as usize)],
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&render_path(&self.path()))
    }
}

/// An item after template merge, before per-host resolution.
#[derive(Clone)]
struct ResolvedEntry {
    key: Arc<str>,
    itemid: Option<u64>,
    value_type: ValueType,
    interval: Duration,
    /// With `indices`: the OID without the index, the row's arcs.
    kind: ItemKind,
    pre: Option<Arc<poller::preprocess::Steps>>,
    /// The rows an item with `{#SNMPINDEX}` stands for.
    indices: Option<Rows>,
    /// The rule whose rows on each host give `indices` (then `None` until applied).
    discovery: Option<Arc<DiscoveryRule>>,
}

/// Whether a row of a discovered item of `items` may have the key of another of its
/// items: another key (or key per row) that starts and ends as the row keys do. When
/// none can, rows need no check.
fn may_collide(items: &[ResolvedEntry]) -> bool {
    // A key per row as what comes before and after its index, split once per item
    // (split per pair, with two copies each, a template of 4,000 prototypes took 14 s
    // of a debug build's load per host, and a re-plan as long).
    let split: Vec<Option<(&str, &str)>> =
        items.iter().map(|e| e.key.split_once(SNMPINDEX)).collect();
    // (Pairs are few: a host's items, a handful of them per row.)
    items
        .iter()
        .zip(&split)
        .enumerate()
        .filter(|(_, (e, _))| e.discovery.is_some())
        .any(|(i, (_, ps))| {
            let Some((p, s)) = ps.filter(|(_, s)| !s.contains(SNMPINDEX)) else {
                return true; // the index twice: not worth a rule of its own
            };
            items
                .iter()
                .zip(&split)
                .enumerate()
                .filter(|(j, _)| *j != i)
                .any(|(_, (o, os))| match os {
                    // Two keys per row: the same row key if their parts nest.
                    Some((op, os)) => {
                        (op.starts_with(p) || p.starts_with(op))
                            && (os.ends_with(s) || s.ends_with(os))
                    }
                    None => {
                        o.key.len() > p.len() + s.len()
                            && o.key.starts_with(p)
                            && o.key.ends_with(s)
                    }
                })
        })
}

/// Characters of `key` with each `{#SNMPINDEX}` replaced by a row of `row_len`
/// characters (a row's text is ASCII).
fn row_key_chars(key: &str, row_len: usize) -> usize {
    let n = key.matches(SNMPINDEX).count();
    key.chars().count() - n * SNMPINDEX.len() + n * row_len
}

impl ResolvedEntry {
    /// How many items this entry stands for (a discovered item's rows are counted
    /// when they are applied: none before).
    fn count(&self) -> usize {
        match (&self.indices, &self.discovery) {
            (Some(r), _) => r.len() as usize,
            (None, Some(_)) => 0,
            (None, None) => 1,
        }
    }

    /// The indices of an item per row (none for one item).
    fn rows(&self) -> impl Iterator<Item = Row<'_>> + '_ {
        self.indices.iter().flat_map(|r| r.iter())
    }

    /// The key of row `r`.
    fn row_key(&self, r: Row<'_>) -> Arc<str> {
        self.key.replace(SNMPINDEX, &r.to_string()).into()
    }

    /// The keys of the items this entry stands for.
    fn keys(&self) -> impl Iterator<Item = Arc<str>> + '_ {
        let one = self.indices.is_none().then(|| self.key.clone());
        one.into_iter().chain(self.rows().map(|r| self.row_key(r)))
    }
}

fn polls_snmp(items: &[ResolvedEntry]) -> bool {
    items
        .iter()
        .any(|e| matches!(e.kind, ItemKind::Snmp { .. }))
}

struct Resolver<'c, 'a> {
    c: &'c mut Collector<'a>,
    /// `[icmp]`'s defaults for ICMP keys, within Zabbix's limits: one it refused is
    /// reported there, once, and keys are checked against the built-in one instead.
    icmp: IcmpDefaults,
    snmp: &'c SnmpSection,
    /// Template name → resolved items (keys interned once per template item).
    templates: HashMap<String, Vec<ResolvedEntry>>,
    /// Names of the templates that could not be read (reported at the template).
    unreadable: HashSet<String>,
    /// SNMPv3 users by their fields: a passphrase is hashed into a key (~1 MiB of
    /// hashing) once, not once per host; `None` for fields already reported wrong.
    users: HashMap<UsmSection, Option<Arc<snmp::v3::UsmUser>>>,
    /// `[snmp]`'s SNMPv3 fields, the defaults of every host's.
    snmp_usm: UsmSection,
    /// Some host or range is of SNMP version 3 (SNMP items or not).
    v3_hosts: bool,
    /// The first host or range (its path) that polls SNMPv1/v2c with `[snmp]`'s
    /// community while that is empty: reported once, at `snmp.community`.
    empty_community_user: Option<String>,
    /// Preprocessing pipelines: items with the same steps share one.
    pipelines: Vec<Arc<poller::preprocess::Steps>>,
    /// Items the file may still expand to ([`MAX_ITEMS`]).
    items_left: usize,
    /// Discovery rules by name.
    rules: HashMap<String, Arc<DiscoveryRule>>,
    /// Names of the rules that had errors (reported at the rule).
    bad_rules: HashSet<String>,
    /// The rows discovery has found.
    found: &'c Found,
    /// The hosts to walk for their rules' rows.
    targets: Vec<DiscoveryTarget>,
}

impl<'c, 'a> Resolver<'c, 'a> {
    fn new(
        c: &'c mut Collector<'a>,
        icmp: &'c IcmpSection,
        snmp: &'c SnmpSection,
        found: &'c Found,
        unreadable: HashSet<String>,
    ) -> Self {
        Resolver {
            c,
            icmp: icmp.key_defaults().within_limits(),
            snmp,
            templates: HashMap::new(),
            unreadable,
            users: HashMap::new(),
            snmp_usm: usm_of!(snmp),
            v3_hosts: false,
            empty_community_user: None,
            pipelines: Vec::new(),
            items_left: MAX_ITEMS,
            rules: HashMap::new(),
            bad_rules: HashSet::new(),
            found,
            targets: Vec::new(),
        }
    }

    /// The SNMPv3 user of `fields`, made once per distinct fields, its keys once per
    /// distinct fields but the context: hosts that differ only in their context (one
    /// per VLAN) share them ([`snmp::v3::UsmUser::with_context`]), as a passphrase is
    /// hashed into a key (~1 MiB) for each user made. An error is reported once, at
    /// `path` (the `snmp` table that first used them); the context is never at fault.
    fn usm_user(&mut self, path: &[Seg<'_>], fields: UsmSection) -> Option<Arc<snmp::v3::UsmUser>> {
        if let Some(u) = self.users.get(&fields) {
            return u.clone();
        }
        let credentials = UsmSection {
            context_name: None,
            ..fields.clone()
        };
        let keyed = match self.users.get(&credentials) {
            Some(u) => u.clone(),
            None => {
                let user = match credentials.user() {
                    Ok(u) => Some(Arc::new(u)),
                    // Reported where it is written, by the check of every table.
                    Err(_) if !credentials.wrong_values().is_empty() => None,
                    Err((field, msg)) => {
                        let p = under(path, [Seg::Key(field)]);
                        self.c.push(&p, msg);
                        None
                    }
                };
                self.users.insert(credentials, user.clone());
                user
            }
        };
        let user = keyed.map(|u| match fields.context_name.as_deref().unwrap_or("") {
            "" => u,
            context => Arc::new(u.as_ref().clone().with_context(context)),
        });
        self.users.insert(fields, user.clone());
        user
    }

    /// The steps of `e` (or of the template item it overrides), checked against the
    /// item's type; errors at `path.preprocessing[i]`. `Err(())`: reported.
    fn preprocessing(
        &mut self,
        path: &[Seg<'_>],
        e: &ItemEntry,
        inherited: Option<&ResolvedEntry>,
        value_type: ValueType,
    ) -> Result<Option<Arc<poller::preprocess::Steps>>, ()> {
        use poller::preprocess::{unknown_step, OnFail, Step, Steps, STEP_TYPES};
        let (at, steps) = match &e.preprocessing {
            // The template item's steps: its type was numeric; this item may be text.
            None => (under(path, [Seg::Key("type")]), None),
            Some(entries) => {
                let at = |i, k| {
                    under(
                        path,
                        [Seg::Key("preprocessing"), Seg::Index(i), Seg::Key(k)],
                    )
                };
                let mut steps = Vec::with_capacity(entries.len());
                for (i, st) in entries.iter().enumerate() {
                    let step = match Step::parse(&st.kind, &st.parameters) {
                        Ok(s) => s,
                        Err(m) => {
                            // A typo of a type netpoller runs (`MULTIPLER`): the one meant.
                            let names = STEP_TYPES.map(|n| (n, n));
                            let m = refused_or_meant(m, &st.kind, names, unknown_step);
                            self.c.push(&at(i, "type"), m);
                            return Err(());
                        }
                    };
                    let params = st.error_handler_params.as_deref();
                    let on_fail = match (&st.error_handler, params) {
                        (None, None) => Ok(OnFail::Error),
                        (None, Some(_)) => Err("error_handler_params without error_handler".into()),
                        (Some(h), p) => OnFail::parse(h, p).map_err(|m| {
                            refused_or_meant(m, h, OnFail::NAMES.map(|n| (n, n)), OnFail::unknown)
                        }),
                    };
                    let on_fail = on_fail.and_then(|f| match (&step, f) {
                        // Zabbix's form does not let this step go without a handler.
                        (Step::CheckNotSupported, OnFail::Error) => Err(
                            "CHECK_NOT_SUPPORTED needs error_handler DISCARD_VALUE, CUSTOM_VALUE or CUSTOM_ERROR".into(),
                        ),
                        (_, f) => Ok(f),
                    });
                    let step = match on_fail {
                        Ok(f) => step.on_fail(f),
                        Err(m) => {
                            self.c.push(&at(i, "error_handler"), m);
                            return Err(());
                        }
                    };
                    steps.push(step);
                }
                if let Err((i, m)) = poller::preprocess::check_custom_value(&steps, value_type) {
                    self.c.push(&at(i, "error_handler_params"), m);
                    return Err(());
                }
                (at(0, "type"), Some(steps))
            }
        };
        let inherited = inherited.and_then(|i| i.pre.clone());
        let none = steps.as_ref().map_or(inherited.is_none(), Vec::is_empty);
        if none {
            return Ok(None);
        }
        // The item's own steps were checked one by one above, where the error can name
        // the parameter; inherited ones meet this item's type only here.
        let mismatch = inherited
            .as_deref()
            .filter(|_| steps.is_none())
            .and_then(|p| {
                poller::preprocess::check_custom_value(p.as_slice(), value_type)
                    .err()
                    .map(|(_, m)| m)
            });
        if let Some(why) = mismatch {
            self.c.push(&at, format!("item {:?}: {why}", e.key));
            return Err(());
        }
        let Some(steps) = steps else {
            return Ok(inherited);
        };
        // Few distinct pipelines: a search beats building a key for every item.
        if let Some(p) = self.pipelines.iter().find(|p| p.as_slice() == steps) {
            return Ok(Some(p.clone()));
        }
        if self.pipelines.len() >= poller::plan::MAX_PIPELINES {
            let m = format!(
                "more than {} distinct preprocessing pipelines",
                poller::plan::MAX_PIPELINES
            );
            self.c.push(&under(path, [Seg::Key("preprocessing")]), m);
            return Err(());
        }
        match Steps::new(steps) {
            Ok(p) => {
                let p = Arc::new(p);
                self.pipelines.push(p.clone());
                Ok(Some(p))
            }
            Err(m) => {
                self.c.push(&under(path, [Seg::Key("preprocessing")]), m);
                Err(())
            }
        }
    }

    /// Check one item entry; `inherited` is the template item with the same key, if any.
    /// One item entry (`inherited`: the template item with its key, if any). In a
    /// template (`in_template`), an item with `{#SNMPINDEX}` may leave its rows to the
    /// hosts.
    fn entry(
        &mut self,
        path: &[Seg<'_>],
        e: &ItemEntry,
        inherited: Option<&ResolvedEntry>,
        in_template: bool,
    ) -> Option<ResolvedEntry> {
        let at = |k: &'static str| under(path, [Seg::Key(k)]);
        let chars = e.key.chars().count();
        if chars > MAX_KEY_CHARS {
            self.c.push(
                &at("key"),
                format!("{chars} characters: longer than Zabbix's {MAX_KEY_CHARS} for an item key"),
            );
            return None;
        }
        let key = match ItemKey::parse(&e.key) {
            Ok(k) => k,
            Err(err) => {
                self.c.push(&at("key"), err.0);
                return None;
            }
        };
        if let Some(id) = e.itemid.filter(|&id| id == 0 || id >= DERIVED_ITEMIDS) {
            let why = match id {
                0 => "Zabbix's itemids start at 1",
                _ => {
                    "itemids from 2^62 on are the ones netpoller derives (leave itemid out for one)"
                }
            };
            self.c.push(&at("itemid"), format!("{id}: {why}"));
            return None;
        }
        let interval = match e.interval.or(inherited.map(|i| i.interval)) {
            Some(d) if d >= Duration::from_secs(1) && d <= Duration::from_secs(86_400) => d,
            Some(d) => {
                self.c.push(
                    &at("interval"),
                    format!("{} is outside 1s..1d", humantime::format_duration(d)),
                );
                return None;
            }
            None => {
                self.c
                    .push(path, format!("item {:?} has no interval", e.key));
                return None;
            }
        };
        if IcmpKey::is_icmp_name(&key.name) {
            if e.indices.is_some() {
                self.c.push(
                    &at("indices"),
                    format!("{} is an ICMP key and takes no indices", key.name),
                );
                return None;
            }
            if e.oid.is_some() || e.discovery.is_some() {
                let what = if e.oid.is_some() { "oid" } else { "discovery" };
                self.c.push(
                    &at(what),
                    format!("{} is an ICMP key and takes no {what}", key.name),
                );
                return None;
            }
            let k = match IcmpKey::parse(&key, &self.icmp) {
                Ok(k) => k,
                Err(err) => {
                    self.c.push(&at("key"), err.0);
                    return None;
                }
            };
            // Probes that outlast the interval make every poll late, and hold back the
            // other hosts of their sweep (rescheduled as each is done, but the sweep
            // holds one of the engine's few iterations while it lasts).
            let lasts = k.probe.duration();
            if lasts > interval {
                let (how, fix) = match k.probe.retry() {
                    None => (
                        "(packets - 1) × interval + timeout",
                        "send fewer or closer packets",
                    ),
                    Some(_) => (
                        "for a silent host: each try's timeout in a row",
                        "retry less or with a smaller backoff",
                    ),
                };
                self.c.push(
                    &at("key"),
                    format!(
                        "its probes last {} ({how}), longer than the item's interval of {}: every poll would come late; {fix}, or poll less often",
                        humantime::format_duration(lasts),
                        humantime::format_duration(interval)
                    ),
                );
                return None;
            }
            let natural = if matches!(k.metric, IcmpMetric::Ping) {
                ValueType::Uint
            } else {
                ValueType::Float
            };
            if let Some(t) = e.value_type {
                if t != natural {
                    self.c.push(
                        &at("type"),
                        format!("{} reports {natural}, not {t}", key.name),
                    );
                    return None;
                }
            }
            let pre = self.preprocessing(path, e, inherited, natural).ok()?;
            return Some(ResolvedEntry {
                key: inherited
                    .map(|i| i.key.clone())
                    .unwrap_or_else(|| e.key.trim().into()),
                itemid: e.itemid,
                value_type: natural,
                interval,
                kind: ItemKind::Icmp {
                    metric: k.metric,
                    probe: k.probe,
                },
                pre,
                indices: None,
                discovery: None,
            });
        }
        // Own rows (listed or discovered) replace the template item's.
        let (indices, discovery) = match (&e.indices, &e.discovery) {
            (Some(_), Some(_)) => {
                self.c.push(
                    &at("discovery"),
                    "an item's rows are listed (indices) or discovered (discovery), not both",
                );
                return None;
            }
            (Some(s), None) => match Indices::parse(s) {
                Ok(v) => (Some(Arc::new(v)), None),
                Err(m) => {
                    self.c.push(&at("indices"), m);
                    return None;
                }
            },
            (None, Some(name)) => match self.rules.get(name.trim()) {
                Some(r) => (None, Some(r.clone())),
                // Its rule is wrong, and said so: nothing to add here.
                None if self.bad_rules.contains(name.trim()) => return None,
                None => {
                    let mut known: Vec<&String> = self.rules.keys().collect();
                    known.sort();
                    self.c.push(
                        &at("discovery"),
                        format!("unknown discovery rule {name:?} (defined in [[templates.discovery]]: {known:?})"),
                    );
                    return None;
                }
            },
            (None, None) => (
                inherited.and_then(|i| i.indices.clone()),
                inherited.and_then(|i| i.discovery.clone()),
            ),
        };
        let per_row = e.key.contains(SNMPINDEX);
        if discovery.is_some() && !per_row {
            self.c.push(
                &at("discovery"),
                format!("a discovered item needs {SNMPINDEX} in its key and oid: each row is an item of its own key"),
            );
            return None;
        }
        match (per_row, &indices) {
            (true, _) if e.itemid.is_some() => {
                self.c.push(
                    &at("itemid"),
                    "an item with indices stands for one item per index: their itemids are derived",
                );
                return None;
            }
            (true, None) if in_template || discovery.is_some() => {}
            (true, None) => {
                self.c.push(
                    path,
                    format!("key {:?} has {SNMPINDEX}: give the rows it stands for (indices = \"1-48\")", e.key),
                );
                return None;
            }
            (false, Some(_)) => {
                self.c.push(
                    &at("indices"),
                    format!(
                        "indices need {SNMPINDEX} in the key: each index is an item of its own key"
                    ),
                );
                return None;
            }
            _ => {}
        }
        // With indices, the OID ends with the index: the rest is kept.
        let own_oid = e.oid.as_deref().map(str::trim).map(|o| match per_row {
            true => o.strip_suffix(SNMPINDEX).and_then(|p| p.strip_suffix('.')).ok_or_else(|| {
                format!("{o:?}: an item per row ends its oid with .{SNMPINDEX} (1.3.6.1.2.1.31.1.1.1.6.{SNMPINDEX})")
            }),
            false => Ok(o),
        });
        let oid = match (own_oid, inherited.map(|i| &i.kind)) {
            (Some(Err(m)), _) => {
                self.c.push(&at("oid"), m);
                return None;
            }
            (Some(Ok(o)), _) => match numeric_oid(o, "1.3.6.1.2.1.1.1.0") {
                Ok(o) => o,
                Err(m) => {
                    self.c.push(&at("oid"), m);
                    return None;
                }
            },
            (None, Some(ItemKind::Snmp { oid })) => oid.clone(),
            (None, _) => {
                self.c.push(
                    path,
                    format!(
                        "item {:?} is not an ICMP key, so it is an SNMP item and needs an oid",
                        e.key
                    ),
                );
                return None;
            }
        };
        // A row's OID is the item's and the row's arcs (one for a row to be discovered,
        // the longest listed one's): still an OID. Said where the item's own part is:
        // its oid, or (an oid inherited) its indices.
        let index_arcs = indices.as_ref().map_or(1, |i| i.max_arcs().max(1));
        if per_row && oid.arcs().count() + index_arcs > snmp::MAX_ARCS {
            let (field, what) = match &e.oid {
                Some(o) => ("oid", format!("{:?}", o.trim())),
                None => ("indices", format!("the oid {oid}")),
            };
            self.c.push(
                &at(field),
                format!("{what}: with its index, more than {} arcs", snmp::MAX_ARCS),
            );
            return None;
        }
        // So is a row's key a key: at most what Zabbix stores.
        if let Some(rows) = indices.as_ref().filter(|_| per_row) {
            let n = row_key_chars(&e.key, rows.max_text_len());
            if n > MAX_KEY_CHARS {
                self.c.push(
                    &at("indices"),
                    format!("the key of its longest row would be {n} characters: longer than Zabbix's {MAX_KEY_CHARS}"),
                );
                return None;
            }
        }
        let Some(value_type) = e.value_type.or(inherited.map(|i| i.value_type)) else {
            self.c.push(
                path,
                format!("SNMP item {:?} needs a type (float, uint or str)", e.key),
            );
            return None;
        };
        let pre = self.preprocessing(path, e, inherited, value_type).ok()?;
        Some(ResolvedEntry {
            key: inherited
                .map(|i| i.key.clone())
                .unwrap_or_else(|| e.key.trim().into()),
            itemid: e.itemid,
            value_type,
            interval,
            kind: ItemKind::Snmp { oid },
            pre,
            indices,
            discovery,
        })
    }

    fn resolve(
        mut self,
        templates: &[(usize, TemplateEntry)],
        hosts: &[(usize, HostEntry)],
        ranges: &[(usize, HostRangeEntry)],
    ) -> (Vec<HostSpec>, Vec<DiscoveryTarget>) {
        wrong_usm_values(self.c, &[Seg::Key("snmp")], &self.snmp_usm);
        for (i, t) in templates {
            for (j, d) in t.discovery.iter().enumerate() {
                let p = [
                    Seg::Key("templates"),
                    Seg::Index(*i),
                    Seg::Key("discovery"),
                    Seg::Index(j),
                ];
                self.rule(&p, d);
            }
        }
        for (i, t) in templates {
            let tp = [Seg::Key("templates"), Seg::Index(*i)];
            if self.templates.contains_key(&t.name) {
                self.c.push(
                    &[tp[0].clone(), tp[1].clone(), Seg::Key("name")],
                    format!("duplicate template name {:?}", t.name),
                );
                continue;
            }
            let mut items = Vec::new();
            let mut keys = HashSet::new();
            for (j, e) in t.items.iter().enumerate() {
                let p = [
                    tp[0].clone(),
                    tp[1].clone(),
                    Seg::Key("items"),
                    Seg::Index(j),
                ];
                if e.itemid.is_some() {
                    self.c.push(&p, "itemid belongs on a host's item, not in a template (one template serves many hosts)");
                    continue;
                }
                if !keys.insert(e.key.trim().to_string()) {
                    self.c.push(
                        &p,
                        format!("duplicate key {:?} in template {:?}", e.key, t.name),
                    );
                    continue;
                }
                if let Some(r) = self.entry(&p, e, None, true) {
                    items.push(r);
                }
            }
            self.templates.insert(t.name.clone(), items);
        }

        let mut out = Vec::new();
        // Where each host of `out` comes from, for the itemid check at the end.
        let mut origins: Vec<Origin> = Vec::new();
        // Duplicate checks keep indices, not strings: at 1 M items a "host/key" String
        // per item and two per host were most of the loader's peak memory.
        let mut names: HashMap<Arc<str>, Origin> = HashMap::new();
        for (i, h) in hosts {
            let origin = Origin::Host(*i as u32);
            let hp = origin.path();
            let ip = match h.ip.trim().parse::<IpAddr>() {
                Ok(ip) => match poller::source::check_address(ip) {
                    Ok(ip) => Some(ip),
                    Err(e) => {
                        self.c
                            .push(&[hp[0].clone(), hp[1].clone(), Seg::Key("ip")], e);
                        None
                    }
                },
                Err(_) => {
                    self.c.push(
                        &[hp[0].clone(), hp[1].clone(), Seg::Key("ip")],
                        format!("{:?} is not an IP address{}", h.ip, ip_hint(&h.ip)),
                    );
                    None
                }
            };
            let misnamed = name_problem(&h.name);
            if let Some(why) = misnamed {
                self.c.push(
                    &[hp[0].clone(), hp[1].clone(), Seg::Key("name")],
                    format!("host name {:?} {why}", h.name),
                );
            }
            let name: Arc<str> = h.name.as_str().into();
            // A second host of one name has its items checked, but is not planned: its
            // derived itemids are the first one's, which would bury the cause under a
            // line per item ("itemid … of a/icmpping is also used by a/icmpping").
            let duplicate = names.insert(name.clone(), origin);
            if let Some(prev) = duplicate {
                self.c.push(
                    &[hp[0].clone(), hp[1].clone(), Seg::Key("name")],
                    format!("duplicate host name {:?} (also {prev})", h.name),
                );
            }
            let base = self.host_items(&hp, &h.templates, &h.items, true);
            let base = base.filter(|b| {
                let n: usize = b.iter().map(ResolvedEntry::count).sum();
                self.take_items(&hp, n, 1)
            });
            let polls_snmp = base.as_ref().is_some_and(|b| polls_snmp(b));
            let snmp = self.snmp_params(&hp, h.snmp.as_ref(), polls_snmp);
            if let (Some(ip), Some(items), Some(snmp), None, None) =
                (ip, base, snmp, duplicate, misnamed)
            {
                if let Some(items) = self.with_found(&hp, &name, ip, snmp.as_ref(), items) {
                    out.push(host_spec(name, ip, items, snmp));
                    origins.push(origin);
                }
            }
        }
        let mut budget = MAX_RANGE_HOSTS;
        // The ranges' addresses, for the overlap warnings.
        let mut spans: Vec<(Addresses, usize)> = Vec::new();
        for (i, r) in ranges {
            let origin = Origin::Range(*i as u32);
            let rp = origin.path();
            let at = |k| [rp[0].clone(), rp[1].clone(), Seg::Key(k)];
            // Each of its problems is reported (its items and `snmp` checked whatever
            // its addresses or name); it is planned only without any.
            let before = self.c.errors.len();
            let span = self.range_span(&rp, r);
            let addrs = span.map(|sp| self.range_addresses(&rp, sp, &r.exclude));
            let count = addrs.as_ref().map_or(0, Addresses::count);
            if let Some(a) = &addrs {
                spans.push((a.clone(), *i));
            }
            if let Some(sp) = span.filter(|_| count > budget as u128) {
                let what = match budget {
                    MAX_RANGE_HOSTS => String::new(),
                    left => format!(" (the ranges before it leave {left})"),
                };
                self.c.push(
                    &at(sp.key()),
                    format!(
                        "{sp} holds {count} hosts: more than the {MAX_RANGE_HOSTS} one file's ranges may hold{what}"
                    ),
                );
            } else {
                budget -= count as usize;
            }
            if let Some(why) = name_problem(&r.name) {
                self.c
                    .push(&at("name"), format!("name pattern {:?} {why}", r.name));
            } else if !r.name.contains("{ip}") && count > 1 {
                // `{IP}`, `{ ip }`: the placeholder meant, in another spelling.
                let folded = r.name.to_ascii_lowercase().replace(' ', "");
                let meant = match folded.contains("{ip}") {
                    true => ": the placeholder is {ip}, in lower case, without spaces",
                    false => "",
                };
                self.c.push(
                    &at("name"),
                    format!("name pattern must contain {{ip}} (host names must be unique){meant}"),
                );
            }
            if r.items.iter().any(|e| e.itemid.is_some()) {
                self.c.push(
                    &at("items"),
                    "itemid cannot be set for a range (it would repeat on every host)",
                );
            }
            let items = self.host_items(&rp, &r.templates, &r.items, false);
            let polls = items.as_ref().is_some_and(|items| polls_snmp(items));
            let snmp = self.snmp_params(&rp, r.snmp.as_ref(), polls);
            let (Some(addrs), Some(items), Some(snmp), true) =
                (&addrs, items, snmp, self.c.errors.len() == before)
            else {
                continue;
            };
            let per_host: usize = items.iter().map(ResolvedEntry::count).sum();
            if !self.take_items(&rp, per_host, count as usize) {
                continue;
            }
            for ip in addrs.iter() {
                let ip_s = ip.to_string();
                let name: Arc<str> = r.name.replace("{ip}", &ip_s).into();
                if let Some(prev) = names.insert(name.clone(), origin) {
                    // Two ranges that overlap and name their hosts alike (both the
                    // default "{ip}"): what to write, since the overlap alone is allowed.
                    let hint = match prev {
                        Origin::Range(_) => format!(
                            ": the ranges overlap and name this address alike; a name pattern of this range's own (name = \"range{i}-{{ip}}\") polls it as a host of each, one range with both ranges' templates polls it once"
                        ),
                        Origin::Host(_) => String::new(),
                    };
                    self.c.push(
                        &[rp[0].clone(), rp[1].clone(), Seg::Key("name")],
                        format!("host name {name:?} repeats {prev}{hint}"),
                    );
                    break;
                }
                let Some(items) = self.with_found(&rp, &name, ip, snmp.as_ref(), items.clone())
                else {
                    break;
                };
                out.push(host_spec(name, ip, items, snmp.clone()));
                origins.push(origin);
            }
        }
        drop(names);
        let covers = self.range_overlaps(&mut spans);
        self.hosts_in_ranges(&spans, &covers, &out, &origins);
        // `[snmp]`'s SNMPv3 fields are defaults for hosts of version 3: with none, they
        // are a forgotten `version = "3"` (a host's own are checked with the host).
        let version: SnmpVersion = self.snmp.version.into();
        if version != SnmpVersion::V3 && !self.snmp_usm.is_empty() && !self.v3_hosts {
            self.c.push(&[Seg::Key("snmp")], v3_ignored(version));
        }
        if let Some(user) = self.empty_community_user.take() {
            let at = [Seg::Key("snmp"), Seg::Key("community")];
            let why = community_problem(&self.snmp.community, &format!(" ({user})"));
            self.c.push(&at, why.unwrap_or_default());
        }
        self.check_itemids(&mut out, &origins);
        (out, self.targets)
    }

    /// A range's network, or `None` when its `cidr` (at `path`) is none a range may
    /// be: reported.
    fn range_net(&mut self, path: &[Seg<'_>], cidr: &str) -> Option<ipnet::IpNet> {
        let problem = match cidr.trim().parse::<ipnet::IpNet>() {
            // An interface's address pasted from a router's config: its whole network
            // was most likely not meant.
            Ok(n) if n.addr() != n.network() => format!(
                "{} has host bits set: write the network, {}, or list {} as a [[hosts]] entry",
                cidr.trim(),
                n.trunc(),
                n.addr()
            ),
            Ok(n) => match poller::source::check_range(n.network(), n.broadcast()) {
                Ok(()) => return Some(n),
                Err(e) => e,
            },
            // A range pasted where the network goes.
            Err(_) if span::parse_range(cidr).is_some() => {
                format!("{cidr:?} is a range of addresses: write it as range = {cidr:?}")
            }
            Err(_) => format!(
                "{cidr:?} is not a CIDR like 127.1.0.0/22{}",
                cidr_hint(cidr)
            ),
        };
        self.c.push(path, problem);
        None
    }

    /// The addresses of span `sp` of the range at `rp` that it polls: all but those
    /// its `exclude` leaves out. An exclusion that does not parse, or holds none of
    /// them (an address of another network: a typo), is an error, as is leaving out
    /// every one (the range would poll nothing).
    fn range_addresses(&mut self, rp: &[Seg<'_>], sp: Span, exclude: &[String]) -> Addresses {
        let (first, last) = sp.bounds();
        let mut left_out = Vec::new();
        for (k, text) in exclude.iter().enumerate() {
            let at = under(rp, [Seg::Key("exclude"), Seg::Index(k)]);
            match span::parse_exclusion(text) {
                Err(e) => self.c.push(&at, e),
                Ok((a, b)) if a.is_ipv4() != first.is_ipv4() || b < first || a > last => {
                    self.c.push(
                        &at,
                        format!(
                            "{:?} holds no address of this range ({sp}): it leaves out nothing",
                            text.trim()
                        ),
                    )
                }
                Ok(run) => left_out.push(run),
            }
        }
        let addrs = Addresses::new(sp, &left_out);
        if addrs.count() == 0 {
            self.c.push(
                &under(rp, [Seg::Key("exclude")]),
                format!("leaves out every address of {sp}: the range would poll nothing"),
            );
        }
        addrs
    }

    /// A range's addresses (`rp`: the range's path): its `cidr`'s or its `range`'s,
    /// one of them; `None` when they are none a range may have: reported.
    fn range_span(&mut self, rp: &[Seg<'_>], r: &HostRangeEntry) -> Option<Span> {
        let at = |k: &'static str| under(rp, [Seg::Key(k)]);
        let problem = match (&r.cidr, &r.range) {
            (Some(cidr), None) => return self.range_net(&at("cidr"), cidr).map(Span::Net),
            (None, Some(range)) => match span::parse_range(range) {
                Some(Ok(sp)) => return Some(sp),
                Some(Err(e)) => e,
                None if range.trim().parse::<ipnet::IpNet>().is_ok() => {
                    format!("{range:?} is a network: write it as cidr = {range:?}")
                }
                None => format!(
                    "{range:?} is not a range like 127.1.0.10-127.1.0.99 (or 127.1.0.10-99: the last number alone)"
                ),
            },
            (Some(_), Some(_)) => {
                "cidr and range are both given: an entry has one of them (two entries poll both)"
                    .to_string()
            }
            (None, None) => {
                self.c.push(
                    rp,
                    "a [[host_ranges]] entry needs cidr (a network: 198.51.100.0/24) or range (its first and last addresses: 198.51.100.10-198.51.100.99)",
                );
                return None;
            }
        };
        self.c.push(&at("range"), problem);
        None
    }

    /// Warns of each range whose addresses lie inside an earlier one's, or partly
    /// overlap them (ranges may; CIDRs nest or are apart): a host per address and
    /// range, so each address of both is polled as two hosts (unless one of them
    /// leaves it out). Valid (Zabbix lets hosts share an address), but more often a
    /// pasted range than meant; the names then differ, or a duplicate name error says
    /// it. Sorts `spans` by first address, and returns which of them lie inside none
    /// other: what holds every range's address, their last addresses rising too (none
    /// inside another), so that the last one starting at or before an address is the
    /// one whose span can hold it.
    fn range_overlaps(&mut self, spans: &mut [(Addresses, usize)]) -> Vec<usize> {
        // By first address, the larger first: a range inside any earlier one is inside
        // the last kept (its last address is the highest yet).
        spans.sort_by_key(|(a, i)| {
            let (first, last) = a.span.bounds();
            (first, std::cmp::Reverse(last), *i)
        });
        let mut covers: Vec<usize> = Vec::new();
        for (k, (a, i)) in spans.iter().enumerate() {
            let (sp, i) = (a.span, *i);
            let (first, last) = sp.bounds();
            let Some(&c) = covers.last() else {
                covers.push(k);
                continue;
            };
            let (ca, j) = &spans[c];
            let (_, c_last) = ca.span.bounds();
            // Apart (or of the other family: IPv6 addresses order after IPv4's).
            if first > c_last {
                covers.push(k);
                continue;
            }
            let inside = last <= c_last;
            if !inside {
                covers.push(k);
            }
            // What both poll: none where one leaves out what the other holds.
            let shared = a.shared(ca);
            if shared == 0 {
                continue;
            }
            let at = range_key(i, sp);
            let named = self.range_named(ca.span, *j);
            let (each, those) = match shared {
                1 => ("its address".to_string(), "the address".to_string()),
                n => (
                    format!("each of its {n} addresses"),
                    format!("each of the {n} addresses"),
                ),
            };
            let message = match inside {
                true => format!(
                    "{sp} is inside {named}: {each} is polled twice, as a host of each range (one range with both ranges' templates polls them once)"
                ),
                false => format!(
                    "{sp} overlaps {named}: {those} both hold, from {first} to {c_last}, is polled twice, as a host of each range (ranges apart, or one with the other's addresses in its exclude, poll each address once)"
                ),
            };
            self.c.warn(&at, message);
        }
        covers
    }

    /// `host_ranges[0] (127.0.0.0/24, line 12)`: range `i` of addresses `sp`, to name
    /// in a warning of another key.
    fn range_named(&self, sp: Span, i: usize) -> String {
        let at = range_key(i, sp);
        let line = match self.c.loc.line(&at).map(|l| place(&self.c.loc.files, l)) {
            Some((Some(file), l)) => format!(", {file} line {l}"),
            Some((None, l)) => format!(", line {l}"),
            None => String::new(),
        };
        format!("host_ranges[{i}] ({sp}{line})")
    }

    /// Warns of each `[[hosts]]` entry whose address a range holds (`covers`:
    /// [`Self::range_overlaps`]'; `out` and `origins`: the hosts resolved and where
    /// each comes from) and that polls with an engine the range polls with too, as it
    /// warns of a range inside another: the address is then polled twice by that
    /// engine, as this host and as the range's. A host of one engine inside a range of
    /// the other (a subnet pinged, one device of it polled by SNMP under its own name)
    /// is no mistake and is not warned of. The first [`LISTED_HOSTS_IN_RANGES`] are
    /// named, the others counted: a range added over a file of thousands of hosts is
    /// one mistake, not thousands of lines at each reload. A binary search per host:
    /// ranges may be many too; the ranges' engines are looked up only when a host is
    /// inside one.
    fn hosts_in_ranges(
        &mut self,
        spans: &[(Addresses, usize)],
        covers: &[usize],
        out: &[HostSpec],
        origins: &[Origin],
    ) {
        let inside: Vec<(&HostSpec, usize, Span, usize)> = out
            .iter()
            .zip(origins)
            .filter_map(|(h, o)| match o {
                Origin::Host(i) => Some((h, *i as usize)),
                Origin::Range(_) => None,
            })
            .filter_map(|(h, i)| {
                let after = covers.partition_point(|&c| spans[c].0.span.bounds().0 <= h.ip);
                let (a, j) = &spans[covers[after.checked_sub(1)?]];
                // Left out of the cover: a range inside it may hold it (rare: looked
                // for among them all).
                let held = match a.holds(h.ip) {
                    true => Some((a, j)),
                    false if a.span.holds(h.ip) => spans
                        .iter()
                        .find(|(a, _)| a.holds(h.ip))
                        .map(|(a, j)| (a, j)),
                    false => None,
                };
                held.map(|(a, j)| (h, i, a.span, *j))
            })
            .collect();
        if inside.is_empty() {
            return;
        }
        // Each range's engines: what any of its hosts polls with.
        let mut range_engines: HashMap<usize, Engines> = HashMap::new();
        for (h, o) in out.iter().zip(origins) {
            if let Origin::Range(j) = o {
                *range_engines.entry(*j as usize).or_default() |= Engines::of(h);
            }
        }
        let mut more = 0usize;
        let mut named = 0usize;
        for (h, i, n, j) in inside {
            let twice = Engines::of(h) & range_engines.get(&j).copied().unwrap_or_default();
            let Some(engines) = twice.named() else {
                continue;
            };
            if named == LISTED_HOSTS_IN_RANGES {
                more += 1;
                continue;
            }
            named += 1;
            self.c.warn(
                &[Seg::Key("hosts"), Seg::Index(i), Seg::Key("ip")],
                format!(
                    "{} is inside {}, which polls it by {engines} too: it is polled twice, as this host and as a host of the range (this host with the range's templates too, and the range with it in its exclude, poll it once)",
                    h.ip,
                    self.range_named(n, j)
                ),
            );
        }
        if more > 0 {
            self.c.warn(
                &[],
                format!("{more} more [[hosts]] entries lie inside a [[host_ranges]] entry that polls them by the same engine, each polled twice too (the first {LISTED_HOSTS_IN_RANGES} are named above)"),
            );
        }
    }

    /// Checks a `[[templates.discovery]]` rule and keeps it by its name.
    fn rule(&mut self, path: &[Seg<'_>], d: &DiscoveryEntry) {
        let at = |k: &'static str| under(path, [Seg::Key(k)]);
        let before = self.c.errors.len();
        let name = d.name.trim();
        if name.is_empty() {
            self.c.push(&at("name"), "a discovery rule needs a name");
        } else if self.rules.contains_key(name) {
            self.c.push(
                &at("name"),
                format!("duplicate discovery rule name {name:?}"),
            );
        }
        let own = self.condition(path, &d.oid, &d.matches, &d.not_matches);
        let mut filter = Vec::new();
        for (k, f) in d.filter.iter().enumerate() {
            let fp = under(path, [Seg::Key("filter"), Seg::Index(k)]);
            if f.matches.is_none() && f.not_matches.is_none() {
                self.c.push(
                    &fp,
                    "a filter condition needs matches or not_matches (or both)",
                );
            }
            filter.extend(self.condition(&fp, &f.oid, &f.matches, &f.not_matches));
        }
        if d.interval < Duration::from_secs(60) || d.interval > Duration::from_secs(7 * 86_400) {
            self.c.push(
                &at("interval"),
                format!(
                    "{} is outside 1m..7d (a walk per host and interval)",
                    humantime::format_duration(d.interval)
                ),
            );
        }
        if self.c.errors.len() != before {
            self.bad_rules.insert(name.to_string());
        }
        if let (Some(own), true) = (own, self.c.errors.len() == before) {
            let rule = DiscoveryRule {
                name: name.into(),
                column: own.column,
                matches: own.matches,
                not_matches: own.not_matches,
                interval: d.interval,
                filter,
            };
            self.rules.insert(name.to_string(), Arc::new(rule));
        }
    }

    /// A column with its `matches` and `not_matches` (the keys of `path`), as a rule and
    /// each of its filter's conditions give them; `None` for a wrong column. Whatever
    /// is wrong is reported.
    fn condition(
        &mut self,
        path: &[Seg<'_>],
        oid: &str,
        matches: &Option<String>,
        not_matches: &Option<String>,
    ) -> Option<Condition> {
        let at = |k: &'static str| under(path, [Seg::Key(k)]);
        let column = self.column(&at("oid"), oid);
        let matches = self.regex(&at("matches"), matches.as_deref());
        let not_matches = self.regex(&at("not_matches"), not_matches.as_deref());
        Some(Condition {
            column: column?,
            matches,
            not_matches,
        })
    }

    /// A table column to walk (`path`: where it is written), or `None` (reported).
    fn column(&mut self, path: &[Seg<'_>], oid: &str) -> Option<snmp::Oid> {
        match numeric_oid(oid.trim(), "1.3.6.1.2.1.2.2.1.2") {
            Ok(o) if o.arcs().count() > 2 && o.arcs().count() < snmp::MAX_ARCS => Some(o),
            Ok(_) => {
                self.c.push(
                    path,
                    format!("{oid:?} is not a table column to walk (ifDescr: 1.3.6.1.2.1.2.2.1.2)"),
                );
                None
            }
            Err(m) => {
                self.c.push(path, m);
                None
            }
        }
    }

    /// A regular expression, if given (`None` also when it is wrong: reported).
    fn regex(&mut self, path: &[Seg<'_>], re: Option<&str>) -> Option<regex::Regex> {
        match re.map(regex::Regex::new).transpose() {
            Ok(r) => r,
            Err(e) => {
                self.c.push(path, format!("not a regular expression: {e}"));
                None
            }
        }
    }

    /// A host's items with the rows found for their discovery rules (an item of a rule
    /// with no rows known yet stands for none); the host is listed for its rules to be
    /// walked. A row whose key another item has is left to that item. `None` when the
    /// file's item budget is spent.
    fn with_found(
        &mut self,
        path: &[Seg<'_>],
        host: &Arc<str>,
        ip: IpAddr,
        snmp: Option<&Arc<SnmpParams>>,
        items: Vec<ResolvedEntry>,
    ) -> Option<Vec<ResolvedEntry>> {
        if !items.iter().any(|e| e.discovery.is_some()) {
            return Some(items);
        }
        // (Every host with SNMP items has SNMP parameters; without, no row is known.)
        let Some(snmp) = snmp else {
            return Some(
                items
                    .into_iter()
                    .filter(|e| e.discovery.is_none())
                    .collect(),
            );
        };
        let mut rules: Vec<Arc<DiscoveryRule>> = Vec::new();
        // The keys of the host's other items, to leave a row to an item that has its
        // key: only built when one may (building it costs a key per row, most of a
        // re-plan at a million items).
        let mut keys: Option<HashSet<Arc<str>>> = may_collide(&items).then(|| {
            items
                .iter()
                .filter(|e| e.discovery.is_none())
                .flat_map(ResolvedEntry::keys)
                .collect()
        });
        let mut added = 0;
        let mut out = Vec::with_capacity(items.len());
        for mut e in items {
            let Some(rule) = e.discovery.take() else {
                out.push(e);
                continue;
            };
            if !rules.iter().any(|r| Arc::ptr_eq(r, &rule)) {
                rules.push(rule.clone());
            }
            let Some(found) = self.found.rows(host, &rule.name) else {
                continue;
            };
            // A row's OID is the item's and the row's arcs: a row it would take past an
            // OID's arcs cannot be asked for (an agent's table never has one, but the
            // item's OID may be longer than the column walked).
            let base = match &e.kind {
                ItemKind::Snmp { oid } => oid.arcs().count(),
                _ => 0,
            };
            // Nor one whose key would be longer than a key may be.
            let fits = base + found.max_arcs() <= snmp::MAX_ARCS
                && row_key_chars(&e.key, found.max_text_len()) <= MAX_KEY_CHARS;
            let rows: Rows = match &mut keys {
                // No other key can be a row's: the rows found, shared.
                None if fits && found.len() <= MAX_INDICES => found.clone(),
                keys => Arc::new(found.filtered(MAX_INDICES as usize, |r| {
                    base + r.arcs().len() <= snmp::MAX_ARCS
                        && row_key_chars(&e.key, r.to_string().len()) <= MAX_KEY_CHARS
                        && keys.as_mut().is_none_or(|k| k.insert(e.row_key(r)))
                })),
            };
            if rows.is_empty() {
                continue;
            }
            added += rows.len() as usize;
            e.indices = Some(rows);
            out.push(e);
        }
        self.targets.push(DiscoveryTarget {
            host: host.clone(),
            ip,
            snmp: snmp.clone(),
            rules,
            // The daemon section's, set once the file is resolved.
            source: Default::default(),
        });
        self.take_items(path, added, 1).then_some(out)
    }

    /// Takes `hosts` × `per_host` items from the file's budget ([`MAX_ITEMS`]), or says
    /// at `path` that the file asks for more.
    fn take_items(&mut self, path: &[Seg<'_>], per_host: usize, hosts: usize) -> bool {
        let n = per_host.saturating_mul(hosts);
        if n > self.items_left {
            self.c.push(
                path,
                format!(
                    "{n} more items: past the {MAX_ITEMS} one file may hold (indices and host ranges multiply)"
                ),
            );
            return false;
        }
        self.items_left -= n;
        true
    }

    /// Itemids must be unique in the file (they are the history's key). Sorting a copy
    /// of them finds out at 8 bytes per item; a map from itemid to its item, as this
    /// used to be, was 34 MB at 1 M items, the loader's peak. Only when an itemid
    /// repeats does a map name both users, in file order: each host that reuses one is
    /// reported and dropped. A dropped host keeps its claims: a later host that shares
    /// another of its itemids is reported in the same run, not once the first is fixed
    /// (the map's indices are into `out` as it was, which the loop does not change).
    fn check_itemids(&mut self, out: &mut Vec<HostSpec>, origins: &[Origin]) {
        let mut ids = Vec::with_capacity(out.iter().map(|h| h.items.len()).sum());
        ids.extend(out.iter().flat_map(|h| h.items.iter().map(|i| i.itemid)));
        ids.sort_unstable();
        if !ids.windows(2).any(|w| w[0] == w[1]) {
            return;
        }
        drop(ids);
        // Itemid → (host in `out`, item there) of its first user.
        let mut seen: HashMap<u64, (u32, u32)> = HashMap::new();
        let mut keep = vec![true; out.len()];
        for (h, host) in out.iter().enumerate() {
            let at = |j: usize| (h as u32, j as u32);
            for (j, it) in host.items.iter().enumerate() {
                let &mut (ph, pj) = seen.entry(it.itemid).or_insert(at(j));
                if (ph, pj) != at(j) {
                    let prev = &out[ph as usize];
                    self.c.push(
                        &origins[h].path(),
                        format!(
                            "itemid {} of {}/{} is also used by {}/{}",
                            it.itemid, host.name, it.key, prev.name, prev.items[pj as usize].key
                        ),
                    );
                    keep[h] = false;
                }
            }
        }
        let mut k = keep.into_iter();
        out.retain(|_| k.next().unwrap_or(true));
    }

    /// A host's SNMP parameters. `polls_snmp`: the host has SNMP items, so a v3 user
    /// must resolve (an ICMP-only host under a broken `[snmp]` is not its fault).
    fn snmp_params(
        &mut self,
        path: &[Seg<'_>],
        o: Option<&SnmpOverride>,
        polls_snmp: bool,
    ) -> Option<Option<Arc<SnmpParams>>> {
        let d = self.snmp;
        let o = o.cloned().unwrap_or_default();
        let version: SnmpVersion = o.version.unwrap_or(d.version).into();
        let sp = under(path, [Seg::Key("snmp")]);
        let own_usm = usm_of!(o);
        wrong_usm_values(self.c, &sp, &own_usm);
        if version != SnmpVersion::V3 && !own_usm.is_empty() {
            self.c.push(&sp, v3_ignored(version));
        }
        self.v3_hosts |= version == SnmpVersion::V3;
        // SNMPv1/v2c authenticate by community alone: agents drop a request with an
        // empty one unanswered, so each poll would only time out. A host's own is
        // reported at the host; `[snmp]`'s once, and only when a host of v1/v2c that
        // polls SNMP takes it (a v3 host sends none: `community = ""` there is fine).
        if version != SnmpVersion::V3 {
            match &o.community {
                Some(own) if community_problem(own, "").is_some() => {
                    let at = under(&sp, [Seg::Key("community")]);
                    self.c
                        .push(&at, community_problem(own, "").unwrap_or_default());
                }
                None if community_problem(&d.community, "").is_some() && polls_snmp => {
                    let user = || {
                        format!(
                            "{} polls SNMPv{} with it",
                            render_path(path),
                            version.as_str()
                        )
                    };
                    self.empty_community_user.get_or_insert_with(user);
                }
                _ => {}
            }
        }
        let usm = if version == SnmpVersion::V3 && polls_snmp {
            // Reported where the fields are: the host's own table if it has SNMPv3
            // fields, or makes itself version 3 where `[snmp]` has none (the missing
            // user is the host's: `[snmp]` may not even exist), else `[snmp]`.
            let own_v3 = o.version.is_some() && self.snmp_usm.is_empty();
            let at = if !own_usm.is_empty() || own_v3 {
                &sp[..]
            } else {
                &[Seg::Key("snmp")][..]
            };
            let fields = own_usm.or(&self.snmp_usm);
            Some(self.usm_user(at, fields)?)
        } else {
            None
        };
        let p = SnmpParams {
            version,
            community: o.community.as_deref().unwrap_or(&d.community).into(),
            usm,
            port: o.port.unwrap_or(d.port),
            timeout: o.timeout.unwrap_or(d.timeout),
            retries: o.retries.unwrap_or(d.retries),
            max_oids_per_request: o.max_oids_per_request.unwrap_or(d.max_oids_per_request),
            max_inflight_per_host: o.max_inflight_per_host.unwrap_or(d.max_inflight_per_host),
        };
        let before = self.c.errors.len();
        // What the host sets: the section's own values are checked (and reported) there.
        check_snmp_limits(
            self.c,
            &sp,
            SnmpLimits {
                max_oids: o.max_oids_per_request,
                max_inflight: o.max_inflight_per_host,
                port: o.port,
                timeout: o.timeout,
                retries: o.retries,
            },
        );
        (self.c.errors.len() == before).then(|| Some(Arc::new(p)))
    }

    /// Template items merged with the host's own; `None` when something was wrong.
    fn host_items(
        &mut self,
        path: &[Seg<'_>],
        templates: &[String],
        items: &[ItemEntry],
        allow_itemid: bool,
    ) -> Option<Vec<ResolvedEntry>> {
        if templates.is_empty() && items.is_empty() {
            // Valid (a host kept in the file while its templates are decided), but
            // more often a forgotten `templates` line: `check-config` said "OK".
            self.c.warn(
                path,
                "polls nothing: no templates and no items (add templates = [\"...\"] or items)",
            );
        }
        let before = self.c.errors.len();
        let mut merged: Vec<ResolvedEntry> = Vec::new();
        let mut at = KeyPositions::default();
        for (j, t) in templates.iter().enumerate() {
            let p = under(path, [Seg::Key("templates"), Seg::Index(j)]);
            match self.templates.get(t) {
                _ if templates[..j].contains(t) => {
                    self.c.push(&p, format!("template {t:?} is listed twice"));
                }
                None if self.unreadable.contains(t) => {}
                None => {
                    let mut known: Vec<&str> = self
                        .templates
                        .keys()
                        .chain(&self.unreadable)
                        .map(String::as_str)
                        .collect();
                    known.sort_unstable();
                    self.c.push(&p, unknown_template(t, &known));
                }
                Some(ts) => {
                    for it in ts {
                        if at.find(&merged, &it.key).is_some() {
                            self.c
                                .push(&p, format!("key {:?} comes from two templates", &*it.key));
                        } else {
                            at.push(&mut merged, it.clone());
                        }
                    }
                }
            }
        }
        let mut own = HashSet::new();
        for (j, e) in items.iter().enumerate() {
            let p = under(path, [Seg::Key("items"), Seg::Index(j)]);
            if !allow_itemid && e.itemid.is_some() {
                continue;
            }
            if !own.insert(e.key.trim().to_string()) {
                self.c.push(&p, format!("duplicate key {:?}", e.key));
                continue;
            }
            let pos = at.find(&merged, e.key.trim());
            if let Some(r) = self.entry(&p, e, pos.map(|i| &merged[i]), false) {
                match pos {
                    Some(i) => merged[i] = r,
                    None => at.push(&mut merged, r),
                }
            }
        }
        // A template's item per row whose rows the host has not given (unless its own
        // item for it had an error: that one says what is wrong).
        let own_ok = self.c.errors.len() == before;
        if let Some(m) = merged.iter().find(|m| {
            own_ok && m.indices.is_none() && m.discovery.is_none() && m.key.contains(SNMPINDEX)
        }) {
            self.c.push(
                path,
                format!(
                    "item {:?} stands for table rows: give them (items = [ {{ key = {:?}, indices = \"1-48\" }} ])",
                    &*m.key, &*m.key
                ),
            );
        }
        // An index's key may be another item's (`ifHCInOctets.3` and `.{#SNMPINDEX}`
        // with 1-48): the set is built only for hosts with indices.
        if merged.iter().any(|m| m.indices.is_some()) {
            let mut keys = HashSet::new();
            if let Some(k) = merged
                .iter()
                .flat_map(ResolvedEntry::keys)
                .find(|k| !keys.insert(k.clone()))
            {
                self.c.push(
                    path,
                    format!(
                        "key {:?} repeats: an item's indices give it, and another item too",
                        &*k
                    ),
                );
            }
        }
        (self.c.errors.len() == before).then_some(merged)
    }
}

/// A resolved host: its items with their itemids (explicit or derived).
/// Where each key is in a host's merged items: a linear search while they are few (most
/// hosts), a map past [`KeyPositions::LINEAR`] (a host or template of thousands of items
/// made the merge quadratic: 20,000 took 45 s, at every reload and discovery re-plan).
#[derive(Default)]
struct KeyPositions(Option<HashMap<Arc<str>, usize>>);

impl KeyPositions {
    const LINEAR: usize = 32;

    fn find(&mut self, merged: &[ResolvedEntry], key: &str) -> Option<usize> {
        if self.0.is_none() && merged.len() > Self::LINEAR {
            let map = merged.iter().enumerate().map(|(i, m)| (m.key.clone(), i));
            self.0 = Some(map.collect());
        }
        match &self.0 {
            Some(map) => map.get(key).copied(),
            None => merged.iter().position(|m| &*m.key == key),
        }
    }

    fn push(&mut self, merged: &mut Vec<ResolvedEntry>, r: ResolvedEntry) {
        if let Some(map) = &mut self.0 {
            map.insert(r.key.clone(), merged.len());
        }
        merged.push(r);
    }
}

/// Reports each SNMPv3 value of the table at `path` (`[snmp]` or a host's `snmp`) that
/// is wrong by itself ([`UsmSection::wrong_values`]) at its key, whether or not a host
/// polls SNMP with it: a host of ICMP items alone is given SNMP ones by a template later.
fn wrong_usm_values(c: &mut Collector<'_>, path: &[Seg<'_>], fields: &UsmSection) {
    for (field, why) in fields.wrong_values() {
        c.push(&under(path, [Seg::Key(field)]), why);
    }
}

/// SNMPv3 fields given where the version is not 3: without this, they were ignored and
/// the devices polled in clear with the community.
fn v3_ignored(version: SnmpVersion) -> String {
    let v = match version {
        SnmpVersion::V1 => "1",
        _ => "2c",
    };
    format!("SNMPv3 settings (security_name, auth_*, priv_*) but version {v}: set version = \"3\" (they would be ignored: polled with SNMPv{v} and the community, in clear)")
}

/// Why an SNMPv1/v2c community is refused, if it is, and what to write: an empty one
/// or a Zabbix user macro (`{$SNMP_COMMUNITY}`, Zabbix's default in an SNMP
/// interface), which no agent takes (every poll would time out); `whose` names the
/// host that takes `[snmp]`'s (`" (hosts[0] polls SNMPv2c with it)"`), or is empty.
fn community_problem(community: &str, whose: &str) -> Option<String> {
    if community.is_empty() {
        Some(format!("an empty community{whose}: SNMPv1/v2c agents answer no request without theirs, so every poll would time out (Zabbix refuses it too); write the agent's, e.g. community = \"public\", or set version = \"3\" for SNMPv3"))
    } else if zabbix_macro(community) {
        Some(macro_left(&format!("the community{whose}")))
    } else {
        None
    }
}

/// What is wrong with a host name (or a range's name pattern), if anything. Zabbix
/// refuses these too: an empty name, blanks at its ends (`"sw-1 "`, pasted, would be
/// another host than `"sw-1"`: other itemids, another history), control characters.
fn name_problem(name: &str) -> Option<&'static str> {
    if name.trim().is_empty() {
        Some("is empty")
    } else if name.trim() != name {
        Some("has blanks at its start or end (another host than without them)")
    } else if name.chars().any(char::is_control) {
        Some("has a control character (a line break, a tab)")
    } else {
        None
    }
}

fn host_spec(
    name: Arc<str>,
    ip: IpAddr,
    items: Vec<ResolvedEntry>,
    snmp: Option<Arc<SnmpParams>>,
) -> HostSpec {
    let has_snmp = items
        .iter()
        .any(|i| matches!(i.kind, ItemKind::Snmp { .. }));
    // A new exact-size Vec, not an in-place collect over `items`' allocation: that one
    // would be shrunk in place, leaving a small hole per host in the loader's heap.
    let count = items.iter().map(ResolvedEntry::count).sum();
    let mut specs = Vec::with_capacity(count);
    for it in items {
        // One item per index (its key, the OID with the index's arcs); none
        // for an item without indices, which moves as it is.
        let rows: Vec<(Arc<str>, ItemKind)> = match &it.kind {
            ItemKind::Snmp { oid } => it
                .rows()
                // Within MAX_ARCS: checked when the rows were listed or applied.
                .map(|r| {
                    (
                        it.row_key(r),
                        ItemKind::Snmp {
                            oid: oid.descendant(r.arcs()),
                        },
                    )
                })
                .collect(),
            _ => Vec::new(),
        };
        let ResolvedEntry {
            key,
            itemid,
            value_type,
            interval,
            kind,
            pre,
            ..
        } = it;
        // Validated to at most a day: fits.
        let interval_ms = u32::try_from(interval.as_millis()).unwrap_or(u32::MAX);
        let spec = |key: Arc<str>, kind, pre| ItemSpec {
            itemid: itemid.unwrap_or_else(|| derive_itemid(&name, &key)),
            key,
            value_type,
            interval_ms,
            kind,
            pre,
        };
        if rows.is_empty() {
            specs.push(spec(key, kind, pre));
        } else {
            specs.extend(rows.into_iter().map(|(k, o)| spec(k, o, pre.clone())));
        }
    }
    HostSpec {
        name,
        ip,
        snmp: if has_snmp { snmp } else { None },
        items: specs,
    }
}

impl Config {
    /// The `(i, N)` process shard: `--shard` wins over `daemon.shard`; `(0, 1)` = all.
    pub fn process_shard(&self, cli: Option<(u32, u32)>) -> (u32, u32) {
        cli.or_else(|| {
            self.daemon
                .shard
                .as_deref()
                .and_then(|s| parse_shard(s).ok())
        })
        .unwrap_or((0, 1))
    }

    /// Move out the hosts this process polls (the rest are dropped): the plan is built
    /// from them and the config keeps no second copy of every item for the daemon's
    /// lifetime.
    pub fn take_hosts_for_shard(&mut self, (i, n): (u32, u32)) -> Vec<HostSpec> {
        let mut hosts = std::mem::take(&mut self.hosts);
        hosts.retain(|h| host_in_process_shard(&h.name, i, n));
        self.discovery
            .retain(|t| host_in_process_shard(&t.host, i, n));
        hosts
    }

    /// The plan of this process's shard (`cli` overrides `daemon.shard`), with its ICMP
    /// phases as `daemon.icmp_phases` asks, built from the
    /// hosts moved out of the config (see [`Self::take_hosts_for_shard`]), which are
    /// dropped as the plan takes them: `release()` runs after every
    /// [`PLAN_RELEASE_HOSTS`] hosts to hand their memory back
    /// ([`poller::plan::Plan::build_releasing`]).
    pub fn take_plan(
        &mut self,
        cli: Option<(u32, u32)>,
        release: impl FnMut(),
    ) -> poller::plan::Plan {
        let shard = self.process_shard(cli);
        let hosts = self.take_hosts_for_shard(shard);
        let mut plan = poller::plan::Plan::build_releasing(hosts, PLAN_RELEASE_HOSTS, release);
        if self.daemon.icmp_phases == IcmpPhases::Grouped {
            plan.group_icmp_phases(self.daemon.icmp_batch_hosts);
        }
        plan
    }

    /// Where this process keeps the rows discovery found: `daemon.discovery_file`, or,
    /// for one process shard of several (`cli` overrides `daemon.shard`), that name
    /// with `.shard-I-of-N` before its extension: processes sharing one config and
    /// folder must not overwrite each other's rows.
    pub fn discovery_file(&self, cli: Option<(u32, u32)>) -> PathBuf {
        share_file(&self.daemon.discovery_file, self.process_shard(cli))
    }

    /// The discovery files the other process shares of `daemon.discovery_file` saved
    /// (and the one of a single process), newest first, this process's own
    /// ([`Self::discovery_file`]) left out: where a start after a change of shares
    /// finds the rows of hosts that moved to it.
    pub fn other_shares_discovery_files(&self, cli: Option<(u32, u32)>) -> Vec<PathBuf> {
        let f = &self.daemon.discovery_file;
        let own = self.discovery_file(cli);
        let (Some(base), Some(stem)) = (f.file_name(), f.file_stem()) else {
            return Vec::new();
        };
        let (base, stem) = (base.to_string_lossy(), stem.to_string_lossy());
        // A name [`share_file`] gives for the share it names.
        let is_share = |name: &str| {
            let Some(rest) = name.strip_prefix(&format!("{stem}.shard-")) else {
                return false;
            };
            let shard = (rest.split('.').next())
                .and_then(|s| s.split_once("-of-"))
                .and_then(|(i, n)| Some((i.parse().ok()?, n.parse().ok()?)));
            shard.is_some_and(|s| share_file(f, s).file_name() == Some(name.as_ref()))
        };
        let folder = match f.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => std::path::Path::new("."),
        };
        let Ok(entries) = std::fs::read_dir(folder) else {
            return Vec::new();
        };
        let mut files: Vec<(std::time::SystemTime, PathBuf)> = entries
            .flatten()
            .filter(|e| {
                let name = e.file_name();
                let name = name.to_string_lossy();
                name == base || is_share(&name)
            })
            .map(|e| f.with_file_name(e.file_name()))
            .filter(|p| *p != own)
            .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
            .collect();
        files.sort_by(|a, b| b.cmp(a));
        files.into_iter().map(|(_, p)| p).collect()
    }

    /// Total items over all hosts.
    pub fn item_count(&self) -> usize {
        self.hosts.iter().map(|h| h.items.len()).sum()
    }
}

#[cfg(test)]
mod tests;
