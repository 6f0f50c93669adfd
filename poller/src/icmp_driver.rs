//! ICMP socket driver: runs [`icmp::Sweep`] iterations over one long-lived socket pair.
//!
//! ```no_run
//! # async fn demo() -> Result<(), poller::icmp_driver::IcmpOpenError> {
//! use poller::icmp_driver::{IcmpDriver, IcmpOptions, PingJob};
//! use std::time::Duration;
//! let mut driver = IcmpDriver::open(IcmpOptions::default())?; // once per process
//! let jobs = vec![PingJob {
//!     addr: "127.0.0.1".parse().unwrap(),
//!     packets: 3,
//!     interval: Duration::from_millis(20),
//!     size: 56,
//!     timeout: Duration::from_secs(1),
//!     retry: None,
//! }];
//! let report = driver.sweep(&jobs, |i, stats| println!("{i}: {}", stats.is_alive())).await;
//! println!("{} alive in {:?}", report.alive, report.wall);
//! # Ok(()) }
//! ```
//!
//! Invariants and limits:
//! * One `SOCK_RAW` socket per address family (needs `CAP_NET_RAW`), else the
//!   unprivileged `SOCK_DGRAM` ping socket when `net.ipv4.ping_group_range` admits our
//!   group (this sysctl governs ICMPv6 ping sockets too). [`IcmpDriver::open`] fails with
//!   [`IcmpOpenError::NoPermission`] naming both remedies when neither opens. IPv6 is
//!   best effort: when its socket cannot be opened, IPv6 jobs are rejected (see
//!   [`SweepReport::rejected`]) and IPv4 works as usual.
//! * Raw sockets get a kernel `ICMP_FILTER`/`ICMP6_FILTER` passing echo replies only, so
//!   the flood of our own requests on loopback and unrelated ICMP never reach user space.
//! * ICMP errors that come back for probes (a router's "host unreachable", a
//!   firewall's reject) go to each socket's error queue (`IP_RECVERR`), not through the
//!   filter above. The kernel also reports each as the socket's pending error, which the
//!   next receive returns: then the queue is read into the sweep
//!   ([`Sweep::handle_error`], kept with the host), so errors never crowd out replies in
//!   the receive buffer they share; and which a ping socket's next send returns for
//!   whatever probe it sends: that send is tried again (`SendAttempts`), so one host's
//!   error never fails another's probe.
//! * RTTs use kernel receive timestamps (`SO_TIMESTAMPNS`) when available, so a busy
//!   loop does not inflate them or turn timely replies into late ones.
//! * Receive buffers are enlarged to [`IcmpOptions::rcvbuf`] (with `SO_RCVBUFFORCE` when
//!   privileged, else capped by `net.core.rmem_max`).
//! * One iteration = [`IcmpDriver::sweep`]: every probe is sent at its due time, paced by
//!   the driver's [`SharedPacer`] (its own, or one several drivers share; slots are taken
//!   before a probe is handed out, so its send instant stays exact); replies are
//!   collected until the single deadline = latest send + that probe's timeout (≤ last
//!   send + max timeout). Nothing waits per host. The loop drains the receive queue (in
//!   `recvmmsg` batches) before every send burst (in `sendmmsg` batches) and bounds both
//!   turns, so sending can never starve receiving. A sweep wakes at most once per
//!   [`WAKE_TICK`] (1 ms) for sends and the deadline, and for replies and per-probe
//!   expiries at most once per receive tick (≤ [`RX_TICK_MAX`], short enough that a
//!   tick's replies at the send rate fit in half the receive buffer): replies are read
//!   with their kernel timestamps and judged by their own RTT, so reading them later
//!   changes no result, and each wake-up serves many.
//! * Each sweep uses a new iteration number and identifier (raw) and a random sequence
//!   start; late replies of earlier sweeps are recognised by the payload tag and counted
//!   as stale, never matched.
//! * A driver keeps what a sweep allocated (its tables, [`icmp::SweepSpace`], and the
//!   driver's receive and send buffers) for the next one: sweeps every few seconds do not
//!   fault their pages in afresh. It holds what the largest sweep since needed.
//! * `sweep` must run within a tokio runtime with I/O and time enabled; the sockets are
//!   registered with it only while a sweep waits for them (never between sweeps), so
//!   any runtime will do.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::mem::{size_of, MaybeUninit};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use icmp::wire::{Family, Framing};
use icmp::{Event, Sweep, SweepConfig, SweepCounters, SweepError, SweepSpace, TagKey};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use tokio::io::unix::AsyncFd;

pub use icmp::{PingStats, RttMode, SharedPacer, Slots, SocketKind};

use crate::sockets::{
    read_error_queue, set_recv_buffer, set_recverr, setsockopt, sockaddr_to_std, SendAttempts,
};
use crate::source::SourceAddrs;

/// Linux `ICMP_FILTER` at level `SOL_RAW`: bit `t` set = drop ICMP type `t`.
const ICMP_FILTER: libc::c_int = 1;
/// Linux `ICMP6_FILTER` at level `IPPROTO_ICMPV6`: bit `t` set = drop ICMPv6 type `t`.
const ICMP6_FILTER: libc::c_int = 1;
/// Replies read per `recvmmsg` call.
const RECV_BATCH: usize = 64;
/// Most datagrams read before the loop handles expiries and sends again. Replies are
/// judged by their kernel timestamps, but only if they are read before the expiries are
/// handled: after a stall (a starved VM, a busy thread) every reply queued meanwhile
/// must be read first, or those past the first turn's worth count as lost (4,096 did).
/// So a turn reads the whole queue (a 16 MiB receive buffer holds some 20,000 replies);
/// the bound only keeps a flood from holding the loop.
const RECV_TURN: usize = 65_536;

/// Probes per `sendmmsg` call.
const SEND_BATCH: usize = 64;
/// Most probes sent before the loop drains the receive queue again.
const SEND_TURN: usize = 512;

/// Shortest time between two wake-ups of a sweep (see step 3 of the sweep loop).
pub const WAKE_TICK: Duration = Duration::from_millis(1);

/// Longest a reply waits in the receive queue, or an expired probe for its expiry to be
/// handled, before the sweep wakes for them (see [`IcmpDriver::sweep`], step 3):
/// bounds how late a host's values go out, never what they are.
pub const RX_TICK_MAX: Duration = Duration::from_millis(20);

/// Receive-buffer bytes a queued reply takes besides its payload (socket buffer
/// bookkeeping, headers): ~830 for a 68-byte echo reply measured on loopback, rounded up.
const REPLY_OVERHEAD: usize = 1024;

/// Most sending caught up at once after a late wake-up (timer granularity is 1 ms; a
/// loaded machine deschedules us for longer): ≤ 500 probes at 100k pps.
pub const SEND_BURST: Duration = Duration::from_millis(5);

/// Options of [`IcmpDriver::open`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcmpOptions {
    /// Global send rate in probes per second over all hosts; 0 = unpaced. Default 100,000.
    pub max_pps: u32,
    /// Receive buffer to request per socket, bytes. Default 16 MiB.
    pub rcvbuf: usize,
    /// Attach a kernel (classic BPF) filter to the raw sockets that passes only echo
    /// replies carrying the running sweep's identifier. Every raw ICMP socket receives
    /// every echo reply on the machine, so with several drivers in one process (the
    /// daemon's `icmp_concurrent_sweeps` > 1) each would read and discard the others'
    /// replies. The price: replies to earlier sweeps and to other programs' pings are
    /// dropped by the kernel instead of being counted as stale / foreign. Datagram
    /// sockets need no filter (the kernel demultiplexes them). Default false.
    pub ident_filter: bool,
    /// The address probes leave from, per family (`daemon.source_ip`); none: the
    /// kernel's choice. Default none.
    pub source: SourceAddrs,
}

impl Default for IcmpOptions {
    fn default() -> Self {
        IcmpOptions {
            max_pps: 100_000,
            rcvbuf: 16 << 20,
            ident_filter: false,
            source: SourceAddrs::default(),
        }
    }
}

/// `SO_ATTACH_FILTER` program passing only echo replies with identifier `ident`.
/// Raw IPv4 sockets see the IP header first (its length is loaded with `BPF_MSH`, as
/// iputils' ping does); raw ICMPv6 sockets start at the ICMPv6 header.
fn attach_ident_filter(fd: RawFd, v6: bool, ident: u16) -> io::Result<()> {
    const LDX_B_MSH: u16 = 0xb1; // X = 4 * (pkt[k] & 0xf)
    const LD_H_IND: u16 = 0x48; // A = pkt[X + k] (16 bits)
    const LD_H_ABS: u16 = 0x28; // A = pkt[k] (16 bits)
    const JEQ_K: u16 = 0x15;
    const RET_K: u16 = 0x06;
    let ins = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    let mut prog = Vec::with_capacity(5);
    if v6 {
        prog.push(ins(LD_H_ABS, 0, 0, 4));
    } else {
        prog.push(ins(LDX_B_MSH, 0, 0, 0));
        prog.push(ins(LD_H_IND, 0, 0, 4));
    }
    prog.push(ins(JEQ_K, 0, 1, u32::from(ident)));
    prog.push(ins(RET_K, 0, 0, u32::MAX));
    prog.push(ins(RET_K, 0, 0, 0));
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_mut_ptr(),
    };
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &fprog)
}

