//! The sweep state machine: one iteration of echo probes to many hosts.
//!
//! Sans-IO: the caller owns the socket and the clock. It asks [`Sweep::poll_transmit`]
//! for the next due probe and sends it, feeds every received datagram to
//! [`Sweep::handle_reply`], calls [`Sweep::handle_timeout`] when
//! [`Sweep::poll_timeout`] passes, and drains [`Sweep::poll_event`] for per-host results.
//!
//! Invariants:
//! * A probe is registered in the in-flight table *before* its bytes are handed out;
//!   it leaves the table on its reply, on [`Sweep::on_send_error`], or when its timeout
//!   expires.
//! * Keys are `(address, identifier, sequence)`. Sequence numbers are allocated per
//!   address from `SweepConfig::seq_start`, so they are unique per address across the
//!   whole sweep (at most 65,536 probes per address); the identifier is one per sweep
//!   (raw sockets) or ignored (datagram sockets, whose identifier the kernel rewrites).
//!   The table itself is flat: the job a reply answers is named in its payload (under
//!   the tag), its packet is sequence − job's base, and one send-instant slot per
//!   probe; O(1) per probe and per reply, with no lookup by address (a map of the
//!   addresses is built at creation only, to number duplicates' sequences, and again
//!   for ICMP errors that quote too little of their probe to carry the tag).
//! * Every reply is checked against the payload tag ([`crate::tag`]) before anything of
//!   it is believed; a reply that matches nothing is counted by reason in
//!   [`SweepCounters`], never silently dropped. An ICMP error is believed for the probe
//!   it quotes by the same tag (or, when its sender quoted too little of the probe to
//!   carry it, by identifier, address and sequence); it is kept with its host and
//!   changes no count or timing ([`Sweep::handle_error`]).
//! * Pacing: the long-run send rate never exceeds `max_pps`; after an idle or late
//!   wake-up at most `burst` worth of probes go out back to back. Probe `k + 1` of a
//!   host leaves no earlier than `interval` after probe `k` left ([`Sweep::sent_at`]
//!   says when that was, if later than it was handed out: a batch that waited; within
//!   a millisecond, a batch's own time, the hand-out counts).
//! * Order among due probes: first-round probes (nothing is known of their hosts yet),
//!   then later probes of hosts with an unanswered probe, then later probes of hosts
//!   that answered every probe so far. The iteration lasts until the last probe that
//!   goes unanswered times out, and a host that answered is unlikely to stop answering
//!   within one sweep, so the probes that may set the deadline leave first: with 3
//!   packets to 4,096 hosts at 100k pps the last silent host's third probe leaves at
//!   first round + 2 intervals (~81 ms) instead of after all 12,288 probes (~123 ms).
//!   Deferring a due probe only delays it; it never leaves before its due time.
//! * The deadline is the latest `send instant + job timeout` over all probes; it is
//!   final once every probe has been sent. A host completes as soon as every probe of
//!   its is resolved: replied, failed to send, or expired (`send + timeout` passed, as
//!   seen by [`Sweep::handle_timeout`]); so silent hosts stream out in send order too,
//!   and everything is complete at the deadline.
//! * A reply arriving later than its job's `timeout` after its probe is `Late`, not
//!   received (Zabbix/fping semantics: the timeout is per probe).
//! * A job with [`Job::retry`] (`icmppingretry`, fping's default mode) has at most one
//!   probe in flight: probe `k + 1` is queued only when probe `k` is lost (expired or
//!   late), due when probe `k`'s timeout ran out; the first reply completes the host
//!   and its remaining probes are never sent. A try whose send failed is the host's
//!   last, as in fping, which schedules no timeout for it and retries only from a
//!   timeout: the host completes at once if it was the first, else when its timeout
//!   would have run out, as if it had left (a slow reply to an earlier try may still
//!   answer it). Until then the sweep does not count as all sent ([`Sweep::all_sent`]),
//!   so the deadline cannot be final while a retry may still be queued. A reply past
//!   its try's timeout answers the host if it came within the timeout of the try fping
//!   would have out by then (each try leaving as the one before ran out, from the
//!   first one, up to one whose send failed), however late this sweep handles that
//!   expiry or sends that try: neither when a reply is read (as for counting jobs) nor
//!   how busy the sweep is changes whether a host answered, nor how a reply's copies
//!   are counted. Such a host's `sent` is then the tries fping had sent by then (try
//!   `m` out: `m + 1`), counting a try this sweep never sent because the reply came
//!   first, as fping counts every try it sent; so neither does its count depend on
//!   the sweep's timing.
//! * Once a retrying host answered, a reply to any of its tries is `Duplicate`, never
//!   `Late`: fping's default mode sends every try of a host under one index with one
//!   reply slot ("duplicate for \[0\]"); a counting job's slot is per probe, so a
//!   reply to another of its probes past that probe's timeout is still `Late`.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use crate::pace::SharedPacer;
use crate::stats::PingStats;
use crate::tag::{self, TagCheck, TagKey, TAG_LEN};
use crate::wire::{self, EchoKind, EchoPacket, Family, Framing, WireError, HEADER_LEN};

/// Largest echo payload over IPv4 (65535 − 20 IP − 8 ICMP), also Zabbix's size limit.
pub const MAX_PAYLOAD_V4: usize = 65_507;
/// Largest echo payload over IPv6 without jumbograms (65535 − 8).
pub const MAX_PAYLOAD_V6: usize = 65_527;
/// Smallest payload: the tag must fit ([`TAG_LEN`]).
pub const MIN_PAYLOAD: usize = TAG_LEN;

/// One host's probes in a sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Job {
    /// Target address.
    pub addr: IpAddr,
    /// Number of echo requests (Zabbix default 3).
    pub packets: u32,
    /// Spacing between this host's requests (Zabbix minimum 20 ms).
    pub interval: Duration,
    /// Payload bytes per request, `MIN_PAYLOAD..=MAX_PAYLOAD_V4/V6` (fping default 56).
    pub size: usize,
    /// How long a reply may take after its request (Zabbix minimum 50 ms); with
    /// [`Self::retry`], the first probe's, each later one's growing by its backoff.
    pub timeout: Duration,
    /// `None`: all `packets` are sent, `interval` apart (fping `-c`: `icmpping`,
    /// `icmppingloss`, `icmppingsec`). `Some`: a probe is sent only when the one before
    /// left and went unanswered, up to `packets` in all; `interval` is not used
    /// (`icmppingretry`).
    pub retry: Option<Retry>,
}

/// How a [`Job`] retries (fping's default mode, Zabbix's `icmppingretry`): the next
/// probe leaves when the previous one's timeout ran out, and probe `k` waits
/// `timeout × backoff^k` for its reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Retry {
    /// Factor of each probe's timeout over the previous one's, in hundredths:
    /// [`Retry::BACKOFF`] (Zabbix's 1.0–5.0).
    pub backoff_pct: u16,
}

impl Retry {
    /// Backoffs Zabbix allows, in hundredths.
    pub const BACKOFF: std::ops::RangeInclusive<u16> = 100..=500;
}

