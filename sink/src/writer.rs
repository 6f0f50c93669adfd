//! ClickHouse writer: one INSERT attempt of one pre-encoded batch, round-robin over the
//! configured endpoints, and the single place where failures are classified
//! ([`classify`]) and retry delays computed ([`backoff`]).
//!
//! Why `insert_formatted_with`: the `clickhouse` crate's typed `Insert<T>` serialises
//! rows itself, and its `Inserter` drops pending rows on error. Our batches are already
//! RowBinary (encoded once, then held, retried, spooled and replayed unchanged), and
//! `Client::insert_formatted_with("INSERT ... FORMAT RowBinary")` sends such bytes as
//! they are, with the crate's HTTP pool, timeouts and optional LZ4 framing
//! (`decompress=1`, ClickHouse's native blocks with CityHash128 checksums, accepted by
//! 18.16 and current servers). The explicit column list makes the physical column order
//! of an existing table irrelevant.

use crate::batch::Batch;
use crate::config::{redact_url, ClickHouseConfig, Compression};
use crate::metrics::ErrorClass;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// Data chunk per `send` (each becomes one LZ4 block when compressing).
const CHUNK: usize = 1 << 20;

/// A client for queries (DDL, SELECT): no compression, no RowBinary validation (the
/// validation's `RowBinaryWithNamesAndTypes` does not exist on 18.16).
pub(crate) fn query_client(cfg: &ClickHouseConfig, url: &str) -> clickhouse::Client {
    let http = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        // Below ClickHouse's keep_alive_timeout (3 s) so we never reuse a connection
        // the server is closing.
        .pool_idle_timeout(Duration::from_secs(2))
        .build(connector(cfg));
    clickhouse::Client::with_http_client(http)
        .with_url(url)
        .with_user(cfg.user.clone())
        .with_password(cfg.password.clone())
        .with_validation(false)
}

/// The crate's default connector leaves Nagle's algorithm on: a chunked INSERT body
/// then waits for the server's delayed ACK (tens of ms per small INSERT). Ours sets
/// TCP_NODELAY, and a connect timeout so that a black-holed endpoint fails fast
/// instead of using up the whole `request_timeout`.
fn connector(cfg: &ClickHouseConfig) -> hyper_util::client::legacy::connect::HttpConnector {
    let mut c = hyper_util::client::legacy::connect::HttpConnector::new();
    c.set_nodelay(true);
    c.set_keepalive(Some(Duration::from_secs(60)));
    c.set_connect_timeout(Some(cfg.request_timeout.min(Duration::from_secs(5))));
    c
}

fn insert_client(cfg: &ClickHouseConfig, url: &str) -> clickhouse::Client {
    let c = query_client(cfg, url);
    match cfg.compression {
        Compression::None => c.with_compression(clickhouse::Compression::None),
        Compression::Lz4 => c.with_compression(clickhouse::Compression::Lz4),
    }
}

/// A failed INSERT attempt. Its text never contains the password (the crate sends
/// credentials in headers, and URLs are redacted).
#[derive(Debug, Clone, thiserror::Error)]
#[error("INSERT into {table} via {url} failed ({class}): {message}", class = class.label())]
pub struct InsertError {
    /// Endpoint used (redacted).
    pub url: String,
    /// Table.
    pub table: &'static str,
    /// Classification.
    pub class: ErrorClass,
    /// Error text from the client or server.
    pub message: String,
}

/// Sends batches to ClickHouse.
pub struct Writer {
    cfg: ClickHouseConfig,
    endpoints: Vec<Endpoint>,
    next: AtomicUsize,
}

struct Endpoint {
    /// As configured (credentials included): for schema repair.
    url: String,
    /// Redacted, for errors and logs.
    shown: String,
    client: clickhouse::Client,
    /// Schema repairs done on this endpoint; `repair_lock` runs one at a time, and
    /// concurrent INSERTs that all found the table missing wait for the first one's
    /// DDL, see the count moved, and only resend.
    repairs: AtomicU64,
    repair_lock: tokio::sync::Mutex<()>,
    /// The last [`crate::schema::check_at`] of this endpoint, and the one running. One
    /// check at a time, and its outcome is shared: INSERTs that find a check running
    /// wait for that one instead of running their own after it. Not held across the
    /// check: behind a lock, against a server that never answers, the INSERTs in flight
    /// and the replay timed out one after the other (`max_inflight_inserts` + 1 times
    /// `request_timeout` per round of attempts, minutes before the sink said so).
    checks: std::sync::Mutex<Checks>,
    /// Retryable failures here in a row, and until when the endpoint is passed over
    /// ([`Writer::insert`]).
    resting: std::sync::Mutex<(u32, Option<std::time::Instant>)>,
}