/// Why the driver could not open its socket.
#[derive(Debug, thiserror::Error)]
pub enum IcmpOpenError {
    /// Neither a raw nor a datagram ICMP socket may be opened by this process.
    #[error(
        "cannot open an ICMP socket: raw socket: {raw}; datagram ping socket: {dgram}. \
         Either grant CAP_NET_RAW (e.g. `setcap cap_net_raw+ep /path/to/netpoller`, or \
         AmbientCapabilities=CAP_NET_RAW in the systemd unit), or allow unprivileged ping \
         sockets for this process's group with `sysctl -w net.ipv4.ping_group_range=\"0 \
         2147483647\"`"
    )]
    NoPermission {
        /// Error of `socket(AF_INET, SOCK_RAW, IPPROTO_ICMP)`.
        raw: io::Error,
        /// Error of `socket(AF_INET, SOCK_DGRAM, IPPROTO_ICMP)`.
        dgram: io::Error,
    },
    /// The source address (`daemon.source_ip`, `--source`) cannot be bound; the error
    /// names the address ([`crate::source::SourceAddrs::bind`]).
    #[error(transparent)]
    Source(io::Error),
    /// The socket opened but could not be configured. (The OS error is in the
    /// message, not a `source()`: printed with its chain it would appear twice.)
    #[error("configuring the ICMP socket ({what}): {cause}")]
    Setup {
        /// Which option failed.
        what: &'static str,
        /// The OS error.
        cause: io::Error,
    },
}

/// One host's probes, in Zabbix terms `icmpping[<addr>,<packets>,<interval>,<size>,<timeout>]`:
/// the sweep's own job, handed to it as it is.
pub use icmp::Job as PingJob;

/// Outcome of one [`IcmpDriver::sweep`].
#[derive(Debug, Clone, Default)]
pub struct SweepReport {
    /// Wall time of the whole iteration.
    pub wall: Duration,
    /// From the start of the iteration until the last probe was handed to the kernel;
    /// `wall` never exceeds this plus the largest timeout (plus timer slack).
    pub send_time: Duration,
    /// Jobs given.
    pub hosts: usize,
    /// Jobs with at least one reply.
    pub alive: usize,
    /// Probe and reply totals, and every ignored datagram counted by reason
    /// (`stale`, `foreign`, `spoofed`, `redirected`, `malformed`, `duplicate`, `late`,
    /// `not_echo_reply`)
    /// and `send_errors`.
    pub counters: SweepCounters,
    /// `recvmmsg` failures other than "would block".
    pub recv_errors: u64,
    /// Times the sweep went to sleep (until its next tick, a timer, a reply or room in a
    /// full send buffer): the most its thread blocks for it.
    pub wakeups: u64,
    /// Jobs that were not probed, with the reason (invalid parameters, no IPv6 socket);
    /// `on_host_done` still got them, with all-zero stats.
    pub rejected: Vec<(usize, String)>,
    /// The first probe the kernel refused to send (`counters.send_errors` counts them
    /// all): target and error. Such probes count as sent and lost, as fping counts them.
    pub first_send_error: Option<(IpAddr, String)>,
    /// Datagrams the kernel dropped during the sweep because a socket's receive buffer
    /// was full (the sockets' drop counts, `SO_MEMINFO`, at its start and end): replies
    /// that read as lost though they came, and other ICMP that reached a full socket
    /// (Linux 6.x counts even what the socket's filters would have dropped).
    pub receive_drops: u64,
}

/// A [`IcmpDriver::sweep_until`] its stop cut short.
#[derive(Debug)]
pub struct Stopped<T> {
    /// What the stop completed with.
    pub by: T,
    /// The jobs not complete (never given to `on_host_done`), by their index, in order,
    /// with their statistics so far: a probe still awaiting its reply counts as sent and
    /// not received, as fping counts it when interrupted.
    pub unfinished: Vec<(usize, PingStats)>,
    /// Of a sweep that kept round trips ([`IcmpDriver::sweep_with_rtts`]), each
    /// unfinished job's so far, in the order of `unfinished`; else empty.
    pub rtts: Vec<Vec<Option<Duration>>>,
}

/// What a sweep hands each complete host to ([`IcmpDriver::sweep_until`]'s and
/// [`IcmpDriver::sweep_with_rtts`]' callbacks), and whether it keeps round trips.
trait HostResults {
    /// Job `index` is complete: its statistics, and its round trips when kept.
    fn host_done(&mut self, index: usize, stats: &PingStats, rtts: icmp::Rtts<'_>);
    /// Whether the sweep keeps each request's round trip (4 bytes a probe).
    fn keeps_rtts(&self) -> bool;
}

/// A callback of statistics alone (the daemon's items need no more).
struct Stats<F>(F);

impl<F: FnMut(usize, &PingStats)> HostResults for Stats<F> {
    fn host_done(&mut self, index: usize, stats: &PingStats, _: icmp::Rtts<'_>) {
        (self.0)(index, stats)
    }

    fn keeps_rtts(&self) -> bool {
        false
    }
}

/// A callback of statistics and round trips, kept when `keep`.
struct WithRtts<F> {
    f: F,
    keep: bool,
}

impl<F: FnMut(usize, &PingStats, icmp::Rtts<'_>)> HostResults for WithRtts<F> {
    fn host_done(&mut self, index: usize, stats: &PingStats, rtts: icmp::Rtts<'_>) {
        (self.f)(index, stats, rtts)
    }

    fn keeps_rtts(&self) -> bool {
        self.keep
    }
}

/// Long-lived ICMP driver; reuse it across iterations (one per process is enough).
#[derive(Debug)]
pub struct IcmpDriver {
    kind: SocketKind,
    opts: IcmpOptions,
    v4: Slot,
    v6: Slot,
    key: TagKey,
    iteration: u32,
    ident_base: u16,
    /// Whether IPv4 probes currently go out with DF (see `set_dont_fragment`).
    df: Option<bool>,
    /// Identifier the sockets' filter passes (see `arm_ident_filter`).
    armed: Option<u16>,
    /// The send rate (`None` = unpaced): this driver's own, or one shared with other
    /// drivers (see [`Self::share_pacer`]). Sweeps themselves run unpaced.
    pacer: Option<std::sync::Arc<SharedPacer>>,
    /// What the last sweep left, for the next (see [`SweepSpace`]); boxed, as the
    /// daemon keeps drivers of both engines in one enum.
    spare: Box<Spare>,
}

/// A sweep's tables and the driver's own per-sweep buffers, kept between sweeps.
#[derive(Debug, Default)]
struct Spare {
    space: SweepSpace,
    /// Each valid job's index in the caller's jobs.
    index: Vec<usize>,
    valid: Vec<PingJob>,
    rx: RecvBuf,
    batch: SendBatch,
}

#[derive(Debug)]
enum Slot {
    Closed(String),
    Open(Socket),
}

impl Slot {
    fn fd(&self) -> Option<RawFd> {
        match self {
            Slot::Closed(_) => None,
            Slot::Open(s) => Some(s.as_raw_fd()),
        }
    }
}

/// Registers socket `fd` (one the driver owns) with the current runtime for one long
/// wait of a sweep (see step 3 of [`IcmpDriver::sweep`]). Registering per wait keeps the
/// driver usable from any runtime, a cancelled sweep only deregisters (the socket stays
/// owned by the driver), and while a sweep is not waiting for replies their arrival does
/// not wake its thread.
fn register(fd: Option<RawFd>) -> Option<AsyncFd<FdRef>> {
    let fd = fd?;
    // SAFETY: the fd belongs to a Socket owned by the driver, which the sweep future
    // borrows for longer than this AsyncFd lives; it is neither closed nor replaced
    // meanwhile.
    // Readable only: with write interest too, every sent probe's skb release
    // (sock_wfree → write space) ran the epoll callback (~3% of a sweep's CPU).
    // A full send buffer is rare and is retried on a 1 ms timer instead.
    match unsafe { AsyncFd::register_with_interest(FdRef(fd), tokio::io::Interest::READABLE) } {
        Ok(a) => Some(a),
        Err(e) => {
            let e: io::Error = e.into();
            tracing::warn!(error = %e, "ICMP socket could not be registered with tokio");
            None
        }
    }
}

/// A non-owning handle on a socket fd, for [`AsyncFd`] registration.
#[derive(Debug)]
struct FdRef(RawFd);

impl AsRawFd for FdRef {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

fn random_u64() -> u64 {
    // RandomState is seeded from the OS once per process and then per instance.
    let mut h = RandomState::new().build_hasher();
    h.write_u64(0x6e70_6c72);
    h.finish()
}

fn configure(
    sock: &Socket,
    kind: SocketKind,
    v6: bool,
    rcvbuf: usize,
) -> Result<(), IcmpOpenError> {
    let setup = |what| move |cause| IcmpOpenError::Setup { what, cause };
    sock.set_nonblocking(true).map_err(setup("O_NONBLOCK"))?;
    let fd = sock.as_raw_fd();
    set_recv_buffer(sock, rcvbuf).map_err(setup("SO_RCVBUF"))?;
    // Kernel receive timestamps make RTTs independent of how busy the loop is.
    if let Err(e) = setsockopt(
        fd,
        libc::SOL_SOCKET,
        libc::SO_TIMESTAMPNS,
        &1 as &libc::c_int,
    ) {
        tracing::debug!(error = %e, "SO_TIMESTAMPNS unavailable; RTTs use read time");
    }
    // ICMP errors for probes (a router's "host unreachable") to the error queue, where
    // `drain` reads them: they say why a host is silent.
    if let Err(e) = set_recverr(fd, v6) {
        tracing::debug!(error = %e, "IP_RECVERR unavailable; ICMP errors are not told");
    }
    if kind == SocketKind::Raw {
        if v6 {
            let mut filter = [u32::MAX; 8];
            filter[129 >> 5] &= !(1u32 << (129 & 31));
            setsockopt(fd, libc::IPPROTO_ICMPV6, ICMP6_FILTER, &filter)
                .map_err(setup("ICMP6_FILTER"))?;
        } else {
            let filter: u32 = !1u32; // pass type 0 (echo reply) only
            setsockopt(fd, libc::SOL_RAW, ICMP_FILTER, &filter).map_err(setup("ICMP_FILTER"))?;
        }
    }
    Ok(())
}

fn open_socket(kind: SocketKind, v6: bool) -> io::Result<Socket> {
    let (domain, proto) = if v6 {
        (Domain::IPV6, Protocol::ICMPV6)
    } else {
        (Domain::IPV4, Protocol::ICMPV4)
    };
    let ty = match kind {
        SocketKind::Raw => Type::RAW,
        SocketKind::Datagram => Type::DGRAM,
    };
    Socket::new(domain, ty, Some(proto))
}

impl IcmpDriver {
    /// Opens a raw ICMP socket, or the datagram ping socket when raw is not permitted.
    pub fn open(opts: IcmpOptions) -> Result<Self, IcmpOpenError> {
        match open_socket(SocketKind::Raw, false) {
            Ok(s) => Self::with_v4(opts, SocketKind::Raw, s),
            Err(raw) => match open_socket(SocketKind::Datagram, false) {
                Ok(s) => Self::with_v4(opts, SocketKind::Datagram, s),
                Err(dgram) => Err(IcmpOpenError::NoPermission { raw, dgram }),
            },
        }
    }

