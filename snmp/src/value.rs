//! SNMP varbind values: a borrowed view ([`ValueRef`], what the decoder yields) and an
//! owned copy ([`VarValue`], what the engine hands out), plus net-snmp's text form.

use std::fmt;
use std::net::Ipv4Addr;

use crate::ber::{self, *};
use crate::oid::{Oid, OidRef};
use crate::DecodeError;

/// A decoded value borrowing from the datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueRef<'a> {
    Integer(i64),
    OctetString(&'a [u8]),
    Null,
    Oid(OidRef<'a>),
    IpAddress([u8; 4]),
    Counter32(u32),
    Gauge32(u32),
    TimeTicks(u32),
    Opaque(&'a [u8]),
    Counter64(u64),
    NoSuchObject,
    NoSuchInstance,
    EndOfMibView,
    /// A value this decoder cannot read (a type it does not know, such as the obsolete
    /// UInteger32 or NsapAddress, or contents of the wrong size): its varbind's item
    /// fails alone, with [`VarValue::undecodable`]'s reason, and the other varbinds of
    /// the message are taken (the whole reply was once refused, and with it the host).
    Undecodable {
        tag: u8,
        raw: &'a [u8],
    },
}

/// An owned varbind value. The three exceptions (v2c) are values on the wire but mean
/// "no value" to Zabbix; [`VarValue::is_exception`] tells them apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VarValue {
    /// INTEGER / Integer32 (v1 agents may send wider; up to 64 bits are kept).
    Integer(i64),
    OctetString(Vec<u8>),
    Null,
    Oid(Oid),
    IpAddress(Ipv4Addr),
    Counter32(u32),
    /// Gauge32 / Unsigned32 (same tag).
    Gauge32(u32),
    /// Hundredths of a second.
    TimeTicks(u32),
    Opaque(Vec<u8>),
    Counter64(u64),
    NoSuchObject,
    NoSuchInstance,
    EndOfMibView,
    /// See [`ValueRef::Undecodable`]: the value's tag and contents as received.
    Undecodable {
        tag: u8,
        raw: Vec<u8>,
    },
}

impl<'a> ValueRef<'a> {
    /// Decodes one value TLV (tag and contents already split).
    pub(crate) fn decode(tag: u8, c: &'a [u8]) -> Result<ValueRef<'a>, DecodeError> {
        let need_empty = |v: ValueRef<'a>| {
            if c.is_empty() {
                Ok(v)
            } else {
                Err(DecodeError::BadLength)
            }
        };
        let u32_of = |c: &[u8]| decode_unsigned(c, 4).map(|v| v as u32);
        Ok(match tag {
            TAG_INTEGER => ValueRef::Integer(ber::decode_i64(c)?),
            TAG_OCTET_STRING => ValueRef::OctetString(c),
            TAG_NULL => need_empty(ValueRef::Null)?,
            TAG_OID => ValueRef::Oid(OidRef::from_ber(c)?),
            TAG_IP_ADDRESS => {
                ValueRef::IpAddress(c.try_into().map_err(|_| DecodeError::BadLength)?)
            }
            TAG_COUNTER32 => ValueRef::Counter32(u32_of(c)?),
            TAG_GAUGE32 => ValueRef::Gauge32(u32_of(c)?),
            TAG_TIMETICKS => ValueRef::TimeTicks(u32_of(c)?),
            TAG_OPAQUE => ValueRef::Opaque(c),
            TAG_COUNTER64 => ValueRef::Counter64(decode_unsigned(c, 8)?),
            TAG_NO_SUCH_OBJECT => need_empty(ValueRef::NoSuchObject)?,
            TAG_NO_SUCH_INSTANCE => need_empty(ValueRef::NoSuchInstance)?,
            TAG_END_OF_MIB_VIEW => need_empty(ValueRef::EndOfMibView)?,
            found => return Err(DecodeError::BadTag { found }),
        })
    }

    /// Copies the value out of the datagram.
    pub fn to_owned(&self) -> VarValue {
        match *self {
            ValueRef::Integer(v) => VarValue::Integer(v),
            ValueRef::OctetString(s) => VarValue::OctetString(s.to_vec()),
            ValueRef::Null => VarValue::Null,
            ValueRef::Oid(o) => VarValue::Oid(o.to_owned()),
            ValueRef::IpAddress(a) => VarValue::IpAddress(Ipv4Addr::from(a)),
            ValueRef::Counter32(v) => VarValue::Counter32(v),
            ValueRef::Gauge32(v) => VarValue::Gauge32(v),
            ValueRef::TimeTicks(v) => VarValue::TimeTicks(v),
            ValueRef::Opaque(s) => VarValue::Opaque(s.to_vec()),
            ValueRef::Counter64(v) => VarValue::Counter64(v),
            ValueRef::NoSuchObject => VarValue::NoSuchObject,
            ValueRef::NoSuchInstance => VarValue::NoSuchInstance,
            ValueRef::EndOfMibView => VarValue::EndOfMibView,
            ValueRef::Undecodable { tag, raw } => VarValue::Undecodable {
                tag,
                raw: raw.to_vec(),
            },
        }
    }

    /// Encoded size of the value TLV.
    pub(crate) fn encoded_len(&self) -> usize {
        match *self {
            ValueRef::Null
            | ValueRef::NoSuchObject
            | ValueRef::NoSuchInstance
            | ValueRef::EndOfMibView => 2,
            ValueRef::OctetString(s)
            | ValueRef::Opaque(s)
            | ValueRef::Undecodable { raw: s, .. } => tlv_len(s.len()),
            ValueRef::Oid(o) => tlv_len(o.as_ber().len()),
            ValueRef::IpAddress(_) => 6,
            ValueRef::Integer(v) => 2 + int_len(v),
            ValueRef::Counter32(v) | ValueRef::Gauge32(v) | ValueRef::TimeTicks(v) => {
                2 + unsigned_len(v as u64)
            }
            ValueRef::Counter64(v) => 2 + unsigned_len(v),
        }
    }

    pub(crate) fn write(&self, out: &mut Vec<u8>) {
        match *self {
            ValueRef::Integer(v) => write_int(out, TAG_INTEGER, v),
            ValueRef::OctetString(s) => {
                write_header(out, TAG_OCTET_STRING, s.len());
                out.extend_from_slice(s);
            }
            ValueRef::Null => out.extend_from_slice(&[TAG_NULL, 0]),
            ValueRef::Oid(o) => {
                write_header(out, TAG_OID, o.as_ber().len());
                out.extend_from_slice(o.as_ber());
            }
            ValueRef::IpAddress(a) => {
                out.extend_from_slice(&[TAG_IP_ADDRESS, 4]);
                out.extend_from_slice(&a);
            }
            ValueRef::Counter32(v) => write_unsigned(out, TAG_COUNTER32, v as u64),
            ValueRef::Gauge32(v) => write_unsigned(out, TAG_GAUGE32, v as u64),
            ValueRef::TimeTicks(v) => write_unsigned(out, TAG_TIMETICKS, v as u64),
            ValueRef::Opaque(s) => {
                write_header(out, TAG_OPAQUE, s.len());
                out.extend_from_slice(s);
            }
            ValueRef::Counter64(v) => write_unsigned(out, TAG_COUNTER64, v),
            ValueRef::NoSuchObject => out.extend_from_slice(&[TAG_NO_SUCH_OBJECT, 0]),
            ValueRef::NoSuchInstance => out.extend_from_slice(&[TAG_NO_SUCH_INSTANCE, 0]),
            ValueRef::EndOfMibView => out.extend_from_slice(&[TAG_END_OF_MIB_VIEW, 0]),
            ValueRef::Undecodable { tag, raw } => {
                write_header(out, tag, raw.len());
                out.extend_from_slice(raw);
            }
        }
    }
}

impl VarValue {
    /// Borrowed view (for encoding).
    pub fn as_ref(&self) -> ValueRef<'_> {
        match self {
            VarValue::Integer(v) => ValueRef::Integer(*v),
            VarValue::OctetString(s) => ValueRef::OctetString(s),
            VarValue::Null => ValueRef::Null,
            VarValue::Oid(o) => ValueRef::Oid(o.as_ref()),
            VarValue::IpAddress(a) => ValueRef::IpAddress(a.octets()),
            VarValue::Counter32(v) => ValueRef::Counter32(*v),
            VarValue::Gauge32(v) => ValueRef::Gauge32(*v),
            VarValue::TimeTicks(v) => ValueRef::TimeTicks(*v),
            VarValue::Opaque(s) => ValueRef::Opaque(s),
            VarValue::Counter64(v) => ValueRef::Counter64(*v),
            VarValue::NoSuchObject => ValueRef::NoSuchObject,
            VarValue::NoSuchInstance => ValueRef::NoSuchInstance,
            VarValue::EndOfMibView => ValueRef::EndOfMibView,
            VarValue::Undecodable { tag, raw } => ValueRef::Undecodable { tag: *tag, raw },
        }
    }

    /// noSuchObject, noSuchInstance or endOfMibView: the agent has no value here.
    pub fn is_exception(&self) -> bool {
        matches!(
            self,
            VarValue::NoSuchObject | VarValue::NoSuchInstance | VarValue::EndOfMibView
        )
    }

    /// Why a value could not be read ([`ValueRef::Undecodable`]): `None` for the others.
    pub fn undecodable(&self) -> Option<String> {
        let VarValue::Undecodable { tag, raw } = self else {
            return None;
        };
        Some(match ValueRef::decode(*tag, raw) {
            Err(DecodeError::BadTag { .. }) => match *tag {
                0x45 => "a value of the obsolete type NsapAddress (BER tag 0x45), not read".into(),
                0x47 => "a value of the obsolete type UInteger32 (BER tag 0x47), not read".into(),
                t => format!("a value of a type unknown to SNMP (BER tag 0x{t:02x})"),
            },
            Err(e) => format!("a value that does not decode (BER tag 0x{tag:02x}: {e})"),
            Ok(_) => format!("a value of BER tag 0x{tag:02x}"),
        })
    }

    /// The exception's name as RFC 3416 spells it, for error texts.
    pub fn exception_name(&self) -> Option<&'static str> {
        match self {
            VarValue::NoSuchObject => Some("noSuchObject"),
            VarValue::NoSuchInstance => Some("noSuchInstance"),
            VarValue::EndOfMibView => Some("endOfMibView"),
            _ => None,
        }
    }

    /// net-snmp's type label (`STRING`, `Hex-STRING`, `INTEGER`, `Timeticks`, ...); `None`
    /// for exceptions, which net-snmp prints without a type.
    pub fn net_snmp_type(&self) -> Option<&'static str> {
        Some(match self {
            VarValue::Integer(_) => "INTEGER",
            VarValue::OctetString(s) if is_net_snmp_printable(s) => "STRING",
            VarValue::OctetString(_) => "Hex-STRING",
            VarValue::Null => "NULL",
            VarValue::Oid(_) => "OID",
            VarValue::IpAddress(_) => "IpAddress",
            VarValue::Counter32(_) => "Counter32",
            VarValue::Gauge32(_) => "Gauge32",
            VarValue::TimeTicks(_) => "Timeticks",
            VarValue::Opaque(b) if opaque_number(b).is_some() => "Opaque",
            VarValue::Opaque(_) => "OPAQUE",
            VarValue::Counter64(_) => "Counter64",
            _ => return None,
        })
    }

    /// The value part net-snmp prints after `TYPE: ` with `-On -Oe` and no display hints
    /// (`"text"` quoted, `00 1A FF` hex, `(4200) 0:00:42.00` timeticks, ...); for
    /// exceptions the whole sentence net-snmp prints.
    pub fn net_snmp_value(&self) -> String {
        match self {
            VarValue::Integer(v) => v.to_string(),
            VarValue::OctetString(s) if is_net_snmp_printable(s) => {
                let mut out = String::with_capacity(s.len() + 2);
                out.push('"');
                for &b in s {
                    if b == b'"' || b == b'\\' {
                        out.push('\\');
                    }
                    out.push(b as char);
                }
                out.push('"');
                out
            }
            VarValue::Opaque(b) => match opaque_number(b) {
                // C's "%f".
                Some(OpaqueNumber::Float(f)) => format!("Float: {:.6}", f64::from(f)),
                // net-snmp 5.9 labels a double "Float" too (its sprint_realloc_double).
                Some(OpaqueNumber::Double(d)) => format!("Float: {d:.6}"),
                // Its sprint_realloc_counter64: printI64 (a minus sign, then the
                // magnitude) and printU64 are plain decimal.
                Some(OpaqueNumber::Int64(i)) => format!("Int64: {i}"),
                Some(OpaqueNumber::UInt64(n)) => format!("UInt64: {n}"),
                Some(OpaqueNumber::Counter64(n)) => format!("Counter64: {n}"),
                None => hex_lines(b),
            },
            VarValue::OctetString(s) => hex_lines(s),
            VarValue::Null => String::new(),
            VarValue::Oid(o) => o.to_string(),
            VarValue::IpAddress(a) => a.to_string(),
            VarValue::Counter32(v) | VarValue::Gauge32(v) => v.to_string(),
            VarValue::TimeTicks(t) => format!("({t}) {}", uptime_string(*t)),
            VarValue::Counter64(v) => v.to_string(),
            VarValue::NoSuchObject => "No Such Object available on this agent at this OID".into(),
            VarValue::NoSuchInstance => "No Such Instance currently exists at this OID".into(),
            VarValue::EndOfMibView => {
                "No more variables left in this MIB View (It is past the end of the MIB tree)"
                    .into()
            }
            VarValue::Undecodable { raw, .. } => format!(
                "Undecodable: {}: {}",
                self.undecodable().unwrap_or_default(),
                hex_lines(raw)
            ),
        }
    }
}

