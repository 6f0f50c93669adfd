//! Row types handed to the sink by the poller.
//!
//! The sink knows nothing of SNMP or ICMP: a [`Row`] is one value of one item at one
//! instant, addressed to one of the four Glaber history tables, or one item's hourly
//! aggregate addressed to one of the two trends tables ([`Table`]). The `day` column is
//! derived from `clock` (UTC date) when the row is encoded, so it can never disagree with
//! `clock`. [`Table::columns`] is the one list of the columns netpoller writes: the
//! DDL, the schema check and every INSERT's column list come from it, and the
//! RowBinary encoder writes the same order. The DDL adds [`Table::glaber_only_columns`]
//! after them (Glaber's own columns that netpoller never writes), which neither the
//! check nor the INSERTs name.

use std::fmt;
use std::sync::Arc;

/// One of the Glaber 3.x history and trends tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Table {
    /// `history_dbl`: Zabbix numeric (float), `value Float64`.
    Dbl,
    /// `history_uint`: Zabbix numeric (unsigned), `value UInt64`.
    Uint,
    /// `history_str`: Zabbix character and text, `value String`.
    Str,
    /// `history_log`: Zabbix log items, `value String` (the columns netpoller writes are
    /// `history_str`'s; the table also has Glaber's `logeventid`, `source` and
    /// `severity`: [`Table::glaber_only_columns`]).
    Log,
    /// `trends_dbl`: hourly min, max, average and count of `history_dbl` values.
    TrendsDbl,
    /// `trends_uint`: hourly min, max, average (truncated) and count of `history_uint`
    /// values, as `Int64` (Glaber's types).
    TrendsUint,
}

/// The columns every table starts with (its sorting key and partition column).
const KEY_COLUMNS: [(&str, &str); 3] =
    [("day", "Date"), ("itemid", "UInt64"), ("clock", "DateTime")];
/// Host and item name, denormalised onto every row.
const NAME_COLUMNS: [(&str, &str); 2] = [("hostname", "String"), ("itemname", "String")];

impl Table {
    /// Number of tables.
    pub const COUNT: usize = 6;

    /// Every table, in the order of their wire codes.
    pub const ALL: [Table; Table::COUNT] = [
        Table::Dbl,
        Table::Uint,
        Table::Str,
        Table::Log,
        Table::TrendsDbl,
        Table::TrendsUint,
    ];

    /// Table name inside the configured database, e.g. `history_dbl`.
    pub fn name(self) -> &'static str {
        match self {
            Table::Dbl => "history_dbl",
            Table::Uint => "history_uint",
            Table::Str => "history_str",
            Table::Log => "history_log",
            Table::TrendsDbl => "trends_dbl",
            Table::TrendsUint => "trends_uint",
        }
    }

    /// Short label used in metrics (`dbl`, `uint`, `str`, `log`, `trends_dbl`,
    /// `trends_uint`).
    pub fn label(self) -> &'static str {
        match self {
            Table::Dbl => "dbl",
            Table::Uint => "uint",
            Table::Str => "str",
            Table::Log => "log",
            Table::TrendsDbl => "trends_dbl",
            Table::TrendsUint => "trends_uint",
        }
    }

    /// Whether this is one of the trends tables (hourly aggregates).
    pub fn is_trends(self) -> bool {
        matches!(self, Table::TrendsDbl | Table::TrendsUint)
    }

    /// The table's columns in wire order, `(name, ClickHouse type)`: Glaber's own
    /// order, so that tables created here match the ones Glaber creates.
    ///
    /// History: `day, itemid, clock, hostname, itemname, ns, value`. Trends: `day,
    /// itemid, clock, value_min, value_max, value_avg, count, hostname, itemname`.
    pub fn columns(self) -> Vec<(&'static str, &'static str)> {
        let value = match self {
            Table::Dbl | Table::TrendsDbl => "Float64",
            Table::Uint => "UInt64",
            Table::TrendsUint => "Int64",
            Table::Str | Table::Log => "String",
        };
        let mut c = KEY_COLUMNS.to_vec();
        if self.is_trends() {
            c.extend([
                ("value_min", value),
                ("value_max", value),
                ("value_avg", value),
                ("count", "UInt32"),
            ]);
            c.extend(NAME_COLUMNS);
        } else {
            c.extend(NAME_COLUMNS);
            c.extend([("ns", "UInt32"), ("value", value)]);
        }
        c
    }

    /// Columns of Glaber's schema that netpoller neither writes nor checks, created
    /// after [`Table::columns`] (Glaber's order): `history_log`'s `logeventid`,
    /// `source` and `severity`, which Glaber's server writes and reads for its own log
    /// items (its SELECT names them). Without them a `history_log` netpoller created
    /// first failed every log INSERT and read of Glaber's. The INSERTs leave them to
    /// their defaults, and an existing table without them passes the check.
    pub fn glaber_only_columns(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Table::Log => &[
                ("logeventid", "UInt64"),
                ("source", "String"),
                ("severity", "UInt8"),
            ],
            _ => &[],
        }
    }

    /// The column names joined by `", "`, for an INSERT.
    pub fn column_list(self) -> String {
        let names: Vec<_> = self.columns().into_iter().map(|(n, _)| n).collect();
        names.join(", ")
    }

    /// Stable one-byte code used in spool record headers.
    pub fn code(self) -> u8 {
        match self {
            Table::Dbl => 0,
            Table::Uint => 1,
            Table::Str => 2,
            Table::Log => 3,
            Table::TrendsDbl => 4,
            Table::TrendsUint => 5,
        }
    }

    /// Inverse of [`Table::code`]; `None` for unknown codes (corrupted spool data).
    pub fn from_code(code: u8) -> Option<Table> {
        Table::ALL.get(usize::from(code)).copied()
    }

    /// Index into per-table arrays (`0..Table::COUNT`).
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
                | (Table::TrendsDbl, RowValue::FloatTrend(_))
                | (Table::TrendsUint, RowValue::UintTrend(_))
        )
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The `value` column of a history row, or the value columns of a trends row.
#[derive(Clone, Debug, PartialEq)]
pub enum RowValue {
    /// For `history_dbl`. NaN and infinities are stored as they are.
    Float(f64),
    /// For `history_uint`.
    Uint(u64),
    /// For `history_str` and `history_log`. Any bytes of valid UTF-8, including empty.
    Str(String),
    /// For `trends_dbl`.
    FloatTrend(Trend<f64>),
    /// For `trends_uint`.
    UintTrend(Trend<i64>),
}

/// One item's values over one hour (the row's `clock` is the hour's start).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Trend<T> {
    /// `value_min`.
    pub min: T,
    /// `value_max`.
    pub max: T,
    /// `value_avg`.
    pub avg: T,
    /// `count`: how many values the row aggregates.
    pub count: u32,
}

impl<T: fmt::Display> fmt::Display for Trend<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "min={} max={} avg={} count={}",
            self.min, self.max, self.avg, self.count
        )
    }
}

impl fmt::Display for RowValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RowValue::Float(v) => write!(f, "{v}"),
            RowValue::Uint(v) => write!(f, "{v}"),
            RowValue::Str(v) => f.write_str(v),
            RowValue::FloatTrend(t) => t.fmt(f),
            RowValue::UintTrend(t) => t.fmt(f),
        }
    }
}

/// One history or trends row. `hostname` and `itemname` are shared (`Arc<str>`)
/// because the same host and item produce a row every interval. Trends rows have `ns`
/// 0 (the tables have no such column).
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
