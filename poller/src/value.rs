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
