//! Sweep state machine on a virtual clock: instants are `base + offset`, no sleeping.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use proptest::prelude::*;

use crate::wire::{EchoPacket, HEADER_LEN};
use crate::*;

const KEY: TagKey = TagKey([0x0123_4567_89ab_cdef, 0x0fed_cba9_8765_4321]);

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

fn addr(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0x7f4d_0000 + i)) // 127.77.0.0 + i
}

fn job(i: u32, packets: u32) -> Job {
    Job {
        addr: addr(i),
        packets,
        interval: ms(20),
        size: 56,
        timeout: ms(1000),
        retry: None,
    }
}

fn cfg(pps: u32) -> SweepConfig {
    SweepConfig {
        max_pps: pps,
        ident: 0xbeef,
        seq_start: 100,
        iteration: 5,
        ..SweepConfig::new(KEY)
    }
}

/// What a host's kernel sends back for `request`, framed as a raw IPv4 socket sees it.
fn raw_reply_for(dst: IpAddr, request: &[u8]) -> Vec<u8> {
    assert!(dst.is_ipv4(), "v4 only");
    let mut icmp = request.to_vec();
    let mut p = EchoPacket::new_unchecked(&mut icmp[..]);
    p.set_msg_type(0);
    p.fill_checksum_v4();
    framed(SocketKind::Raw, dst, &icmp)
}

/// Sends everything due at `now`, returning (addr, request bytes).
fn drain_sends(s: &mut Sweep, now: Instant) -> Vec<(IpAddr, Vec<u8>)> {
    let mut out = Vec::new();
    while let Some(tx) = s.poll_transmit(now) {
        out.push((tx.addr, tx.packet.to_vec()));
    }
    out
}

fn done_events(s: &mut Sweep) -> Vec<(usize, PingStats)> {
    std::iter::from_fn(|| s.poll_event())
        .map(|Event::HostDone { job, stats }| (job, stats))
        .collect()
}

#[test]
fn pacing_holds_max_pps_with_bounded_bursts() {
    let base = Instant::now();
    let jobs: Vec<Job> = (0..1000).map(|i| job(i, 1)).collect();
    let mut s = Sweep::new(jobs, cfg(1000), base).unwrap(); // 1 ms per probe, 2 ms burst
    let mut times = Vec::new();
    // The driver wakes every 5 ms (coarse timer): bursts are capped at burst + 1 probes.
    let mut now = base;
    while !s.all_sent() {
        let n = drain_sends(&mut s, now).len();
        assert!(n <= 3, "burst of {n} at {:?}", now - base);
        times.extend(std::iter::repeat_n(now - base, n));
        now += ms(5);
        assert!(now - base < ms(5000), "pacing stalled");
    }
    assert_eq!(times.len(), 1000);
    let last = *times.last().unwrap();
    // 1000 probes at 1000 pps with 5 ms wake-ups: 2 ms burst credit lost per wake-up.
    assert!(last >= ms(999), "sent too fast: {last:?}");
    // Exact driver: wake exactly at poll_timeout → exactly 1 ms spacing.
    let jobs: Vec<Job> = (0..100).map(|i| job(i, 1)).collect();
    let mut s = Sweep::new(jobs, cfg(1000), base).unwrap();
    let mut sends = Vec::new();
    while let Some(t) = s.poll_timeout() {
        if s.all_sent() {
            break;
        }
        for _ in drain_sends(&mut s, t) {
            sends.push(t - base);
        }
    }
    assert_eq!(sends.len(), 100);
    for (k, t) in sends.iter().enumerate() {
        assert_eq!(*t, ms(k as u64), "probe {k}");
    }
}

#[test]
fn unpaced_sends_everything_at_once() {
    let base = Instant::now();
    let mut s = Sweep::new((0..4096).map(|i| job(i, 1)).collect(), cfg(0), base).unwrap();
    assert_eq!(drain_sends(&mut s, base).len(), 4096);
    assert_eq!(s.deadline(), Some(base + ms(1000)));
}

#[test]
fn interval_spacing_per_host() {
    let base = Instant::now();
    let mut s = Sweep::new((0..3).map(|i| job(i, 3)).collect(), cfg(0), base).unwrap();
    let mut sends: HashMap<IpAddr, Vec<Duration>> = HashMap::new();
    let mut now = base;
    while !s.all_sent() {
        for (a, _) in drain_sends(&mut s, now) {
            sends.entry(a).or_default().push(now - base);
        }
        let Some(next) = s.next_send_time() else {
            break;
        };
        assert!(next > now);
        now = next;
    }
    for i in 0..3 {
        assert_eq!(sends[&addr(i)], vec![ms(0), ms(20), ms(40)]);
    }
    // Deadline = last send + timeout.
    assert_eq!(s.deadline(), Some(base + ms(40) + ms(1000)));
}

#[test]
fn pacing_never_compresses_host_interval() {
    // 10 hosts × 2 probes at 100 pps: probe 2 of host 0 is due at 20 ms but pacing
    // pushes everything; each host's gap must stay ≥ interval.
    let base = Instant::now();
    let mut s = Sweep::new((0..10).map(|i| job(i, 2)).collect(), cfg(100), base).unwrap();
    let mut sends: HashMap<IpAddr, Vec<Instant>> = HashMap::new();
    while let Some(t) = s.next_send_time() {
        for (a, _) in drain_sends(&mut s, t) {
            sends.entry(a).or_default().push(t);
        }
    }
    for v in sends.values() {
        assert_eq!(v.len(), 2);
        assert!(v[1] - v[0] >= ms(20));
    }
    // 20 probes at 10 ms each: the last leaves at 190 ms.
    let last = sends.values().flatten().max().unwrap();
    assert_eq!(*last - base, ms(190));
}

#[test]
fn probes_of_unanswered_hosts_leave_before_those_of_answering_hosts() {
    // Unpaced, 8 hosts × 2 probes; the even hosts answer probe 1. When every second
    // probe is due at once, the silent hosts' go first, each group in due order.
    let base = Instant::now();
    let mut s = Sweep::new((0..8).map(|i| job(i, 2)).collect(), cfg(0), base).unwrap();
    for (a, req) in drain_sends(&mut s, base) {
        if a == addr(0) || a == addr(2) || a == addr(4) || a == addr(6) {
            s.handle_reply(&raw_reply_for(a, &req), a, base + ms(1));
        }
    }
    let order: Vec<IpAddr> = drain_sends(&mut s, base + ms(30))
        .into_iter()
        .map(|(a, _)| a)
        .collect();
    let want: Vec<IpAddr> = [1, 3, 5, 7, 0, 2, 4, 6].into_iter().map(addr).collect();
    assert_eq!(order, want);
    assert!(s.all_sent());
}

#[test]
fn silent_hosts_set_an_early_deadline_when_sends_are_paced() {
    // 100 hosts × 3 probes, 20 ms apart, at 1,000 pps: sending all 300 probes takes
    // 300 ms, but the probes that can go unanswered (every fourth host is silent) leave
    // by first round (100 ms) + 2 intervals + queueing; answering hosts' probes after.
    let base = Instant::now();
    let mut s = Sweep::new((0..100).map(|i| job(i, 3)).collect(), cfg(1000), base).unwrap();
    let silent = |a: IpAddr| (0..100).filter(|i| i % 4 == 3).any(|i| addr(i) == a);
    let (mut last_silent, mut last_any, mut sends) = (base, base, 0);
    while let Some(t) = s.next_send_time() {
        for (a, req) in drain_sends(&mut s, t) {
            sends += 1;
            last_any = t;
            if silent(a) {
                last_silent = t;
            } else {
                s.handle_reply(&raw_reply_for(a, &req), a, t);
            }
        }
    }
    assert_eq!(sends, 300);
    assert_eq!(last_any - base, ms(299));
    assert!(last_silent - base <= ms(150), "{:?}", last_silent - base);
    // The sweep ends when the last silent host's last probe expires.
    s.handle_timeout(last_silent + ms(999));
    assert!(!s.is_finished());
    s.handle_timeout(last_silent + ms(1000));
    assert!(s.is_finished());
    assert_eq!(done_events(&mut s).len(), 100);
}

#[test]
fn replies_complete_hosts_early_and_silent_hosts_at_deadline() {
    let base = Instant::now();
    let mut s = Sweep::new((0..4).map(|i| job(i, 1)).collect(), cfg(0), base).unwrap();
    let sent = drain_sends(&mut s, base);
    assert_eq!(s.in_flight(), 4);
    // Hosts 0 and 2 answer after 3 ms.
    for (a, req) in sent.iter().filter(|(a, _)| *a == addr(0) || *a == addr(2)) {
        let out = s.handle_reply(&raw_reply_for(*a, req), *a, base + ms(3));
        assert!(
            matches!(out, ReplyOutcome::Matched { rtt, .. } if rtt == ms(3)),
            "{out:?}"
        );
    }
    let early = done_events(&mut s);
    assert_eq!(early.iter().map(|e| e.0).collect::<Vec<_>>(), vec![0, 2]);
    assert_eq!(early[0].1.received, 1);
    assert_eq!(early[0].1.rtt_seconds(RttMode::Avg), 0.003);
    assert!(!s.is_finished());
    s.handle_timeout(base + ms(999));
    assert!(
        done_events(&mut s).is_empty(),
        "nothing before the deadline"
    );
    assert_eq!(s.poll_timeout(), Some(base + ms(1000)));
    s.handle_timeout(base + ms(1000));
    let late = done_events(&mut s);
    assert_eq!(late.iter().map(|e| e.0).collect::<Vec<_>>(), vec![1, 3]);
    assert!(late
        .iter()
        .all(|(_, st)| st.sent == 1 && st.received == 0 && st.loss_pct() == 100.0));
    assert!(s.is_finished());
    assert_eq!(s.poll_timeout(), None);
    assert_eq!(s.in_flight(), 0);
    let c = s.counters();
    assert_eq!((c.sent, c.received), (4, 2));
}

#[test]
fn stale_reply_of_previous_iteration_is_counted_not_matched() {
    let base = Instant::now();
    let mut old = Sweep::new(vec![job(0, 1)], cfg(0), base).unwrap();
    let (a, req) = drain_sends(&mut old, base).pop().unwrap();
    // Next iteration reuses identifier and sequence (worst case) but not the iteration.
    let mut next_cfg = cfg(0);
    next_cfg.iteration += 1;
    let mut s = Sweep::new(vec![job(0, 1)], next_cfg, base + ms(1000)).unwrap();
    let (_, req2) = drain_sends(&mut s, base + ms(1000)).pop().unwrap();
    assert_eq!(req[4..8], req2[4..8], "same identifier and sequence");
    let out = s.handle_reply(&raw_reply_for(a, &req), a, base + ms(1001));
    assert_eq!(out, ReplyOutcome::Ignored(IgnoreReason::Stale));
    assert_eq!(s.counters().stale, 1);
    assert_eq!(s.stats(0).unwrap().received, 0);
    // The real reply still matches afterwards.
    let out = s.handle_reply(&raw_reply_for(a, &req2), a, base + ms(1002));
    assert!(matches!(out, ReplyOutcome::Matched { job: 0, .. }));
}

