//! The engine on a virtual clock against simulated agents (unit tests: the agents are
//! mocks built on the real codec).

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::*;
use crate::message::encode_message;
use crate::v3::{Engine, V3Message};

fn addr(i: u8) -> SocketAddr {
    SocketAddr::from(([127, 0, 9, i], 161))
}

fn oid(s: &str) -> Oid {
    s.parse().unwrap()
}

/// A simulated agent.
#[derive(Clone)]
struct Agent {
    community: &'static str,
    values: BTreeMap<Oid, VarValue>,
    /// Answer tooBig when a request has more varbinds than this.
    too_big_over: usize,
    /// Answer tooBig whenever a request asks for this OID (a value too big for any
    /// message of this agent).
    too_big_with: Option<Oid>,
    /// Answer genErr without an error-index whenever a request asks for this OID.
    gen_err_with: Option<Oid>,
    /// Answer every request with this error-status and error-index (an agent that
    /// refuses a whole view: authorizationError, noAccess; or says genErr to all).
    error_all: Option<(u32, usize)>,
    /// Answer only this many varbinds (a "short" response).
    truncate_to: usize,
    /// Drop this many first datagrams (forces retries).
    drop_first: usize,
    /// Drop every datagram whose number is a multiple of this (0: none).
    drop_every: usize,
    /// Lose this many first answers (the agent did the work, the reply got lost).
    lose_replies: usize,
    /// SNMPv3: drop a message whose msgID it has seen, as a duplicate (RFC 3412 §6.2).
    dedupe_msg_ids: Option<std::collections::HashSet<i32>>,
    /// Leave OIDs it does not know out of its answers (instead of noSuchObject).
    omit_unknown: bool,
    /// Changes the varbinds of each answer without an error (reorders them, adds
    /// some, renames some).
    mangle: Option<Mangle>,
    silent: bool,
    /// Never answer a request with more varbinds than this (as some agents do instead
    /// of tooBig).
    silent_over: usize,
    latency: Duration,
    received: usize,
    /// SNMPv3: the agent's engine and user.
    usm: Option<AgentUsm>,
    /// What comes back at once instead of an answer to a request it does not answer
    /// (a closed port, a firewall's reject): fed to [`Iteration::handle_unreachable`].
    icmp: Option<Unreachable>,
}

/// Changes the varbinds an [`Agent`] answers with.
type Mangle = fn(&mut Vec<(Oid, VarValue)>);

/// The agent side of SNMPv3: its engine (the user's keys localized to it, its clock).
#[derive(Clone)]
struct AgentUsm {
    engine: Engine,
    /// Answer with an unauthenticated response, whatever the request's level.
    forge: bool,
    /// Answer under a request-id other than the msgID (and the request's).
    other_request_id: bool,
    /// Send its notInTimeWindow reports unauthenticated (against RFC 3414 §3.2 7a).
    unsigned_time_reports: bool,
}

impl Agent {
    fn new(values: &[(&str, VarValue)]) -> Agent {
        Agent {
            community: "public",
            values: values.iter().map(|(o, v)| (oid(o), v.clone())).collect(),
            too_big_over: usize::MAX,
            too_big_with: None,
            gen_err_with: None,
            error_all: None,
            truncate_to: usize::MAX,
            drop_first: 0,
            drop_every: 0,
            lose_replies: 0,
            dedupe_msg_ids: None,
            omit_unknown: false,
            mangle: None,
            silent: false,
            silent_over: usize::MAX,
            latency: Duration::from_millis(1),
            received: 0,
            usm: None,
            icmp: None,
        }
    }

    /// An SNMPv3 agent whose engine `id` booted `boots` times, its clock at 0 at `t0`.
    fn v3(mut self, user: &Arc<UsmUser>, id: &[u8], boots: u32, t0: Instant) -> Agent {
        self.usm = Some(AgentUsm {
            engine: Engine::new(user.clone(), id, boots, 0, t0),
            forge: false,
            other_request_id: false,
            unsigned_time_reports: false,
        });
        self
    }

    fn answer(&mut self, req: &[u8], now: Instant) -> Option<Vec<u8>> {
        self.received += 1;
        if self.silent
            || self.received <= self.drop_first
            || (self.drop_every > 0 && self.received.is_multiple_of(self.drop_every))
        {
            return None;
        }
        if self.usm.is_some() {
            if let Some(seen) = &mut self.dedupe_msg_ids {
                if !seen.insert(V3Message::decode(req).ok()?.msg_id) {
                    return None;
                }
            }
            let out = self.answer_v3(req, now);
            if self.lose_replies > 0 {
                self.lose_replies -= 1;
                return None;
            }
            return out;
        }
        let m = Message::decode(req).ok()?;
        if m.community != self.community.as_bytes() || m.varbind_count() > self.silent_over {
            return None;
        }
        let asked: Vec<Oid> = m.varbinds().map(|vb| vb.oid.to_owned()).collect();
        let mut out = Vec::new();
        let echo = |out: &mut Vec<u8>, status: u32, index: usize| {
            encode_message(
                out,
                m.version,
                m.community,
                PduType::Response,
                m.request_id,
                status as i64,
                index as i64,
                asked.iter().map(|o| (o.as_ref(), crate::ValueRef::Null)),
            );
        };
        if asked.len() > self.too_big_over
            || self
                .too_big_with
                .as_ref()
                .is_some_and(|o| asked.contains(o))
        {
            echo(&mut out, 1, 0);
            return Some(out);
        }
        if self
            .gen_err_with
            .as_ref()
            .is_some_and(|o| asked.contains(o))
        {
            echo(&mut out, 5, 0);
            return Some(out);
        }
        if let Some((status, index)) = self.error_all {
            echo(&mut out, status, index);
            return Some(out);
        }
        if m.version == Version::V1 {
            if let Some(k) = asked.iter().position(|o| !self.values.contains_key(o)) {
                echo(&mut out, 2, k + 1);
                return Some(out);
            }
        }
        let mut vals: Vec<(Oid, VarValue)> = asked
            .iter()
            .take(self.truncate_to)
            .filter(|o| !self.omit_unknown || self.values.contains_key(o))
            .map(|o| {
                (
                    o.clone(),
                    self.values
                        .get(o)
                        .cloned()
                        .unwrap_or(VarValue::NoSuchObject),
                )
            })
            .collect();
        if let Some(mangle) = self.mangle {
            mangle(&mut vals);
        }
        encode_message(
            &mut out,
            m.version,
            m.community,
            PduType::Response,
            m.request_id,
            0,
            0,
            vals.iter().map(|(o, v)| (o.as_ref(), v.as_ref())),
        );
        Some(out)
    }
}

impl Agent {
    /// RFC 3414's checks, as an agent makes them: engine ID (else discovery's report),
    /// user, MAC, time window (150 s), then the PDU.
    fn answer_v3(&mut self, req: &[u8], now: Instant) -> Option<Vec<u8>> {
        let u = self.usm.as_ref()?;
        let m = V3Message::decode(req).ok()?;
        let user = u.engine.user().clone();
        let report = |kind_arc: u8, authenticated: bool| -> Vec<u8> {
            let mut o = u.engine.outgoing(m.msg_id, false, m.msg_id as u64, now);
            o.privacy = None;
            if !authenticated {
                o.auth = None;
                o.user_name = m.user_name;
            }
            let counter: Oid = format!("1.3.6.1.6.3.15.1.1.{kind_arc}.0").parse().unwrap();
            let mut out = Vec::new();
            v3::encode_message(
                &mut out,
                &o,
                PduType::Report,
                0,
                0,
                0,
                std::iter::once((counter.as_ref(), crate::ValueRef::Counter32(1))),
            )
            .unwrap();
            out
        };
        if m.engine_id != u.engine.id() {
            return Some(report(4, false));
        }
        if m.user_name != user.name() {
            return Some(report(3, false));
        }
        if m.level() != user.level() {
            return Some(report(1, false));
        }
        if user.level() != v3::SecurityLevel::NoAuthNoPriv {
            if !m.verify(req, &u.engine, &mut Vec::new()) {
                return Some(report(5, false));
            }
            let (boots, time) = u.engine.clock(now);
            if m.boots != boots || m.time.abs_diff(time) > 150 {
                return Some(report(2, !u.unsigned_time_reports));
            }
        }
        let mut plain = Vec::new();
        let scoped = m.scoped_pdu(Some(&u.engine), &mut plain).ok()?;
        let asked: Vec<Oid> = scoped.pdu.varbinds().map(|vb| vb.oid.to_owned()).collect();
        // tooBig echoes the request with NULLs, as v2c's answer does; a short answer
        // carries the first `truncate_to` values.
        let (status, vals): (i64, Vec<(Oid, VarValue)>) = if asked.len() > self.too_big_over {
            (1, asked.into_iter().map(|o| (o, VarValue::Null)).collect())
        } else {
            let vals = asked
                .into_iter()
                .take(self.truncate_to)
                .map(|o| {
                    let v = self
                        .values
                        .get(&o)
                        .cloned()
                        .unwrap_or(VarValue::NoSuchObject);
                    (o, v)
                })
                .collect();
            (0, vals)
        };
        let mut o = u.engine.outgoing(m.msg_id, false, m.msg_id as u64, now);
        if u.forge {
            (o.auth, o.privacy) = (None, None);
        }
        let mut out = Vec::new();
        v3::encode_message(
            &mut out,
            &o,
            PduType::Response,
            scoped.pdu.request_id ^ i32::from(u.other_request_id),
            status,
            0,
            vals.iter().map(|(o, v)| (o.as_ref(), v.as_ref())),
        )?;
        Some(out)
    }
}

fn job(i: u8, oids: &[&str]) -> HostJob {
    let mut j = HostJob::new(
        addr(i),
        Arc::from("public"),
        oids.iter().map(|s| oid(s)).collect(),
    );
    j.timeout = Duration::from_secs(1);
    j
}

struct Outcome {
    events: Vec<Event>,
    stats: Stats,
    elapsed: Duration,
    /// (time since start, transmit, bytes)
    sent: Vec<(Duration, Transmit, Vec<u8>)>,
    memory: HostMemory,
    done_at: HashMap<usize, Duration>,
}

/// OIDs per request sent, in order.
fn request_sizes(out: &Outcome) -> Vec<usize> {
    out.sent
        .iter()
        .map(|s| Message::decode(&s.2).unwrap().varbind_count())
        .collect()
}

/// Runs an iteration to the end on a virtual clock.
fn simulate(
    jobs: &[HostJob],
    agents: &mut HashMap<SocketAddr, Agent>,
    memory: HostMemory,
    opts: IterationOptions,
    t0: Instant,
) -> Outcome {
    simulate_stopped(jobs, agents, memory, opts, t0, None)
}

/// [`simulate`], the iteration stopped ([`Iteration::stop`]) at `stop_at` after `t0`.
fn simulate_stopped(
    jobs: &[HostJob],
    agents: &mut HashMap<SocketAddr, Agent>,
    memory: HostMemory,
    opts: IterationOptions,
    t0: Instant,
    stop_at: Option<Duration>,
) -> Outcome {
    let mut memory = memory;
    let mut stop_at = stop_at.map(|d| t0 + d);
    let mut it = Iteration::new(jobs, &memory, opts);
    let mut now = t0;
    let mut deliveries: Vec<(Instant, SocketAddr, Vec<u8>)> = Vec::new();
    let mut buf = Vec::new();
    let mut out = Outcome {
        events: vec![],
        stats: Stats::default(),
        elapsed: Duration::ZERO,
        sent: vec![],
        memory: HostMemory::default(),
        done_at: HashMap::new(),
    };
    for _ in 0..100_000 {
        while let Some(t) = it.poll_transmit(now, &mut buf) {
            out.sent.push((now - t0, t, buf.clone()));
            if let Some(agent) = agents.get_mut(&t.dst) {
                match (agent.answer(&buf, now), agent.icmp) {
                    (Some(resp), _) => deliveries.push((now + agent.latency, t.dst, resp)),
                    (None, Some(u)) => it.handle_unreachable(t.dst, u),
                    (None, None) => {}
                }
            }
        }
        while let Some(e) = it.poll_event() {
            if let Event::HostDone { host, .. } = e {
                out.done_at.insert(host, now - t0);
            }
            out.events.push(e);
        }
        if it.is_done() {
            break;
        }
        let next_delivery = deliveries.iter().map(|d| d.0).min();
        let next = match (next_delivery, it.poll_timeout()) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b).expect("engine stalled: no delivery and no timer"),
        };
        if let Some(at) = stop_at.filter(|&at| at <= next) {
            now = now.max(at);
            it.stop();
            stop_at = None;
            continue;
        }
        now = now.max(next);
        let (due, later): (Vec<_>, Vec<_>) = deliveries.into_iter().partition(|d| d.0 <= now);
        deliveries = later;
        for (_, src, bytes) in due {
            it.handle_datagram(src, &bytes, now);
        }
        it.handle_timeout(now);
    }
    assert!(it.is_done(), "iteration did not finish");
    out.stats = *it.stats();
    out.elapsed = now - t0;
    it.save_learned(&mut memory);
    out.memory = memory;
    out
}

fn items_of(events: &[Event], host: usize) -> BTreeMap<usize, Result<VarValue, ItemFailure>> {
    let mut m = BTreeMap::new();
    for e in events {
        if let Event::Item {
            host: h,
            item,
            result,
        } = e
        {
            if *h == host {
                assert!(
                    m.insert(*item, result.clone()).is_none(),
                    "item {item} reported twice"
                );
            }
        }
    }
    m
}

fn agent_with(n: usize) -> (Agent, Vec<String>) {
    let oids: Vec<String> = (1..=n)
        .map(|i| format!("1.3.6.1.2.1.2.2.1.10.{i}"))
        .collect();
    let vals: Vec<(&str, VarValue)> = oids
        .iter()
        .enumerate()
        .map(|(i, o)| (o.as_str(), VarValue::Counter32(i as u32 * 100)))
        .collect();
    (Agent::new(&vals), oids)
}

