//! Walking one agent's subtree: GETBULK (v2c, v3) or GETNEXT (v1), one request at a time
//! over a connected UDP socket (the kernel drops datagrams from any other source); for
//! v3 the agent's engine is discovered first. `netpoller snmp walk` prints what it
//! finds; discovery ([`crate::discovery`]) reads a table's rows with [`table_rows`].
//!
//! Invariants: a walk ends (the snmp crate's [`Walk`] stops at the subtree's end, on a
//! non-increasing OID and on endOfMibView; one that brings more than [`MAX_VARBINDS`]
//! varbinds fails);
//! each request waits at most `timeout × (retries + 1)`; foreign, stale or forged
//! datagrams are skipped, never taken as the answer: a v1/v2c answer is taken only
//! with the request's request-id, community and SNMP version, an SNMPv3 one only
//! under the msgID of one of the request's attempts and as the USM takes it, each by
//! the engine's own rule ([`Message::refusal`], [`V3Message::answer`]), and a request
//! whose replies were all refused times out saying why the last was, in the engine's
//! words ([`Dropped`]). A failure a polled item of the agent has too (a timeout, an
//! error-status, a Report) is an [`ItemFailed`]: the item's text and class, built by
//! the driver's own `item_error`. An SNMPv3 agent that rebooted or was replaced
//! mid-walk is followed by the driver's rule ([`snmp::v3::ReportKind::resync`]): after
//! its authenticated notInTimeWindow Report its clock is taken, after an
//! unknownEngineID (or an unauthenticated notInTimeWindow) its engine is discovered
//! again as at the walk's start ([`discover`]), and the request is sent again, at most
//! once after each (two Reports, as the driver allows a host two per iteration; one
//! more fails the walk); the walk goes on where it was, the varbinds `each` had before
//! kept. An authPriv walk's timeout tells a wrong privacy key from a silent agent as the
//! driver's does: an engine discovery (no key) goes beside the first retry of a request,
//! once per walk as the driver sends one per host and iteration, and its fate words the
//! timeout by the driver's rule ([`ItemFailure::v3_silence`]); its answer is taken under
//! its own msgID as the driver takes it (a Report), never as the request's. A closed
//! port is learnt from the ICMP port unreachable the connected socket is told of
//! ([`PortUnreachable`]); [`port_unreachable`] learns it so for `snmp get`,
//! whose requests go out on the daemon's unconnected sockets.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use poller::plan::SnmpParams;
// A request no reply was taken to, an error-status or an SNMPv3 agent's Report is said
// as a polled item's failure says it, so `snmp get` and `snmp walk` read alike.
use poller::snmp_driver::item_error;
use poller::source::SourceAddrs;
use poller::value::ItemError;
use snmp::v3::{Answer, Engine, Resync, V3Message};
use snmp::{Dropped, ItemFailure, Message, Oid, Unreachable, VarValue, Walk};

/// Most varbinds one walk takes: an agent could serve an endless table, which fails the
/// walk past them.
pub const MAX_VARBINDS: usize = 10_000_000;

/// The longest a walk waits for an answer without looking at its `stop` flag: what a
/// daemon's shutdown may wait for a walk in flight.
pub const STOP_CHECK: Duration = Duration::from_millis(200);

/// Whom to walk, and how: a host's agent with its SNMP parameters (their `Debug`
/// shows no community or key).
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub ip: IpAddr,
    pub snmp: &'a SnmpParams,
    /// GETBULK max-repetitions (v2c, v3).
    pub max_repetitions: u32,
    /// Where the requests leave from (`daemon.source_ip`, `--source`).
    pub source: SourceAddrs,
}

impl<'a> Target<'a> {
    /// A configured host's agent, as the daemon polls it (from `source`).
    pub fn of_host(ip: IpAddr, snmp: &'a SnmpParams, source: SourceAddrs) -> Target<'a> {
        Target {
            ip,
            snmp,
            // 10 rows per request, as net-snmp's snmpbulkwalk; fewer for an agent
            // configured with fewer OIDs per request (one that chokes on large PDUs).
            max_repetitions: snmp.max_oids_per_request.clamp(1, 10) as u32,
            source,
        }
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.ip, self.snmp.port)
    }
}

/// Walks the subtree under `root` (numeric, leading dot optional; one arc such as `1`
/// walks all of it), calling `each` with every varbind in order. Returns how many there
/// were. Fails on a timeout, an agent's error status, a non-increasing OID (after
/// `each` has had the varbinds of its answer before it), an error `each` returns, or
/// `stop` (checked before each request and at least every [`STOP_CHECK`] of a wait).
pub fn walk(
    t: &Target<'_>,
    root: &str,
    stop: &AtomicBool,
    each: impl FnMut(Oid, VarValue) -> anyhow::Result<()>,
) -> anyhow::Result<usize> {
    walk_at_most(t, root, stop, MAX_VARBINDS, each)
}

