//! Zabbix item value preprocessing: "Simple change", "Change per second" and "Custom
//! multiplier", the steps Zabbix's network templates put on interface counters
//! (`ifHCInOctets` → bits per second), and the throttling steps "Discard unchanged" and
//! "Discard unchanged with heartbeat" they put on slow-changing items (`ifAlias`,
//! `ifOperStatus`, `sysDescr`), and on text items "Regular expression" and the trims,
//! with which they extract a firmware version or a model from `sysDescr`. netpoller
//! writes history itself, past the Zabbix server that would otherwise run them, so it
//! runs them too.
//!
//! Semantics (Zabbix's):
//! * Steps run in order on the answer in its own type (an SNMP OCTET STRING is text, a
//!   counter a number: [`crate::snmp_convert::natural_type`]); each converts the value
//!   to what it needs: a text step a number to its decimal text, a numeric step text to
//!   the number it holds (an unsigned integer stays exact; text that holds none fails
//!   the step). The result is converted to the item's type
//!   after the last step ([`Value::into_type`]), a `uint` item keeping the integer part
//!   of a fractional result ("trimmed", as Zabbix stores it). So a `REGEX` takes a
//!   number out of a text answer for a numeric item, and a `MULTIPLIER` after it scales
//!   it, as in Zabbix.
//! * A change step remembers the value that reached it and when it was obtained: the
//!   first value of an item (after a start, or after its steps changed) and a value
//!   smaller than the previous one (a counter that wrapped or was reset) yield no value;
//!   the next one does. Change per second divides by the time between the two polls.
//! * A text step: `REGEX` replaces the text with its output template filled from the
//!   pattern's first match (`\\0`..`\\9`), or fails when nothing matches; a trim strips
//!   the given characters from its ends; `STR_REPLACE` replaces every occurrence of a
//!   text. `BOOL_TO_DECIMAL`, `OCTAL_TO_DECIMAL` and `HEX_TO_DECIMAL` read the text as
//!   an unsigned number ([`Radix`]), or fail.
//! * A validation step (`IN_RANGE` on numbers, `MATCHES_REGEX` / `NOT_MATCHES_REGEX`
//!   on text) fails a value that does not pass.
//! * A failing step makes the item unsupported for that poll, with the reason, unless
//!   its "Custom on fail" handler ([`Op`]) discards the value, replaces it (the next
//!   steps run on the replacement) or sets the error's text. A result that does not fit
//!   the item's type makes the item unsupported.
//! * `CHECK_NOT_SUPPORTED`, the first step if any, runs on errors only: an item the
//!   device does not support this time gets the step's handler (discard, a custom
//!   value the next steps run on, a custom error) instead of the error.
//! * A throttling step compares the value to be stored (numeric steps done, in the
//!   item's type; text too) with the last one stored, as Zabbix compares (two texts that
//!   are both numbers as numbers): "Discard unchanged" stores it only
//!   when it differs, "with heartbeat" also when the heartbeat has passed since the last
//!   one stored (so a graph or a nodata trigger still sees the item). After an error
//!   (the poll's or a step's) the next value is stored, whatever it is: the recovery is
//!   in history.
//!
//! Invariants: at most one change step and at most one throttling step per item, the
//! throttling step last (the config refuses others), so the memory is one previous
//! value per item with a change step and one stored value per item with a throttling
//! step, which compares values of the item's type; the other steps keep nothing.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use crate::engine::Sample;
use crate::value::{
    float_to_uint, plain_float, storable_float, text_to_float, ErrorReason, ItemError, Value,
    ValueType,
};

/// One preprocessing step.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// `value - previous`.
    SimpleChange,
    /// `(value - previous) / (time - previous time)`, per second.
    ChangePerSecond,
    /// `value × factor`.
    Multiplier(f64),
    /// The output template filled from the pattern's first match; no match: an error.
    Regex(Arc<Extract>),
    /// These characters stripped from the text's ends.
    Trim(Ends, Arc<str>),
    /// Zabbix's "In range": a value outside the bounds fails.
    InRange(Arc<Bounds>),
    /// Zabbix's "Matches regular expression" (`true`) and "Does not match" (`false`):
    /// a text that does not pass fails.
    Matches(Arc<Check>),
    /// Zabbix's "Check for not supported value": an item the device does not support
    /// this time (noSuchObject, an error-status) gets this step's handler instead; the
    /// first step, it runs on errors only.
    CheckNotSupported,
    /// Zabbix's "Replace": every occurrence of a text by another.
    Replace(Arc<Replace>),
    /// Zabbix's "Boolean to decimal", "Octal to decimal" and "Hexadecimal to
    /// decimal": the text as an unsigned integer; text in another form fails.
    ToDecimal(Radix),
    /// No value when it equals the last one stored.
    DiscardUnchanged,
    /// No value when it equals the last one stored and that one is younger than this
    /// many seconds.
    DiscardUnchangedHeartbeat(u32),
}

/// Zabbix's largest heartbeat (25 years, in seconds).
const MAX_HEARTBEAT: u64 = 788_400_000;

/// Seconds of a Zabbix time parameter: `90`, `90s`, `15m`, `1h`, `1d`, `1w`.
fn seconds(p: &str) -> Option<u64> {
    let p = p.trim();
    let (num, unit) = match p.char_indices().last()? {
        (i, c) if c.is_ascii_alphabetic() => (&p[..i], c),
        _ => (p, 's'),
    };
    let mult = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3_600,
        'd' => 86_400,
        'w' => 604_800,
        _ => return None,
    };
    num.parse::<u64>().ok()?.checked_mul(mult)
}

/// A trim's characters or a replacement's texts as Zabbix reads them: `\s`, `\n`, `\r`,
/// `\t` are a space, a newline, a carriage return and a tab (a template exported from
/// Zabbix writes an `RTRIM` of newlines as `\n`); in a replacement (`backslash`) `\\`
/// is one backslash; any other character is itself.
fn unescape(chars: &str, backslash: bool) -> String {
    let mut out = String::with_capacity(chars.len());
    let mut it = chars.chars().peekable();
    while let Some(c) = it.next() {
        let escaped = match (c, it.peek()) {
            ('\\', Some('s')) => Some(' '),
            ('\\', Some('n')) => Some('\n'),
            ('\\', Some('r')) => Some('\r'),
            ('\\', Some('t')) => Some('\t'),
            ('\\', Some('\\')) if backslash => Some('\\'),
            _ => None,
        };
        match escaped {
            Some(e) => {
                it.next();
                out.push(e);
            }
            None => out.push(c),
        }
    }
    out
}

/// A `STR_REPLACE` step: the text to replace (never empty) and its replacement.
#[derive(Debug, Clone, PartialEq)]
pub struct Replace {
    search: String,
    with: String,
}

/// What a `*_TO_DECIMAL` step reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Radix {
    /// A number (0 is 0, any other 1) or one of Zabbix's words: `true`, `up`, `ok`,
    /// ... are 1, `false`, `down`, `err`, ... 0 (any case).
    Bool,
    /// Octal digits.
    Octal,
    /// Hexadecimal digits, or octets as net-snmp shows a Hex-STRING (`00 1A 2B`),
    /// read as one big-endian number.
    Hex,
}

impl Radix {
    /// `t` as Zabbix's step reads it (spaces and double quotes around it ignored).
    /// `Err`: why not, for the error text.
    fn read(self, t: &str) -> Result<u64, &'static str> {
        let t = t
            .trim_start_matches([' ', '"'])
            .trim_end_matches([' ', '"', '\n', '\r']);
        let digits = |radix: u32, why| {
            if t.is_empty() || !t.chars().all(|c| c.is_digit(radix)) {
                return Err(why);
            }
            u64::from_str_radix(t, radix).map_err(|_| "is out of range")
        };
        match self {
            Radix::Bool => {
                if let Ok(f) = text_to_float(t) {
                    return Ok(u64::from(f != 0.0));
                }
                const ONE: [&str; 11] = [
                    "true",
                    "t",
                    "yes",
                    "y",
                    "on",
                    "up",
                    "running",
                    "enabled",
                    "available",
                    "ok",
                    "master",
                ];
                const ZERO: [&str; 11] = [
                    "false",
                    "f",
                    "no",
                    "n",
                    "off",
                    "down",
                    "unused",
                    "disabled",
                    "unavailable",
                    "err",
                    "slave",
                ];
                let is = |words: &[&str]| words.iter().any(|w| w.eq_ignore_ascii_case(t));
                match (is(&ONE), is(&ZERO)) {
                    (true, _) => Ok(1),
                    (_, true) => Ok(0),
                    _ => Err("is not a boolean"),
                }
            }
            Radix::Octal => digits(8, "is not an octal number"),
            Radix::Hex => {
                // net-snmp's Hex-STRING: two digits per octet, one space or newline
                // between them.
                let octets = t.len() % 3 == 2
                    && t.bytes().enumerate().all(|(i, b)| match i % 3 {
                        2 => b == b' ' || b == b'\n',
                        _ => b.is_ascii_hexdigit(),
                    });
                if !octets {
                    return digits(16, "is not a hexadecimal number");
                }
                let joined: String = t.split([' ', '\n']).collect();
                u64::from_str_radix(&joined, 16).map_err(|_| "is out of range")
            }
        }
    }
}

/// Which ends of the text a trim step strips (Zabbix's `TRIM`, `LTRIM`, `RTRIM`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ends {
    Both,
    Left,
    Right,
}

/// What a step that fails does instead of making the item unsupported for that poll:
/// Zabbix's "Custom on fail" (`error_handler`, `error_handler_params`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum OnFail {
    /// `ORIGINAL_ERROR`: the item is unsupported, with the step's reason.
    #[default]
    Error,
    /// `DISCARD_VALUE`: no value this time, the item stays supported.
    Discard,
    /// `CUSTOM_VALUE`: this value instead; the steps after this one run on it.
    Value(String),
    /// `CUSTOM_ERROR`: the item is unsupported with this message.
    Message(String),
}

impl fmt::Display for OnFail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OnFail::Error => f.write_str("on fail: error"),
            OnFail::Discard => f.write_str("on fail: discard"),
            OnFail::Value(v) => write!(f, "on fail: value {v:?}"),
            OnFail::Message(m) => write!(f, "on fail: error {m:?}"),
        }
    }
}

/// What a failed step leaves, by its handler.
enum Handled<'a> {
    /// Go on with this custom value.
    Value(&'a str),
    /// No value this time.
    Discard,
    /// The item's error this time.
    Error(ItemError),
}

impl OnFail {
    /// This handler on a step that failed; `why` says how, for the default error.
    fn handle(&self, why: impl FnOnce() -> String) -> Handled<'_> {
        match self {
            OnFail::Value(v) => Handled::Value(v),
            OnFail::Discard => Handled::Discard,
            OnFail::Message(m) => {
                Handled::Error(ItemError::new(ErrorReason::Unsupported, m.clone()))
            }
            OnFail::Error => Handled::Error(unsupported(why())),
        }
    }

    /// Zabbix's export names of the handlers, as [`OnFail::parse`] takes them (in any
    /// case).
    pub const NAMES: [&'static str; 4] = [
        "ORIGINAL_ERROR",
        "DISCARD_VALUE",
        "CUSTOM_VALUE",
        "CUSTOM_ERROR",
    ];

    /// Parses Zabbix's export name (any case) and its parameter.
    pub fn parse(handler: &str, param: Option<&str>) -> Result<OnFail, String> {
        let h = handler.to_ascii_uppercase();
        match (h.as_str(), param) {
            ("ORIGINAL_ERROR", None) => Ok(OnFail::Error),
            ("DISCARD_VALUE", None) => Ok(OnFail::Discard),
            ("CUSTOM_VALUE", Some(v)) => Ok(OnFail::Value(v.to_owned())),
            ("CUSTOM_ERROR", Some(m)) if !m.is_empty() => Ok(OnFail::Message(m.to_owned())),
            ("ORIGINAL_ERROR" | "DISCARD_VALUE", Some(_)) => Err(format!(
                "error_handler {handler} takes no error_handler_params"
            )),
            ("CUSTOM_VALUE" | "CUSTOM_ERROR", _) => Err(format!(
                "error_handler {handler} needs error_handler_params (the value or the message)"
            )),
            _ => Err(OnFail::unknown(handler, None)),
        }
    }

    /// Why `handler` is none of [`OnFail::NAMES`], with the one it is a typo of when the
    /// caller knows it (`nearest`).
    pub fn unknown(handler: &str, nearest: Option<&str>) -> String {
        let [names @ .., last] = OnFail::NAMES;
        format!(
            "unknown error_handler {handler:?}{}: {} or {last}",
            did_you_mean(nearest),
            names.join(", ")
        )
    }
}