/// One host (`addr(1)`) with `n` items at the job defaults, and its agent as `tweak`
/// makes it.
fn one_host(
    n: usize,
    tweak: impl FnOnce(&mut Agent),
) -> (Vec<HostJob>, HashMap<SocketAddr, Agent>) {
    let (mut a, oids) = agent_with(n);
    tweak(&mut a);
    let refs: Vec<&str> = oids.iter().map(String::as_str).collect();
    (vec![job(1, &refs)], HashMap::from([(addr(1), a)]))
}

/// One iteration with the default options.
fn iterate(
    jobs: &[HostJob],
    agents: &mut HashMap<SocketAddr, Agent>,
    memory: HostMemory,
) -> Outcome {
    simulate(
        jobs,
        agents,
        memory,
        IterationOptions::default(),
        Instant::now(),
    )
}

#[test]
fn hybrid_chain_one_request_per_host_in_flight() {
    let (a, oids) = agent_with(5);
    let refs: Vec<&str> = oids.iter().map(|s| s.as_str()).collect();
    let mut ja = job(1, &refs);
    ja.max_oids = 2;
    let jb = job(2, &refs[..2]);
    let jobs = vec![ja, jb];
    let mut agents = HashMap::from([(addr(1), a.clone()), (addr(2), a)]);
    let out = iterate(&jobs, &mut agents, HostMemory::default());
    // Host 0 needs 3 requests (2+2+1 OIDs), sent one after another: never two at once.
    let host0: Vec<&(Duration, Transmit, Vec<u8>)> =
        out.sent.iter().filter(|s| s.1.host == 0).collect();
    assert_eq!(host0.len(), 3);
    let times: Vec<Duration> = host0.iter().map(|s| s.0).collect();
    assert_eq!(
        times,
        [
            Duration::ZERO,
            Duration::from_millis(1),
            Duration::from_millis(2)
        ]
    );
    let sizes: Vec<usize> = host0
        .iter()
        .map(|s| Message::decode(&s.2).unwrap().varbind_count())
        .collect();
    assert_eq!(sizes, [2, 2, 1]);
    // Host 1 went in parallel with host 0's first request.
    assert_eq!(out.sent[1].1.host, 1);
    assert_eq!(out.sent[1].0, Duration::ZERO);
    let items = items_of(&out.events, 0);
    assert_eq!(items.len(), 5);
    for (i, r) in items {
        assert_eq!(r, Ok(VarValue::Counter32(i as u32 * 100)));
    }
    assert_eq!(out.done_at[&1], Duration::from_millis(1));
    assert_eq!(out.done_at[&0], Duration::from_millis(3));
    assert_eq!(out.stats.requests, 4);
    assert_eq!(out.stats.items_ok, 7);
}

#[test]
fn max_inflight_two_sends_two_at_once() {
    let (a, oids) = agent_with(6);
    let refs: Vec<&str> = oids.iter().map(|s| s.as_str()).collect();
    let mut j = job(1, &refs);
    j.max_oids = 2;
    j.max_inflight = 2;
    let mut agents = HashMap::from([(addr(1), a)]);
    let out = simulate(
        &[j],
        &mut agents,
        HostMemory::default(),
        IterationOptions::default(),
        Instant::now(),
    );
    let times: Vec<Duration> = out.sent.iter().map(|s| s.0).collect();
    assert_eq!(
        times,
        [Duration::ZERO, Duration::ZERO, Duration::from_millis(1)]
    );
    assert_eq!(items_of(&out.events, 0).len(), 6);
}

#[test]
fn retry_resends_same_bytes_and_id() {
    let (mut a, oids) = agent_with(1);
    a.drop_first = 1;
    let mut j = job(1, &[&oids[0]]);
    j.retries = 2;
    let mut agents = HashMap::from([(addr(1), a)]);
    let out = simulate(
        &[j],
        &mut agents,
        HostMemory::default(),
        IterationOptions::default(),
        Instant::now(),
    );
    assert_eq!(out.sent.len(), 2);
    assert_eq!(
        out.sent[0].2, out.sent[1].2,
        "retry must resend identical bytes (same request-id)"
    );
    assert!(!out.sent[0].1.retry && out.sent[1].1.retry);
    assert_eq!(out.sent[1].0, Duration::from_secs(1));
    assert_eq!(out.stats.retries, 1);
    assert_eq!(out.stats.timeouts, 1);
    assert_eq!(items_of(&out.events, 0)[&0], Ok(VarValue::Counter32(0)));
    assert_eq!(out.elapsed, Duration::from_millis(1001));
}

#[test]
fn an_agent_that_answers_every_second_datagram_starves_no_item() {
    // Each request or its retry (the next datagram the host sends) is answered; the
    // probes beside the retries of requests of several OIDs are lost or answered,
    // neither of which fails anything while the retry is answered.
    for max_oids in [1, 3] {
        let (mut jobs, mut agents) = one_host(10, |a| a.drop_every = 2);
        jobs[0].max_oids = max_oids;
        let out = iterate(&jobs, &mut agents, HostMemory::default());
        let items = items_of(&out.events, 0);
        assert_eq!(items.len(), 10);
        for (k, r) in &items {
            assert_eq!(
                r,
                &Ok(VarValue::Counter32(*k as u32 * 100)),
                "max_oids {max_oids}"
            );
        }
        assert!(out.stats.retries > 0, "datagrams were lost");
    }
}

#[test]
fn dead_host_costs_one_timeout_times_attempts_and_reports_once() {
    let (live, oids) = agent_with(3);
    let mut silent = live.clone();
    silent.silent = true;
    let refs: Vec<&str> = oids.iter().map(|s| s.as_str()).collect();
    let mut dead = job(1, &refs);
    dead.max_oids = 1; // 3 requests' worth of items ...
    dead.retries = 2;
    let ok = job(2, &refs);
    let mut agents = HashMap::from([(addr(1), silent), (addr(2), live)]);
    let out = simulate(
        &[dead, ok],
        &mut agents,
        HostMemory::default(),
        IterationOptions::default(),
        Instant::now(),
    );
    // ... but only the first is ever sent (+2 retries): the host dies at 3 x 1 s.
    let to_dead: Vec<_> = out.sent.iter().filter(|s| s.1.host == 0).collect();
    assert_eq!(to_dead.len(), 3);
    assert_eq!(out.elapsed, Duration::from_secs(3));
    assert_eq!(out.done_at[&0], Duration::from_secs(3));
    assert_eq!(out.done_at[&1], Duration::from_millis(1));
    let items = items_of(&out.events, 0);
    assert_eq!(items.len(), 3);
    assert!(items.values().all(|r| *r == Err(ItemFailure::Timeout)));
    let dones: Vec<_> = out
        .events
        .iter()
        .filter(|e| matches!(e, Event::HostDone { host: 0, .. }))
        .collect();
    assert_eq!(
        dones,
        [&Event::HostDone {
            host: 0,
            timed_out: true
        }]
    );
    assert_eq!(out.stats.hosts_timed_out, 1);
    assert_eq!(out.stats.timeouts, 3);
}

fn port_unreachable() -> Unreachable {
    Unreachable {
        kind: icmp::UnreachableKind::Port,
        from: "127.0.9.1".parse().unwrap(),
    }
}

/// An ICMP error (here a closed port's) words the timeout of every host polled at its
/// address, which still waits out its attempts as net-snmp does; a host elsewhere keeps
/// its bare timeout.
#[test]
fn an_icmp_error_words_the_timeout_of_the_hosts_at_its_address() {
    let (live, oids) = agent_with(2);
    let mut closed = live.clone();
    closed.silent = true;
    closed.icmp = Some(port_unreachable());
    let mut silent = live;
    silent.silent = true;
    let refs: Vec<&str> = oids.iter().map(|s| s.as_str()).collect();
    let mut a = job(1, &refs);
    a.retries = 1;
    // Another host of the same address (another community, a second template).
    let mut b = job(1, &refs[..1]);
    b.retries = 1;
    let mut c = job(2, &refs);
    c.retries = 1;
    let mut agents = HashMap::from([(addr(1), closed), (addr(2), silent)]);
    let out = iterate(&[a, b, c], &mut agents, HostMemory::default());
    let failure = ItemFailure::Dropped(Dropped::Unreachable(port_unreachable()));
    let told = Err(failure.clone());
    for host in [0, 1] {
        let items = items_of(&out.events, host);
        assert!(
            !items.is_empty() && items.values().all(|r| *r == told),
            "{items:?}"
        );
        assert_eq!(
            out.done_at[&host],
            Duration::from_secs(2),
            "both attempts waited"
        );
    }
    let items = items_of(&out.events, 2);
    assert!(
        items.values().all(|r| *r == Err(ItemFailure::Timeout)),
        "{items:?}"
    );
    // Each datagram to the closed port (the probe beside host 0's retry too).
    let to_closed = out.sent.iter().filter(|s| s.1.dst == addr(1)).count();
    assert_eq!(out.stats.unreachable, to_closed as u64);
    assert_eq!(out.stats.hosts_timed_out, 3);
    assert_eq!(
        failure.to_string(),
        "timeout: ICMP port unreachable from 127.0.9.1: nothing listens on that UDP port (the agent stopped, or listens on another port or address?)"
    );
}

/// A port that opens between two attempts (an agent restarting) answers the retry:
/// its value is taken, the error forgotten.
#[test]
fn a_port_that_opens_between_attempts_answers_the_retry() {
    let (mut a, oids) = agent_with(1);
    a.drop_first = 1;
    a.icmp = Some(port_unreachable());
    let mut j = job(1, &[&oids[0]]);
    j.retries = 1;
    let mut agents = HashMap::from([(addr(1), a)]);
    let out = iterate(&[j], &mut agents, HostMemory::default());
    assert_eq!(out.stats.unreachable, 1);
    assert_eq!(items_of(&out.events, 0)[&0], Ok(VarValue::Counter32(0)));
}

#[test]
fn too_big_halves_and_is_remembered() {
    let (mut a, oids) = agent_with(10);
    a.too_big_over = 3;
    let refs: Vec<&str> = oids.iter().map(|s| s.as_str()).collect();
    let j = job(1, &refs);
    assert_eq!(j.max_oids, 10);
    let jobs = [j];
    let mut agents = HashMap::from([(addr(1), a)]);
    let out = iterate(&jobs, &mut agents, HostMemory::default());
    // 10 -> tooBig -> 5 -> tooBig -> 2: works, remembered.
    assert_eq!(out.stats.too_big, 2);
    assert_eq!(out.memory.max_oids(&addr(1)), Some(2));
    let items = items_of(&out.events, 0);
    assert_eq!(items.len(), 10);
    assert!(items
        .iter()
        .all(|(i, r)| *r == Ok(VarValue::Counter32(*i as u32 * 100))));
    // Next iteration starts at the learned size: no tooBig at all.
    let out2 = iterate(&jobs, &mut agents, out.memory.clone());
    assert_eq!(out2.stats.too_big, 0);
    assert_eq!(out2.stats.requests, 5);
    assert_eq!(items_of(&out2.events, 0).len(), 10);
}

#[test]
fn retain_forgets_every_memory_of_the_addresses_left_out_only() {
    let (mut a, oids) = agent_with(10);
    a.too_big_over = 3;
    let refs: Vec<&str> = oids.iter().map(|s| s.as_str()).collect();
    let jobs = [job(1, &refs), job(2, &refs)];
    let mut agents = HashMap::from([(addr(1), a.clone()), (addr(2), a)]);
    let mut memory = iterate(&jobs, &mut agents, HostMemory::default()).memory;
    let user = Arc::new(UsmUser::new("np-user", None, None).unwrap());
    for i in [1, 2] {
        memory.remember_engine(
            addr(i),
            Engine::new(user.clone(), b"e", 1, 1, Instant::now()),
        );
        memory.salts.insert(addr(i), 7);
    }
    memory.retain(|&x| x == addr(1));
    assert_eq!(memory.max_oids(&addr(1)), Some(2));
    assert!(memory.engine(&addr(1)).is_some());
    assert!(memory.salts.contains_key(&addr(1)));
    assert_eq!(memory.max_oids(&addr(2)), None);
    assert!(memory.engine(&addr(2)).is_none());
    assert!(!memory.salts.contains_key(&addr(2)));
}

#[test]
fn one_value_too_big_for_any_message_fails_alone_and_shrinks_nothing() {
    // 21 items, the 11th too big for any message of the agent: halvings isolate it
    // (tooBig alone: unsupported), then the other items go on at the size asked before
    // (not one OID per request for good), and nothing is learned: the tooBigs were the
    // culprit's, not the agent's limit.
    let (mut a, oids) = agent_with(21);
    a.too_big_with = Some(oid(&oids[10]));
    let refs: Vec<&str> = oids.iter().map(String::as_str).collect();
    let mut j = job(1, &refs);
    j.max_oids = 21;
    let jobs = [j];
    let mut agents = HashMap::from([(addr(1), a)]);
    let out = iterate(&jobs, &mut agents, HostMemory::default());
    let items = items_of(&out.events, 0);
    assert_eq!(
        items[&10],
        Err(ItemFailure::ErrorStatus(ErrorStatus::TOO_BIG))
    );
    assert_eq!(items.values().filter(|r| r.is_ok()).count(), 20);
    assert_eq!(out.memory.max_oids(&addr(1)), None);
    let out2 = iterate(&jobs, &mut agents, out.memory.clone());
    let sizes = request_sizes(&out2);
    // The culprit (remembered) alone, the rest at the full size.
    assert_eq!(sizes, [1, 20]);
    // Within the first iteration too: after the culprit failed, the rest of its half
    // went at that size, not one at a time.
    let first = request_sizes(&out);
    assert!(first.len() <= 8, "{first:?}");
}

