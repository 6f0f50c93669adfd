//! Spool record format, and a scanner that recovers every intact record from a
//! damaged segment.
//!
//! ```text
//! offset  size  field
//! 0       4     magic "NPSR"
//! 4       1     version (1)
//! 5       1     table code (0 dbl, 1 uint, 2 str, 3 log, 4 trends_dbl, 5 trends_uint)
//! 6       2     reserved, 0 (a record with anything else is not one this version wrote)
//! 8       4     rows (u32 LE)
//! 12      4     first_clock (u32 LE)
//! 16      4     payload length (u32 LE)
//! 20      len   payload: RowBinary of the rows (a `Batch`'s bytes, unchanged)
//! 20+len  4     CRC-32 (IEEE) of bytes 0..20+len
//! ```
//!
//! Invariants: [`scan`] never panics and never returns a record whose checksum failed.
//! After damage it resynchronises on the next magic whose record checks out, so one
//! flipped byte costs one record, and a truncated tail costs only the last record.
//! Its time is linear in the segment's size: candidates after damage are checksummed
//! within a budget ([`RESYNC_BUDGET_FACTOR`] times the segment), since a damaged
//! record's payload (values from the network) may hold any number of false magics, each
//! claiming a record to the end; past it, the rest of the segment counts as damaged.

use crate::batch::Batch;
use crate::row::Table;
use bytes::{BufMut, Bytes, BytesMut};
use std::ops::Range;

/// Record magic.
pub const MAGIC: [u8; 4] = *b"NPSR";
/// Format version written.
pub const VERSION: u8 = 1;
/// Header length.
pub const HEADER: usize = 20;
/// Header plus checksum.
pub const OVERHEAD: usize = HEADER + 4;

/// Encodes `batch` as one record.
pub fn encode(batch: &Batch) -> Bytes {
    let len = u32::try_from(batch.data.len()).expect("batch payload over 4 GiB");
    let mut b = BytesMut::with_capacity(OVERHEAD + batch.data.len());
    b.put_slice(&MAGIC);
    b.put_u8(VERSION);
    b.put_u8(batch.table.code());
    b.put_u16_le(0);
    b.put_u32_le(batch.rows);
    b.put_u32_le(batch.first_clock);
    b.put_u32_le(len);
    b.put_slice(&batch.data);
    let crc = crc32fast::hash(&b);
    b.put_u32_le(crc);
    b.freeze()
}

/// An intact record found by [`scan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// Byte offset of the record in the segment (its identity for acknowledgements).
    pub offset: u64,
    /// Table.
    pub table: Table,
    /// Rows claimed by the header (checksummed).
    pub rows: u32,
    /// First row's clock.
    pub first_clock: u32,
    /// Payload range within the scanned bytes.
    pub payload: Range<usize>,
}

/// Kind of damage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DamageKind {
    /// Bytes that do not start a record (garbage, or a record whose header was hit).
    NoRecord,
    /// A record header was found but its checksum (or version / table) is wrong.
    Checksum,
    /// The segment ends inside a record (crash during an append).
    Truncated,
}

/// A damaged region skipped by [`scan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// Where it starts.
    pub offset: u64,
    /// Bytes skipped.
    pub len: u64,
    /// What was wrong.
    pub kind: DamageKind,
    /// Rows the damaged record's header claimed, when a header was readable (the
    /// header is unverified then: a best effort for the drop counter).
    pub rows_claimed: Option<u32>,
}

