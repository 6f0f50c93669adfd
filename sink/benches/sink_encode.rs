//! CPU cost of the sink's own work, without a server: RowBinary encoding into batches
//! and spool record framing (CRC-32). `cargo bench -p sink --bench sink_encode`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sink::batch::{Limits, Pending};
use sink::{Row, RowValue, Table};
use std::sync::Arc;
use std::time::Duration;

fn rows(n: usize) -> Vec<Row> {
    let hosts: Vec<Arc<str>> = (0..1000)
        .map(|h| Arc::from(format!("host-{h:04}.example")))
        .collect();
    let key: Arc<str> = Arc::from("ifHCInOctets[Gi0/1]");
    (0..n)
        .map(|i| Row {
            itemid: i as u64,
            clock: 1_760_000_000 + (i / 1000) as u32,
            ns: (i % 1000) as u32,
            hostname: hosts[i % 1000].clone(),
            itemname: key.clone(),
            value: RowValue::Uint(i as u64),
        })
        .collect()
}

fn encode(c: &mut Criterion) {
    let input = rows(100_000);
    let limits = Limits {
        rows: 100_000,
        bytes: 64 << 20,
        age: Duration::from_secs(1),
    };
    let mut g = c.benchmark_group("sink");
    g.throughput(Throughput::Elements(input.len() as u64));
    // One Pending for every batch, as the sink keeps one per table for its lifetime:
    // a batch's buffer is sized by the batch before it, so a fresh Pending per batch
    // would measure its buffer's growth from empty, which the daemon pays once.
    let mut p = Pending::new(Table::Uint);
    g.bench_function("encode_100k_rows", |b| {
        b.iter(|| {
            let now = tokio::time::Instant::now();
            for r in &input {
                p.push(r, || now, &limits);
            }
            p.take().unwrap()
        })
    });
    let mut p = Pending::new(Table::Uint);
    for r in &input {
        p.push(r, tokio::time::Instant::now, &limits);
    }
    let batch = p.take().unwrap();
    g.bench_function("spool_record_100k_rows", |b| {
        b.iter(|| sink::record::encode(&batch))
    });
    g.finish();
}

criterion_group!(benches, encode);
criterion_main!(benches);