    /// Opens one specific socket kind (tests, or operators who want to pin it).
    pub fn open_kind(opts: IcmpOptions, kind: SocketKind) -> Result<Self, IcmpOpenError> {
        match open_socket(kind, false) {
            Ok(s) => Self::with_v4(opts, kind, s),
            Err(e) => {
                let other = io::Error::other(format!("not tried: {kind:?} socket requested"));
                Err(match kind {
                    SocketKind::Raw => IcmpOpenError::NoPermission {
                        raw: e,
                        dgram: other,
                    },
                    SocketKind::Datagram => IcmpOpenError::NoPermission {
                        raw: other,
                        dgram: e,
                    },
                })
            }
        }
    }

    fn with_v4(opts: IcmpOptions, kind: SocketKind, v4: Socket) -> Result<Self, IcmpOpenError> {
        configure(&v4, kind, false, opts.rcvbuf)?;
        // Once per process: they stay on while a socket of ours asks for them.
        static RX_TIMESTAMPS: std::sync::Once = std::sync::Once::new();
        RX_TIMESTAMPS.call_once(wait_for_rx_timestamps);
        let bound = IcmpOpenError::Source;
        opts.source.bind(&v4, false).map_err(bound)?;
        let v6 = match open_socket(kind, true) {
            Ok(s) => match configure(&s, kind, true, opts.rcvbuf) {
                Ok(()) => {
                    opts.source.bind(&s, true).map_err(bound)?;
                    Slot::Open(s)
                }
                Err(e) => Slot::Closed(e.to_string()),
            },
            Err(e) => Slot::Closed(format!("cannot open an ICMPv6 {kind:?} socket: {e}")),
        };
        // A source asked for a family that cannot send is a setup error, not a closed
        // slot found at the first probe.
        if let (Slot::Closed(why), Some(ip)) = (&v6, opts.source.v6) {
            return Err(bound(io::Error::other(format!(
                "source address {ip}: no ICMPv6 socket ({why})"
            ))));
        }
        let r = random_u64();
        let mut driver = IcmpDriver {
            kind,
            opts,
            v4: Slot::Open(v4),
            v6,
            key: TagKey([random_u64(), random_u64()]),
            iteration: r as u32,
            ident_base: (r >> 32) as u16,
            df: None,
            armed: None,
            pacer: SharedPacer::shared(opts.max_pps, SEND_BURST),
            spare: Box::default(),
        };
        // Armed from the start: replies to other drivers must not queue up on this
        // socket before its first sweep.
        driver.arm_ident_filter(driver.next_ident());
        // Linux reports twice what it grants (bookkeeping): compare halves.
        if let Some(got) = driver
            .rcvbuf()
            .map(|b| b / 2)
            .filter(|&b| b < opts.rcvbuf / 2)
        {
            tracing::warn!(
                asked_kib = opts.rcvbuf >> 10,
                got_kib = got >> 10,
                "ICMP receive buffer smaller than asked (without CAP_NET_ADMIN the kernel caps \
                 it at net.core.rmem_max): sweeps send fewer probes between reads, and a stall \
                 can still lose replies; raise net.core.rmem_max (docs/production.md)"
            );
        }
        Ok(driver)
    }

    /// Identifier of the next sweep.
    fn next_ident(&self) -> u16 {
        self.ident_base
            .wrapping_add(self.iteration.wrapping_add(1) as u16)
    }

    /// Small IPv4 probes go out with DF set and the kernel's own DF handling
    /// (`IP_PMTUDISC_PROBE`): the IP ID of a DF packet is 0, which spares the kernel's
    /// keyed ID generator on every probe (~4% of a sweep's CPU). Only when every probe of
    /// the sweep fits the 576-byte datagram every IPv4 path carries unfragmented (payload
    /// ≤ 548): larger probes keep the default, which lets the kernel fragment them.
    fn set_dont_fragment(&mut self, max_payload: usize) {
        let df = max_payload <= 576 - 28;
        if self.df == Some(df) {
            return;
        }
        let Some(fd) = self.v4.fd() else { return };
        let mode = if df {
            libc::IP_PMTUDISC_PROBE
        } else {
            libc::IP_PMTUDISC_WANT
        };
        match setsockopt(fd, libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, &mode) {
            Ok(()) => self.df = Some(df),
            Err(e) => tracing::debug!(error = %e, "IP_MTU_DISCOVER not set"),
        }
    }

    /// With [`IcmpOptions::ident_filter`] on raw sockets: let only replies carrying
    /// `ident` through.
    /// A sweep arms the next sweep's identifier as it ends, so the next one usually finds
    /// its filter in place: attaching compiles a BPF program (a vmalloc and a JIT run,
    /// ~2% of the engine's CPU at one small sweep a second when done twice per sweep).
    fn arm_ident_filter(&mut self, ident: u16) {
        if !(self.opts.ident_filter && self.kind == SocketKind::Raw) || self.armed == Some(ident) {
            return;
        }
        self.armed = Some(ident);
        for (slot, v6) in [(&self.v4, false), (&self.v6, true)] {
            if let Some(fd) = slot.fd() {
                if let Err(e) = attach_ident_filter(fd, v6, ident) {
                    tracing::warn!(error = %e, "cannot attach the ICMP identifier filter");
                    self.armed = None;
                }
            }
        }
    }

    /// Share `max_pps` with other drivers: sweeps of this driver then send only on
    /// slots taken from `pacer` (and [`IcmpOptions::max_pps`] no longer applies).
    pub fn share_pacer(&mut self, pacer: std::sync::Arc<SharedPacer>) {
        self.pacer = Some(pacer);
    }

    /// Kind of socket in use.
    pub fn kind(&self) -> SocketKind {
        self.kind
    }

    /// Options in use.
    pub fn options(&self) -> IcmpOptions {
        self.opts
    }

    /// Whether IPv6 targets can be probed (`Err` gives the reason when not).
    pub fn ipv6(&self) -> Result<(), String> {
        match &self.v6 {
            Slot::Closed(why) => Err(why.clone()),
            _ => Ok(()),
        }
    }