fn checksum(b: &[u8]) -> u32 {
    #[cfg(test)]
    tests::CHECKSUMMED.with(|c| c.set(c.get() + b.len()));
    crc32fast::hash(b)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Checks a record starting at `pos`. `Ok(end)` if intact.
fn check(b: &[u8], pos: usize) -> Result<(Found, usize), (DamageKind, Option<u32>)> {
    let rest = &b[pos..];
    if rest.len() < HEADER || rest[..4] != MAGIC {
        return Err((
            if rest.len() < HEADER {
                DamageKind::Truncated
            } else {
                DamageKind::NoRecord
            },
            None,
        ));
    }
    let rows = u32_at(rest, 8);
    let len = u32_at(rest, 16) as usize;
    let total = match OVERHEAD.checked_add(len) {
        Some(t) => t,
        None => return Err((DamageKind::Checksum, Some(rows))),
    };
    if rest.len() < total {
        return Err((DamageKind::Truncated, Some(rows)));
    }
    let table = Table::from_code(rest[5]);
    let crc = u32_at(rest, HEADER + len);
    match table {
        Some(table)
            if rest[4] == VERSION
                && rest[6..8] == [0, 0]
                && checksum(&rest[..HEADER + len]) == crc =>
        {
            Ok((
                Found {
                    offset: pos as u64,
                    table,
                    rows,
                    first_clock: u32_at(rest, 12),
                    payload: pos + HEADER..pos + HEADER + len,
                },
                pos + total,
            ))
        }
        _ => Err((DamageKind::Checksum, Some(rows))),
    }
}

/// Bytes [`scan`] may checksum while resynchronising, per byte of the segment (plus
/// one maximal record, so that small segments always get their candidates checked).
pub const RESYNC_BUDGET_FACTOR: usize = 4;

/// Every intact record of `bytes`, and every damaged region skipped.
pub fn scan(bytes: &[u8]) -> (Vec<Found>, Vec<Damage>) {
    let mut found = Vec::new();
    let mut damage: Vec<Damage> = Vec::new();
    let mut pos = 0;
    let mut budget = bytes
        .len()
        .saturating_mul(RESYNC_BUDGET_FACTOR)
        .saturating_add(64 << 20);
    while pos < bytes.len() {
        match check(bytes, pos) {
            Ok((f, end)) => {
                found.push(f);
                pos = end;
            }
            Err((kind, rows_claimed)) => {
                // Resynchronise: the next offset where an intact record starts.
                let mut next = pos + 1;
                let resume = loop {
                    match memfind(&bytes[next.min(bytes.len())..], &MAGIC) {
                        None => break bytes.len(),
                        Some(i) => {
                            let at = next + i;
                            let claimed = claimed_len(bytes, at);
                            if claimed > budget {
                                break bytes.len();
                            }
                            budget -= claimed;
                            if check(bytes, at).is_ok() {
                                break at;
                            }
                            next = at + 1;
                        }
                    }
                };
                // A tail that was cut during an append and has nothing after it.
                let kind = if resume == bytes.len() && kind == DamageKind::Truncated {
                    DamageKind::Truncated
                } else {
                    kind
                };
                // Merge adjacent garbage into one region (one log line, one count).
                match damage.last_mut() {
                    Some(d) if d.offset + d.len == pos as u64 && kind == DamageKind::NoRecord => {
                        d.len += (resume - pos) as u64;
                    }
                    _ => damage.push(Damage {
                        offset: pos as u64,
                        len: (resume - pos) as u64,
                        kind,
                        rows_claimed,
                    }),
                }
                pos = resume;
            }
        }
    }
    (found, damage)
}

/// Bytes [`check`] would checksum for a record at `at` (what its header claims, within
/// `b`).
fn claimed_len(b: &[u8], at: usize) -> usize {
    let rest = &b[at..];
    if rest.len() < HEADER {
        return 0;
    }
    let len = u32_at(rest, 16) as usize;
    match OVERHEAD.checked_add(len) {
        Some(total) if total <= rest.len() => HEADER + len,
        _ => 0,
    }
}

fn memfind(hay: &[u8], needle: &[u8; 4]) -> Option<usize> {
    hay.windows(4).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    thread_local! {
        /// Bytes checksummed by this thread's scans.
        pub(super) static CHECKSUMMED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    #[test]
    fn false_magics_in_a_damaged_record_cost_linear_time() {
        // A record whose payload (an SNMP string, say) is false headers, each claiming
        // a record that ends where the segment does; its checksum is then damaged. Every
        // false header is a resync candidate: without a budget, checksumming each one's
        // claim is quadratic (2^15 candidates × ~0.5 MiB: 16 GiB of CRC-32).
        let n = 1 << 15;
        let mut payload = Vec::with_capacity(n * HEADER);
        for k in 0..n {
            let claim = ((n - k) * HEADER + 4 - OVERHEAD) as u32;
            payload.extend_from_slice(&MAGIC);
            payload.extend_from_slice(&[VERSION, 0, 0, 0]);
            payload.extend_from_slice(&1u32.to_le_bytes());
            payload.extend_from_slice(&0u32.to_le_bytes());
            payload.extend_from_slice(&claim.to_le_bytes());
        }
        let mut seg = encode(&Batch {
            table: Table::Str,
            rows: 1,
            first_clock: 0,
            data: Bytes::from(payload),
        })
        .to_vec();
        let last = seg.len() - 1;
        seg[last] ^= 0xff;
        CHECKSUMMED.with(|c| c.set(0));
        let (found, damage) = scan(&seg);
        let spent = CHECKSUMMED.with(|c| c.get());
        assert!(found.is_empty());
        assert_eq!(damage.iter().map(|d| d.len).sum::<u64>(), seg.len() as u64);
        assert!(
            spent <= seg.len() * (RESYNC_BUDGET_FACTOR + 1) + (64 << 20),
            "{spent} bytes checksummed for a {}-byte segment",
            seg.len()
        );
    }

    fn batch(n: u8) -> Batch {
        Batch {
            table: Table::Str,
            rows: u32::from(n),
            first_clock: 7,
            data: Bytes::from(vec![n; usize::from(n) * 3]),
        }
    }

    fn segment(n: u8) -> (Vec<u8>, Vec<usize>) {
        let mut seg = Vec::new();
        let mut starts = Vec::new();
        for i in 1..=n {
            starts.push(seg.len());
            seg.extend_from_slice(&encode(&batch(i)));
        }
        (seg, starts)
    }

    #[test]
    fn header_fixture() {
        let r = encode(&Batch {
            table: Table::Uint,
            rows: 2,
            first_clock: 0x0a0b0c0d,
            data: Bytes::from_static(b"xy"),
        });
        assert_eq!(
            &r[..20],
            &[b'N', b'P', b'S', b'R', 1, 1, 0, 0, 2, 0, 0, 0, 0x0d, 0x0c, 0x0b, 0x0a, 2, 0, 0, 0]
        );
        assert_eq!(&r[20..22], b"xy");
        assert_eq!(u32_at(&r, 22), crc32fast::hash(&r[..22]));
        let (f, d) = scan(&r);
        assert!(d.is_empty());
        assert_eq!(f[0].table, Table::Uint);
        assert_eq!(&r[f[0].payload.clone()], b"xy");
    }

    #[test]
    fn a_record_with_reserved_bytes_set_is_damage_even_with_a_good_checksum() {
        // Found by cargo fuzz (spool_segment): such a record was accepted, and writing
        // it back (reserved 0) gave other bytes than were read.
        let mut r = encode(&batch(2)).to_vec();
        r[6] = 55;
        let end = r.len() - 4;
        let crc = crc32fast::hash(&r[..end]);
        r[end..].copy_from_slice(&crc.to_le_bytes());
        let (f, d) = scan(&r);
        assert!(f.is_empty(), "{f:?}");
        assert_eq!(d.iter().map(|d| d.len).sum::<u64>(), r.len() as u64);
        // Trends tables have codes of their own.
        let t = Batch {
            table: Table::TrendsUint,
            ..batch(1)
        };
        assert_eq!(scan(&encode(&t)).0[0].table, Table::TrendsUint);
    }

    #[test]
    fn flipped_byte_costs_one_record() {
        let (mut seg, starts) = segment(5);
        seg[starts[2] + HEADER + 1] ^= 0x40;
        let (f, d) = scan(&seg);
        assert_eq!(
            f.iter().map(|r| r.rows).collect::<Vec<_>>(),
            vec![1, 2, 4, 5]
        );
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].kind, DamageKind::Checksum);
        assert_eq!(d[0].offset, starts[2] as u64);
        assert_eq!(d[0].rows_claimed, Some(3));
    }

    #[test]
    fn flipped_magic_and_length() {
        let (mut seg, starts) = segment(4);
        seg[starts[1]] = b'X';
        seg[starts[2] + 17] ^= 0x7f; // length of record 3
        let (f, d) = scan(&seg);
        assert_eq!(f.iter().map(|r| r.rows).collect::<Vec<_>>(), vec![1, 4]);
        // Adjacent damaged records form one region, resumed at the next intact record.
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(
            (d[0].offset, d[0].len),
            (starts[1] as u64, (starts[3] - starts[1]) as u64)
        );
    }

    #[test]
    fn truncated_tail() {
        let (seg, starts) = segment(3);
        for cut in starts[2] + 1..seg.len() {
            let (f, d) = scan(&seg[..cut]);
            assert_eq!(f.len(), 2, "cut {cut}");
            assert_eq!(d.len(), 1);
            assert_eq!(d[0].kind, DamageKind::Truncated, "cut {cut}");
        }
    }

    proptest! {
        #[test]
        fn never_panics_and_keeps_untouched_records(
            n in 1u8..8,
            flips in proptest::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 0..4),
            cut in any::<prop::sample::Index>(),
        ) {
            let (mut seg, starts) = segment(n);
            let untouched = seg.clone();
            for (idx, x) in &flips {
                let at = idx.index(seg.len());
                seg[at] ^= x;
            }
            // The records with a byte changed (two equal flips of one byte undo each
            // other: that record is intact).
            let hit: std::collections::BTreeSet<usize> = (0..seg.len())
                .filter(|&at| seg[at] != untouched[at])
                .map(|at| starts.iter().rposition(|&s| s <= at).unwrap())
                .collect();
            let cut = cut.index(seg.len() + 1);
            let (f, _d) = scan(&seg[..cut]);
            for r in &f {
                // Every returned record is one we wrote, unmodified.
                let i = usize::try_from(r.rows).unwrap() - 1;
                prop_assert!(i < usize::from(n));
                prop_assert_eq!(r.offset as usize, starts[i]);
                prop_assert!(!hit.contains(&i));
            }
            // Every record that was neither hit nor cut is found.
            for (i, &start) in starts.iter().enumerate() {
                let whole = start + OVERHEAD + (i + 1) * 3 <= cut;
                if whole && !hit.contains(&i) {
                    prop_assert!(f.iter().any(|r| r.offset as usize == start), "record {} lost", i);
                }
            }
        }
    }
}
