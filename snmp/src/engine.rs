//! One SNMP polling iteration over many hosts, sans-IO.
//!
//! The caller (poller's `SnmpDriver`) owns sockets and the clock and loops:
//! [`Iteration::poll_transmit`] → send; datagram → [`Iteration::handle_datagram`];
//! [`Iteration::poll_timeout`] reached → [`Iteration::handle_timeout`];
//! [`Iteration::poll_event`] → results; until [`Iteration::is_done`].
//!
//! Invariants:
//! * Every item of every job gets exactly one [`Event::Item`], and every job exactly one
//!   [`Event::HostDone`], whatever the network does (property-tested below).
//! * A request is registered in the in-flight table before its bytes are handed out and
//!   removed on reply, final timeout, send failure or host death. A datagram is matched
//!   only if its request-id is in flight *and* it comes from the address the request went
//!   to *and* carries the job's community and version; anything else is dropped and
//!   counted in [`Stats`], never matched to the wrong item. A matched response's
//!   varbinds go to the items asked by position only while their OIDs agree; an answer
//!   in another order, or with varbinds left out, not asked or named otherwise, is
//!   paired by OID, and an OID it does not carry is asked again alone. The one varbind
//!   of the answer to an OID asked alone is that OID's value whatever OID it names, as
//!   Zabbix takes it (it can be no other item's); several, none of them the OID asked,
//!   fail it ([`ItemFailure::TooManyVarbinds`]).
//! * Hybrid async: at most `max_inflight` requests per host (default 1) while all hosts
//!   proceed at once; at most `max_oids` OIDs per PDU, lowered on tooBig, on a response
//!   with missing varbinds, or on silence while the agent answers one OID alone (a
//!   probe, see [`Iteration::handle_timeout`]), and remembered per host address in
//!   [`HostMemory`] (which lets a limit grow back slowly, never to a size that failed).
//!   An OID the agent answers with an error of its own (named by an error-index, found
//!   by halvings after tooBigs, or asked alone after an answer left it out) is
//!   remembered there too: later iterations ask it alone from the start, not search for
//!   it again. An error-status without a usable error-index (0, or past the request's
//!   OIDs) fails every item of its request at once, as Zabbix does: no search, no
//!   culprit, no size learned.
//! * SNMPv3 ([`crate::v3`]): a host whose agent's engine is not known yet first gets a
//!   discovery request (one more round trip, once per driver: the engine is kept in
//!   [`HostMemory`]); a response counts only if it authenticates with the host's user's
//!   key for that engine and carries at least the user's security level, so a forged
//!   or mangled answer is dropped like a foreign one (and, as for a reply of another
//!   community, the host's timeout says so: [`Dropped::NotAuthentic`], or
//!   [`Dropped::NotDecrypted`] for an authentic one the privacy key cannot read, or
//!   [`Dropped::NotResponse`] for a readable one that is neither a Response nor a
//!   Report). One rule, [`V3Message::answer`], takes or refuses a reply, here and in the
//!   CLI's walker.
//!   Reports (unknown user, wrong digest, ...) fail the host's items with
//!   [`ItemFailure::Report`]; a report that the clock is out of the time window
//!   (authenticated: its clock is taken; not: the engine is discovered again) or that
//!   the engine ID is unknown (the agent was replaced) resynchronizes and resends, at
//!   most twice per host and iteration.
//! * Retries resend the same bytes with the same request-id (a late answer to the first
//!   attempt still counts); SNMPv3 retries go encoded anew under a new msgID (RFC 3412
//!   §6.2, as net-snmp's), the earlier ones kept as aliases so a late answer to any
//!   attempt counts. A request that exhausts its retries kills its host for this
//!   iteration: all of the host's remaining items fail with [`ItemFailure::Timeout`] at
//!   once, so a dead host costs one `timeout × (retries + 1)` however many items it has
//!   (unless a probe beside its first retry was answered: then the host is up and only
//!   ignores requests that big); an SNMPv3 host whose agent's engine is not known then
//!   (its discovery went unanswered) fails them with [`ItemFailure::DiscoveryTimeout`].
//!   An SNMPv3 authPriv host whose engine is known gets, beside its first retry, one
//!   engine discovery per iteration (no key: a live agent answers it whatever the
//!   privacy key), whose fate words its timeout: answered, and no Response taken
//!   in the iteration ([`ItemFailure::TimeoutDiscoveryAnswered`]), or not
//!   ([`ItemFailure::DiscoveryTimeout`]); none is sent for answered requests,
//!   v1/v2c or other levels.
//! * An ICMP error that came back for an address ([`Iteration::handle_unreachable`])
//!   changes nothing of when its hosts time out, only the words of their timeouts
//!   ([`Dropped::Unreachable`]).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::message::{
    encode_request, peek_request_id, ErrorStatus, Message, PduType, Refusal, RequestKind, VarBind,
    Version,
};
use crate::oid::Oid;
use crate::v3::{self, Answer, Engine, ReportKind, Resync, UsmUser, V3Message, V3Refusal};
use crate::value::VarValue;
use crate::DecodeError;
use icmp::Unreachable;

/// Default per-attempt timeout (Zabbix's default `Timeout=3`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3);
/// Default retries after the first attempt.
pub const DEFAULT_RETRIES: u32 = 1;
/// Default OIDs per request (Zabbix starts bulk GETs at this size too).
pub const DEFAULT_MAX_OIDS: usize = 10;
/// Default requests in flight to one host: most devices cannot serve more.
pub const DEFAULT_MAX_INFLIGHT: usize = 1;

/// What to poll on one host. Items are identified by their index in `oids`.
/// `Debug` redacts the community.
#[derive(Clone)]
pub struct HostJob {
    pub addr: SocketAddr,
    /// Default [`Version::V2c`].
    pub version: Version,
    /// Secret: never log or print it. Unused by v3.
    pub community: Arc<str>,
    /// The SNMPv3 user; required when `version` is [`Version::V3`].
    pub usm: Option<Arc<UsmUser>>,
    /// Per attempt; default [`DEFAULT_TIMEOUT`].
    pub timeout: Duration,
    /// Attempts after the first; default [`DEFAULT_RETRIES`].
    pub retries: u32,
    /// OIDs per PDU, ≥ 1; default [`DEFAULT_MAX_OIDS`].
    pub max_oids: usize,
    /// Requests in flight to this host, ≥ 1; default [`DEFAULT_MAX_INFLIGHT`].
    pub max_inflight: usize,
    pub oids: Vec<Oid>,
}

impl std::fmt::Debug for HostJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostJob")
            .field("addr", &self.addr)
            .field("version", &self.version)
            .field("community", &"<redacted>")
            .field("usm", &self.usm)
            .field("timeout", &self.timeout)
            .field("retries", &self.retries)
            .field("max_oids", &self.max_oids)
            .field("max_inflight", &self.max_inflight)
            .field("oids", &self.oids.len())
            .finish()
    }
}

impl HostJob {
    /// A job with the defaults above.
    pub fn new(addr: SocketAddr, community: Arc<str>, oids: Vec<Oid>) -> HostJob {
        HostJob {
            addr,
            version: Version::V2c,
            community,
            usm: None,
            timeout: DEFAULT_TIMEOUT,
            retries: DEFAULT_RETRIES,
            max_oids: DEFAULT_MAX_OIDS,
            max_inflight: DEFAULT_MAX_INFLIGHT,
            oids,
        }
    }

    /// A v3 job for `user` with the defaults above.
    pub fn new_v3(addr: SocketAddr, user: Arc<UsmUser>, oids: Vec<Oid>) -> HostJob {
        HostJob {
            version: Version::V3,
            usm: Some(user),
            ..HostJob::new(addr, Arc::from(""), oids)
        }
    }
}

/// Per-iteration knobs.
#[derive(Debug, Clone)]
pub struct IterationOptions {
    /// First request-id; the caller should randomize it per iteration so that late
    /// answers from a previous iteration are unlikely to match (they are dropped as
    /// "unknown" when they fall outside this iteration's range). Default 1.
    pub first_request_id: u32,
    /// Hard end of the iteration: everything still open then fails with
    /// [`ItemFailure::Timeout`]. Default none (each host ends by its own timeouts).
    pub deadline: Option<Instant>,
    /// Requests in flight over all hosts (probes aside: at most one per host, beside a
    /// retry, and for an SNMPv3 authPriv host one engine discovery per iteration beside
    /// one). Default 10,000.
    pub max_inflight_total: usize,
    /// Seeds the encryption salts of SNMPv3 engines discovered in this iteration; the
    /// caller should randomize it (two pollers must not share salts). Default 0.
    pub salt_seed: u64,
}

impl Default for IterationOptions {
    fn default() -> Self {
        IterationOptions {
            first_request_id: 1,
            deadline: None,
            max_inflight_total: 10_000,
            salt_seed: 0,
        }
    }
}

/// Clean iterations after which a learned limit grows by one OID (see [`HostMemory`]).
pub const GROW_AFTER: u32 = 10;

/// Clean iterations one below a size that failed by silence alone (see
/// [`Iteration::handle_timeout`]) after which that size is tried again: a request and
/// its retry both lost while the probe got through is rare, but over months it would
/// otherwise ratchet a host down one OID at a time.
pub const RETRY_SILENT_AFTER: u32 = 100;

/// Learned OIDs-per-request limits, keyed by host address; kept by the driver across
/// iterations (Zabbix does the same) so a host that once said tooBig is not asked the
/// big size again every iteration.
///
/// A limit is lowered on tooBig, a short answer or silence at a size while one OID is
/// answered, and remembers the smallest request size that failed. After [`GROW_AFTER`]
/// iterations in which the host answered everything without trouble (no timeout), it
/// grows by one, but never up to a size that failed (one that failed by silence alone
/// is tried again after [`RETRY_SILENT_AFTER`]): a transient problem does not cap a
/// host forever, and a real limit costs no retries.
///
/// It also keeps the SNMPv3 engines discovered per address, with their clocks, and
/// each address's encryption salt counter (which outlives a rediscovered engine).
///
/// And each address's culprits: OIDs the agent answered with an error of their own
/// (an error-status its error-index names, tooBig alone, or no varbind when asked
/// alone) or, asked alone, under another OID's name, which it takes extra requests to
/// single out of a request of several (the rest asked again, halvings, a solo request
/// after a short answer). Later iterations ask them alone from the start and the rest
/// together, instead of searching again; the item still gets the agent's error (or
/// the misnamed value) each time. An OID is a culprit until it gets a value as asked
/// (or [`MAX_CULPRITS`] newer ones push it out), unless it or another host at the
/// address found it again in that iteration.
#[derive(Debug, Clone, Default)]
pub struct HostMemory {
    max_oids: HashMap<SocketAddr, Learned>,
    engines: HashMap<SocketAddr, Engine>,
    salts: HashMap<SocketAddr, u64>,
    /// Oldest first. Only addresses with culprits have an entry.
    culprits: HashMap<SocketAddr, Vec<Oid>>,
}