/// [`walk`], failing when the agent has more than `most` varbinds under `root` (after
/// `each` has had `most` of them).
fn walk_at_most(
    t: &Target<'_>,
    root: &str,
    stop: &AtomicBool,
    most: usize,
    mut each: impl FnMut(Oid, VarValue) -> anyhow::Result<()>,
) -> anyhow::Result<usize> {
    let addr = t.addr();
    let sock = connected(t)?;
    let bare = root.strip_prefix('.').unwrap_or(root);
    let mut w = match bare.parse::<u32>() {
        Ok(arc) => Walk::new_top(arc, t.snmp.version, t.max_repetitions),
        Err(_) => Some(Walk::new(
            root.parse::<Oid>()
                .with_context(|| format!("OID {root:?}"))?,
            t.snmp.version,
            t.max_repetitions,
        )),
    }
    .with_context(|| format!("OID {root:?}: the first arc must be 0, 1 or 2"))?;
    let mut id = random_id();
    let (mut req, mut rbuf) = (Vec::with_capacity(1500), vec![0u8; 65_536]);
    // The SNMPv3 MAC check's copy and decrypted PDU.
    let mut scratch = (Vec::new(), Vec::new());
    // SNMPv3 encryption salts: a random start, one up per request.
    let mut salt = random_id() as u64 ^ (u64::from(std::process::id()) << 32);
    let mut engine = match &t.snmp.usm {
        Some(user) => Some(discover(
            &sock, t, user, stop, &mut id, &mut req, &mut rbuf,
        )?),
        None => None,
    };
    // An authPriv agent drops a request it cannot decrypt without a word, as a down one
    // does: as the driver does once per host and iteration, the walk sends one engine
    // discovery (no key) beside the first retry of a request (`probe`: its msgID), whose
    // fate words a timeout ([`ItemFailure::v3_silence`]) with `decrypted`, whether a
    // Response was taken in the walk.
    let mut probe: Option<i32> = None;
    let (mut answers_discovery, mut decrypted) = (None, false);
    let probes = t
        .snmp
        .usm
        .as_ref()
        .is_some_and(|u| u.level() == snmp::v3::SecurityLevel::AuthPriv);
    let mut pbuf = Vec::new();
    let mut count = 0usize;
    while !w.is_done() {
        // What the answer brings: on a non-increasing OID, the rows before it too.
        let mut vbs = Vec::new();
        // The request is sent again once after the agent's clock report (it rebooted,
        // or its discovery report had no clock: the clock the report authenticated has
        // been taken), and once after it said it has another engine (replaced, or a
        // clock report it did not authenticate: discovered again as at the walk's
        // start, whose first request may resync its clock too); at most two Reports,
        // as the driver takes two per host and iteration. Another Report, or one of
        // these twice, fails the walk: the agent would say it again.
        let (mut resynced, mut rediscovered) = (false, false);
        // Why the last reply to the request was not taken, for its timeout; an ICMP
        // error that came back instead.
        let mut dropped = None;
        let mut icmp = None;
        let answered = loop {
            next_id(&mut id);
            req.clear();
            match engine.as_mut() {
                Some(e) => {
                    w.next_request_v3(&mut req, e, &mut salt, Instant::now(), id)
                        .context("the privacy key does not fit its cipher")?;
                }
                None => w.next_request(&mut req, t.snmp.community.as_bytes(), id),
            }
            // The msgIDs of the request's attempts: an SNMPv3 retry is encoded anew
            // under a new one (RFC 3412 §6.2: an agent may drop a msgID it has seen as
            // a duplicate; and its clock is now's), its request-id kept; an answer to
            // any attempt counts. v1/v2c attempts are the same bytes.
            let mut sent = vec![id];
            let mut answered = None;
            for k in 0..=t.snmp.retries {
                if let (true, Some(e)) = (k > 0, engine.as_ref()) {
                    if k == 1 && probes && probe.is_none() {
                        // Sent just before the retry: the retry's wait covers the
                        // discovery's whole timeout, as the driver's last attempt waits
                        // for its discovery's end.
                        probe = Some(next_id(&mut id));
                        pbuf.clear();
                        snmp::v3::encode_discovery(&mut pbuf, id);
                        send_probe(&sock, &pbuf, stop)?;
                    }
                    next_id(&mut id);
                    req.clear();
                    w.resend_v3(&mut req, e, &mut salt, Instant::now(), id)
                        .context("the privacy key does not fit its cipher")?;
                    sent.push(id);
                }
                answered = attempt(&sock, &req, t, stop, &mut rbuf, &mut icmp, |bytes| {
                    // Foreign, stale or forged datagrams are skipped, not fatal.
                    let Some(e) = engine.as_mut() else {
                        let m = match Message::decode(bytes) {
                            Ok(m) => m,
                            Err(err) => {
                                if snmp::peek_request_id(bytes) == Some(id) {
                                    dropped = Some(Dropped::Undecodable(err));
                                }
                                return None;
                            }
                        };
                        if m.request_id != id {
                            return None;
                        }
                        // The agent's reply (it carries the request's id), refused by the
                        // engine's rule: the timeout says why, as the engine's does.
                        let community = t.snmp.community.as_bytes();
                        if let Some(why) = m.refusal(community, t.snmp.version) {
                            dropped = Some(why.into());
                            return None;
                        }
                        return Some(
                            w.handle_response(&m, &mut vbs)
                                .map_err(|e| (failed_answer(t, e), None)),
                        );
                    };
                    let m = V3Message::decode(bytes).ok()?;
                    let (user, now) = (e.user().clone(), Instant::now());
                    if probe == Some(m.msg_id) {
                        // The engine discovery beside a retry, matched as the driver
                        // matches it (a Report, no key): the agent is up. Whatever it
                        // is, no answer to the request.
                        let r = m.answer(bytes, &user, None, None, &mut scratch, now);
                        if let Ok(Answer::Report { .. }) = r {
                            answers_discovery = Some(true);
                        }
                        return None;
                    }
                    // Only an answer to one of the request's attempts is looked at.
                    if !sent.contains(&m.msg_id) {
                        return None;
                    }
                    // The request-id is the first attempt's msgID (kept by resends).
                    match m.answer(
                        bytes,
                        &user,
                        Some(&mut *e),
                        Some(sent[0]),
                        &mut scratch,
                        now,
                    ) {
                        Ok(Answer::Response(r)) => {
                            decrypted = true;
                            Some(
                                w.handle_response(&r, &mut vbs)
                                    .map_err(|e| (failed_answer(t, e), None)),
                            )
                        }
                        Ok(Answer::Report { kind, authentic }) => {
                            let resync = kind.resync(authentic);
                            if resync == Some(Resync::Clock) {
                                // The engine's own word on its clock (RFC 3414 §4's second
                                // step).
                                e.set_clock(m.boots, m.time, now);
                            }
                            Some(Err((failed(t, &ItemFailure::Report(kind)), resync)))
                        }
                        // The agent's reply, refused by the engine's rule: the timeout
                        // says why, as the engine's does.
                        Err(why) => {
                            dropped = Dropped::of_v3(why).or(dropped.take());
                            None
                        }
                    }
                })?;
                if answered.is_some() {
                    break;
                }
            }
            // A Report the driver would resync after (ReportKind::resync), once each
            // for the request.
            match answered {
                Some(Err((_, Some(Resync::Clock)))) if !resynced => resynced = true,
                Some(Err((_, Some(Resync::Rediscover)))) if !rediscovered => {
                    rediscovered = true;
                    // Only an SNMPv3 walk has Reports (and so a user).
                    if let Some(user) = &t.snmp.usm {
                        engine = Some(discover(
                            &sock, t, user, stop, &mut id, &mut req, &mut rbuf,
                        )?);
                    }
                }
                other => break other.map(|r| r.map_err(|(text, _)| text)),
            }
        };
        let failure = match (answered, dropped.or(icmp.map(Dropped::Unreachable))) {
            // Nothing came back: for an authPriv user, a wrong privacy key looks so,
            // unless the discovery beside a retry told (unanswered by now, it went
            // unanswered: it was sent before the retry, which waited a whole timeout).
            (None, None) => {
                let told = answers_discovery.or(probe.map(|_| false));
                let silence = match engine {
                    Some(_) => ItemFailure::v3_silence(true, told, decrypted),
                    None => ItemFailure::Timeout,
                };
                return Err(failed(t, &silence));
            }
            (None, Some(why)) => return Err(failed(t, &ItemFailure::Dropped(why))),
            (Some(r), _) => r.err(),
        };
        // The rows an answer brought before its error are the walk's (as net-snmp
        // prints them before "OID not increasing"); the error still fails the walk.
        for (oid, v) in vbs {
            if count == most {
                bail!("{addr}: stopped after {most} varbinds: the agent may loop");
            }
            count += 1;
            each(oid, v)?;
        }
        if let Some(e) = failure {
            return Err(e);
        }
    }
    Ok(count)
}