    /// Receive buffer the kernel granted to the IPv4 socket, bytes (doubled by Linux
    /// for bookkeeping, as `getsockopt` reports it).
    pub fn rcvbuf(&self) -> Option<usize> {
        let fd = self.v4.fd()?;
        let mut v: libc::c_int = 0;
        let mut len = size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: v and len are valid for writes of their sizes.
        let r = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&mut v as *mut i32).cast(),
                &mut len,
            )
        };
        (r == 0).then_some(v as usize)
    }

    /// Runs one iteration over `jobs` and returns when every job is complete.
    ///
    /// `on_host_done(job_index, stats)` is called exactly once per job, as soon as that
    /// job has all its replies or its last unanswered probe timed out (send + timeout),
    /// and at the latest at the iteration deadline (latest send + timeout).
    /// Rejected jobs (see [`SweepReport::rejected`]) are reported first, with zero stats.
    pub async fn sweep<F: FnMut(usize, &PingStats)>(
        &mut self,
        jobs: &[PingJob],
        on_host_done: F,
    ) -> SweepReport {
        let never = std::future::pending::<std::convert::Infallible>();
        match self.sweep_until(jobs, on_host_done, never).await {
            Ok(report) => report,
            Err(stopped) => match stopped.by {},
        }
    }

    /// [`Self::sweep`], cut short when `stop` completes first: then the jobs not
    /// complete (whose `on_host_done` was not called, and will not be) come back in
    /// [`Stopped::unfinished`] with their statistics so far (`netpoller sweep`'s Ctrl-C
    /// prints them, as fping does). Dropping the future instead loses them with it.
    pub async fn sweep_until<F: FnMut(usize, &PingStats), S: std::future::Future>(
        &mut self,
        jobs: &[PingJob],
        on_host_done: F,
        stop: S,
    ) -> Result<SweepReport, Stopped<S::Output>> {
        self.run(jobs, Stats(on_host_done), stop).await
    }

    /// [`Self::sweep_until`], with each request's round trip, in the order of the
    /// job's requests, when `keep_rtts` (`netpoller sweep -C`, as `fping -C` prints
    /// them; empty otherwise, and for rejected jobs): `None` for a request not answered
    /// within its timeout.
    pub async fn sweep_with_rtts<F, S>(
        &mut self,
        jobs: &[PingJob],
        keep_rtts: bool,
        on_host_done: F,
        stop: S,
    ) -> Result<SweepReport, Stopped<S::Output>>
    where
        F: FnMut(usize, &PingStats, icmp::Rtts<'_>),
        S: std::future::Future,
    {
        let results = WithRtts {
            f: on_host_done,
            keep: keep_rtts,
        };
        self.run(jobs, results, stop).await
    }

    async fn run<H: HostResults, S: std::future::Future>(
        &mut self,
        jobs: &[PingJob],
        mut on_host_done: H,
        stop: S,
    ) -> Result<SweepReport, Stopped<S::Output>> {
        let mut stop = std::pin::pin!(stop);
        let mut stopped = None;
        // Waits for a future unless the stop completes first: then the sweep ends.
        macro_rules! wait_or_stop {
            ($wait:expr) => {
                if let Some(by) = unless($wait, stop.as_mut()).await {
                    stopped = Some(by);
                    break;
                }
            };
        }
        let start = Instant::now();
        let mut report = SweepReport {
            hosts: jobs.len(),
            ..SweepReport::default()
        };
        self.iteration = self.iteration.wrapping_add(1);
        let ident = self.ident_base.wrapping_add(self.iteration as u16);
        self.arm_ident_filter(ident);

        let Spare {
            space,
            mut index,
            mut valid,
            mut rx,
            mut batch,
        } = std::mem::take(&mut *self.spare);
        let mut space = Some(space);
        // Validate each job on its own so one bad job never sinks the iteration.
        index.clear();
        valid.clear();
        for (i, j) in jobs.iter().enumerate() {
            let job = *j;
            let slot = if j.addr.is_ipv6() { &self.v6 } else { &self.v4 };
            let why = match (job.validate(i), slot) {
                (Err(e), _) => Some(e.to_string()),
                (Ok(_), Slot::Closed(why)) => Some(format!("{}: {why}", j.addr)),
                (Ok(_), _) => None,
            };
            match why {
                Some(why) => {
                    on_host_done.host_done(i, &PingStats::default(), Default::default());
                    report.rejected.push((i, why));
                }
                None => {
                    index.push(i);
                    valid.push(job);
                }
            }
        }
        // Only a whole-sweep limit can still fail: more than 65,536 probes to one address
        // (its sequence numbers would repeat): that address's jobs are rejected and the
        // rest tried again; more than 2^32 probes in all: every job is rejected at once
        // (dropping one job at a time took hours for `sweep -c 10000` over a /13).
        let mut sweep = loop {
            let cfg = self.config(ident, on_host_done.keeps_rtts());
            let space = space.take().unwrap_or_default();
            match Sweep::new_in(&valid, cfg, Instant::now(), space) {
                Ok(s) => break s,
                Err(e) => {
                    let bad = match e {
                        SweepError::TooManyProbes { addr, .. } => Some(addr),
                        _ => None, // the whole sweep (or unreachable: validated above)
                    };
                    let mut k = 0;
                    while k < valid.len() {
                        if bad.is_none() || Some(valid[k].addr) == bad {
                            let none = Default::default();
                            on_host_done.host_done(index[k], &PingStats::default(), none);
                            report.rejected.push((index[k], e.to_string()));
                            valid.swap_remove(k);
                            index.swap_remove(k);
                        } else {
                            k += 1;
                        }
                    }
                }
            }
        };
        // Validated sizes only: a rejected job may ask for any size.
        let max_len = valid.iter().map(|j| j.size).max().unwrap_or(0);
        self.set_dont_fragment(max_len);
        rx.fit(max_len + icmp::wire::HEADER_LEN + 60);
        let mut last_send = start;
        let rx_tick = self.rx_tick(max_len);
        let send_turn = self.send_turn(max_len);
        // The sockets of the families this sweep probes: the only ones it reads and waits
        // on (an empty read is a syscall per wake-up for nothing).
        let has = |v6: bool| valid.iter().any(|j| j.addr.is_ipv6() == v6);
        let rx_fds = [
            self.v4.fd().filter(|_| has(false)),
            self.v6.fd().filter(|_| has(true)),
        ];

        // Per socket (v4, v6): when its queue was last found empty.
        let mut empty_since: [Option<Instant>; 2] = [None, None];
        // The kernel's counts of drops, read at the start and the end: drops before the
        // sweep (nobody reads the sockets between sweeps, and other pingers' replies
        // can fill them) are not the sweep's, and those after the last reply it read
        // are (a count each datagram carries, SO_RXQ_OVFL, missed them and counted
        // the former with the sweep's first reply).
        let drops_before = rx_fds.map(|fd| fd.and_then(socket_drops));
        let mut timeouts = crate::sockets::TimeoutGate::default();
        loop {
            let woke = Instant::now();
            // 1. Receive first: replies already queued must never wait for our sends.
            let errors = &mut report.recv_errors;
            let cut = drain_all(rx_fds, &mut empty_since, &mut rx, &mut sweep, errors);
            // As of the turn's start, once the sockets were read empty (see `sockets`).
            if timeouts.after_turn(cut) {
                sweep.handle_timeout(woke);
            }
            emit(&mut sweep, &index, &mut on_host_done, &mut report.alive);
            if sweep.is_finished() {
                break;
            }
            // 2. One bounded send burst, in sendmmsg batches; leftovers first.
            let (v4fd, v6fd) = (self.v4.fd(), self.v6.fd());
            let (mut sent, mut blocked) = batch.flush(v4fd, v6fd, &mut sweep);
            while !blocked && sent < send_turn {
                let now = Instant::now();
                // Slots first: a probe's send instant is taken when it is handed out.
                let due = sweep.next_send_time().is_some_and(|t| t <= now);
                let want = SEND_BATCH.min(send_turn - sent);
                let slots = match &self.pacer {
                    Some(p) if due => Some(p.take(now, want)),
                    _ => None,
                };
                let budget = match slots {
                    Some(sl) => sl.n,
                    None if due => want,
                    None => 0,
                };
                let mut filled = 0;
                while filled < budget {
                    let Some(tx) = sweep.poll_transmit(now) else {
                        break;
                    };
                    batch.push(&tx);
                    filled += 1;
                }
                if let (Some(p), Some(sl)) = (&self.pacer, slots) {
                    p.give_back(sl, filled);
                }
                if filled == 0 {
                    break;
                }
                let (n, b) = batch.flush(v4fd, v6fd, &mut sweep);
                if n > 0 {
                    last_send = Instant::now();
                }
                sent += n;
                blocked = b;
            }
            emit(&mut sweep, &index, &mut on_host_done, &mut report.alive);
            if sweep.is_finished() {
                break;
            }
            let busy = cut || sent >= send_turn;
            if busy && !blocked {
                // More work is due right now; let other tasks run, then go on.
                wait_or_stop!(tokio::task::yield_now());
                continue;
            }
            // 3. Wait. Sends (at their pacing slot) and the deadline keep their time, but
            // the sweep wakes at most once per WAKE_TICK. Replies and per-probe expiries
            // wait for the receive tick: replies carry kernel timestamps and a reply's fate
            // is judged by its own RTT, so reading them or expiring probes later changes
            // no result, only when a host's values go out. Waking for each arrival, each
            // free pacing slot or each probe's expiry made wake-ups a cost of every few
            // probes (a context switch is dear on a VM); like a NIC's interrupt
            // coalescing, one wake-up now serves a tick's worth of probes and replies.
            let now = Instant::now();
            let rx_at = woke + rx_tick;
            let exact = self.next_exact_event(&sweep, now);
            let tick = exact.map_or(rx_at, |t| t.min(rx_at)).max(woke + WAKE_TICK);
            if now < tick {
                report.wakeups += 1;
                wait_or_stop!(tokio::time::sleep_until(tokio::time::Instant::from_std(
                    tick
                )));
            }
            let now = Instant::now();
            let expiry = sweep.next_expiry().map(|t| t.max(rx_at));
            let mut wake = match (self.next_exact_event(&sweep, now), expiry) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => a.or(b).unwrap_or(now + WAKE_TICK),
            };
            if blocked {
                // Full socket buffer or device queue: try again shortly.
                wake = wake.min(now + WAKE_TICK);
            }
            if wake <= now {
                continue;
            }
            report.wakeups += 1;
            let sleep = tokio::time::sleep_until(tokio::time::Instant::from_std(wake));
            if wake <= now + WAKE_TICK {
                // A short wait: replies arriving meanwhile are read right after it.
                wait_or_stop!(sleep);
                continue;
            }
            // A long wait: a reply ends it. The sockets are registered for this wait only:
            // registered all along, every burst of replies arriving while the sweep sleeps
            // through a tick woke the thread for nothing (and ran the epoll callback).
            let (v4, v6) = (register(rx_fds[0]), register(rx_fds[1]));
            let wait = async {
                tokio::select! {
                    biased;
                    r = readable(v4.as_ref()) => r,
                    r = readable(v6.as_ref()) => r,
                    _ = sleep => {},
                }
            };
            wait_or_stop!(wait);
        }
        if stopped.is_some() {
            // Cut short: the replies already queued count (judged by their kernel
            // timestamps), and the hosts they complete are done, not unfinished.
            let errors = &mut report.recv_errors;
            drain_all(rx_fds, &mut empty_since, &mut rx, &mut sweep, errors);
            emit(&mut sweep, &index, &mut on_host_done, &mut report.alive);
        }
        report.counters = sweep.counters();
        report.first_send_error = batch.first_error.take();
        report.send_time = last_send - start;
        report.wall = start.elapsed();
        report.receive_drops = drops_before
            .iter()
            .zip(rx_fds)
            .filter_map(|(a, fd)| Some(socket_drops(fd?)?.wrapping_sub((*a)?)))
            .map(u64::from)
            .sum();
        // Between sweeps, let nothing but the next sweep's replies queue up.
        self.arm_ident_filter(self.next_ident());
        let result = match stopped {
            None => Ok(report),
            Some(by) => {
                let mut unfinished: Vec<(usize, PingStats, usize)> = sweep
                    .unfinished()
                    .map(|(j, st)| (index[j], *st, j))
                    .collect();
                unfinished.sort_unstable_by_key(|&(i, ..)| i);
                let rtts = match on_host_done.keeps_rtts() {
                    true => (unfinished.iter())
                        .map(|&(.., j)| sweep.rtts(j).iter().collect())
                        .collect(),
                    false => Vec::new(),
                };
                let unfinished = unfinished.into_iter().map(|(i, st, _)| (i, st)).collect();
                Err(Stopped {
                    by,
                    unfinished,
                    rtts,
                })
            }
        };
        batch.clear();
        *self.spare = Spare {
            space: sweep.recycle(),
            index,
            valid,
            rx,
            batch,
        };
        result
    }

    /// The next event of `sweep` that must be served on time: its next send (at the
    /// shared rate's next free slot when probes are due but the rate has none) or its
    /// deadline.
    fn next_exact_event(&self, sweep: &Sweep, now: Instant) -> Option<Instant> {
        let send = sweep.next_send_time().map(|t| match &self.pacer {
            Some(p) if t <= now => t.max(p.next_slot()),
            _ => t,
        });
        match (send, sweep.deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// How long replies may wait in the receive queue: at the send rate, a tick's
    /// replies must fit in half the receive buffer (a reply of `payload` bytes takes
    /// about `payload` + [`REPLY_OVERHEAD`] of it), and results should not wait longer
    /// than [`RX_TICK_MAX`]. Unpaced sweeps have no rate to go by: [`WAKE_TICK`].
    fn rx_tick(&self, payload: usize) -> Duration {
        let (Some(buf), Some(p)) = (self.rcvbuf(), &self.pacer) else {
            return WAKE_TICK;
        };
        let replies = buf / 2 / (payload + REPLY_OVERHEAD);
        Duration::from_secs_f64(replies as f64 / p.max_pps() as f64).clamp(WAKE_TICK, RX_TICK_MAX)
    }

    /// Most probes sent before the receive queue is read again: [`SEND_TURN`], or fewer
    /// when their replies (`payload` bytes each, plus [`REPLY_OVERHEAD`]) would take more
    /// than a quarter of the receive buffer (two turns' replies, one not read yet on a
    /// busy machine, then fit in half): with `net.core.rmem_max`'s 208 KiB (no
    /// `CAP_NET_ADMIN` for `SO_RCVBUFFORCE`), 512 replies of 300 bytes overflowed it and
    /// read as 6.6% loss, of 1,000 bytes as half. At least one probe a turn, however
    /// large: a floor of 8 overflowed that buffer with 64 KiB replies.
    fn send_turn(&self, payload: usize) -> usize {
        let fit = self
            .rcvbuf()
            .map_or(SEND_TURN, |buf| buf / 4 / (payload + REPLY_OVERHEAD));
        fit.clamp(1, SEND_TURN)
    }

    fn config(&self, ident: u16, keep_rtts: bool) -> SweepConfig {
        SweepConfig {
            socket: self.kind,
            // The driver's pacer does the pacing (see the send loop).
            max_pps: 0,
            burst: SEND_BURST,
            ident,
            seq_start: (self.iteration as u16).wrapping_mul(7919),
            iteration: self.iteration,
            key: self.key,
            keep_rtts,
        }
    }
}

async fn readable(fd: Option<&AsyncFd<FdRef>>) {
    match fd {
        Some(fd) => match fd.readable().await {
            // Readiness is cleared here and the queue drained right after, until EAGAIN:
            // a datagram arriving in between re-arms readiness, so no wake-up is lost.
            Ok(mut guard) => guard.clear_ready(),
            Err(_) => std::future::pending().await,
        },
        None => std::future::pending().await,
    }
}

/// Probes handed out by the sweep (already in flight there) and not yet accepted by the
/// kernel; sent with `sendmmsg`, one call per run of same-family probes.
#[derive(Debug, Default)]
struct SendBatch {
    data: Vec<u8>,
    items: Vec<(usize, usize, SockAddr, icmp::ProbeToken)>,
    head: usize,
    first_error: Option<(IpAddr, String)>,
}

impl SendBatch {
    /// Forgets what is queued (a sweep cut short leaves probes of its own).
    fn clear(&mut self) {
        self.items.clear();
        self.data.clear();
        self.head = 0;
        self.first_error = None;
    }

    fn push(&mut self, tx: &icmp::Transmit<'_>) {
        let off = self.data.len();
        self.data.extend_from_slice(tx.packet);
        let addr = SockAddr::from(SocketAddr::new(tx.addr, 0));
        self.items.push((off, tx.packet.len(), addr, tx.token));
    }

    /// Sends what is queued. Returns (probes accepted, blocked on a full socket buffer or
    /// a full device queue: the caller retries after a short pause).
    /// A probe the kernel refuses for any other reason is reported to the sweep as a
    /// send error (it counts as sent and lost).
    fn flush(&mut self, v4: Option<RawFd>, v6: Option<RawFd>, sweep: &mut Sweep) -> (usize, bool) {
        self.flush_with(v4, v6, sweep, sendmmsg)
    }

    /// [`Self::flush`], sending with `send` (`sendmmsg`; a test's stand-in).
    fn flush_with(
        &mut self,
        v4: Option<RawFd>,
        v6: Option<RawFd>,
        sweep: &mut Sweep,
        mut send: impl FnMut(RawFd, &mut [libc::mmsghdr]) -> io::Result<usize>,
    ) -> (usize, bool) {
        let mut sent = 0;
        let mut blocked = false;
        let mut attempts = SendAttempts::default();
        while self.head < self.items.len() {
            let is6 = self.items[self.head].2.is_ipv6();
            let Some(fd) = (if is6 { v6 } else { v4 }) else {
                sweep.on_send_error(self.items[self.head].3);
                self.head += 1;
                continue;
            };
            let run = self.items[self.head..]
                .iter()
                .take(SEND_BATCH)
                .take_while(|i| i.2.is_ipv6() == is6)
                .count();
            // SAFETY: iovec and mmsghdr are plain C structs; all-zero is a valid value.
            let mut iovs: [libc::iovec; SEND_BATCH] = unsafe { std::mem::zeroed() };
            let mut msgs: [libc::mmsghdr; SEND_BATCH] = unsafe { std::mem::zeroed() };
            for k in 0..run {
                let (off, len, addr, _) = &self.items[self.head + k];
                iovs[k].iov_base = self.data[*off..*off + *len].as_ptr() as *mut libc::c_void;
                iovs[k].iov_len = *len;
                msgs[k].msg_hdr.msg_name = addr.as_ptr() as *mut libc::c_void;
                msgs[k].msg_hdr.msg_namelen = addr.len();
                msgs[k].msg_hdr.msg_iov = &mut iovs[k];
                msgs[k].msg_hdr.msg_iovlen = 1;
            }
            let before = Instant::now();
            // msgs[..run] point into self.data and self.items, alive and unmoved for the
            // duration of the call; the kernel only reads them.
            let e = match send(fd, &mut msgs[..run]) {
                Ok(r) if r > 0 => {
                    // Each probe left during the call, in order: the k-th of r no sooner
                    // than k/r of the way through. Counting its RTT from when it was
                    // handed out added the building of the batch and the sending of the
                    // probes ahead of it (fping reads the clock before each sendto).
                    let (r, took) = (r.min(run), before.elapsed());
                    for (k, item) in (0u32..).zip(&self.items[self.head..self.head + r]) {
                        sweep.sent_at(item.3, before + took * k / r as u32);
                    }
                    self.head += r;
                    sent += r;
                    attempts = SendAttempts::default();
                    continue;
                }
                Ok(_) => io::Error::from(io::ErrorKind::WriteZero),
                Err(e) => e,
            };
            // A full device queue (ENOBUFS) or socket buffer, not a bad probe: retry
            // after a short pause, but only while the probe can still count. ENOBUFS
            // is also what a lasting drop returns (a `tc` egress filter's), and
            // retrying such a probe for ever held every probe behind it: the sweep
            // never ended. Once its timeout ran out it is a send error, and the rest go.
            let full =
                e.raw_os_error() == Some(libc::ENOBUFS) || e.kind() == io::ErrorKind::WouldBlock;
            if full && sweep.is_in_flight(self.items[self.head].3) {
                blocked = true;
                break;
            }
            match e.kind() {
                io::ErrorKind::Interrupted => {}
                _ if attempts.retry(read_errors(fd, sweep)) => {}
                _ => {
                    attempts = SendAttempts::default();
                    let (_, _, addr, token) = &self.items[self.head];
                    let target = addr.as_socket().map(|s| s.ip());
                    tracing::debug!(target = ?target, error = %e, "ICMP send failed");
                    if let (None, Some(ip)) = (&self.first_error, target) {
                        self.first_error = Some((ip, e.to_string()));
                    }
                    sweep.on_send_error(*token);
                    self.head += 1;
                }
            }
        }
        if self.head == self.items.len() {
            self.items.clear();
            self.data.clear();
            self.head = 0;
        }
        (sent, blocked)
    }
}

/// `sendmmsg` of `msgs` on `fd`, without blocking: how many were sent. Only for
/// [`SendBatch::flush_with`], whose messages point at its own live buffers.
fn sendmmsg(fd: RawFd, msgs: &mut [libc::mmsghdr]) -> io::Result<usize> {
    // SAFETY: flush_with's msgs point into its data and items, alive and unmoved for the
    // call, with the lengths they state; the kernel only reads them.
    let r = unsafe {
        libc::sendmmsg(
            fd,
            msgs.as_mut_ptr(),
            msgs.len() as libc::c_uint,
            libc::MSG_DONTWAIT,
        )
    };
    usize::try_from(r).map_err(|_| io::Error::last_os_error())
}

/// Waits for `wait`, unless `stop` completes first: then its output.
async fn unless<S: std::future::Future>(
    wait: impl std::future::Future,
    stop: std::pin::Pin<&mut S>,
) -> Option<S::Output> {
    tokio::select! {
        biased;
        by = stop => Some(by),
        _ = wait => None,
    }
}

fn emit<H: HostResults>(sweep: &mut Sweep, index: &[usize], h: &mut H, alive: &mut usize) {
    while let Some(Event::HostDone { job, stats }) = sweep.poll_event() {
        if stats.is_alive() {
            *alive += 1;
        }
        h.host_done(index[job], &stats, sweep.rtts(job));
    }
}

/// Buffers for `recvmmsg`: `RECV_BATCH` slots of `slot` bytes.
#[derive(Debug, Default)]
struct RecvBuf {
    slot: usize,
    data: Vec<u8>,
}

impl RecvBuf {
    /// Makes room for [`RECV_BATCH`] datagrams of `slot` bytes each (and no more: a
    /// sweep of 64 KiB probes leaves no 4 MiB buffer behind).
    fn fit(&mut self, slot: usize) {
        self.slot = slot;
        self.data.resize(slot * RECV_BATCH, 0);
        self.data.shrink_to(slot * RECV_BATCH);
    }
}

/// Control buffer per message: room for one `SCM_TIMESTAMPNS` (a `timespec`) and slack.
const CMSG_LEN: usize = 64;

#[derive(Clone, Copy)]
#[repr(C, align(8))]
struct CmsgBuf([u8; CMSG_LEN]);

/// The `SCM_TIMESTAMPNS` of a received message (`SO_TIMESTAMPNS`), as time since the
/// Unix epoch, where present.
fn rx_meta(hdr: &libc::msghdr) -> Option<Duration> {
    let mut ts = None;
    // SAFETY: hdr's control buffer was filled by recvmmsg and msg_controllen says how
    // much of it is valid; the CMSG_* macros stay within it.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(hdr);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SO_TIMESTAMPNS {
                let t: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                ts = u64::try_from(t.tv_sec)
                    .ok()
                    .zip(u32::try_from(t.tv_nsec).ok().filter(|n| *n < 1_000_000_000));
            }
            c = libc::CMSG_NXTHDR(hdr, c);
        }
    }
    ts.map(|(s, n)| Duration::new(s, n))
}

