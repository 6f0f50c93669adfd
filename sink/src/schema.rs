//! Glaber 3.x history schema: DDL for a given server version, creation of what is
//! missing, and verification of existing tables.
//!
//! Invariants:
//! * Existing tables are never altered or dropped: [`apply`] only runs
//!   `CREATE ... IF NOT EXISTS`, then [`verify`] reports every incompatible column by
//!   table and name.
//! * `TTL` is emitted only for servers ≥ 19.6 and `ttl_only_drop_parts = 1` only for
//!   ≥ 20.1 (conservatively later than its introduction), so the DDL runs unchanged on
//!   the Debian 18.16 server and on current releases.
//! * With several `urls` every node gets its own local tables (writes go round-robin to
//!   local tables; reads through a Distributed table are the operator's business).

use crate::config::{redact_url, ClickHouseConfig};
use crate::row::Table;
use crate::writer::query_client;
use std::fmt;

/// A ClickHouse server version (`SELECT version()`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ServerVersion {
    /// Major (year-based since 2018: 18, 19, ..., 25).
    pub major: u32,
    /// Minor.
    pub minor: u32,
    /// Patch.
    pub patch: u32,
}

impl ServerVersion {
    /// A current release, used when printing DDL without a reachable server.
    pub const CURRENT: ServerVersion = ServerVersion {
        major: 25,
        minor: 8,
        patch: 0,
    };

    /// Parses `"18.16.1"` or `"25.8.1.5101"`.
    pub fn parse(s: &str) -> Option<ServerVersion> {
        let mut it = s.trim().split('.').map(|p| p.parse::<u32>());
        let major = it.next()?.ok()?;
        let minor = it.next()?.ok()?;
        let patch = it.next().and_then(Result::ok).unwrap_or(0);
        Some(ServerVersion {
            major,
            minor,
            patch,
        })
    }

    /// `TTL` on MergeTree tables (19.6+).
    pub fn supports_ttl(self) -> bool {
        (self.major, self.minor) >= (19, 6)
    }

    /// The `ttl_only_drop_parts` MergeTree setting (treated as 20.1+).
    pub fn supports_ttl_only_drop_parts(self) -> bool {
        self.major >= 20
    }
}

impl fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// DDL statements (database, then the tables of [`ClickHouseConfig::tables`], in
/// that order) for `cfg` on a server of `version`. Every statement is idempotent
/// (`IF NOT EXISTS`).
pub fn ddl(cfg: &ClickHouseConfig, version: ServerVersion) -> Vec<String> {
    let db = &cfg.database;
    let mut out = vec![format!("CREATE DATABASE IF NOT EXISTS {db}")];
    for table in cfg.tables() {
        let cols = table
            .columns()
            .iter()
            .chain(table.glaber_only_columns())
            .map(|(n, t)| format!("    {n} {t}"))
            .collect::<Vec<_>>()
            .join(",\n");
        let mut s = format!(
            "CREATE TABLE IF NOT EXISTS {db}.{name}\n(\n{cols}\n)\nENGINE = MergeTree()\nPARTITION BY toYYYYMM(day)\nORDER BY (itemid, clock)",
            name = table.name()
        );
        if let (Some(days), true) = (cfg.retention_days(table), version.supports_ttl()) {
            s.push_str(&format!("\nTTL day + INTERVAL {days} DAY"));
            if version.supports_ttl_only_drop_parts() {
                // Whole-part expiry: row-by-row TTL deletes caused daily CPU storms.
                s.push_str("\nSETTINGS ttl_only_drop_parts = 1");
            }
        }
        out.push(s);
    }
    out
}

/// One incompatibility found by [`verify`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaProblem {
    /// The table does not exist.
    MissingTable {
        /// `database.table`.
        table: String,
    },
    /// A column the sink writes is absent.
    MissingColumn {
        /// `database.table`.
        table: String,
        /// Column name.
        column: &'static str,
        /// Type the sink writes.
        expected: &'static str,
    },
    /// A column exists with a type RowBinary of the sink cannot fill.
    WrongType {
        /// `database.table`.
        table: String,
        /// Column name.
        column: &'static str,
        /// Type the sink writes.
        expected: &'static str,
        /// Type found on the server.
        found: String,
    },
}