impl Endpoint {
    fn lock_checks(&self) -> std::sync::MutexGuard<'_, Checks> {
        self.checks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Until when it rests, if it does at `now`.
    fn rests_until(&self, now: std::time::Instant) -> Option<std::time::Instant> {
        let r = self.resting.lock().unwrap_or_else(|e| e.into_inner());
        r.1.filter(|until| *until > now)
    }

    /// Notes how an attempt here ended: a retryable failure rests the endpoint for a
    /// backoff that grows with each one in a row; anything else (stored, or refused as
    /// bad data: the server answers) ends its rest.
    fn note(&self, result: &Result<(), InsertError>, cfg: &ClickHouseConfig) {
        let mut r = self.resting.lock().unwrap_or_else(|e| e.into_inner());
        *r = match result {
            Err(e) if e.class.is_retryable() => {
                let n = r.0.saturating_add(1);
                // Not jittered: as long as the longest wait before a batch's next
                // attempt (at most `n` failures of its own here). Jittered alike, the
                // rest ended before the retry half the time, and round-robin sent the
                // retry back here: a batch whose every attempt landed on a dead node of
                // two was spooled, and the sink turned unhealthy.
                let rest = backoff_bound(n, cfg.retry_backoff, cfg.retry_backoff_max);
                (n, Some(std::time::Instant::now() + rest))
            }
            _ => (0, None),
        };
    }
}

/// The checks of an endpoint ([`Endpoint::checks`]).
#[derive(Default)]
struct Checks {
    /// What the last one that passed found.
    last: Check,
    /// The check running, if one is: its outcome, once it has one, for the INSERTs
    /// that wait for it.
    running: Option<tokio::sync::watch::Receiver<Option<CheckOutcome>>>,
}

/// How a check ended: passed (the tables it found wrong are in [`Checks::last`]), or
/// failed (the class and text of the error every INSERT waiting for it fails with).
type CheckOutcome = Result<(), (ErrorClass, String)>;

/// Runs while a check runs, by the INSERT that runs it. Should that INSERT be dropped
/// before the check ends (the stop's grace ends while it waits), it clears
/// [`Checks::running`] before its sender goes: the INSERTs that waited for it see the
/// channel closed and one of them runs the check.
struct CheckRun<'a> {
    ep: &'a Endpoint,
    tx: Option<tokio::sync::watch::Sender<Option<CheckOutcome>>>,
}

impl CheckRun<'_> {
    /// The check ended with `outcome` (its findings already in `checks.last`): hands it
    /// to the INSERTs waiting for it.
    fn finish(mut self, checks: &mut Checks, outcome: CheckOutcome) {
        checks.running = None;
        if let Some(tx) = self.tx.take() {
            tx.send_replace(Some(outcome));
        }
    }
}

impl Drop for CheckRun<'_> {
    fn drop(&mut self) {
        if self.tx.is_some() {
            self.ep.lock_checks().running = None;
        }
    }
}

/// What the last check of an endpoint found, and when.
#[derive(Default)]
struct Check {
    /// When it passed; `None`: never, or an INSERT there failed since.
    at: Option<std::time::Instant>,
    /// The tables whose columns do not match, and why: batches for them are not sent;
    /// the others are.
    bad: Vec<(crate::row::Table, String)>,
}

impl Check {
    /// How long it holds: [`RECHECK_WRONG_TABLES`] when it found tables of other
    /// columns, else [`CHECK_EVERY`].
    fn holds(&self) -> Duration {
        if self.bad.is_empty() {
            CHECK_EVERY
        } else {
            RECHECK_WRONG_TABLES
        }
    }

    /// Whether the last check passed `table` (see [`Writer::insert`]); if not, the
    /// class and text of the error its batch fails with.
    fn verdict(&self, table: crate::row::Table) -> CheckOutcome {
        match self.bad.iter().find(|(t, _)| *t == table) {
            None => Ok(()),
            // A trends table: set aside as a missing one is (`insert_attempt`);
            // history waits.
            Some((t, why)) => Err((
                if t.is_trends() {
                    ErrorClass::Data
                } else {
                    ErrorClass::Server
                },
                format!("{COLUMNS_MISMATCH}: {why}"),
            )),
        }
    }
}

/// How long a passed check holds: a table altered while the daemon runs is found
/// within this (plus the time to the next INSERT on that endpoint), or by the first
/// batch ClickHouse refuses as bad data.
pub const CHECK_EVERY: Duration = Duration::from_secs(300);

