//! ClickHouse history sink: Glaber-compatible schema, batcher, writer, disk spool.
//!
//! The sink knows nothing of SNMP or ICMP: it takes [`Row`]s addressed to a [`Table`],
//! encodes them once into RowBinary, batches them per table by rows, bytes and age, and
//! inserts them over HTTP, round-robin across the configured endpoints. A batch is held
//! until ClickHouse confirms it; when ClickHouse is unreachable batches go to an
//! append-only disk spool and are replayed, oldest first, when it answers again.
//! Without a `[clickhouse]` section everything goes to the spool ("file sink"), to be
//! loaded later with [`replay_spool`] (`netpoller spool replay`).
//!
//! # Use from the daemon
//! ```no_run
//! # async fn f(ch: Option<sink::ClickHouseConfig>) -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! let metrics = Arc::new(sink::SinkMetrics::default());
//! if let Some(ch) = &ch { sink::schema::verify(ch).await?; }   // `run` checks the schema
//! let (sink, handle) = sink::Sink::start(ch, sink::SpoolConfig::new("/var/lib/netpoller/spool"), metrics.clone()).await?;
//! // pollers: handle.clone().send(row, sink::Table::Dbl).await?;
//! // /metrics: metrics.render(&mut exposition);  health: sink.health()
//! let report = sink.shutdown().await?;   // flushes: inserts or spools everything
//! # Ok(()) }
//! ```
//!
//! # What can be lost or duplicated
//! * Lost: rows beyond the spool cap (`dropped_rows_total{reason="spool_cap"}`), rows
//!   that could not be spooled (`spool_write`), corrupted spool records (`corrupt`), the
//!   rows a sink task that panicked held (`internal`: a bug; a panicking batcher's
//!   queued batches and INSERTs are still stored or spooled), and on power loss the
//!   appends of the last `fsync_interval`. A `kill -9` loses only rows
//!   still in memory (the pending batches, at most `flush_interval` old, and batches
//!   being inserted).
//! * Duplicated: a batch whose INSERT succeeded on the server but whose answer was lost
//!   (timeout, connection cut after commit) is retried or spooled and written again;
//!   likewise a replayed batch confirmed just before a crash, before its acknowledgement
//!   reached the `.ack` file. Plain MergeTree has no insert deduplication (only
//!   Replicated tables do), so these rare cases produce duplicate rows with the same
//!   `(itemid, clock, ns)`.

pub mod batch;
pub mod config;
pub mod metrics;
mod pipeline;
pub mod record;
pub mod row;
pub mod rowbinary;
pub mod schema;
pub mod spool;
pub mod writer;

pub use batch::Batch;
pub use config::{ClickHouseConfig, Compression, SpoolConfig};
pub use metrics::{DropReason, ErrorClass, SinkMetrics};
pub use row::{Row, RowValue, Table, Trend};
pub use schema::SchemaError;
pub use spool::SpoolError;

use pipeline::{Msg, Shared};
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

/// Messages the input channel holds before `send` waits (backpressure).
pub const CHANNEL_CAPACITY: usize = 4096;

/// How long [`Sink::shutdown`] waits for ClickHouse to confirm the INSERTs in flight
/// (and the final batches) before spooling them instead: a stalled server must not
/// hold the daemon past its service manager's stop timeout (systemd's default 90 s,
/// 30 s in the unit we ship), when unspooled batches would be lost to SIGKILL.
pub const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// The sink's health, read apart from the sink ([`Sink::health_reader`]).
#[derive(Clone)]
pub struct HealthReader(Arc<Shared>);

impl HealthReader {
    /// As [`Sink::health`].
    pub fn health(&self) -> Health {
        self.0.health()
    }
}

/// Sends the reject spool's batches to ClickHouse again (the daemon's SIGUSR1), once
/// what it refused is fixed: they are moved into the spool ([`spool::Spool::hand_over`]),
/// whose replay loads them behind what it holds already; what is refused again goes
/// back to `rejected/`.
#[derive(Clone)]
pub struct RejectsRetry(Arc<Shared>);

impl RejectsRetry {
    /// Moves the batches (logged, counted in
    /// `netpoller_sink_retried_rejected_rows_total`): `None` without a reject spool (no
    /// ClickHouse) or once the sink is stopping.
    pub async fn retry(&self) -> Option<spool::HandOver> {
        pipeline::retry_rejects(&self.0).await
    }
}

