//! SNMP values → Zabbix values of the item's [`ValueType`].
//!
//! Rules (Zabbix semantics; a value that does not fit is an error, never a wrap or a
//! fake 0):
//! * noSuchObject / noSuchInstance / endOfMibView → [`ErrorReason::Unsupported`] with
//!   Zabbix's text for the exception and its name ([`exception_text`]).
//! * uint: INTEGER ≥ 0, Counter32, Gauge32, TimeTicks (hundredths of a second),
//!   Counter64, an OCTET STRING holding a decimal unsigned integer (read as Zabbix
//!   reads text, [`crate::value::text_to_uint`]: line ends at its end, spaces and one
//!   pair of quotes around it ignored, no other white space), net-snmp's
//!   Opaque-wrapped numbers ([`snmp::OpaqueNumber`]):
//!   a UInt64 or Counter64 as a Counter64, an Int64 as an INTEGER (≥ 0), a Float or
//!   Double ≥ 0 with its fraction cut (as a preprocessing step converts it). Negative
//!   numbers and other text are errors.
//! * float: any of the numbers above, an OCTET STRING holding a finite decimal number
//!   (UCD-SNMP's `laLoad` "0.15"; [`crate::value::text_to_float`]), or any
//!   Opaque-wrapped number, a negative Int64 included. NaN and infinities are errors.
//! * str: numbers in decimal; OCTET STRING as text when it is valid UTF-8 without control
//!   characters other than tab/CR/LF, otherwise hex octets `AA BB CC` like net-snmp's
//!   Hex-STRING, which is what Zabbix stores for them (a NUL anywhere, a C string's
//!   terminator too, makes the octets hex: `abc\0` is `61 62 63 00`, as net-snmp prints
//!   it); OID as `.1.3.6…`; IpAddress as a dotted quad; an Opaque-wrapped number as the
//!   number (a Float or Double as a float prints, an integer in decimal), other Opaque
//!   as hex.
//! * NULL is the text `NULL` in a `str` item (and for preprocessing steps), as Zabbix
//!   keeps it; a number item does not take it (an error).
//!
//! Zabbix (checks_snmp.c) converts an Opaque Int64 as an INTEGER and a UInt64 as a
//! Counter32 (a Counter64 as a Counter64), but reads both through `val.integer`, a
//! `long` over net-snmp's `counter64` struct, whose first word is the value's high
//! half: not the value. The numbers here are the whole values.
//!
//! An item with preprocessing steps gets the answer in its own type
//! ([`natural_type`]); the steps' result takes the item's type after them.

use snmp::{OpaqueNumber, VarValue};

use crate::value::{
    float_to_uint, storable_float, text_to_float, text_to_uint, ErrorReason, ItemError, Value,
    ValueType,
};

/// What a `str` item stores for an SNMP NULL, as Zabbix does (`zbx_snmp_set_result`:
/// `SET_STR_RESULT(result, zbx_strdup(NULL, "NULL"))`).
pub const NULL_TEXT: &str = "NULL";

/// Zabbix's text for an exception value (checks_snmp.c `zbx_get_snmp_type_error`, 6.0
/// to 7.0), then its name as RFC 3416 spells it: `No Such Object available on this agent
/// at this OID (noSuchObject)`. `None` for a value.
pub fn exception_text(v: &VarValue) -> Option<String> {
    let name = v.exception_name()?;
    let zabbix = match v {
        VarValue::NoSuchObject => "No Such Object available on this agent at this OID",
        VarValue::NoSuchInstance => "No Such Instance currently exists at this OID",
        _ => "No more variables left in this MIB View (it is past the end of the MIB tree)",
    };
    Some(format!("{zabbix} ({name})"))
}

fn unsupported(text: String) -> ItemError {
    ItemError::new(ErrorReason::Unsupported, text)
}

