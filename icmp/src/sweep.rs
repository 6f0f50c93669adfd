//! The sweep state machine: one iteration of echo probes to many hosts.
//!
//! Sans-IO: the caller owns the socket and the clock. It asks [`Sweep::poll_transmit`]
//! for the next due probe and sends it, feeds every received datagram to
//! [`Sweep::handle_reply`], calls [`Sweep::handle_timeout`] when
//! [`Sweep::poll_timeout`] passes, and drains [`Sweep::poll_event`] for per-host results.
//!
//! Invariants:
//! * A probe is registered in the in-flight table *before* its bytes are handed out;
//!   it leaves the table on its reply, on [`Sweep::on_send_error`], or at the deadline.
//! * Keys are `(address, identifier, sequence)`. Sequence numbers are allocated per
//!   address from `SweepConfig::seq_start`, so they are unique per address across the
//!   whole sweep (at most 65,536 probes per address); the identifier is one per sweep
//!   (raw sockets) or ignored (datagram sockets, whose identifier the kernel rewrites).
//! * Every reply is also checked against the payload tag ([`crate::tag`]); a reply that
//!   matches nothing is counted by reason in [`SweepCounters`], never silently dropped.
//! * Pacing: the long-run send rate never exceeds `max_pps`; after an idle or late
//!   wake-up at most `burst` worth of probes go out back to back. Probe `k + 1` of a
//!   host leaves no earlier than `interval` after probe `k` actually left.
//! * The deadline is the latest `send instant + job timeout` over all probes; it is
//!   final once every probe has been sent. Hosts complete as soon as every probe of
//!   theirs is resolved (replied or failed); the rest complete at the deadline.
//! * A reply arriving later than its job's `timeout` after its probe is `Late`, not
//!   received (Zabbix/fping semantics: the timeout is per probe).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::net::IpAddr;
use std::time::{Duration, Instant};

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
    /// How long a reply may take after its request (Zabbix minimum 50 ms).
    pub timeout: Duration,
}

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
        Ok(())
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
    /// More than 65,536 probes to one address would reuse sequence numbers.
    #[error("{addr}: {probes} probes in one sweep, at most 65536 per address")]
    TooManyProbes {
        /// Target.
        addr: IpAddr,
        /// Probes requested.
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
    /// Handle for [`Sweep::on_send_error`].
    pub token: ProbeToken,
}

/// Identifies one in-flight probe: its table key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProbeToken {
    addr: IpAddr,
    ident: u16,
    seq: u16,
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
    /// A valid reply to an earlier iteration.
    Stale,
    /// A valid reply to a probe no longer in flight (duplicate, or after a send error).
    Duplicate,
    /// A valid reply that took longer than its job's timeout.
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
    /// Probes handed out by [`Sweep::poll_transmit`].
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
    /// See [`IgnoreReason::Stale`].
    pub stale: u64,
    /// See [`IgnoreReason::Duplicate`].
    pub duplicate: u64,
    /// See [`IgnoreReason::Late`].
    pub late: u64,
}

