//! Discovery: the rows of SNMP tables, found on each host by walking one column, as
//! Zabbix's SNMP low-level discovery rules do. `[[templates.discovery]]` names a rule
//! (column, filter, interval); items with `discovery = NAME` and `{#SNMPINDEX}` stand for
//! one item per row found.
//!
//! The rows are an input of the config loader ([`Found`]): a re-plan parses the
//! running config text again with other rows, so a discovered item is planned, keyed
//! and given its itemid exactly as if its rows had been listed with `indices`.
//!
//! Invariants:
//! * Only a walk that succeeds changes a host's rows; a host that does not answer
//!   keeps the rows it had (its items then fail as it does), so an outage never removes
//!   items.
//! * A row that is gone from a successful walk stops being polled at once (Zabbix's
//!   "disable lost resources: immediately"); its itemid is derived from host and key,
//!   so a row that comes back writes to the same history.
//! * Rows stand for the rule and the address they were found with: a reload drops the
//!   rows of what it changed (a rule, a host's address, a host or rule gone) before it
//!   plans ([`prune`]), and the file records both, so a restart does not take rows of a
//!   rule changed or a host moved meanwhile ([`Saved::for_rules`]).
//! * The daemon re-plans at most once per [`REPLAN_EVERY`] however many hosts change,
//!   and the rows of each plan are saved to `daemon.discovery_file`, so a restart polls
//!   what was found without waiting for the walks; rows the loader refused are never
//!   saved. A refusal keeps out the rows of the host's rules refused, not the other
//!   hosts' rows found meanwhile ([`plan_rows`]).
//! * A round the daemon cuts short (a stop, a reload) makes no plan past the one in
//!   progress: the rows of the plans it took are planned and saved as any round's, the
//!   others stay pending in `found` ([`plan_rows`]'s `cut`).
//! * The discovery task never waits for the daemon to take its ask for a re-plan (one
//!   not taken yet stands for the next): its walks and the daemon's stop are read
//!   while a round plans.
//! * A walk waits at most [`walker::STOP_CHECK`] before it sees the daemon stopping.
//! * Walks run on blocking threads, at most [`CONCURRENT_WALKS`] at once, never on the
//!   engines' threads: discovery cannot delay polling.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::config::{DiscoveryRule, DiscoveryTarget, Found, Indices};
use crate::walker;

/// Walks in flight at once.
pub const CONCURRENT_WALKS: usize = 16;

/// The shortest time between two re-plans caused by discovery.
pub const REPLAN_EVERY: Duration = Duration::from_secs(10);

/// After a failed walk, the next try: this, or the rule's interval if shorter.
pub const RETRY_AFTER: Duration = Duration::from_secs(300);

/// Walks `rule`'s column on `t`'s agent, then each filter condition's column: the rows
/// whose values the rule's `matches` and every condition take. `stop` ends a walk
/// between two answers.
pub fn walk_rows(
    t: &DiscoveryTarget,
    rule: &DiscoveryRule,
    stop: &AtomicBool,
) -> anyhow::Result<Indices> {
    let target = walker::Target::of_host(t.ip, &t.snmp, t.source);
    let mut rows = walker::table_rows(&target, &rule.column, |v| rule.takes(v), stop)?;
    for c in &rule.filter {
        if rows.is_empty() {
            break;
        }
        let values: HashMap<walker::Index, Option<String>> =
            walker::column_values(&target, &c.column, stop)?
                .into_iter()
                .collect();
        rows.retain(|r| c.holds(values.get(r).and_then(|v| v.as_deref())));
    }
    // One item stands for at most MAX_INDICES rows: the first ones.
    let most = crate::config::MAX_INDICES as usize;
    if rows.len() > most {
        tracing::warn!(host = %t.host, rule = %rule.name, rows = rows.len(), "discovery: more rows than one item may stand for: the first {most} are polled");
        rows.truncate(most);
    }
    Ok(Indices::from_rows(rows))
}

/// One walk's host, rule and rows (or why there are none).
pub type Walked = (Arc<str>, Arc<str>, anyhow::Result<Indices>);

/// Walks every rule of every target now, [`CONCURRENT_WALKS`] at once (`poll-once`):
/// `(host, rule, rows or error)` in the targets' order.
pub fn walk_all(targets: &[DiscoveryTarget]) -> Vec<Walked> {
    let jobs: Vec<(&DiscoveryTarget, &Arc<DiscoveryRule>)> = targets
        .iter()
        .flat_map(|t| t.rules.iter().map(move |r| (t, r)))
        .collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Mutex<Vec<Option<anyhow::Result<Indices>>>> =
        Mutex::new((0..jobs.len()).map(|_| None).collect());
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for _ in 0..CONCURRENT_WALKS.min(jobs.len()) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((t, r)) = jobs.get(i) else { break };
                let rows = walk_rows(t, r, &stop);
                results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(rows);
            });
        }
    });
    let results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    jobs.iter()
        .zip(results)
        .map(|((t, r), res)| {
            let res = res.unwrap_or_else(|| Err(anyhow::anyhow!("not walked")));
            (t.host.clone(), r.name.clone(), res)
        })
        .collect()
}

