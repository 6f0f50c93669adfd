//! Zabbix item keys: the generic `name[param,param,...]` syntax and the ICMP keys
//! (`icmpping`, `icmppingloss`, `icmppingsec`, and Zabbix 7.4's `icmppingretry`).
//!
//! Keys are parsed once when the plan is built, never per poll. Parsing follows Zabbix's
//! rules: parameters are separated by commas, may be quoted with `"` (a quoted parameter
//! may contain `,` and `]`, and `\"` escapes a quote), an unquoted one may contain `[`
//! and `"` (not start with `[`), a parameter may be an array `[a,"b"]` (one level; no
//! ICMP key takes one), spaces before a parameter are skipped but an unquoted one keeps
//! its trailing spaces (`icmpping[,3 ]` has packets "3 ", which Zabbix refuses too), and
//! an empty parameter means "default".

use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

/// A key split into its name and parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemKey {
    pub name: String,
    pub params: Vec<Param>,
}

/// One parameter of a key, as Zabbix's agent request carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Param {
    /// A quoted string (unquoted and unescaped) or an unquoted one (leading spaces
    /// dropped, trailing ones kept, as Zabbix does).
    Str(String),
    /// `[a,"b",c]`: one level of array, its elements by the same rules (an empty array
    /// is one empty element, as an empty parameter list is one empty parameter).
    Array(Vec<String>),
}

/// Why a key is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyError(pub String);

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for KeyError {}

fn err<T>(msg: impl Into<String>) -> Result<T, KeyError> {
    Err(KeyError(msg.into()))
}

impl ItemKey {
    /// Parse `name` or `name[p1,p2,...]`.
    pub fn parse(key: &str) -> Result<ItemKey, KeyError> {
        let key = key.trim();
        let (name, rest) = match key.find('[') {
            None => (key, None),
            Some(i) => (&key[..i], Some(&key[i + 1..])),
        };
        if name.is_empty() {
            return err("item key has no name");
        }
        if let Some(bad) = name
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
        {
            // A discovery macro in the name (`ifInOctets.{#SNMPINDEX}`): Zabbix takes
            // one in the parameters only, as its templates' keys have it.
            if let Some(at) = name.find("{#") {
                let stem = name[..at].trim_end_matches('.');
                let stem = if stem.is_empty() { "name" } else { stem };
                return err(format!(
                    "invalid character {bad:?} in item key name {name:?}: a discovery macro goes in the key's parameters, as in Zabbix's templates: {stem}[{}]",
                    &name[at..]
                ));
            }
            return err(format!(
                "invalid character {bad:?} in item key name {name:?}"
            ));
        }
        let Some(rest) = rest else {
            return Ok(ItemKey {
                name: name.to_string(),
                params: Vec::new(),
            });
        };
        let params = parse_params(rest)?;
        Ok(ItemKey {
            name: name.to_string(),
            params,
        })
    }

    /// String parameter `i` (0-based), `None` when absent, empty or an array (a
    /// caller that takes no arrays refuses them first: [`ItemKey::array_param`]).
    pub fn param(&self, i: usize) -> Option<&str> {
        match self.params.get(i) {
            Some(Param::Str(p)) if !p.is_empty() => Some(p),
            _ => None,
        }
    }

    /// The first parameter that is an array (0-based), if any.
    pub fn array_param(&self) -> Option<usize> {
        self.params
            .iter()
            .position(|p| matches!(p, Param::Array(_)))
    }
}

/// Parse the parameter list after `[`, up to and including the closing `]`, by
/// Zabbix's rules (`zbx_parse_key`, `zbx_num_param`, `zbx_get_param`): spaces before a
/// parameter are skipped; a parameter starting with `"` is quoted (`\"` is a quote)
/// and only spaces may follow it before `,` or `]`; one starting with `[` is an array
/// of such parameters (one level: `[` starting an element is refused), and only spaces
/// may follow its `]`; any other is unquoted and runs up to `,` or `]`, `[` and `"`
/// included, trailing spaces kept. The key ends at the `]` that closes the list.
fn parse_params(s: &str) -> Result<Vec<Param>, KeyError> {
    let mut params = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        skip_spaces(&mut chars);
        let (param, end) = if chars.peek() == Some(&'[') {
            chars.next();
            let mut elems = Vec::new();
            loop {
                skip_spaces(&mut chars);
                if chars.peek() == Some(&'[') {
                    return err(
                        "multi-level array in item key parameter (Zabbix allows one level)",
                    );
                }
                let (elem, end) = one_string(&mut chars, true)?;
                elems.push(elem);
                if end == ']' {
                    break;
                }
            }
            skip_spaces(&mut chars);
            match chars.next() {
                Some(c @ (',' | ']')) => (Param::Array(elems), c),
                None => return err("item key parameters are not closed with ']'"),
                Some(_) => return err("array parameter must be followed by ',' or ']'"),
            }
        } else {
            let (p, end) = one_string(&mut chars, false)?;
            (Param::Str(p), end)
        };
        params.push(param);
        if end == ']' {
            break;
        }
    }
    if chars.next().is_some() {
        return err("unexpected characters after ']' in item key");
    }
    Ok(params)
}

