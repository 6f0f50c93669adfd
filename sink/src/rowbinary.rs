//! RowBinary encoding of history and trends rows, written by hand into a byte buffer.
//!
//! Column order on the wire is fixed and named in every INSERT
//! ([`Table::column_list`]), so the physical column order of an existing table does not
//! matter. History: `day Date, itemid UInt64, clock DateTime, hostname String,
//! itemname String, ns UInt32, value <Float64|UInt64|String>`; trends: `day, itemid,
//! clock, value_min, value_max, value_avg <Float64|Int64>, count UInt32, hostname,
//! itemname`.
//!
//! RowBinary: fixed-width integers little-endian, `Date` = u16 days since epoch,
//! `DateTime` = u32 Unix seconds, `Float64` = IEEE-754 LE bits (NaN and infinities pass
//! unchanged), `String` = LEB128 length then raw bytes (no escaping: quotes, tabs,
//! newlines and UTF-8 travel as they are).
//!
//! [`decode_rows`] reads the same bytes back (for `spool dump` and tests). It takes
//! untrusted input (spool files on disk) and never panics: every length is checked
//! against what is left.

use crate::row::{day_of, Row, RowValue, Table, Trend};
use bytes::{BufMut, BytesMut};
use std::sync::Arc;

/// Largest string accepted by the decoder (ClickHouse's own RowBinary limit is 1 GiB).
const MAX_STRING: u64 = 1 << 30;

/// Appends one row in RowBinary to `buf` and returns the number of bytes written.
///
/// The caller guarantees `table.accepts(&row.value)`; a mismatched value is encoded
/// as its own type and ClickHouse rejects the batch (the batcher checks first).
pub fn encode_row(buf: &mut BytesMut, row: &Row) -> usize {
    let start = buf.len();
    buf.reserve(48 + row.hostname.len() + row.itemname.len());
    buf.put_u16_le(day_of(row.clock));
    buf.put_u64_le(row.itemid);
    buf.put_u32_le(row.clock);
    let names = |buf: &mut BytesMut| {
        put_string(buf, row.hostname.as_bytes());
        put_string(buf, row.itemname.as_bytes());
    };
    // History rows: names, ns, value. Trends rows: the three values, count, names.
    let history = |buf: &mut BytesMut| {
        names(buf);
        buf.put_u32_le(row.ns);
    };
    let trend = |buf: &mut BytesMut, values: [u64; 3], count: u32| {
        values.iter().for_each(|v| buf.put_u64_le(*v));
        buf.put_u32_le(count);
        names(buf);
    };
    match &row.value {
        RowValue::Float(v) => {
            history(buf);
            buf.put_f64_le(*v);
        }
        RowValue::Uint(v) => {
            history(buf);
            buf.put_u64_le(*v);
        }
        RowValue::Str(s) => {
            history(buf);
            put_string(buf, s.as_bytes());
        }
        RowValue::FloatTrend(t) => trend(buf, [t.min, t.max, t.avg].map(f64::to_bits), t.count),
        RowValue::UintTrend(t) => trend(buf, [t.min, t.max, t.avg].map(|v| v as u64), t.count),
    }
    buf.len() - start
}

fn put_string(buf: &mut BytesMut, s: &[u8]) {
    put_leb128(buf, s.len() as u64);
    buf.put_slice(s);
}

fn put_leb128(buf: &mut BytesMut, mut v: u64) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            buf.put_u8(byte);
            return;
        }
        buf.put_u8(byte | 0x80);
    }
}

/// A row read back from RowBinary, with the `day` column as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct DecodedRow {
    /// `day` column (days since epoch) as found in the bytes.
    pub day: u16,
    /// The row itself.
    pub row: Row,
}