/// Culprits remembered per address (see [`HostMemory`]); beyond that the oldest is
/// forgotten (found again by a search when it fails again, as before it was known).
pub const MAX_CULPRITS: usize = 32;

#[derive(Debug, Clone, Copy)]
struct Learned {
    max_oids: usize,
    /// Smallest request size that failed.
    failed_at: usize,
    /// `failed_at` was learned from silence alone (see [`RETRY_SILENT_AFTER`]).
    silent: bool,
    /// Clean iterations since the last change.
    clean: u32,
}

impl HostMemory {
    /// The learned limit for `addr`, if any.
    pub fn max_oids(&self, addr: &SocketAddr) -> Option<usize> {
        self.max_oids.get(addr).map(|l| l.max_oids)
    }

    /// The SNMPv3 engine discovered at `addr`, if any.
    pub fn engine(&self, addr: &SocketAddr) -> Option<&Engine> {
        self.engines.get(addr)
    }

    /// Remembers `engine` for `addr`, as a discovery would (requests to `addr` then go
    /// out without one).
    pub fn remember_engine(&mut self, addr: SocketAddr, engine: Engine) {
        self.engines.insert(addr, engine);
    }

    /// The culprits remembered for `addr`, oldest first (see [`HostMemory`]).
    pub fn culprits(&self, addr: &SocketAddr) -> &[Oid] {
        self.culprits.get(addr).map_or(&[], Vec::as_slice)
    }

    pub fn forget(&mut self, addr: &SocketAddr) {
        self.max_oids.remove(addr);
        self.engines.remove(addr);
        self.salts.remove(addr);
        self.culprits.remove(addr);
    }

    /// Keeps what is known of the addresses `keep` says are still polled and forgets
    /// the others (hosts a config reload or a discovery removed): nothing else ever
    /// forgets an address, so a driver would keep every host it ever polled.
    pub fn retain(&mut self, keep: impl Fn(&SocketAddr) -> bool) {
        self.max_oids.retain(|a, _| keep(a));
        self.engines.retain(|a, _| keep(a));
        self.salts.retain(|a, _| keep(a));
        self.culprits.retain(|a, _| keep(a));
    }

    /// Addresses with a learned limit.
    pub fn len(&self) -> usize {
        self.max_oids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.max_oids.is_empty()
    }
}

/// Why an item has no value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ItemFailure {
    /// No answer after all retries (or the iteration deadline passed).
    #[error("timeout: no response")]
    Timeout,
    /// [`ItemFailure::Timeout`] of an SNMPv3 host whose agent's engine is not known: its
    /// discovery, which carries no user and no key, went unanswered (or the deadline
    /// came first), so nothing encrypted was sent and no key can be at fault.
    /// Also an authPriv host's [`ItemFailure::Timeout`] whose engine is known when the
    /// discovery sent beside its first retry (see [`Iteration::handle_timeout`]) went
    /// unanswered too: the agent is down or unreachable, whatever its keys.
    #[error("timeout: no response to the SNMPv3 engine discovery")]
    DiscoveryTimeout,
    /// [`ItemFailure::Timeout`] of an SNMPv3 authPriv host whose agent answered the
    /// engine discovery sent beside a retry (it carries no key) and none of its
    /// requests in this iteration: the agent is up and drops the requests, as it does
    /// those it cannot decrypt (a wrong privacy passphrase or protocol).
    #[error("timeout: no response, though the agent answers the SNMPv3 engine discovery")]
    TimeoutDiscoveryAnswered,
    /// The agent answered with an error-status for this OID (noSuchName, genErr, ...),
    /// its error-index naming it or 0 (the whole request's), or tooBig for a single
    /// OID. Worded as Zabbix words it (`SNMP error: ` and net-snmp's text, checks_snmp.c
    /// `zbx_get_snmp_response_error`, 6.0 to 7.0), then the status as RFC 3416 names it.
    #[error("{}", StatusText { status: *.0, out_of_bounds: None })]
    ErrorStatus(ErrorStatus),
    /// The agent answered with an error-status whose error-index is past the request's
    /// `oids` OIDs: the error is the whole request's. Zabbix says `Invalid SNMP response:
    /// error index out of bounds.` for a noSuchName (checks_snmp.c `zbx_snmp_get_values`,
    /// 6.0 to 7.0) and `SNMP error: ` with net-snmp's text for any other status (it reads
    /// no index then): each text starts with Zabbix's and says the index too.
    #[error("{}", StatusText { status: *.status, out_of_bounds: Some((*.index, *.oids)) })]
    ErrorIndexOutOfBounds {
        status: ErrorStatus,
        index: u32,
        oids: usize,
    },
    /// The agent answered this OID, asked alone, with `count` varbinds, none of them
    /// this OID (`first` is the first). Zabbix fails any answer of more varbinds than
    /// asked with `Invalid SNMP response: too many variable bindings.` (checks_snmp.c
    /// `zbx_snmp_get_values`, 6.0 to 7.0); netpoller takes the value when one of them
    /// is the OID asked, so it fails only when none is.
    #[error(
        "Invalid SNMP response: too many variable bindings. ({count} varbinds in the answer \
         to this OID alone, none of them this OID: the first is {first})"
    )]
    TooManyVarbinds { count: usize, first: Oid },
    /// The agent answered this OID, asked alone, with no varbind at all: Zabbix's words
    /// (checks_snmp.c `zbx_snmp_get_values`, 6.0 to 7.0), then what was asked.
    #[error(
        "Invalid SNMP response: too few variable bindings. (no varbind in the answer to \
         this OID alone)"
    )]
    EmptyResponse,
    /// The request could not be sent (the driver reported an I/O error).
    #[error("send failed: {0}")]
    Send(String),
    /// The SNMPv3 agent answered with a Report: the user, key or level is wrong.
    #[error("SNMPv3 {0}")]
    Report(ReportKind),
    /// No answer was taken after all retries, but replies to the host's requests came
    /// and were dropped: what an operator needs to tell a broken agent from a dead one.
    #[error("timeout: {0}")]
    Dropped(Dropped),
    /// Not asked, or not waited for: the iteration was stopped ([`Iteration::stop`]).
    /// Not a fact about the item.
    #[error("not polled: the iteration was stopped")]
    Stopped,
}

/// The text of an error-status answer ([`ItemFailure::ErrorStatus`], or, with the
/// error-index and the request's OID count, [`ItemFailure::ErrorIndexOutOfBounds`]):
/// the one place both are worded, written straight into the formatter.
struct StatusText {
    status: ErrorStatus,
    out_of_bounds: Option<(u32, usize)>,
}

impl std::fmt::Display for StatusText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let status = self.status;
        match self.out_of_bounds {
            Some(_) if status == ErrorStatus::NO_SUCH_NAME => {
                f.write_str("Invalid SNMP response: error index out of bounds.")?
            }
            _ => write!(f, "SNMP error: {}", status.net_snmp_text())?,
        }
        write!(f, " (error-status {status}")?;
        if let Some((index, oids)) = self.out_of_bounds {
            write!(
                f,
                ", error-index {index} out of bounds for a request of {oids} OID(s)"
            )?;
        }
        f.write_str(")")
    }
}

/// Why the replies to a host that timed out were not taken (the last one seen).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dropped {
    /// They came from another address or port than the request went to (a
    /// multi-homed device, NAT): not taken, as a reply anyone could forge.
    FromElsewhere(SocketAddr),
    /// They could not be decoded (a value of the wrong length, a broken encoding).
    Undecodable(DecodeError),
    /// They carried another community than the one asked with (not told: a secret).
    WrongCommunity,
    /// They were of this SNMP version, not the one asked.
    WrongVersion(Version),
    /// They were not Response PDUs (a Report to a v1/v2c request, the request echoed).
    NotResponse(PduType),
    /// SNMPv3: they did not authenticate as the host's user's answers (a wrong MAC,
    /// another engine ID or user name, a security level below the user's, a clock out
    /// of the engine's time window, a request-id other than the msgID). Nothing of the
    /// keys is told: the text names what to check.
    NotAuthentic,
    /// SNMPv3: they authenticated but could not be decrypted with the user's privacy
    /// key (or the user has none): the authentication key is right, the privacy key
    /// or protocol is not the agent's.
    NotDecrypted,
    /// No reply: an ICMP error came back instead ([`Iteration::handle_unreachable`]).
    Unreachable(Unreachable),
}

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dropped::FromElsewhere(a) => write!(
                f,
                "replies came from {a} instead, not taken (a reply must come from the address asked)"
            ),
            Dropped::Undecodable(e) => write!(f, "replies could not be decoded: {e}"),
            Dropped::WrongCommunity => {
                write!(f, "replies carried another community, not taken")
            }
            Dropped::WrongVersion(v) => write!(
                f,
                "replies came in SNMP version {}, not the version asked, not taken",
                v.as_str()
            ),
            Dropped::NotResponse(p) => {
                write!(f, "replies were {p:?} PDUs instead of Responses, not taken")
            }
            Dropped::NotAuthentic => write!(
                f,
                "replies failed SNMPv3 authentication (another authentication key or protocol, or another agent with the same engine ID?), not taken"
            ),
            Dropped::NotDecrypted => write!(
                f,
                "replies authenticated but could not be decrypted (another privacy key or protocol?), not taken"
            ),
            Dropped::Unreachable(u) => write!(f, "{u}"),
        }
    }
}

impl From<Refusal> for Dropped {
    fn from(r: Refusal) -> Dropped {
        match r {
            Refusal::NotResponse(p) => Dropped::NotResponse(p),
            Refusal::WrongCommunity => Dropped::WrongCommunity,
            Refusal::WrongVersion(v) => Dropped::WrongVersion(v),
        }
    }
}

impl Dropped {
    /// What the timeout of a request says of its SNMPv3 reply refused for `why`
    /// ([`V3Message::answer`]), in the engine and the CLI's walker alike. `None` for a
    /// plaintext PDU that does not decode: dropped as a malformed datagram, as one whose
    /// envelope does not decode.
    pub fn of_v3(why: V3Refusal) -> Option<Dropped> {
        match why {
            V3Refusal::NotAuthentic => Some(Dropped::NotAuthentic),
            V3Refusal::NotDecrypted | V3Refusal::Garbled(_) => Some(Dropped::NotDecrypted),
            V3Refusal::Undecodable(_) => None,
            V3Refusal::NotResponse(p) => Some(Dropped::NotResponse(p)),
        }
    }
}

/// Output of the iteration, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// One item's result. Exceptions (noSuchObject, ...) arrive as `Ok` values; see
    /// [`VarValue::is_exception`].
    Item {
        host: usize,
        item: usize,
        result: Result<VarValue, ItemFailure>,
    },
    /// All items of `host` have been reported. `timed_out` when the host died.
    HostDone { host: usize, timed_out: bool },
}

