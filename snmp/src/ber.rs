//! Minimal BER (X.690) reader and writer for the subset SNMP v1/v2c uses.
//!
//! Invariants:
//! * The reader is zero-copy: every value it hands out borrows from the input.
//! * The reader never panics and never indexes out of bounds: every length is checked
//!   against the bytes that remain, indefinite lengths and lengths over 4 octets are
//!   rejected, and integers longer than their type allows are errors, not truncations.
//! * The writer emits definite, minimal lengths and minimal two's complement integers,
//!   which is what net-snmp emits and what every agent accepts.

use crate::DecodeError;

pub(crate) const TAG_INTEGER: u8 = 0x02;
pub(crate) const TAG_OCTET_STRING: u8 = 0x04;
pub(crate) const TAG_NULL: u8 = 0x05;
pub(crate) const TAG_OID: u8 = 0x06;
pub(crate) const TAG_SEQUENCE: u8 = 0x30;
pub(crate) const TAG_IP_ADDRESS: u8 = 0x40;
pub(crate) const TAG_COUNTER32: u8 = 0x41;
pub(crate) const TAG_GAUGE32: u8 = 0x42;
pub(crate) const TAG_TIMETICKS: u8 = 0x43;
pub(crate) const TAG_OPAQUE: u8 = 0x44;
pub(crate) const TAG_COUNTER64: u8 = 0x46;
pub(crate) const TAG_NO_SUCH_OBJECT: u8 = 0x80;
pub(crate) const TAG_NO_SUCH_INSTANCE: u8 = 0x81;
pub(crate) const TAG_END_OF_MIB_VIEW: u8 = 0x82;

/// A cursor over BER-encoded bytes.
#[derive(Debug, Clone)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Reads one TLV and returns (tag, contents).
    pub(crate) fn read_tlv(&mut self) -> Result<(u8, &'a [u8]), DecodeError> {
        let (&tag, rest) = self.buf.split_first().ok_or(DecodeError::Truncated)?;
        // High-tag-number form (low 5 bits all set) never occurs in SNMP.
        if tag & 0x1f == 0x1f {
            return Err(DecodeError::BadTag { found: tag });
        }
        let (&first, mut rest) = rest.split_first().ok_or(DecodeError::Truncated)?;
        let len = if first < 0x80 {
            first as usize
        } else {
            let n = (first & 0x7f) as usize;
            // 0x80 is the indefinite form (forbidden in SNMP); > 4 octets cannot fit a UDP
            // datagram anyway.
            if n == 0 || n > 4 {
                return Err(DecodeError::BadLength);
            }
            if rest.len() < n {
                return Err(DecodeError::Truncated);
            }
            let mut len = 0usize;
            for &b in &rest[..n] {
                len = (len << 8) | b as usize;
            }
            rest = &rest[n..];
            len
        };
        if rest.len() < len {
            return Err(DecodeError::Truncated);
        }
        let (contents, tail) = rest.split_at(len);
        self.buf = tail;
        Ok((tag, contents))
    }

    /// Reads one TLV that must carry `tag`.
    pub(crate) fn read_expect(&mut self, tag: u8) -> Result<&'a [u8], DecodeError> {
        let (found, contents) = self.read_tlv()?;
        if found != tag {
            return Err(DecodeError::BadTag { found });
        }
        Ok(contents)
    }

    pub(crate) fn read_i64(&mut self) -> Result<i64, DecodeError> {
        let c = self.read_expect(TAG_INTEGER)?;
        decode_i64(c)
    }

    pub(crate) fn read_i32(&mut self) -> Result<i32, DecodeError> {
        let v = self.read_i64()?;
        i32::try_from(v).map_err(|_| DecodeError::IntegerRange)
    }
}

/// Two's complement, 1..=8 octets.
pub(crate) fn decode_i64(c: &[u8]) -> Result<i64, DecodeError> {
    if c.is_empty() {
        return Err(DecodeError::BadLength);
    }
    if c.len() > 8 {
        return Err(DecodeError::IntegerRange);
    }
    let mut v: i64 = if c[0] & 0x80 != 0 { -1 } else { 0 };
    for &b in c {
        v = (v << 8) | b as i64;
    }
    Ok(v)
}

/// An unsigned integer of at most `max_bytes` significant octets. A leading 0x00 (the
/// sign octet of a positive number) is allowed on top. Some agents emit Counter32 values
/// with the high bit set and no sign octet; like net-snmp we read those as unsigned.
pub(crate) fn decode_unsigned(c: &[u8], max_bytes: usize) -> Result<u64, DecodeError> {
    if c.is_empty() {
        return Err(DecodeError::BadLength);
    }
    let c = if c.len() > 1 && c[0] == 0 { &c[1..] } else { c };
    if c.len() > max_bytes {
        return Err(DecodeError::IntegerRange);
    }
    let mut v: u64 = 0;
    for &b in c {
        v = (v << 8) | b as u64;
    }
    Ok(v)
}

/// Number of octets the length field for `len` takes.
#[inline]
pub(crate) fn len_of_len(len: usize) -> usize {
    match len {
        0..=0x7f => 1,
        0x80..=0xff => 2,
        0x100..=0xffff => 3,
        0x1_0000..=0xff_ffff => 4,
        _ => 5,
    }
}

