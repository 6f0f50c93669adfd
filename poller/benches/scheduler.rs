//! Scheduler throughput and memory (issue 5): 1,000,000 items, 2 to 16 shards.
//!
//! * `take_complete/<shards>`: one thread takes every due task and puts it back (the
//!   full cycle of one poll), over 1 M single-item tasks; reported per task.
//! * `parallel_take_complete/<shards>`: the same cycle split over 2 threads (the
//!   machine has 2 cores), to show what sharding buys under concurrent takers.
//! * Memory per item is printed once (heap bytes of the queues + slot table, counted
//!   by a counting allocator, divided by the item count).
//!
//! Run: `cargo bench -p poller --bench scheduler`

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use poller::plan::{Engine, HostSpec, ItemKind, ItemSpec, Plan};
use poller::plan_diff::PlanDiff;
use poller::scheduler::Scheduler;
use poller::value::ValueType;

struct Counting;
static ALLOCATED: AtomicUsize = AtomicUsize::new(0);
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCATED.fetch_add(l.size(), Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        ALLOCATED.fetch_sub(l.size(), Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(p, l) }
    }
}
#[global_allocator]
static GLOBAL: Counting = Counting;

const ITEMS: usize = 1_000_000;

fn plan(items: usize) -> Plan {
    plan_every(items, 10_000)
}

fn plan_every(items: usize, interval_ms: u32) -> Plan {
    let oid = snmp::Oid::from_arcs(&[1, 3, 6, 1, 2, 1, 1, 3, 0]).unwrap();
    let key: Arc<str> = "sysUpTime".into();
    Plan::build(
        (0..items)
            .map(|h| HostSpec {
                name: format!("h{h}").into(),
                ip: "127.0.0.1".parse().unwrap(),
                snmp: None,
                items: vec![ItemSpec {
                    itemid: h as u64,
                    key: key.clone(),
                    value_type: ValueType::Uint,
                    interval_ms,
                    kind: ItemKind::Snmp { oid: oid.clone() },
                    pre: None,
                }],
            })
            .collect(),
    )
}

/// One full cycle: take everything due in the next interval, complete each.
fn cycle(s: &Scheduler, now: &mut u64) -> usize {
    *now += 10_000;
    let mut out = Vec::with_capacity(8192);
    let mut n = 0;
    loop {
        out.clear();
        if s.take_due(Engine::Snmp, *now, 8000, |_| 1, &mut out) == 0 {
            break;
        }
        for d in &out {
            s.complete(*d, *now);
        }
        n += out.len();
    }
    n
}

fn bench(c: &mut Criterion) {
    let before = ALLOCATED.load(Ordering::Relaxed);
    let p = plan(ITEMS);
    let plan_bytes = ALLOCATED.load(Ordering::Relaxed) - before;
    eprintln!(
        "plan memory: {} bytes for {} items on {} hosts = {:.1} bytes/item",
        plan_bytes,
        ITEMS,
        p.hosts.len(),
        plan_bytes as f64 / ITEMS as f64
    );
    let before = ALLOCATED.load(Ordering::Relaxed);
    let s = Scheduler::new(&p, 4, 0);
    let sched_bytes = ALLOCATED.load(Ordering::Relaxed) - before;
    eprintln!(
        "scheduler memory: {} bytes for {} items = {:.1} bytes/item",
        sched_bytes,
        ITEMS,
        sched_bytes as f64 / ITEMS as f64
    );
    drop(s);

    let mut g = c.benchmark_group("take_complete");
    g.throughput(Throughput::Elements(ITEMS as u64));
    g.sample_size(10);
    for shards in [2usize, 4, 8, 16] {
        let s = Scheduler::new(&p, shards, 0);
        let mut now = 0;
        g.bench_with_input(BenchmarkId::from_parameter(shards), &shards, |b, _| {
            b.iter(|| assert_eq!(cycle(&s, &mut now), ITEMS))
        });
    }
    g.finish();

    let mut g = c.benchmark_group("parallel_take_complete_2_threads");
    g.throughput(Throughput::Elements(ITEMS as u64));
    g.sample_size(10);
    for shards in [1usize, 2, 4, 8, 16] {
        let s = Arc::new(Scheduler::new(&p, shards, 0));
        let mut now = 0u64;
        g.bench_with_input(BenchmarkId::from_parameter(shards), &shards, |b, _| {
            b.iter(|| {
                now += 10_000;
                let t = now;
                let hs: Vec<_> = (0..2)
                    .map(|_| {
                        let s = s.clone();
                        std::thread::spawn(move || {
                            let mut out = Vec::with_capacity(8192);
                            let mut n = 0;
                            loop {
                                out.clear();
                                if s.take_due(Engine::Snmp, t, 8000, |_| 1, &mut out) == 0 {
                                    break;
                                }
                                for d in &out {
                                    s.complete(*d, t);
                                }
                                n += out.len();
                            }
                            n
                        })
                    })
                    .collect();
                let n: usize = hs.into_iter().map(|h| h.join().unwrap()).sum();
                assert_eq!(n, ITEMS);
            })
        });
    }
    g.finish();

    // A reload: until 88fa7ab all of `reload` ran under the plan's write lock, during
    // which no engine could take work; now only `install` does.
    let mut g = c.benchmark_group("reload");
    g.sample_size(10);
    // The engines up to date: nothing queued is due.
    let s = Scheduler::new(&p, 4, 5_000);
    g.bench_function("prepare (outside the plan lock)", |b| {
        b.iter(|| s.prepare(&p, 5_000))
    });
    g.bench_function("install (under the plan lock)", |b| {
        b.iter_batched(
            || s.prepare(&p, 5_000),
            |prepared| s.install(prepared, 5_000, Some((&p, &p))),
            criterion::BatchSize::PerIteration,
        )
    });
    g.bench_function("prepare + install (under the lock before)", |b| {
        b.iter(|| s.reload(&p, &p, 5_000))
    });
    // The engines 5 s behind: half of the 10 s tasks are overdue, and each keeps its
    // slot (found among the new queues' entries).
    let behind = Scheduler::new(&p, 4, 0);
    g.bench_function("install, half the tasks overdue", |b| {
        b.iter_batched(
            || behind.prepare(&p, 5_000),
            |prepared| behind.install(prepared, 5_000, Some((&p, &p))),
            criterion::BatchSize::PerIteration,
        )
    });
    // What the reload's log line says changed (outside the lock, before it): a pass
    // over each plan when nothing did, item by item when every host changed.
    g.bench_function("diff, nothing changed", |b| {
        b.iter(|| assert!(PlanDiff::between(&p, &p).is_empty()))
    });
    let slower = plan_every(ITEMS, 20_000);
    g.bench_function("diff, every item changed", |b| {
        b.iter(|| assert_eq!(PlanDiff::between(&p, &slower).items_changed, ITEMS))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
