//! Metric primitives (atomics) and a writer for the Prometheus text exposition format
//! (version 0.0.4), shared by the poller engines, the sink and the daemon.
//!
//! Invariants:
//! * Recording is lock-free and never allocates: [`Counter`], [`Gauge`], [`FloatGauge`]
//!   and [`Histogram`] are plain atomics with `Relaxed` ordering (a scrape may see one
//!   metric a few increments ahead of another; each value on its own is exact).
//! * Labels are not looked up at record time: the owner keeps one instance per label
//!   value (e.g. an array indexed by an error-reason enum) and passes the label pairs
//!   when rendering.
//! * [`Exposition`] writes `# HELP` / `# TYPE` exactly once per metric family and keeps
//!   all samples of a family together, even when the caller renders a family in several
//!   calls interleaved with others (the text format requires one group per family).
//!   Label values and help texts are escaped as the format demands (`\\`, `\"`, `\n`).
//! * A histogram's `_count` is the sum of its bucket counts (including `+Inf`), so the
//!   rendered buckets, `+Inf` and `_count` are always mutually consistent.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// A monotonically increasing count (`_total` metrics). Starts at 0.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// A counter at 0.
    pub const fn new() -> Self {
        Counter(AtomicU64::new(0))
    }

    /// Adds one.
    pub fn inc(&self) {
        self.0.fetch_add(1, Relaxed);
    }

    /// Adds `n`.
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Relaxed);
    }

    /// Current value.
    pub fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

/// An integer value that goes up and down (in-flight requests, queue depth). Starts at 0.
#[derive(Debug, Default)]
pub struct Gauge(AtomicI64);

impl Gauge {
    /// A gauge at 0.
    pub const fn new() -> Self {
        Gauge(AtomicI64::new(0))
    }

    /// Sets the value.
    pub fn set(&self, v: i64) {
        self.0.store(v, Relaxed);
    }

    /// Adds `n` (may be negative).
    pub fn add(&self, n: i64) {
        self.0.fetch_add(n, Relaxed);
    }

    /// Adds one.
    pub fn inc(&self) {
        self.add(1);
    }

    /// Subtracts one.
    pub fn dec(&self) {
        self.add(-1);
    }

    /// Current value.
    pub fn get(&self) -> i64 {
        self.0.load(Relaxed)
    }
}

/// A floating-point value that is set, not accumulated (lateness seconds, last
/// iteration time). Stored as `f64` bits. Starts at 0.0.
#[derive(Debug, Default)]
pub struct FloatGauge(AtomicU64);

impl FloatGauge {
    /// A gauge at 0.0.
    pub const fn new() -> Self {
        FloatGauge(AtomicU64::new(0)) // 0u64 is the bit pattern of +0.0
    }

    /// Sets the value.
    pub fn set(&self, v: f64) {
        self.0.store(v.to_bits(), Relaxed);
    }

    /// Current value.
    pub fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Relaxed))
    }
}

/// Default buckets for durations in seconds: 1 ms .. 60 s, covering an ICMP sweep
/// (timeout-bound, ~1 s), an SNMP iteration (timeout × retries) and a ClickHouse INSERT.
pub const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// A histogram with fixed upper bounds (`le`), recorded with atomics.
///
/// Observations above the last bound land in the implicit `+Inf` bucket. NaN
/// observations are ignored (they would poison `_sum`).
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    /// Non-cumulative count per bucket; the last slot is `+Inf`.
    counts: Box<[AtomicU64]>,
    /// Sum of observations, as `f64` bits (updated by compare-and-swap).
    sum: AtomicU64,
}

impl Histogram {
    /// A histogram over `bounds`, which must be finite and strictly increasing
    /// (checked: panics otherwise, since bounds are compile-time constants).
    pub fn new(bounds: &'static [f64]) -> Self {
        assert!(
            bounds.iter().all(|b| b.is_finite()) && bounds.windows(2).all(|w| w[0] < w[1]),
            "histogram bounds must be finite and strictly increasing"
        );
        Histogram {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
        }
    }

    /// A histogram over [`SECONDS_BUCKETS`].
    pub fn seconds() -> Self {
        Self::new(SECONDS_BUCKETS)
    }