/// `TYPE: value` as net-snmp prints it (exceptions alone, `NULL` alone).
impl fmt::Display for VarValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.net_snmp_type(), self) {
            (_, VarValue::Null) => f.write_str("NULL"),
            // net-snmp prints an empty string without its type.
            (_, VarValue::OctetString(s)) if s.is_empty() => f.write_str("\"\""),
            (Some(t), _) => write!(f, "{t}: {}", self.net_snmp_value()),
            (None, _) => f.write_str(&self.net_snmp_value()),
        }
    }
}

/// net-snmp's test (`sprint_realloc_octet_string` without a hint): every octet is a
/// printable ASCII character or whitespace (a NUL is neither: `"ab\0"` prints as
/// `Hex-STRING: 61 62 00`).
pub fn is_net_snmp_printable(s: &[u8]) -> bool {
    s.iter()
        .all(|&b| (0x20..0x7f).contains(&b) || (b'\t'..=b'\r').contains(&b))
}

/// A number net-snmp wraps in an Opaque (its `NETSNMP_WITH_OPAQUE_SPECIAL_TYPES`, what
/// UCD-SNMP's `laLoadFloat` answers): the Opaque's contents are one more BER element,
/// tag `9f 76` (Counter64), `9f 78` (Float), `9f 79` (Double), `9f 7a` (Int64) or
/// `9f 7b` (UInt64), its length and the value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum OpaqueNumber {
    Float(f32),
    Double(f64),
    Int64(i64),
    UInt64(u64),
    Counter64(u64),
}