/// The longest a job's probes may last ([`Job::total_wait`]): keeps every instant of a
/// sweep far from overflow. Zabbix's own limits are far lower.
pub const MAX_JOB_WAIT: Duration = Duration::from_secs(24 * 3600);

impl Job {
    /// Checks this job (at index `index`) on its own: packets ≥ 1, size within
    /// `MIN_PAYLOAD..=MAX_PAYLOAD_V4/V6`, timeout > 0. [`Sweep::new`] additionally
    /// refuses more than 65,536 probes to one address.
    pub fn validate(&self, index: usize) -> Result<(), SweepError> {
        let (job, addr) = (index, self.addr);
        if self.packets == 0 {
            return Err(SweepError::NoPackets { job, addr });
        }
        let max = match addr {
            IpAddr::V4(_) => MAX_PAYLOAD_V4,
            IpAddr::V6(_) => MAX_PAYLOAD_V6,
        };
        if !(MIN_PAYLOAD..=max).contains(&self.size) {
            return Err(SweepError::BadSize {
                job,
                addr,
                size: self.size,
                min: MIN_PAYLOAD,
                max,
            });
        }
        if self.timeout.is_zero() {
            return Err(SweepError::ZeroTimeout { job, addr });
        }
        if let Some(r) = self.retry {
            if !Retry::BACKOFF.contains(&r.backoff_pct) {
                return Err(SweepError::BadBackoff {
                    job,
                    addr,
                    backoff_pct: r.backoff_pct,
                });
            }
        }
        if self.total_wait().is_none_or(|w| w > MAX_JOB_WAIT) {
            return Err(SweepError::WaitTooLong { job, addr });
        }
        Ok(())
    }

    /// How long probe `k` (from 0) waits for its reply: `timeout`, or with
    /// [`Self::retry`] `timeout × backoff^k` (whole microseconds; the same for the same
    /// job and `k`, which keeps the sweep's expiry queues sorted).
    pub fn probe_timeout(&self, k: u32) -> Duration {
        match self.retry {
            Some(r) if r.backoff_pct != 100 && k > 0 => {
                let factor = (f64::from(r.backoff_pct) / 100.0).powi(k as i32);
                let us = self.timeout.as_micros() as f64 * factor;
                // Bounded by `validate` (MAX_JOB_WAIT) for a job a sweep runs.
                Duration::from_micros(us.round().min(u64::MAX as f64) as u64)
            }
            _ => self.timeout,
        }
    }

    /// The longest its probes may last: the last one leaves `packets - 1` intervals
    /// after the first and is waited for `timeout`; with [`Self::retry`], every try's
    /// timeout in a row (a host that never answers). `None` on overflow.
    pub fn total_wait(&self) -> Option<Duration> {
        match self.retry {
            None => self
                .interval
                .checked_mul(self.packets.saturating_sub(1))?
                .checked_add(self.timeout),
            Some(r) => {
                let b = f64::from(r.backoff_pct) / 100.0;
                let n = f64::from(self.packets);
                let sum = if r.backoff_pct == 100 {
                    n
                } else {
                    (b.powf(n) - 1.0) / (b - 1.0)
                };
                Duration::try_from_secs_f64(self.timeout.as_secs_f64() * sum).ok()
            }
        }
    }
}

/// Kind of socket the driver uses; decides framing and identifier matching.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SocketKind {
    /// `SOCK_RAW`: IPv4 replies carry the IP header; identifiers are ours to choose and
    /// every ICMP message of the host arrives, so identifiers are checked.
    Raw,
    /// `SOCK_DGRAM` ping socket: no IP header; the kernel sets the identifier to the
    /// socket's port and only delivers replies to it, so identifiers are not compared.
    Datagram,
}

impl SocketKind {
    /// How this kind of socket frames received messages of `family`.
    pub fn framing(self, family: Family) -> Framing {
        match (self, family) {
            (SocketKind::Raw, Family::V4) => Framing::Ipv4Header,
            _ => Framing::IcmpOnly,
        }
    }
}

/// Sweep parameters that are not per host.
#[derive(Debug, Clone, Copy)]
pub struct SweepConfig {
    /// Socket kind the probes travel on.
    pub socket: SocketKind,
    /// Global send rate limit in probes per second; 0 means unpaced. Daemon default 100,000.
    pub max_pps: u32,
    /// Largest back-to-back burst after a late wake-up, as time at `max_pps` (default 2 ms).
    pub burst: Duration,
    /// Identifier of every request of this sweep (raw sockets); pick a new one per sweep.
    pub ident: u16,
    /// First sequence number of every address; vary it per sweep.
    pub seq_start: u16,
    /// Iteration number written into every payload; must differ between sweeps that can
    /// overlap in time (the driver increments it).
    pub iteration: u32,
    /// Secret for the payload tag.
    pub key: TagKey,
    /// Keep each request's round trip ([`Sweep::rtts`]: `fping -C`'s output), 4 bytes
    /// a probe more; the statistics alone otherwise (the daemon's items need no more).
    pub keep_rtts: bool,
}

impl SweepConfig {
    /// Defaults: raw socket, 100,000 pps, 2 ms burst, identifier/sequence/iteration 0.
    pub fn new(key: TagKey) -> Self {
        SweepConfig {
            socket: SocketKind::Raw,
            max_pps: 100_000,
            burst: Duration::from_millis(2),
            ident: 0,
            seq_start: 0,
            iteration: 0,
            key,
            keep_rtts: false,
        }
    }
}

/// Why a sweep could not be created.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SweepError {
    /// A job asks for zero packets.
    #[error("job {job} ({addr}): packets must be at least 1")]
    NoPackets {
        /// Job index.
        job: usize,
        /// Target.
        addr: IpAddr,
    },
    /// A job's payload size is outside what the tag and IP allow.
    #[error("job {job} ({addr}): size {size} outside {min}..={max}")]
    BadSize {
        /// Job index.
        job: usize,
        /// Target.
        addr: IpAddr,
        /// Requested size.
        size: usize,
        /// Smallest allowed.
        min: usize,
        /// Largest allowed.
        max: usize,
    },
    /// A job has a zero timeout.
    #[error("job {job} ({addr}): timeout must be positive")]
    ZeroTimeout {
        /// Job index.
        job: usize,
        /// Target.
        addr: IpAddr,
    },
    /// A retrying job's backoff is outside [`Retry::BACKOFF`].
    #[error("job {job} ({addr}): backoff {backoff_pct}/100 outside 1.0..=5.0")]
    BadBackoff {
        /// Job index.
        job: usize,
        /// Target.
        addr: IpAddr,
        /// The backoff, in hundredths.
        backoff_pct: u16,
    },
    /// A job's probes would last more than [`MAX_JOB_WAIT`] ([`Job::total_wait`]).
    #[error("job {job} ({addr}): its probes would last more than 24 h")]
    WaitTooLong {
        /// Job index.
        job: usize,
        /// Target.
        addr: IpAddr,
    },
    /// More than 65,536 probes to one address would reuse sequence numbers.
    #[error("{addr}: {probes} probes in one sweep, at most 65536 per address")]
    TooManyProbes {
        /// Target.
        addr: IpAddr,
        /// Probes requested.
        probes: u64,
    },
    /// More than 2^32 probes in one sweep (their index would not fit): a fault of the
    /// whole sweep, not of the job where the count overflowed.
    #[error("{probes} probes in one sweep, at most 4294967295")]
    SweepTooLarge {
        /// Probes requested, up to the job where the count overflowed.
        probes: u64,
    },
}