/// Discovers the agent's engine for `user` (RFC 3414 §4): a request that carries no
/// user and no key, under a new msgID (`id` moves on; `req` and `rbuf` are the walk's
/// buffers), sent as it is up to the target's retries. At the walk's start and after a
/// Report that the agent's engine changed ([`Resync::Rediscover`]); fails as a polled
/// item whose discovery went unanswered.
fn discover(
    sock: &UdpSocket,
    t: &Target<'_>,
    user: &std::sync::Arc<snmp::v3::UsmUser>,
    stop: &AtomicBool,
    id: &mut i32,
    req: &mut Vec<u8>,
    rbuf: &mut [u8],
) -> anyhow::Result<Engine> {
    let id = next_id(id);
    req.clear();
    snmp::v3::encode_discovery(req, id);
    // Sent again as it is: a discovery has no clock, and no agent's engine knows its
    // msgID.
    let mut icmp = None;
    for _ in 0..=t.snmp.retries {
        let found = attempt(sock, req, t, stop, rbuf, &mut icmp, |bytes| {
            let m = V3Message::decode(bytes).ok()?;
            (m.msg_id == id && !m.engine_id.is_empty())
                .then(|| (m.engine_id.to_vec(), m.boots, m.time))
        })?;
        if let Some((eid, boots, time)) = found {
            return Ok(Engine::new(user.clone(), &eid, boots, time, Instant::now()));
        }
    }
    // An ICMP error that came back says more than the silence.
    let why = icmp.map_or(ItemFailure::DiscoveryTimeout, |u| {
        ItemFailure::Dropped(Dropped::Unreachable(u))
    });
    Err(failed(t, &why))
}

/// Sends the engine discovery `probe` beside a retry (unless `stop`): a send error
/// learns nothing, as the driver's (the retry's own send says what it is), but an ICMP
/// port unreachable the socket was told of, which the send takes, is the walk's
/// ([`PortUnreachable`]), as the attempt's wait would have made it.
fn send_probe(sock: &UdpSocket, probe: &[u8], stop: &AtomicBool) -> anyhow::Result<()> {
    if stop.load(Ordering::Relaxed) {
        return Ok(());
    }
    match sock.send(probe) {
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            Err(PortUnreachable(sock.peer_addr()?).into())
        }
        _ => Ok(()),
    }
}

/// A table row's index: the arcs of its cells' OIDs under their column (ifIndex 3:
/// `[3]`; a bgpPeerTable row: the peer's address, `[10, 0, 0, 1]`).
pub type Index = Box<[u32]>;

/// The rows of a table column: each varbind's arcs under `column`, for the values
/// `takes` takes (as [`value_text`]; `None`: an exception), sorted (in OID order) and
/// distinct. `stop` ends the walk between two answers.
pub fn table_rows(
    t: &Target<'_>,
    column: &Oid,
    takes: impl Fn(Option<&str>) -> bool,
    stop: &AtomicBool,
) -> anyhow::Result<Vec<Index>> {
    let mut rows: Vec<Index> = column_values(t, column, stop)?
        .into_iter()
        .filter(|(_, v)| takes(v.as_deref()))
        .map(|(row, _)| row)
        .collect();
    rows.sort_unstable();
    rows.dedup();
    warn_if_columns(column, &rows);
    Ok(rows)
}

/// Warns that a walk of `column` found `rows` (sorted) that look like a table's
/// columns × rows ([`looks_like_columns`]), once per OID for the process: discovery
/// walks a rule's column on every host at every interval, and the advice is about the
/// OID configured, which the first warning has said (later ones log at debug).
fn warn_if_columns(column: &Oid, rows: &[Index]) {
    // Only OIDs warned of are kept: a few, however many walks.
    static WARNED: std::sync::Mutex<Vec<Oid>> = std::sync::Mutex::new(Vec::new());
    if !looks_like_columns(column, rows) {
        return;
    }
    let mut warned = WARNED.lock().unwrap_or_else(|e| e.into_inner());
    if warned.contains(column) {
        tracing::debug!(oid = %column, "its rows look like a table's columns × rows again");
        return;
    }
    warned.push(column.clone());
    tracing::warn!(oid = %column, "its rows look like a table's columns × rows (k.1, k.2, … for several k): if it is a table or its entry, walk one column of it instead (ifDescr: 1.3.6.1.2.1.2.2.1.2); said once for this OID");
}

/// Each row of a table column with its value as text ([`value_text`]; `None` for an
/// exception), in the agent's order. Refuses a walk whose values are of more than one
/// type: a column's are all of its one syntax, so that walk crossed columns (the OID is
/// a table or its entry, whose "rows" would be column.row pairs).
pub fn column_values(
    t: &Target<'_>,
    column: &Oid,
    stop: &AtomicBool,
) -> anyhow::Result<Vec<(Index, Option<String>)>> {
    column_values_at_most(t, column, stop, MAX_COLUMN_ROWS)
}