    /// Records one observation (in the metric's base unit, seconds for durations).
    pub fn observe(&self, v: f64) {
        if v.is_nan() {
            return;
        }
        // First bucket whose upper bound is >= v (`le` is inclusive).
        let i = self.bounds.partition_point(|b| *b < v);
        self.counts[i].fetch_add(1, Relaxed);
        let mut cur = self.sum.load(Relaxed);
        loop {
            let new = (f64::from_bits(cur) + v).to_bits();
            match self.sum.compare_exchange_weak(cur, new, Relaxed, Relaxed) {
                Ok(_) => break,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Records a duration in seconds.
    pub fn observe_duration(&self, d: Duration) {
        self.observe(d.as_secs_f64());
    }

    /// A consistent-enough copy for rendering: cumulative bucket counts, sum, count.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut acc = 0u64;
        let mut buckets = Vec::with_capacity(self.bounds.len());
        for (i, b) in self.bounds.iter().enumerate() {
            acc += self.counts[i].load(Relaxed);
            buckets.push((*b, acc));
        }
        acc += self.counts[self.bounds.len()].load(Relaxed);
        HistogramSnapshot {
            buckets,
            sum: f64::from_bits(self.sum.load(Relaxed)),
            count: acc,
        }
    }
}

/// Rendered state of a [`Histogram`].
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    /// `(upper bound, cumulative count)`, bounds increasing; `+Inf` is `count`.
    pub buckets: Vec<(f64, u64)>,
    /// Sum of all observations.
    pub sum: f64,
    /// Number of observations.
    pub count: u64,
}

#[derive(Debug)]
struct Family {
    name: String,
    kind: &'static str,
    help: String,
    samples: String,
}

/// Prometheus text-format writer. Call [`counter`](Self::counter),
/// [`gauge`](Self::gauge) and [`histogram`](Self::histogram) once per sample (label
/// set), then [`finish`](Self::finish) for the body served with
/// `Content-Type: text/plain; version=0.0.4`.
///
/// Families are emitted in the order they were first seen. Rendering the same family
/// with another type than the first time is a programming error: the sample is still
/// written under the first type (and a debug build panics).
#[derive(Debug, Default)]
pub struct Exposition {
    families: Vec<Family>,
}

impl Exposition {
    /// An empty exposition.
    pub fn new() -> Self {
        Self::default()
    }

    fn family(&mut self, name: &str, kind: &'static str, help: &str) -> &mut String {
        debug_assert!(valid_metric_name(name), "invalid metric name {name:?}");
        let i = match self.families.iter().rposition(|f| f.name == name) {
            Some(i) => {
                debug_assert_eq!(
                    self.families[i].kind, kind,
                    "metric {name} rendered with two types"
                );
                i
            }
            None => {
                self.families.push(Family {
                    name: name.to_owned(),
                    kind,
                    help: help.to_owned(),
                    samples: String::new(),
                });
                self.families.len() - 1
            }
        };
        &mut self.families[i].samples
    }

    /// One sample of a counter family. `name` should end in `_total`.
    pub fn counter(&mut self, name: &str, help: &str, labels: &[(&str, &str)], value: u64) {
        let out = self.family(name, "counter", help);
        sample(out, name, "", labels, None, &value.to_string());
    }

    /// One sample of a gauge family.
    pub fn gauge(&mut self, name: &str, help: &str, labels: &[(&str, &str)], value: f64) {
        let out = self.family(name, "gauge", help);
        sample(out, name, "", labels, None, &fmt_f64(value));
    }

    /// One labelled histogram: `_bucket` lines (cumulative, `le` last), `_sum`, `_count`.
    pub fn histogram(&mut self, name: &str, help: &str, labels: &[(&str, &str)], h: &Histogram) {
        let snap = h.snapshot();
        self.histogram_snapshot(name, help, labels, &snap);
    }