/// A probe to send now. `packet` is the ICMP message (checksum filled for IPv4).
#[derive(Debug)]
pub struct Transmit<'a> {
    /// Destination.
    pub addr: IpAddr,
    /// Bytes to send.
    pub packet: &'a [u8],
    /// Handle for [`Sweep::sent_at`] and [`Sweep::on_send_error`].
    pub token: ProbeToken,
}

/// Identifies one in-flight probe (job index and packet number).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProbeToken {
    job: u32,
    packet: u32,
}

#[cfg(test)]
impl ProbeToken {
    /// (job, packet): for tests that follow each probe.
    pub(crate) fn parts(&self) -> (u32, u32) {
        (self.job, self.packet)
    }
}

/// Output of a sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Job `job` is complete (all replies in, or the deadline passed); reported once.
    HostDone {
        /// Index into the job list given to [`Sweep::new`].
        job: usize,
        /// Final statistics.
        stats: PingStats,
    },
}

/// Why a received datagram did not count as a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IgnoreReason {
    /// Not parseable: truncated, bad IP header, bad checksum.
    Malformed,
    /// Some other ICMP message (our own requests looped back, unreachables, ...).
    NotEchoReply,
    /// An echo reply that is not ours: other identifier and no valid tag.
    Foreign,
    /// Claims to be ours (our identifier) but the tag does not verify, or the tag
    /// verifies but the identifier was altered.
    Spoofed,
    /// Ours (our identifier, and the tag verifies for the address the probe went to)
    /// but from another address: a host with several addresses answering from
    /// another, a NAT. Not an answer (only replies from the probed address count,
    /// Zabbix's default without `allow_redirect`), nor a forgery.
    Redirected,
    /// A valid reply to an earlier iteration.
    Stale,
    /// A valid reply to a probe no longer in flight (duplicate, or after a send error),
    /// or to any try of a retrying job ([`Job::retry`]) that was answered (fping's
    /// "duplicate for \[0\]": its default mode keeps one reply slot per host).
    Duplicate,
    /// A valid reply that took longer than its job's timeout (of a retrying job not
    /// answered: as judged by [`Sweep::handle_reply`]).
    Late,
}

/// What [`Sweep::handle_reply`] made of a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyOutcome {
    /// A reply to an in-flight probe of job `job`.
    Matched {
        /// Job index.
        job: usize,
        /// Round-trip time.
        rtt: Duration,
    },
    /// Counted under this reason and otherwise ignored.
    Ignored(IgnoreReason),
}

/// Totals of one sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SweepCounters {
    /// Probes handed out by [`Sweep::poll_transmit`] (not the sum of the hosts'
    /// [`PingStats::sent`]: a retrying host may count a try it never sent).
    pub sent: u64,
    /// Replies matched within their timeout.
    pub received: u64,
    /// Probes reported failed through [`Sweep::on_send_error`].
    pub send_errors: u64,
    /// See [`IgnoreReason::Malformed`].
    pub malformed: u64,
    /// See [`IgnoreReason::NotEchoReply`].
    pub not_echo_reply: u64,
    /// See [`IgnoreReason::Foreign`].
    pub foreign: u64,
    /// See [`IgnoreReason::Spoofed`].
    pub spoofed: u64,
    /// See [`IgnoreReason::Redirected`].
    pub redirected: u64,
    /// See [`IgnoreReason::Stale`].
    pub stale: u64,
    /// See [`IgnoreReason::Duplicate`].
    pub duplicate: u64,
    /// See [`IgnoreReason::Late`].
    pub late: u64,
    /// ICMP errors that came back for a probe of this sweep ([`Sweep::handle_error`]).
    pub icmp_errors: u64,
}

impl SweepCounters {
    fn count(&mut self, reason: IgnoreReason) {
        let c = match reason {
            IgnoreReason::Malformed => &mut self.malformed,
            IgnoreReason::NotEchoReply => &mut self.not_echo_reply,
            IgnoreReason::Foreign => &mut self.foreign,
            IgnoreReason::Spoofed => &mut self.spoofed,
            IgnoreReason::Redirected => &mut self.redirected,
            IgnoreReason::Stale => &mut self.stale,
            IgnoreReason::Duplicate => &mut self.duplicate,
            IgnoreReason::Late => &mut self.late,
        };
        *c += 1;
    }
}

#[derive(Debug)]
struct JobState {
    job: Job,
    stats: PingStats,
    next_packet: u32,
    resolved: u32,
    seq_base: u16,
    done: bool,
    /// Index of this job's first probe in `Sweep::probes`.
    probe_base: u32,
    /// Next job with the same address (duplicates), `u32::MAX` for none.
    next_same_addr: u32,
    /// How much later than handed out its last probe left (µs, see `Sweep::sent_at`):
    /// its next probe waits as much more, once.
    shift_us: u32,
}

impl JobState {
    /// Which of this job's packets a message about a probe to `addr` with sequence
    /// `seq` concerns (a reply's, an ICMP error's quote), if one of them.
    #[inline]
    fn packet(&self, addr: IpAddr, seq: u16) -> Option<u32> {
        let k = u32::from(seq.wrapping_sub(self.seq_base));
        (self.job.addr == addr && k < self.job.packets).then_some(k)
    }
}

/// The least delay of a probe's send over its hand-out that delays its host's next
/// probe ([`Sweep::sent_at`]).
const SHIFT_WORTH: Duration = Duration::from_millis(1);

/// Fast non-keyed hash for the address map. Safe against hash flooding here because the
/// map is filled only from the sweep's own job list (at its creation, and at the first
/// ICMP error quoting too little of its probe to carry the tag), never from the
/// network: a lookup of any other address costs one probe of the table (replies name
/// their job in the tagged payload).
#[derive(Default, Clone, Copy)]
struct FxHasher(u64);

impl std::hash::Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(w));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.write_u64(u64::from(i));
    }
    fn write_u32(&mut self, i: u32) {
        self.write_u64(u64::from(i));
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
    fn finish(&self) -> u64 {
        // murmur3 fmix64: the multiply above only carries low bits upwards, and
        // hashbrown indexes buckets by the low bits.
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
}

/// (send + timeout, probe index, job) of a sent probe.
type Expiry = (Instant, u32, u32);

/// One probe's state in the in-flight table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Probe {
    /// Not sent yet, answered, or failed to send.
    Idle,
    /// Sent at this instant; waiting for its reply.
    InFlight(Instant),
    /// Expired unanswered, or answered past its timeout (it was sent at this instant):
    /// a reply now is `Late`, not `Duplicate`, unless it answers a retrying host still
    /// waiting (`Sweep::retry_answered`); to a retrying host that answered, `Duplicate`.
    Lost(Instant),
    /// A try of a retrying host, handed out at this instant, whose send failed after an
    /// earlier try ran out unanswered: the host's last (fping sends no retry after a
    /// failed send), but a slow reply to an earlier try may still answer the host, so
    /// the host completes when this try's timeout would have run out, as if it had left
    /// (`Sweep::handle_timeout`).
    Refused(Instant),
}