/// How long a check that found tables of other columns holds: their fix is found
/// within this (plus the time to the next INSERT or replay on that endpoint), and
/// their spooled rows replayed. Held as long as a passed check, a fixed table got
/// nothing, its rows spooled and the log saying the server refused them, for up to 5
/// minutes after an operator's fix.
pub const RECHECK_WRONG_TABLES: Duration = Duration::from_secs(10);

/// ClickHouse's `UNKNOWN_TABLE` and `UNKNOWN_DATABASE`: the schema is missing on that
/// server (it was unreachable when the daemon started, or was replaced or wiped since).
const MISSING_SCHEMA_CODES: &[u32] = &[60, 81];

impl Writer {
    /// A writer for every endpoint of `cfg` (which must have at least one).
    pub fn new(cfg: &ClickHouseConfig) -> Writer {
        let endpoints = cfg
            .endpoints()
            .into_iter()
            .map(|u| Endpoint {
                shown: redact_url(&u),
                client: insert_client(cfg, &u),
                url: u,
                repairs: AtomicU64::new(0),
                repair_lock: tokio::sync::Mutex::new(()),
                checks: std::sync::Mutex::new(Checks::default()),
                resting: std::sync::Mutex::new((0, None)),
            })
            .collect();
        Writer {
            cfg: cfg.clone(),
            endpoints,
            next: AtomicUsize::new(0),
        }
    }

    /// Configuration in use.
    pub fn config(&self) -> &ClickHouseConfig {
        &self.cfg
    }

    /// One attempt to insert `batch` on the next endpoint (round-robin, passing over
    /// those resting after a failure; all resting, the one back first). Success means
    /// ClickHouse answered 200 to the INSERT: the rows are stored.
    ///
    /// Before the first INSERT on an endpoint, after one failed there, and every
    /// [`CHECK_EVERY`], the endpoint is checked ([`crate::schema::check_at`]): a server
    /// that is not ClickHouse (something else answering 200 on its port) or a table of
    /// other column types fails the attempt (retryable: the batch is spooled until the
    /// server or the table is fixed) instead of storing nothing, or garbage. An INSERT
    /// refused as bad data is checked at once, and fails so when its table no longer
    /// matches (altered since the last check), not as bad data.
    ///
    /// When that server has no such database or table, the missing schema is created
    /// there ([`crate::schema::apply_at`], `IF NOT EXISTS`, existing tables untouched) and the
    /// INSERT sent once more: a server that was down when the daemon started, or came
    /// back empty, would otherwise refuse every batch until the spool overflowed.
    pub async fn insert(&self, batch: &Batch) -> Result<(), InsertError> {
        let ep = self.pick();
        let result = self.insert_on(ep, batch).await;
        ep.note(&result, &self.cfg);
        result
    }

    /// The next endpoint (round-robin) that is not resting after a failure, or, when
    /// all are, the one back first: with one node of several down, attempts (retries
    /// included) go to the others instead of every other one failing there.
    fn pick(&self) -> &Endpoint {
        let n = self.endpoints.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let now = std::time::Instant::now();
        let mut back_first: Option<(&Endpoint, std::time::Instant)> = None;
        for ep in (0..n).map(|k| &self.endpoints[(start + k) % n]) {
            match ep.rests_until(now) {
                None => return ep,
                Some(until) if back_first.is_none_or(|(_, b)| until < b) => {
                    back_first = Some((ep, until));
                }
                Some(_) => {}
            }
        }
        back_first.map_or(&self.endpoints[start % n], |(ep, _)| ep)
    }

    /// One attempt on `ep` (see [`Writer::insert`]).
    async fn insert_on(&self, ep: &Endpoint, batch: &Batch) -> Result<(), InsertError> {
        self.check(ep, batch).await?;
        let repairs_before = ep.repairs.load(Ordering::Acquire);
        let result = self.insert_attempt(ep, batch, repairs_before).await;
        if let Err(e) = &result {
            // The server may have been replaced or restarted with other tables.
            ep.lock_checks().last.at = None;
            if e.class == ErrorClass::Data {
                // Bad data, or a table altered since the last check (a `value` column
                // made String: ClickHouse cannot read the RowBinary and says so with a
                // data error). Taken for bad data, the batch went to the reject spool,
                // out of the replay, as did every batch of the table until the next
                // check, up to `CHECK_EVERY` later. Checked now, a table that no
                // longer matches fails the batch as the check does (spooled until the
                // table is fixed); one that matches leaves the refusal as it was.
                self.check(ep, batch).await?;
            }
        }
        result
    }