fn misfit(v: &VarValue, vt: ValueType, why: &str) -> ItemError {
    let ty = match v {
        // Text as a `str` item takes it (UTF-8 too, which net-snmp shows in hex).
        VarValue::OctetString(s) if text_of(s).is_some() => "STRING",
        _ => v.net_snmp_type().unwrap_or("value"),
    };
    unsupported(format!("{ty} value {} {why} for value type {vt}", shown(v)))
}

/// The value as shown in error texts (bounded, so a huge string cannot bloat errors): an
/// OCTET STRING as a `str` item stores it, text quoted (`"up"`, `"5\n"`) and other
/// octets in hex (`00 1A 2B`, not `"\0\u{1a}+"`).
fn shown(v: &VarValue) -> String {
    let s = match v {
        VarValue::OctetString(b) => match text_of(b) {
            Some(t) => format!("{:?}", t.chars().take(64).collect::<String>()),
            None => snmp::hex_string(&b[..b.len().min(64)]),
        },
        other => other.net_snmp_value(),
    };
    s.chars().take(80).collect()
}

/// Converts one varbind value into the item's type.
pub fn convert(v: &VarValue, vt: ValueType) -> Result<Value, ItemError> {
    if let Some(text) = exception_text(v) {
        return Err(unsupported(text));
    }
    if let Some(why) = v.undecodable() {
        return Err(unsupported(format!("the agent sent {why}")));
    }
    if matches!(v, VarValue::Null) {
        // Zabbix keeps an SNMP NULL as the text "NULL" (ZBX-22026), which no number
        // item takes.
        return match vt {
            ValueType::Str => Ok(Value::Str(NULL_TEXT.into())),
            _ => Err(unsupported(format!(
                "NULL value is not a number for value type {vt}"
            ))),
        };
    }
    match vt {
        ValueType::Uint => to_uint(v).map(Value::Uint),
        ValueType::Float => to_float(v).map(Value::Float),
        ValueType::Str => Ok(Value::Str(to_str(v))),
    }
}

/// The type a varbind's value has of its own, in which an item with preprocessing
/// steps gets it: its steps run on what the device answered, and their result is
/// converted to the item's type after them (Zabbix's order: a `REGEX` takes the number
/// out of a text answer for a numeric item). Non-negative integers (counters, gauges,
/// TimeTicks, Opaque-wrapped integers) are `uint`, a negative INTEGER or Opaque Int64
/// and an Opaque float `float`, the rest text (OCTET STRING, OID, IpAddress, other
/// Opaque).
pub fn natural_type(v: &VarValue) -> ValueType {
    match *v {
        VarValue::Integer(i) if i < 0 => ValueType::Float,
        VarValue::Integer(_)
        | VarValue::Counter32(_)
        | VarValue::Gauge32(_)
        | VarValue::TimeTicks(_)
        | VarValue::Counter64(_) => ValueType::Uint,
        VarValue::Opaque(ref b) => match snmp::opaque_number(b) {
            Some(OpaqueNumber::Int64(i)) if i < 0 => ValueType::Float,
            Some(OpaqueNumber::Float(_) | OpaqueNumber::Double(_)) => ValueType::Float,
            Some(_) => ValueType::Uint,
            None => ValueType::Str,
        },
        _ => ValueType::Str,
    }
}

fn to_uint(v: &VarValue) -> Result<u64, ItemError> {
    match *v {
        VarValue::Integer(i) => int_to_uint(i).map_err(|why| misfit(v, ValueType::Uint, why)),
        VarValue::Counter32(n) | VarValue::Gauge32(n) | VarValue::TimeTicks(n) => Ok(n as u64),
        VarValue::Counter64(n) => Ok(n),
        VarValue::OctetString(ref s) => text_to_uint(text_of(s).unwrap_or_default())
            .map_err(|why| misfit(v, ValueType::Uint, why)),
        VarValue::Opaque(ref b) => match snmp::opaque_number(b) {
            Some(OpaqueNumber::UInt64(n) | OpaqueNumber::Counter64(n)) => Ok(n),
            Some(OpaqueNumber::Int64(i)) => int_to_uint(i),
            // Its fraction cut, as with a preprocessing step (`Value::into_type`).
            Some(n) => float_to_uint(n.as_f64()),
            None => Err("is not an Opaque number"),
        }
        .map_err(|why| misfit(v, ValueType::Uint, why)),
        _ => Err(misfit(v, ValueType::Uint, "does not fit")),
    }
}