/// Why RowBinary bytes could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The bytes end inside a row.
    #[error("row {row}: truncated at byte {offset}")]
    Truncated {
        /// Index of the row being read.
        row: usize,
        /// Byte offset where more data was needed.
        offset: usize,
    },
    /// A string column is not valid UTF-8 (the sink only writes UTF-8).
    #[error("row {row}: string column at byte {offset} is not UTF-8")]
    NotUtf8 {
        /// Index of the row being read.
        row: usize,
        /// Byte offset of the string.
        offset: usize,
    },
    /// A string length is absurd (over 1 GiB or an overlong LEB128).
    #[error("row {row}: bad string length at byte {offset}")]
    BadLength {
        /// Index of the row being read.
        row: usize,
        /// Byte offset of the length.
        offset: usize,
    },
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    row: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], DecodeError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.bytes.len());
        let Some(end) = end else {
            return Err(DecodeError::Truncated {
                row: self.row,
                offset: self.pos,
            });
        };
        let s = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn leb128(&mut self) -> Result<u64, DecodeError> {
        let at = self.pos;
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let [b] = self.array::<1>()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(DecodeError::BadLength {
            row: self.row,
            offset: at,
        })
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// `value_min, value_max, value_avg` (each through `f`) and `count`.
    fn trend<T>(&mut self, f: impl Fn(u64) -> T) -> Result<Trend<T>, DecodeError> {
        Ok(Trend {
            min: f(self.u64()?),
            max: f(self.u64()?),
            avg: f(self.u64()?),
            count: self.u32()?,
        })
    }

    fn string(&mut self) -> Result<String, DecodeError> {
        let at = self.pos;
        let len = self.leb128()?;
        if len > MAX_STRING {
            return Err(DecodeError::BadLength {
                row: self.row,
                offset: at,
            });
        }
        let raw = self.take(len as usize)?;
        String::from_utf8(raw.to_vec()).map_err(|_| DecodeError::NotUtf8 {
            row: self.row,
            offset: at,
        })
    }
}

