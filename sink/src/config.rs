//! Configuration of the sink: the daemon's `[clickhouse]` TOML section
//! ([`ClickHouseConfig`]) and the spool settings taken from `[daemon]` ([`SpoolConfig`]).
//!
//! Durations are human-readable strings (`"1s"`, `"250ms"`, `"90days"`) parsed with
//! `humantime`. The password never appears in `Debug` output, logs or errors: `Debug` is
//! written by hand and URLs are logged through [`redact_url`].

use crate::row::Table;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// The longest duration a config or a command line may give: 100 years. A longer one
/// is refused where it is read, so that no instant plus a duration (or twice one) read
/// there can overflow.
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 86_400);

/// Parses a humantime duration (`"1s"`, `"500ms"`, `"30d"`) of at most
/// [`MAX_DURATION`]: every duration of the config and of the command line.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    match humantime::parse_duration(s) {
        // humantime's "M" is a month; in Zabbix (and to most readers of "5M" beside
        // "5m") it is minutes: an interval meant as minutes would poll once a month.
        Ok(_) if s.split(|c: char| !c.is_alphabetic()).any(|unit| unit == "M") => Err(format!(
            "invalid duration {s:?}: \"M\" would be months; write minutes as \"m\" (e.g. {:?}), months as \"months\"",
            s.replace('M', "m")
        )),
        Ok(d) if d <= MAX_DURATION => Ok(d),
        Ok(_) => Err(format!("invalid duration {s:?}: longer than 100 years")),
        // What Zabbix takes and netpoller does not, said as such.
        Err(_) if s.trim_start().starts_with("{$") => Err(format!(
            "invalid duration {s:?}: a Zabbix user macro; netpoller resolves no macros: write its value, e.g. \"1m\""
        )),
        Err(_) if s.contains([';', '/']) => Err(format!(
            "invalid duration {s:?}: Zabbix's flexible and scheduling intervals are not supported; give the fixed part, e.g. {:?}",
            s.split(';').next().unwrap_or_default()
        )),
        Err(_) if s.trim().parse::<f64>().is_ok() => Err(format!(
            "invalid duration {s:?}: a unit is needed, e.g. \"{0}s\" (seconds, as Zabbix reads a bare number) or \"{0}ms\"",
            s.trim()
        )),
        // humantime's own words list "months" and "years" among the units with "(and few
        // variations)": a Zabbix reader learns no spelling from them. The number given,
        // with the units meant.
        Err(humantime::DurationError::UnknownUnit { unit, value, .. }) => Err(format!(
            "invalid duration {s:?}: {unit:?} is no time unit: write e.g. \"{value}s\", \"{value}m\" (minutes), \"{value}h\", \"{value}d\" or \"{value}ms\""
        )),
        Err(e) => Err(format!("invalid duration {s:?}: {e}")),
    }
}

/// A duration as the config gives it: a string, or (a mistake said as such) a number,
/// told the strings it may mean: seconds first (Zabbix reads a bare number as seconds),
/// or, `millis_first`, milliseconds (a setting whose Zabbix counterpart is in ms: the
/// ICMP keys' interval and timeout parameters).
struct DurationVisitor {
    millis_first: bool,
}

impl serde::de::Visitor<'_> for DurationVisitor {
    type Value = Duration;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.millis_first {
            true => "a duration string such as \"500ms\"",
            false => "a duration string such as \"30s\"",
        })
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Duration, E> {
        parse_duration(s).map_err(E::custom)
    }

    fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Duration, E> {
        Err(E::custom(match self.millis_first {
            true => format!(
                "durations are strings with a unit, not {n}: \"{n}ms\" (as the ICMP keys' interval and timeout parameters, in ms), or \"{n}s\""
            ),
            false => format!(
                "durations are strings with a unit, not {n}: \"{n}s\" (Zabbix reads a bare number as seconds), \"{n}m\", \"{n}days\""
            ),
        }))
    }

    fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Duration, E> {
        self.visit_i64(n.min(i64::MAX as u64) as i64)
    }
}

/// Serde helpers for durations read with [`parse_duration`].
pub mod duration_str {
    use serde::{Deserializer, Serializer};
    use std::time::Duration;

