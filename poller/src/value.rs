//! Zabbix value types and the values the engines hand to the sink.
//!
//! A polled item yields either a [`Value`] of its configured [`ValueType`] or an
//! [`ItemError`] (Zabbix's "not supported" state, with a text). An error is never
//! turned into a fake value.

use std::fmt;

/// Zabbix value type of an item (`type = "float" | "uint" | "str"` in the config).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ValueType {
    /// Numeric (float): Zabbix `history` / Glaber `history_dbl`.
    Float,
    /// Numeric (unsigned): Zabbix `history_uint`.
    Uint,
    /// Character / text: Zabbix `history_str`.
    Str,
}

impl ValueType {
    /// The name used in the config and in JSON output.
    pub fn as_str(self) -> &'static str {
        match self {
            ValueType::Float => "float",
            ValueType::Uint => "uint",
            ValueType::Str => "str",
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One polled value, already in the item's value type.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Float(f64),
    Uint(u64),
    Str(String),
}

impl Value {
    /// The value type this value belongs to.
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::Float(_) => ValueType::Float,
            Value::Uint(_) => ValueType::Uint,
            Value::Str(_) => ValueType::Str,
        }
    }
}

/// A text that should hold a number, trimmed as Zabbix trims one before reading it
/// (`variant_to_dbl`, `variant_to_ui64` and `zbx_variant_set_numeric` in its
/// variant.c): line ends at its end dropped (`zbx_rtrim(buffer, "\n\r")`), then
/// spaces at both ends and one pair of double quotes around the rest
/// (`zbx_trim_float`), what is inside the quotes kept as it is. No other white space
/// is dropped: `"\t5"`, `"\n5"`, `"5\t"` and `"\" 5\""` are no numbers to Zabbix.
pub fn bare(t: &str) -> &str {
    let t = t.trim_end_matches(['\n', '\r']).trim_matches(' ');
    t.strip_prefix('"')
        .and_then(|x| x.strip_suffix('"'))
        .unwrap_or(t)
}

/// [`bare`], then one leading `+` dropped: Zabbix's `zbx_trim_integer`, which reads
/// text for a `uint` item and for a numeric preprocessing step (`"+5"` and
/// `" \"+5\" "` are 5; a second `+` stays, and is no number).
pub fn trim_integer(t: &str) -> &str {
    let t = bare(t);
    t.strip_prefix('+').unwrap_or(t)
}

/// An unsigned integer written as text, as a `uint` item takes one (Zabbix 7's
/// `variant_to_ui64`): trimmed by [`trim_integer`], a fraction of zeros dropped
/// ([`del_zeros`]: `"5.0"` → 5), then decimal digits, or else a decimal number
/// ([`plain_float`]), its fraction cut (`"5.5"` → 5, `"1e3"` → 1000). `Err`: why not,
/// for an error text.
pub fn text_to_uint(t: &str) -> Result<u64, &'static str> {
    let t = del_zeros(trim_integer(t));
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return t.parse().map_err(|_| "is out of range");
    }
    plain_float(t)
        .map_err(|_| "is not an unsigned integer")
        .and_then(float_to_uint)
}

/// Zabbix's `zbx_del_zeros`, which a `uint` conversion and a numeric step's reading of
/// text run before reading digits: a decimal fraction's trailing zeros dropped, and its
/// point when nothing is left after it (`"5.0"` → `"5"`, `"5.10"` → `"5.1"`, `".0"` →
/// `""`); a number with an exponent or more than one point as it is. So an integer with
/// a zero fraction is read whole, not through a double (which rounds past 2^53).
pub fn del_zeros(t: &str) -> &str {
    if t.contains(['e', 'E']) || t.matches('.').count() != 1 {
        return t;
    }
    let t = t.trim_end_matches('0');
    t.strip_suffix('.').unwrap_or(t)
}

/// A number as a `uint` item keeps it: its fraction cut, as Zabbix stores it. `Err`:
/// why it does not fit, for an error text.
pub fn float_to_uint(f: f64) -> Result<u64, &'static str> {
    if f < 0.0 {
        Err("is negative")
    } else if f < 18_446_744_073_709_551_616.0 {
        Ok(f.trunc() as u64)
    } else {
        Err("is out of range")
    }
}

/// The float values Zabbix stores (`zbx_validate_value_dbl`): beyond, an item is not
/// supported ("too small or too large"), never stored.
pub const FLOAT_RANGE: std::ops::RangeInclusive<f64> = -1e308..=1e308;