    /// Like [`histogram`](Self::histogram) from an already taken snapshot.
    pub fn histogram_snapshot(
        &mut self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
        snap: &HistogramSnapshot,
    ) {
        let out = self.family(name, "histogram", help);
        for (bound, count) in &snap.buckets {
            sample(
                out,
                name,
                "_bucket",
                labels,
                Some(&fmt_f64(*bound)),
                &count.to_string(),
            );
        }
        sample(
            out,
            name,
            "_bucket",
            labels,
            Some("+Inf"),
            &snap.count.to_string(),
        );
        sample(out, name, "_sum", labels, None, &fmt_f64(snap.sum));
        sample(out, name, "_count", labels, None, &snap.count.to_string());
    }

    /// The exposition text (empty when nothing was written).
    pub fn finish(self) -> String {
        let mut out = String::with_capacity(
            self.families
                .iter()
                .map(|f| f.samples.len() + f.help.len() + 64)
                .sum(),
        );
        for f in &self.families {
            out.push_str("# HELP ");
            out.push_str(&f.name);
            out.push(' ');
            escape_into(&mut out, &f.help, false);
            out.push('\n');
            let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind);
            out.push_str(&f.samples);
        }
        out
    }
}

fn sample(
    out: &mut String,
    name: &str,
    suffix: &str,
    labels: &[(&str, &str)],
    le: Option<&str>,
    value: &str,
) {
    out.push_str(name);
    out.push_str(suffix);
    if !labels.is_empty() || le.is_some() {
        out.push('{');
        let mut first = true;
        for (k, v) in labels.iter().copied().chain(le.map(|le| ("le", le))) {
            debug_assert!(valid_label_name(k), "invalid label name {k:?}");
            if !first {
                out.push(',');
            }
            first = false;
            out.push_str(k);
            out.push_str("=\"");
            escape_into(out, v, true);
            out.push('"');
        }
        out.push('}');
    }
    out.push(' ');
    out.push_str(value);
    out.push('\n');
}

/// Escapes `\` and newline (help text), and also `"` (label values).
fn escape_into(out: &mut String, s: &str, quote: bool) {
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if quote => out.push_str("\\\""),
            c => out.push(c),
        }
    }
}

/// Float in the spelling Prometheus parses (Go `ParseFloat`): `+Inf`, `-Inf`, `NaN`.
fn fmt_f64(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        v.to_string()
    }
}

