//! A remote host for tests and benchmarks: answers ICMPv4 echo requests that arrive on a
//! TUN device, in the calling thread, so that the target's work is not charged to the
//! pinger.
//!
//! On loopback or veth the kernel answers an echo request inside the sender's own
//! `sendmmsg` (the packet is received, answered and the reply delivered in the sender's
//! softirq context), so a pinger's measured CPU includes the work a remote host does on a
//! real network. Through a TUN device the sender's kernel path ends at the device queue,
//! as it ends at a NIC's ring; [`serve`] reads the request, writes the reply, and the
//! reply's receive path (IP input, delivery to the pinger's socket) runs in its `write`,
//! as it would in a NIC's interrupt.
//!
//! Invariants:
//! * Only IPv4 echo requests (type 8, code 0, a header that `icmp::wire` accepts) are
//!   answered; anything else that the device carries (IPv6, router solicitations) is
//!   counted and dropped.
//! * An address is silent when `dst & silent_mask == silent_mask` (mask 0: none): its
//!   requests are read and dropped, like a host that is down.
//! * The reply is the request with type 0, a new ICMP checksum and source and destination
//!   swapped; the IP header checksum is unchanged (a sum does not depend on the order).
//! * Nothing is sent but replies back into the device: the device, its namespace and its
//!   routes are the caller's (benches/tun_rig.sh, tests/icmp_sweep.rs).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use icmp::wire::{self, EchoKind, EchoPacket, Family};

