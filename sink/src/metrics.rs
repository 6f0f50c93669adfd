//! Counters of the sink, kept in atomics and rendered as Prometheus text.
//!
//! Every dropped row is counted here with a reason ([`DropReason`]); every place that
//! drops also logs (see `pipeline.rs` and `spool.rs`). Counters only grow; the two
//! spool gauges are set from the spool's own totals.

use crate::row::Table;
use std::fmt::Write as _;
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
    /// header when readable).
    Corrupt,
    /// A row's value does not fit the table it was sent to (caller bug).
    WrongType,
    /// The reject spool (`rejected/`, batches ClickHouse refused as bad data) exceeded
    /// `spool_max_bytes`: its oldest segment was deleted.
    RejectSpoolCap,
    /// A sink task panicked (a bug) with the batch it held.
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
/// `Sink::start`, and call [`SinkMetrics::render_prometheus`] from `/metrics`.
#[derive(Debug, Default)]
pub struct SinkMetrics {
    rows_received: [AtomicU64; Table::COUNT],
    rows_written: [AtomicU64; Table::COUNT],
    bytes_written: [AtomicU64; Table::COUNT],
    inserts: [AtomicU64; Table::COUNT],
    insert_errors: [AtomicU64; Table::COUNT],
    retries: AtomicU64,
    /// INSERTs per bucket, not cumulative (the last one: beyond every bound), so that
    /// a scrape's cumulative buckets and count come from one set of numbers and
    /// agree however INSERTs and the scrape interleave.
    insert_seconds_buckets: [AtomicU64; INSERT_SECONDS_BUCKETS.len() + 1],
    insert_micros_sum: AtomicU64,
    batches: [AtomicU64; Table::COUNT],
    spooled_rows: AtomicU64,
    spooled_bytes: AtomicU64,
    spool_bytes: AtomicU64,
    spool_files: AtomicU64,
    replayed_rows: AtomicU64,
    rejected_rows: AtomicU64,
    corrupt_records: AtomicU64,
    fsync_errors: AtomicU64,
    dropped_rows: [AtomicU64; DropReason::ALL.len()],
    reject_spool_bytes: AtomicU64,
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
        let s = took.as_secs_f64();
        let i = INSERT_SECONDS_BUCKETS
            .iter()
            .position(|le| s <= *le)
            .unwrap_or(INSERT_SECONDS_BUCKETS.len());
        self.insert_seconds_buckets[i].fetch_add(1, Relaxed);
        self.insert_micros_sum
            .fetch_add(u64::try_from(took.as_micros()).unwrap_or(u64::MAX), Relaxed);
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