/// A datagram to send: the bytes were written into the caller's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    pub dst: SocketAddr,
    /// Index of the job.
    pub host: usize,
    /// For [`Iteration::handle_send_error`].
    pub request_id: i32,
    /// True for a retransmission.
    pub retry: bool,
}

/// What became of one received datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    Matched,
    Malformed,
    NotResponse,
    UnknownRequestId,
    Stale,
    WrongSource,
    WrongCommunity,
    WrongVersion,
    /// SNMPv3: not authentic (wrong user, engine, level or MAC) or not decryptable.
    NotAuthentic,
    /// SNMPv3: a Report PDU (discovery, resync or a failure of the host's items).
    Report,
}

/// Counters of one iteration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Distinct requests sent (first attempts).
    pub requests: u64,
    /// Retransmissions.
    pub retries: u64,
    /// Attempts that timed out (each leads to a retry, to the host's death, or to a
    /// smaller request when a probe was answered).
    pub timeouts: u64,
    /// Hosts that died (counted once each).
    pub hosts_timed_out: u64,
    /// Responses matched to a request (probes included).
    pub responses: u64,
    pub malformed: u64,
    /// Decodable messages that are not a Response PDU.
    pub not_response: u64,
    /// Request-id never issued by this iteration.
    pub unknown_request_id: u64,
    /// Request-id issued by this iteration but no longer in flight (late or duplicate).
    pub stale: u64,
    pub wrong_source: u64,
    pub wrong_community: u64,
    pub wrong_version: u64,
    /// tooBig answers (each halves the request).
    pub too_big: u64,
    /// Responses missing some of the requested varbinds.
    pub short_responses: u64,
    /// Values taken from the one varbind of an answer to a single OID that names
    /// another OID (as Zabbix takes them).
    pub renamed: u64,
    pub send_errors: u64,
    /// ICMP errors that came back for requests ([`Iteration::handle_unreachable`]).
    pub unreachable: u64,
    /// SNMPv3 messages dropped as not authentic or not decryptable.
    pub not_authentic: u64,
    /// SNMPv3 discovery requests sent (first attempts).
    pub discoveries: u64,
    /// One-OID probes sent beside the retry of a bigger request (see
    /// [`Iteration::handle_timeout`]), and how many were answered.
    pub probes: u64,
    pub probes_answered: u64,
    /// SNMPv3 authPriv: engine discoveries sent beside a retry to a host whose engine
    /// is known (see [`Iteration::handle_timeout`]), and how many were answered.
    pub engine_probes: u64,
    pub engine_probes_answered: u64,
    /// Requests of several OIDs that went unanswered while their agent answered a probe:
    /// halved, as on tooBig.
    pub silent_too_big: u64,
    /// SNMPv3 Reports received (discovery answers included).
    pub reports: u64,
    /// SNMPv3 Reports to requests (not to discoveries), by [`ReportKind::index`]: what
    /// agents refused (wrong digest, unknown user, ...) or resynchronized.
    pub refusals: [u64; ReportKind::ALL.len()],
    pub items_ok: u64,
    pub items_failed: u64,
}

struct HostState {
    /// Next item never sent.
    next: u32,
    /// Items to (re)send before `next` (split or error leftovers).
    requeue: VecDeque<u32>,
    /// Items to ask alone, one request each, before `requeue` (OIDs an agent left out
    /// of its answer, remembered culprits): the host's other items keep their request
    /// size.
    solo: VecDeque<u32>,
    /// Items [`HostMemory`] names culprits: asked alone from the start (empty for most
    /// hosts, which then pay nothing for the feature).
    culprits: Vec<u32>,
    /// Items the agent answered with an error of their own in this iteration (see
    /// [`Iteration::fail`]): the culprits saved to HostMemory.
    found: Vec<u32>,
    /// Items of `culprits` that got a value: no longer culprits.
    cleared: Vec<u32>,
    max_oids: usize,
    /// `max_oids` at the start of the iteration (the job's, or the learned limit).
    start_max_oids: usize,
    /// The largest request answered in full in this iteration.
    max_ok: usize,
    /// Smallest request size that failed (tooBig, short answer, silence) in this
    /// iteration: saved to HostMemory.
    failed_at: Option<usize>,
    /// `failed_at` was learned from silence only (no tooBig or short answer at that
    /// size): see [`RETRY_SILENT_AFTER`].
    failed_silent: bool,
    /// Every failure behind `failed_at` in this iteration.
    fails: Vec<SizeFail>,
    /// An attempt of one of its requests timed out in this iteration.
    timed_out: bool,
    /// The probe in flight (see [`Purpose::Probe`]); not in `inflight`: it holds up
    /// nothing and nothing waits for it but `parked`.
    probe: Option<i32>,
    /// The last probe was answered: the agent is up and answers one OID. Evidence for
    /// every request whose last attempt times out until the next probe is sent.
    alive: bool,
    /// Requests whose last attempt timed out while a probe was in flight: the probe's
    /// fate decides theirs (kept in `inflight` and the table, without a deadline, so a
    /// late answer still counts).
    parked: Vec<i32>,
    /// Why the last reply to one of its requests was dropped, for its timeout's text.
    dropped: Option<Dropped>,
    inflight: Vec<i32>,
    queued: bool,
    finished: bool,
    /// SNMPv3 only.
    usm: Option<Box<UsmHost>>,
}

/// A request size that failed in this iteration (see [`Iteration::shrink`]).
struct SizeFail {
    size: usize,
    silent: bool,
    /// The request's items when the agent said tooBig; empty for a short or silent
    /// answer.
    items: Vec<u32>,
    /// The items a short answer of the first OIDs asked left out (taken for what did
    /// not fit); empty otherwise.
    left_out: Vec<u32>,
}

/// The smallest failed size and whether it failed by silence alone, with one more
/// failure of `failed` OIDs.
fn merge_fail(
    (failed_at, failed_silent): (Option<usize>, bool),
    failed: usize,
    silent: bool,
) -> (Option<usize>, bool) {
    match failed_at {
        Some(f) if f < failed => (Some(f), failed_silent),
        Some(f) if f == failed => (Some(f), failed_silent && silent),
        _ => (Some(failed), silent),
    }
}

impl HostState {
    /// Items not sent yet (or to send again).
    fn unsent(&self, job: &HostJob) -> usize {
        self.solo.len() + self.requeue.len() + (job.oids.len() - self.next as usize)
    }

    /// Forgets the size failures `wrong` says were not the agent's size limit, and
    /// figures the failed size from the others (none left: back to the starting size).
    /// Whether any was forgotten.
    fn forget_fails(&mut self, wrong: impl Fn(&SizeFail) -> bool) -> bool {
        let before = self.fails.len();
        self.fails.retain(|f| !wrong(f));
        if self.fails.len() == before {
            return false;
        }
        (self.failed_at, self.failed_silent) = self
            .fails
            .iter()
            .fold((None, false), |acc, f| merge_fail(acc, f.size, f.silent));
        if self.failed_at.is_none() {
            self.max_oids = self.start_max_oids;
        }
        true
    }

    /// After a culprit was found (not a size problem): the host goes on at the largest
    /// size it answered in full in this iteration at least, at most the size it
    /// started with; a size that still failed is kept above it.
    fn settle_size(&mut self) {
        self.max_oids = self.max_oids.max(self.max_ok).min(self.start_max_oids);
        if let Some(f) = &mut self.failed_at {
            *f = (*f).max(self.max_oids + 1);
        }
    }
}

/// What an SNMPv3 host's state adds.
struct UsmHost {
    /// The agent's engine: `None` until discovered.
    engine: Option<Engine>,
    /// A discovery request is in flight.
    discovering: bool,
    /// Resynchronizations (time window, engine ID) left in this iteration.
    resyncs_left: u8,
    /// The engine probe in flight (see [`Purpose::EngineProbe`]).
    probe: Option<i32>,
    /// An engine probe was queued in this iteration (at most one per host).
    probed: bool,
    /// The engine probe's fate: answered, or not (its timeout); `None` before it ends
    /// or when it could not be sent (nothing learned).
    answers_discovery: Option<bool>,
    /// A Response was taken from the agent in this iteration: the user's keys are
    /// right, and an answered engine probe blames none of them.
    decrypted: bool,
    /// Requests whose last attempt timed out while the engine probe was in flight: kept
    /// in `inflight` and the table (a late answer still counts) until the probe ends,
    /// whose fate words their host's timeout.
    parked: Vec<i32>,
    /// Bumped whenever the engine or its clock changes. A Report to a request encoded
    /// under an older generation only sends its items again: every request in flight
    /// during one reboot or replacement gets the same Report, and only the first may
    /// resynchronize (or a late one would undo a rediscovery).
    generation: u32,
}

impl UsmHost {
    /// Why an SNMPv3 host that answered nothing timed out ([`ItemFailure::v3_silence`]).
    fn silence(&self) -> ItemFailure {
        ItemFailure::v3_silence(
            self.engine.is_some(),
            self.answers_discovery,
            self.decrypted,
        )
    }
}

impl ItemFailure {
    /// Why an SNMPv3 requester that got no reply timed out, as far as its engine
    /// discovery tells: never answered (no engine known, or the one sent beside a retry
    /// went unanswered: `answers_discovery` `Some(false)`) is the agent's silence,
    /// whatever its keys; answered (`Some(true)`) while no Response was `decrypted` (in
    /// the iteration, or the walk) is a key the agent does not share; else (no such
    /// discovery sent, or Responses decrypted earlier: the agent went silent since) the
    /// old, uncertain words. The [`Iteration`]'s rule in one place, for the CLI's walker
    /// to follow.
    pub fn v3_silence(
        engine_known: bool,
        answers_discovery: Option<bool>,
        decrypted: bool,
    ) -> ItemFailure {
        match (engine_known, answers_discovery, decrypted) {
            (false, _, _) | (true, Some(false), _) => ItemFailure::DiscoveryTimeout,
            (true, Some(true), false) => ItemFailure::TimeoutDiscoveryAnswered,
            _ => ItemFailure::Timeout,
        }
    }
}

/// Resynchronizations allowed per host and iteration: an agent that keeps saying its
/// clock or engine changed fails its items instead of looping.
const MAX_RESYNCS: u8 = 2;

struct InFlight {
    host: u32,
    items: Vec<u32>,
    bytes: Vec<u8>,
    /// None while queued for retransmission.
    deadline: Option<Instant>,
    attempts: u32,
    purpose: Purpose,
    /// The host's [`UsmHost::generation`] when the request was encoded (0 for v1/v2c).
    generation: u32,
}

/// What a request in flight is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    /// Values for its items.
    Get,
    /// SNMPv3 engine discovery (no items).
    Discovery,
    /// One OID of a request that timed out, asked alone to learn whether the agent is
    /// up but ignores requests of that size (see [`Iteration::handle_timeout`]). Its
    /// answer delivers nothing (the item is still the timed-out request's) and its
    /// silence fails nothing by itself.
    Probe,
    /// SNMPv3 authPriv: an engine discovery sent beside the first retry of a request of
    /// a host whose engine is known (see [`Iteration::handle_timeout`]). It carries no
    /// key, so a live agent answers it with a Report whatever the privacy key; its fate
    /// only words the host's timeout.
    EngineProbe,
}