    /// [`crate::schema::check_at`] on `ep` when it is due (see [`Writer::insert`]), and
    /// whether `batch`'s table passed it. A check that is running when it is due is
    /// waited for, and its outcome taken as this INSERT's own.
    async fn check(&self, ep: &Endpoint, batch: &Batch) -> Result<(), InsertError> {
        let fail = |(class, message): (ErrorClass, String)| InsertError {
            url: ep.shown.clone(),
            table: batch.table.name(),
            class,
            message,
        };
        loop {
            // Not due; due and running (its outcome to wait for); or due: this INSERT
            // runs it.
            let due: Result<_, _> = {
                let mut checks = ep.lock_checks();
                if checks
                    .last
                    .at
                    .is_some_and(|at| at.elapsed() < checks.last.holds())
                {
                    return checks.last.verdict(batch.table).map_err(fail);
                }
                match &checks.running {
                    Some(rx) => Ok(rx.clone()),
                    None => {
                        let (tx, rx) = tokio::sync::watch::channel(None);
                        checks.running = Some(rx);
                        Err(CheckRun { ep, tx: Some(tx) })
                    }
                }
            };
            let outcome = match due {
                Err(run) => Some(self.run_check(ep, run).await),
                // Another INSERT's check: its outcome, or, should that INSERT have been
                // dropped before it ended, another round (this one may run it).
                Ok(mut running) => running
                    .wait_for(Option::is_some)
                    .await
                    .ok()
                    .and_then(|o| o.clone()),
            };
            match outcome {
                Some(Ok(())) => return ep.lock_checks().last.verdict(batch.table).map_err(fail),
                Some(Err(e)) => return Err(fail(e)),
                None => continue,
            }
        }
    }

    /// Runs the check of `ep` that `run` stands for, bounded by `request_timeout` + 1 s,
    /// notes what it found, and hands its outcome to the INSERTs waiting for it.
    async fn run_check(&self, ep: &Endpoint, run: CheckRun<'_>) -> CheckOutcome {
        let limit = self.cfg.request_timeout + Duration::from_secs(1);
        let checked =
            tokio::time::timeout(limit, crate::schema::check_at(&self.cfg, &ep.url)).await;
        let mut checks = ep.lock_checks();
        let outcome = match checked {
            Ok(Ok(bad)) => {
                for (t, why) in &bad {
                    if !checks.last.bad.iter().any(|(f, _)| f == t) {
                        tracing::error!(url = %ep.shown, table = t.name(), problems = %why, "sink: a table's columns do not match what netpoller writes: its rows are spooled until it is fixed (`netpoller schema -c FILE --check`)");
                    }
                }
                for (t, _) in &checks.last.bad {
                    if !bad.iter().any(|(f, _)| f == t) {
                        tracing::info!(url = %ep.shown, table = t.name(), "sink: a table's columns match again: its rows are written, and those spooled replayed");
                    }
                }
                checks.last = Check {
                    at: Some(std::time::Instant::now()),
                    bad,
                };
                Ok(())
            }
            Err(_) => Err((
                ErrorClass::Timeout,
                format!("checking the server: no answer within {limit:?}"),
            )),
            Ok(Err(crate::schema::SchemaError::Query { cause, what, .. })) => {
                let class = classify(&cause);
                let hint = match class {
                    ErrorClass::Network | ErrorClass::Timeout => "",
                    _ => " (is this ClickHouse's HTTP port?)",
                };
                Err((
                    class,
                    format!("checking the server ({what}): {cause}{hint}"),
                ))
            }
            Ok(Err(e)) => Err((ErrorClass::Server, e.to_string())),
        };
        run.finish(&mut checks, outcome.clone());
        outcome
    }

    /// The INSERT, with the repair of a missing schema (see [`Writer::insert`]).
    async fn insert_attempt(
        &self,
        ep: &Endpoint,
        batch: &Batch,
        repairs_before: u64,
    ) -> Result<(), InsertError> {
        match self.insert_at(ep, batch).await {
            Err(e) if e.schema_missing() => {
                let again = match self.repair_schema(ep, &e, repairs_before).await {
                    Ok(()) => self.insert_at(ep, batch).await,
                    Err(f) => Err(f),
                };
                match again {
                    // A trends table the server answered it lacks and did not get (trends
                    // off here, or no right to create it): retried, its batch would hold
                    // up the history spooled behind it for good. Derived data goes to
                    // the reject spool instead; history keeps being retried.
                    Err(mut f) if batch.table.is_trends() && f.class == ErrorClass::Server => {
                        f.class = ErrorClass::Data;
                        f.message += " (trends rows set aside: create the table, or set clickhouse.trends = false)";
                        Err(f)
                    }
                    r => r,
                }
            }
            r => r,
        }
    }

