//! What one ICMP echo request costs the sender's kernel, by way of sending: the figure
//! that bounds netpoller's CPU per ICMP value (BENCHMARKS.md, "CPU per ICMP value").
//! benches/send_cost.sh runs it inside the tun rig's namespace (benches/tun_rig.sh),
//! where the probes end in a TUN device answered by another process, as at a NIC:
//!
//! ```text
//! ip netns exec NS target/release/examples/send_cost raw npt0 200000
//! ```
//!
//! Modes, each sending COUNT requests of 56 data bytes in `sendmmsg` batches of 64 to
//! addresses ≡ 3 mod 4 of 100.64.0.0/10 (silent on the rig, so that no reply is read):
//! * `raw`: `SOCK_RAW`/`IPPROTO_ICMP`, the kernel builds the IPv4 header (netpoller's way);
//! * `hdrincl`: `SOCK_RAW`/`IPPROTO_RAW`, we build the IPv4 header;
//! * `packet`: `AF_PACKET`/`SOCK_DGRAM` on DEV with `PACKET_QDISC_BYPASS`: past the IP
//!   stack straight to the device (no route, neighbour, firewall or qdisc). netpoller does
//!   not send this way (see BENCHMARKS.md); the mode measures what that would save.
//!
//! Probes are paced at ≤ 128k per second so that the device's queue never overflows (a
//! dropped packet is cheaper than a delivered one). The figure is this thread's CPU time
//! (`/proc/thread-self/schedstat`) over the send loop, divided by COUNT, printed as one
//! JSON line (user vs system split by the tick-sampled ratio). Refuses to run unless DEV
//! is a TUN device holding the route to 100.64.0.0/10 in a namespace without a default
//! route: nothing may leave the machine.

use std::io;
use std::mem::size_of;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use icmp::wire::{EchoKind, EchoPacket, EchoRepr, Family, HEADER_LEN, IPPROTO_ICMP};
use socket2::SockAddr;