const ID_MASK: u32 = 0x7fff_ffff;

/// One polling iteration (see the module docs). Borrows the jobs: OIDs are not copied.
pub struct Iteration<'j> {
    jobs: &'j [HostJob],
    hosts: Vec<HostState>,
    opts: IterationOptions,
    table: HashMap<i32, InFlight>,
    timers: BinaryHeap<Reverse<(Instant, i32)>>,
    ready: VecDeque<u32>,
    retransmit: VecDeque<i32>,
    /// (host, item) to ask alone: see [`Purpose::Probe`].
    probes: VecDeque<(u32, u32)>,
    /// Hosts to send an engine discovery: see [`Purpose::EngineProbe`].
    engine_probes: VecDeque<u32>,
    events: VecDeque<Event>,
    pool: Vec<(Vec<u32>, Vec<u8>)>,
    /// SNMPv3: the copy of a datagram whose MAC is checked, and a decrypted PDU.
    scratch: (Vec<u8>, Vec<u8>),
    /// SNMPv3: the next encryption salt per agent address, shared by every job polling
    /// that address (several users or contexts of one agent, a rediscovered engine): a
    /// salt is never used twice under one key, whatever the jobs.
    salts: HashMap<SocketAddr, u64>,
    /// SNMPv3: the msgID of an earlier attempt of a request → the one it was sent
    /// again under (see [`Self::renew_v3`]), and the engine generation that earlier
    /// attempt was encoded for (a Report to it speaks of that engine and clock).
    aliases: HashMap<i32, (i32, u32)>,
    issued: u32,
    /// The hosts of each address, built at the first [`Self::handle_unreachable`]
    /// (most iterations have none).
    by_addr: Option<HashMap<SocketAddr, Vec<u32>>>,
    open_hosts: usize,
    /// [`Self::stop`] was called.
    stopping: bool,
    stats: Stats,
}

impl<'j> Iteration<'j> {
    /// Starts an iteration. Learned limits in `memory` lower each job's `max_oids`.
    /// Jobs without OIDs finish at once (their `HostDone` is the first events).
    pub fn new(jobs: &'j [HostJob], memory: &HostMemory, opts: IterationOptions) -> Iteration<'j> {
        let mut it = Iteration {
            jobs,
            hosts: Vec::with_capacity(jobs.len()),
            opts,
            table: HashMap::with_capacity(jobs.len().min(16_384)),
            timers: BinaryHeap::with_capacity(jobs.len().min(16_384)),
            ready: VecDeque::with_capacity(jobs.len()),
            retransmit: VecDeque::new(),
            probes: VecDeque::new(),
            engine_probes: VecDeque::new(),
            events: VecDeque::new(),
            pool: Vec::new(),
            scratch: Default::default(),
            salts: HashMap::new(),
            aliases: HashMap::new(),
            issued: 0,
            by_addr: None,
            open_hosts: 0,
            stopping: false,
            stats: Stats::default(),
        };
        for (i, job) in jobs.iter().enumerate() {
            let mut max_oids = job.max_oids.max(1);
            if let Some(m) = memory.max_oids(&job.addr) {
                max_oids = max_oids.min(m.max(1));
            }
            let empty = job.oids.is_empty();
            // Known culprits go alone first, the other items together after them (in
            // `requeue`, so the hot path that takes items from `next` never checks).
            let (mut solo, mut requeue, mut next, mut culprits) =
                (VecDeque::new(), VecDeque::new(), 0, Vec::new());
            let known = match memory.culprits.is_empty() {
                true => &[][..],
                false => memory.culprits(&job.addr),
            };
            if !known.is_empty() {
                culprits.extend(
                    (0..job.oids.len() as u32).filter(|&i| known.contains(&job.oids[i as usize])),
                );
                if !culprits.is_empty() {
                    solo.extend(culprits.iter().copied());
                    let mut c = culprits.iter().peekable();
                    requeue.extend((0..job.oids.len() as u32).filter(|&i| {
                        let is = c.peek() == Some(&&i);
                        if is {
                            c.next();
                        }
                        !is
                    }));
                    next = job.oids.len() as u32;
                }
            }
            let usm = match (job.version, &job.usm) {
                (Version::V3, Some(user)) => {
                    if let Some(&salt) = memory.salts.get(&job.addr) {
                        it.salts.insert(job.addr, salt);
                    }
                    Some(Box::new(UsmHost {
                        engine: memory.engines.get(&job.addr).map(|e| e.for_user(user)),
                        discovering: false,
                        resyncs_left: MAX_RESYNCS,
                        generation: 0,
                        probe: None,
                        probed: false,
                        answers_discovery: None,
                        decrypted: false,
                        parked: Vec::new(),
                    }))
                }
                _ => None,
            };
            it.hosts.push(HostState {
                next,
                requeue,
                solo,
                culprits,
                found: Vec::new(),
                cleared: Vec::new(),
                max_oids,
                start_max_oids: max_oids,
                max_ok: 0,
                failed_at: None,
                failed_silent: false,
                fails: Vec::new(),
                timed_out: false,
                probe: None,
                alive: false,
                parked: Vec::new(),
                dropped: None,
                inflight: Vec::new(),
                queued: !empty,
                finished: empty,
                usm,
            });
            if empty {
                it.events.push_back(Event::HostDone {
                    host: i,
                    timed_out: false,
                });
            } else {
                it.open_hosts += 1;
                it.ready.push_back(i as u32);
            }
        }
        for (i, job) in jobs.iter().enumerate() {
            if job.version == Version::V3 && job.usm.is_none() && !job.oids.is_empty() {
                it.kill_host(i, ItemFailure::Send("SNMPv3 host without a user".into()));
            }
        }
        it
    }

    /// Counters so far.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// True once every job has reported `HostDone` (events may still be queued).
    pub fn is_done(&self) -> bool {
        self.open_hosts == 0
    }

    /// True when [`Self::poll_transmit`] may have something to send now (drivers use it
    /// to decide whether to wake for the send pacer).
    pub fn has_sendable(&self) -> bool {
        !self.stopping && !self.retransmit.is_empty()
            || !self.probes.is_empty()
            || !self.engine_probes.is_empty()
            || (!self.ready.is_empty() && self.table.len() < self.opts.max_inflight_total)
    }

    /// Requests currently in flight.
    pub fn inflight(&self) -> usize {
        self.table.len()
    }

    /// Writes the next datagram into `buf` (cleared first). Retransmissions go first,
    /// then new requests round-robin over hosts that may send. `None` when nothing can be
    /// sent now (wait for a datagram or [`Self::poll_timeout`]).
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        buf.clear();
        if self.stopping {
            return None;
        }
        while let Some(id) = self.retransmit.pop_front() {
            let id = self.renew_v3(id, now);
            let Some(e) = self.table.get_mut(&id) else {
                continue;
            };
            let job = &self.jobs[e.host as usize];
            let deadline = now + job.timeout;
            e.deadline = Some(deadline);
            e.attempts += 1;
            buf.extend_from_slice(&e.bytes);
            self.timers.push(Reverse((deadline, id)));
            self.stats.retries += 1;
            return Some(Transmit {
                dst: job.addr,
                host: e.host as usize,
                request_id: id,
                retry: true,
            });
        }
        while let Some((h, item)) = self.probes.pop_front() {
            let st = &self.hosts[h as usize];
            let v3_unknown = st.usm.as_ref().is_some_and(|u| u.engine.is_none());
            if st.finished || st.probe.is_some() || v3_unknown {
                continue;
            }
            self.stats.probes += 1;
            let (id, mut items, mut bytes) = self.issue();
            items.push(item);
            self.encode_get(h as usize, id, &items, &mut bytes, now);
            return Some(self.launch(buf, h, id, items, bytes, now, Purpose::Probe));
        }
        while let Some(h) = self.engine_probes.pop_front() {
            let st = &self.hosts[h as usize];
            let known = st.usm.as_ref().is_some_and(|u| u.engine.is_some());
            if st.finished || !known {
                continue;
            }
            self.stats.engine_probes += 1;
            let (id, items, mut bytes) = self.issue();
            v3::encode_discovery(&mut bytes, id);
            return Some(self.launch(buf, h, id, items, bytes, now, Purpose::EngineProbe));
        }
        while let Some(&h) = self.ready.front() {
            if self.table.len() >= self.opts.max_inflight_total {
                return None;
            }
            self.ready.pop_front();
            let hu = h as usize;
            let job = &self.jobs[hu];
            let st = &mut self.hosts[hu];
            st.queued = false;
            let unsent = st.unsent(job);
            if st.finished || unsent == 0 || st.inflight.len() >= job.max_inflight.max(1) {
                continue;
            }
            let id = ((self.opts.first_request_id.wrapping_add(self.issued)) & ID_MASK) as i32;
            let (mut items, mut bytes) = self.pool.pop().unwrap_or_default();
            items.clear();
            bytes.clear();
            if let Some(u) = st.usm.as_deref_mut() {
                if u.discovering {
                    // Re-queued by the discovery's answer or death.
                    self.pool.push((items, bytes));
                    continue;
                }
                if u.engine.is_none() {
                    u.discovering = true;
                    self.issued += 1;
                    self.stats.discoveries += 1;
                    v3::encode_discovery(&mut bytes, id);
                    return Some(self.launch(buf, h, id, items, bytes, now, Purpose::Discovery));
                }
            }
            if let Some(i) = st.solo.pop_front() {
                items.push(i);
            } else {
                while items.len() < st.max_oids {
                    if let Some(i) = st.requeue.pop_front() {
                        items.push(i);
                    } else if (st.next as usize) < job.oids.len() {
                        items.push(st.next);
                        st.next += 1;
                    } else {
                        break;
                    }
                }
            }
            self.issued += 1;
            self.encode_get(hu, id, &items, &mut bytes, now);
            let st = &mut self.hosts[hu];
            let more = st.inflight.len() + 1 < job.max_inflight.max(1) && st.unsent(job) > 0;
            if more {
                st.queued = true;
                self.ready.push_back(h);
            }
            self.stats.requests += 1;
            return Some(self.launch(buf, h, id, items, bytes, now, Purpose::Get));
        }
        None
    }

    /// A new request-id, and empty buffers for its items and bytes (from the pool).
    fn issue(&mut self) -> (i32, Vec<u32>, Vec<u8>) {
        let id = ((self.opts.first_request_id.wrapping_add(self.issued)) & ID_MASK) as i32;
        self.issued += 1;
        let (mut items, mut bytes) = self.pool.pop().unwrap_or_default();
        items.clear();
        bytes.clear();
        (id, items, bytes)
    }