    async fn insert_at(&self, ep: &Endpoint, batch: &Batch) -> Result<(), InsertError> {
        let sql = format!(
            "INSERT INTO {}.{} ({}) FORMAT RowBinary",
            self.cfg.database,
            batch.table.name(),
            batch.table.column_list()
        );
        let timeout = self.cfg.request_timeout;
        let attempt = async {
            let mut ins = ep
                .client
                .insert_formatted_with(sql)
                .with_timeouts(Some(timeout), Some(timeout));
            let mut off = 0;
            while off < batch.data.len() {
                let end = (off + CHUNK).min(batch.data.len());
                ins.send(batch.data.slice(off..end)).await?;
                off = end;
            }
            ins.end().await
        };
        // The crate's timeouts cover each send and the wait for the answer; this one
        // bounds the whole attempt (connect included).
        let res = match tokio::time::timeout(timeout + Duration::from_secs(1), attempt).await {
            Ok(r) => r,
            Err(_) => Err(clickhouse::error::Error::TimedOut),
        };
        res.map_err(|e| InsertError {
            url: ep.shown.clone(),
            table: batch.table.name(),
            class: classify(&e),
            message: e.to_string(),
        })
    }

    /// Creates what `missing` says is missing on `ep`, unless another INSERT did since
    /// this one started (`repairs_before`); an error says why it could not (retryable:
    /// the batch is kept and retried like any other server error). Bounded like an
    /// INSERT: a server that stops answering mid-repair must not hold the endpoint.
    async fn repair_schema(
        &self,
        ep: &Endpoint,
        missing: &InsertError,
        repairs_before: u64,
    ) -> Result<(), InsertError> {
        let _one_at_a_time = ep.repair_lock.lock().await;
        if ep.repairs.load(Ordering::Acquire) != repairs_before {
            return Ok(());
        }
        let limit = 2 * self.cfg.request_timeout + Duration::from_secs(1);
        let applied = tokio::time::timeout(limit, crate::schema::apply_at(&self.cfg, &ep.url));
        let fail = |class, why: String| InsertError {
            url: ep.shown.clone(),
            table: missing.table,
            class,
            message: format!("{}; creating the schema failed: {why}", missing.message),
        };
        match applied.await {
            Err(_) => Err(fail(
                ErrorClass::Timeout,
                format!("no answer within {limit:?}"),
            )),
            Ok(Err(e)) => Err(fail(ErrorClass::Server, e.to_string())),
            Ok(Ok(applied)) => {
                ep.repairs.fetch_add(1, Ordering::Release);
                tracing::warn!(
                    url = %ep.shown,
                    created = ?applied.created,
                    error = %missing.message,
                    "sink: ClickHouse lacked the schema; created what was missing"
                );
                Ok(())
            }
        }
    }

    /// Schema repairs done so far, over every endpoint (each one a run of the DDL).
    pub fn schema_repairs(&self) -> u64 {
        self.endpoints
            .iter()
            .map(|ep| ep.repairs.load(Ordering::Acquire))
            .sum()
    }

    /// `SELECT 1` on the next endpoint: used to probe an unreachable server when no
    /// spooled batch is available to probe with.
    pub async fn ping(&self) -> bool {
        let ep = &self.endpoints[self.next.fetch_add(1, Ordering::Relaxed) % self.endpoints.len()];
        let c = query_client(&self.cfg, &ep.url);
        matches!(
            tokio::time::timeout(
                self.cfg.request_timeout,
                c.query("SELECT 1").fetch_one::<u8>()
            )
            .await,
            Ok(Ok(1))
        )
    }
}

/// How the error of a batch the check keeps back begins ([`Check::verdict`]).
const COLUMNS_MISMATCH: &str = "the table's columns do not match";

impl InsertError {
    /// The batch was kept back because the last check of the server found its table
    /// with other columns: the server answers, and takes the other tables' batches.
    /// Sending it again changes nothing until a check passes the table.
    pub(crate) fn table_mismatch(&self) -> bool {
        self.class == ErrorClass::Server && self.message.starts_with(COLUMNS_MISMATCH)
    }