    /// Parses a humantime string (a number is refused with the string meant).
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        d.deserialize_any(super::DurationVisitor {
            millis_first: false,
        })
    }

    /// [`deserialize`], a number told to be milliseconds first (`timeout = 500` is
    /// `"500ms"`): for a setting a Zabbix reader gives in ms, where seconds first would
    /// point to a value that passes and is wrong (500 s for an ICMP timeout).
    pub fn deserialize_millis_first<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        d.deserialize_any(super::DurationVisitor { millis_first: true })
    }

    /// Formats as a humantime string.
    pub fn serialize<S: Serializer>(v: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*v).to_string())
    }

    /// Same for `Option<Duration>` (absent key = `None`).
    pub mod option {
        use serde::{Deserialize, Deserializer, Serializer};
        use std::time::Duration;

        /// Parses an optional humantime string.
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
            /// The duration itself, read as [`super::deserialize`] does.
            struct Given(Duration);
            impl<'de> Deserialize<'de> for Given {
                fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Given, D::Error> {
                    super::deserialize(d).map(Given)
                }
            }
            Ok(Option::<Given>::deserialize(d)?.map(|g| g.0))
        }

        /// Formats an optional humantime string.
        pub fn serialize<S: Serializer>(v: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
            match v {
                Some(v) => s.serialize_str(&humantime::format_duration(*v).to_string()),
                None => s.serialize_none(),
            }
        }
    }
}

/// HTTP body compression of INSERTs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// Plain RowBinary: cheapest on loopback.
    None,
    /// ClickHouse native LZ4 framing with CityHash128 checksums (`decompress=1`), which
    /// every server since long before 18.16 accepts. Default: it pays across a network.
    #[default]
    Lz4,
}

/// The `[clickhouse]` section.
#[derive(Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ClickHouseConfig {
    /// One HTTP endpoint, e.g. `"http://127.0.0.1:8123"`. Default: none. At least one of
    /// `url` / `urls` is required.
    #[serde(default)]
    pub url: Option<String>,
    /// Several endpoints (local tables of cluster nodes); INSERTs go round-robin.
    /// Default: empty. Combined with `url` if both are given (`url` first).
    #[serde(default)]
    pub urls: Vec<String>,
    /// Database holding the history tables. Default `"glaber"`.
    #[serde(default = "default_database")]
    pub database: String,
    /// ClickHouse user. Default `"default"`.
    #[serde(default = "default_user")]
    pub user: String,
    /// Password. Default empty. Never printed.
    #[serde(default)]
    pub password: String,
    /// Flush a table's batch when it holds this many rows. Default 50000.
    #[serde(default = "default_batch_rows")]
    pub batch_rows: usize,
    /// Flush a table's batch when its encoded size reaches this many bytes.
    /// Default 16 MiB; at most 1 GiB.
    #[serde(default = "default_batch_bytes")]
    pub batch_bytes: usize,
    /// Flush a table's batch this long after its first row arrived. Default `"5s"`:
    /// ClickHouse wants about one INSERT per second for the whole server, of 1,000 rows
    /// or more (each makes a part to merge), and a daemon writes 2 to 5 tables; below
    /// `batch_rows / flush_interval` rows per second per table this decides, above it
    /// `batch_rows` does. The price: rows reach ClickHouse up to this much later, and a
    /// `kill -9` loses up to this much (a clean stop flushes everything).
    #[serde(default = "default_flush_interval", with = "duration_str")]
    pub flush_interval: Duration,
    /// INSERTs in flight at once, over all tables, urls and spool replay. Default 4.
    #[serde(default = "default_inflight")]
    pub max_inflight_inserts: usize,
    /// Body compression. Default `"lz4"`.
    #[serde(default)]
    pub compression: Compression,
    /// History kept by ClickHouse (`TTL day + INTERVAL <days> DAY`), e.g. `"90days"`;
    /// rounded up to whole days. Default: none (keep forever). Emitted only on servers
    /// that support TTL (19.6+).
    #[serde(default, with = "duration_str::option")]
    pub retention: Option<Duration>,
    /// Write hourly trends (`trends_dbl`, `trends_uint`: min, max, average and count of
    /// each numeric item's values per hour), which Zabbix's server computes from the
    /// values it receives and never sees from this daemon. Default `true`; with `false`
    /// the trends tables are neither created nor checked.
    #[serde(default = "default_trends")]
    pub trends: bool,
    /// Trends kept by ClickHouse, like `retention` (usually longer: Glaber's default is
    /// 24 months). Default: none (keep forever).
    #[serde(default, with = "duration_str::option")]
    pub trends_retention: Option<Duration>,
    /// Time allowed for one INSERT (send and answer). Default `"30s"`.
    #[serde(default = "default_request_timeout", with = "duration_str")]
    pub request_timeout: Duration,
    /// Attempts of one batch (first try included) before it goes to the spool.
    /// Default 3.
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    /// First retry delay; doubled per attempt, with jitter. Default `"200ms"`.
    #[serde(default = "default_backoff_initial", with = "duration_str")]
    pub retry_backoff: Duration,
    /// Longest delay between attempts, and between probes of an unreachable server.
    /// Default `"5s"`.
    #[serde(default = "default_backoff_max", with = "duration_str")]
    pub retry_backoff_max: Duration,
}