/// An `IN_RANGE` step's inclusive bounds (`None`: open).
#[derive(Debug, Clone, PartialEq)]
pub struct Bounds {
    min: Option<f64>,
    max: Option<f64>,
}

impl Bounds {
    fn contains(&self, v: f64) -> bool {
        self.min.is_none_or(|m| v >= m) && self.max.is_none_or(|m| v <= m)
    }
}

impl fmt::Display for Bounds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let end = |b: Option<f64>| b.map_or(String::new(), |b| b.to_string());
        write!(f, "[{}, {}]", end(self.min), end(self.max))
    }
}

/// A compiled pattern; equal to another with the same source (items share a pipeline
/// when their steps are equal).
#[derive(Debug, Clone)]
pub struct Pattern(regex::Regex);

impl PartialEq for Pattern {
    fn eq(&self, other: &Pattern) -> bool {
        self.0.as_str() == other.0.as_str()
    }
}

impl Pattern {
    /// `p` as Rust's regex crate compiles it, or why it cannot (for step `kind`).
    fn new(kind: &str, p: &str) -> Result<Pattern, String> {
        if p.is_empty() {
            return Err(format!("{kind}: the pattern must not be empty"));
        }
        regex::Regex::new(p).map(Pattern).map_err(|e| {
            format!(
                "{kind}: {p:?} is not a pattern netpoller can run (Rust's regex syntax: Perl's without look-around and back-references): {e}"
            )
        })
    }

    fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

/// A `MATCHES_REGEX` / `NOT_MATCHES_REGEX` step.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    re: Pattern,
    /// `true`: the text must match; `false`: it must not.
    matches: bool,
}

/// A `REGEX` step: Zabbix's pattern and output template.
#[derive(Debug, Clone, PartialEq)]
pub struct Extract {
    re: Pattern,
    output: String,
}

impl Extract {
    /// The output template for the first match of the pattern in `text`: `\0` is the
    /// match, `\1`..`\9` its groups (empty when a group took no part, or does not
    /// exist), `\\` one backslash, everything else literal, as Zabbix fills it.
    /// `None`: no match.
    fn apply(&self, text: &str) -> Option<String> {
        let caps = self.re.0.captures(text)?;
        let out = self.output.as_bytes();
        let mut s = String::with_capacity(self.output.len());
        let (mut i, mut literal) = (0, 0);
        while i < out.len() {
            match (out[i], out.get(i + 1)) {
                (b'\\', Some(d @ b'0'..=b'9')) => {
                    s.push_str(&self.output[literal..i]);
                    s.push_str(caps.get(usize::from(d - b'0')).map_or("", |m| m.as_str()));
                    i += 2;
                    literal = i;
                }
                (b'\\', Some(b'\\')) => {
                    s.push_str(&self.output[literal..=i]);
                    i += 2;
                    literal = i;
                }
                _ => i += 1,
            }
        }
        s.push_str(&self.output[literal..]);
        Some(s)
    }
}

impl Step {
    fn is_change(&self) -> bool {
        matches!(self, Step::SimpleChange | Step::ChangePerSecond)
    }

    fn is_throttle(&self) -> bool {
        matches!(
            self,
            Step::DiscardUnchanged | Step::DiscardUnchangedHeartbeat(_)
        )
    }

    /// A throttling step's heartbeat in seconds (`None`: stores changes only).
    fn heartbeat(&self) -> Option<u32> {
        match self {
            Step::DiscardUnchangedHeartbeat(h) => Some(*h),
            _ => None,
        }
    }

    /// Parses Zabbix's export name (`CHANGE_PER_SECOND`, `SIMPLE_CHANGE`, `MULTIPLIER`,
    /// `IN_RANGE`, `REGEX`, `TRIM`, `LTRIM`, `RTRIM`, `MATCHES_REGEX`,
    /// `NOT_MATCHES_REGEX`, `STR_REPLACE`, `BOOL_TO_DECIMAL`, `OCTAL_TO_DECIMAL`,
    /// `HEX_TO_DECIMAL`, `CHECK_NOT_SUPPORTED`, `DISCARD_UNCHANGED`,
    /// `DISCARD_UNCHANGED_HEARTBEAT`, any case) and its parameters.
    pub fn parse(kind: &str, params: &[String]) -> Result<Step, String> {
        let trim = |ends| match params {
            [chars] if !chars.is_empty() => Ok(Step::Trim(ends, unescape(chars, false).into())),
            _ => Err(format!(
                "{kind} takes one parameter, the characters to strip (parameters = [\" \\t\"])"
            )),
        };
        // Zabbix 6.0 exports a step without parameters as `parameters: ['']`.
        let none = matches!(params, [] | [_]) && params.iter().all(|p| p.is_empty());
        let no_params = |s: Step| {
            if none {
                Ok(s)
            } else {
                Err(format!("{kind} takes no parameters"))
            }
        };
        match kind.to_ascii_uppercase().as_str() {
            "SIMPLE_CHANGE" => no_params(Step::SimpleChange),
            "CHANGE_PER_SECOND" => no_params(Step::ChangePerSecond),
            "MULTIPLIER" => match params {
                [f] => match text_to_float(f) {
                    Ok(x) => Ok(Step::Multiplier(x)),
                    Err(_) => Err(format!("MULTIPLIER: {f:?} is not a number")),
                },
                _ => Err("MULTIPLIER takes one parameter, the factor (parameters = [\"8\"])".into()),
            },
            "REGEX" => match params {
                [_, output] if output.is_empty() => {
                    Err("REGEX: the output must not be empty (as Zabbix requires)".into())
                }
                [p, output] => Ok(Step::Regex(Arc::new(Extract {
                    re: Pattern::new("REGEX", p)?,
                    output: output.clone(),
                }))),
                _ => Err(
                    "REGEX takes two parameters, the pattern and the output (parameters = [\"Version ([0-9.]+)\", \"\\\\1\"])"
                        .into(),
                ),
            },
            "TRIM" => trim(Ends::Both),
            "LTRIM" => trim(Ends::Left),
            "RTRIM" => trim(Ends::Right),
            "IN_RANGE" => {
                let bound = |b: &String| match (b.trim(), text_to_float(b).ok()) {
                    ("", _) => Ok(None),
                    (_, Some(x)) => Ok(Some(x)),
                    _ => Err(format!("IN_RANGE: {b:?} is not a number")),
                };
                match params {
                    [min, max] => {
                        let (min, max) = (bound(min)?, bound(max)?);
                        match (min, max) {
                            (None, None) => Err("IN_RANGE needs a minimum, a maximum or both".into()),
                            (Some(a), Some(b)) if a > b => {
                                Err(format!("IN_RANGE: the minimum {a} is above the maximum {b}"))
                            }
                            _ => Ok(Step::InRange(Arc::new(Bounds {
                                min,
                                max,
                            }))),
                        }
                    }
                    _ => Err("IN_RANGE takes two parameters, the minimum and the maximum (parameters = [\"0\", \"100\"]; \"\" leaves one open)".into()),
                }
            }
            "MATCHES_REGEX" | "NOT_MATCHES_REGEX" => match params {
                [p] => Ok(Step::Matches(Arc::new(Check {
                    re: Pattern::new(kind, p)?,
                    matches: !kind.to_ascii_uppercase().starts_with("NOT"),
                }))),
                _ => Err(format!("{kind} takes one parameter, the pattern")),
            },
            // Zabbix 7.0 exports `["-1"]` (any error), 6.0 `[""]`; `["0" | "1", pattern]`
            // compares the error's text with a pattern, and netpoller's texts are not
            // Zabbix's: they start with Zabbix's words for SNMP failures but go on with
            // more ("No Such Object available on this agent at this OID (noSuchObject)"),
            // and other failures are worded otherwise.
            "CHECK_NOT_SUPPORTED" => match params {
                [] => Ok(Step::CheckNotSupported),
                [p] if p.is_empty() || p.trim() == "-1" => Ok(Step::CheckNotSupported),
                _ => Err("CHECK_NOT_SUPPORTED: netpoller checks for any error only (parameters = [\"-1\"], or none): its error texts are not Zabbix's, so a pattern on them would not match as in Zabbix".into()),
            },
            "STR_REPLACE" => match params {
                [search, _] if search.is_empty() => {
                    Err("STR_REPLACE: the text to replace must not be empty".into())
                }
                [search, with] => Ok(Step::Replace(Arc::new(Replace {
                    search: unescape(search, true),
                    with: unescape(with, true),
                }))),
                _ => Err("STR_REPLACE takes two parameters, the text to replace and its replacement (parameters = [\"\\\\s\", \"\"])".into()),
            },
            "BOOL_TO_DECIMAL" => no_params(Step::ToDecimal(Radix::Bool)),
            "OCTAL_TO_DECIMAL" => no_params(Step::ToDecimal(Radix::Octal)),
            "HEX_TO_DECIMAL" => no_params(Step::ToDecimal(Radix::Hex)),
            "DISCARD_UNCHANGED" => no_params(Step::DiscardUnchanged),
            "DISCARD_UNCHANGED_HEARTBEAT" => match params {
                [p] => match seconds(p) {
                    Some(s @ 1..=MAX_HEARTBEAT) => Ok(Step::DiscardUnchangedHeartbeat(s as u32)),
                    _ => Err(format!(
                        "DISCARD_UNCHANGED_HEARTBEAT: {p:?} is not a heartbeat between 1s and 25 years (\"3600\", \"1h\", \"1d\")"
                    )),
                },
                _ => Err("DISCARD_UNCHANGED_HEARTBEAT takes one parameter, the heartbeat (parameters = [\"1h\"])".into()),
            },
            _ => Err(unknown_step(kind, None)),
        }
    }
}

/// The step types [`Step::parse`] takes, as Zabbix exports them.
pub const STEP_TYPES: [&str; 17] = [
    "SIMPLE_CHANGE",
    "CHANGE_PER_SECOND",
    "MULTIPLIER",
    "IN_RANGE",
    "REGEX",
    "TRIM",
    "LTRIM",
    "RTRIM",
    "MATCHES_REGEX",
    "NOT_MATCHES_REGEX",
    "STR_REPLACE",
    "BOOL_TO_DECIMAL",
    "OCTAL_TO_DECIMAL",
    "HEX_TO_DECIMAL",
    "CHECK_NOT_SUPPORTED",
    "DISCARD_UNCHANGED",
    "DISCARD_UNCHANGED_HEARTBEAT",
];

/// [`Step::parse`]'s refusal of a type it does not run: the types it runs, and the one
/// `kind` is a typo of when the caller found one (`MULTIPLER`: `MULTIPLIER`).
pub fn unknown_step(kind: &str, nearest: Option<&str>) -> String {
    let [rest @ .., last] = STEP_TYPES;
    format!(
        "unknown preprocessing type {kind:?}{}: netpoller runs {} and {last}",
        did_you_mean(nearest),
        rest.join(", ")
    )
}