impl SweepCounters {
    fn count(&mut self, reason: IgnoreReason) {
        let c = match reason {
            IgnoreReason::Malformed => &mut self.malformed,
            IgnoreReason::NotEchoReply => &mut self.not_echo_reply,
            IgnoreReason::Foreign => &mut self.foreign,
            IgnoreReason::Spoofed => &mut self.spoofed,
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
}

#[derive(Debug, Clone, Copy)]
struct Probe {
    job: u32,
    sent_at: Instant,
}

/// One sweep iteration. See the module docs for the protocol and invariants.
#[derive(Debug)]
pub struct Sweep {
    cfg: SweepConfig,
    jobs: Vec<JobState>,
    /// (due instant, FIFO order, job) of each job's next probe.
    queue: BinaryHeap<Reverse<(Instant, u64, u32)>>,
    order: u64,
    inflight: HashMap<ProbeToken, Probe>,
    next_slot: Instant,
    gap: Duration,
    deadline: Option<Instant>,
    events: VecDeque<Event>,
    remaining: usize,
    expired: bool,
    counters: SweepCounters,
    buf: Vec<u8>,
}

impl Sweep {
    /// Creates a sweep whose first probes are due at `now`.
    pub fn new(jobs: Vec<Job>, cfg: SweepConfig, now: Instant) -> Result<Self, SweepError> {
        let mut per_addr: HashMap<IpAddr, u64> = HashMap::with_capacity(jobs.len());
        let mut states = Vec::with_capacity(jobs.len());
        let mut total: u64 = 0;
        for (i, job) in jobs.into_iter().enumerate() {
            job.validate(i)?;
            let used = per_addr.entry(job.addr).or_insert(0);
            let base = *used;
            *used += u64::from(job.packets);
            if *used > 65_536 {
                return Err(SweepError::TooManyProbes {
                    addr: job.addr,
                    probes: *used,
                });
            }
            total += u64::from(job.packets);
            states.push(JobState {
                job,
                stats: PingStats::default(),
                next_packet: 0,
                resolved: 0,
                seq_base: cfg.seq_start.wrapping_add(base as u16),
                done: false,
            });
        }
        let queue: BinaryHeap<_> = (0..states.len())
            .map(|i| Reverse((now, i as u64, i as u32)))
            .collect();
        let gap = if cfg.max_pps == 0 {
            Duration::ZERO
        } else {
            Duration::from_nanos(1_000_000_000 / u64::from(cfg.max_pps))
        };
        let remaining = states.len();
        Ok(Sweep {
            cfg,
            order: states.len() as u64,
            jobs: states,
            queue,
            inflight: HashMap::with_capacity(total.min(1 << 20) as usize),
            next_slot: now,
            gap,
            deadline: None,
            events: VecDeque::new(),
            remaining,
            expired: false,
            counters: SweepCounters::default(),
            buf: Vec::new(),
        })
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

    /// Totals so far.
    pub fn counters(&self) -> SweepCounters {
        self.counters
    }

    /// Probes currently in flight.
    pub fn in_flight(&self) -> usize {
        self.inflight.len()
    }

    /// Whether every probe has been handed out.
    pub fn all_sent(&self) -> bool {
        self.queue.is_empty()
    }

    /// Whether every job is complete (events may still wait in [`Self::poll_event`]).
    pub fn is_finished(&self) -> bool {
        self.remaining == 0
    }

    /// When the next probe may leave: its host's due time, delayed by pacing.
    /// `None` when every probe has been sent or the sweep is finished.
    pub fn next_send_time(&self) -> Option<Instant> {
        if self.is_finished() {
            return None;
        }
        let Reverse((due, _, _)) = self.queue.peek()?;
        Some((*due).max(self.next_slot))
    }

    /// The final deadline (latest send + timeout), known once every probe was sent;
    /// `None` before that and after the sweep finished.
    pub fn deadline(&self) -> Option<Instant> {
        if self.is_finished() || !self.all_sent() {
            return None;
        }
        self.deadline
    }

    /// When the caller must call back without input: the next send time, else the
    /// deadline. `None` once finished.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.next_send_time().or_else(|| self.deadline())
    }

    /// Hands out the next due probe, registering it in flight first; `None` when none is
    /// due at `now` (see [`Self::poll_timeout`]).
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Transmit<'_>> {
        if self.is_finished() || self.expired {
            return None;
        }
        let &Reverse((due, _, j)) = self.queue.peek()?;
        if due > now || (!self.gap.is_zero() && self.next_slot > now) {
            return None;
        }
        self.queue.pop();
        let st = &mut self.jobs[j as usize];
        let job = st.job;
        let seq = st.seq_base.wrapping_add(st.next_packet as u16);
        let ident = self.cfg.ident;
        let token = ProbeToken {
            addr: job.addr,
            ident: match self.cfg.socket {
                SocketKind::Raw => ident,
                SocketKind::Datagram => 0,
            },
            seq,
        };
        let prev = self.inflight.insert(
            token,
            Probe {
                job: j,
                sent_at: now,
            },
        );
        debug_assert!(prev.is_none(), "sequence numbers are unique per address");
        st.stats.sent += 1;
        st.next_packet += 1;
        if st.next_packet < job.packets {
            self.queue
                .push(Reverse((now + job.interval, self.order, j)));
            self.order += 1;
        }
        let expiry = now + job.timeout;
        self.deadline = Some(self.deadline.map_or(expiry, |d| d.max(expiry)));
        if !self.gap.is_zero() {
            let floor = now.checked_sub(self.cfg.burst).unwrap_or(now);
            self.next_slot = self.next_slot.max(floor) + self.gap;
        }
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

    /// Reports that the probe `token` could not be sent: it counts as sent and lost.
    pub fn on_send_error(&mut self, token: ProbeToken) {
        if let Some(p) = self.inflight.remove(&token) {
            self.counters.send_errors += 1;
            self.resolve(p.job as usize);
        }
    }

    fn resolve(&mut self, j: usize) {
        let st = &mut self.jobs[j];
        st.resolved += 1;
        if !st.done && st.resolved >= st.job.packets {
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

    /// Feeds one datagram read from the socket (`from` = peer address it reported).
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
        match tag::check(rx.echo.payload, self.cfg.key, rx.src, rx.echo.seq) {
            TagCheck::Invalid if ident_ours => return self.ignore(IgnoreReason::Spoofed),
            TagCheck::Invalid => return self.ignore(IgnoreReason::Foreign),
            TagCheck::Valid { iter } if iter != self.cfg.iteration => {
                return self.ignore(IgnoreReason::Stale)
            }
            TagCheck::Valid { .. } if !ident_ours => return self.ignore(IgnoreReason::Spoofed),
            TagCheck::Valid { .. } => {}
        }
        let token = ProbeToken {
            addr: rx.src,
            ident: match self.cfg.socket {
                SocketKind::Raw => rx.echo.ident,
                SocketKind::Datagram => 0,
            },
            seq: rx.echo.seq,
        };
        let Some(probe) = self.inflight.remove(&token) else {
            return self.ignore(IgnoreReason::Duplicate);
        };
        let j = probe.job as usize;
        let rtt = now.saturating_duration_since(probe.sent_at);
        let outcome = if rtt > self.jobs[j].job.timeout {
            self.counters.count(IgnoreReason::Late);
            ReplyOutcome::Ignored(IgnoreReason::Late)
        } else {
            self.jobs[j].stats.record(rtt);
            self.counters.received += 1;
            ReplyOutcome::Matched { job: j, rtt }
        };
        self.resolve(j);
        outcome
    }

    /// Advances time: at or after the deadline every job not yet complete completes
    /// (in job order) and the in-flight table is emptied.
    pub fn handle_timeout(&mut self, now: Instant) {
        let Some(deadline) = self.deadline() else {
            return;
        };
        if now < deadline {
            return;
        }
        self.expired = true;
        self.inflight.clear();
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