/// The discovery file: `{"rules": {RULE: FINGERPRINT}, "hosts": {HOST: {RULE:
/// "1-48,101"}}, "at": {HOST: "IP:PORT"}}`. A rule's fingerprint says what its rows
/// were found with (column and filters), `at` where: rows of a rule that has changed
/// since, or of a host at another address now, are not taken.
#[derive(serde::Serialize, serde::Deserialize)]
struct FileForm<K: Ord, V> {
    #[serde(default)]
    rules: BTreeMap<K, V>,
    hosts: BTreeMap<K, BTreeMap<K, V>>,
    #[serde(default)]
    at: BTreeMap<K, V>,
}

/// What a discovery file holds.
#[derive(Debug, Default)]
pub struct Saved {
    found: Found,
    /// Rule name → the fingerprint its rows were found with.
    rules: BTreeMap<String, String>,
    /// Host → the address its rows were found at.
    at: BTreeMap<String, String>,
    /// Entries that could not be read (`host/rule: why`), left out.
    pub unreadable: Vec<String>,
}

impl Saved {
    /// The rows saved for the rules of `targets` as they are now (a rule whose
    /// fingerprint changed, or that the file does not describe, has none).
    pub fn for_rules(self, targets: &[DiscoveryTarget]) -> Found {
        let Saved {
            mut found,
            rules,
            at,
            ..
        } = self;
        keep_unchanged(&mut found, &identities(targets), |host, rule, (a, f)| {
            at.get(host) == Some(a) && rules.get(rule) == Some(f)
        });
        found
    }
}

/// Reads the rows saved in `path`; none when it does not exist.
pub fn read_file(path: &Path) -> anyhow::Result<Saved> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Saved::default()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let f: FileForm<String, String> =
        serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))?;
    let (found, unreadable) = Found::from_text(f.hosts);
    Ok(Saved {
        found,
        rules: f.rules,
        at: f.at,
        unreadable,
    })
}

/// Where a target's agent is, as the discovery file records it.
fn address(t: &DiscoveryTarget) -> String {
    std::net::SocketAddr::new(t.ip, t.snmp.port).to_string()
}

/// Each host's rules as (address, fingerprint): what its rows were found with.
fn identities(targets: &[DiscoveryTarget]) -> HashMap<(&str, &str), (String, String)> {
    targets
        .iter()
        .flat_map(|t| {
            let at = address(t);
            t.rules
                .iter()
                .map(move |r| ((&*t.host, &*r.name), (at.clone(), r.fingerprint())))
        })
        .collect()
}

/// Keeps of `found` (rows found for the `old` targets) only those that still stand
/// for the `new` ones (a reload's): a host's rows of a rule it still uses, unchanged,
/// at the same address. Whether any were dropped.
pub fn prune(found: &mut Found, old: &[DiscoveryTarget], new: &[DiscoveryTarget]) -> bool {
    let old = identities(old);
    keep_unchanged(found, &identities(new), |host, rule, now| {
        old.get(&(host, rule)) == Some(now)
    })
}

/// Keeps of `found` the rows of each host and rule that `found_with` says were found
/// with what `now` has for them (address, fingerprint); whether any were dropped.
fn keep_unchanged(
    found: &mut Found,
    now: &HashMap<(&str, &str), (String, String)>,
    found_with: impl Fn(&str, &str, &(String, String)) -> bool,
) -> bool {
    let before: usize = found.0.values().map(HashMap::len).sum();
    found.0.retain(|host, rules| {
        rules.retain(|rule, _| {
            now.get(&(&**host, &**rule))
                .is_some_and(|n| found_with(host, rule, n))
        });
        !rules.is_empty()
    });
    before != found.0.values().map(HashMap::len).sum::<usize>()
}

/// Saves `found` to `path` with what `targets` (the plan's) say each rule is and where
/// each host is ([`crate::fsutil::replace`]: a crash leaves the old file or the new).
pub fn write_file(path: &Path, found: &Found, targets: &[DiscoveryTarget]) -> anyhow::Result<()> {
    let rules = targets
        .iter()
        .flat_map(|t| t.rules.iter())
        .map(|r| (&*r.name, r.fingerprint()))
        .collect();
    let at = targets.iter().map(|t| (&*t.host, address(t))).collect();
    let text = serde_json::to_string_pretty(&FileForm {
        rules,
        hosts: found.to_text(),
        at,
    })?;
    crate::fsutil::replace(path, |w| std::io::Write::write_all(w, text.as_bytes()))
}

/// A host's rule: `(host, rule)`.
pub type RuleOf = (Arc<str>, Arc<str>);

/// What [`plan_rows`] did with the rows found.
#[derive(Debug, Default)]
pub struct Settled {
    /// Plans the loader took (each was swapped in; the last one's rows are `applied`).
    pub planned: usize,
    /// The host's rules whose rows the loader refused, with why: [`put_back`] makes
    /// their rows in `found` the running plan's again, so that their next walk finds
    /// the change again (and tries again) rather than a plan or a reload taking rows
    /// that cannot be planned.
    pub refused: Vec<Refused>,
    /// The host's rules left untried once the round's plans were spent, or once it was
    /// cut: still pending in `found`, for the next round.
    pub untried: usize,
    /// Why a plan of the rows the running plan has was refused (not expected: they
    /// were planned with the same text).
    pub unexplained: Option<String>,
}