#[test]
fn a_value_too_big_among_the_first_items_does_not_cap_the_host_for_good() {
    // 40 items at 10 OIDs per request, the third too big for any message: isolating
    // it takes requests of 5, 2 and 1, but those tooBigs were its own. The other items
    // go on 10 per request, and every later iteration too (it once learned a limit of
    // 2, never grown back: every iteration found the culprit again), which asks the
    // culprit, remembered, alone from the start.
    let (mut a, oids) = agent_with(40);
    a.too_big_with = Some(oid(&oids[2]));
    let refs: Vec<&str> = oids.iter().map(String::as_str).collect();
    let jobs = [job(1, &refs)];
    let mut agents = HashMap::from([(addr(1), a)]);
    let mut memory = HostMemory::default();
    for i in 0..3 {
        let out = iterate(&jobs, &mut agents, memory);
        let items = items_of(&out.events, 0);
        assert_eq!(items.values().filter(|r| r.is_ok()).count(), 39);
        let sizes: &[usize] = match i {
            0 => &[10, 5, 2, 2, 1, 10, 10, 10, 7],
            _ => &[1, 10, 10, 10, 9],
        };
        assert_eq!(request_sizes(&out), sizes, "{i}");
        assert_eq!(out.memory.max_oids(&addr(1)), None);
        memory = out.memory;
    }
}

#[test]
fn learned_limit_grows_back_but_never_to_a_size_that_failed() {
    let (mut a, oids) = agent_with(10);
    a.too_big_over = 3; // 4 OIDs and more: tooBig
    let refs: Vec<&str> = oids.iter().map(|s| s.as_str()).collect();
    let jobs = [job(1, &refs)];
    let mut agents = HashMap::from([(addr(1), a)]);
    let mut memory = HostMemory::default();
    let mut limits = Vec::new();
    let mut too_big = Vec::new();
    for _ in 0..(4 * GROW_AFTER) {
        let out = iterate(&jobs, &mut agents, memory);
        assert_eq!(items_of(&out.events, 0).len(), 10);
        too_big.push(out.stats.too_big);
        memory = out.memory;
        limits.push(memory.max_oids(&addr(1)).unwrap());
    }
    // 10 and 5 fail -> 2; grows to 3 after GROW_AFTER clean runs, then tries 4 once
    // (tooBig: back to 2, and 4 is now known to fail), grows to 3 and stays there.
    let g = GROW_AFTER as usize;
    assert_eq!(limits[0], 2);
    assert_eq!(limits[g], 3);
    assert_eq!(too_big.iter().sum::<u64>(), 3, "{too_big:?}");
    assert_eq!(*limits.last().unwrap(), 3);
    // 4 was offered exactly once (the limit stored before that iteration tried it).
    assert_eq!(limits.iter().filter(|&&l| l == 4).count(), 1, "{limits:?}");
    assert!(limits.iter().all(|&l| l <= 4));
}

#[test]
fn an_agent_silent_above_a_size_is_asked_smaller_not_given_up() {
    // 10 items at 10 OIDs per request; the agent never answers more than 4. The probe
    // beside the retry (one OID) is answered: 10 is halved, 5 is silent too, then one
    // OID per request (as Zabbix). Every item gets its value, each exactly once (the
    // probe delivers nothing); the next iteration starts at the learned size.
    let (jobs, mut agents) = one_host(10, |a| a.silent_over = 4);
    let out = iterate(&jobs, &mut agents, HostMemory::default());
    let items = items_of(&out.events, 0);
    assert_eq!(items.len(), 10);
    assert!(
        items
            .iter()
            .all(|(i, r)| *r == Ok(VarValue::Counter32(*i as u32 * 100))),
        "{items:?}"
    );
    assert_eq!(out.stats.silent_too_big, 2);
    assert_eq!((out.stats.probes, out.stats.probes_answered), (2, 2));
    assert_eq!(out.stats.hosts_timed_out, 0);
    // 10, its retry and the probe; 5, its retry and the probe; then ten of one.
    assert_eq!(
        request_sizes(&out),
        [[10, 10, 1, 5, 5, 1].as_slice(), &[1; 10]].concat()
    );
    assert_eq!(out.elapsed, Duration::from_millis(4010));
    assert_eq!(out.memory.max_oids(&addr(1)), Some(1));
    let out2 = iterate(&jobs, &mut agents, out.memory.clone());
    assert_eq!(out2.stats.timeouts, 0);
    assert_eq!(items_of(&out2.events, 0).len(), 10);
}

#[test]
fn with_two_requests_in_flight_one_probe_speaks_for_both() {
    // Both requests of 10 time out together; the probe beside the first retry answers
    // for both last attempts (it was used up by the first and the second killed the
    // host), and two requests of one size found silent are one finding: halved, not
    // one OID at a time.
    let (mut jobs, mut agents) = one_host(20, |a| a.silent_over = 7);
    jobs[0].max_inflight = 2;
    let out = iterate(&jobs, &mut agents, HostMemory::default());
    assert_eq!(out.stats.hosts_timed_out, 0, "{:?}", request_sizes(&out));
    assert_eq!(out.stats.items_ok, 20);
    assert_eq!(out.memory.max_oids(&addr(1)), Some(5));
}

#[test]
fn a_host_the_deadline_ends_does_not_count_as_clean() {
    // Learned at 2; then the agent stops answering and every iteration ends at its
    // deadline before any attempt expired: not clean, the limit stays.
    let (jobs, mut agents) = one_host(10, |a| a.too_big_over = 3);
    let mut memory = iterate(&jobs, &mut agents, HostMemory::default()).memory;
    agents.get_mut(&addr(1)).unwrap().silent = true;
    for _ in 0..GROW_AFTER {
        let t0 = Instant::now();
        let opts = IterationOptions {
            deadline: Some(t0 + Duration::from_millis(500)),
            ..Default::default()
        };
        memory = simulate(&jobs, &mut agents, memory, opts, t0).memory;
    }
    assert_eq!(memory.max_oids(&addr(1)), Some(2));
}

#[test]
fn a_silent_limit_grows_back_and_is_tried_again_much_later() {
    // The agent ignores more than 3 OIDs. Learned at 1 (see above), the limit grows by
    // one per GROW_AFTER clean iterations up to 4, one below the size found silent (5);
    // after RETRY_SILENT_AFTER more, 5 is offered once more (silent again: probed and
    // halved), never more often.
    let (jobs, mut agents) = one_host(10, |a| a.silent_over = 4);
    let mut memory = HostMemory::default();
    let mut limits = Vec::new();
    let mut silent = Vec::new();
    let rounds = 1 + 3 * GROW_AFTER + RETRY_SILENT_AFTER + 1;
    for _ in 0..rounds {
        let out = iterate(&jobs, &mut agents, memory);
        let items = items_of(&out.events, 0);
        assert!(items.values().all(Result::is_ok), "{items:?}");
        silent.push(out.stats.silent_too_big);
        memory = out.memory;
        limits.push(memory.max_oids(&addr(1)).unwrap());
    }
    let g = GROW_AFTER as usize;
    assert_eq!(
        &limits[..=3 * g].iter().step_by(g).collect::<Vec<_>>(),
        &[&1, &2, &3, &4]
    );
    let at_four = limits.iter().filter(|&&l| l == 4).count();
    assert_eq!(at_four, RETRY_SILENT_AFTER as usize, "{limits:?}");
    assert_eq!(limits[limits.len() - 2], 5, "5 offered again: {limits:?}");
    assert_eq!(*limits.last().unwrap(), 2, "{limits:?}");
    // Silent requests: 10 and 5 in the first iteration, 5 in the last one.
    assert_eq!(silent.iter().sum::<u64>(), 3, "{silent:?}");
}

#[test]
fn iterations_with_timeouts_do_not_let_a_limit_grow() {
    // Learned at 2 (tooBig above 3), then the host is down for GROW_AFTER iterations:
    // they were not clean, so the limit is still 2 (it grew while the host was away).
    let (jobs, mut agents) = one_host(10, |a| a.too_big_over = 3);
    let t0 = Instant::now();
    let opts = IterationOptions::default;
    let mut memory = simulate(&jobs, &mut agents, HostMemory::default(), opts(), t0).memory;
    assert_eq!(memory.max_oids(&addr(1)), Some(2));
    agents.get_mut(&addr(1)).unwrap().silent = true;
    for _ in 0..GROW_AFTER {
        memory = simulate(&jobs, &mut agents, memory, opts(), t0).memory;
    }
    assert_eq!(memory.max_oids(&addr(1)), Some(2));
}

#[test]
fn a_lost_request_answered_on_retry_teaches_nothing() {
    // The first datagram is lost, the retry answered: the probe sent beside it says the
    // agent is up, but the request itself was answered: no size is learned, and the
    // probe's late answer is stale, not a value.
    let (jobs, mut agents) = one_host(10, |a| a.drop_first = 1);
    let out = iterate(&jobs, &mut agents, HostMemory::default());
    assert_eq!(items_of(&out.events, 0).len(), 10);
    assert_eq!(out.stats.items_ok, 10);
    assert_eq!(out.stats.probes, 1);
    assert_eq!(out.stats.silent_too_big, 0);
    assert_eq!(out.memory.max_oids(&addr(1)), None);
}

#[test]
fn a_dead_host_with_big_requests_dies_when_it_did_without_the_probe() {
    let (mut jobs, mut agents) = one_host(10, |a| a.silent = true);
    jobs[0].retries = 2;
    let out = iterate(&jobs, &mut agents, HostMemory::default());
    let items = items_of(&out.events, 0);
    assert!(items.values().all(|r| *r == Err(ItemFailure::Timeout)));
    assert_eq!(out.elapsed, Duration::from_secs(3));
    assert_eq!(out.stats.hosts_timed_out, 1);
    // One probe, beside the first retry (still in flight at the second).
    assert_eq!((out.stats.probes, out.stats.probes_answered), (1, 0));
    assert_eq!(out.memory.max_oids(&addr(1)), None);
}

#[test]
fn a_stopped_iteration_waits_for_what_is_in_flight_and_asks_nothing_more() {
    // One OID per request, 100 ms per answer: stopped at 250 ms, the request in flight
    // then (the third) is answered, nothing is sent after the stop, and the 7 items
    // never asked fail as Stopped (not Timeout). A silent host's request in flight is
    // waited for until its attempt's timeout, not retried: Stopped too.
    let (mut jobs, mut agents) = one_host(10, |a| a.latency = Duration::from_millis(100));
    jobs[0].max_oids = 1;
    let (silent, oids) = agent_with(2);
    let mut dead = job(2, &oids.iter().map(String::as_str).collect::<Vec<_>>());
    dead.retries = 3;
    jobs.push(dead);
    agents.insert(
        addr(2),
        Agent {
            silent: true,
            ..silent
        },
    );
    let out = simulate_stopped(
        &jobs,
        &mut agents,
        HostMemory::default(),
        IterationOptions::default(),
        Instant::now(),
        Some(Duration::from_millis(250)),
    );
    let items = items_of(&out.events, 0);
    assert_eq!(items.len(), 10);
    assert_eq!(items.values().filter(|r| r.is_ok()).count(), 3, "{items:?}");
    assert_eq!(
        items
            .values()
            .filter(|r| **r == Err(ItemFailure::Stopped))
            .count(),
        7
    );
    assert!(out.sent.iter().all(|s| s.0 < Duration::from_millis(250)));
    assert_eq!(out.done_at[&0], Duration::from_millis(300));
    let dead_items = items_of(&out.events, 1);
    assert!(dead_items.values().all(|r| *r == Err(ItemFailure::Stopped)));
    assert_eq!(
        out.done_at[&1],
        Duration::from_secs(1),
        "its first attempt's timeout"
    );
    assert_eq!(out.stats.retries, 0);
}

#[test]
fn short_response_asks_for_the_rest_with_the_size_that_worked() {
    let (mut a, oids) = agent_with(7);
    a.truncate_to = 3;
    let refs: Vec<&str> = oids.iter().map(|s| s.as_str()).collect();
    let mut agents = HashMap::from([(addr(1), a)]);
    let out = simulate(
        &[job(1, &refs)],
        &mut agents,
        HostMemory::default(),
        IterationOptions::default(),
        Instant::now(),
    );
    let sizes = request_sizes(&out);
    assert_eq!(sizes, [7, 3, 1]);
    assert_eq!(out.memory.max_oids(&addr(1)), Some(3));
    let items = items_of(&out.events, 0);
    assert!(items
        .iter()
        .all(|(i, r)| *r == Ok(VarValue::Counter32(*i as u32 * 100))));
    assert_eq!(items.len(), 7);
}

#[test]
fn v1_no_such_name_fails_one_item_and_resends_the_rest() {
    let (a, oids) = agent_with(4);
    let mut refs: Vec<&str> = oids.iter().map(|s| s.as_str()).collect();
    refs.insert(1, "1.3.6.1.2.1.1.7.0");
    let mut j = job(1, &refs);
    j.version = Version::V1;
    let mut agents = HashMap::from([(addr(1), a)]);
    let out = simulate(
        &[j],
        &mut agents,
        HostMemory::default(),
        IterationOptions::default(),
        Instant::now(),
    );
    let items = items_of(&out.events, 0);
    assert_eq!(
        items[&1],
        Err(ItemFailure::ErrorStatus(ErrorStatus::NO_SUCH_NAME))
    );
    assert_eq!(items[&0], Ok(VarValue::Counter32(0)));
    assert_eq!(items[&4], Ok(VarValue::Counter32(300)));
    assert_eq!(out.sent.len(), 2);
    assert_eq!(Message::decode(&out.sent[1].2).unwrap().varbind_count(), 4);
    assert_eq!(
        out.memory.max_oids(&addr(1)),
        None,
        "noSuchName is not a size problem"
    );
}

#[test]
fn exceptions_are_delivered_as_values() {
    let a = Agent::new(&[("1.3.6.1.2.1.1.3.0", VarValue::TimeTicks(5))]);
    let mut agents = HashMap::from([(addr(1), a)]);
    let out = simulate(
        &[job(1, &["1.3.6.1.2.1.1.3.0", "1.3.6.1.2.1.1.99.0"])],
        &mut agents,
        HostMemory::default(),
        IterationOptions::default(),
        Instant::now(),
    );
    let items = items_of(&out.events, 0);
    assert_eq!(items[&0], Ok(VarValue::TimeTicks(5)));
    assert_eq!(items[&1], Ok(VarValue::NoSuchObject));
}

