//! Preprocessing cost per value (the consumer runs it on every value of an item with
//! steps), for the pipelines Zabbix's network templates put on SNMP items:
//!
//! * `none`: an item without steps (the baseline: `apply` hands the sample back);
//! * `counter_bps`: `ifHCInOctets` as bits per second, `CHANGE_PER_SECOND` then
//!   `MULTIPLIER 8` on a Counter64;
//! * `alias_heartbeat`: `ifAlias`, text, `DISCARD_UNCHANGED_HEARTBEAT 1h` (unchanged:
//!   discarded);
//! * `firmware_regex`: `sysDescr` → firmware version by `REGEX`, then
//!   `DISCARD_UNCHANGED_HEARTBEAT 1d`;
//! * `text_to_number`: a gauge a device reports as text (`"23.5 C"`) into a float item,
//!   `REGEX` then `MULTIPLIER`.
//!
//! 10,000 items per batch (one value each, their clocks 10 s after the last batch's),
//! so the per-item memory is a realistic hash map. Reported per value.
//!
//! Run: `cargo bench -p poller --bench preprocess`

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use poller::engine::Sample;
use poller::preprocess::{Outcome, Preprocessor, Step, Steps};
use poller::value::{Value, ValueType};

const ITEMS: u64 = 10_000;

/// The pipeline, or why it does not load (an A/B against a build that refuses it).
fn steps(list: &[(&str, &[&str])]) -> Result<Option<Arc<Steps>>, String> {
    let steps = list
        .iter()
        .map(|(kind, params)| {
            let params: Vec<String> = params.iter().map(|p| p.to_string()).collect();
            Step::parse(kind, &params)
        })
        .collect::<Result<Vec<Step>, String>>()?;
    Ok(Some(Arc::new(Steps::new(steps)?)))
}

fn batch(
    pre: &Option<Arc<Steps>>,
    vt: ValueType,
    clock: u32,
    value: impl Fn(u64) -> Value,
) -> Vec<Sample> {
    let host: Arc<str> = "core-1".into();
    let key: Arc<str> = "k".into();
    (0..ITEMS)
        .map(|itemid| Sample {
            itemid,
            item: 0,
            host: host.clone(),
            ip: "127.0.0.1".parse().unwrap(),
            key: key.clone(),
            value_type: vt,
            clock,
            ns: 0,
            result: Ok(value(itemid)),
            pre: pre.clone(),
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let ios = "Cisco IOS Software, C2960X Software (C2960X-UNIVERSALK9-M), Version 15.2(4)E7, RELEASE SOFTWARE (fc2)";
    type Case = (
        &'static str,
        Result<Option<Arc<Steps>>, String>,
        ValueType,
        Box<dyn Fn(u32, u64) -> Value>,
    );
    let cases: Vec<Case> = vec![
        (
            "none",
            Ok(None),
            ValueType::Uint,
            Box::new(|clock, id| Value::Uint(u64::from(clock) * 1_000 + id)),
        ),
        (
            "counter_bps",
            steps(&[("CHANGE_PER_SECOND", &[]), ("MULTIPLIER", &["8"])]),
            ValueType::Uint,
            Box::new(|clock, id| Value::Uint(u64::from(clock) * 125_000 + id)),
        ),
        (
            "alias_heartbeat",
            steps(&[("DISCARD_UNCHANGED_HEARTBEAT", &["1h"])]),
            ValueType::Str,
            Box::new(|_, id| Value::Str(format!("uplink to dist-{id}"))),
        ),
        (
            "firmware_regex",
            steps(&[
                ("REGEX", &["Version ([^,]+), RELEASE", "\\1"]),
                ("DISCARD_UNCHANGED_HEARTBEAT", &["1d"]),
            ]),
            ValueType::Str,
            Box::new(move |_, _| Value::Str(ios.to_string())),
        ),
        (
            "text_to_number",
            steps(&[("REGEX", &["([0-9.]+) C", "\\1"]), ("MULTIPLIER", &["0.5"])]),
            ValueType::Float,
            Box::new(|clock, id| Value::Str(format!("{}.5 C", (u64::from(clock) + id) % 90))),
        ),
    ];
    let mut g = c.benchmark_group("preprocess");
    g.throughput(Throughput::Elements(ITEMS));
    for (name, pre, vt, value) in &cases {
        let pre = match pre {
            Ok(pre) => pre,
            Err(e) => {
                eprintln!("preprocess/{name}: not run, the pipeline does not load: {e}");
                continue;
            }
        };
        let mut p = Preprocessor::default();
        let mut clock = 1_700_000_000u32;
        g.bench_function(*name, |b| {
            b.iter_batched(
                || {
                    clock += 10;
                    batch(pre, *vt, clock, |id| value(clock, id))
                },
                |samples| {
                    let mut kept = 0usize;
                    for s in samples {
                        if let Outcome::Keep(s) = p.apply(s) {
                            kept += usize::from(s.result.is_ok());
                        }
                    }
                    kept
                },
                BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