/// One FIFO per distinct interval or timeout (each stays sorted because its entries
/// are send instants + the same duration). Derefs to the FIFOs in use; those of an
/// earlier sweep wait behind them, empty, to be reused with their capacity.
struct Fifos<T> {
    all: Vec<(Duration, VecDeque<T>)>,
    used: usize,
}

impl<T> Default for Fifos<T> {
    fn default() -> Self {
        Fifos {
            all: Vec::new(),
            used: 0,
        }
    }
}

impl<T> Fifos<T> {
    /// The FIFO for `key`, made (or taken from the spares) if new.
    fn keyed(&mut self, key: Duration) -> &mut VecDeque<T> {
        let i = match self.all[..self.used].iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                match self.all.get_mut(self.used) {
                    Some(spare) => spare.0 = key,
                    None => self.all.push((key, VecDeque::new())),
                }
                self.used += 1;
                self.used - 1
            }
        };
        &mut self.all[i].1
    }

    /// Empties every FIFO, keeping them (and their capacity) as spares.
    fn clear(&mut self) {
        for (_, q) in &mut self.all {
            q.clear();
        }
        self.used = 0;
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Fifos<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<T> std::ops::Deref for Fifos<T> {
    type Target = [(Duration, VecDeque<T>)];
    fn deref(&self) -> &Self::Target {
        &self.all[..self.used]
    }
}

impl<T> std::ops::DerefMut for Fifos<T> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.all[..self.used]
    }
}

/// Puts `item`, due at `at`, back into a FIFO of [`Fifos::keyed`] in its place, keeping it
/// sorted (an entry moved later: a probe that left late, see [`Sweep::sent_at`]).
fn insert_in_order<T>(q: &mut VecDeque<T>, at: Instant, item: T, due: impl Fn(&T) -> Instant) {
    let i = q.partition_point(|e| due(e) <= at);
    q.insert(i, item);
}

type AddrMap = HashMap<IpAddr, u32, std::hash::BuildHasherDefault<FxHasher>>;

/// One sweep iteration. See the module docs for the protocol and invariants.
#[derive(Debug)]
pub struct Sweep {
    cfg: SweepConfig,
    jobs: Vec<JobState>,
    /// Jobs `first_round..` have not sent their first probe; all were due at creation.
    first_round: u32,
    created: Instant,
    /// Later probes, one FIFO per distinct interval: a probe is due at its predecessor's
    /// send instant + interval, and send instants only grow, so each FIFO stays sorted.
    /// Retries ([`Job::retry`]) are due when their predecessor's timeout ran out, in the
    /// FIFO of that timeout, put in their place.
    later: Fifos<(Instant, u32)>,
    /// Due later probes of hosts that answered every probe so far, taken out of `later`
    /// in due order and sent when no other probe is due (see the module docs).
    answered: VecDeque<(Instant, u32)>,
    /// In-flight table: the state of every probe, at its job's `probe_base` + packet
    /// (a reply's job is in its tagged payload, its packet is sequence − `seq_base`).
    probes: Vec<Probe>,
    /// Expiry of every sent probe, one FIFO per distinct timeout (sorted, as above):
    /// (send + timeout, probe index, job).
    expiries: Fifos<Expiry>,
    in_flight: usize,
    /// Retrying jobs whose probe in flight, if lost, queues another ([`Job::retry`]).
    armed: usize,
    /// `max_pps` pacing (`None` when unpaced).
    pacer: Option<SharedPacer>,
    deadline: Option<Instant>,
    events: VecDeque<Event>,
    remaining: usize,
    expired: bool,
    counters: SweepCounters,
    buf: Vec<u8>,
    /// Each address's last job (earlier ones chained by `next_same_addr`): for
    /// duplicate addresses, and for ICMP errors that quote too little of their probe to
    /// carry the tag.
    by_addr: AddrMap,
    /// With [`SweepConfig::keep_rtts`], each probe's round trip (as `probes`, by its
    /// job's `probe_base` + packet) in microseconds, [`NO_RTT`] for none; else empty.
    rtts: Vec<u32>,
}

/// A probe without a round trip in [`Sweep`]'s `rtts`: not answered in time, or not
/// sent.
const NO_RTT: u32 = u32::MAX;

/// Each request's round trip of one job, in the order of its requests ([`Sweep::rtts`]):
/// `None` for one not answered within its timeout (or not sent), as `fping -C` prints
/// `-`. Microseconds, what the clock of a reply gives.
#[derive(Debug, Clone, Copy, Default)]
pub struct Rtts<'a>(&'a [u32]);

impl<'a> Rtts<'a> {
    /// The round trips, one per request of the job.
    pub fn iter(&self) -> impl Iterator<Item = Option<Duration>> + 'a {
        let all = self.0;
        all.iter()
            .map(|&us| (us != NO_RTT).then(|| Duration::from_micros(u64::from(us))))
    }

    /// How many requests: none when the sweep keeps no round trips.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it holds none (round trips not kept).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// What a finished sweep leaves for the next one: its tables, emptied, with their
/// capacity ([`Sweep::recycle`], [`Sweep::new_in`]). A caller that sweeps again and
/// again keeps one: allocated afresh, a sweep's tables (~250 bytes a host) had their
/// pages faulted in again each time, once the allocator had handed the last sweep's
/// back to the kernel (1.5 MB every 10 s for 4,096 hosts). It holds what the largest
/// sweep it served needed.
#[derive(Default)]
pub struct SweepSpace {
    jobs: Vec<JobState>,
    later: Fifos<(Instant, u32)>,
    answered: VecDeque<(Instant, u32)>,
    probes: Vec<Probe>,
    expiries: Fifos<Expiry>,
    events: VecDeque<Event>,
    buf: Vec<u8>,
    by_addr: AddrMap,
    rtts: Vec<u32>,
}

impl std::fmt::Debug for SweepSpace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SweepSpace")
            .field("jobs", &self.jobs.capacity())
            .field("probes", &self.probes.capacity())
            .finish_non_exhaustive()
    }
}

impl Sweep {
    /// Creates a sweep whose first probes are due at `now`.
    pub fn new(jobs: Vec<Job>, cfg: SweepConfig, now: Instant) -> Result<Self, SweepError> {
        Self::new_in(&jobs, cfg, now, SweepSpace::default())
    }