/// [`column_values`], failing past `most` rows.
fn column_values_at_most(
    t: &Target<'_>,
    column: &Oid,
    stop: &AtomicBool,
    most: usize,
) -> anyhow::Result<Vec<(Index, Option<String>)>> {
    let root_arcs = column.arcs().count();
    let mut out = Vec::new();
    let mut syntax: Option<(std::mem::Discriminant<VarValue>, &'static str)> = None;
    walk(t, &column.to_string(), stop, |oid, v| {
        // Exceptions have no type; a NULL (some agents' "no value") is not one either.
        if let Some(label) = v.net_snmp_type().filter(|_| v != VarValue::Null) {
            let d = std::mem::discriminant(&v);
            match syntax {
                None => syntax = Some((d, label)),
                Some((first, l)) if first != d => {
                    return Err(NotAColumn(format!(
                        "{column} is not one column of a table: its values are of more than one type ({l}, {label}); walk one column (ifDescr: 1.3.6.1.2.1.2.2.1.2), not the table or its entry"
                    ))
                    .into())
                }
                Some(_) => {}
            }
        }
        if out.len() >= most {
            return Err(NotAColumn(format!("{column} has more than {most} rows: not a table to discover items in (one item stands for at most 65,536)")).into());
        }
        // The walk yields only OIDs under its root: at least one arc more.
        out.push((oid.arcs().skip(root_arcs).collect(), value_text(&v)));
        Ok(())
    })?;
    Ok(out)
}

/// Why [`column_values`] (and [`table_rows`]) refused a walk that went well: what is
/// under the OID is not a table column to discover rows in (values of several types,
/// too many rows). The OID asked for is at fault, not the agent.
#[derive(Debug)]
pub struct NotAColumn(String);

impl std::fmt::Display for NotAColumn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotAColumn {}

/// Most rows [`column_values`] keeps (each in memory until the walk ends): an agent
/// serving an endless or huge table (a routing table) fails the walk instead of
/// filling the daemon's memory for rows no item could stand for.
pub const MAX_COLUMN_ROWS: usize = 1 << 20;

/// Column numbers a table's entry has at most, as far as [`looks_like_columns`] is
/// concerned: an entry numbers its columns 1, 2, … and has a few dozen at most, while
/// the first arc of a multi-arc index (an ifIndex of 11001 on a Cisco switch, a policy
/// index, an address's first octet) is often larger.
const MAX_COLUMN: u32 = 255;

/// Whether the `rows` (sorted) that a walk of `root` found look like a table's columns
/// × rows rather than one column's rows. The walk of an entry (`TABLE.1`: SMIv2 names a
/// table's entry so) finds `k.i` for each column number `k` and row index `i`; that of
/// the table itself `1.k.i`. So: the walk was of an OID that ends in 1 (an entry), or
/// every row begins with 1 (a table's entry); the arc after it falls in several small
/// numbers ([`MAX_COLUMN`]), each with more than one row; and each of these repeats
/// the same indices. A walk of a table or its entry whose columns share one type gets
/// past [`column_values`]' check; this catches most of those.
///
/// One column's rows of a multi-arc index can have that shape too (ifIndex × queue,
/// `cbQosPolicyIndex.cbQosObjectsIndex`, peers' addresses in 10.0.x.y and 10.1.x.y):
/// they are taken for columns only when the walk's OID could be an entry's or each
/// row begins with 1, the first arcs are small, and every group has the same rest. A
/// table's first column (`TABLE.1.1`, ending in 1) indexed by two small numbers where
/// every first has the same seconds still looks the same, so it is a warning, not a
/// refusal.
fn looks_like_columns(root: &Oid, rows: &[Index]) -> bool {
    let entry = root.arcs().last() == Some(1) && columns_by_rows(rows);
    let table = !rows.is_empty() && rows.iter().all(|r| r.len() > 2 && r[0] == 1) && {
        let under_entry: Vec<Index> = rows.iter().map(|r| Box::from(&r[1..])).collect();
        columns_by_rows(&under_entry)
    };
    entry || table
}

/// Whether `rows` (sorted) are `k.i` for several column numbers `k`, each with more
/// than one row, all with the same `i`s.
fn columns_by_rows(rows: &[Index]) -> bool {
    let groups: Vec<&[Index]> = rows
        .chunk_by(|a, b| a.len() > 1 && b.len() > 1 && a[0] == b[0])
        .collect();
    groups.len() > 1
        && groups[0].len() > 1
        && groups.iter().all(|g| {
            (1..=MAX_COLUMN).contains(&g[0][0])
                && g.len() == groups[0].len()
                && g.iter()
                    .zip(groups[0])
                    .all(|(a, b)| a.len() > 1 && a[1..] == b[1..])
        })
}

/// A value as text, for a row filter (`None`: an exception, which never matches): a
/// printable string as it is, binary as Hex-STRING, numbers in decimal (an
/// Opaque-wrapped one too, as a `str` item has it: `0.15` for UCD-SNMP's `laLoadFloat`),
/// a NULL as the text `NULL` (Zabbix's walk hands a discovery that text, as a `str`
/// item stores it).
pub fn value_text(v: &VarValue) -> Option<String> {
    Some(match v {
        VarValue::Null => poller::snmp_convert::NULL_TEXT.into(),
        VarValue::Integer(i) => i.to_string(),
        VarValue::Counter32(n) | VarValue::Gauge32(n) | VarValue::TimeTicks(n) => n.to_string(),
        VarValue::Counter64(n) => n.to_string(),
        VarValue::OctetString(s) if snmp::is_net_snmp_printable(s) => {
            String::from_utf8_lossy(s).into_owned()
        }
        VarValue::OctetString(s) => snmp::hex_string(s),
        VarValue::Opaque(b) => poller::snmp_convert::opaque_text(b),
        VarValue::Oid(o) => o.to_string(),
        VarValue::IpAddress(a) => a.to_string(),
        _ => return None,
    })
}

/// An answer that fails the walk, said as a polled item's would be where the daemon has
/// words for it (an error-status: Zabbix's `SNMP error: (genError) ...`, as `snmp get`
/// says it), else as the walk's error with the agent's address.
fn failed_answer(t: &Target<'_>, e: snmp::WalkError) -> anyhow::Error {
    match e {
        snmp::WalkError::ErrorStatus { status, .. } => failed(t, &ItemFailure::ErrorStatus(status)),
        e => anyhow::anyhow!("{}: {e}", t.addr()),
    }
}

/// A walk's failure that a polled item of the agent has too, in its words and with its
/// class ([`ItemError::reason`]): what `snmp walk --json` gives as the `reason`.
#[derive(Debug)]
pub struct ItemFailed(pub ItemError);

impl std::fmt::Display for ItemFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The text alone, as the item's error is shown (its class is a field apart).
        f.write_str(&self.0.text)
    }
}