#[test]
fn foreign_spoofed_and_redirected_replies_are_rejected() {
    let base = Instant::now();
    let mut s = Sweep::new(vec![job(0, 1)], cfg(0), base).unwrap();
    let (a, req) = drain_sends(&mut s, base).pop().unwrap();
    // Someone else's ping: other identifier, their own payload.
    let mut foreign = req.clone();
    EchoPacket::new_unchecked(&mut foreign[..]).set_ident(0x1111);
    foreign[HEADER_LEN..].fill(0x42);
    let out = s.handle_reply(&raw_reply_for(a, &foreign), a, base + ms(1));
    assert_eq!(out, ReplyOutcome::Ignored(IgnoreReason::Foreign));
    // Our identifier and sequence but a forged payload.
    let mut forged = req.clone();
    forged[HEADER_LEN + 6] ^= 1;
    let out = s.handle_reply(&raw_reply_for(a, &forged), a, base + ms(1));
    assert_eq!(out, ReplyOutcome::Ignored(IgnoreReason::Spoofed));
    // Our payload replayed under another identifier.
    let mut moved = req.clone();
    EchoPacket::new_unchecked(&mut moved[..]).set_ident(0x2222);
    let out = s.handle_reply(&raw_reply_for(a, &moved), a, base + ms(1));
    assert_eq!(out, ReplyOutcome::Ignored(IgnoreReason::Spoofed));
    // Our payload answered from another address (a host with several, a NAT): ours,
    // redirected, not taken, and no forgery. Forged and answered from elsewhere: one.
    let other = addr(9);
    let out = s.handle_reply(&raw_reply_for(other, &req), other, base + ms(1));
    assert_eq!(out, ReplyOutcome::Ignored(IgnoreReason::Redirected));
    let out = s.handle_reply(&raw_reply_for(other, &forged), other, base + ms(1));
    assert_eq!(out, ReplyOutcome::Ignored(IgnoreReason::Spoofed));
    // Our own request looped back (raw sockets see it) and garbage.
    let mut own = raw_reply_for(a, &req);
    own[20] = 8;
    EchoPacket::new_unchecked(&mut own[20..]).fill_checksum_v4();
    let out = s.handle_reply(&own, a, base + ms(1));
    assert_eq!(out, ReplyOutcome::Ignored(IgnoreReason::NotEchoReply));
    let out = s.handle_reply(&[0x45, 0, 0], a, base + ms(1));
    assert_eq!(out, ReplyOutcome::Ignored(IgnoreReason::Malformed));
    let c = s.counters();
    assert_eq!(
        (
            c.foreign,
            c.spoofed,
            c.redirected,
            c.not_echo_reply,
            c.malformed,
            c.received
        ),
        (1, 3, 1, 1, 1, 0)
    );
    assert_eq!(s.in_flight(), 1, "nothing matched");
    // The genuine reply, then a duplicate of it.
    let genuine = raw_reply_for(a, &req);
    assert!(matches!(
        s.handle_reply(&genuine, a, base + ms(2)),
        ReplyOutcome::Matched { .. }
    ));
    assert_eq!(
        s.handle_reply(&genuine, a, base + ms(2)),
        ReplyOutcome::Ignored(IgnoreReason::Duplicate)
    );
}

#[test]
fn late_reply_is_not_received() {
    let base = Instant::now();
    let mut jobs = vec![job(0, 1), job(1, 1)];
    jobs[0].timeout = ms(100);
    let mut s = Sweep::new(jobs, cfg(0), base).unwrap();
    let sent = drain_sends(&mut s, base);
    let (a, req) = &sent[0];
    let out = s.handle_reply(&raw_reply_for(*a, req), *a, base + ms(150));
    assert_eq!(out, ReplyOutcome::Ignored(IgnoreReason::Late));
    let ev = done_events(&mut s);
    assert_eq!(ev.len(), 1, "the late reply resolves its probe");
    assert_eq!((ev[0].1.sent, ev[0].1.received), (1, 0));
    assert_eq!(
        s.deadline(),
        Some(base + ms(1000)),
        "deadline is the latest probe's"
    );
}

#[test]
fn datagram_socket_matches_despite_rewritten_identifier() {
    let base = Instant::now();
    let c = SweepConfig {
        socket: SocketKind::Datagram,
        ..cfg(0)
    };
    let mut s = Sweep::new(vec![job(0, 2)], c, base).unwrap();
    let (a, req) = drain_sends(&mut s, base).pop().unwrap();
    let mut reply = req.clone();
    let mut p = EchoPacket::new_unchecked(&mut reply[..]);
    p.set_ident(40_000); // the socket's port
    p.set_msg_type(0);
    p.fill_checksum_v4();
    let out = s.handle_reply(&reply, a, base + ms(1));
    assert!(
        matches!(out, ReplyOutcome::Matched { job: 0, .. }),
        "{out:?}"
    );
    assert!(!s.is_finished(), "second probe still to come");
    let (_, req2) = drain_sends(&mut s, base + ms(20)).pop().unwrap();
    let mut reply2 = req2.clone();
    let mut p = EchoPacket::new_unchecked(&mut reply2[..]);
    p.set_msg_type(0);
    p.fill_checksum_v4();
    assert!(matches!(
        s.handle_reply(&reply2, a, base + ms(21)),
        ReplyOutcome::Matched { .. }
    ));
    let ev = done_events(&mut s);
    assert_eq!(ev[0].1.received, 2);
    assert!(s.is_finished());
}

/// A reply with a non-zero code (some devices and middleboxes send one) answers its
/// probe, as it does for fping and Zabbix: it was counted malformed and its host lost.
#[test]
fn a_reply_with_a_non_zero_code_answers_its_probe() {
    let base = Instant::now();
    let mut s = Sweep::new(vec![job(0, 1)], cfg(0), base).unwrap();
    let (a, req) = drain_sends(&mut s, base).pop().unwrap();
    let mut reply = raw_reply_for(a, &req);
    let mut p = EchoPacket::new_unchecked(&mut reply[20..]);
    p.set_code(1);
    p.fill_checksum_v4();
    let out = s.handle_reply(&reply, a, base + ms(1));
    assert_eq!(out, ReplyOutcome::Matched { job: 0, rtt: ms(1) });
    assert_eq!((s.counters().received, s.counters().malformed), (1, 0));
    assert_eq!(done_events(&mut s)[0].1.received, 1);
}

#[test]
fn send_error_counts_as_lost() {
    let base = Instant::now();
    let mut s = Sweep::new(vec![job(0, 1)], cfg(0), base).unwrap();
    let token = s.poll_transmit(base).unwrap().token;
    s.on_send_error(token);
    let ev = done_events(&mut s);
    assert_eq!(
        (ev[0].1.sent, ev[0].1.received, ev[0].1.loss_pct()),
        (1, 0, 100.0)
    );
    assert_eq!(s.counters().send_errors, 1);
    assert!(s.is_finished());
}

/// A counting host (`icmpping`, `icmppingloss`, `icmppingsec`: fping `-C`) keeps its
/// schedule after a send error, as fping's count mode does (its next request is
/// scheduled whatever the send did); the failed one is a lost request of `packets`,
/// as Zabbix counts it (a `-` in fping's summary): 1 of 3 is 33 % loss.
#[test]
fn a_counting_host_goes_on_after_a_send_error() {
    let base = Instant::now();
    let mut s = Sweep::new(vec![job(0, 3)], cfg(0), base).unwrap();
    let mut replies = Vec::new();
    for k in 0..3u64 {
        let now = base + ms(20 * k);
        let tx = s.poll_transmit(now).expect("each probe leaves on schedule");
        if k == 1 {
            let token = tx.token;
            s.on_send_error(token);
            continue;
        }
        replies.push((tx.addr, raw_reply_for(tx.addr, tx.packet), now + ms(5)));
    }
    for (a, reply, at) in replies {
        assert!(matches!(
            s.handle_reply(&reply, a, at),
            ReplyOutcome::Matched { .. }
        ));
    }
    let ev = done_events(&mut s);
    let st = ev[0].1;
    assert_eq!((st.sent, st.received), (3, 2));
    // Zabbix's icmppingloss: 100 * (cnt - rcv) / cnt.
    assert_eq!(st.loss_pct(), 100.0 * 1.0 / 3.0);
    assert!(s.is_finished());
}

#[test]
fn keys_unique_across_large_sweep_and_repeated_addresses() {
    let base = Instant::now();
    let mut jobs: Vec<Job> = (0..65_536).map(|i| job(i, 3)).collect();
    jobs.push(job(7, 3)); // same host again with the same parameters
    let mut s = Sweep::new(jobs, cfg(0), base).unwrap();
    let mut now = base;
    let mut seqs: HashMap<IpAddr, Vec<u16>> = HashMap::new();
    while !s.all_sent() {
        while let Some(tx) = s.poll_transmit(now) {
            let p = EchoPacket::new_checked(tx.packet).unwrap();
            assert_eq!(p.ident(), 0xbeef);
            seqs.entry(tx.addr).or_default().push(p.seq());
        }
        now += ms(20);
    }
    assert_eq!(s.in_flight(), 65_537 * 3, "every probe has its own key");
    assert_eq!(seqs[&addr(7)], vec![100, 103, 101, 104, 102, 105]);
    assert_eq!(seqs[&addr(8)], vec![100, 101, 102]);
}

#[test]
fn invalid_jobs_are_refused() {
    let base = Instant::now();
    let bad = |j: Job| Sweep::new(vec![j], cfg(0), base).unwrap_err();
    assert!(matches!(bad(job(0, 0)), SweepError::NoPackets { .. }));
    assert!(matches!(
        bad(Job {
            size: 11,
            ..job(0, 1)
        }),
        SweepError::BadSize { .. }
    ));
    assert!(matches!(
        bad(Job {
            size: 65_508,
            ..job(0, 1)
        }),
        SweepError::BadSize { .. }
    ));
    assert!(matches!(
        bad(Job {
            timeout: Duration::ZERO,
            retry: None,
            ..job(0, 1)
        }),
        SweepError::ZeroTimeout { .. }
    ));
    let many = Sweep::new(vec![job(0, 40_000), job(0, 30_000)], cfg(0), base).unwrap_err();
    assert!(matches!(
        many,
        SweepError::TooManyProbes { probes: 70_000, .. }
    ));
    // Past 2^32 probes in all: the sweep's fault, not the job where the count overflowed
    // (the driver rejected jobs one by one, rebuilding the sweep each time).
    let huge: Vec<Job> = (0..65_537).map(|i| job(i, 65_536)).collect();
    assert!(matches!(
        Sweep::new(huge, cfg(0), base).unwrap_err(),
        SweepError::SweepTooLarge { .. }
    ));
    let empty = Sweep::new(vec![], cfg(0), base).unwrap();
    assert!(empty.is_finished() && empty.poll_timeout().is_none());
}

#[test]
fn ipv6_requests_use_icmpv6_types() {
    let base = Instant::now();
    let v6: IpAddr = "::1".parse().unwrap();
    let mut s = Sweep::new(
        vec![Job {
            addr: v6,
            ..job(0, 1)
        }],
        cfg(0),
        base,
    )
    .unwrap();
    let (a, req) = drain_sends(&mut s, base).pop().unwrap();
    assert_eq!((a, req[0], req[2], req[3]), (v6, 128, 0, 0));
    let mut reply = req.clone();
    reply[0] = 129;
    assert!(matches!(
        s.handle_reply(&reply, v6, base + ms(1)),
        ReplyOutcome::Matched { .. }
    ));
}