    /// SNMPv3: request `id`, about to be sent again, is encoded anew under a new msgID
    /// (RFC 3412 §6.2: a retransmission SHOULD take a new msgID, as net-snmp's do;
    /// an agent may drop a msgID it has seen as a duplicate) with the engine's clock
    /// now (a retry after a long timeout would be out of the time window) and a fresh
    /// salt. The old id stays an alias, so a late answer to an earlier attempt still
    /// counts. Returns the id the request goes under (`id` itself for v1/v2c, a
    /// discovery, or a host whose engine is gone).
    fn renew_v3(&mut self, id: i32, now: Instant) -> i32 {
        let Some(e) = self.table.get(&id) else {
            return id;
        };
        let h = e.host as usize;
        let Some(generation) = self.hosts[h]
            .usm
            .as_deref()
            .filter(|u| u.engine.is_some())
            .map(|u| u.generation)
        else {
            return id;
        };
        if e.purpose == Purpose::Discovery {
            return id;
        }
        let Some(mut e) = self.table.remove(&id) else {
            return id;
        };
        let sent_under = e.generation;
        let new = ((self.opts.first_request_id.wrapping_add(self.issued)) & ID_MASK) as i32;
        self.issued += 1;
        let mut bytes = std::mem::take(&mut e.bytes);
        bytes.clear();
        self.encode_get(h, new, &e.items, &mut bytes, now);
        e.bytes = bytes;
        e.generation = generation;
        let st = &mut self.hosts[h];
        for x in st.inflight.iter_mut().chain(st.parked.iter_mut()) {
            if *x == id {
                *x = new;
            }
        }
        if st.probe == Some(id) {
            st.probe = Some(new);
        }
        self.table.insert(new, e);
        self.aliases.insert(id, (new, sent_under));
        new
    }

    /// Encodes request `id`, a GET of `items` of host `h`, into `bytes`.
    fn encode_get(&mut self, h: usize, id: i32, items: &[u32], bytes: &mut Vec<u8>, now: Instant) {
        let job = &self.jobs[h];
        let oids = items.iter().map(|&i| &job.oids[i as usize]);
        match self.hosts[h].usm.as_deref().and_then(|u| u.engine.as_ref()) {
            Some(engine) => {
                let salt = self
                    .salts
                    .entry(job.addr)
                    .or_insert_with(|| first_salt(self.opts.salt_seed, h));
                // Keys localized by `Engine` always fit their cipher.
                let _ =
                    v3::encode_request(bytes, engine, salt, now, (id, id), RequestKind::Get, oids);
            }
            None => {
                encode_request(
                    bytes,
                    job.version,
                    job.community.as_bytes(),
                    id,
                    RequestKind::Get,
                    oids,
                );
            }
        }
    }

    /// Registers request `id` of host `h` in flight and hands its bytes out.
    #[allow(clippy::too_many_arguments)]
    fn launch(
        &mut self,
        buf: &mut Vec<u8>,
        h: u32,
        id: i32,
        items: Vec<u32>,
        bytes: Vec<u8>,
        now: Instant,
        purpose: Purpose,
    ) -> Transmit {
        let job = &self.jobs[h as usize];
        buf.extend_from_slice(&bytes);
        let deadline = now + job.timeout;
        let st = &mut self.hosts[h as usize];
        let generation = st.usm.as_ref().map_or(0, |u| u.generation);
        match (purpose, st.usm.as_deref_mut()) {
            (Purpose::Probe, _) => {
                st.probe = Some(id);
                st.alive = false;
            }
            (Purpose::EngineProbe, Some(u)) => u.probe = Some(id),
            _ => st.inflight.push(id),
        }
        self.table.insert(
            id,
            InFlight {
                host: h,
                items,
                bytes,
                deadline: Some(deadline),
                attempts: 1,
                purpose,
                generation,
            },
        );
        self.timers.push(Reverse((deadline, id)));
        Transmit {
            dst: job.addr,
            host: h as usize,
            request_id: id,
            retry: false,
        }
    }

