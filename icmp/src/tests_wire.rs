//! Wire-format tests: byte fixtures in four directions, hostile input, properties.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;

use crate::wire::*;

/// Echo request, ident 0x1234, seq 1, payload "abcd" (checksum computed by hand).
const REQUEST: [u8; 12] = [
    0x08, 0x00, 0x21, 0x04, 0x12, 0x34, 0x00, 0x01, b'a', b'b', b'c', b'd',
];
/// The matching echo reply.
const REPLY: [u8; 12] = [
    0x00, 0x00, 0x29, 0x04, 0x12, 0x34, 0x00, 0x01, b'a', b'b', b'c', b'd',
];
/// IPv4 header (20 bytes, no options) from 127.77.0.5 to 127.0.0.1 carrying REPLY.
const IP_HEADER: [u8; 20] = [
    0x45, 0x00, 0x00, 0x20, 0x00, 0x00, 0x40, 0x00, 0x40, 0x01, 0x00, 0x00, 127, 77, 0, 5, 127, 0,
    0, 1,
];

fn raw_reply() -> Vec<u8> {
    let mut v = IP_HEADER.to_vec();
    v.extend_from_slice(&REPLY);
    v
}

fn lo() -> IpAddr {
    IpAddr::V4(Ipv4Addr::LOCALHOST)
}

#[test]
fn deconstruct_request_fixture() {
    let p = EchoPacket::new_checked(&REQUEST[..]).unwrap();
    assert_eq!(p.msg_type(), 8);
    assert_eq!(p.code(), 0);
    assert_eq!(p.checksum(), 0x2104);
    assert_eq!(p.ident(), 0x1234);
    assert_eq!(p.seq(), 1);
    assert_eq!(p.payload(), b"abcd");
    assert!(p.verify_checksum_v4());
}

#[test]
fn construct_request_fixture() {
    let mut buf = [0u8; 12];
    let mut p = EchoPacket::new_unchecked(&mut buf[..]);
    p.set_msg_type(8);
    p.set_code(0);
    p.set_ident(0x1234);
    p.set_seq(1);
    p.payload_mut().copy_from_slice(b"abcd");
    p.fill_checksum_v4();
    assert_eq!(buf, REQUEST);
}

#[test]
fn a_checksum_of_zero_written_as_0xffff_verifies() {
    // A message whose checksum is 0x0000 (its last payload word made so), which a
    // responder may write as 0xFFFF, the other zero of ones' complement (RFC 1624).
    let mut buf = REPLY;
    let mut p = EchoPacket::new_unchecked(&mut buf[..]);
    p.fill_checksum_v4();
    let c = u32::from(p.checksum());
    let last = u32::from(u16::from_be_bytes([buf[10], buf[11]])) + c;
    let last = ((last & 0xffff) + (last >> 16)) as u16;
    buf[10..12].copy_from_slice(&last.to_be_bytes());
    buf[2..4].copy_from_slice(&[0, 0]);
    EchoPacket::new_unchecked(&mut buf[..]).fill_checksum_v4();
    assert_eq!(&buf[2..4], &[0, 0], "the message's checksum is 0x0000");
    assert!(EchoPacket::new_checked(&buf[..])
        .unwrap()
        .verify_checksum_v4());
    buf[2..4].copy_from_slice(&[0xff, 0xff]);
    assert!(EchoPacket::new_checked(&buf[..])
        .unwrap()
        .verify_checksum_v4());
    buf[2..4].copy_from_slice(&[0xff, 0xfe]);
    assert!(!EchoPacket::new_checked(&buf[..])
        .unwrap()
        .verify_checksum_v4());
}

#[test]
fn fill_checksum_ignores_a_stale_checksum_field() {
    let mut buf = REQUEST;
    buf[2..4].copy_from_slice(&[0xde, 0xad]);
    EchoPacket::new_unchecked(&mut buf[..]).fill_checksum_v4();
    assert_eq!(buf, REQUEST);
}

#[test]
fn internet_checksum_of_an_ipv4_header() {
    // The worked example of RFC 1071 style header checksums: 45 00 00 73 00 00 40 00 40 11
    // 00 00 c0 a8 00 01 c0 a8 00 c7 sums to 0xb861.
    let h = [
        0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8, 0x00,
        0x01, 0xc0, 0xa8, 0x00, 0xc7,
    ];
    assert_eq!(internet_checksum(&h), 0xb861);
    // An odd length pads with a zero byte.
    assert_eq!(internet_checksum(&[0x01]), !0x0100);
}

#[test]
fn parse_repr_fixture() {
    let p = EchoPacket::new_checked(&REPLY[..]).unwrap();
    let r = EchoRepr::parse(&p, Family::V4, true).unwrap();
    assert_eq!(
        r,
        EchoRepr {
            family: Family::V4,
            kind: EchoKind::Reply,
            ident: 0x1234,
            seq: 1,
            payload: b"abcd"
        }
    );
}

