//! The iteration loops: scheduler → socket drivers → samples.
//!
//! One loop per engine. Each turn it sleeps until the earliest due task, takes every
//! task due now (up to the engine's batch limit), turns them into one iteration —
//! one ICMP sweep or one SNMP iteration, each bounded by one deadline — and runs it on
//! a free driver from the engine's pool, so several iterations can overlap when the
//! load needs it. When an iteration ends, its tasks go back to the scheduler for their
//! next slot; a long one hands back the hosts it is done with as it goes (an SNMP
//! iteration past [`SLOW_ITERATION`], an ICMP sweep every [`ICMP_DONE_EVERY`]).
//!
//! Invariants:
//! * A task is in exactly one place: the scheduler's queue or one running iteration.
//! * Samples stream out through the [`Emitter`] while the iteration runs; the engine
//!   does not take new work while its emitter has parked samples (backpressure). A
//!   host goes back to the scheduler only once its samples are in the channel, so its
//!   next poll's samples cannot overtake them.
//! * Shutdown: the loops stop taking work, running iterations end at their own
//!   deadline, an SNMP iteration within one timeout, but each at the latest
//!   [`STOP_GRACE`] after the stop (cut short then: what was not over gets no sample),
//!   then the loops return (dropping their senders closes the channel).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::sync::{mpsc, watch, Notify};
use tokio::time::Instant;

use crate::engine::{clock_now, icmp_value, Emitter, PipelineCounters, Sample, Samples};
use crate::icmp_driver::{IcmpDriver, PingJob};
use crate::metrics::{Counter, Exposition, Gauge, Histogram};
use crate::plan::{Engine, ItemKind, Plan};
use crate::scheduler::{Due, Scheduler};
use crate::snmp_driver::{SnmpDriver, SnmpHostJob};
use crate::value::{ErrorReason, ItemError};

/// Maps the tokio clock (pausable in tests) to Unix milliseconds, the scheduler's time.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    base: Instant,
    base_unix_ms: u64,
}

impl Clock {
    /// A clock reading Unix time now.
    pub fn new() -> Self {
        let unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Clock {
            base: Instant::now(),
            base_unix_ms: unix.as_millis() as u64,
        }
    }

    pub fn now_ms(&self) -> u64 {
        self.base_unix_ms + self.base.elapsed().as_millis() as u64
    }
}

/// Unix time now in milliseconds, from the wall clock: what a timestamp others read
/// is (the scheduler's [`Clock`] goes by the monotonic clock since the start, and
/// drifts from it by every step of the wall clock since).
fn unix_ms() -> u64 {
    let (s, ns) = clock_now();
    u64::from(s) * 1000 + u64::from(ns / 1_000_000)
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

/// Per-engine counters exposed on `/metrics`.
#[derive(Debug)]
pub struct EngineMetrics {
    pub iterations: Counter,
    pub iteration_seconds: Histogram,
    pub items: Counter,
    pub values: Counter,
    pub errors_timeout: Counter,
    pub errors_unsupported: Counter,
    pub errors_decode: Counter,
    pub errors_send: Counter,
    pub in_flight: Gauge,
    pub lateness_seconds: Histogram,
    pub late_iterations: Counter,
    pub skipped_slots: Counter,
    /// Replies that matched nothing in flight: stale, foreign, wrong community/source.
    pub unmatched: Counter,
    /// Replies that could not be decoded.
    pub malformed: Counter,
    /// ICMP only: probes the kernel refused to send (no route, a local firewall rule,
    /// ...): counted as sent and lost, as fping counts them, and counted here so that a
    /// local fault is not mistaken for hosts going down.
    pub icmp_send_errors: Counter,
    /// ICMP only: replies the kernel dropped for a full receive buffer during sweeps
    /// (`SO_MEMINFO`).
    pub icmp_receive_drops: Counter,
    /// SNMP only: SNMPv3 engine discoveries sent, and Reports to requests by kind
    /// ([`snmp::v3::ReportKind::index`]).
    pub snmpv3_discoveries: Counter,
    pub snmpv3_reports: [Counter; snmp::v3::ReportKind::ALL.len()],
    /// SNMP only: requests an agent did not answer in full, by how ([`SIZE_CUTS`]).
    pub snmp_size_cuts: [Counter; SIZE_CUTS.len()],
    /// SNMP only: values taken from the one varbind answering an OID asked alone that
    /// names another OID (as Zabbix takes them): an agent that misnames what it answers.
    pub snmp_renamed_values: Counter,
    /// ICMP errors that came back for what the engine sent instead of answers (a
    /// router's unreachable, a firewall's reject, for SNMP a closed port; an SNMP
    /// host's items name theirs). Exposed per engine: `netpoller_icmp_errors_total`,
    /// `netpoller_snmp_icmp_errors_total`.
    pub icmp_errors: Counter,
    /// SNMP only: extra drivers opened for slow devices (see [`SnmpDrivers`]).
    pub snmp_extra_drivers: Gauge,
}

/// How an SNMP agent did not answer a request in full: tooBig, fewer varbinds than
/// asked, or silence while it answered one OID alone (each makes the host's requests
/// smaller, but a tooBig or short answer to a single OID).
pub const SIZE_CUTS: [&str; 3] = ["too_big", "short", "silent"];

impl Default for EngineMetrics {
    fn default() -> Self {
        EngineMetrics {
            iterations: Counter::default(),
            iteration_seconds: Histogram::seconds(),
            items: Counter::default(),
            values: Counter::default(),
            errors_timeout: Counter::default(),
            errors_unsupported: Counter::default(),
            errors_decode: Counter::default(),
            errors_send: Counter::default(),
            in_flight: Gauge::default(),
            lateness_seconds: Histogram::seconds(),
            late_iterations: Counter::default(),
            skipped_slots: Counter::default(),
            unmatched: Counter::default(),
            malformed: Counter::default(),
            icmp_send_errors: Counter::default(),
            icmp_receive_drops: Counter::default(),
            snmpv3_discoveries: Counter::default(),
            snmpv3_reports: Default::default(),
            snmp_size_cuts: Default::default(),
            snmp_renamed_values: Counter::default(),
            icmp_errors: Counter::default(),
            snmp_extra_drivers: Gauge::default(),
        }
    }
}

impl EngineMetrics {
    fn error(&self, r: ErrorReason) -> &Counter {
        match r {
            ErrorReason::Timeout => &self.errors_timeout,
            ErrorReason::Unsupported => &self.errors_unsupported,
            ErrorReason::Decode => &self.errors_decode,
            ErrorReason::Send => &self.errors_send,
        }
    }

    /// Errors of one reason so far.
    pub fn errors(&self, r: ErrorReason) -> u64 {
        self.error(r).get()
    }
}

/// State the engine loops, the reloader and the metrics endpoint share.
pub struct Shared {
    /// The plan and the scheduler change together under this lock: takers hold it for
    /// reading, a reload for writing, so a task index always refers to the plan that
    /// was current when it was taken.
    plan: RwLock<Arc<Plan>>,
    pub scheduler: Scheduler,
    pub clock: Clock,
    pub icmp: EngineMetrics,
    pub snmp: EngineMetrics,
    pub pipeline: Arc<PipelineCounters>,
    reloads_ok: Counter,
    reloads_failed: Counter,
    /// Unix ms when the running config was loaded (the start, or the last reload that
    /// took), and whether the last reload failed (the config that runs is then older than
    /// the file that reload read).
    loaded_at_ms: AtomicU64,
    last_reload_failed: AtomicBool,
    /// Whether the config that runs (the last reload that took) asks for something only
    /// a restart applies ([`Shared::set_restart_pending`]).
    restart_pending: AtomicBool,
    /// Items whose latest sample was an error, by reason (kept by the sample consumer's
    /// [`crate::states::ItemStates`]).
    pub failing: Arc<crate::states::FailingGauges>,
    /// Plans swapped in since start: the consumer prunes removed items when it changes.
    generation: AtomicU64,
    /// The plans replaced since the consumer last took them ([`Shared::take_replaced`]),
    /// while anything (an iteration) still holds them: every one, also a plan replaced
    /// again before the consumer saw it.
    replaced: std::sync::Mutex<Vec<std::sync::Weak<Plan>>>,
    /// Wakes the loops after a reload (new tasks may be due sooner).
    wake: Notify,
    /// Batch limits.
    pub limits: Limits,
}

/// Sizes of one iteration.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Most hosts in one ICMP sweep (`daemon.icmp_batch_hosts`, default 4,096).
    pub icmp_batch_hosts: u64,
    /// Most OIDs in one SNMP iteration (`daemon.snmp_batch_requests`, default 8,000).
    pub snmp_batch_requests: u64,
    /// An iteration that starts this late is logged and counted as late: late after
    /// the earliest time one of its tasks could be taken (its slot, or for one that
    /// waited for its device's other poll, when that ended: [`Due::ready_ms`]).
    pub late_after: Duration,
    /// An iteration takes every task due within this window from now
    /// (`daemon.batch_window`, default 1 s). Slots are spread over each interval, so
    /// without a window every iteration would hold a single host; with it, a sweep
    /// holds a window's worth of hosts (up to the batch limit) and the engine starts
    /// about one iteration per window, each bounded by one timeout. A task is polled
    /// at most this much before its slot, never after it because of batching.
    pub batch_window: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            icmp_batch_hosts: 4_096,
            snmp_batch_requests: 8_000,
            late_after: Duration::from_secs(1),
            batch_window: Duration::from_secs(1),
        }
    }
}

impl Shared {
    pub fn new(plan: Plan, shards: usize, clock: Clock, limits: Limits) -> Arc<Shared> {
        let scheduler = Scheduler::new(&plan, shards, clock.now_ms());
        Arc::new(Shared {
            plan: RwLock::new(Arc::new(plan)),
            scheduler,
            clock,
            icmp: EngineMetrics::default(),
            snmp: EngineMetrics::default(),
            pipeline: Arc::new(PipelineCounters::default()),
            reloads_ok: Counter::default(),
            reloads_failed: Counter::default(),
            loaded_at_ms: AtomicU64::new(unix_ms()),
            last_reload_failed: AtomicBool::new(false),
            restart_pending: AtomicBool::new(false),
            failing: Arc::default(),
            generation: AtomicU64::new(0),
            replaced: std::sync::Mutex::default(),
            wake: Notify::new(),
            limits,
        })
    }

