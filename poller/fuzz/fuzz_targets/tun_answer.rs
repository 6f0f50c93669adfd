//! `poller::tun_echo::answer` on whatever a TUN device may carry: never panics, leaves
//! anything it does not answer untouched, and an answer is a valid echo reply from the
//! request's destination to its source with the payload unchanged.
#![no_main]

use icmp::wire::EchoPacket;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (mask, pkt) = match data.split_first() {
        Some((m, rest)) => (u32::from(*m & 7), rest),
        None => (0, data),
    };
    let mut pkt = pkt.to_vec();
    let before = pkt.clone();
    if poller::tun_echo::answer(&mut pkt, mask) == Some(true) {
        let ihl = usize::from(before[0] & 0x0f) * 4;
        // The datagram ends at the header's total length: bytes past it (padding) are
        // no part of the ICMP message, nor of its checksum.
        let total = usize::from(u16::from_be_bytes([before[2], before[3]]));
        assert_eq!(&pkt[12..16], &before[16..20]);
        assert_eq!(&pkt[16..20], &before[12..16]);
        let e = EchoPacket::new_checked(&pkt[ihl..total]).expect("reply parses");
        assert_eq!(e.msg_type(), 0);
        assert!(e.verify_checksum_v4());
        assert_eq!(&pkt[ihl + 4..], &before[ihl + 4..]);
    } else {
        assert_eq!(pkt, before);
    }
});