fn skip_spaces(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    while chars.peek() == Some(&' ') {
        chars.next();
    }
}

/// One quoted or unquoted string (the caller skipped the spaces before it), and the
/// `,` or `]` that ends it (in an array, that `]` closes the array).
fn one_string(
    chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
    in_array: bool,
) -> Result<(String, char), KeyError> {
    let mut cur = String::new();
    if chars.peek() == Some(&'"') {
        chars.next();
        loop {
            match chars.next() {
                None => return err("unterminated quoted parameter in item key"),
                Some('\\') if chars.peek() == Some(&'"') => {
                    chars.next();
                    cur.push('"');
                }
                Some('"') => break,
                Some(c) => cur.push(c),
            }
        }
        skip_spaces(chars);
        return match chars.next() {
            Some(c @ (',' | ']')) => Ok((cur, c)),
            _ => err("quoted parameter must be followed by ',' or ']'"),
        };
    }
    loop {
        match chars.next() {
            None if in_array => return err("array parameter in item key is not closed with ']'"),
            None => return err("item key parameters are not closed with ']'"),
            Some(c @ (',' | ']')) => return Ok((cur, c)),
            Some(c) => cur.push(c),
        }
    }
}

/// Which ICMP value an item reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IcmpMetric {
    /// `icmpping` and `icmppingretry`: 1 when at least one reply came back, else 0
    /// (uint).
    Ping,
    /// `icmppingloss`: `100 * (sent - received) / sent` (float, percent).
    Loss,
    /// `icmppingsec`: round-trip time in seconds by mode (float).
    Sec(RttMode),
}

pub use icmp::RttMode;

/// Probe parameters: items of one host with equal `IcmpProbe` share the same probes.
/// Times are whole milliseconds (as Zabbix writes them) in 32 bits: every ICMP item
/// carries one, so it is kept small (36 bytes instead of 64 with `Duration`s).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IcmpProbe {
    /// Explicit target from the key's first parameter; `None` = the host's address.
    pub target: Option<IpAddr>,
    /// Number of echo requests, 1..=10000.
    pub packets: u32,
    /// Spacing between a host's packets in ms, ≥ 20.
    pub interval_ms: u32,
    /// ICMP payload size in bytes, 24..=65507.
    pub size: u32,
    /// How long to wait for each probe's reply, in ms (≥ 50): per probe, as fping's `-t`
    /// (with `retry`, the first probe's).
    pub timeout_ms: u32,
    /// `icmppingretry`'s backoff in hundredths ([`icmp::Retry`]): a probe leaves only
    /// when the one before went unanswered, up to `packets` (1 + retries) in all, each
    /// waiting `backoff` times longer than the one before; `interval_ms` is 0 (not
    /// used). 0 for the other keys: all `packets` are sent. A plain `u16` fits in the
    /// struct's padding (an `Option<Retry>` would not): no item grows for it.
    pub retry_backoff_pct: u16,
}

impl IcmpProbe {
    /// Spacing between a host's packets.
    pub fn interval(&self) -> Duration {
        Duration::from_millis(self.interval_ms.into())
    }

    /// Wait for replies after the last send.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.into())
    }

    /// How it retries, for `icmppingretry`.
    pub fn retry(&self) -> Option<icmp::Retry> {
        (self.retry_backoff_pct > 0).then_some(icmp::Retry {
            backoff_pct: self.retry_backoff_pct,
        })
    }

    /// How long a host's probes last at most: its last packet leaves `packets - 1`
    /// intervals after the first and is waited for `timeout`; with `retry`, every
    /// probe's timeout (a host that never answers).
    pub fn duration(&self) -> Duration {
        // The sweep's own measure, on any address (it does not depend on one).
        let job = self.job(IpAddr::from([0, 0, 0, 0]));
        job.total_wait().unwrap_or(Duration::MAX)
    }

    /// The sweep job that sends this probe to `addr` (the key's target, if it has one).
    pub fn job(&self, addr: IpAddr) -> icmp::Job {
        icmp::Job {
            addr: self.target.unwrap_or(addr),
            packets: self.packets,
            interval: self.interval(),
            size: self.size as usize,
            timeout: self.timeout(),
            retry: self.retry(),
        }
    }
}

fn ms_u32(d: Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX)
}

/// Defaults for parameters a key leaves empty (the `[icmp]` config section).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcmpDefaults {
    pub packets: u32,
    pub interval: Duration,
    pub size: u32,
    pub timeout: Duration,
}

impl Default for IcmpDefaults {
    fn default() -> Self {
        IcmpDefaults {
            packets: 3,
            interval: Duration::from_millis(20),
            size: 68,
            timeout: Duration::from_secs(1),
        }
    }
}