impl OpaqueNumber {
    /// The number, as a double (a 64-bit integer past 2^53 rounded, as Zabbix's float
    /// items round a Counter64).
    pub fn as_f64(self) -> f64 {
        match self {
            OpaqueNumber::Float(f) => f64::from(f),
            OpaqueNumber::Double(d) => d,
            OpaqueNumber::Int64(i) => i as f64,
            OpaqueNumber::UInt64(n) | OpaqueNumber::Counter64(n) => n as f64,
        }
    }
}

/// The number an Opaque value wraps, `None` for any other Opaque (its octets are then
/// shown in hex). The value octets are read as the same types are read unwrapped: an
/// Int64 as an INTEGER (two's complement, 1..=8 octets); a UInt64 or Counter64 as a
/// Counter64 (up to 8 octets, and a leading 0x00 sign octet on top: 9 in all, as
/// net-snmp encodes 2^63 and more); a Float in 4 octets and a Double in 8, IEEE
/// big-endian. The length octet must count the octets after it (short form, what
/// net-snmp sends): a wrong or long-form length, no value octets or too many give
/// `None`, never a panic (these are a device's octets). snmpget 5.9.3 is laxer with two
/// Int64s that are not BER (9 octets after a 0x00, none at all: it prints a number) and
/// drops the whole reply for a wrong length (a timeout): both are hex here.
pub fn opaque_number(b: &[u8]) -> Option<OpaqueNumber> {
    let [0x9f, kind, len, x @ ..] = b else {
        return None;
    };
    if usize::from(*len) != x.len() {
        return None;
    }
    Some(match kind {
        0x76 => OpaqueNumber::Counter64(ber::decode_unsigned(x, 8).ok()?),
        0x78 => OpaqueNumber::Float(f32::from_be_bytes(x.try_into().ok()?)),
        0x79 => OpaqueNumber::Double(f64::from_be_bytes(x.try_into().ok()?)),
        0x7a => OpaqueNumber::Int64(ber::decode_i64(x).ok()?),
        0x7b => OpaqueNumber::UInt64(ber::decode_unsigned(x, 8).ok()?),
        _ => return None,
    })
}