/// A host's rule whose rows the loader refused.
#[derive(Debug)]
pub struct Refused {
    pub host: Arc<str>,
    pub rule: Arc<str>,
    /// The rows refused (none: that the rule has none known was refused).
    pub rows: Option<crate::config::Rows>,
    /// The loader's errors.
    pub why: String,
}

/// Plans more than this many times in one round (past the first) only to find one
/// refused host's rule among many pending: each plan parses the whole file again
/// (about 0.35 s at a million items), and while a round plans, on a thread of its own,
/// the daemon's next round waits for it (a reload or a stop cuts it short: `cut`).
pub const SPLIT_PLANS: u32 = 4;

/// Plans the rows `found` has that the running plan's rows `applied` have not, with
/// `try_plan` (which swaps in a plan it makes): all of them at once if the loader takes
/// them; if not, the pending rows are split in halves, each planned on its own, until
/// the host's rules the loader refuses are one each. So one host whose rows cannot be
/// planned (a limit, an itemid taken) keeps its rows out, not every other host's rows
/// found meanwhile, which would otherwise stop being polled until each host's next walk.
///
/// A round makes at most [`SPLIT_PLANS`] plans more than the halving needs to reach
/// one host's rule (so that each round settles one at least); the rest stay pending
/// ([`Settled::untried`]). `applied` follows each plan taken; `found` is only read:
/// the caller gives the rows it keeps the running plan's rows of each refused host's
/// rule ([`put_back`]), once (the daemon plans a copy off its thread and puts back
/// into its live rows; putting back into the copy as well was work thrown away).
///
/// Once `cut` is set (by another thread: the daemon stopping or reloading), no other
/// plan is made: the plan in progress ends as any does (taken or refused), and the
/// rows not planned yet are left untried. So a round cut short leaves `applied` the
/// rows of the last plan taken (the one running), never a plan half made.
pub fn plan_rows(
    applied: &mut Found,
    found: &Found,
    cut: &AtomicBool,
    mut try_plan: impl FnMut(&Found) -> Result<(), crate::config::ConfigErrors>,
) -> Settled {
    let mut settled = Settled::default();
    // Pending: the host's rules whose rows differ (in a fixed order: the halves, and
    // so which rows a limit leaves out, do not depend on a map's order).
    let mut pending: Vec<RuleOf> = found
        .0
        .iter()
        .flat_map(|(h, rules)| rules.keys().map(move |r| (h.clone(), r.clone())))
        .chain(
            applied
                .0
                .iter()
                .flat_map(|(h, rules)| rules.keys().map(move |r| (h.clone(), r.clone()))),
        )
        .filter(|(h, r)| found.rows(h, r) != applied.rows(h, r))
        .collect();
    pending.sort_unstable();
    pending.dedup();
    if cut.load(Ordering::Relaxed) {
        settled.untried = pending.len();
        return settled;
    }
    // Also when nothing differs (a plan of the rows it runs with is not expected to be
    // refused, but then it is said, not lost).
    let first = match try_plan(found) {
        Ok(()) => {
            *applied = found.clone();
            settled.planned = 1;
            return settled;
        }
        Err(e) => e,
    };
    let mut plans = (usize::BITS - pending.len().leading_zeros()) + SPLIT_PLANS;
    // Depth first, the first half before the second: (part, why it was refused, if
    // already planned).
    let mut parts = vec![(&pending[..], Some(first))];
    while let Some((part, refused)) = parts.pop() {
        let why = match refused {
            Some(e) => e,
            None if plans == 0 || cut.load(Ordering::Relaxed) => {
                settled.untried += part.len();
                continue;
            }
            None => {
                plans -= 1;
                let mut trial = applied.clone();
                for key in part {
                    set_as(&mut trial, found, key);
                }
                match try_plan(&trial) {
                    Ok(()) => {
                        *applied = trial;
                        settled.planned += 1;
                        continue;
                    }
                    Err(e) => e,
                }
            }
        };
        match part {
            [] => settled.unexplained = Some(why.to_string()),
            [(host, rule)] => settled.refused.push(Refused {
                host: host.clone(),
                rule: rule.clone(),
                rows: found.rows(host, rule).cloned(),
                why: why.to_string(),
            }),
            _ => {
                let (a, b) = part.split_at(part.len() / 2);
                parts.push((b, None));
                parts.push((a, None));
            }
        }
    }
    settled
}

/// Gives `found` back the running plan's rows (`applied`) of each host's rule
/// `refused`, so that a reload does not take them either; but not where `found` has
/// other rows than those refused: discovery found them while the round planned (on a
/// copy, off the daemon's thread), and they are tried in a round of their own.
pub fn put_back(found: &mut Found, applied: &Found, refused: &[Refused]) {
    for r in refused {
        if found.rows(&r.host, &r.rule) == r.rows.as_ref() {
            set_as(found, applied, &(r.host.clone(), r.rule.clone()));
        }
    }
}