/// Total size of a TLV with `len` content octets (single-octet tag).
#[inline]
pub(crate) fn tlv_len(len: usize) -> usize {
    1 + len_of_len(len) + len
}

#[inline]
pub(crate) fn write_header(out: &mut Vec<u8>, tag: u8, len: usize) {
    out.push(tag);
    match len_of_len(len) {
        1 => out.push(len as u8),
        n => {
            out.push(0x80 | (n - 1) as u8);
            for i in (0..n - 1).rev() {
                out.push((len >> (8 * i)) as u8);
            }
        }
    }
}

/// Minimal two's complement length of `v`.
#[inline]
pub(crate) fn int_len(v: i64) -> usize {
    let mut n = 8;
    while n > 1 {
        let top = (v >> (8 * (n - 1))) as u8;
        let next_high = (v >> (8 * (n - 2))) as u8 & 0x80;
        if (top == 0 && next_high == 0) || (top == 0xff && next_high != 0) {
            n -= 1;
        } else {
            break;
        }
    }
    n
}

#[inline]
pub(crate) fn write_int(out: &mut Vec<u8>, tag: u8, v: i64) {
    let n = int_len(v);
    out.push(tag);
    out.push(n as u8);
    for i in (0..n).rev() {
        out.push((v >> (8 * i)) as u8);
    }
}

/// Content length of an unsigned value written by [`write_unsigned`].
#[inline]
pub(crate) fn unsigned_len(v: u64) -> usize {
    let n = (8 - v.leading_zeros() as usize / 8).max(1);
    n + ((v >> (8 * (n - 1))) as u8 >> 7) as usize
}

/// Writes an unsigned value with a sign octet where needed (Counter32, Counter64, ...).
pub(crate) fn write_unsigned(out: &mut Vec<u8>, tag: u8, v: u64) {
    let mut n = 8;
    while n > 1 && (v >> (8 * (n - 1))) as u8 == 0 {
        n -= 1;
    }
    let sign = (v >> (8 * (n - 1))) as u8 & 0x80 != 0;
    out.push(tag);
    out.push((n + sign as usize) as u8);
    if sign {
        out.push(0);
    }
    for i in (0..n).rev() {
        out.push((v >> (8 * i)) as u8);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_round_trip_minimal() {
        for v in [
            0i64,
            1,
            127,
            128,
            255,
            256,
            -1,
            -128,
            -129,
            i32::MAX as i64,
            i32::MIN as i64,
            i64::MAX,
            i64::MIN,
        ] {
            let mut out = Vec::new();
            write_int(&mut out, TAG_INTEGER, v);
            let mut r = Reader::new(&out);
            assert_eq!(r.read_i64().unwrap(), v, "value {v}");
            assert!(r.is_empty());
        }
        let mut out = Vec::new();
        write_int(&mut out, TAG_INTEGER, 128);
        assert_eq!(out, [0x02, 0x02, 0x00, 0x80]);
        out.clear();
        write_int(&mut out, TAG_INTEGER, -129);
        assert_eq!(out, [0x02, 0x02, 0xff, 0x7f]);
    }

    #[test]
    fn unsigned_round_trip() {
        for v in [0u64, 0x7f, 0x80, 0xffff_ffff, u64::MAX] {
            let mut out = Vec::new();
            write_unsigned(&mut out, TAG_COUNTER64, v);
            let (_, c) = Reader::new(&out).read_tlv().unwrap();
            assert_eq!(decode_unsigned(c, 8).unwrap(), v);
        }
        // Counter32 without sign octet, as some agents send it.
        assert_eq!(
            decode_unsigned(&[0xff, 0xff, 0xff, 0xff], 4).unwrap(),
            0xffff_ffff
        );
        assert_eq!(
            decode_unsigned(&[0x01, 0, 0, 0, 0], 4),
            Err(DecodeError::IntegerRange)
        );
    }

    #[test]
    fn lengths() {
        for len in [0usize, 0x7f, 0x80, 0xff, 0x100, 0xffff, 0x10000] {
            let mut out = Vec::new();
            write_header(&mut out, TAG_OCTET_STRING, len);
            assert_eq!(out.len(), 1 + len_of_len(len));
            out.resize(out.len() + len, 0);
            let (tag, c) = Reader::new(&out).read_tlv().unwrap();
            assert_eq!((tag, c.len()), (TAG_OCTET_STRING, len));
        }
        // Indefinite, 5-octet and overlong lengths are rejected.
        assert_eq!(
            Reader::new(&[0x04, 0x80, 0, 0]).read_tlv(),
            Err(DecodeError::BadLength)
        );
        assert_eq!(
            Reader::new(&[0x04, 0x85, 0, 0, 0, 0, 1]).read_tlv(),
            Err(DecodeError::BadLength)
        );
        assert_eq!(
            Reader::new(&[0x04, 0x84, 0xff, 0xff, 0xff, 0xff]).read_tlv(),
            Err(DecodeError::Truncated)
        );
        assert_eq!(
            Reader::new(&[0x04, 0x82, 0x01]).read_tlv(),
            Err(DecodeError::Truncated)
        );
        assert_eq!(
            Reader::new(&[0x1f, 0x01, 0x01]).read_tlv(),
            Err(DecodeError::BadTag { found: 0x1f })
        );
    }
}
