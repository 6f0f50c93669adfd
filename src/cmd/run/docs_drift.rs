//! What README.md and docs/production.md tell the reader of `/metrics` and of the log,
//! held against what `run` serves and the code logs: every metric named exists, with
//! the labels and label values named, `rate()`/`increase()` is only applied to
//! counters (or a histogram's buckets), and every log message quoted is one the code
//! writes, word for word, as is every SNMP item error quoted. Alerts written from the
//! docs otherwise fail silently: a PromQL selector that matches nothing never fires.

use std::collections::{BTreeMap, BTreeSet};

use poller::daemon::{Clock, Limits, Shared};
use poller::plan::Plan;

use crate::discovery::DiscoveryMetrics;
use crate::test_util::doc;

/// The documents an operator reads the metrics and the log from.
const DOCS: [&str; 2] = ["README.md", "docs/production.md"];

/// One metric as `/metrics` serves it.
#[derive(Default)]
struct Metric {
    /// `counter`, `gauge` or `histogram`.
    kind: String,
    /// Each label's values across the metric's samples.
    labels: BTreeMap<String, BTreeSet<String>>,
}

/// `/metrics` of a daemon (nothing to poll), parsed by metric name (a histogram's
/// `_bucket`, `_sum` and `_count` samples under the histogram's own name).
fn served() -> BTreeMap<String, Metric> {
    let plan = Plan::build(Vec::new());
    let shared = Shared::new(plan, 2, Clock::new(), Limits::default());
    let text = super::render_metrics(
        &shared,
        &DiscoveryMetrics::default(),
        &sink::SinkMetrics::default(),
    );
    let mut metrics: BTreeMap<String, Metric> = BTreeMap::new();
    for line in text.lines() {
        if let Some(t) = line.strip_prefix("# TYPE ") {
            let (name, kind) = t.split_once(' ').unwrap();
            metrics.entry(name.to_string()).or_default().kind = kind.to_string();
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let series = line.rsplit_once(' ').unwrap().0;
        let (name, labels) = match series.split_once('{') {
            Some((n, l)) => (n, l.trim_end_matches('}')),
            None => (series, ""),
        };
        let base = ["_bucket", "_sum", "_count"]
            .iter()
            .filter_map(|s| name.strip_suffix(s))
            .find(|b| metrics.get(*b).is_some_and(|m| m.kind == "histogram"))
            .unwrap_or(name);
        let m = metrics
            .get_mut(base)
            .unwrap_or_else(|| panic!("no TYPE for {line}"));
        for pair in labels.split(',').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap();
            let v = v.trim_matches('"').to_string();
            m.labels.entry(k.to_string()).or_default().insert(v);
        }
    }
    metrics
}

/// The served metric `name` stands for: itself, or the histogram whose series it is.
fn metric_of<'a>(served: &'a BTreeMap<String, Metric>, name: &str) -> Option<&'a Metric> {
    served.get(name).or_else(|| {
        ["_bucket", "_sum", "_count"]
            .iter()
            .filter_map(|s| name.strip_suffix(s))
            .filter_map(|b| served.get(b))
            .find(|m| m.kind == "histogram")
    })
}

