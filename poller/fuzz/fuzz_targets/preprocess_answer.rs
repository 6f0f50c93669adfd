//! An SNMP answer of any content (an OCTET STRING of any octets, or a number) through
//! the preprocessing pipelines Zabbix's templates use, in an item of each type: never
//! panics, and what is stored is always of the item's type (the steps run on the answer
//! in its own type; their result is converted after them).
#![no_main]

use std::sync::{Arc, LazyLock};

use libfuzzer_sys::fuzz_target;
use poller::engine::Sample;
use poller::preprocess::{OnFail, Outcome, Preprocessor, Step, Steps};
use poller::snmp_convert::{convert, natural_type};
use poller::value::ValueType;
use snmp::VarValue;

fn step(kind: &str, params: &[&str]) -> Step {
    let params: Vec<String> = params.iter().map(|p| p.to_string()).collect();
    Step::parse(kind, &params).expect("a valid step")
}

fn pipelines() -> Vec<Arc<Steps>> {
    let p = |ops: Vec<poller::preprocess::Op>| Arc::new(Steps::new(ops).unwrap());
    vec![
        p(vec![
            step("REGEX", &["([0-9.]+)", "\\1"]).into(),
            step("MULTIPLIER", &["0.1"]).into(),
        ]),
        p(vec![
            step("RTRIM", &["\\n\\s"]).into(),
            step("CHANGE_PER_SECOND", &[]).on_fail(OnFail::Discard),
            step("MULTIPLIER", &["8"]).into(),
            step("DISCARD_UNCHANGED_HEARTBEAT", &["1h"]).into(),
        ]),
        p(vec![
            step("STR_REPLACE", &["\\s", ""]).into(),
            step("HEX_TO_DECIMAL", &[]).on_fail(OnFail::Value("0".into())),
            step("IN_RANGE", &["", "1000"]).into(),
        ]),
        p(vec![
            step("BOOL_TO_DECIMAL", &[]).into(),
            step("SIMPLE_CHANGE", &[]).into(),
        ]),
        p(vec![
            step("OCTAL_TO_DECIMAL", &[]).on_fail(OnFail::Message("not octal".into())),
            step("MATCHES_REGEX", &["^[0-9]+$"]).into(),
            step("DISCARD_UNCHANGED", &[]).into(),
        ]),
    ]
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let word = rest.get(..8).map_or([0; 8], |b| b.try_into().unwrap());
    let answer = match sel >> 6 {
        0 => VarValue::OctetString(rest.to_vec()),
        1 => VarValue::Integer(i64::from_be_bytes(word)),
        2 => VarValue::Counter64(u64::from_be_bytes(word)),
        _ => VarValue::Opaque(rest.to_vec()),
    };
    let vt = [ValueType::Uint, ValueType::Float, ValueType::Str][usize::from(sel % 3)];
    // Compiled once: the patterns are not what is fuzzed.
    static PIPELINES: LazyLock<Vec<Arc<Steps>>> = LazyLock::new(pipelines);
    let mut pre = Preprocessor::default();
    for (i, steps) in PIPELINES.iter().enumerate() {
        // Twice, a second apart: the change steps compute on the second.
        for clock in [1_000, 1_001] {
            let sample = Sample {
                itemid: i as u64,
                item: 0,
                host: "h".into(),
                ip: "127.0.0.1".parse().unwrap(),
                key: "k".into(),
                value_type: vt,
                clock,
                ns: 0,
                result: convert(&answer, natural_type(&answer)),
                pre: Some(steps.clone()),
            };
            if let Outcome::Keep(s) = pre.apply(sample) {
                if let Ok(v) = s.result {
                    assert_eq!(v.value_type(), vt, "stored {v:?} in a {vt} item");
                }
            }
        }
    }
});