fn to_float(v: &VarValue) -> Result<f64, ItemError> {
    let f = match *v {
        VarValue::Integer(i) => i as f64,
        VarValue::Counter32(n) | VarValue::Gauge32(n) | VarValue::TimeTicks(n) => n as f64,
        VarValue::Counter64(n) => n as f64,
        VarValue::OctetString(ref s) => text_to_float(text_of(s).unwrap_or_default())
            .map_err(|why| misfit(v, ValueType::Float, why))?,
        VarValue::Opaque(ref b) => snmp::opaque_number(b)
            .map(OpaqueNumber::as_f64)
            .ok_or_else(|| misfit(v, ValueType::Float, "is not an Opaque number"))?,
        _ => return Err(misfit(v, ValueType::Float, "does not fit")),
    };
    storable_float(f).map_err(|why| misfit(v, ValueType::Float, why))
}

/// A signed integer as a `uint` item takes it: a negative one is an error, not a wrap.
fn int_to_uint(i: i64) -> Result<u64, &'static str> {
    u64::try_from(i).map_err(|_| "is negative")
}

/// The octets as text, if they are text (see the module docs): valid UTF-8 without a
/// control character other than tab, CR and LF. A NUL anywhere, a C string's
/// terminator too, makes them binary: net-snmp prints them as a Hex-STRING, and
/// Zabbix stores that hex (its UTF-8 reading refuses octets with a NUL as well).
fn text_of(s: &[u8]) -> Option<&str> {
    let t = std::str::from_utf8(s).ok()?;
    t.chars()
        .all(|c| !c.is_control() || matches!(c, '\t' | '\r' | '\n'))
        .then_some(t)
}

fn to_str(v: &VarValue) -> String {
    match v {
        VarValue::Integer(i) => i.to_string(),
        VarValue::OctetString(s) => match text_of(s) {
            Some(t) => t.to_string(),
            None => snmp::hex_string(s),
        },
        VarValue::Oid(o) => o.to_string(),
        VarValue::IpAddress(a) => a.to_string(),
        VarValue::Counter32(n) | VarValue::Gauge32(n) | VarValue::TimeTicks(n) => n.to_string(),
        VarValue::Counter64(n) => n.to_string(),
        VarValue::Opaque(b) => opaque_text(b),
        // Handled before (exceptions, NULL).
        other => other.net_snmp_value(),
    }
}