impl fmt::Display for SchemaProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SchemaProblem::MissingTable { table } => write!(f, "table {table} does not exist"),
            SchemaProblem::MissingColumn {
                table,
                column,
                expected,
            } => {
                write!(
                    f,
                    "table {table}: column `{column}` ({expected}) is missing"
                )
            }
            SchemaProblem::WrongType {
                table,
                column,
                expected,
                found,
            } => {
                write!(
                    f,
                    "table {table}: column `{column}` has type {found}, expected {expected}"
                )
            }
        }
    }
}

/// Errors of schema operations.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// The server could not be queried (connection, auth, SQL error). (The client's
    /// error is in the message, not a `source()`: it would print twice in a chain.)
    #[error("ClickHouse {url}: {what}: {cause}")]
    Query {
        /// Endpoint, credentials redacted.
        url: String,
        /// What was being done.
        what: String,
        /// Error from the client.
        cause: clickhouse::error::Error,
    },
    /// `SELECT version()` returned something unparseable.
    #[error("ClickHouse {url}: unrecognised server version {version:?}")]
    Version {
        /// Endpoint.
        url: String,
        /// What the server said.
        version: String,
    },
    /// Existing tables are incompatible, or (`verify`) tables are missing; nothing was
    /// changed.
    #[error("ClickHouse {url}: {}", problems_text(problems))]
    Incompatible {
        /// Endpoint.
        url: String,
        /// Every problem found.
        problems: Vec<SchemaProblem>,
    },
    /// The configuration has no endpoint.
    #[error("no ClickHouse url configured")]
    NoEndpoint,
}

/// What [`SchemaError::Incompatible`] says: tables only missing are a schema not
/// created yet (`schema --check` before `--apply` or the first `run`), which an
/// operator must not read as tables of a wrong shape.
fn problems_text(problems: &[SchemaProblem]) -> String {
    let list = problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    match problems
        .iter()
        .all(|p| matches!(p, SchemaProblem::MissingTable { .. }))
    {
        true => format!(
            "schema not created: {list} (`netpoller schema --apply` creates the missing tables, as `run` does at start)"
        ),
        false => format!("incompatible schema: {list}"),
    }
}

fn qerr(
    url: &str,
    what: impl Into<String>,
) -> impl FnOnce(clickhouse::error::Error) -> SchemaError {
    let url = redact_url(url);
    let what = what.into();
    move |cause| SchemaError::Query { url, what, cause }
}

/// Version of the server at `url`.
pub async fn server_version(
    cfg: &ClickHouseConfig,
    url: &str,
) -> Result<ServerVersion, SchemaError> {
    let client = query_client(cfg, url);
    let v: String = client
        .query("SELECT version()")
        .fetch_one()
        .await
        .map_err(qerr(url, "SELECT version()"))?;
    ServerVersion::parse(&v).ok_or_else(|| SchemaError::Version {
        url: redact_url(url),
        version: v,
    })
}

/// Whether a server column type is compatible with what the sink writes.
fn compatible(expected: &str, found: &str) -> bool {
    let found = found.trim();
    if found == expected {
        return true;
    }
    match expected {
        // RowBinary of LowCardinality(String) is plain String; DateTime may carry a zone.
        "String" => found == "LowCardinality(String)",
        "DateTime" => found.starts_with("DateTime(") && !found.starts_with("DateTime64"),
        // trends_uint: Glaber declares Int64, other schemas UInt64; the values written
        // are never negative (unsigned, clamped to i64::MAX), whose bytes are the same.
        "Int64" => found == "UInt64",
        _ => false,
    }
}