proptest! {
    #[test]
    fn hostile_replies_never_match_or_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..120), from in any::<u32>(),
    ) {
        let base = Instant::now();
        let mut s = Sweep::new((0..4).map(|i| job(i, 1)).collect(), cfg(0), base).unwrap();
        drain_sends(&mut s, base);
        let out = s.handle_reply(&bytes, IpAddr::V4(Ipv4Addr::from(from)), base + ms(1));
        prop_assert!(matches!(out, ReplyOutcome::Ignored(_)));
        prop_assert_eq!(s.in_flight(), 4);
    }
}

#[test]
fn silent_hosts_complete_as_their_probes_expire() {
    // 1000 pps: host i's only probe leaves at i ms and expires at i ms + 100 ms, so silent
    // hosts stream out one by one instead of all waiting for the last host's deadline.
    let base = Instant::now();
    let jobs: Vec<Job> = (0..5)
        .map(|i| Job {
            timeout: ms(100),
            retry: None,
            ..job(i, 1)
        })
        .collect();
    let mut s = Sweep::new(jobs, cfg(1000), base).unwrap();
    let mut sent = Vec::new();
    while let Some(t) = s.next_send_time() {
        sent.extend(drain_sends(&mut s, t));
    }
    assert_eq!(s.deadline(), Some(base + ms(104)));
    // Host 1 answers in time; host 3 answers after its own expiry.
    let (a1, r1) = &sent[1];
    assert!(matches!(
        s.handle_reply(&raw_reply_for(*a1, r1), *a1, base + ms(5)),
        ReplyOutcome::Matched { job: 1, .. }
    ));
    assert_eq!(
        s.poll_timeout(),
        Some(base + ms(100)),
        "next expiry, not the deadline"
    );
    s.handle_timeout(base + ms(102));
    let ev = done_events(&mut s);
    assert_eq!(ev.iter().map(|e| e.0).collect::<Vec<_>>(), vec![1, 0, 2]);
    assert!(!s.is_finished());
    assert_eq!(s.poll_timeout(), Some(base + ms(103)));
    // Host 0 answers after handle_timeout declared its probe lost: late, not a duplicate.
    let (a0, r0) = &sent[0];
    assert_eq!(
        s.handle_reply(&raw_reply_for(*a0, r0), *a0, base + ms(102)),
        ReplyOutcome::Ignored(IgnoreReason::Late)
    );
    // Host 3's reply is read after its timeout but before handle_timeout ran: late too.
    let (a3, r3) = &sent[3];
    assert_eq!(
        s.handle_reply(
            &raw_reply_for(*a3, r3),
            *a3,
            base + ms(103) + Duration::from_micros(1)
        ),
        ReplyOutcome::Ignored(IgnoreReason::Late)
    );
    s.handle_timeout(base + ms(104));
    let ev = done_events(&mut s);
    assert_eq!(
        ev.iter().map(|e| (e.0, e.1.received)).collect::<Vec<_>>(),
        vec![(3, 0), (4, 0)]
    );
    assert!(s.is_finished());
    assert_eq!(
        (s.counters().late, s.counters().received, s.in_flight()),
        (2, 1, 0)
    );
}

#[test]
fn a_probe_counts_from_when_it_left_not_from_when_it_was_handed_out() {
    // The driver hands out a batch of probes, then sends it: 5 ms later here (a batch
    // to build, a full socket buffer). RTTs and timeouts count from the send.
    let base = Instant::now();
    let mut s = Sweep::new((0..3).map(|i| job(i, 1)).collect(), cfg(0), base).unwrap();
    let mut sent = Vec::new();
    while let Some(tx) = s.poll_transmit(base) {
        sent.push((tx.addr, tx.packet.to_vec(), tx.token));
    }
    assert_eq!(sent.len(), 3);
    for (_, _, token) in &sent {
        s.sent_at(*token, base + ms(5));
    }
    // An earlier instant never moves it back.
    s.sent_at(sent[0].2, base + ms(1));
    // Host 0 answers 3 ms after its probe left: 3 ms, not 8.
    let (a, req, _) = &sent[0];
    let out = s.handle_reply(&raw_reply_for(*a, req), *a, base + ms(8));
    assert!(
        matches!(out, ReplyOutcome::Matched { rtt, .. } if rtt == ms(3)),
        "{out:?}"
    );
    // Hosts 1 and 2 are not lost at handout + timeout, ...
    s.handle_timeout(base + ms(1000));
    assert_eq!(
        done_events(&mut s).iter().map(|e| e.0).collect::<Vec<_>>(),
        vec![0]
    );
    assert_eq!(s.poll_timeout(), Some(base + ms(1005)));
    // ... a reply 999 ms after the send counts, ...
    let (a, req, _) = &sent[2];
    let out = s.handle_reply(&raw_reply_for(*a, req), *a, base + ms(1004));
    assert!(
        matches!(out, ReplyOutcome::Matched { rtt, .. } if rtt == ms(999)),
        "{out:?}"
    );
    // ... and the silent one is lost at send + timeout.
    s.handle_timeout(base + ms(1005));
    let late = done_events(&mut s);
    assert_eq!(late.iter().map(|e| e.0).collect::<Vec<_>>(), vec![2, 1]);
    assert_eq!(late[1].1.received, 0);
    assert!(s.is_finished());
}

/// A probe sent late (its batch waited) expires at its send + timeout, in order with
/// probes handed out after it left: put back at the end of its queue, it waited behind
/// one that expires later, and `next_expiry` did not say when it would be lost.
#[test]
fn a_late_sent_probe_expires_at_its_send_plus_timeout() {
    let base = Instant::now();
    let mut s = Sweep::new((0..2).map(|i| job(i, 1)).collect(), cfg(0), base).unwrap();
    let a = s.poll_transmit(base).expect("first probe").token;
    s.sent_at(a, base + ms(50));
    let b = s.poll_transmit(base + ms(60)).expect("second probe").token;
    s.sent_at(b, base + ms(60));
    s.handle_timeout(base + ms(1000));
    assert!(done_events(&mut s).is_empty());
    assert_eq!(s.next_expiry(), Some(base + ms(1050)));
    s.handle_timeout(base + ms(1050));
    assert_eq!(
        done_events(&mut s).len(),
        1,
        "the probe sent at 50 ms is lost at 1050 ms"
    );
}

/// Probe k + 1 of a host leaves no earlier than `interval` after probe k left, when
/// that was later than it was handed out (`sent_at`): it was due `interval` after the
/// hand-out, 5 ms after probe k on the wire here.
#[test]
fn the_next_probe_waits_an_interval_after_the_previous_one_left() {
    let base = Instant::now();
    let mut s = Sweep::new(vec![job(0, 2)], cfg(0), base).unwrap();
    let first = s.poll_transmit(base).expect("first probe").token;
    // Its batch left 15 ms after the hand-out (a full socket buffer, a long batch).
    s.sent_at(first, base + ms(15));
    // 5 ms after it left, the second probe (interval 20 ms) must not be handed out.
    assert!(
        s.poll_transmit(base + ms(20)).is_none(),
        "probe 2 handed out 5 ms after probe 1 left (interval 20 ms)"
    );
    assert!(s.poll_transmit(base + ms(35)).is_some());
}

/// An `icmppingretry` job: `retries + 1` probes at most, the first timing out after
/// 100 ms, each later one `backoff_pct`/100 times longer than the one before.
fn retry_job(i: u32, retries: u32, backoff_pct: u16) -> Job {
    Job {
        packets: retries + 1,
        timeout: ms(100),
        retry: Some(Retry { backoff_pct }),
        ..job(i, 1)
    }
}

#[test]
fn a_retrying_host_that_answers_gets_one_probe() {
    let base = Instant::now();
    let mut s = Sweep::new(vec![retry_job(0, 3, 100)], cfg(0), base).unwrap();
    let sent = drain_sends(&mut s, base);
    assert_eq!(sent.len(), 1, "one probe at a time");
    assert!(!s.all_sent(), "a retry may still be queued");
    assert_eq!(s.deadline(), None, "so the deadline is not final");
    let (a, req) = &sent[0];
    let out = s.handle_reply(&raw_reply_for(*a, req), *a, base + ms(4));
    assert!(matches!(out, ReplyOutcome::Matched { .. }), "{out:?}");
    let ev = done_events(&mut s);
    assert_eq!(ev.len(), 1);
    assert_eq!((ev[0].1.sent, ev[0].1.received), (1, 1));
    assert!(s.is_finished());
    assert!(drain_sends(&mut s, base + ms(1000)).is_empty());
    assert_eq!(s.counters().sent, 1);
}

#[test]
fn a_silent_retrying_host_is_probed_again_as_each_timeout_runs_out() {
    let base = Instant::now();
    // 2 retries, backoff 2.0: timeouts 100, 200, 400 ms.
    let mut s = Sweep::new(vec![retry_job(0, 2, 200)], cfg(0), base).unwrap();
    let j = s.job(0).copied().unwrap();
    let timeouts: Vec<_> = (0..3).map(|k| j.probe_timeout(k)).collect();
    assert_eq!(timeouts, [ms(100), ms(200), ms(400)]);
    assert_eq!(j.total_wait(), Some(ms(700)));
    assert_eq!(drain_sends(&mut s, base).len(), 1);
    assert_eq!(s.poll_timeout(), Some(base + ms(100)));
    // Nothing more before the first timeout runs out.
    s.handle_timeout(base + ms(99));
    assert!(drain_sends(&mut s, base + ms(99)).is_empty());
    s.handle_timeout(base + ms(100));
    assert!(done_events(&mut s).is_empty(), "it has retries left");
    assert_eq!(s.next_send_time(), Some(base + ms(100)));
    assert_eq!(drain_sends(&mut s, base + ms(100)).len(), 1);
    // The second try waits 200 ms.
    assert_eq!(s.poll_timeout(), Some(base + ms(300)));
    s.handle_timeout(base + ms(299));
    assert!(drain_sends(&mut s, base + ms(299)).is_empty());
    s.handle_timeout(base + ms(300));
    assert_eq!(drain_sends(&mut s, base + ms(300)).len(), 1);
    // The last: every probe is out, and the deadline is its timeout's end.
    assert!(s.all_sent());
    assert_eq!(s.deadline(), Some(base + ms(700)));
    s.handle_timeout(base + ms(699));
    assert!(done_events(&mut s).is_empty());
    s.handle_timeout(base + ms(700));
    let ev = done_events(&mut s);
    assert_eq!((ev[0].1.sent, ev[0].1.received), (3, 0));
    assert!(s.is_finished());
}

#[test]
fn a_retrying_host_answering_its_second_probe_is_done_then() {
    let base = Instant::now();
    let mut s = Sweep::new(vec![retry_job(0, 3, 150)], cfg(0), base).unwrap();
    drain_sends(&mut s, base);
    s.handle_timeout(base + ms(100));
    let sent = drain_sends(&mut s, base + ms(100));
    assert_eq!(sent.len(), 1);
    let (a, req) = &sent[0];
    // Within the second probe's 150 ms, though past the first's 100.
    let out = s.handle_reply(&raw_reply_for(*a, req), *a, base + ms(220));
    assert!(
        matches!(out, ReplyOutcome::Matched { rtt, .. } if rtt == ms(120)),
        "{out:?}"
    );
    let ev = done_events(&mut s);
    assert_eq!((ev[0].1.sent, ev[0].1.received), (2, 1));
    assert!(s.is_finished());
    assert!(drain_sends(&mut s, base + ms(1000)).is_empty());
}