/// State of the sink, for logs, `/metrics` and health checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    /// ClickHouse accepts inserts.
    Writing,
    /// Batches go to the disk spool (ClickHouse unreachable or failing, or no
    /// `[clickhouse]` section); nothing is lost while the spool has room.
    Spooling {
        /// Why (last error, credentials never included).
        reason: String,
    },
    /// Rows are being lost: the spool cannot be written.
    Failing {
        /// Why.
        reason: String,
    },
}

/// Errors of the sink as a whole.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The spool could not be opened or written.
    #[error(transparent)]
    Spool(#[from] SpoolError),
    /// The `[clickhouse]` section is invalid.
    #[error("invalid [clickhouse] configuration: {0}")]
    Config(String),
    /// A sink task panicked or was cancelled.
    #[error("sink task failed: {0}")]
    Task(String),
    /// `replay_spool`: ClickHouse kept failing (the error is the message, not a
    /// source, so that it is printed once).
    #[error("replay stopped: {0}")]
    Insert(writer::InsertError),
    /// The sink is shut down; the row was not accepted.
    #[error("sink is closed")]
    Closed,
}

impl From<writer::InsertError> for SinkError {
    fn from(e: writer::InsertError) -> Self {
        SinkError::Insert(e)
    }
}

/// Counts since start, returned by [`Sink::shutdown`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Rows confirmed by ClickHouse (direct and replayed).
    pub rows_written: u64,
    /// Rows written to the spool.
    pub rows_spooled: u64,
    /// Rows ClickHouse refused as bad data (kept in the reject spool).
    pub rows_rejected: u64,
    /// Rows lost, every reason together.
    pub rows_dropped: u64,
    /// Bytes left in the spool for the next start (or `spool replay`).
    pub spool_bytes: u64,
}

/// Cheap, cloneable sender of rows into the sink.
#[derive(Clone, Debug)]
pub struct SinkHandle {
    tx: mpsc::Sender<Msg>,
    metrics: Arc<SinkMetrics>,
}

impl std::fmt::Debug for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Msg")
    }
}

impl SinkHandle {
    /// Queues one row for `table`; waits while the channel is full (backpressure).
    /// A value that does not fit the table is dropped and counted
    /// (`reason="wrong_type"`).
    pub async fn send(&self, row: Row, table: Table) -> Result<(), SinkError> {
        self.tx
            .send(Msg::One(table, row))
            .await
            .map_err(|_| SinkError::Closed)
    }

    /// Counts `rows` lost on their way to the sink by a part of the caller that
    /// panicked (a bug): `dropped_rows_total{reason="internal"}`, with the rows the
    /// sink's own tasks lose so, so that every row lost is counted in one place.
    pub fn lost(&self, rows: u64) {
        self.metrics.dropped(DropReason::Internal, rows);
    }

    /// Queues many rows at once (one channel slot): cheaper per row for large sweeps.
    pub async fn send_many(&self, rows: Vec<(Table, Row)>) -> Result<(), SinkError> {
        if rows.is_empty() {
            return Ok(());
        }
        self.tx
            .send(Msg::Many(rows))
            .await
            .map_err(|_| SinkError::Closed)
    }
}

/// The running sink. Create with [`Sink::start`], stop with [`Sink::shutdown`].
pub struct Sink {
    shared: Arc<Shared>,
    shutdown: watch::Sender<bool>,
    batcher: JoinHandle<()>,
    replayer: Option<JoinHandle<()>>,
}