/// Drives the iteration by hand to inject hostile datagrams.
#[test]
fn foreign_datagrams_are_dropped_and_counted() {
    let (mut a, oids) = agent_with(2);
    let jobs = [job(1, &[&oids[0], &oids[1]])];
    let mut it = Iteration::new(
        &jobs,
        &HostMemory::default(),
        IterationOptions {
            first_request_id: 1000,
            ..Default::default()
        },
    );
    let now = Instant::now();
    let mut buf = Vec::new();
    let t = it.poll_transmit(now, &mut buf).unwrap();
    assert_eq!(t.request_id, 1000);
    assert!(
        it.poll_transmit(now, &mut buf.clone()).is_none(),
        "one in flight per host"
    );
    let good = a.answer(&buf, Instant::now()).unwrap();

    assert_eq!(
        it.handle_datagram(addr(1), b"\x30\x03garbage", now),
        Received::Malformed
    );
    assert_eq!(
        it.handle_datagram(addr(7), &good, now),
        Received::WrongSource
    );
    let mut other_port = addr(1);
    other_port.set_port(1161);
    assert_eq!(
        it.handle_datagram(other_port, &good, now),
        Received::WrongSource
    );
    // Same request-id, wrong community.
    a.community = "private";
    let mut req = Vec::new();
    encode_request(
        &mut req,
        Version::V2c,
        b"private",
        1000,
        RequestKind::Get,
        jobs[0].oids.iter(),
    );
    let wrong_comm = a.answer(&req, Instant::now()).unwrap();
    assert_eq!(
        it.handle_datagram(addr(1), &wrong_comm, now),
        Received::WrongCommunity
    );
    // Unknown request-id.
    let mut req = Vec::new();
    encode_request(
        &mut req,
        Version::V2c,
        b"private",
        5,
        RequestKind::Get,
        jobs[0].oids.iter(),
    );
    let unknown = a.answer(&req, Instant::now()).unwrap();
    assert_eq!(
        it.handle_datagram(addr(1), &unknown, now),
        Received::UnknownRequestId
    );
    // A request (not a response) echoed back.
    assert_eq!(
        it.handle_datagram(addr(1), &buf, now),
        Received::NotResponse
    );
    assert!(it.poll_event().is_none(), "nothing matched yet");

    assert_eq!(it.handle_datagram(addr(1), &good, now), Received::Matched);
    assert_eq!(
        it.handle_datagram(addr(1), &good, now),
        Received::Stale,
        "duplicate"
    );
    let s = *it.stats();
    assert_eq!(
        (
            s.malformed,
            s.wrong_source,
            s.wrong_community,
            s.unknown_request_id,
            s.not_response,
            s.stale,
            s.responses
        ),
        (1, 2, 1, 1, 1, 1, 1)
    );
    assert!(matches!(
        it.poll_event(),
        Some(Event::Item {
            item: 0,
            result: Ok(VarValue::Counter32(0)),
            ..
        })
    ));
    assert!(matches!(
        it.poll_event(),
        Some(Event::Item {
            item: 1,
            result: Ok(VarValue::Counter32(100)),
            ..
        })
    ));
    assert_eq!(
        it.poll_event(),
        Some(Event::HostDone {
            host: 0,
            timed_out: false
        })
    );
    assert!(it.is_done());
}

/// The one request of a job of one OID answered by hand with `varbinds` (no error):
/// the item's result and the iteration's counters.
fn answer_one_oid_with(varbinds: &[(Oid, VarValue)]) -> (Result<VarValue, ItemFailure>, Stats) {
    let jobs = [job(1, &["1.3.6.1.2.1.1.3.0"])];
    let mut it = Iteration::new(&jobs, &HostMemory::default(), IterationOptions::default());
    let now = Instant::now();
    let mut buf = Vec::new();
    let t = it.poll_transmit(now, &mut buf).unwrap();
    let mut resp = Vec::new();
    encode_message(
        &mut resp,
        Version::V2c,
        b"public",
        PduType::Response,
        t.request_id,
        0,
        0,
        varbinds.iter().map(|(o, v)| (o.as_ref(), v.as_ref())),
    );
    assert_eq!(it.handle_datagram(addr(1), &resp, now), Received::Matched);
    let events: Vec<Event> = std::iter::from_fn(|| it.poll_event()).collect();
    assert!(it.is_done());
    let mut items = items_of(&events, 0);
    assert_eq!(items.len(), 1);
    (items.remove(&0).unwrap(), *it.stats())
}

#[test]
fn the_one_varbind_answering_an_oid_asked_alone_is_its_value_whatever_oid_it_names() {
    // Zabbix stores it (it logs the other OID at debug level): an item that works under
    // Zabbix keeps working. The request was of this OID alone, so the value can be no
    // other item's. Before, the item failed with the OID the answer named.
    let other = oid("1.3.6.1.2.1.1.4.0");
    let (result, stats) = answer_one_oid_with(&[(other, VarValue::Integer(1))]);
    assert_eq!(result, Ok(VarValue::Integer(1)));
    assert_eq!(stats.renamed, 1);
    assert_eq!((stats.items_ok, stats.items_failed), (1, 0));
}

#[test]
fn several_varbinds_none_of_them_the_oid_asked_alone_fail_it_in_zabbixs_words() {
    // Which of them answers it cannot be told: the item fails, worded as Zabbix words
    // an answer of more varbinds than asked. Before, the first varbind's OID was named
    // as "instead of the requested one", with no word of Zabbix's.
    let first = oid("1.3.6.1.2.1.1.4.0");
    let (result, stats) = answer_one_oid_with(&[
        (first.clone(), VarValue::Integer(1)),
        (oid("1.3.6.1.2.1.1.5.0"), VarValue::Integer(2)),
    ]);
    let f = ItemFailure::TooManyVarbinds { count: 2, first };
    assert_eq!(result, Err(f.clone()));
    assert_eq!(stats.renamed, 0);
    assert_eq!(
        f.to_string(),
        "Invalid SNMP response: too many variable bindings. (2 varbinds in the answer to \
         this OID alone, none of them this OID: the first is .1.3.6.1.2.1.1.4.0)"
    );
    // One of them the OID asked: its value, the others not asked and ignored (Zabbix
    // fails the item: the value is the OID's own, so netpoller takes it).
    let asked = oid("1.3.6.1.2.1.1.3.0");
    for varbinds in [
        vec![
            (asked.clone(), VarValue::TimeTicks(7)),
            (oid("1.3.6.1.2.1.1.4.0"), VarValue::Integer(1)),
        ],
        vec![
            (oid("1.3.6.1.2.1.1.4.0"), VarValue::Integer(1)),
            (asked.clone(), VarValue::TimeTicks(7)),
        ],
    ] {
        let (result, stats) = answer_one_oid_with(&varbinds);
        assert_eq!(result, Ok(VarValue::TimeTicks(7)));
        assert_eq!(stats.renamed, 0);
    }
}

#[test]
fn no_varbind_answering_an_oid_asked_alone_fails_it_in_zabbixs_words() {
    let (result, stats) = answer_one_oid_with(&[]);
    assert_eq!(result, Err(ItemFailure::EmptyResponse));
    assert_eq!(stats.short_responses, 1);
    assert_eq!(
        ItemFailure::EmptyResponse.to_string(),
        "Invalid SNMP response: too few variable bindings. (no varbind in the answer to this \
         OID alone)"
    );
}

#[test]
fn send_error_fails_that_request_only() {
    let (_, oids) = agent_with(2);
    let mut j = job(1, &[&oids[0], &oids[1]]);
    j.max_oids = 1;
    let jobs = [j];
    let mut it = Iteration::new(&jobs, &HostMemory::default(), IterationOptions::default());
    let now = Instant::now();
    let mut buf = Vec::new();
    let t = it.poll_transmit(now, &mut buf).unwrap();
    it.handle_send_error(t.request_id, "Operation not permitted");
    assert_eq!(
        it.poll_event(),
        Some(Event::Item {
            host: 0,
            item: 0,
            result: Err(ItemFailure::Send("Operation not permitted".into()))
        })
    );
    assert!(
        it.poll_transmit(now, &mut buf).is_some(),
        "the host goes on with its next item"
    );
    assert_eq!(it.stats().send_errors, 1);
}

/// One host, one item, one retry: its first attempt gets a reply from another port of
/// the agent (a multi-homed device, NAT); with `broken`, its second gets a reply that
/// does not decode (the last value's length made to run past the message: a damaged
/// datagram, the request-id still readable). Both attempts then time out: the item
/// failures.
fn dropped_replies(broken: bool) -> Vec<ItemFailure> {
    let (mut a, oids) = agent_with(1);
    let mut j = job(1, &[&oids[0]]);
    j.retries = 1;
    let jobs = [j];
    let mut it = Iteration::new(&jobs, &HostMemory::default(), IterationOptions::default());
    let t0 = Instant::now();
    let t1 = t0 + Duration::from_secs(1);
    let mut buf = Vec::new();
    it.poll_transmit(t0, &mut buf).unwrap();
    let good = a.answer(&buf, t0).unwrap();
    let mut other_port = addr(1);
    other_port.set_port(1161);
    assert_eq!(
        it.handle_datagram(other_port, &good, t0),
        Received::WrongSource
    );
    it.handle_timeout(t1);
    assert!(it.poll_transmit(t1, &mut Vec::new()).is_some(), "the retry");
    if broken {
        let mut bad = good.clone();
        let n = bad.len();
        assert_eq!(
            bad[n - 3..],
            [0x41, 0x01, 0x00],
            "Counter32 0, last in the message"
        );
        bad[n - 2] = 0x02;
        assert_eq!(it.handle_datagram(addr(1), &bad, t1), Received::Malformed);
    }
    it.handle_timeout(t0 + Duration::from_secs(2));
    let mut failures = Vec::new();
    while let Some(e) = it.poll_event() {
        if let Event::Item { result: Err(f), .. } = e {
            failures.push(f);
        }
    }
    failures
}

#[test]
fn a_host_whose_replies_were_dropped_says_why_when_it_times_out() {
    let f = dropped_replies(false);
    let mut other_port = addr(1);
    other_port.set_port(1161);
    assert_eq!(
        f,
        [ItemFailure::Dropped(Dropped::FromElsewhere(other_port))]
    );
    assert!(f[0].to_string().contains("replies came from"), "{}", f[0]);
    // The last reason seen is the one told.
    let f = dropped_replies(true);
    assert!(
        matches!(&f[..], [ItemFailure::Dropped(Dropped::Undecodable(_))]),
        "{f:?}"
    );
    assert!(f[0]
        .to_string()
        .starts_with("timeout: replies could not be decoded"));
}

/// One host, one item, no retry: its request gets a reply of `version`, `community` and
/// `pdu` from the agent's address; then it times out: the item's failure.
fn refused_reply(version: Version, community: &[u8], pdu: PduType) -> ItemFailure {
    let (_, oids) = agent_with(1);
    let mut j = job(1, &[&oids[0]]);
    j.retries = 0;
    let jobs = [j];
    let mut it = Iteration::new(&jobs, &HostMemory::default(), IterationOptions::default());
    let t0 = Instant::now();
    let t = it.poll_transmit(t0, &mut Vec::new()).unwrap();
    let mut reply = Vec::new();
    encode_message(
        &mut reply,
        version,
        community,
        pdu,
        t.request_id,
        0,
        0,
        std::iter::once((jobs[0].oids[0].as_ref(), crate::ValueRef::Counter32(1))),
    );
    assert_ne!(it.handle_datagram(addr(1), &reply, t0), Received::Matched);
    it.handle_timeout(t0 + Duration::from_secs(1));
    match it.poll_event() {
        Some(Event::Item { result: Err(f), .. }) => f,
        e => panic!("{e:?}"),
    }
}

#[test]
fn replies_refused_for_their_community_version_or_pdu_say_so_when_the_host_times_out() {
    // Not "no response": the agent answered, wrongly (a v1-only agent answering v2c
    // requests in v1, a community rewritten on the way, a Report to a v2c request).
    let f = refused_reply(Version::V2c, b"private", PduType::Response);
    assert_eq!(f, ItemFailure::Dropped(Dropped::WrongCommunity));
    assert!(!f.to_string().contains("private"), "a secret: {f}");
    let f = refused_reply(Version::V1, b"public", PduType::Response);
    assert_eq!(f, ItemFailure::Dropped(Dropped::WrongVersion(Version::V1)));
    assert_eq!(
        f.to_string(),
        "timeout: replies came in SNMP version 1, not the version asked, not taken"
    );
    let f = refused_reply(Version::V2c, b"public", PduType::Report);
    assert_eq!(
        f.to_string(),
        "timeout: replies were Report PDUs instead of Responses, not taken"
    );
    // The request echoed back (a reflector on the port).
    assert_eq!(
        refused_reply(Version::V2c, b"public", PduType::GetRequest),
        ItemFailure::Dropped(Dropped::NotResponse(PduType::GetRequest))
    );
}

/// A value the decoder cannot read (the obsolete UInteger32, a Counter32 of five
/// significant octets) fails its own item, with why; the other varbinds of the reply
/// are taken and the host goes on (the whole reply was refused: every item of the host
/// timed out).
#[test]
fn a_value_that_does_not_decode_fails_its_item_alone() {
    let (mut a, oids) = agent_with(4);
    let odd = [
        VarValue::Undecodable {
            tag: 0x47,
            raw: vec![7],
        },
        VarValue::Undecodable {
            tag: 0x41,
            raw: vec![1, 0, 0, 0, 0],
        },
    ];
    a.values.insert(oid(&oids[1]), odd[0].clone());
    a.values.insert(oid(&oids[2]), odd[1].clone());
    let refs: Vec<&str> = oids.iter().map(|s| s.as_str()).collect();
    let jobs = vec![job(1, &refs)];
    let mut agents = HashMap::from([(addr(1), a)]);
    let out = iterate(&jobs, &mut agents, HostMemory::default());
    let items = items_of(&out.events, 0);
    assert_eq!(
        items,
        [
            (0, Ok(VarValue::Counter32(0))),
            (1, Ok(odd[0].clone())),
            (2, Ok(odd[1].clone())),
            (3, Ok(VarValue::Counter32(300))),
        ]
        .into()
    );
    assert_eq!(out.stats.requests, 1);
    assert_eq!(out.stats.malformed, 0);
    assert_eq!(
        odd[0].undecodable().unwrap(),
        "a value of the obsolete type UInteger32 (BER tag 0x47), not read"
    );
    assert_eq!(
        odd[1].undecodable().unwrap(),
        "a value that does not decode (BER tag 0x41: integer out of range)"
    );
    assert_eq!(VarValue::Counter32(1).undecodable(), None);
}

