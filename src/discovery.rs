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
//! * The daemon re-plans at most once per [`REPLAN_EVERY`] however many hosts change,
//!   and the rows are saved to `daemon.discovery_file` before each re-plan, so a
//!   restart polls what was found without waiting for the walks.
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

use crate::config::{DiscoveryRule, DiscoveryTarget, Found};
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
) -> anyhow::Result<Vec<u32>> {
    let target = walker::Target::of_host(t.ip, &t.snmp);
    let mut rows = walker::table_rows(&target, &rule.column, rule.matches.as_ref(), stop)?;
    for c in &rule.filter {
        if rows.is_empty() {
            break;
        }
        let values: HashMap<u32, Option<String>> = walker::column_values(&target, &c.column, stop)?
            .into_iter()
            .collect();
        rows.retain(|r| c.holds(values.get(r).and_then(|v| v.as_deref())));
    }
    Ok(rows)
}

/// One walk's host, rule and rows (or why there are none).
pub type Walked = (Arc<str>, Arc<str>, anyhow::Result<Vec<u32>>);

/// Walks every rule of every target now, [`CONCURRENT_WALKS`] at once (`poll-once`):
/// `(host, rule, rows or error)` in the targets' order.
pub fn walk_all(targets: &[DiscoveryTarget]) -> Vec<Walked> {
    let jobs: Vec<(&DiscoveryTarget, &Arc<DiscoveryRule>)> = targets
        .iter()
        .flat_map(|t| t.rules.iter().map(move |r| (t, r)))
        .collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Mutex<Vec<Option<anyhow::Result<Vec<u32>>>>> =
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

/// The discovery file: `{"hosts": {HOST: {RULE: "1-48,101"}}}`.
#[derive(serde::Serialize, serde::Deserialize)]
struct FileForm<H, R, V: Ord>
where
    H: Ord,
    R: Ord,
{
    hosts: BTreeMap<H, BTreeMap<R, V>>,
}

/// Reads the rows saved in `path`; none when it does not exist.
pub fn read_file(path: &Path) -> anyhow::Result<Found> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Found::default()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let f: FileForm<String, String, String> =
        serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))?;
    Found::from_text(f.hosts).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// Saves `found` to `path` (a new file renamed over the old: a crash leaves one or
/// the other).
pub fn write_file(path: &Path, found: &Found) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(&FileForm {
        hosts: found.to_text(),
    })?;
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))
}

/// Discovery's counters, for `/metrics`.
#[derive(Default)]
pub struct DiscoveryMetrics {
    pub walks_ok: AtomicU64,
    pub walks_failed: AtomicU64,
    pub changes: AtomicU64,
    pub replans: AtomicU64,
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
        out.counter(
            "netpoller_discovery_replans_total",
            "Plans rebuilt because discovery found other rows.",
            &[],
            get(&self.replans),
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
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (host, rule).hash(&mut h);
    let ms = interval.as_millis().max(1) as u64;
    Duration::from_millis(h.finish() % ms)
}

/// The daemon's discovery task: walks each target's rules when due, keeps `found` and
/// the file, and asks for a re-plan on `replan` (at most once per [`REPLAN_EVERY`])
/// when rows changed. New targets (after a reload) come on `targets`.
pub async fn run(
    mut targets: watch::Receiver<Vec<DiscoveryTarget>>,
    found: Arc<Mutex<Found>>,
    file: std::path::PathBuf,
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
            let known = found.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let mut next = HashMap::new();
            for t in list {
                let t = Arc::new(t);
                for r in &t.rules {
                    let key = (t.host.clone(), r.name.clone());
                    let job = match jobs.remove(&key) {
                        // Same rule: keep its schedule.
                        Some(j) if j.rule.same_walk(r) => Job {
                            target: t.clone(),
                            rule: r.clone(),
                            ..j
                        },
                        // New, or walked differently: at once, but for the rows
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
            // Rows of rules no host uses any more are forgotten (and not saved).
            let mut f = found.lock().unwrap_or_else(|e| e.into_inner());
            let before = f.clone();
            f.0.retain(|h, rules| {
                rules.retain(|r, _| jobs.contains_key(&(h.clone(), r.clone())));
                !rules.is_empty()
            });
            if *f != before {
                dirty.get_or_insert(now);
            }
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
            let snapshot = found.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let path = file.clone();
            match tokio::task::spawn_blocking(move || write_file(&path, &snapshot)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "discovery: the rows found could not be saved (a restart walks again)")
                }
                Err(e) => tracing::warn!(error = %e, "discovery: saving the rows failed"),
            }
            if replan.send(()).await.is_err() {
                break;
            }
            metrics.replans.fetch_add(1, Ordering::Relaxed);
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
        tokio::select! {
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
                            .set(&host, &rule, &rows);
                        if changed {
                            metrics.changes.fetch_add(1, Ordering::Relaxed);
                            tracing::info!(
                                host = %host,
                                rule = %rule,
                                rows = rows.len(),
                                indices = %crate::config::format_indices(&rows),
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