#[test]
fn emit_repr_fixture() {
    let r = EchoRepr {
        family: Family::V4,
        kind: EchoKind::Request,
        ident: 0x1234,
        seq: 1,
        payload: b"abcd",
    };
    assert_eq!(r.buffer_len(), 12);
    let mut buf = vec![0xffu8; r.buffer_len()];
    r.emit(&mut EchoPacket::new_unchecked(&mut buf[..]))
        .unwrap();
    assert_eq!(buf, REQUEST);
    let mut short = [0u8; 11];
    assert_eq!(
        r.emit(&mut EchoPacket::new_unchecked(&mut short[..])),
        Err(WireError::Truncated { len: 11, need: 12 })
    );
}

#[test]
fn emit_v6_leaves_checksum_to_kernel() {
    let r = EchoRepr {
        family: Family::V6,
        kind: EchoKind::Request,
        ident: 7,
        seq: 9,
        payload: b"xy",
    };
    let mut buf = vec![0u8; r.buffer_len()];
    r.emit(&mut EchoPacket::new_unchecked(&mut buf[..]))
        .unwrap();
    assert_eq!(buf, [128, 0, 0, 0, 0, 7, 0, 9, b'x', b'y']);
}

#[test]
fn raw_ipv4_reply_fixture() {
    let bytes = raw_reply();
    let rx = parse_reply(&bytes, Framing::Ipv4Header, lo()).unwrap();
    assert_eq!(
        rx.src,
        IpAddr::V4(Ipv4Addr::new(127, 77, 0, 5)),
        "the IP header's source wins"
    );
    assert_eq!(rx.echo.kind, EchoKind::Reply);
    assert_eq!(
        (rx.echo.ident, rx.echo.seq, rx.echo.payload),
        (0x1234, 1, &b"abcd"[..])
    );
}

#[test]
fn raw_ipv4_with_options_and_padding() {
    // IHL 6 (4 bytes of options) and 3 bytes of trailing padding beyond total length.
    let mut bytes = IP_HEADER.to_vec();
    bytes[0] = 0x46;
    bytes[3] = 0x24;
    bytes.extend_from_slice(&[1, 1, 1, 0]);
    bytes.extend_from_slice(&REPLY);
    bytes.extend_from_slice(&[0xee; 3]);
    let rx = parse_reply(&bytes, Framing::Ipv4Header, lo()).unwrap();
    assert_eq!(rx.echo.payload, b"abcd");
}

#[test]
fn datagram_reply_uses_peer_address() {
    let from: IpAddr = "127.77.1.2".parse().unwrap();
    let rx = parse_reply(&REPLY, Framing::IcmpOnly, from).unwrap();
    assert_eq!(rx.src, from);
    assert_eq!(rx.echo.seq, 1);
}

#[test]
fn icmpv6_reply_without_checksum_check() {
    let from = IpAddr::V6(Ipv6Addr::LOCALHOST);
    let bytes = [129, 0, 0xde, 0xad, 0, 7, 0, 9, b'x'];
    let rx = parse_reply(&bytes, Framing::IcmpOnly, from).unwrap();
    assert_eq!(
        (rx.echo.kind, rx.echo.ident, rx.echo.seq),
        (EchoKind::Reply, 7, 9)
    );
    // An ICMPv4 type number means nothing in ICMPv6.
    let v4_type = [0, 0, 0, 0, 0, 7, 0, 9];
    assert_eq!(
        parse_reply(&v4_type, Framing::IcmpOnly, from),
        Err(WireError::NotEcho(0))
    );
}

/// An echo reply whose code is not 0 is a reply: iputils ping and fping (Zabbix's
/// icmpping) take it by its type alone, as hosts and middleboxes that set a code are up.
#[test]
fn reply_with_a_non_zero_code_is_a_reply() {
    for code in [1u8, 3, 255] {
        let mut icmp = REPLY;
        let mut p = EchoPacket::new_unchecked(&mut icmp[..]);
        p.set_code(code);
        p.fill_checksum_v4();
        let mut bytes = IP_HEADER.to_vec();
        bytes.extend_from_slice(&icmp);
        let rx = parse_reply(&bytes, Framing::Ipv4Header, lo()).unwrap();
        assert_eq!(
            (rx.echo.kind, rx.echo.ident, rx.echo.seq, rx.echo.payload),
            (EchoKind::Reply, 0x1234, 1, &b"abcd"[..]),
            "code {code}"
        );
        let v6 = [129, code, 0xde, 0xad, 0, 7, 0, 9, b'x'];
        let rx = parse_reply(&v6, Framing::IcmpOnly, IpAddr::V6(Ipv6Addr::LOCALHOST)).unwrap();
        assert_eq!(
            (rx.echo.kind, rx.echo.seq),
            (EchoKind::Reply, 9),
            "code {code}"
        );
    }
}