#[test]
fn an_agent_that_leaves_an_unknown_oid_out_gets_the_others_paired_by_oid() {
    // Five OIDs asked, the third unknown to an agent that leaves it out of its answer:
    // the four others get their values (paired by position, each after the gap got its
    // neighbour's OID), the unknown one is asked again alone and fails on its own.
    let (mut a, oids) = agent_with(5);
    let unknown = oids[2].clone();
    a.values.remove(&oid(&unknown));
    a.omit_unknown = true;
    let refs: Vec<&str> = oids.iter().map(String::as_str).collect();
    let mut agents = HashMap::from([(addr(1), a)]);
    let out = simulate(
        &[job(1, &refs)],
        &mut agents,
        HostMemory::default(),
        IterationOptions::default(),
        Instant::now(),
    );
    let items = items_of(&out.events, 0);
    for k in [0usize, 1, 3, 4] {
        assert_eq!(
            items[&k],
            Ok(VarValue::Counter32(k as u32 * 100)),
            "item {k}"
        );
    }
    assert_eq!(items[&2], Err(ItemFailure::EmptyResponse));
    assert!(
        out.memory.is_empty(),
        "nothing learned: it was not a size problem"
    );
}

/// Items and requests of one iteration of a host of 6 items whose agent `mangle`s its
/// answers.
fn mangled(mangle: Mangle) -> (Outcome, usize) {
    let (jobs, mut agents) = one_host(6, |a| a.mangle = Some(mangle));
    let out = iterate(&jobs, &mut agents, HostMemory::default());
    let items = items_of(&out.events, 0);
    assert_eq!(
        items,
        (0..6)
            .map(|k| (k, Ok(VarValue::Counter32(k as u32 * 100))))
            .collect(),
        "every item its own value"
    );
    let requests = out.sent.len();
    (out, requests)
}

#[test]
fn an_answer_in_another_order_or_with_varbinds_not_asked_is_paired_by_oid() {
    // Paired by position, each item got another's OID and failed (though the answer
    // carried its value); Zabbix halves until each OID goes alone, and gets them all.
    let (out, requests) = mangled(|v| v.reverse());
    assert_eq!(requests, 1, "every value in the one answer");
    assert!(out.memory.is_empty(), "not a size problem");
    // More varbinds than asked, a foreign one first.
    let (_, requests) =
        mangled(|v| v.insert(0, (oid("1.3.6.1.2.1.1.3.0"), VarValue::TimeTicks(5))));
    assert_eq!(requests, 1);
    // One asked OID answered under another name in a request of several (right when
    // asked alone): the others are taken, that one is asked again alone.
    let (out, _) = mangled(|v| {
        if v.len() > 1 {
            v[1].0 = oid("1.3.6.1.2.1.1.3.0");
        }
    });
    assert_eq!(request_sizes(&out), [6, 1]);
    assert!(out.memory.is_empty());
}

/// `o` with one more arc, 0: a firmware that names each OID it answers so.
fn with_zero(o: &Oid) -> Oid {
    format!("{o}.0").parse().unwrap()
}

#[test]
fn an_oid_answered_under_another_name_even_alone_gets_its_value_alone() {
    // The second OID answered under another name, asked with the others and alone: the
    // others are taken from the first answer, that one is asked again alone and its
    // answer, one varbind, is its value (Zabbix halves the request until each OID goes
    // alone, and takes it then). Before, it failed with the OID its answer named.
    let mangle: Mangle = |v| {
        for (o, _) in v.iter_mut() {
            if o.to_string().ends_with(".10.2") {
                *o = with_zero(o);
            }
        }
    };
    let (out, _) = mangled(mangle);
    assert_eq!(request_sizes(&out), [6, 1]);
    assert_eq!(out.stats.renamed, 1);
    assert!(out.memory.is_empty(), "not a size problem");
    // Remembered as a culprit: the next iterations ask it alone from the start, one
    // request fewer each (it was asked with the others first, every poll).
    let (jobs, mut agents) = one_host(6, |a| a.mangle = Some(mangle));
    let mut memory = out.memory;
    for i in 1..3 {
        let out = iterate(&jobs, &mut agents, memory);
        assert_eq!(request_sizes(&out), [1, 5], "iteration {i}");
        assert_eq!(out.stats.renamed, 1, "iteration {i}");
        let items = items_of(&out.events, 0);
        assert!(
            items.values().all(Result::is_ok),
            "iteration {i}: {items:?}"
        );
        memory = out.memory;
    }
}

#[test]
fn an_answer_naming_no_oid_asked_gets_each_value_alone_and_learns_no_size() {
    // Every OID answered under another name: nothing of the full answer can be paired,
    // so each OID is asked alone and its answer taken (as Zabbix ends up doing); the
    // request size is kept, nothing is learned. Before, each item failed with the OID
    // at its place.
    let (out, _) = mangled(|v| v.iter_mut().for_each(|(o, _)| *o = with_zero(o)));
    assert_eq!(request_sizes(&out), [6, 1, 1, 1, 1, 1, 1]);
    assert_eq!(out.stats.renamed, 6);
    assert_eq!(out.stats.short_responses, 0);
    assert!(out.memory.is_empty(), "not a size problem");
}

#[test]
fn an_oid_left_out_is_asked_alone_and_the_rest_keep_their_request_size() {
    // 40 items at 10 OIDs per request, the third unknown to an agent that leaves it out
    // of its answer: it is asked again alone (and fails), and the 30 items after it
    // still go 10 per request, not one at a time for the rest of the iteration.
    let (mut a, oids) = agent_with(40);
    a.values.remove(&oid(&oids[2]));
    a.omit_unknown = true;
    let refs: Vec<&str> = oids.iter().map(String::as_str).collect();
    let mut agents = HashMap::from([(addr(1), a)]);
    let out = iterate(&[job(1, &refs)], &mut agents, HostMemory::default());
    assert_eq!(request_sizes(&out), [10, 1, 10, 10, 10]);
    let items = items_of(&out.events, 0);
    assert_eq!(items.len(), 40);
    assert_eq!(items[&2], Err(ItemFailure::EmptyResponse));
    assert!(items.iter().all(|(&k, r)| k == 2 || r.is_ok()));
}

#[test]
fn an_oid_left_out_at_the_end_of_an_answer_shrinks_nothing_for_good() {
    // As above, the unknown OID the last of the first request: its answer (the first 9
    // OIDs) reads as the agent returning what fits, and the size shrank to 9. The next
    // request, from that OID, shows it left out (its answer lacks the first OID): the
    // shrink is undone, nothing is learned but the culprit, and the next iteration
    // asks it alone, the rest at 10. It stayed at 9 for good (its failure at 10 kept it
    // from growing back).
    let (mut a, oids) = agent_with(40);
    a.values.remove(&oid(&oids[9]));
    a.omit_unknown = true;
    let refs: Vec<&str> = oids.iter().map(String::as_str).collect();
    let jobs = [job(1, &refs)];
    let mut agents = HashMap::from([(addr(1), a)]);
    let mut memory = HostMemory::default();
    for i in 0..2 {
        let out = iterate(&jobs, &mut agents, memory);
        let items = items_of(&out.events, 0);
        assert_eq!(items[&9], Err(ItemFailure::EmptyResponse));
        assert!(items.iter().all(|(&k, r)| k == 9 || r.is_ok()));
        let sizes: &[usize] = match i {
            0 => &[10, 9, 1, 10, 10, 2],
            _ => &[1, 10, 10, 10, 9],
        };
        assert_eq!(request_sizes(&out), sizes, "iteration {i}");
        assert_eq!(out.memory.max_oids(&addr(1)), None, "iteration {i}");
        memory = out.memory;
    }
}

#[test]
fn an_oid_left_out_of_an_answer_of_two_leaves_the_host_at_two() {
    // Two OIDs per request, the second unknown to an agent that leaves it out: the
    // answer of the first alone reads as what fits, the size fell to 1; asked alone the
    // OID gets an answer of nothing, so it was left out, not too big: the rest go two
    // per request again, and nothing is learned (the host stayed at one OID per
    // request, learned for good).
    let (mut a, oids) = agent_with(10);
    a.values.remove(&oid(&oids[1]));
    a.omit_unknown = true;
    let refs: Vec<&str> = oids.iter().map(String::as_str).collect();
    let mut j = job(1, &refs);
    j.max_oids = 2;
    let mut agents = HashMap::from([(addr(1), a)]);
    let out = iterate(&[j], &mut agents, HostMemory::default());
    let items = items_of(&out.events, 0);
    assert_eq!(items[&1], Err(ItemFailure::EmptyResponse));
    assert!(items.iter().all(|(&k, r)| k == 1 || r.is_ok()));
    assert_eq!(request_sizes(&out), [2, 1, 2, 2, 2, 2]);
    assert_eq!(out.memory.max_oids(&addr(1)), None);
}

#[test]
fn an_error_without_index_fails_its_request_and_the_rest_go_on() {
    // 40 items at 10 OIDs per request, the third answered genErr without an
    // error-index: the agent does not say which OID failed, so the first request's 10
    // items fail with its error, in that one request, as in Zabbix; the other 30 get
    // their values 10 per request. Nothing is learned: no culprit, no size.
    let (mut a, oids) = agent_with(40);
    a.gen_err_with = Some(oid(&oids[2]));
    let refs: Vec<&str> = oids.iter().map(String::as_str).collect();
    let mut agents = HashMap::from([(addr(1), a)]);
    let out = iterate(&[job(1, &refs)], &mut agents, HostMemory::default());
    let items = items_of(&out.events, 0);
    for (k, r) in &items {
        match k {
            0..10 => assert_eq!(*r, Err(ItemFailure::ErrorStatus(ErrorStatus::GEN_ERR))),
            _ => assert!(r.is_ok(), "{k}: {r:?}"),
        }
    }
    assert_eq!(request_sizes(&out), [10, 10, 10, 10]);
    assert!(out.memory.is_empty());
    assert!(out.memory.culprits(&addr(1)).is_empty());
}

#[test]
fn an_agent_refusing_every_request_without_index_costs_one_request_per_request() {
    // An agent that answers every request with an error-status and no usable
    // error-index (authorizationError or noAccess on a whole view, genErr to all; the
    // index 0 or past the request's OIDs): each request's items fail with the agent's
    // status, 4 requests for 40 items every iteration, as Zabbix sends. Halving each
    // request to find a culprit cost 149 requests in the first iteration and 53 in
    // each after (32 remembered culprits asked alone, the rest searched again).
    for (status, index) in [(16, 0), (6, 0), (5, 0), (5, 11), (2, 0), (2, 11)] {
        let (jobs, mut agents) = one_host(40, |a| a.error_all = Some((status, index)));
        let mut memory = HostMemory::default();
        for i in 0..3 {
            let out = iterate(&jobs, &mut agents, memory);
            let case = format!("status {status} index {index} iteration {i}");
            assert_eq!(request_sizes(&out), [10, 10, 10, 10], "{case}");
            let items = items_of(&out.events, 0);
            assert_eq!(items.len(), 40, "{case}");
            // An index past the request's OIDs says so (Zabbix's words for it).
            let f = match index {
                0 => ItemFailure::ErrorStatus(ErrorStatus(status)),
                _ => ItemFailure::ErrorIndexOutOfBounds {
                    status: ErrorStatus(status),
                    index: index as u32,
                    oids: 10,
                },
            };
            for r in items.values() {
                assert_eq!(*r, Err(f.clone()), "{case}");
            }
            memory = out.memory;
            assert!(memory.is_empty(), "{case}");
            assert!(memory.culprits(&addr(1)).is_empty(), "{case}");
        }
    }
}

#[test]
fn error_status_texts_carry_zabbixs_words() {
    // What Zabbix 6.0 to 7.0 shows for an error-status (checks_snmp.c:
    // "SNMP error: " and net-snmp's snmp_errstring(), or "Invalid SNMP response: error
    // index out of bounds." for a noSuchName whose index is past the request's OIDs),
    // each followed by the status as RFC 3416 names it (and the index when it is out of
    // bounds): an operator comparing the two reads the same words.
    for (f, text) in [
        (
            ItemFailure::ErrorStatus(ErrorStatus::NO_SUCH_NAME),
            "SNMP error: (noSuchName) There is no such variable name in this MIB. (error-status noSuchName(2))",
        ),
        (
            ItemFailure::ErrorStatus(ErrorStatus::GEN_ERR),
            "SNMP error: (genError) A general failure occured (error-status genErr(5))",
        ),
        (
            ItemFailure::ErrorStatus(ErrorStatus::TOO_BIG),
            "SNMP error: (tooBig) Response message would have been too large. (error-status tooBig(1))",
        ),
        (
            ItemFailure::ErrorStatus(ErrorStatus(16)),
            "SNMP error: authorizationError (access denied to that object) (error-status authorizationError(16))",
        ),
        (
            ItemFailure::ErrorStatus(ErrorStatus(42)),
            "SNMP error: Unknown Error (error-status unknownError(42))",
        ),
        (
            ItemFailure::ErrorIndexOutOfBounds {
                status: ErrorStatus::NO_SUCH_NAME,
                index: 11,
                oids: 10,
            },
            "Invalid SNMP response: error index out of bounds. (error-status noSuchName(2), error-index 11 out of bounds for a request of 10 OID(s))",
        ),
        (
            ItemFailure::ErrorIndexOutOfBounds {
                status: ErrorStatus::GEN_ERR,
                index: 11,
                oids: 10,
            },
            "SNMP error: (genError) A general failure occured (error-status genErr(5), error-index 11 out of bounds for a request of 10 OID(s))",
        ),
    ] {
        assert_eq!(f.to_string(), text);
    }
}

