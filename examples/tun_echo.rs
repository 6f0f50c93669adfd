//! A remote host for benchmarks: answers ICMPv4 echo requests that arrive on a TUN
//! device, in this process, so that the target's work is not charged to the pinger.
//!
//! On loopback or veth the kernel answers an echo request inside the sender's own
//! `sendmmsg` (the packet is received, answered and the reply delivered in the sender's
//! softirq context), so a pinger's measured CPU includes the work a remote host does on
//! a real network. Through a TUN device the sender's kernel path ends at the device
//! queue, as it ends at a NIC's ring; this process reads the request, writes the reply,
//! and the reply's receive path (IP input, delivery to the pinger's socket) runs in this
//! process's `write`, as it would run in a NIC's interrupt.
//!
//! Safety of the benchmark network: the device is attached by name in the caller's
//! network namespace (`ip netns exec NS tun_echo DEV`); benches/ create the namespace,
//! the device and its route, and nothing here sends anywhere but back into that device.
//!
//! ```text
//! ip netns exec NS target/release/examples/tun_echo npt0 --silent-mask 3 --max-seconds 600
//! ```
//!
//! Addresses whose last bits match `--silent-mask` (dst & mask == mask) are silent: their
//! requests are read and dropped, like a host that is down. When the device's queue is
//! empty the process sleeps `--coalesce-us` (default 500) before reading again, as a
//! NIC coalesces interrupts (after 20 empty naps it blocks until traffic resumes);
//! give the device a long queue (`ip link set DEV txqueuelen
//! 100000`). The process stops after `--max-seconds` or on SIGTERM/SIGINT and prints
//! what it did to stderr.

use std::ffi::CString;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use icmp::wire::EchoPacket;

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// `struct ifreq` as TUNSETIFF reads it: the name, then the flags.
#[repr(C)]
struct IfReq {
    name: [libc::c_char; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;

/// Empty naps of `--coalesce-us` before the process blocks until a packet comes.
const IDLE_NAPS: u32 = 20;

fn open_tun(name: &str) -> Result<libc::c_int> {
    if name.len() >= libc::IFNAMSIZ {
        bail!(
            "device name {name:?} is longer than {} bytes",
            libc::IFNAMSIZ - 1
        );
    }
    let path = CString::new("/dev/net/tun")?;
    // SAFETY: plain open(2) of a NUL-terminated path.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_RDWR | libc::O_CLOEXEC | libc::O_NONBLOCK,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error()).context("open /dev/net/tun");
    }
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        flags: (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short,
        _pad: [0; 22],
    };
    for (d, s) in req.name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    // SAFETY: TUNSETIFF reads and writes one `struct ifreq`, which `req` is laid out as.
    if unsafe { libc::ioctl(fd, TUNSETIFF as _, &mut req) } < 0 {
        return Err(std::io::Error::last_os_error()).with_context(|| format!("TUNSETIFF {name}"));
    }
    Ok(fd)
}

#[derive(Default)]
struct Counts {
    answered: u64,
    silenced: u64,
    ignored: u64,
}

/// Turns an IPv4 echo request in `pkt` into its reply in place. Returns `None` for
/// anything else, `Some(false)` for a request to a silent address.
fn answer(pkt: &mut [u8], silent_mask: u32) -> Option<bool> {
    let ihl = usize::from(*pkt.first()? & 0x0f) * 4;
    if pkt[0] >> 4 != 4 || ihl < 20 || pkt.len() < ihl + 8 || pkt[9] != 1 {
        return None;
    }
    let dst = u32::from_be_bytes(pkt[16..20].try_into().ok()?);
    let (head, icmp) = pkt.split_at_mut(ihl);
    let mut echo = EchoPacket::new_checked(icmp).ok()?;
    if echo.msg_type() != 8 || echo.code() != 0 {
        return None;
    }
    if silent_mask != 0 && dst & silent_mask == silent_mask {
        return Some(false);
    }
    echo.set_msg_type(0);
    echo.fill_checksum_v4();
    // Swapping source and destination leaves the header checksum as it is (a sum).
    let (src, dst) = head[12..20].split_at_mut(4);
    src.swap_with_slice(dst);
    Some(true)
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let mut dev = None;
    let mut silent_mask = 0u32;
    let mut max = Duration::from_secs(3600);
    let mut coalesce = Duration::from_micros(500);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--silent-mask" => silent_mask = args.next().context("--silent-mask N")?.parse()?,
            "--max-seconds" => {
                max = Duration::from_secs(args.next().context("--max-seconds N")?.parse()?)
            }
            "--coalesce-us" => {
                coalesce = Duration::from_micros(args.next().context("--coalesce-us N")?.parse()?)
            }
            "-h" | "--help" => {
                println!(
                    "usage: tun_echo DEV [--silent-mask N] [--max-seconds S] [--coalesce-us U]"
                );
                return Ok(());
            }
            _ if dev.is_none() && !a.starts_with('-') => dev = Some(a),
            _ => bail!("unexpected argument {a:?} (see --help)"),
        }
    }
    let dev =
        dev.context("usage: tun_echo DEV [--silent-mask N] [--max-seconds S] [--coalesce-us U]")?;
    let fd = open_tun(&dev)?;
    // SAFETY: installs an async-signal-safe handler (one atomic store).
    unsafe {
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
    }
    let start = Instant::now();
    let mut buf = vec![0u8; 65_536];
    let mut counts = Counts::default();
    let mut idle = 0u32;
    eprintln!("tun_echo: answering on {dev} (silent mask {silent_mask}) for at most {max:?}");
    while !STOP.load(Ordering::Relaxed) && start.elapsed() < max {
        // Drain the queue (the fd is non-blocking), then sleep `coalesce`.
        // SAFETY: reads into a buffer of the length given.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            let err = std::io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) => {}
                _ => return Err(err).context("read tun"),
            }
            // Sleep instead of waiting on the device: a reader waiting on the device's
            // queue is woken by every packet the pinger sends, and the wake-up (an IPI
            // when we sleep on the other CPU) is charged to the pinger's send call. A NIC
            // coalesces its interrupts the same way. After IDLE_NAPS empty naps, block
            // in poll (200 ms at most, to see STOP): an idle target then costs nothing,
            // and the first packet of the next burst pays one wake-up.
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
                    let err = std::io::Error::last_os_error();
                    if err.raw_os_error() != Some(libc::EINTR) {
                        return Err(err).context("write tun");
                    }
                }
                counts.answered += 1;
            }
        }
    }
    eprintln!(
        "tun_echo: {} answered, {} silenced, {} other packets ignored in {:.1} s",
        counts.answered,
        counts.silenced,
        counts.ignored,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(dst: [u8; 4]) -> Vec<u8> {
        let mut p = vec![0u8; 20 + 8 + 9];
        p[0] = 0x45;
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
    }
}
