//! What a stop and the next start pay to keep the trends hours still open
//! (`Trends::save_open` at stop, `Trends::restore_open` at start), per item with an open
//! hour: 100,000 SNMP items on 10,000 switches (names as a network's: `sw-10-0-1-7`,
//! `net.if.in[ifHCInOctets.12]`), every item with a value this hour. Reported per item;
//! the bytes per item are printed once.
//!
//! Run: `cargo bench -p poller --bench trends`

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use poller::engine::Sample;
use poller::plan::{derive_itemid, HostSpec, ItemKind, ItemSpec, Plan};
use poller::trends::{Restored, SavedBy, Trends};
use poller::value::{Value, ValueType};
use std::sync::Arc;

const HOSTS: u32 = 10_000;
const PER_HOST: u32 = 10;

fn plan() -> Arc<Plan> {
    let hosts = (0..HOSTS)
        .map(|h| {
            let name = format!("sw-10-0-{}-{}", h / 250, h % 250);
            let items = (0..PER_HOST)
                .map(|i| {
                    let key = format!("net.if.in[ifHCInOctets.{i}]");
                    ItemSpec {
                        itemid: derive_itemid(&name, &key),
                        key: key.into(),
                        value_type: if i % 2 == 0 {
                            ValueType::Uint
                        } else {
                            ValueType::Float
                        },
                        interval_ms: 60_000,
                        kind: ItemKind::Snmp {
                            oid: snmp::Oid::from_arcs(&[1, 3, 6, 1, 2, 1, 31, 1, 1, 1, 6, i])
                                .unwrap(),
                        },
                        pre: None,
                    }
                })
                .collect();
            HostSpec {
                name: name.into(),
                ip: "127.0.0.1".parse().unwrap(),
                snmp: None,
                items,
            }
        })
        .collect();
    Arc::new(Plan::build(hosts))
}

fn bench(c: &mut Criterion) {
    let plan = plan();
    let now = poller::engine::clock_now();
    let mut t = Trends::new(plan.clone());
    let mut out = Vec::new();
    for task in &plan.tasks {
        let host = &plan.hosts[task.host as usize];
        for i in task.items.clone() {
            let v = match plan.items[i as usize].value_type {
                ValueType::Float => Value::Float(f64::from(i)),
                _ => Value::Uint(u64::from(i)),
            };
            t.record(&Sample::new(&plan, host, i, now, Ok(v)), &mut out);
        }
    }
    let items = plan.items.len() as u64;
    let mut saved = Vec::new();
    assert_eq!(t.save_open(&mut saved).unwrap(), items);
    println!(
        "trends open hours: {items} items, {} bytes saved, {:.1} bytes per item",
        saved.len(),
        saved.len() as f64 / items as f64
    );
    let hour = now.0 / 3600;
    let mut g = c.benchmark_group("trends_open_hours");
    g.throughput(Throughput::Elements(items));
    g.bench_function("save", |b| {
        let mut buf = Vec::with_capacity(saved.len());
        b.iter(|| {
            buf.clear();
            t.save_open(&mut buf).unwrap()
        })
    });
    g.bench_function("restore", |b| {
        b.iter_batched(
            || Trends::new(plan.clone()),
            |mut fresh| {
                let mut out = Vec::new();
                assert_eq!(
                    fresh.restore_open(&saved, hour, SavedBy::Stop, &mut out),
                    Ok(Restored {
                        continued: items,
                        ..Restored::default()
                    })
                );
                fresh
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