/// `f` if a `float` item may store it ([`FLOAT_RANGE`], not NaN). `Err`: why not.
pub fn storable_float(f: f64) -> Result<f64, &'static str> {
    if FLOAT_RANGE.contains(&f) {
        Ok(f)
    } else if f.is_finite() {
        Err("is too small or too large")
    } else {
        Err("is not finite")
    }
}

/// A number written as text, as a `float` item takes one (Zabbix's `variant_to_dbl`):
/// trimmed by [`bare`], then [`plain_float`]. `Err`: why not, for an error text.
pub fn text_to_float(t: &str) -> Result<f64, &'static str> {
    plain_float(bare(t))
}

/// A number in plain decimal notation and nothing around it, as Zabbix's
/// `zbx_is_double` reads one ("0.15", "-3", "+1e3"; never "inf", "nan", hex or white
/// space), that a `float` item may store ([`storable_float`]). `Err`: why not.
pub fn plain_float(t: &str) -> Result<f64, &'static str> {
    let plain = !t.is_empty()
        && t.bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'-' | b'+' | b'e' | b'E'));
    match t.parse::<f64>() {
        Ok(f) if plain => storable_float(f),
        _ => Err("is not a number"),
    }
}

impl Value {
    /// The value as a value of type `vt` (Zabbix's conversion of a preprocessing
    /// result to the item's type): text by [`text_to_uint`] / [`text_to_float`], a
    /// fractional number in a `uint` item truncated (as Zabbix stores it), numbers as
    /// decimal text. `Err`: why it does not fit, for an error text.
    pub fn into_type(self, vt: ValueType) -> Result<Value, &'static str> {
        match (self, vt) {
            (v, vt) if v.value_type() == vt => Ok(v),
            (Value::Uint(u), ValueType::Float) => Ok(Value::Float(u as f64)),
            (Value::Float(f), ValueType::Uint) => float_to_uint(f).map(Value::Uint),
            (Value::Str(t), ValueType::Uint) => text_to_uint(&t).map(Value::Uint),
            (Value::Str(t), ValueType::Float) => text_to_float(&t).map(Value::Float),
            (v, _) => Ok(Value::Str(v.to_string())),
        }
    }
}

/// `v` as C's `%.{prec}G`: `prec` significant digits, trailing zeros dropped, the
/// exponent form (`1E-05`, `1E+20`) when the exponent is below -4 or not below `prec`.
fn print_g(v: f64, prec: usize) -> String {
    if v == 0.0 {
        return if v.is_sign_negative() { "-0" } else { "0" }.into();
    }
    if !v.is_finite() {
        // As glibc's %G: an Opaque float from a device may be any of these.
        let sign = if v.is_sign_negative() { "-" } else { "" };
        return format!("{sign}{}", if v.is_nan() { "NAN" } else { "INF" });
    }
    let sci = format!("{:.*e}", prec - 1, v);
    let (mantissa, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("{:e}'s exponent is a number");
    let trim = |s: &str| -> String {
        match s.contains('.') {
            true => s.trim_end_matches('0').trim_end_matches('.').into(),
            false => s.into(),
        }
    };
    if exp < -4 || exp >= prec as i32 {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}E{sign}{:02}", trim(mantissa), exp.abs())
    } else {
        trim(&format!("{:.*}", (prec as i32 - 1 - exp) as usize, v))
    }
}

impl fmt::Display for Value {
    /// Numbers in decimal, a float as Zabbix prints one (`zbx_print_double`: 15
    /// significant digits, 17 when 15 do not read back as the same number: `0.1`, `2`,
    /// `1E-05`, `0.33333333333333331`), text as is.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Float(x) => {
                let short = print_g(*x, 15);
                match short.parse::<f64>() {
                    Ok(back) if back == *x => f.write_str(&short),
                    _ => f.write_str(&print_g(*x, 17)),
                }
            }
            Value::Uint(u) => write!(f, "{u}"),
            Value::Str(s) => f.write_str(s),
        }
    }
}

/// Why an item produced no value this time (Zabbix: the item becomes "not supported"
/// or the host unreachable). The reason is what metrics count; the text is for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemError {
    pub reason: ErrorReason,
    pub text: String,
}

/// Error classes counted by metrics (`netpoller_errors_total{reason=...}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorReason {
    /// No answer within the iteration deadline (after retries).
    Timeout,
    /// The agent answered with an exception or error-status, or the value does not fit
    /// the item's type: Zabbix's "not supported".
    Unsupported,
    /// The answer could not be decoded.
    Decode,
    /// The request could not be sent.
    Send,
}

