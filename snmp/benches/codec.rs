//! CPU cost of the codec and the engine per request.
//!
//! * `encode_get_1oid` / `encode_get_10oids`: our request encoder.
//! * `decode_response/ours` vs `decode_response/snmp2`: one 10-varbind response (the
//!   net-snmp fixture), decoded and every value read, by our decoder and by snmp2's
//!   `Pdu::from_bytes` (the library the design card named).
//! * `engine_8000_hosts`: a whole iteration of 8,000 single-OID GETs through the sans-IO
//!   engine (encode, in-flight table, match, decode, events), agents answering at once;
//!   reported per iteration, divide by 8,000 for per request.
//!
//! * `v3/*`: SNMPv3 per message: `encode_get_10oids/{noauth,sha_aes,md5_des}` (the
//!   request our engine sends, MAC and encryption included) and
//!   `response/{sha_aes,md5_des}` (net-snmp's agent's answer: envelope, MAC check,
//!   decryption, PDU), to compare with the v2c figures above.
//!
//! Run: `cargo bench -p snmp --bench codec`.

use std::hint::black_box;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use snmp::{
    encode_message, encode_request, HostJob, HostMemory, Iteration, IterationOptions, Message, Oid,
    PduType, RequestKind, Version,
};

fn fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/fixtures/netsnmp_{name}.hex",
        env!("CARGO_MANIFEST_DIR")
    );
    let hex = std::fs::read_to_string(path).unwrap();
    let hex = hex.trim();
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

fn codec(c: &mut Criterion) {
    let one: Vec<Oid> = vec!["1.3.6.1.2.1.2.2.1.10.1".parse().unwrap()];
    let ten: Vec<Oid> = (1..=10)
        .map(|i| format!("1.3.6.1.2.1.2.2.1.10.{i}").parse().unwrap())
        .collect();
    let mut buf = Vec::with_capacity(1500);
    c.bench_function("encode_get_1oid", |b| {
        b.iter(|| {
            buf.clear();
            encode_request(
                &mut buf,
                Version::V2c,
                b"public",
                black_box(12345),
                RequestKind::Get,
                one.iter(),
            )
        })
    });
    c.bench_function("encode_get_10oids", |b| {
        b.iter(|| {
            buf.clear();
            encode_request(
                &mut buf,
                Version::V2c,
                b"public",
                black_box(12345),
                RequestKind::Get,
                ten.iter(),
            )
        })
    });

    let resp = fixture("v2get_response");
    let mut g = c.benchmark_group("decode_response");
    g.throughput(Throughput::Elements(1));
    g.bench_function("ours", |b| {
        b.iter(|| {
            let m = Message::decode(black_box(&resp)).unwrap();
            let mut n = 0u64;
            for vb in m.varbinds() {
                n += vb.oid.as_ber().len() as u64;
                if let snmp::ValueRef::Counter64(v) = vb.value {
                    n += v;
                }
            }
            n
        })
    });
    g.bench_function("snmp2", |b| {
        b.iter(|| {
            let p = snmp2::Pdu::from_bytes(black_box(&resp)).unwrap();
            let mut n = 0u64;
            for (_oid, v) in p.varbinds {
                n += 1;
                if let snmp2::Value::Counter64(v) = v {
                    n += v;
                }
            }
            n
        })
    });
    g.finish();
}

fn engine(c: &mut Criterion) {
    const HOSTS: usize = 8000;
    let oid: Oid = "1.3.6.1.2.1.2.2.1.10.1".parse().unwrap();
    let jobs: Vec<HostJob> = (0..HOSTS)
        .map(|i| {
            let addr = SocketAddr::from(([127, 1, (i / 250) as u8, (i % 250) as u8 + 1], 161));
            HostJob::new(addr, Arc::from("public"), vec![oid.clone()])
        })
        .collect();
    let mut g = c.benchmark_group("engine");
    g.throughput(Throughput::Elements(HOSTS as u64));
    g.sample_size(20);
    g.bench_function("iteration_8000_gets", |b| {
        let mut buf = Vec::with_capacity(1500);
        let mut resp = Vec::with_capacity(1500);
        let memory = HostMemory::default();
        b.iter(|| {
            let now = Instant::now();
            let mut it = Iteration::new(&jobs, &memory, IterationOptions::default());
            let mut sent = Vec::with_capacity(HOSTS);
            while let Some(t) = it.poll_transmit(now, &mut buf) {
                sent.push((t.dst, t.request_id));
            }
            let mut got = 0u64;
            for (dst, id) in sent {
                resp.clear();
                encode_message(
                    &mut resp,
                    Version::V2c,
                    b"public",
                    PduType::Response,
                    id,
                    0,
                    0,
                    std::iter::once((oid.as_ref(), snmp::ValueRef::Counter32(id as u32))),
                );
                it.handle_datagram(dst, &resp, now);
                while let Some(e) = it.poll_event() {
                    if let snmp::Event::Item { .. } = e {
                        got += 1;
                    }
                }
            }
            assert!(it.is_done());
            got
        })
    });
    g.finish();
}

fn v3(c: &mut Criterion) {
    use snmp::usm::{AuthProtocol, PrivProtocol};
    use snmp::v3::{encode_request as encode_v3, Engine, UsmUser, V3Message};
    let engine_id = b"\x80\x00\x1f\x88\x04netpoller-agent-1";
    let user = |name: &str, a: Option<AuthProtocol>, p: Option<PrivProtocol>| {
        let u = UsmUser::new(
            name,
            a.map(|a| (a, "np-auth-pass")),
            p.map(|p| (p, "np-priv-pass")),
        );
        Engine::new(Arc::new(u.unwrap()), engine_id, 1, 18, Instant::now())
    };
    let ten: Vec<Oid> = (1..=10)
        .map(|i| format!("1.3.6.1.2.1.2.2.1.10.{i}").parse().unwrap())
        .collect();
    let mut g = c.benchmark_group("v3");
    let mut buf = Vec::with_capacity(1500);
    for (label, a, p) in [
        ("noauth", None, None),
        (
            "sha_aes",
            Some(AuthProtocol::Sha1),
            Some(PrivProtocol::Aes128),
        ),
        ("md5_des", Some(AuthProtocol::Md5), Some(PrivProtocol::Des)),
    ] {
        let e = user("np-user", a, p);
        let (now, mut salt) = (Instant::now(), 0);
        g.bench_function(format!("encode_get_10oids/{label}"), |b| {
            b.iter(|| {
                buf.clear();
                encode_v3(
                    &mut buf,
                    &e,
                    &mut salt,
                    now,
                    black_box((12345, 12345)),
                    RequestKind::Get,
                    ten.iter(),
                )
            })
        });
    }
    for (label, name, a, p) in [
        (
            "sha_aes",
            "shaaes",
            AuthProtocol::Sha1,
            PrivProtocol::Aes128,
        ),
        ("md5_des", "md5des", AuthProtocol::Md5, PrivProtocol::Des),
    ] {
        let e = user(&format!("np-{name}"), Some(a), Some(p));
        let resp = fixture(&format!("v3_{name}_response"));
        let (mut mac, mut plain) = (Vec::new(), Vec::new());
        g.bench_function(format!("response/{label}"), |b| {
            b.iter(|| {
                let m = V3Message::decode(black_box(&resp)).unwrap();
                assert!(m.verify(&resp, &e, &mut mac));
                let s = m.scoped_pdu(Some(&e), &mut plain).unwrap();
                s.pdu.varbinds().count()
            })
        });
    }
    g.finish();
}

criterion_group!(benches, codec, engine, v3);
criterion_main!(benches);