/// `struct ifreq` as `TUNSETIFF` reads it: the name, then the flags.
#[repr(C)]
struct IfReq {
    name: [libc::c_char; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;

/// Empty naps of `coalesce` before [`serve`] blocks until a packet comes.
const IDLE_NAPS: u32 = 20;

/// Attaches to (or creates) TUN device `name` in the calling thread's network namespace,
/// without packet information headers; the descriptor is non-blocking.
pub fn open(name: &str) -> io::Result<OwnedFd> {
    if name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "device name {name:?} is longer than {} bytes",
                libc::IFNAMSIZ - 1
            ),
        ));
    }
    // SAFETY: plain open(2) of a NUL-terminated path.
    let fd = unsafe {
        libc::open(
            c"/dev/net/tun".as_ptr(),
            libc::O_RDWR | libc::O_CLOEXEC | libc::O_NONBLOCK,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just opened and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        flags: (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short,
        _pad: [0; 22],
    };
    for (d, s) in req.name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    // SAFETY: TUNSETIFF reads and writes one `struct ifreq`, which `req` is laid out as.
    if unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETIFF as _, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// What [`serve`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Echo requests answered.
    pub answered: u64,
    /// Echo requests to silent addresses, dropped.
    pub silenced: u64,
    /// Other packets, dropped.
    pub ignored: u64,
}

/// Turns an IPv4 echo request in `pkt` into its reply in place. `None` for anything else,
/// `Some(false)` for a request to a silent address (see the module docs).
pub fn answer(pkt: &mut [u8], silent_mask: u32) -> Option<bool> {
    let (_, icmp) = wire::ipv4_icmp_range(pkt).ok()?;
    let dst = u32::from_be_bytes(pkt[16..20].try_into().ok()?);
    let ihl = icmp.start;
    let mut echo = EchoPacket::new_checked(&mut pkt[icmp]).ok()?;
    if Family::V4.kind_of(echo.msg_type()) != Some(EchoKind::Request) || echo.code() != 0 {
        return None;
    }
    if silent_mask != 0 && dst & silent_mask == silent_mask {
        return Some(false);
    }
    echo.set_msg_type(Family::V4.type_of(EchoKind::Reply));
    echo.fill_checksum_v4();
    let (src, dst) = pkt[12..ihl].split_at_mut(4);
    src.swap_with_slice(&mut dst[..4]);
    Some(true)
}

/// Answers echo requests on `fd` (from [`open`]) until `stop` is set or `max` has passed.
///
/// When the device's queue is empty it sleeps `coalesce` instead of waiting on the
/// device: a reader waiting on the queue is woken by every packet the pinger sends, and
/// that wake-up (an IPI when the reader sleeps on another CPU) is charged to the pinger's
/// send call; a NIC coalesces its interrupts the same way. After 20 empty naps it blocks
/// in `poll` (200 ms at most, to see `stop`): an idle target then costs nothing, and the
/// first packet of the next burst pays one wake-up. Give the device a long queue
/// (`txqueuelen`): it fills while this sleeps.
pub fn serve(
    fd: &OwnedFd,
    silent_mask: u32,
    coalesce: Duration,
    stop: &AtomicBool,
    max: Duration,
) -> io::Result<Counts> {
    let start = Instant::now();
    let mut buf = vec![0u8; 65_536];
    let mut counts = Counts::default();
    let mut idle = 0u32;
    let fd = fd.as_raw_fd();
    while !stop.load(Ordering::Relaxed) && start.elapsed() < max {
        // SAFETY: reads into a buffer of the length given.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) => {}
                _ => return Err(err),
            }
            idle += 1;
            if idle < IDLE_NAPS {
                std::thread::sleep(coalesce);
            } else {
                let mut pfd = libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one pollfd, timeout in ms.
                unsafe { libc::poll(&mut pfd, 1, 200) };
            }
            continue;
        }
        idle = 0;
        let pkt = &mut buf[..n as usize];
        match answer(pkt, silent_mask) {
            None => counts.ignored += 1,
            Some(false) => counts.silenced += 1,
            Some(true) => {
                // SAFETY: writes the bytes just read and rewritten.
                if unsafe { libc::write(fd, pkt.as_ptr().cast(), pkt.len()) } < 0 {
                    let err = io::Error::last_os_error();
                    if err.raw_os_error() != Some(libc::EINTR) {
                        return Err(err);
                    }
                }
                counts.answered += 1;
            }
        }
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(dst: [u8; 4]) -> Vec<u8> {
        let mut p = vec![0u8; 20 + 8 + 9];
        p[0] = 0x45;
        p[3] = p.len() as u8; // total length
        p[9] = 1;
        p[12..16].copy_from_slice(&[10, 0, 0, 1]);
        p[16..20].copy_from_slice(&dst);
        let mut e = EchoPacket::new_unchecked(&mut p[20..]);
        e.set_msg_type(8);
        e.set_ident(7);
        e.set_seq(9);
        e.payload_mut().copy_from_slice(b"netpoller");
        e.fill_checksum_v4();
        p
    }

    #[test]
    fn a_request_becomes_a_valid_reply_from_the_target() {
        let mut p = request([100, 64, 0, 1]);
        assert_eq!(answer(&mut p, 3), Some(true));
        assert_eq!(&p[12..16], &[100, 64, 0, 1]);
        assert_eq!(&p[16..20], &[10, 0, 0, 1]);
        let e = EchoPacket::new_checked(&p[20..]).unwrap();
        assert_eq!((e.msg_type(), e.ident(), e.seq()), (0, 7, 9));
        assert!(e.verify_checksum_v4());
        assert_eq!(&e.payload()[..9], b"netpoller");
    }

    #[test]
    fn silent_addresses_and_other_packets_get_no_reply() {
        assert_eq!(answer(&mut request([100, 64, 0, 3]), 3), Some(false));
        assert_eq!(answer(&mut request([100, 64, 0, 3]), 0), Some(true));
        let mut reply = request([100, 64, 0, 1]);
        answer(&mut reply, 0);
        assert_eq!(answer(&mut reply, 0), None, "a reply is not answered");
        assert_eq!(answer(&mut [0x60; 48], 0), None, "IPv6");
        assert_eq!(answer(&mut [0x45; 10], 0), None, "truncated");
        assert_eq!(answer(&mut [], 0), None, "empty");
    }

    proptest::proptest! {
        // Whatever a device carries: no panic; an answer is a valid echo reply from the
        // request's destination to its source, the same length, the payload unchanged.
        #[test]
        fn any_packet_is_answered_validly_or_not_at_all(
            mut pkt in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..128),
            prefix in proptest::prelude::any::<bool>(),
            mask in 0u32..8,
        ) {
            if prefix && pkt.len() >= 28 {
                // Make a plausible request often enough to reach the rewrite.
                pkt[0] = 0x45;
                let len = pkt.len() as u16;
                pkt[2..4].copy_from_slice(&len.to_be_bytes());
                pkt[9] = 1;
                pkt[20] = 8;
                pkt[21] = 0;
            }
            let before = pkt.clone();
            if answer(&mut pkt, mask) == Some(true) {
                let ihl = usize::from(before[0] & 0x0f) * 4;
                // The message ends at the header's total length; bytes past it are
                // padding, outside the checksum (the fuzz target found one).
                let total = usize::from(u16::from_be_bytes([before[2], before[3]]));
                proptest::prop_assert_eq!(&pkt[12..16], &before[16..20]);
                proptest::prop_assert_eq!(&pkt[16..20], &before[12..16]);
                let e = EchoPacket::new_checked(&pkt[ihl..total]).unwrap();
                proptest::prop_assert_eq!(e.msg_type(), 0);
                proptest::prop_assert!(e.verify_checksum_v4());
                proptest::prop_assert_eq!(&pkt[ihl + 4..], &before[ihl + 4..]);
            } else {
                proptest::prop_assert_eq!(pkt, before);
            }
        }
    }
}