/// Requests each of three iterations sends to a host of 40 items at 10 per request
/// whose agent `tweak` makes single out `culprit` (its item's result each time too),
/// the memory passed on.
fn culprit_iterations(
    culprit: usize,
    tweak: impl FnOnce(&mut Agent, &Oid),
) -> Vec<(Vec<usize>, Result<VarValue, ItemFailure>, HostMemory)> {
    let (mut a, oids) = agent_with(40);
    tweak(&mut a, &oid(&oids[culprit]));
    let refs: Vec<&str> = oids.iter().map(String::as_str).collect();
    let jobs = [job(1, &refs)];
    let mut agents = HashMap::from([(addr(1), a)]);
    let mut memory = HostMemory::default();
    let mut runs = Vec::new();
    for _ in 0..3 {
        let out = iterate(&jobs, &mut agents, memory);
        let items = items_of(&out.events, 0);
        assert_eq!(items.len(), 40);
        assert!(items.iter().all(|(&k, r)| k == culprit || r.is_ok()));
        memory = out.memory.clone();
        runs.push((request_sizes(&out), items[&culprit].clone(), out.memory));
    }
    runs
}

#[test]
fn a_culprit_found_once_is_asked_alone_from_the_start_after() {
    // The search for the OID that makes the agent fail a request of several (halvings
    // for a value too big for any message; a solo request
    // after the answer that left it out at its end, which shrank the size meanwhile)
    // was spent again every iteration. Once found, it is asked alone first and the 39
    // others 10 per request; its item still gets the agent's error every time.
    type Tweak = fn(&mut Agent, &Oid);
    let cases: [(usize, Tweak, ItemFailure, Vec<usize>); 2] = [
        (
            2,
            |a, o| a.too_big_with = Some(o.clone()),
            ItemFailure::ErrorStatus(ErrorStatus::TOO_BIG),
            vec![10, 5, 2, 2, 1, 10, 10, 10, 7],
        ),
        (
            9,
            |a, o| {
                a.values.remove(o);
                a.omit_unknown = true;
            },
            ItemFailure::EmptyResponse,
            vec![10, 9, 1, 10, 10, 2],
        ),
    ];
    for (culprit, tweak, failure, first) in cases {
        let runs = culprit_iterations(culprit, tweak);
        assert_eq!(runs[0].0, first, "{failure}");
        for (_, result, memory) in &runs {
            assert_eq!(*result, Err(failure.clone()));
            assert_eq!(memory.max_oids(&addr(1)), None, "{failure}");
            assert_eq!(memory.culprits(&addr(1)).len(), 1, "{failure}");
        }
        for (sizes, ..) in &runs[1..] {
            assert_eq!(*sizes, [1, 10, 10, 10, 9], "{failure}");
        }
    }
}

#[test]
fn a_culprit_that_gets_a_value_is_asked_with_the_others_again() {
    let (mut a, oids) = agent_with(40);
    let bad = oid(&oids[2]);
    a.too_big_with = Some(bad.clone());
    let refs: Vec<&str> = oids.iter().map(String::as_str).collect();
    let jobs = [job(1, &refs)];
    let mut agents = HashMap::from([(addr(1), a)]);
    let out = iterate(&jobs, &mut agents, HostMemory::default());
    assert_eq!(out.memory.culprits(&addr(1)), [bad]);
    // The agent fixed: asked alone once more, it answers, and is a culprit no more.
    agents.get_mut(&addr(1)).unwrap().too_big_with = None;
    let out = iterate(&jobs, &mut agents, out.memory);
    assert_eq!(request_sizes(&out), [1, 10, 10, 10, 9]);
    assert!(items_of(&out.events, 0).values().all(Result::is_ok));
    assert!(out.memory.culprits(&addr(1)).is_empty());
    let out = iterate(&jobs, &mut agents, out.memory);
    assert_eq!(request_sizes(&out), [10, 10, 10, 10]);
}

#[test]
fn a_culprit_one_host_finds_is_kept_whatever_another_host_at_its_address_gets() {
    // Two hosts at one address asking the same OID (here v1, which the agent answers
    // noSuchName, and v2c, noSuchObject: a value; as a community or context can differ
    // in what it shows). The v1 host's culprit stays known, in either order of the
    // jobs: the v2c host's value for it cleared it every other iteration (when its job
    // came after), and the v1 host searched it out again.
    let (mut a, oids) = agent_with(10);
    let bad = oid(&oids[2]);
    a.values.remove(&bad);
    let refs: Vec<&str> = oids.iter().map(String::as_str).collect();
    let mut v1 = job(1, &refs);
    v1.version = Version::V1;
    let v2c = job(1, &refs);
    for jobs in [[v1.clone(), v2c.clone()], [v2c, v1]] {
        let mut agents = HashMap::from([(addr(1), a.clone())]);
        let mut memory = HostMemory::default();
        for i in 0..4 {
            let out = iterate(&jobs, &mut agents, memory);
            memory = out.memory;
            assert_eq!(
                memory.culprits(&addr(1)),
                std::slice::from_ref(&bad),
                "iteration {i}"
            );
        }
    }
}

#[test]
fn culprits_are_kept_while_their_host_times_out_and_bounded() {
    // A host that goes silent says nothing of its culprits: kept.
    let (mut a, oids) = agent_with(40);
    a.too_big_with = Some(oid(&oids[2]));
    let refs: Vec<&str> = oids.iter().map(String::as_str).collect();
    let jobs = [job(1, &refs)];
    let mut agents = HashMap::from([(addr(1), a)]);
    let out = iterate(&jobs, &mut agents, HostMemory::default());
    agents.get_mut(&addr(1)).unwrap().silent = true;
    let out = iterate(&jobs, &mut agents, out.memory);
    assert_eq!(out.memory.culprits(&addr(1)), [oid(&oids[2])]);
    // At most MAX_CULPRITS per address, the newest kept: a v1 agent that knows none of
    // 50 OIDs (noSuchName, each found by its error-index).
    let (_, oids) = agent_with(50);
    let mut a = Agent::new(&[]);
    a.values.clear();
    let refs: Vec<&str> = oids.iter().map(String::as_str).collect();
    let mut j = job(1, &refs);
    j.version = Version::V1;
    let mut agents = HashMap::from([(addr(1), a)]);
    let out = iterate(&[j], &mut agents, HostMemory::default());
    let kept = out.memory.culprits(&addr(1));
    assert_eq!(kept.len(), MAX_CULPRITS);
    assert_eq!(kept.last(), Some(&oid(&oids[49])));
}

#[test]
fn iteration_deadline_ends_everything() {
    let (mut a, oids) = agent_with(1);
    a.silent = true;
    let mut j = job(1, &[&oids[0]]);
    j.timeout = Duration::from_secs(10);
    let t0 = Instant::now();
    let mut agents = HashMap::from([(addr(1), a)]);
    let opts = IterationOptions {
        deadline: Some(t0 + Duration::from_secs(2)),
        ..Default::default()
    };
    let out = simulate(&[j], &mut agents, HostMemory::default(), opts, t0);
    assert_eq!(out.elapsed, Duration::from_secs(2));
    assert_eq!(items_of(&out.events, 0)[&0], Err(ItemFailure::Timeout));
}

#[test]
fn global_inflight_cap_is_respected() {
    let (a, oids) = agent_with(1);
    let jobs: Vec<HostJob> = (1..=20).map(|i| job(i, &[&oids[0]])).collect();
    let mut agents: HashMap<SocketAddr, Agent> = (1..=20).map(|i| (addr(i), a.clone())).collect();
    let opts = IterationOptions {
        max_inflight_total: 4,
        ..Default::default()
    };
    let out = simulate(
        &jobs,
        &mut agents,
        HostMemory::default(),
        opts,
        Instant::now(),
    );
    let at_zero = out.sent.iter().filter(|s| s.0 == Duration::ZERO).count();
    assert_eq!(at_zero, 4);
    assert_eq!(out.stats.items_ok, 20);
}

#[test]
fn empty_job_finishes_immediately() {
    let jobs = [job(1, &[])];
    let mut it = Iteration::new(&jobs, &HostMemory::default(), IterationOptions::default());
    assert!(it.is_done());
    assert_eq!(
        it.poll_event(),
        Some(Event::HostDone {
            host: 0,
            timed_out: false
        })
    );
    assert_eq!(it.poll_timeout(), None);
}

proptest! {
    // 256: a silent-over agent with two requests in flight needs a few hundred cases to
    // come up (64 missed a bug that 2,000 found at once).
    #![proptest_config(ProptestConfig::with_cases(256))]
    /// Whatever the agents do, every item is reported exactly once, every host is done
    /// exactly once, and the iteration ends within the slowest host's bound.
    #[test]
    fn every_item_exactly_once(
        hosts in proptest::collection::vec(
            (1usize..12, 1usize..5, 1usize..5, 0u32..3, 0usize..4, 1usize..12, 1usize..12, any::<bool>(), 0u64..50, 1usize..14),
            1..12,
        ),
        // Per host: 0 v2c; SNMPv3 with 1 the agent's key, 2 a wrong key (Reports),
        // 3 forged unauthenticated answers, 4 an agent that rebooted since its engine
        // was remembered (time window resync), 5 an agent replaced since (new engine ID).
        modes in proptest::collection::vec(0u8..6, 12),
        // Per v2c host: 1 its agent does not know the second OID and leaves it out of
        // its answers (instead of noSuchObject), 2 it answers genErr without an
        // error-index to any request with the second OID, 3 it answers the varbinds in
        // reverse order.
        faults in proptest::collection::vec(0u8..4, 12),
        // Stopped (a shutdown) this long after the start, or never.
        stop_ms in proptest::option::of(0u64..4000),
        // Per host: its agent loses every second or third datagram (0: none).
        drop_every in proptest::collection::vec(prop_oneof![Just(0usize), 2usize..4], 12),
    ) {
        let t0 = Instant::now();
        let (base, oids) = agent_with(12);
        let mut jobs = Vec::new();
        let mut agents = HashMap::new();
        let mut memory = HostMemory::default();
        let (good, wrong) = users();
        for (i, &(n, max_oids, inflight, retries, drop_first, too_big, trunc, silent, lat, silent_over)) in hosts.iter().enumerate() {
            let refs: Vec<&str> = oids.iter().take(n).map(|s| s.as_str()).collect();
            let mut j = job(i as u8 + 1, &refs);
            let mode = modes[i];
            if mode > 0 {
                j.version = Version::V3;
                j.usm = Some(if mode == 2 { wrong.clone() } else { good.clone() });
            }
            if mode >= 4 {
                // Remembered from an earlier iteration: boots 1 of engine A.
                let old = Engine::new(good.clone(), ENGINE_A, 1, 0, t0);
                memory.remember_engine(addr(i as u8 + 1), old);
            }
            j.max_oids = max_oids;
            j.max_inflight = inflight;
            j.retries = retries;
            jobs.push(j);
            let mut a = base.clone();
            a.drop_first = drop_first;
            a.drop_every = drop_every[i];
            a.too_big_over = too_big;
            a.truncate_to = trunc;
            a.silent = silent;
            a.silent_over = silent_over;
            a.latency = Duration::from_millis(lat);
            match (mode, faults[i]) {
                (0, 1) => {
                    a.values.remove(&oid(&oids[1]));
                    a.omit_unknown = true;
                }
                (0, 2) => a.gen_err_with = Some(oid(&oids[1])),
                (0, 3) => a.mangle = Some(|v| v.reverse()),
                _ => {}
            }
            if mode > 0 {
                let (id, boots): (&[u8], u32) = match mode {
                    4 => (ENGINE_A, 2),
                    5 => (b"engine-b", 1),
                    _ => (ENGINE_A, 1),
                };
                a = a.v3(good, id, boots, t0);
                a.usm.as_mut().unwrap().forge = mode == 3;
            }
            agents.insert(addr(i as u8 + 1), a);
        }
        let stop = stop_ms.map(Duration::from_millis);
        let out = simulate_stopped(&jobs, &mut agents, memory, IterationOptions::default(), t0, stop);
        if let Some(stop) = stop {
            // Nothing sent after the stop; done within one attempt's timeout (1 s) of it.
            prop_assert!(out.sent.iter().all(|s| s.0 <= stop));
            prop_assert!(out.elapsed <= stop + Duration::from_secs(1), "{:?}", out.elapsed);
        }
        for (h, j) in jobs.iter().enumerate() {
            let items = items_of(&out.events, h);
            prop_assert_eq!(items.len(), j.oids.len());
            let dones = out.events.iter().filter(|e| matches!(e, Event::HostDone { host, .. } if *host == h)).count();
            prop_assert_eq!(dones, 1);
            if stop.is_some() {
                // What follows is about whole iterations.
                continue;
            }
            if hosts[h].7 {
                // An SNMPv3 agent's engine not remembered is never discovered.
                // One whose engine is remembered answers no discovery beside a retry
                // either: without a retry, nothing tells it from a wrong privacy key.
                let timeout = match modes[h] {
                    1..=3 => ItemFailure::DiscoveryTimeout,
                    4 | 5 if j.retries >= 1 => ItemFailure::DiscoveryTimeout,
                    _ => ItemFailure::Timeout,
                };
                prop_assert!(items.values().all(|r| *r == Err(timeout.clone())));
                prop_assert_eq!(out.done_at[&h], j.timeout * (j.retries + 1));
            }
            for (i, r) in &items {
                if let Ok(v) = r {
                    prop_assert_eq!(v, &VarValue::Counter32(*i as u32 * 100));
                }
            }
            let (.., drop_first, _, trunc, silent, _, _) = hosts[h];
            let omitted = modes[h] == 0 && matches!(faults[h], 1 | 2);
            if omitted {
                prop_assert!(items.get(&1).is_none_or(|r| r.is_err()));
            }
            if modes[h] == 0 && !omitted && !silent && drop_first == 0 && drop_every[h] == 0 && trunc >= j.oids.len() && j.retries >= 1 {
                // An agent that answers one OID alone gets every value, whatever sizes it
                // refuses (tooBig) or ignores (silence).
                prop_assert!(items.values().all(Result::is_ok), "{:?} {:?}", hosts[h], items);
            }
            if matches!(modes[h], 2 | 3) {
                // A wrong key, or forged answers: never a value.
                prop_assert!(items.values().all(|r| r.is_err()));
            }
            let (drops, retries, silent) = (hosts[h].4, hosts[h].3, hosts[h].7);
            if matches!(modes[h], 1 | 4 | 5) && !silent && drops as u32 <= retries && drop_every[h] == 0 {
                // The right key: discovery, a reboot or a replacement cost round trips,
                // never values, however many requests were in flight.
                prop_assert!(items.values().all(|r| r.is_ok()), "host {}: {:?}", h, items);
            }
        }
        // No salt twice under one engine's key. A retransmission of the same bytes is
        // the same message (v1/v2c, a discovery); an SNMPv3 retry is encoded anew,
        // with a salt of its own, and checked as well.
        let mut salts = std::collections::HashSet::new();
        let mut messages = std::collections::HashSet::new();
        for (_, t, bytes) in &out.sent {
            if !messages.insert((t.dst, bytes.clone())) {
                continue;
            }
            if let Ok(m) = V3Message::decode(bytes) {
                if m.level() == v3::SecurityLevel::AuthPriv {
                    prop_assert!(salts.insert((t.dst, m.engine_id.to_vec(), m.priv_params.to_vec())), "salt repeated");
                }
            }
        }
        prop_assert_eq!(out.stats.items_ok + out.stats.items_failed, jobs.iter().map(|j| j.oids.len() as u64).sum::<u64>());
    }
}