fn default_database() -> String {
    "glaber".into()
}
fn default_user() -> String {
    "default".into()
}
/// Most rows of one batch: ClickHouse's default `max_insert_block_size`. The server
/// cuts a larger INSERT into blocks of this many rows, each stored on its own: one that
/// fails part-way has stored some, and retried (or spooled and replayed) they would be
/// stored twice. A batch within it is one block, stored whole or not at all.
pub const MAX_BATCH_ROWS: usize = 1 << 20;

fn default_batch_rows() -> usize {
    50_000
}
fn default_batch_bytes() -> usize {
    16 << 20
}
fn default_flush_interval() -> Duration {
    Duration::from_secs(5)
}
fn default_inflight() -> usize {
    4
}
fn default_trends() -> bool {
    true
}
fn default_request_timeout() -> Duration {
    Duration::from_secs(30)
}
fn default_max_attempts() -> u32 {
    3
}
fn default_backoff_initial() -> Duration {
    Duration::from_millis(200)
}
fn default_backoff_max() -> Duration {
    Duration::from_secs(5)
}

impl Default for ClickHouseConfig {
    fn default() -> Self {
        ClickHouseConfig {
            url: None,
            urls: Vec::new(),
            database: default_database(),
            user: default_user(),
            password: String::new(),
            batch_rows: default_batch_rows(),
            batch_bytes: default_batch_bytes(),
            flush_interval: default_flush_interval(),
            max_inflight_inserts: default_inflight(),
            compression: Compression::default(),
            retention: None,
            trends: default_trends(),
            trends_retention: None,
            request_timeout: default_request_timeout(),
            max_attempts: default_max_attempts(),
            retry_backoff: default_backoff_initial(),
            retry_backoff_max: default_backoff_max(),
        }
    }
}

impl fmt::Debug for ClickHouseConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClickHouseConfig")
            .field("url", &self.url.as_deref().map(redact_url))
            .field(
                "urls",
                &self.urls.iter().map(|u| redact_url(u)).collect::<Vec<_>>(),
            )
            .field("database", &self.database)
            .field("user", &self.user)
            .field(
                "password",
                &if self.password.is_empty() {
                    ""
                } else {
                    "<redacted>"
                },
            )
            .field("batch_rows", &self.batch_rows)
            .field("batch_bytes", &self.batch_bytes)
            .field("flush_interval", &self.flush_interval)
            .field("max_inflight_inserts", &self.max_inflight_inserts)
            .field("compression", &self.compression)
            .field("retention", &self.retention)
            .field("trends", &self.trends)
            .field("trends_retention", &self.trends_retention)
            .field("request_timeout", &self.request_timeout)
            .field("max_attempts", &self.max_attempts)
            .field("retry_backoff", &self.retry_backoff)
            .field("retry_backoff_max", &self.retry_backoff_max)
            .finish()
    }
}

impl ClickHouseConfig {
    /// All endpoints: `url` first, then `urls`, without duplicates.
    pub fn endpoints(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for u in self.url.iter().chain(self.urls.iter()) {
            let u = u.trim_end_matches('/').to_string();
            if !out.contains(&u) {
                out.push(u);
            }
        }
        out
    }

    /// Retention of `table` in whole days (rounded up; [`Self::validate`] refuses less
    /// than one), if configured:
    /// `trends_retention` for the trends tables, `retention` for the others.
    pub fn retention_days(&self, table: Table) -> Option<u64> {
        let r = if table.is_trends() {
            self.trends_retention
        } else {
            self.retention
        };
        r.map(|d| d.as_secs().div_ceil(86_400).max(1))
    }