/// The kernel's count of datagrams socket `fd` dropped (`SO_MEMINFO`'s
/// `SK_MEMINFO_DROPS`: for a full receive buffer, cumulative, wrapping); `None` where
/// the kernel does not tell (before Linux 4.7).
fn socket_drops(fd: RawFd) -> Option<u32> {
    const DROPS: usize = libc::SK_MEMINFO_DROPS as usize;
    let mut mem = [0u32; DROPS + 1];
    let mut len = size_of_val(&mem) as libc::socklen_t;
    // SAFETY: mem and len are valid for writes of their sizes; the kernel writes at
    // most len bytes.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_MEMINFO,
            mem.as_mut_ptr().cast(),
            &mut len,
        )
    };
    (r == 0 && len as usize > DROPS * size_of::<u32>()).then_some(mem[DROPS])
}

/// When a reply was received: its kernel timestamp `ts` (wall clock, `SO_TIMESTAMPNS`)
/// taken as an age from `wall_now` back from `now`, so that a busy loop reading it later
/// does not inflate its RTT. The age is believed only up to when its socket's queue was
/// last found empty (`empty_since`, less a little slack: the reply arrived after that)
/// or 10 s without one: a larger age is a step of the wall clock between its arrival
/// and now (NTP), which would make a timely reply late; then, and without a
/// timestamp, `now`.
fn received_at(
    now: Instant,
    wall_now: Duration,
    ts: Option<Duration>,
    empty_since: Option<Instant>,
) -> Instant {
    const SLACK: Duration = Duration::from_millis(5);
    let most = empty_since.map_or(Duration::from_secs(10), |t| {
        now.saturating_duration_since(t) + SLACK
    });
    match ts.and_then(|ts| wall_now.checked_sub(ts)) {
        Some(age) if age <= most => now.checked_sub(age).unwrap_or(now),
        _ => now,
    }
}