impl std::error::Error for ItemFailed {}

/// `f`, as a polled item of `t`'s agent would fail with it ([`item_error`]).
fn failed(t: &Target<'_>, f: &ItemFailure) -> anyhow::Error {
    ItemFailed(item_error(&t.snmp.job(t.addr(), Vec::new()), f)).into()
}

/// Moves `id` to the next request-id or msgID (positive, as RFC 3416 and 3412 want
/// them), and returns it.
fn next_id(id: &mut i32) -> i32 {
    *id = id.wrapping_add(1) & 0x7fff_ffff;
    *id
}

fn random_id() -> i32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    (h.finish() as i32) & 0x7fff_ffff
}

/// A UDP socket from the target's source, connected to its agent: the kernel drops
/// datagrams from any other source, and tells an ICMP port unreachable that came back
/// (`ECONNREFUSED`). Every other ICMP error too (`IP_RECVERR`: a router's host
/// unreachable, which a connected socket is not told of otherwise, a firewall's
/// reject, which failed the walk with "No route to host"), with who sent it: a walk's
/// timeout names it, as the daemon's items do ([`attempt`]).
fn connected(t: &Target<'_>) -> anyhow::Result<UdpSocket> {
    let addr = t.addr();
    let sock = t
        .source
        .udp_socket(addr.is_ipv6())
        .context("binding a UDP socket")?;
    if let Err(e) = poller::sockets::set_recverr(sock.as_raw_fd(), addr.is_ipv6()) {
        tracing::debug!(error = %e, "IP_RECVERR unavailable: ICMP errors are not named");
    }
    sock.connect(addr)
        .with_context(|| format!("connecting to {addr}"))?;
    Ok(sock)
}

/// The agent's port is unreachable: an ICMP port unreachable came back (on loopback
/// at once; a firewall may drop them, and the request times out instead).
#[derive(Debug)]
pub struct PortUnreachable(pub SocketAddr);

impl std::fmt::Display for PortUnreachable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: port unreachable (nothing listens there)", self.0)
    }
}

impl std::error::Error for PortUnreachable {}

/// Whether the target's port proves unreachable, learnt as a walk learns it: one
/// request for `oid` (a GET in v1/v2c; in v3 an engine discovery, which carries no
/// user and no key) over a [`connected`] socket, waiting one timeout at most, or
/// until `stop`. `false` when anything came back, nothing did, or the probe could not
/// be sent (`snmp get`'s own requests say then what happened).
pub fn port_unreachable(t: &Target<'_>, oid: &Oid, stop: &AtomicBool) -> bool {
    let Ok(sock) = connected(t) else {
        return false;
    };
    let mut req = Vec::with_capacity(256);
    let id = random_id();
    match t.snmp.usm {
        Some(_) => {
            snmp::v3::encode_discovery(&mut req, id);
        }
        None => {
            snmp::encode_request(
                &mut req,
                t.snmp.version,
                t.snmp.community.as_bytes(),
                id,
                snmp::RequestKind::Get,
                std::iter::once(oid),
            );
        }
    }
    let mut rbuf = vec![0u8; 65_536];
    attempt(&sock, &req, t, stop, &mut rbuf, &mut None, |_| Some(()))
        .is_err_and(|e| e.downcast_ref::<PortUnreachable>().is_some())
}

/// The ICMP errors queued on `sock` (its [`connected`] agent's), read; the last into
/// `icmp`. How many messages the queue held.
fn read_icmp_errors(sock: &UdpSocket, icmp: &mut Option<Unreachable>) -> usize {
    poller::sockets::read_error_queue(sock.as_raw_fd(), 64, |_, _, u| *icmp = Some(u)).messages
}