/// The hint of an unknown name that is a typo of `nearest`, quoted as the config's
/// other hints of a value quote it (` (did you mean "MULTIPLIER"?)`); none without one.
fn did_you_mean(nearest: Option<&str>) -> String {
    nearest
        .map(|n| format!(" (did you mean {n:?}?)"))
        .unwrap_or_default()
}

/// A step and its "Custom on fail" handler, as Zabbix keeps them.
#[derive(Debug, Clone, PartialEq)]
pub struct Op {
    pub step: Step,
    /// What the step's failure does: a text a numeric step cannot read as a number, a
    /// `REGEX` without a match, a value a validation refuses; `CHECK_NOT_SUPPORTED`'s
    /// action. The trims and the throttling steps cannot fail: theirs never runs.
    pub on_fail: OnFail,
}

impl From<Step> for Op {
    /// The step with the default handler: a failure makes the item unsupported.
    fn from(step: Step) -> Op {
        Op {
            step,
            on_fail: OnFail::Error,
        }
    }
}

impl PartialEq<Step> for Op {
    fn eq(&self, other: &Step) -> bool {
        self.on_fail == OnFail::Error && self.step == *other
    }
}

impl Step {
    /// This step with Zabbix's "Custom on fail". A step that cannot fail (a trim, a
    /// throttling step) keeps the default, which never runs: a template exported from
    /// Zabbix with a handler there loads, and equal pipelines stay equal (shared).
    pub fn on_fail(self, on_fail: OnFail) -> Op {
        let can_fail = !matches!(
            self,
            Step::Trim(..)
                | Step::Replace(_)
                | Step::DiscardUnchanged
                | Step::DiscardUnchangedHeartbeat(_)
        );
        Op {
            on_fail: if can_fail { on_fail } else { OnFail::Error },
            step: self,
        }
    }
}

/// Checks at load the custom value that would be stored as it is, the last computing
/// step's, against the item's type (an earlier one may be made to fit by the steps
/// after it: "down", then `BOOL_TO_DECIMAL`). `Err`: that step's index and why.
pub fn check_custom_value(ops: &[Op], vt: ValueType) -> Result<(), (usize, String)> {
    match ops.iter().rposition(|o| !o.step.is_throttle()) {
        Some(i) => ops[i].check_type(vt).map_err(|m| (i, m)),
        None => Ok(()),
    }
}

impl Op {
    /// Checks the step against its item's type: a custom value must be one of it (a
    /// `CHECK_NOT_SUPPORTED` value on a `uint` item a whole number, ...).
    fn check_type(&self, vt: ValueType) -> Result<(), String> {
        let OnFail::Value(v) = &self.on_fail else {
            return Ok(());
        };
        match custom(v).into_type(vt) {
            Ok(_) => Ok(()),
            Err(_) => Err(format!("the custom value {v:?} is not a {vt} value")),
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.on_fail {
            OnFail::Error => write!(f, "{}", self.step),
            ref on_fail => write!(f, "{} ({on_fail})", self.step),
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::SimpleChange => f.write_str("SIMPLE_CHANGE"),
            Step::ChangePerSecond => f.write_str("CHANGE_PER_SECOND"),
            Step::Multiplier(x) => write!(f, "MULTIPLIER({x})"),
            Step::Regex(x) => write!(f, "REGEX({:?} → {:?})", x.re.as_str(), x.output),
            Step::CheckNotSupported => f.write_str("CHECK_NOT_SUPPORTED"),
            Step::InRange(b) => write!(f, "IN_RANGE({b})"),
            Step::Matches(c) => {
                let name = if c.matches {
                    "MATCHES_REGEX"
                } else {
                    "NOT_MATCHES_REGEX"
                };
                write!(f, "{name}({:?})", c.re.as_str())
            }
            Step::Trim(ends, chars) => {
                let name = match ends {
                    Ends::Both => "TRIM",
                    Ends::Left => "LTRIM",
                    Ends::Right => "RTRIM",
                };
                write!(f, "{name}({chars:?})")
            }
            Step::Replace(r) => write!(f, "STR_REPLACE({:?} → {:?})", r.search, r.with),
            Step::ToDecimal(Radix::Bool) => f.write_str("BOOL_TO_DECIMAL"),
            Step::ToDecimal(Radix::Octal) => f.write_str("OCTAL_TO_DECIMAL"),
            Step::ToDecimal(Radix::Hex) => f.write_str("HEX_TO_DECIMAL"),
            Step::DiscardUnchanged => f.write_str("DISCARD_UNCHANGED"),
            Step::DiscardUnchangedHeartbeat(s) => write!(f, "DISCARD_UNCHANGED_HEARTBEAT({s}s)"),
        }
    }
}

/// An item's steps, shared by every item with the same ones.
#[derive(Debug, Clone, PartialEq)]
pub struct Steps(Box<[Op]>);

impl Steps {
    /// Checks Zabbix's rules: at most one change step, at most one throttling step (and
    /// at least one step); netpoller's own: the throttling step last (where Zabbix's
    /// templates put it: it decides what is stored).
    pub fn new<S: Into<Op>>(steps: Vec<S>) -> Result<Steps, String> {
        let steps: Vec<Op> = steps.into_iter().map(Into::into).collect();
        if steps.is_empty() {
            return Err("no steps".into());
        }
        if steps.iter().filter(|s| s.step.is_change()).count() > 1 {
            return Err("at most one of SIMPLE_CHANGE and CHANGE_PER_SECOND per item".into());
        }
        let throttles = steps.iter().filter(|s| s.step.is_throttle()).count();
        if throttles > 1 {
            return Err(
                "at most one of DISCARD_UNCHANGED and DISCARD_UNCHANGED_HEARTBEAT per item".into(),
            );
        }
        if throttles == 1 && !steps[steps.len() - 1].step.is_throttle() {
            return Err("DISCARD_UNCHANGED(_HEARTBEAT) must be the last step".into());
        }
        let checks = |s: &Op| s.step == Step::CheckNotSupported;
        if steps.iter().skip(1).any(checks) {
            return Err("CHECK_NOT_SUPPORTED must be the first step (at most one)".into());
        }
        Ok(Steps(steps.into_boxed_slice()))
    }

    pub fn as_slice(&self) -> &[Op] {
        &self.0
    }

    fn has_change(&self) -> bool {
        self.0.iter().any(|s| s.step.is_change())
    }

    /// The throttling step, if any (always the last).
    fn throttle(&self) -> Option<&Step> {
        self.0.last().map(|s| &s.step).filter(|s| s.is_throttle())
    }

    /// The handler of a leading `CHECK_NOT_SUPPORTED`, if any.
    fn check(&self) -> Option<&OnFail> {
        self.0
            .first()
            .filter(|s| s.step == Step::CheckNotSupported)
            .map(|s| &s.on_fail)
    }

    /// The steps that compute the value (all but the check and the throttling step).
    fn body(&self) -> &[Op] {
        let first = usize::from(self.check().is_some());
        let n = self.0.len() - usize::from(self.throttle().is_some());
        &self.0[first.min(n)..n]
    }
}

/// Whether state kept under `a` is comparable with a value that went through `b` (a
/// reload may have changed an item's steps).
fn same(a: &Arc<Steps>, b: &Arc<Steps>) -> bool {
    Arc::ptr_eq(a, b) || **a == **b
}

/// A number between steps: integers stay exact (Counter64 deltas) until a step makes
/// them fractional.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Num {
    U(u64),
    F(f64),
}

impl Num {
    /// A numeric value as a number between steps; `None` for text.
    fn of(v: &Value) -> Option<Num> {
        match *v {
            Value::Uint(u) => Some(Num::U(u)),
            Value::Float(f) => Some(Num::F(f)),
            Value::Str(_) => None,
        }
    }

    fn f(self) -> f64 {
        match self {
            Num::U(u) => u as f64,
            Num::F(f) => f,
        }
    }

    fn value(self) -> Value {
        match self {
            Num::U(u) => Value::Uint(u),
            Num::F(f) => Value::Float(f),
        }
    }
}

/// What a change step saw last, and under which steps.
#[derive(Debug, Clone)]
struct Previous {
    value: Num,
    /// Nanoseconds since the epoch.
    at: u128,
    /// A value that went through other steps (a reload changed them) is not comparable.
    steps: Arc<Steps>,
}

/// The last value a throttling step let through, and when it was obtained.
#[derive(Debug, Clone)]
struct Stored {
    value: Value,
    /// Unix seconds.
    clock: u32,
    steps: Arc<Steps>,
}

/// What [`Preprocessor::apply`] did.
#[derive(Debug)]
pub enum Outcome {
    /// The sample as it is to be stored (a value, or the error that replaced it).
    Keep(Sample),
    /// No value this time, and why; the sample as it was, for the item's state: the
    /// item answered, or its failure is handled.
    Discarded(Sample, Why),
}

/// Why a value was not stored ([`Outcome::Discarded`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// A change step had nothing to compare with: the item's first value, or the first
    /// after a counter went back or a gap.
    NoPrevious,
    /// A step's error handler discards its failures (`DISCARD_VALUE`).
    HandlerDiscards,
    /// "Discard unchanged": the same value as the one stored last.
    Unchanged,
}

/// The previous values of the change steps and the stored values of the throttling
/// steps (see the module docs).
#[derive(Debug, Default)]
pub struct Preprocessor {
    previous: HashMap<u64, Previous>,
    stored: HashMap<u64, Stored>,
}

/// What the steps left.
enum Flow {
    /// A value (in whatever type the last step left it).
    Go,
    /// No value this time.
    Discard(Why),
    /// The item's error this time.
    Fail(ItemError),
}

/// Zabbix's `ZBX_DOUBLE_EPSILON` (Zabbix 6.0+ with a current database): floats this
/// close compare equal.
const DOUBLE_EPSILON: f64 = 2.22e-16;

/// Whether a throttling step sees `value` as the `last` one stored, as Zabbix compares
/// them (`zbx_variant_compare`): integers exactly, floats within [`DOUBLE_EPSILON`],
/// two texts that are both plain decimal numbers as numbers (`"1.0"` is `"1"`, `"1e3"`
/// is `"1000"`: a device that reformats a reading does not change it), other texts
/// byte for byte. Both values have the item's type (the throttling step runs last).
fn unchanged(last: &Value, value: &Value) -> bool {
    // Zabbix's `zbx_is_double`: the number and nothing else, no white space or quotes.
    let number = |t: &str| plain_float(t).ok();
    let close = |x: f64, y: f64| (x - y).abs() <= DOUBLE_EPSILON;
    // Equal values first: the usual case of a throttled item, with no text parsed,
    // and an infinity equal to itself (as Zabbix forces it), which `close` is not.
    last == value
        || match (last, value) {
            (Value::Float(a), Value::Float(b)) => close(*a, *b),
            (Value::Str(a), Value::Str(b)) => match (number(a), number(b)) {
                (Some(x), Some(y)) => close(x, y),
                _ => false,
            },
            _ => false,
        }
}

/// The value as text, for a text step: a number becomes its decimal text (in place).
fn as_text(v: &mut Value) -> &mut String {
    if !matches!(v, Value::Str(_)) {
        *v = Value::Str(v.to_string());
    }
    match v {
        Value::Str(t) => t,
        _ => unreachable!("made text above"),
    }
}

/// A number in text as Zabbix's numeric steps read one (`zbx_variant_set_numeric`):
/// trimmed as a `uint` item's text ([`crate::value::trim_integer`]: line ends at the
/// end, spaces, one pair of quotes, one `+`), `"5.0"` the whole number 5; an unsigned
/// integer exact, anything else by [`crate::value::plain_float`] (a second `+` is no
/// number, as in Zabbix).
fn read_number(t: &str) -> Result<Num, &'static str> {
    let t = crate::value::trim_integer(t);
    if t.starts_with('+') {
        return Err("is not a number");
    }
    let whole = crate::value::del_zeros(t);
    match whole.parse::<u64>() {
        Ok(u) if whole.bytes().all(|b| b.is_ascii_digit()) => Ok(Num::U(u)),
        _ => crate::value::plain_float(whole).map(Num::F),
    }
}

