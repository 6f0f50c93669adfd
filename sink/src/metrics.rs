//! Counters of the sink, kept in atomics and rendered as Prometheus text.
//!
//! Every dropped row is counted here with a reason ([`DropReason`]); every place that
//! drops also logs (see `pipeline.rs` and `spool.rs`). Counters only grow; the two
//! spool gauges are set from the spool's own totals.

use crate::row::Table;
use exposition::{Exposition, Histogram};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Class of a failed INSERT attempt (label `class` of
/// `netpoller_sink_insert_errors_total`). See [`crate::writer::classify`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorClass {
    /// TCP connect / connection reset / HTTP protocol error: retried.
    Network,
    /// No answer within `request_timeout`: retried.
    Timeout,
    /// Server-side error not caused by the data (5xx, overload, missing table, auth):
    /// retried, then spooled.
    Server,
    /// ClickHouse refused the data itself (codes 53, 117, 27, 6, ...): never retried,
    /// the batch goes to the reject file.
    Data,
}

impl ErrorClass {
    const ALL: [ErrorClass; 4] = [
        ErrorClass::Network,
        ErrorClass::Timeout,
        ErrorClass::Server,
        ErrorClass::Data,
    ];

    /// Label value.
    pub fn label(self) -> &'static str {
        match self {
            ErrorClass::Network => "network",
            ErrorClass::Timeout => "timeout",
            ErrorClass::Server => "server",
            ErrorClass::Data => "data",
        }
    }

    /// Whether an attempt failing this way may be repeated.
    pub fn is_retryable(self) -> bool {
        !matches!(self, ErrorClass::Data)
    }
}

/// Why rows were lost (label `reason` of `netpoller_sink_dropped_rows_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// The spool exceeded `spool_max_bytes`: its oldest segment was deleted.
    SpoolCap,
    /// Writing to the spool failed (disk full, permissions): the batch is gone.
    SpoolWrite,
    /// A spool record failed its checksum or was truncated (rows as claimed by its
    /// header when readable), or its segment could not be read, or was deleted.
    Corrupt,
    /// A row's value does not fit the table it was sent to (caller bug).
    WrongType,
    /// The reject spool (`rejected/`, batches ClickHouse refused as bad data) exceeded
    /// `spool_max_bytes`: its oldest segment was deleted.
    RejectSpoolCap,
    /// A sink task panicked (a bug) with the rows it held: an INSERT task's batch, or
    /// the batcher's pending rows and the rows left in its channel.
    Internal,
}

impl DropReason {
    pub(crate) const ALL: [DropReason; 6] = [
        DropReason::SpoolCap,
        DropReason::SpoolWrite,
        DropReason::Corrupt,
        DropReason::WrongType,
        DropReason::RejectSpoolCap,
        DropReason::Internal,
    ];

    /// Label value.
    pub fn label(self) -> &'static str {
        match self {
            DropReason::SpoolCap => "spool_cap",
            DropReason::SpoolWrite => "spool_write",
            DropReason::Corrupt => "corrupt",
            DropReason::WrongType => "wrong_type",
            DropReason::RejectSpoolCap => "reject_spool_cap",
            DropReason::Internal => "internal",
        }
    }
}

/// What closed a batch (label `trigger` of `netpoller_sink_batches_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushTrigger {
    /// `batch_rows` reached.
    Rows,
    /// `batch_bytes` reached.
    Bytes,
    /// `flush_interval` elapsed since the first row.
    Age,
    /// Shutdown flush.
    Shutdown,
}

impl FlushTrigger {
    const ALL: [FlushTrigger; 4] = [
        FlushTrigger::Rows,
        FlushTrigger::Bytes,
        FlushTrigger::Age,
        FlushTrigger::Shutdown,
    ];

    fn label(self) -> &'static str {
        match self {
            FlushTrigger::Rows => "rows",
            FlushTrigger::Bytes => "bytes",
            FlushTrigger::Age => "age",
            FlushTrigger::Shutdown => "shutdown",
        }
    }
}