#[test]
fn a_reply_to_an_earlier_try_counts_within_the_try_now_out() {
    // fping's default mode judges a reply by the host's current timeout, which the
    // backoff made longer: try 0 (100 ms) answered after 150 ms, while try 1 (200 ms)
    // is out, answers the host; try 1's own reply then is a duplicate.
    let base = Instant::now();
    let mut s = Sweep::new(vec![retry_job(0, 2, 200)], cfg(0), base).unwrap();
    let first = drain_sends(&mut s, base);
    s.handle_timeout(base + ms(100));
    let second = drain_sends(&mut s, base + ms(100));
    assert_eq!(second.len(), 1);
    let (a, req) = &first[0];
    let out = s.handle_reply(&raw_reply_for(*a, req), *a, base + ms(150));
    assert_eq!(
        out,
        ReplyOutcome::Matched {
            job: 0,
            rtt: ms(150)
        }
    );
    let ev = done_events(&mut s);
    assert_eq!((ev[0].1.sent, ev[0].1.received), (2, 1));
    assert!(s.is_finished());
    let (a, req) = &second[0];
    let out = s.handle_reply(&raw_reply_for(*a, req), *a, base + ms(160));
    assert_eq!(out, ReplyOutcome::Ignored(IgnoreReason::Duplicate));
    assert!(drain_sends(&mut s, base + ms(1000)).is_empty());
    // Beyond the try now out (200 ms): late, and the host goes on to its last try.
    let mut s = Sweep::new(vec![retry_job(0, 2, 200)], cfg(0), base).unwrap();
    let first = drain_sends(&mut s, base);
    s.handle_timeout(base + ms(100));
    drain_sends(&mut s, base + ms(100));
    let (a, req) = &first[0];
    let out = s.handle_reply(&raw_reply_for(*a, req), *a, base + ms(201));
    assert_eq!(out, ReplyOutcome::Ignored(IgnoreReason::Late));
    assert!(done_events(&mut s).is_empty());
    // A counting job's lost probe stays lost whatever comes after.
    let mut s = Sweep::new(vec![job(0, 2)], cfg(0), base).unwrap();
    let sent = drain_sends(&mut s, base);
    s.handle_timeout(base + ms(1000));
    let (a, req) = &sent[0];
    let out = s.handle_reply(&raw_reply_for(*a, req), *a, base + ms(1001));
    assert_eq!(out, ReplyOutcome::Ignored(IgnoreReason::Late));
}

/// fping's default mode (`icmppingretry`) sends the next try the moment a try's timeout
/// runs out and judges every reply by the timeout of the try then out, longer by the
/// backoff: try 0 (100 ms) answered after 150 ms, while try 1 (200 ms) would be out,
/// answers the host. So it must here whatever the sweep had done when it read the
/// reply: try 0's expiry not handled yet (read in the same receive tick), or handled
/// with try 1 still waiting for its send slot (a paced, busy sweep). It was late in
/// both cases, and answered the host only once try 1 had left: whether a host was up
/// depended on when the driver read its reply. Try 1 then never leaves; past try 1's
/// timeout, or past the last try's own, a reply is late as before.
#[test]
fn a_reply_to_a_try_counts_by_the_next_try_whenever_it_is_read() {
    let base = Instant::now();
    // 2 retries, backoff 2.0: tries wait 100, 200 and 400 ms.
    for expiry_handled in [false, true] {
        let mut s = Sweep::new(vec![retry_job(0, 2, 200)], cfg(0), base).unwrap();
        let first = drain_sends(&mut s, base);
        if expiry_handled {
            s.handle_timeout(base + ms(100));
            assert!(s.next_send_time().is_some(), "try 1 is due, not sent");
        }
        let (a, req) = &first[0];
        let out = s.handle_reply(&raw_reply_for(*a, req), *a, base + ms(150));
        let why = format!("try 0's expiry handled: {expiry_handled}");
        assert_eq!(
            out,
            ReplyOutcome::Matched {
                job: 0,
                rtt: ms(150)
            },
            "{why}"
        );
        // Try 1, which fping had sent at 100 ms, counts as sent though it never left.
        let ev = done_events(&mut s);
        assert_eq!((ev[0].1.sent, ev[0].1.received), (2, 1), "{why}");
        assert!(s.is_finished() && s.in_flight() == 0, "{why}");
        assert!(drain_sends(&mut s, base + ms(1000)).is_empty(), "{why}");
        assert_eq!(s.counters().sent, 1, "{why}");
    }
    // Read before try 0's expiry was handled, but past try 1's 200 ms too: try 1 would
    // have run out as well, and try 2 (400 ms, from 300 ms) would be out: 350 ms counts.
    let mut s = Sweep::new(vec![retry_job(0, 2, 200)], cfg(0), base).unwrap();
    let (a, req) = drain_sends(&mut s, base).pop().unwrap();
    let out = s.handle_reply(&raw_reply_for(a, &req), a, base + ms(350));
    assert_eq!(
        out,
        ReplyOutcome::Matched {
            job: 0,
            rtt: ms(350)
        }
    );
    // 250 ms is past try 1's 200 ms while try 1 would be out: late, and try 1 leaves.
    let mut s = Sweep::new(vec![retry_job(0, 2, 200)], cfg(0), base).unwrap();
    let (a, req) = drain_sends(&mut s, base).pop().unwrap();
    let out = s.handle_reply(&raw_reply_for(a, &req), a, base + ms(250));
    assert_eq!(out, ReplyOutcome::Ignored(IgnoreReason::Late));
    assert_eq!(drain_sends(&mut s, base + ms(250)).len(), 1, "try 1");
    // Its copy is late too, not a duplicate: the try was not answered.
    let out = s.handle_reply(&raw_reply_for(a, &req), a, base + ms(251));
    assert_eq!(out, ReplyOutcome::Ignored(IgnoreReason::Late));
    // The last try has no next one: past its own timeout, late.
    let mut s = Sweep::new(vec![retry_job(0, 1, 200)], cfg(0), base).unwrap();
    drain_sends(&mut s, base);
    s.handle_timeout(base + ms(100));
    let (a, req) = drain_sends(&mut s, base + ms(100)).pop().unwrap();
    let out = s.handle_reply(&raw_reply_for(a, &req), a, base + ms(301));
    assert_eq!(out, ReplyOutcome::Ignored(IgnoreReason::Late));
    assert_eq!(done_events(&mut s)[0].1.received, 0);
}

/// How far a sweep had got when it read a slow reply to a retrying host's try 0
/// ([`try_0_answered_at`]): try 0's expiry not handled, handled with try 1 queued (for
/// its send slot), or try 1 sent.
const READ_AT_STEPS: [&str; 3] = ["expiry not handled", "try 1 queued", "try 1 sent"];

/// A sweep of one retrying host (2 retries, backoff 2.0: tries wait 100, 200 and 400 ms)
/// whose reply to try 0 comes at `at` ms, past try 0's timeout, read at `step` (one of
/// [`READ_AT_STEPS`]; try 1 due or sent at 100 ms), having answered the host; and that
/// reply's bytes, source and arrival.
fn try_0_answered_at(step: &str, at: u64) -> (Sweep, Vec<u8>, IpAddr, Instant) {
    let base = Instant::now();
    let mut s = Sweep::new(vec![retry_job(0, 2, 200)], cfg(0), base).unwrap();
    let (a, req) = drain_sends(&mut s, base).pop().unwrap();
    if step != "expiry not handled" {
        s.handle_timeout(base + ms(100));
    }
    if step == "try 1 sent" {
        assert_eq!(drain_sends(&mut s, base + ms(100)).len(), 1);
    }
    let reply = raw_reply_for(a, &req);
    let out = s.handle_reply(&reply, a, base + ms(at));
    let answered = ReplyOutcome::Matched {
        job: 0,
        rtt: ms(at),
    };
    assert_eq!(out, answered, "{at} ms, {step}");
    (s, reply, a, base + ms(at))
}

/// A copy of the reply that answered a retrying host is a duplicate, however far the
/// sweep had got when it read the reply (try 0's expiry not handled, handled with try 1
/// queued, or try 1 sent): it was a duplicate only in the first case, late in the
/// others, so the counters said what the driver's timing was, not what came back.
#[test]
fn a_copy_of_the_reply_that_answered_a_retrying_host_is_a_duplicate_whenever_read() {
    for step in READ_AT_STEPS {
        let (mut s, reply, a, at) = try_0_answered_at(step, 150);
        let out = s.handle_reply(&reply, a, at + ms(1));
        assert_eq!(
            out,
            ReplyOutcome::Ignored(IgnoreReason::Duplicate),
            "{step}"
        );
        let c = s.counters();
        assert_eq!((c.received, c.duplicate, c.late), (1, 1, 0), "{step}");
    }
}

/// fping's default mode sends every try of a host under one index, with one reply slot
/// ("duplicate for [0]"): once the host answered, a reply to any of its tries, however
/// slow, is a duplicate. A slow reply to a try whose timeout had run out was counted
/// late here instead (its try was lost), so a retrying host's slow replies read as late
/// where fping reads duplicates. Not yet answered, or once all its tries ran out, such
/// a reply is late as before; and so is one of a counting job, whose slot is per probe,
/// past its probe's timeout after another probe was answered.
#[test]
fn once_a_retrying_host_answered_a_reply_to_any_of_its_tries_is_a_duplicate() {
    let base = Instant::now();
    let dup = ReplyOutcome::Ignored(IgnoreReason::Duplicate);
    let late = ReplyOutcome::Ignored(IgnoreReason::Late);
    // 2 retries, backoff 2.0: tries wait 100, 200 and 400 ms, leaving at 0, 100, 300.
    // The host is answered by try 2 in time, or by try 1's reply past its 200 ms but
    // within try 2's 400 ms.
    for answer in [(2, 310), (1, 350)] {
        let mut s = Sweep::new(vec![retry_job(0, 2, 200)], cfg(0), base).unwrap();
        let mut tries = drain_sends(&mut s, base);
        for t in [100, 300] {
            s.handle_timeout(base + ms(t));
            tries.extend(drain_sends(&mut s, base + ms(t)));
        }
        let a = tries[0].0;
        let reply = |k: usize| raw_reply_for(a, &tries[k].1);
        let out = s.handle_reply(&reply(answer.0), a, base + ms(answer.1));
        assert!(matches!(out, ReplyOutcome::Matched { .. }), "{answer:?}");
        for (k, at) in [(0, 360), (1, 370), (2, 380), (0, 2000)] {
            let out = s.handle_reply(&reply(k), a, base + ms(at));
            assert_eq!(out, dup, "answered by {answer:?}: try {k} at {at} ms");
        }
        let c = s.counters();
        assert_eq!((c.received, c.duplicate, c.late), (1, 4, 0), "{answer:?}");
    }
    // Not answered: a reply past the try fping would have out is late, before the host
    // is done and after.
    let mut s = Sweep::new(vec![retry_job(0, 1, 200)], cfg(0), base).unwrap();
    let (a, t0) = drain_sends(&mut s, base).pop().unwrap();
    s.handle_timeout(base + ms(100));
    drain_sends(&mut s, base + ms(100));
    assert_eq!(
        s.handle_reply(&raw_reply_for(a, &t0), a, base + ms(250)),
        late
    );
    s.handle_timeout(base + ms(300));
    assert_eq!(done_events(&mut s)[0].1.received, 0);
    assert_eq!(
        s.handle_reply(&raw_reply_for(a, &t0), a, base + ms(310)),
        late
    );
    // A counting job: probe 1 answered, probe 0's reply past its timeout is late.
    let mut s = Sweep::new(vec![job(0, 2)], cfg(0), base).unwrap();
    let mut sent = drain_sends(&mut s, base);
    sent.extend(drain_sends(&mut s, base + ms(20)));
    let (a, p1) = &sent[1];
    let out = s.handle_reply(&raw_reply_for(*a, p1), *a, base + ms(30));
    assert!(matches!(out, ReplyOutcome::Matched { .. }));
    s.handle_timeout(base + ms(1000));
    let (a, p0) = &sent[0];
    assert_eq!(
        s.handle_reply(&raw_reply_for(*a, p0), *a, base + ms(1001)),
        late
    );
}