/// The value as a number for a numeric step, in the kind the item's type asks for
/// (Zabbix's type hint: a `float` item computes in floating point, a `uint` item in
/// whole numbers, a fraction cut; a text item as the value reads).
/// `Err`: the value, shortened, and why it cannot be one, for the step's error.
fn as_number(v: &Value, vt: ValueType) -> Result<Num, (String, &'static str)> {
    let n = match v {
        Value::Str(t) => read_number(t).map_err(|why| (shown(v), why))?,
        v => Num::of(v).expect("numbers are numbers"),
    };
    match (vt, n) {
        (ValueType::Float, n) => Ok(Num::F(n.f())),
        (ValueType::Uint, Num::F(f)) => float_to_uint(f)
            .map(Num::U)
            .map_err(|_| (shown(v), "does not fit an unsigned item")),
        (_, n) => Ok(n),
    }
}

/// A value in an error text: at most 64 characters of it.
fn shown(v: &Value) -> String {
    v.to_string().chars().take(64).collect()
}

/// A custom value: text, which the next steps take as they take an answer, converted
/// to the item's type after them (a value that cannot be is refused at load:
/// [`check_custom_value`]).
fn custom(v: &str) -> Value {
    Value::Str(v.to_owned())
}

fn unsupported(text: String) -> ItemError {
    ItemError::new(ErrorReason::Unsupported, format!("preprocessing: {text}"))
}

impl Preprocessor {
    /// (Tests) Items whose change step holds a previous value.
    #[cfg(test)]
    fn remembered(&self) -> usize {
        self.previous.len()
    }

    /// Runs `sample`'s steps (none: unchanged) and converts the result to the item's
    /// type. An error sample passes unchanged (but for `CHECK_NOT_SUPPORTED`). The
    /// sample comes back without its steps: they have run.
    pub fn apply(&mut self, mut sample: Sample) -> Outcome {
        // Taken, not cloned: the stored sample needs its steps no more.
        let Some(steps) = sample.pre.take() else {
            return Outcome::Keep(sample);
        };
        if let (Some(on_fail), Err(e)) = (steps.check(), &sample.result) {
            // ORIGINAL_ERROR: the error stands as it is.
            if e.reason == ErrorReason::Unsupported && *on_fail != OnFail::Error {
                match on_fail.handle(String::new) {
                    Handled::Discard => {
                        // As Zabbix: the steps' memory starts over after the gap.
                        self.previous.remove(&sample.itemid);
                        self.stored.remove(&sample.itemid);
                        return Outcome::Discarded(sample, Why::HandlerDiscards);
                    }
                    Handled::Error(e) => sample.result = Err(e),
                    Handled::Value(v) => sample.result = Ok(custom(v)),
                }
            }
        }
        if let Ok(v) = &mut sample.result {
            let at = u128::from(sample.clock) * 1_000_000_000 + u128::from(sample.ns);
            match self.run(v, sample.value_type, sample.itemid, at, &steps) {
                Flow::Go => {}
                Flow::Discard(why) => return Outcome::Discarded(sample, why),
                Flow::Fail(e) => sample.result = Err(e),
            }
        }
        // As Zabbix: an item that is not supported this time (the device's answer or a
        // step) starts its change step over: no rate across the gap. A timeout is no
        // answer at all and keeps it, as Zabbix's unreachable poller does.
        if let Err(e) = &sample.result {
            if e.reason == ErrorReason::Unsupported {
                self.previous.remove(&sample.itemid);
            }
        }
        // Zabbix's order: the steps on the answer, then the item's type.
        let vt = sample.value_type;
        if let Some(v) = sample.result.as_ref().ok().filter(|v| v.value_type() != vt) {
            sample.result = v.clone().into_type(vt).map_err(|why| {
                unsupported(format!(
                    "the result {:?} {why} for value type {vt}",
                    shown(v)
                ))
            });
        }
        // A step's float beyond what Zabbix stores (a multiplier's overflow).
        if let Ok(Value::Float(f)) = sample.result {
            if let Err(why) = storable_float(f) {
                let v = Value::Float(f);
                sample.result = Err(unsupported(format!("the result {v} {why}")));
            }
        }
        match steps.throttle().map(Step::heartbeat) {
            Some(heartbeat) => self.throttle(sample, heartbeat, steps),
            None => Outcome::Keep(sample),
        }
    }

    /// The computing steps of `steps` on `v` (each converts the value to the text or
    /// the number it needs), which becomes their result.
    fn run(
        &mut self,
        v: &mut Value,
        vt: ValueType,
        itemid: u64,
        at: u128,
        steps: &Arc<Steps>,
    ) -> Flow {
        for Op { step, on_fail } in steps.body() {
            // A numeric step's number, or its failure's text.
            let number = |v: &Value| {
                as_number(v, vt).map_err(|(text, why)| format!("{step}: the value {text:?} {why}"))
            };
            let failed = match step {
                Step::Regex(x) => {
                    let t = as_text(v);
                    match x.apply(t) {
                        Some(out) => {
                            *t = out;
                            continue;
                        }
                        None => format!("REGEX: pattern {:?} does not match", x.re.as_str()),
                    }
                }
                Step::Matches(c) => {
                    if c.re.0.is_match(as_text(v)) == c.matches {
                        continue;
                    }
                    let does = if c.matches {
                        "does not match"
                    } else {
                        "matches"
                    };
                    format!("the value {does} the pattern {:?}", c.re.as_str())
                }
                Step::Trim(ends, chars) => {
                    // In place: no new string per value.
                    let t = as_text(v);
                    let strip = |c: char| chars.contains(c);
                    if *ends != Ends::Left {
                        t.truncate(t.trim_end_matches(strip).len());
                    }
                    if *ends != Ends::Right {
                        t.drain(..t.len() - t.trim_start_matches(strip).len());
                    }
                    continue;
                }
                Step::Replace(r) => {
                    let t = as_text(v);
                    if t.contains(&r.search) {
                        *t = t.replace(&r.search, &r.with);
                    }
                    continue;
                }
                Step::ToDecimal(radix) => {
                    let t = as_text(v);
                    match radix.read(t) {
                        Ok(u) => {
                            *v = Value::Uint(u);
                            continue;
                        }
                        Err(why) => format!("{step}: the value {:?} {why}", shown(v)),
                    }
                }
                // A validation leaves the value as it is (text stays text: " 42 ").
                Step::InRange(b) => match number(v) {
                    Ok(n) if b.contains(n.f()) => continue,
                    Ok(n) => format!("IN_RANGE: {} is not within {b}", n.f()),
                    Err(why) => why,
                },
                Step::Multiplier(x) => match number(v) {
                    Ok(n) => {
                        *v = match n {
                            Num::U(u) => {
                                match float_to_uint(*x).ok().filter(|_| x.fract() == 0.0) {
                                    // A whole factor: exact (a product past 64 bits is a
                                    // float, never wrapped).
                                    Some(m) => {
                                        u.checked_mul(m).map_or(Num::F(u as f64 * x), Num::U)
                                    }
                                    // Zabbix keeps a whole number whole: the product's
                                    // fraction is cut at this step (bits × 0.001).
                                    None => {
                                        let p = u as f64 * x;
                                        float_to_uint(p).map_or(Num::F(p), Num::U)
                                    }
                                }
                            }
                            Num::F(f) => Num::F(f * x),
                        }
                        .value();
                        continue;
                    }
                    Err(why) => why,
                },
                Step::SimpleChange | Step::ChangePerSecond => match number(v) {
                    Ok(n) => {
                        let per_second = *step == Step::ChangePerSecond;
                        match self.change(n, itemid, at, per_second, steps) {
                            Some(d) => {
                                *v = d.value();
                                continue;
                            }
                            None => return Flow::Discard(Why::NoPrevious),
                        }
                    }
                    Err(why) => why,
                },
                // The first and the last step, which `body` leaves out.
                Step::CheckNotSupported
                | Step::DiscardUnchanged
                | Step::DiscardUnchangedHeartbeat(_) => continue,
            };
            match on_fail.handle(|| failed) {
                Handled::Value(c) => *v = custom(c),
                Handled::Discard => return Flow::Discard(Why::HandlerDiscards),
                Handled::Error(e) => return Flow::Fail(e),
            }
        }
        Flow::Go
    }

    /// A change step on `n`, obtained at `at` (ns): the difference from the previous
    /// value (per second: divided by the seconds between them), or `None`: no value
    /// this time (the first, a reset counter, a reload that changed the steps, two
    /// values with one timestamp). `n` becomes the previous value.
    fn change(
        &mut self,
        n: Num,
        itemid: u64,
        at: u128,
        per_second: bool,
        steps: &Arc<Steps>,
    ) -> Option<Num> {
        let now = Previous {
            value: n,
            at,
            steps: steps.clone(),
        };
        let prev = self.previous.insert(itemid, now)?;
        if !same(&prev.steps, steps) {
            return None;
        }
        let delta = match (n, prev.value) {
            (Num::U(a), Num::U(b)) => Num::U(a.checked_sub(b)?),
            (a, b) if a.f() >= b.f() => Num::F(a.f() - b.f()),
            _ => return None,
        };
        if !per_second {
            return Some(delta);
        }
        let secs = at.saturating_sub(prev.at) as f64 / 1e9;
        if secs <= 0.0 {
            // Two values with one timestamp: no rate to compute.
            return None;
        }
        Some(match delta {
            // Zabbix keeps an integer rate of integer values (its uint64 delta), so a
            // MULTIPLIER after it scales the truncated rate: trunc(rate) × 8 for
            // interface bits.
            Num::U(d) => Num::U((d as f64 / secs) as u64),
            Num::F(d) => Num::F(d / secs),
        })
    }

    /// The throttling step (with `heartbeat` seconds, if it has one) on the value to
    /// be stored.
    fn throttle(&mut self, sample: Sample, heartbeat: Option<u32>, steps: Arc<Steps>) -> Outcome {
        let Ok(value) = &sample.result else {
            // The next value after the item was not supported is stored, even if
            // unchanged. A timeout is no answer: Zabbix's poller hands it no value to
            // preprocess, so what was stored before still counts.
            if sample
                .result
                .as_ref()
                .is_err_and(|e| e.reason == ErrorReason::Unsupported)
            {
                self.stored.remove(&sample.itemid);
            }
            return Outcome::Keep(sample);
        };
        let fresh =
            |last: &Stored| heartbeat.is_some_and(|h| sample.clock.saturating_sub(last.clock) >= h);
        match self.stored.get_mut(&sample.itemid) {
            Some(last)
                if same(&last.steps, &steps) && unchanged(&last.value, value) && !fresh(last) =>
            {
                return Outcome::Discarded(sample, Why::Unchanged);
            }
            Some(last) if same(&last.steps, &steps) => {
                last.value = value.clone();
                last.clock = sample.clock;
            }
            _ => {
                let stored = Stored {
                    value: value.clone(),
                    clock: sample.clock,
                    steps,
                };
                self.stored.insert(sample.itemid, stored);
            }
        }
        Outcome::Keep(sample)
    }

