//! Batches: already-encoded RowBinary for one table, and the per-table accumulator.
//!
//! A [`Batch`] is what gets inserted, held across retries, spooled and replayed: the
//! bytes are encoded once and never again, so a replayed batch is byte-for-byte what
//! the first INSERT carried.
//!
//! A batch holds about its own size: its bytes are a slice of the buffer it was
//! encoded in, and keep all of that buffer alive for as long as the batch lives (in an
//! INSERT, its retries through an outage, the queue), so a new batch reserves what its
//! table's last batch took, not what the limits allow.

use crate::metrics::FlushTrigger;
use crate::row::{Row, Table};
use crate::rowbinary::encode_row;
use bytes::{Bytes, BytesMut};
use tokio::time::Instant;

/// Encoded rows for one table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    /// Destination table.
    pub table: Table,
    /// Number of rows in `data`.
    pub rows: u32,
    /// `clock` of the first row (for logs and ordering).
    pub first_clock: u32,
    /// RowBinary of the rows, columns as in [`Table::column_list`].
    pub data: Bytes,
}

/// Rows being collected for one table. Closes by rows, bytes, or age measured from the
/// first row (not from the previous flush), so a trickle of rows still leaves within
/// `flush_interval`.
#[derive(Debug)]
pub struct Pending {
    table: Table,
    buf: BytesMut,
    rows: u32,
    first_clock: u32,
    started: Option<Instant>,
    /// Encoded bytes of the batch taken last: what the next one reserves.
    last_len: usize,
}

/// The least a batch reserves for its rows (a few dozen rows).
const MIN_RESERVE: usize = 4 << 10;

/// Limits of a [`Pending`] batch.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Close at this many rows.
    pub rows: usize,
    /// Close at this many encoded bytes.
    pub bytes: usize,
    /// Close this long after the first row.
    pub age: std::time::Duration,
}

impl Pending {
    /// An empty accumulator for `table`.
    pub fn new(table: Table) -> Self {
        Pending {
            table,
            buf: BytesMut::new(),
            rows: 0,
            first_clock: 0,
            started: None,
            last_len: 0,
        }
    }

    /// Rows currently held.
    pub fn rows(&self) -> u32 {
        self.rows
    }

    /// Deadline of the age limit, if the batch has rows.
    pub fn deadline(&self, limits: &Limits) -> Option<Instant> {
        self.started.map(|s| s + limits.age)
    }

    /// Encodes `row`; returns the trigger if the batch is now full.
    pub fn push(
        &mut self,
        row: &Row,
        now: impl FnOnce() -> Instant,
        limits: &Limits,
    ) -> Option<FlushTrigger> {
        if self.rows == 0 {
            // The clock is read for a batch's first row only: once per batch, not per row.
            self.started = Some(now());
            self.first_clock = row.clock;
            // What the last batch took and a quarter more (a table's batches, closed by
            // age at a steady rate, are alike; a bigger one grows its buffer, which
            // doubles), at most what a full batch may take. Reserving the full batch
            // every time (3.2 MB at the default 50,000 rows) made each batch of a few
            // kilobytes hold 3.2 MB while it lived: a soak's daemon had 10 MB of heap
            // in such batches and its RSS rose with each ClickHouse outage.
            let full = limits
                .bytes
                .min(limits.rows.saturating_mul(64))
                .min(64 << 20);
            let likely = self.last_len.saturating_add(self.last_len / 4);
            self.buf.reserve(likely.max(MIN_RESERVE).min(full));
        }
        encode_row(&mut self.buf, row);
        self.rows += 1;
        if self.rows as usize >= limits.rows {
            Some(FlushTrigger::Rows)
        } else if self.buf.len() >= limits.bytes {
            Some(FlushTrigger::Bytes)
        } else {
            None
        }
    }

    /// Takes the rows out as a [`Batch`] (None if empty) and resets.
    pub fn take(&mut self) -> Option<Batch> {
        if self.rows == 0 {
            return None;
        }
        let data = self.buf.split().freeze();
        self.last_len = data.len();
        let b = Batch {
            table: self.table,
            rows: self.rows,
            first_clock: self.first_clock,
            data,
        };
        self.rows = 0;
        self.started = None;
        Some(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::row::RowValue;
    use std::time::Duration;

    fn row(i: u64) -> Row {
        Row {
            itemid: i,
            clock: 1000 + i as u32,
            ns: 0,
            hostname: "h".into(),
            itemname: "k".into(),
            value: RowValue::Uint(i),
        }
    }

    #[test]
    fn closes_by_rows_bytes_and_reports_age_from_first_row() {
        let limits = Limits {
            rows: 3,
            bytes: 1 << 20,
            age: Duration::from_secs(1),
        };
        let t0 = Instant::now();
        let mut p = Pending::new(Table::Uint);
        assert_eq!(p.deadline(&limits), None);
        assert_eq!(p.push(&row(1), || t0, &limits), None);
        assert_eq!(p.deadline(&limits), Some(t0 + Duration::from_secs(1)));
        assert_eq!(
            p.push(&row(2), || t0 + Duration::from_millis(900), &limits),
            None
        );
        // Age still counts from the first row.
        assert_eq!(p.deadline(&limits), Some(t0 + Duration::from_secs(1)));
        assert_eq!(p.push(&row(3), || t0, &limits), Some(FlushTrigger::Rows));
        let b = p.take().unwrap();
        assert_eq!((b.rows, b.first_clock), (3, 1001));
        assert_eq!(
            crate::rowbinary::decode_rows(Table::Uint, &b.data)
                .unwrap()
                .len(),
            3
        );
        assert!(p.take().is_none());
        assert_eq!(p.deadline(&limits), None);

        let small = Limits {
            rows: 1000,
            bytes: 60,
            age: Duration::from_secs(1),
        };
        assert_eq!(p.push(&row(1), || t0, &small), None);
        assert_eq!(p.push(&row(2), || t0, &small), Some(FlushTrigger::Bytes));
    }
}