/// fping counts every try it sent (when it is answered or runs out): a host whose try 0
/// is answered at 150 ms, past its 100 ms but within try 1's 200 ms, cost fping two
/// requests, try 1 having left at 100 ms; answered at 350 ms, three (try 2 from 300 ms).
/// The sweep counted only the tries it had handed out when it read the reply: one while
/// try 0's expiry was not handled yet or try 1 waited for its send slot, two once try 1
/// had left. The loss a host showed (`sweep --retries`) depended on when the sweep read
/// its reply and how busy it was, and was one try below fping's.
#[test]
fn a_retrying_host_answered_by_a_slow_reply_counts_the_tries_fping_sent() {
    // Try 1 leaves at 100 ms in fping, try 2 at 300 ms.
    for (at, tries) in [(150, 2), (350, 3)] {
        for step in READ_AT_STEPS {
            let (mut s, ..) = try_0_answered_at(step, at);
            let st = done_events(&mut s)[0].1;
            assert_eq!((st.sent, st.received), (tries, 1), "{at} ms, {step}");
            // The sweep's own count is of what it handed out.
            let handed_out = if step == "try 1 sent" { 2 } else { 1 };
            assert_eq!(s.counters().sent, handed_out, "{at} ms, {step}");
        }
    }
}

/// A try whose send failed is a retrying host's last, as in fping's default mode, which
/// schedules no timeout for a try it could not send and retries only from a timeout:
/// it counts as sent and lost, and no try follows it (the host was retried, and could
/// read as up where fping, and Zabbix's `icmppingretry`, read it as down). A reply to
/// the try before it, within the failed try's timeout, still answers the host, as
/// fping counts it; past it, it is late, fping having sent no later try.
#[test]
fn a_failed_send_ends_a_retrying_hosts_tries() {
    let base = Instant::now();
    // 2 retries, backoff 2.0: tries wait 100, 200 and 400 ms; try 1 (at 100 ms) fails.
    // Within its 200 ms: answered, counting the 2 tries sent; past them (fping would
    // have sent try 2 at 300 ms, had try 1 left): late, and unreachable.
    for (at, answered) in [(150, true), (301, false)] {
        let mut s = Sweep::new(vec![retry_job(0, 2, 200)], cfg(0), base).unwrap();
        let (a, req) = drain_sends(&mut s, base).pop().unwrap();
        s.handle_timeout(base + ms(100));
        let t1 = s.poll_transmit(base + ms(100)).unwrap().token;
        s.on_send_error(t1);
        assert_eq!(s.next_send_time(), None, "{at} ms: no try 2");
        assert!(s.all_sent() && done_events(&mut s).is_empty(), "{at} ms");
        let out = s.handle_reply(&raw_reply_for(a, &req), a, base + ms(at));
        let want = match answered {
            true => ReplyOutcome::Matched {
                job: 0,
                rtt: ms(at),
            },
            false => ReplyOutcome::Ignored(IgnoreReason::Late),
        };
        assert_eq!(out, want, "{at} ms");
        s.handle_timeout(base + ms(at));
        let ev = done_events(&mut s);
        let got = (ev[0].1.sent, ev[0].1.received);
        assert_eq!(got, (2, u32::from(answered)), "{at} ms");
        assert!(drain_sends(&mut s, base + ms(1000)).is_empty(), "{at} ms");
        assert!(s.is_finished(), "{at} ms");
    }
    // The first try failing: no try left, no reply can come; unreachable at once.
    let mut s = Sweep::new(vec![retry_job(0, 2, 200)], cfg(0), base).unwrap();
    let t0 = s.poll_transmit(base).unwrap().token;
    s.on_send_error(t0);
    let ev = done_events(&mut s);
    assert_eq!((ev[0].1.sent, ev[0].1.received), (1, 0));
    assert!(s.is_finished() && s.all_sent() && s.next_send_time().is_none());
    assert_eq!(s.counters().send_errors, 1);
}

/// The last try failing to send does not end a host whose earlier try left: a slow
/// reply to that one within the failed try's timeout answers the host (as fping, which
/// goes on reading replies and judges them by the timeout of the try it sent last,
/// counts it). The host was complete, and unreachable, the moment the last send failed,
/// and the reply late: whether it answered depended on whether the sweep read it before
/// or after that send. (Found by
/// [`random_sweeps_finish_retry_in_order_and_count_as_fping`].) With no reply the host
/// completes when that try's timeout would have run out.
#[test]
fn a_reply_to_a_try_counts_by_the_last_try_when_that_one_failed_to_send() {
    let base = Instant::now();
    // 1 retry, backoff 2.0: tries wait 100 and 200 ms; try 1 (at 100 ms) fails.
    for reply_at in [Some(150), None] {
        let mut s = Sweep::new(vec![retry_job(0, 1, 200)], cfg(0), base).unwrap();
        let (a, req) = drain_sends(&mut s, base).pop().unwrap();
        s.handle_timeout(base + ms(100));
        let t1 = s.poll_transmit(base + ms(100)).unwrap().token;
        s.on_send_error(t1);
        assert!(done_events(&mut s).is_empty(), "{reply_at:?}");
        match reply_at {
            Some(at) => {
                let out = s.handle_reply(&raw_reply_for(a, &req), a, base + ms(at));
                let answered = ReplyOutcome::Matched {
                    job: 0,
                    rtt: ms(at),
                };
                assert_eq!(out, answered);
            }
            None => {
                s.handle_timeout(base + ms(299));
                assert!(done_events(&mut s).is_empty());
                s.handle_timeout(base + ms(300));
            }
        }
        let ev = done_events(&mut s);
        let got = (ev[0].1.sent, ev[0].1.received);
        assert_eq!(got, (2, u32::from(reply_at.is_some())), "{reply_at:?}");
        assert!(s.is_finished() && s.in_flight() == 0, "{reply_at:?}");
        assert_eq!(s.counters().send_errors, 1);
    }
}

/// fping sends a try the moment the one before ran out (from its timeout handler, not
/// paced), so the try it has out at any instant follows from its first try alone. A
/// paced sweep may send a retry later: a reply to try 0 at 320 ms (try 2, 400 ms, out
/// from 300 ms in fping) answered the host while try 1 waited for its send slot, and
/// was late once try 1 had left at 250 ms (counted from then, try 1's 200 ms were out):
/// whether a host was up depended on how busy the sweep was.
#[test]
fn a_reply_to_a_try_counts_by_fpings_schedule_however_late_the_retry_left() {
    let base = Instant::now();
    // 2 retries, backoff 2.0: tries wait 100, 200 and 400 ms.
    for try1_left in [None, Some(100), Some(250)] {
        let mut s = Sweep::new(vec![retry_job(0, 2, 200)], cfg(0), base).unwrap();
        let (a, req) = drain_sends(&mut s, base).pop().unwrap();
        s.handle_timeout(base + ms(100));
        if let Some(t) = try1_left {
            assert_eq!(drain_sends(&mut s, base + ms(t)).len(), 1);
        }
        let out = s.handle_reply(&raw_reply_for(a, &req), a, base + ms(320));
        let got = (out, s.is_finished());
        let answered = ReplyOutcome::Matched {
            job: 0,
            rtt: ms(320),
        };
        assert_eq!(got, (answered, true), "try 1 left at {try1_left:?} ms");
        assert!(drain_sends(&mut s, base + ms(1000)).is_empty());
    }
    // Past the end of fping's last try (700 ms), fping still judges by its 400 ms: try 1,
    // left at 350 ms, answered at 720 ms, answers the host.
    let mut s = Sweep::new(vec![retry_job(0, 2, 200)], cfg(0), base).unwrap();
    drain_sends(&mut s, base);
    s.handle_timeout(base + ms(100));
    let (a, req) = drain_sends(&mut s, base + ms(350)).pop().unwrap();
    let out = s.handle_reply(&raw_reply_for(a, &req), a, base + ms(720));
    let answered = ReplyOutcome::Matched {
        job: 0,
        rtt: ms(370),
    };
    assert_eq!(out, answered);
}

/// A late reply is a lost try, and the host is tried again; a failed send is its last
/// try (see [`a_failed_send_ends_a_retrying_hosts_tries`]).
#[test]
fn a_late_reply_or_a_failed_send_of_a_retrying_host_is_a_lost_try() {
    let base = Instant::now();
    let mut s = Sweep::new(
        vec![retry_job(0, 1, 100), retry_job(1, 1, 100)],
        cfg(0),
        base,
    )
    .unwrap();
    let t0 = s.poll_transmit(base).unwrap().token;
    let sent1 = {
        let tx = s.poll_transmit(base).unwrap();
        (tx.addr, tx.packet.to_vec())
    };
    // Job 0's first send failed: no try of it left, so it is unreachable at once.
    s.on_send_error(t0);
    let ev = done_events(&mut s);
    assert_eq!((ev[0].0, ev[0].1.sent, ev[0].1.received), (0, 1, 0));
    assert_eq!(s.next_send_time(), None);
    // Job 1's reply comes after its timeout, before the expiry was handled: lost too,
    // and its retry is due at once.
    let (a, req) = &sent1;
    let out = s.handle_reply(&raw_reply_for(*a, req), *a, base + ms(130));
    assert_eq!(out, ReplyOutcome::Ignored(IgnoreReason::Late));
    let again = drain_sends(&mut s, base + ms(130));
    assert_eq!(again.iter().map(|x| x.0).collect::<Vec<_>>(), vec![addr(1)]);
    s.handle_timeout(base + ms(230));
    let ev = done_events(&mut s);
    assert_eq!(ev.len(), 1);
    assert_eq!((ev[0].0, ev[0].1.sent, ev[0].1.received), (1, 2, 0));
    assert!(s.is_finished());
}

#[test]
fn retrying_and_counting_hosts_share_a_sweep() {
    let base = Instant::now();
    // A counting host whose only probe times out at 1 s, a retrying one whose tries
    // end at 100 + 100 ms, and a retrying one with a 500 ms first timeout, doubling.
    let mut slow = retry_job(2, 1, 200);
    slow.timeout = ms(500);
    let jobs = vec![job(0, 1), retry_job(1, 1, 100), slow];
    let mut s = Sweep::new(jobs, cfg(0), base).unwrap();
    assert_eq!(drain_sends(&mut s, base).len(), 3);
    // The counting host's probe is out, but a retry may follow: nothing is final.
    assert_eq!(s.deadline(), None);
    s.handle_timeout(base + ms(100));
    let out = drain_sends(&mut s, base + ms(100));
    assert_eq!(out.iter().map(|x| x.0).collect::<Vec<_>>(), vec![addr(1)]);
    assert_eq!(s.deadline(), None);
    s.handle_timeout(base + ms(200));
    let ev = done_events(&mut s);
    assert_eq!(
        ev.iter().map(|e| (e.0, e.1.sent)).collect::<Vec<_>>(),
        vec![(1, 2)]
    );
    s.handle_timeout(base + ms(500));
    let out = drain_sends(&mut s, base + ms(500));
    assert_eq!(out.iter().map(|x| x.0).collect::<Vec<_>>(), vec![addr(2)]);
    assert_eq!(s.deadline(), Some(base + ms(1500)));
    s.handle_timeout(base + ms(1000));
    assert_eq!(
        done_events(&mut s).iter().map(|e| e.0).collect::<Vec<_>>(),
        vec![0]
    );
    s.handle_timeout(base + ms(1500));
    let ev = done_events(&mut s);
    assert_eq!(
        ev.iter().map(|e| (e.0, e.1.sent)).collect::<Vec<_>>(),
        vec![(2, 2)]
    );
    assert!(s.is_finished());
}