    /// The current plan.
    pub fn plan(&self) -> Arc<Plan> {
        self.plan.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Swap in a new plan: changed items take effect at their next slot.
    ///
    /// The engines take work under the plan's read lock (queues and plan must agree),
    /// so the write lock covers only pointer swaps: the new queues are built before it
    /// and the old plan is freed after it (at a million items either takes tens of ms,
    /// during which no engine could start an iteration).
    pub fn reload(&self, plan: Plan) {
        self.replace_plan(plan);
        self.reloads_ok.inc();
        self.loaded_at_ms.store(unix_ms(), Ordering::Relaxed);
        self.last_reload_failed.store(false, Ordering::Relaxed);
    }

    /// A reload that was refused (the old config keeps running): counted, and the
    /// last-reload gauge says so until a reload takes.
    pub fn reload_failed(&self) {
        self.reloads_failed.inc();
        self.last_reload_failed.store(true, Ordering::Relaxed);
    }

    /// Whether the config a reload swaps in differs from the one the daemon started
    /// with in what only a start applies (`[clickhouse]`, sockets, threads: the reload
    /// warns of each). Set by every reload that takes, so a later one back to the
    /// start's values clears it; a refused reload leaves it, the config running being
    /// the same.
    pub fn set_restart_pending(&self, pending: bool) {
        self.restart_pending.store(pending, Ordering::Relaxed);
    }

    /// [`Self::reload`] not counted as a config reload (the same config with other
    /// table rows, from discovery).
    pub fn replace_plan(&self, plan: Plan) {
        let prepared = self.scheduler.prepare(&plan, self.clock.now_ms());
        let plan = Arc::new(plan);
        let mut guard = self.plan.write().unwrap_or_else(|e| e.into_inner());
        let plans = Some((&**guard, &*plan));
        self.scheduler.install(prepared, self.clock.now_ms(), plans);
        let old = std::mem::replace(&mut *guard, plan);
        // Listed before the generation moves: the consumer, once it sees it move, takes
        // the plans replaced (it waits for their iterations before forgetting removed
        // items), and reloads run on a thread of their own. Listed after, the consumer
        // could take the list before this plan was on it, and then forgot the removed
        // items while its iterations still delivered.
        {
            let mut replaced = self.replaced.lock().unwrap_or_else(|e| e.into_inner());
            replaced.retain(|p| p.strong_count() > 0);
            replaced.push(Arc::downgrade(&old));
        }
        self.generation.fetch_add(1, Ordering::Release);
        drop(guard);
        drop(old);
        self.wake.notify_waiters();
    }

    /// The plans replaced since the last call that something still holds (iterations
    /// that started on them): the consumer waits for them before it forgets removed items.
    pub fn take_replaced(&self) -> Vec<std::sync::Weak<Plan>> {
        std::mem::take(&mut *self.replaced.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Changes at each [`Shared::reload`], once [`Shared::take_replaced`] has the plan
    /// replaced.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    pub fn metrics(&self, e: Engine) -> &EngineMetrics {
        match e {
            Engine::Icmp => &self.icmp,
            Engine::Snmp => &self.snmp,
        }
    }

    /// Take a batch for `engine`, with the plan it refers to.
    fn take(&self, engine: Engine, now_ms: u64) -> (Arc<Plan>, Vec<Due>) {
        let guard = self.plan.read().unwrap_or_else(|e| e.into_inner());
        let plan = guard.clone();
        let mut out = Vec::new();
        match engine {
            Engine::Icmp => {
                self.scheduler.take_due(
                    engine,
                    now_ms,
                    self.limits.icmp_batch_hosts,
                    |_| 1,
                    &mut out,
                );
            }
            Engine::Snmp => {
                self.scheduler.take_due(
                    engine,
                    now_ms,
                    self.limits.snmp_batch_requests,
                    |t| plan.tasks[t as usize].items.len() as u64,
                    &mut out,
                );
            }
        }
        drop(guard);
        (plan, out)
    }

    /// Render the engine, scheduler, pipeline and reload metrics.
    pub fn render(&self, out: &mut Exposition) {
        for e in Engine::ALL {
            let m = self.metrics(e);
            let l = [("engine", e.as_str())];
            out.counter(
                "netpoller_iterations_total",
                "Iterations run.",
                &l,
                m.iterations.get(),
            );
            out.histogram(
                "netpoller_iteration_duration_seconds",
                "Wall time of one iteration.",
                &l,
                &m.iteration_seconds,
            );
            out.counter(
                "netpoller_items_polled_total",
                "Items polled (values + errors).",
                &l,
                m.items.get(),
            );
            out.counter(
                "netpoller_values_total",
                "Values obtained.",
                &l,
                m.values.get(),
            );
            for r in ErrorReason::ALL {
                out.counter(
                    "netpoller_item_errors_total",
                    "Items that yielded no value, by reason.",
                    &[("engine", e.as_str()), ("reason", r.as_str())],
                    m.error(r).get(),
                );
            }
            out.gauge(
                "netpoller_inflight",
                "Hosts (ICMP) or OIDs (SNMP) in running iterations, until done and handed back for their next poll.",
                &l,
                m.in_flight.get() as f64,
            );
            out.histogram(
                "netpoller_lateness_seconds",
                "How late iterations start after their earliest due slot (for a task that waited for another poll of its device: after that poll ended).",
                &l,
                &m.lateness_seconds,
            );
            out.counter(
                "netpoller_late_iterations_total",
                "Iterations that started more than 1 s late.",
                &l,
                m.late_iterations.get(),
            );
            out.counter(
                "netpoller_skipped_slots_total",
                "Poll slots no poll got: skipped to catch up after late polls, or taken from a poll running across a reload.",
                &l,
                m.skipped_slots.get(),
            );
            out.counter(
                "netpoller_unmatched_replies_total",
                "Replies matching nothing in flight (stale, foreign, wrong community or source).",
                &l,
                m.unmatched.get(),
            );
            out.counter(
                "netpoller_malformed_replies_total",
                "Replies that could not be decoded.",
                &l,
                m.malformed.get(),
            );
            if e == Engine::Icmp {
                out.counter(
                    "netpoller_icmp_send_errors_total",
                    "Echo requests the kernel refused to send (no route, local firewall, ...); they count as lost.",
                    &[],
                    m.icmp_send_errors.get(),
                );
                out.counter(
                    "netpoller_icmp_receive_drops_total",
                    "Replies the kernel dropped because an ICMP socket's receive buffer was full; their probes read as lost (raise net.core.rmem_max).",
                    &[],
                    m.icmp_receive_drops.get(),
                );
                out.counter(
                    "netpoller_icmp_errors_total",
                    "ICMP errors that came back for echo requests instead of replies: a router's host or network unreachable, a firewall's reject, a TTL exceeded. Their probes count as lost, as Zabbix's fping counts them.",
                    &[],
                    m.icmp_errors.get(),
                );
            }
            if e == Engine::Snmp {
                out.counter(
                    "netpoller_snmpv3_discoveries_total",
                    "SNMPv3 engine discoveries (one per agent and poller, then after a reboot or replacement).",
                    &[],
                    m.snmpv3_discoveries.get(),
                );
                for k in snmp::v3::ReportKind::ALL {
                    out.counter(
                        "netpoller_snmpv3_reports_total",
                        "SNMPv3 Reports to requests, by the agent's counter: refused users, keys or levels, and resynchronizations.",
                        &[("counter", k.counter())],
                        m.snmpv3_reports[k.index()].get(),
                    );
                }
                for (why, c) in SIZE_CUTS.iter().zip(&m.snmp_size_cuts) {
                    out.counter(
                        "netpoller_snmp_size_cuts_total",
                        "SNMP requests an agent did not answer in full, by how: tooBig (the request is halved and the size remembered; a single OID fails), fewer varbinds than asked (the rest asked again), or silence while it answered one OID alone (halved, remembered).",
                        &[("reason", why)],
                        c.get(),
                    );
                }
                out.counter(
                    "netpoller_snmp_renamed_values_total",
                    "SNMP values taken from the one varbind answering an OID asked alone that names another OID, as Zabbix takes them (an agent that misnames what it answers).",
                    &[],
                    m.snmp_renamed_values.get(),
                );
                out.counter(
                    "netpoller_snmp_icmp_errors_total",
                    "ICMP errors that came back for SNMP requests instead of replies: a closed port (no agent listening), a router's host or network unreachable, a firewall's reject. The hosts still time out; their items' errors say which error and from where.",
                    &[],
                    m.icmp_errors.get(),
                );
                out.gauge(
                    "netpoller_snmp_extra_drivers",
                    "Extra SNMP socket sets opened because slow devices held every SNMP iteration (at most 3 x daemon.snmp_concurrent_iterations).",
                    &[],
                    m.snmp_extra_drivers.get() as f64,
                );
            }
            let now = self.clock.now_ms();
            let queued = self.scheduler.queued(e);
            let due = self.scheduler.due_counts(e, now);
            let waiting = self.scheduler.waiting(e);
            for (i, ((q, d), w)) in queued.iter().zip(&due).zip(&waiting).enumerate() {
                let shard = i.to_string();
                let l = [("engine", e.as_str()), ("shard", shard.as_str())];
                out.gauge(
                    "netpoller_scheduler_tasks",
                    "Tasks queued per shard (not running).",
                    &l,
                    *q as f64,
                );
                out.gauge(
                    "netpoller_scheduler_due",
                    "Queued tasks due now that the engine could take, per shard: above 0 for long, the engine is behind.",
                    &l,
                    *d as f64,
                );
                out.gauge(
                    "netpoller_scheduler_waiting",
                    "Queued tasks whose slot came while another task of their host was polled, per shard: they wait for that poll (a device slower than its shortest interval), not for the engine.",
                    &l,
                    *w as f64,
                );
            }
        }
        let plan = self.plan();
        out.gauge(
            "netpoller_scheduler_items",
            "Items scheduled.",
            &[],
            plan.items.len() as f64,
        );
        out.gauge(
            "netpoller_scheduler_hosts",
            "Hosts scheduled.",
            &[],
            plan.hosts.len() as f64,
        );
        out.counter(
            "netpoller_backpressure_waits_total",
            "Times an engine waited for the sink channel.",
            &[],
            self.pipeline.backpressure_waits.load(Ordering::Relaxed),
        );
        out.counter(
            "netpoller_samples_total",
            "Poll results handed to the sink channel: values and errors, one per item polled (the rows to write are netpoller_sink_rows_received_total).",
            &[],
            self.pipeline.samples.load(Ordering::Relaxed),
        );
        out.counter(
            "netpoller_preprocessing_discarded_total",
            "Values preprocessing kept back: a change step's first or after a counter reset, a throttling step's unchanged ones.",
            &[],
            self.pipeline
                .preprocessing_discarded
                .load(Ordering::Relaxed),
        );
        out.counter(
            "netpoller_preprocessing_errors_total",
            "Values preprocessing made errors of (the item is unsupported for that poll).",
            &[],
            self.pipeline.preprocessing_errors.load(Ordering::Relaxed),
        );
        out.counter(
            "netpoller_config_reloads_total",
            "Config reloads.",
            &[("result", "ok")],
            self.reloads_ok.get(),
        );
        out.counter(
            "netpoller_config_reloads_total",
            "Config reloads.",
            &[("result", "failed")],
            self.reloads_failed.get(),
        );
        // Named as Prometheus's own, so that the alerts written for it read the same.
        out.gauge(
            "netpoller_config_last_reload_successful",
            "Whether the last config reload (SIGHUP) took; 0: a reload was refused since (the log says why), and the config that runs is older than the file it read.",
            &[],
            if self.last_reload_failed.load(Ordering::Relaxed) {
                0.0
            } else {
                1.0
            },
        );
        // A reload's warning scrolls by; this stays until the restart it asks for.
        out.gauge(
            "netpoller_config_restart_pending",
            "1 when the running config (the last reload that took) changed settings that apply only at start ([clickhouse], max_pps, [daemon] keys, ICMP threads wanted): the log's SIGHUP warning names them; a restart applies them.",
            &[],
            f64::from(u8::from(self.restart_pending.load(Ordering::Relaxed))),
        );
        out.gauge(
            "netpoller_config_last_reload_success_timestamp_seconds",
            "Unix time the running config took effect (when the daemon began polling at start, or the last reload that took).",
            &[],
            self.loaded_at_ms.load(Ordering::Relaxed) as f64 / 1000.0,
        );
        for r in ErrorReason::ALL {
            out.gauge(
                "netpoller_items_failing",
                "Items whose latest poll yielded no value, by reason (Zabbix: not supported / unreachable).",
                &[("reason", r.as_str())],
                self.failing.get(r) as f64,
            );
        }
    }

    /// `Err(reason)` when some engine is behind its schedule by more than `max_lag`
    /// (a task that waited for its device is due from when the device was free:
    /// [`Scheduler::next_due`]).
    pub fn health(&self, max_lag: Duration) -> Result<(), String> {
        let now = self.clock.now_ms();
        for e in Engine::ALL {
            if let Some(due) = self.scheduler.next_due(e) {
                let lag = now.saturating_sub(due);
                if lag > max_lag.as_millis() as u64 {
                    return Err(format!(
                        "{} scheduler is {:.1} s behind",
                        e.as_str(),
                        lag as f64 / 1000.0
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Summary of one iteration, logged as one line.
#[derive(Debug, Default, Clone)]
pub struct IterationSummary {
    pub hosts: usize,
    pub items: usize,
    pub values: usize,
    /// Failed items by reason (`ErrorReason as usize`).
    pub errors_by: [usize; ErrorReason::ALL.len()],
    pub wall: Duration,
    pub lateness: Duration,
    /// ICMP: the hosts (their index in the plan) an ICMP error came back for instead of
    /// a reply to one of their echo requests (a router's host unreachable, a
    /// firewall's reject), with it (the last): why their ping items read as down.
    pub icmp_errors: Vec<(u32, icmp::Unreachable)>,
}

impl IterationSummary {
    /// The first host of [`Self::icmp_errors`], in words, for a log line: `sw-9
    /// (192.0.2.9): ICMP host unreachable from 192.0.2.1 (...)`.
    pub fn first_icmp_error(&self, plan: &Plan) -> Option<String> {
        let (host, error) = self.icmp_errors.first()?;
        let host = plan.hosts.get(*host as usize)?;
        Some(format!("{} ({}): {error}", host.name, host.ip))
    }
}

impl EngineMetrics {
    /// Adds an iteration's counts: once per iteration, not per value (the counters are
    /// shared by every thread of the engine: a cache line bouncing per value).
    fn account(&self, sum: &IterationSummary) {
        self.items.add(sum.items as u64);
        self.values.add(sum.values as u64);
        for r in ErrorReason::ALL {
            self.error(r).add(sum.errors_by[r as usize] as u64);
        }
    }
}

/// Account one sample in the iteration's summary and hand it on.
fn deliver(sum: &mut IterationSummary, emitter: &mut Emitter, s: Sample) {
    sum.items += 1;
    match &s.result {
        Ok(_) => sum.values += 1,
        Err(e) => sum.errors_by[e.reason as usize] += 1,
    }
    emitter.emit(s);
}

/// How often a long ICMP sweep reports the hosts it is done with (see
/// [`icmp_iteration`]): a sweep of Zabbix's default probes (3 packets 20 ms apart, a 1 s
/// timeout: 1.04 s) reports its hosts that answered at the first second and the rest at
/// its end; one of a few hundred ms reports none before its end.
pub const ICMP_DONE_EVERY: Duration = Duration::from_secs(1);

/// How long an iteration still runs once the daemon stops, before it is cut short: what
/// a sweep of the default probes or an SNMP request of the default timeout needs to
/// end, well inside a service manager's stop timeout (systemd's 30 s, with the sink's
/// flush after it).
pub const STOP_GRACE: Duration = Duration::from_secs(5);

/// Run one ICMP sweep over `dues` (tasks of `plan`), streaming samples.
/// `host_done(due indices)`: hosts whose probes are over and whose items were handed to
/// the channel, for the caller to reschedule them then rather than at the sweep's end
/// (a host with a long probe train held the others of its sweep back); reported every
/// [`ICMP_DONE_EVERY`], so a sweep shorter than that reports none: the caller completes
/// the dues not reported at the end. When `stop` completes (the daemon stops), the
/// sweep gets [`STOP_GRACE`] more to end, then is cut short: the hosts whose
/// probes were not over get no sample.
pub async fn icmp_iteration(
    driver: &mut IcmpDriver,
    plan: &Plan,
    dues: &[Due],
    metrics: &EngineMetrics,
    emitter: &mut Emitter,
    host_done: &mut (dyn FnMut(&[usize]) + Send),
    stop: impl std::future::Future<Output = ()>,
) -> IterationSummary {
    let mut sum = IterationSummary {
        hosts: dues.len(),
        ..Default::default()
    };
    let jobs: Vec<PingJob> = dues
        .iter()
        .map(|d| {
            let task = &plan.tasks[d.task as usize];
            let host = &plan.hosts[task.host as usize];
            plan.task_probe(task)
                .expect("ICMP task with a non-ICMP item")
                .job(host.ip)
        })
        .collect();
    metrics.in_flight.add(jobs.len() as i64);
    // A task's items, from its host's probe results or from why it was not probed.
    let deliver_task = |sum: &mut IterationSummary,
                        emitter: &mut Emitter,
                        idx: usize,
                        outcome: Result<&icmp::PingStats, &ItemError>| {
        let stamp = clock_now();
        let task = &plan.tasks[dues[idx].task as usize];
        let host = &plan.hosts[task.host as usize];
        if let Some(error) = outcome.ok().and_then(|stats| stats.error) {
            sum.icmp_errors.push((task.host, error));
        }
        for (index, item) in task.items.clone().zip(plan.task_items(task)) {
            let result = match outcome {
                Ok(stats) => Ok(icmp_value(item, stats)),
                Err(e) => Err(e.clone()),
            };
            deliver(sum, emitter, Sample::new(plan, host, index, stamp, result));
        }
    };
    // The sweep's callback and the timer that reports done hosts share these (one
    // task: the lock is never contended).
    let state = std::sync::Mutex::new((&mut sum, &mut *emitter, Done::default()));
    let lock = || state.lock().unwrap_or_else(|e| e.into_inner());
    let cut = async {
        stop.await;
        tokio::time::sleep(STOP_GRACE).await;
    };
    let sweep = driver.sweep(&jobs, |idx, stats| {
        // Nothing sent: a job the driver could not probe (reported below with why).
        if stats.sent > 0 {
            let mut g = lock();
            let (sum, emitter, done) = &mut *g;
            deliver_task(sum, emitter, idx, Ok(stats));
            done.dues.push(idx);
            done.weight += 1;
        }
    });
    let cut_short = async {
        tokio::select! {
            biased;
            r = sweep => Some(r),
            () = cut => None,
        }
    };
    let report = with_ticks(cut_short, ICMP_DONE_EVERY, || {
        let mut g = lock();
        let (_, emitter, done) = &mut *g;
        hand_back(emitter, done, host_done, &metrics.in_flight);
    })
    .await;
    let (_, _, done) = state.into_inner().unwrap_or_else(|e| e.into_inner());
    metrics.in_flight.add(done.handed - jobs.len() as i64);
    let Some(report) = report else {
        tracing::info!(
            hosts = jobs.len(),
            "stopping: an ICMP sweep cut short; hosts whose probes were not over get no value"
        );
        emitter.flush();
        metrics.account(&sum);
        return sum;
    };
    // Never probed (no IPv6 socket, ...): not a host that failed to answer, so no 0 and
    // no 0% loss, but Zabbix's "not supported" with the reason.
    for (idx, why) in &report.rejected {
        let err = ItemError::new(ErrorReason::Unsupported, format!("not probed: {why}"));
        deliver_task(&mut sum, emitter, *idx, Err(&err));
    }
    let c = report.counters;
    metrics
        .unmatched
        .add(c.foreign + c.spoofed + c.redirected + c.stale + c.duplicate + c.late);
    metrics.malformed.add(c.malformed);
    metrics.icmp_send_errors.add(c.send_errors);
    metrics.icmp_receive_drops.add(report.receive_drops);
    metrics.icmp_errors.add(c.icmp_errors);
    if let Some((target, error)) = &report.first_send_error {
        // At most one warning a minute: a target that is never routable would
        // otherwise log at every sweep (the metric counts every refusal).
        static LAST_WARNING: AtomicU64 = AtomicU64::new(0);
        let now = u64::from(clock_now().0);
        let last = LAST_WARNING.load(Ordering::Relaxed);
        if now >= last + 60
            && LAST_WARNING
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!(
                probes = c.send_errors,
                first_target = %target,
                error = %error,
                "ICMP: the kernel refused to send probes; they count as lost (hosts read as down); next warning in a minute at the earliest"
            );
        }
    }
    emitter.flush();
    metrics.account(&sum);
    sum
}

/// Hands the dues in `done` (of hosts whose items are all delivered) to `host_done`,
/// and empties it, once their samples are in the channel: the consumer must have them
/// before the hosts' next polls, which another iteration may deliver before this one
/// ends (parked by a full channel: not yet, they wait).
/// They leave the in-flight gauge then (they may be polled again, by another iteration,
/// before this one ends).
fn hand_back(
    emitter: &mut Emitter,
    done: &mut Done,
    host_done: &mut (dyn FnMut(&[usize]) + Send),
    in_flight: &Gauge,
) {
    if !done.dues.is_empty() && emitter.flush() {
        host_done(&done.dues);
        done.dues.clear();
        in_flight.add(-done.weight);
        done.handed += done.weight;
        done.weight = 0;
    }
}

/// The dues of an iteration's hosts that are done and not handed back yet (see
/// [`hand_back`]).
#[derive(Default)]
struct Done {
    dues: Vec<usize>,
    /// What they count in the in-flight gauge (ICMP: hosts; SNMP: OIDs).
    weight: i64,
    /// What the hand-backs so far took out of the gauge.
    handed: i64,
}

/// Drives `work` to its end, running `on_tick` every `every` (the first `every` after
/// the start) while it waits: between two polls of `work`, never inside one, so a burst
/// of samples one poll delivers (a response's items, a timed-out host's) stays whole.
async fn with_ticks<R>(
    work: impl std::future::Future<Output = R>,
    every: Duration,
    mut on_tick: impl FnMut(),
) -> R {
    tokio::pin!(work);
    let mut tick = tokio::time::interval_at(Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            r = &mut work => return r,
            _ = tick.tick() => on_tick(),
        }
    }
}

/// How long an SNMP iteration runs before it reschedules its hosts as each is done
/// (see [`snmp_iteration`]): past what agents on a working network take, short of the
/// shortest item interval (1 s).
pub const SLOW_ITERATION: Duration = Duration::from_millis(200);

/// Run one SNMP iteration over `dues`, streaming samples. Tasks of one host are merged
/// into one host job so that the host sees one request chain (hybrid async).
/// `host_done(due indices)`: a host's items have all been delivered (and handed to
/// the channel); its dues can be rescheduled now rather than when the iteration's
/// slowest host is done (a device that answers slowly, with many items in series, held
/// every host of its iteration back). Only an iteration still running after
/// [`SLOW_ITERATION`] reports hosts: a quick one ends first, and its samples leave in
/// whole batches. Dues of no host reported there are the caller's to complete at the
/// end. When `stop` completes (the daemon stops), the iteration ends within one timeout
/// ([`SnmpDriver::run_iteration_until`]): the items it did not poll get no sample.
pub async fn snmp_iteration(
    driver: &mut SnmpDriver,
    plan: &Plan,
    dues: &[Due],
    metrics: &EngineMetrics,
    emitter: &mut Emitter,
    host_done: &mut (dyn FnMut(&[usize]) + Send),
    stop: impl std::future::Future<Output = ()>,
) -> IterationSummary {
    // Forget the hosts a reload or discovery removed: the driver's memory is per
    // address, and nothing else prunes it.
    driver.follow_plan(plan);
    let mut sum = IterationSummary::default();
    let mut by_host: HashMap<u32, usize> = HashMap::new();
    let mut jobs: Vec<SnmpHostJob> = Vec::new();
    // job → indices into `dues` of its host
    let mut job_dues: Vec<Vec<usize>> = Vec::new();
    // (job, oid index) → item index in plan.items
    let mut refs: Vec<Vec<u32>> = Vec::new();
    // job → host index in plan.hosts
    let mut job_host: Vec<u32> = Vec::new();
    for (di, d) in dues.iter().enumerate() {
        let task = &plan.tasks[d.task as usize];
        let host = &plan.hosts[task.host as usize];
        let (Some(params), Some(addr)) = (host.snmp.as_ref(), host.snmp_addr()) else {
            continue;
        };
        let j = *by_host.entry(task.host).or_insert_with(|| {
            jobs.push(params.job(addr, Vec::new()));
            refs.push(Vec::new());
            job_host.push(task.host);
            job_dues.push(Vec::new());
            jobs.len() - 1
        });
        job_dues[j].push(di);
        for idx in task.items.clone() {
            let ItemKind::Snmp { oid } = &plan.items[idx as usize].kind else {
                continue;
            };
            jobs[j].oids.push(oid.clone());
            refs[j].push(idx);
        }
    }
    sum.hosts = jobs.len();
    let oids: usize = jobs.iter().map(|j| j.oids.len()).sum();
    metrics.in_flight.add(oids as i64);
    let mut left: Vec<usize> = jobs.iter().map(|j| j.oids.len()).collect();
    // Hosts done but not reported yet (see SLOW_ITERATION): reported between two hosts'
    // samples, never inside the burst of one host's (a response's items, or a
    // timed-out host's), which stay one batch: at the first sample of another host, and
    // every SLOW_ITERATION while none comes (a silent host's timeout held them).
    // The driver's callback and that timer share them (one task: never contended).
    // `done`: the dues of those hosts.
    let state = std::sync::Mutex::new((&mut sum, &mut *emitter, Done::default(), host_done));
    let lock = || state.lock().unwrap_or_else(|e| e.into_inner());
    let mut last: Option<usize> = None;
    let started = Instant::now();
    let run = driver.run_iteration_until(&jobs, stop, STOP_GRACE, |j, o, result| {
        let mut g = lock();
        let (sum, emitter, done, host_done) = &mut *g;
        if last != Some(j) && started.elapsed() >= SLOW_ITERATION {
            hand_back(emitter, done, *host_done, &metrics.in_flight);
        }
        last = Some(j);
        let index = refs[j][o];
        let item = &plan.items[index as usize];
        let host = &plan.hosts[job_host[j] as usize];
        // An item with steps gets the answer in its own type: converted after them.
        let raw = plan.steps(item).is_some();
        let result = result.and_then(|v| {
            let vt = match raw {
                true => crate::snmp_convert::natural_type(&v),
                false => item.value_type,
            };
            crate::snmp_convert::convert(&v, vt)
        });
        deliver(
            sum,
            emitter,
            Sample::new(plan, host, index, clock_now(), result),
        );
        left[j] -= 1;
        if left[j] == 0 {
            done.dues.extend_from_slice(&job_dues[j]);
            done.weight += jobs[j].oids.len() as i64;
        }
    });
    let report = with_ticks(run, SLOW_ITERATION, || {
        let mut g = lock();
        let (_, emitter, done, host_done) = &mut *g;
        hand_back(emitter, done, *host_done, &metrics.in_flight);
    })
    .await;
    let (_, _, done, _) = state.into_inner().unwrap_or_else(|e| e.into_inner());
    metrics.in_flight.add(done.handed - oids as i64);
    let st = &report.stats;
    metrics.unmatched.add(
        st.unknown_request_id
            + st.stale
            + st.wrong_source
            + st.wrong_community
            + st.wrong_version
            + st.not_authentic,
    );
    metrics.malformed.add(st.malformed + st.not_response);
    metrics.snmpv3_discoveries.add(st.discoveries);
    metrics.snmp_renamed_values.add(st.renamed);
    metrics.icmp_errors.add(st.unreachable);
    for (c, n) in
        metrics
            .snmp_size_cuts
            .iter()
            .zip([st.too_big, st.short_responses, st.silent_too_big])
    {
        c.add(n);
    }
    for (c, n) in metrics.snmpv3_reports.iter().zip(st.refusals) {
        c.add(n);
    }
    emitter.flush();
    metrics.account(&sum);
    sum
}

/// The drivers an engine loop runs its iterations on: one iteration per driver at a
/// time, so the pool size is how many iterations of the engine may overlap.
pub enum Drivers {
    Icmp(Vec<IcmpDriver>),
    Snmp(SnmpDrivers),
}

/// The SNMP engine's drivers. An SNMP iteration lasts until its slowest host is done
/// (its other hosts are rescheduled as they finish, see [`snmp_iteration`]), so a few
/// slow devices could hold every driver while the rest of the network comes due. When
/// every driver is busy, the newest iteration has run past [`SLOW_ITERATION`] and work
/// is due, an extra driver takes it: an idle extra, or a new one from `open`, at most
/// `extra` of them; never while the samples' channel is full (drivers held by the
/// sink's backpressure, not by slow devices). Extras are kept for the next time (with what they learned of the
/// agents) but used only then: while the base drivers keep up, iterations stay few and
/// large.
pub struct SnmpDrivers {
    pub base: Vec<SnmpDriver>,
    pub extra: usize,
    pub open: Box<dyn FnMut() -> std::io::Result<SnmpDriver> + Send>,
}

enum Slot {
    Icmp(IcmpDriver),
    // Boxed: a slot moves through the pool channel every iteration, at the size of its
    // largest variant.
    Snmp(Box<SnmpDriver>),
}

/// An iteration of the engine panicked (a bug): its driver and the items it had taken
/// are gone, so the engine stops instead of polling on with less and less.
#[derive(Debug, thiserror::Error)]
#[error("{engine} iteration panicked: {why}")]
pub struct EngineFailed {
    pub engine: &'static str,
    pub why: String,
}

/// Run one engine's loop until `shutdown` turns true; returns after the running
/// iterations ended. An iteration that panics ends the loop too: the other running
/// iterations end as at a stop (within [`STOP_GRACE`]) and their values are handed on,
/// then [`EngineFailed`].
pub async fn run_engine(
    shared: Arc<Shared>,
    engine: Engine,
    drivers: Drivers,
    tx: mpsc::Sender<Samples>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), EngineFailed> {
    let (pool_tx, mut pool_rx) = mpsc::unbounded_channel::<Slot>();
    let (slots, mut extras) = match drivers {
        Drivers::Icmp(v) => (v.into_iter().map(Slot::Icmp).collect::<Vec<_>>(), None),
        Drivers::Snmp(d) => (
            d.base
                .into_iter()
                .map(|d| Slot::Snmp(Box::new(d)))
                .collect(),
            (d.extra > 0).then(|| Extras {
                idle: Vec::new(),
                opened: 0,
                max: d.extra,
                open: d.open,
                tx: tx.clone(),
                not_before: Instant::now(),
            }),
        ),
    };
    let total_slots = slots.len();
    for s in slots {
        let _ = pool_tx.send(s);
    }
    let mut running = tokio::task::JoinSet::new();
    let mut emitters: Vec<Emitter> = (0..total_slots)
        .map(|_| Emitter::new(tx.clone(), shared.pipeline.clone()))
        .collect();
    drop(tx);
    let mut failed: Option<String> = None;
    // Stops the running iterations, as the daemon's stop does, once one has failed: the
    // engine says so within STOP_GRACE, not when its slowest iteration ends (an SNMP
    // iteration has no deadline), polling nothing more meanwhile.
    let (abort_tx, abort_rx) = watch::channel(false);
    // When the newest running iteration started (see `SnmpDrivers`).
    let mut last_start = Instant::now();
    loop {
        if *shutdown.borrow() || failed.is_some() {
            break;
        }
        // Sleep until the earliest due slot (or a reload / shutdown). Listening for a
        // wake-up starts before the queues are read: `notify_waiters` wakes only
        // listeners already there, and a reload between the two would go unheard.
        let woken = shared.wake.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let now = shared.clock.now_ms();
        let wait = match shared.scheduler.next_due(engine) {
            Some(due) if due <= now => Duration::ZERO,
            Some(due) => Duration::from_millis(due - now),
            None => Duration::from_secs(3600),
        };
        if !wait.is_zero() {
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = woken => continue,
                // A dropped sender stops the loop too (as it does the iterations):
                // `changed` would be ready again at once, and the loop spin.
                changed = shutdown.changed() => match changed {
                    Ok(()) => continue,
                    Err(_) => break,
                },
                Some(r) = running.join_next(), if !running.is_empty() => {
                    failed = reap(r, &mut emitters, (&pool_tx, &mut extras)).err();
                    continue;
                }
            }
        }
        // A free driver: an ICMP sweep ends within its deadline; an SNMP iteration when
        // its slowest host is done (its other hosts are rescheduled as they finish).
        let slot = loop {
            let grow_at = extras
                .as_ref()
                .filter(|x| !x.idle.is_empty() || x.opened < x.max)
                .map(|x| (last_start + SLOW_ITERATION).max(x.not_before));
            tokio::select! {
                // A base driver first: extras only while none is free.
                biased;
                s = pool_rx.recv() => break s.map(|s| (s, false)),
                Some(r) = running.join_next(), if !running.is_empty() => {
                    if let Err(why) = reap(r, &mut emitters, (&pool_tx, &mut extras)) {
                        failed = Some(why);
                        break None;
                    }
                }
                changed = shutdown.changed() => if changed.is_err() || *shutdown.borrow() { break None },
                _ = tokio::time::sleep_until(grow_at.unwrap_or(last_start)), if grow_at.is_some() => {
                    let x = extras.as_mut().expect("grow_at needs extras");
                    if let Some(s) = x.take(&shared, &mut emitters) {
                        break Some((s, true));
                    }
                }
            }
        };
        let Some((slot, extra)) = slot else { break };
        let Some(mut emitter) = emitters.pop() else {
            put_back(slot, extra, &pool_tx, &mut extras);
            continue;
        };
        // Backpressure: while the sink is behind, this engine takes no new work.
        if emitter.parked() > 0 && !emitter.drain().await {
            break;
        }
        let now = shared.clock.now_ms();
        let horizon = now + shared.limits.batch_window.as_millis() as u64;
        let (plan, dues) = shared.take(engine, horizon);
        if dues.is_empty() {
            put_back(slot, extra, &pool_tx, &mut extras);
            emitters.push(emitter);
            continue;
        }
        last_start = Instant::now();
        let shared2 = shared.clone();
        let stop_rx = shutdown.clone();
        let mut abort = abort_rx.clone();
        running.spawn(async move {
            #[cfg(debug_assertions)]
            test_failpoint(engine.as_str());
            let m = shared2.metrics(engine);
            // From when each task could be taken: a wait for its device is not lateness.
            let earliest = dues.iter().map(|d| d.ready_ms).min().unwrap_or(now);
            let lateness = Duration::from_millis(now.saturating_sub(earliest));
            m.lateness_seconds.observe(lateness.as_secs_f64());
            let started = Instant::now();
            // Dues are completed (rescheduled) once each: by host as they finish
            // (a slow iteration), the rest when the iteration ends.
            let mut completed = vec![false; dues.len()];
            let mut skipped = 0;
            let mut complete = |i: usize| {
                if !std::mem::replace(&mut completed[i], true) {
                    let done = shared2.clock.now_ms();
                    skipped += shared2.scheduler.complete(dues[i], done).skipped();
                }
            };
            // Hosts done before the iteration ends (a slow one), rescheduled then.
            let mut host_done = |idxs: &[usize]| {
                idxs.iter().for_each(|&i| complete(i));
                shared2.wake.notify_waiters();
            };
            let mut stop = stop_rx;
            let stop = async move {
                // A dropped sender (the daemon ending) stops it too.
                tokio::select! {
                    _ = stop.wait_for(|s| *s) => {}
                    _ = abort.wait_for(|a| *a) => {}
                }
            };
            let (mut sum, slot) = match slot {
                Slot::Icmp(mut d) => {
                    let s =
                        icmp_iteration(&mut d, &plan, &dues, m, &mut emitter, &mut host_done, stop)
                            .await;
                    (s, Slot::Icmp(d))
                }
                Slot::Snmp(mut d) => {
                    let s =
                        snmp_iteration(&mut d, &plan, &dues, m, &mut emitter, &mut host_done, stop)
                            .await;
                    (s, Slot::Snmp(d))
                }
            };
            sum.wall = started.elapsed();
            sum.lateness = lateness;
            m.iterations.inc();
            m.iteration_seconds.observe(sum.wall.as_secs_f64());
            // The samples in the channel before their hosts can be polled again, by
            // another iteration whose samples would otherwise overtake them (states,
            // change steps and trends take them in order).
            emitter.drain().await;
            (0..dues.len()).for_each(&mut complete);
            m.skipped_slots.add(skipped);
            shared2.wake.notify_waiters();
            if lateness > shared2.limits.late_after {
                m.late_iterations.inc();
                tracing::warn!(
                    engine = engine.as_str(),
                    hosts = sum.hosts,
                    items = sum.items,
                    lateness_s = lateness.as_secs_f64(),
                    skipped_slots = skipped,
                    "iteration started late: the poller is not keeping up with its schedule"
                );
            }
            // The hosts an ICMP error came back for: counted, the first named (a
            // router saying a subnet is unreachable is news; the metric counts them).
            let first_icmp_error = sum.first_icmp_error(&plan);
            tracing::info!(
                engine = engine.as_str(),
                hosts = sum.hosts,
                items = sum.items,
                values = sum.values,
                errors = sum.errors_by.iter().sum::<usize>(),
                wall_s = format_args!("{:.3}", sum.wall.as_secs_f64()),
                lateness_s = format_args!("{:.3}", lateness.as_secs_f64()),
                icmp_errors = (!sum.icmp_errors.is_empty()).then_some(sum.icmp_errors.len()),
                first_icmp_error,
                "iteration"
            );
            // The driver goes back with the emitter, when the loop reaps this
            // iteration: a driver back in the pool before its emitter was taken by the
            // loop with work due, which found no emitter, put it back and took it
            // again, never reaping (the engine spun and polled nothing more).
            (emitter, slot, extra)
        });
    }
    // Shutdown: no new work; let running iterations reach their deadline and flush.
    if failed.is_some() {
        abort_tx.send_replace(true);
    }
    while let Some(r) = running.join_next().await {
        if let Err(why) = reap(r, &mut emitters, (&pool_tx, &mut extras)) {
            failed.get_or_insert(why);
        }
    }
    for mut e in emitters {
        e.drain().await;
    }
    match failed {
        None => Ok(()),
        Some(why) => Err(EngineFailed {
            engine: engine.as_str(),
            why,
        }),
    }
}

/// A driver not used after all: back to the pool, or an extra one to the idle extras.
fn put_back(
    slot: Slot,
    extra: bool,
    pool: &mpsc::UnboundedSender<Slot>,
    extras: &mut Option<Extras>,
) {
    match (extra, extras.as_mut()) {
        (true, Some(x)) => x.idle.push(slot),
        _ => drop(pool.send(slot)),
    }
}

/// Extra SNMP drivers (see [`SnmpDrivers`]).
struct Extras {
    idle: Vec<Slot>,
    opened: usize,
    max: usize,
    open: Box<dyn FnMut() -> std::io::Result<SnmpDriver> + Send>,
    /// For the emitters of new extras.
    tx: mpsc::Sender<Samples>,
    /// No extra is taken before then: the channel was full at the last try.
    not_before: Instant,
}

impl Extras {
    /// An idle extra driver, or a new one (with an emitter of its own added to
    /// `emitters`); `None` when none may be opened.
    /// Not while the channel is full: the base drivers are then held by iterations
    /// whose samples wait for the sink (see [`Emitter::drain`]), not by slow devices,
    /// and an extra would only take more work for the sink; tried again
    /// [`SLOW_ITERATION`] later.
    fn take(&mut self, shared: &Shared, emitters: &mut Vec<Emitter>) -> Option<Slot> {
        if self.tx.capacity() == 0 {
            self.not_before = Instant::now() + SLOW_ITERATION;
            return None;
        }
        if let Some(s) = self.idle.pop() {
            return Some(s);
        }
        if self.opened >= self.max {
            return None;
        }
        self.opened += 1;
        match (self.open)() {
            Ok(d) => {
                tracing::info!(
                    extra = self.opened,
                    max = self.max,
                    "every SNMP iteration is held by slow devices: another one takes the due work"
                );
                emitters.push(Emitter::new(self.tx.clone(), shared.pipeline.clone()));
                shared.metrics(Engine::Snmp).snmp_extra_drivers.add(1);
                Some(Slot::Snmp(Box::new(d)))
            }
            Err(e) => {
                // Not again: the base drivers go on alone.
                self.max = self.opened - 1;
                tracing::warn!(error = %e, "cannot open another SNMP driver for slow devices");
                None
            }
        }
    }
}

/// Takes back the emitter and the driver of an iteration that ended (a base driver to
/// the pool, an extra one to the idle extras), together: the loop never finds a driver
/// without an emitter for it. `Err` with the panic's message when it panicked (its
/// emitter, driver and taken items are lost with it).
fn reap(
    r: Result<(Emitter, Slot, bool), tokio::task::JoinError>,
    emitters: &mut Vec<Emitter>,
    (pool, extras): (&mpsc::UnboundedSender<Slot>, &mut Option<Extras>),
) -> Result<(), String> {
    match r {
        Ok((e, slot, extra)) => {
            emitters.push(e);
            put_back(slot, extra, pool, extras);
            Ok(())
        }
        Err(e) => Err(match e.try_into_panic() {
            Ok(p) => p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".into()),
            Err(e) => e.to_string(),
        }),
    }
}

/// Debug builds only, for the tests of what the daemon does when a part of it panics:
/// with `NETPOLLER_TEST_PANIC=<name>` (`icmp`, `snmp`: an engine's iterations;
/// `consumer`: the sink consumer's batches), every call of the failpoint `name` but the
/// first panics.
#[cfg(debug_assertions)]
pub fn test_failpoint(name: &str) {
    static SEEN: AtomicU64 = AtomicU64::new(0);
    let wanted = std::env::var("NETPOLLER_TEST_PANIC").is_ok_and(|v| v == name);
    if wanted && SEEN.fetch_add(1, Ordering::Relaxed) > 0 {
        panic!("NETPOLLER_TEST_PANIC={name}");
    }
}

/// Poll every task of `plan` once (for `poll-once`): all ICMP tasks in sweeps of at
/// most `limits.icmp_batch_hosts` hosts, all SNMP tasks in iterations of at most
/// `limits.snmp_batch_requests` OIDs, the two engines side by side. Returns the hosts
/// an ICMP error came back for ([`IterationSummary::icmp_errors`]), in the order
/// their sweeps ended.
pub async fn poll_once(
    plan: Arc<Plan>,
    icmp: Option<IcmpDriver>,
    snmp: Option<SnmpDriver>,
    limits: Limits,
    tx: mpsc::Sender<Samples>,
    counters: Arc<PipelineCounters>,
) -> Result<Vec<(u32, icmp::Unreachable)>, ItemError> {
    let icmp_metrics = EngineMetrics::default();
    let snmp_metrics = EngineMetrics::default();
    let all = |engine: Engine| -> Vec<Due> {
        plan.tasks
            .iter()
            .enumerate()
            .filter(|(_, t)| t.engine == engine)
            .map(|(i, _)| Scheduler::one_shot(i as u32))
            .collect()
    };
    let icmp_dues = all(Engine::Icmp);
    let snmp_dues = all(Engine::Snmp);
    let mut e1 = Emitter::new(tx.clone(), counters.clone());
    let mut e2 = Emitter::new(tx, counters);
    let icmp_fut = async {
        let mut errors = Vec::new();
        if icmp_dues.is_empty() {
            return Ok(errors);
        }
        let Some(mut d) = icmp else {
            return Err(ItemError::new(ErrorReason::Send, "no ICMP socket"));
        };
        for chunk in icmp_dues.chunks(limits.icmp_batch_hosts.max(1) as usize) {
            let never = std::future::pending();
            let sum = icmp_iteration(
                &mut d,
                &plan,
                chunk,
                &icmp_metrics,
                &mut e1,
                &mut |_| {},
                never,
            )
            .await;
            errors.extend(sum.icmp_errors);
            e1.drain().await;
        }
        Ok(errors)
    };
    let snmp_fut = async {
        if snmp_dues.is_empty() {
            return Ok(());
        }
        let Some(mut d) = snmp else {
            return Err(ItemError::new(ErrorReason::Send, "no SNMP socket"));
        };
        // Iterations of at most `snmp_batch_requests` OIDs (one task more if alone).
        let mut batches: Vec<Vec<Due>> = vec![Vec::new()];
        let mut cost = 0u64;
        for due in &snmp_dues {
            let c = plan.tasks[due.task as usize].items.len() as u64;
            if cost + c > limits.snmp_batch_requests
                && batches.last().is_some_and(|b| !b.is_empty())
            {
                batches.push(Vec::new());
                cost = 0;
            }
            batches.last_mut().expect("one batch at least").push(*due);
            cost += c;
        }
        for batch in batches.iter().filter(|b| !b.is_empty()) {
            snmp_iteration(
                &mut d,
                &plan,
                batch,
                &snmp_metrics,
                &mut e2,
                &mut |_| {},
                std::future::pending(),
            )
            .await;
            e2.drain().await;
        }
        Ok(())
    };
    let (a, b) = tokio::join!(icmp_fut, snmp_fut);
    b.and(a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{HostSpec, ItemSpec, SnmpParams, SnmpVersion};
    use crate::scheduler::next_slot_after;
    use crate::snmp_driver::SnmpDriverOptions;

    /// An SNMP host `name` at `ip`, port 16161 (nothing listens: every poll times out
    /// after 100 ms), one item every second.
    fn silent_snmp_host(name: &str, ip: [u8; 4]) -> HostSpec {
        HostSpec {
            name: name.into(),
            ip: std::net::IpAddr::from(ip),
            snmp: Some(Arc::new(SnmpParams {
                version: SnmpVersion::V2c,
                community: "public".into(),
                usm: None,
                port: 16161,
                timeout: Duration::from_millis(100),
                retries: 0,
                max_oids_per_request: 16,
                max_inflight_per_host: 1,
            })),
            items: vec![ItemSpec {
                itemid: crate::plan::derive_itemid(name, "k"),
                key: "k".into(),
                value_type: crate::value::ValueType::Uint,
                interval_ms: 1_000,
                kind: ItemKind::Snmp {
                    oid: snmp::Oid::from_arcs(&[1, 3, 6, 1, 2, 1, 1, 3, 0]).unwrap(),
                },
                pre: None,
            }],
        }
    }

    fn snmp_driver() -> std::io::Result<SnmpDriver> {
        SnmpDriver::open(SnmpDriverOptions {
            sockets: 1,
            source: std::net::IpAddr::from([127, 0, 45, 1]).into(),
            ..SnmpDriverOptions::default()
        })
    }

    /// Every task of `plan` due once.
    fn all_due(plan: &Plan) -> Vec<Due> {
        (0..plan.tasks.len() as u32)
            .map(Scheduler::one_shot)
            .collect()
    }

    /// One SNMP iteration of every task of `plan`, to its end.
    async fn poll_all_once(
        driver: &mut SnmpDriver,
        plan: &Plan,
        metrics: &EngineMetrics,
        emitter: &mut Emitter,
    ) -> IterationSummary {
        let dues = all_due(plan);
        let pending = std::future::pending();
        snmp_iteration(driver, plan, &dues, metrics, emitter, &mut |_| {}, pending).await
    }

    /// An emitter whose samples a task reads and drops: drop the emitter, then await
    /// the task.
    fn drained_emitter() -> (Emitter, tokio::task::JoinHandle<()>) {
        let (tx, mut rx) = mpsc::channel(16);
        let reader = tokio::spawn(async move { while rx.recv().await.is_some() {} });
        (Emitter::new(tx, Arc::default()), reader)
    }

    /// A reload that removes a host: the SNMP driver forgets what it knew of its
    /// address (kept for as long as the daemon ran: a driver's memory is per address,
    /// and nothing pruned it), and keeps what it knew of the host still polled.
    #[tokio::test(flavor = "current_thread")]
    async fn a_reload_forgets_the_removed_hosts_and_only_them() {
        let kept = silent_snmp_host("kept", [127, 0, 50, 11]);
        let removed = silent_snmp_host("removed", [127, 0, 50, 12]);
        let a_kept = std::net::SocketAddr::new(kept.ip, 16161);
        let a_removed = std::net::SocketAddr::new(removed.ip, 16161);
        let user = Arc::new(snmp::v3::UsmUser::new("np-user", None, None).unwrap());
        let mut driver = SnmpDriver::open(SnmpDriverOptions {
            sockets: 1,
            source: std::net::IpAddr::from([127, 0, 50, 1]).into(),
            ..SnmpDriverOptions::default()
        })
        .unwrap();
        for a in [a_kept, a_removed] {
            let engine =
                snmp::v3::Engine::new(user.clone(), b"engine", 1, 1, std::time::Instant::now());
            driver.memory_mut().remember_engine(a, engine);
        }
        let (mut emitter, reader) = drained_emitter();
        let metrics = EngineMetrics::default();
        let before = Plan::build(vec![kept.clone(), removed]);
        let after = Plan::build(vec![kept]);
        for (plan, removed_known) in [(&before, true), (&after, false)] {
            poll_all_once(&mut driver, plan, &metrics, &mut emitter).await;
            let memory = driver.memory();
            assert!(memory.engine(&a_kept).is_some(), "the polled host's engine");
            assert_eq!(memory.engine(&a_removed).is_some(), removed_known);
        }
        drop(emitter);
        reader.await.unwrap();
    }

    /// One SNMP iteration (from 127.0.194.1) over one host of one item at `ip`:`port`:
    /// its summary and the engine's metrics.
    async fn poll_one_host(ip: [u8; 4], port: u16) -> (IterationSummary, EngineMetrics) {
        let mut host = silent_snmp_host("h", ip);
        Arc::make_mut(host.snmp.as_mut().unwrap()).port = port;
        let plan = Plan::build(vec![host]);
        let (mut emitter, reader) = drained_emitter();
        let metrics = EngineMetrics::default();
        let mut driver = SnmpDriver::open(SnmpDriverOptions {
            sockets: 1,
            source: std::net::IpAddr::from([127, 0, 194, 1]).into(),
            ..SnmpDriverOptions::default()
        })
        .unwrap();
        let sum = poll_all_once(&mut driver, &plan, &metrics, &mut emitter).await;
        drop(emitter);
        reader.await.unwrap();
        (sum, metrics)
    }

    /// An agent on 127.0.194.10 that names each OID it answers with one more arc (a
    /// firmware bug): its item's value is taken, as Zabbix takes it, and
    /// `netpoller_snmp_renamed_values_total` counts it, for an operator to find such
    /// agents (Zabbix says so at debug level only).
    #[tokio::test(flavor = "current_thread")]
    async fn a_value_answered_under_another_oid_is_taken_and_counted() {
        const TICKS: snmp::ValueRef<'static> = snmp::ValueRef::TimeTicks(42);
        let agent = std::net::UdpSocket::bind("127.0.194.10:0").unwrap();
        agent
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let port = agent.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            while let Ok((n, from)) = agent.recv_from(&mut buf) {
                let Ok(m) = snmp::Message::decode(&buf[..n]) else {
                    continue;
                };
                let renamed: Vec<snmp::Oid> = m
                    .varbinds()
                    .map(|vb| format!("{}.0", vb.oid).parse().unwrap())
                    .collect();
                let mut out = Vec::new();
                let answer = renamed.iter().map(|o| (o.as_ref(), TICKS));
                snmp::encode_response(&mut out, &m, answer);
                let _ = agent.send_to(&out, from);
            }
        });
        let (sum, metrics) = poll_one_host([127, 0, 194, 10], port).await;
        assert_eq!((sum.items, sum.values), (1, 1), "{:?}", sum.errors_by);
        assert_eq!(metrics.snmp_renamed_values.get(), 1);
    }

    /// A host whose agent is not running (a closed port on 127.0.194.11: loopback
    /// answers with an ICMP port unreachable): its item times out (its text naming the
    /// error: the driver's tests) and `netpoller_snmp_icmp_errors_total` counts the
    /// error, for an operator to see a fleet's closed ports apart from its silent hosts.
    #[tokio::test(flavor = "current_thread")]
    async fn an_icmp_error_is_counted_and_named_in_the_items_error() {
        let closed = std::net::UdpSocket::bind("127.0.194.11:0").unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        let (sum, metrics) = poll_one_host([127, 0, 194, 11], port).await;
        assert_eq!((sum.items, sum.values), (1, 0));
        assert_eq!(sum.errors_by[ErrorReason::Timeout as usize], 1);
        assert_eq!(metrics.icmp_errors.get(), 1);
    }

    /// The sink behind (the channel full, nothing read): the only base driver's
    /// iteration waits for channel room at its end. That is backpressure, not slow
    /// devices: the engine took an extra driver for the work that came due meanwhile,
    /// and another every 200 ms up to the limit, each polling more for a sink that
    /// could not take it (and the gauge and the log blamed slow devices).
    #[tokio::test(flavor = "current_thread")]
    async fn a_full_channel_opens_no_extra_snmp_drivers() {
        let plan = Plan::build(
            (0..4)
                .map(|i| silent_snmp_host(&format!("h{i}"), [127, 0, 45, 11 + i]))
                .collect(),
        );
        let limits = Limits {
            batch_window: Duration::ZERO,
            ..Limits::default()
        };
        let shared = Shared::new(plan, 1, Clock::new(), limits);
        let (tx, mut rx) = mpsc::channel(1);
        tx.try_send(Vec::new()).unwrap(); // full
        let (stop_tx, stop_rx) = watch::channel(false);
        let drivers = Drivers::Snmp(SnmpDrivers {
            base: vec![snmp_driver().unwrap()],
            extra: 3,
            open: Box::new(snmp_driver),
        });
        let engine = tokio::spawn(run_engine(
            shared.clone(),
            Engine::Snmp,
            drivers,
            tx,
            stop_rx,
        ));
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        let extras = shared.snmp.snmp_extra_drivers.get();
        let iterations = shared.snmp.iterations.get();
        stop_tx.send(true).unwrap();
        while rx.recv().await.is_some() {}
        engine.await.unwrap().unwrap();
        assert_eq!(extras, 0, "extra drivers opened for a full channel");
        assert_eq!(iterations, 1, "iterations polled for a full channel");
    }

    /// A host handed back early (done, rescheduled) while a slower host holds its
    /// SNMP iteration is no longer in flight: the gauge counted its OIDs until the
    /// iteration ended, and again when another iteration polled it meanwhile.
    #[tokio::test(flavor = "current_thread")]
    async fn hosts_handed_back_leave_the_in_flight_gauge() {
        let mut quick = silent_snmp_host("quick", [127, 0, 45, 21]);
        let mut slow = silent_snmp_host("slow", [127, 0, 45, 22]);
        for (h, ms) in [(&mut quick, 300), (&mut slow, 2_000)] {
            let p = Arc::make_mut(h.snmp.as_mut().unwrap());
            p.timeout = Duration::from_millis(ms);
        }
        let plan = Plan::build(vec![quick, slow]);
        let dues = all_due(&plan);
        let (mut emitter, reader) = drained_emitter();
        let metrics = EngineMetrics::default();
        let mut driver = snmp_driver().unwrap();
        let mut handed = Vec::new();
        let seen;
        {
            let mut host_done = |idxs: &[usize]| handed.extend_from_slice(idxs);
            let iteration = snmp_iteration(
                &mut driver,
                &plan,
                &dues,
                &metrics,
                &mut emitter,
                &mut host_done,
                std::future::pending(),
            );
            tokio::pin!(iteration);
            tokio::select! {
                _ = &mut iteration => panic!("the slow host's timeout is 2 s"),
                () = tokio::time::sleep(Duration::from_millis(1_200)) => {
                    seen = metrics.in_flight.get();
                }
            }
            iteration.await;
        }
        drop(emitter);
        reader.await.unwrap();
        assert_eq!(handed.len(), 1, "the quick host handed back early");
        assert_eq!(seen, 1, "OIDs in flight while only the slow host is");
        assert_eq!(metrics.in_flight.get(), 0);
    }

    /// An iteration panics (a bug) while another runs a slow device's requests: the
    /// engine fails, but said so only once that other iteration had ended on its own
    /// (an SNMP iteration has no deadline: here a 60 s timeout), polling nothing more
    /// meanwhile and the daemon not restarted. The running iterations now end as at a
    /// stop, within STOP_GRACE.
    #[tokio::test(flavor = "current_thread")]
    async fn a_failed_iteration_stops_the_others_within_the_grace() {
        let mut slow = silent_snmp_host("slow", [127, 0, 45, 41]);
        Arc::make_mut(slow.snmp.as_mut().unwrap()).timeout = Duration::from_secs(60);
        let broken = silent_snmp_host("broken", [127, 0, 45, 42]);
        let mut plan = Plan::build(vec![slow, broken]);
        let clock = Clock::new();
        let now = clock.now_ms();
        for t in &mut plan.tasks {
            let host = &*plan.hosts[t.host as usize].name;
            // The slow host first, the broken one 300 ms later.
            let offset = if host == "slow" { 100 } else { 400 };
            t.phase_ms = (now + offset) % t.interval_ms;
            if host == "broken" {
                // An item past the plan's: its iteration panics (index out of bounds).
                t.items = 1_000..1_001;
            }
        }
        let limits = Limits {
            batch_window: Duration::ZERO,
            ..Limits::default()
        };
        let shared = Shared::new(plan, 1, clock, limits);
        let (tx, mut rx) = mpsc::channel(16);
        let reader = tokio::spawn(async move { while rx.recv().await.is_some() {} });
        let (_stop_tx, stop_rx) = watch::channel(false);
        let drivers = Drivers::Snmp(SnmpDrivers {
            base: vec![snmp_driver().unwrap(), snmp_driver().unwrap()],
            extra: 0,
            open: Box::new(snmp_driver),
        });
        let t0 = Instant::now();
        let r = run_engine(shared, Engine::Snmp, drivers, tx, stop_rx).await;
        let took = t0.elapsed();
        reader.await.unwrap();
        assert!(r.is_err(), "{r:?}");
        assert!(
            took < Duration::from_secs(30),
            "the failure was reported after {took:?}"
        );
    }

    /// The stop's sender dropped without a stop (the daemon's start failing after the
    /// first engines were started, returning through `?`): the loop's `changed()` was
    /// ready at once, every time, and the loop spun on a core without ever returning.
    /// It stops, as the iterations do.
    #[test]
    fn a_dropped_stop_sender_ends_the_engine_loop() {
        let shared = Shared::new(Plan::build(Vec::new()), 1, Clock::new(), Limits::default());
        let (tx, _rx) = mpsc::channel(1);
        let (stop_tx, stop_rx) = watch::channel(false);
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let r = rt.block_on(run_engine(
                shared,
                Engine::Icmp,
                Drivers::Icmp(Vec::new()),
                tx,
                stop_rx,
            ));
            let _ = done_tx.send(r.is_ok());
        });
        std::thread::sleep(Duration::from_millis(100));
        drop(stop_tx);
        let ended = done_rx.recv_timeout(Duration::from_secs(10));
        assert_eq!(ended, Ok(true), "the engine loop did not end");
    }

    /// A reload runs on a thread of its own while the consumer, seeing the generation
    /// move, takes the plans replaced: the plan a reload replaced is among them as soon
    /// as the generation has moved. It was listed after, so the consumer could miss it,
    /// and forgot the items the reload removed while an iteration of that plan still
    /// delivered. Here the reload's thread is held where it lists the plan (the test
    /// holds the list's lock until the thread sleeps on it): the generation must not
    /// have moved yet.
    #[test]
    fn the_generation_moves_once_the_replaced_plan_is_listed() {
        let shared = Shared::new(Plan::build(Vec::new()), 1, Clock::new(), Limits::default());
        let generation = shared.generation();
        let list = shared.replaced.lock().unwrap();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let reloading = std::thread::scope(|scope| {
            let reload = scope.spawn(|| {
                // SAFETY: gettid has no arguments and cannot fail.
                tid_tx.send(unsafe { libc::gettid() }).unwrap();
                shared.reload(Plan::build(Vec::new()));
            });
            let tid = tid_rx.recv().unwrap();
            // Sleeping (on the list's lock: nothing else in a reload waits), or done.
            let stat = format!("/proc/self/task/{tid}/stat");
            let sleeping = || match std::fs::read_to_string(&stat) {
                Ok(s) => s
                    .rsplit_once(')')
                    .is_some_and(|(_, rest)| rest.trim_start().starts_with('S')),
                Err(_) => true,
            };
            while !(sleeping() || reload.is_finished()) {
                std::thread::yield_now();
            }
            let moved = shared.generation() != generation;
            let listed = list.len();
            drop(list);
            reload.join().unwrap();
            (moved, listed)
        });
        assert_eq!(
            reloading,
            (false, 0),
            "the generation moved before the plan was listed"
        );
        assert_ne!(shared.generation(), generation);
        assert_eq!(shared.take_replaced().len(), 1);
    }

    /// `silent_snmp_host` at `ip` with a second item every 2 s: two tasks of one device,
    /// polled one after the other.
    fn silent_host_with_two_intervals(name: &str, ip: [u8; 4]) -> HostSpec {
        let mut h = silent_snmp_host(name, ip);
        let mut two = h.items[0].clone();
        two.itemid = crate::plan::derive_itemid(name, "k2");
        two.key = "k2".into();
        two.interval_ms = 2_000;
        h.items.push(two);
        h
    }

    /// A slow device with items every 1 s and 2 s: one task's poll runs 40 s, the
    /// other's slot passes meanwhile (it waits for the device; counted as due, it
    /// fired the alert on `netpoller_scheduler_due`). When the poll is done, the one
    /// that waited read as the engine 40 s behind (`/healthz` 503) until it was taken:
    /// it is due from then, not from its slot.
    #[tokio::test(start_paused = true)]
    async fn a_task_that_waited_for_its_device_is_not_the_engine_behind() {
        let plan = Plan::build(vec![silent_host_with_two_intervals(
            "slow",
            [127, 0, 153, 1],
        )]);
        let clock = Clock::new();
        let shared = Shared::new(plan, 1, clock, Limits::default());
        let s = &shared.scheduler;
        let first = s.next_due(Engine::Snmp).unwrap();
        tokio::time::advance(Duration::from_millis(first - clock.now_ms())).await;
        let mut running = Vec::new();
        // A batch full after one: the other task of the device is left to wait.
        s.take_due(Engine::Snmp, clock.now_ms(), 1, |_| 1, &mut running);
        assert_eq!(running.len(), 1);
        tokio::time::advance(Duration::from_secs(40)).await;
        let mut out = Vec::new();
        s.take_due(Engine::Snmp, clock.now_ms(), u64::MAX, |_| 1, &mut out);
        assert!(out.is_empty(), "{out:?} while the device is polled");
        assert_eq!(shared.health(Duration::from_secs(30)), Ok(()));
        // Not counted as due (the alert "the engine is behind"), but as waiting.
        let mut text = Exposition::new();
        shared.render(&mut text);
        let text = text.finish();
        for (gauge, n) in [("due", "0"), ("waiting", "1")] {
            let line = format!("netpoller_scheduler_{gauge}{{engine=\"snmp\",shard=\"0\"}} {n}");
            assert!(text.lines().any(|l| l == line), "no {line} in\n{text}");
        }
        s.complete(running[0], clock.now_ms());
        assert_eq!(shared.health(Duration::from_secs(30)), Ok(()));
    }

    /// The same device in the engine, really polled (nothing answers; a 2.5 s timeout):
    /// the task that waited for the other's poll, up to 1.5 s past its slot, is taken
    /// as soon as the device is free. Its iteration was logged and counted as started
    /// late ("the poller is not keeping up with its schedule"), a slow device read as
    /// an engine overloaded; its cost is the slots it missed, counted as skipped.
    /// On tokio's paused clock, which the driver's timeouts follow too: time moves only
    /// while every task waits, so the engine takes the task when the device is free to
    /// the millisecond however slow the machine (on the real clock a starved test could
    /// start it a second late), and the test takes no real time waiting.
    #[tokio::test(start_paused = true)]
    async fn a_slow_device_with_two_intervals_makes_no_late_iteration() {
        let mut slow = silent_host_with_two_intervals("slow", [127, 0, 165, 2]);
        Arc::make_mut(slow.snmp.as_mut().unwrap()).timeout = Duration::from_millis(2_500);
        let plan = Plan::build(vec![slow]);
        let limits = Limits {
            batch_window: Duration::ZERO,
            ..Limits::default()
        };
        let clock = Clock::new();
        let two = plan.tasks.iter().find(|t| t.interval_ms == 2_000).unwrap();
        let first = next_slot_after(clock.now_ms(), 2_000, two.phase_ms);
        let shared = Shared::new(plan, 1, clock, limits);
        let (tx, mut rx) = mpsc::channel(16);
        let reader = tokio::spawn(async move { while rx.recv().await.is_some() {} });
        let (stop_tx, stop_rx) = watch::channel(false);
        let source = || {
            SnmpDriver::open(SnmpDriverOptions {
                sockets: 1,
                source: std::net::IpAddr::from([127, 0, 165, 1]).into(),
                ..SnmpDriverOptions::default()
            })
        };
        let drivers = Drivers::Snmp(SnmpDrivers {
            base: vec![source().unwrap(), source().unwrap()],
            extra: 0,
            open: Box::new(source),
        });
        // Both polled at `first` (to +2.5 s); the 1 s task alone at +3 s (to +5.5 s),
        // the 2 s task's slot +4 s passing meanwhile; it is polled at +5.5 s.
        let until = first + 6_000 - clock.now_ms();
        let stop = async move {
            tokio::time::sleep(Duration::from_millis(until)).await;
            stop_tx.send(true).unwrap();
        };
        let engine = run_engine(shared.clone(), Engine::Snmp, drivers, tx, stop_rx);
        let (ran, ()) = tokio::join!(engine, stop);
        ran.unwrap();
        reader.await.unwrap();
        let m = &shared.snmp;
        assert!(m.iterations.get() >= 3, "{} iterations", m.iterations.get());
        assert!(m.skipped_slots.get() > 0);
        assert_eq!(m.late_iterations.get(), 0, "late iterations");
    }

    /// The reload timestamp is read against wall clocks (alerts: "no reload took in a
    /// day"): stamped with the scheduler's clock, it was off by every step of the wall
    /// clock since the start (here, an hour of the scheduler's time that the wall clock
    /// did not see).
    #[tokio::test(start_paused = true)]
    async fn the_reload_timestamp_is_wall_time() {
        let shared = Shared::new(Plan::build(Vec::new()), 1, Clock::new(), Limits::default());
        tokio::time::advance(Duration::from_secs(3600)).await;
        shared.reload(Plan::build(Vec::new()));
        let mut out = Exposition::new();
        shared.render(&mut out);
        let text = out.finish();
        let stamped: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("netpoller_config_last_reload_success_timestamp_seconds "))
            .expect("the gauge")
            .parse()
            .unwrap();
        let wall = unix_ms() as f64 / 1000.0;
        assert!((wall - stamped).abs() < 60.0, "{stamped} against {wall}");
    }

    /// Every iteration's driver busy (one here) while work comes due: a slow host (silent,
    /// a 1.5 s timeout) holds the only driver while a quick one's 1 s slots come and pass.
    /// When the slow iteration ended, its driver came back to the engine's loop before its
    /// emitter (which the loop takes back only when it reaps the ended iteration); with
    /// work due, the loop took the driver, found no emitter, put the driver back and took
    /// it again, never reaping: the engine spun on one core and polled nothing more.
    #[tokio::test(flavor = "current_thread")]
    async fn an_engine_whose_drivers_were_all_busy_goes_on_polling() {
        let mut slow = silent_snmp_host("slow", [127, 0, 42, 21]);
        Arc::make_mut(slow.snmp.as_mut().unwrap()).timeout = Duration::from_millis(1_500);
        let plan = Plan::build(vec![slow, silent_snmp_host("quick", [127, 0, 42, 22])]);
        let limits = Limits {
            batch_window: Duration::ZERO,
            ..Limits::default()
        };
        let shared = Shared::new(plan, 1, Clock::new(), limits);
        let (tx, mut rx) = crate::engine::channel(4096);
        let quick = tokio::spawn(async move {
            let mut n = 0;
            while let Some(b) = rx.recv().await {
                n += b.iter().filter(|s| &*s.host == "quick").count();
            }
            n
        });
        let (stop_tx, stop_rx) = watch::channel(false);
        let drivers = Drivers::Snmp(SnmpDrivers {
            base: vec![snmp_driver().unwrap()],
            extra: 0,
            open: Box::new(snmp_driver),
        });
        let engine = tokio::spawn(run_engine(shared, Engine::Snmp, drivers, tx, stop_rx));
        tokio::time::sleep(Duration::from_secs(8)).await;
        stop_tx.send(true).unwrap();
        engine.await.unwrap().unwrap();
        // Polled every 1.5 to 2 s (it waits for the slow host's iterations): 4 or more.
        let n = quick.await.unwrap();
        assert!(n >= 3, "the quick host was polled {n} times in 8 s");
    }
}
