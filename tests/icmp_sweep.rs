//! ICMP sweeps over real sockets: raw sockets on loopback, with nft making a known quarter
//! of 4,096 addresses silent, and network namespaces this test creates (and removes) for
//! exact counts of stale/foreign replies and for the unprivileged datagram socket.
//!
//! Needs root (CAP_NET_RAW, CAP_NET_ADMIN for nft and `ip netns`). Traffic goes only to
//! 127.77.0.0/16, 127.0.184.0/24, 127.0.59.0/24 and ::1 in the host namespace, and to
//! 127.0.0.0/8 inside namespaces created here.

use std::collections::HashMap;
use std::fs::File;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

mod common;

use common::NftTable;
use poller::icmp_driver::{IcmpDriver, IcmpOpenError, IcmpOptions, PingJob, PingStats, SocketKind};

fn run(cmd: &str, args: &[&str]) {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A network namespace of our own with `lo` up; deleted on drop.
struct Netns(String);

impl Netns {
    fn create() -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "np_icmp_{}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        run("ip", &["netns", "add", &name]);
        let ns = Netns(name);
        ns.exec(&["ip", "link", "set", "lo", "up"]);
        ns
    }

    fn exec(&self, args: &[&str]) {
        let mut all = vec!["netns", "exec", &self.0];
        all.extend_from_slice(args);
        run("ip", &all);
    }

    /// Runs `f` on a thread that has entered this namespace (sockets it opens live there).
    fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/var/run/netns/{}", self.0);
        std::thread::spawn(move || {
            let ns = File::open(&path).expect("open netns");
            // SAFETY: plain syscall on a valid fd; affects only this thread.
            let r = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(r, 0, "setns: {}", std::io::Error::last_os_error());
            f()
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn job(addr: IpAddr, packets: u32, timeout_ms: u64) -> PingJob {
    PingJob {
        addr,
        packets,
        interval: Duration::from_millis(20),
        size: 56,
        timeout: Duration::from_millis(timeout_ms),
        retry: None,
    }
}

/// A driver keeps a sweep's tables for the next (`icmp::SweepSpace`): a sweep cut short
/// with probes in flight and due leaves nothing behind that the next one sends, expires
/// or counts, whatever its intervals and timeouts.
#[test]
fn a_sweep_after_one_cut_short_is_its_own() {
    let a = |i: u8| PingJob {
        interval: Duration::from_millis(150),
        ..job(IpAddr::V4(Ipv4Addr::new(127, 0, 239, i)), 5, 1000)
    };
    let b = |i: u8| job(IpAddr::V4(Ipv4Addr::new(127, 0, 239, 10 + i)), 2, 500);
    let first: Vec<PingJob> = (1..=4).map(a).collect();
    let second: Vec<PingJob> = (1..=2).map(b).collect();
    let mut d = IcmpDriver::open(IcmpOptions::default()).expect("raw ICMP socket (run as root)");
    let rt = rt();
    let stop = Duration::from_millis(200);
    let cut = rt.block_on(async {
        let stop = tokio::time::sleep(stop);
        d.sweep_until(&first, |_, _| {}, stop).await
    });
    let stopped = cut.expect_err("cut short");
    assert_eq!(stopped.unfinished.len(), 4, "every host had probes to go");
    assert!(stopped
        .unfinished
        .iter()
        .all(|(_, st)| (1..5).contains(&st.sent)));
    let mut done = Vec::new();
    let report = rt.block_on(d.sweep(&second, |i, st| done.push((i, *st))));
    done.sort_by_key(|(i, _)| *i);
    let got: Vec<(usize, u32, u32)> = done
        .iter()
        .map(|(i, st)| (*i, st.sent, st.received))
        .collect();
    assert_eq!(got, [(0, 2, 2), (1, 2, 2)]);
    assert_eq!((report.counters.sent, report.counters.received), (4, 4));
    // The first sweep's probes would have expired 0.8 s into this one.
    let wall = report.wall;
    assert!(
        wall < Duration::from_millis(700),
        "waited for the first sweep's: {wall:?}"
    );
    // And a whole sweep of the first hosts again.
    let mut done = Vec::new();
    let report = rt.block_on(d.sweep(&first, |i, st| done.push((i, st.received))));
    assert_eq!(report.counters.sent, 20);
    done.sort_unstable();
    assert_eq!(done, [(0, 5), (1, 5), (2, 5), (3, 5)]);
}

#[test]
fn probes_the_kernel_refuses_count_as_lost_and_are_reported() {
    // A local firewall rule on OUTPUT: the kernel refuses the probes to 127.77.97.1 with
    // EPERM (a missing route gives ENETUNREACH the same way). As fping counts them: sent
    // and lost; the report names the first refusal so the daemon can say so.
    let _nft = NftTable::create(
        "chain output {\n type filter hook output priority -10; policy accept;\n \
         ip daddr 127.77.97.1 icmp type echo-request drop\n}",
    );
    let refused: IpAddr = "127.77.97.1".parse().unwrap();
    let fine: IpAddr = "127.77.97.2".parse().unwrap();
    let mut d = IcmpDriver::open(IcmpOptions::default()).expect("raw ICMP socket (run as root)");
    let mut stats = [PingStats::default(); 2];
    let jobs = [job(refused, 3, 300), job(fine, 3, 300)];
    let r = rt().block_on(d.sweep(&jobs, |i, st| stats[i] = *st));
    assert_eq!((stats[0].sent, stats[0].received), (3, 0), "{:?}", stats[0]);
    assert_eq!(stats[0].loss_pct(), 100.0);
    assert_eq!((stats[1].sent, stats[1].received), (3, 3), "{:?}", stats[1]);
    assert_eq!(r.counters.send_errors, 3);
    let (target, error) = r.first_send_error.expect("the refusal is reported");
    assert_eq!(target, refused);
    assert!(error.contains("not permitted"), "{error}");
    // The next sweep starts clean.
    let again = rt().block_on(d.sweep(&jobs[1..], |_, _| {}));
    assert_eq!(
        (again.counters.send_errors, again.first_send_error),
        (0, None)
    );
    // `netpoller sweep` exits as fping does: 1 when a host did not answer, for scripts.
    let sweep = |targets: &[&str]| {
        common::netpoller()
            .args(["sweep", "-c", "1", "-t", "300ms"])
            .args(targets)
            .output()
            .unwrap()
            .status
            .code()
    };
    assert_eq!(sweep(&["127.77.97.2"]), Some(0));
    assert_eq!(sweep(&["127.77.97.1", "127.77.97.2"]), Some(1));
    // --quiet leaves the hosts' lines (the results: `-q --json | jq` in a script).
    let o = common::netpoller()
        .args([
            "--quiet",
            "sweep",
            "-c",
            "1",
            "-t",
            "300ms",
            "--json",
            "127.77.97.2",
        ])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let j: serde_json::Value =
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    assert_eq!(
        (j["addr"].as_str(), j["received"].as_u64()),
        (Some("127.77.97.2"), Some(1))
    );
}

/// `sweep --quiet` prints the hosts' lines and nothing on stderr, as `fping -q -c`
/// prints each host's statistics and its totals only with `-s`: the totals line was
/// still printed. (Raw sockets or datagram ones: no notes either way with --quiet.)
#[test]
fn a_quiet_sweep_prints_the_hosts_lines_only() {
    let sweep = |quiet: bool| {
        let mut c = common::netpoller();
        if quiet {
            c.arg("--quiet");
        }
        let o = c
            .args([
                "sweep",
                "-c",
                "1",
                "-t",
                "300ms",
                "127.0.59.1",
                "127.0.59.2",
            ])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{o:?}");
        (
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (out, err) = sweep(false);
    assert!(err.contains("2 hosts, 2 alive, 0 unreachable in "), "{err}");
    // The totals alone: no log line of the sweep's own figures among the results.
    assert_eq!(err.lines().count(), 1, "{err}");
    let (quiet_out, quiet_err) = sweep(true);
    assert_eq!(quiet_err, "");
    // Each host as it is done: in the order its reply came.
    let addrs = |out: &str| -> Vec<String> {
        let mut v: Vec<String> = out
            .lines()
            .map(|l| l.split_whitespace().take(2).collect::<Vec<_>>().join(" "))
            .collect();
        v.sort();
        v
    };
    assert_eq!(addrs(&quiet_out), addrs(&out));
    assert_eq!(addrs(&out), ["127.0.59.1 alive", "127.0.59.2 alive"]);
}

#[test]
fn quarter_of_4096_loopback_hosts_silent() {
    // 127.77.0.0/20; hosts with address ≡ 3 (mod 4) drop echo requests: 1,024 silent.
    let _nft = NftTable::create(
        "chain input {\n type filter hook input priority -10; policy accept;\n \
         ip daddr 127.77.0.0/20 ip daddr & 0.0.0.3 == 0.0.0.3 icmp type echo-request drop\n}",
    );
    let addrs: Vec<IpAddr> = (0..4096u32)
        .map(|i| IpAddr::V4(Ipv4Addr::from(0x7f4d_0000 + i)))
        .collect();
    let silent = |a: &IpAddr| matches!(a, IpAddr::V4(v) if v.octets()[3] % 4 == 3);
    let timeout = Duration::from_secs(1);
    let jobs: Vec<PingJob> = addrs.iter().map(|&a| job(a, 3, 1000)).collect();
    let opts = IcmpOptions {
        max_pps: 100_000,
        ..IcmpOptions::default()
    };
    let mut driver = IcmpDriver::open(opts).expect("raw ICMP socket (run as root)");
    assert_eq!(driver.kind(), SocketKind::Raw);

    let start = Instant::now();
    let mut done: HashMap<usize, (PingStats, Duration)> = HashMap::new();
    let report = rt().block_on(driver.sweep(&jobs, |i, st| {
        assert!(
            done.insert(i, (*st, start.elapsed())).is_none(),
            "job {i} reported twice"
        );
    }));
    let wall = start.elapsed();

    assert_eq!(done.len(), 4096, "every job reported once");
    let mut last_alive = Duration::ZERO;
    let mut first_silent = Duration::MAX;
    for (i, a) in addrs.iter().enumerate() {
        let (st, at) = done[&i];
        assert_eq!(st.sent, 3, "{a}");
        if silent(a) {
            assert!(!st.is_alive(), "{a} should be silent: {st:?}");
            assert_eq!((st.received, st.loss_pct()), (0, 100.0), "{a}");
            assert_eq!(st.rtt_seconds(icmp::RttMode::Avg), 0.0);
            first_silent = first_silent.min(at);
        } else {
            assert!(st.is_alive(), "{a} should answer: {st:?}");
            assert_eq!((st.received, st.loss_pct()), (3, 0.0), "{a}");
            for mode in [icmp::RttMode::Min, icmp::RttMode::Avg, icmp::RttMode::Max] {
                let s = st.rtt_seconds(mode);
                assert!((0.0001..0.5).contains(&s), "{a} {mode:?} rtt {s}");
            }
            assert!(st.min <= st.avg().unwrap() && st.avg().unwrap() <= st.max);
            last_alive = last_alive.max(at);
        }
    }
    assert_eq!(report.alive, 3072);
    assert_eq!(report.counters.sent, 4096 * 3);
    assert_eq!(report.counters.received, 3072 * 3);
    assert_eq!(
        report.counters.late + report.counters.duplicate + report.counters.send_errors,
        0
    );
    // Answering hosts stream out long before the deadline; silent ones at the deadline.
    assert!(
        last_alive < first_silent,
        "alive {last_alive:?} vs silent {first_silent:?}"
    );
    assert!(
        first_silent >= timeout,
        "silent hosts completed before the timeout: {first_silent:?}"
    );
    // One deadline: last send + timeout (+ timer slack), however many hosts are silent.
    let bound = report.send_time + timeout + Duration::from_millis(100);
    assert!(
        report.wall >= timeout && report.wall <= bound,
        "wall {:?} > {bound:?}",
        report.wall
    );
    // Sending 12,288 probes at 100k pps takes ~125 ms in release; a debug build on a
    // loaded machine is far slower, so this only guards against a stall.
    assert!(
        report.send_time < Duration::from_secs(5),
        "send time {:?}",
        report.send_time
    );
    assert!(report.wall <= wall);
}

/// Every IPv4 datagram (IP header included) queued on raw socket `fd`.
fn recv_all(fd: i32) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: buf is valid for writes of its length.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
        if n <= 0 {
            return out;
        }
        out.push(buf[..n as usize].to_vec());
    }
}

/// Reads everything queued on raw socket `fd`: (type, ident, ICMP bytes, destination).
fn drain_raw(fd: i32) -> Vec<(u8, u16, Vec<u8>, Ipv4Addr)> {
    recv_all(fd)
        .into_iter()
        .map(|pkt| {
            let ihl = usize::from(pkt[0] & 0x0f) * 4;
            let icmp = pkt[ihl..].to_vec();
            let dst = Ipv4Addr::new(pkt[16], pkt[17], pkt[18], pkt[19]);
            (icmp[0], u16::from_be_bytes([icmp[4], icmp[5]]), icmp, dst)
        })
        .collect()
}

fn raw_icmp_socket() -> i32 {
    // SAFETY: plain socket(2).
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_ICMP) };
    assert!(fd >= 0, "raw socket: {}", std::io::Error::last_os_error());
    // It sees every ICMP datagram of its namespace: with other tests sweeping thousands
    // of loopback hosts at the same time, the default buffer overflows and drops ours.
    let size: libc::c_int = 16 << 20;
    // SAFETY: setsockopt with a c_int option value of the stated size.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    fd
}

fn send_raw(fd: i32, icmp: &[u8], dst: Ipv4Addr) {
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from(dst).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: valid buffer and sockaddr of the stated sizes.
    let r = unsafe {
        libc::sendto(
            fd,
            icmp.as_ptr().cast(),
            icmp.len(),
            0,
            (&sin as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    assert_eq!(
        r,
        icmp.len() as isize,
        "sendto: {}",
        std::io::Error::last_os_error()
    );
}

fn checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = data
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[test]
fn stale_and_foreign_replies_are_counted_and_ignored() {
    // Own namespace: nobody else's ICMP there, so every count is exact.
    let ns = Netns::create();
    ns.run(|| {
        let sniffer = raw_icmp_socket();
        let targets: Vec<IpAddr> = (1..=8)
            .map(|i| IpAddr::V4(Ipv4Addr::new(127, 0, 0, i)))
            .collect();
        let mut driver = IcmpDriver::open(IcmpOptions::default()).unwrap();
        let rt = rt();

        // Iteration 1: record its requests as they cross loopback.
        let jobs1: Vec<PingJob> = targets.iter().map(|&a| job(a, 1, 200)).collect();
        let r1 = rt.block_on(driver.sweep(&jobs1, |_, _| {}));
        assert_eq!(r1.alive, 8);
        let old_requests: Vec<_> = drain_raw(sniffer)
            .into_iter()
            .filter(|p| p.0 == 8)
            .collect();
        assert_eq!(old_requests.len(), 8, "sniffer saw iteration 1's requests");
        let old_ident = old_requests[0].1;

        // Iteration 2, while a second socket (a) replays iteration 1's requests, so their
        // replies arrive late, during iteration 2, and (b) pings with its own identifier.
        let foreign_ident = old_ident ^ 0x5555;
        let jobs2: Vec<PingJob> = targets.iter().map(|&a| job(a, 2, 500)).collect();
        let mut stats = vec![PingStats::default(); 8];
        let r2 = rt.block_on(async {
            let inject = async {
                tokio::time::sleep(Duration::from_millis(5)).await;
                for (_, _, icmp, dst) in &old_requests {
                    send_raw(sniffer, icmp, *dst);
                }
                for seq in 0..5u16 {
                    let mut icmp = vec![8, 0, 0, 0];
                    icmp.extend_from_slice(&foreign_ident.to_be_bytes());
                    icmp.extend_from_slice(&seq.to_be_bytes());
                    icmp.extend_from_slice(&[0xab; 32]);
                    let c = checksum(&icmp);
                    icmp[2..4].copy_from_slice(&c.to_be_bytes());
                    send_raw(sniffer, &icmp, Ipv4Addr::new(127, 0, 0, 1));
                }
            };
            let (report, ()) = tokio::join!(driver.sweep(&jobs2, |i, st| stats[i] = *st), inject);
            report
        });
        // SAFETY: closing our own fd.
        unsafe { libc::close(sniffer) };

        let c = r2.counters;
        assert_eq!(c.stale, 8, "iteration 1's replies: {c:?}");
        assert_eq!(c.foreign + c.spoofed, 5, "other identifier: {c:?}");
        assert_eq!(
            c.not_echo_reply, 0,
            "the kernel filter keeps requests out: {c:?}"
        );
        assert_eq!(
            (c.sent, c.received, c.malformed, c.duplicate),
            (16, 16, 0, 0),
            "{c:?}"
        );
        assert_eq!(r2.alive, 8);
        assert!(
            stats.iter().all(|s| s.sent == 2 && s.received == 2),
            "{stats:?}"
        );
    });
}

#[test]
fn datagram_socket_fallback_and_privilege_error() {
    let ns = Netns::create();
    // Unprivileged ping sockets disabled (kernel default "1 0"): clear error naming both fixes.
    ns.exec(&["sysctl", "-q", "-w", "net.ipv4.ping_group_range=1 0"]);
    let err =
        ns.run(|| IcmpDriver::open_kind(IcmpOptions::default(), SocketKind::Datagram).unwrap_err());
    let msg = err.to_string();
    assert!(matches!(err, IcmpOpenError::NoPermission { .. }));
    assert!(
        msg.contains("CAP_NET_RAW") && msg.contains("ping_group_range"),
        "{msg}"
    );

    // Allowed for our group: the datagram socket sweeps like the raw one.
    ns.exec(&[
        "sysctl",
        "-q",
        "-w",
        "net.ipv4.ping_group_range=0 2147483647",
    ]);
    let (kind, report, stats) = ns.run(|| {
        let mut d = IcmpDriver::open_kind(IcmpOptions::default(), SocketKind::Datagram).unwrap();
        let mut jobs: Vec<PingJob> = (1..=63)
            .map(|i| job(IpAddr::V4(Ipv4Addr::new(127, 0, 1, i)), 3, 500))
            .collect();
        // ICMPv6 ping socket as well (same sysctl governs it).
        d.ipv6().expect("ICMPv6 datagram socket");
        jobs.push(job("::1".parse().unwrap(), 3, 500));
        let mut stats = vec![PingStats::default(); jobs.len()];
        let report = rt().block_on(d.sweep(&jobs, |i, st| stats[i] = *st));
        // A second iteration on the same socket (same kernel identifier) still matches.
        let again = rt().block_on(d.sweep(&jobs[..4], |_, _| {}));
        assert_eq!((again.alive, again.counters.received), (4, 12));
        (d.kind(), report, stats)
    });
    assert_eq!(kind, SocketKind::Datagram);
    assert_eq!(report.alive, 64);
    assert_eq!(report.counters.received, 192);
    assert!(stats.iter().all(|s| s.received == 3 && s.loss_pct() == 0.0));
}

#[test]
fn ipv6_loopback_and_rejected_jobs() {
    let mut d = IcmpDriver::open(IcmpOptions::default()).unwrap();
    d.ipv6().expect("ICMPv6 socket");
    let jobs = vec![
        job("::1".parse().unwrap(), 2, 500),
        PingJob {
            size: 4,
            ..job(IpAddr::V4(Ipv4Addr::new(127, 77, 64, 1)), 1, 500)
        },
        job(IpAddr::V4(Ipv4Addr::new(127, 77, 64, 2)), 1, 500),
        // Together more than 65,536 probes to one address: both refused, nothing sent.
        job(IpAddr::V4(Ipv4Addr::new(127, 77, 64, 3)), 40_000, 500),
        job(IpAddr::V4(Ipv4Addr::new(127, 77, 64, 3)), 30_000, 500),
        // Absurd size: rejected, and no receive buffer is sized after it.
        PingJob {
            size: 1 << 40,
            ..job(IpAddr::V4(Ipv4Addr::new(127, 77, 64, 4)), 1, 500)
        },
    ];
    let mut stats = [None; 6];
    let report = rt().block_on(d.sweep(&jobs, |i, st| stats[i] = Some(*st)));
    let v6 = stats[0].expect("::1 reported");
    assert_eq!((v6.sent, v6.received), (2, 2));
    assert_eq!(
        stats[1],
        Some(PingStats::default()),
        "invalid job reported with zero stats"
    );
    assert_eq!(stats[2].map(|s| s.received), Some(1));
    let mut rejected = report.rejected.clone();
    rejected.sort();
    assert_eq!(
        rejected.iter().map(|r| r.0).collect::<Vec<_>>(),
        vec![1, 3, 4, 5]
    );
    assert!(rejected[0].1.contains("size 4"), "{rejected:?}");
    assert!(
        rejected[1].1.contains("at most 65536 per address"),
        "{rejected:?}"
    );
    assert_eq!(
        (stats[3], stats[4]),
        (Some(PingStats::default()), Some(PingStats::default()))
    );
    assert_eq!(report.counters.sent, 3);
    assert_eq!(report.alive, 2);
}

/// Sweeps 256 loopback hosts with two drivers at once, twice; the four reports.
fn run_pair_in_ns(ident_filter: bool) -> [poller::icmp_driver::SweepReport; 4] {
    let opts = IcmpOptions {
        ident_filter,
        ..IcmpOptions::default()
    };
    let mut a = IcmpDriver::open(opts).expect("raw ICMP socket (run as root)");
    let mut b = IcmpDriver::open(opts).expect("raw ICMP socket (run as root)");
    assert_eq!(a.kind(), SocketKind::Raw);
    let jobs_a: Vec<PingJob> = (0..256u32)
        .map(|i| job(IpAddr::V4(Ipv4Addr::from(0x7f4e_0000 + i)), 3, 300))
        .collect();
    let jobs_b: Vec<PingJob> = (0..256u32)
        .map(|i| job(IpAddr::V4(Ipv4Addr::from(0x7f4e_1000 + i)), 3, 300))
        .collect();
    rt().block_on(async {
        let first = tokio::join!(a.sweep(&jobs_a, |_, _| {}), b.sweep(&jobs_b, |_, _| {}));
        let second = tokio::join!(a.sweep(&jobs_a, |_, _| {}), b.sweep(&jobs_b, |_, _| {}));
        [first.0, first.1, second.0, second.1]
    })
}

/// Two drivers in one process sweeping at the same time (the daemon with
/// `icmp_concurrent_sweeps = 2`), twice (the second sweep finds its filter armed by the
/// first one's end): with the identifier filter neither socket sees the other's replies;
/// without it each reads and discards all of them (counted foreign). In a namespace of
/// its own: the other tests' sweeps on the host's loopback could use the same
/// (random) identifier, and their replies would pass the filter.
#[test]
fn concurrent_sweeps_with_ident_filter_do_not_read_each_others_replies() {
    let ns = Netns::create();
    let run_pair = |ident_filter: bool| ns.run(move || run_pair_in_ns(ident_filter));
    for r in &run_pair(true) {
        assert_eq!((r.alive, r.counters.received), (256, 768), "{r:?}");
        assert_eq!(
            r.counters.foreign + r.counters.spoofed + r.counters.stale,
            0,
            "{:?}",
            r.counters
        );
    }
    // The same without the filter: each socket reads the other's 768 replies too.
    let [ra, rb, ..] = run_pair(false);
    assert_eq!((ra.alive, rb.alive), (256, 256));
    assert!(
        ra.counters.foreign + rb.counters.foreign > 0,
        "{:?} {:?}",
        ra.counters,
        rb.counters
    );
}

/// Two drivers sharing one pacer (the daemon's sweep sockets) stay within its rate
/// together: 200 probes at 2,000 pps with a 5 ms burst take at least ~95 ms.
#[test]
fn drivers_sharing_a_pacer_keep_the_total_rate() {
    use poller::icmp_driver::{SharedPacer, SEND_BURST};
    let pacer = std::sync::Arc::new(SharedPacer::new(2_000, SEND_BURST, Instant::now()));
    let opts = IcmpOptions {
        ident_filter: true,
        ..IcmpOptions::default()
    };
    let mut a = IcmpDriver::open(opts).expect("raw ICMP socket (run as root)");
    let mut b = IcmpDriver::open(opts).expect("raw ICMP socket (run as root)");
    a.share_pacer(pacer.clone());
    b.share_pacer(pacer);
    let jobs = |base: u32| -> Vec<PingJob> {
        (0..100u32)
            .map(|i| job(IpAddr::V4(Ipv4Addr::from(base + i)), 1, 300))
            .collect()
    };
    let (ja, jb) = (jobs(0x7f4e_2000), jobs(0x7f4e_3000));
    let (ra, rb) =
        rt().block_on(async { tokio::join!(a.sweep(&ja, |_, _| {}), b.sweep(&jb, |_, _| {})) });
    assert_eq!((ra.alive, rb.alive), (100, 100));
    let last = ra.send_time.max(rb.send_time);
    assert!(
        last >= Duration::from_millis(85),
        "200 probes sent in {last:?}"
    );
}

#[test]
fn a_paced_sweep_wakes_at_most_once_per_tick() {
    // 2,000 loopback hosts at 20,000 probes/s: 100 ms of paced sending. Waking for each
    // free pacing slot (or each reply) would wake ~2,000 times; the sweep may wake once
    // per WAKE_TICK (1 ms) of its wall time.
    use poller::icmp_driver::WAKE_TICK;
    let opts = IcmpOptions {
        max_pps: 20_000,
        ..IcmpOptions::default()
    };
    let mut d = IcmpDriver::open(opts).expect("raw ICMP socket (run as root)");
    let jobs: Vec<PingJob> = (0..2_000u32)
        .map(|i| job(IpAddr::V4(Ipv4Addr::from(0x7f4e_4000 + i)), 1, 500))
        .collect();
    let r = rt().block_on(d.sweep(&jobs, |_, _| {}));
    assert_eq!(r.alive, 2_000);
    assert!(
        r.send_time >= Duration::from_millis(90),
        "paced: {:?}",
        r.send_time
    );
    let ticks = (r.wall.as_nanos() / WAKE_TICK.as_nanos()) as u64;
    assert!(
        r.wakeups <= ticks + 2,
        "{} wake-ups in {:?} ({ticks} ticks)",
        r.wakeups,
        r.wall
    );
    assert!(
        r.wakeups >= 10,
        "{} wake-ups: the sweep did wait",
        r.wakeups
    );
}

#[test]
fn expiries_of_silent_hosts_are_served_in_batches() {
    // 200 silent hosts (nft drops their echo requests), one probe each, all sent at once,
    // with timeouts from 300 to 400 ms: their probes expire one by one over 100 ms.
    // Waking for each expiry took a wake-up per timer tick (~50–100); expiries wait for
    // the receive tick instead (up to RX_TICK_MAX), while the deadline keeps its time.
    use poller::icmp_driver::RX_TICK_MAX;
    let _nft = NftTable::silencing("127.77.96.0/24");
    let mut d = IcmpDriver::open(IcmpOptions::default()).expect("raw ICMP socket (run as root)");
    let jobs: Vec<PingJob> = (0..200u32)
        .map(|i| {
            job(
                IpAddr::V4(Ipv4Addr::from(0x7f4d_6000 + i)),
                1,
                300 + u64::from(i) / 2,
            )
        })
        .collect();
    let mut done = 0;
    let r = rt().block_on(d.sweep(&jobs, |_, st| {
        assert_eq!((st.sent, st.received), (1, 0), "{st:?}");
        done += 1;
    }));
    assert_eq!((done, r.alive, r.counters.sent), (200, 0, 200));
    // The deadline (latest send + its timeout) is served on time, not a tick late.
    let bound = r.send_time + Duration::from_millis(400 + 15);
    assert!(r.wall <= bound, "wall {:?} > {bound:?}", r.wall);
    let expiry_ticks = (Duration::from_millis(100).as_nanos() / RX_TICK_MAX.as_nanos()) as u64;
    // A raw socket also sees every other ICMP packet of the host (the tests running
    // beside this one ping loopback): each may wake the sweep once.
    let c = &r.counters;
    let others = c.malformed
        + c.not_echo_reply
        + c.foreign
        + c.spoofed
        + c.redirected
        + c.stale
        + c.duplicate;
    assert!(
        r.wakeups <= expiry_ticks + 8 + others,
        "{} wake-ups for 100 ms of expiries, {others} packets of others (wall {:?}, sending {:?})",
        r.wakeups,
        r.wall,
        r.send_time
    );
}

/// Runs `f` in a network namespace of its own whose route to 198.19.0.0/19 is a TUN
/// device, behind which the hosts are a thread of this test (poller::tun_echo, as the
/// benchmarks' tun rig): addresses matching `silent_mask` stay silent, and the responder
/// naps `coalesce` when the device's queue is empty. Returns what `f` returned and what
/// the responder answered.
fn behind_tun<T: Send + 'static>(
    silent_mask: u32,
    coalesce: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> (T, poller::tun_echo::Counts) {
    behind_tun_with(
        move |tun, stop| {
            poller::tun_echo::serve(tun, silent_mask, coalesce, stop, Duration::from_secs(30))
        },
        f,
    )
}

/// [`behind_tun`] with the hosts answered by `respond(device, stop)`.
fn behind_tun_with<T: Send + 'static>(
    respond: impl FnOnce(
            &std::os::fd::OwnedFd,
            &std::sync::atomic::AtomicBool,
        ) -> std::io::Result<poller::tun_echo::Counts>
        + Send
        + 'static,
    f: impl FnOnce() -> T + Send + 'static,
) -> (T, poller::tun_echo::Counts) {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    let ns = Netns::create();
    ns.exec(&["ip", "tuntap", "add", "dev", "npt0", "mode", "tun"]);
    // A queue that holds a whole sweep's probes: the responder thread shares two busy
    // cores with the other tests, and a default queue (500) overflowed while it waited
    // for one (4,287 of 5,000 probes reached it once in CI).
    ns.exec(&["ip", "link", "set", "npt0", "txqueuelen", "100000", "up"]);
    ns.exec(&["ip", "addr", "add", "198.18.0.1/30", "dev", "npt0"]);
    ns.exec(&["ip", "route", "add", "198.19.0.0/19", "dev", "npt0"]);
    ns.run(move || {
        let tun = poller::tun_echo::open("npt0").expect("attach npt0");
        // Attaching turns the carrier on, but the kernel activates the device's queue
        // later (link watch, asynchronously): probes sent before that are dropped.
        let t0 = Instant::now();
        while !String::from_utf8_lossy(
            &Command::new("ip")
                .args(["link", "show", "npt0"])
                .output()
                .unwrap()
                .stdout,
        )
        .contains(" state UP ")
        {
            assert!(t0.elapsed() < Duration::from_secs(5), "npt0 never came up");
            std::thread::sleep(Duration::from_millis(10));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        // Threads started here inherit this thread's namespace.
        let responder = std::thread::spawn(move || respond(&tun, &stop2));
        let out = f();
        stop.store(true, Ordering::Relaxed);
        (out, responder.join().unwrap().expect("responder"))
    })
}

/// Answers every echo request `delay` after it came (hosts a long way off), until
/// `stop`.
fn delayed_echo(
    tun: &std::os::fd::OwnedFd,
    delay: Duration,
    stop: &std::sync::atomic::AtomicBool,
) -> std::io::Result<poller::tun_echo::Counts> {
    let mut counts = poller::tun_echo::Counts::default();
    let mut due: std::collections::VecDeque<(Instant, Vec<u8>)> = Default::default();
    let mut buf = vec![0u8; 65_536];
    let fd = tun.as_raw_fd();
    let t0 = Instant::now();
    while !stop.load(Ordering::Relaxed) && t0.elapsed() < Duration::from_secs(30) {
        loop {
            // SAFETY: reads into a buffer of the length given (the device is non-blocking).
            let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                break;
            }
            let mut p = buf[..n as usize].to_vec();
            if poller::tun_echo::answer(&mut p, 0) == Some(true) {
                due.push_back((Instant::now() + delay, p));
                counts.answered += 1;
            }
        }
        while due.front().is_some_and(|(at, _)| *at <= Instant::now()) {
            let (_, p) = due.pop_front().unwrap();
            // SAFETY: writes the bytes of `p`.
            unsafe { libc::write(fd, p.as_ptr().cast(), p.len()) };
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    Ok(counts)
}

#[test]
fn replies_queued_while_the_sweep_was_held_up_are_all_read_in_time() {
    // 5,000 hosts answer 300 ms after each probe; when the first answer is handed on, the
    // sweep's thread is held up 1.5 s (a starved VM, a busy runtime): meanwhile every
    // other reply queues in the socket, and every probe's 1 s timeout passes. Replies
    // carry kernel timestamps: all 5,000 arrived in time and must count (only the first
    // 4,096 did: the rest were read after the expiries had been handled).
    let n = 5000u32;
    let ((report, alive), counts) = behind_tun_with(
        |tun, stop| delayed_echo(tun, Duration::from_millis(300), stop),
        move || {
            let mut d =
                IcmpDriver::open(IcmpOptions::default()).expect("raw ICMP socket (run as root)");
            let jobs: Vec<PingJob> = (0..n)
                .map(|i| job(IpAddr::V4(Ipv4Addr::from(0xc613_0000 + 1 + i)), 1, 1000))
                .collect();
            let mut alive = 0;
            let mut held = false;
            let report = rt().block_on(d.sweep(&jobs, |_, st| {
                if !held {
                    held = true;
                    std::thread::sleep(Duration::from_millis(1500));
                }
                alive += usize::from(st.is_alive());
            }));
            (report, alive)
        },
    );
    assert_eq!(counts.answered, u64::from(n));
    assert_eq!(alive, n as usize, "{:?}", report.counters);
}

/// One sweep of `hosts` hosts behind a TUN device, one 1,000-byte probe each with
/// `timeout_ms`, through sockets asking for a `rcvbuf`-byte receive buffer: the report,
/// the hosts alive, what the responder answered.
fn big_replies_behind_tun(
    rcvbuf: usize,
    hosts: u32,
    timeout_ms: u64,
) -> (
    (poller::icmp_driver::SweepReport, u64),
    poller::tun_echo::Counts,
) {
    behind_tun(0, Duration::from_millis(1), move || {
        let opts = IcmpOptions {
            rcvbuf,
            ..IcmpOptions::default()
        };
        let mut d = IcmpDriver::open(opts).expect("raw ICMP socket (run as root)");
        let jobs: Vec<PingJob> = (0..hosts)
            .map(|i| PingJob {
                size: 1000,
                ..job(IpAddr::V4(Ipv4Addr::from(0xc613_0001 + i)), 1, timeout_ms)
            })
            .collect();
        let mut alive = 0u64;
        let report = rt().block_on(d.sweep(&jobs, |_, st| alive += u64::from(st.is_alive())));
        (report, alive)
    })
}

#[test]
fn a_small_receive_buffer_holds_every_reply_of_a_send_turn() {
    // 2,046 hosts answered through a device, 1,000-byte probes, and the receive buffer
    // an unprivileged process gets (net.core.rmem_max, 208 KiB on a stock kernel): the
    // probes sent between two reads are as many as their replies fit in a quarter of it
    // (512 at a time overflowed it: about half the hosts, which answered, read as lost).
    // A read delayed long enough on a loaded machine can still lose some (1,802 of
    // 2,046 read alive once, while the whole suite and two builds shared the two
    // cores): 99% at least in one sweep of three, where 512 at a time lost about half
    // in every sweep.
    let mut sweeps = Vec::new();
    for _ in 0..3 {
        let ((report, alive), counts) = big_replies_behind_tun(212_992, 2046, 1000);
        assert_eq!(counts.answered, 2046);
        if alive >= 2026 {
            return;
        }
        sweeps.push((alive, report.counters));
    }
    panic!("alive and counters of each sweep: {sweeps:?}");
}

#[test]
fn replies_the_kernel_drops_for_a_full_buffer_are_counted() {
    // A 4 KiB receive buffer and 1,000-byte replies: even 8 probes per read overflow it.
    // The replies the kernel dropped read as lost; the report counts them
    // (`SO_MEMINFO`), which is what tells an operator the hosts did answer.
    let ((report, alive), _) = big_replies_behind_tun(4096, 256, 500);
    assert!(report.receive_drops > 0, "{alive} alive: {report:?}");
    assert!(
        alive + report.receive_drops <= 256,
        "{alive} alive: {report:?}"
    );
}

#[test]
fn sweep_through_a_tun_device_answered_by_another_thread() {
    // Replies come in through a device, from another CPU, in bursts (the responder naps
    // 2 ms when idle), not from inside our own send call as on loopback. Addresses ≡ 3
    // mod 4 are silent.
    let ((report, stats), counts) = behind_tun(3, Duration::from_millis(2), || {
        let mut d =
            IcmpDriver::open(IcmpOptions::default()).expect("raw ICMP socket (run as root)");
        let jobs: Vec<PingJob> = (1..=64u32)
            .map(|i| job(IpAddr::V4(Ipv4Addr::new(198, 19, 0, i as u8)), 2, 300))
            .collect();
        let mut stats = vec![PingStats::default(); jobs.len()];
        let report = rt().block_on(d.sweep(&jobs, |i, s| stats[i] = *s));
        (report, stats)
    });
    // 16 of 1..=64 are ≡ 3 mod 4.
    assert_eq!(report.alive, 48);
    assert_eq!(counts.answered, 48 * 2);
    assert_eq!(counts.silenced, 16 * 2);
    assert_eq!(report.counters.received, 96, "{:?}", report.counters);
    for (i, st) in stats.iter().enumerate() {
        let silent = (i + 1) % 4 == 3;
        assert_eq!(st.is_alive(), !silent, "198.19.0.{}: {st:?}", i + 1);
        if !silent {
            let avg = st.avg().expect("an RTT");
            assert!(
                avg < Duration::from_millis(300),
                "198.19.0.{}: {avg:?}",
                i + 1
            );
        }
    }
    // One deadline: last send + timeout (two probes 20 ms apart), not a wait per host.
    assert!(
        report.wall < Duration::from_millis(600),
        "{:?}",
        report.wall
    );
}

#[test]
fn replies_arriving_between_wake_ups_do_not_wake_the_sweep() {
    // 256 hosts behind a TUN device answered by another thread, 3 probes 30 ms apart:
    // replies arrive in bursts while the sweep sleeps until its next send or receive
    // tick. The sweep's thread may block once for each time the sweep goes to sleep
    // (`wakeups`): a socket registered with the runtime all along would also wake it for
    // every burst the sweep is not waiting for (14–20 blocks for 9–10 sleeps).
    fn voluntary_switches() -> i64 {
        // SAFETY: getrusage writes the struct it is given.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) }, 0);
        ru.ru_nvcsw
    }
    let ((report, switches), _) = behind_tun(0, Duration::from_millis(1), || {
        let mut d =
            IcmpDriver::open(IcmpOptions::default()).expect("raw ICMP socket (run as root)");
        let jobs: Vec<PingJob> = (0..256u32)
            .map(|i| PingJob {
                interval: Duration::from_millis(30),
                ..job(IpAddr::V4(Ipv4Addr::from(0xc613_0001 + i)), 3, 300)
            })
            .collect();
        let rt = rt();
        let before = voluntary_switches();
        let report = rt.block_on(d.sweep(&jobs, |_, _| {}));
        (report, voluntary_switches() - before)
    });
    assert_eq!(report.alive, 256, "{:?}", report.counters);
    assert!(
        switches <= report.wakeups as i64 + 1,
        "the sweep's thread blocked {switches} times for {} waits",
        report.wakeups
    );
}

/// (DF set, IP ID) of every echo request to `dst` read from raw socket `fd`.
fn requests_to(fd: i32, dst: Ipv4Addr) -> Vec<(bool, u16)> {
    recv_all(fd)
        .into_iter()
        .filter(|pkt| {
            let ihl = usize::from(pkt[0] & 0x0f) * 4;
            Ipv4Addr::new(pkt[16], pkt[17], pkt[18], pkt[19]) == dst && pkt[ihl] == 8
        })
        .map(|pkt| (pkt[6] & 0x40 != 0, u16::from_be_bytes([pkt[4], pkt[5]])))
        .collect()
}

/// Probes that fit a 576-byte datagram leave with DF and IP ID 0 (the kernel skips its
/// keyed ID generator); larger ones keep the default, fragmentable, with an ID.
#[test]
fn small_probes_leave_with_df_and_no_ip_id() {
    // Addresses outside quarter_of_4096_loopback_hosts_silent's 127.77.0.0/20, which may
    // run at the same time (its probes would be sniffed too, and its nft rule silences
    // addresses ≡ 3 mod 4).
    let sniff = raw_icmp_socket();
    let mut d = IcmpDriver::open(IcmpOptions::default()).unwrap();
    let rt = rt();
    let mut sweep = |dst: Ipv4Addr, size: usize| {
        let mut j = job(IpAddr::V4(dst), 2, 200);
        j.size = size;
        let report = rt.block_on(d.sweep(&[j], |_, _| {}));
        assert_eq!(report.alive, 1);
        requests_to(sniff, dst)
    };
    let small = sweep(Ipv4Addr::new(127, 77, 96, 1), 56);
    assert_eq!(small, vec![(true, 0), (true, 0)]);
    let large = sweep(Ipv4Addr::new(127, 77, 96, 2), 1000);
    assert_eq!(large.len(), 2);
    assert!(large.iter().any(|&(_, id)| id != 0), "{large:?}");
    // And back: the setting follows each sweep's largest probe.
    assert_eq!(
        sweep(Ipv4Addr::new(127, 77, 96, 3), 548),
        vec![(true, 0), (true, 0)]
    );
    // SAFETY: closing our own fd.
    unsafe { libc::close(sniff) };
}

/// A plan of one ICMP item per `(address, key)`, host `h<i>`, and a one-shot due each.
fn icmp_plan(hosts: &[(&str, &str)]) -> (poller::plan::Plan, Vec<poller::scheduler::Due>) {
    use poller::keys::{IcmpDefaults, IcmpKey, ItemKey};
    use poller::plan::{HostSpec, ItemKind, ItemSpec};
    let specs = hosts
        .iter()
        .enumerate()
        .map(|(i, (ip, key))| {
            let k =
                IcmpKey::parse(&ItemKey::parse(key).unwrap(), &IcmpDefaults::default()).unwrap();
            let name = format!("h{i}");
            HostSpec {
                name: name.as_str().into(),
                ip: ip.parse().unwrap(),
                snmp: None,
                items: vec![ItemSpec {
                    itemid: poller::plan::derive_itemid(&name, key),
                    key: (*key).into(),
                    value_type: poller::value::ValueType::Float,
                    interval_ms: 60_000,
                    kind: ItemKind::Icmp {
                        metric: k.metric,
                        probe: k.probe,
                    },
                    pre: None,
                }],
            }
        })
        .collect();
    common::plan_due_once(specs)
}

/// One ICMP iteration, with the daemon's code, of hosts `h0`, `h1`, ... (see
/// [`icmp_plan`]), its samples sent to `tx`; `host_done` gets the names of the hosts
/// handed back early. Returns its summary and emitter.
fn iterate(
    hosts: &[(&str, &str)],
    tx: tokio::sync::mpsc::Sender<poller::engine::Samples>,
    host_done: &mut (dyn FnMut(Vec<String>) + Send),
    stop: impl std::future::Future<Output = ()>,
) -> (poller::daemon::IterationSummary, poller::engine::Emitter) {
    let (plan, dues) = icmp_plan(hosts);
    let mut d = IcmpDriver::open(IcmpOptions::default()).expect("raw ICMP socket (run as root)");
    let mut emitter = poller::engine::Emitter::new(tx, Default::default());
    let metrics = poller::daemon::EngineMetrics::default();
    let mut done = |idxs: &[usize]| host_done(common::due_host_names(&plan, &dues, idxs));
    let sum = rt().block_on(poller::daemon::icmp_iteration(
        &mut d,
        &plan,
        &dues,
        &metrics,
        &mut emitter,
        &mut done,
        stop,
    ));
    (sum, emitter)
}

/// A host whose probes last long does not hold back the others of its sweep: those
/// done are handed back (for rescheduling) while it goes on, after their samples.
#[test]
fn hosts_done_are_reported_while_a_long_probe_train_goes_on() {
    let (tx, mut rx) = tokio::sync::mpsc::channel(16);
    let mut reported: Vec<(Vec<String>, usize)> = Vec::new();
    let hosts = [
        ("127.77.98.1", "icmppingloss[,1,,,200]"),
        ("127.77.98.2", "icmppingloss[,3,1000,,500]"),
    ];
    let (sum, _) = iterate(
        &hosts,
        tx,
        &mut |names| {
            // With the samples already in the channel.
            let mut got = 0;
            while rx.try_recv().map(|b| got += b.len()).is_ok() {}
            reported.push((names, got));
        },
        std::future::pending(),
    );
    // h0 (200 ms) is reported at the first second, its sample before it; h1 (2.5 s of
    // probes) is left to the caller at the end.
    assert_eq!(reported, [(vec!["h0".to_string()], 1)]);
    assert_eq!(sum.items, 2);
}

/// Hosts whose samples wait for a full channel (the sink behind) are not handed back
/// early: their next poll, by another sweep, could reach the consumer before them.
#[test]
fn hosts_whose_samples_wait_for_the_channel_are_not_handed_back() {
    let (tx, mut rx) = tokio::sync::mpsc::channel(1);
    // The channel full: the sweep's samples are parked in its emitter.
    tx.try_send(Vec::new()).unwrap();
    let mut reported = Vec::new();
    let hosts = [
        ("127.77.98.5", "icmppingloss[,1,,,200]"),
        ("127.77.98.6", "icmppingloss[,3,1000,,500]"),
    ];
    let (_, emitter) = iterate(
        &hosts,
        tx,
        &mut |names| reported.extend(names),
        std::future::pending(),
    );
    assert_eq!(reported, Vec::<String>::new());
    assert!(emitter.parked() > 0);
    assert!(rx.try_recv().is_ok());
}

/// A stop cuts a sweep short after STOP_GRACE: what was over is delivered, the
/// host still probing gets no value (and the iteration does not wait for it).
#[test]
fn a_stop_cuts_a_long_sweep_short() {
    let (tx, mut rx) = tokio::sync::mpsc::channel(16);
    let hosts = [
        ("127.77.98.3", "icmppingloss[,1,,,200]"),
        ("127.77.98.4", "icmppingloss[,60,1000,,500]"),
    ];
    drop(iterate(&hosts, tx, &mut |_| {}, async {}));
    let mut hosts = Vec::new();
    while let Ok(batch) = rx.try_recv() {
        hosts.extend(batch.iter().map(|s| s.host.to_string()));
    }
    assert_eq!(hosts, ["h0"]);
}

/// Answers echo requests through the device, but not the first `drop_first` to each
/// address (a host that misses a probe or two), until `stop`.
fn echo_after_misses(
    tun: &std::os::fd::OwnedFd,
    drop_first: u32,
    stop: &std::sync::atomic::AtomicBool,
) -> std::io::Result<poller::tun_echo::Counts> {
    let mut counts = poller::tun_echo::Counts::default();
    let mut seen: HashMap<[u8; 4], u32> = HashMap::new();
    let mut buf = vec![0u8; 65_536];
    let fd = tun.as_raw_fd();
    let t0 = Instant::now();
    while !stop.load(Ordering::Relaxed) && t0.elapsed() < Duration::from_secs(30) {
        // SAFETY: reads into a buffer of the length given (the device is non-blocking).
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            std::thread::sleep(Duration::from_micros(200));
            continue;
        }
        let p = &mut buf[..n as usize];
        // IPv4, ICMP, an echo request: other packets the kernel routes here are no probe.
        let ihl = usize::from(p[0] & 0x0f) * 4;
        if p.len() < 20.max(ihl + 8) || p[0] >> 4 != 4 || p[9] != 1 || p[ihl] != 8 {
            counts.ignored += 1;
            continue;
        }
        let Ok(dst) = <[u8; 4]>::try_from(&p[16..20]) else {
            continue;
        };
        let misses = seen.entry(dst).or_default();
        if *misses < drop_first {
            *misses += 1;
            counts.silenced += 1;
            continue;
        }
        if poller::tun_echo::answer(p, 0) == Some(true) {
            counts.answered += 1;
            // SAFETY: writes the bytes of the reply.
            unsafe { libc::write(fd, p.as_ptr().cast(), p.len()) };
        }
    }
    Ok(counts)
}

#[test]
fn a_retrying_host_is_probed_again_only_while_it_does_not_answer() {
    // `icmppingretry` (fping's default mode) through real sockets: every host misses its
    // first probe. Retrying hosts (2 retries, backoff 2.0, 150 ms first timeout) get a
    // second probe when the first one's timeout ran out, answer it, and get no third;
    // a counting host (icmpping, 3 packets) gets its 3 probes all the same.
    let retry = |i: u32| PingJob {
        timeout: Duration::from_millis(150),
        retry: Some(icmp::Retry { backoff_pct: 200 }),
        ..job(IpAddr::V4(Ipv4Addr::from(0xc613_0001 + i)), 3, 150)
    };
    let ((stats, report), counts) = behind_tun_with(
        |tun, stop| echo_after_misses(tun, 1, stop),
        move || {
            let mut d = IcmpDriver::open(IcmpOptions::default()).expect("raw ICMP socket");
            let mut jobs: Vec<PingJob> = (0..4).map(retry).collect();
            jobs.push(job(IpAddr::V4(Ipv4Addr::from(0xc613_0010)), 3, 150));
            let start = Instant::now();
            let mut stats = vec![None; jobs.len()];
            let report = rt().block_on(d.sweep(&jobs, |i, st| {
                stats[i] = Some((*st, start.elapsed()));
            }));
            (stats, report)
        },
    );
    for (i, s) in stats.iter().enumerate().take(4) {
        let (st, at) = s.expect("reported");
        assert_eq!((st.sent, st.received), (2, 1), "host {i}: {st:?}");
        assert!(st.is_alive());
        // Its second probe left when the first one's 150 ms ran out.
        assert!(at >= Duration::from_millis(150), "host {i} done at {at:?}");
        assert!(st.max < Duration::from_millis(300), "{st:?}");
    }
    let (counting, _) = stats[4].expect("reported");
    assert_eq!((counting.sent, counting.received), (3, 2), "{counting:?}");
    assert_eq!(report.counters.sent, 4 * 2 + 3);
    assert_eq!((counts.silenced, counts.answered), (5, 6));
}

#[test]
fn a_silent_retrying_host_waits_each_longer_timeout_once() {
    // No reply at all (odd addresses are silent): 1 + 2 retries, timeouts 100, 200 and 400 ms one after another:
    // the host is done after 700 ms at least, with 3 probes sent, never more.
    let ((stats, report), counts) = behind_tun(1, Duration::from_millis(1), move || {
        let mut d = IcmpDriver::open(IcmpOptions::default()).expect("raw ICMP socket");
        let jobs = vec![PingJob {
            retry: Some(icmp::Retry { backoff_pct: 200 }),
            ..job(IpAddr::V4(Ipv4Addr::from(0xc613_0001)), 3, 100)
        }];
        let start = Instant::now();
        let mut stats = None;
        let report = rt().block_on(d.sweep(&jobs, |_, st| stats = Some((*st, start.elapsed()))));
        (stats, report)
    });
    let (st, at) = stats.expect("reported");
    assert_eq!((st.sent, st.received), (3, 0), "{st:?}");
    assert!(at >= Duration::from_millis(700), "done at {at:?}");
    assert_eq!(report.counters.sent, 3);
    assert_eq!(counts.answered, 0);
}

/// Sends SIGINT to a `netpoller sweep` child whose stdout and stderr are piped, checks
/// that it exits as a SIGINT's (130), and returns what it printed on each.
/// `netpoller ARGS...` started, its stdout and stderr piped (for [`interrupt`]).
fn spawn_piped(args: &[&str]) -> std::process::Child {
    common::netpoller()
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

fn interrupt(child: std::process::Child) -> (String, String) {
    interrupt_exiting(child, 130)
}

/// SIGINT to `child`, which must exit `code`: its stdout and stderr.
fn interrupt_exiting(child: std::process::Child, code: i32) -> (String, String) {
    // SAFETY: a signal to the child this test started.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let o = child.wait_with_output().unwrap();
    let (out, err) = (
        String::from_utf8(o.stdout).unwrap(),
        String::from_utf8(o.stderr).unwrap(),
    );
    assert_eq!(o.status.code(), Some(code), "{out}\n{err}");
    (out, err)
}

#[test]
fn an_interrupted_sweep_prints_the_hosts_it_is_done_with() {
    // 127.77.98.1 answers at once; nft drops the probes to 127.77.98.2, which would be
    // waited for 20 s. Ctrl-C after a second: the first host's line is out (it sat in
    // the output buffer and was lost), then the second's as it stood (its request
    // awaiting its reply counted as lost, as fping prints it), the summary says which
    // were cut short, and the exit status is a SIGINT's.
    let _nft = NftTable::silencing("127.77.98.2");
    let child = spawn_piped(&[
        "sweep",
        "-c",
        "1",
        "-t",
        "20s",
        "127.77.98.1",
        "127.77.98.2",
    ]);
    std::thread::sleep(Duration::from_secs(1));
    let (out, err) = interrupt(child);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(lines[0].starts_with("127.77.98.1 alive 1/1 0% "), "{out}");
    assert_eq!(
        lines[1], "127.77.98.2 unreachable 1/0 100% -/-/- ms",
        "{out}"
    );
    assert!(
        err.contains("1 of 2 hosts done, the other 1 cut short (printed with the replies they had: a request awaiting its reply counted as lost), 1 alive"),
        "{err}"
    );
}

/// `netpoller sweep -c 1000` of a host that answers and one nft silences, interrupted
/// once the first has had 3 requests: both lines are printed as fping prints them on
/// SIGINT, with the replies so far (the answering host alive, its min/avg/max of
/// them); they said nothing ("0 of 2 hosts done ... the other 2 not reported"). In
/// JSON they are marked `"cut_short": true`. (nft counts the requests: the signal
/// goes once they are out, not after a time.)
#[test]
fn an_interrupted_sweep_prints_the_hosts_still_probing_as_they_stood() {
    let nft = NftTable::create(
        "chain input {\n type filter hook input priority -10; policy accept;\n \
         ip daddr 127.0.222.1 icmp type echo-request counter\n \
         ip daddr 127.0.222.2 icmp type echo-request drop\n}",
    );
    for json in [false, true] {
        let before = nft.counters()[0];
        let mut args = vec!["sweep", "-c", "1000", "-i", "100ms", "-t", "20s"];
        args.extend(json.then_some("--json"));
        let child = spawn_piped(&[&args[..], &["127.0.222.1", "127.0.222.2"]].concat());
        let start = Instant::now();
        while nft.counters()[0] < before + 3 {
            assert!(start.elapsed() < Duration::from_secs(60), "no requests");
            std::thread::sleep(Duration::from_millis(20));
        }
        let (out, err) = interrupt(child);
        assert!(
            err.contains("0 of 2 hosts done, the other 2 cut short (printed with the replies they had: a request awaiting its reply counted as lost), 1 alive"),
            "{err}"
        );
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{out}");
        if json {
            let host = |l: &str| serde_json::from_str::<serde_json::Value>(l).unwrap();
            let (answers, silent) = (host(lines[0]), host(lines[1]));
            assert_eq!(answers["addr"], "127.0.222.1", "{out}");
            assert_eq!(answers["cut_short"], true, "{out}");
            assert!(answers["received"].as_u64().unwrap() >= 2, "{out}");
            assert!(answers["rtt_min_ms"].is_f64(), "{out}");
            assert_eq!(silent["addr"], "127.0.222.2", "{out}");
            assert_eq!(silent["received"], 0, "{out}");
            assert_eq!(silent["cut_short"], true, "{out}");
            continue;
        }
        // `ADDR alive|unreachable sent/recv loss% min/avg/max ms`
        let fields: Vec<Vec<&str>> = lines.iter().map(|l| l.split(' ').collect()).collect();
        let counts = |f: &[&str]| -> (u32, u32) {
            let (sent, recv) = f[2].split_once('/').unwrap();
            (sent.parse().unwrap(), recv.parse().unwrap())
        };
        let (sent, recv) = counts(&fields[0]);
        assert_eq!(&fields[0][..2], ["127.0.222.1", "alive"], "{out}");
        assert!(recv >= 2 && recv <= sent && sent < 1000, "{out}");
        assert_eq!(fields[0][5], "ms", "{out}");
        assert_eq!(&fields[1][..2], ["127.0.222.2", "unreachable"], "{out}");
        let (sent, recv) = counts(&fields[1]);
        assert!(sent >= 1 && recv == 0, "{out}");
        assert_eq!(&fields[1][3..], ["100%", "-/-/-", "ms"], "{out}");
    }
}

/// `netpoller sweep --json` of 254 hosts whose stdout is a pipe of 4 KiB nobody reads
/// (`netpoller sweep … | less` left on its first page), and whose stderr is the same
/// pipe (`2>&1`, if `errors_too`) or one read here: SIGINT once the pipe is full and
/// the thread writing the results waits on it. Returns the exit status, what stderr
/// said (when read here), and the results the pipe holds. (The waits are bounded only
/// so that a hang fails, not for speed.)
fn interrupted_while_nobody_reads(errors_too: bool) -> (std::process::ExitStatus, String, String) {
    let (mut reader, writer) = std::io::pipe().unwrap();
    // SAFETY: fcntl on a pipe this test owns.
    let size = unsafe { libc::fcntl(reader.as_raw_fd(), libc::F_SETPIPE_SZ, 4096) };
    assert!(size >= 4096, "{}", std::io::Error::last_os_error());
    let errors = if errors_too {
        std::process::Stdio::from(writer.try_clone().unwrap())
    } else {
        std::process::Stdio::piped()
    };
    let mut child = common::netpoller()
        .args(["sweep", "--json", "-c", "5", "-i", "20ms", "-t", "200ms"])
        .arg("127.0.184.0/24")
        .stdout(writer)
        .stderr(errors)
        .spawn()
        .unwrap();
    let queued = || {
        let mut n: libc::c_int = 0;
        // SAFETY: FIONREAD writes one int.
        assert_eq!(
            unsafe { libc::ioctl(reader.as_raw_fd(), libc::FIONREAD, &mut n) },
            0
        );
        n as usize
    };
    // The pipe full, and the thread writing the results waiting in its next write: the
    // lines it wrote are counted by then.
    let tasks = format!("/proc/{}/task", child.id());
    let writer_waits = || {
        std::fs::read_dir(&tasks).unwrap().flatten().any(|task| {
            let read = |f: &str| std::fs::read_to_string(task.path().join(f)).unwrap_or_default();
            read("comm").trim() == "sweep-stdout"
                && read("syscall").split(' ').next() == Some(&libc::SYS_write.to_string())
        })
    };
    let start = Instant::now();
    while queued() < size as usize || !writer_waits() {
        if start.elapsed() > Duration::from_secs(60) || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            panic!("the pipe never filled: {} bytes", queued());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: a signal to the child this test started.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("SIGINT did not end a sweep whose stdout is blocked (errors_too: {errors_too})");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    if let Some(mut stderr) = child.stderr.take() {
        std::io::Read::read_to_string(&mut stderr, &mut err).unwrap();
    }
    let mut results = String::new();
    std::io::Read::read_to_string(&mut reader, &mut results).unwrap();
    (status, err, results)
}

#[test]
fn an_interrupted_sweep_ends_while_nobody_reads_its_output() {
    // The results' writes blocked the sweep's thread, where the signals are handled, so
    // Ctrl-C could not end it. Here 254 hosts' JSON lines are more than the pipe holds;
    // once it is full, SIGINT ends the sweep with a SIGINT's status, saying how many of
    // the lines were not printed: those the pipe does not hold. (The pipe took the
    // first 4 KiB of the chunk being written, which was counted as none of it printed.)
    let (status, err, results) = interrupted_while_nobody_reads(false);
    assert_eq!(status.code(), Some(130), "{err}");
    let printed = results.matches('\n').count();
    assert!(printed > 0, "{results}");
    let not_printed = format!(
        " ({} of the 254 lines not printed: standard output was not read)",
        254 - printed
    );
    assert!(err.contains("254 of 254 hosts done, "), "{err}");
    assert!(err.contains(&not_printed), "{not_printed}: {err}");
}

#[test]
fn an_interrupted_sweep_ends_while_nobody_reads_its_output_nor_its_errors() {
    // `netpoller sweep … 2>&1 | less`: the message the sweep ends with goes to the full
    // pipe too. Written by the thread ending the process, it held the exit for as long
    // as nobody read, after the signal had ended the sweep.
    let (status, _, results) = interrupted_while_nobody_reads(true);
    assert_eq!(status.code(), Some(130), "{results}");
}

#[test]
fn sweep_retries_send_again_only_to_hosts_that_did_not_answer() {
    // `netpoller sweep --retries 2` (fping's default mode, icmppingretry): the host that
    // answers gets one request, the one nft silences 1 + 2, each waiting twice as long.
    let _nft = NftTable::silencing("127.77.99.2");
    let o = common::netpoller()
        .args([
            "--quiet", "sweep", "--json", "-r", "2", "-B", "2", "-t", "100ms",
        ])
        .args(["127.77.99.1", "127.77.99.2"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let hosts: HashMap<String, (u64, u64)> = out
        .lines()
        .map(|l| {
            let j: serde_json::Value = serde_json::from_str(l).unwrap();
            let n = |k: &str| j[k].as_u64().unwrap();
            (
                j["addr"].as_str().unwrap().to_string(),
                (n("sent"), n("received")),
            )
        })
        .collect();
    assert_eq!(hosts["127.77.99.1"], (1, 1), "{out}");
    assert_eq!(hosts["127.77.99.2"], (3, 0), "{out}");
    assert_eq!(o.status.code(), Some(1), "a host did not answer");
    // Not with --count (which sends all of its requests), and within Zabbix's limits.
    for args in [
        &["-c", "2", "-r", "1"][..],
        &["-r", "1", "-B", "6"],
        &["-B", "2"],
    ] {
        let o = common::netpoller()
            .arg("sweep")
            .args(args)
            .arg("127.77.99.1")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}");
    }
}

/// Rejects, inside `ns`, the echo requests to 127.0.225.1 with "host unreachable", to
/// 127.0.225.2 and ::1 with "administratively prohibited", and to 127.0.226.0/24 with
/// "host unreachable", as a router or a firewall on the way would (on input: the probe
/// leaves, the error comes back).
fn reject_in(ns: &Netns) {
    ns.exec(&["nft", "add", "table", "inet", "np_reject"]);
    ns.exec(&[
        "nft",
        "add chain inet np_reject input { type filter hook input priority -10; policy accept; }",
    ]);
    for rule in [
        "ip daddr 127.0.225.1 icmp type echo-request reject with icmp type host-unreachable",
        "ip daddr 127.0.225.2 icmp type echo-request reject with icmp type admin-prohibited",
        "ip daddr 127.0.226.0/24 icmp type echo-request reject with icmp type host-unreachable",
        "ip6 daddr ::1 icmpv6 type echo-request reject with icmpv6 type admin-prohibited",
    ] {
        ns.exec(&["nft", &format!("add rule inet np_reject input {rule}")]);
    }
}

/// An ICMP error that comes back for a probe says why its host is silent (fping prints
/// "ICMP Host Unreachable from ..."): kept with the host, over raw and datagram
/// sockets, ICMP and ICMPv6; the probes still count as lost, and a host that answers
/// carries none. `netpoller sweep` prints it on the host's line and in `--json`.
/// In a network namespace of the test's own (its ::1 and its firewall).
#[test]
fn icmp_errors_say_why_hosts_are_silent() {
    let ns = Netns::create();
    reject_in(&ns);
    ns.exec(&[
        "sysctl",
        "-q",
        "-w",
        "net.ipv4.ping_group_range=0 2147483647",
    ]);
    let v4 = |d: u8| IpAddr::V4(Ipv4Addr::new(127, 0, 225, d));
    let lo6: IpAddr = "::1".parse().unwrap();
    for kind in [SocketKind::Raw, SocketKind::Datagram] {
        let (report, stats) = ns.run(move || {
            let mut d = IcmpDriver::open_kind(IcmpOptions::default(), kind).unwrap();
            d.ipv6().expect("ICMPv6 socket");
            let jobs = [
                job(v4(1), 2, 300),
                job(v4(2), 2, 300),
                job(v4(3), 2, 300),
                job(lo6, 2, 300),
            ];
            let mut stats = [PingStats::default(); 4];
            let report = rt().block_on(d.sweep(&jobs, |i, st| stats[i] = *st));
            (report, stats)
        });
        let seen: Vec<_> = stats
            .iter()
            .map(|s| (s.sent, s.received, s.error.map(|e| (e.kind, e.from))))
            .collect();
        use icmp::UnreachableKind::*;
        assert_eq!(
            seen,
            [
                (2, 0, Some((Host, v4(1)))),
                (2, 0, Some((Prohibited, v4(2)))),
                (2, 2, None),
                (2, 0, Some((Prohibited, lo6))),
            ],
            "{kind:?}: {report:?}"
        );
        assert_eq!(report.counters.icmp_errors, 6, "{kind:?}: {report:?}");
        assert_eq!(report.recv_errors, 0, "{kind:?}: {report:?}");
    }
    let sweep = |json: bool| {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &ns.0, env!("CARGO_BIN_EXE_netpoller")]);
        c.args([
            "sweep",
            "-c",
            "1",
            "-t",
            "300ms",
            "127.0.225.1",
            "127.0.225.3",
        ]);
        if json {
            c.arg("--json");
        }
        let o = c.output().unwrap();
        assert_eq!(o.status.code(), Some(1), "{o:?}");
        // The totals count the unreachable an ICMP error came back for.
        let totals = String::from_utf8_lossy(&o.stderr);
        assert!(
            totals.contains("2 hosts, 1 alive, 1 unreachable (1 with an ICMP error) in "),
            "{totals}"
        );
        let mut lines: Vec<String> = String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(String::from)
            .collect();
        lines.sort();
        lines
    };
    let text = sweep(false);
    assert!(
        text[0].starts_with(
            "127.0.225.1 unreachable 1/0 100% -/-/- ms; ICMP host unreachable from 127.0.225.1 ("
        ),
        "{text:?}"
    );
    assert!(
        text[1].starts_with("127.0.225.3 alive 1/1 0% ") && text[1].ends_with(" ms"),
        "{text:?}"
    );
    let json = sweep(true);
    let j: serde_json::Value = serde_json::from_str(&json[0]).unwrap();
    assert_eq!(
        (
            j["icmp_error"]["kind"].as_str(),
            j["icmp_error"]["from"].as_str()
        ),
        (Some("host-unreachable"), Some("127.0.225.1")),
        "{json:?}"
    );
    let j: serde_json::Value = serde_json::from_str(&json[1]).unwrap();
    assert!(j.get("icmp_error").is_none(), "{json:?}");
}

/// ICMP errors queued count against the receive buffer: read at once, those of 250
/// rejected hosts leave room for the replies of live ones swept after them into a
/// small buffer (left queued, they took it all, and the live hosts read as down).
#[test]
fn icmp_errors_waiting_do_not_crowd_out_replies() {
    let ns = Netns::create();
    reject_in(&ns);
    let (report, stats) = ns.run(|| {
        let opts = IcmpOptions {
            rcvbuf: 16 << 10,
            max_pps: 5_000,
            ..IcmpOptions::default()
        };
        let mut d = IcmpDriver::open_kind(opts, SocketKind::Raw).unwrap();
        let mut jobs: Vec<PingJob> = (1..=250)
            .map(|i| job(IpAddr::V4(Ipv4Addr::new(127, 0, 226, i)), 1, 300))
            .collect();
        jobs.extend((1..=5).map(|i| job(IpAddr::V4(Ipv4Addr::new(127, 0, 227, i)), 1, 300)));
        let mut stats = vec![PingStats::default(); jobs.len()];
        let report = rt().block_on(d.sweep(&jobs, |i, st| stats[i] = *st));
        (report, stats)
    });
    let live: Vec<u32> = stats[250..].iter().map(|s| s.received).collect();
    assert_eq!(live, [1; 5], "{report:?}");
    assert!(report.counters.icmp_errors > 200, "{report:?}");
    // Unpaced, a flood of errors: each receive that reports one reads them all, none
    // is a receive error (the ninth of a turn was).
    let report = ns.run(|| {
        let opts = IcmpOptions {
            max_pps: 0,
            ..IcmpOptions::default()
        };
        let mut d = IcmpDriver::open_kind(opts, SocketKind::Raw).unwrap();
        let jobs: Vec<PingJob> = (0..4 * 250u32)
            .map(|i| {
                job(
                    IpAddr::V4(Ipv4Addr::new(127, 0, 226, (i % 250) as u8 + 1)),
                    1,
                    300,
                )
            })
            .collect();
        rt().block_on(d.sweep(&jobs, |_, _| {}))
    });
    assert_eq!(report.recv_errors, 0, "{report:?}");
    assert!(report.counters.icmp_errors > 900, "{report:?}");
}

/// `sweep -a` lists the hosts that answered, `-u` those that did not, their addresses
/// alone, one per line, as fping's -a and -u do (`sweep -a 10.0.0.0/24 > up.txt`);
/// with --json, their objects. The exit status stays fping's (1: one did not answer);
/// the two together are refused.
#[test]
fn alive_and_unreachable_print_those_hosts_addresses_alone() {
    let _nft = NftTable::silencing("127.0.230.2");
    let sweep = |flags: &[&str]| {
        let o = common::netpoller()
            .args(["--quiet", "sweep", "-c", "1", "-t", "300ms"])
            .args(flags)
            .args(["127.0.230.1", "127.0.230.2", "127.0.230.3"])
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        )
    };
    let (code, up) = sweep(&["-a"]);
    let mut up: Vec<&str> = up.lines().collect();
    up.sort();
    assert_eq!((code, up), (Some(1), vec!["127.0.230.1", "127.0.230.3"]));
    assert_eq!(sweep(&["--unreachable"]), (Some(1), "127.0.230.2\n".into()));
    let (_, json) = sweep(&["-u", "--json"]);
    let j: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
    assert_eq!(
        (j["addr"].as_str(), j["received"].as_u64()),
        (Some("127.0.230.2"), Some(0))
    );
    assert_eq!(sweep(&["-a", "-u"]).0, Some(2));
}

/// `sweep @-` reads its targets from standard input, as fping does without targets
/// (`... | netpoller sweep @-`), in the format of an @file.
#[test]
fn targets_come_from_standard_input_with_at_dash() {
    use std::io::Write as _;
    let mut child = common::netpoller()
        .args(["--quiet", "sweep", "-c", "1", "-t", "300ms", "@-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(b"127.0.230.4 # a comment\n\n127.0.230.5/32\n")
        .unwrap();
    drop(stdin);
    let o = child.wait_with_output().unwrap();
    let mut hosts: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| l.split_whitespace().take(2).collect::<Vec<_>>().join(" "))
        .collect();
    hosts.sort();
    assert_eq!(hosts, ["127.0.230.4 alive", "127.0.230.5 alive"], "{o:?}");
    assert_eq!(o.status.code(), Some(0));
}

/// `-C N` prints each request's round trip as `fping -C N -q` does, checked against
/// fping itself on the same hosts: the same lines, `ADDR : RTT RTT RTT`, `-` for each
/// request a silenced host left unanswered, round trips with fping's digits; `--json`
/// gives them as `rtts_ms`. An interrupted sweep prints a host cut short with the round
/// trips it had, `-` for the request awaiting its reply.
#[test]
fn per_request_round_trips_read_as_fping_prints_them() {
    let _nft = NftTable::silencing("127.0.235.2");
    let hosts = ["127.0.235.1", "127.0.235.2"];
    let out = Command::new(env!("CARGO_BIN_EXE_netpoller"))
        .args(["--quiet", "sweep", "-C", "3", "-i", "20ms", "-t", "300ms"])
        .args(hosts)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "a host did not answer");
    let ours = String::from_utf8(out.stdout).unwrap();
    let fping = Command::new("fping")
        .args(["-C", "3", "-q", "-p", "20", "-t", "300"])
        .args(hosts)
        .output()
        .expect("fping (scripts/services.sh installs it)");
    let theirs = String::from_utf8(fping.stderr).unwrap();
    // Each line's shape: its address, the colon, and per request `-` or the number of
    // decimals fping prints a round trip of its size with.
    let shape = |text: &str| -> Vec<Vec<String>> {
        let mut lines: Vec<Vec<String>> = text
            .lines()
            .map(|l| {
                l.split_whitespace()
                    .map(|w| match w.parse::<f64>() {
                        Ok(ms) => {
                            let want = match ms {
                                ms if ms < 1.0 => 3,
                                ms if ms < 10.0 => 2,
                                ms if ms < 100.0 => 1,
                                _ => 0,
                            };
                            let decimals = w.split_once('.').map_or(0, |(_, d)| d.len());
                            assert_eq!(decimals, want, "{w} in {text}");
                            "RTT".to_string()
                        }
                        Err(_) => w.to_string(),
                    })
                    .collect()
            })
            .collect();
        lines.sort();
        lines
    };
    let want = [
        vec!["127.0.235.1", ":", "RTT", "RTT", "RTT"],
        vec!["127.0.235.2", ":", "-", "-", "-"],
    ];
    assert_eq!(shape(&ours), want, "{ours}");
    assert_eq!(shape(&theirs), want, "fping: {theirs}");

    let out = Command::new(env!("CARGO_BIN_EXE_netpoller"))
        .args([
            "--quiet", "sweep", "--json", "-C", "2", "-i", "20ms", "-t", "300ms",
        ])
        .args(hosts)
        .output()
        .unwrap();
    let mut by_addr: HashMap<String, serde_json::Value> = HashMap::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        by_addr.insert(v["addr"].as_str().unwrap().into(), v);
    }
    let rtts = &by_addr["127.0.235.1"]["rtts_ms"];
    assert!(
        rtts.as_array()
            .unwrap()
            .iter()
            .all(|r| r.as_f64().is_some_and(|ms| ms > 0.0)),
        "{rtts}"
    );
    assert_eq!(
        by_addr["127.0.235.2"]["rtts_ms"],
        serde_json::json!([null, null])
    );

    // Cut short between the first request's reply and the second request (3 s later).
    let child = spawn_piped(&["sweep", "-C", "2", "-i", "3s", "-t", "300ms", "127.0.235.1"]);
    std::thread::sleep(Duration::from_secs(1));
    let (out, err) = interrupt(child);
    let words: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(words.len(), 4, "{out}\n{err}");
    assert_eq!(
        (words[0], words[1], words[3]),
        ("127.0.235.1", ":", "-"),
        "{out}"
    );
    assert!(words[2].parse::<f64>().is_ok(), "{out}");
}

/// `-x N` (fping's --reachable): exit 0 when at least N hosts answered, 1 when fewer
/// did, whatever the others did, and a line on stderr says which; without it, a host
/// that did not answer makes it 1.
#[test]
fn reachable_n_exits_by_how_many_hosts_answered() {
    let _nft = NftTable::silencing("127.0.237.3");
    let sweep = |extra: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_netpoller"))
            .args(["--quiet", "sweep", "-c", "1", "-t", "300ms"])
            .args(extra)
            .args(["127.0.237.1", "127.0.237.2", "127.0.237.3"])
            .output()
            .unwrap();
        (o.status.code(), String::from_utf8(o.stderr).unwrap())
    };
    assert_eq!(sweep(&[]), (Some(1), String::new()));
    assert_eq!(
        sweep(&["-x", "2"]),
        (Some(0), "enough hosts alive (required 2, alive 2)\n".into())
    );
    assert_eq!(
        sweep(&["--reachable", "3"]),
        (
            Some(1),
            "not enough hosts alive (required 3, alive 2)\n".into()
        )
    );
}

/// `--loop` sends a request to every host every --interval until SIGINT and prints each
/// reply or timeout as it comes, as `fping -l` prints them (checked against fping -l
/// itself on the same hosts, `-D`'s time first); then each host's totals on stderr and
/// the exit status of a sweep (1: a host never answered), not a signal's.
#[test]
fn a_loop_prints_every_reply_as_fping_l_does() {
    let _nft = NftTable::silencing("127.0.238.2");
    let hosts = ["127.0.238.1", "127.0.238.2"];
    let loop_args = ["-i", "200ms", "-t", "100ms", "-D"];
    let mut child = spawn_piped(&[&["sweep", "-l"], &loop_args[..], &hosts[..]].concat());
    // Each line as it comes, through a pipe too (a loop is watched, or filtered).
    let stdout = child.stdout.take().unwrap();
    let (first, came) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        use std::io::{BufRead, Read};
        let mut r = std::io::BufReader::new(stdout);
        let mut all = String::new();
        r.read_line(&mut all).unwrap();
        first.send(()).unwrap();
        r.read_to_string(&mut all).unwrap();
        all
    });
    came.recv_timeout(Duration::from_secs(5))
        .expect("no line while the loop runs");
    std::thread::sleep(Duration::from_millis(1100));
    let (_, err) = interrupt_exiting(child, 1);
    let ours = reader.join().unwrap();
    let fping = Command::new("timeout")
        .args([
            "-s", "INT", "1.1", "fping", "-l", "-D", "-p", "200", "-t", "100",
        ])
        .args(hosts)
        .output()
        .expect("fping (scripts/services.sh installs it)");
    let theirs = String::from_utf8(fping.stdout).unwrap();
    // Each line's shape: the time, the round and the round trips as words.
    let shapes = |text: &str| -> std::collections::BTreeSet<String> {
        text.lines()
            .map(|l| {
                let (time, rest) = l.split_once("] ").unwrap_or_else(|| panic!("{l}"));
                assert!(time[1..].parse::<f64>().is_ok(), "{l}");
                let rest = rest.replace(", 64 bytes, ", " REPLY ");
                rest.split(' ')
                    .map(|w| match w {
                        w if w.starts_with('[') => "[N],",
                        w if w
                            .trim_start_matches('(')
                            .parse::<f64>()
                            .is_ok_and(f64::is_finite) =>
                        {
                            "T"
                        }
                        w => w,
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect()
    };
    let want = [
        "127.0.238.1 : [N], REPLY T ms T avg, 0% loss)",
        "127.0.238.2 : [N], timed out (NaN avg, 100% loss)",
    ];
    assert_eq!(
        shapes(&ours).into_iter().collect::<Vec<_>>(),
        want,
        "{ours}"
    );
    assert_eq!(
        shapes(&theirs).into_iter().collect::<Vec<_>>(),
        want,
        "fping: {theirs}"
    );
    // Rounds 0, 1, ... of the host that answers, one line each.
    let rounds: Vec<&str> = ours
        .lines()
        .filter(|l| l.contains("127.0.238.1 "))
        .map(|l| l.split('[').nth(2).unwrap().split(']').next().unwrap())
        .collect();
    assert!(rounds.len() >= 3, "{ours}");
    for (k, r) in rounds.iter().enumerate() {
        assert_eq!(r.parse::<usize>().unwrap(), k, "{ours}");
    }
    let n = rounds.len();
    assert!(
        err.contains(&format!("127.0.238.1 alive {n}/{n} 0% ")),
        "{err}"
    );
    assert!(err.contains("127.0.238.2 unreachable "), "{err}");
    assert!(err.contains("2 hosts, 1 alive, 1 unreachable in "), "{err}");

    // --json: an object per reply or timeout.
    let child = spawn_piped(
        &[
            &["sweep", "-l", "--json"],
            &loop_args[..2],
            &["-t", "100ms"],
            &hosts[..],
        ]
        .concat(),
    );
    std::thread::sleep(Duration::from_millis(700));
    let (out, _) = interrupt_exiting(child, 1);
    let rounds: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(rounds.len() >= 4, "{out}");
    for r in &rounds {
        assert!(r["time"].as_f64().is_some_and(|t| t > 1.7e9), "{r}");
        match r["addr"].as_str() {
            Some("127.0.238.1") => {
                assert!(r["rtt_ms"].as_f64().is_some_and(|ms| ms > 0.0), "{r}");
                assert_eq!(r["loss_pct"], 0.0, "{r}");
            }
            Some("127.0.238.2") => {
                assert!(r["rtt_ms"].is_null() && r["avg_ms"].is_null(), "{r}");
                assert_eq!(r["loss_pct"], 100.0, "{r}");
            }
            _ => panic!("{r}"),
        }
    }
}