#[test]
fn retry_jobs_out_of_bounds_are_refused() {
    let base = Instant::now();
    let bad = |j: Job| Sweep::new(vec![j], cfg(0), base).unwrap_err();
    assert!(matches!(
        bad(retry_job(0, 1, 99)),
        SweepError::BadBackoff {
            backoff_pct: 99,
            ..
        }
    ));
    assert!(matches!(
        bad(retry_job(0, 1, 501)),
        SweepError::BadBackoff { .. }
    ));
    // 5.0^40 × 100 ms: far past a day (and past what a Duration holds).
    assert!(matches!(
        bad(retry_job(0, 40, 500)),
        SweepError::WaitTooLong { .. }
    ));
    // 99 intervals of 1,000 s and the timeout: past a day.
    let mut long = job(0, 100);
    long.interval = Duration::from_secs(1000);
    assert!(matches!(bad(long), SweepError::WaitTooLong { .. }));
    // Probes that wait side by side: 100 packets of a 1 h timeout last 1 h 2 s.
    let mut wide = job(0, 100);
    wide.timeout = Duration::from_secs(3600);
    assert!(Sweep::new(vec![wide], cfg(0), base).is_ok());
    // 100 ms × (3^10 − 1) / 2: 49 min.
    assert!(Sweep::new(vec![retry_job(0, 9, 300)], cfg(0), base).is_ok());
}

/// A job of [`random_sweeps_finish_retry_in_order_and_count_as_fping`].
#[derive(Debug, Clone)]
struct AnyJob {
    retry: Option<u16>,
    packets: u32,
    timeout_ms: u64,
    same_addr_as_previous: bool,
}

fn any_job() -> impl Strategy<Value = AnyJob> {
    (
        prop_oneof![Just(None), (100u16..=300).prop_map(Some)],
        1u32..5,
        prop_oneof![Just(50u64), Just(100), Just(150), Just(200)],
        any::<bool>(),
    )
        .prop_map(|(retry, packets, timeout_ms, same)| AnyJob {
            retry,
            packets,
            timeout_ms,
            same_addr_as_previous: same,
        })
}

/// What fping's default mode (`fping -r`, `icmppingretry`) makes of the replies to a
/// retrying `job`'s tries, in the order they were read, (arrival, try); the tries left
/// at `tries` (`None`: the send failed). fping sends every try of a host under one
/// index, with one reply slot, each try the moment the one before ran out, and judges
/// a reply by the timeout of the try it has out then (counting from the first try that
/// left here). A try whose send failed is its last: fping schedules no timeout for it,
/// and retries only from a timeout. Once a reply counted, every other is a duplicate.
/// Before, a reply within that timeout answers the host, and fping had sent every try
/// up to that one; any other is late. A reply within its own try's timeout is read
/// while that try is the last one out here, and the tries handed out count (pacing may
/// have sent it later than fping would have, but its reply came in time for it). A
/// host never answered sent all its tries, up to a failed one. Returns each reply's
/// RTT if it counted, or why not, and the host's statistics.
fn fping_default_mode(
    job: &Job,
    tries: &[Option<Instant>],
    replies: &[(Instant, u32)],
) -> (Vec<Result<Duration, IgnoreReason>>, PingStats) {
    let timeout = |k: u32| job.probe_timeout(k);
    let last = tries
        .iter()
        .position(Option::is_none)
        .map_or(job.packets - 1, |k| k as u32);
    let mut stats = PingStats::default();
    let mut out = Vec::new();
    for &(at, k) in replies {
        if stats.received > 0 {
            out.push(Err(IgnoreReason::Duplicate));
            continue;
        }
        let rtt = at.duration_since(tries[k as usize].expect("a reply to a try that left"));
        let first = tries.iter().position(Option::is_some).unwrap() as u32;
        let (mut m, mut from) = (first, tries[first as usize].unwrap());
        while m < last && at > from + timeout(m) {
            from += timeout(m);
            m += 1;
        }
        let sent = if rtt <= timeout(k) {
            k + 1
        } else if rtt <= timeout(m) {
            m + 1
        } else {
            out.push(Err(IgnoreReason::Late));
            continue;
        };
        stats.sent = sent;
        stats.record(rtt);
        out.push(Ok(rtt));
    }
    if stats.received == 0 {
        stats.sent = last + 1;
    }
    (out, stats)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    /// Retrying and counting jobs (some sharing an address) under replies and their
    /// copies, silence, late replies, send errors, batches that left late, pacing, and
    /// replies read on each receive tick: the sweep finishes, each job is reported once,
    /// none sends more than its packets, a retrying one never tries again before its
    /// last try's timeout ran out, nor after a send failed, and each of its replies
    /// counts (matched, duplicate or late) and its statistics are as fping's default
    /// mode counts them ([`fping_default_mode`]). (From reviews of the retry mode.)
    /// Half of the sweeps run in the tables of an earlier one cut short with probes in
    /// flight and due ([`Sweep::recycle`]): nothing of it may show.
    #[test]
    fn random_sweeps_finish_retry_in_order_and_count_as_fping(
        jobs in proptest::collection::vec(any_job(), 1..8),
        fate in proptest::collection::vec((0u8..4, 0u64..300, 0u64..8), 64),
        pps in prop_oneof![Just(0u32), Just(200), Just(2000)],
        tick in prop_oneof![Just(0u64), Just(7)],
        earlier in proptest::option::of((proptest::collection::vec(any_job(), 1..8), 0u64..4)),
    ) {
        let base = Instant::now();
        let mut addrs = Vec::new();
        let js: Vec<Job> = jobs.iter().enumerate().map(|(i, r)| {
            let a = if r.same_addr_as_previous && i > 0 { addrs[i - 1] } else { addr(i as u32) };
            addrs.push(a);
            Job {
                addr: a,
                packets: r.packets,
                interval: ms(20),
                size: 56,
                timeout: ms(r.timeout_ms),
                retry: r.retry.map(|b| Retry { backoff_pct: b }),
            }
        }).collect();
        let space = match &earlier {
            None => SweepSpace::default(),
            Some((jobs, rounds)) => cut_short(jobs, *rounds, base),
        };
        let mut s = Sweep::new_in(&js, cfg(pps), base, space).unwrap();
        let (mut now, mut f, mut steps) = (base, 0usize, 0);
        // (arrival, job, try, bytes)
        let mut replies: Vec<(Instant, usize, u32, Vec<u8>)> = Vec::new();
        let mut done: Vec<Option<PingStats>> = vec![None; js.len()];
        // Per job: when each try left (`None`: its send failed); each reply read,
        // (arrival, try), and what the sweep made of it.
        let mut sent_at: Vec<Vec<Instant>> = vec![Vec::new(); js.len()];
        let mut tries: Vec<Vec<Option<Instant>>> = vec![Vec::new(); js.len()];
        let mut read: Vec<Vec<(Instant, u32)>> = vec![Vec::new(); js.len()];
        let mut outcomes: Vec<Vec<Result<Duration, IgnoreReason>>> = vec![Vec::new(); js.len()];
        loop {
            steps += 1;
            prop_assert!(steps < 10_000, "the sweep never finished");
            replies.sort_by_key(|r| r.0);
            while replies.first().is_some_and(|r| r.0 <= now) {
                let (t, j, k, b) = replies.remove(0);
                let outcome = match s.handle_reply(&b, js[j].addr, t) {
                    ReplyOutcome::Matched { job, rtt } => {
                        prop_assert_eq!(job, j, "matched to another job");
                        Ok(rtt)
                    }
                    ReplyOutcome::Ignored(why) => Err(why),
                };
                read[j].push((t, k));
                outcomes[j].push(outcome);
            }
            s.handle_timeout(now);
            for Event::HostDone { job, stats } in std::iter::from_fn(|| s.poll_event()) {
                prop_assert!(done[job].is_none(), "job {} reported twice", job);
                done[job] = Some(stats);
            }
            if s.is_finished() {
                break;
            }
            let mut batch = Vec::new();
            while let Some(tx) = s.poll_transmit(now) {
                batch.push((tx.token, tx.addr, tx.packet.to_vec()));
            }
            let mut leave = now;
            for (token, a, bytes) in batch {
                let (j, k) = token.parts();
                let j = j as usize;
                let (kind, rtt, delay) = fate[f % fate.len()];
                f += 1;
                leave += ms(delay);
                if js[j].retry.is_some() {
                    prop_assert!(!tries[j].contains(&None), "job {} tried after a failed send", j);
                    if let Some(prev) = sent_at[j].last() {
                        let t = js[j].probe_timeout(k - 1);
                        prop_assert!(now >= *prev + t, "job {} try {} early", j, k);
                    }
                }
                if kind == 0 {
                    s.on_send_error(token);
                    sent_at[j].push(now);
                    tries[j].push(None);
                    continue;
                }
                s.sent_at(token, leave);
                sent_at[j].push(leave);
                tries[j].push(Some(leave));
                // 2: a reply; 3: a reply and a copy of it 40 ms later.
                if kind >= 2 {
                    replies.push((leave + ms(rtt), j, k, raw_reply_for(a, &bytes)));
                }
                if kind == 3 {
                    replies.push((leave + ms(rtt + 40), j, k, raw_reply_for(a, &bytes)));
                }
            }
            now = leave;
            for Event::HostDone { job, stats } in std::iter::from_fn(|| s.poll_event()) {
                prop_assert!(done[job].is_none(), "job {} reported twice", job);
                done[job] = Some(stats);
            }
            if s.is_finished() {
                break;
            }
            let next_reply = replies.iter().map(|r| r.0).min();
            let next = match (s.poll_timeout(), next_reply) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => a.or(b).expect("not finished, nothing to wait for"),
            };
            // The driver wakes once per receive tick and reads every reply that came
            // by then (judged by its own arrival) before it expires probes (paced
            // sends are due at fractions of a millisecond).
            let next = match tick {
                0 => next,
                t => {
                    let us = next.duration_since(base).as_micros() as u64;
                    base + Duration::from_micros(us.div_ceil(t * 1000) * t * 1000)
                }
            };
            now = now.max(next);
        }
        for (j, job) in js.iter().enumerate() {
            let st = done[j].expect("every job reported");
            prop_assert_eq!(Some(&st), s.stats(j));
            prop_assert!(st.sent <= job.packets);
            if job.retry.is_some() {
                let (want, stats) = fping_default_mode(job, &tries[j], &read[j]);
                prop_assert_eq!(&outcomes[j], &want, "job {} {:?}, tries {:?}", j, job, tries[j]);
                prop_assert_eq!(st, stats, "job {}", j);
            }
        }
    }
}

