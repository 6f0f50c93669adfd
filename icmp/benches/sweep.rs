//! User-space cost of one sweep without sockets: build 65,536 probes, answer three
//! quarters of them, expire the rest. The measured routine also builds the simulated
//! replies (a copy and a checksum each). `cargo bench -p icmp --bench sweep`.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use icmp::wire::EchoPacket;
use icmp::{Job, Sweep, SweepConfig, TagKey};

fn jobs(n: u32) -> Vec<Job> {
    (0..n)
        .map(|i| Job {
            addr: IpAddr::V4(Ipv4Addr::from(0x7f4e_0000 + i)),
            packets: 1,
            interval: Duration::from_millis(20),
            size: 56,
            timeout: Duration::from_secs(1),
            retry: None,
        })
        .collect()
}

/// Raw-socket framing of the reply a host would send for `request`.
fn reply(dst: IpAddr, request: &[u8]) -> Vec<u8> {
    let IpAddr::V4(src) = dst else { unreachable!() };
    let mut out = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 1, 0, 0];
    out[2..4].copy_from_slice(&((20 + request.len()) as u16).to_be_bytes());
    out.extend_from_slice(&src.octets());
    out.extend_from_slice(&[127, 0, 0, 1]);
    out.extend_from_slice(request);
    let mut p = EchoPacket::new_unchecked(&mut out[20..]);
    p.set_msg_type(0);
    p.fill_checksum_v4();
    out
}

fn bench(c: &mut Criterion) {
    const N: u32 = 65_536;
    let mut g = c.benchmark_group("sweep");
    g.throughput(Throughput::Elements(u64::from(N)));
    g.sample_size(10);
    g.bench_function("65536 hosts: send, 3/4 replies, deadline", |b| {
        b.iter_batched(
            || jobs(N),
            |jobs| {
                let t0 = Instant::now();
                let cfg = SweepConfig {
                    max_pps: 0,
                    ident: 7,
                    ..SweepConfig::new(TagKey([1, 2]))
                };
                let mut s = Sweep::new(jobs, cfg, t0).unwrap();
                let mut replies = Vec::with_capacity(N as usize);
                let mut k = 0u32;
                while let Some(tx) = s.poll_transmit(t0) {
                    if k % 4 != 3 {
                        replies.push((tx.addr, reply(tx.addr, tx.packet)));
                    }
                    k += 1;
                }
                let t1 = t0 + Duration::from_millis(1);
                for (a, r) in &replies {
                    s.handle_reply(r, *a, t1);
                }
                s.handle_timeout(t0 + Duration::from_secs(2));
                let mut done = 0;
                while s.poll_event().is_some() {
                    done += 1;
                }
                assert_eq!(done, N);
                s.counters()
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