    /// The next instant [`Self::handle_timeout`] has work, if any.
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        while let Some(&Reverse((t, id))) = self.timers.peek() {
            match self.table.get(&id) {
                Some(e) if e.deadline == Some(t) => {
                    return Some(match self.opts.deadline {
                        Some(d) if d < t => d,
                        _ => t,
                    });
                }
                _ => {
                    self.timers.pop();
                }
            }
        }
        if self.is_done() {
            None
        } else {
            self.opts.deadline
        }
    }

    /// Expires attempts whose timeout passed: retry (queued for [`Self::poll_transmit`])
    /// or, when retries are used up, fail the whole host.
    ///
    /// Some agents never answer a request whose answer would be too big for them,
    /// instead of saying tooBig. So the first retry of a request of several OIDs goes
    /// out with a probe beside it (unless one is in flight): its first OID alone. If the
    /// probe is answered and the request's last attempt is not, the agent is up and
    /// ignores that size: the request is halved (silent again below that size in one
    /// iteration: one OID per request, as Zabbix does) and the size remembered like a
    /// tooBig, instead of failing the host. A host down from the start answers neither
    /// and dies when it would without the probe (give or take the send gap between the
    /// retry and the probe: the last attempt waits for the probe's end). A host that
    /// answered a probe and then went down mid-iteration is given up one smaller request
    /// later. With `retries = 0` nothing is probed.
    ///
    /// An SNMPv3 authPriv agent drops a request it cannot decrypt without a word, as a
    /// down one does. So the first retry of a request of such a host whose engine is
    /// known goes out with an engine discovery beside it (once per host and iteration;
    /// it carries no key): if the agent answers it, the host's timeout says so
    /// ([`ItemFailure::TimeoutDiscoveryAnswered`]: a privacy key or protocol the agent
    /// does not share); if not, it is the agent's silence
    /// ([`ItemFailure::DiscoveryTimeout`]). A request whose last attempt times out
    /// before the probe ends waits for it (the probe was sent after the retry).
    pub fn handle_timeout(&mut self, now: Instant) {
        if let Some(d) = self.opts.deadline {
            if now >= d {
                for h in 0..self.hosts.len() {
                    if !self.hosts[h].finished {
                        self.kill_host(h, ItemFailure::Timeout);
                    }
                }
                return;
            }
        }
        while let Some(&Reverse((t, id))) = self.timers.peek() {
            if t > now {
                break;
            }
            self.timers.pop();
            let Some(e) = self.table.get_mut(&id) else {
                continue;
            };
            if e.deadline != Some(t) {
                continue;
            }
            let host = e.host as usize;
            match e.purpose {
                Purpose::Probe => {
                    self.end_probe(id, false);
                    continue;
                }
                Purpose::EngineProbe => {
                    self.end_engine_probe(id, Some(false));
                    continue;
                }
                Purpose::Get | Purpose::Discovery => {}
            }
            self.stats.timeouts += 1;
            if self.stopping {
                self.end_stopped(id);
                continue;
            }
            let (n, first, get) = (
                e.items.len(),
                e.items.first().copied(),
                e.purpose == Purpose::Get,
            );
            let attempts = e.attempts;
            let retry = attempts <= self.jobs[host].retries;
            e.deadline = None;
            let st = &mut self.hosts[host];
            st.timed_out = true;
            if retry {
                self.retransmit.push_back(id);
                let first_retry = attempts == 1;
                if let (true, Some(item)) =
                    (get && n > 1 && first_retry && st.probe.is_none(), first)
                {
                    self.probes.push_back((host as u32, item));
                }
                if get && first_retry {
                    self.queue_engine_probe(host);
                }
            } else if get && n > 1 && st.alive {
                self.silent_too_big(host, id);
            } else if get && n > 1 && st.probe.is_some() {
                st.parked.push(id);
            } else if let Some(u) = st.usm.as_deref_mut().filter(|u| u.probe.is_some()) {
                u.parked.push(id);
            } else {
                self.kill_host(host, ItemFailure::Timeout);
            }
        }
    }

    /// Ends the iteration early (the daemon stops): nothing more is sent (no new request,
    /// retry or probe), and the requests in flight are waited for until their current
    /// attempt's timeout, their answers delivered as usual. Every item not asked by
    /// then, or whose request's attempt times out, fails with [`ItemFailure::Stopped`]
    /// (not a timeout: nothing was learned of it), so the iteration ends within one
    /// timeout however many requests its slowest host had left.
    pub fn stop(&mut self) {
        if self.stopping {
            return;
        }
        self.stopping = true;
        self.ready.clear();
        self.probes.clear();
        self.engine_probes.clear();
        // Queued for retransmission or waiting on a probe: not in flight any more.
        let idle: Vec<i32> = self
            .table
            .iter()
            .filter(|(_, e)| e.deadline.is_none())
            .map(|(&id, _)| id)
            .collect();
        self.retransmit.clear();
        for id in idle {
            self.end_stopped(id);
        }
        for h in 0..self.hosts.len() {
            self.drop_probe(h);
            let st = &mut self.hosts[h];
            st.parked.clear();
            // Cut short: not an iteration that lets a learned limit grow.
            st.timed_out |= !st.finished;
            self.after_progress(h);
        }
    }

    /// Ends the iteration now (a stop whose grace ran out): as [`Self::stop`], and the
    /// requests still in flight end unanswered, their items failing with
    /// [`ItemFailure::Stopped`] (not polled). The iteration is then done.
    pub fn abandon(&mut self) {
        self.stop();
        let open: Vec<i32> = self.table.keys().copied().collect();
        for id in open {
            self.end_stopped(id);
        }
    }

    /// Request `id` ends without an answer while stopping: its items are not polled.
    fn end_stopped(&mut self, id: i32) {
        let Some(e) = self.take_request(id) else {
            return;
        };
        let host = e.host as usize;
        if e.purpose != Purpose::Probe {
            for &i in &e.items {
                self.fail(host, i as usize, ItemFailure::Stopped);
            }
        }
        self.recycle(e);
        self.after_progress(host);
    }

    /// Removes request `id` from the table and from its host's bookkeeping (in flight,
    /// parked, or its probe): the one way a request ends, so the host's lists never
    /// name a request that is gone.
    fn take_request(&mut self, id: i32) -> Option<InFlight> {
        let e = self.table.remove(&id)?;
        let st = &mut self.hosts[e.host as usize];
        match (e.purpose, st.usm.as_deref_mut()) {
            (Purpose::Probe, _) => st.probe = None,
            (Purpose::EngineProbe, Some(u)) => u.probe = None,
            (_, u) => {
                st.inflight.retain(|&x| x != id);
                st.parked.retain(|&x| x != id);
                if let Some(u) = u {
                    u.parked.retain(|&x| x != id);
                }
            }
        }
        Some(e)
    }

    /// Probe `id` was answered, or not (timeout, send error, Report): decides the
    /// requests parked on it.
    fn end_probe(&mut self, id: i32, answered: bool) {
        let Some(e) = self.take_request(id) else {
            return;
        };
        let host = e.host as usize;
        self.recycle(e);
        let st = &mut self.hosts[host];
        // Evidence for every request whose last attempt ends before the next probe.
        st.alive = answered;
        let parked = std::mem::take(&mut st.parked);
        if answered {
            self.stats.probes_answered += 1;
        }
        match (parked.is_empty(), answered) {
            (true, _) => {}
            (false, true) => {
                for id in parked {
                    self.silent_too_big(host, id);
                }
            }
            (false, false) => match self.hosts[host].usm.as_deref_mut() {
                // The engine probe's fate words the timeout: wait for it.
                Some(u) if u.probe.is_some() => u.parked.extend(parked),
                _ => self.kill_host(host, ItemFailure::Timeout),
            },
        }
    }

    /// Queues an engine probe (see [`Purpose::EngineProbe`]) for `host` if it is an
    /// SNMPv3 authPriv host whose engine is known and got none in this iteration.
    fn queue_engine_probe(&mut self, host: usize) {
        let Some(user) = self.jobs[host].usm.as_deref() else {
            return;
        };
        let Some(u) = self.hosts[host].usm.as_deref_mut() else {
            return;
        };
        if u.probed || u.engine.is_none() || user.level() != v3::SecurityLevel::AuthPriv {
            return;
        }
        u.probed = true;
        self.engine_probes.push_back(host as u32);
    }

    /// Engine probe `id` was answered by a Report (`Some(true)`), or not (timeout:
    /// `Some(false)`; send error: `None`, nothing learned): remembered for the host's
    /// timeout, and the requests parked on it time out now.
    fn end_engine_probe(&mut self, id: i32, answered: Option<bool>) {
        let Some(e) = self.take_request(id) else {
            return;
        };
        let host = e.host as usize;
        self.recycle(e);
        let Some(u) = self.hosts[host].usm.as_deref_mut() else {
            return;
        };
        u.answers_discovery = answered;
        if answered == Some(true) {
            self.stats.engine_probes_answered += 1;
        }
        if !std::mem::take(&mut u.parked).is_empty() {
            self.kill_host(host, ItemFailure::Timeout);
        }
    }

    /// Request `id` went unanswered while its agent answered one OID alone: as tooBig.
    fn silent_too_big(&mut self, host: usize, id: i32) {
        let Some(e) = self.take_request(id) else {
            return;
        };
        self.stats.silent_too_big += 1;
        let n = e.items.len();
        let st = &self.hosts[host];
        // Silent again below a size already found silent: one OID per request (as
        // Zabbix). Two requests of one size parked on one probe are one finding.
        let size = if st.failed_silent && st.failed_at.is_some_and(|f| n < f) {
            1
        } else {
            n / 2
        };
        self.shrink(host, n, size, true, &[]);
        self.requeue_front(host, &e.items);
        self.recycle(e);
        self.after_progress(host);
    }

    /// The driver could not send request `request_id`: its items fail with `text`, the
    /// host goes on with its other items.
    pub fn handle_send_error(&mut self, request_id: i32, text: &str) {
        match self.table.get(&request_id).map(|e| e.purpose) {
            Some(Purpose::Probe) => {
                self.stats.send_errors += 1;
                self.end_probe(request_id, false);
                return;
            }
            Some(Purpose::EngineProbe) => {
                self.stats.send_errors += 1;
                self.end_engine_probe(request_id, None);
                return;
            }
            _ => {}
        }
        let Some(e) = self.take_request(request_id) else {
            return;
        };
        self.stats.send_errors += 1;
        let host = e.host as usize;
        if e.purpose == Purpose::Discovery {
            // Without the agent's engine nothing else of the host can be sent.
            self.recycle(e);
            self.kill_host(host, ItemFailure::Send(text.to_string()));
            return;
        }
        for &i in &e.items {
            self.fail(host, i as usize, ItemFailure::Send(text.to_string()));
        }
        self.recycle(e);
        self.after_progress(host);
    }

    /// An ICMP error came back for a datagram sent to `dst` (the driver reads them off
    /// its sockets' error queues). The hosts polled at `dst` still wait for their
    /// timeouts, retries included, as net-snmp (and so Zabbix) does: a port may open
    /// between two attempts (an agent restarting), and a router's error may be a
    /// moment's. Their timeout's text says what came back instead of a reply
    /// ([`Dropped::Unreachable`]), the last thing seen, as a dropped reply's.
    pub fn handle_unreachable(&mut self, dst: SocketAddr, what: Unreachable) {
        self.stats.unreachable += 1;
        let jobs = self.jobs;
        let by_addr = self.by_addr.get_or_insert_with(|| {
            let mut m: HashMap<SocketAddr, Vec<u32>> = HashMap::new();
            for (h, j) in jobs.iter().enumerate() {
                m.entry(j.addr).or_default().push(h as u32);
            }
            m
        });
        for &h in by_addr.get(&dst).map_or(&[][..], Vec::as_slice) {
            let st = &mut self.hosts[h as usize];
            if !st.finished {
                st.dropped = Some(Dropped::Unreachable(what));
            }
        }
    }

    /// Feeds one received datagram.
    pub fn handle_datagram(&mut self, src: SocketAddr, bytes: &[u8], now: Instant) -> Received {
        // v1/v2c first: the v2c hot path parses its header once; only the decoder's
        // "version 3" refusal sends a datagram to the v3 path.
        let msg = match Message::decode(bytes) {
            Ok(m) => m,
            Err(DecodeError::UnsupportedVersion { version: 3 }) => {
                return self.handle_v3(src, bytes, now);
            }
            Err(e) => {
                self.stats.malformed += 1;
                if let Some(id) = peek_request_id(bytes) {
                    self.note_dropped(id, src, Dropped::Undecodable(e));
                }
                return Received::Malformed;
            }
        };
        let (host, id) = if msg.pdu_type == PduType::Response {
            match self.match_request(msg.request_id, src) {
                Ok(m) => m,
                Err(r) => return r,
            }
        } else {
            // Answers nothing, whatever its request-id: counted as not a Response (not as
            // stale, unknown or from elsewhere), its host told only when its request is
            // in flight and it came from where that went.
            let Some(host) = self.replier(msg.request_id, src) else {
                self.stats.not_response += 1;
                return Received::NotResponse;
            };
            (host, msg.request_id)
        };
        let job = &self.jobs[host];
        let Some(why) = msg.refusal(job.community.as_bytes(), job.version) else {
            return self.complete(id, &msg);
        };
        self.hosts[host].dropped = Some(why.into());
        match why {
            Refusal::NotResponse(_) => {
                self.stats.not_response += 1;
                Received::NotResponse
            }
            Refusal::WrongCommunity => {
                self.stats.wrong_community += 1;
                Received::WrongCommunity
            }
            Refusal::WrongVersion(_) => {
                self.stats.wrong_version += 1;
                Received::WrongVersion
            }
        }
    }

    /// A datagram carrying request-id `id` was dropped for `why`: when `id` is in flight
    /// and the datagram came from where the request went, it was the agent's reply,
    /// and its host's timeout will say why nothing was taken (else an agent that
    /// answers wrongly reads as one that never answers).
    fn note_dropped(&mut self, id: i32, src: SocketAddr, why: Dropped) {
        if let Some(host) = self.replier(id, src) {
            self.hosts[host].dropped = Some(why);
        }
    }

    /// The host of in-flight request `id` when `src` is where it went (nothing counted:
    /// for a datagram dropped whatever it answers).
    fn replier(&self, id: i32, src: SocketAddr) -> Option<usize> {
        let host = self.table.get(&id)?.host as usize;
        (src == self.jobs[host].addr).then_some(host)
    }

    /// The host of in-flight request `id` (or of the request an earlier attempt `id` of
    /// was renewed to: see [`Self::renew_v3`]), and the id it is in flight under, if
    /// `src` is where it went.
    fn match_request(&mut self, id: i32, src: SocketAddr) -> Result<(usize, i32), Received> {
        // An earlier attempt's msgID leads to the request's latest (an alias is never
        // in the table: `renew_v3` moved its request). Empty but for SNMPv3 retries.
        let mut id = id;
        while let Some(&(next, _)) = self.aliases.get(&id) {
            id = next;
        }
        let Some(e) = self.table.get(&id) else {
            let off = (id as u32).wrapping_sub(self.opts.first_request_id) & ID_MASK;
            if id >= 0 && off < self.issued {
                self.stats.stale += 1;
                return Err(Received::Stale);
            }
            self.stats.unknown_request_id += 1;
            return Err(Received::UnknownRequestId);
        };
        let host = e.host as usize;
        if src != self.jobs[host].addr {
            self.stats.wrong_source += 1;
            self.hosts[host].dropped = Some(Dropped::FromElsewhere(src));
            return Err(Received::WrongSource);
        }
        Ok((host, id))
    }

    /// Request `id` was answered by `msg`, an accepted Response.
    fn complete(&mut self, id: i32, msg: &Message<'_>) -> Received {
        let Some(purpose) = self.table.get(&id).map(|e| e.purpose) else {
            return Received::Stale;
        };
        self.stats.responses += 1;
        if purpose == Purpose::Probe {
            self.end_probe(id, true);
            return Received::Matched;
        }
        let Some(e) = self.take_request(id) else {
            return Received::Stale;
        };
        let host = e.host as usize;
        self.process_response(host, &e.items, msg);
        self.recycle(e);
        self.after_progress(host);
        Received::Matched
    }

    /// An SNMPv3 datagram: matched by msgID (our request-id too), then taken or refused
    /// by [`V3Message::answer`] with the keys of the host's user for its agent's engine.
    fn handle_v3(&mut self, src: SocketAddr, bytes: &[u8], now: Instant) -> Received {
        let msg = match V3Message::decode(bytes) {
            Ok(m) => m,
            Err(_) => {
                self.stats.malformed += 1;
                return Received::Malformed;
            }
        };
        let (host, id) = match self.match_request(msg.msg_id, src) {
            Ok(m) => m,
            Err(r) => return r,
        };
        // Borrowed from the jobs, which outlive the iteration (`self` stays free to
        // mutate): no reference count touched per reply.
        let jobs = self.jobs;
        let (Some(user), Some(u)) = (&jobs[host].usm, self.hosts[host].usm.as_deref_mut()) else {
            self.stats.wrong_version += 1;
            self.hosts[host].dropped = Some(Dropped::WrongVersion(Version::V3));
            return Received::WrongVersion;
        };
        let purpose = self.table.get(&id).map(|e| e.purpose);
        if purpose == Some(Purpose::EngineProbe) {
            // Matched as a discovery's answer is (a Report, no key): the agent is up.
            let mut scratch = std::mem::take(&mut self.scratch);
            let r = match msg.answer(bytes, user, None, None, &mut scratch, now) {
                Ok(Answer::Report { .. }) => {
                    self.stats.reports += 1;
                    self.end_engine_probe(id, Some(true));
                    Received::Report
                }
                Ok(Answer::Response(_)) => {
                    self.stats.not_response += 1;
                    Received::NotResponse
                }
                Err(why) => self.refused_v3(host, why, true),
            };
            self.scratch = scratch;
            return r;
        }
        let discovery = purpose == Some(Purpose::Discovery);
        // A discovery is answered by a Report only; any other request by its msgID.
        let request_id = (!discovery).then_some(msg.msg_id);
        let mut scratch = std::mem::take(&mut self.scratch);
        let r = match msg.answer(
            bytes,
            user,
            u.engine.as_mut(),
            request_id,
            &mut scratch,
            now,
        ) {
            Ok(Answer::Response(pdu)) => {
                u.decrypted = true;
                self.complete(id, &pdu)
            }
            Ok(Answer::Report { kind, authentic }) => {
                self.stats.reports += 1;
                if purpose == Some(Purpose::Probe) {
                    // The request it stands beside gets its own Report, and deals with it.
                    self.end_probe(id, false);
                } else {
                    self.on_report(host, id, kind, &msg, authentic, discovery, user, now);
                }
                Received::Report
            }
            Err(why) => self.refused_v3(host, why, discovery),
        };
        self.scratch = scratch;
        r
    }

    /// An SNMPv3 reply to a request of `host` was refused for `why` ([`V3Message::answer`]):
    /// counted, and the host's timeout will say why nothing was taken, as for a reply of
    /// another community (the last reason seen wins, as there). A discovery's is not
    /// told (what it refuses is no answer to the host's items).
    fn refused_v3(&mut self, host: usize, why: V3Refusal, discovery: bool) -> Received {
        let r = match why {
            V3Refusal::NotAuthentic | V3Refusal::NotDecrypted => {
                self.stats.not_authentic += 1;
                Received::NotAuthentic
            }
            V3Refusal::Garbled(_) | V3Refusal::Undecodable(_) => {
                self.stats.malformed += 1;
                Received::Malformed
            }
            V3Refusal::NotResponse(_) => {
                self.stats.not_response += 1;
                Received::NotResponse
            }
        };
        let told = Dropped::of_v3(why).filter(|_| !(discovery && r == Received::NotResponse));
        if let Some(d) = told {
            self.hosts[host].dropped = Some(d);
        }
        r
    }

    /// A Report answered request `id` of `host`.
    #[allow(clippy::too_many_arguments)]
    fn on_report(
        &mut self,
        host: usize,
        id: i32,
        kind: ReportKind,
        msg: &V3Message<'_>,
        authentic: bool,
        discovery: bool,
        user: &Arc<UsmUser>,
        now: Instant,
    ) {
        let Some(e) = self.take_request(id) else {
            return;
        };
        if !discovery {
            self.stats.refusals[kind.index()] += 1;
        }
        // A Report to an earlier attempt of a request sent again since (under a new
        // msgID, see `renew_v3`) speaks of the engine and clock that attempt was sent
        // with, not the retry's: judged as a report to it (taken for one to the retry,
        // a late notInTimeWindow after the clock was set spent another resync, and
        // could fail the host).
        let generation = match self.aliases.get(&msg.msg_id) {
            Some(&(_, sent_under)) if msg.msg_id != id => sent_under,
            _ => e.generation,
        };
        let items = e.items.clone();
        self.recycle(e);
        let Some(u) = self.hosts[host].usm.as_deref_mut() else {
            return;
        };
        if discovery {
            u.discovering = false;
            if msg.engine_id.is_empty() {
                self.kill_host(host, ItemFailure::Report(kind));
            } else {
                let engine = Engine::new(user.clone(), msg.engine_id, msg.boots, msg.time, now);
                u.engine = Some(engine);
                u.generation += 1;
                self.after_progress(host);
            }
            return;
        }
        if generation != u.generation {
            // Sent before the engine or its clock changed: the change is made, go again.
            self.requeue_front(host, &items);
            self.after_progress(host);
            return;
        }
        // The rule, and why, are ReportKind::resync's (the walker follows it too).
        let resync = match kind.resync(authentic) {
            Some(Resync::Clock) => {
                if let Some(e) = u.engine.as_mut() {
                    e.set_clock(msg.boots, msg.time, now);
                }
                u.generation += 1;
                true
            }
            Some(Resync::Rediscover) => {
                u.engine = None;
                u.generation += 1;
                true
            }
            None => false,
        };
        let again = resync && u.resyncs_left > 0;
        if again {
            u.resyncs_left -= 1;
        }
        self.requeue_front(host, &items);
        if again {
            self.after_progress(host);
        } else {
            // Wrong user, key or level: every request of this host would get the same.
            self.kill_host(host, ItemFailure::Report(kind));
        }
    }

    /// Next event, in order of occurrence.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Stores what this iteration learned (tooBig / short answers, or clean runs that
    /// let a limit grow again) into `memory`. Call once, after the iteration is done.
    pub fn save_learned(&self, memory: &mut HostMemory) {
        save_culprits(&self.hosts, self.jobs, memory);
        for (st, job) in self.hosts.iter().zip(self.jobs) {
            if let Some(u) = &st.usm {
                match &u.engine {
                    Some(e) => {
                        memory.engines.insert(job.addr, e.clone());
                    }
                    None => {
                        memory.engines.remove(&job.addr);
                    }
                }
            }
            if let Some(&salt) = self.salts.get(&job.addr) {
                memory.salts.insert(job.addr, salt);
            }
            match (st.failed_at, memory.max_oids.get_mut(&job.addr)) {
                (Some(failed), entry) => {
                    let (failed_at, silent) = match entry {
                        Some(l) if l.failed_at < failed => (l.failed_at, l.silent),
                        Some(l) if l.failed_at == failed => (failed, l.silent && st.failed_silent),
                        _ => (failed, st.failed_silent),
                    };
                    let learned = Learned {
                        max_oids: st.max_oids,
                        failed_at,
                        silent,
                        clean: 0,
                    };
                    memory.max_oids.insert(job.addr, learned);
                }
                (None, Some(l)) if st.finished && !st.timed_out && !job.oids.is_empty() => {
                    l.clean += 1;
                    if l.clean >= GROW_AFTER && l.max_oids + 1 < l.failed_at {
                        l.max_oids += 1;
                        l.clean = 0;
                    } else if l.silent && l.clean >= RETRY_SILENT_AFTER {
                        // Silence may have been two lost datagrams, not the size: try
                        // it again (a real limit costs one more probe, this rarely).
                        l.max_oids = l.failed_at;
                        l.failed_at = usize::MAX;
                        l.silent = false;
                        l.clean = 0;
                    }
                }
                _ => {}
            }
        }
    }

    fn process_response(&mut self, host: usize, items: &[u32], msg: &Message<'_>) {
        let n = items.len();
        let status = msg.error_status;
        if status == ErrorStatus::NO_ERROR {
            let count = msg.varbind_count();
            let job = &self.jobs[host];
            let asked = |k: usize| job.oids[items[k] as usize].as_ber();
            // The first varbind that is not the OID asked at its place; none: the answer
            // carries the OIDs asked, in their order (extra varbinds after them are
            // ignored).
            let astray = msg
                .varbinds()
                .zip(0..n)
                .find(|(vb, k)| vb.oid.as_ber() != asked(*k));
            if let Some((astray, _)) = astray {
                // Paired by position, every item after a gap or a foreign varbind would
                // get its neighbour's OID (an error, though the answer may carry its
                // value): paired by OID, the answered items get their values and the
                // others are asked again, alone. A short answer like this is an agent
                // that left some out (as some do for an OID they do not know, instead
                // of noSuchObject); a full one, an agent that answered in another order,
                // put in varbinds not asked or named an OID otherwise (Zabbix halves the
                // request until each OID is asked alone, and takes each answer then).
                let mut answered = vec![false; n];
                let mut got = Vec::new();
                for vb in msg.varbinds() {
                    if let Some(k) = (0..n).find(|&k| !answered[k] && vb.oid.as_ber() == asked(k)) {
                        answered[k] = true;
                        got.push((items[k], vb.value.to_owned()));
                    }
                }
                if n == 1 && got.is_empty() {
                    self.answered_alone_elsewhere(host, items[0], count, astray);
                    return;
                }
                if count < n {
                    self.stats.short_responses += 1;
                }
                for (i, v) in got {
                    self.deliver(host, i as usize, Ok(v));
                }
                let missing: Vec<u32> =
                    (0..n).filter(|&k| !answered[k]).map(|k| items[k]).collect();
                if missing.len() == n && count < n {
                    // Nothing it answered was asked: as a short answer of nothing.
                    self.shrink(host, n, n / 2, false, &[]);
                    self.requeue_front(host, &missing);
                } else if missing.is_empty() {
                    // Every OID answered, in another order: answered in full.
                    let st = &mut self.hosts[host];
                    st.max_ok = st.max_ok.max(n);
                } else {
                    // Each alone: an agent that leaves an OID out of a request of one
                    // answers with no varbind, which fails that item alone; one that
                    // names it otherwise answers it alone with one varbind, its value
                    // (as in Zabbix). The host's other items keep their request size
                    // (it was not a size problem): also when an earlier answer left one
                    // of them out at its end, which read as the agent returning what
                    // fits (a short answer of the first OIDs) and shrank the size, to be
                    // learned for good.
                    self.forget_left_out(host, &missing);
                    self.hosts[host].solo.extend(missing);
                }
                return;
            }
            // In order: each varbind is the OID asked at its place (compared above);
            // varbinds after the last OID asked are not asked and are ignored.
            for (vb, &i) in msg.varbinds().zip(items) {
                self.deliver(host, i as usize, Ok(vb.value.to_owned()));
            }
            if count >= n {
                let st = &mut self.hosts[host];
                st.max_ok = st.max_ok.max(n);
            }
            if count < n {
                self.stats.short_responses += 1;
                if n == 1 {
                    self.fail(host, items[0] as usize, ItemFailure::EmptyResponse);
                    // Left out alone too: so it was in a short answer before.
                    self.forget_left_out(host, items);
                } else {
                    // The agent returned what fits: ask for the rest with that size.
                    let size = if count > 0 { count } else { n / 2 };
                    self.shrink(host, n, size, false, &[]);
                    if let Some(f) = self.hosts[host].fails.last_mut() {
                        f.left_out = items[count..].to_vec();
                    }
                    self.requeue_front(host, &items[count..]);
                }
            }
            return;
        }
        if status == ErrorStatus::TOO_BIG {
            self.stats.too_big += 1;
            if n > 1 {
                self.shrink(host, n, n / 2, false, items);
                self.requeue_front(host, items);
            } else {
                let culprit = items[0];
                self.fail(host, culprit as usize, ItemFailure::ErrorStatus(status));
                // One value too big for any message (a long string on an agent with a
                // small message size): the halvings that isolated it went down to one
                // OID for its sake. The tooBigs of the requests it was in say nothing
                // of the agent's size limit: forgotten (else every iteration, which
                // finds it again, would learn a limit of the size it was isolated at,
                // and keep the host there for good). The host's other items go on at
                // the largest size it answered in full in this iteration, or at the
                // size it started with when nothing else failed.
                let st = &mut self.hosts[host];
                st.forget_fails(|f| f.items.contains(&culprit));
                st.settle_size();
            }
            return;
        }
        // noSuchName (v1), genErr, ...: an error-index (1-based) within the request names
        // the culprit; it fails, and the rest is asked again without it. Zabbix does so
        // for noSuchName only and fails the whole request on any other status; but the
        // index names the varbind that caused the error whatever the status (RFC 3416
        // §4.2.1), and the other items get their values for one more request.
        let idx = msg.error_index as usize;
        if (1..=n).contains(&idx) {
            self.fail(
                host,
                items[idx - 1] as usize,
                ItemFailure::ErrorStatus(status),
            );
            let rest: Vec<u32> = items
                .iter()
                .enumerate()
                .filter(|&(k, _)| k != idx - 1)
                .map(|(_, &i)| i)
                .collect();
            self.requeue_front(host, &rest);
        } else {
            // No usable index (0, or past the request's OIDs): the error is the
            // request's, and every item of it fails with it, in this one request, as in
            // Zabbix. An agent that refuses a whole view (authorizationError, noAccess)
            // or says genErr to everything answers each OID alone the same way: halving
            // to find a culprit cost about 4 requests per item, every iteration. Not
            // culprits either (nothing singled them out): asked together next time.
            let f = if idx == 0 {
                ItemFailure::ErrorStatus(status)
            } else {
                ItemFailure::ErrorIndexOutOfBounds {
                    status,
                    index: msg.error_index,
                    oids: n,
                }
            };
            for &i in items {
                self.deliver(host, i as usize, Err(f.clone()));
            }
        }
    }

    /// The answer to `item`'s OID, asked alone, carries `count` varbinds, `first` the
    /// first, none of them that OID. One varbind is its value, as Zabbix takes it
    /// (checks_snmp.c `zbx_snmp_get_values` logs the other OID at debug level and stores
    /// the value, 6.0 to 7.0): the request was of this OID alone and its request-id,
    /// address and community matched, so the value can be no other item's; counted in
    /// [`Stats::renamed`]. Several: which one answers it cannot be told, and the item
    /// fails as Zabbix fails it.
    fn answered_alone_elsewhere(
        &mut self,
        host: usize,
        item: u32,
        count: usize,
        first: VarBind<'_>,
    ) {
        if count == 1 {
            self.stats.renamed += 1;
            let st = &mut self.hosts[host];
            st.max_ok = st.max_ok.max(1);
            // Asked with others, its answer cannot be paired: a culprit to ask alone
            // from the start next time (delivered after, so its value does not clear
            // it), not by a request of several first, each poll.
            st.found.push(item);
            self.deliver(host, item as usize, Ok(first.value.to_owned()));
        } else {
            let first = first.oid.to_owned();
            self.fail(
                host,
                item as usize,
                ItemFailure::TooManyVarbinds { count, first },
            );
        }
    }

    /// A request of `failed` OIDs was too big (said by the agent, or by its `silent`
    /// answer to nothing but one OID): use `size` from now on.
    /// `too_big`: the request's items when the agent said tooBig (empty otherwise).
    fn shrink(&mut self, host: usize, failed: usize, size: usize, silent: bool, too_big: &[u32]) {
        let st = &mut self.hosts[host];
        st.fails.push(SizeFail {
            size: failed,
            silent,
            items: too_big.to_vec(),
            left_out: Vec::new(),
        });
        (st.failed_at, st.failed_silent) =
            merge_fail((st.failed_at, st.failed_silent), failed, silent);
        let size = size.max(1);
        if size < st.max_oids {
            st.max_oids = size;
        }
    }

    /// `items` turned out to be left out by the agent (not for their size): the size
    /// failures of short answers that left them out are forgotten (else the size they
    /// shrank to was learned, a failure at the full size keeping it from growing back).
    fn forget_left_out(&mut self, host: usize, items: &[u32]) {
        let st = &mut self.hosts[host];
        if st.forget_fails(|f| f.left_out.iter().any(|i| items.contains(i))) {
            st.settle_size();
        }
    }

    fn requeue_front(&mut self, host: usize, items: &[u32]) {
        let st = &mut self.hosts[host];
        for &i in items.iter().rev() {
            st.requeue.push_front(i);
        }
    }

    fn deliver(&mut self, host: usize, item: usize, result: Result<VarValue, ItemFailure>) {
        if result.is_ok() {
            self.stats.items_ok += 1;
            let st = &mut self.hosts[host];
            // A branch on an empty Vec for hosts without culprits.
            if !st.culprits.is_empty() && st.culprits.contains(&(item as u32)) {
                st.cleared.push(item as u32);
            }
        } else {
            self.stats.items_failed += 1;
        }
        self.events.push_back(Event::Item { host, item, result });
    }

    fn fail(&mut self, host: usize, item: usize, f: ItemFailure) {
        // The agent's own answer for this item (not a timeout, a send error or a
        // refusal of the host): a culprit to ask alone next time.
        if matches!(
            f,
            ItemFailure::ErrorStatus(_)
                | ItemFailure::EmptyResponse
                | ItemFailure::TooManyVarbinds { .. }
        ) {
            self.hosts[host].found.push(item as u32);
        }
        self.deliver(host, item, Err(f));
    }

    /// After a request of `host` ended: finish the host or let it send again (stopping:
    /// what it has not sent fails with [`ItemFailure::Stopped`]).
    fn after_progress(&mut self, host: usize) {
        if self.hosts[host].finished {
            return;
        }
        if self.stopping {
            let total = self.jobs[host].oids.len() as u32;
            let st = &mut self.hosts[host];
            let unsent: Vec<u32> = std::mem::take(&mut st.solo)
                .into_iter()
                .chain(std::mem::take(&mut st.requeue))
                .chain(std::mem::replace(&mut st.next, total)..total)
                .collect();
            for i in unsent {
                self.fail(host, i as usize, ItemFailure::Stopped);
            }
        }
        let job = &self.jobs[host];
        let st = &mut self.hosts[host];
        let unsent = st.unsent(job);
        if unsent == 0 && st.inflight.is_empty() {
            st.finished = true;
            self.open_hosts -= 1;
            self.drop_probe(host);
            self.events.push_back(Event::HostDone {
                host,
                timed_out: false,
            });
        } else if unsent > 0 && !st.queued && st.inflight.len() < job.max_inflight.max(1) {
            st.queued = true;
            self.ready.push_back(host as u32);
        }
    }

    fn kill_host(&mut self, host: usize, f: ItemFailure) {
        let timed_out = f == ItemFailure::Timeout;
        self.drop_probe(host);
        self.hosts[host].parked.clear();
        if let Some(u) = self.hosts[host].usm.as_deref_mut() {
            u.parked.clear();
        }
        let f = match (f, self.hosts[host].dropped.take()) {
            (ItemFailure::Timeout, Some(why)) => ItemFailure::Dropped(why),
            (ItemFailure::Timeout, None) => {
                (self.hosts[host].usm.as_deref()).map_or(ItemFailure::Timeout, UsmHost::silence)
            }
            (f, _) => f,
        };
        if timed_out {
            self.stats.hosts_timed_out += 1;
            // Not a clean iteration (the deadline can end a host before any attempt
            // expired).
            self.hosts[host].timed_out = true;
        }
        let ids = std::mem::take(&mut self.hosts[host].inflight);
        for id in ids {
            if let Some(e) = self.table.remove(&id) {
                for &i in &e.items {
                    self.fail(host, i as usize, f.clone());
                }
                self.recycle(e);
            }
        }
        let st = &mut self.hosts[host];
        let unsent: Vec<u32> = std::mem::take(&mut st.solo)
            .into_iter()
            .chain(std::mem::take(&mut st.requeue))
            .collect();
        for i in unsent {
            self.fail(host, i as usize, f.clone());
        }
        let total = self.jobs[host].oids.len() as u32;
        let next = std::mem::replace(&mut self.hosts[host].next, total);
        for i in next..total {
            self.fail(host, i as usize, f.clone());
        }
        self.hosts[host].finished = true;
        self.open_hosts -= 1;
        self.events.push_back(Event::HostDone { host, timed_out });
    }

    /// Forgets `host`'s probe, if any, without failing its item (the item belongs to
    /// another request): a late answer to it is stale.
    fn drop_probe(&mut self, host: usize) {
        if let Some(e) = self.hosts[host].probe.and_then(|id| self.take_request(id)) {
            self.recycle(e);
        }
        let engine_probe = self.hosts[host].usm.as_deref().and_then(|u| u.probe);
        if let Some(e) = engine_probe.and_then(|id| self.take_request(id)) {
            self.recycle(e);
        }
    }

    fn recycle(&mut self, e: InFlight) {
        if self.pool.len() < 4096 {
            self.pool.push((e.items, e.bytes));
        }
    }
}