    /// Forgets items that are not in `current` or whose steps no longer include a
    /// change or a throttling step (a reload): Zabbix, too, restarts the steps of an
    /// item that changed.
    pub fn retain<'a>(
        &mut self,
        current: impl IntoIterator<Item = (u64, Option<&'a Arc<Steps>>)> + Clone,
    ) {
        let with = |keep: fn(&Steps) -> bool| {
            current
                .clone()
                .into_iter()
                .filter(move |(_, s)| s.is_some_and(|s| keep(s)))
                .map(|(id, _)| id)
        };
        crate::states::retain_ids(&mut self.previous, with(Steps::has_change), |_| {});
        let throttled = with(|s| s.throttle().is_some());
        crate::states::retain_ids(&mut self.stored, throttled, |_| {});
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample<S: Clone + Into<Op>>(
        itemid: u64,
        vt: ValueType,
        clock: u32,
        v: Value,
        steps: &[S],
    ) -> Sample {
        Sample {
            itemid,
            item: 0,
            host: "h".into(),
            ip: "127.0.0.1".parse().unwrap(),
            key: "k".into(),
            value_type: vt,
            clock,
            ns: 0,
            result: Ok(v),
            pre: Some(Arc::new(Steps::new(steps.to_vec()).unwrap())),
        }
    }

    fn value(o: Outcome) -> Option<Result<Value, ItemError>> {
        match o {
            Outcome::Keep(s) => Some(s.result),
            Outcome::Discarded(..) => None,
        }
    }

    #[test]
    fn interface_counter_to_bits_per_second_as_zabbix_templates_do() {
        // ifHCInOctets, uint, CHANGE_PER_SECOND then MULTIPLIER 8: 1,000 octets in 10 s
        // are 800 bps; the first poll yields nothing; a wrap yields nothing and restarts.
        // As Zabbix's uint64 delta, the rate is an integer before the multiplier: 1,009
        // octets in 10 s are trunc(100.9) × 8 = 800, not trunc(807.2).
        let steps = [Step::ChangePerSecond, Step::Multiplier(8.0)];
        let mut p = Preprocessor::default();
        let mut at =
            |clock, v| value(p.apply(sample(1, ValueType::Uint, clock, Value::Uint(v), &steps)));
        assert_eq!(at(100, 5_000), None);
        assert_eq!(at(110, 6_000), Some(Ok(Value::Uint(800))));
        assert_eq!(at(120, 7_009), Some(Ok(Value::Uint(800))));
        assert_eq!(at(130, 10), None, "counter reset");
        assert_eq!(at(140, 1_010), Some(Ok(Value::Uint(800))));
        // A float result beyond Zabbix's range: not supported, as in Zabbix; in a text
        // item, the text %G makes of it (its rendering panicked).
        let huge = [Step::Multiplier(1e10)];
        let got = value(p.apply(sample(5, ValueType::Float, 0, Value::Float(1e300), &huge)));
        let Some(Err(e)) = got else { panic!("{got:?}") };
        assert_eq!(e.reason, ErrorReason::Unsupported);
        assert_eq!(e.text, "preprocessing: the result INF is not finite");
        let got = value(p.apply(sample(6, ValueType::Str, 0, Value::Float(1e300), &huge)));
        assert_eq!(got, Some(Ok(Value::Str("INF".into()))));
        // A multiplier alone keeps fractions until the item's type trims them.
        let half = [Step::Multiplier(0.5)];
        let one = p.apply(sample(9, ValueType::Uint, 0, Value::Uint(7), &half));
        assert_eq!(value(one), Some(Ok(Value::Uint(3))));
    }

    /// A numeric step reads text as Zabbix's `zbx_variant_set_numeric` does: line ends
    /// at the end, spaces, one pair of quotes and one `+` ignored, nothing else (a tab
    /// around the number, or a second `+`, was ignored: "\t5" and "++5" were 5).
    #[test]
    fn a_numeric_step_reads_text_as_zabbix_does() {
        let doubled = |text: &str| {
            let v = Value::Str(text.into());
            let steps = [Step::Multiplier(2.0)];
            value(Preprocessor::default().apply(sample(1, ValueType::Float, 0, v, &steps))).unwrap()
        };
        for (text, want) in [(" \"+5\" \r\n", 10.0), ("5.50", 11.0), ("-2", -4.0)] {
            assert_eq!(doubled(text), Ok(Value::Float(want)), "{text:?}");
        }
        for text in ["\t5", "5\t", "\n5", "++5", "\" 5\""] {
            let e = doubled(text).unwrap_err();
            assert_eq!(e.reason, ErrorReason::Unsupported, "{text:?}");
        }
    }

    #[test]
    fn steps_run_on_the_answer_and_their_result_takes_the_items_type() {
        // Zabbix's order: a device that reports a temperature as text ("23.5 C"), a
        // float item, REGEX takes the number out and MULTIPLIER scales it.
        let through = |vt, v: Value, steps: &[Op]| {
            value(Preprocessor::default().apply(sample(1, vt, 0, v, steps)))
        };
        let temp = || Value::Str("Temp: 23.5 C".into());
        let scaled: [Op; 2] = [
            regex("([0-9.]+) C", "\\1").into(),
            Step::Multiplier(2.0).into(),
        ];
        assert_eq!(
            through(ValueType::Float, temp(), &scaled),
            Some(Ok(Value::Float(47.0)))
        );
        assert_eq!(
            through(ValueType::Float, temp(), &scaled[..1]),
            Some(Ok(Value::Float(23.5)))
        );
        // The result as a uint item takes it (Zabbix 7): a decimal's fraction cut, a
        // text without a number refused.
        assert_eq!(
            through(ValueType::Uint, temp(), &scaled[..1]),
            Some(Ok(Value::Uint(23)))
        );
        let e = through(
            ValueType::Uint,
            Value::Str("n/a C".into()),
            &[Step::Trim(Ends::Right, " C".into()).into()],
        );
        let e = e.unwrap().unwrap_err();
        assert_eq!(e.reason, ErrorReason::Unsupported);
        assert_eq!(
            e.text,
            "preprocessing: the result \"n/a\" is not an unsigned integer for value type uint"
        );
        // Zabbix's type hint: a uint item computes in whole numbers (23.5 → 23, × 2),
        // a float item in floating point (above: 47).
        assert_eq!(
            through(ValueType::Uint, temp(), &scaled),
            Some(Ok(Value::Uint(46)))
        );
        let e = through(
            ValueType::Uint,
            Value::Float(-3.0),
            &[Step::Multiplier(2.0).into()],
        );
        let e = e.unwrap().unwrap_err().text;
        assert!(e.contains("\"-3\" does not fit an unsigned item"), "{e}");
        // A number through a text step is its decimal text; numeric steps on a text
        // item leave their number's text (a whole number stays whole, as Zabbix's).
        let first = [regex("^([0-9]{2})", "\\1").into()];
        assert_eq!(
            through(ValueType::Uint, Value::Uint(12_345), &first),
            Some(Ok(Value::Uint(12)))
        );
        assert_eq!(
            through(
                ValueType::Str,
                Value::Uint(5),
                &[Step::Multiplier(0.5).into()]
            ),
            Some(Ok(Value::Str("2".into())))
        );
        assert_eq!(
            through(
                ValueType::Str,
                Value::Float(5.0),
                &[Step::Multiplier(0.5).into()]
            ),
            Some(Ok(Value::Str("2.5".into())))
        );
        // A validation reads the number and leaves the text as it is.
        let range = Step::parse("IN_RANGE", &["0".into(), "100".into()]).unwrap();
        assert_eq!(
            through(ValueType::Str, Value::Str("42.50".into()), &[range.into()]),
            Some(Ok(Value::Str("42.50".into())))
        );
        // A text a numeric step cannot read makes the item unsupported, saying why.
        let e = through(ValueType::Float, Value::Str("n/a".into()), &scaled[1..]);
        assert_eq!(
            e.unwrap().unwrap_err().text,
            "preprocessing: MULTIPLIER(2): the value \"n/a\" is not a number"
        );
        // A custom value is text the next steps take: REGEX without a match gives "5",
        // MULTIPLIER doubles it.
        let none = regex("([0-9.]+) C", "\\1").on_fail(OnFail::Value("5".into()));
        assert_eq!(
            through(
                ValueType::Uint,
                Value::Str("off".into()),
                &[none, Step::Multiplier(2.0).into()]
            ),
            Some(Ok(Value::Uint(10)))
        );
        // A counter reported as text: the change steps keep its integer exact.
        let mut p = Preprocessor::default();
        let mut big = |clock, v: u64| {
            let s = sample(
                2,
                ValueType::Uint,
                clock,
                Value::Str(format!(" {v}\n")),
                &[Step::SimpleChange],
            );
            value(p.apply(s))
        };
        assert_eq!(big(0, u64::MAX - 5), None);
        assert_eq!(big(10, u64::MAX), Some(Ok(Value::Uint(5))));
    }

    #[test]
    fn numeric_steps_hand_a_text_they_cannot_read_to_their_handler() {
        // An agent that answers "n/a" while a sensor is absent: MULTIPLIER's "Custom on
        // fail" decides, as in Zabbix.
        let na = || Value::Str("n/a".into());
        let scale = |f: OnFail| [Step::Multiplier(0.1).on_fail(f)];
        let mut p = Preprocessor::default();
        let mut through =
            |v, steps: &[Op]| value(p.apply(sample(1, ValueType::Float, 0, v, steps)));
        assert_eq!(through(na(), &scale(OnFail::Discard)), None);
        assert_eq!(
            through(na(), &scale(OnFail::Value("-1".into()))),
            Some(Ok(Value::Float(-1.0)))
        );
        let e = through(na(), &scale(OnFail::Message("sensor absent".into())));
        assert_eq!(e.unwrap().unwrap_err().text, "sensor absent");
        assert_eq!(
            through(Value::Str("215".into()), &scale(OnFail::Discard)),
            Some(Ok(Value::Float(21.5)))
        );
        // A change step's failure leaves its previous value as it was: the rate after
        // the gap spans it.
        let rate = [Step::ChangePerSecond.on_fail(OnFail::Discard)];
        let mut at = |clock, v: &str| {
            let s = sample(2, ValueType::Uint, clock, Value::Str(v.into()), &rate);
            value(p.apply(s))
        };
        assert_eq!(at(0, "100"), None);
        assert_eq!(at(10, "n/a"), None);
        assert_eq!(at(20, "300"), Some(Ok(Value::Uint(10))));
        let strict = [Step::SimpleChange];
        let e = value(p.apply(sample(3, ValueType::Uint, 0, na(), &strict)));
        assert_eq!(
            e.unwrap().unwrap_err().text,
            "preprocessing: SIMPLE_CHANGE: the value \"n/a\" is not a number"
        );
    }

    #[test]
    fn replace_and_the_decimal_conversions_read_what_zabbix_reads() {
        let p = |k: &str, ps: &[&str]| {
            Step::parse(k, &ps.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        };
        let through = |vt, v: &str, steps: &[Op]| {
            value(Preprocessor::default().apply(sample(1, vt, 0, Value::Str(v.into()), steps)))
        };
        let ok = |vt, v: &str, step: Step| match through(vt, v, &[step.into()]) {
            Some(Ok(v)) => v,
            other => panic!("{v:?}: {other:?}"),
        };
        let uint = |v: &str, step: Step| ok(ValueType::Uint, v, step);
        // STR_REPLACE: every occurrence; Zabbix's escapes, `\\` one backslash.
        let spaces = p("STR_REPLACE", &[r"\s", "_"]).unwrap();
        assert_eq!(
            ok(ValueType::Str, "Gi 0/1 uplink", spaces),
            Value::Str("Gi_0/1_uplink".into())
        );
        let slash = p("STR_REPLACE", &[r"\\", "/"]).unwrap();
        assert_eq!(
            ok(ValueType::Str, r"C:\temp\x", slash),
            Value::Str("C:/temp/x".into())
        );
        let drop_unit = p("STR_REPLACE", &[" rpm", ""]).unwrap();
        assert_eq!(
            ok(ValueType::Uint, "4200 rpm", drop_unit),
            Value::Uint(4200)
        );
        assert!(p("STR_REPLACE", &["", "x"])
            .unwrap_err()
            .contains("must not be empty"));
        assert!(p("STR_REPLACE", &["x"])
            .unwrap_err()
            .contains("two parameters"));
        // BOOL_TO_DECIMAL: numbers (0 or not) and Zabbix's words, any case, quotes and
        // spaces around ignored.
        let b = || p("BOOL_TO_DECIMAL", &[]).unwrap();
        for (v, want) in [
            ("up", 1),
            ("\"Enabled\" ", 1),
            ("OK\r\n", 1),
            ("master", 1),
            ("down", 0),
            ("UNAVAILABLE", 0),
            ("slave", 0),
            ("0", 0),
            ("0.0", 0),
            ("-2.5", 1),
        ] {
            assert_eq!(uint(v, b()), Value::Uint(want), "{v:?}");
        }
        // OCTAL_TO_DECIMAL, HEX_TO_DECIMAL (digits, or a Hex-STRING's octets).
        let oct = || p("OCTAL_TO_DECIMAL", &[""]).unwrap();
        let hex = || p("HEX_TO_DECIMAL", &[]).unwrap();
        assert_eq!(uint(" 755 ", oct()), Value::Uint(493));
        assert_eq!(uint("ff", hex()), Value::Uint(255));
        assert_eq!(uint("\"1f\"", hex()), Value::Uint(31));
        assert_eq!(uint("00 1A 2B FF", hex()), Value::Uint(0x001a_2bff));
        assert_eq!(
            uint("00 00 00 00 00 00 00 00 01 00", hex()),
            Value::Uint(256)
        );
        assert_eq!(uint("FFFFFFFFFFFFFFFF", hex()), Value::Uint(u64::MAX));
        // What they cannot read fails the step (its handler decides).
        for (v, step, why) in [
            ("maybe", b(), "is not a boolean"),
            ("789", oct(), "is not an octal number"),
            ("0x1A", hex(), "is not a hexadecimal number"),
            ("1A  2B", hex(), "is not a hexadecimal number"),
            ("1 0000000000000000", hex(), "is not a hexadecimal number"),
            ("10000000000000000", hex(), "is out of range"),
            ("01 00 00 00 00 00 00 00 00", hex(), "is out of range"),
        ] {
            let e = through(ValueType::Uint, v, &[step.into()])
                .unwrap()
                .unwrap_err();
            assert!(e.text.ends_with(why), "{v:?}: {e}");
        }
        let handled = b().on_fail(OnFail::Value("0".into()));
        assert_eq!(
            through(ValueType::Uint, "maybe", &[handled]),
            Some(Ok(Value::Uint(0)))
        );
        assert_eq!(b().to_string(), "BOOL_TO_DECIMAL");
    }

    #[test]
    fn a_float_item_rates_a_counter_in_floating_point_and_errors_restart_the_change() {
        // Zabbix's "Linux by SNMP": interrupts per second, a float item with
        // CHANGE_PER_SECOND on a Counter32: 2 in 60 s is 0.0333, not 0.
        let mut p = Preprocessor::default();
        let rate = [Step::ChangePerSecond];
        let mut at = |clock, v: Result<Value, ItemError>| {
            let mut s = sample(1, ValueType::Float, clock, Value::Uint(0), &rate);
            s.result = v;
            value(p.apply(s))
        };
        assert_eq!(at(0, Ok(Value::Uint(100))), None);
        let Some(Ok(Value::Float(r))) = at(60, Ok(Value::Uint(102))) else {
            panic!("a rate");
        };
        assert!((r - 2.0 / 60.0).abs() < 1e-12, "{r}");
        // Not supported this time (noSuchInstance): the next value starts over, as
        // Zabbix's; a timeout is no answer and keeps the previous value.
        let nsi = ItemError::new(ErrorReason::Unsupported, "noSuchInstance");
        assert!(matches!(at(120, Err(nsi)), Some(Err(_))));
        assert_eq!(
            at(180, Ok(Value::Uint(200))),
            None,
            "no rate across the gap"
        );
        let timeout = ItemError::new(ErrorReason::Timeout, "timeout");
        assert!(matches!(at(240, Err(timeout)), Some(Err(_))));
        assert!(matches!(
            at(300, Ok(Value::Uint(260))),
            Some(Ok(Value::Float(_)))
        ));
    }

    #[test]
    fn new_steps_after_a_reload_start_the_change_afresh() {
        // [CHANGE_PER_SECOND] becomes [MULTIPLIER 8, CHANGE_PER_SECOND]: the remembered
        // value is unscaled, so the first value under the new steps has nothing to
        // compare with (else one spike of 7x the traffic).
        let mut p = Preprocessor::default();
        let before = [Step::ChangePerSecond];
        let after = [Step::Multiplier(8.0), Step::ChangePerSecond];
        let s = |clock, v, st: &[Step]| sample(1, ValueType::Uint, clock, Value::Uint(v), st);
        assert_eq!(value(p.apply(s(0, 1_000, &before))), None);
        assert_eq!(
            value(p.apply(s(10, 2_000, &before))),
            Some(Ok(Value::Uint(100)))
        );
        assert_eq!(value(p.apply(s(20, 3_000, &after))), None);
        assert_eq!(
            value(p.apply(s(30, 4_000, &after))),
            Some(Ok(Value::Uint(800)))
        );
        // Equal steps from another config load (another Arc) are the same steps.
        assert_eq!(
            value(p.apply(s(40, 5_000, &after))),
            Some(Ok(Value::Uint(800)))
        );
    }

    #[test]
    fn simple_change_is_exact_on_counter64_and_float_items_keep_fractions() {
        let mut p = Preprocessor::default();
        let big = u64::MAX - 10;
        let s = |clock, v| {
            sample(
                2,
                ValueType::Uint,
                clock,
                Value::Uint(v),
                &[Step::SimpleChange],
            )
        };
        assert_eq!(value(p.apply(s(1, big - 7))), None);
        assert_eq!(value(p.apply(s(2, big))), Some(Ok(Value::Uint(7))));
        let f = |clock, v| {
            sample(
                3,
                ValueType::Float,
                clock,
                Value::Float(v),
                &[Step::ChangePerSecond],
            )
        };
        assert_eq!(value(p.apply(f(10, 1.0))), None);
        assert_eq!(value(p.apply(f(14, 3.0))), Some(Ok(Value::Float(0.5))));
        assert_eq!(p.remembered(), 2);
    }

    #[test]
    fn multiplier_and_errors() {
        let mut p = Preprocessor::default();
        let m = |vt, v, x| sample(4, vt, 0, v, &[Step::Multiplier(x)]);
        assert_eq!(
            value(p.apply(m(ValueType::Uint, Value::Uint(3), 8.0))),
            Some(Ok(Value::Uint(24)))
        );
        assert_eq!(
            value(p.apply(m(ValueType::Float, Value::Float(0.25), 1000.0))),
            Some(Ok(Value::Float(250.0)))
        );
        assert_eq!(
            value(p.apply(m(ValueType::Uint, Value::Uint(7), 0.5))),
            Some(Ok(Value::Uint(3)))
        );
        for bad in [
            m(ValueType::Uint, Value::Uint(u64::MAX), 2.0),
            m(ValueType::Uint, Value::Uint(1), -1.0),
            m(ValueType::Uint, Value::Str("x".into()), 2.0),
        ] {
            let e = value(p.apply(bad)).unwrap().unwrap_err();
            assert_eq!(e.reason, ErrorReason::Unsupported);
            assert!(e.text.starts_with("preprocessing: "), "{e}");
        }
        // No steps, or an error: untouched.
        let mut plain = m(ValueType::Uint, Value::Uint(5), 2.0);
        plain.pre = None;
        assert_eq!(value(p.apply(plain)), Some(Ok(Value::Uint(5))));
        let mut failed = m(ValueType::Uint, Value::Uint(5), 2.0);
        failed.result = Err(ItemError::new(ErrorReason::Timeout, "t"));
        assert_eq!(
            value(p.apply(failed)).unwrap().unwrap_err().reason,
            ErrorReason::Timeout
        );
    }

    #[test]
    fn parse_and_rules() {
        let p = |k: &str, ps: &[&str]| {
            Step::parse(k, &ps.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        };
        assert_eq!(p("CHANGE_PER_SECOND", &[]), Ok(Step::ChangePerSecond));
        assert_eq!(p("simple_change", &[]), Ok(Step::SimpleChange));
        assert_eq!(p("MULTIPLIER", &["8"]), Ok(Step::Multiplier(8.0)));
        assert_eq!(p("MULTIPLIER", &["0.001"]), Ok(Step::Multiplier(0.001)));
        assert!(p("MULTIPLIER", &[]).unwrap_err().contains("one parameter"));
        assert!(p("MULTIPLIER", &["{$X}"])
            .unwrap_err()
            .contains("not a number"));
        assert!(p("SIMPLE_CHANGE", &["1"])
            .unwrap_err()
            .contains("no parameters"));
        let e = p("JAVASCRIPT", &[]).unwrap_err();
        assert!(
            e.starts_with("unknown preprocessing type \"JAVASCRIPT\": netpoller runs SIMPLE_CHANGE, CHANGE_PER_SECOND, ")
                && e.ends_with(", DISCARD_UNCHANGED and DISCARD_UNCHANGED_HEARTBEAT"),
            "{e}"
        );
        assert!(Steps::new(vec![Step::SimpleChange, Step::ChangePerSecond]).is_err());
        assert!(Steps::new(Vec::<Step>::new()).is_err());
        // Throttling: Zabbix's time suffixes; one step, the last.
        let hb = |s: &str| p("discard_unchanged_heartbeat", &[s]);
        assert_eq!(hb("3600"), Ok(Step::DiscardUnchangedHeartbeat(3600)));
        assert_eq!(hb("1h"), Ok(Step::DiscardUnchangedHeartbeat(3600)));
        assert_eq!(hb(" 15m "), Ok(Step::DiscardUnchangedHeartbeat(900)));
        assert_eq!(hb("1w"), Ok(Step::DiscardUnchangedHeartbeat(604_800)));
        for bad in ["0", "", "1y", "h", "-5", "{$HB}", "26000w"] {
            assert!(hb(bad).unwrap_err().contains("heartbeat"), "{bad:?}");
        }
        assert_eq!(p("DISCARD_UNCHANGED", &[]), Ok(Step::DiscardUnchanged));
        let last = Steps::new(vec![Step::ChangePerSecond, Step::DiscardUnchanged]).unwrap();
        assert_eq!(last.body(), [Step::ChangePerSecond]);
        assert!(
            Steps::new(vec![Step::DiscardUnchanged, Step::Multiplier(8.0)])
                .unwrap_err()
                .contains("last")
        );
        assert!(Steps::new(vec![
            Step::DiscardUnchanged,
            Step::DiscardUnchangedHeartbeat(60)
        ])
        .unwrap_err()
        .contains("at most one"));
    }

    fn regex(pattern: &str, output: &str) -> Step {
        Step::parse("REGEX", &[pattern.into(), output.into()]).unwrap()
    }

    fn text_through<S: Clone + Into<Op>>(steps: &[S], v: &str) -> Option<Result<Value, ItemError>> {
        let mut p = Preprocessor::default();
        value(p.apply(sample(1, ValueType::Str, 0, Value::Str(v.into()), steps)))
    }

    #[test]
    fn regex_fills_the_output_template_as_zabbix_templates_use_it() {
        // "Cisco IOS by SNMP", Firmware version: sysDescr, REGEX "Version (.+), RELEASE"
        // → "\1".
        let descr = "Cisco IOS Software, C2960 Software (C2960-LANBASEK9-M), Version 15.0(2)SE4, RELEASE SOFTWARE (fc1)";
        let firmware = [regex("Version (.+), RELEASE", "\\1")];
        assert_eq!(
            text_through(&firmware, descr),
            Some(Ok(Value::Str("15.0(2)SE4".into())))
        );
        // \0 is the match; a group that took no part, or does not exist, is empty;
        // \\ is one backslash (so \\1 is a backslash and a 1); a backslash before
        // anything else, and everything else, is literal.
        let t = [regex(
            r"(\d+)\.(\d+)(x)?",
            r"v\1 r\2 [\3\9] all=\0 \n \\1 \\",
        )];
        assert_eq!(
            text_through(&t, "build 12.4 final"),
            Some(Ok(Value::Str(r"v12 r4 [] all=12.4 \n \1 \".into())))
        );
        // No match: the item is unsupported for this poll, with the reason.
        let err = text_through(&firmware, "Linux 6.1").unwrap().unwrap_err();
        assert_eq!(err.reason, ErrorReason::Unsupported);
        assert!(err.text.contains("does not match"), "{err:?}");
        // Steps run in order: trim, then extract, then throttle what is stored.
        let steps = [
            Step::parse("TRIM", &[" \"\n".into()]).unwrap(),
            regex("^([^ ]+)", "\\1"),
            Step::DiscardUnchanged,
        ];
        let mut p = Preprocessor::default();
        let mut at = |clock, v: &str| {
            value(p.apply(sample(
                2,
                ValueType::Str,
                clock,
                Value::Str(v.into()),
                &steps,
            )))
        };
        assert_eq!(
            at(0, "\"RouterOS 7.1\"\n"),
            Some(Ok(Value::Str("RouterOS".into())))
        );
        assert_eq!(at(60, " RouterOS 7.2 "), None, "unchanged once extracted");
        assert_eq!(at(120, "Linux"), Some(Ok(Value::Str("Linux".into()))));
    }

    #[test]
    fn custom_on_fail_decides_what_a_regex_without_a_match_stores() {
        let firmware = |f: OnFail| regex("Version ([^,]+),", "\\1").on_fail(f);
        let linux = "Linux 6.1.0-13-amd64 #1 SMP";
        // CUSTOM_VALUE: that value, and the steps after it run on it.
        let steps = [
            firmware(OnFail::Value(" n/a ".into())),
            Step::parse("TRIM", &[" ".into()]).unwrap().into(),
        ];
        assert_eq!(
            text_through(&steps, linux),
            Some(Ok(Value::Str("n/a".into())))
        );
        // DISCARD_VALUE: nothing stored, no error.
        assert_eq!(text_through(&[firmware(OnFail::Discard)], linux), None);
        // CUSTOM_ERROR: unsupported with that message, as Zabbix shows it.
        let e = text_through(&[firmware(OnFail::Message("no version".into()))], linux);
        let e = e.unwrap().unwrap_err();
        assert_eq!(
            (e.reason, e.text.as_str()),
            (ErrorReason::Unsupported, "no version")
        );
        // A match ignores the handler.
        let ios = "Cisco IOS Software, Version 15.2(4)M7, RELEASE SOFTWARE";
        assert_eq!(
            text_through(&[firmware(OnFail::Discard)], ios),
            Some(Ok(Value::Str("15.2(4)M7".into())))
        );
        // Steps that cannot fail keep no handler: equal pipelines stay equal (shared).
        assert_eq!(
            Step::DiscardUnchanged.on_fail(OnFail::Discard),
            Step::DiscardUnchanged
        );
        assert_ne!(firmware(OnFail::Discard), firmware(OnFail::Error));
        assert!(firmware(OnFail::Discard)
            .to_string()
            .ends_with("on fail: discard)"));
    }

    #[test]
    fn check_not_supported_gives_an_unsupported_item_its_handler() {
        let check = |f: OnFail| Step::parse("CHECK_NOT_SUPPORTED", &[]).unwrap().on_fail(f);
        let failed = |reason, steps: &[Op]| {
            let mut s = sample(3, ValueType::Uint, 0, Value::Uint(0), steps);
            s.result = Err(ItemError::new(reason, "noSuchObject"));
            let mut p = Preprocessor::default();
            value(p.apply(s))
        };
        let nso = ErrorReason::Unsupported;
        // CUSTOM_VALUE, in the item's type; the steps after it run on it.
        let zero = [
            check(OnFail::Value("5".into())),
            Step::Multiplier(2.0).into(),
        ];
        assert_eq!(failed(nso, &zero), Some(Ok(Value::Uint(10))));
        // A value is left to the other steps; a timeout is not "not supported".
        let ok = sample(3, ValueType::Uint, 0, Value::Uint(3), &zero);
        assert_eq!(
            value(Preprocessor::default().apply(ok)),
            Some(Ok(Value::Uint(6)))
        );
        let timeout = failed(ErrorReason::Timeout, &zero).unwrap().unwrap_err();
        assert_eq!(timeout.reason, ErrorReason::Timeout);
        // DISCARD_VALUE, CUSTOM_ERROR, ORIGINAL_ERROR.
        assert_eq!(failed(nso, &[check(OnFail::Discard)]), None);
        let e = failed(nso, &[check(OnFail::Message("absent".into()))]);
        assert_eq!(e.unwrap().unwrap_err().text, "absent");
        let e = failed(nso, &[check(OnFail::Error)]);
        assert_eq!(e.unwrap().unwrap_err().text, "noSuchObject");
        // The first step only; a custom value of the item's type.
        let late = Steps::new(vec![Step::Multiplier(2.0).into(), check(OnFail::Discard)]);
        assert!(late.unwrap_err().contains("first step"));
        // Any error, as Zabbix 7.0 (`-1`) and 6.0 (`""`) export it; not a pattern on
        // the error's text (netpoller's texts are not Zabbix's).
        for any in [&[][..], &[""], &["-1"]] {
            let params: Vec<String> = any.iter().map(|s| s.to_string()).collect();
            assert!(
                Step::parse("CHECK_NOT_SUPPORTED", &params).is_ok(),
                "{any:?}"
            );
        }
        let e = p_err("CHECK_NOT_SUPPORTED", &["0", "No Such (Instance|Object)"]);
        assert!(e.contains("any error only"), "{e}");
        assert!(
            Step::parse("SIMPLE_CHANGE", &["".into()]).is_ok(),
            "6.0's ['']"
        );
        // A discarded failure starts the steps' memory over, as Zabbix's history of
        // the steps that ran: no delta across the gap.
        let steps = [check(OnFail::Discard), Step::SimpleChange.into()];
        let mut p = Preprocessor::default();
        let ok = |clock, v| sample(5, ValueType::Uint, clock, Value::Uint(v), &steps);
        assert!(
            matches!(p.apply(ok(0, 10)), Outcome::Discarded(_, Why::NoPrevious)),
            "first value"
        );
        assert_eq!(value(p.apply(ok(60, 15))), Some(Ok(Value::Uint(5))));
        let mut gap = ok(120, 0);
        gap.result = Err(ItemError::new(nso, "noSuchInstance"));
        match p.apply(gap) {
            Outcome::Discarded(s, why) => {
                assert!(s.result.is_err(), "handed back as it was");
                assert_eq!(why, Why::HandlerDiscards);
            }
            Outcome::Keep(s) => panic!("{s:?}"),
        }
        assert_eq!(value(p.apply(ok(180, 40))), None, "no delta over the gap");
        assert_eq!(value(p.apply(ok(240, 41))), Some(Ok(Value::Uint(1))));
        let v = |x: &str| check(OnFail::Value(x.into()));
        assert!(v("n/a")
            .check_type(ValueType::Uint)
            .unwrap_err()
            .contains("not a uint"));
        assert!(v("-1").check_type(ValueType::Uint).is_err());
        assert_eq!(v("-1.5").check_type(ValueType::Float), Ok(()));
        assert_eq!(v("n/a").check_type(ValueType::Str), Ok(()));
        assert_eq!(check(OnFail::Discard).check_type(ValueType::Uint), Ok(()));
    }

    #[test]
    fn validation_steps_fail_into_their_handlers() {
        let range = |min: &str, max: &str, f: OnFail| {
            Step::parse("IN_RANGE", &[min.into(), max.into()])
                .unwrap()
                .on_fail(f)
        };
        let through = |vt, v: Value, steps: &[Op]| {
            value(Preprocessor::default().apply(sample(4, vt, 0, v, steps)))
        };
        let temp =
            |v: u64, f: OnFail| through(ValueType::Uint, Value::Uint(v), &[range("0", "150", f)]);
        // A Cisco sensor that is absent reads 0 or a huge number: in range passes.
        assert_eq!(temp(45, OnFail::Error), Some(Ok(Value::Uint(45))));
        assert_eq!(
            temp(150, OnFail::Error),
            Some(Ok(Value::Uint(150))),
            "inclusive"
        );
        assert_eq!(temp(65_535, OnFail::Discard), None);
        assert_eq!(
            temp(65_535, OnFail::Value("0".into())),
            Some(Ok(Value::Uint(0)))
        );
        let e = temp(65_535, OnFail::Error).unwrap().unwrap_err();
        assert!(
            e.text.contains("IN_RANGE: 65535 is not within [0, 150]"),
            "{e:?}"
        );
        // An open end; the check runs where it stands (after the multiplier here).
        let steps = [
            Step::Multiplier(0.1).into(),
            range("", "10", OnFail::Discard),
        ];
        let f = |v| through(ValueType::Float, Value::Float(v), &steps);
        assert_eq!(f(-500.0), Some(Ok(Value::Float(-50.0))));
        assert_eq!(f(101.0), None);
        // Text: MATCHES_REGEX / NOT_MATCHES_REGEX.
        let m = |k: &str, f: OnFail| Step::parse(k, &["^up".into()]).unwrap().on_fail(f);
        let t = |v: &str, s: Op| through(ValueType::Str, Value::Str(v.into()), &[s]);
        assert_eq!(
            t("up(1)", m("MATCHES_REGEX", OnFail::Error)),
            Some(Ok(Value::Str("up(1)".into())))
        );
        assert_eq!(t("down(2)", m("MATCHES_REGEX", OnFail::Discard)), None);
        let e = t("up(1)", m("NOT_MATCHES_REGEX", OnFail::Error))
            .unwrap()
            .unwrap_err();
        assert!(e.text.contains("matches the pattern"), "{e:?}");
        let custom = m("NOT_MATCHES_REGEX", OnFail::Value("masked".into()));
        assert_eq!(t("up(1)", custom), Some(Ok(Value::Str("masked".into()))));
        // Parse errors and types.
        assert!(p_err("IN_RANGE", &["", ""]).contains("a minimum, a maximum or both"));
        assert!(p_err("IN_RANGE", &["10", "1"]).contains("above the maximum"));
        assert!(p_err("IN_RANGE", &["x", "1"]).contains("not a number"));
        assert!(p_err("IN_RANGE", &["1"]).contains("two parameters"));
        assert!(p_err("MATCHES_REGEX", &["(?=a)"]).contains("look-around"));
        assert!(range("0", "1", OnFail::Value("-1".into()))
            .check_type(ValueType::Uint)
            .is_err());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]
        /// Device text and output templates of any content (multi-byte characters
        /// after a backslash included): the template is filled without panicking, and
        /// one without backslashes comes back as it is.
        #[test]
        fn any_text_and_template_fill_without_panic(
            text in "\\PC{0,40}",
            template in "[a-z\\\\0-9é€]{1,12}",
        ) {
            let x = match regex(".", &template) {
                Step::Regex(x) => x,
                _ => unreachable!(),
            };
            let out = x.apply(&text);
            proptest::prop_assert_eq!(out.is_some(), !text.is_empty());
            if let Some(out) = out {
                if !template.contains('\\') {
                    proptest::prop_assert_eq!(out, template);
                }
            }
        }

        /// Device text of any content through the decimal conversions: a number or a
        /// reason, never a panic; what a Hex-STRING's octets say, its digits say too.
        #[test]
        fn any_text_to_decimal_reads_or_says_why(
            text in "[0-9a-fA-F \"\n\r]{0,60}|\\PC{0,30}",
            octets in proptest::collection::vec(proptest::prelude::any::<u8>(), 1..12),
        ) {
            for radix in [Radix::Bool, Radix::Octal, Radix::Hex] {
                let _ = radix.read(&text);
            }
            let shown = snmp::hex_string(&octets);
            let digits: String = shown.split(' ').collect();
            proptest::prop_assert_eq!(Radix::Hex.read(&shown), Radix::Hex.read(&digits));
        }
    }

    fn p_err(kind: &str, params: &[&str]) -> String {
        let params: Vec<String> = params.iter().map(|s| s.to_string()).collect();
        Step::parse(kind, &params).unwrap_err()
    }

    #[test]
    fn error_handlers_are_parsed_as_zabbix_exports_them() {
        assert_eq!(OnFail::parse("discard_value", None), Ok(OnFail::Discard));
        assert_eq!(OnFail::parse("ORIGINAL_ERROR", None), Ok(OnFail::Error));
        assert_eq!(
            OnFail::parse("CUSTOM_VALUE", Some("")),
            Ok(OnFail::Value(String::new())),
            "an empty value is a value"
        );
        assert_eq!(
            OnFail::parse("CUSTOM_ERROR", Some("bad")),
            Ok(OnFail::Message("bad".into()))
        );
        assert!(OnFail::parse("CUSTOM_ERROR", Some("")).is_err());
        assert!(OnFail::parse("CUSTOM_VALUE", None)
            .unwrap_err()
            .contains("needs error_handler_params"));
        assert!(OnFail::parse("DISCARD_VALUE", Some("x"))
            .unwrap_err()
            .contains("takes no"));
        assert_eq!(
            OnFail::parse("IGNORE", None).unwrap_err(),
            "unknown error_handler \"IGNORE\": ORIGINAL_ERROR, DISCARD_VALUE, CUSTOM_VALUE or CUSTOM_ERROR"
        );
    }

    #[test]
    fn trims_strip_the_given_characters_from_their_ends() {
        let step = |k: &str| Step::parse(k, &[" \"".into()]).unwrap();
        let through = |k: &str| match text_through(&[step(k)], " \"up\" ") {
            Some(Ok(Value::Str(t))) => t,
            other => panic!("{other:?}"),
        };
        assert_eq!(through("TRIM"), "up");
        assert_eq!(through("ltrim"), "up\" ");
        assert_eq!(through("RTRIM"), " \"up");
        // Stripping everything leaves an empty value, as Zabbix's trim does.
        assert_eq!(
            text_through(&[step("TRIM")], "\" \""),
            Some(Ok(Value::Str(String::new())))
        );
    }

    #[test]
    fn text_steps_are_parsed_and_checked() {
        let p = |k: &str, ps: &[&str]| {
            Step::parse(k, &ps.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        };
        assert_eq!(p("regex", &["a+", "\\0"]), p("REGEX", &["a+", "\\0"]));
        assert_ne!(p("REGEX", &["a+", "\\0"]), p("REGEX", &["a+", "x"]));
        assert!(p("REGEX", &["a+"]).unwrap_err().contains("two parameters"));
        assert!(p("REGEX", &["a+", ""])
            .unwrap_err()
            .contains("must not be empty"));
        assert!(p("REGEX", &["", "\\0"])
            .unwrap_err()
            .contains("must not be empty"));
        // Zabbix's escapes in a trim's characters (an exported `RTRIM` of `\n`).
        assert_eq!(
            p("RTRIM", &[r"\s\n\r\t\x"]),
            Ok(Step::Trim(Ends::Right, " \n\r\t\\x".into()))
        );
        let e = p("REGEX", &["(?<=a)b", "\\0"]).unwrap_err();
        assert!(e.contains("look-around"), "{e}");
        assert!(p("REGEX", &["(", "\\0"]).is_err());
        assert!(p("TRIM", &[]).unwrap_err().contains("one parameter"));
        assert!(p("RTRIM", &[""]).unwrap_err().contains("one parameter"));
        // Text and numeric steps together, as Zabbix allows (REGEX, then MULTIPLIER).
        let mixed = Steps::new(vec![p("TRIM", &[" "]).unwrap(), Step::Multiplier(2.0)]);
        assert!(mixed.is_ok());
        assert_eq!(p("LTRIM", &["0"]).unwrap().to_string(), "LTRIM(\"0\")");
        assert_eq!(
            p("REGEX", &["v(\\d)", "\\1"]).unwrap().to_string(),
            r#"REGEX("v(\\d)" → "\\1")"#
        );
        let handled = p("REGEX", &["v(\\d)", "\\1"])
            .unwrap()
            .on_fail(OnFail::Discard);
        assert_eq!(
            handled.to_string(),
            r#"REGEX("v(\\d)" → "\\1") (on fail: discard)"#
        );
    }

    /// `values` of one item through `steps`, at the given clocks: what is stored.
    fn stored(
        p: &mut Preprocessor,
        steps: &Arc<Steps>,
        values: &[(u32, Result<Value, ItemError>)],
    ) -> Vec<Option<Result<Value, ItemError>>> {
        values
            .iter()
            .map(|(clock, v)| {
                let mut s = sample(
                    1,
                    ValueType::Str,
                    *clock,
                    Value::Uint(0),
                    &[Step::DiscardUnchanged],
                );
                s.value_type = match v {
                    Ok(v) => v.value_type(),
                    Err(_) => ValueType::Str,
                };
                s.result = v.clone();
                s.pre = Some(steps.clone());
                value(p.apply(s))
            })
            .collect()
    }

    #[test]
    fn discard_unchanged_stores_changes_and_the_value_after_an_error() {
        let steps = Arc::new(Steps::new(vec![Step::DiscardUnchanged]).unwrap());
        let text = |t: &str| Ok(Value::Str(t.into()));
        let timeout = Err(ItemError::new(ErrorReason::Timeout, "timeout"));
        let unsupported = Err(ItemError::new(ErrorReason::Unsupported, "noSuchInstance"));
        let got = stored(
            &mut Preprocessor::default(),
            &steps,
            &[
                (0, text("uplink")),
                (60, text("uplink")),
                (120, text("uplink to core")),
                (180, text("uplink to core")),
                (240, unsupported.clone()),
                (300, text("uplink to core")),
                (360, text("uplink to core")),
                (420, timeout.clone()),
                (480, text("uplink to core")),
                (540, text("uplink")),
            ],
        );
        assert_eq!(
            got,
            [
                Some(text("uplink")),
                None,
                Some(text("uplink to core")),
                None,
                Some(unsupported),
                // Stored again after the item was not supported...
                Some(text("uplink to core")),
                None,
                Some(timeout),
                // ... but not after a timeout: no answer, nothing to compare with.
                None,
                Some(text("uplink")),
            ]
        );
    }

    /// Zabbix's comparison: two texts that are both plain numbers compare as numbers (a
    /// device printing "23" then "23.0" did not change), any other text exactly.
    #[test]
    fn throttling_compares_numeric_texts_as_numbers() {
        let steps = Arc::new(Steps::new(vec![Step::DiscardUnchanged]).unwrap());
        let text = |t: &str| Ok(Value::Str(t.into()));
        let got = stored(
            &mut Preprocessor::default(),
            &steps,
            &[
                (0, text("23")),
                (60, text("23.0")),
                (120, text("2.3e1")),
                (180, text("+23")),
                (240, text("23.5")),
                (300, text(" 23.5")),
                (360, text("23.5 C")),
                (420, text("23.50 C")),
                (480, text("0x17")),
                (540, text("23")),
            ],
        );
        assert_eq!(
            got,
            [
                Some(text("23")),
                None,
                None,
                None,
                Some(text("23.5")),
                // White space makes it text (zbx_is_double): compared as text.
                Some(text(" 23.5")),
                Some(text("23.5 C")),
                Some(text("23.50 C")),
                Some(text("0x17")),
                Some(text("23")),
            ]
        );
        let float = |f: f64| Ok(Value::Float(f));
        let got = stored(
            &mut Preprocessor::default(),
            &steps,
            &[(0, float(0.1 + 0.2)), (60, float(0.3)), (120, float(0.31))],
        );
        assert_eq!(got, [Some(float(0.1 + 0.2)), None, Some(float(0.31))]);
    }

    #[test]
    fn heartbeat_stores_an_unchanged_value_once_per_heartbeat() {
        // ifOperStatus every 60 s with a 1 h heartbeat: one row an hour while up, and
        // every change at once.
        let steps = Arc::new(Steps::new(vec![Step::DiscardUnchangedHeartbeat(3600)]).unwrap());
        let up = Ok(Value::Uint(1));
        let values: Vec<_> = (0..=120u32)
            .map(|m| (m * 60, up.clone()))
            .chain([(7_230, Ok(Value::Uint(2)))])
            .collect();
        let mut p = Preprocessor::default();
        let got = stored(&mut p, &steps, &values);
        let kept: Vec<u32> = values
            .iter()
            .zip(&got)
            .filter(|(_, g)| g.is_some())
            .map(|((c, _), _)| *c)
            .collect();
        assert_eq!(kept, [0, 3600, 7200, 7230]);
        // Other steps after a reload: the first value through them is stored.
        let other = Arc::new(Steps::new(vec![Step::DiscardUnchangedHeartbeat(60)]).unwrap());
        assert_eq!(
            stored(&mut p, &other, &[(7_240, Ok(Value::Uint(2)))]),
            [Some(Ok(Value::Uint(2)))]
        );
        // A reload that drops the step forgets the item.
        let mult = Arc::new(Steps::new(vec![Step::Multiplier(2.0)]).unwrap());
        p.retain([(1, Some(&mult))]);
        assert!(p.stored.is_empty());
    }

    #[test]
    fn throttling_compares_what_is_stored_after_the_numeric_steps() {
        // A rate of 100/s twice in a row is discarded, though the counter moved.
        let steps = [Step::ChangePerSecond, Step::DiscardUnchanged];
        let mut p = Preprocessor::default();
        let mut at =
            |clock, v| value(p.apply(sample(1, ValueType::Uint, clock, Value::Uint(v), &steps)));
        assert_eq!(at(0, 0), None, "first value of the change step");
        assert_eq!(at(10, 1_000), Some(Ok(Value::Uint(100))));
        assert_eq!(at(20, 2_000), None, "the same rate");
        assert_eq!(at(30, 4_000), Some(Ok(Value::Uint(200))));
    }

    #[test]
    fn a_reload_forgets_removed_items_and_dropped_change_steps() {
        let mut p = Preprocessor::default();
        let steps = [Step::SimpleChange];
        for id in [1, 2, 3] {
            p.apply(sample(id, ValueType::Uint, 0, Value::Uint(1), &steps));
        }
        let change = Arc::new(Steps::new(vec![Step::SimpleChange]).unwrap());
        let mult = Arc::new(Steps::new(vec![Step::Multiplier(2.0)]).unwrap());
        p.retain([(1, Some(&change)), (2, Some(&mult)), (4, Some(&change))]);
        assert_eq!(p.remembered(), 1);
        // The throttling step's stored values go the same way.
        let discard = Arc::new(Steps::new(vec![Step::DiscardUnchanged]).unwrap());
        for id in [5, 6] {
            let mut s = sample(
                id,
                ValueType::Uint,
                0,
                Value::Uint(1),
                &[Step::DiscardUnchanged],
            );
            s.pre = Some(discard.clone());
            p.apply(s);
        }
        p.retain([(5, Some(&discard)), (6, Some(&change))]);
        assert_eq!(p.stored.keys().collect::<Vec<_>>(), [&5]);
    }
}