/// Drains each of the sweep's sockets (`fds`: IPv4, IPv6, each `None` when not read;
/// `empty_since` per socket, see [`drain`]); returns whether one filled its turn.
fn drain_all(
    fds: [Option<RawFd>; 2],
    empty_since: &mut [Option<Instant>; 2],
    rx: &mut RecvBuf,
    sweep: &mut Sweep,
    errors: &mut u64,
) -> bool {
    let mut cut = false;
    let families = [Family::V4, Family::V6];
    for ((fd, empty), family) in fds.into_iter().zip(empty_since).zip(families) {
        if let Some(fd) = fd {
            cut |= drain(fd, family, rx, sweep, errors, empty) >= RECV_TURN;
        }
    }
    cut
}

/// Reads up to `RECV_TURN` datagrams from `fd` (of `family`) into `sweep`; returns how
/// many. `empty_since`: when this socket's queue was last found empty, updated here.
fn drain(
    fd: RawFd,
    family: Family,
    rx: &mut RecvBuf,
    sweep: &mut Sweep,
    errors: &mut u64,
    empty_since: &mut Option<Instant>,
) -> usize {
    let mut total = 0;
    // A clock read before each call: a queue a call leaves empty was empty at some
    // point after the call began, not only when it returned (a thread preempted on
    // the way out of recvmmsg, a common place, would otherwise set the mark after
    // replies that arrived meanwhile, and their timestamps would be disbelieved).
    let mut before_call = Instant::now();
    // Failed reads in a row (pending errors, each with the error queue read to its
    // end): past a few, the turn ends rather than spin on a failure of another kind.
    const MAX_PENDING: u32 = 8;
    let mut pending = 0;
    // A raw IPv4 socket hands over each datagram with its IP header, whose source the
    // sweep reads: the kernel need not copy it out a second time (a tenth of the
    // receive's cost per reply). Others say it only in the message's name.
    let header = sweep.config().socket.framing(family) == Framing::Ipv4Header;
    while total < RECV_TURN {
        let mut addrs: [MaybeUninit<libc::sockaddr_storage>; RECV_BATCH] =
            [const { MaybeUninit::zeroed() }; RECV_BATCH];
        // SAFETY: iovec and mmsghdr are plain C structs; all-zero is a valid value.
        let mut iovs: [libc::iovec; RECV_BATCH] = unsafe { std::mem::zeroed() };
        let mut msgs: [libc::mmsghdr; RECV_BATCH] = unsafe { std::mem::zeroed() };
        let mut cmsgs = [CmsgBuf([0; CMSG_LEN]); RECV_BATCH];
        let base = rx.data.as_mut_ptr();
        for i in 0..RECV_BATCH {
            // SAFETY: slot i lies within rx.data (RECV_BATCH * slot bytes).
            iovs[i].iov_base = unsafe { base.add(i * rx.slot) }.cast();
            iovs[i].iov_len = rx.slot;
            if !header {
                msgs[i].msg_hdr.msg_name = addrs[i].as_mut_ptr().cast();
                msgs[i].msg_hdr.msg_namelen =
                    size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            }
            msgs[i].msg_hdr.msg_iov = &mut iovs[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
            msgs[i].msg_hdr.msg_control = cmsgs[i].0.as_mut_ptr().cast();
            msgs[i].msg_hdr.msg_controllen = CMSG_LEN as _;
        }
        // SAFETY: every pointer in msgs refers to live buffers of the stated sizes.
        let n = unsafe {
            libc::recvmmsg(
                fd,
                msgs.as_mut_ptr(),
                RECV_BATCH as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => *empty_since = Some(before_call),
                io::ErrorKind::Interrupted => continue,
                _ => {
                    // The socket's pending error: an ICMP error came back for a probe
                    // (`set_recverr`), which the error queue holds. Read, then on with
                    // the replies; every error queued sets it again, so none waits. A
                    // failure that has nothing queued, again and again, is another.
                    let read = read_errors(fd, sweep);
                    if pending < MAX_PENDING {
                        pending += 1;
                        continue;
                    }
                    if read == 0 {
                        *errors += 1;
                        tracing::debug!(error = %e, "ICMP recvmmsg failed");
                    }
                }
            }
            break;
        }
        let now = Instant::now();
        let wall_now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        pending = 0;
        let n = n as usize;
        let before = *empty_since;
        if n < RECV_BATCH {
            // Fewer than asked for: the queue was empty during this call.
            *empty_since = Some(before_call);
        }
        before_call = now;
        for i in 0..n {
            let ts = rx_meta(&msgs[i].msg_hdr);
            let at = received_at(now, wall_now, ts, before);
            let len = (msgs[i].msg_len as usize).min(rx.slot);
            // SAFETY: the kernel initialised the sockaddr (zeroed before, so valid either way).
            let ss = unsafe { addrs[i].assume_init_ref() };
            let from = match header {
                // IPv4 only (the header's framing): the header's source is taken.
                true => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                false => match sockaddr_to_std(ss) {
                    Some(a) => a.ip(),
                    None => continue,
                },
            };
            let bytes = &rx.data[i * rx.slot..i * rx.slot + len];
            sweep.handle_reply(bytes, from, at);
        }
        total += n;
        if n < RECV_BATCH {
            break;
        }
    }
    total
}

/// Reads the ICMP errors queued on `fd` into `sweep` ([`Sweep::handle_error`]) to the
/// queue's end (it is bounded by the receive buffer, where its errors count, and read
/// at once, they leave room for the replies); returns how many messages it held.
fn read_errors(fd: RawFd, sweep: &mut Sweep) -> usize {
    let read = read_error_queue(fd, usize::MAX, |to, quoted, error| {
        if let Some(to) = to {
            sweep.handle_error(quoted, to.ip(), error);
        }
    });
    read.messages
}

/// Waits until the kernel stamps datagrams when they arrive, at most
/// [`RX_TIMESTAMPS_WAIT`]. Asking for receive timestamps (`SO_TIMESTAMPNS`) turns them
/// on for the whole host later, from a deferred work item, when no other socket had
/// them on: a datagram that arrives before then is stamped when it is read, and the
/// replies of a first sweep, read a receive tick after they came, would count that tick
/// in their RTT (~20 ms; a reply near its timeout then counted as lost). A datagram
/// sent to ourselves on 127.0.0.1 shows when ([`StampProbe`]).
fn wait_for_rx_timestamps() {
    let Some(probe) = StampProbe::bind(Ipv4Addr::LOCALHOST) else {
        return;
    };
    let start = Instant::now();
    let seen = wait_for_stamps(RX_TIMESTAMPS_WAIT, || start.elapsed(), || probe.look());
    if seen == Stamped::OnRead {
        tracing::debug!("receive timestamps not on after {RX_TIMESTAMPS_WAIT:?}; the first RTTs may count a receive tick");
    }
}

/// When the kernel stamped a datagram ([`StampProbe::look`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stamped {
    /// When it arrived: receive timestamps are on.
    OnArrival,
    /// When it was read: they are not on yet.
    OnRead,
    /// Not at all, or the look failed: waiting will not change it.
    Never,
}