/// Every metric name, label and label value the documents give exists as served:
/// in selectors (`name{label="v"}`, `=~` alternatives, a bare label name), and in
/// the alert table's "label `reason`: `spool_cap`, ..." lists.
#[test]
fn the_docs_name_metrics_labels_and_values_as_served() {
    let served = served();
    let selector = regex::Regex::new(r"netpoller_[a-z0-9_]*[a-z0-9*](?:\{([^}]*)\})?").unwrap();
    let matcher = regex::Regex::new(r#"^\s*([a-z_]+)\s*(?:(=~|!=|=)\s*"([^"]*)")?\s*$"#).unwrap();
    let label_list = regex::Regex::new(r"label `([a-z_]+)`: ([^)|]*)").unwrap();
    let ticked = regex::Regex::new(r"`([a-z_0-9]+)`").unwrap();
    let mut named = 0;
    for path in DOCS {
        let text = doc(path);
        for m in selector.captures_iter(&text) {
            let full = m.get(0).unwrap().as_str();
            let name = full.split('{').next().unwrap();
            named += 1;
            if let Some(prefix) = name.strip_suffix('*') {
                assert!(
                    served.keys().any(|k| k.starts_with(prefix)),
                    "{path}: no metric is {name}"
                );
                continue;
            }
            let metric =
                metric_of(&served, name).unwrap_or_else(|| panic!("{path}: {name} is not served"));
            let Some(sel) = m.get(1) else { continue };
            // In a Markdown table a `|` of PromQL is written `\|`.
            let sel = sel.as_str().replace("\\|", "|");
            for part in sel.split(',') {
                let c = matcher
                    .captures(part)
                    .unwrap_or_else(|| panic!("{path}: cannot read {full}"));
                let label = &c[1];
                let values = metric
                    .labels
                    .get(label)
                    .unwrap_or_else(|| panic!("{path}: {name} has no label `{label}` ({full})"));
                let Some(want) = c.get(3) else { continue };
                let regex = &c[2] == "=~";
                // `reason="too_big|short|silent"`: the README's shorthand for each.
                for alt in want.as_str().split('|') {
                    let ok = if regex {
                        let re = regex::Regex::new(&format!("^(?:{alt})$")).unwrap();
                        values.iter().any(|v| re.is_match(v))
                    } else {
                        values.contains(alt)
                    };
                    assert!(
                        ok,
                        "{path}: {name}{{{label}}} has no value {alt:?}: {values:?}"
                    );
                }
            }
        }
        // "(label `reason`: `spool_cap`, `spool_write`, ...)" in a row of the table.
        for line in text.lines() {
            let names: Vec<&str> = selector
                .find_iter(line)
                .map(|m| m.as_str().split('{').next().unwrap())
                .collect();
            for c in label_list.captures_iter(line) {
                let label = &c[1];
                let metric = names
                    .iter()
                    .filter_map(|n| metric_of(&served, n))
                    .find(|m| m.labels.contains_key(label))
                    .unwrap_or_else(|| panic!("{path}: no metric of `{line}` has `{label}`"));
                for v in ticked.captures_iter(&c[2]) {
                    assert!(
                        metric.labels[label].contains(&v[1]),
                        "{path}: label `{label}` has no value `{}`: {line}",
                        &v[1]
                    );
                }
            }
        }
    }
    assert!(named > 40, "{named} metric names found in the docs");
}

/// `rate()` and `increase()` of a gauge mean nothing (and `increase` of a gauge that
/// goes down reads as a reset): the documents apply them to counters and to a
/// histogram's buckets only.
#[test]
fn the_docs_rate_counters_only() {
    let served = served();
    let rated = regex::Regex::new(r"\b(rate|irate|increase)\((netpoller_[a-z0-9_]+)").unwrap();
    let mut seen = 0;
    for path in DOCS {
        for c in rated.captures_iter(&doc(path)) {
            let name = &c[2];
            seen += 1;
            let ok = match served.get(name) {
                Some(m) => m.kind == "counter",
                None => name
                    .strip_suffix("_bucket")
                    .and_then(|b| served.get(b))
                    .is_some_and(|m| m.kind == "histogram"),
            };
            assert!(
                ok,
                "{path}: {}({name}) of a metric that is no counter",
                &c[1]
            );
        }
    }
    assert!(seen > 10, "{seen} rates found in the docs");
}

/// The text of every `.rs` file under `dir` but this one (which quotes the messages).
fn sources(dir: &std::path::Path, out: &mut String) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with(file!()) {
            out.push_str(&std::fs::read_to_string(&path).unwrap());
        }
    }
}

/// Log messages the documents quote without a level, so that operators grep for them.
const QUOTED: [&str; 8] = [
    "items supported again",
    "ClickHouse lacked the schema; created what was missing",
    "a table's columns do not match what netpoller writes",
    "is this ClickHouse's HTTP port?",
    "trends are off",
    "the last run did not stop",
    "ClickHouse refuses records of this segment",
    "discovery: the rows found on this host were refused",
];