/// Upper bounds (seconds) of the `netpoller_sink_insert_seconds` histogram.
pub const INSERT_SECONDS_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// All sink counters. Create one with `Arc::new(SinkMetrics::default())`, pass it to
/// `Sink::start`, and call [`SinkMetrics::render`] from `/metrics`.
#[derive(Debug, Default)]
pub struct SinkMetrics {
    rows_received: [AtomicU64; Table::COUNT],
    rows_written: [AtomicU64; Table::COUNT],
    bytes_written: [AtomicU64; Table::COUNT],
    inserts: [AtomicU64; Table::COUNT],
    insert_errors: [AtomicU64; Table::COUNT],
    retries: AtomicU64,
    insert_seconds: InsertSeconds,
    batches: [AtomicU64; Table::COUNT],
    spooled_rows: AtomicU64,
    spooled_bytes: AtomicU64,
    spool_bytes: AtomicU64,
    spool_files: AtomicU64,
    replayed_rows: AtomicU64,
    rejected_rows: AtomicU64,
    retried_rows: AtomicU64,
    corrupt_records: AtomicU64,
    fsync_errors: AtomicU64,
    dropped_rows: [AtomicU64; DropReason::ALL.len()],
    reject_spool_bytes: AtomicU64,
}

/// The `netpoller_sink_insert_seconds` histogram (a newtype for its bounds' default).
#[derive(Debug)]
struct InsertSeconds(Histogram);

impl Default for InsertSeconds {
    fn default() -> Self {
        InsertSeconds(Histogram::new(&INSERT_SECONDS_BUCKETS))
    }
}

impl SinkMetrics {
    pub(crate) fn row_received(&self, table: Table) {
        self.rows_received[table.index()].fetch_add(1, Relaxed);
    }
    pub(crate) fn batch_flushed(&self, trigger: FlushTrigger) {
        self.batches[trigger as usize].fetch_add(1, Relaxed);
    }
    pub(crate) fn insert_ok(&self, table: Table, rows: u64, bytes: u64, took: Duration) {
        let i = table.index();
        self.rows_written[i].fetch_add(rows, Relaxed);
        self.bytes_written[i].fetch_add(bytes, Relaxed);
        self.inserts[i].fetch_add(1, Relaxed);
        self.observe_insert(took);
    }
    pub(crate) fn observe_insert(&self, took: Duration) {
        self.insert_seconds.0.observe_duration(took);
    }
    pub(crate) fn insert_error(&self, class: ErrorClass) {
        self.insert_errors[class as usize].fetch_add(1, Relaxed);
    }
    pub(crate) fn retry(&self) {
        self.retries.fetch_add(1, Relaxed);
    }
    pub(crate) fn spooled(&self, rows: u64, bytes: u64) {
        self.spooled_rows.fetch_add(rows, Relaxed);
        self.spooled_bytes.fetch_add(bytes, Relaxed);
    }
    pub(crate) fn set_spool(&self, bytes: u64, files: u64) {
        self.spool_bytes.store(bytes, Relaxed);
        self.spool_files.store(files, Relaxed);
    }
    pub(crate) fn set_reject_spool(&self, bytes: u64) {
        self.reject_spool_bytes.store(bytes, Relaxed);
    }
    pub(crate) fn replayed(&self, rows: u64) {
        self.replayed_rows.fetch_add(rows, Relaxed);
    }
    pub(crate) fn rejected(&self, rows: u64) {
        self.rejected_rows.fetch_add(rows, Relaxed);
    }
    pub(crate) fn retried(&self, rows: u64) {
        self.retried_rows.fetch_add(rows, Relaxed);
    }
    pub(crate) fn corrupt_record(&self) {
        self.corrupt_records.fetch_add(1, Relaxed);
    }
    pub(crate) fn fsync_error(&self) {
        self.fsync_errors.fetch_add(1, Relaxed);
    }
    /// Spool fsyncs that failed.
    pub fn fsync_errors(&self) -> u64 {
        self.fsync_errors.load(Relaxed)
    }
    pub(crate) fn dropped(&self, reason: DropReason, rows: u64) {
        self.dropped_rows[reason as usize].fetch_add(rows, Relaxed);
    }