/// [`plan_rows`] round after round until every pending host's rule is settled, for a
/// plan made once that holds no polling thread (a start, `poll-once`): the round's
/// bound on plans is for the daemon, whose next round waits for one, not for these.
/// Returns the host's rules refused (each round settles one at least).
pub fn plan_all_rows(
    applied: &mut Found,
    found: &mut Found,
    mut try_plan: impl FnMut(&Found) -> Result<(), crate::config::ConfigErrors>,
) -> Vec<Refused> {
    let mut refused = Vec::new();
    // Never cut: nothing stops or reloads meanwhile.
    let uncut = AtomicBool::new(false);
    loop {
        let settled = plan_rows(applied, found, &uncut, &mut try_plan);
        put_back(found, applied, &settled.refused);
        refused.extend(settled.refused);
        if settled.untried == 0 {
            return refused;
        }
    }
}

/// Gives `to` the rows `from` has for `key`'s host and rule (none if it has none).
fn set_as(to: &mut Found, from: &Found, (host, rule): &RuleOf) {
    match from.rows(host, rule) {
        Some(rows) => {
            to.0.entry(host.clone())
                .or_default()
                .insert(rule.clone(), rows.clone());
        }
        None => {
            if let Some(rules) = to.0.get_mut(host) {
                rules.remove(rule);
                if rules.is_empty() {
                    to.0.remove(host);
                }
            }
        }
    }
}

/// Discovery's counters, for `/metrics`.
#[derive(Default)]
pub struct DiscoveryMetrics {
    pub walks_ok: AtomicU64,
    pub walks_failed: AtomicU64,
    pub changes: AtomicU64,
    pub replans_ok: AtomicU64,
    pub replans_refused: AtomicU64,
    /// Host and rule pairs walked.
    pub jobs: AtomicU64,
    /// Of those, the ones whose last walk failed.
    pub failing: AtomicU64,
}

impl DiscoveryMetrics {
    pub fn render(&self, out: &mut poller::metrics::Exposition) {
        let walks = "netpoller_discovery_walks_total";
        let help = "Discovery walks of a host's table column, by result.";
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        out.counter(walks, help, &[("result", "ok")], get(&self.walks_ok));
        out.counter(
            walks,
            help,
            &[("result", "failed")],
            get(&self.walks_failed),
        );
        out.counter(
            "netpoller_discovery_changes_total",
            "Walks that found other rows than the host had.",
            &[],
            get(&self.changes),
        );
        let replans = "netpoller_discovery_replans_total";
        let help = "Plans rebuilt because discovery found other rows, by result (refused: rows of some host past a limit of the loader, left out and logged; the other hosts' rows are planned).";
        out.counter(replans, help, &[("result", "ok")], get(&self.replans_ok));
        out.counter(
            replans,
            help,
            &[("result", "refused")],
            get(&self.replans_refused),
        );
        out.gauge(
            "netpoller_discovery_rules",
            "Discovery rules walked, one per host that uses each.",
            &[],
            get(&self.jobs) as f64,
        );
        out.gauge(
            "netpoller_discovery_failing",
            "Discovery rules of hosts whose last walk failed (they keep the rows they had).",
            &[],
            get(&self.failing) as f64,
        );
    }
}

/// One host's rule, scheduled.
struct Job {
    target: Arc<DiscoveryTarget>,
    rule: Arc<DiscoveryRule>,
    due: Instant,
    running: bool,
    /// The last walk failed (logged once until one succeeds).
    failing: bool,
    /// Which job this is: a reload that changes a host's rule makes a new one, and a
    /// walk of the old one that ends after it is not taken.
    id: u64,
}

/// Where in its interval a job known from the file is first walked again: spread by a
/// hash of host and rule, so that a restart does not walk every host at once.
fn phase(host: &str, rule: &str, interval: Duration) -> Duration {
    let h = poller::plan::stable_hash(&[b"discovery-phase", host.as_bytes(), rule.as_bytes()]);
    let ms = interval.as_millis().max(1) as u64;
    Duration::from_millis(h % ms)
}