impl ErrorReason {
    /// Every reason, in declaration order (`reason as usize` indexes it).
    pub const ALL: [ErrorReason; 4] = [
        ErrorReason::Timeout,
        ErrorReason::Unsupported,
        ErrorReason::Decode,
        ErrorReason::Send,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorReason::Timeout => "timeout",
            ErrorReason::Unsupported => "unsupported",
            ErrorReason::Decode => "decode",
            ErrorReason::Send => "send",
        }
    }
}

impl ItemError {
    pub fn new(reason: ErrorReason, text: impl Into<String>) -> Self {
        ItemError {
            reason,
            text: text.into(),
        }
    }
}

impl fmt::Display for ItemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.reason.as_str(), self.text)
    }
}

impl std::error::Error for ItemError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_as_zabbix_prints_them() {
        for (v, want) in [
            (0.1, "0.1"),
            (123.456, "123.456"),
            (2.0, "2"),
            (-3.0, "-3"),
            (0.0001, "0.0001"),
            (1e-5, "1E-05"),
            (2.5e-7, "2.5E-07"),
            (1e20, "1E+20"),
            (1e15, "1E+15"),
            (123_456_789_012_345.0, "123456789012345"),
            (1.0 / 3.0, "0.33333333333333331"),
            (0.0, "0"),
            // As glibc's %G: a device's Opaque float may be any of these.
            (f64::NAN, "NAN"),
            (f64::INFINITY, "INF"),
            (f64::NEG_INFINITY, "-INF"),
        ] {
            assert_eq!(Value::Float(v).to_string(), want, "{v:e}");
        }
        // What a text step makes of a float reads back as the same number.
        for v in [
            1.0 / 3.0,
            2.0f64.sqrt(),
            1e-300,
            0.999_999_999_999_999_9e308,
            0.1 + 0.2,
        ] {
            let t = Value::Float(v).to_string();
            assert_eq!(text_to_float(&t), Ok(v), "{t}");
        }
    }

    /// [`bare`] against the cases of Zabbix's own test of `zbx_trim_float`
    /// (tests/libs/zbxcommon/zbx_trim_float.yaml), and the line ends its callers drop
    /// first. All white space was trimmed, inside the quotes too.
    #[test]
    fn text_is_trimmed_as_zabbix_trims_a_number() {
        for (text, want) in [
            (" 123", "123"),
            ("  123  ", "123"),
            ("\"123\"", "123"),
            ("  \"123\"  ", "123"),
            ("", ""),
            ("\"", "\""),
            ("\"\"", ""),
            (" \" \" ", " "),
            (" \"", "\""),
            ("\" 123 \"", " 123 "),
            (" \"123 \" ", "123 "),
            ("++123", "++123"),
            ("+\"123\"", "+\"123\""),
            (" \"+123\" ", "+123"),
            // Line ends at the end only, before the spaces are trimmed.
            ("123\r\n", "123"),
            ("123 \n", "123"),
            ("123\n ", "123\n"),
            ("\n123", "\n123"),
            ("\t123", "\t123"),
            ("123\t", "123\t"),
        ] {
            assert_eq!(bare(text), want, "{text:?}");
        }
        assert_eq!(trim_integer(" \"+123\" "), "123");
        assert_eq!(trim_integer("++123"), "+123");
        assert_eq!(text_to_uint("\t5"), Err("is not an unsigned integer"));
        assert_eq!(text_to_float("5\t"), Err("is not a number"));
        assert_eq!(text_to_float("\" 5\""), Err("is not a number"));
        // Zabbix 7's fallback reads the trimmed text once: a fraction cut, a second
        // `+` read as a sign.
        assert_eq!(text_to_uint(" \"7.9\" "), Ok(7));
        assert_eq!(text_to_uint("++7.9"), Ok(7));
        assert_eq!(
            text_to_uint("\"\"7.9\"\""),
            Err("is not an unsigned integer")
        );
    }

    /// Zabbix's range of float values: ±1e308 (`zbx_validate_value_dbl`).
    #[test]
    fn floats_beyond_zabbixs_range_are_not_stored() {
        assert_eq!(storable_float(1e308), Ok(1e308));
        assert_eq!(storable_float(-1e308), Ok(-1e308));
        assert_eq!(storable_float(1.5e308), Err("is too small or too large"));
        assert_eq!(storable_float(-1.5e308), Err("is too small or too large"));
        assert_eq!(storable_float(f64::INFINITY), Err("is not finite"));
        assert_eq!(storable_float(f64::NAN), Err("is not finite"));
        assert_eq!(text_to_float("1.5e308"), Err("is too small or too large"));
        assert_eq!(text_to_float("1e309"), Err("is not finite"));
    }
}