const USAGE: &str = "usage: send_cost raw|hdrincl|packet|ping DEV COUNT";
const BATCH: usize = 64;
const DATA: usize = 56;
const IP_LEN: usize = 20;
/// 100.64.0.0/10, the rig's target prefix.
const PREFIX: u32 = 0x6440_0000;
/// The rig's own address (198.18.0.1), the source of `hdrincl` and `packet` probes.
const SOURCE: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Raw,
    HdrIncl,
    Packet,
    Ping,
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [mode, dev, count] = args.as_slice() else {
        bail!("{USAGE}");
    };
    let mode = match mode.as_str() {
        "raw" => Mode::Raw,
        "hdrincl" => Mode::HdrIncl,
        "packet" => Mode::Packet,
        "ping" => Mode::Ping,
        _ => bail!("unknown mode {mode:?}\n{USAGE}"),
    };
    let count: usize = count.parse().context(USAGE)?;
    check_rig(dev)?;
    let name = std::ffi::CString::new(dev.as_str())?;
    // SAFETY: name is a valid NUL-terminated string.
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
    ensure!(
        ifindex != 0,
        "no device {dev}: {}",
        io::Error::last_os_error()
    );

    let fd = open(mode)?;
    let start = Instant::now();
    let (cpu0, split0) = (run_time()?, thread_cpu());
    let mut frames = vec![[0u8; IP_LEN + HEADER_LEN + DATA]; BATCH];
    let mut dests: Vec<SockAddr> = Vec::with_capacity(BATCH);
    // SAFETY: an all-zero sockaddr_ll is valid.
    let mut ll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    ll.sll_family = libc::AF_PACKET as u16;
    ll.sll_protocol = (libc::ETH_P_IP as u16).to_be();
    ll.sll_ifindex = ifindex as i32;
    let mut iov: Vec<libc::iovec> = Vec::with_capacity(BATCH);
    let mut msgs: Vec<libc::mmsghdr> = Vec::with_capacity(BATCH);
    let mut sent = 0usize;
    let mut seq = 0u32;
    while sent < count {
        let n = BATCH.min(count - sent);
        iov.clear();
        msgs.clear();
        dests.clear();
        for frame in frames.iter_mut().take(n) {
            seq = seq.wrapping_add(1);
            // ≡ 3 mod 4: silent on the rig.
            let dst = Ipv4Addr::from(PREFIX | ((seq << 2) & 0x003f_ffff) | 3);
            let len = build(mode, frame, dst, seq as u16)?;
            dests.push(SockAddr::from(SocketAddrV4::new(dst, 0)));
            iov.push(libc::iovec {
                iov_base: frame.as_mut_ptr().cast(),
                iov_len: len,
            });
        }
        for i in 0..n {
            // SAFETY: an all-zero msghdr is valid; the pointers set below outlive the call.
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_iov = &mut iov[i];
            m.msg_hdr.msg_iovlen = 1;
            if mode == Mode::Packet {
                m.msg_hdr.msg_name = (&mut ll as *mut libc::sockaddr_ll).cast();
                m.msg_hdr.msg_namelen = size_of::<libc::sockaddr_ll>() as u32;
            } else {
                m.msg_hdr.msg_name = dests[i].as_ptr() as *mut libc::c_void;
                m.msg_hdr.msg_namelen = dests[i].len();
            }
            msgs.push(m);
        }
        let mut done = 0;
        while done < n {
            // SAFETY: msgs[done..n] are initialised and point at live buffers.
            let r = unsafe {
                libc::sendmmsg(
                    fd.as_raw_fd(),
                    msgs[done..].as_mut_ptr(),
                    (n - done) as u32,
                    0,
                )
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::ENOBUFS) {
                    std::thread::sleep(Duration::from_micros(100));
                    continue;
                }
                return Err(e).context("sendmmsg");
            }
            done += r as usize;
        }
        sent += n;
        // ≤ 1,024 probes per 8 ms: 128k per second, within what the rig's target reads.
        if sent.is_multiple_of(1024) {
            let due = start + Duration::from_millis(8 * (sent / 1024) as u64);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
    }
    let cpu = run_time()? - cpu0;
    let (user, sys) = thread_cpu();
    let (user, sys) = (user - split0.0, sys - split0.1);
    let per = |s: f64| s * 1e6 / count as f64;
    println!(
        "{{\"mode\": \"{}\", \"probes\": {count}, \"wall_s\": {:.3}, \"us_per_probe\": {:.3}, \
         \"user_us_per_probe\": {:.3}, \"sys_us_per_probe\": {:.3}}}",
        ["raw", "hdrincl", "packet", "ping"][mode as usize],
        start.elapsed().as_secs_f64(),
        per(cpu),
        per(cpu * user / (user + sys).max(1e-9)),
        per(cpu * sys / (user + sys).max(1e-9))
    );
    Ok(())
}

/// Where the probes may go: only into a TUN device (a local process reads them) that
/// holds this namespace's route to 100.64.0.0/10, in a namespace without a default
/// route. Then neither the IP stack (`raw`, `hdrincl`) nor the packet socket (`packet`,
/// which skips routing) can put a probe on a wire.
fn check_rig(dev: &str) -> Result<()> {
    const ARPHRD_NONE: &str = "65534";
    let ty = std::fs::read_to_string(format!("/sys/class/net/{dev}/type"))
        .with_context(|| format!("no device {dev} in this namespace"))?;
    ensure!(
        ty.trim() == ARPHRD_NONE,
        "{dev} is not a TUN device (type {})",
        ty.trim()
    );
    let routes = std::fs::read_to_string("/proc/net/route").context("reading /proc/net/route")?;
    // Columns: Iface Destination Gateway Flags RefCnt Use Metric Mask ...; addresses
    // are hex of the address's bytes read as a native u32.
    let addr = |hex: &str| {
        u32::from_str_radix(hex, 16)
            .ok()
            .map(|v| Ipv4Addr::from(v.to_ne_bytes()))
    };
    let mut ours = false;
    for l in routes.lines().skip(1) {
        let f: Vec<&str> = l.split_whitespace().collect();
        let (Some(iface), Some(dst), Some(mask)) = (f.first(), f.get(1), f.get(7)) else {
            continue;
        };
        let (dst, mask) = (addr(dst), addr(mask));
        ensure!(
            dst != Some(Ipv4Addr::UNSPECIFIED),
            "this network namespace has a default route; run send_cost in the tun rig's namespace"
        );
        ours |= *iface == dev
            && dst == Some(Ipv4Addr::from(PREFIX))
            && mask == Some(Ipv4Addr::new(255, 192, 0, 0));
    }
    ensure!(
        ours,
        "no route 100.64.0.0/10 via {dev}: run send_cost in the tun rig's namespace"
    );
    Ok(())
}