    /// Rows confirmed by ClickHouse for `table` (direct and replayed).
    pub fn rows_written(&self, table: Table) -> u64 {
        self.rows_written[table.index()].load(Relaxed)
    }
    /// Rows written to the spool so far.
    pub fn spooled_rows(&self) -> u64 {
        self.spooled_rows.load(Relaxed)
    }
    /// Rows confirmed by ClickHouse through spool replay.
    pub fn replayed_rows(&self) -> u64 {
        self.replayed_rows.load(Relaxed)
    }
    /// Rows lost for `reason`.
    pub fn dropped_rows(&self, reason: DropReason) -> u64 {
        self.dropped_rows[reason as usize].load(Relaxed)
    }
    /// Spool records skipped as corrupted.
    pub fn corrupt_records(&self) -> u64 {
        self.corrupt_records.load(Relaxed)
    }
    /// Rows refused by ClickHouse and written to the reject file.
    pub fn rejected_rows(&self) -> u64 {
        self.rejected_rows.load(Relaxed)
    }
    /// Rows moved from the reject spool back to the spool to be tried again.
    pub fn retried_rows(&self) -> u64 {
        self.retried_rows.load(Relaxed)
    }
    /// Failed INSERT attempts of `class`.
    pub fn insert_errors(&self, class: ErrorClass) -> u64 {
        self.insert_errors[class as usize].load(Relaxed)
    }
    /// Successful INSERTs into `table`.
    pub fn inserts(&self, table: Table) -> u64 {
        self.inserts[table.index()].load(Relaxed)
    }
    /// Current spool size in bytes.
    pub fn spool_bytes(&self) -> u64 {
        self.spool_bytes.load(Relaxed)
    }

    /// The sink's metrics alone as exposition text (tests, tools).
    pub fn render_text(&self) -> String {
        let mut out = Exposition::new();
        self.render(&mut out);
        out.finish()
    }

