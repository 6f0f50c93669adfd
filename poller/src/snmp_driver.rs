//! SNMP socket driver: runs [`snmp::Iteration`]s over a few shared UDP sockets.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use poller::snmp_driver::{SnmpDriver, SnmpDriverOptions, SnmpHostJob};
//! let mut driver = SnmpDriver::open(SnmpDriverOptions::default())?; // once per process
//! let jobs = vec![SnmpHostJob::new(
//!     "127.0.0.1:161".parse().unwrap(),
//!     "public".into(),
//!     vec![".1.3.6.1.2.1.1.3.0".parse().unwrap()],
//! )];
//! let report = driver
//!     .run_iteration(&jobs, |job, oid, result| println!("{job}/{oid}: {result:?}"))
//!     .await;
//! println!("{} requests in {:?}", report.stats.requests, report.wall);
//! # Ok(()) }
//! ```
//!
//! Invariants and limits:
//! * A fixed set of non-blocking UDP sockets ([`SnmpDriverOptions::sockets`] IPv4 ones
//!   bound to `0.0.0.0:0`, plus one IPv6 socket on `[::]:0` when the host has IPv6),
//!   shared by all hosts: 8,000 requests in flight need 8,000 in-flight table entries,
//!   not 8,000 file descriptors. A host always uses the same socket (job index modulo).
//! * Receive buffers are enlarged to [`SnmpDriverOptions::rcvbuf`] (`SO_RCVBUFFORCE`
//!   when privileged, else `SO_RCVBUF`, capped by `net.core.rmem_max`).
//! * The loop alternates a bounded receive turn (drains every socket in `recvmmsg`
//!   batches, at most [`RECV_TURN`] datagrams) and a bounded send turn (at most
//!   [`SEND_TURN`] datagrams in `sendmmsg` batches, paced at
//!   [`SnmpDriverOptions::max_pps`] by a [`SharedPacer`], the driver's own or one that
//!   several drivers share: [`SnmpDriver::share_pacer`]), so sending can never starve
//!   receiving and replies
//!   are read while requests are still going out. A datagram the kernel refuses
//!   (full send buffer) is kept and sent first once the socket is writable.
//! * Request matching, retries and per-host chains live in the sans-IO engine; this
//!   module only moves bytes and reads the clock. Each iteration starts at a random
//!   request-id, so late answers to an earlier iteration are counted and dropped.
//! * ICMP errors (a port unreachable from a host whose agent is down, a router's host
//!   unreachable, a firewall's prohibited) come back on these unconnected sockets
//!   through their error queues (`IP_RECVERR`), whose readiness wakes the loop: read at
//!   once (they take receive buffer space that replies need), and handed to the engine
//!   with the address they came back for ([`snmp::Iteration::handle_unreachable`]):
//!   the host still times out, once, as with net-snmp, but its items say what came
//!   back ("ICMP port unreachable from ...") instead of a bare timeout.
//! * Learned OIDs-per-request limits and discovered SNMPv3 engines (ID, clock, salt
//!   counter: [`snmp::HostMemory`]) persist across iterations, so an agent's engine is
//!   discovered once per driver; those of an address the plan no longer polls are
//!   forgotten at the driver's first iteration on the new plan
//!   ([`SnmpDriver::follow_plan`]). Each iteration gets a random salt seed: two drivers
//!   polling one agent with one user never encrypt under the same IV.
//! * Communities and SNMPv3 keys are secrets: nothing here logs or formats them.
//! * Must be used inside a tokio runtime with I/O and time enabled; the sockets are
//!   registered with the runtime of the first `run_iteration` call.
//! * Time is tokio's clock (`tokio_now`): the monotonic clock, except in a test that
//!   pauses tokio's time, where timeouts then follow the same virtual clock as the
//!   daemon's schedule (a test of the engine does not depend on the machine's speed).

use std::collections::hash_map::RandomState;
use std::collections::HashSet;
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::mem::size_of;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use icmp::SharedPacer;
use snmp::{Event, HostMemory, ItemFailure, Iteration, IterationOptions};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::plan::Plan;
use crate::sockets::{read_error_queue, set_recverr, sockaddr_to_std, ErrorsRead, SendAttempts};
use crate::source::SourceAddrs;
use tokio::io::Interest;
use tokio::net::UdpSocket;

use crate::value::{ErrorReason, ItemError};

/// Now, by tokio's clock: [`Instant::now`] in a build (tokio's `test-util` is a
/// dev-dependency), the virtual clock in a test that pauses time.
fn tokio_now() -> Instant {
    tokio::time::Instant::now().into_std()
}

pub use snmp::{HostJob as SnmpHostJob, Stats as SnmpStats};

/// Most datagrams read in one receive turn before the loop sends again.
pub const RECV_TURN: usize = 4096;
/// Most datagrams sent in one send turn before the loop receives again.
pub const SEND_TURN: usize = 256;

/// Options of [`SnmpDriver::open`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnmpDriverOptions {
    /// IPv4 sockets to spread hosts over. Default 4.
    pub sockets: usize,
    /// Receive buffer to request per socket, bytes. Default 8 MiB.
    pub rcvbuf: usize,
    /// Global send rate, datagrams per second (retries included); 0 = unpaced.
    /// Default 50,000.
    pub max_pps: u32,
    /// Requests in flight over all hosts. Default 10,000.
    pub max_inflight_total: usize,
    /// The address requests leave from, per family (`daemon.source_ip`); none: the
    /// kernel's choice. Default none.
    pub source: SourceAddrs,
}

impl Default for SnmpDriverOptions {
    fn default() -> Self {
        SnmpDriverOptions {
            sockets: 4,
            rcvbuf: 8 << 20,
            max_pps: 50_000,
            max_inflight_total: 10_000,
            source: SourceAddrs::default(),
        }
    }
}

/// What one iteration did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SnmpIterationReport {
    /// Engine counters: requests, retries, timeouts, hosts_timed_out, malformed, stale,
    /// unknown request-id, wrong community / source / version, not authentic (v3),
    /// reports (v3), tooBig, items ok / failed.
    pub stats: SnmpStats,
    /// Receive / send errors reported by the sockets (ICMP errors included).
    pub socket_errors: u64,
    /// Datagrams received (matched or not).
    pub datagrams: u64,
    /// Times the send turn stopped because the socket buffer was full.
    pub would_block: u64,
    /// Datagrams longer than the receive buffer (dropped; cannot happen for UDP).
    pub truncated: u64,
    pub wall: Duration,
}