fn open(mode: Mode) -> Result<OwnedFd> {
    let (domain, ty, proto) = match mode {
        Mode::Raw => (libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_ICMP),
        Mode::HdrIncl => (libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_RAW),
        Mode::Packet => (
            libc::AF_PACKET,
            libc::SOCK_DGRAM,
            (libc::ETH_P_IP as u16).to_be() as i32,
        ),
        Mode::Ping => (libc::AF_INET, libc::SOCK_DGRAM, libc::IPPROTO_ICMP),
    };
    // SAFETY: plain socket(2).
    let fd = unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, proto) };
    ensure!(
        fd >= 0,
        "socket: {} (needs root)",
        io::Error::last_os_error()
    );
    // SAFETY: socket(2) just returned this descriptor; nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let set = |level, name, v: libc::c_int| {
        // SAFETY: v is a valid c_int for the call's duration.
        let r = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                level,
                name,
                (&v as *const libc::c_int).cast(),
                4,
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    };
    set(libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, 16 << 20).context("SO_SNDBUFFORCE")?;
    if matches!(mode, Mode::Raw | Mode::Ping) {
        // As netpoller does for small probes: DF set, so the kernel skips IP ID hashing.
        set(
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_PROBE,
        )
        .context("IP_MTU_DISCOVER")?;
    }
    if mode == Mode::Packet {
        // The device goes in each message's sockaddr_ll.
        set(libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, 1).context("PACKET_QDISC_BYPASS")?;
    }
    Ok(fd)
}

/// Writes one echo request (with an IPv4 header unless `raw`) into `buf`; returns its length.
fn build(mode: Mode, buf: &mut [u8], dst: Ipv4Addr, seq: u16) -> Result<usize> {
    let ip = if matches!(mode, Mode::Raw | Mode::Ping) {
        0
    } else {
        IP_LEN
    };
    let payload = [0x5a; DATA];
    let repr = EchoRepr {
        family: Family::V4,
        kind: EchoKind::Request,
        ident: 0x4e50,
        seq,
        payload: &payload,
    };
    repr.emit(&mut EchoPacket::new_unchecked(
        &mut buf[ip..ip + repr.buffer_len()],
    ))?;
    if ip > 0 {
        let total = (IP_LEN + repr.buffer_len()) as u16;
        let h = &mut buf[..IP_LEN];
        h.fill(0);
        h[0] = 0x45;
        h[2..4].copy_from_slice(&total.to_be_bytes());
        h[6] = 0x40; // DF
        h[8] = 64; // TTL
        h[9] = IPPROTO_ICMP;
        h[12..16].copy_from_slice(&SOURCE.octets());
        h[16..20].copy_from_slice(&dst.octets());
        let sum = icmp::wire::internet_checksum(h);
        h[10..12].copy_from_slice(&sum.to_be_bytes());
    }
    Ok(ip + repr.buffer_len())
}

/// CPU seconds the calling thread has run, to the nanosecond (the scheduler's own count;
/// `getrusage` samples at the tick, too coarse for a split second's work).
fn run_time() -> Result<f64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").context("schedstat")?;
    let ns: u64 = s
        .split_whitespace()
        .next()
        .unwrap_or("")
        .parse()
        .context("schedstat")?;
    Ok(ns as f64 * 1e-9)
}

/// (user, system) CPU seconds of the calling thread, sampled at the tick: only their
/// ratio is used.
fn thread_cpu() -> (f64, f64) {
    // SAFETY: an all-zero rusage is valid output space.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: ru is valid for writes.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    (s(ru.ru_utime), s(ru.ru_stime))
}