    /// [`Self::new`], in the tables an earlier sweep left (see [`SweepSpace`]); an
    /// error drops them.
    pub fn new_in(
        jobs: &[Job],
        cfg: SweepConfig,
        now: Instant,
        space: SweepSpace,
    ) -> Result<Self, SweepError> {
        let SweepSpace {
            jobs: mut states,
            later,
            answered,
            mut probes,
            expiries,
            events,
            buf,
            mut by_addr,
            mut rtts,
        } = space;
        // Emptied by `recycle`; a space made by `default` is empty too.
        debug_assert!(states.is_empty() && by_addr.is_empty() && events.is_empty());
        by_addr.reserve(jobs.len());
        states.reserve(jobs.len());
        let mut total: u64 = 0;
        for (i, &job) in jobs.iter().enumerate() {
            job.validate(i)?;
            let mut base = 0u64;
            let mut next_same_addr = u32::MAX;
            if let Some(&first) = by_addr.get(&job.addr) {
                // Duplicate address: sequence numbers continue after all earlier jobs.
                let mut k = first;
                while k != u32::MAX {
                    let st = &states[k as usize];
                    base = base.max(
                        u64::from(st.seq_base.wrapping_sub(cfg.seq_start))
                            + u64::from(st.job.packets),
                    );
                    k = st.next_same_addr;
                }
                next_same_addr = first;
            }
            let used = base + u64::from(job.packets);
            if used > 65_536 {
                return Err(SweepError::TooManyProbes {
                    addr: job.addr,
                    probes: used,
                });
            }
            by_addr.insert(job.addr, i as u32);
            states.push(JobState {
                job,
                stats: PingStats::default(),
                next_packet: 0,
                resolved: 0,
                seq_base: cfg.seq_start.wrapping_add(base as u16),
                done: false,
                probe_base: total as u32,
                next_same_addr,
                shift_us: 0,
            });
            total += u64::from(job.packets);
            if total > u64::from(u32::MAX) {
                return Err(SweepError::SweepTooLarge { probes: total });
            }
        }
        let pacer = (cfg.max_pps > 0).then(|| SharedPacer::new(cfg.max_pps, cfg.burst, now));
        let remaining = states.len();
        probes.resize(total as usize, Probe::Idle);
        if cfg.keep_rtts {
            rtts.resize(total as usize, NO_RTT);
        }
        Ok(Sweep {
            jobs: states,
            first_round: 0,
            created: now,
            later,
            answered,
            probes,
            expiries,
            in_flight: 0,
            armed: 0,
            pacer,
            deadline: None,
            events,
            remaining,
            expired: false,
            counters: SweepCounters::default(),
            buf,
            by_addr,
            rtts,
            cfg,
        })
    }

    /// This sweep's tables, emptied, for the next one ([`Self::new_in`]).
    pub fn recycle(self) -> SweepSpace {
        let Sweep {
            mut jobs,
            mut later,
            mut answered,
            mut probes,
            mut expiries,
            mut events,
            buf,
            mut by_addr,
            mut rtts,
            ..
        } = self;
        jobs.clear();
        later.clear();
        answered.clear();
        probes.clear();
        expiries.clear();
        events.clear();
        by_addr.clear();
        rtts.clear();
        SweepSpace {
            jobs,
            later,
            answered,
            probes,
            expiries,
            events,
            buf,
            by_addr,
            rtts,
        }
    }

    /// The configuration this sweep runs with.
    pub fn config(&self) -> &SweepConfig {
        &self.cfg
    }

    /// Number of jobs.
    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    /// Whether the sweep has no jobs.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// The job at `index`.
    pub fn job(&self, index: usize) -> Option<&Job> {
        self.jobs.get(index).map(|j| &j.job)
    }

    /// Current statistics of job `index`.
    pub fn stats(&self, index: usize) -> Option<&PingStats> {
        self.jobs.get(index).map(|j| &j.stats)
    }