/// Looks at the kernel's stamps (`look`) until one shows them on, or shows that they
/// never will be, while `elapsed` is under `bound`: the last look's finding
/// ([`Stamped::OnRead`] when it gave up waiting, or looked not at all).
fn wait_for_stamps(
    bound: Duration,
    mut elapsed: impl FnMut() -> Duration,
    mut look: impl FnMut() -> Stamped,
) -> Stamped {
    let mut seen = Stamped::OnRead;
    while seen == Stamped::OnRead && elapsed() < bound {
        seen = look();
    }
    seen
}

/// A UDP socket asking for receive timestamps, which sends itself datagrams to see
/// when the kernel stamps them.
struct StampProbe {
    sock: std::net::UdpSocket,
    to: SocketAddr,
}

impl StampProbe {
    /// Bound to a free port of `ip`, a local address; `None` when the socket cannot be
    /// had or refuses timestamps (nothing to wait for then).
    fn bind(ip: Ipv4Addr) -> Option<Self> {
        let sock = std::net::UdpSocket::bind((ip, 0)).ok()?;
        let on: libc::c_int = 1;
        setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            &on,
        )
        .ok()?;
        // A datagram to ourselves that never came would otherwise block for good.
        sock.set_read_timeout(Some(Duration::from_millis(50)))
            .ok()?;
        let to = sock.local_addr().ok()?;
        Some(StampProbe { sock, to })
    }

    /// Sends itself a datagram, lets a millisecond pass and reads it: stamped before
    /// the read began, it was stamped when it arrived.
    fn look(&self) -> Stamped {
        if self.sock.send_to(b"ts", self.to).is_err() {
            return Stamped::Never;
        }
        std::thread::sleep(Duration::from_millis(1));
        let before = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let mut data = [0u8; 8];
        let mut iov = libc::iovec {
            iov_base: data.as_mut_ptr().cast(),
            iov_len: data.len(),
        };
        let mut cmsg = CmsgBuf([0; CMSG_LEN]);
        // SAFETY: msghdr is a plain C struct; all-zero is a valid value.
        let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
        hdr.msg_iov = &mut iov;
        hdr.msg_iovlen = 1;
        hdr.msg_control = cmsg.0.as_mut_ptr().cast();
        hdr.msg_controllen = CMSG_LEN as _;
        // SAFETY: hdr points at live buffers of the lengths it states.
        if unsafe { libc::recvmsg(self.sock.as_raw_fd(), &mut hdr, 0) } < 0 {
            return Stamped::Never;
        }
        match rx_meta(&hdr) {
            Some(ts) if ts < before => Stamped::OnArrival,
            Some(_) => Stamped::OnRead,
            None => Stamped::Never,
        }
    }
}

/// How long [`wait_for_rx_timestamps`] waits, at most.
const RX_TIMESTAMPS_WAIT: Duration = Duration::from_millis(200);