/// The log lines the documents quote (`WARN sink: ClickHouse unavailable, ...`, the
/// message up to its first field, and [`QUOTED`]) are written by the code in those
/// words: an operator greps the journal for them.
#[test]
fn the_docs_quote_log_messages_the_code_writes() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut code = String::new();
    for krate in [
        "src",
        "sink/src",
        "poller/src",
        "icmp/src",
        "snmp/src",
        "exposition/src",
    ] {
        sources(&root.join(krate), &mut code);
    }
    let leveled = regex::Regex::new(r"`(?:ERROR|WARN|INFO|DEBUG) ([^`]+)`").unwrap();
    let field = regex::Regex::new(r" [a-z_]+=| \.\.\.").unwrap();
    let mut messages: Vec<String> = QUOTED.iter().map(ToString::to_string).collect();
    let all: String = DOCS.iter().map(|p| doc(p)).collect::<Vec<_>>().join("\n");
    let flat = all.split_whitespace().collect::<Vec<_>>().join(" ");
    for q in QUOTED {
        assert!(flat.contains(q), "the docs no longer quote {q:?}");
    }
    for c in leveled.captures_iter(&all) {
        let line = c[1].split_whitespace().collect::<Vec<_>>().join(" ");
        let end = field.find(&line).map_or(line.len(), |m| m.start());
        messages.push(line[..end].to_string());
    }
    assert!(messages.len() > QUOTED.len() + 4, "{messages:?}");
    for m in messages {
        assert!(
            code.contains(&m),
            "the docs quote a log message no code writes: {m:?}"
        );
    }
}

/// The SNMP item errors README.md and docs/production.md quote (Zabbix's words first,
/// then netpoller's detail) are the texts the code gives those failures, word for
/// word: an operator compares them with Zabbix's, and a preprocessing rule or a search
/// is written from them.
#[test]
fn the_docs_quote_snmp_item_errors_the_code_writes() {
    use poller::snmp_driver::{item_error, SnmpHostJob};
    use snmp::v3::ReportKind;
    use snmp::{ErrorStatus, ItemFailure, VarValue};

    let job = SnmpHostJob::new("127.0.0.1:161".parse().unwrap(), "public".into(), vec![]);
    let no_such_object =
        poller::snmp_convert::convert(&VarValue::NoSuchObject, poller::value::ValueType::Uint)
            .unwrap_err()
            .text;
    let mut quoted = vec![no_such_object];
    for f in [
        ItemFailure::ErrorStatus(ErrorStatus::NO_SUCH_NAME),
        ItemFailure::ErrorIndexOutOfBounds {
            status: ErrorStatus::NO_SUCH_NAME,
            index: 11,
            oids: 10,
        },
        ItemFailure::Timeout,
        ItemFailure::DiscoveryTimeout,
        ItemFailure::TimeoutDiscoveryAnswered,
        ItemFailure::Report(ReportKind::UnknownUserName),
        ItemFailure::Report(ReportKind::WrongDigest),
        ItemFailure::EmptyResponse,
        ItemFailure::TooManyVarbinds {
            count: 2,
            first: "1.3.6.1.2.1.1.5.0".parse().unwrap(),
        },
    ] {
        quoted.push(item_error(&job, &f).text);
    }
    let all: String = DOCS.iter().map(|p| doc(p)).collect::<Vec<_>>().join("\n");
    let flat = all.split_whitespace().collect::<Vec<_>>().join(" ");
    for q in quoted {
        assert!(
            flat.contains(&format!("`{q}`")),
            "the docs no longer quote {q:?}"
        );
    }
    // The IPv6 form and net-snmp's genErr text, as the README states them.
    let v6 = SnmpHostJob::new("[::1]:161".parse().unwrap(), "public".into(), vec![]);
    assert!(item_error(&v6, &ItemFailure::Timeout)
        .text
        .contains("\"[::1]:161\""));
    assert!(flat.contains("`[::1]:161`"));
    let gen_err = ItemFailure::ErrorStatus(ErrorStatus::GEN_ERR).to_string();
    assert!(gen_err.contains("(genError) A general failure occured"));
    assert!(flat.contains("`(genError) A general failure occured`"));
}
