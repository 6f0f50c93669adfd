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
//!   saved.
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
        let help = "Plans rebuilt because discovery found other rows, by result (refused: past a limit of the loader; the plan stays).";
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
/// changed. New targets (after a reload) come on `targets`.
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
            // (The rows of what changed were pruned before the reload's plan.)
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
            if replan.send(()).await.is_err() {
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
        // taken, rather than putting back rows the reload has just dropped.
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

    /// A walk that ends while a reload moves its host to another address is not taken:
    /// the reload has dropped the host's rows, and the old address's rows must not
    /// come back. (Against snmpd at `NETPOLLER_SNMPD_ADDRS`; the new address has no
    /// agent.) The walk's end and the new targets are ready together, as when the main
    /// thread was busy with the reload; without the task's order between them, most
    /// rounds took the walk.
    #[test]
    fn a_walk_of_an_address_a_reload_left_is_not_taken() {
        let Some(agent) = std::env::var("NETPOLLER_SNMPD_ADDRS")
            .ok()
            .and_then(|a| a.split(',').next().map(str::to_owned))
        else {
            panic!("NETPOLLER_SNMPD_ADDRS is not set: scripts/services.sh up && . .services/env");
        };
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