/// Long-lived SNMP poller: sockets plus per-host learned limits. See the module docs.
#[derive(Debug)]
pub struct SnmpDriver {
    opts: SnmpDriverOptions,
    /// None: unpaced (`max_pps` 0).
    pacer: Option<Arc<SharedPacer>>,
    v4: Vec<Slot>,
    v6: Option<Slot>,
    memory: HostMemory,
    /// [`Plan::id`] of the plan `memory` was last fitted to (see [`Self::follow_plan`]).
    plan: u64,
    /// recvmmsg buffers (2 MiB of address space, only touched pages count), kept
    /// across iterations.
    recv: Option<Box<RecvBatch>>,
}

#[derive(Debug)]
enum Slot {
    Std(std::net::UdpSocket),
    Tokio(UdpSocket),
    Empty,
}

impl Slot {
    fn register(&mut self) -> io::Result<()> {
        if let Slot::Std(_) = self {
            let Slot::Std(s) = std::mem::replace(self, Slot::Empty) else {
                return Ok(());
            };
            *self = Slot::Tokio(UdpSocket::from_std(s)?);
        }
        Ok(())
    }

    fn get(&self) -> Option<&UdpSocket> {
        match self {
            Slot::Tokio(s) => Some(s),
            _ => None,
        }
    }
}

fn random_u64() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u64(0x736e_6d70);
    h.finish()
}

fn open_udp(v6: bool, rcvbuf: usize, source: SourceAddrs) -> io::Result<std::net::UdpSocket> {
    let domain = if v6 { Domain::IPV6 } else { Domain::IPV4 };
    let sock = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    if v6 {
        sock.set_only_v6(true)?;
    }
    sock.set_nonblocking(true)?;
    crate::sockets::set_recv_buffer(&sock, rcvbuf)?;
    // ICMP errors to the error queue, with the destination they came back for: the
    // kernel tells an unconnected socket nothing of them otherwise (see `drain_errors`).
    set_recverr(sock.as_raw_fd(), v6)?;
    source.bind_any(&sock, v6)?;
    Ok(sock.into())
}

/// A timeout's text ([`item_error`]'s, which the CLI's walks use too): Zabbix's `Timeout
/// while connecting to "<addr>:<port>".`, then what netpoller knows: the attempts
/// (`retries` + 1) and, when replies came and none was taken, why the last was not
/// (`dropped`). The one place these words are built.
fn timeout_text(
    addr: std::net::SocketAddr,
    retries: u32,
    dropped: Option<&snmp::Dropped>,
) -> String {
    let (taken, why) = match dropped {
        // Not a reply: nothing came to take.
        Some(why @ snmp::Dropped::Unreachable(_)) => ("", format!(": {why}")),
        Some(why) => (" taken", format!(": {why}")),
        None => ("", String::new()),
    };
    format!(
        "Timeout while connecting to \"{addr}\". No SNMP response{taken} after {} attempt(s){why}",
        retries + 1
    )
}

/// What a timeout without a reply at all (`f`) adds to [`timeout_text`]. An SNMPv3
/// agent drops a request it cannot decrypt without a word (net-snmp's snmpget shows a
/// timeout too), so an authPriv user's plain [`ItemFailure::Timeout`] says that a wrong
/// privacy passphrase or protocol looks the same: all an operator gets when nothing was
/// sent to tell them apart (no retry, or the iteration's deadline came first). An
/// engine discovery (it carries no key) tells them apart: unanswered, the first one or
/// the one sent beside a retry, the agent is down, unreachable or speaks no SNMPv3;
/// answered while the requests were not, a key is wrong. net-snmp's agent drops a
/// request for a context it does not serve unanswered too (no Report), at every level:
/// a user with a `context_name` (a Cisco `vlan-10`) is told that it looks the same.
fn silence_hint(f: &ItemFailure, user: Option<&snmp::v3::UsmUser>) -> String {
    let context = user
        .map(|u| u.context())
        .filter(|c| !c.is_empty())
        .map(|c| format!("context_name {:?}", String::from_utf8_lossy(c)));
    let auth_priv = user.is_some_and(|u| u.level() == snmp::v3::SecurityLevel::AuthPriv);
    match (f, context) {
        (ItemFailure::DiscoveryTimeout, _) => {
            " (SNMPv3: the engine discovery, which needs no passphrase, went unanswered)".into()
        }
        (ItemFailure::TimeoutDiscoveryAnswered, None) => {
            " (SNMPv3 authPriv: the agent answers its engine discovery: a wrong privacy passphrase or protocol?)".into()
        }
        (ItemFailure::TimeoutDiscoveryAnswered, Some(c)) => format!(
            " (SNMPv3 authPriv: the agent answers its engine discovery: a wrong privacy passphrase or protocol, or a {c} it does not serve?)"
        ),
        (_, None) if auth_priv => {
            " (SNMPv3 authPriv: a wrong privacy passphrase or protocol looks the same)".into()
        }
        (_, Some(c)) if auth_priv => format!(
            " (SNMPv3 authPriv: a wrong privacy passphrase or protocol, or a {c} the agent does not serve, looks the same)"
        ),
        (_, Some(c)) => format!(
            " (SNMPv3: a {c} the agent does not serve looks the same: agents drop such requests unanswered)"
        ),
        _ => String::new(),
    }
}

/// Maps an engine failure to the item error the sink and metrics understand.
///
/// Each text starts with what Zabbix (checks_snmp.c `zbx_get_snmp_response_error`,
/// 6.0 to 7.0) shows for the same failure, so an operator comparing the two reads the
/// same words, and goes on with what netpoller knows besides (attempts, why replies were
/// not taken, the Report's counter). The address is a socket address: `[::1]:161` for
/// IPv6, where Zabbix prints `::1:161`.
pub fn item_error(job: &SnmpHostJob, f: &ItemFailure) -> ItemError {
    match f {
        ItemFailure::Timeout
        | ItemFailure::TimeoutDiscoveryAnswered
        | ItemFailure::DiscoveryTimeout => ItemError::new(
            ErrorReason::Timeout,
            timeout_text(job.addr, job.retries, None) + &silence_hint(f, job.usm.as_deref()),
        ),
        // The agent's own answer, decoded: Zabbix's "not supported" (NOTSUPPORTED in
        // checks_snmp.c, so a CHECK_NOT_SUPPORTED step handles it).
        ItemFailure::ErrorStatus(_)
        | ItemFailure::ErrorIndexOutOfBounds { .. }
        | ItemFailure::TooManyVarbinds { .. }
        | ItemFailure::EmptyResponse => ItemError::new(ErrorReason::Unsupported, f.to_string()),
        ItemFailure::Send(text) => ItemError::new(ErrorReason::Send, text.clone()),
        // Never reported by `run_iteration_until`; said as what it is elsewhere.
        ItemFailure::Stopped => ItemError::new(ErrorReason::Timeout, f.to_string()),
        // Replies came and were dropped: Zabbix's reason would be a timeout too (the
        // item got no value in time; net-snmp drops such replies), with the text saying
        // what was seen.
        ItemFailure::Dropped(why) => ItemError::new(
            match why {
                snmp::Dropped::Undecodable(_) => ErrorReason::Decode,
                snmp::Dropped::FromElsewhere(_)
                | snmp::Dropped::WrongCommunity
                | snmp::Dropped::WrongVersion(_)
                | snmp::Dropped::NotResponse(_)
                | snmp::Dropped::NotAuthentic
                | snmp::Dropped::NotDecrypted
                // net-snmp waits out its timeout whatever comes back (Zabbix says
                // "Timeout while connecting"): the same reason, the error in the text.
                | snmp::Dropped::Unreachable(_) => ErrorReason::Timeout,
            },
            timeout_text(job.addr, job.retries, Some(why)),
        ),
        // Zabbix too makes the items of a host whose USM user the agent refuses
        // unsupported, with net-snmp's words for the Report: `Cannot connect to
        // "<addr>:<port>": Unknown user name.`
        ItemFailure::Report(kind) => {
            ItemError::new(ErrorReason::Unsupported, report_text(job.addr, *kind))
        }
    }
}