fn valid_metric_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn valid_label_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !s.starts_with("__")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A parsed sample: (name, labels with unescaped values, value text).
    type Parsed = (String, BTreeMap<String, String>, String);

    /// Minimal parser of the text format, strict about the things we promise:
    /// HELP then TYPE once per family, samples of a family contiguous, escapes valid.
    fn parse(text: &str) -> (Vec<(String, String, String)>, Vec<Parsed>) {
        let mut families: Vec<(String, String, String)> = Vec::new();
        let mut samples = Vec::new();
        let mut pending_help: Option<(String, String)> = None;
        let mut current: Option<String> = None;
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, help) = rest.split_once(' ').unwrap();
                assert!(
                    families.iter().all(|f| f.0 != name),
                    "HELP twice for {name}"
                );
                pending_help = Some((name.into(), unescape(help, false)));
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                let (hname, help) = pending_help.take().expect("TYPE without HELP");
                assert_eq!(hname, name);
                families.push((name.into(), kind.into(), help));
                current = Some(name.into());
            } else {
                let fam = current.as_deref().expect("sample before TYPE");
                let (head, value) = line.rsplit_once(' ').unwrap();
                let (name, labels) = match head.split_once('{') {
                    Some((n, l)) => (n, parse_labels(l.strip_suffix('}').unwrap())),
                    None => (head, BTreeMap::new()),
                };
                let base = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| name.strip_suffix(s))
                    .filter(|b| *b == fam);
                assert!(
                    name == fam || base.is_some(),
                    "sample {name} outside its family {fam}"
                );
                samples.push((name.into(), labels, value.into()));
            }
        }
        (families, samples)
    }

    fn parse_labels(s: &str) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let mut rest = s;
        while !rest.is_empty() {
            let (k, after) = rest.split_once("=\"").unwrap();
            // Find the closing quote that is not escaped.
            let mut end = None;
            let mut esc = false;
            for (i, c) in after.char_indices() {
                match (esc, c) {
                    (true, _) => esc = false,
                    (false, '\\') => esc = true,
                    (false, '"') => {
                        end = Some(i);
                        break;
                    }
                    _ => {}
                }
            }
            let end = end.expect("unterminated label value");
            assert!(!after[..end].contains('\n'));
            out.insert(k.to_owned(), unescape(&after[..end], true));
            rest = after[end + 1..]
                .strip_prefix(',')
                .unwrap_or(&after[end + 1..]);
        }
        out
    }

    fn unescape(s: &str, quote: bool) -> String {
        let mut out = String::new();
        let mut it = s.chars();
        while let Some(c) = it.next() {
            if c == '\\' {
                match it.next() {
                    Some('\\') => out.push('\\'),
                    Some('n') => out.push('\n'),
                    Some('"') if quote => out.push('"'),
                    other => panic!("invalid escape \\{other:?} in {s:?}"),
                }
            } else {
                assert!(!(quote && c == '"'), "unescaped quote in {s:?}");
                out.push(c);
            }
        }
        out
    }

    #[test]
    fn counter_and_gauge_exact_text() {
        let polled = [Counter::new(), Counter::new()];
        polled[0].add(41);
        polled[0].inc();
        polled[1].inc();
        let inflight = Gauge::new();
        inflight.add(5);
        inflight.dec();
        let lateness = FloatGauge::new();
        lateness.set(0.25);

        let mut e = Exposition::new();
        for (engine, c) in ["icmp", "snmp"].iter().zip(&polled) {
            e.counter(
                "netpoller_items_polled_total",
                "Items polled.",
                &[("engine", engine)],
                c.get(),
            );
        }
        e.gauge(
            "netpoller_inflight",
            "Requests in flight.",
            &[],
            inflight.get() as f64,
        );
        e.gauge(
            "netpoller_lateness_seconds",
            "Lateness.",
            &[("engine", "icmp")],
            lateness.get(),
        );
        assert_eq!(
            e.finish(),
            "# HELP netpoller_items_polled_total Items polled.\n\
             # TYPE netpoller_items_polled_total counter\n\
             netpoller_items_polled_total{engine=\"icmp\"} 42\n\
             netpoller_items_polled_total{engine=\"snmp\"} 1\n\
             # HELP netpoller_inflight Requests in flight.\n\
             # TYPE netpoller_inflight gauge\n\
             netpoller_inflight 4\n\
             # HELP netpoller_lateness_seconds Lateness.\n\
             # TYPE netpoller_lateness_seconds gauge\n\
             netpoller_lateness_seconds{engine=\"icmp\"} 0.25\n"
        );
    }

    #[test]
    fn histogram_exact_text_and_bucket_edges() {
        // Binary-exact values so that `_sum` is exact.
        static B: &[f64] = &[0.125, 1.0, 2.5];
        let h = Histogram::new(B);
        h.observe(0.125); // le is inclusive: first bucket
        h.observe(0.5);
        h.observe(1.0);
        h.observe(3.0); // +Inf only
        h.observe(f64::NAN); // ignored
        h.observe_duration(Duration::from_micros(62_500));
        let mut e = Exposition::new();
        e.histogram(
            "netpoller_iteration_seconds",
            "Iteration wall time.",
            &[("engine", "snmp")],
            &h,
        );
        assert_eq!(
            e.finish(),
            "# HELP netpoller_iteration_seconds Iteration wall time.\n\
             # TYPE netpoller_iteration_seconds histogram\n\
             netpoller_iteration_seconds_bucket{engine=\"snmp\",le=\"0.125\"} 2\n\
             netpoller_iteration_seconds_bucket{engine=\"snmp\",le=\"1\"} 4\n\
             netpoller_iteration_seconds_bucket{engine=\"snmp\",le=\"2.5\"} 4\n\
             netpoller_iteration_seconds_bucket{engine=\"snmp\",le=\"+Inf\"} 5\n\
             netpoller_iteration_seconds_sum{engine=\"snmp\"} 4.6875\n\
             netpoller_iteration_seconds_count{engine=\"snmp\"} 5\n"
        );
    }

    #[test]
    fn escaping_of_label_values_and_help() {
        let mut e = Exposition::new();
        let nasty = "C:\\dir \"quoted\"\nnext line";
        e.counter(
            "x_total",
            "Help with \\ and\nnewline \"kept\".",
            &[("host", nasty), ("k", "")],
            7,
        );
        let text = e.finish();
        assert_eq!(
            text,
            "# HELP x_total Help with \\\\ and\\nnewline \"kept\".\n\
             # TYPE x_total counter\n\
             x_total{host=\"C:\\\\dir \\\"quoted\\\"\\nnext line\",k=\"\"} 7\n"
        );
        let (fams, samples) = parse(&text);
        assert_eq!(
            fams,
            vec![(
                "x_total".into(),
                "counter".into(),
                "Help with \\ and\nnewline \"kept\".".into()
            )]
        );
        assert_eq!(samples[0].1["host"], nasty);
        assert_eq!(samples[0].1["k"], "");
    }

    #[test]
    fn interleaved_families_are_grouped_with_one_header() {
        let mut e = Exposition::new();
        e.counter("a_total", "A.", &[("shard", "0")], 1);
        e.gauge("b", "B.", &[("shard", "0")], 2.0);
        e.counter("a_total", "A.", &[("shard", "1")], 3);
        e.gauge("b", "B.", &[("shard", "1")], f64::INFINITY);
        let text = e.finish();
        let (fams, samples) = parse(&text);
        assert_eq!(
            fams.iter().map(|f| f.0.as_str()).collect::<Vec<_>>(),
            ["a_total", "b"]
        );
        let got: Vec<_> = samples
            .iter()
            .map(|(n, l, v)| format!("{n}/{}/{v}", l.get("shard").map_or("", |s| s)))
            .collect();
        assert_eq!(got, ["a_total/0/1", "a_total/1/3", "b/0/2", "b/1/+Inf"]);
    }

    #[test]
    fn parsed_histogram_is_consistent() {
        let h = Histogram::seconds();
        for i in 0..1000u32 {
            h.observe(f64::from(i) * 0.0001);
        }
        h.observe(100.0);
        let mut e = Exposition::new();
        e.histogram("h_seconds", "H.", &[], &h);
        let (_, samples) = parse(&e.finish());
        let buckets: Vec<(String, u64)> = samples
            .iter()
            .filter(|s| s.0 == "h_seconds_bucket")
            .map(|s| (s.1["le"].clone(), s.2.parse().unwrap()))
            .collect();
        assert_eq!(buckets.len(), SECONDS_BUCKETS.len() + 1);
        assert!(
            buckets.windows(2).all(|w| w[0].1 <= w[1].1),
            "cumulative: {buckets:?}"
        );
        assert_eq!(buckets.last().unwrap(), &("+Inf".to_string(), 1001));
        // 0.0000 .. 0.0010 inclusive: 11 observations at or below 1 ms.
        assert_eq!(buckets[0], ("0.001".to_string(), 11));
        let count = samples.iter().find(|s| s.0 == "h_seconds_count").unwrap();
        assert_eq!(count.2, "1001");
        let sum: f64 = samples
            .iter()
            .find(|s| s.0 == "h_seconds_sum")
            .unwrap()
            .2
            .parse()
            .unwrap();
        assert!((sum - (49.95 + 100.0)).abs() < 1e-9, "{sum}");
    }

    #[test]
    fn concurrent_recording_is_exact() {
        let c = Counter::new();
        let h = Histogram::seconds();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..10_000 {
                        c.inc();
                        h.observe(0.5);
                    }
                });
            }
        });
        assert_eq!(c.get(), 40_000);
        let snap = h.snapshot();
        assert_eq!(snap.count, 40_000);
        assert_eq!(snap.sum, 20_000.0);
    }

    #[test]
    #[should_panic(expected = "strictly increasing")]
    fn unsorted_bounds_rejected() {
        static B: &[f64] = &[1.0, 0.5];
        let _ = Histogram::new(B);
    }

    #[test]
    fn empty_exposition_is_empty() {
        assert_eq!(Exposition::new().finish(), "");
    }
}