/// Zabbix's limits for the ICMP parameters.
pub mod limits {
    use std::time::Duration;
    pub const PACKETS: std::ops::RangeInclusive<u32> = 1..=10_000;
    pub const MIN_INTERVAL: Duration = Duration::from_millis(20);
    pub const SIZE: std::ops::RangeInclusive<u32> = 24..=65_507;
    pub const MIN_TIMEOUT: Duration = Duration::from_millis(50);
    /// Zabbix sets no maximum for these two; 10 minutes (Zabbix 7's longest item
    /// timeout) keeps a sweep's end within reach of its clock and of its interval.
    pub const MAX_INTERVAL: Duration = Duration::from_secs(600);
    pub const MAX_TIMEOUT: Duration = Duration::from_secs(600);
}

impl IcmpDefaults {
    /// Check the defaults themselves against Zabbix's limits.
    pub fn check(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        check_packets(self.packets, |m| out.push(("packets", m)));
        check_interval(self.interval, |m| out.push(("interval", m)));
        check_size(self.size, |m| out.push(("size", m)));
        check_timeout(self.timeout, |m| out.push(("timeout", m)));
        out
    }

    /// These defaults with each one [`Self::check`] refuses replaced by the built-in
    /// one: what keys are checked against once the refused defaults are reported where
    /// they are written. Parsed against the refused ones, every key that leaves one
    /// empty was refused for it too, for a value its text does not hold.
    pub fn within_limits(&self) -> IcmpDefaults {
        let (mut d, builtin) = (*self, IcmpDefaults::default());
        for (field, _) in self.check() {
            match field {
                "packets" => d.packets = builtin.packets,
                "interval" => d.interval = builtin.interval,
                "size" => d.size = builtin.size,
                "timeout" => d.timeout = builtin.timeout,
                _ => {}
            }
        }
        d
    }
}

fn check_packets(v: u32, mut f: impl FnMut(String)) {
    if !limits::PACKETS.contains(&v) {
        f(format!("packets {v} outside Zabbix's limits 1..10000"));
    }
}
fn check_interval(v: Duration, mut f: impl FnMut(String)) {
    if v < limits::MIN_INTERVAL {
        f(format!(
            "interval {} ms below Zabbix's minimum of 20 ms",
            v.as_millis()
        ));
    } else if v > limits::MAX_INTERVAL {
        f(format!(
            "interval {} ms above the maximum of 600000 ms (10 min)",
            v.as_millis()
        ));
    }
}
fn check_size(v: u32, mut f: impl FnMut(String)) {
    if !limits::SIZE.contains(&v) {
        f(format!("size {v} outside Zabbix's limits 24..65507"));
    }
}
fn check_timeout(v: Duration, mut f: impl FnMut(String)) {
    if v < limits::MIN_TIMEOUT {
        f(format!(
            "timeout {} ms below Zabbix's minimum of 50 ms",
            v.as_millis()
        ));
    } else if v > limits::MAX_TIMEOUT {
        f(format!(
            "timeout {} ms above the maximum of 600000 ms (10 min)",
            v.as_millis()
        ));
    }
}

/// A parsed ICMP item key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcmpKey {
    pub metric: IcmpMetric,
    pub probe: IcmpProbe,
}

impl IcmpKey {
    /// Whether `name` is one of the ICMP simple checks.
    pub fn is_icmp_name(name: &str) -> bool {
        matches!(
            name,
            "icmpping" | "icmppingloss" | "icmppingsec" | "icmppingretry"
        )
    }