/// An SNMPv3 agent's Report refusing a request ([`item_error`]'s, which the CLI's walks
/// use too): net-snmp's words as Zabbix shows them (`Cannot connect to "<addr>:<port>":
/// Unknown user name.`), then the Report's counter when netpoller knows it.
fn report_text(addr: std::net::SocketAddr, kind: snmp::v3::ReportKind) -> String {
    // Named unless it is no counter netpoller knows (no String built for it).
    let (colon, counter) = match kind {
        snmp::v3::ReportKind::Other => ("", ""),
        k => (": ", k.counter()),
    };
    format!(
        "Cannot connect to \"{addr}\": {}. (the SNMPv3 agent refused the request with a Report{colon}{counter})",
        kind.net_snmp_text()
    )
}

impl SnmpDriver {
    /// Opens the sockets. Fails only when no IPv4 socket can be opened; a missing IPv6
    /// stack only makes IPv6 jobs fail with a send error.
    pub fn open(opts: SnmpDriverOptions) -> io::Result<Self> {
        let v4 = (0..opts.sockets.max(1))
            .map(|_| open_udp(false, opts.rcvbuf, opts.source).map(Slot::Std))
            .collect::<io::Result<Vec<_>>>()?;
        // Without IPv6 only IPv6 jobs fail; but a source asked for IPv6 must bind.
        let v6 = match open_udp(true, opts.rcvbuf, opts.source) {
            Ok(s) => Some(Slot::Std(s)),
            Err(e) if opts.source.v6.is_some() => return Err(e),
            Err(_) => None,
        };
        Ok(SnmpDriver {
            opts,
            pacer: SharedPacer::shared(opts.max_pps, SEND_BURST),
            v4,
            v6,
            memory: HostMemory::default(),
            plan: 0,
            recv: None,
        })
    }

    pub fn options(&self) -> SnmpDriverOptions {
        self.opts
    }

    /// Share `max_pps` with other drivers: this driver's iterations then send only on
    /// slots taken from `pacer` (and [`SnmpDriverOptions::max_pps`] no longer applies),
    /// so drivers whose iterations overlap stay under one rate together.
    pub fn share_pacer(&mut self, pacer: Arc<SharedPacer>) {
        self.pacer = Some(pacer);
    }

    /// Learned per-host limits (tooBig / short answers), kept across iterations.
    pub fn memory(&self) -> &HostMemory {
        &self.memory
    }

    /// Iterations from now on poll hosts of `plan`: when it is not the plan of the last
    /// call (a reload or a discovery replaced it), what is remembered of addresses it
    /// no longer polls is forgotten, and kept for the others. Called before each
    /// iteration: costs a look at the plan's hosts once per plan and driver.
    pub fn follow_plan(&mut self, plan: &Plan) {
        if std::mem::replace(&mut self.plan, plan.id()) == plan.id() {
            return;
        }
        let planned: HashSet<SocketAddr> =
            plan.hosts.iter().filter_map(|h| h.snmp_addr()).collect();
        self.memory.retain(|a| planned.contains(a));
    }

    #[cfg(test)]
    pub(crate) fn memory_mut(&mut self) -> &mut HostMemory {
        &mut self.memory
    }