    /// The server has no such database or table.
    fn schema_missing(&self) -> bool {
        self.class == ErrorClass::Server
            && exception_code(&self.message).is_some_and(|c| MISSING_SCHEMA_CODES.contains(&c))
    }
}

/// ClickHouse exception codes that mean "this data is bad": retrying the same bytes
/// cannot succeed. Anything else (overload, missing table, auth, unknown) is retried and
/// spooled, because the batch may still be stored once an operator fixes the server.
const DATA_ERROR_CODES: &[u32] = &[
    6,   // CANNOT_PARSE_TEXT
    26,  // CANNOT_PARSE_QUOTED_STRING
    27,  // CANNOT_PARSE_INPUT_ASSERTION_FAILED
    32,  // ATTEMPT_TO_READ_AFTER_EOF
    33,  // CANNOT_READ_ALL_DATA
    38,  // CANNOT_PARSE_DATE
    41,  // CANNOT_PARSE_DATETIME
    53,  // TYPE_MISMATCH
    69,  // ARGUMENT_OUT_OF_BOUND
    70,  // CANNOT_CONVERT_TYPE
    72,  // CANNOT_PARSE_NUMBER
    117, // INCORRECT_DATA
    131, // TOO_LARGE_STRING_SIZE
    271, // CANNOT_DECOMPRESS
];

/// ClickHouse exception codes that describe the server's state (overloaded, read-only,
/// out of disk, its coordination down), not the batch it refused: the same bytes are
/// stored once the server recovers, and a spooled batch refused with one is never taken
/// for one refused for itself (the replayer's suspects, set aside in the reject spool),
/// even while other batches of its table are stored in between (a server just under
/// its limit, then over it again).
const SERVER_STATE_CODES: &[u32] = &[
    159, // TIMEOUT_EXCEEDED
    164, // READONLY
    202, // TOO_MANY_SIMULTANEOUS_QUERIES
    203, // NO_FREE_CONNECTION
    209, // SOCKET_TIMEOUT
    210, // NETWORK_ERROR
    225, // NO_ZOOKEEPER
    242, // TABLE_IS_READ_ONLY
    243, // NOT_ENOUGH_SPACE
    252, // TOO_MANY_PARTS
    319, // UNKNOWN_STATUS_OF_INSERT
    425, // SYSTEM_ERROR
    999, // KEEPER_EXCEPTION
];

/// Whether exception `code` describes the server's state rather than the batch it
/// refused ([`SERVER_STATE_CODES`]).
pub(crate) fn is_server_state(code: u32) -> bool {
    SERVER_STATE_CODES.contains(&code)
}