/// Saves the culprits of the iteration's `hosts` (polling `jobs`) to `memory`: the
/// remembered ones that got a value are forgotten, then the ones found (again) are the
/// newest, at most [`MAX_CULPRITS`] kept per address. The others (not asked: the host
/// timed out; or OIDs of the host's other tasks) stay.
///
/// Every host's values first, every host's finds after: hosts at one address (other
/// communities, contexts or versions) can differ on an OID, and one host's value for
/// it must not undo another's find, which the order of the jobs decided (the culprit
/// was searched out again every other iteration). An OID one host found stays a
/// culprit; the others ask it alone too, one request, which the search costs at least.
fn save_culprits(hosts: &[HostState], jobs: &[HostJob], memory: &mut HostMemory) {
    for (st, job) in hosts.iter().zip(jobs) {
        if st.cleared.is_empty() {
            continue;
        }
        if let Some(list) = memory.culprits.get_mut(&job.addr) {
            list.retain(|o| !st.cleared.iter().any(|&c| job.oids[c as usize] == *o));
            if list.is_empty() {
                memory.culprits.remove(&job.addr);
            }
        }
    }
    for (st, job) in hosts.iter().zip(jobs) {
        if st.found.is_empty() {
            continue;
        }
        let list = memory.culprits.entry(job.addr).or_default();
        for &i in &st.found {
            let o = &job.oids[i as usize];
            match list.iter().position(|x| x == o) {
                // Found again: the newest.
                Some(k) => {
                    let o = list.remove(k);
                    list.push(o);
                }
                None => list.push(o.clone()),
            }
        }
        if list.len() > MAX_CULPRITS {
            list.drain(..list.len() - MAX_CULPRITS);
        }
    }
}

/// Where a new agent address's salts start: at a random place (the iteration's seed
/// mixed with the host), so two pollers of one agent never count through the same
/// values; a known address's counter just goes on.
fn first_salt(seed: u64, host: usize) -> u64 {
    splitmix(seed ^ (host as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// SplitMix64's finalizer: spreads a seed over all 64 bits.
fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests;