    /// The tables this configuration writes: the trends tables only with `trends`.
    pub fn tables(&self) -> impl Iterator<Item = Table> + '_ {
        Table::ALL
            .into_iter()
            .filter(|t| self.trends || !t.is_trends())
    }

    /// Every problem with this section, as `(key, message)`; empty when valid. Keys are
    /// relative to `[clickhouse]` (e.g. `"batch_rows"`).
    pub fn validate(&self) -> Vec<(&'static str, String)> {
        let mut p = Vec::new();
        let eps = self.endpoints();
        if eps.is_empty() {
            p.push((
                "url",
                "set `url` or `urls` (e.g. \"http://127.0.0.1:8123\")".to_string(),
            ));
        }
        for u in &eps {
            // Named by the key the file used for it.
            let key = match &self.url {
                Some(one) if one.trim_end_matches('/') == u => "url",
                _ => "urls",
            };
            if !(u.starts_with("http://") || u.starts_with("https://")) {
                p.push((key, format!("{} is not an http:// URL", redact_url(u))));
            } else if u.starts_with("https://") {
                p.push((
                    key,
                    format!(
                        "{}: https is not built in; use http:// (or a local TLS proxy)",
                        redact_url(u)
                    ),
                ));
            }
            if has_userinfo(u) || query_credentials(u).is_some() {
                p.push((
                    key,
                    "put credentials in `user` / `password`, not in the URL".to_string(),
                ));
            }
        }
        if !is_identifier(&self.database) {
            p.push((
                "database",
                format!(
                    "{:?} is not a plain identifier ([A-Za-z_][A-Za-z0-9_]*)",
                    self.database
                ),
            ));
        }
        if !(1..=MAX_BATCH_ROWS).contains(&self.batch_rows) {
            p.push((
                "batch_rows",
                format!(
                    "must be between 1 and {MAX_BATCH_ROWS} (ClickHouse's max_insert_block_size: \
                     a larger INSERT is stored as several blocks, and one that fails part-way \
                     leaves rows stored that its retry or the spool then inserts again)"
                ),
            ));
        }
        if !(1024..=1 << 30).contains(&self.batch_bytes) {
            // Spool records carry a u32 length; ClickHouse reads strings up to 1 GiB.
            p.push((
                "batch_bytes",
                "must be between 1024 and 1073741824 (1 GiB)".to_string(),
            ));
        }
        if self.flush_interval.is_zero() {
            p.push(("flush_interval", "must be greater than 0".to_string()));
        }
        if self.max_inflight_inserts == 0 {
            p.push(("max_inflight_inserts", "must be at least 1".to_string()));
        }
        if self.max_attempts == 0 {
            p.push(("max_attempts", "must be at least 1".to_string()));
        }
        if self.request_timeout.is_zero() {
            p.push(("request_timeout", "must be greater than 0".to_string()));
        }
        // ClickHouse keeps whole days (a TTL in days): less than one is a unit mistaken,
        // `"3m"` (minutes) for three months, which would have become a day.
        for (key, r) in [
            ("retention", self.retention),
            ("trends_retention", self.trends_retention),
        ] {
            if let Some(d) = r.filter(|d| d.as_secs() < 86_400) {
                p.push((
                    key,
                    format!(
                        "{} is less than a day (`m` is minutes, `h` hours): ClickHouse keeps whole days; write e.g. \"90days\" or \"3months\"",
                        humantime::format_duration(d)
                    ),
                ));
            }
        }
        if self.retry_backoff.is_zero() || self.retry_backoff_max < self.retry_backoff {
            p.push((
                "retry_backoff",
                "must be > 0 and not above retry_backoff_max".to_string(),
            ));
        }
        p
    }
}

/// Spool settings (from `daemon.spool_dir`, `daemon.spool_max_bytes`,
/// `daemon.spool_fsync_interval`).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SpoolConfig {
    /// Directory of the segment files; created if missing. The sink holds an exclusive
    /// lock on `<dir>/spool.lock` while it runs.
    pub dir: PathBuf,
    /// Cap on the spool size; beyond it the oldest segments are deleted and their rows
    /// counted as dropped. Default 1 GiB.
    #[serde(default = "default_spool_max")]
    pub max_bytes: u64,
    /// Longest time between an append and its fsync: the crash window of a power loss.
    /// Default `"1s"`. (A killed process loses nothing already written: the page cache
    /// survives it.)
    #[serde(default = "default_fsync", with = "duration_str")]
    pub fsync_interval: Duration,
}

fn default_spool_max() -> u64 {
    1 << 30
}
fn default_fsync() -> Duration {
    Duration::from_secs(1)
}