    /// Parse `icmpping[<target>,<packets>,<interval>,<size>,<timeout>,<options>]` (and
    /// `icmppingsec`'s `<mode>` before `<options>`), filling empty parameters from
    /// `defaults`. Interval and timeout are in milliseconds, as in Zabbix. The target must
    /// be an IP literal: the poller never resolves names. `<options>` (Zabbix 7.0) may be
    /// empty, Zabbix's default: a reply from another address than the target's does not
    /// count. `allow_redirect` is refused: a probe's tag binds it to the target's address
    /// (what rejects forged replies), so a redirected reply cannot be told from a forgery.
    ///
    /// `icmppingretry[<target>,<retries>,<backoff>,<size>,<timeout>,<options>]` (Zabbix
    /// 7.4): one probe, and another each time one goes unanswered, `retries` more at
    /// most (0 or more, default 1), each waiting `backoff` times longer (1.0–5.0,
    /// default 1.0, two decimals); its value is `icmpping`'s.
    pub fn parse(key: &ItemKey, defaults: &IcmpDefaults) -> Result<IcmpKey, KeyError> {
        let options = if key.name == "icmppingsec" { 6 } else { 5 };
        match key.param(options) {
            None => {}
            Some("allow_redirect") => {
                return err(format!(
                    "{}: option allow_redirect is not supported: only replies from the probed address count (Zabbix's default)",
                    key.name
                ))
            }
            // icmppingsec's mode one place too far along (`icmppingloss[,3,,,,avg]`):
            // only icmppingsec has a mode, before its options.
            Some(o) if key.name != "icmppingsec" && o.parse::<RttMode>().is_ok() => {
                return err(format!(
                    "{}: parameter {} is options, not a mode: {o:?} is a mode of icmppingsec (icmppingsec[,,,,,{o}]); leave it empty",
                    key.name,
                    options + 1
                ))
            }
            // icmppingsec's own mode one place too far along (`icmppingsec[,,,,,,max]`).
            Some(o) if o.parse::<RttMode>().is_ok() => {
                return err(format!(
                    "icmppingsec: parameter 7 is options, not the mode: write {o:?} as parameter 6, icmppingsec[,,,,,{o}], and leave parameter 7 empty"
                ))
            }
            Some(o) => {
                return err(format!(
                    "{}: unknown option {o:?} in parameter {}: leave it empty (Zabbix's only option, allow_redirect, is not supported)",
                    key.name,
                    options + 1
                ))
            }
        }
        if let Some(i) = key.array_param() {
            return err(format!(
                "{}: parameter {} is an array, and ICMP keys take none",
                key.name,
                i + 1
            ));
        }
        let max_params = options + 1;
        if key.params.len() > max_params {
            return err(format!(
                "{} takes at most {max_params} parameters, got {}",
                key.name,
                key.params.len()
            ));
        }
        let metric = match key.name.as_str() {
            "icmpping" | "icmppingretry" => IcmpMetric::Ping,
            "icmppingloss" => IcmpMetric::Loss,
            "icmppingsec" => IcmpMetric::Sec(
                key.param(5)
                    .unwrap_or("")
                    .parse::<RttMode>()
                    .map_err(KeyError)?,
            ),
            other => return err(format!("{other:?} is not an ICMP key")),
        };
        let target = match key.param(0) {
            None => None,
            Some(t) => Some(
                t.parse::<IpAddr>()
                    .map_err(|_| {
                        KeyError(format!(
                            "target {t:?} is not an IP address (names are not resolved)"
                        ))
                    })
                    .and_then(|ip| crate::source::check_address(ip).map_err(KeyError))?,
            ),
        };
        // Digits only, as Zabbix's zbx_is_uint31: no sign, no space (an unquoted
        // parameter keeps its trailing ones). Too many digits are out of range.
        let num = |i: usize, what: &str| -> Result<Option<u64>, KeyError> {
            match key.param(i) {
                None => Ok(None),
                Some(p) if p.bytes().all(|b| b.is_ascii_digit()) => {
                    Ok(Some(p.parse::<u64>().unwrap_or(u64::MAX)))
                }
                // icmppingsec's mode written at a number's place (`icmppingsec[,,,,max]`,
                // one comma short): say where it goes.
                Some(p) if p.parse::<RttMode>().is_ok() => err(format!(
                    "{what} {p:?} is not a non-negative integer (parameter {} of {}): {p:?} is icmppingsec's mode, its parameter 6: icmppingsec[,,,,,{p}]",
                    i + 1,
                    signature(&key.name)
                )),
                Some(p) => err(format!(
                    "{what} {p:?} is not a non-negative integer (parameter {} of {})",
                    i + 1,
                    signature(&key.name)
                )),
            }
        };
        // A count or size (its default when empty), a time in ms.
        let count = |i, what, default: u32| -> Result<u32, KeyError> {
            Ok(num(i, what)?.map_or(default, |v| u32::try_from(v).unwrap_or(u32::MAX)))
        };
        let millis = |i, what, default: Duration| -> Result<Duration, KeyError> {
            Ok(num(i, what)?.map_or(default, Duration::from_millis))
        };
        let retrying = key.name == "icmppingretry";
        let mut problems = Vec::new();
        // (…, icmppingretry's backoff in hundredths: 0 for the other keys)
        let (packets, interval, backoff_pct) = if retrying {
            // Zabbix's default: one retry.
            let retries = num(1, "retries")?.unwrap_or(1);
            let packets = u32::try_from(retries.saturating_add(1)).unwrap_or(u32::MAX);
            if !limits::PACKETS.contains(&packets) {
                problems.push(format!("retries {retries} outside 0..9999"));
            }
            (packets, Duration::ZERO, parse_backoff(key.param(2))?)
        } else {
            let packets = count(1, "packets", defaults.packets)?;
            let interval = millis(2, "interval", defaults.interval)?;
            check_packets(packets, |m| problems.push(m));
            check_interval(interval, |m| problems.push(m));
            (packets, interval, 0)
        };
        let size = count(3, "size", defaults.size)?;
        let timeout = millis(4, "timeout", defaults.timeout)?;
        check_size(size, |m| problems.push(m));
        check_timeout(timeout, |m| problems.push(m));
        if !problems.is_empty() {
            return err(problems.join("; "));
        }
        let probe = IcmpProbe {
            target,
            packets,
            interval_ms: ms_u32(interval),
            size,
            timeout_ms: ms_u32(timeout),
            retry_backoff_pct: backoff_pct,
        };
        if retrying {
            // Every probe unanswered: its timeouts in a row, bounded as one timeout is.
            let wait = probe.duration();
            if wait > limits::MAX_TIMEOUT {
                return err(format!(
                    "retries {} with backoff {:.2} wait {} ms for a silent host, above the maximum of 600000 ms (10 min): fewer retries, a smaller backoff or a shorter timeout",
                    packets - 1,
                    f64::from(backoff_pct) / 100.0,
                    wait.as_millis()
                ));
            }
        }
        Ok(IcmpKey { metric, probe })
    }
}