// ---------------------------------------------------------------- SNMPv3

const ENGINE_A: &[u8] = b"\x80\x00\x1f\x88\x04engine-a";

/// The proptest's users, derived once (each passphrase costs 1 MiB of hashing): the
/// agents' user, and the same user with another authentication passphrase.
fn users() -> &'static (Arc<UsmUser>, Arc<UsmUser>) {
    static USERS: std::sync::OnceLock<(Arc<UsmUser>, Arc<UsmUser>)> = std::sync::OnceLock::new();
    USERS.get_or_init(|| (shaaes("np-auth-pass"), shaaes("not-the-pass")))
}

fn shaaes(auth_pass: &str) -> Arc<UsmUser> {
    let user = UsmUser::new(
        "np-shaaes",
        Some((crate::usm::AuthProtocol::Sha1, auth_pass)),
        Some((crate::usm::PrivProtocol::Aes128, "np-priv-pass")),
    )
    .unwrap();
    Arc::new(user)
}

fn v3_job(user: &Arc<UsmUser>, oids: &[String]) -> HostJob {
    let mut j = HostJob::new_v3(addr(1), user.clone(), oids.iter().map(|s| oid(s)).collect());
    j.timeout = Duration::from_secs(1);
    j.max_oids = 4;
    j
}

fn v3_setup(agent_user: &Arc<UsmUser>, t0: Instant) -> (HashMap<SocketAddr, Agent>, Vec<String>) {
    let (agent, oids) = agent_with(10);
    let agents = HashMap::from([(addr(1), agent.v3(agent_user, ENGINE_A, 3, t0))]);
    (agents, oids)
}

fn all_ok(out: &Outcome, n: usize) {
    let items = items_of(&out.events, 0);
    assert_eq!(items.len(), n);
    for (i, r) in &items {
        assert_eq!(r, &Ok(VarValue::Counter32(*i as u32 * 100)), "item {i}");
    }
}

#[test]
fn v3_discovers_the_engine_once_then_polls_authenticated_and_encrypted() {
    let t0 = Instant::now();
    let user = shaaes("np-auth-pass");
    let (mut agents, oids) = v3_setup(&user, t0);
    let jobs = [v3_job(&user, &oids)];
    let opts = || IterationOptions {
        salt_seed: 42,
        ..Default::default()
    };
    let out = simulate(&jobs, &mut agents, HostMemory::default(), opts(), t0);
    all_ok(&out, 10);
    assert_eq!(out.stats.discoveries, 1);
    assert_eq!(out.stats.reports, 1);
    // The discovery first (no engine, no user), then 3 requests of ≤ 4 OIDs, each
    // authenticated and encrypted with its own salt.
    let first = V3Message::decode(&out.sent[0].2).unwrap();
    assert!(first.engine_id.is_empty() && first.user_name.is_empty());
    let mut salts = std::collections::HashSet::new();
    for (_, _, bytes) in &out.sent[1..] {
        let m = V3Message::decode(bytes).unwrap();
        assert_eq!(m.level(), v3::SecurityLevel::AuthPriv);
        assert_eq!((m.engine_id, m.user_name), (ENGINE_A, &b"np-shaaes"[..]));
        assert!(salts.insert(m.priv_params.to_vec()), "salt repeated");
    }
    assert_eq!(out.sent.len(), 4);
    let engine = out.memory.engine(&addr(1)).expect("engine remembered");
    assert_eq!(engine.id(), ENGINE_A);

    // The next iteration goes straight to the requests, salts counting on.
    // (Discovery's report came 1 ms after t0: the clock counts from there.)
    let later = t0 + Duration::from_millis(60_001);
    let out2 = simulate(&jobs, &mut agents, out.memory, opts(), later);
    all_ok(&out2, 10);
    assert_eq!((out2.stats.discoveries, out2.sent.len()), (0, 3));
    for (_, _, bytes) in &out2.sent {
        let m = V3Message::decode(bytes).unwrap();
        assert!(salts.insert(m.priv_params.to_vec()), "salt repeated");
        // The engine's clock, counted on from discovery: 60 s later.
        assert_eq!((m.boots, m.time), (3, 60));
    }
}

/// An SNMPv3 agent that answers nothing fails the items as a discovery's timeout (no
/// key was ever used, so no key can be wrong); so does one whose engine was discovered
/// and that then goes silent, as it does not answer the discovery sent beside the
/// retry either (it was a plain timeout, with the hint that a wrong privacy key looks
/// the same); without a retry nothing tells them apart: a plain timeout.
#[test]
fn v3_a_silent_agent_times_out_as_its_discovery_or_its_requests() {
    let t0 = Instant::now();
    let user = shaaes("np-auth-pass");
    let (mut agents, oids) = v3_setup(&user, t0);
    let jobs = [v3_job(&user, &oids)];
    let fails_all_with = |out: &Outcome, f: ItemFailure| {
        let items = items_of(&out.events, 0);
        assert_eq!(items.len(), 10);
        assert!(items.values().all(|r| r == &Err(f.clone())), "{items:?}");
    };
    let mut silent = agents.clone();
    silent.get_mut(&addr(1)).unwrap().silent = true;
    let out = iterate(&jobs, &mut silent, HostMemory::default());
    fails_all_with(&out, ItemFailure::DiscoveryTimeout);
    assert!(out.events.contains(&Event::HostDone {
        host: 0,
        timed_out: true
    }));
    // Discovered, then silent.
    let out = iterate(&jobs, &mut agents, HostMemory::default());
    all_ok(&out, 10);
    let later = t0 + Duration::from_secs(60);
    let memory = out.memory;
    let out = simulate(
        &jobs,
        &mut silent,
        memory.clone(),
        Default::default(),
        later,
    );
    fails_all_with(&out, ItemFailure::DiscoveryTimeout);
    assert_eq!(
        (out.stats.engine_probes, out.stats.engine_probes_answered),
        (1, 0)
    );
    // It dies when it did without the probe: the last attempt's timeout after the
    // retry, beside which the probe went.
    assert_eq!(out.done_at[&0], Duration::from_secs(2));
    let mut once = jobs.clone();
    once[0].retries = 0;
    let out = simulate(&once, &mut silent, memory, Default::default(), later);
    fails_all_with(&out, ItemFailure::Timeout);
    assert_eq!(out.stats.engine_probes, 0);
}

/// An agent whose privacy key is not the user's drops every encrypted request without
/// a word, as a down one does, yet answers the discovery (no key) sent beside the
/// first retry: the items fail saying so, one probe for the whole host. An authNoPriv
/// user is never probed (nothing of it is encrypted). Both were a plain timeout.
#[test]
fn v3_an_agent_that_answers_discovery_but_not_encrypted_requests_says_so() {
    let t0 = Instant::now();
    let user = shaaes("np-auth-pass");
    let other_priv = UsmUser::new(
        "np-shaaes",
        Some((crate::usm::AuthProtocol::Sha1, "np-auth-pass")),
        Some((crate::usm::PrivProtocol::Aes128, "not-the-priv-pass")),
    )
    .unwrap();
    let (agents, oids) = v3_setup(&Arc::new(other_priv), t0);
    let mut jobs = vec![v3_job(&user, &oids)];
    jobs[0].max_inflight = 2;
    let out = simulate(
        &jobs,
        &mut agents.clone(),
        HostMemory::default(),
        Default::default(),
        t0,
    );
    let items = items_of(&out.events, 0);
    assert_eq!(items.len(), 10);
    let want = Err(ItemFailure::TimeoutDiscoveryAnswered);
    assert!(items.values().all(|r| r == &want), "{items:?}");
    // The first discovery, and one more beside the retries of both requests.
    assert_eq!((out.stats.discoveries, out.stats.engine_probes), (1, 1));
    assert_eq!(out.stats.engine_probes_answered, 1);

    let auth_only = UsmUser::new(
        "np-shaaes",
        Some((crate::usm::AuthProtocol::Sha1, "np-auth-pass")),
        None,
    )
    .unwrap();
    let auth_only = Arc::new(auth_only);
    let (mut agents, oids) = v3_setup(&auth_only, t0);
    let jobs = [v3_job(&auth_only, &oids)];
    let out = iterate(&jobs, &mut agents, HostMemory::default());
    all_ok(&out, 10);
    agents.get_mut(&addr(1)).unwrap().silent = true;
    let later = t0 + Duration::from_secs(60);
    let out = simulate(&jobs, &mut agents, out.memory, Default::default(), later);
    let items = items_of(&out.events, 0);
    assert!(
        items.values().all(|r| r == &Err(ItemFailure::Timeout)),
        "{items:?}"
    );
    assert_eq!(out.stats.engine_probes, 0);
}

/// An iteration of `jobs` (one SNMPv3 host at `addr(1)` of `user`, its engine
/// `ENGINE_A` remembered) whose first request, sent at `t0`, timed out: at the instant
/// returned, its retry and the engine discovery beside it are queued.
fn v3_first_request_timed_out<'j>(
    jobs: &'j [HostJob],
    user: &Arc<UsmUser>,
    t0: Instant,
) -> (Iteration<'j>, Instant) {
    let mut memory = HostMemory::default();
    memory.remember_engine(addr(1), Engine::new(user.clone(), ENGINE_A, 3, 0, t0));
    let mut it = Iteration::new(jobs, &memory, IterationOptions::default());
    it.poll_transmit(t0, &mut Vec::new()).unwrap();
    let t1 = t0 + Duration::from_secs(1);
    it.handle_timeout(t1);
    (it, t1)
}

/// An engine discovery beside the retry that could not be sent learns nothing of the
/// agent: the host's timeout keeps the uncertain hint (it said the discovery went
/// unanswered).
#[test]
fn v3_an_engine_probe_that_could_not_be_sent_tells_nothing() {
    let t0 = Instant::now();
    let user = shaaes("np-auth-pass");
    let (_, oids) = agent_with(1);
    let jobs = [v3_job(&user, &oids)];
    let (mut it, t1) = v3_first_request_timed_out(&jobs, &user, t0);
    let mut buf = Vec::new();
    assert!(it.poll_transmit(t1, &mut buf).unwrap().retry);
    let probe = it.poll_transmit(t1, &mut buf).unwrap();
    assert!(
        V3Message::decode(&buf).unwrap().engine_id.is_empty(),
        "a discovery"
    );
    it.handle_send_error(probe.request_id, "Operation not permitted");
    it.handle_timeout(t1 + Duration::from_secs(1));
    let timeout = Event::Item {
        host: 0,
        item: 0,
        result: Err(ItemFailure::Timeout),
    };
    assert_eq!(it.poll_event(), Some(timeout));
    assert_eq!((it.stats().engine_probes, it.stats().send_errors), (1, 1));
}

/// An agent whose Responses were taken in this iteration has the user's keys: its
/// answer to the discovery beside an early retry blames no key when it goes silent
/// later in the iteration (that said "a wrong privacy passphrase or protocol?").
#[test]
fn v3_an_answered_engine_probe_blames_no_key_the_agent_took() {
    let t0 = Instant::now();
    let user = shaaes("np-auth-pass");
    let (mut agents, oids) = v3_setup(&user, t0);
    let agent = agents.get_mut(&addr(1)).unwrap();
    let mut job = v3_job(&user, &oids[..2]);
    job.max_oids = 1;
    let jobs = [job];
    // Item 0's request is lost; its retry and the discovery beside it are answered.
    let (mut it, t1) = v3_first_request_timed_out(&jobs, &user, t0);
    let mut buf = Vec::new();
    let mut replies = Vec::new();
    while let Some(t) = it.poll_transmit(t1, &mut buf) {
        replies.push((t.dst, agent.answer(&buf, t1).unwrap()));
    }
    assert_eq!(replies.len(), 2, "the retry and the discovery");
    for (src, reply) in replies {
        it.handle_datagram(src, &reply, t1);
    }
    assert_eq!(it.stats().engine_probes_answered, 1);
    // Item 1's request and its retry go unanswered: the agent went down.
    assert!(!it.poll_transmit(t1, &mut buf).unwrap().retry);
    let t2 = t1 + Duration::from_secs(1);
    it.handle_timeout(t2);
    assert!(it.poll_transmit(t2, &mut buf).unwrap().retry);
    it.handle_timeout(t2 + Duration::from_secs(1));
    let events: Vec<Event> = std::iter::from_fn(|| it.poll_event()).collect();
    let items = items_of(&events, 0);
    assert_eq!(items[&0], Ok(VarValue::Counter32(0)));
    assert_eq!(items[&1], Err(ItemFailure::Timeout));
}