impl Sink {
    /// Opens the spool (replaying what an earlier run left there once ClickHouse
    /// answers) and starts the sink tasks. Does not contact ClickHouse: an unreachable
    /// server only means spooling. Needs a tokio runtime.
    ///
    /// `ch = None`: file sink, every batch goes to the spool.
    pub async fn start(
        ch: Option<ClickHouseConfig>,
        spool: SpoolConfig,
        metrics: Arc<SinkMetrics>,
    ) -> Result<(Sink, SinkHandle), SinkError> {
        if let Some(c) = &ch {
            check_config(c)?;
        }
        let (sp, rejects) = open_spools(&spool, ch.is_some(), &metrics).await?;
        let limits = match &ch {
            Some(c) => batch::Limits {
                rows: c.batch_rows,
                bytes: c.batch_bytes,
                age: c.flush_interval,
            },
            None => {
                let d = ClickHouseConfig::default();
                batch::Limits {
                    rows: d.batch_rows,
                    bytes: d.batch_bytes,
                    age: d.flush_interval,
                }
            }
        };
        let max_tasks = ch.as_ref().map_or(1, |c| c.max_inflight_inserts);
        let health = if ch.is_some() {
            Health::Writing
        } else {
            pipeline::file_only_health()
        };
        let shared = Arc::new(Shared::new(
            ch.as_ref().map(writer::Writer::new),
            sp,
            rejects,
            metrics,
            health,
            max_tasks,
        ));
        let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
        let (stx, srx) = watch::channel(false);
        let batcher = tokio::spawn(pipeline::run_batcher(
            shared.clone(),
            rx,
            limits,
            max_tasks,
            srx.clone(),
        ));
        // Ends at the stop; not waited for (the stop seals the spools itself).
        tokio::spawn(pipeline::run_fsyncer(
            shared.clone(),
            spool.fsync_interval,
            srx.clone(),
        ));
        let replayer = ch
            .is_some()
            .then(|| tokio::spawn(pipeline::run_replayer(shared.clone(), srx)));
        let metrics = shared.metrics.clone();
        Ok((
            Sink {
                shared,
                shutdown: stx,
                batcher,
                replayer,
            },
            SinkHandle { tx, metrics },
        ))
    }

    /// Current state.
    pub fn health(&self) -> Health {
        self.shared.health()
    }

    /// Reads [`Sink::health`] without holding the sink: what a health endpoint keeps.
    /// Holding the sink itself, a connection task the endpoint had not dropped yet
    /// when the daemon stopped kept it from being flushed.
    pub fn health_reader(&self) -> HealthReader {
        HealthReader(self.shared.clone())
    }

    /// Tries the reject spool again ([`RejectsRetry`]), without holding the sink.
    pub fn rejects_retry(&self) -> RejectsRetry {
        RejectsRetry(self.shared.clone())
    }

    /// The metrics passed to `start`.
    pub fn metrics(&self) -> &Arc<SinkMetrics> {
        &self.shared.metrics
    }

    /// Flushes everything: rows still queued and pending batches are inserted (one
    /// attempt each) or spooled; the replay task stops after its current INSERT; the
    /// spool is fsynced. Rows sent after this starts are refused.
    pub async fn shutdown(self) -> Result<ShutdownReport, SinkError> {
        let Sink {
            shared,
            shutdown,
            batcher,
            replayer,
        } = self;
        let _ = shutdown.send(true);
        let sh = shared.clone();
        let tasks = async move {
            let r1 = batcher.await;
            // A batcher that panicked left its INSERT tasks running: their batches are
            // stored or spooled before the spools close.
            pipeline::join_orphans(&sh).await;
            let r2 = match replayer {
                Some(h) => h.await,
                None => Ok(()),
            };
            (r1, r2)
        };
        tokio::pin!(tasks);
        let (r1, r2) = match tokio::time::timeout(SHUTDOWN_GRACE, &mut tasks).await {
            Ok(r) => r,
            Err(_) => {
                tracing::warn!(
                    grace_s = SHUTDOWN_GRACE.as_secs(),
                    "sink: INSERTs still unconfirmed at shutdown; their batches go to the spool (stored twice if ClickHouse did store them)"
                );
                shared.stop_waiting();
                tasks.await
            }
        };
        close_spools(&shared).await;
        r1.map_err(|e| SinkError::Task(e.to_string()))?;
        r2.map_err(|e| SinkError::Task(e.to_string()))?;
        let m = &shared.metrics;
        Ok(ShutdownReport {
            rows_written: Table::ALL.iter().map(|t| m.rows_written(*t)).sum(),
            rows_spooled: m.spooled_rows(),
            rows_rejected: m.rejected_rows(),
            rows_dropped: DropReason::ALL.iter().map(|r| m.dropped_rows(*r)).sum(),
            spool_bytes: m.spool_bytes(),
        })
    }
}