/// The parameters of the ICMP key `name`, as Zabbix's documentation writes them: an
/// error about one parameter shows which place it holds.
fn signature(name: &str) -> &'static str {
    match name {
        "icmppingsec" => {
            "icmppingsec[<target>,<packets>,<interval>,<size>,<timeout>,<mode>,<options>]"
        }
        "icmppingretry" => "icmppingretry[<target>,<retries>,<backoff>,<size>,<timeout>,<options>]",
        "icmppingloss" => "icmppingloss[<target>,<packets>,<interval>,<size>,<timeout>,<options>]",
        _ => "icmpping[<target>,<packets>,<interval>,<size>,<timeout>,<options>]",
    }
}

/// `icmppingretry`'s backoff (empty: 1.0) in hundredths, within Zabbix's 1.0–5.0.
fn parse_backoff(p: Option<&str>) -> Result<u16, KeyError> {
    let Some(p) = p else {
        return Ok(100);
    };
    let v: f64 = p
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite())
        .ok_or_else(|| KeyError(format!("backoff {p:?} is not a number")))?;
    let pct = (v * 100.0).round();
    if (pct - v * 100.0).abs() > 1e-6 {
        return err(format!("backoff {p}: at most two decimals"));
    }
    let range = icmp::Retry::BACKOFF;
    if !(f64::from(*range.start())..=f64::from(*range.end())).contains(&pct) {
        return err(format!("backoff {p} outside Zabbix's range 1.0..5.0"));
    }
    Ok(pct as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strs(v: &[&str]) -> Vec<Param> {
        v.iter().map(|s| Param::Str(s.to_string())).collect()
    }

    fn icmp(k: &str) -> Result<IcmpKey, KeyError> {
        IcmpKey::parse(&ItemKey::parse(k).unwrap(), &IcmpDefaults::default())
    }

    #[test]
    fn generic_key_syntax() {
        assert_eq!(
            ItemKey::parse("icmpping").unwrap().params,
            Vec::<Param>::new()
        );
        let k = ItemKey::parse("icmppingsec[,3,,,,avg]").unwrap();
        assert_eq!(k.name, "icmppingsec");
        assert_eq!(k.params, strs(&["", "3", "", "", "", "avg"]));
        let k = ItemKey::parse(r#"net.if.in["eth0, \"x\"]", bytes]"#).unwrap();
        assert_eq!(k.params, strs(&[r#"eth0, "x"]"#, "bytes"]));
        assert!(ItemKey::parse("icmpping[").is_err());
        assert!(ItemKey::parse("icmpping[1]x").is_err());
        assert!(ItemKey::parse("ic mp").is_err());
        assert!(ItemKey::parse("[1]").is_err());
        assert!(ItemKey::parse(r#"a["x"y]"#).is_err());
    }

    /// A discovery macro in a key's name (`ifHCInOctets.{#SNMPINDEX}`) is refused as
    /// Zabbix refuses it, saying where it goes: it said only "invalid character '{'".
    #[test]
    fn a_discovery_macro_in_the_name_is_told_to_go_in_the_parameters() {
        for (key, meant) in [
            ("ifHCInOctets.{#SNMPINDEX}", "ifHCInOctets[{#SNMPINDEX}]"),
            ("net.if.in{#SNMPINDEX}", "net.if.in[{#SNMPINDEX}]"),
            ("{#SNMPINDEX}.in", "name[{#SNMPINDEX}.in]"),
        ] {
            assert_eq!(
                ItemKey::parse(key).unwrap_err().0,
                format!("invalid character '{{' in item key name {key:?}: a discovery macro goes in the key's parameters, as in Zabbix's templates: {meant}")
            );
            assert!(ItemKey::parse(meant).is_ok(), "{meant}");
        }
        assert_eq!(
            ItemKey::parse("if in").unwrap_err().0,
            "invalid character ' ' in item key name \"if in\""
        );
    }

    /// Zabbix's own cases (its tests/libs/zbxsysinfo/parse_item_key.yaml) and the
    /// key format page: `[` may follow the start of an unquoted parameter, and a
    /// parameter may be an array, of one level.
    #[test]
    fn arrays_and_brackets_as_zabbix_parses_them() {
        fn arr(v: &[&str]) -> Param {
            Param::Array(v.iter().map(|s| s.to_string()).collect())
        }
        let s = |v: &str| Param::Str(v.to_string());
        for (key, params) in [
            ("key[a,b[c]", vec![s("a"), s("b[c")]),
            ("x.y[a[1]", vec![s("a[1")]),
            ("x.y[[a,b],c]", vec![arr(&["a", "b"]), s("c")]),
            ("key[a,[b,c]]", vec![s("a"), arr(&["b", "c"])]),
            ("key[a,[b,]]", vec![s("a"), arr(&["b", ""])]),
            (
                r#"key["a","b",["c","d\",]"]]"#,
                vec![s("a"), s("b"), arr(&["c", r#"d",]"#])],
            ),
            (
                r#"key["a","b",["c","d\",]"],[e,f]]"#,
                vec![s("a"), s("b"), arr(&["c", r#"d",]"#]), arr(&["e", "f"])],
            ),
            (
                r#"key[[],"[]",[a,b],"z,[c,d]"]"#,
                vec![arr(&[""]), s("[]"), arr(&["a", "b"]), s("z,[c,d]")],
            ),
            (r#"key[a"b"]"#, vec![s(r#"a"b""#)]),
            (r#"key["a",b"c",d]"#, vec![s("a"), s(r#"b"c""#), s("d")]),
            ("key[ [ a, \"b\" ] , c]", vec![arr(&["a", "b"]), s("c")]),
            ("key[[a[1,b]]", vec![arr(&["a[1", "b"])]),
        ] {
            assert_eq!(ItemKey::parse(key).map(|k| k.params), Ok(params), "{key}");
        }
        for key in [
            r#"key[["a",]"#,
            r#"key[[a"]"]"#,
            r#"key[["a","\"b\"]"]"#,
            r#"key["a",["b","c\"]"]]]"#,
            "key[a]]",
            "key[ a]]",
            "key[ГУГЛ]654",
            "key[][]",
            "key[[[]]]",
            r#"key["a",["b",["c","d"],e],"f"]"#,
            "key[a,[b,[c,d]],e]",
            "key[a[b]]",
            r#"key["a",b[c,d],e]"#,
            r#"key["a"b]"#,
            r#"key["a",["b","]"c]]"#,
            r#"key[["]"a]]"#,
            r#"key[[a]"b"]"#,
        ] {
            assert!(ItemKey::parse(key).is_err(), "{key}");
        }
        // No ICMP key takes an array: refused, not read as a default.
        let e = icmp("icmpping[,[3]]").unwrap_err().0;
        assert!(e.contains("parameter 2 is an array"), "{e}");
        assert!(icmp("icmppingsec[[127.0.0.1]]").is_err());
    }

    #[test]
    fn icmp_defaults_and_overrides() {
        let k = icmp("icmpping").unwrap();
        assert_eq!(k.metric, IcmpMetric::Ping);
        assert_eq!(k.probe.packets, 3);
        assert_eq!(k.probe.timeout(), Duration::from_secs(1));
        let k = icmp("icmppingloss[127.0.0.9,5,100,32,500]").unwrap();
        assert_eq!(k.metric, IcmpMetric::Loss);
        assert_eq!(k.probe.target, Some("127.0.0.9".parse().unwrap()));
        assert_eq!(k.probe.packets, 5);
        assert_eq!(k.probe.interval(), Duration::from_millis(100));
        assert_eq!(k.probe.size, 32);
        assert_eq!(k.probe.timeout(), Duration::from_millis(500));
        assert_eq!(
            icmp("icmppingsec[,,,,,max]").unwrap().metric,
            IcmpMetric::Sec(RttMode::Max)
        );
        assert_eq!(
            icmp("icmppingsec[,,,,,min]").unwrap().metric,
            IcmpMetric::Sec(RttMode::Min)
        );
        assert_eq!(
            icmp("icmppingsec").unwrap().metric,
            IcmpMetric::Sec(RttMode::Avg)
        );
        // Same parameters written differently share one probe.
        assert_eq!(
            icmp("icmpping[,3]").unwrap().probe,
            icmp("icmppingsec[,,,,,avg]").unwrap().probe
        );
    }

    #[test]
    fn icmp_limits_are_zabbix_limits() {
        assert!(icmp("icmpping[,0]").unwrap_err().0.contains("packets 0"));
        assert!(icmp("icmpping[,10001]").is_err());
        assert!(icmp("icmpping[,10000]").is_ok());
        assert!(icmp("icmpping[,3,19]").unwrap_err().0.contains("20 ms"));
        assert!(icmp("icmpping[,3,20]").is_ok());
        assert!(icmp("icmpping[,3,,23]")
            .unwrap_err()
            .0
            .contains("24..65507"));
        assert!(icmp("icmpping[,3,,65508]").is_err());
        assert!(icmp("icmpping[,3,,65507]").is_ok());
        assert!(icmp("icmpping[,3,,,49]").unwrap_err().0.contains("50 ms"));
        assert!(icmp("icmpping[,3,,,50]").is_ok());
        assert!(icmp("icmpping[router.example,3]")
            .unwrap_err()
            .0
            .contains("not resolved"));
        assert!(icmp("icmppingsec[,,,,,median]").is_err());
        assert!(
            icmp("icmpping[,,,,,avg]").is_err(),
            "mode only exists for icmppingsec"
        );
        assert!(icmp("icmpping[,x]").is_err());
    }

    /// Zabbix's pinger reads numbers with zbx_is_uint31 (digits only), and its key
    /// parser keeps an unquoted parameter's trailing spaces (`key[ a ]` is "a "): it
    /// refuses these keys ("Number of packets ... is not between 1 and 10000").
    #[test]
    fn icmp_numbers_are_digits_only_as_in_zabbix() {
        assert_eq!(ItemKey::parse("key[ a ]").unwrap().params, strs(&["a "]));
        assert_eq!(
            ItemKey::parse(
                r#"key["\"aaa\"", "bbb","ccc" , "ddd" ,"", "",, ,  ,eee, fff,ggg , hhh" ]"#
            )
            .unwrap()
            .params,
            strs(&[
                r#""aaa""#, "bbb", "ccc", "ddd", "", "", "", "", "", "eee", "fff", "ggg ",
                r#"hhh" "#
            ])
        );
        assert_eq!(
            ItemKey::parse("key[[a ,b]]").unwrap().params,
            vec![Param::Array(vec!["a ".into(), "b".into()])]
        );
        for (key, what) in [
            ("icmpping[,+3,+20,+68,+500]", "packets \"+3\""),
            ("icmpping[,3 ]", "packets \"3 \""),
            ("icmpping[,3,20 ]", "interval \"20 \""),
            ("icmpping[,,,+68]", "size \"+68\""),
            ("icmpping[,,,,500 ]", "timeout \"500 \""),
            ("icmppingretry[,+1]", "retries \"+1\""),
            ("icmpping[,\" 3\"]", "packets \" 3\""),
            ("icmpping[,3e0]", "packets \"3e0\""),
        ] {
            let e = icmp(key).unwrap_err().0;
            assert!(e.contains(what), "{key}: {e}");
        }
        // Spaces before a parameter are skipped, a quoted number is a number.
        assert_eq!(
            icmp("icmpping[, 3]").unwrap(),
            icmp("icmpping[,3]").unwrap()
        );
        assert_eq!(
            icmp("icmpping[,\"3\" ]").unwrap(),
            icmp("icmpping[,3]").unwrap()
        );
        // Too many digits: out of range, not "not an integer".
        let e = icmp("icmpping[,99999999999999999999999]").unwrap_err().0;
        assert!(e.contains("outside Zabbix's limits"), "{e}");
    }

    #[test]
    fn icmppingretry_of_zabbix_7_4() {
        // Defaults: one retry, backoff 1.0, the [icmp] size and timeout.
        let k = icmp("icmppingretry").unwrap();
        assert_eq!(k.metric, IcmpMetric::Ping);
        let d = IcmpDefaults::default();
        assert_eq!(
            (
                k.probe.packets,
                k.probe.retry(),
                k.probe.size,
                k.probe.timeout()
            ),
            (2, Some(icmp::Retry { backoff_pct: 100 }), d.size, d.timeout)
        );
        assert_eq!(
            k.probe.interval_ms, 0,
            "not used: a retry leaves at a timeout"
        );
        let k = icmp("icmppingretry[127.0.0.9,3,1.5,32,200]").unwrap();
        assert_eq!(k.probe.target, Some("127.0.0.9".parse().unwrap()));
        assert_eq!(k.probe.packets, 4);
        assert_eq!(k.probe.retry_backoff_pct, 150);
        assert_eq!((k.probe.size, k.probe.timeout_ms), (32, 200));
        // Silent: 200 + 300 + 450 + 675 ms.
        assert_eq!(k.probe.duration(), Duration::from_millis(1625));
        let job = k.probe.job("127.0.0.1".parse().unwrap());
        assert_eq!(job.addr, "127.0.0.9".parse::<IpAddr>().unwrap());
        assert_eq!(job.retry, Some(icmp::Retry { backoff_pct: 150 }));
        assert_eq!(job.probe_timeout(3), Duration::from_millis(675));
        // No retries: one probe. Never the probe of an icmpping with as many packets.
        assert_eq!(icmp("icmppingretry[,0]").unwrap().probe.packets, 1);
        assert_ne!(
            icmp("icmppingretry[,2]").unwrap().probe,
            icmp("icmpping[,3]").unwrap().probe
        );
        assert_eq!(icmp("icmpping[,3]").unwrap().probe.retry(), None);
        for (key, why) in [
            ("icmppingretry[,1,0.9]", "outside Zabbix's range 1.0..5.0"),
            ("icmppingretry[,1,5.01]", "outside Zabbix's range 1.0..5.0"),
            ("icmppingretry[,1,1.125]", "at most two decimals"),
            ("icmppingretry[,1,x]", "not a number"),
            ("icmppingretry[,1,NaN]", "not a number"),
            (
                "icmppingretry[,-1]",
                "retries \"-1\" is not a non-negative integer",
            ),
            ("icmppingretry[,10000]", "retries 10000 outside 0..9999"),
            ("icmppingretry[,1,,,49]", "below Zabbix's minimum of 50 ms"),
            (
                "icmppingretry[,1,,,,allow_redirect]",
                "allow_redirect is not supported",
            ),
            ("icmppingretry[,1,,,,,]", "at most 6 parameters"),
            // 1 s × (5^5 − 1) / 4 = 781 s of waiting for a silent host.
            (
                "icmppingretry[,4,5,,1000]",
                "wait 781000 ms for a silent host",
            ),
        ] {
            let e = icmp(key).unwrap_err().0;
            assert!(e.contains(why), "{key}: {e}");
        }
        assert!(icmp("icmppingretry[,3,5,,1000]").is_ok(), "156 s");
        assert!(IcmpKey::is_icmp_name("icmppingretry"));
    }

    /// What a key measures is what the sweep measures: a probe the config takes (its
    /// probes within the item's interval, at most a day) is a job every sweep takes.
    /// 200 packets a second apart with a 10-minute timeout last 799 s, not the 2,000 of
    /// timeout × packets that refused it in every sweep.
    #[test]
    fn icmp_probes_last_what_their_sweep_jobs_last() {
        let addr: IpAddr = "127.0.0.1".parse().unwrap();
        for (key, lasts) in [
            ("icmpping[,200,1000,,600000]", 799_000),
            ("icmpping[,10000,20,,10000]", 209_980),
            ("icmpping[,3]", 1_040),
            ("icmppingretry[,2,2,,1000]", 7_000),
        ] {
            let p = icmp(key).unwrap().probe;
            assert_eq!(p.duration(), Duration::from_millis(lasts), "{key}");
            assert_eq!(p.job(addr).validate(0), Ok(()), "{key}");
        }
    }

    #[test]
    fn icmp_options_parameter_of_zabbix_7() {
        // Empty <options> is Zabbix's default and the same probe as no parameter.
        let plain = icmp("icmpping[,3]").unwrap();
        assert_eq!(icmp("icmpping[,3,,,,]").unwrap(), plain);
        assert_eq!(
            icmp("icmppingloss[,3,,,,]").unwrap().probe,
            icmp("icmppingloss[,3]").unwrap().probe
        );
        assert_eq!(
            icmp("icmppingsec[,3,,,,max,]").unwrap(),
            icmp("icmppingsec[,3,,,,max]").unwrap()
        );
        for key in [
            "icmpping[,3,,,,allow_redirect]",
            "icmppingsec[,3,,,,,allow_redirect]",
        ] {
            let e = icmp(key).unwrap_err().0;
            assert!(e.contains("allow_redirect is not supported"), "{key}: {e}");
        }
        assert!(icmp("icmpping[,3,,,,redirect]")
            .unwrap_err()
            .0
            .contains("unknown option \"redirect\" in parameter 6: leave it empty"));
        // A mode where the options are: only icmppingsec has one, and is told so.
        for key in ["icmppingloss[,3,,,,avg]", "icmpping[,3,,,,max]"] {
            let e = icmp(key).unwrap_err().0;
            assert!(
                e.contains("parameter 6 is options, not a mode") && e.contains("icmppingsec[,,,,,"),
                "{key}: {e}"
            );
        }
        // icmppingsec's mode a place too far, or one too early (in the timeout's place):
        // told where it goes, each parameter named by its place in the key's signature.
        let e = icmp("icmppingsec[,3,,,,,avg]").unwrap_err().0;
        assert_eq!(
            e,
            "icmppingsec: parameter 7 is options, not the mode: write \"avg\" as parameter 6, icmppingsec[,,,,,avg], and leave parameter 7 empty"
        );
        let e = icmp("icmppingsec[,,,,max]").unwrap_err().0;
        assert_eq!(
            e,
            "timeout \"max\" is not a non-negative integer (parameter 5 of icmppingsec[<target>,<packets>,<interval>,<size>,<timeout>,<mode>,<options>]): \"max\" is icmppingsec's mode, its parameter 6: icmppingsec[,,,,,max]"
        );
        let e = icmp("icmpping[,3x]").unwrap_err().0;
        assert_eq!(
            e,
            "packets \"3x\" is not a non-negative integer (parameter 2 of icmpping[<target>,<packets>,<interval>,<size>,<timeout>,<options>])"
        );
        assert_eq!(
            icmp("icmppingsec[,,,,,max]").unwrap().metric,
            IcmpMetric::Sec(RttMode::Max)
        );
        assert!(icmp("icmpping[,3,,,,,]")
            .unwrap_err()
            .0
            .contains("at most 6 parameters"));
    }

    proptest::proptest! {
        /// Keys are config input: whatever a file holds, parsing says yes or why not,
        /// and never panics (brackets, quotes, escapes, spaces, multi-byte text).
        #[test]
        fn any_key_parses_or_is_refused_without_a_panic(
            body in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::strategy::Just('['), proptest::strategy::Just(']'),
                    proptest::strategy::Just('"'), proptest::strategy::Just(','),
                    proptest::strategy::Just('\\'), proptest::strategy::Just(' '),
                    proptest::strategy::Just('+'), proptest::strategy::Just('3'),
                    proptest::strategy::Just('é'), proptest::strategy::Just('𝄞'),
                    proptest::strategy::Just('\t'), proptest::strategy::Just('a'),
                ],
                0..24,
            ),
            name in proptest::prop_oneof![
                proptest::strategy::Just("icmpping"),
                proptest::strategy::Just("icmppingsec"),
                proptest::strategy::Just("icmppingretry"),
                proptest::strategy::Just("x.y"),
            ],
        ) {
            let key = format!("{name}{}", body.iter().collect::<String>());
            if let Ok(k) = ItemKey::parse(&key) {
                if IcmpKey::is_icmp_name(&k.name) {
                    let _ = IcmpKey::parse(&k, &IcmpDefaults::default());
                }
            }
        }
    }
}