    /// Appends the Prometheus text exposition of every sink metric to `out`
    /// (`netpoller_sink_*`; counters end in `_total`; one `_seconds` histogram).
    pub fn render_prometheus(&self, out: &mut String) {
        let mut counter = |name: &str, help: &str, kind: &str, lines: Vec<(String, u64)>| {
            let _ = writeln!(out, "# HELP netpoller_sink_{name} {help}");
            let _ = writeln!(out, "# TYPE netpoller_sink_{name} {kind}");
            for (labels, v) in lines {
                let _ = writeln!(out, "netpoller_sink_{name}{labels} {v}");
            }
        };
        let per_table = |a: &[AtomicU64; Table::COUNT]| {
            Table::ALL
                .iter()
                .map(|t| {
                    (
                        format!("{{table=\"{}\"}}", t.name()),
                        a[t.index()].load(Relaxed),
                    )
                })
                .collect()
        };
        counter(
            "rows_received_total",
            "Rows handed to the sink.",
            "counter",
            per_table(&self.rows_received),
        );
        counter(
            "rows_written_total",
            "Rows confirmed by ClickHouse (direct and replayed).",
            "counter",
            per_table(&self.rows_written),
        );
        counter(
            "bytes_written_total",
            "RowBinary bytes confirmed by ClickHouse (before compression).",
            "counter",
            per_table(&self.bytes_written),
        );
        counter(
            "inserts_total",
            "Successful INSERT statements.",
            "counter",
            per_table(&self.inserts),
        );
        counter(
            "insert_errors_total",
            "Failed INSERT attempts by class.",
            "counter",
            ErrorClass::ALL
                .iter()
                .map(|c| {
                    (
                        format!("{{class=\"{}\"}}", c.label()),
                        self.insert_errors[*c as usize].load(Relaxed),
                    )
                })
                .collect(),
        );
        counter(
            "insert_retries_total",
            "INSERT attempts repeated after a retryable error.",
            "counter",
            vec![(String::new(), self.retries.load(Relaxed))],
        );
        counter(
            "batches_total",
            "Batches closed, by what closed them.",
            "counter",
            FlushTrigger::ALL
                .iter()
                .map(|t| {
                    (
                        format!("{{trigger=\"{}\"}}", t.label()),
                        self.batches[*t as usize].load(Relaxed),
                    )
                })
                .collect(),
        );
        counter(
            "spooled_rows_total",
            "Rows written to the disk spool.",
            "counter",
            vec![(String::new(), self.spooled_rows.load(Relaxed))],
        );
        counter(
            "spooled_bytes_total",
            "Bytes written to the disk spool.",
            "counter",
            vec![(String::new(), self.spooled_bytes.load(Relaxed))],
        );
        counter(
            "spool_bytes",
            "Current size of the disk spool.",
            "gauge",
            vec![(String::new(), self.spool_bytes.load(Relaxed))],
        );
        counter(
            "spool_files",
            "Current number of spool segment files.",
            "gauge",
            vec![(String::new(), self.spool_files.load(Relaxed))],
        );
        counter(
            "replayed_rows_total",
            "Spooled rows confirmed by ClickHouse.",
            "counter",
            vec![(String::new(), self.replayed_rows.load(Relaxed))],
        );
        counter(
            "rejected_rows_total",
            "Rows refused by ClickHouse as bad data, kept in the reject file.",
            "counter",
            vec![(String::new(), self.rejected_rows.load(Relaxed))],
        );
        counter(
            "reject_spool_bytes",
            "Current size of the reject spool (rejected/: batches refused as bad data, kept for inspection; capped at spool_max_bytes of its own).",
            "gauge",
            vec![(String::new(), self.reject_spool_bytes.load(Relaxed))],
        );
        counter(
            "spool_corrupt_records_total",
            "Spool records skipped as truncated or corrupted.",
            "counter",
            vec![(String::new(), self.corrupt_records.load(Relaxed))],
        );
        counter(
            "spool_fsync_errors_total",
            "Spool fsyncs that failed: what was spooled since the last good one may not survive a power loss (its segment is closed, new data goes to a new one).",
            "counter",
            vec![(String::new(), self.fsync_errors.load(Relaxed))],
        );
        counter(
            "dropped_rows_total",
            "Rows lost, by reason.",
            "counter",
            DropReason::ALL
                .iter()
                .map(|r| {
                    (
                        format!("{{reason=\"{}\"}}", r.label()),
                        self.dropped_rows[*r as usize].load(Relaxed),
                    )
                })
                .collect(),
        );
        let _ = writeln!(
            out,
            "# HELP netpoller_sink_insert_seconds Duration of successful INSERTs."
        );
        let _ = writeln!(out, "# TYPE netpoller_sink_insert_seconds histogram");
        let mut cumulative = 0;
        for (i, le) in INSERT_SECONDS_BUCKETS.iter().enumerate() {
            cumulative += self.insert_seconds_buckets[i].load(Relaxed);
            let _ = writeln!(
                out,
                "netpoller_sink_insert_seconds_bucket{{le=\"{le}\"}} {cumulative}"
            );
        }
        let count =
            cumulative + self.insert_seconds_buckets[INSERT_SECONDS_BUCKETS.len()].load(Relaxed);
        let _ = writeln!(
            out,
            "netpoller_sink_insert_seconds_bucket{{le=\"+Inf\"}} {count}"
        );
        let _ = writeln!(
            out,
            "netpoller_sink_insert_seconds_sum {}",
            self.insert_micros_sum.load(Relaxed) as f64 / 1e6
        );
        let _ = writeln!(out, "netpoller_sink_insert_seconds_count {count}");
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
        let mut s = String::new();
        m.render_prometheus(&mut s);
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
        let mut s = String::new();
        m.render_prometheus(&mut s);
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