    /// Local addresses of the sockets (IPv4 ones first).
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.v4
            .iter()
            .chain(self.v6.iter())
            .filter_map(|s| match s {
                Slot::Std(s) => s.local_addr().ok(),
                Slot::Tokio(s) => s.local_addr().ok(),
                Slot::Empty => None,
            })
            .collect()
    }

    /// Polls every OID of every job once. `on_result(job index, oid index, result)` is
    /// called as results arrive (exceptions such as noSuchInstance arrive as `Ok`
    /// values; convert them with [`crate::snmp_convert`]). Returns when every item has
    /// been reported: at the latest one `timeout × (retries + 1)` after a host's last
    /// answered request.
    pub async fn run_iteration<F>(
        &mut self,
        jobs: &[SnmpHostJob],
        on_result: F,
    ) -> SnmpIterationReport
    where
        F: FnMut(usize, usize, Result<snmp::VarValue, ItemError>),
    {
        self.run_iteration_until(jobs, std::future::pending(), Duration::MAX, on_result)
            .await
    }

    /// [`Self::run_iteration`], stopped when `stop` completes (the daemon stops): from
    /// then on nothing is sent, the requests in flight are waited for until their
    /// attempt's timeout but at most `grace`, and the items never asked (or not
    /// answered by then) are not reported at all: the iteration ends within one
    /// timeout and at most `grace` after the stop (a timeout may be 10 minutes, a
    /// service manager's stop timeout 30 s), not after its slowest host's remaining
    /// requests.
    pub async fn run_iteration_until<F, S>(
        &mut self,
        jobs: &[SnmpHostJob],
        stop: S,
        grace: Duration,
        mut on_result: F,
    ) -> SnmpIterationReport
    where
        F: FnMut(usize, usize, Result<snmp::VarValue, ItemError>),
        S: std::future::Future<Output = ()>,
    {
        tokio::pin!(stop);
        let mut stopped = false;
        // When the stop's grace runs out.
        let mut cut_at: Option<Instant> = None;
        let start = tokio_now();
        let mut report = SnmpIterationReport::default();
        let mut reg_error = None;
        for s in self.v4.iter_mut().chain(self.v6.iter_mut()) {
            if let Err(e) = s.register() {
                reg_error = Some(e);
            }
        }
        let v4: Vec<&UdpSocket> = self.v4.iter().filter_map(Slot::get).collect();
        let v6 = self.v6.as_ref().and_then(Slot::get);
        let opts = IterationOptions {
            first_request_id: random_u64() as u32,
            salt_seed: random_u64(),
            deadline: None,
            max_inflight_total: self.opts.max_inflight_total,
        };
        let mut it = Iteration::new(jobs, &self.memory, opts);
        if v4.is_empty() {
            // Cannot happen after a successful open unless tokio refused the sockets.
            let text = format!(
                "no usable socket: {}",
                reg_error.map(|e| e.to_string()).unwrap_or_default()
            );
            let mut buf = Vec::new();
            while let Some(t) = it.poll_transmit(tokio_now(), &mut buf) {
                it.handle_send_error(t.request_id, &text);
            }
        }
        let all: Vec<&UdpSocket> = v4.iter().copied().chain(v6).collect();
        let v6_index = v6.map(|_| all.len() - 1);
        let sock_of = |t: &snmp::Transmit| -> Option<usize> {
            if t.dst.is_ipv4() {
                (!v4.is_empty()).then(|| t.host % v4.len())
            } else {
                v6_index
            }
        };
        let mut rb = self
            .recv
            .take()
            .unwrap_or_else(|| Box::new(RecvBatch::new()));
        let mut pool: Vec<Vec<u8>> = Vec::new();
        let pacer = self.pacer.clone();
        // Per socket: datagrams collected in this send turn (flushed with sendmmsg);
        // what a full socket buffer refused stays there for the next turn.
        let mut outq: Vec<Vec<Out>> = all.iter().map(|_| Vec::with_capacity(SEND_BATCH)).collect();
        let mut blocked: Option<usize> = None;
        // One timer, reset each wait (creating a new one per wait costs a timer-wheel
        // registration every loop).
        let sleep = tokio::time::sleep_until(start.into());
        tokio::pin!(sleep);
        let mut timeouts = crate::sockets::TimeoutGate::default();
        // Each socket's wait for error readiness (see `errored` below), kept from one
        // wait to the next: made anew for each, its registration and allocation cost
        // the SNMP thread a fifth more CPU per value.
        let mut err_waits: Vec<_> = all
            .iter()
            .map(|s| Box::pin(s.ready(Interest::ERROR)))
            .collect();

        loop {
            // Receive turn: drain every socket (bounded), recvmmsg batches, until the
            // kernel says WouldBlock (which also clears tokio's readiness flag).
            let now = tokio_now();
            let mut budget = RECV_TURN;
            for s in &all {
                // Its ICMP errors first: queued, they take receive buffer space the
                // replies need (see `drain_errors`).
                drain_errors(s, &mut it);
                while budget > 0 {
                    match rb.recv(s) {
                        Ok(n) => {
                            budget = budget.saturating_sub(n);
                            report.datagrams += n as u64;
                            for i in 0..n {
                                match rb.get(i) {
                                    Some((src, bytes)) => {
                                        it.handle_datagram(normalize(src), bytes, now);
                                    }
                                    None => report.truncated += 1,
                                }
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(_) => {
                            // ECONNREFUSED and friends: an ICMP error for some earlier
                            // datagram, its details in the error queue (read above, or
                            // at the next turn: its readiness wakes the loop). Counted
                            // against the budget so a persistent error cannot spin here.
                            report.socket_errors += 1;
                            budget -= 1;
                        }
                    }
                }
            }
            // As of the turn's start, once the sockets were read empty (see `sockets`).
            if timeouts.after_turn(budget == 0) {
                it.handle_timeout(now);
            }
            let now = tokio_now();
            if cut_at.is_some_and(|c| now >= c) {
                it.abandon();
            }
            Self::drain_events(&mut it, jobs, &mut on_result);
            if it.is_done() {
                break;
            }

            // Send turn (bounded, paced): left-overs first, then new datagrams.
            let mut queued: usize = outq.iter().map(Vec::len).sum();
            if blocked.is_none() && queued < SEND_TURN {
                let want = SEND_TURN - queued;
                let slots = pacer.as_ref().map(|p| p.take(now, want));
                let allowed = slots.map_or(want, |s| s.n);
                let mut used = 0;
                while used < allowed {
                    let mut buf = pool.pop().unwrap_or_else(|| Vec::with_capacity(256));
                    let Some(t) = it.poll_transmit(now, &mut buf) else {
                        pool.push(buf);
                        break;
                    };
                    used += 1;
                    let Some(k) = sock_of(&t) else {
                        it.handle_send_error(t.request_id, "no socket for this address family");
                        pool.push(buf);
                        continue;
                    };
                    outq[k].push(Out {
                        dst: SockAddr::from(t.dst),
                        request_id: t.request_id,
                        bytes: buf,
                    });
                    queued += 1;
                }
                if let (Some(p), Some(s)) = (&pacer, slots) {
                    p.give_back(s, used);
                }
            }
            let mut sent = 0;
            blocked = None;
            for (k, q) in outq.iter_mut().enumerate() {
                let mut attempts = SendAttempts::default();
                while !q.is_empty() {
                    match send_batch(all[k], q) {
                        Ok(n) => {
                            sent += n;
                            pool.extend(q.drain(..n).map(|o| o.bytes));
                            attempts = SendAttempts::default();
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            report.would_block += 1;
                            blocked = Some(k);
                            break;
                        }
                        Err(e) => {
                            // The first datagram failed: maybe for an earlier one's ICMP
                            // error, pending on the socket (now consumed), then again;
                            // else the others may still go.
                            report.socket_errors += 1;
                            if attempts.retry(read_errors(all[k].as_raw_fd(), &mut it).messages) {
                                continue;
                            }
                            attempts = SendAttempts::default();
                            let o = q.remove(0);
                            it.handle_send_error(o.request_id, &e.to_string());
                            pool.push(o.bytes);
                        }
                    }
                }
            }
            Self::drain_events(&mut it, jobs, &mut on_result);
            if it.is_done() {
                break;
            }
            if sent >= SEND_TURN {
                // More to send right away: yield to let other tasks run, then go on.
                tokio::task::yield_now().await;
                continue;
            }

            // Wait for a datagram, a timer, the pacer or (when blocked) writability.
            let more_to_send = it.has_sendable();
            let mut wake = it.poll_timeout();
            if more_to_send && blocked.is_none() {
                let p = pacer.as_ref().map_or(now, |p| p.next_slot());
                wake = Some(wake.map_or(p, |w| w.min(p)));
            }
            if let Some(c) = cut_at {
                wake = Some(wake.map_or(c, |w| w.min(c)));
            }
            let wake = wake.unwrap_or_else(|| tokio_now() + Duration::from_millis(100));
            sleep.as_mut().reset(wake.into());
            let readable = std::future::poll_fn(|cx| {
                for s in &all {
                    if s.poll_recv_ready(cx).is_ready() {
                        return Poll::Ready(());
                    }
                }
                Poll::Pending
            });
            // An ICMP error queued alone makes no socket readable: its own readiness
            // (epoll's EPOLLERR) wakes the loop to read it. A wait that saw it is
            // replaced by a new one (not polled yet: it registers at the next wait).
            let errored = std::future::poll_fn(|cx| {
                use std::future::Future as _;
                let mut woke = false;
                for (w, s) in err_waits.iter_mut().zip(&all) {
                    if w.as_mut().poll(cx).is_ready() {
                        w.set(s.ready(Interest::ERROR));
                        woke = true;
                    }
                }
                if woke {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            });
            let writable = async {
                match blocked {
                    Some(k) => {
                        let _ = all[k].writable().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                _ = readable => {}
                _ = errored => {}
                _ = writable => {}
                _ = &mut sleep => {}
                _ = &mut stop, if !stopped => {
                    stopped = true;
                    cut_at = tokio_now().checked_add(grace);
                    it.stop();
                    Self::drain_events(&mut it, jobs, &mut on_result);
                    if it.is_done() {
                        break;
                    }
                }
            }
        }
        // Datagrams never sent (the iteration ended): nothing to do, their requests
        // were failed by the engine already.
        self.recv = Some(rb);
        it.save_learned(&mut self.memory);
        report.stats = *it.stats();
        report.wall = tokio_now().saturating_duration_since(start);
        report
    }

    fn drain_events<F>(it: &mut Iteration<'_>, jobs: &[SnmpHostJob], on_result: &mut F)
    where
        F: FnMut(usize, usize, Result<snmp::VarValue, ItemError>),
    {
        while let Some(e) = it.poll_event() {
            if let Event::Item {
                result: Err(ItemFailure::Stopped),
                ..
            } = e
            {
                // Not polled: nothing to report (see `run_iteration_until`).
                continue;
            }
            if let Event::Item { host, item, result } = e {
                on_result(host, item, result.map_err(|f| item_error(&jobs[host], &f)));
            }
        }
    }
}

/// IPv4-mapped IPv6 sources (never expected, as the v6 socket is v6-only) back to v4,
/// so a reply is compared with the address the request went to.
fn normalize(src: SocketAddr) -> SocketAddr {
    match src {
        SocketAddr::V6(a) => match a.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::from((v4, a.port())),
            None => src,
        },
        v4 => v4,
    }
}

/// Most of `max_pps` sent at once after an idle spell: 10 ms worth.
pub const SEND_BURST: Duration = Duration::from_millis(10);

/// Datagrams per `recvmmsg` call.
const RECV_BATCH: usize = 32;
/// Buffer per received datagram: the largest UDP payload, so big answers are never cut.
const RECV_BUF: usize = 65_536;
/// Datagrams per `sendmmsg` call.
const SEND_BATCH: usize = 64;

/// One datagram waiting for `sendmmsg`.
struct Out {
    dst: SockAddr,
    request_id: i32,
    bytes: Vec<u8>,
}

/// Sends up to [`SEND_BATCH`] datagrams of `q` with one `sendmmsg`; returns how many
/// left (always the first ones, in order).
fn send_batch(sock: &UdpSocket, q: &[Out]) -> io::Result<usize> {
    let n = q.len().min(SEND_BATCH);
    sock.try_io(Interest::WRITABLE, || {
        // SAFETY: iovec and mmsghdr are plain C structs for which all-zero is valid.
        let mut iov: [libc::iovec; SEND_BATCH] = unsafe { std::mem::zeroed() };
        let mut hdrs: [libc::mmsghdr; SEND_BATCH] = unsafe { std::mem::zeroed() };
        for (i, o) in q[..n].iter().enumerate() {
            iov[i].iov_base = o.bytes.as_ptr() as *mut libc::c_void;
            iov[i].iov_len = o.bytes.len();
            hdrs[i].msg_hdr.msg_name = o.dst.as_ptr() as *mut libc::c_void;
            hdrs[i].msg_hdr.msg_namelen = o.dst.len();
            hdrs[i].msg_hdr.msg_iov = &mut iov[i];
            hdrs[i].msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: the first `n` headers point at live buffers, addresses and iovecs that
        // outlive the call; the kernel only reads them (and writes msg_len).
        let r = unsafe {
            libc::sendmmsg(
                sock.as_raw_fd(),
                hdrs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
            )
        };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r as usize)
        }
    })
}

/// Buffers for `recvmmsg`, reused across calls and iterations of one driver run.
struct RecvBatch {
    bufs: Vec<u8>,
    addrs: Vec<libc::sockaddr_storage>,
    lens: [usize; RECV_BATCH],
    truncated: [bool; RECV_BATCH],
}

impl std::fmt::Debug for RecvBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RecvBatch")
    }
}

impl RecvBatch {
    fn new() -> RecvBatch {
        RecvBatch {
            bufs: vec![0u8; RECV_BATCH * RECV_BUF],
            // SAFETY: sockaddr_storage is a plain C struct; all-zero is valid.
            addrs: vec![unsafe { std::mem::zeroed() }; RECV_BATCH],
            lens: [0; RECV_BATCH],
            truncated: [false; RECV_BATCH],
        }
    }

    /// Reads up to [`RECV_BATCH`] datagrams with one `recvmmsg`.
    fn recv(&mut self, sock: &UdpSocket) -> io::Result<usize> {
        let (bufs, addrs) = (&mut self.bufs, &mut self.addrs);
        let (lens, truncated) = (&mut self.lens, &mut self.truncated);
        sock.try_io(Interest::READABLE, || {
            // SAFETY: iovec and mmsghdr are plain C structs for which all-zero is valid.
            let mut iov: [libc::iovec; RECV_BATCH] = unsafe { std::mem::zeroed() };
            let mut hdrs: [libc::mmsghdr; RECV_BATCH] = unsafe { std::mem::zeroed() };
            for (i, (chunk, addr)) in bufs
                .chunks_exact_mut(RECV_BUF)
                .zip(addrs.iter_mut())
                .enumerate()
            {
                iov[i].iov_base = chunk.as_mut_ptr() as *mut libc::c_void;
                iov[i].iov_len = RECV_BUF;
                hdrs[i].msg_hdr.msg_name = addr as *mut libc::sockaddr_storage as *mut libc::c_void;
                hdrs[i].msg_hdr.msg_namelen =
                    size_of::<libc::sockaddr_storage>() as libc::socklen_t;
                hdrs[i].msg_hdr.msg_iov = &mut iov[i];
                hdrs[i].msg_hdr.msg_iovlen = 1;
            }
            // SAFETY: every header points at a live, writable buffer of the stated size
            // and at a sockaddr_storage; all outlive the call.
            let r = unsafe {
                libc::recvmmsg(
                    sock.as_raw_fd(),
                    hdrs.as_mut_ptr(),
                    RECV_BATCH as libc::c_uint,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            if r < 0 {
                return Err(io::Error::last_os_error());
            }
            let n = r as usize;
            for i in 0..n {
                lens[i] = (hdrs[i].msg_len as usize).min(RECV_BUF);
                truncated[i] = hdrs[i].msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
            }
            Ok(n)
        })
    }

    /// Datagram `i` of the last batch (None when truncated or from an unknown family).
    fn get(&self, i: usize) -> Option<(SocketAddr, &[u8])> {
        if self.truncated[i] {
            return None;
        }
        let src = sockaddr_to_std(&self.addrs[i])?;
        Some((src, &self.bufs[i * RECV_BUF..i * RECV_BUF + self.lens[i]]))
    }
}

/// Errors [`drain_errors`] reads at most per call: a flood of them cannot hold the loop
/// (the rest wait for the next call; the queue counts against the receive buffer).
const ERRQUEUE_TURN: usize = 256;

/// Reads the ICMP errors queued on `sock` (`IP_RECVERR`: one per datagram an error came
/// back for, with its destination) into `it`, up to [`ERRQUEUE_TURN`]; nothing (not a
/// system call) unless tokio saw the socket's error readiness. Read promptly: the
/// error queue counts against the receive buffer, so errors left there (a subnet of
/// hosts without an agent) would crowd out the replies of live agents.
fn drain_errors(sock: &UdpSocket, it: &mut Iteration<'_>) {
    // Read to EAGAIN, the WouldBlock clears the readiness; cut at ERRQUEUE_TURN, it
    // stays, and the next turn reads on. (A failed read, which no retry would mend,
    // reads as empty: the readiness is cleared either way, so it cannot spin the loop.)
    let _ = sock.try_io(Interest::ERROR, || {
        match read_errors(sock.as_raw_fd(), it).emptied {
            true => Err(io::ErrorKind::WouldBlock.into()),
            false => Ok(()),
        }
    });
}

/// [`drain_errors`]'s reading, whatever tokio saw (a failed send's: [`SendAttempts`]).
fn read_errors(fd: std::os::fd::RawFd, it: &mut Iteration<'_>) -> ErrorsRead {
    read_error_queue(fd, ERRQUEUE_TURN, |dst, _, u| {
        if let Some(dst) = dst {
            it.handle_unreachable(normalize(dst), u);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The answers (each OID the INTEGER `value`) to the first `n` requests `agent`
    /// receives (fewer if none comes for its read timeout), not sent: the caller sends
    /// them when it wants them to arrive.
    fn answers_to(agent: &std::net::UdpSocket, n: usize, value: i64) -> Vec<(Vec<u8>, SocketAddr)> {
        let mut buf = [0u8; 2048];
        let mut replies = Vec::with_capacity(n);
        while replies.len() < n {
            let Ok((len, from)) = agent.recv_from(&mut buf) else {
                break;
            };
            let m = snmp::Message::decode(&buf[..len]).unwrap();
            let vbs: Vec<(snmp::Oid, snmp::VarValue)> = m
                .varbinds()
                .map(|vb| (vb.oid.to_owned(), snmp::VarValue::Integer(value)))
                .collect();
            let mut out = Vec::new();
            snmp::encode_response(
                &mut out,
                &m,
                vbs.iter().map(|(o, v)| (o.as_ref(), v.as_ref())),
            );
            replies.push((out, from));
        }
        replies
    }

    /// `n` one-OID requests (no retry, 1.5 s timeout) to an agent on 127.0.77.50 that
    /// answers them all at once while the driver's thread is held for 2 s (a busy
    /// runtime, CPU contention): how many succeed. Every reply is in the socket buffers
    /// before any deadline.
    async fn replies_queued_before_deadline(n: usize) -> usize {
        use std::sync::atomic::{AtomicBool, Ordering};
        let agent = std::net::UdpSocket::bind("127.0.77.50:0").unwrap();
        let addr = agent.local_addr().unwrap();
        crate::sockets::set_recv_buffer(&socket2::SockRef::from(&agent), 64 << 20).unwrap();
        let agent_done = Arc::new(AtomicBool::new(false));
        let done2 = agent_done.clone();
        let stalled = Arc::new(AtomicBool::new(false));
        let stalled2 = stalled.clone();
        let t = std::thread::spawn(move || {
            agent
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let replies = answers_to(&agent, n, 1);
            // Every request is in: once the poller's thread is busy, answer them all at
            // once, well before any deadline.
            done2.store(true, Ordering::SeqCst);
            while !stalled2.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::sleep(Duration::from_millis(50));
            for (out, from) in &replies {
                agent.send_to(out, from).unwrap();
            }
        });
        let oid: snmp::Oid = "1.3.6.1.4.1.99999.1.1".parse().unwrap();
        let jobs: Vec<SnmpHostJob> = (0..n)
            .map(|_| {
                let mut j = SnmpHostJob::new(addr, "public".into(), vec![oid.clone()]);
                j.timeout = Duration::from_millis(1500);
                j.retries = 0;
                j
            })
            .collect();
        let mut driver = SnmpDriver::open(SnmpDriverOptions {
            max_pps: 0,
            ..Default::default()
        })
        .unwrap();
        // The loop stalls (another task holds the runtime thread) from the moment the
        // replies are all sent until past every deadline.
        let stall = tokio::spawn(async move {
            while !agent_done.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            stalled.store(true, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(2000));
        });
        let mut ok = 0usize;
        driver
            .run_iteration(&jobs, |_, _, r| {
                if r.is_ok() {
                    ok += 1;
                }
            })
            .await;
        stall.await.unwrap();
        t.join().unwrap();
        ok
    }

    /// Requests to a closed port (loopback answers them with an ICMP port unreachable,
    /// IPv4 and IPv6) time out as before, attempts and all, but say what came back;
    /// an agent that says nothing keeps its bare timeout. The daemon's sockets are not
    /// connected: without `IP_RECVERR` the kernel told them nothing of the error.
    #[tokio::test(flavor = "current_thread")]
    async fn a_closed_ports_timeout_says_icmp_port_unreachable() {
        let closed = |ip: &str| {
            let s = std::net::UdpSocket::bind((ip, 0)).unwrap();
            s.local_addr().unwrap()
        };
        let (v4, v6) = (closed("127.0.223.1"), closed("::1"));
        // Bound, never answering: no ICMP error.
        let silent = std::net::UdpSocket::bind("127.0.223.2:0").unwrap();
        let oid: snmp::Oid = "1.3.6.1.2.1.1.3.0".parse().unwrap();
        let jobs: Vec<SnmpHostJob> = [v4, v6, silent.local_addr().unwrap()]
            .into_iter()
            .map(|a| {
                let mut j = SnmpHostJob::new(a, "public".into(), vec![oid.clone()]);
                j.timeout = Duration::from_millis(300);
                j.retries = 1;
                j
            })
            .collect();
        let mut driver = SnmpDriver::open(SnmpDriverOptions::default()).unwrap();
        let mut errors = vec![None; jobs.len()];
        let report = driver
            .run_iteration(&jobs, |h, _, r| errors[h] = r.err())
            .await;
        let texts: Vec<String> = errors
            .iter()
            .map(|e| {
                let e = e.as_ref().expect("no value can come");
                assert_eq!(e.reason, ErrorReason::Timeout, "{e:?}");
                e.text.clone()
            })
            .collect();
        for (text, (addr, from)) in texts.iter().zip([(v4, "127.0.223.1"), (v6, "::1")]) {
            assert_eq!(
                *text,
                format!(
                    "Timeout while connecting to \"{addr}\". No SNMP response after 2 attempt(s): ICMP port unreachable from {from}: nothing listens on that UDP port (the agent stopped, or listens on another port or address?)"
                )
            );
        }
        assert!(!texts[2].contains("ICMP"), "{}", texts[2]);
        assert!(report.stats.unreachable >= 4, "{report:?}");
        assert_eq!(
            report.stats.retries, 3,
            "every host waited out its attempts"
        );
        drop(silent);
    }

    /// ICMP errors count against the receive buffer while they wait in the error queue:
    /// thousands of requests to closed ports (a subnet of hosts without an agent) must
    /// not crowd out the replies of a live agent that answers a little later. Their
    /// readiness wakes the loop to read them: with a 32 KiB buffer (16 KiB asked, which
    /// the kernel doubles: the agent's 5 replies fit, a few dozen errors fill it) the
    /// last send turn's errors arrived while the loop waited for nothing else and,
    /// left there, made all 5 replies be dropped.
    #[tokio::test(flavor = "current_thread")]
    async fn icmp_errors_waiting_do_not_crowd_out_replies() {
        let agent = std::net::UdpSocket::bind("127.0.223.3:0").unwrap();
        let at = agent.local_addr().unwrap();
        let live = 5;
        let answer = std::thread::spawn(move || {
            agent
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let replies = answers_to(&agent, live, 7);
            // The closed ports' errors are all in by now.
            std::thread::sleep(Duration::from_millis(300));
            for (out, from) in &replies {
                agent.send_to(out, from).unwrap();
            }
        });
        let oid: snmp::Oid = "1.3.6.1.2.1.1.3.0".parse().unwrap();
        let closed: Vec<SocketAddr> = (0..2000u32)
            .map(|i| SocketAddr::from(([127, 0, 224, (i % 250) as u8 + 1], 9 + (i / 250) as u16)))
            .collect();
        let mut jobs: Vec<SnmpHostJob> = std::iter::repeat_n(at, live)
            .chain(closed)
            .map(|a| {
                let mut j = SnmpHostJob::new(a, "public".into(), vec![oid.clone()]);
                j.timeout = Duration::from_millis(1500);
                j.retries = 0;
                j
            })
            .collect();
        jobs.rotate_left(live / 2);
        let mut driver = SnmpDriver::open(SnmpDriverOptions {
            sockets: 1,
            rcvbuf: 16 << 10,
            max_pps: 0,
            ..Default::default()
        })
        .unwrap();
        let mut values = 0;
        let report = driver
            .run_iteration(&jobs, |h, _, r| {
                if jobs[h].addr == at && r == Ok(snmp::VarValue::Integer(7)) {
                    values += 1;
                }
            })
            .await;
        answer.join().unwrap();
        assert_eq!(values, live, "{report:?}");
        assert!(report.stats.unreachable > 0, "{report:?}");
    }

    /// Replies queued before their requests' deadline are not timeouts, even past one
    /// receive turn's budget: with more than RECV_TURN of them, those left unread by
    /// the first turn were expired before they were read.
    #[tokio::test(flavor = "current_thread")]
    async fn replies_queued_before_the_deadline_count_past_a_turns_budget() {
        assert_eq!(replies_queued_before_deadline(6000).await, 6000);
    }

    #[test]
    fn failures_map_to_item_errors_without_community() {
        let job = SnmpHostJob::new(
            "127.0.0.1:161".parse().unwrap(),
            "s3cret-community".into(),
            vec![],
        );
        let e = item_error(&job, &ItemFailure::Timeout);
        assert_eq!(e.reason, ErrorReason::Timeout);
        assert!(e.text.contains("127.0.0.1:161") && !e.text.contains("s3cret"));
        let e = item_error(
            &job,
            &ItemFailure::ErrorStatus(snmp::ErrorStatus::NO_SUCH_NAME),
        );
        assert_eq!(
            (e.reason, e.text.as_str()),
            (
                ErrorReason::Unsupported,
                "SNMP error: (noSuchName) There is no such variable name in this MIB. (error-status noSuchName(2))"
            )
        );
        let e = item_error(
            &job,
            &ItemFailure::Dropped(snmp::Dropped::FromElsewhere(
                "127.0.0.2:1161".parse().unwrap(),
            )),
        );
        assert_eq!(
            (e.reason, e.text.as_str()),
            (ErrorReason::Timeout, "Timeout while connecting to \"127.0.0.1:161\". No SNMP response taken after 2 attempt(s): replies came from 127.0.0.2:1161 instead, not taken (a reply must come from the address asked)")
        );
        let e = item_error(&job, &ItemFailure::Dropped(snmp::Dropped::WrongCommunity));
        assert_eq!(
            (e.reason, e.text.as_str()),
            (ErrorReason::Timeout, "Timeout while connecting to \"127.0.0.1:161\". No SNMP response taken after 2 attempt(s): replies carried another community, not taken")
        );
        assert!(
            !format!("{job:?}").contains("s3cret"),
            "Debug must redact the community"
        );
    }

    #[test]
    fn item_errors_start_with_zabbixs_words() {
        // Zabbix 6.0 to 7.0 (checks_snmp.c zbx_get_snmp_response_error): a timeout is
        // `Timeout while connecting to "<addr>:<port>".`, a Report `Cannot connect to
        // "<addr>:<port>": ` and net-snmp's text for it; netpoller's detail follows.
        let mut job = SnmpHostJob::new("127.0.0.1:161".parse().unwrap(), "c".into(), vec![]);
        assert_eq!(
            item_error(&job, &ItemFailure::Timeout).text,
            "Timeout while connecting to \"127.0.0.1:161\". No SNMP response after 2 attempt(s)"
        );
        let v6 = SnmpHostJob::new("[::1]:1161".parse().unwrap(), "c".into(), vec![]);
        assert_eq!(
            item_error(&v6, &ItemFailure::Timeout).text,
            "Timeout while connecting to \"[::1]:1161\". No SNMP response after 2 attempt(s)"
        );
        job.usm = Some(std::sync::Arc::new(
            snmp::v3::UsmUser::new(
                "u",
                Some((snmp::usm::AuthProtocol::Sha1, "auth-pass-1")),
                Some((snmp::usm::PrivProtocol::Aes128, "priv-pass-1")),
            )
            .unwrap(),
        ));
        assert_eq!(
            item_error(&job, &ItemFailure::Timeout).text,
            "Timeout while connecting to \"127.0.0.1:161\". No SNMP response after 2 attempt(s) (SNMPv3 authPriv: a wrong privacy passphrase or protocol looks the same)"
        );
        // The agent answered the discovery sent beside a retry: the hint, made certain.
        assert_eq!(
            item_error(&job, &ItemFailure::TimeoutDiscoveryAnswered),
            ItemError::new(
                ErrorReason::Timeout,
                "Timeout while connecting to \"127.0.0.1:161\". No SNMP response after 2 attempt(s) (SNMPv3 authPriv: the agent answers its engine discovery: a wrong privacy passphrase or protocol?)"
            )
        );
        // No answer to the discovery, which carries no key: no hint at one.
        assert_eq!(
            item_error(&job, &ItemFailure::DiscoveryTimeout),
            ItemError::new(
                ErrorReason::Timeout,
                "Timeout while connecting to \"127.0.0.1:161\". No SNMP response after 2 attempt(s) (SNMPv3: the engine discovery, which needs no passphrase, went unanswered)"
            )
        );
        // A user of a context the agent may not serve (net-snmp drops such requests
        // unanswered, at every level): the hint names it beside the keys.
        let user = |privacy: bool| {
            let p = privacy.then_some((snmp::usm::PrivProtocol::Aes128, "priv-pass-1"));
            let u = snmp::v3::UsmUser::new(
                "u",
                Some((snmp::usm::AuthProtocol::Sha1, "auth-pass-1")),
                p,
            );
            Some(std::sync::Arc::new(u.unwrap().with_context("vlan-10")))
        };
        let mut ctx = job.clone();
        ctx.usm = user(true);
        assert_eq!(
            item_error(&ctx, &ItemFailure::TimeoutDiscoveryAnswered).text,
            "Timeout while connecting to \"127.0.0.1:161\". No SNMP response after 2 attempt(s) (SNMPv3 authPriv: the agent answers its engine discovery: a wrong privacy passphrase or protocol, or a context_name \"vlan-10\" it does not serve?)"
        );
        assert_eq!(
            item_error(&ctx, &ItemFailure::Timeout).text,
            "Timeout while connecting to \"127.0.0.1:161\". No SNMP response after 2 attempt(s) (SNMPv3 authPriv: a wrong privacy passphrase or protocol, or a context_name \"vlan-10\" the agent does not serve, looks the same)"
        );
        ctx.usm = user(false);
        assert_eq!(
            item_error(&ctx, &ItemFailure::Timeout).text,
            "Timeout while connecting to \"127.0.0.1:161\". No SNMP response after 2 attempt(s) (SNMPv3: a context_name \"vlan-10\" the agent does not serve looks the same: agents drop such requests unanswered)"
        );
        assert_eq!(
            item_error(&ctx, &ItemFailure::DiscoveryTimeout).text,
            "Timeout while connecting to \"127.0.0.1:161\". No SNMP response after 2 attempt(s) (SNMPv3: the engine discovery, which needs no passphrase, went unanswered)"
        );
        use snmp::v3::ReportKind as K;
        for (kind, text) in [
            (K::UnknownUserName, "Cannot connect to \"127.0.0.1:161\": Unknown user name. (the SNMPv3 agent refused the request with a Report: usmStatsUnknownUserNames)"),
            (K::WrongDigest, "Cannot connect to \"127.0.0.1:161\": Authentication failure (incorrect password, community or key). (the SNMPv3 agent refused the request with a Report: usmStatsWrongDigests)"),
            (K::UnsupportedSecLevel, "Cannot connect to \"127.0.0.1:161\": Unsupported security level. (the SNMPv3 agent refused the request with a Report: usmStatsUnsupportedSecLevels)"),
            (K::DecryptionError, "Cannot connect to \"127.0.0.1:161\": Decryption error. (the SNMPv3 agent refused the request with a Report: usmStatsDecryptionErrors)"),
            (K::NotInTimeWindow, "Cannot connect to \"127.0.0.1:161\": Not in time window. (the SNMPv3 agent refused the request with a Report: usmStatsNotInTimeWindows)"),
            (K::UnknownEngineId, "Cannot connect to \"127.0.0.1:161\": Unknown engine ID. (the SNMPv3 agent refused the request with a Report: usmStatsUnknownEngineIDs)"),
            (K::Other, "Cannot connect to \"127.0.0.1:161\": Unknown Report message. (the SNMPv3 agent refused the request with a Report)"),
        ] {
            let e = item_error(&job, &ItemFailure::Report(kind));
            assert_eq!((e.reason, e.text.as_str()), (ErrorReason::Unsupported, text));
        }
        let e = item_error(
            &job,
            &ItemFailure::ErrorIndexOutOfBounds {
                status: snmp::ErrorStatus::NO_SUCH_NAME,
                index: 4,
                oids: 3,
            },
        );
        assert_eq!(
            (e.reason, e.text.as_str()),
            (
                ErrorReason::Unsupported,
                "Invalid SNMP response: error index out of bounds. (error-status noSuchName(2), error-index 4 out of bounds for a request of 3 OID(s))"
            )
        );
    }

    #[test]
    fn an_answer_of_too_few_or_too_many_varbinds_is_not_supported_as_in_zabbix() {
        // Zabbix makes the item not supported (NOTSUPPORTED: a CHECK_NOT_SUPPORTED step
        // handles it), in its words; before, the reason was `decode` (the answer did
        // decode) and the words netpoller's own.
        let job = SnmpHostJob::new("127.0.0.1:161".parse().unwrap(), "c".into(), vec![]);
        for (f, text) in [
            (
                ItemFailure::EmptyResponse,
                "Invalid SNMP response: too few variable bindings. (no varbind in the answer to this OID alone)",
            ),
            (
                ItemFailure::TooManyVarbinds {
                    count: 3,
                    first: "1.3.6.1.2.1.1.5.0".parse().unwrap(),
                },
                "Invalid SNMP response: too many variable bindings. (3 varbinds in the answer to this OID alone, none of them this OID: the first is .1.3.6.1.2.1.1.5.0)",
            ),
        ] {
            let e = item_error(&job, &f);
            assert_eq!((e.reason, e.text.as_str()), (ErrorReason::Unsupported, text));
        }
    }
}