/// One attempt: sends `req` and waits the target's timeout for a datagram `accept`
/// takes; `None` when none came (the caller makes the target's retries). An ICMP port
/// unreachable ends it ([`PortUnreachable`]); another ICMP error that came back is kept
/// in `icmp` (the last) and the wait goes on, as the daemon waits (a flapping route, a
/// neighbour entry that comes back), for the caller to name it in its timeout.
fn attempt<T>(
    sock: &UdpSocket,
    req: &[u8],
    t: &Target<'_>,
    stop: &AtomicBool,
    rbuf: &mut [u8],
    icmp: &mut Option<Unreachable>,
    mut accept: impl FnMut(&[u8]) -> Option<T>,
) -> anyhow::Result<Option<T>> {
    let addr = sock.peer_addr()?;
    anyhow::ensure!(!stop.load(Ordering::Relaxed), "stopped");
    // An earlier attempt's ICMP error, pending on the socket, fails the send that takes
    // it, whatever the datagram: read, then the request goes again, by the drivers' rule
    // (a datagram's own error fails it again).
    let mut tries = poller::sockets::SendAttempts::default();
    loop {
        match sock.send(req) {
            Ok(_) => break,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                return Err(PortUnreachable(addr).into());
            }
            Err(_) if tries.retry(read_icmp_errors(sock, icmp)) => {}
            Err(e) => return Err(e).with_context(|| format!("sending to {addr}")),
        }
    }
    let deadline = Instant::now() + t.snmp.timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        anyhow::ensure!(!stop.load(Ordering::Relaxed), "stopped");
        sock.set_read_timeout(Some(left.min(STOP_CHECK)))?;
        let n = match sock.recv(rbuf) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                // A slice of the wait has passed (the deadline is checked above).
                continue;
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                read_icmp_errors(sock, &mut None);
                return Err(PortUnreachable(addr).into());
            }
            // The socket's pending error: an ICMP error came back, which its error
            // queue holds.
            Err(e) if read_icmp_errors(sock, icmp) == 0 => return Err(e).context("receiving"),
            Err(_) => continue,
        };
        if let Some(t) = accept(&rbuf[..n]) {
            return Ok(Some(t));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use snmp::PduType;

    /// A discovery filter sees an Opaque-wrapped number as the number a `str` item of
    /// it holds (UCD-SNMP's `laLoadFloat`), not its octets in hex (`9F 78 04 ...`),
    /// which no filter on the value would match; other Opaque values stay hex.
    #[test]
    fn a_filter_sees_an_opaque_number_as_a_str_item_has_it() {
        let opaque = |b: &[u8]| value_text(&VarValue::Opaque(b.to_vec()));
        let mut float = vec![0x9f, 0x78, 4];
        float.extend_from_slice(&0.15f32.to_be_bytes());
        let as_item = |b: &[u8]| {
            let v = VarValue::Opaque(b.to_vec());
            match poller::snmp_convert::convert(&v, poller::value::ValueType::Str) {
                Ok(poller::value::Value::Str(s)) => Some(s),
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(opaque(&float), as_item(&float));
        assert!(opaque(&float).unwrap().starts_with("0.15"));
        assert_eq!(opaque(&[0x9f, 0x7a, 1, 0xff]).as_deref(), Some("-1"));
        assert_eq!(opaque(&[0x9f, 0x77, 1, 5]).as_deref(), Some("9F 77 01 05"));
    }

    /// A filter sees a NULL as the text `NULL`, as a `str` item holds it and Zabbix's
    /// walk gives a discovery macro (it saw no value, which no condition takes); an
    /// exception still has none.
    #[test]
    fn a_filter_sees_a_null_as_a_str_item_has_it() {
        let as_item =
            match poller::snmp_convert::convert(&VarValue::Null, poller::value::ValueType::Str) {
                Ok(poller::value::Value::Str(s)) => s,
                other => panic!("{other:?}"),
            };
        assert_eq!(value_text(&VarValue::Null), Some(as_item));
        assert_eq!(value_text(&VarValue::NoSuchInstance), None);
    }

    fn rows(list: &[&[u32]]) -> Vec<Index> {
        list.iter().map(|r| Box::from(*r)).collect()
    }

    /// An agent on loopback, a thread of the test: each GETBULK at `column.N` (`N` 0
    /// at the column itself) gets `column.R = INTEGER: 1` for each `R` of `rows(N)`.
    /// Its parameters (v2c, a 1 s timeout, no retries); it stops 5 s after the last
    /// request.
    fn agent(column: &Oid, rows: impl Fn(u32) -> Vec<u32> + Send + 'static) -> SnmpParams {
        agent_at("127.0.0.1", column, true, rows)
    }

    /// [`agent`], on address `ip` (a loopback address). `ends`: where `rows` gives none,
    /// the answer is the next column's first cell, as a real agent's past the column's
    /// end; otherwise an answer without varbinds.
    fn agent_at(
        ip: &str,
        column: &Oid,
        ends: bool,
        rows: impl Fn(u32) -> Vec<u32> + Send + 'static,
    ) -> SnmpParams {
        let col = column.clone();
        raw_agent_at(ip, move |m| {
            let asked = m.varbinds().next().unwrap().oid.to_owned();
            let at = asked.arcs().nth(col.arcs().count()).unwrap_or(0);
            let mut rows: Vec<(Oid, VarValue)> = rows(at)
                .into_iter()
                .map(|i| (format!("{col}.{i}").parse().unwrap(), VarValue::Integer(1)))
                .collect();
            if rows.is_empty() && ends {
                rows.push((next_column(&col), VarValue::Integer(1)));
            }
            let mut out = Vec::new();
            snmp::encode_response(
                &mut out,
                m,
                rows.iter().map(|(o, v)| (o.as_ref(), v.as_ref())),
            );
            vec![out]
        })
    }

    /// The first cell of the column after `column` (`….C` → `….C+1.1`): what an agent
    /// answers past `column`'s end.
    fn next_column(column: &Oid) -> Oid {
        let mut arcs: Vec<u32> = column.arcs().collect();
        *arcs.last_mut().unwrap() += 1;
        arcs.push(1);
        Oid::from_arcs(&arcs).unwrap()
    }

    /// An agent on loopback address `ip`, a thread of the test: `answer` gets each
    /// request and gives the datagrams sent back, in order. Its parameters as
    /// [`agent`]'s; it stops 5 s after the last request.
    fn raw_agent_at(
        ip: &str,
        mut answer: impl FnMut(&Message<'_>) -> Vec<Vec<u8>> + Send + 'static,
    ) -> SnmpParams {
        let agent = std::net::UdpSocket::bind((ip, 0)).unwrap();
        let port = agent.local_addr().unwrap().port();
        std::thread::spawn(move || {
            agent
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let mut buf = [0u8; 65_536];
            while let Ok((n, from)) = agent.recv_from(&mut buf) {
                for d in answer(&Message::decode(&buf[..n]).unwrap()) {
                    agent.send_to(&d, from).unwrap();
                }
            }
        });
        SnmpParams {
            version: snmp::Version::V2c,
            community: "public".into(),
            usm: None,
            port,
            timeout: Duration::from_secs(1),
            retries: 0,
            max_oids_per_request: 10,
            max_inflight_per_host: 1,
        }
    }

    fn loopback(params: &SnmpParams) -> Target<'_> {
        Target::of_host("127.0.0.1".parse().unwrap(), params, SourceAddrs::default())
    }

    #[test]
    fn an_endless_table_fails_the_walk_past_the_rows_kept() {
        // A broken or hostile agent on loopback whose column never ends: each GETBULK
        // gets the next rows. The walk ends at the bound instead of filling memory.
        let column: Oid = "1.3.6.1.4.1.99999.1".parse().unwrap();
        let params = agent(&column, |at| (at + 1..=at + 10).collect());
        let t = loopback(&params);
        let e = column_values_at_most(&t, &column, &AtomicBool::new(false), 1000).unwrap_err();
        assert!(e.to_string().contains("has more than 1000 rows"), "{e}");
    }

    #[test]
    fn an_endless_walk_fails_past_its_bound() {
        // The endless agent again, walked as `snmp walk` walks: the bound is an error,
        // not a walk that ends well with the rows cut short.
        let column: Oid = "1.3.6.1.4.1.99999.3".parse().unwrap();
        let params = agent(&column, |at| (at + 1..=at + 10).collect());
        let t = loopback(&params);
        let stop = AtomicBool::new(false);
        let mut seen = 0;
        let e = walk_at_most(&t, &column.to_string(), &stop, 25, |_, _| {
            seen += 1;
            Ok(())
        })
        .unwrap_err();
        assert_eq!(seen, 25);
        assert!(
            e.to_string()
                .ends_with("stopped after 25 varbinds: the agent may loop"),
            "{e}"
        );
    }

    #[test]
    fn a_walk_of_exactly_the_bound_is_whole() {
        // The agent's column ends at 20: the answer after row 20 is past the column.
        let stop = AtomicBool::new(false);
        let column: Oid = "1.3.6.1.4.1.99999.4".parse().unwrap();
        let params = agent_at("127.0.44.1", &column, true, |at| {
            (at + 1..=(at + 10).min(20)).collect()
        });
        let t = Target::of_host(
            "127.0.44.1".parse().unwrap(),
            &params,
            SourceAddrs::default(),
        );
        let n = walk_at_most(&t, &column.to_string(), &stop, 20, |_, _| Ok(())).unwrap();
        assert_eq!(n, 20);
    }

    #[test]
    fn an_answer_without_varbinds_fails_the_walk() {
        // An agent that cuts a GETBULK answer to nothing (RFC 3416 lets it drop
        // varbinds from the end to fit a size limit; one under load may drop all):
        // rows 1-20, then an empty answer although the column goes on. That is not
        // the column's end: taken as one, discovery would drop every row after it.
        let column: Oid = "1.3.6.1.4.1.99999.5".parse().unwrap();
        let params = agent_at("127.0.44.1", &column, false, |at| match at {
            20.. => Vec::new(),
            _ => (at + 1..=at + 10).collect(),
        });
        let t = Target::of_host(
            "127.0.44.1".parse().unwrap(),
            &params,
            SourceAddrs::default(),
        );
        let stop = AtomicBool::new(false);
        let e = table_rows(&t, &column, |_| true, &stop).unwrap_err();
        assert!(e.to_string().contains("no varbinds"), "{e}");
    }

    /// A broken agent's reply to a request (written to the `Vec`).
    type Reply = fn(&Message<'_>, &mut Vec<u8>);

    /// The reply in the other of v1 and v2c.
    const OTHER_VERSION: Reply = |m, out| {
        let v = match m.version {
            snmp::Version::V1 => snmp::Version::V2c,
            _ => snmp::Version::V1,
        };
        reply_as(m, v, m.community, out)
    };
    /// The reply with another community.
    const OTHER_COMMUNITY: Reply = |m, out| reply_as(m, m.version, b"private", out);

    /// The answer to `m` as a broken agent may send it: in version `v`, with community
    /// `c`, carrying row 7 (which the column has not).
    fn reply_as(m: &Message<'_>, v: snmp::Version, c: &[u8], out: &mut Vec<u8>) {
        let row: Oid = format!("{}.7", m.varbinds().next().unwrap().oid)
            .parse()
            .unwrap();
        snmp::encode_message(
            out,
            v,
            c,
            PduType::Response,
            m.request_id,
            0,
            0,
            std::iter::once((row.as_ref(), snmp::ValueRef::Integer(7))),
        );
    }

    /// An agent at 127.0.172.1 (the `version` asked of it) whose column `column` has
    /// rows 1 and 2: each request gets the `refused` replies, then (`answers`) the
    /// next cell (past the column: the next column's first).
    fn refusing_agent(
        column: &Oid,
        version: snmp::Version,
        refused: &'static [Reply],
        answers: bool,
    ) -> SnmpParams {
        let mib: Vec<Oid> = [format!("{column}.1"), format!("{column}.2")]
            .into_iter()
            .map(|o| o.parse().unwrap())
            .chain([next_column(column)])
            .collect();
        let mut params = raw_agent_at("127.0.172.1", move |m| {
            let asked = m.varbinds().next().unwrap().oid.to_owned();
            let mut out: Vec<Vec<u8>> = refused
                .iter()
                .map(|r| {
                    let mut d = Vec::new();
                    r(m, &mut d);
                    d
                })
                .collect();
            if answers {
                let next = mib.iter().find(|o| **o > asked).unwrap();
                let mut d = Vec::new();
                snmp::encode_response(
                    &mut d,
                    m,
                    std::iter::once((next.as_ref(), snmp::ValueRef::Integer(2))),
                );
                out.push(d);
            }
            out
        });
        params.version = version;
        params
    }

    fn at_172(params: &SnmpParams) -> Target<'_> {
        Target::of_host(
            "127.0.172.1".parse().unwrap(),
            params,
            SourceAddrs::default(),
        )
    }

    #[test]
    fn answers_of_another_version_or_community_are_not_taken() {
        // Each request answered first in the other SNMP version, then with another
        // community, then as asked: the walk takes only the last (the engine's rules),
        // v1 (GETNEXT) and v2c (GETBULK) alike. The other version's was taken before.
        let column: Oid = "1.3.6.1.4.1.99999.6".parse().unwrap();
        for version in [snmp::Version::V1, snmp::Version::V2c] {
            let params = refusing_agent(&column, version, &[OTHER_VERSION, OTHER_COMMUNITY], true);
            let mut seen = Vec::new();
            let stop = AtomicBool::new(false);
            let n = walk(&at_172(&params), &column.to_string(), &stop, |oid, _| {
                seen.push(oid.to_string());
                Ok(())
            })
            .unwrap();
            assert_eq!(n, 2, "{version:?}");
            assert_eq!(seen, [format!("{column}.1"), format!("{column}.2")]);
        }
    }

    #[test]
    fn a_request_whose_replies_are_all_refused_times_out_saying_why() {
        // An agent that answers a v2c walk only in v1, or only with another community:
        // the walk times out, and says what came, as the engine's items do.
        let column: Oid = "1.3.6.1.4.1.99999.7".parse().unwrap();
        let cases: [(&'static [Reply], &str); 2] = [
            (
                &[OTHER_VERSION],
                "replies came in SNMP version 1, not the version asked, not taken",
            ),
            (
                &[OTHER_COMMUNITY],
                "replies carried another community, not taken",
            ),
        ];
        for (refused, why) in cases {
            let params = refusing_agent(&column, snmp::Version::V2c, refused, false);
            let stop = AtomicBool::new(false);
            let e = walk(&at_172(&params), &column.to_string(), &stop, |_, _| Ok(()))
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with("Timeout while connecting to \"127.0.172.1:"),
                "{e}"
            );
            assert!(e.ends_with(&format!("after 1 attempt(s): {why}")), "{e}");
        }
    }

    #[test]
    fn rows_before_a_looping_oid_are_walked_and_the_walk_fails() {
        // Each answer repeats its first OID last (.1, .2, .1): the walk takes .1 and .2,
        // then fails. Discovery takes no rows from a walk that fails: a host keeps the
        // rows it had (crate::discovery's invariant).
        let column: Oid = "1.3.6.1.4.1.99999.2".parse().unwrap();
        let params = agent(&column, |at| vec![at + 1, at + 2, at + 1]);
        let t = loopback(&params);
        let stop = AtomicBool::new(false);
        let mut seen = Vec::new();
        let e = walk(&t, &column.to_string(), &stop, |oid, _| {
            seen.push(oid.to_string());
            Ok(())
        })
        .unwrap_err();
        assert_eq!(seen, [format!("{column}.1"), format!("{column}.2")]);
        assert!(e.to_string().contains("does not follow"), "{e}");
        let e = table_rows(&t, &column, |_| true, &stop).unwrap_err();
        assert!(e.to_string().contains("does not follow"), "{e}");
    }

    #[test]
    fn rows_of_several_columns_are_told_from_one_columns() {
        let oid = |s: &str| s.parse::<Oid>().unwrap();
        // hrSWRunPerfTable (1.3.6.1.2.1.25.5.1): two INTEGER columns (1, 2) of the same
        // three rows, walked at its entry and at the table (one arc more in front).
        let entry = rows(&[&[1, 1], &[1, 2], &[1, 7], &[2, 1], &[2, 2], &[2, 7]]);
        assert!(looks_like_columns(&oid("1.3.6.1.2.1.25.5.1.1"), &entry));
        let table = rows(&[&[1, 1, 1], &[1, 1, 2], &[1, 2, 1], &[1, 2, 2]]);
        assert!(looks_like_columns(&oid("1.3.6.1.2.1.25.5.1"), &table));
        // ifRcvAddressTable (1.3.6.1.2.1.31.1.4): columns 2, 3 of rows ifIndex.6.MAC.
        let mac = [6, 0, 22, 199, 2, 110, 192];
        let rcv: Vec<Index> = [2, 3]
            .iter()
            .flat_map(|&c| [1, 60].map(|i| [&[1, c, i][..], &mac[..]].concat().into()))
            .collect();
        assert!(looks_like_columns(&oid("1.3.6.1.2.1.31.1.4"), &rcv));
        // One column's rows of a multi-arc index, each first arc with the same rest: a
        // Cisco switch's ifIndex × queue (snmpsim's cisco_16_switch recording,
        // 1.3.6.1.4.1.9.9.189.1.3.5.1.3), policy × object
        // (cbQosCMStatsTable), ifIndex × address (ipNetToMediaPhysAddress), peers'
        // addresses (bgpPeerState): none is a table's entry, nor begins with 1.
        let by_if = |firsts: &[u32], seconds: &[u32]| -> Vec<Index> {
            firsts
                .iter()
                .flat_map(|&a| seconds.iter().map(move |&b| Box::from([a, b])))
                .collect()
        };
        let peers = rows(&[
            &[10, 0, 0, 1],
            &[10, 0, 0, 2],
            &[10, 1, 0, 1],
            &[10, 1, 0, 2],
        ]);
        for (root, column) in [
            (
                "1.3.6.1.4.1.9.9.189.1.3.5.1.3",
                by_if(&[11001, 11002], &[1, 2, 3]),
            ),
            (
                "1.3.6.1.4.1.9.9.166.1.15.1.1.3",
                by_if(&[2, 3], &[1593, 1595]),
            ),
            (
                "1.3.6.1.2.1.4.22.1.2",
                rows(&[
                    &[2, 10, 0, 1, 5],
                    &[2, 10, 0, 1, 6],
                    &[3, 10, 0, 1, 5],
                    &[3, 10, 0, 1, 6],
                ]),
            ),
            ("1.3.6.1.2.1.15.3.1.2", peers.clone()),
            // A table's first column ends in 1, as an entry does: its first arcs are
            // not column numbers (an ifIndex past MAX_COLUMN; 0, which no column is),
            // or fall in one group.
            (
                "1.3.6.1.4.1.9.9.362.1.2.1.1.1",
                by_if(&[11001, 11002], &[1, 2, 3]),
            ),
            ("1.3.6.1.4.1.99999.1.1.1", by_if(&[0, 1], &[5, 6])),
            ("1.3.6.1.2.1.15.3.1.1", peers),
        ] {
            assert!(
                !looks_like_columns(&oid(root), &column),
                "{root} {column:?}"
            );
        }
        // One column's rows, walked at an OID that could be an entry's: an address
        // index (udpTable), one-arc rows, a group whose rows differ, a single row per
        // group.
        for column in [
            rows(&[&[127, 0, 0, 1, 161], &[127, 0, 20, 1, 161]]),
            rows(&[
                &[127, 0, 20, 1, 161],
                &[127, 0, 20, 2, 161],
                &[127, 0, 21, 1, 161],
            ]),
            rows(&[&[10, 0, 0, 1], &[10, 0, 0, 2], &[10, 0, 0, 3]]),
            rows(&[&[1], &[2], &[3]]),
            rows(&[&[1, 1], &[1, 2], &[2, 1], &[2, 3]]),
            rows(&[&[1, 5], &[2, 5], &[3, 5]]),
            rows(&[]),
        ] {
            assert!(
                !looks_like_columns(&oid("1.3.6.1.2.1.7.5.1.1"), &column),
                "{column:?}"
            );
        }
    }

    #[test]
    fn a_walk_like_a_tables_is_warned_of_once_per_oid() {
        // Discovery walks a rule's OID on every host at every interval: the advice is
        // said once, not each time. Another OID has its own warning.
        let entry = rows(&[&[1, 1], &[1, 2], &[2, 1], &[2, 2]]);
        // OIDs no other test walks: the set of those warned of is the process's.
        let a: Oid = "1.3.6.1.4.1.99999.53.1.1".parse().unwrap();
        let b: Oid = "1.3.6.1.4.1.99999.53.2.1".parse().unwrap();
        let ((), text) = crate::test_util::logged(|| {
            for _ in 0..3 {
                warn_if_columns(&a, &entry);
            }
            warn_if_columns(&b, &entry);
        });
        let warned = |o: &Oid| {
            text.lines()
                .filter(|l| l.contains("WARN") && l.ends_with(&format!("oid={o}")))
                .count()
        };
        assert_eq!((warned(&a), warned(&b)), (1, 1), "{text}");
    }
}