#[test]
fn hostile_inputs_are_errors() {
    let cases: Vec<(Vec<u8>, WireError)> = vec![
        (vec![], WireError::Truncated { len: 0, need: 20 }),
        (
            raw_reply()[..19].to_vec(),
            WireError::Truncated { len: 19, need: 20 },
        ),
        (
            {
                let mut b = raw_reply();
                b[0] = 0x65;
                b
            },
            WireError::BadIpHeader,
        ),
        (
            {
                let mut b = raw_reply();
                b[0] = 0x44;
                b
            },
            WireError::BadIpHeader,
        ),
        (
            {
                let mut b = raw_reply();
                b[0] = 0x4f;
                b
            },
            WireError::BadIpHeader,
        ),
        (
            {
                let mut b = raw_reply();
                b[3] = 0x10;
                b
            },
            WireError::BadIpHeader,
        ),
        (
            {
                let mut b = raw_reply();
                b[3] = 0x40;
                b
            },
            WireError::Truncated { len: 32, need: 64 },
        ),
        (
            {
                let mut b = raw_reply();
                b[9] = 17;
                b
            },
            WireError::NotIcmp(17),
        ),
        (
            {
                let mut b = raw_reply();
                b[3] = 0x1b;
                b
            },
            WireError::Truncated { len: 7, need: 8 },
        ),
        (
            {
                let mut b = raw_reply();
                b[31] ^= 0xff;
                b
            },
            WireError::BadChecksum,
        ),
        (
            {
                let mut b = raw_reply();
                b[20] = 3;
                b
            },
            WireError::NotEcho(3),
        ),
        (
            {
                // A request with code 1 (its checksum made right): RFC 792's code 0 holds
                // for requests, not replies (see reply_with_a_non_zero_code_is_a_reply).
                let mut b = IP_HEADER.to_vec();
                b.extend_from_slice(&REQUEST);
                let mut p = EchoPacket::new_unchecked(&mut b[20..]);
                p.set_code(1);
                p.fill_checksum_v4();
                b
            },
            WireError::BadCode(1),
        ),
    ];
    for (bytes, want) in cases {
        assert_eq!(
            parse_reply(&bytes, Framing::Ipv4Header, lo()),
            Err(want),
            "{bytes:02x?}"
        );
    }
    for n in 0..REPLY.len() {
        let r = parse_reply(&REPLY[..n], Framing::IcmpOnly, lo());
        if n < 8 {
            assert_eq!(r, Err(WireError::Truncated { len: n, need: 8 }));
        } else {
            assert!(r.is_err(), "a cut payload breaks the checksum");
        }
    }
}

#[test]
fn unchecked_view_of_short_buffer_reads_zero() {
    let p = EchoPacket::new_unchecked(&[8u8, 0, 1][..]);
    assert_eq!(
        (p.msg_type(), p.ident(), p.seq(), p.payload()),
        (0, 0, 0, &[][..])
    );
    assert!(!p.verify_checksum_v4());
}

proptest! {
    #[test]
    fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = parse_reply(&bytes, Framing::Ipv4Header, lo());
        let _ = parse_reply(&bytes, Framing::IcmpOnly, lo());
        let _ = parse_reply(&bytes, Framing::IcmpOnly, IpAddr::V6(Ipv6Addr::LOCALHOST));
    }

    #[test]
    fn emit_parse_round_trip(
        v6 in any::<bool>(), reply in any::<bool>(), ident in any::<u16>(), seq in any::<u16>(),
        payload in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let family = if v6 { Family::V6 } else { Family::V4 };
        let kind = if reply { EchoKind::Reply } else { EchoKind::Request };
        let repr = EchoRepr { family, kind, ident, seq, payload: &payload };
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut EchoPacket::new_unchecked(&mut buf[..])).unwrap();
        let view = EchoPacket::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(EchoRepr::parse(&view, family, true).unwrap(), repr);
    }

    #[test]
    fn ipv4_framed_round_trip(ident in any::<u16>(), seq in any::<u16>(), src in any::<u32>(),
                              payload in proptest::collection::vec(any::<u8>(), 0..100)) {
        let repr = EchoRepr { family: Family::V4, kind: EchoKind::Reply, ident, seq, payload: &payload };
        let mut icmp = vec![0u8; repr.buffer_len()];
        repr.emit(&mut EchoPacket::new_unchecked(&mut icmp[..])).unwrap();
        let mut bytes = IP_HEADER.to_vec();
        bytes[2..4].copy_from_slice(&((20 + icmp.len()) as u16).to_be_bytes());
        bytes[12..16].copy_from_slice(&src.to_be_bytes());
        bytes.extend_from_slice(&icmp);
        let rx = parse_reply(&bytes, Framing::Ipv4Header, lo()).unwrap();
        prop_assert_eq!(rx.src, IpAddr::V4(Ipv4Addr::from(src)));
        prop_assert_eq!(rx.echo, repr);
    }
}