/// The daemon's discovery task: walks each target's rules when due, keeps `found`, and
/// asks for a re-plan on `replan` (at most once per [`REPLAN_EVERY`]) when rows
/// changed, never waiting for the daemon to take the ask (one waiting in the channel
/// stands for the next). New targets (after a reload) come on `targets`.
pub async fn run(
    mut targets: watch::Receiver<Vec<DiscoveryTarget>>,
    found: Arc<Mutex<Found>>,
    replan: mpsc::Sender<()>,
    metrics: Arc<DiscoveryMetrics>,
    mut shutdown: watch::Receiver<bool>,
) {
    let stop = Arc::new(AtomicBool::new(false));
    let mut jobs: HashMap<(Arc<str>, Arc<str>), Job> = HashMap::new();
    let mut walks = tokio::task::JoinSet::new();
    // Since when found rows wait for a re-plan.
    let mut dirty: Option<Instant> = None;
    let mut last_replan: Option<Instant> = None;
    // The targets are (re)read at the start and after each reload.
    let mut reread = true;
    let mut started = false;
    let mut ids = 0u64;
    loop {
        let now = Instant::now();
        if std::mem::take(&mut reread) {
            let list = targets.borrow_and_update().clone();
            // (No await while it is held: the daemon's tasks share one thread.)
            let known = found.lock().unwrap_or_else(|e| e.into_inner());
            let mut next = HashMap::new();
            for t in list {
                let t = Arc::new(t);
                for r in &t.rules {
                    let key = (t.host.clone(), r.name.clone());
                    let job = match jobs.remove(&key) {
                        // Same rule of the same agent: keep its schedule (a shorter
                        // interval brings the next walk nearer).
                        Some(j)
                            if j.rule.fingerprint() == r.fingerprint()
                                && j.target.ip == t.ip
                                && j.target.snmp == t.snmp =>
                        {
                            Job {
                                target: t.clone(),
                                rule: r.clone(),
                                due: j.due.min(now + r.interval),
                                ..j
                            }
                        }
                        // New, walked differently, or another agent (address,
                        // credentials): at once, but for the rows
                        // saved before a start, which are walked again over the
                        // interval.
                        _ => Job {
                            target: t.clone(),
                            rule: r.clone(),
                            due: match known.rows(&t.host, &r.name) {
                                Some(_) if !started => now + phase(&t.host, &r.name, r.interval),
                                _ => now,
                            },
                            running: false,
                            failing: false,
                            id: {
                                ids += 1;
                                ids
                            },
                        },
                    };
                    next.insert(key, job);
                }
            }
            jobs = next;
            started = true;
            let failing = jobs.values().filter(|j| j.failing).count();
            metrics.jobs.store(jobs.len() as u64, Ordering::Relaxed);
            metrics.failing.store(failing as u64, Ordering::Relaxed);
            // (The rows of what changed were pruned from `found` just before these
            // targets were sent, on this thread with no await between: see
            // `reload_off_thread` in cmd::run.)
        }
        // Start what is due.
        for (key, j) in jobs.iter_mut() {
            if walks.len() >= CONCURRENT_WALKS {
                break;
            }
            if j.running || j.due > now {
                continue;
            }
            j.running = true;
            let (t, r, stop, key) = (j.target.clone(), j.rule.clone(), stop.clone(), key.clone());
            let id = j.id;
            walks.spawn_blocking(move || {
                // A walk that panicked is a failed walk, not a job that never ends.
                let walked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    walk_rows(&t, &r, &stop)
                }));
                let rows = walked.unwrap_or_else(|_| Err(anyhow::anyhow!("the walk panicked")));
                (key, id, rows)
            });
        }
        // Re-plan when rows changed: once no walk is in flight, or REPLAN_EVERY after
        // the first change while walks go on (hosts that do not answer hold a walk up
        // to their timeouts); never twice within REPLAN_EVERY.
        let replan_at = dirty.map(|since| {
            let settled = match walks.is_empty() {
                true => now,
                false => since + REPLAN_EVERY,
            };
            settled.max(last_replan.map_or(now, |t| t + REPLAN_EVERY))
        });
        if replan_at.is_some_and(|at| at <= now) {
            // Never waited for: an ask the daemon has not taken yet (it takes none
            // while a round plans, nor once it stops) stands for this one too, its
            // round reading `found` when it starts. Waiting here, the task read
            // neither its walks nor the stop, and the daemon's stop awaits it.
            if let Err(mpsc::error::TrySendError::Closed(())) = replan.try_send(()) {
                break;
            }
            dirty = None;
            last_replan = Some(Instant::now());
        }
        // With every walk slot taken, the next start is when one ends.
        let next_due = jobs
            .values()
            .filter(|j| !j.running && walks.len() < CONCURRENT_WALKS)
            .map(|j| j.due)
            .min()
            .unwrap_or(now + Duration::from_secs(3600));
        let wake = replan_at
            .map_or(next_due, |at| at.min(next_due))
            .max(now + Duration::from_millis(10));
        // Biased: new targets before a walk's end, so that a walk of what a reload
        // changed (another address, another rule) meets its replaced job and is not
        // taken, rather than putting back rows the reload has just dropped. (It relies
        // on the reload dropping them and sending the targets with no await between.)
        tokio::select! {
            biased;
            _ = shutdown.changed() => break,
            changed = targets.changed() => match changed {
                Ok(()) => reread = true,
                Err(_) => break, // the daemon is stopping
            },
            _ = tokio::time::sleep_until(wake) => {}
            Some(done) = walks.join_next(), if !walks.is_empty() => {
                let Ok(((host, rule), id, result)) = done else { continue };
                // Of a job a reload replaced or removed: not taken.
                let Some(j) = jobs.get_mut(&(host.clone(), rule.clone())).filter(|j| j.id == id) else {
                    continue;
                };
                j.running = false;
                match result {
                    Ok(rows) => {
                        metrics.walks_ok.fetch_add(1, Ordering::Relaxed);
                        j.due = Instant::now() + j.rule.interval;
                        if std::mem::take(&mut j.failing) {
                            metrics.failing.fetch_sub(1, Ordering::Relaxed);
                            tracing::info!(host = %host, rule = %rule, "discovery: walks again");
                        }
                        let changed = found
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .set(&host, &rule, rows.clone());
                        if changed {
                            metrics.changes.fetch_add(1, Ordering::Relaxed);
                            tracing::info!(
                                host = %host,
                                rule = %rule,
                                rows = rows.len(),
                                indices = %rows,
                                "discovery: rows changed"
                            );
                            dirty.get_or_insert(Instant::now());
                        }
                    }
                    Err(e) => {
                        metrics.walks_failed.fetch_add(1, Ordering::Relaxed);
                        j.due = Instant::now() + RETRY_AFTER.min(j.rule.interval);
                        if !std::mem::replace(&mut j.failing, true) {
                            metrics.failing.fetch_add(1, Ordering::Relaxed);
                            tracing::warn!(host = %host, rule = %rule, error = %e, "discovery: walk failed; the host keeps the rows it had");
                        }
                    }
                }
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both documents give the retry of a failed walk as the code takes it: the
    /// shorter of RETRY_AFTER and the rule's interval (docs/production.md said 5
    /// minutes alone, while a rule walked every minute is tried again after one).
    #[test]
    fn the_docs_give_the_retry_of_a_failed_walk() {
        let minutes = RETRY_AFTER.as_secs() / 60;
        let readme = crate::test_util::readme();
        assert!(readme.contains(&format!("`min({minutes}m, interval)`")));
        let production = crate::test_util::doc("docs/production.md").replace('\n', " ");
        let said = format!("tried again after {minutes} minutes (the rule's interval, if shorter)");
        assert!(
            production.contains(&said),
            "docs/production.md does not say {said:?}"
        );
    }

    fn rule(name: &str, matches: Option<&str>) -> Arc<DiscoveryRule> {
        Arc::new(DiscoveryRule {
            name: name.into(),
            column: "1.3.6.1.2.1.2.2.1.2".parse().unwrap(),
            matches: matches.map(|m| regex::Regex::new(m).unwrap()),
            not_matches: None,
            interval: Duration::from_secs(3600),
            filter: Vec::new(),
        })
    }

    fn target(host: &str, ip: &str, port: u16, rules: Vec<Arc<DiscoveryRule>>) -> DiscoveryTarget {
        DiscoveryTarget {
            host: host.into(),
            ip: ip.parse().unwrap(),
            snmp: Arc::new(poller::plan::SnmpParams {
                version: snmp::Version::V2c,
                community: "public".into(),
                usm: None,
                port,
                timeout: Duration::from_secs(1),
                retries: 1,
                max_oids_per_request: 10,
                max_inflight_per_host: 1,
            }),
            rules,
            source: Default::default(),
        }
    }

    fn found(entries: &[(&str, &str)]) -> Found {
        let mut f = Found::default();
        for (h, r) in entries {
            f.set(
                &Arc::from(*h),
                &Arc::from(*r),
                Indices::parse("1-2").unwrap(),
            );
        }
        f
    }

    fn refusal(why: &str) -> crate::config::ConfigErrors {
        crate::config::ConfigErrors {
            source: "netpoller.toml".into(),
            errors: vec![crate::config::ConfigError {
                path: "hosts[2]".into(),
                line: None,
                file: None,
                message: why.into(),
            }],
        }
    }

    fn rows_in(f: &Found) -> u64 {
        f.0.values()
            .flat_map(HashMap::values)
            .map(|r| r.len())
            .sum()
    }

    /// One host's rows the loader refuses (an itemid another item has, say) are left
    /// out, named; the rows found meanwhile on the other hosts are planned, not put
    /// back to wait for each host's next walk.
    #[test]
    fn a_refused_host_keeps_out_its_own_rows_only() {
        let mut applied = found(&[("a", "r")]);
        let mut f = found(&[("a", "r"), ("b", "r"), ("bad", "r"), ("c", "r"), ("c", "s")]);
        f.set(&"a".into(), &"r".into(), Indices::parse("1-3").unwrap());
        let mut planned = Vec::new();
        let uncut = AtomicBool::new(false);
        let settled = plan_rows(&mut applied, &f, &uncut, |rows| {
            match rows.rows("bad", "r") {
                Some(_) => Err(refusal("itemid 7 is also the item d[1] of bad's")),
                None => {
                    planned.push(rows.clone());
                    Ok(())
                }
            }
        });
        put_back(&mut f, &applied, &settled.refused);
        let mut want = found(&[("a", "r"), ("b", "r"), ("c", "r"), ("c", "s")]);
        want.set(&"a".into(), &"r".into(), Indices::parse("1-3").unwrap());
        assert_eq!(applied, want, "the other hosts' rows are planned");
        assert_eq!(planned.last(), Some(&want), "the plan swapped in last");
        assert_eq!(f, want, "the refused rows are the running plan's again");
        let [r] = &settled.refused[..] else {
            panic!("{settled:?}")
        };
        assert_eq!((&*r.host, &*r.rule), ("bad", "r"));
        assert_eq!(
            r.rows.as_deref().map(Indices::to_string),
            Some("1-2".into())
        );
        assert!(r.why.contains("itemid 7"), "{}", r.why);
        assert_eq!(settled.untried, 0);
        assert!(settled.unexplained.is_none());

        // All taken at once: one plan, nothing refused.
        let mut f2 = f.clone();
        f2.set(&"d".into(), &"r".into(), Indices::parse("4").unwrap());
        let mut plans = 0;
        let settled = plan_rows(&mut applied, &f2, &uncut, |_| {
            plans += 1;
            Ok(())
        });
        assert_eq!((plans, settled.planned, settled.refused.len()), (1, 1, 0));
        assert_eq!(applied, f2);
    }

    /// A round cut while it plans (the daemon stopping, or reloading) makes no plan
    /// past the one in progress: the rows it had not planned stay pending, the running
    /// plan's rows (`applied`) are those of the last plan taken. Before, the round
    /// planned on (here in halves, after the first plan was refused) and the stop or
    /// reload waited for it.
    #[test]
    fn a_cut_round_makes_no_plan_past_the_one_in_progress() {
        let mut applied = found(&[("a", "r")]);
        let f = found(&[("a", "r"), ("b", "r"), ("bad", "r"), ("c", "r")]);
        let before = (applied.clone(), f.clone());
        let cut = AtomicBool::new(false);
        let mut plans = 0;
        let settled = plan_rows(&mut applied, &f, &cut, |rows| {
            plans += 1;
            // Cut while the first plan (all rows at once) is made: it is refused.
            cut.store(true, Ordering::Relaxed);
            match rows.rows("bad", "r") {
                Some(_) => Err(refusal("past the limit")),
                None => Ok(()),
            }
        });
        assert_eq!(plans, 1, "{settled:?}");
        assert_eq!((settled.planned, settled.refused.len()), (0, 0));
        assert_eq!(settled.untried, 3, "b, bad and c: still pending");
        assert_eq!((applied, f), before, "nothing planned, nothing put back");

        // Cut before its first plan: none is made.
        let mut applied = found(&[("a", "r")]);
        let f = found(&[("a", "r"), ("b", "r")]);
        let settled = plan_rows(&mut applied, &f, &cut, |_| panic!("planned"));
        assert_eq!((settled.planned, settled.untried), (0, 1));
        assert_eq!(applied, found(&[("a", "r")]));
    }

    /// A limit many hosts' rows reach together: each round plans what fits and refuses
    /// some at least, within its plans; what it leaves untried stays pending (not
    /// dropped) for the next round, until every host's rule is settled.
    #[test]
    fn a_limit_takes_what_fits_over_rounds_of_few_plans() {
        let mut applied = Found::default();
        let names: Vec<String> = (0..40).map(|i| format!("h{i:02}")).collect();
        let mut f = Found::default();
        for n in &names {
            f.set(&Arc::from(&**n), &"r".into(), Indices::parse("1").unwrap());
        }
        let (mut refused, mut rounds) = (0, 0);
        loop {
            let mut plans = 0;
            let before = f.clone();
            let s = plan_rows(&mut applied, &f, &AtomicBool::new(false), |rows| {
                plans += 1;
                match rows_in(rows) {
                    n if n > 25 => Err(refusal("past the limit")),
                    _ => Ok(()),
                }
            });
            put_back(&mut f, &applied, &s.refused);
            rounds += 1;
            assert!(plans <= 1 + 6 + SPLIT_PLANS, "{plans} plans in one round");
            assert!(
                s.planned + s.refused.len() > 0,
                "round {rounds} settled nothing"
            );
            // Untried rows are still pending.
            assert_eq!(rows_in(&f), rows_in(&before) - s.refused.len() as u64);
            refused += s.refused.len();
            if s.untried == 0 {
                break;
            }
            assert!(rounds < 40, "{rounds} rounds");
        }
        assert_eq!(rows_in(&applied), 25);
        assert_eq!(refused, 15);
        assert_eq!(f, applied);
    }

    #[test]
    fn a_reload_keeps_only_rows_of_what_it_left_as_it_was() {
        let (r, s) = (rule("r", None), rule("s", None));
        let old = [
            target("same", "127.0.0.1", 161, vec![r.clone(), s.clone()]),
            target("moved", "127.0.0.2", 161, vec![r.clone()]),
            target("port", "127.0.0.3", 161, vec![r.clone()]),
            target("gone", "127.0.0.4", 161, vec![r.clone()]),
        ];
        let changed = rule("s", Some("^Gi"));
        let new = [
            target("same", "127.0.0.1", 161, vec![r.clone(), changed]),
            target("moved", "127.0.0.9", 161, vec![r.clone()]),
            target("port", "127.0.0.3", 1161, vec![r.clone()]),
        ];
        let mut f = found(&[
            ("same", "r"),
            ("same", "s"),
            ("moved", "r"),
            ("port", "r"),
            ("gone", "r"),
        ]);
        assert!(prune(&mut f, &old, &new));
        assert_eq!(f, found(&[("same", "r")]));
        assert!(!prune(&mut f, &new, &new), "nothing changed");
    }

    /// The first snmpd of `NETPOLLER_SNMPD_ADDRS` (the shared test services).
    fn snmpd() -> String {
        let Some(agent) = std::env::var("NETPOLLER_SNMPD_ADDRS")
            .ok()
            .and_then(|a| a.split(',').next().map(str::to_owned))
        else {
            panic!("NETPOLLER_SNMPD_ADDRS is not set: scripts/services.sh up && . .services/env");
        };
        agent
    }

    /// Rows that change while the daemon has not taken the task's last ask for a
    /// re-plan (it takes none while a round plans, seconds at a million items, nor
    /// once its loop has stopped) do not hold the task: the ask waiting covers them
    /// (the round it starts reads `found` then), and a stop still ends the task.
    /// Before, the task waited in the ask's channel: neither its walks nor the stop
    /// were read, and the daemon's stop, which awaits the task, never ended (its
    /// service manager killed it, the sink not flushed). (Against snmpd at
    /// `NETPOLLER_SNMPD_ADDRS`; on the paused clock, which stands still while the walk
    /// runs on its thread: the hour the stop is given passes at once when the task
    /// waits for good.)
    #[tokio::test(start_paused = true)]
    async fn rows_found_while_an_ask_waits_hold_neither_the_task_nor_the_stop() {
        let targets = vec![target("h", &snmpd(), 161, vec![rule("if", None)])];
        let (_targets_tx, targets_rx) = watch::channel(targets);
        let found = Arc::new(Mutex::new(Found::default()));
        let (replan_tx, mut replan_rx) = mpsc::channel(1);
        // An ask the daemon has not taken yet.
        replan_tx.try_send(()).unwrap();
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let metrics = Arc::new(DiscoveryMetrics::default());
        let m = metrics.clone();
        let mut task = tokio::spawn(run(targets_rx, found.clone(), replan_tx, m, shutdown_rx));
        // The walk finds rows (a change: a re-plan is due at once), and the task goes
        // on to its ask before this task runs again (one thread).
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        while get(&metrics.changes) == 0 {
            assert_eq!(
                get(&metrics.walks_failed),
                0,
                "snmpd did not answer the walk"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(found.lock().unwrap().rows("h", "if").is_some());
        shutdown_tx.send(true).unwrap();
        let ended = tokio::time::timeout(Duration::from_secs(3600), &mut task).await;
        assert!(ended.is_ok(), "the task did not see the stop");
        // One ask stands for both changes.
        assert!(replan_rx.try_recv().is_ok());
        assert!(replan_rx.try_recv().is_err());
    }

    /// A walk that ends while a reload moves its host to another address is not taken:
    /// the reload has dropped the host's rows, and the old address's rows must not
    /// come back. (Against snmpd at `NETPOLLER_SNMPD_ADDRS`; the new address has no
    /// agent.) The walk's end and the new targets are ready together, as when the main
    /// thread was busy with the reload; without the task's order between them, most
    /// rounds took the walk.
    #[test]
    fn a_walk_of_an_address_a_reload_left_is_not_taken() {
        let agent = snmpd();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        for round in 0..8 {
            let r = rule("if", None);
            let old = vec![target("h", &agent, 161, vec![r.clone()])];
            let new = vec![target("h", "127.0.20.250", 161, vec![r])];
            let found = Arc::new(Mutex::new(Found::default()));
            let (targets_tx, targets_rx) = watch::channel(old.clone());
            let (replan_tx, mut replan_rx) = mpsc::channel(1);
            let (shutdown_tx, shutdown_rx) = watch::channel(false);
            let metrics = Arc::new(DiscoveryMetrics::default());
            rt.block_on(async {
                let task = tokio::spawn(run(
                    targets_rx,
                    found.clone(),
                    replan_tx,
                    metrics,
                    shutdown_rx,
                ));
                // The task starts its walk; this thread is then busy (a reload) while
                // the walk ends.
                for _ in 0..3 {
                    tokio::task::yield_now().await;
                }
                std::thread::sleep(Duration::from_millis(500));
                // What the SIGHUP handler does: drop the rows of what changed, then
                // hand over the new targets.
                prune(&mut found.lock().unwrap(), &old, &new);
                targets_tx.send(new).unwrap();
                tokio::time::sleep(Duration::from_millis(300)).await;
                while replan_rx.try_recv().is_ok() {}
                let _ = shutdown_tx.send(true);
                let _ = task.await;
            });
            let rows = found.lock().unwrap().rows("h", "if").cloned();
            assert!(
                rows.as_ref().is_none_or(|r| r.is_empty()),
                "round {round}: rows of the old address came back: {rows:?}"
            );
        }
    }

    #[test]
    fn the_file_gives_back_the_rows_of_rules_and_addresses_as_they_are() {
        let dir =
            std::env::temp_dir().join(format!("netpoller-discovery-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("discovered.json");
        let r = rule("r", None);
        let targets = [
            target("a", "127.0.0.1", 161, vec![r.clone()]),
            target("b", "127.0.0.2", 161, vec![r.clone()]),
        ];
        let f = found(&[("a", "r"), ("b", "r")]);
        write_file(&path, &f, &targets).unwrap();
        assert!(!dir.join("discovered.json.tmp").exists(), "renamed");
        assert_eq!(read_file(&path).unwrap().for_rules(&targets), f);
        // b at another address, the rule changed, or a file of another kind: not taken.
        let moved = [
            target("a", "127.0.0.1", 161, vec![r.clone()]),
            target("b", "127.0.0.3", 161, vec![r]),
        ];
        assert_eq!(
            read_file(&path).unwrap().for_rules(&moved),
            found(&[("a", "r")])
        );
        let changed = [target("a", "127.0.0.1", 161, vec![rule("r", Some("x"))])];
        assert_eq!(
            read_file(&path).unwrap().for_rules(&changed),
            Found::default()
        );
        std::fs::write(&path, r#"{"hosts": {"a": {"r": "1-2"}}}"#).unwrap();
        assert_eq!(
            read_file(&path).unwrap().for_rules(&targets),
            Found::default()
        );
        assert!(read_file(&dir.join("none.json"))
            .unwrap()
            .found
            .0
            .is_empty());
        std::fs::write(&path, "{").unwrap();
        assert!(read_file(&path).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