/// An Opaque value as text, as a `str` item and a discovery filter take it. An
/// Opaque-wrapped number is a number to Zabbix in any item (its GET and its walk print
/// one): a float as a float prints, an integer in decimal; other Opaque values as hex.
pub fn opaque_text(b: &[u8]) -> String {
    match snmp::opaque_number(b) {
        Some(n @ (OpaqueNumber::Float(_) | OpaqueNumber::Double(_))) => {
            Value::Float(n.as_f64()).to_string()
        }
        Some(OpaqueNumber::Int64(i)) => i.to_string(),
        Some(OpaqueNumber::UInt64(n) | OpaqueNumber::Counter64(n)) => n.to_string(),
        None => snmp::hex_string(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn ok(v: VarValue, vt: ValueType) -> Value {
        convert(&v, vt).unwrap_or_else(|e| panic!("{v:?} as {vt}: {e}"))
    }

    fn err(v: VarValue, vt: ValueType) -> ItemError {
        convert(&v, vt).expect_err("must not fit")
    }

    /// An OCTET STRING of `text` in a uint item.
    fn text_as_uint(text: &str) -> Value {
        ok(
            VarValue::OctetString(text.as_bytes().to_vec()),
            ValueType::Uint,
        )
    }

    #[test]
    fn numbers() {
        assert_eq!(ok(VarValue::Integer(5), ValueType::Uint), Value::Uint(5));
        assert_eq!(
            ok(VarValue::Counter32(u32::MAX), ValueType::Uint),
            Value::Uint(4_294_967_295)
        );
        assert_eq!(
            ok(VarValue::Counter64(u64::MAX), ValueType::Uint),
            Value::Uint(u64::MAX)
        );
        assert_eq!(
            ok(VarValue::Gauge32(7), ValueType::Float),
            Value::Float(7.0)
        );
        assert_eq!(
            ok(VarValue::TimeTicks(12345), ValueType::Uint),
            Value::Uint(12345)
        );
        assert_eq!(
            ok(VarValue::Integer(-3), ValueType::Float),
            Value::Float(-3.0)
        );
        assert_eq!(
            ok(VarValue::Integer(-3), ValueType::Str),
            Value::Str("-3".into())
        );
        let e = err(VarValue::Integer(-3), ValueType::Uint);
        assert_eq!(e.reason, ErrorReason::Unsupported);
        assert_eq!(e.text, "INTEGER value -3 is negative for value type uint");
    }

    #[test]
    fn strings_to_numbers() {
        assert_eq!(
            ok(VarValue::OctetString(b" 42\n".to_vec()), ValueType::Uint),
            Value::Uint(42)
        );
        assert_eq!(
            ok(VarValue::OctetString(b"0.15".to_vec()), ValueType::Float),
            Value::Float(0.15)
        );
        // As Zabbix 7 converts text for a uint item: a decimal's fraction cut, a `+`,
        // quotes and a zero fraction read.
        for (text, want) in [
            ("0.15", 0),
            ("5.0", 5),
            ("+5", 5),
            ("\"5\"", 5),
            ("1e3", 1000),
        ] {
            assert_eq!(text_as_uint(text), Value::Uint(want), "{text}");
        }
        assert_eq!(
            ok(VarValue::OctetString(b"\"2.5\"".to_vec()), ValueType::Float),
            Value::Float(2.5)
        );
        err(VarValue::OctetString(b"-1".to_vec()), ValueType::Uint);
        err(VarValue::OctetString(b"".to_vec()), ValueType::Uint);
        err(VarValue::OctetString(b"eth0".to_vec()), ValueType::Float);
        err(VarValue::OctetString(b"inf".to_vec()), ValueType::Float);
        err(VarValue::OctetString(b"NaN".to_vec()), ValueType::Float);
        err(VarValue::OctetString(b"1e400".to_vec()), ValueType::Float);
        err(
            VarValue::OctetString(b"18446744073709551616".to_vec()),
            ValueType::Uint,
        );
        let e = err(VarValue::OctetString(b"up".to_vec()), ValueType::Uint);
        assert_eq!(
            e.text,
            "STRING value \"up\" is not an unsigned integer for value type uint"
        );
    }

    /// An OCTET STRING a number item refuses is shown as a `str` item would store it:
    /// binary octets in hex, as its type says (the error showed `Hex-STRING value
    /// "\0\u{1a}+"`, Rust's escapes of the octets), UTF-8 text as the text it is
    /// (labelled Hex-STRING before, after net-snmp, which prints it in hex).
    #[test]
    fn a_refused_octet_string_is_shown_as_a_str_item_stores_it() {
        let e = err(VarValue::OctetString(vec![0, 0x1a, 0x2b]), ValueType::Uint);
        assert_eq!(
            e.text,
            "Hex-STRING value 00 1A 2B is not an unsigned integer for value type uint"
        );
        let e = err(VarValue::OctetString(b"12.5\0".to_vec()), ValueType::Float);
        assert_eq!(
            e.text,
            "Hex-STRING value 31 32 2E 35 00 is not a number for value type float"
        );
        let e = err(
            VarValue::OctetString("Grüße".as_bytes().to_vec()),
            ValueType::Float,
        );
        assert_eq!(
            e.text,
            "STRING value \"Grüße\" is not a number for value type float"
        );
        let e = err(VarValue::OctetString(b"Hello\n".to_vec()), ValueType::Uint);
        assert_eq!(
            e.text,
            "STRING value \"Hello\\n\" is not an unsigned integer for value type uint"
        );
    }

    /// A text integer with a fraction of zeros is the integer, exactly, as Zabbix's
    /// `zbx_del_zeros` makes it before reading it: it went through a double, which
    /// stored 9007199254740993.0 as ...992 and refused u64::MAX.0 as out of range.
    #[test]
    fn a_text_integer_with_a_zero_fraction_is_exact() {
        for (text, want) in [
            ("18446744073709551615.0", u64::MAX),
            ("9007199254740993.00", 9_007_199_254_740_993),
            ("\"+9007199254740993.\"", 9_007_199_254_740_993),
            ("0.000", 0),
            // Still through a double: a fraction that is not zeros (cut), an exponent.
            ("7.50", 7),
            ("2.0e1", 20),
        ] {
            assert_eq!(text_as_uint(text), Value::Uint(want), "{text}");
        }
        // Nothing before the point is no number, as in Zabbix.
        err(VarValue::OctetString(b".0".to_vec()), ValueType::Uint);
        err(
            VarValue::OctetString(b"18446744073709551616.0".to_vec()),
            ValueType::Uint,
        );
    }

    #[test]
    fn text_and_hex() {
        assert_eq!(
            ok(VarValue::OctetString(b"Linux box".to_vec()), ValueType::Str),
            Value::Str("Linux box".into())
        );
        // A C string's terminator is a NUL like any other: hex, as Zabbix stores it.
        assert_eq!(
            ok(VarValue::OctetString(b"abc\0".to_vec()), ValueType::Str),
            Value::Str("61 62 63 00".into())
        );
        // A lone NUL is a byte (a flag, a bitmask), not empty text.
        assert_eq!(
            ok(VarValue::OctetString(vec![0]), ValueType::Str),
            Value::Str("00".into())
        );
        assert_eq!(
            ok(
                VarValue::OctetString("Москва, стойка 7".as_bytes().to_vec()),
                ValueType::Str
            ),
            Value::Str("Москва, стойка 7".into())
        );
        assert_eq!(
            ok(
                VarValue::OctetString(vec![0x00, 0x1a, 0x2b, 0xff]),
                ValueType::Str
            ),
            Value::Str("00 1A 2B FF".into())
        );
        assert_eq!(
            ok(VarValue::OctetString(vec![]), ValueType::Str),
            Value::Str(String::new())
        );
        assert_eq!(
            ok(
                VarValue::Oid(".1.3.6.1.4.1.8072.3.2.10".parse().unwrap()),
                ValueType::Str
            ),
            Value::Str(".1.3.6.1.4.1.8072.3.2.10".into())
        );
        assert_eq!(
            ok(
                VarValue::IpAddress(Ipv4Addr::new(10, 0, 0, 1)),
                ValueType::Str
            ),
            Value::Str("10.0.0.1".into())
        );
        assert_eq!(
            ok(VarValue::TimeTicks(4200), ValueType::Str),
            Value::Str("4200".into())
        );
        err(
            VarValue::IpAddress(Ipv4Addr::new(10, 0, 0, 1)),
            ValueType::Uint,
        );
        err(VarValue::Oid("1.3.6".parse().unwrap()), ValueType::Float);
    }

    #[test]
    fn exceptions_are_unsupported() {
        // Zabbix's words (checks_snmp.c zbx_get_snmp_type_error), then the name.
        for (v, name) in [
            (
                VarValue::NoSuchObject,
                "No Such Object available on this agent at this OID (noSuchObject)",
            ),
            (
                VarValue::NoSuchInstance,
                "No Such Instance currently exists at this OID (noSuchInstance)",
            ),
            (
                VarValue::EndOfMibView,
                "No more variables left in this MIB View (it is past the end of the MIB tree) (endOfMibView)",
            ),
        ] {
            for vt in [ValueType::Uint, ValueType::Float, ValueType::Str] {
                assert_eq!(
                    convert(&v, vt),
                    Err(ItemError::new(ErrorReason::Unsupported, name))
                );
            }
        }
        // A value the agent sent that could not be read: unsupported, with why (as
        // text it is not the hex of its bytes).
        let odd = VarValue::Undecodable {
            tag: 0x47,
            raw: vec![7],
        };
        for vt in [ValueType::Uint, ValueType::Float, ValueType::Str] {
            assert_eq!(
                convert(&odd, vt),
                Err(ItemError::new(
                    ErrorReason::Unsupported,
                    "the agent sent a value of the obsolete type UInteger32 (BER tag 0x47), not read"
                ))
            );
        }
    }

    #[test]
    fn an_answer_for_preprocessing_keeps_its_own_type() {
        let own = |v: VarValue| convert(&v, natural_type(&v));
        assert_eq!(
            own(VarValue::Counter64(u64::MAX)),
            Ok(Value::Uint(u64::MAX))
        );
        assert_eq!(own(VarValue::TimeTicks(4200)), Ok(Value::Uint(4200)));
        assert_eq!(own(VarValue::Integer(-3)), Ok(Value::Float(-3.0)));
        assert_eq!(own(VarValue::Integer(3)), Ok(Value::Uint(3)));
        // Text stays text, even when it holds a number: the steps decide.
        assert_eq!(
            own(VarValue::OctetString(b"23.5 C".to_vec())),
            Ok(Value::Str("23.5 C".into()))
        );
        assert_eq!(
            own(VarValue::OctetString(b"42".to_vec())),
            Ok(Value::Str("42".into()))
        );
        assert_eq!(
            own(VarValue::IpAddress(Ipv4Addr::new(10, 0, 0, 1))),
            Ok(Value::Str("10.0.0.1".into()))
        );
        let mut f = vec![0x9f, 0x78, 0x04];
        f.extend(1.5f32.to_be_bytes());
        assert_eq!(own(VarValue::Opaque(f)), Ok(Value::Float(1.5)));
        assert_eq!(
            own(VarValue::Opaque(vec![1, 2])),
            Ok(Value::Str("01 02".into()))
        );
        assert_eq!(
            own(VarValue::NoSuchObject).unwrap_err().text,
            "No Such Object available on this agent at this OID (noSuchObject)"
        );
    }

    /// An Opaque float in a uint item: its fraction cut, as when the item has a step
    /// (which converts the Float after it); it was refused without one.
    #[test]
    fn an_opaque_float_in_a_uint_item_is_truncated_as_with_steps() {
        let mut f = vec![0x9f, 0x78, 0x04];
        f.extend(2.75f32.to_be_bytes());
        let v = VarValue::Opaque(f);
        let with_steps = convert(&v, natural_type(&v))
            .ok()
            .and_then(|x| x.into_type(ValueType::Uint).ok());
        assert_eq!(with_steps, Some(Value::Uint(2)));
        assert_eq!(convert(&v, ValueType::Uint), Ok(Value::Uint(2)));
    }

    /// Octets with a NUL are hex, as net-snmp prints them and Zabbix stores them: a
    /// 2-octet BITS value such as hrPrinterDetectedErrorState noPaper(1) = 40 00, a
    /// port list 20 00, and text with a C string's terminator alike (its NUL was
    /// dropped: "eth0", and "5\0" was the number 5, which Zabbix's `35 00` is not).
    #[test]
    fn octets_with_a_nul_are_hex() {
        for (octets, hex) in [
            (&b"@\0"[..], "40 00"),
            (b" \0", "20 00"),
            (b"eth0\0", "65 74 68 30 00"),
            (b"ab\0cd", "61 62 00 63 64"),
            (b"5\0", "35 00"),
        ] {
            let v = VarValue::OctetString(octets.to_vec());
            assert_eq!(convert(&v, ValueType::Str), Ok(Value::Str(hex.into())));
            assert_eq!(convert(&v, natural_type(&v)), Ok(Value::Str(hex.into())));
            err(v.clone(), ValueType::Uint);
            err(v, ValueType::Float);
        }
    }

    /// An SNMP NULL (an agent's "no value") is the text `NULL` in a `str` item and for
    /// preprocessing steps, as Zabbix keeps it (`SET_STR_RESULT "NULL"`); it made the
    /// item not supported. A number item does not take it.
    #[test]
    fn null_is_the_text_null() {
        assert_eq!(
            convert(&VarValue::Null, ValueType::Str),
            Ok(Value::Str("NULL".into()))
        );
        assert_eq!(
            convert(&VarValue::Null, natural_type(&VarValue::Null)),
            Ok(Value::Str("NULL".into()))
        );
        for vt in [ValueType::Uint, ValueType::Float] {
            let e = err(VarValue::Null, vt);
            assert_eq!(e.reason, ErrorReason::Unsupported);
            assert_eq!(
                e.text,
                format!("NULL value is not a number for value type {vt}")
            );
        }
    }

    /// Text numbers are trimmed as Zabbix trims them: line ends at the end, spaces and
    /// one pair of quotes; a tab, or a line end before the number, makes it no number
    /// (they were ignored: "\t42" was 42).
    #[test]
    fn text_numbers_keep_white_space_zabbix_keeps() {
        for (text, want) in [("42\r\n", 42), (" 42 \n", 42), (" \"+42\" ", 42)] {
            assert_eq!(text_as_uint(text), Value::Uint(want), "{text:?}");
        }
        for text in ["\t42", "42\t", "\n42", "42\n ", "\" 42\"", "\u{a0}42"] {
            let v = VarValue::OctetString(text.as_bytes().to_vec());
            err(v.clone(), ValueType::Uint);
            err(v, ValueType::Float);
        }
        assert_eq!(
            ok(
                VarValue::OctetString(b" \"0.5\"\r\n".to_vec()),
                ValueType::Float
            ),
            Value::Float(0.5)
        );
    }

    /// net-snmp's Opaque UInt64 (`9f 7b`) and Counter64 (`9f 76`): numbers to Zabbix
    /// (`ASN_OPAQUE_U64`, `ASN_OPAQUE_COUNTER64`), once an error for a uint item.
    #[test]
    fn opaque_64_bit_unsigned_numbers() {
        let u64_max = vec![
            0x9f, 0x7b, 0x09, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        ];
        assert_eq!(
            ok(VarValue::Opaque(u64_max), ValueType::Uint),
            Value::Uint(u64::MAX)
        );
        let c64 = VarValue::Opaque(vec![0x9f, 0x76, 0x02, 0x01, 0x00]);
        assert_eq!(ok(c64.clone(), ValueType::Uint), Value::Uint(256));
        assert_eq!(ok(c64.clone(), ValueType::Float), Value::Float(256.0));
        assert_eq!(ok(c64.clone(), ValueType::Str), Value::Str("256".into()));
        assert_eq!(natural_type(&c64), ValueType::Uint);
        // A length that does not match, or too many octets: not a number.
        err(
            VarValue::Opaque(vec![0x9f, 0x7b, 0x03, 0x01]),
            ValueType::Uint,
        );
        err(
            VarValue::Opaque([&[0x9f, 0x7b, 0x09][..], &[1; 9]].concat()),
            ValueType::Uint,
        );
    }

    /// net-snmp's Opaque Int64 (`9f 7a`) converts as an INTEGER does, as Zabbix's
    /// checks_snmp.c takes it: a negative one in a uint item is an error, not a wrap,
    /// and a float for preprocessing steps; it was refused by number items and hex in a
    /// str item.
    #[test]
    fn opaque_int64_converts_as_an_integer() {
        let minus_one = VarValue::Opaque(vec![0x9f, 0x7a, 0x01, 0xff]);
        let e = err(minus_one.clone(), ValueType::Uint);
        assert_eq!(e.reason, ErrorReason::Unsupported);
        assert_eq!(
            e.text,
            "Opaque value Int64: -1 is negative for value type uint"
        );
        assert_eq!(ok(minus_one.clone(), ValueType::Float), Value::Float(-1.0));
        assert_eq!(
            ok(minus_one.clone(), ValueType::Str),
            Value::Str("-1".into())
        );
        assert_eq!(natural_type(&minus_one), ValueType::Float);
        let big = VarValue::Opaque(vec![
            0x9f, 0x7a, 0x08, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        ]);
        assert_eq!(
            ok(big.clone(), ValueType::Uint),
            Value::Uint(i64::MAX as u64)
        );
        assert_eq!(
            ok(big.clone(), ValueType::Str),
            Value::Str(i64::MAX.to_string())
        );
        assert_eq!(natural_type(&big), ValueType::Uint);
        // Every Opaque integer against the INTEGER or Counter64 it stands for, in
        // every type and for preprocessing.
        for (opaque, plain) in [
            (vec![0x9f, 0x7a, 0x02, 0xfe, 0x0c], VarValue::Integer(-500)),
            (vec![0x9f, 0x7a, 0x01, 0x00], VarValue::Integer(0)),
            (vec![0x9f, 0x7b, 0x02, 0x01, 0x00], VarValue::Counter64(256)),
            (vec![0x9f, 0x76, 0x01, 0x80], VarValue::Counter64(128)),
        ] {
            let opaque = VarValue::Opaque(opaque);
            for vt in [ValueType::Uint, ValueType::Float, ValueType::Str] {
                assert_eq!(
                    convert(&opaque, vt).map_err(|e| e.reason),
                    convert(&plain, vt).map_err(|e| e.reason),
                    "{opaque:?} as {vt}"
                );
            }
            assert_eq!(natural_type(&opaque), natural_type(&plain), "{opaque:?}");
        }
        // A malformed Int64 is no number.
        let e = err(VarValue::Opaque(vec![0x9f, 0x7a, 0x00]), ValueType::Float);
        assert!(e.text.contains("is not an Opaque number"), "{e}");
    }

    #[test]
    fn opaque_floats() {
        let mut f = vec![0x9f, 0x78, 0x04];
        f.extend(1.5f32.to_be_bytes());
        assert_eq!(ok(VarValue::Opaque(f), ValueType::Float), Value::Float(1.5));
        let mut d = vec![0x9f, 0x79, 0x08];
        d.extend((-2.25f64).to_be_bytes());
        assert_eq!(
            ok(VarValue::Opaque(d), ValueType::Float),
            Value::Float(-2.25)
        );
        err(VarValue::Opaque(vec![1, 2]), ValueType::Float);
        // What a device may send as an Opaque float: text items print it as %G does
        // (a panic stopped the daemon), number items refuse it; a double beyond
        // Zabbix's ±1e308 is refused too.
        for (x, text) in [
            (f32::NAN, "NAN"),
            (f32::INFINITY, "INF"),
            (f32::NEG_INFINITY, "-INF"),
        ] {
            let mut b = vec![0x9f, 0x78, 0x04];
            b.extend(x.to_be_bytes());
            let v = VarValue::Opaque(b);
            assert_eq!(ok(v.clone(), ValueType::Str), Value::Str(text.into()));
            assert!(err(v.clone(), ValueType::Float)
                .text
                .contains("is not finite"));
            err(v, ValueType::Uint);
        }
        let mut big = vec![0x9f, 0x79, 0x08];
        big.extend(1.5e308f64.to_be_bytes());
        let e = err(VarValue::Opaque(big), ValueType::Float);
        assert!(e.text.contains("is too small or too large"), "{e}");
        // UCD-SNMP's laLoadFloat in a text item: the number, not the Opaque's bytes.
        let mut load = vec![0x9f, 0x78, 0x04];
        load.extend(0.5f32.to_be_bytes());
        assert_eq!(
            ok(VarValue::Opaque(load), ValueType::Str),
            Value::Str("0.5".into())
        );
        assert_eq!(
            ok(VarValue::Opaque(vec![1, 2]), ValueType::Str),
            Value::Str("01 02".into())
        );
    }
}