/// Checks the tables of [`ClickHouseConfig::tables`] on every endpoint; returns every
/// problem of the first endpoint that has any.
pub async fn verify(cfg: &ClickHouseConfig) -> Result<(), SchemaError> {
    let eps = cfg.endpoints();
    if eps.is_empty() {
        return Err(SchemaError::NoEndpoint);
    }
    for url in &eps {
        let problems = problems_at(cfg, url).await?;
        if !problems.is_empty() {
            return Err(SchemaError::Incompatible {
                url: redact_url(url),
                problems,
            });
        }
    }
    Ok(())
}

/// What the sink checks on an endpoint before it inserts there ([`crate::writer`]): the
/// server is ClickHouse (its answer decodes), and which tables it writes to have a
/// column missing or of another type (RowBinary carries no types: a `value` changed
/// from UInt64 to Float64 would store every value as the bits of another number),
/// with their problems. A table that is missing is left to the INSERT's repair; a
/// ClickHouse exception (a user who may not read `system.columns`) finds nothing wrong,
/// and the INSERTs go ahead as they would without this check.
pub async fn check_at(
    cfg: &ClickHouseConfig,
    url: &str,
) -> Result<Vec<(Table, String)>, SchemaError> {
    let problems = match problems_at(cfg, url).await {
        Ok(p) => p,
        Err(SchemaError::Query { cause, .. })
            if matches!(&cause, clickhouse::error::Error::BadResponse(m)
                if crate::writer::exception_code(m).is_some()) =>
        {
            return Ok(Vec::new())
        }
        Err(e) => return Err(e),
    };
    let mut bad: Vec<(Table, String)> = Vec::new();
    for t in cfg.tables() {
        let full = format!("{}.{}", cfg.database, t.name());
        let wrong: Vec<String> = problems
            .iter()
            .filter(|p| match p {
                SchemaProblem::MissingColumn { table, .. }
                | SchemaProblem::WrongType { table, .. } => *table == full,
                SchemaProblem::MissingTable { .. } => false,
            })
            .map(ToString::to_string)
            .collect();
        if !wrong.is_empty() {
            bad.push((t, wrong.join("; ")));
        }
    }
    Ok(bad)
}

async fn problems_at(cfg: &ClickHouseConfig, url: &str) -> Result<Vec<SchemaProblem>, SchemaError> {
    let client = query_client(cfg, url);
    let rows: Vec<(String, String, String)> = client
        .query("SELECT table, name, type FROM system.columns WHERE database = ?")
        .bind(cfg.database.as_str())
        .fetch_all()
        .await
        .map_err(qerr(url, "reading system.columns"))?;
    let mut problems = Vec::new();
    for table in cfg.tables() {
        let full = format!("{}.{}", cfg.database, table.name());
        let have: Vec<_> = rows.iter().filter(|(t, _, _)| t == table.name()).collect();
        if have.is_empty() {
            problems.push(SchemaProblem::MissingTable { table: full });
            continue;
        }
        for (column, expected) in table.columns() {
            match have.iter().find(|(_, n, _)| n == column) {
                None => problems.push(SchemaProblem::MissingColumn {
                    table: full.clone(),
                    column,
                    expected,
                }),
                Some((_, _, found)) if !compatible(expected, found) => {
                    problems.push(SchemaProblem::WrongType {
                        table: full.clone(),
                        column,
                        expected,
                        found: found.clone(),
                    })
                }
                Some(_) => {}
            }
        }
    }
    Ok(problems)
}

/// What [`apply`] did on one endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// Endpoint (credentials redacted).
    pub url: String,
    /// Server version found.
    pub version: ServerVersion,
    /// Tables that did not exist and were created (`database.table`).
    pub created: Vec<String>,
}

/// Creates the database and missing tables on every endpoint (DDL for that server's
/// version), then verifies. Existing tables are left as they are; incompatible ones are
/// reported as [`SchemaError::Incompatible`].
pub async fn apply(cfg: &ClickHouseConfig) -> Result<Vec<Applied>, SchemaError> {
    let eps = cfg.endpoints();
    if eps.is_empty() {
        return Err(SchemaError::NoEndpoint);
    }
    let mut out = Vec::new();
    for url in &eps {
        out.push(within_request_timeout(cfg, url, apply_at(cfg, url)).await?);
    }
    Ok(out)
}