#[test]
fn v3_a_wrong_key_fails_the_items_with_the_agents_report_at_once() {
    let t0 = Instant::now();
    let (mut agents, oids) = v3_setup(&shaaes("np-auth-pass"), t0);
    let jobs = [v3_job(&shaaes("not-the-pass"), &oids)];
    let out = simulate(
        &jobs,
        &mut agents,
        HostMemory::default(),
        Default::default(),
        t0,
    );
    let items = items_of(&out.events, 0);
    assert_eq!(items.len(), 10);
    assert!(items
        .values()
        .all(|r| r == &Err(ItemFailure::Report(ReportKind::WrongDigest))));
    assert!(out.events.contains(&Event::HostDone {
        host: 0,
        timed_out: false
    }));
    assert_eq!(out.stats.refusals[ReportKind::WrongDigest.index()], 1);
    assert_eq!(
        out.stats.refusals.iter().sum::<u64>(),
        1,
        "discovery's not counted"
    );
    // Two round trips, no timeout waited for.
    assert!(out.elapsed < Duration::from_millis(10), "{:?}", out.elapsed);
    assert_eq!(
        ItemFailure::Report(ReportKind::WrongDigest).to_string(),
        "SNMPv3 wrong digest (authentication failure) (usmStatsWrongDigests)"
    );
}

/// The stats of an iteration of [`v3_setup`]'s agent, answering as `answer` makes it
/// answers that are not authentic: every item times out saying so (the agent answered;
/// "no response" would read as a dead one), none is taken.
fn v3_not_authentic(answer: impl FnOnce(&mut AgentUsm)) -> Stats {
    let t0 = Instant::now();
    let user = shaaes("np-auth-pass");
    let (mut agents, oids) = v3_setup(&user, t0);
    answer(agents.get_mut(&addr(1)).unwrap().usm.as_mut().unwrap());
    let jobs = [v3_job(&user, &oids)];
    let out = simulate(
        &jobs,
        &mut agents,
        HostMemory::default(),
        Default::default(),
        t0,
    );
    let items = items_of(&out.events, 0);
    let dropped = Err(ItemFailure::Dropped(Dropped::NotAuthentic));
    assert!(items.values().all(|r| r == &dropped), "{items:?}");
    assert_eq!(out.stats.items_ok, 0);
    out.stats
}

#[test]
fn v3_unauthenticated_answers_to_authenticated_requests_are_dropped() {
    let st = v3_not_authentic(|u| u.forge = true);
    // The first request, its retry and the probe beside it were answered, forged: all
    // dropped (the forged answer to the probe does not make the host look alive).
    assert_eq!(st.not_authentic, 3);
    assert_eq!((st.probes, st.probes_answered), (1, 0));
}

#[test]
fn v3_answers_under_another_request_id_than_their_msg_id_are_dropped_and_said() {
    // Authentic, but not the answer to the request its msgID names.
    let st = v3_not_authentic(|u| u.other_request_id = true);
    assert_eq!(st.not_authentic, 3);
}

#[test]
fn v3_resynchronizes_after_a_reboot_or_a_new_engine_id() {
    let t0 = Instant::now();
    let user = shaaes("np-auth-pass");
    let (mut agents, oids) = v3_setup(&user, t0);
    let jobs = [v3_job(&user, &oids)];
    let out = simulate(
        &jobs,
        &mut agents,
        HostMemory::default(),
        Default::default(),
        t0,
    );
    all_ok(&out, 10);

    // The agent rebooted: boots 4, clock from 0. Our first request is out of its time
    // window; its authenticated report sets our clock and the request goes again.
    let t1 = t0 + Duration::from_secs(600);
    let agent = agents.get_mut(&addr(1)).unwrap();
    agent.usm.as_mut().unwrap().engine = Engine::new(user.clone(), ENGINE_A, 4, 0, t1);
    let out = simulate(
        &jobs,
        &mut agents,
        out.memory,
        Default::default(),
        t1 + Duration::from_secs(5),
    );
    all_ok(&out, 10);
    assert_eq!((out.stats.reports, out.stats.discoveries), (1, 0));
    let m = V3Message::decode(&out.sent.last().unwrap().2).unwrap();
    assert_eq!((m.boots, m.time), (4, 5));

    // The device was replaced: another engine ID. Its report sends us to discovery.
    let agent = agents.get_mut(&addr(1)).unwrap();
    agent.usm.as_mut().unwrap().engine = Engine::new(user.clone(), b"engine-b", 1, 0, t1);
    let out = simulate(
        &jobs,
        &mut agents,
        out.memory,
        Default::default(),
        t1 + Duration::from_secs(9),
    );
    all_ok(&out, 10);
    assert_eq!((out.stats.reports, out.stats.discoveries), (2, 1));
    assert_eq!(out.memory.engine(&addr(1)).unwrap().id(), b"engine-b");
}

#[test]
fn v3_retransmissions_take_a_new_msg_id_and_late_answers_still_count() {
    // An agent that drops a msgID it has seen (a duplicate, RFC 3412 §6.2) and whose
    // first answer is lost: the retry goes under a new msgID (as net-snmp's), with a
    // fresh salt, and is answered.
    let t0 = Instant::now();
    let user = shaaes("np-auth-pass");
    let (mut agents, oids) = v3_setup(&user, t0);
    let mut memory = HostMemory::default();
    memory.remember_engine(addr(1), Engine::new(user.clone(), ENGINE_A, 3, 0, t0));
    let a = agents.get_mut(&addr(1)).unwrap();
    a.dedupe_msg_ids = Some(Default::default());
    a.lose_replies = 1;
    let jobs = [v3_job(&user, &oids[..1])];
    let out = simulate(&jobs, &mut agents, memory.clone(), Default::default(), t0);
    all_ok(&out, 1);
    let sent: Vec<(bool, V3Message<'_>)> = out
        .sent
        .iter()
        .map(|(_, t, b)| (t.retry, V3Message::decode(b).unwrap()))
        // The engine discovery beside the retry (see the test of an agent that
        // answers discovery but not encrypted requests) is no attempt.
        .filter(|(_, m)| !m.engine_id.is_empty())
        .collect();
    assert_eq!(sent.len(), 2, "the request and its retry");
    let (first, retry) = (&sent[0].1, &sent.iter().find(|s| s.0).unwrap().1);
    assert_ne!(first.msg_id, retry.msg_id);
    assert_ne!(first.priv_params, retry.priv_params);
    assert_eq!(out.stats.timeouts, 1);

    // An answer to the first attempt that comes after the retry left still counts
    // (and the retry's own answer is then stale).
    let (mut agents, _) = v3_setup(&user, t0);
    agents.get_mut(&addr(1)).unwrap().latency = Duration::from_millis(1500);
    let out = simulate(&jobs, &mut agents, memory, Default::default(), t0);
    all_ok(&out, 1);
    assert_eq!(out.elapsed, Duration::from_millis(1500));
    assert_eq!((out.stats.retries, out.stats.stale), (1, 0));
}

#[test]
fn v3_an_unsigned_time_window_report_leads_to_a_rediscovery() {
    // The agent rebooted since its engine was remembered (boots 3 → 4) and says so in
    // an unauthenticated notInTimeWindow report: its clock cannot be taken from it, but
    // a rediscovery (whose report is unauthenticated anyway) can. Without one, every
    // later iteration failed the same way until the daemon restarted.
    let t0 = Instant::now();
    let user = shaaes("np-auth-pass");
    let (mut agents, oids) = v3_setup(&user, t0);
    let t1 = t0 + Duration::from_secs(600);
    let a = agents.get_mut(&addr(1)).unwrap();
    let au = a.usm.as_mut().unwrap();
    au.engine = Engine::new(user.clone(), ENGINE_A, 4, 0, t1);
    au.unsigned_time_reports = true;
    let mut memory = HostMemory::default();
    memory.remember_engine(addr(1), Engine::new(user.clone(), ENGINE_A, 3, 0, t0));
    let jobs = [v3_job(&user, &oids)];
    let out = simulate(&jobs, &mut agents, memory, Default::default(), t1);
    all_ok(&out, 10);
    assert_eq!(out.stats.discoveries, 1);
    let out = simulate(&jobs, &mut agents, out.memory, Default::default(), t1);
    all_ok(&out, 10);
    assert_eq!((out.stats.discoveries, out.stats.reports), (0, 0));
}

#[test]
fn v3_a_late_report_to_an_earlier_attempt_is_judged_by_that_attempts_clock() {
    // The agent rebooted since its engine was remembered, and answers slowly: three
    // requests go with the stale clock. The first one's report sets the clock; the
    // others' reports come after their retries went under new msgIDs with the right
    // clock. Each late report speaks of the attempt it answers (sent before the
    // clock was set): no resync to spend, and no reason to fail the host. Taken as
    // reports to the retries, they spent both resyncs and the second failed the
    // host's items with notInTimeWindow although the agent answers every request.
    let t0 = Instant::now();
    let user = users().0.clone();
    let (mut agents, oids) = v3_setup(&user, t0);
    let mut memory = HostMemory::default();
    memory.remember_engine(addr(1), Engine::new(user.clone(), ENGINE_A, 2, 0, t0));
    let mut j = v3_job(&user, &oids[..9]);
    j.max_oids = 3;
    j.max_inflight = 3;
    j.retries = 3;
    let jobs = [j];
    let mut it = Iteration::new(&jobs, &memory, IterationOptions::default());
    let agent = agents.get_mut(&addr(1)).unwrap();
    let mut buf = Vec::new();
    let mut held = Vec::new();
    while let Some(_t) = it.poll_transmit(t0, &mut buf) {
        held.push(agent.answer(&buf, t0).unwrap());
    }
    assert_eq!(held.len(), 3);
    // Sends what the iteration has at `now`; `answered`: the agent's answers come at
    // once (until nothing is left to send), else they are lost.
    let mut exchange = |it: &mut Iteration<'_>, now: Instant, answered: bool| {
        while let Some(_t) = it.poll_transmit(now, &mut buf) {
            let a = agent.answer(&buf, now);
            if let (true, Some(a)) = (answered, a) {
                it.handle_datagram(addr(1), &a, now);
            }
        }
    };
    let ms = |n: u64| t0 + Duration::from_millis(n);
    // The first request's report: the clock is set, the request goes again.
    assert_eq!(
        it.handle_datagram(addr(1), &held[0], ms(100)),
        Received::Report
    );
    exchange(&mut it, ms(100), true);
    // The other two time out: retried under new msgIDs with the clock set (lost).
    it.handle_timeout(ms(1_000));
    exchange(&mut it, ms(1_000), false);
    // The second request's first report, late.
    assert_eq!(
        it.handle_datagram(addr(1), &held[1], ms(1_100)),
        Received::Report
    );
    exchange(&mut it, ms(1_100), true);
    // The third's retry times out again: retried once more (lost); then its first
    // attempt's report comes, later still.
    it.handle_timeout(ms(2_000));
    exchange(&mut it, ms(2_000), false);
    it.handle_datagram(addr(1), &held[2], ms(2_100));
    exchange(&mut it, ms(2_100), true);
    let mut events = Vec::new();
    while let Some(e) = it.poll_event() {
        events.push(e);
    }
    let items = items_of(&events, 0);
    assert_eq!(items.len(), 9, "{events:?}");
    assert!(items.values().all(Result::is_ok), "{items:?}");
    assert!(it.is_done());
}

#[test]
fn v3_job_without_a_user_fails_its_items_without_sending() {
    let mut j = job(1, &["1.3.6.1.2.1.1.5.0"]);
    j.version = Version::V3;
    let mut it = Iteration::new(
        std::slice::from_ref(&j),
        &HostMemory::default(),
        Default::default(),
    );
    assert!(it.poll_transmit(Instant::now(), &mut Vec::new()).is_none());
    assert!(it.is_done());
    assert!(matches!(
        it.poll_event(),
        Some(Event::Item {
            result: Err(ItemFailure::Send(_)),
            ..
        })
    ));
}

#[test]
fn v3_clock_follows_the_engines_latest_authentic_time() {
    let t0 = Instant::now();
    let mut e = Engine::new(shaaes("np-auth-pass"), ENGINE_A, 3, 100, t0);
    // 60 s later by our clock; the agent's runs slow and says 150: it wins (RFC 3414
    // §3.2 7b compares with the latest time received, not with our estimate of 160).
    let t1 = t0 + Duration::from_secs(60);
    e.update_clock(3, 150, t1);
    assert_eq!(e.clock(t1), (3, 150));
    // An older time or an older boots is ignored; a reboot is taken.
    e.update_clock(3, 120, t1);
    e.update_clock(2, 999, t1);
    assert_eq!(e.clock(t1 + Duration::from_secs(10)), (3, 160));
    e.update_clock(4, 5, t1);
    assert_eq!(e.clock(t1), (4, 5));
}

#[test]
fn v3_jobs_sharing_an_agent_never_share_a_salt() {
    // Two jobs polling one agent as one user (two contexts, say), with the engine
    // remembered: their requests share the address's salt counter.
    let t0 = Instant::now();
    let user = shaaes("np-auth-pass");
    let (mut agents, oids) = v3_setup(&user, t0);
    let jobs = [v3_job(&user, &oids), v3_job(&user, &oids)];
    let first = simulate(
        &jobs[..1],
        &mut agents,
        HostMemory::default(),
        Default::default(),
        t0,
    );
    let out = simulate(&jobs, &mut agents, first.memory, Default::default(), t0);
    all_ok(&out, 10);
    let params: Vec<Vec<u8>> = out
        .sent
        .iter()
        .map(|(_, _, b)| V3Message::decode(b).unwrap().priv_params.to_vec())
        .collect();
    let unique: std::collections::HashSet<_> = params.iter().collect();
    assert_eq!((params.len(), unique.len()), (6, 6), "{params:?}");
}

#[test]
fn v3_replayed_or_stale_clocks_are_not_timely() {
    let e = Engine::new(shaaes("np-auth-pass"), ENGINE_A, 3, 1000, Instant::now());
    assert!(e.is_timely(3, 1000) && e.is_timely(3, 850) && e.is_timely(4, 0));
    assert!(
        !e.is_timely(3, 849),
        "more than 150 s before the latest time"
    );
    assert!(!e.is_timely(2, 5000), "an older boot");
    assert!(!e.is_timely(i32::MAX as u32, 0), "boots at their maximum");
}
