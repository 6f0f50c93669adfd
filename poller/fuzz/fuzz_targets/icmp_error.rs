//! `poller::sockets::icmp_error` on any control message an error queue may hold
//! (the ICMP error's type, code and sender come from the network): never panics, and
//! reads an error only from an ICMP or ICMPv6 origin.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, data)) = data.split_first() else {
        return;
    };
    let (level, ty) = match which % 3 {
        0 => (libc::SOL_IP, libc::IP_RECVERR),
        1 => (libc::SOL_IPV6, libc::IPV6_RECVERR),
        _ => (libc::SOL_IP, libc::IP_PKTINFO),
    };
    let dst = std::net::IpAddr::from([127, 0, 0, 1]);
    if let Some(u) = poller::sockets::icmp_error(level, ty, data, dst) {
        assert!(which % 3 < 2, "another message read as an error");
        assert!(matches!(
            data[4],
            libc::SO_EE_ORIGIN_ICMP | libc::SO_EE_ORIGIN_ICMP6
        ));
        let _ = u.to_string();
    }
});