/// `f`, or a [`SchemaError::Query`] that says no answer came within
/// `clickhouse.request_timeout`: a server that takes the connection and never answers
/// held the daemon's start (and `schema`) for good. (The writer bounds its own checks.)
pub async fn within_request_timeout<T>(
    cfg: &ClickHouseConfig,
    url: &str,
    f: impl std::future::Future<Output = Result<T, SchemaError>>,
) -> Result<T, SchemaError> {
    let limit = cfg.request_timeout;
    tokio::time::timeout(limit, f).await.unwrap_or_else(|_| {
        Err(SchemaError::Query {
            url: redact_url(url),
            what: format!(
                "no answer within {} (clickhouse.request_timeout)",
                humantime::format_duration(limit)
            ),
            cause: clickhouse::error::Error::TimedOut,
        })
    })
}

/// [`apply`] on one endpoint: also what the sink runs when an INSERT finds the
/// database or a table missing (a server that was down at start, or wiped since).
pub async fn apply_at(cfg: &ClickHouseConfig, url: &str) -> Result<Applied, SchemaError> {
    let version = server_version(cfg, url).await?;
    let client = query_client(cfg, url);
    let existing: Vec<String> = client
        .query("SELECT name FROM system.tables WHERE database = ?")
        .bind(cfg.database.as_str())
        .fetch_all()
        .await
        .map_err(qerr(url, "reading system.tables"))?;
    let mut created = Vec::new();
    let tables: Vec<Table> = cfg.tables().collect();
    for (i, stmt) in ddl(cfg, version).into_iter().enumerate() {
        client
            .query(&stmt)
            .execute()
            .await
            .map_err(qerr(url, stmt.lines().next().unwrap_or("DDL").to_string()))?;
        if i > 0 {
            let t = tables[i - 1].name();
            if !existing.iter().any(|e| e == t) {
                created.push(format!("{}.{t}", cfg.database));
            }
        }
    }
    let problems = problems_at(cfg, url).await?;
    if !problems.is_empty() {
        return Err(SchemaError::Incompatible {
            url: redact_url(url),
            problems,
        });
    }
    Ok(Applied {
        url: redact_url(url),
        version,
        created,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// `schema --check` of a database not created yet said "incompatible schema:
    /// table ... does not exist"; a wrong column still says incompatible.
    #[test]
    fn missing_tables_alone_are_a_schema_not_created() {
        let missing = |t: &str| SchemaProblem::MissingTable {
            table: format!("db.{t}"),
        };
        let e = SchemaError::Incompatible {
            url: "http://127.0.0.1:8123".into(),
            problems: vec![missing("history_dbl"), missing("history_uint")],
        };
        assert_eq!(
            e.to_string(),
            "ClickHouse http://127.0.0.1:8123: schema not created: table db.history_dbl does not exist; table db.history_uint does not exist (`netpoller schema --apply` creates the missing tables, as `run` does at start)"
        );
        let e = SchemaError::Incompatible {
            url: "http://127.0.0.1:8123".into(),
            problems: vec![
                missing("history_dbl"),
                SchemaProblem::MissingColumn {
                    table: "db.history_uint".into(),
                    column: "ns",
                    expected: "UInt32",
                },
            ],
        };
        assert!(
            e.to_string().starts_with(
                "ClickHouse http://127.0.0.1:8123: incompatible schema: table db.history_dbl does not exist; "
            ),
            "{e}"
        );
    }

    #[test]
    fn version_parse_and_features() {
        let v = ServerVersion::parse("18.16.1").unwrap();
        assert!(!v.supports_ttl());
        assert!(ServerVersion::parse("19.6.2.11").unwrap().supports_ttl());
        assert!(!ServerVersion::parse("19.6")
            .unwrap()
            .supports_ttl_only_drop_parts());
        assert!(ServerVersion::parse("25.8.1.5101")
            .unwrap()
            .supports_ttl_only_drop_parts());
        assert_eq!(ServerVersion::parse("x"), None);
    }

    #[test]
    fn ddl_by_version() {
        let cfg = ClickHouseConfig {
            retention: Some(Duration::from_secs(86_400 * 30)),
            ..Default::default()
        };
        let old = ddl(&cfg, ServerVersion::parse("18.16.1").unwrap());
        assert_eq!(old.len(), 7);
        assert_eq!(old[0], "CREATE DATABASE IF NOT EXISTS glaber");
        assert!(old[1].starts_with("CREATE TABLE IF NOT EXISTS glaber.history_dbl"));
        assert!(old[1].contains("    value Float64\n"));
        assert!(old[2].contains("    value UInt64\n"));
        assert!(old[3].contains("glaber.history_str") && old[3].contains("value String"));
        assert!(old[4].contains("glaber.history_log"));
        assert!(old.iter().all(|s| !s.contains("TTL")));
        assert!(old[1].contains("PARTITION BY toYYYYMM(day)\nORDER BY (itemid, clock)"));
        let new = ddl(&cfg, ServerVersion::CURRENT);
        assert!(new[1].ends_with("TTL day + INTERVAL 30 DAY\nSETTINGS ttl_only_drop_parts = 1"));
        let mid = ddl(&cfg, ServerVersion::parse("19.8.1").unwrap());
        assert!(mid[1].ends_with("TTL day + INTERVAL 30 DAY"));
        let none = ddl(&ClickHouseConfig::default(), ServerVersion::CURRENT);
        assert!(none.iter().all(|s| !s.contains("TTL")));
        // Trends: Glaber's columns and types, their own retention (none here).
        assert!(old[5].starts_with("CREATE TABLE IF NOT EXISTS glaber.trends_dbl"));
        assert!(old[6].contains(
            "    clock DateTime,\n    value_min Int64,\n    value_max Int64,\n    value_avg Int64,\n    count UInt32,\n    hostname String"
        ));
        assert!(!new[5].contains("TTL") && !new[6].contains("TTL"));
        let both = ClickHouseConfig {
            trends_retention: Some(Duration::from_secs(86_400 * 730)),
            ..cfg.clone()
        };
        assert!(ddl(&both, ServerVersion::CURRENT)[6].contains("TTL day + INTERVAL 730 DAY"));
        let off = ClickHouseConfig {
            trends: false,
            ..cfg
        };
        assert_eq!(ddl(&off, ServerVersion::CURRENT).len(), 5);
    }

    /// Glaber's server writes and reads its log items in `history_log` with
    /// `logeventid`, `source` and `severity`: a table netpoller created without them
    /// failed each of Glaber's log INSERTs and SELECTs. netpoller writes none of them.
    #[test]
    fn history_log_is_created_with_glabers_log_columns() {
        let stmts = ddl(&ClickHouseConfig::default(), ServerVersion::CURRENT);
        let log = stmts
            .iter()
            .find(|s| s.contains("glaber.history_log\n"))
            .unwrap();
        assert!(
            log.contains(
                "    ns UInt32,\n    value String,\n    logeventid UInt64,\n    source String,\n    severity UInt8\n)"
            ),
            "{log}"
        );
        assert_eq!(
            Table::Log.column_list(),
            "day, itemid, clock, hostname, itemname, ns, value"
        );
        for s in stmts.iter().filter(|s| !s.contains("history_log")) {
            assert!(!s.contains("logeventid"), "{s}");
        }
    }

    #[test]
    fn type_compatibility() {
        assert!(compatible("String", "LowCardinality(String)"));
        assert!(compatible("DateTime", "DateTime('UTC')"));
        assert!(!compatible("DateTime", "DateTime64(3)"));
        assert!(!compatible("Float64", "Float32"));
        assert!(!compatible("UInt64", "Int64"));
        assert!(
            compatible("Int64", "UInt64"),
            "trends_uint as other schemas have it"
        );
        assert!(!compatible("Int64", "Int32"));
    }
}