/// The tables of a sweep of `jobs` (to other addresses, with another interval) cut
/// short after `rounds` of sends 30 ms apart, probes in flight, expiring and due.
fn cut_short(jobs: &[AnyJob], rounds: u64, base: Instant) -> SweepSpace {
    let js: Vec<Job> = (jobs.iter().enumerate())
        .map(|(i, r)| Job {
            addr: addr(100 + i as u32),
            packets: r.packets,
            interval: ms(30),
            size: 56,
            timeout: ms(r.timeout_ms + 7),
            retry: r.retry.map(|b| Retry { backoff_pct: b }),
        })
        .collect();
    let mut s = Sweep::new(js, cfg(0), base).unwrap();
    for r in 0..=rounds {
        let now = base + ms(30 * r);
        s.handle_timeout(now);
        drain_sends(&mut s, now);
        done_events(&mut s);
    }
    s.recycle()
}

#[test]
fn a_sweep_in_an_earlier_ones_tables_keeps_their_room() {
    let base = Instant::now();
    let jobs: Vec<Job> = (0..500).map(|i| job(i, 3)).collect();
    let mut s = Sweep::new(jobs.clone(), cfg(0), base).unwrap();
    drain_sends(&mut s, base);
    let space = s.recycle();
    // "SweepSpace { jobs: J, probes: P, .. }": the room its tables have, at least what
    // the sweep needed (an allocator may give more).
    let room = format!("{space:?}");
    let count = |field: &str| -> usize {
        let at = room.find(field).expect(field) + field.len();
        let n: String = room[at..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        n.parse().unwrap()
    };
    assert!(
        count("jobs: ") >= 500 && count("probes: ") >= 1500,
        "{room}"
    );
    // Fewer hosts: the room stays (no allocation, no page faulted in again).
    let mut s = Sweep::new_in(&jobs[..100], cfg(0), base + ms(2000), space).unwrap();
    assert_eq!(s.len(), 100);
    assert_eq!(drain_sends(&mut s, base + ms(2000)).len(), 100);
    assert_eq!(format!("{:?}", s.recycle()), room);
}

/// What comes back for one probe in [`any_reply_counts_as_fping_counts_it`]: a copy of
/// its echo reply (a duplicate when there are several), or something like it that must
/// not count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// The target's reply, as the probe was sent.
    Genuine,
    /// The same bytes from another address (the target answering from another of its
    /// addresses, a NAT): only replies from the probed address count.
    FromElsewhere,
    /// Its payload with another sequence number (that of another probe of its host, or
    /// of none sent).
    OtherSeq,
    /// Cut to this many payload bytes: a reply of 16 bytes or more still carries the
    /// whole tag and counts (fping reads no payload: it takes any length); a shorter
    /// one cannot be told from a forgery.
    Truncated(usize),
    /// One payload byte past the tag altered: fping does not compare the data, so it
    /// counts.
    AlteredData,
    /// One byte of the tag altered.
    AlteredTag,
    /// Under another identifier: a raw socket's replies must carry the sweep's own; a
    /// datagram socket's carry the kernel's, so there it counts.
    OtherIdent,
    /// ICMPv4 with a wrong checksum (ICMPv6 checksums are the kernel's to check).
    BadChecksum,
    /// Destination unreachable quoting the probe (ICMPv6: address unreachable): fping
    /// warns and counts the probe lost when its timeout runs out, so does Zabbix.
    Unreachable,
    /// Time exceeded quoting the probe.
    TimeExceeded,
    /// This probe's twin of an earlier iteration (same job, sequence and identifier):
    /// a late reply of the previous sweep.
    Stale,
}

impl Answer {
    /// Whether fping's count mode takes it as a reply to its probe.
    fn counts(self, socket: SocketKind) -> bool {
        match self {
            Answer::Genuine | Answer::AlteredData => true,
            Answer::Truncated(n) => n >= crate::tag::TAG_LEN,
            Answer::OtherIdent => socket == SocketKind::Datagram,
            _ => false,
        }
    }
}

fn any_answer() -> impl Strategy<Value = Answer> {
    prop_oneof![
        4 => Just(Answer::Genuine),
        1 => Just(Answer::FromElsewhere),
        1 => Just(Answer::OtherSeq),
        1 => (0usize..56).prop_map(Answer::Truncated),
        1 => Just(Answer::AlteredData),
        1 => Just(Answer::AlteredTag),
        1 => Just(Answer::OtherIdent),
        1 => Just(Answer::BadChecksum),
        1 => Just(Answer::Unreachable),
        1 => Just(Answer::TimeExceeded),
        1 => Just(Answer::Stale),
    ]
}

/// The IPv6 loopback address: every IPv6 job of these tests probes it (no other is
/// named; the sweep needs no route to any).
fn v6_lo() -> IpAddr {
    IpAddr::V6(std::net::Ipv6Addr::LOCALHOST)
}

/// An address of the same family as `a` that is not a target of these tests.
fn elsewhere(a: IpAddr) -> IpAddr {
    match a {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::new(127, 0, 167, 250)),
        IpAddr::V6(_) => "::ffff:127.0.167.250".parse().unwrap(),
    }
}

/// `icmp` (an ICMP or ICMPv6 message) from `src`, as a `socket` of its family hands it
/// out: behind an IPv4 header for a raw IPv4 socket, bare otherwise.
fn framed(socket: SocketKind, src: IpAddr, icmp: &[u8]) -> Vec<u8> {
    match (socket, src) {
        (SocketKind::Raw, IpAddr::V4(s)) => {
            let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 1, 0, 0];
            ip[2..4].copy_from_slice(&((20 + icmp.len()) as u16).to_be_bytes());
            ip.extend_from_slice(&s.octets());
            ip.extend_from_slice(&[127, 0, 0, 1]);
            ip.extend_from_slice(icmp);
            ip
        }
        _ => icmp.to_vec(),
    }
}

/// The ICMP error `icmp_type`/`code` quoting `request` (sent to `dst`), as a router on
/// the way sends it: ICMP header, the probe's IP header, the probe.
fn error_quoting(dst: IpAddr, request: &[u8], icmp_type: u8, code: u8) -> Vec<u8> {
    let mut msg = vec![icmp_type, code, 0, 0, 0, 0, 0, 0];
    match dst {
        IpAddr::V4(d) => {
            let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 1, 1, 0, 0, 127, 0, 0, 1];
            ip[2..4].copy_from_slice(&((20 + request.len()) as u16).to_be_bytes());
            ip.extend_from_slice(&d.octets());
            msg.extend_from_slice(&ip);
        }
        IpAddr::V6(d) => {
            let mut ip = vec![0x60, 0, 0, 0];
            ip.extend_from_slice(&(request.len() as u16).to_be_bytes());
            ip.extend_from_slice(&[58, 1]);
            ip.extend_from_slice(&std::net::Ipv6Addr::LOCALHOST.octets());
            ip.extend_from_slice(&d.octets());
            msg.extend_from_slice(&ip);
        }
    }
    msg.extend_from_slice(request);
    if dst.is_ipv4() {
        EchoPacket::new_unchecked(&mut msg[..]).fill_checksum_v4();
    }
    msg
}

/// What a `socket` reads for `answer` to `request` (sent to `dst`; `stale` is its twin
/// of the previous iteration): (source address, bytes).
fn answer_bytes(
    answer: Answer,
    socket: SocketKind,
    dst: IpAddr,
    request: &[u8],
    stale: &[u8],
) -> (IpAddr, Vec<u8>) {
    let v4 = dst.is_ipv4();
    let (echo_reply, unreachable, time_exceeded) = if v4 {
        (0, (3, 1), (11, 0))
    } else {
        (129, (1, 3), (3, 0))
    };
    let reply_to = |req: &[u8]| {
        let mut icmp = req.to_vec();
        let mut p = EchoPacket::new_unchecked(&mut icmp[..]);
        p.set_msg_type(echo_reply);
        if socket == SocketKind::Datagram {
            p.set_ident(40_000); // the ping socket's port, as the kernel writes it
        }
        icmp
    };
    let mut icmp = reply_to(request);
    let mut src = dst;
    match answer {
        Answer::Genuine => {}
        Answer::FromElsewhere => src = elsewhere(dst),
        Answer::OtherSeq => {
            let mut p = EchoPacket::new_unchecked(&mut icmp[..]);
            let seq = p.seq();
            p.set_seq(seq.wrapping_add(1));
        }
        Answer::Truncated(n) => icmp.truncate(HEADER_LEN + n),
        Answer::AlteredData => icmp[HEADER_LEN + 20] ^= 0x80,
        Answer::AlteredTag => icmp[HEADER_LEN + 5] ^= 0x01,
        Answer::OtherIdent => {
            let mut p = EchoPacket::new_unchecked(&mut icmp[..]);
            let ident = p.ident();
            p.set_ident(ident ^ 0x0101);
        }
        Answer::BadChecksum | Answer::Stale => {}
        Answer::Unreachable => {
            icmp = error_quoting(dst, request, unreachable.0, unreachable.1);
            src = elsewhere(dst);
        }
        Answer::TimeExceeded => {
            icmp = error_quoting(dst, request, time_exceeded.0, time_exceeded.1);
            src = elsewhere(dst);
        }
    }
    if answer == Answer::Stale {
        icmp = reply_to(stale);
    }
    let is_echo = !matches!(answer, Answer::Unreachable | Answer::TimeExceeded);
    if v4 && is_echo {
        let mut p = EchoPacket::new_unchecked(&mut icmp[..]);
        p.fill_checksum_v4();
        if answer == Answer::BadChecksum {
            let c = p.checksum();
            p.set_checksum(c ^ 0x0400);
        }
    } else if answer == Answer::BadChecksum {
        // Linux drops an ICMPv6 message with a bad checksum before any socket sees it:
        // what arrives instead is a tag that does not verify.
        icmp[HEADER_LEN + 5] ^= 0x01;
    }
    (src, framed(socket, src, &icmp))
}

/// An ICMP error quoting a probe (destination unreachable, time exceeded; ICMP and
/// ICMPv6) is no answer, nor taken for the echo reply its quote carries: fping warns of
/// it and counts the probe lost when its timeout runs out, and so does Zabbix.
#[test]
fn an_icmp_error_quoting_a_probe_is_no_answer() {
    let base = Instant::now();
    let v4 = IpAddr::V4(Ipv4Addr::new(127, 0, 167, 1));
    let jobs = vec![
        Job {
            addr: v4,
            ..job(0, 1)
        },
        Job {
            addr: v6_lo(),
            ..job(0, 1)
        },
    ];
    let mut s = Sweep::new(jobs, cfg(0), base).unwrap();
    for (dst, req) in drain_sends(&mut s, base) {
        for answer in [Answer::Unreachable, Answer::TimeExceeded] {
            let (from, bytes) = answer_bytes(answer, SocketKind::Raw, dst, &req, &req);
            let out = s.handle_reply(&bytes, from, base + ms(1));
            assert_eq!(out, ReplyOutcome::Ignored(IgnoreReason::NotEchoReply));
        }
    }
    assert_eq!(s.in_flight(), 2);
    s.handle_timeout(base + ms(1000));
    let ev = done_events(&mut s);
    assert_eq!(ev.len(), 2);
    for (_, st) in ev {
        let values = (st.is_alive(), st.loss_pct(), st.rtt_seconds(RttMode::Avg));
        assert_eq!(values, (false, 100.0, 0.0));
    }
    assert_eq!(s.counters().not_echo_reply, 4);
}