    /// Renders every sink metric into `out` (`netpoller_sink_*`; counters end in
    /// `_total`; one `_seconds` histogram), with the daemon's other metrics.
    pub fn render(&self, out: &mut Exposition) {
        let load = |a: &AtomicU64| a.load(Relaxed);
        let per_table = |out: &mut Exposition, name: &str, help: &str, a: &[AtomicU64]| {
            for t in Table::ALL {
                out.counter(name, help, &[("table", t.name())], load(&a[t.index()]));
            }
        };
        per_table(
            out,
            "netpoller_sink_rows_received_total",
            "Rows handed to the sink.",
            &self.rows_received,
        );
        per_table(
            out,
            "netpoller_sink_rows_written_total",
            "Rows confirmed by ClickHouse (direct and replayed).",
            &self.rows_written,
        );
        per_table(
            out,
            "netpoller_sink_bytes_written_total",
            "RowBinary bytes confirmed by ClickHouse (before compression).",
            &self.bytes_written,
        );
        per_table(
            out,
            "netpoller_sink_inserts_total",
            "Successful INSERT statements.",
            &self.inserts,
        );
        for c in ErrorClass::ALL {
            out.counter(
                "netpoller_sink_insert_errors_total",
                "Failed INSERT attempts by class.",
                &[("class", c.label())],
                load(&self.insert_errors[c as usize]),
            );
        }
        out.counter(
            "netpoller_sink_insert_retries_total",
            "INSERT attempts repeated after a retryable error.",
            &[],
            load(&self.retries),
        );
        for t in FlushTrigger::ALL {
            out.counter(
                "netpoller_sink_batches_total",
                "Batches closed, by what closed them.",
                &[("trigger", t.label())],
                load(&self.batches[t as usize]),
            );
        }
        for (name, help, v) in [
            ("netpoller_sink_spooled_rows_total", "Rows written to the disk spool.", &self.spooled_rows),
            ("netpoller_sink_spooled_bytes_total", "Bytes written to the disk spool.", &self.spooled_bytes),
            ("netpoller_sink_replayed_rows_total", "Spooled rows confirmed by ClickHouse.", &self.replayed_rows),
            ("netpoller_sink_rejected_rows_total", "Rows ClickHouse refused (bad data, or a spooled batch it kept refusing while it stored others), kept in the reject spool (rejected/).", &self.rejected_rows),
            ("netpoller_sink_retried_rejected_rows_total", "Rows of the reject spool moved back to the spool to be tried again (SIGUSR1, once what ClickHouse refused is fixed); those refused again count again as rejected.", &self.retried_rows),
            ("netpoller_sink_spool_corrupt_records_total", "Spool records skipped as truncated or corrupted.", &self.corrupt_records),
            ("netpoller_sink_spool_fsync_errors_total", "Spool fsyncs that failed: what was spooled since the last good one may not survive a power loss (its segment is closed, new data goes to a new one); or, of the spool directory, a new segment may not.", &self.fsync_errors),
        ] {
            out.counter(name, help, &[], load(v));
        }
        for (name, help, v) in [
            ("netpoller_sink_spool_bytes", "Current size of the disk spool.", &self.spool_bytes),
            ("netpoller_sink_spool_files", "Current number of spool segment files.", &self.spool_files),
            ("netpoller_sink_reject_spool_bytes", "Current size of the reject spool (rejected/: batches refused as bad data, kept for inspection; capped at spool_max_bytes of its own).", &self.reject_spool_bytes),
        ] {
            out.gauge(name, help, &[], load(v) as f64);
        }
        for r in DropReason::ALL {
            out.counter(
                "netpoller_sink_dropped_rows_total",
                "Rows lost, by reason.",
                &[("reason", r.label())],
                load(&self.dropped_rows[r as usize]),
            );
        }
        out.histogram(
            "netpoller_sink_insert_seconds",
            "Duration of successful INSERTs.",
            &[],
            &self.insert_seconds.0,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_histogram() {
        let m = SinkMetrics::default();
        m.insert_ok(Table::Uint, 10, 100, Duration::from_millis(30));
        m.dropped(DropReason::SpoolCap, 5);
        m.insert_error(ErrorClass::Data);
        let s = m.render_text();
        assert!(
            s.contains("netpoller_sink_rows_written_total{table=\"history_uint\"} 10\n"),
            "{s}"
        );
        assert!(s.contains("netpoller_sink_dropped_rows_total{reason=\"spool_cap\"} 5\n"));
        assert!(s.contains("netpoller_sink_insert_errors_total{class=\"data\"} 1\n"));
        assert!(s.contains("netpoller_sink_insert_seconds_bucket{le=\"0.025\"} 0\n"));
        assert!(s.contains("netpoller_sink_insert_seconds_bucket{le=\"0.05\"} 1\n"));
        assert!(s.contains("netpoller_sink_insert_seconds_bucket{le=\"+Inf\"} 1\n"));
        assert!(s.contains("netpoller_sink_insert_seconds_sum 0.03\n"));
        // An INSERT slower than every bound counts in +Inf and the count only.
        m.observe_insert(Duration::from_secs(1000));
        let s = m.render_text();
        let last = INSERT_SECONDS_BUCKETS[INSERT_SECONDS_BUCKETS.len() - 1];
        assert!(
            s.contains(&format!(
                "netpoller_sink_insert_seconds_bucket{{le=\"{last}\"}} 1\n"
            )),
            "{s}"
        );
        assert!(s.contains("netpoller_sink_insert_seconds_bucket{le=\"+Inf\"} 2\n"));
        assert!(s.contains("netpoller_sink_insert_seconds_count 2\n"));
        // Every sample line belongs to a declared metric family.
        for line in s.lines().filter(|l| !l.starts_with('#')) {
            let name = line.split(['{', ' ']).next().unwrap();
            let family = name
                .trim_end_matches("_bucket")
                .trim_end_matches("_sum")
                .trim_end_matches("_count");
            assert!(
                s.contains(&format!("# TYPE {family} ")) || s.contains(&format!("# TYPE {name} ")),
                "{line}"
            );
        }
    }
}