impl SpoolConfig {
    /// A spool in `dir` with default cap and fsync interval.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        SpoolConfig {
            dir: dir.into(),
            max_bytes: default_spool_max(),
            fsync_interval: default_fsync(),
        }
    }
}

/// `[A-Za-z_][A-Za-z0-9_]*`: safe to splice into SQL.
pub fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn has_userinfo(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    authority.contains('@')
}

/// Where the query string of `url` begins, if it names ClickHouse's HTTP credentials
/// (`?user=...&password=...`, which ClickHouse takes as well as userinfo).
fn query_credentials(url: &str) -> Option<usize> {
    let q = url.find('?')? + 1;
    let query = url[q..].split('#').next().unwrap_or_default();
    query
        .split('&')
        .map(|pair| pair.split('=').next().unwrap_or_default())
        .any(|k| k.eq_ignore_ascii_case("user") || k.eq_ignore_ascii_case("password"))
        .then_some(q)
}

/// `url` with any `user:password@` part replaced by `<redacted>@`, and a query string
/// that names credentials by `<redacted>`, for logs.
pub fn redact_url(url: &str) -> String {
    let url = match query_credentials(url) {
        Some(q) => format!("{}<redacted>", &url[..q]),
        None => url.to_string(),
    };
    if !has_userinfo(&url) {
        return url;
    }
    let (scheme, rest) = url.split_once("://").unwrap_or(("", &url));
    let at = rest.find('@').map_or(0, |i| i + 1);
    format!("{scheme}://<redacted>@{}", &rest[at..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Wrap {
        clickhouse: ClickHouseConfig,
    }

    #[test]
    fn defaults_and_durations() {
        let w: Wrap = toml::from_str(
            "[clickhouse]\nurl = \"http://127.0.0.1:8123\"\npassword = \"s3cret\"\nflush_interval = \"250ms\"\nretention = \"90days\"\n",
        )
        .unwrap();
        let c = w.clickhouse;
        assert_eq!(c.database, "glaber");
        assert_eq!(c.batch_rows, 50_000);
        assert_eq!(c.flush_interval, Duration::from_millis(250));
        // About one INSERT per second over the 2 to 5 tables at low rates, not per table.
        let bare: Wrap = toml::from_str("[clickhouse]\nurl = \"http://127.0.0.1:8123\"\n").unwrap();
        assert_eq!(bare.clickhouse.flush_interval, Duration::from_secs(5));
        assert_eq!(c.retention_days(Table::Uint), Some(90));
        assert_eq!(c.retention_days(Table::TrendsUint), None);
        assert!(c.trends);
        assert_eq!(c.tables().count(), 6);
        let off = ClickHouseConfig {
            trends: false,
            trends_retention: Some(Duration::from_secs(86_400 * 700 + 1)),
            ..c.clone()
        };
        assert_eq!(off.tables().collect::<Vec<_>>(), Table::ALL[..4]);
        assert_eq!(off.retention_days(Table::TrendsDbl), Some(701));
        assert_eq!(c.compression, Compression::Lz4);
        assert!(c.validate().is_empty(), "{:?}", c.validate());
        let dbg = format!("{c:?}");
        assert!(!dbg.contains("s3cret"), "{dbg}");
        assert!(dbg.contains("<redacted>"));
    }

    #[test]
    fn unknown_field_and_bad_duration_are_errors() {
        assert!(toml::from_str::<Wrap>("[clickhouse]\nurl=\"http://x\"\nbatch_size=1\n").is_err());
        let e = toml::from_str::<Wrap>("[clickhouse]\nflush_interval=\"soon\"\n")
            .err()
            .unwrap();
        assert!(e.to_string().contains("invalid duration"), "{e}");
    }

    /// "5M" is five months to humantime, five minutes to someone who writes Zabbix
    /// intervals: refused, with both spellings; "m" and "months" are taken.
    #[test]
    fn a_capital_m_is_refused_as_months_or_minutes() {
        for s in ["5M", "1h5M", "5M 10s"] {
            let e = parse_duration(s).unwrap_err();
            assert!(
                e.contains("\"M\" would be months; write minutes as \"m\"")
                    && e.contains(&format!("{:?}", s.replace('M', "m"))),
                "{s}: {e}"
            );
        }
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert!(parse_duration("3months").unwrap() > Duration::from_secs(90 * 86_400));
    }

    /// A unit humantime does not know (`"1x"`, Zabbix's `"10sec"` is one it does) is told
    /// the units meant with the number given, not humantime's list "(and few
    /// variations)".
    #[test]
    fn an_unknown_unit_is_told_the_units_with_its_number() {
        assert_eq!(
            parse_duration("1x").unwrap_err(),
            "invalid duration \"1x\": \"x\" is no time unit: write e.g. \"1s\", \"1m\" (minutes), \"1h\", \"1d\" or \"1ms\""
        );
        assert!(parse_duration("10 mn")
            .unwrap_err()
            .contains("\"mn\" is no time unit: write e.g. \"10s\", \"10m\" (minutes)"));
        assert_eq!(parse_duration("10sec"), Ok(Duration::from_secs(10)));
    }

    #[test]
    fn validation_names_keys() {
        let c = ClickHouseConfig {
            database: "glaber; DROP".into(),
            batch_rows: 0,
            batch_bytes: 2 << 30,
            urls: vec!["http://u:pw@127.0.0.1:8123".into()],
            ..ClickHouseConfig::default()
        };
        let keys: Vec<_> = c.validate().into_iter().map(|(k, _)| k).collect();
        assert!(
            keys.contains(&"database") && keys.contains(&"batch_rows") && keys.contains(&"urls")
        );
        assert!(!format!("{:?}", c.validate()).contains("pw"));
        // Within one ClickHouse block, or an INSERT failing part-way stores some rows.
        for (rows, ok) in [
            (MAX_BATCH_ROWS, true),
            (MAX_BATCH_ROWS + 1, false),
            (1, true),
        ] {
            let c = ClickHouseConfig {
                batch_rows: rows,
                url: Some("http://127.0.0.1:8123".into()),
                ..ClickHouseConfig::default()
            };
            let keys: Vec<_> = c.validate().into_iter().map(|(k, _)| k).collect();
            assert_eq!(keys.is_empty(), ok, "{rows}: {keys:?}");
        }
        assert!(ClickHouseConfig::default()
            .validate()
            .iter()
            .any(|(k, _)| *k == "url"));
        // The key the file used: `url` for the one in `url`.
        let c = ClickHouseConfig {
            url: Some("https://127.0.0.1:8443".into()),
            urls: vec!["ftp://127.0.0.2".into()],
            ..ClickHouseConfig::default()
        };
        let keys: Vec<_> = c.validate().into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["url", "urls"]);
    }

    #[test]
    fn redacts_userinfo() {
        assert_eq!(redact_url("http://a:b@h:1/x"), "http://<redacted>@h:1/x");
        assert_eq!(redact_url("http://h:1/x@y"), "http://h:1/x@y");
    }

    /// ClickHouse also takes credentials as URL parameters: such a URL is refused as
    /// one with userinfo is ("put credentials in user / password"), and shown without
    /// them. It passed the validator, and its password went to every log line and
    /// error that names the URL, where the docs promise none.
    #[test]
    fn credentials_in_the_query_are_refused_and_redacted() {
        let url = "http://127.0.0.1:8123/?user=netpoller&password=s3cret";
        let c = ClickHouseConfig {
            url: Some(url.into()),
            urls: vec!["ftp://127.0.0.2/?PASSWORD=s3cret#x".into()],
            ..ClickHouseConfig::default()
        };
        let problems = c.validate();
        assert!(
            problems
                .iter()
                .any(|(k, m)| *k == "url" && m.contains("not in the URL")),
            "{problems:?}"
        );
        assert!(!format!("{problems:?}").contains("s3cret"), "{problems:?}");
        assert!(!format!("{c:?}").contains("s3cret"));
        assert_eq!(redact_url(url), "http://127.0.0.1:8123/?<redacted>");
        // Other parameters are not credentials.
        assert_eq!(
            redact_url("http://127.0.0.1:8123/?async_insert=1"),
            "http://127.0.0.1:8123/?async_insert=1"
        );
    }

    #[test]
    fn endpoints_merge_and_dedup() {
        let c = ClickHouseConfig {
            url: Some("http://127.0.0.1:8123/".into()),
            urls: vec![
                "http://127.0.0.1:8123".into(),
                "http://127.0.0.2:8123".into(),
            ],
            ..ClickHouseConfig::default()
        };
        assert_eq!(
            c.endpoints(),
            vec!["http://127.0.0.1:8123", "http://127.0.0.2:8123"]
        );
    }
}