/// Octets as net-snmp prints a Hex-STRING: "%02X " per octet, a line break after every
/// 16.
fn hex_lines(s: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(s.len() * 3 + s.len() / 16);
    for (i, chunk) in s.chunks(16).enumerate() {
        if i > 0 {
            out.push('\n');
        }
        for b in chunk {
            write!(out, "{b:02X} ").expect("to a String");
        }
    }
    out
}

/// Upper-case hex octets separated by spaces: `00 1A FF` (net-snmp's Hex-STRING body,
/// without its trailing space and line wrapping).
pub fn hex_string(s: &[u8]) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for (i, b) in s.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push(
            char::from_digit((b >> 4) as u32, 16)
                .unwrap_or('0')
                .to_ascii_uppercase(),
        );
        out.push(
            char::from_digit((b & 0xf) as u32, 16)
                .unwrap_or('0')
                .to_ascii_uppercase(),
        );
    }
    out
}

/// net-snmp's `uptimeString`: `H:MM:SS.cc`, with `N day(s), ` in front when over a day.
pub fn uptime_string(ticks: u32) -> String {
    let centi = ticks % 100;
    let secs = ticks / 100;
    let (days, h, m, s) = (secs / 86400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    match days {
        0 => format!("{h}:{m:02}:{s:02}.{centi:02}"),
        1 => format!("1 day, {h}:{m:02}:{s:02}.{centi:02}"),
        d => format!("{d} days, {h}:{m:02}:{s:02}.{centi:02}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn net_snmp_text() {
        assert_eq!(
            VarValue::OctetString(b"Linux box".to_vec()).to_string(),
            "STRING: \"Linux box\""
        );
        assert_eq!(
            VarValue::OctetString(vec![0, 0x1a, 0xff]).to_string(),
            "Hex-STRING: 00 1A FF "
        );
        assert_eq!(hex_string(&[0, 0x1a, 0xff]), "00 1A FF");
        assert_eq!(
            VarValue::OctetString(b"a\"b\\".to_vec()).to_string(),
            r#"STRING: "a\"b\\""#
        );
        assert_eq!(VarValue::OctetString(Vec::new()).to_string(), "\"\"");
        let long: Vec<u8> = (0..18).collect();
        assert_eq!(
            VarValue::OctetString(long).net_snmp_value(),
            "00 01 02 03 04 05 06 07 08 09 0A 0B 0C 0D 0E 0F \n10 11 "
        );
        // net-snmp 5.9.3 against snmpsim's cisco_16_switch recording: a NUL makes hex.
        assert_eq!(
            VarValue::OctetString(vec![0x60, 0]).to_string(),
            "Hex-STRING: 60 00 "
        );
        assert_eq!(
            VarValue::OctetString(vec![0]).to_string(),
            "Hex-STRING: 00 "
        );
        // UCD-SNMP's laLoadFloat, as snmpget prints it.
        assert_eq!(
            VarValue::Opaque(vec![0x9f, 0x78, 4, 0x3f, 0x49, 0x40, 0]).to_string(),
            "Opaque: Float: 0.786133"
        );
        assert_eq!(
            VarValue::Opaque([&[0x9f, 0x79, 8][..], &2.5f64.to_be_bytes()].concat()).to_string(),
            "Opaque: Float: 2.500000"
        );
        assert_eq!(
            VarValue::Opaque(vec![0x9f, 0x78, 3, 0, 0, 0]).to_string(),
            "OPAQUE: 9F 78 03 00 00 00 "
        );
        assert_eq!(
            VarValue::TimeTicks(4200).to_string(),
            "Timeticks: (4200) 0:00:42.00"
        );
        assert_eq!(uptime_string(8_640_000), "1 day, 0:00:00.00");
        assert_eq!(uptime_string(123_456_789), "14 days, 6:56:07.89");
        assert_eq!(VarValue::Integer(-3).to_string(), "INTEGER: -3");
        assert_eq!(
            VarValue::IpAddress(Ipv4Addr::new(10, 1, 2, 3)).to_string(),
            "IpAddress: 10.1.2.3"
        );
        assert_eq!(
            VarValue::Oid("1.3.6.1.4.1.8072.3.2.10".parse().unwrap()).to_string(),
            "OID: .1.3.6.1.4.1.8072.3.2.10"
        );
        assert_eq!(
            VarValue::NoSuchInstance.to_string(),
            "No Such Instance currently exists at this OID"
        );
        assert_eq!(
            VarValue::Counter64(u64::MAX).to_string(),
            "Counter64: 18446744073709551615"
        );
    }

    /// net-snmp's Opaque Int64, UInt64 and Counter64, as snmpget 5.9.3 printed them
    /// from snmpsim (type 68, these octets): they were shown as OPAQUE hex.
    #[test]
    fn opaque_64_bit_integers_print_as_snmpget_prints_them() {
        let shown = |b: &[u8]| VarValue::Opaque(b.to_vec()).to_string();
        assert_eq!(shown(&[0x9f, 0x7a, 1, 0xff]), "Opaque: Int64: -1");
        assert_eq!(shown(&[0x9f, 0x7a, 2, 0x01, 0x00]), "Opaque: Int64: 256");
        assert_eq!(
            shown(&[0x9f, 0x7a, 8, 0x80, 0, 0, 0, 0, 0, 0, 0]),
            "Opaque: Int64: -9223372036854775808"
        );
        assert_eq!(
            shown(&[0x9f, 0x7b, 9, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]),
            "Opaque: UInt64: 18446744073709551615"
        );
        assert_eq!(shown(&[0x9f, 0x7b, 1, 0]), "Opaque: UInt64: 0");
        assert_eq!(
            shown(&[0x9f, 0x76, 2, 0x01, 0x00]),
            "Opaque: Counter64: 256"
        );
    }

    /// A device's malformed Opaque numbers are its octets in hex, never a panic nor a
    /// number read from the wrong octets.
    #[test]
    fn malformed_opaque_integers_are_not_numbers() {
        for b in [
            // The length says more or fewer octets than follow.
            &[0x9f, 0x7a, 2, 0xff][..],
            &[0x9f, 0x7b, 1, 0x01, 0x02],
            &[0x9f, 0x76, 9, 0x01],
            // No value octets.
            &[0x9f, 0x7a, 0],
            &[0x9f, 0x7b, 0],
            &[0x9f, 0x76],
            // An Int64 of 9 octets, a UInt64 of 9 without its sign octet, 10 with it.
            &[0x9f, 0x7a, 9, 0, 0x7f, 0, 0, 0, 0, 0, 0, 0],
            &[0x9f, 0x7b, 9, 1, 0, 0, 0, 0, 0, 0, 0, 0],
            &[0x9f, 0x76, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            // A long-form length.
            &[0x9f, 0x7b, 0x81, 1, 5],
            // net-snmp's other tags after 9f (0x77 is none of its types).
            &[0x9f, 0x77, 1, 5],
        ] {
            assert_eq!(opaque_number(b), None, "{b:02x?}");
            let v = VarValue::Opaque(b.to_vec());
            assert_eq!(v.to_string(), format!("OPAQUE: {}", hex_lines(b)));
        }
        assert_eq!(
            opaque_number(&[0x9f, 0x7a, 8, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]),
            Some(OpaqueNumber::Int64(i64::MAX))
        );
        assert_eq!(OpaqueNumber::Int64(-3).as_f64(), -3.0);
        assert_eq!(
            OpaqueNumber::Counter64(1 << 40).as_f64(),
            (1u64 << 40) as f64
        );
    }

    #[test]
    fn value_encode_decode_all_types() {
        let oid: Oid = "1.3.6.1".parse().unwrap();
        let all = [
            VarValue::Integer(-70000),
            VarValue::OctetString(vec![1, 2, 3]),
            VarValue::Null,
            VarValue::Oid(oid),
            VarValue::IpAddress(Ipv4Addr::new(192, 0, 2, 1)),
            VarValue::Counter32(u32::MAX),
            VarValue::Gauge32(0x80),
            VarValue::TimeTicks(12345),
            VarValue::Opaque(vec![0x9f, 0x78, 4, 0x3f, 0x80, 0, 0]),
            VarValue::Counter64(u64::MAX),
            VarValue::NoSuchObject,
            VarValue::NoSuchInstance,
            VarValue::EndOfMibView,
        ];
        for v in all {
            let mut out = Vec::new();
            v.as_ref().write(&mut out);
            assert_eq!(out.len(), v.as_ref().encoded_len(), "{v:?}");
            let (tag, c) = crate::ber::Reader::new(&out).read_tlv().unwrap();
            assert_eq!(ValueRef::decode(tag, c).unwrap().to_owned(), v);
        }
    }

    #[test]
    fn value_decode_rejects() {
        assert_eq!(
            ValueRef::decode(TAG_IP_ADDRESS, &[1, 2, 3]),
            Err(DecodeError::BadLength)
        );
        assert_eq!(
            ValueRef::decode(TAG_NULL, &[0]),
            Err(DecodeError::BadLength)
        );
        assert_eq!(
            ValueRef::decode(TAG_COUNTER32, &[1, 0, 0, 0, 0]),
            Err(DecodeError::IntegerRange)
        );
        assert_eq!(
            ValueRef::decode(TAG_INTEGER, &[]),
            Err(DecodeError::BadLength)
        );
        assert_eq!(
            ValueRef::decode(0x47, &[]),
            Err(DecodeError::BadTag { found: 0x47 })
        );
    }
}