/// Extracts `N` from ClickHouse's `Code: N, e.displayText() = ...` (18.x) or
/// `Code: N. DB::Exception: ...` (current), or from a bare exception-code header value.
pub fn exception_code(message: &str) -> Option<u32> {
    if let Some(i) = message.find("Code: ") {
        let digits: String = message[i + 6..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        return digits.parse().ok();
    }
    let t = message.trim();
    (!t.is_empty() && t.len() <= 5 && t.chars().all(|c| c.is_ascii_digit()))
        .then(|| t.parse().ok())
        .flatten()
}

/// The one place that decides whether a failed INSERT is retried.
///
/// * connection errors → [`ErrorClass::Network`]; timeouts → [`ErrorClass::Timeout`];
/// * a ClickHouse exception whose code is a data error (53, 117, 27, 6, ...) →
///   [`ErrorClass::Data`]: never retried, the batch goes to the reject file;
/// * any other server answer (5xx, overload, unknown table, auth) →
///   [`ErrorClass::Server`]: retried, then spooled.
pub fn classify(err: &clickhouse::error::Error) -> ErrorClass {
    use clickhouse::error::Error as E;
    match err {
        E::TimedOut => ErrorClass::Timeout,
        E::Network(_) => {
            let s = err.to_string().to_ascii_lowercase();
            if s.contains("timed out") || s.contains("timeout") {
                ErrorClass::Timeout
            } else {
                ErrorClass::Network
            }
        }
        E::BadResponse(msg) => match exception_code(msg) {
            Some(code) if DATA_ERROR_CODES.contains(&code) => ErrorClass::Data,
            _ => ErrorClass::Server,
        },
        // Client-side failures that do not depend on the server; retrying is harmless
        // and the spool keeps the batch either way.
        _ => ErrorClass::Server,
    }
}

/// Delay before attempt `attempt + 1` (`attempt` ≥ 1): `initial * 2^(attempt-1)` capped
/// at `max` ([`backoff_bound`]), with "equal jitter" (half fixed, half random) so that
/// several pollers do not retry in lockstep.
pub fn backoff(attempt: u32, initial: Duration, max: Duration) -> Duration {
    let exp = backoff_bound(attempt, initial, max);
    let half = exp / 2;
    half + half.mul_f64(fastrand::f64())
}

/// The longest [`backoff`] after `attempt` failures: `initial * 2^(attempt-1)` capped at
/// `max`.
pub fn backoff_bound(attempt: u32, initial: Duration, max: Duration) -> Duration {
    initial
        .saturating_mul(1u32 << attempt.saturating_sub(1).min(16))
        .min(max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clickhouse::error::Error as E;

    /// A writer on `urls` (nothing is sent: the tests look at its endpoints), with the
    /// runtime its client needs, entered until the runtime is dropped.
    fn writer_on(urls: &[&str]) -> (tokio::runtime::Runtime, Writer) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let w = {
            let _enter = rt.enter();
            Writer::new(&ClickHouseConfig {
                url: Some(urls[0].into()),
                urls: urls[1..].iter().map(|u| u.to_string()).collect(),
                ..ClickHouseConfig::default()
            })
        };
        (rt, w)
    }

    /// Two nodes, both resting: one dead for a while (30 s left), one after a passing
    /// failure (100 ms left). Round-robin sent every other attempt to the dead node (a
    /// new batch whose attempts all landed there was spooled, the sink turned
    /// unhealthy); the node back first takes them.
    #[test]
    fn with_every_endpoint_resting_the_one_back_first_is_picked() {
        let (_rt, w) = writer_on(&["http://127.0.0.1:9", "http://127.0.0.2:9"]);
        let now = std::time::Instant::now();
        *w.endpoints[0].resting.lock().unwrap() = (8, Some(now + Duration::from_secs(30)));
        *w.endpoints[1].resting.lock().unwrap() = (1, Some(now + Duration::from_millis(100)));
        for k in 0..4 {
            assert_eq!(w.pick().shown, w.endpoints[1].shown, "attempt {k}");
        }
        // Not resting: round-robin again.
        *w.endpoints[0].resting.lock().unwrap() = (0, None);
        *w.endpoints[1].resting.lock().unwrap() = (0, None);
        let picked: Vec<_> = (0..2).map(|_| w.pick().shown.clone()).collect();
        assert_ne!(picked[0], picked[1]);
    }

    /// A node that failed rests at least as long as a batch that failed there waits
    /// before its next attempt, whatever their jitter: the retry goes to another node.
    /// (The rest was jittered too: shorter than the batch's wait half the time.)
    #[test]
    fn a_failed_node_rests_past_the_retry_of_the_batch_that_failed_there() {
        let (_rt, w) = writer_on(&["http://127.0.0.1:9"]);
        let cfg = w.config();
        let ep = &w.endpoints[0];
        let failed = Err(InsertError {
            url: ep.shown.clone(),
            table: "history_uint",
            class: ErrorClass::Network,
            message: "connection refused".into(),
        });
        for n in 1..=12 {
            let before = std::time::Instant::now();
            ep.note(&failed, cfg);
            let wait = backoff(n, cfg.retry_backoff, cfg.retry_backoff_max);
            assert!(
                ep.rests_until(before + wait).is_some(),
                "failure {n}: resting until {:?}, the retry after {wait:?}",
                ep.resting.lock().unwrap().1.map(|u| u - before)
            );
        }
    }

    /// A server on loopback that accepts connections and never answers: its URL and
    /// how many connections it took.
    fn hung_server() -> (String, std::sync::Arc<AtomicUsize>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let taken = std::sync::Arc::new(AtomicUsize::new(0));
        let t = taken.clone();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for c in listener.incoming().flatten() {
                held.push(c);
                t.fetch_add(1, Ordering::SeqCst);
            }
        });
        (url, taken)
    }

    /// INSERTs that find the endpoint's check due at once share one check, and each
    /// fails with its outcome when it ends (they timed out one after the other behind
    /// its lock); one whose caller is dropped mid-check leaves the others to run it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_inserts_share_one_check_of_the_server() {
        let (url, taken) = hung_server();
        let cfg = ClickHouseConfig {
            url: Some(url),
            request_timeout: Duration::from_millis(500),
            ..ClickHouseConfig::default()
        };
        let w = Writer::new(&cfg);
        let batch = Batch {
            table: crate::row::Table::Uint,
            rows: 1,
            first_clock: 1,
            data: bytes::Bytes::from_static(&[0; 16]),
        };
        let limit = cfg.request_timeout + Duration::from_secs(1);
        let t0 = std::time::Instant::now();
        let (a, b, c, d) = tokio::join!(
            w.insert(&batch),
            w.insert(&batch),
            w.insert(&batch),
            w.insert(&batch)
        );
        let took = t0.elapsed();
        for e in [a, b, c, d] {
            let e = e.unwrap_err();
            assert_eq!(e.class, ErrorClass::Timeout, "{e}");
            assert!(e.message.contains("checking the server"), "{e}");
        }
        assert!(
            took < 2 * limit,
            "the checks ran one after the other: {took:?}"
        );
        assert_eq!(taken.load(Ordering::SeqCst), 1, "one check, one connection");
        // The INSERT running the check is dropped (a stop's grace): the one waiting
        // for it runs a check of its own.
        let running = w.insert(&batch);
        let waiting = async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            w.insert(&batch).await
        };
        let dropped = tokio::time::timeout(Duration::from_millis(300), running);
        let (first, second) = tokio::join!(dropped, waiting);
        assert!(first.is_err(), "dropped before its check ended");
        assert_eq!(second.unwrap_err().class, ErrorClass::Timeout);
        assert_eq!(taken.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn codes_from_old_and_new_servers() {
        let old = "Code: 53, e.displayText() = DB::Exception: Type mismatch in IN or VALUES section, e.what() = DB::Exception";
        assert_eq!(exception_code(old), Some(53));
        assert_eq!(
            exception_code("Code: 117. DB::Exception: Incorrect data"),
            Some(117)
        );
        assert_eq!(exception_code("60"), Some(60));
        assert_eq!(exception_code("500 Internal Server Error"), None);
    }

    #[test]
    fn classification() {
        assert_eq!(classify(&E::TimedOut), ErrorClass::Timeout);
        assert_eq!(
            classify(&E::Network("connection refused".into())),
            ErrorClass::Network
        );
        assert_eq!(
            classify(&E::BadResponse("Code: 53, e.displayText() = x".into())),
            ErrorClass::Data
        );
        assert_eq!(
            classify(&E::BadResponse("Code: 117. DB::Exception".into())),
            ErrorClass::Data
        );
        assert_eq!(classify(&E::BadResponse("27".into())), ErrorClass::Data);
        // Missing table, overload, plain 5xx: retried.
        assert_eq!(
            classify(&E::BadResponse(
                "Code: 60, e.displayText() = DB::Exception: Table x doesn't exist".into()
            )),
            ErrorClass::Server
        );
        assert_eq!(
            classify(&E::BadResponse("Code: 252. Too many parts".into())),
            ErrorClass::Server
        );
        assert_eq!(
            classify(&E::BadResponse("503 Service Unavailable".into())),
            ErrorClass::Server
        );
        assert!(!ErrorClass::Data.is_retryable());
        assert!(ErrorClass::Server.is_retryable());
    }

    #[test]
    fn missing_database_or_table_is_recognised_from_old_and_new_servers() {
        let e = |class, message: &str| InsertError {
            url: "http://127.0.0.1:8123".into(),
            table: "history_uint",
            class,
            message: message.into(),
        };
        let old_table = "bad response: Code: 60, e.displayText() = DB::Exception: Table glaber.history_uint doesn't exist., e.what() = DB::Exception";
        let old_db = "bad response: Code: 81, e.displayText() = DB::Exception: Database glaber doesn't exist, e.what() = DB::Exception";
        let new_db = "bad response: Code: 81. DB::Exception: Database glaber does not exist. (UNKNOWN_DATABASE) (version 25.8.1.1)";
        for m in [old_table, old_db, new_db] {
            assert!(e(ErrorClass::Server, m).schema_missing(), "{m}");
        }
        assert!(!e(ErrorClass::Server, "Code: 252. Too many parts").schema_missing());
        assert!(!e(ErrorClass::Server, "503 Service Unavailable").schema_missing());
        assert!(!e(ErrorClass::Network, "connection refused").schema_missing());
    }

    #[test]
    fn backoff_grows_caps_and_jitters() {
        let i = Duration::from_millis(100);
        let m = Duration::from_secs(2);
        for _ in 0..100 {
            let b1 = backoff(1, i, m);
            assert!(b1 >= Duration::from_millis(50) && b1 <= i);
            let b3 = backoff(3, i, m);
            assert!(b3 >= Duration::from_millis(200) && b3 <= Duration::from_millis(400));
            let b30 = backoff(30, i, m);
            assert!(b30 >= Duration::from_secs(1) && b30 <= m);
        }
    }
}