/// Decodes every row of `bytes` (RowBinary for `table`).
///
/// Never panics; returns the first error. Host and item names are interned per call
/// only by value (each row gets its own `Arc`), which is fine for dumps.
pub fn decode_rows(table: Table, bytes: &[u8]) -> Result<Vec<DecodedRow>, DecodeError> {
    let mut r = Reader {
        bytes,
        pos: 0,
        row: 0,
    };
    let mut out = Vec::new();
    while r.pos < bytes.len() {
        let day = u16::from_le_bytes(r.array()?);
        let itemid = r.u64()?;
        let clock = r.u32()?;
        let trend = match table {
            Table::TrendsDbl => Some(RowValue::FloatTrend(r.trend(f64::from_bits)?)),
            Table::TrendsUint => Some(RowValue::UintTrend(r.trend(|b| b as i64)?)),
            _ => None,
        };
        let hostname: Arc<str> = r.string()?.into();
        let itemname: Arc<str> = r.string()?.into();
        let (ns, value) = match trend {
            Some(t) => (0, t),
            None => (
                r.u32()?,
                match table {
                    Table::Dbl => RowValue::Float(f64::from_bits(r.u64()?)),
                    Table::Uint => RowValue::Uint(r.u64()?),
                    _ => RowValue::Str(r.string()?),
                },
            ),
        };
        out.push(DecodedRow {
            day,
            row: Row {
                itemid,
                clock,
                ns,
                hostname,
                itemname,
                value,
            },
        });
        r.row += 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(value: RowValue) -> Row {
        Row {
            itemid: 0x0102_0304_0506_0708,
            clock: 86_400 * 3 + 5,
            ns: 7,
            hostname: "h".into(),
            itemname: "k[1]".into(),
            value,
        }
    }

    #[test]
    fn emit_fixture_uint() {
        let mut buf = BytesMut::new();
        let n = encode_row(&mut buf, &row(RowValue::Uint(u64::MAX)));
        let expected: Vec<u8> = [
            &[3u8, 0][..],                      // day = 3
            &[8, 7, 6, 5, 4, 3, 2, 1],          // itemid LE
            &(86_400u32 * 3 + 5).to_le_bytes(), // clock
            &[1, b'h'],                         // hostname
            &[4, b'k', b'[', b'1', b']'],       // itemname
            &[7, 0, 0, 0],                      // ns
            &[0xff; 8],                         // value
        ]
        .concat();
        assert_eq!(&buf[..], &expected[..]);
        assert_eq!(n, expected.len());
    }

    #[test]
    fn emit_fixture_float_and_string() {
        let mut buf = BytesMut::new();
        encode_row(&mut buf, &row(RowValue::Float(1.5)));
        assert_eq!(&buf[buf.len() - 8..], &1.5f64.to_le_bytes());
        let mut buf = BytesMut::new();
        encode_row(&mut buf, &row(RowValue::Str("a\tb".into())));
        assert_eq!(&buf[buf.len() - 4..], &[3, b'a', b'\t', b'b']);
    }

    #[test]
    fn emit_fixture_trend_in_glaber_column_order() {
        let mut buf = BytesMut::new();
        let mut r = row(RowValue::UintTrend(Trend {
            min: -1,
            max: 2,
            avg: 1,
            count: 3,
        }));
        r.ns = 0;
        encode_row(&mut buf, &r);
        let expected: Vec<u8> = [
            &[3u8, 0][..],
            &[8, 7, 6, 5, 4, 3, 2, 1],
            &(86_400u32 * 3 + 5).to_le_bytes(),
            &[0xff; 8],                   // value_min -1
            &2i64.to_le_bytes(),          // value_max
            &1i64.to_le_bytes(),          // value_avg
            &3u32.to_le_bytes(),          // count
            &[1, b'h'],                   // hostname
            &[4, b'k', b'[', b'1', b']'], // itemname
        ]
        .concat();
        assert_eq!(&buf[..], &expected[..]);
        let names: Vec<_> = Table::TrendsUint.columns().iter().map(|c| c.0).collect();
        assert_eq!(
            Table::TrendsUint.column_list(),
            "day, itemid, clock, value_min, value_max, value_avg, count, hostname, itemname"
        );
        assert_eq!(names.len(), 9);
        assert_eq!(
            Table::Str.column_list(),
            "day, itemid, clock, hostname, itemname, ns, value"
        );
    }

    #[test]
    fn long_string_length_is_leb128() {
        let mut buf = BytesMut::new();
        put_string(&mut buf, &[b'x'; 300]);
        assert_eq!(&buf[..2], &[0xac, 0x02]); // 300 = 0b10_0101100
        assert_eq!(buf.len(), 302);
    }

    #[test]
    fn roundtrip_every_table() {
        let cases = [
            (Table::Dbl, RowValue::Float(f64::INFINITY)),
            (Table::Dbl, RowValue::Float(-0.0)),
            (Table::Uint, RowValue::Uint(0)),
            (Table::Str, RowValue::Str(String::new())),
            (Table::Log, RowValue::Str("«ünï» 'q' \"d\"\n\t\\".into())),
            (
                Table::TrendsDbl,
                RowValue::FloatTrend(Trend {
                    min: -1.5,
                    max: f64::MAX,
                    avg: 0.25,
                    count: 7,
                }),
            ),
            (
                Table::TrendsUint,
                RowValue::UintTrend(Trend {
                    min: i64::MIN,
                    max: i64::MAX,
                    avg: -3,
                    count: u32::MAX,
                }),
            ),
        ];
        for (table, value) in cases {
            assert!(table.accepts(&value));
            let mut buf = BytesMut::new();
            let mut r = row(value);
            if table.is_trends() {
                r.ns = 0;
            }
            encode_row(&mut buf, &r);
            encode_row(&mut buf, &r);
            let rows = decode_rows(table, &buf).unwrap();
            assert_eq!(rows.len(), 2);
            assert_eq!(rows[1].row, r);
            assert_eq!(rows[0].day, 3);
        }
        let mut buf = BytesMut::new();
        encode_row(&mut buf, &row(RowValue::Float(f64::NAN)));
        let rows = decode_rows(Table::Dbl, &buf).unwrap();
        assert!(matches!(rows[0].row.value, RowValue::Float(v) if v.is_nan()));
    }

    #[test]
    fn truncated_and_garbage_are_errors_not_panics() {
        let mut buf = BytesMut::new();
        encode_row(&mut buf, &row(RowValue::Str("hello".into())));
        for cut in 1..buf.len() {
            assert!(decode_rows(Table::Str, &buf[..cut]).is_err(), "cut {cut}");
        }
        let huge = [0u8; 22]
            .iter()
            .copied()
            .chain([0xff; 12])
            .collect::<Vec<_>>();
        assert!(matches!(
            decode_rows(Table::Str, &huge),
            Err(DecodeError::BadLength { .. } | DecodeError::Truncated { .. })
        ));
    }

    #[test]
    fn day_is_utc_date_of_clock() {
        assert_eq!(day_of(0), 0);
        assert_eq!(day_of(86_399), 0);
        assert_eq!(day_of(86_400), 1);
        // 2024-01-01T00:00:00Z = 1704067200 = day 19723
        assert_eq!(day_of(1_704_067_200), 19_723);
    }
}