    /// Each request's round trip of job `index` so far, with
    /// [`SweepConfig::keep_rtts`] (empty without, or for no such job).
    pub fn rtts(&self, index: usize) -> Rtts<'_> {
        let Some(st) = self.jobs.get(index).filter(|_| !self.rtts.is_empty()) else {
            return Rtts::default();
        };
        let base = st.probe_base as usize;
        Rtts(&self.rtts[base..base + st.job.packets as usize])
    }

    /// Keeps the round trip of probe `p` (of [`Self::rtts`], when kept).
    fn keep_rtt(&mut self, p: usize, rtt: Duration) {
        if let Some(slot) = self.rtts.get_mut(p) {
            *slot = u32::try_from(rtt.as_micros()).map_or(NO_RTT - 1, |us| us.min(NO_RTT - 1));
        }
    }

    /// The jobs not complete yet (no [`Event::HostDone`] queued or taken), with their
    /// statistics so far, in job order: what a sweep cut short has of them. A probe
    /// still awaiting its reply counts as sent and not received, as fping counts it
    /// when interrupted.
    pub fn unfinished(&self) -> impl Iterator<Item = (usize, &PingStats)> {
        let jobs = self.jobs.iter().enumerate();
        jobs.filter(|(_, j)| !j.done).map(|(i, j)| (i, &j.stats))
    }

    /// Totals so far.
    pub fn counters(&self) -> SweepCounters {
        self.counters
    }

    /// Probes currently in flight.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Whether every probe has been handed out (of retrying jobs: none can be queued
    /// any more).
    pub fn all_sent(&self) -> bool {
        self.first_round as usize >= self.jobs.len()
            && self.armed == 0
            && self.answered.is_empty()
            && self.later.iter().all(|(_, q)| q.is_empty())
    }

    /// Whether every job is complete (events may still wait in [`Self::poll_event`]).
    pub fn is_finished(&self) -> bool {
        self.remaining == 0
    }

    /// The earliest queued probe's due time; `None` when every probe was handed out.
    fn peek(&self) -> Option<Instant> {
        if (self.first_round as usize) < self.jobs.len() {
            // First-round probes were due at creation, before anything else.
            return Some(self.created);
        }
        let later = self
            .later
            .iter()
            .filter_map(|(_, q)| q.front().map(|e| e.0));
        later.chain(self.answered.front().map(|e| e.0)).min()
    }

    /// The `later` queue whose front is due earliest, if that is due at `now`.
    fn due_later(&self, now: Instant) -> Option<usize> {
        let mut best: Option<(Instant, usize)> = None;
        for (qi, (_, q)) in self.later.iter().enumerate() {
            if let Some(&(due, _)) = q.front() {
                if due <= now && best.is_none_or(|(b, _)| due < b) {
                    best = Some((due, qi));
                }
            }
        }
        best.map(|(_, qi)| qi)
    }

    /// The job whose probe leaves next at `now`, in the order of the module docs.
    fn take_due(&mut self, now: Instant) -> Option<u32> {
        if (self.first_round as usize) < self.jobs.len() {
            self.first_round += 1;
            return Some(self.first_round - 1);
        }
        while let Some(qi) = self.due_later(now) {
            let (due, j) = self.later[qi].1.pop_front()?;
            let st = &mut self.jobs[j as usize];
            if st.done {
                // A retry whose host was answered meanwhile (`retry_answered`).
                continue;
            }
            if st.shift_us > 0 {
                // Its previous probe left late: `interval` counts from then. Put back
                // in order, once (the shift is spent), so the loop stays bounded.
                let not_before = due + Duration::from_micros(u64::from(st.shift_us));
                st.shift_us = 0;
                if not_before > now {
                    insert_in_order(&mut self.later[qi].1, not_before, (not_before, j), |e| e.0);
                    continue;
                }
            }
            if st.stats.received < st.next_packet {
                return Some(j);
            }
            // Each entry moves at most once, so this loop is bounded by the queue length.
            self.answered.push_back((due, j));
        }
        match self.answered.front() {
            Some(&(due, _)) if due <= now => self.answered.pop_front().map(|e| e.1),
            _ => None,
        }
    }

    /// When the next probe may leave: its host's due time, delayed by pacing.
    /// `None` when every probe has been sent or the sweep is finished.
    pub fn next_send_time(&self) -> Option<Instant> {
        if self.is_finished() {
            return None;
        }
        let due = self.peek()?;
        Some(match &self.pacer {
            Some(p) => due.max(p.next_slot()),
            None => due,
        })
    }

    /// The final deadline (latest send + timeout), known once every probe was sent;
    /// `None` before that and after the sweep finished.
    pub fn deadline(&self) -> Option<Instant> {
        if self.is_finished() || !self.all_sent() {
            return None;
        }
        self.deadline
    }

    /// Earliest expiry of a probe still queued for expiry. Handling an expiry late only
    /// completes its host later: whether a reply counts is judged by its own RTT, not by
    /// when the expiry was handled, so a caller may batch expiries (see
    /// [`Self::poll_timeout`] for the exact next event).
    pub fn next_expiry(&self) -> Option<Instant> {
        self.expiries
            .iter()
            .filter_map(|(_, q)| q.front().map(|e| e.0))
            .min()
    }

    /// When the caller must call back without input: the earlier of the next send time
    /// and the next probe expiry (hosts whose probes all expired complete then), else
    /// the deadline. `None` once finished.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.is_finished() {
            return None;
        }
        let t = match (self.next_send_time(), self.next_expiry()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        t.or_else(|| self.deadline())
    }

    /// Hands out the next due probe, registering it in flight first; `None` when none is
    /// due at `now` (see [`Self::poll_timeout`]).
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Transmit<'_>> {
        if self.is_finished() || self.expired {
            return None;
        }
        let due = self.peek()?;
        if due > now {
            return None;
        }
        // The probe's slot is taken before it is handed out, at `now`.
        let slot = match &self.pacer {
            Some(p) => match p.take(now, 1) {
                s if s.n == 0 => return None,
                s => Some(s),
            },
            None => None,
        };
        let Some(j) = self.take_due(now) else {
            if let (Some(p), Some(s)) = (&self.pacer, slot) {
                p.give_back(s, 0);
            }
            return None;
        };
        let st = &mut self.jobs[j as usize];
        let job = st.job;
        let k = st.next_packet;
        let seq = st.seq_base.wrapping_add(k as u16);
        let ident = self.cfg.ident;
        let token = ProbeToken { job: j, packet: k };
        let probe = st.probe_base + k;
        let slot = &mut self.probes[probe as usize];
        debug_assert!(*slot == Probe::Idle, "each probe is sent once");
        *slot = Probe::InFlight(now);
        self.in_flight += 1;
        st.stats.sent += 1;
        st.next_packet += 1;
        if st.next_packet < job.packets {
            match job.retry {
                None => self
                    .later
                    .keyed(job.interval)
                    .push_back((now + job.interval, j)),
                // Queued if this one is lost (`resolve`).
                Some(_) => self.armed += 1,
            }
        }
        let timeout = job.probe_timeout(k);
        let expiry = now + timeout;
        self.deadline = Some(self.deadline.map_or(expiry, |d| d.max(expiry)));
        self.expiries.keyed(timeout).push_back((expiry, probe, j));
        self.counters.sent += 1;

        let family = Family::of(job.addr);
        self.buf.clear();
        self.buf.resize(HEADER_LEN + job.size, 0);
        tag::write_payload(
            &mut self.buf[HEADER_LEN..],
            self.cfg.key,
            self.cfg.iteration,
            job.addr,
            seq,
            j,
        );
        let mut pkt = EchoPacket::new_unchecked(&mut self.buf[..]);
        pkt.set_msg_type(family.type_of(EchoKind::Request));
        pkt.set_code(0);
        pkt.set_ident(ident);
        pkt.set_seq(seq);
        pkt.set_checksum(0);
        if family == Family::V4 {
            pkt.fill_checksum_v4();
        }
        Some(Transmit {
            addr: job.addr,
            packet: &self.buf,
            token,
        })
    }

    /// Corrects the send instant of probe `token`, still in flight, to `at`: when it
    /// left (the caller sends probes in batches after handing them out, and a batch
    /// may wait for a full socket buffer), so that its RTT and its timeout count from
    /// then. Only moves it later.
    pub fn sent_at(&mut self, token: ProbeToken, at: Instant) {
        let Some(st) = self.jobs.get(token.job as usize) else {
            return;
        };
        let timeout = st.job.probe_timeout(token.packet);
        // A retry is due when this one's timeout runs out, which moves with it.
        let more = st.job.retry.is_none() && st.next_packet < st.job.packets;
        let Some(Probe::InFlight(sent)) =
            self.probes.get_mut((st.probe_base + token.packet) as usize)
        else {
            return;
        };
        if at > *sent {
            // A batch's own time (microseconds) is not worth a second look at the next
            // probe: a batch that waited for the socket buffer is.
            let shift = at.duration_since(*sent);
            if more && shift >= SHIFT_WORTH {
                let us = u32::try_from(shift.as_micros()).unwrap_or(u32::MAX);
                self.jobs[token.job as usize].shift_us = us;
            }
            *sent = at;
            // Its queued expiry, now early, is put back when reached (handle_timeout).
            let expiry = at + timeout;
            self.deadline = Some(self.deadline.map_or(expiry, |d| d.max(expiry)));
        }
    }

    /// Takes probe `packet` of job `j` out of flight, returning its send instant.
    fn take(&mut self, j: u32, packet: u32) -> Option<Instant> {
        let st = self.jobs.get(j as usize)?;
        let slot = self.probes.get_mut((st.probe_base + packet) as usize)?;
        let Probe::InFlight(sent) = *slot else {
            return None;
        };
        *slot = Probe::Idle;
        self.in_flight -= 1;
        Some(sent)
    }

    /// Probe slot `p`, known to be in flight, leaves flight as `to`: [`Self::take`]
    /// without looking the slot up again (a reply already did, on its hot path).
    fn land(&mut self, p: usize, to: Probe) {
        debug_assert!(matches!(self.probes[p], Probe::InFlight(_)));
        self.probes[p] = to;
        self.in_flight -= 1;
    }

    /// Reports that the probe `token` could not be sent: it counts as sent and lost. A
    /// retrying job's tries end with it, as in fping's default mode (which schedules no
    /// timeout for a try it could not send, and sends a retry only when a timeout runs
    /// out): if an earlier try left, a slow reply to it may still answer the host, which
    /// completes when the failed try's timeout would have run out; else it completes
    /// now. A probe whose timeout ran out before the kernel refused it (one the caller
    /// kept retrying) was lost already: it only counts as a send error.
    pub fn on_send_error(&mut self, token: ProbeToken) {
        if let Some(sent) = self.take(token.job, token.packet) {
            self.counters.send_errors += 1;
            let j = token.job as usize;
            let st = &self.jobs[j];
            if st.job.retry.is_none() {
                self.resolve(j, Some(sent));
                return;
            }
            if st.next_packet < st.job.packets {
                // Armed at its hand-out for a retry that will not be queued.
                self.armed -= 1;
            }
            if token.packet > 0 {
                // An earlier try left (each one did, and was lost, or this one would
                // not have been handed out): a reply to it may come within this one's
                // timeout, as fping would judge it, and answer the host.
                self.probes[(st.probe_base + token.packet) as usize] = Probe::Refused(sent);
                return;
            }
            self.complete(j);
        } else if matches!(self.probe(token), Some(Probe::Lost(_))) {
            self.counters.send_errors += 1;
        }
    }

    /// Whether probe `token` is still in flight: handed out, neither answered nor
    /// failed, and its timeout not yet handled as run out ([`Self::handle_timeout`]).
    /// A caller that retries a probe the kernel could not take yet (a full buffer or
    /// device queue) retries it only while it can still count.
    pub fn is_in_flight(&self, token: ProbeToken) -> bool {
        matches!(self.probe(token), Some(Probe::InFlight(_)))
    }

    fn probe(&self, token: ProbeToken) -> Option<Probe> {
        let st = self.jobs.get(token.job as usize)?;
        self.probes
            .get((st.probe_base + token.packet) as usize)
            .copied()
    }

    /// A probe of job `j` is out of flight: answered (`lost` = `None`), or lost, sent at
    /// `lost` (a retrying job's one probe out: its next is due when that probe's
    /// timeout ran out, or runs out).
    fn resolve(&mut self, j: usize, lost: Option<Instant>) {
        let st = &mut self.jobs[j];
        st.resolved += 1;
        let complete = match st.job.retry {
            None => st.resolved >= st.job.packets,
            Some(_) => {
                let more = st.next_packet < st.job.packets;
                if more {
                    self.armed -= 1;
                }
                match lost {
                    Some(sent) if more => {
                        let key = st.job.probe_timeout(st.next_packet - 1);
                        let due = sent + key;
                        let q = self.later.keyed(key);
                        insert_in_order(q, due, (due, j as u32), |e| e.0);
                        false
                    }
                    // Answered, or its last probe lost.
                    _ => true,
                }
            }
        };
        if complete {
            self.complete(j);
        }
    }

    /// Job `j` is complete: reported now, once.
    fn complete(&mut self, j: usize) {
        let st = &mut self.jobs[j];
        if !st.done {
            st.done = true;
            self.remaining -= 1;
            self.events.push_back(Event::HostDone {
                job: j,
                stats: st.stats,
            });
        }
    }

    fn ignore(&mut self, reason: IgnoreReason) -> ReplyOutcome {
        self.counters.count(reason);
        ReplyOutcome::Ignored(reason)
    }

    /// Feeds one datagram read from the socket (`from` = peer address it reported; only
    /// its family counts where the datagram carries its IP header, whose source wins,
    /// see [`wire::parse_reply`]).
    pub fn handle_reply(&mut self, bytes: &[u8], from: IpAddr, now: Instant) -> ReplyOutcome {
        let framing = self.cfg.socket.framing(Family::of(from));
        let rx = match wire::parse_reply(bytes, framing, from) {
            Ok(rx) => rx,
            Err(WireError::NotEcho(_)) | Err(WireError::NotIcmp(_)) => {
                return self.ignore(IgnoreReason::NotEchoReply)
            }
            Err(_) => return self.ignore(IgnoreReason::Malformed),
        };
        if rx.echo.kind != EchoKind::Reply {
            return self.ignore(IgnoreReason::NotEchoReply);
        }
        let ident_ours = match self.cfg.socket {
            SocketKind::Raw => rx.echo.ident == self.cfg.ident,
            SocketKind::Datagram => true,
        };
        let j = match tag::check(rx.echo.payload, self.cfg.key, rx.src, rx.echo.seq) {
            TagCheck::Invalid if ident_ours => {
                // Built by us for the address of the job it names, which is not where
                // it came from: a redirect, which says nothing of a forger.
                let redirected = tag::job_of(rx.echo.payload)
                    .and_then(|j| self.jobs.get(j as usize))
                    .is_some_and(|st| {
                        tag::check(rx.echo.payload, self.cfg.key, st.job.addr, rx.echo.seq)
                            != TagCheck::Invalid
                    });
                return self.ignore(match redirected {
                    true => IgnoreReason::Redirected,
                    false => IgnoreReason::Spoofed,
                });
            }
            TagCheck::Invalid => return self.ignore(IgnoreReason::Foreign),
            TagCheck::Valid { iter, .. } if iter != self.cfg.iteration => {
                return self.ignore(IgnoreReason::Stale)
            }
            TagCheck::Valid { .. } if !ident_ours => return self.ignore(IgnoreReason::Spoofed),
            TagCheck::Valid { job, .. } => job,
        };
        // A valid tag of this iteration names the job it was built for, with its address
        // and sequence: ours. (Checked again all the same: a key is only a key.)
        let Some(k) = self
            .jobs
            .get(j as usize)
            .and_then(|st| st.packet(rx.src, rx.echo.seq))
        else {
            return self.ignore(IgnoreReason::Duplicate);
        };
        let p = (self.jobs[j as usize].probe_base + k) as usize;
        let (j, sent_at) = match self.probes.get(p) {
            Some(&Probe::InFlight(sent)) => (j as usize, sent),
            Some(&Probe::Lost(sent)) => {
                let st = &self.jobs[j as usize];
                if st.job.retry.is_some() && st.stats.received > 0 {
                    // fping's default mode sends every try of a host under one index and
                    // keeps one reply slot for it: once the host answered, a reply to
                    // any of its tries, a copy of the one that answered it or a slow
                    // reply to an earlier try, is a duplicate, however late.
                    return self.ignore(IgnoreReason::Duplicate);
                }
                return match self.retry_answered(j as usize, sent, now) {
                    Some(out) => out,
                    None => self.ignore(IgnoreReason::Late),
                };
            }
            _ => return self.ignore(IgnoreReason::Duplicate),
        };
        let rtt = now.saturating_duration_since(sent_at);
        if rtt > self.jobs[j].job.probe_timeout(k) {
            // Past its timeout, which was not handled yet: judged as if it had been.
            if let Some(out) = self.retry_answered(j, sent_at, now) {
                return out;
            }
            // A copy of it is late too, not a duplicate: the probe was not answered.
            self.land(p, Probe::Lost(sent_at));
            self.resolve(j, Some(sent_at));
            return self.ignore(IgnoreReason::Late);
        }
        self.land(p, Probe::Idle);
        self.keep_rtt(p, rtt);
        self.jobs[j].stats.record(rtt);
        self.counters.received += 1;
        self.resolve(j, None);
        ReplyOutcome::Matched { job: j, rtt }
    }

    /// Feeds one ICMP error read off the socket's error queue (`IP_RECVERR`): `quoted`,
    /// the probe it came back for from its ICMP header on (as much of it as the sender
    /// quoted: RFC 792 asks for 8 bytes, Linux and most routers quote all of a probe);
    /// `to`, where that probe went. The error is kept in its host's
    /// [`PingStats::error`] and changes nothing else: the probe waits out its timeout,
    /// as fping's does (an error says why a probe goes unanswered, not that no reply can
    /// come: a flapping neighbour entry answers the next). Returns the job it came back
    /// for; `None` for an error of no probe of this sweep: another program's, an
    /// earlier sweep's (its identifier or its tag's iteration), or one that names no
    /// echo request.
    pub fn handle_error(
        &mut self,
        quoted: &[u8],
        to: IpAddr,
        error: crate::Unreachable,
    ) -> Option<usize> {
        let packet = EchoPacket::new_checked(quoted).ok()?;
        if Family::of(to).kind_of(packet.msg_type()) != Some(EchoKind::Request) {
            return None;
        }
        if self.cfg.socket == SocketKind::Raw && packet.ident() != self.cfg.ident {
            return None;
        }
        let seq = packet.seq();
        let payload = packet.payload();
        let j = if payload.len() >= TAG_LEN {
            match tag::check(payload, self.cfg.key, to, seq) {
                TagCheck::Valid { iter, job } if iter == self.cfg.iteration => job as usize,
                _ => return None,
            }
        } else {
            // No tag to name the job: the address's jobs, by their sequence ranges.
            let mut k = *self.by_addr.get(&to)?;
            loop {
                let st = self.jobs.get(k as usize)?;
                if st.packet(to, seq).is_some() {
                    break k as usize;
                }
                k = st.next_same_addr;
            }
        };
        let st = self.jobs.get_mut(j)?;
        st.packet(to, seq)?;
        st.stats.error = Some(error);
        self.counters.icmp_errors += 1;
        Some(j)
    }

    /// A reply at `now` to a try of retrying job `j`, sent at `sent`, past that try's
    /// own timeout. fping's default mode sends the next try the moment a try's timeout
    /// runs out (from its timeout handler, not paced) and judges a reply by the timeout
    /// of the try then out (a backoff above 1.0 makes each longer): the reply answers
    /// the host if it came within the timeout of the try fping would have out at `now`,
    /// its tries leaving back to back from the first one that left here. Not from what
    /// this sweep handled or sent by the time it reads the reply: a try whose expiry it
    /// did not handle yet, a retry that waited for its send slot or still waits, or one
    /// whose send failed would make the host's fate depend on when its reply was read,
    /// or on how busy the sweep was. A try whose send failed is fping's last (no retry
    /// follows it). The last try is then done with (a reply to it later is a
    /// duplicate), or its queued retry never leaves. `None`: late (counting jobs:
    /// always).
    fn retry_answered(&mut self, j: usize, sent: Instant, now: Instant) -> Option<ReplyOutcome> {
        let st = &self.jobs[j];
        if st.job.retry.is_none() || st.done || st.next_packet == 0 {
            return None;
        }
        let last = st.next_packet - 1;
        let slot = |k: u32| self.probes[(st.probe_base + k) as usize];
        // The first try left: a failed send ends a host's tries, and completes it at
        // once if it was the first (`on_send_error`).
        let (Probe::InFlight(mut from) | Probe::Lost(mut from)) = slot(0) else {
            return None;
        };
        let mut m = 0;
        // The try fping would have out at `now` (past the last one's end, fping still
        // judges by its timeout): none after one whose send failed, fping's last.
        let end = match slot(last) {
            Probe::Refused(_) => last,
            _ => st.job.packets - 1,
        };
        while m < end && now > from + st.job.probe_timeout(m) {
            from += st.job.probe_timeout(m);
            m += 1;
        }
        let rtt = now.saturating_duration_since(sent);
        if rtt > st.job.probe_timeout(m) {
            return None;
        }
        let out = matches!(slot(last), Probe::InFlight(_));
        // fping had sent try `m` by then, and counts every try it sent (it counts a try
        // when it is answered or runs out); tries this sweep never sends, the reply
        // having come first (a retry queued, an expiry not handled yet), count as sent,
        // so a host's count does not depend on how busy the sweep was either.
        // The try it answers, by fping's count.
        self.keep_rtt((st.probe_base + m) as usize, rtt);
        let stats = &mut self.jobs[j].stats;
        stats.sent = stats.sent.max(m + 1);
        stats.record(rtt);
        self.counters.received += 1;
        if out {
            self.take(j as u32, last);
            self.resolve(j, None);
        } else {
            // Lost, its retry queued (`take_due` drops it once the host is done), or
            // failed to send, the host's last, waiting out its timeout (`Refused`).
            self.complete(j);
        }
        Some(ReplyOutcome::Matched { job: j, rtt })
    }

    /// Advances time: probes whose timeout passed are lost (a host whose probes are all
    /// resolved completes now); at or after the deadline every job not yet complete
    /// completes (in job order) and the in-flight table is emptied.
    pub fn handle_timeout(&mut self, now: Instant) {
        for qi in 0..self.expiries.len() {
            while let Some(&(expiry, probe, j)) = self.expiries[qi].1.front() {
                if expiry > now {
                    break;
                }
                self.expiries[qi].1.pop_front();
                let timeout = self.expiries[qi].0;
                let Some(slot) = self.probes.get_mut(probe as usize) else {
                    continue;
                };
                let (Probe::InFlight(sent) | Probe::Refused(sent)) = *slot else {
                    continue;
                };
                let expiry = sent + timeout;
                if expiry > now {
                    // Sent later than handed out (see `sent_at`): it expires later, in
                    // its place in the queue (kept in expiry order).
                    let item = (expiry, probe, j);
                    insert_in_order(&mut self.expiries[qi].1, expiry, item, |e| e.0);
                    continue;
                }
                if let Probe::Refused(_) = *slot {
                    // Its timeout would have run out: the host's last chance is over
                    // (if a slow reply answered it meanwhile, it is complete already).
                    *slot = Probe::Idle;
                    self.complete(j as usize);
                    continue;
                }
                *slot = Probe::Lost(sent);
                self.in_flight -= 1;
                self.resolve(j as usize, Some(sent));
            }
        }
        let Some(deadline) = self.deadline() else {
            return;
        };
        if now < deadline {
            return;
        }
        self.expired = true;
        // Every sent probe expired by now (the deadline is the latest expiry), so none is
        // still in flight.
        debug_assert_eq!(self.in_flight, 0);
        self.in_flight = 0;
        for (j, st) in self.jobs.iter_mut().enumerate() {
            if !st.done {
                st.done = true;
                self.events.push_back(Event::HostDone {
                    job: j,
                    stats: st.stats,
                });
            }
        }
        self.remaining = 0;
    }

    /// Next output event, in completion order.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }
}