/// Compile-time check: a sweep can run in a spawned task of a multi-threaded runtime.
const _: fn() = || {
    fn assert_send<T: Send>(_: &T) {}
    fn check(d: &mut IcmpDriver, jobs: &[PingJob]) {
        let fut = d.sweep(jobs, |_, _| {});
        assert_send(&fut);
    }
    let _ = check;
};

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// `packets` requests of `size` bytes to `addr`, 20 ms apart, each waited for 2 s.
    fn probe(addr: IpAddr, packets: u32, size: usize) -> PingJob {
        PingJob {
            addr,
            packets,
            interval: Duration::from_millis(20),
            size,
            timeout: Duration::from_secs(2),
            retry: None,
        }
    }

    /// Sends `n` echo requests with identifier `ident` to `to` (loopback: the kernel
    /// answers each as it is sent) from a raw socket of its own, not a driver's.
    fn ping_from_elsewhere(to: IpAddr, ident: u16, n: u16) {
        let family = icmp::Family::of(to);
        let sock = open_socket(SocketKind::Raw, to.is_ipv6()).unwrap();
        let to = SockAddr::from(SocketAddr::new(to, 0));
        for seq in 0..n {
            let echo = icmp::EchoRepr {
                family,
                kind: icmp::EchoKind::Request,
                ident,
                seq,
                payload: &[0; 56],
            };
            let mut req = vec![0; echo.buffer_len()];
            // ICMPv6: the kernel fills in the checksum.
            echo.emit(&mut icmp::EchoPacket::new_unchecked(&mut req[..]))
                .unwrap();
            sock.send_to(&req, &to).unwrap();
        }
    }

    /// [`wait_for_stamps`] looks until a look finds the stamps on or never to be, and
    /// gives up once its bound has passed: on a clock of its own, each look taking
    /// 50 ms, and a bound of 200 ms.
    #[test]
    fn the_wait_for_rx_timestamps_ends_as_soon_as_a_look_tells_or_at_its_bound() {
        use Stamped::*;
        let wait = |found: &[Stamped]| {
            let clock = std::cell::Cell::new(Duration::ZERO);
            let mut looks = found.iter().copied();
            let seen = wait_for_stamps(
                Duration::from_millis(200),
                || clock.get(),
                || {
                    clock.set(clock.get() + Duration::from_millis(50));
                    looks.next().expect("looked past the bound")
                },
            );
            (seen, found.len() - looks.len())
        };
        // Stamped when read twice, then on arrival: done at the third look.
        assert_eq!(wait(&[OnRead, OnRead, OnArrival, OnRead]), (OnArrival, 3));
        // No stamp at all: done at once.
        assert_eq!(wait(&[OnRead, Never, OnRead]), (Never, 2));
        // Never on: four looks fill the 200 ms, and a fifth is not taken.
        assert_eq!(wait(&[OnRead; 5]), (OnRead, 4));
    }

    /// The kernel stamps a datagram when it arrives once a socket asked for it (as the
    /// probe's own does, which keeps them on): [`StampProbe::look`] sees it, on its
    /// own address (127.0.183.1), before the bound of 10 s. A look that took a stamp
    /// on arrival for one on read, or read no stamp, never finds them on and waits in
    /// vain at every driver's start.
    #[test]
    fn a_stamp_probe_sees_receive_timestamps_on_when_they_are() {
        let probe = StampProbe::bind(Ipv4Addr::new(127, 0, 183, 1)).expect("a UDP socket");
        let start = Instant::now();
        let bound = Duration::from_secs(10);
        let seen = wait_for_stamps(bound, || start.elapsed(), || probe.look());
        assert_eq!(seen, Stamped::OnArrival);
        // They stay on while the probe asks for them.
        assert_eq!(probe.look(), Stamped::OnArrival);
    }

    #[test]
    fn a_wall_clock_step_does_not_age_a_reply() {
        let now = Instant::now();
        let ms = Duration::from_millis;
        let wall = Duration::from_secs(1_800_000_000);
        let empty = Some(now - ms(20));
        // Arrived 3 ms ago, queue empty 20 ms ago: believed.
        assert_eq!(
            received_at(now, wall, Some(wall - ms(3)), empty),
            now - ms(3)
        );
        // The wall clock stepped 5 s forward since it arrived: its age (5.003 s) is more
        // than the 20 ms it can have waited, so it counts as received now (a 10 s guard
        // took it as 5 s old: a timely reply turned late).
        let stepped = wall + Duration::from_secs(5);
        assert_eq!(received_at(now, stepped, Some(wall - ms(3)), empty), now);
        // Stepped back: a timestamp in the future.
        assert_eq!(received_at(now, wall - ms(50), Some(wall), empty), now);
        // No empty queue seen yet this sweep: up to 10 s; no timestamp: now.
        assert_eq!(
            received_at(now, wall, Some(wall - ms(900)), None),
            now - ms(900)
        );
        assert_eq!(received_at(now, wall, Some(wall - ms(10_001)), None), now);
        assert_eq!(received_at(now, wall, None, empty), now);
    }

    /// A probe the kernel keeps refusing with ENOBUFS (what a `tc` egress filter's drop
    /// returns; a full device queue returns it too, for a while) is retried only while
    /// its timeout has not run out: then it is a send error and the probes behind it
    /// go. It was retried for ever, holding every later probe: a sweep of more hosts
    /// than one send turn never ended. No socket: a stand-in for `sendmmsg`.
    #[test]
    fn a_probe_refused_with_enobufs_for_good_does_not_hold_the_sweep() {
        let t0 = Instant::now();
        let dropped = Ipv4Addr::new(127, 0, 62, 1);
        let jobs: Vec<PingJob> = [dropped, Ipv4Addr::new(127, 0, 62, 2)]
            .into_iter()
            .map(|a| PingJob {
                addr: IpAddr::V4(a),
                packets: 1,
                interval: Duration::from_millis(20),
                size: 56,
                timeout: Duration::from_millis(100),
                retry: None,
            })
            .collect();
        let cfg = SweepConfig {
            max_pps: 0,
            ..SweepConfig::new(TagKey([1, 2]))
        };
        let mut sweep = Sweep::new(jobs, cfg, t0).unwrap();
        let mut batch = SendBatch::default();
        while let Some(tx) = sweep.poll_transmit(t0) {
            batch.push(&tx);
        }
        // Refuses every run that starts with a probe to `dropped`; sends any other.
        let mut send = |_: RawFd, msgs: &mut [libc::mmsghdr]| {
            // SAFETY: flush points msg_name at the probe's sockaddr_in.
            let to = unsafe { &*msgs[0].msg_hdr.msg_name.cast::<libc::sockaddr_in>() };
            if Ipv4Addr::from(u32::from_be(to.sin_addr.s_addr)) == dropped {
                return Err(io::Error::from_raw_os_error(libc::ENOBUFS));
            }
            Ok(msgs.len())
        };
        let (v4, v6) = (Some(0), None);
        // Within its timeout: retried later, nothing sent past it.
        assert_eq!(batch.flush_with(v4, v6, &mut sweep, &mut send), (0, true));
        sweep.handle_timeout(t0 + Duration::from_millis(50));
        assert_eq!(batch.flush_with(v4, v6, &mut sweep, &mut send), (0, true));
        // Its timeout ran out: a send error, and the probe behind it leaves.
        sweep.handle_timeout(t0 + Duration::from_millis(100));
        assert_eq!(batch.flush_with(v4, v6, &mut sweep, &mut send), (1, false));
        assert!(batch.items.is_empty());
        assert_eq!(sweep.counters().send_errors, 1);
        let (to, error) = batch.first_error.expect("the refusal is reported");
        assert_eq!(to, IpAddr::V4(dropped));
        assert!(error.contains("buffer"), "{error}");
    }

    /// A probe's RTT counts from when it left, not from when the batch it went in began
    /// to be built: 64 loopback hosts, one `sendmmsg` batch, unpaced, 16 kB payloads
    /// (building such a batch took ~57 ms in a debug build, and the last probe's RTT
    /// was that; fping -b 16000 to loopback says ~0.06 ms). The bound is far above a
    /// loopback reply and far below what the batch costs. Loopback only; needs root.
    #[test]
    fn an_rtt_counts_from_the_probes_own_send() {
        let rt = runtime();
        let opts = IcmpOptions {
            max_pps: 0,
            ..IcmpOptions::default()
        };
        let mut d = IcmpDriver::open(opts).unwrap();
        let jobs: Vec<PingJob> = (1..=64u8)
            .map(|i| probe(IpAddr::V4(Ipv4Addr::new(127, 0, 99, i)), 1, 16_000))
            .collect();
        let mut rtt = vec![None; jobs.len()];
        let report = rt.block_on(d.sweep(&jobs, |i, s| rtt[i] = s.avg()));
        assert_eq!(report.counters.received, 64, "{report:?}");
        let max = rtt.iter().map(|r| r.expect("answered")).max().unwrap();
        assert!(max < Duration::from_millis(20), "{rtt:?}");
    }

    /// With the receive buffer `net.core.rmem_max` leaves a process without
    /// CAP_NET_ADMIN (208 KiB, 416 KiB as Linux counts it), a turn may send as few
    /// probes as their replies fit, one if need be: a floor of 8 sent eight 64 KiB
    /// probes back to back, whose loopback replies overflowed the buffer before the
    /// next read (7 of 62 hosts read as down, every run). Loopback only; needs root.
    #[test]
    fn large_replies_into_a_small_receive_buffer_are_not_lost() {
        let rt = runtime();
        // The identifier filter keeps other pingers' replies (other tests' 16 kB ones)
        // out of the small buffer: the turn's own replies are what must fit.
        let opts = IcmpOptions {
            rcvbuf: 212_992,
            ident_filter: true,
            ..IcmpOptions::default()
        };
        let mut d = IcmpDriver::open(opts).unwrap();
        let jobs: Vec<PingJob> = (1..=62u8)
            .map(|i| {
                let addr = IpAddr::V4(Ipv4Addr::new(127, 0, 43, i));
                probe(addr, 1, icmp::MAX_PAYLOAD_V4)
            })
            .collect();
        let report = rt.block_on(d.sweep(&jobs, |_, _| {}));
        assert_eq!(report.counters.received, 62, "{report:?}");
        assert_eq!(report.receive_drops, 0, "{report:?}");
    }

    /// `receive_drops` counts what the kernel dropped during the sweep, not before it:
    /// between sweeps nobody reads the sockets, and replies meant for someone else (a
    /// raw socket gets every echo reply that passes its filters) can fill the buffer.
    /// They were counted with the first reply the sweep read after them
    /// (`SO_RXQ_OVFL` carries the socket's running count): a sweep whose every host
    /// answered reported drops, "replies that read as lost though they came".
    /// Here 64 replies carrying the next sweep's identifier fill a minimal receive
    /// buffer before it. Loopback only (127.0.62.0/24); needs root.
    #[test]
    fn drops_before_a_sweep_are_not_counted_in_it() {
        let rt = runtime();
        // The identifier filter keeps other pingers' replies out of the tiny buffer.
        let opts = IcmpOptions {
            rcvbuf: 1,
            ident_filter: true,
            ..IcmpOptions::default()
        };
        let mut d = IcmpDriver::open(opts).unwrap();
        // Echo requests from another socket with the next sweep's identifier: the
        // kernel's replies queue on `d`'s socket.
        ping_from_elsewhere(Ipv4Addr::new(127, 0, 62, 30).into(), d.next_ident(), 64);
        let before = socket_drops(d.v4.fd().unwrap()).expect("SO_MEMINFO");
        assert!(
            before >= 32,
            "the flood overflowed the buffer: {before} drops"
        );
        let jobs = [probe(IpAddr::V4(Ipv4Addr::new(127, 0, 62, 31)), 1, 56)];
        let report = rt.block_on(d.sweep(&jobs, |_, _| {}));
        assert_eq!(report.counters.received, 1, "{report:?}");
        assert_eq!(report.receive_drops, 0, "{report:?}");
    }

    /// The identifier filter (the daemon's several sweep sockets) on the raw ICMPv6
    /// socket, where a datagram starts at the ICMPv6 header, not at an IP header: it
    /// passes the sweep's replies and keeps out those carrying another identifier.
    /// Here echo requests to `::1` with another identifier, sent before the sweep, get
    /// replies that would queue on its socket and be read as foreign. Loopback (`::1`,
    /// 127.0.167.1) only; needs root.
    #[test]
    fn the_identifier_filter_works_on_the_ipv6_socket() {
        let rt = runtime();
        let opts = IcmpOptions {
            ident_filter: true,
            ..IcmpOptions::default()
        };
        let mut d = IcmpDriver::open(opts).unwrap();
        d.ipv6().expect("ICMPv6 socket");
        let lo6 = IpAddr::V6(std::net::Ipv6Addr::LOCALHOST);
        ping_from_elsewhere(lo6, d.next_ident() ^ 0x8000, 5);
        let v4 = IpAddr::V4(Ipv4Addr::new(127, 0, 167, 1));
        let jobs = [probe(lo6, 3, 56), probe(v4, 3, 56)];
        let mut stats = [PingStats::default(); 2];
        let report = rt.block_on(d.sweep(&jobs, |i, s| stats[i] = *s));
        assert_eq!(
            stats.map(|s| (s.sent, s.received)),
            [(3, 3); 2],
            "{report:?}"
        );
        let c = report.counters;
        assert_eq!(c.foreign + c.spoofed + c.stale, 0, "{report:?}");
    }
}
