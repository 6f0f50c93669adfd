//! Row types handed to the sink by the poller.
//!
//! The sink knows nothing of SNMP or ICMP: a [`Row`] is one value of one item at one
//! instant, addressed to one of the four Glaber history tables ([`Table`]). The `day`
//! column is derived from `clock` (UTC date) when the row is encoded, so it can never
//! disagree with `clock`.

use std::fmt;
use std::sync::Arc;

/// One of the Glaber 3.x history tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Table {
    /// `history_dbl`: Zabbix numeric (float), `value Float64`.
    Dbl,
    /// `history_uint`: Zabbix numeric (unsigned), `value UInt64`.
    Uint,
    /// `history_str`: Zabbix character and text, `value String`.
    Str,
    /// `history_log`: Zabbix log items, `value String` (same columns as `history_str`).
    Log,
}

impl Table {
    /// Every table, in the order of their wire codes.
    pub const ALL: [Table; 4] = [Table::Dbl, Table::Uint, Table::Str, Table::Log];

    /// Table name inside the configured database, e.g. `history_dbl`.
    pub fn name(self) -> &'static str {
        match self {
            Table::Dbl => "history_dbl",
            Table::Uint => "history_uint",
            Table::Str => "history_str",
            Table::Log => "history_log",
        }
    }

    /// Short label used in metrics and TSV dumps (`dbl`, `uint`, `str`, `log`).
    pub fn label(self) -> &'static str {
        match self {
            Table::Dbl => "dbl",
            Table::Uint => "uint",
            Table::Str => "str",
            Table::Log => "log",
        }
    }

    /// ClickHouse type of the `value` column.
    pub fn value_type(self) -> &'static str {
        match self {
            Table::Dbl => "Float64",
            Table::Uint => "UInt64",
            Table::Str | Table::Log => "String",
        }
    }

    /// Stable one-byte code used in spool record headers.
    pub fn code(self) -> u8 {
        match self {
            Table::Dbl => 0,
            Table::Uint => 1,
            Table::Str => 2,
            Table::Log => 3,
        }
    }

    /// Inverse of [`Table::code`]; `None` for unknown codes (corrupted spool data).
    pub fn from_code(code: u8) -> Option<Table> {
        Table::ALL.get(usize::from(code)).copied()
    }

    /// Index into per-table arrays (`0..4`).
    pub fn index(self) -> usize {
        usize::from(self.code())
    }

    /// Whether `value` may be written into this table.
    pub fn accepts(self, value: &RowValue) -> bool {
        matches!(
            (self, value),
            (Table::Dbl, RowValue::Float(_))
                | (Table::Uint, RowValue::Uint(_))
                | (Table::Str | Table::Log, RowValue::Str(_))
        )
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The `value` column of a row.
#[derive(Clone, Debug, PartialEq)]
pub enum RowValue {
    /// For `history_dbl`. NaN and infinities are stored as they are.
    Float(f64),
    /// For `history_uint`.
    Uint(u64),
    /// For `history_str` and `history_log`. Any bytes of valid UTF-8, including empty.
    Str(String),
}

impl fmt::Display for RowValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RowValue::Float(v) => write!(f, "{v}"),
            RowValue::Uint(v) => write!(f, "{v}"),
            RowValue::Str(v) => f.write_str(v),
        }
    }
}

/// One history row. `hostname` and `itemname` are shared (`Arc<str>`) because the same
/// host and item produce a row every interval.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// Zabbix itemid.
    pub itemid: u64,
    /// Unix time of the value, seconds (column `clock DateTime`).
    pub clock: u32,
    /// Nanoseconds within `clock` (column `ns UInt32`).
    pub ns: u32,
    /// Host name as Zabbix knows it.
    pub hostname: Arc<str>,
    /// Zabbix item key, e.g. `icmppingsec[,3,,,,avg]`.
    pub itemname: Arc<str>,
    /// The value; its variant must match the table the row is sent to.
    pub value: RowValue,
}

/// Days since 1970-01-01 (the ClickHouse `Date` encoding) of a Unix time in seconds,
/// UTC. Saturates at `u16::MAX` (year 2149), which cannot happen for a `u32` clock
/// before 2106.
pub fn day_of(clock: u32) -> u16 {
    u16::try_from(clock / 86_400).unwrap_or(u16::MAX)
}