/// The spool of `spool.dir` and, when there is a ClickHouse to refuse data, the reject
/// spool under `rejected/` (both locked, opened off the runtime).
async fn open_spools(
    spool: &SpoolConfig,
    with_rejects: bool,
    metrics: &Arc<SinkMetrics>,
) -> Result<(spool::Spool, Option<spool::Spool>), SinkError> {
    let (m, spool) = (metrics.clone(), spool.clone());
    tokio::task::spawn_blocking(move || {
        let main = spool::Spool::open(&spool, m.clone())?;
        let rejects = with_rejects
            .then(|| {
                let rc = SpoolConfig {
                    dir: spool.dir.join("rejected"),
                    ..spool.clone()
                };
                spool::Spool::open_rejects(&rc, m)
            })
            .transpose()?;
        Ok::<_, SinkError>((main, rejects))
    })
    .await
    .map_err(|e| SinkError::Task(e.to_string()))?
}

fn pipeline_lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Result of [`replay_spool`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplayReport {
    /// Segments fully replayed and deleted.
    pub segments: u64,
    /// Rows confirmed by ClickHouse.
    pub rows: u64,
    /// Rows refused as bad data (kept under `rejected/`).
    pub rejected_rows: u64,
    /// Corrupted records skipped.
    pub corrupt_records: u64,
    /// Segments that could not be read, set aside as `<seq>.seg.unreadable`.
    pub unreadable_segments: u64,
}

/// Loads every spooled batch of `spool.dir` into ClickHouse, oldest first, deleting
/// each segment once all its records are confirmed (`netpoller spool replay`). Takes
/// the spool lock, so it refuses to run beside a daemon using the same directory. Each
/// record gets `ch.max_attempts` attempts; then it stops with the error, keeping the
/// rest for a later run: `Err` then carries the report of what was loaded before.
/// A segment that cannot be read three times in a row (`retry_backoff` apart) is set
/// aside, as the daemon does, and the rest loaded. `spool.dir` must exist: a mistyped
/// directory is not an empty spool.
pub async fn replay_spool(
    ch: &ClickHouseConfig,
    spool: &SpoolConfig,
) -> Result<ReplayReport, (SinkError, ReplayReport)> {
    let nothing = |e| (e, ReplayReport::default());
    check_config(ch).map_err(nothing)?;
    spool::existing_dir(&spool.dir).map_err(|e| nothing(e.into()))?;
    let metrics = Arc::new(SinkMetrics::default());
    let (sp, rejects) = open_spools(spool, true, &metrics).await.map_err(nothing)?;
    let mut shared = Shared::new(
        Some(writer::Writer::new(ch)),
        sp,
        rejects,
        metrics.clone(),
        Health::Writing,
        1,
    );
    shared.one_shot = true;
    let shared = Arc::new(shared);
    let (_stx, mut srx) = watch::channel(false);
    let mut report = ReplayReport::default();
    let mut unreadable = pipeline::UnreadableTries::default();
    let result = loop {
        let Some(seg) = pipeline::checkout(&shared).await else {
            break Ok(());
        };
        match pipeline::replay_segment(&shared, &seg, Some(ch.max_attempts), None, &mut srx).await {
            Ok(pipeline::Replayed::Done) => {
                pipeline::finish(&shared, seg.seq, true).await;
                report.segments += 1;
            }
            Ok(pipeline::Replayed::Stopped(e)) => {
                pipeline::finish(&shared, seg.seq, false).await;
                break Err(e.map_or(SinkError::Closed, SinkError::Insert));
            }
            Ok(pipeline::Replayed::Held(e)) => {
                pipeline::finish(&shared, seg.seq, false).await;
                break Err(SinkError::Insert(e));
            }
            Err(e) if e.is_unreadable() => {
                if !unreadable.failed(seg.seq) {
                    pipeline::finish(&shared, seg.seq, false).await;
                    tokio::time::sleep(ch.retry_backoff).await;
                    continue;
                }
                pipeline::set_aside(&shared, &seg, &e).await;
                report.unreadable_segments += 1;
            }
            Err(e) => {
                pipeline::finish(&shared, seg.seq, false).await;
                break Err(e.into());
            }
        }
    };
    // As a daemon's stop does: what went to `rejected/` is fsynced before the command
    // returns (there is no batcher here to run the fsync timer).
    close_spools(&shared).await;
    report.rows = metrics.replayed_rows();
    report.rejected_rows = metrics.rejected_rows();
    report.corrupt_records = metrics.corrupt_records();
    match result {
        Ok(()) => Ok(report),
        Err(e) => Err((e, report)),
    }
}

/// Seals both spools (fsynced), off the runtime's thread.
async fn close_spools(shared: &Arc<pipeline::Shared>) {
    let sh = shared.clone();
    let _ = tokio::task::spawn_blocking(move || {
        pipeline_lock(&sh.spool).close();
        if let Some(r) = &sh.rejects {
            pipeline_lock(r).close();
        }
    })
    .await;
}

/// Result of [`dump_tsv`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DumpReport {
    /// Segments read.
    pub segments: u64,
    /// Rows printed.
    pub rows: u64,
    /// Corrupted regions skipped (logged).
    pub corrupt_records: u64,
    /// Records not printed: ClickHouse confirmed them during a replay that has not
    /// finished their segment yet (its `.ack` file).
    pub confirmed_records: u64,
    /// Segments that could not be read (logged).
    pub unreadable_segments: u64,
}