/// A host of [`any_reply_counts_as_fping_counts_it`]: IPv6 (`::1`) or IPv4, its probes,
/// its timeout, and whether it probes the same address as the host before it.
fn any_host() -> impl Strategy<Value = (bool, u32, u64, bool)> {
    (
        any::<bool>(),
        1u32..4,
        prop_oneof![Just(50u64), Just(100), Just(150)],
        any::<bool>(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    /// Every sort of reply a sweep may read (duplicates, replies from another address,
    /// another sequence or identifier, cut or altered payloads, bad checksums, ICMP
    /// errors quoting the probe, late replies, and the previous iteration's), IPv4 and
    /// IPv6, raw and datagram sockets, several jobs per address: each host's statistics
    /// are fping's count mode's, as Zabbix reads them. A probe is answered when the
    /// first reply that fping takes for it (from its target, its sequence, its tag)
    /// comes within the timeout; its RTT is that reply's, never a later copy's; a
    /// reply is matched to no host but the one its probe went to. Replies are read in
    /// receive ticks, as the driver reads them, some after their probe's timeout ran out.
    #[test]
    fn any_reply_counts_as_fping_counts_it(
        hosts in proptest::collection::vec(any_host(), 1..6),
        answers in proptest::collection::vec(
            proptest::collection::vec((any_answer(), 0u64..200), 0..4),
            1..24,
        ),
        datagram in any::<bool>(),
        tick in prop_oneof![Just(0u64), Just(7), Just(20)],
    ) {
        let socket = if datagram { SocketKind::Datagram } else { SocketKind::Raw };
        let base = Instant::now();
        let mut addrs: Vec<IpAddr> = Vec::new();
        let jobs: Vec<Job> = hosts.iter().enumerate().map(|(i, &(v6, packets, timeout, same))| {
            let a = match (v6, same && i > 0) {
                (true, _) => v6_lo(),
                (false, true) if addrs[i - 1].is_ipv4() => addrs[i - 1],
                (false, _) => IpAddr::V4(Ipv4Addr::new(127, 0, 167, 1 + i as u8)),
            };
            addrs.push(a);
            Job { addr: a, packets, timeout: ms(timeout), ..job(0, 1) }
        }).collect();
        let c = SweepConfig { socket, ..cfg(0) };
        // The previous iteration's requests, by (job, packet): same identifier and
        // sequences, another iteration number.
        let mut stale = HashMap::new();
        let mut old = Sweep::new(jobs.clone(), SweepConfig { iteration: c.iteration - 1, ..c }, base).unwrap();
        let mut t = base;
        while !old.all_sent() {
            while let Some(tx) = old.poll_transmit(t) {
                stale.insert(tx.token.parts(), tx.packet.to_vec());
            }
            t += ms(20);
        }
        let mut s = Sweep::new(jobs.clone(), c, base).unwrap();
        let mut expected = vec![PingStats::default(); jobs.len()];
        // (arrival, job it was built for if it counts, source, bytes)
        let mut replies: Vec<(Instant, Option<usize>, IpAddr, Vec<u8>)> = Vec::new();
        let mut done: Vec<Option<PingStats>> = vec![None; jobs.len()];
        let (mut now, mut n, mut steps) = (base, 0usize, 0);
        loop {
            steps += 1;
            prop_assert!(steps < 10_000, "the sweep never finished");
            replies.sort_by_key(|r| r.0);
            while replies.first().is_some_and(|r| r.0 <= now) {
                let (at, job, from, bytes) = replies.remove(0);
                match s.handle_reply(&bytes, from, at) {
                    ReplyOutcome::Matched { job: j, .. } => {
                        prop_assert_eq!(Some(j), job, "matched to another host");
                    }
                    ReplyOutcome::Ignored(_) => {}
                }
            }
            s.handle_timeout(now);
            for Event::HostDone { job, stats } in std::iter::from_fn(|| s.poll_event()) {
                prop_assert!(done[job].is_none(), "job {} reported twice", job);
                done[job] = Some(stats);
            }
            if s.is_finished() {
                break;
            }
            while let Some(tx) = s.poll_transmit(now) {
                let (j, k) = tx.token.parts();
                let (j, dst, request) = (j as usize, tx.addr, tx.packet.to_vec());
                let these = &answers[n % answers.len()];
                n += 1;
                expected[j].sent += 1;
                // fping takes the first reply it counts; a later copy is a duplicate.
                let first = these.iter().filter(|(a, _)| a.counts(socket)).map(|&(_, d)| d).min();
                if let Some(d) = first.filter(|&d| ms(d) <= jobs[j].timeout) {
                    expected[j].record(ms(d));
                }
                for &(answer, delay) in these {
                    let (from, bytes) = answer_bytes(answer, socket, dst, &request, &stale[&(j as u32, k)]);
                    let counts = answer.counts(socket).then_some(j);
                    replies.push((now + ms(delay), counts, from, bytes));
                }
            }
            let next_reply = replies.iter().map(|r| r.0).min();
            let next = match (s.poll_timeout(), next_reply) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => a.or(b).expect("not finished, nothing to wait for"),
            };
            // The driver wakes for replies and expiries once per receive tick, reading
            // every reply that came by then (judged by its own arrival) before it
            // expires probes: some replies are read after their probe's timeout.
            let next = match tick {
                0 => next,
                t => base + ms(next.duration_since(base).as_millis().div_ceil(u128::from(t)) as u64 * t),
            };
            now = now.max(next);
        }
        for (j, got) in done.iter().enumerate() {
            let got = got.expect("every job reported");
            prop_assert_eq!(got, expected[j], "job {} ({})", j, jobs[j].addr);
            prop_assert!(got.received <= got.sent && got.loss_pct() >= 0.0);
        }
        let received: u32 = expected.iter().map(|e| e.received).sum();
        prop_assert_eq!(s.counters().received, u64::from(received));
    }
}

/// An ICMP error for a probe is kept with its host, found by the tag of a whole quote
/// or, when the sender quoted only the 8-byte header, by address and sequence (of the
/// right job among an address's duplicates); it changes no count and no timing. Errors
/// for another sweep's probes (its identifier, its iteration), for something else
/// than an echo request, or quoting less than a header are not taken.
#[test]
fn icmp_errors_are_kept_with_the_probe_they_quote() {
    let base = Instant::now();
    let from: IpAddr = "192.0.2.1".parse().unwrap();
    let host = Unreachable::from_icmp(false, 3, 1, from).unwrap();
    let prohibited = Unreachable::from_icmp(false, 3, 13, from).unwrap();
    // Jobs 1 and 2 share an address: their sequences follow each other.
    let jobs = vec![job(0, 2), job(1, 2), job(1, 2)];
    let mut s = Sweep::new(jobs, cfg(0), base).unwrap();
    let mut sent = drain_sends(&mut s, base);
    sent.extend(drain_sends(&mut s, base + ms(20)));
    assert_eq!(sent.len(), 6);
    let probe = |a: IpAddr, n: usize| {
        sent.iter()
            .filter(|(x, _)| *x == a)
            .nth(n)
            .unwrap()
            .1
            .clone()
    };
    // A whole quote: the tag names the job.
    assert_eq!(s.handle_error(&probe(addr(0), 1), addr(0), host), Some(0));
    // The header alone: the address's job whose sequences hold it (the fourth probe to
    // 127.77.0.1 is job 2's second).
    let short = probe(addr(1), 3)[..HEADER_LEN].to_vec();
    assert_eq!(s.handle_error(&short, addr(1), prohibited), Some(2));
    let mut other = probe(addr(1), 0);
    // Another sweep's identifier, or its iteration (the tag then does not verify).
    other[4] ^= 1;
    assert_eq!(s.handle_error(&other, addr(1), host), None);
    let mut old = Sweep::new(
        vec![job(1, 2)],
        SweepConfig {
            iteration: 4,
            ..cfg(0)
        },
        base,
    )
    .unwrap();
    let stale = drain_sends(&mut old, base).remove(0).1;
    assert_eq!(s.handle_error(&stale, addr(1), host), None);
    // A quoted reply (not one of our requests), a quote too short, a wrong address.
    let mut reply = probe(addr(0), 0);
    reply[0] = 0;
    assert_eq!(s.handle_error(&reply, addr(0), host), None);
    assert_eq!(s.handle_error(&probe(addr(0), 0)[..7], addr(0), host), None);
    assert_eq!(
        s.handle_error(&probe(addr(0), 0)[..HEADER_LEN], addr(9), host),
        None
    );
    assert_eq!(s.handle_error(&probe(addr(0), 0), addr(1), host), None);
    assert_eq!(s.counters().icmp_errors, 2);
    // Nothing else changed: every probe times out as lost, the deadline as it was.
    assert_eq!(s.deadline(), Some(base + ms(1020)));
    s.handle_timeout(base + ms(1020));
    let mut done = done_events(&mut s);
    done.sort_by_key(|(j, _)| *j);
    let stats: Vec<_> = done
        .iter()
        .map(|(_, st)| (st.sent, st.received, st.error))
        .collect();
    assert_eq!(
        stats,
        [(2, 0, Some(host)), (2, 0, None), (2, 0, Some(prohibited))]
    );
}

/// With `keep_rtts`, each request's round trip is kept in the order of the requests,
/// whatever order the replies come in; one unanswered, or answered past its timeout,
/// has none (fping -C's `-`); counts and statistics are as without. Without it, none is
/// kept.
#[test]
fn round_trips_are_kept_per_request_when_asked() {
    let base = Instant::now();
    let one = Job {
        timeout: ms(100),
        ..job(0, 4)
    };
    let keep = SweepConfig {
        keep_rtts: true,
        ..cfg(0)
    };
    let mut s = Sweep::new(vec![one], keep, base).unwrap();
    let mut sent = Vec::new();
    for t in [0, 20, 40, 60] {
        sent.extend(drain_sends(&mut s, base + ms(t)));
    }
    assert_eq!(sent.len(), 4);
    let reply = |s: &mut Sweep, k: usize, at: u64| {
        let (a, req) = &sent[k];
        s.handle_reply(&raw_reply_for(*a, req), *a, base + ms(at))
    };
    // The second request answered first, then the first; the third past its timeout.
    assert!(matches!(reply(&mut s, 1, 25), ReplyOutcome::Matched { .. }));
    assert!(matches!(reply(&mut s, 0, 30), ReplyOutcome::Matched { .. }));
    let rtts = |s: &Sweep| s.rtts(0).iter().collect::<Vec<_>>();
    assert_eq!(rtts(&s), [Some(ms(30)), Some(ms(5)), None, None]);
    assert_eq!(
        reply(&mut s, 2, 150),
        ReplyOutcome::Ignored(IgnoreReason::Late)
    );
    s.handle_timeout(base + ms(160));
    let done = done_events(&mut s);
    assert_eq!(done.len(), 1);
    assert_eq!((done[0].1.sent, done[0].1.received), (4, 2));
    assert_eq!(rtts(&s), [Some(ms(30)), Some(ms(5)), None, None]);
    assert_eq!(s.rtts(0).len(), 4);
    assert!(s.rtts(1).is_empty(), "no such job");
    // Not asked: none kept.
    let mut s = Sweep::new(vec![one], cfg(0), base).unwrap();
    let (a, req) = drain_sends(&mut s, base).remove(0);
    s.handle_reply(&raw_reply_for(a, &req), a, base + ms(1));
    assert!(s.rtts(0).is_empty());
}
