//! Fuzz the reply path: wire parsing in every framing, and a live sweep fed hostile
//! datagrams and hostile ICMP errors' quotes. Invariants: no panic; hostile bytes never
//! match an in-flight probe (the payload tag is keyed with a secret the input cannot
//! know), nor an error's quote long enough to carry the tag (a shorter one, the 8 bytes
//! RFC 792 asks for, is matched by address and sequence, by design).
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use icmp::wire::{parse_reply, EchoPacket, EchoRepr, Family, Framing};
use icmp::tag::TAG_LEN;
use icmp::wire::HEADER_LEN;
use icmp::{Job, ReplyOutcome, Retry, SocketKind, Sweep, SweepConfig, TagKey, Unreachable};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let v4 = IpAddr::V4(Ipv4Addr::new(127, 77, 0, 1));
    let v6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
    for (framing, from) in [
        (Framing::Ipv4Header, v4),
        (Framing::IcmpOnly, v4),
        (Framing::IcmpOnly, v6),
    ] {
        if let Ok(rx) = parse_reply(data, framing, from) {
            // Whatever parses must re-emit to a buffer of the announced length.
            let mut buf = vec![0u8; rx.echo.buffer_len()];
            rx.echo
                .emit(&mut EchoPacket::new_unchecked(&mut buf[..]))
                .unwrap();
            let view = EchoPacket::new_checked(&buf[..]).unwrap();
            let again = EchoRepr::parse(&view, rx.echo.family, true).unwrap();
            assert_eq!(again, rx.echo);
        }
    }
    let _ = EchoRepr::parse(&EchoPacket::new_unchecked(data), Family::V4, false);

    let base = Instant::now();
    for socket in [SocketKind::Raw, SocketKind::Datagram] {
        let cfg = SweepConfig {
            socket,
            max_pps: 0,
            ident: 0x4242,
            ..SweepConfig::new(TagKey([7, 9]))
        };
        let jobs = (0..4u8)
            .map(|i| Job {
                addr: IpAddr::V4(Ipv4Addr::new(127, 77, 0, i)),
                packets: 2,
                interval: Duration::from_millis(20),
                size: 56,
                timeout: Duration::from_secs(1),
                // Half of them retrying (icmppingretry): their replies are judged alike.
                retry: (i % 2 == 1).then_some(Retry { backoff_pct: 150 }),
            })
            .chain(std::iter::once(Job {
                addr: v6,
                packets: 1,
                interval: Duration::from_millis(20),
                size: 24,
                timeout: Duration::from_secs(1),
                retry: None,
            }))
            .collect();
        let mut s = Sweep::new(jobs, cfg, base).unwrap();
        while s.poll_transmit(base).is_some() {}
        for from in [v4, v6] {
            let out = s.handle_reply(data, from, base + Duration::from_millis(1));
            assert!(
                matches!(out, ReplyOutcome::Ignored(_)),
                "hostile bytes matched: {out:?}"
            );
            let error = Unreachable::from_icmp(from.is_ipv6(), 3, 1, from).unwrap();
            let to = s.handle_error(data, from, error);
            assert!(
                to.is_none() || data.len() < HEADER_LEN + TAG_LEN,
                "a hostile quote with a tag matched job {to:?}"
            );
        }
    }
});