/// Escapes a field as ClickHouse's TabSeparated does (`\\`, `\t`, `\n`, ...).
pub fn tsv_escape(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\0' => out.push_str("\\0"),
            c => out.push(c),
        }
    }
}

/// Writes every row of every segment in `dir` (oldest first) as TSV lines:
/// `table, itemid, clock, ns, hostname, itemname, value` (`spool dump`; a trends row's
/// value is `min=… max=… avg=… count=…`). Read-only:
/// does not take the spool lock, so it works beside a running daemon (the active
/// segment may end in a record being written, reported as truncated). What is left to
/// load only: records a replay has had confirmed are not printed. `dir` must exist.
pub fn dump_tsv(dir: &Path, out: &mut dyn Write) -> Result<DumpReport, SpoolError> {
    spool::existing_dir(dir)?;
    let metrics = SinkMetrics::default();
    let mut report = DumpReport::default();
    let mut line = String::new();
    for seg in spool::list_segments(dir)? {
        let bytes = match spool::read_segment(&seg) {
            Ok(b) => b,
            // Loaded or dropped by the daemon beside us since it was listed.
            Err(e) if e.is_gone() => continue,
            Err(e) => {
                tracing::error!(error = %e, "spool: a segment cannot be read; its rows are not shown");
                report.unreadable_segments += 1;
                continue;
            }
        };
        report.segments += 1;
        let acks = spool::load_acks(&seg);
        for rec in spool::scan_logged(&seg, &bytes, &metrics) {
            if acks.contains(&rec.offset) {
                report.confirmed_records += 1;
                continue;
            }
            let rows = match rowbinary::decode_rows(rec.table, &bytes[rec.payload.clone()]) {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(segment = %seg.path.display(), offset = rec.offset, error = %e, "spool: record payload does not decode; skipped");
                    report.corrupt_records += 1;
                    continue;
                }
            };
            for d in rows {
                let r = &d.row;
                line.clear();
                line.push_str(rec.table.name());
                line.push_str(&format!("\t{}\t{}\t{}\t", r.itemid, r.clock, r.ns));
                tsv_escape(&r.hostname, &mut line);
                line.push('\t');
                tsv_escape(&r.itemname, &mut line);
                line.push('\t');
                match &r.value {
                    RowValue::Float(v) if v.is_nan() => line.push_str("nan"),
                    RowValue::Float(v) if v.is_infinite() => {
                        line.push_str(if *v > 0.0 { "inf" } else { "-inf" })
                    }
                    RowValue::Float(v) => line.push_str(&v.to_string()),
                    RowValue::Uint(v) => line.push_str(&v.to_string()),
                    RowValue::Str(s) => tsv_escape(s, &mut line),
                    t @ (RowValue::FloatTrend(_) | RowValue::UintTrend(_)) => {
                        line.push_str(&t.to_string())
                    }
                }
                line.push('\n');
                out.write_all(line.as_bytes()).map_err(|e| SpoolError::Io {
                    path: seg.path.clone(),
                    what: "writing output",
                    cause: e,
                })?;
                report.rows += 1;
            }
        }
    }
    report.corrupt_records += metrics.corrupt_records();
    Ok(report)
}

/// Every problem of `[clickhouse]` as one configuration error.
fn check_config(ch: &ClickHouseConfig) -> Result<(), SinkError> {
    let problems = ch.validate();
    if problems.is_empty() {
        return Ok(());
    }
    let text = problems
        .iter()
        .map(|(k, m)| format!("clickhouse.{k}: {m}"))
        .collect::<Vec<_>>()
        .join("; ");
    Err(SinkError::Config(text))
}
