//! The running sink: the batcher task (rows → per-table batches → INSERT tasks or the
//! spool) and the replay task (spool → ClickHouse, oldest first).
//!
//! Invariants:
//! * A batch exists in exactly one place until ClickHouse confirms it: an INSERT task
//!   (which holds it across retries), the bounded ready queue, or the spool.
//! * HTTP INSERTs in flight (direct and replay together) never exceed
//!   `max_inflight_inserts` (one semaphore).
//! * Memory is bounded: at most `max_inflight_inserts` running plus
//!   `2 * max_inflight_inserts` queued batches; beyond that, and whenever ClickHouse is
//!   unhealthy, batches go straight to the spool.
//! * One spooled batch ClickHouse refuses for itself does not hold the replay of the
//!   spool behind it: it is passed over, and goes to the reject spool only once other
//!   batches of its table were stored between two passes that failed alike
//!   ([`Suspects`]).
//! * While unhealthy, the replay task is the probe: it retries the oldest spooled batch
//!   (or `SELECT 1` when the spool is empty) with capped exponential backoff; its first
//!   success makes the sink healthy again and direct inserts resume.

use crate::batch::{Batch, Limits, Pending};
use crate::metrics::{DropReason, ErrorClass, FlushTrigger, SinkMetrics};
use crate::row::{Row, Table};
use crate::spool::{self, Segment, Spool, SpoolError};
use crate::writer::{backoff, InsertError, Writer};
use crate::Health;
use bytes::Bytes;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{mpsc, watch, Notify, Semaphore};
use tokio::task::JoinSet;
use tokio::time::{sleep, sleep_until, Instant};

/// Messages on the sink's input channel.
pub(crate) enum Msg {
    One(Table, Row),
    Many(Vec<(Table, Row)>),
}

pub(crate) struct Shared {
    pub writer: Option<Writer>,
    pub spool: Mutex<Spool>,
    pub rejects: Option<Mutex<Spool>>,
    pub metrics: Arc<SinkMetrics>,
    pub health: Mutex<Health>,
    pub ch_ok: AtomicBool,
    pub inflight: Semaphore,
    /// The replayer has work: a batch went to the spool, or ClickHouse stopped
    /// answering (with an empty spool, the replayer is the one that probes it).
    pub replayer_wake: Notify,
    /// A spool (data or rejects) was appended to: the fsync task arms its timer.
    /// Nothing else wakes the daemon for fsyncs, so an idle daemon sleeps.
    pub spool_written: Notify,
    pub shutting_down: AtomicBool,
    /// Set by [`crate::Sink::shutdown`] once its grace is over: INSERTs still waiting
    /// for ClickHouse stop waiting (their batches are spooled or stay spooled).
    pub give_up: watch::Sender<bool>,
    /// `spool replay`, not a daemon: no new batches to spool while ClickHouse fails.
    pub one_shot: bool,
    /// Since when ClickHouse has been unavailable, for the log's reminders.
    pub outage: Mutex<Option<Outage>>,
    /// When ClickHouse last answered again after an outage: where a replay that
    /// waited for it through the outage begins ([`Shared::replay_began`]).
    pub back: Mutex<Option<Instant>>,
    /// Since when rows have been lost because a spool (data or rejects) cannot be
    /// written, for the log's reminders ([`spool_write_failed`]); ends when the health
    /// leaves `Failing` (a batch spooled or stored again).
    pub spool_loss: Mutex<Option<Outage>>,
    /// When the log last said that batches are spooled for an INSERT backlog
    /// ([`Shared::set_backlogged`]): at most once per [`OUTAGE_REMINDER`].
    pub backlog_logged: Mutex<Option<Instant>>,
    /// The INSERT tasks of a batcher that panicked (a bug), left running so that their
    /// batches are stored or spooled; the stop waits for them ([`join_orphans`]).
    pub orphans: Mutex<Option<InsertTasks>>,
    /// Tests: the batcher panics on a row of this item (a bug's stand-in).
    #[cfg(test)]
    pub panic_on_item: std::sync::atomic::AtomicU64,
}

/// How often a long outage is recalled in the log (with what it has spooled).
pub(crate) const OUTAGE_REMINDER: Duration = Duration::from_secs(300);

/// How often rows lost to a spool that cannot be written are recalled in the log
/// (each batch's loss is counted, not logged: one line per batch was a flood).
pub(crate) const LOSS_REMINDER: Duration = Duration::from_secs(60);

/// An outage as the log tells it (of ClickHouse, or of a spool that cannot be
/// written): one line when it starts, one every [`OUTAGE_REMINDER`] (or
/// [`LOSS_REMINDER`]) while it lasts, one when it ends, each with the rows spooled and
/// lost since it began.
#[derive(Debug)]
pub(crate) struct Outage {
    since: Instant,
    reminded: Instant,
    /// The spool's row counter when it began.
    spooled_before: u64,
    /// The lost rows' counter it reports ([`rows_lost`], or `spool_write`'s alone)
    /// when it began.
    dropped_before: u64,
}

impl Outage {
    fn new(now: Instant, spooled: u64, dropped: u64) -> Outage {
        Outage {
            since: now,
            reminded: now,
            spooled_before: spooled,
            dropped_before: dropped,
        }
    }

    /// How long it has lasted, when a reminder is due at `now` (then the next one is
    /// `every` later).
    fn remind(&mut self, now: Instant, every: Duration) -> Option<Duration> {
        (now.saturating_duration_since(self.reminded) >= every).then(|| {
            self.reminded = now;
            now.saturating_duration_since(self.since)
        })
    }
}

/// Rows the spool lost so far (its cap, appends that failed, records damaged or
/// deleted): what an outage of ClickHouse costs beyond what it spools.
fn rows_lost(m: &SinkMetrics) -> u64 {
    [
        DropReason::SpoolCap,
        DropReason::SpoolWrite,
        DropReason::Corrupt,
    ]
    .iter()
    .map(|r| m.dropped_rows(*r))
    .sum()
}

/// `d` in whole seconds, as humantime writes it (`5m 3s`).
fn whole_secs(d: Duration) -> humantime::FormattedDuration {
    humantime::format_duration(Duration::from_secs(d.as_secs()))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves the spool usable (its state is on disk).
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    pub fn new(
        writer: Option<Writer>,
        spool: Spool,
        rejects: Option<Spool>,
        metrics: Arc<SinkMetrics>,
        health: Health,
        max_inserts: usize,
    ) -> Shared {
        Shared {
            writer,
            spool: Mutex::new(spool),
            rejects: rejects.map(Mutex::new),
            metrics,
            health: Mutex::new(health),
            ch_ok: AtomicBool::new(true),
            inflight: Semaphore::new(max_inserts),
            replayer_wake: Notify::new(),
            spool_written: Notify::new(),
            shutting_down: AtomicBool::new(false),
            give_up: watch::channel(false).0,
            one_shot: false,
            outage: Mutex::new(None),
            back: Mutex::new(None),
            spool_loss: Mutex::new(None),
            backlog_logged: Mutex::new(None),
            orphans: Mutex::new(None),
            #[cfg(test)]
            panic_on_item: std::sync::atomic::AtomicU64::new(u64::MAX),
        }
    }

    pub fn health(&self) -> Health {
        lock(&self.health).clone()
    }

    fn set_ok(&self) {
        if !self.ch_ok.swap(true, Ordering::SeqCst) {
            *lock(&self.back) = Some(Instant::now());
            let m = &self.metrics;
            match lock(&self.outage).take() {
                // The rows lost too: "rows_spooled=409" alone, after 254 were lost to a
                // full disk, read as an outage that cost nothing. `rows_spooled` is what
                // this process spooled during the outage; what the replay has to load
                // includes what an earlier run left (whose rows are not counted before
                // they are read): `spool_bytes` is all of it.
                Some(o) => tracing::info!(
                    after = %whole_secs(o.since.elapsed()),
                    rows_spooled = m.spooled_rows().saturating_sub(o.spooled_before),
                    spool_bytes = m.spool_bytes(),
                    rows_dropped = rows_lost(m).saturating_sub(o.dropped_before),
                    "sink: ClickHouse accepts inserts again; the spool is replayed"
                ),
                None => tracing::info!("sink: ClickHouse accepts inserts again"),
            }
        }
        self.rows_kept_again("clickhouse");
        *lock(&self.health) = Health::Writing;
    }

    /// Rows are kept again (`how`: `"clickhouse"` answers, or a batch went to the
    /// `"spool"`): no longer lost for a spool that cannot be written, if they were;
    /// the log says so, with what was lost.
    fn rows_kept_again(&self, how: &str) {
        if let Some(l) = lock(&self.spool_loss).take() {
            tracing::warn!(
                lasted = %whole_secs(l.since.elapsed()),
                rows_dropped = self
                    .metrics
                    .dropped_rows(DropReason::SpoolWrite)
                    .saturating_sub(l.dropped_before),
                by = how,
                "sink: rows are kept again; until then the spool could not be written and they were dropped"
            );
        }
    }

    fn set_unhealthy(&self, err: &InsertError) {
        if self.one_shot {
            tracing::warn!(error = %err, "ClickHouse did not take a record; trying again");
        } else if self.ch_ok.swap(false, Ordering::SeqCst) {
            tracing::warn!(error = %err, "sink: ClickHouse unavailable, spooling batches until it answers");
            let m = &self.metrics;
            *lock(&self.outage) = Some(Outage::new(Instant::now(), m.spooled_rows(), rows_lost(m)));
            // The replayer probes an unhealthy server when the spool is empty, and an
            // empty spool wakes it for nothing else: should the batch that failed not
            // reach the spool either (a full or broken disk), nobody would probe.
            self.replayer_wake.notify_one();
        }
        let mut h = lock(&self.health);
        if !matches!(*h, Health::Failing { .. }) {
            *h = Health::Spooling {
                reason: err.to_string(),
            };
        }
    }

    /// New batches go to the spool because the INSERTs in flight do not end (a server
    /// that accepts connections and does not answer, or one slower than the input):
    /// the health says so (`Spooling`, with `why`) until an INSERT succeeds
    /// ([`Shared::set_ok`]). ClickHouse is not marked unavailable: direct INSERTs go
    /// on, and a server that is only slow is not probed as one that is down.
    fn set_backlogged(&self, why: impl FnOnce() -> String) {
        let mut h = lock(&self.health);
        if !matches!(*h, Health::Writing) {
            return;
        }
        let reason = why();
        let now = Instant::now();
        let mut logged = lock(&self.backlog_logged);
        if logged.is_none_or(|at| now.saturating_duration_since(at) >= OUTAGE_REMINDER) {
            *logged = Some(now);
            tracing::warn!(reason = %reason, "sink: ClickHouse does not keep up with the input; new batches are spooled until an INSERT succeeds");
        }
        *h = Health::Spooling { reason };
    }

    fn ok(&self) -> bool {
        self.ch_ok.load(Ordering::SeqCst)
    }

    /// When the replay of a segment checked out at `checked_out` began loading: then,
    /// or when ClickHouse answered again if that came later. The replayer takes a
    /// segment as soon as the outage spools one and retries its first record until
    /// ClickHouse answers: timed from the checkout, a replay of 0.2 s after a 90 s
    /// outage was logged as `took=1m 29s`, the outage's length, not the replay's.
    fn replay_began(&self, checked_out: Instant) -> Instant {
        lock(&self.back).map_or(checked_out, |back| back.max(checked_out))
    }

    /// The shutdown grace is over: every wait on ClickHouse ends, those in progress and
    /// those to come ([`Shared::unless_given_up`]). Stored whether or not anything
    /// waits now: `watch::Sender::send` drops a value nobody receives, so a grace that
    /// ended while no INSERT was waiting (the tasks appending to the spool, the
    /// replayer reading a segment) was never seen by the INSERTs started after it,
    /// which then waited for a hung server past the grace, and past the service
    /// manager's stop timeout.
    pub fn stop_waiting(&self) {
        self.give_up.send_replace(true);
    }

    /// `fut`'s output, or `None` once the shutdown grace is over (at once if it is):
    /// every wait on ClickHouse (an INSERT, a retry's backoff, a probe) goes through
    /// here, so none outlasts the grace. An abandoned INSERT may or may not have been
    /// stored.
    async fn unless_given_up<T>(&self, fut: impl std::future::Future<Output = T>) -> Option<T> {
        let mut give_up = self.give_up.subscribe();
        tokio::select! {
            biased;
            _ = give_up.wait_for(|g| *g) => None,
            r = fut => Some(r),
        }
    }
}

/// Appends `batch` to the data spool or the reject spool, off the runtime. The one place
/// appends happen, so the one place that arms the fsync timer ([`run_fsyncer`]).
async fn append(shared: &Arc<Shared>, rejects: bool, batch: Batch) -> Result<(), String> {
    let sh = shared.clone();
    let res = tokio::task::spawn_blocking(move || {
        let spool = match &sh.rejects {
            _ if !rejects => &sh.spool,
            Some(r) => r,
            None => return Err("no reject spool".to_string()),
        };
        lock(spool).append(&batch).map_err(|e| e.to_string())
    })
    .await
    .unwrap_or_else(|e| Err(format!("spool task failed: {e}")));
    if res.is_ok() {
        shared.spool_written.notify_one();
    }
    res
}

/// Appends a batch to the spool; on failure the rows are dropped (logged, counted).
pub(crate) async fn spool_batch(shared: &Arc<Shared>, batch: Batch, why: &'static str) {
    let rows = u64::from(batch.rows);
    let table = batch.table;
    let err = match append(shared, false, batch).await {
        Ok(()) => {
            tracing::debug!(table = %table, rows, why, "sink: batch spooled");
            let was_failing = {
                let mut h = lock(&shared.health);
                let failing = matches!(*h, Health::Failing { .. });
                if failing {
                    *h = if shared.writer.is_none() {
                        file_only_health()
                    } else {
                        Health::Spooling { reason: why.into() }
                    };
                }
                failing
            };
            if was_failing {
                shared.rows_kept_again("spool");
            }
            let lasted = lock(&shared.outage).as_mut().and_then(|o| {
                o.remind(Instant::now(), OUTAGE_REMINDER)
                    .map(|d| (d, o.spooled_before, o.dropped_before))
            });
            if let Some((lasted, spooled_before, dropped_before)) = lasted {
                let m = &shared.metrics;
                tracing::warn!(
                    lasted = %whole_secs(lasted),
                    rows_spooled = m.spooled_rows().saturating_sub(spooled_before),
                    spool_bytes = m.spool_bytes(),
                    rows_dropped = rows_lost(m).saturating_sub(dropped_before),
                    "sink: ClickHouse still unavailable; spooling"
                );
            }
            shared.replayer_wake.notify_one();
            return;
        }
        Err(e) => e,
    };
    spool_write_failed(shared, "spool", table, rows, &err);
}

/// An append to a spool (`which`: the data spool or the reject spool) failed: the
/// batch's rows are lost, counted (`reason="spool_write"`), and the health says so
/// (`Failing`) until a batch is spooled or ClickHouse stores one again. The one place
/// for both spools, so that a broken `rejected/` is not lost silently while `/healthz`
/// answers OK. Logged when the loss begins, then every [`LOSS_REMINDER`] with the rows
/// lost since, and once when it ends ([`Shared::rows_kept_again`]).
fn spool_write_failed(shared: &Shared, which: &str, table: Table, rows: u64, err: &str) {
    let m = &shared.metrics;
    let before = m.dropped_rows(DropReason::SpoolWrite);
    m.dropped(DropReason::SpoolWrite, rows);
    let mut loss = lock(&shared.spool_loss);
    match loss.as_mut() {
        None => {
            *loss = Some(Outage::new(Instant::now(), m.spooled_rows(), before));
            tracing::error!(spool = which, table = %table, rows, error = %err, "sink: cannot write the spool, rows dropped until it can (recalled every minute, each row counted in netpoller_sink_dropped_rows_total{{reason=\"spool_write\"}})");
        }
        Some(l) => match l.remind(Instant::now(), LOSS_REMINDER) {
            Some(lasted) => tracing::error!(
                lasted = %whole_secs(lasted),
                rows_dropped = m.dropped_rows(DropReason::SpoolWrite).saturating_sub(l.dropped_before),
                error = %err,
                spool = which,
                "sink: still cannot write the spool; rows dropped"
            ),
            None => {
                tracing::debug!(spool = which, table = %table, rows, error = %err, "sink: cannot write the spool, rows dropped")
            }
        },
    }
    drop(loss);
    *lock(&shared.health) = Health::Failing {
        reason: format!("{which} write failed: {err}"),
    };
}

pub(crate) fn file_only_health() -> Health {
    Health::Spooling {
        reason: "no [clickhouse] section: values go to spool files".into(),
    }
}

/// Why a batch went to `rejected/` ([`reject`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refusal {
    /// ClickHouse said the data is bad (a [`crate::ErrorClass::Data`] error).
    BadData,
    /// A spooled batch ClickHouse kept refusing while it stored others ([`Suspects`]).
    KeptRefusing,
}

/// A batch ClickHouse refused: logged, counted, kept in `rejected/`.
async fn reject(shared: &Arc<Shared>, batch: Batch, err: &InsertError, why: Refusal) {
    let (table, rows, first_clock) = (batch.table, batch.rows, batch.first_clock);
    match why {
        Refusal::BadData => tracing::error!(
            error = %err, %table, rows, first_clock,
            "sink: ClickHouse rejected a batch as bad data; not retried, kept in the reject spool"
        ),
        Refusal::KeptRefusing => tracing::error!(
            error = %err, %table, rows, first_clock, tries = 2 * SUSPECT_AFTER,
            "sink: ClickHouse keeps refusing a spooled batch while it stores others of its table; kept in the reject spool so that the spool behind it is replayed"
        ),
    }
    // Counted as rejected (kept) or as dropped, never both.
    let rows = u64::from(batch.rows);
    match append(shared, true, batch).await {
        Ok(()) => shared.metrics.rejected(rows),
        Err(e) => spool_write_failed(shared, "reject spool", table, rows, &e),
    }
}

/// One INSERT under the in-flight limit, counted in the metrics either way (the one
/// place where an attempt's outcome is recorded, for new and replayed batches alike).
async fn insert_once(shared: &Shared, w: &Writer, batch: &Batch) -> Result<(), InsertError> {
    let permit = shared.inflight.acquire().await;
    let t0 = std::time::Instant::now();
    let res = w.insert(batch).await;
    drop(permit);
    match &res {
        Ok(()) => {
            shared.metrics.insert_ok(
                batch.table,
                u64::from(batch.rows),
                batch.data.len() as u64,
                t0.elapsed(),
            );
            shared.set_ok();
        }
        Err(e) => shared.metrics.insert_error(e.class),
    }
    res
}

/// Direct INSERT of a new batch with up to `max_attempts` attempts; spools it if every
/// attempt fails (or one fails while the sink is unhealthy or shutting down, or the
/// shutdown grace ends before ClickHouse answers).
async fn insert_task(shared: Arc<Shared>, batch: Batch) {
    let Some(w) = shared.writer.as_ref() else {
        spool_batch(&shared, batch, "no clickhouse").await;
        return;
    };
    let max = w.config().max_attempts;
    // A batch of a table the server's check found with other columns: sent again, it
    // is kept back again (until a check passes the table).
    let again = |failures: u32, e: &InsertError| {
        failures < max
            && !e.table_mismatch()
            && !shared.shutting_down.load(Ordering::SeqCst)
            && shared.ok()
    };
    match insert_with_retries(&shared, w, &batch, again, None).await {
        Attempts::Stored => {}
        Attempts::Refused(e) => reject(&shared, batch, &e, Refusal::BadData).await,
        // One table of other columns: the server takes the other tables' batches, so
        // it is not unavailable (which would send every table's batches to the spool);
        // this one is spooled until the table is fixed.
        Attempts::GaveUp(e) if e.table_mismatch() => {
            spool_batch(&shared, batch, "table columns do not match").await;
        }
        Attempts::GaveUp(e) => {
            shared.set_unhealthy(&e);
            spool_batch(&shared, batch, "insert failed").await;
        }
        Attempts::Abandoned => spool_batch(&shared, batch, "unconfirmed at shutdown").await,
    }
}

/// How the attempts at one batch ended ([`insert_with_retries`]).
enum Attempts {
    /// ClickHouse confirmed it.
    Stored,
    /// ClickHouse refused it as bad data: never retried.
    Refused(InsertError),
    /// It failed, and the caller would not try again (the last error).
    GaveUp(InsertError),
    /// The stop's grace ended while ClickHouse had it: stored or not, nobody knows.
    Abandoned,
}

/// Sends `batch` until ClickHouse stores or refuses it, retrying the other failures
/// with backoff while `again(failures so far, last error)` says so: the one retry loop
/// of direct INSERTs and replays. Every wait on ClickHouse ends with the stop's grace
/// ([`Shared::unless_given_up`]); a backoff also ends when `stop` (a replay's shutdown
/// signal) changes.
async fn insert_with_retries(
    shared: &Shared,
    w: &Writer,
    batch: &Batch,
    mut again: impl FnMut(u32, &InsertError) -> bool,
    mut stop: Option<&mut watch::Receiver<bool>>,
) -> Attempts {
    let cfg = w.config();
    let mut failures = 0;
    loop {
        let Some(res) = shared.unless_given_up(insert_once(shared, w, batch)).await else {
            return Attempts::Abandoned;
        };
        let e = match res {
            Ok(()) => return Attempts::Stored,
            Err(e) if !e.class.is_retryable() => return Attempts::Refused(e),
            Err(e) => e,
        };
        failures += 1;
        if !again(failures, &e) {
            return Attempts::GaveUp(e);
        }
        tracing::debug!(error = %e, failures, "sink: insert failed, retrying");
        shared.metrics.retry();
        let wait = backoff(failures, cfg.retry_backoff, cfg.retry_backoff_max);
        let pause = async {
            match stop.as_deref_mut() {
                Some(rx) => tokio::select! {
                    _ = sleep(wait) => {}
                    _ = rx.changed() => {}
                },
                None => sleep(wait).await,
            }
        };
        let _ = shared.unless_given_up(pause).await;
    }
}

/// The fsync task: what is appended to the spools (by the batcher, INSERT tasks that
/// give up, the replayer's rejects) is fsynced at most `fsync_every` after it was
/// written. A task of its own: in the batcher's loop, its timer waited while the
/// batcher waited for an INSERT slot (up to `flush_interval`).
pub(crate) async fn run_fsyncer(
    shared: Arc<Shared>,
    fsync_every: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let fsync_every = fsync_every.max(Duration::from_millis(10));
    // When the spools' unsynced appends are due for their fsync; `None`: nothing was
    // written since the last one (the usual state: no timer, no wake-up).
    let mut fsync_at: Option<Instant> = None;
    loop {
        tokio::select! {
            biased;
            // The stop seals (and fsyncs) both spools.
            _ = shutdown.changed() => return,
            _ = shared.spool_written.notified(), if fsync_at.is_none() => {
                fsync_at = Some(Instant::now() + fsync_every);
            }
            _ = sleep_until(fsync_at.unwrap_or_else(Instant::now)), if fsync_at.is_some() => {
                // An append since the last fsync that was not its own (appends fsync
                // when the last one is `fsync_every` old) is at least that old now,
                // unless a later append's fsync came in between: then what was
                // appended after that one is due `fsync_every` after it, not after a
                // new notification (which let it wait up to twice as long).
                let sh = shared.clone();
                let next = tokio::task::spawn_blocking(move || {
                    let sync = |s: &Mutex<Spool>| {
                        let mut s = lock(s);
                        s.sync_if_due();
                        s.sync_deadline()
                    };
                    let rejects = sh.rejects.as_ref().and_then(sync);
                    sync(&sh.spool).into_iter().chain(rejects).min()
                })
                .await;
                fsync_at = next.ok().flatten().map(Instant::from_std);
            }
        }
    }
}

/// The batcher: owns the input channel and the per-table pending batches.
pub(crate) async fn run_batcher(
    shared: Arc<Shared>,
    rx: mpsc::Receiver<Msg>,
    limits: Limits,
    max_tasks: usize,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut b = Batcher {
        rx,
        unplaced: 0,
        pending: Table::ALL.map(Pending::new),
        tasks: InsertTasks::default(),
        queue: VecDeque::new(),
        shared,
        limits,
        max_tasks,
        stalled: false,
    };
    loop {
        let deadline = b.pending.iter().filter_map(|p| p.deadline(&b.limits)).min();
        tokio::select! {
            biased;
            _ = shutdown.changed() => break,
            Some(r) = b.tasks.set.join_next_with_id(), if !b.tasks.set.is_empty() => {
                b.reaped(r);
                b.pump().await
            }
            _ = sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                let now = Instant::now();
                for t in Table::ALL {
                    if b.pending[t.index()].deadline(&b.limits).is_some_and(|d| d <= now) {
                        b.seal(t, FlushTrigger::Age).await;
                    }
                }
            }
            msg = b.rx.recv() => match msg {
                Some(msg) => b.take(msg).await,
                None => break,
            },
        }
    }
    // Shutdown: take what is still in the channel, flush every table, no more retries.
    b.rx.close();
    while let Some(msg) = b.rx.recv().await {
        b.take(msg).await;
    }
    for t in Table::ALL {
        b.seal(t, FlushTrigger::Shutdown).await;
    }
    b.shared.shutting_down.store(true, Ordering::SeqCst);
    while !b.queue.is_empty() || !b.tasks.set.is_empty() {
        if let Some(r) = b.tasks.set.join_next_with_id().await {
            b.reaped(r);
        }
        b.pump().await;
    }
}

/// The INSERT tasks of new batches, with the rows of each one's batch.
#[derive(Default)]
pub(crate) struct InsertTasks {
    set: JoinSet<()>,
    /// Rows of each task's batch, to count them lost should the task panic.
    rows: HashMap<tokio::task::Id, u32>,
}

impl InsertTasks {
    /// Hands `batch` to an INSERT task.
    fn start(&mut self, shared: &Arc<Shared>, batch: Batch) {
        let rows = batch.rows;
        let task = self.set.spawn(insert_task(shared.clone(), batch));
        self.rows.insert(task.id(), rows);
    }

    /// An INSERT task ended. One that panicked (a bug) took its batch with it: logged
    /// and counted (`reason="internal"`), as every row lost is.
    fn ended(
        &mut self,
        r: Result<(tokio::task::Id, ()), tokio::task::JoinError>,
        metrics: &SinkMetrics,
    ) {
        match r {
            Ok((id, ())) => {
                self.rows.remove(&id);
            }
            Err(e) => {
                let rows = self.rows.remove(&e.id()).unwrap_or(0);
                tracing::error!(error = %e, rows, "sink: an INSERT task failed; its batch is lost (a bug: please report it)");
                metrics.dropped(DropReason::Internal, u64::from(rows));
            }
        }
    }
}

/// Waits for the INSERT tasks a batcher that panicked left ([`Shared::orphans`]):
/// called by the stop before it closes the spools, so that their batches are stored
/// or spooled (or, past the grace, spooled) rather than cut off by the exit.
pub(crate) async fn join_orphans(shared: &Shared) {
    let taken = lock(&shared.orphans).take();
    let Some(mut tasks) = taken else {
        return;
    };
    shared.shutting_down.store(true, Ordering::SeqCst);
    while let Some(r) = tasks.set.join_next_with_id().await {
        tasks.ended(r, &shared.metrics);
    }
}

struct Batcher {
    /// The sink's input channel.
    rx: mpsc::Receiver<Msg>,
    /// Rows of the message being taken ([`Batcher::take`]) not yet in a pending batch.
    unplaced: usize,
    pending: [Pending; Table::COUNT],
    tasks: InsertTasks,
    queue: VecDeque<Batch>,
    shared: Arc<Shared>,
    limits: Limits,
    max_tasks: usize,
    /// With every INSERT slot and the queue taken, a flush interval passed without an
    /// INSERT ending: batches go to the spool without that wait until one ends.
    stalled: bool,
}

impl Batcher {
    /// Takes the rows of one message of the channel.
    async fn take(&mut self, msg: Msg) {
        match msg {
            Msg::One(t, row) => {
                self.unplaced = 1;
                self.add(t, row).await;
            }
            Msg::Many(rows) => {
                self.unplaced = rows.len();
                for (t, row) in rows {
                    self.add(t, row).await;
                }
            }
        }
    }

    async fn add(&mut self, table: Table, row: Row) {
        #[cfg(test)]
        if row.itemid == self.shared.panic_on_item.load(Ordering::SeqCst) {
            panic!("test: the batcher panics on item {}", row.itemid);
        }
        if !table.accepts(&row.value) {
            tracing::warn!(table = %table, itemid = row.itemid, value = ?row.value, "sink: value does not fit the table, row dropped");
            self.shared.metrics.dropped(DropReason::WrongType, 1);
            self.unplaced = self.unplaced.saturating_sub(1);
            return;
        }
        self.shared.metrics.row_received(table);
        let trigger = self.pending[table.index()].push(&row, Instant::now, &self.limits);
        self.unplaced = self.unplaced.saturating_sub(1);
        if let Some(trigger) = trigger {
            self.seal(table, trigger).await;
        }
    }

    async fn seal(&mut self, table: Table, trigger: FlushTrigger) {
        if let Some(batch) = self.pending[table.index()].take() {
            self.shared.metrics.batch_flushed(trigger);
            self.dispatch(batch).await;
        }
    }

    async fn dispatch(&mut self, batch: Batch) {
        if self.shared.writer.is_none() {
            spool_batch(&self.shared, batch, "file sink").await;
        } else if !self.shared.ok() {
            spool_batch(&self.shared, batch, "clickhouse unhealthy").await;
        } else if self.tasks.set.len() < self.max_tasks {
            self.start(batch);
        } else if self.queue.len() < 2 * self.max_tasks {
            self.queue.push_back(batch);
        } else {
            // Everything busy: wait up to one flush interval for an INSERT to finish
            // (short bursts become backpressure on the channel), then spill to the
            // spool (ClickHouse slower than the input for a sustained time). Once such
            // a wait ran out, the next batches spill at once until an INSERT ends:
            // waiting a flush interval for each let the batcher take one batch per
            // flush interval while ClickHouse hung (several tables' batches sealed in
            // each, so it fell behind and held up the pollers by backpressure).
            if self.stalled {
                // An INSERT may have ended meanwhile, not yet reaped (the batcher was
                // busy with a message of many samples): its slot is free.
                if let Some(r) = self.tasks.set.try_join_next_with_id() {
                    self.reaped(r);
                    self.pump().await;
                }
            } else {
                match tokio::time::timeout(self.limits.age, self.tasks.set.join_next_with_id())
                    .await
                {
                    Ok(Some(r)) => {
                        self.reaped(r);
                        self.pump().await;
                    }
                    Ok(None) => {}
                    Err(_) => self.stalled = true,
                }
            }
            if self.queue.len() < 2 * self.max_tasks && self.shared.ok() {
                self.queue.push_back(batch);
                self.pump().await;
            } else {
                spool_batch(&self.shared, batch, "insert backlog").await;
                let (inflight, age) = (self.tasks.set.len(), self.limits.age);
                self.shared.set_backlogged(|| {
                    format!("insert backlog: none of the {inflight} INSERTs in flight ended within flush_interval ({age:?}); new batches are spooled")
                });
            }
        }
    }

    /// Starts queued batches on free task slots, or spools them if unhealthy.
    async fn pump(&mut self) {
        while let Some(batch) = self.queue.pop_front() {
            if !self.shared.ok() {
                spool_batch(&self.shared, batch, "clickhouse unhealthy").await;
            } else if self.tasks.set.len() < self.max_tasks {
                self.start(batch);
            } else {
                self.queue.push_front(batch);
                break;
            }
        }
    }

    /// Hands `batch` to an INSERT task.
    fn start(&mut self, batch: Batch) {
        self.tasks.start(&self.shared, batch);
    }

    /// An INSERT task ended ([`InsertTasks::ended`]).
    fn reaped(&mut self, r: Result<(tokio::task::Id, ()), tokio::task::JoinError>) {
        self.stalled = false;
        self.tasks.ended(r, &self.shared.metrics);
    }
}

impl Drop for Batcher {
    /// A batcher dropped while unwinding panicked (a bug). Dropped with it, its
    /// channel's messages, its pending batches and the rows of the message it was
    /// taking were lost without a count, and its INSERT tasks were aborted with their
    /// batches. Here its queued batches get INSERT tasks of their own, those tasks are
    /// left running for the stop to wait for ([`join_orphans`]), and the rest is
    /// counted lost (`reason="internal"`). Not counted: a batch it had sealed and not
    /// yet placed when it panicked (in a task, the queue or the spool: nothing says
    /// which). Nothing here may panic: a panic while
    /// unwinding aborts the process.
    fn drop(&mut self) {
        // Else it ran to its end (its channel emptied, its batches placed), or its
        // runtime is going away with the process.
        if !std::thread::panicking() {
            return;
        }
        self.rx.close();
        let mut channel = 0u64;
        while let Ok(msg) = self.rx.try_recv() {
            channel += match msg {
                Msg::One(..) => 1,
                Msg::Many(rows) => rows.len() as u64,
            };
        }
        let pending: u64 = self.pending.iter().map(|p| u64::from(p.rows())).sum();
        let rows = channel + pending + self.unplaced as u64;
        tracing::error!(
            rows,
            in_channel = channel,
            pending,
            inserts_left_running = self.tasks.set.len() + self.queue.len(),
            "sink: the batcher failed; the rows it held are lost, new rows are refused (a bug: please report it)"
        );
        self.shared.metrics.dropped(DropReason::Internal, rows);
        // Spawning needs the runtime, which a panic inside the batcher's task has.
        if tokio::runtime::Handle::try_current().is_ok() {
            while let Some(batch) = self.queue.pop_front() {
                self.tasks.start(&self.shared, batch);
            }
        } else {
            let queued: u64 = self.queue.drain(..).map(|b| u64::from(b.rows)).sum();
            self.shared.metrics.dropped(DropReason::Internal, queued);
        }
        *lock(&self.shared.orphans) = Some(std::mem::take(&mut self.tasks));
    }
}

/// How a segment replay ended.
pub(crate) enum Replayed {
    /// Every record confirmed, rejected or skipped: delete the segment.
    Done,
    /// Stopped (shutdown, or attempts exhausted): keep the segment.
    Stopped(Option<InsertError>),
    /// Records ClickHouse refuses for themselves are left ([`Suspects`]): keep the
    /// segment and turn to the others.
    Held(InsertError),
}

/// Server-class failures in a row (HTTP errors with a ClickHouse exception, not a
/// server that is down or silent) after which the daemon's replayer suspects a spooled
/// record is refused for itself ([`Suspects`]).
pub(crate) const SUSPECT_AFTER: u32 = 5;

/// Spooled records the daemon's replayer has seen refused [`SUSPECT_AFTER`] times in a
/// row with a server error, so that one such record (a batch the server cannot take
/// while it takes others) does not hold the replay of the whole spool behind it.
///
/// A suspect is passed over, staying in its segment, and the records after it are
/// tried. It goes to the reject spool only when, on a later pass, it fails
/// [`SUSPECT_AFTER`] times again with the same ClickHouse exception code (an HTTP
/// error without one never rejects, nor does a code that describes the server's state,
/// such as too many parts or read-only) although ClickHouse has stored a batch of the
/// same table since it was suspected. A server or a table that
/// refuses everything therefore never rejects anything: no batch of it is stored
/// meanwhile, and a suspect then gets a single attempt per pass. A pass stops when two
/// records in a row of two tables fail, since the server, not the record, is then the
/// likely cause; two in a row of one table pass over that table's other records for
/// the rest of the pass (ClickHouse refuses that table: read-only, or of other column
/// types), and the records of the other tables are still replayed.
#[derive(Debug, Default)]
pub(crate) struct Suspects {
    /// (segment, record offset) → when it was suspected.
    records: HashMap<(u64, u64), Suspect>,
    /// Segments whose last pass left suspects: replayed after every other one.
    held: HashSet<u64>,
}

#[derive(Debug)]
struct Suspect {
    /// Batches of its table ClickHouse had stored when it was suspected.
    stored_then: u64,
    /// The exception code it was refused with.
    code: Option<u32>,
}

impl Suspects {
    /// Forgets what is known of segments no longer in the spool (`live`).
    fn keep_only(&mut self, live: &[u64]) {
        self.records.retain(|(seq, _), _| live.contains(seq));
        self.held.retain(|seq| live.contains(seq));
    }
}

/// Replays one reserved segment, record by record, skipping records already
/// acknowledged. `max_attempts`: per record; `None` = until shutdown, or, for the
/// server errors a record may cause itself, as [`Suspects`] says.
pub(crate) async fn replay_segment(
    shared: &Arc<Shared>,
    seg: &Segment,
    max_attempts: Option<u32>,
    mut suspects: Option<&mut Suspects>,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<Replayed, SpoolError> {
    let w = shared.writer.as_ref().expect("replay needs a writer");
    // Reading and scanning a segment (up to 64 MiB) off the runtime's thread: the
    // daemon's runs signals, the sink and the metrics endpoint.
    // Its damage is counted (and logged) at its first scan only: a segment held back
    // is scanned again at each pass.
    let (seg2, sh) = (seg.clone(), shared.clone());
    let (bytes, records) = tokio::task::spawn_blocking(move || {
        let bytes = spool::read_segment(&seg2)?;
        let records = if lock(&sh.spool).first_scan(seg2.seq) {
            spool::scan_logged(&seg2, &bytes, &sh.metrics)
        } else {
            crate::record::scan(&bytes).0
        };
        Ok::<_, SpoolError>((bytes, records))
    })
    .await
    .map_err(|e| SpoolError::Io {
        path: seg.path.clone(),
        what: spool::READING,
        cause: std::io::Error::other(e),
    })??;
    let bytes = Bytes::from(bytes);
    let acks = lock(&shared.spool).confirmed(seg);
    // The last record passed over; the table of the last record tried, when it failed;
    // the tables two records of which in a row failed in this pass (ClickHouse refuses
    // that table: its other records are passed over without a try, and those of the
    // other tables behind them are still replayed).
    let mut held: Option<InsertError> = None;
    let mut failed_last: Option<Table> = None;
    let mut refused_tables: HashSet<Table> = HashSet::new();
    for rec in records.into_iter().filter(|r| !acks.contains(&r.offset)) {
        if refused_tables.contains(&rec.table) {
            continue;
        }
        let batch = Batch {
            table: rec.table,
            rows: rec.rows,
            first_clock: rec.first_clock,
            data: bytes.slice(rec.payload.clone()),
        };
        if *shutdown.borrow() {
            return Ok(Replayed::Stopped(None));
        }
        let key = (seg.seq, rec.offset);
        let stored = || shared.metrics.inserts(batch.table);
        // Server errors this record may take before it is passed over.
        let server_tries = suspects.as_deref().map(|s| match s.records.get(&key) {
            Some(known) if known.stored_then == stored() => 1,
            _ => SUSPECT_AFTER,
        });
        let stopping = shutdown.clone();
        let mut server_failures = 0;
        let again = |failures: u32, e: &InsertError| {
            // As for a new batch: ClickHouse counts as unavailable once a record has
            // failed as often as a new batch may (one failure on one node of several
            // sent every new batch to the spool, and kept it there), unless only its
            // table's columns do not match (which no retry changes: passed over). A
            // server error may be the record's own (too big for the memory limit)
            // while the server takes everything else: new batches find out for
            // themselves whether it refuses them too (and mark it unavailable then).
            if e.table_mismatch() {
                return false;
            }
            if failures >= w.config().max_attempts
                && (e.class != ErrorClass::Server || shared.one_shot)
            {
                shared.set_unhealthy(e);
            }
            if e.class == ErrorClass::Server {
                server_failures += 1;
            } else {
                server_failures = 0;
            }
            max_attempts.is_none_or(|m| failures < m)
                && server_tries.is_none_or(|t| server_failures < t)
                && !*stopping.borrow()
        };
        match insert_with_retries(shared, w, &batch, again, Some(shutdown)).await {
            Attempts::Stored => {
                shared.metrics.replayed(u64::from(batch.rows));
                confirm(shared, seg, rec.offset);
                failed_last = None;
                if let Some(s) = suspects.as_deref_mut() {
                    s.records.remove(&key);
                }
            }
            Attempts::Refused(e) => {
                reject(shared, batch, &e, Refusal::BadData).await;
                confirm(shared, seg, rec.offset);
                failed_last = None;
            }
            // Stopping: the record stays spooled.
            Attempts::GaveUp(_) | Attempts::Abandoned if *shutdown.borrow() => {
                return Ok(Replayed::Stopped(None))
            }
            Attempts::GaveUp(e) if e.class == ErrorClass::Server && suspects.is_some() => {
                let s = suspects.as_deref_mut().expect("checked");
                let code = crate::writer::exception_code(&e.message);
                let now = stored();
                // Refused alike (a ClickHouse exception code, not a bare HTTP error nor
                // one that describes the server's state, such as too many parts), by a
                // full round of tries, after a batch of its table was stored.
                let full = server_tries == Some(SUSPECT_AFTER);
                let for_itself = code.is_some_and(|c| !crate::writer::is_server_state(c));
                match s.records.get(&key) {
                    Some(known)
                        if known.code == code && for_itself && full && known.stored_then < now =>
                    {
                        s.records.remove(&key);
                        reject(shared, batch, &e, Refusal::KeptRefusing).await;
                        confirm(shared, seg, rec.offset);
                        failed_last = None;
                        continue;
                    }
                    Some(known) if known.code == code => {}
                    _ => {
                        let fresh = Suspect {
                            stored_then: now,
                            code,
                        };
                        s.records.insert(key, fresh);
                    }
                }
                // Two records in a row failed: of two tables, the server is the likely
                // cause (the pass ends); of one, that table (its records are passed
                // over for the rest of the pass).
                match failed_last.replace(batch.table) {
                    Some(t) if t != batch.table => return Ok(Replayed::Held(e)),
                    Some(_) => {
                        refused_tables.insert(batch.table);
                    }
                    None => {}
                }
                held = Some(e);
            }
            Attempts::GaveUp(e) => return Ok(Replayed::Stopped(Some(e))),
            Attempts::Abandoned => return Ok(Replayed::Stopped(None)),
        }
    }
    Ok(held.map_or(Replayed::Done, Replayed::Held))
}

/// Notes that the record at `offset` of `seg` is done with: in its `.ack` file, or,
/// when that cannot be written, in memory ([`Spool::remember_ack`]).
fn confirm(shared: &Shared, seg: &Segment, offset: u64) {
    if let Err(e) = spool::ack(seg, offset) {
        if lock(&shared.spool).remember_ack(seg.seq, offset) {
            tracing::warn!(error = %e, segment = %seg.path.display(), "spool: cannot note replayed records as confirmed; this process remembers them (a restart before the segment is done may send them again)");
        }
    }
}

/// Reads of one segment that fail, `retry_backoff_max` apart, before it is set aside.
pub(crate) const UNREADABLE_TRIES: u32 = 3;

/// Failed reads of the oldest segment, counted so that only one that fails
/// [`UNREADABLE_TRIES`] times in a row is set aside: a passing error (too many open
/// files, a disk that recovers) sets nothing aside. Used by the daemon's replayer and
/// by `netpoller spool replay`.
#[derive(Debug, Default)]
pub(crate) struct UnreadableTries {
    /// The segment that failed last, and how many times in a row.
    last: (u64, u32),
}

impl UnreadableTries {
    /// Segment `seq` could not be read: whether to set it aside now (else try again).
    pub(crate) fn failed(&mut self, seq: u64) -> bool {
        self.last = match self.last {
            (s, n) if s == seq => (s, n + 1),
            _ => (seq, 1),
        };
        self.last.1 >= UNREADABLE_TRIES
    }
}

/// Takes `seg`, which cannot be read (`e`), out of the spool so that the segments after
/// it are replayed ([`spool::Spool::set_aside`]).
pub(crate) async fn set_aside(shared: &Arc<Shared>, seg: &Segment, e: &SpoolError) {
    let (sh, seq) = (shared.clone(), seg.seq);
    let at = tokio::task::spawn_blocking(move || lock(&sh.spool).set_aside(seq))
        .await
        .ok()
        .flatten();
    tracing::error!(
        error = %e,
        segment = %seg.path.display(),
        set_aside_as = ?at,
        tries = UNREADABLE_TRIES,
        "spool: a segment cannot be read; it is set aside (kept on disk, outside the spool) and the segments after it are replayed"
    );
}

/// Reserves the oldest segment for replay ([`Spool::checkout_oldest`]).
pub(crate) async fn checkout(shared: &Arc<Shared>) -> Option<Segment> {
    checkout_but(shared, HashSet::new()).await
}

/// Reserves the oldest segment not in `skip` ([`Spool::checkout_oldest_but`]).
async fn checkout_but(shared: &Arc<Shared>, skip: HashSet<u64>) -> Option<Segment> {
    let sh = shared.clone();
    tokio::task::spawn_blocking(move || lock(&sh.spool).checkout_oldest_but(&skip))
        .await
        .ok()
        .flatten()
}

/// The numbers of the spool's sealed segments.
async fn live_segments(shared: &Arc<Shared>) -> Vec<u64> {
    let sh = shared.clone();
    tokio::task::spawn_blocking(move || lock(&sh.spool).sealed_seqs())
        .await
        .unwrap_or_default()
}

pub(crate) async fn finish(shared: &Arc<Shared>, seq: u64, done: bool) {
    let sh = shared.clone();
    let _ = tokio::task::spawn_blocking(move || {
        let mut s = lock(&sh.spool);
        if done {
            s.finish(seq);
        } else {
            s.release(seq);
        }
    })
    .await;
}

/// Moves the reject spool's segments into the data spool ([`Spool::hand_over`]) for
/// the replayer to load them again: what ClickHouse refused was fixed (a column's type,
/// a missing table). Logs what moved and what stayed. `None` without a reject spool
/// (no ClickHouse) or once the sink is stopping.
pub(crate) async fn retry_rejects(shared: &Arc<Shared>) -> Option<spool::HandOver> {
    if shared.shutting_down.load(Ordering::Relaxed) {
        return None;
    }
    let sh = shared.clone();
    let moved = tokio::task::spawn_blocking(move || {
        let rejects = sh.rejects.as_ref()?;
        let rows = lock(rejects).unconfirmed_row_counts();
        // The one place both spools are locked together: data spool first.
        let mut data = lock(&sh.spool);
        let moved = lock(rejects).hand_over(&mut data, &rows);
        Some(moved)
    })
    .await
    .ok()
    .flatten()?;
    shared.metrics.retried(moved.rows);
    if moved.segments > 0 {
        shared.replayer_wake.notify_one();
    }
    let (segments, rows, bytes, left) = (moved.segments, moved.rows, moved.bytes, moved.left);
    match &moved.error {
        Some(e) => {
            tracing::error!(error = %e, segments, rows, left, "sink: the reject spool's segments could not all be moved back to the spool; those left stay in rejected/ (retried at the next SIGUSR1)");
        }
        None if left > 0 => {
            tracing::warn!(segments, rows, bytes, left, "sink: the reject spool's rows go back to the spool to be tried again, but for segments the spool has no room for under spool_max_bytes: they stay in rejected/ (SIGUSR1 again once the spool has replayed)");
        }
        None if segments == 0 => {
            tracing::info!("sink: the reject spool is empty: nothing to try again")
        }
        None => {
            tracing::info!(segments, rows, bytes, "sink: the reject spool's rows go back to the spool to be tried again; rows ClickHouse refuses again return to rejected/");
        }
    }
    Some(moved)
}

/// Waits `d`, or until `shutdown` changes (the replayer's pauses between tries).
async fn pause(d: Duration, shutdown: &mut watch::Receiver<bool>) {
    tokio::select! { _ = sleep(d) => {}, _ = shutdown.changed() => {} }
}

/// What the replay last logged of spooled records ClickHouse refuses
/// ([`Replayed::Held`]). A table refused for hours (read-only, of other columns) holds
/// a segment per batch spooled meanwhile, each passed over at every pass: a line for
/// each was a flood. Logged when the refusal changes (another table, class or
/// exception code), every [`OUTAGE_REMINDER`] while it lasts, and anew once the spool
/// has been empty.
#[derive(Default)]
struct HeldLog {
    /// What was refused when it was last logged, and when.
    last: Option<(Refused, Instant)>,
    /// Segments passed over since, unlogged.
    unlogged: u64,
}

/// A refusal as [`HeldLog`] tells them apart: the table, the class of error, and its
/// ClickHouse exception code.
type Refused = (&'static str, ErrorClass, Option<u32>);

impl HeldLog {
    /// `seg`'s records were passed over for `e`.
    fn held(&mut self, seg: &Segment, e: &InsertError) {
        let kind = (e.table, e.class, crate::writer::exception_code(&e.message));
        let now = Instant::now();
        let due = self.last.as_ref().is_none_or(|(k, at)| {
            *k != kind || now.saturating_duration_since(*at) >= OUTAGE_REMINDER
        });
        if !due {
            self.unlogged += 1;
            tracing::debug!(segment = %seg.path.display(), error = %e, "spool: ClickHouse refuses records of this segment");
            return;
        }
        tracing::warn!(
            segment = %seg.path.display(),
            error = %e,
            segments_passed_over_since = self.unlogged,
            "spool: ClickHouse refuses records of this segment; they stay spooled and the segments after it are replayed first (logged again when the refusal changes, or every 5 minutes)"
        );
        self.last = Some((kind, now));
        self.unlogged = 0;
    }
}

/// Segments replayed one after another, from the first until the replay stops taking
/// them (the spool has nothing left it can replay now, an attempt failed, the stop):
/// one INFO line for all of them ([`Drain::ended`]), each segment at debug. A line per
/// segment was hundreds of lines after a long outage.
struct Drain {
    /// When the first segment's replay began loading ([`Shared::replay_began`]).
    since: Instant,
    /// Rows replayed before it (the metric's count).
    rows_before: u64,
    /// Segments replayed whole.
    segments: u64,
}

impl Drain {
    /// A segment that began at `began`, when `rows_before` rows had been replayed, is
    /// replayed whole: counted in the drain in progress, or the first of one.
    fn replayed(drain: &mut Option<Drain>, began: Instant, rows_before: u64) {
        drain
            .get_or_insert(Drain {
                since: began,
                rows_before,
                segments: 0,
            })
            .segments += 1;
    }

    /// The drain in progress, if any, ended (`until`: why): logged.
    fn ended(drain: &mut Option<Drain>, m: &SinkMetrics, until: &str) {
        if let Some(d) = drain.take() {
            tracing::info!(
                segments = d.segments,
                rows = m.replayed_rows().saturating_sub(d.rows_before),
                took = %whole_secs(d.since.elapsed()),
                until,
                "spool: replayed"
            );
        }
    }
}

/// The replay task: drains the spool oldest first while new data flows, and probes
/// ClickHouse while it is unhealthy.
pub(crate) async fn run_replayer(shared: Arc<Shared>, mut shutdown: watch::Receiver<bool>) {
    let Some(w) = shared.writer.as_ref() else {
        return;
    };
    let cfg = w.config().clone();
    let mut probes = 0u32;
    let mut unreadable = UnreadableTries::default();
    let mut suspects = Suspects::default();
    let mut held_log = HeldLog::default();
    let mut drain = None;
    let m = &shared.metrics;
    loop {
        // A sink dropped without its stop (its sender gone) ends it too: its pauses
        // wait on `shutdown.changed()`, which would then return at once, for good.
        if *shutdown.borrow() || shutdown.has_changed().is_err() {
            Drain::ended(&mut drain, m, "stop");
            return;
        }
        match checkout_but(&shared, suspects.held.clone()).await {
            // Every segment left holds suspects: after a pause, try them all again.
            None if !suspects.held.is_empty() => {
                Drain::ended(&mut drain, m, "the segments left are refused");
                pause(cfg.retry_backoff_max, &mut shutdown).await;
                suspects.held.clear();
                suspects.keep_only(&live_segments(&shared).await);
            }
            Some(seg) => {
                let (began, rows_before) = (Instant::now(), m.replayed_rows());
                let res =
                    replay_segment(&shared, &seg, None, Some(&mut suspects), &mut shutdown).await;
                let done = match res {
                    Ok(Replayed::Done) => {
                        tracing::debug!(segment = %seg.path.display(), "spool: segment replayed");
                        Drain::replayed(&mut drain, shared.replay_began(began), rows_before);
                        true
                    }
                    Ok(Replayed::Held(e)) => {
                        held_log.held(&seg, &e);
                        suspects.held.insert(seg.seq);
                        finish(&shared, seg.seq, false).await;
                        // Paced like a failed replay: a server refusing everything
                        // sees a few attempts per segment and pause, not a flood.
                        pause(cfg.retry_backoff_max, &mut shutdown).await;
                        continue;
                    }
                    Ok(Replayed::Stopped(_)) => false,
                    Err(e) if e.is_unreadable() => {
                        if unreadable.failed(seg.seq) {
                            set_aside(&shared, &seg, &e).await;
                            continue;
                        }
                        tracing::error!(error = %e, "spool: replay failed; will retry");
                        false
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "spool: replay failed; will retry");
                        false
                    }
                };
                finish(&shared, seg.seq, done).await;
                if !done && !*shutdown.borrow() {
                    Drain::ended(&mut drain, m, "an attempt failed");
                    pause(cfg.retry_backoff_max, &mut shutdown).await;
                }
            }
            None if !shared.ok() => {
                Drain::ended(&mut drain, m, "ClickHouse unavailable");
                probes += 1;
                tokio::select! {
                    _ = sleep(backoff(probes, cfg.retry_backoff, cfg.retry_backoff_max)) => {}
                    _ = shutdown.changed() => return,
                    _ = shared.replayer_wake.notified() => continue,
                }
                let Some(answered) = shared.unless_given_up(w.ping()).await else {
                    return;
                };
                if answered {
                    probes = 0;
                    shared.set_ok();
                }
            }
            None => {
                Drain::ended(&mut drain, m, "the spool is empty");
                probes = 0;
                held_log = HeldLog::default();
                // Every append notifies (a permit is kept if it comes while a replay
                // runs): no polling, which woke a blocking-pool thread every second.
                tokio::select! {
                    _ = shared.replayer_wake.notified() => {}
                    _ = shutdown.changed() => return,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ClickHouseConfig, SpoolConfig};

    fn batch(rows: u32) -> Batch {
        Batch {
            table: Table::Dbl,
            rows,
            first_clock: rows,
            data: Bytes::from(vec![7u8; 64]),
        }
    }

    fn spool_cfg(dir: &std::path::Path, fsync: Duration) -> SpoolConfig {
        SpoolConfig {
            fsync_interval: fsync,
            ..SpoolConfig::new(dir)
        }
    }

    /// A spool in `dir` fsynced every `fsync`, with the metrics it counts into.
    fn spool_in(dir: &std::path::Path, fsync: Duration) -> (Spool, Arc<SinkMetrics>) {
        let metrics = Arc::new(SinkMetrics::default());
        let sp = Spool::open(&spool_cfg(dir, fsync), metrics.clone()).unwrap();
        (sp, metrics)
    }

    /// The shared state of a sink writing to ClickHouse at `ch` (none: no server),
    /// as it starts: healthy, one INSERT at a time, spooling to `sp` and refused
    /// batches to `rejects`, counting into `metrics`.
    fn writing(
        ch: Option<&ClickHouseConfig>,
        sp: Spool,
        rejects: Option<Spool>,
        metrics: &Arc<SinkMetrics>,
    ) -> Arc<Shared> {
        let writer = ch.map(Writer::new);
        Arc::new(Shared::new(
            writer,
            sp,
            rejects,
            metrics.clone(),
            Health::Writing,
            1,
        ))
    }

    /// Voluntary context switches of the calling thread so far: each time it slept
    /// and was woken.
    fn wake_ups() -> u64 {
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        let line = status
            .lines()
            .find(|l| l.starts_with("voluntary_ctxt_switches:"))
            .unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    #[test]
    fn a_long_outage_is_recalled_every_five_minutes() {
        let t0 = Instant::now();
        let mut o = Outage::new(t0, 7, 0);
        let every = OUTAGE_REMINDER;
        assert_eq!(o.remind(t0 + Duration::from_secs(299), every), None);
        let at = t0 + Duration::from_secs(300);
        assert_eq!(o.remind(at, every), Some(Duration::from_secs(300)));
        assert_eq!(
            o.remind(at + Duration::from_secs(10), every),
            None,
            "not again at once"
        );
        assert_eq!(
            o.remind(at + Duration::from_secs(301), every),
            Some(Duration::from_secs(601))
        );
        assert_eq!(o.spooled_before, 7);
    }

    #[test]
    fn an_outage_counts_every_row_the_spool_lost() {
        // "accepts inserts again ... rows_dropped=0" after a spool directory removed
        // under the daemon had taken 120 rows (counted `corrupt`).
        let m = SinkMetrics::default();
        m.dropped(DropReason::SpoolCap, 1);
        m.dropped(DropReason::SpoolWrite, 10);
        m.dropped(DropReason::Corrupt, 100);
        m.dropped(DropReason::RejectSpoolCap, 1000);
        assert_eq!(rows_lost(&m), 111, "not the rejected rows' cap");
    }

    #[test]
    fn only_a_segment_that_fails_every_read_in_a_row_is_set_aside() {
        let mut t = UnreadableTries::default();
        assert!(!t.failed(4) && !t.failed(4));
        assert!(t.failed(4), "the third read in a row");
        // Another segment starts its own count; one failure of each in turn never
        // adds up (the oldest changed between them).
        let mut t = UnreadableTries::default();
        for _ in 0..5 {
            assert!(!t.failed(1) && !t.failed(2));
        }
    }

    #[tokio::test]
    async fn a_segment_that_cannot_be_read_is_set_aside_and_the_next_replayed() {
        // Segment 1 turns into a directory after the spool listed it (a disk error
        // stands for it): three reads fail, then it is set aside and segment 2 is
        // replayed (to a port where nothing listens on loopback: it stays spooled).
        let dir = tempfile::tempdir().unwrap();
        let (mut sp, metrics) = spool_in(dir.path(), Duration::from_secs(1));
        sp.append(&batch(5)).unwrap();
        sp.close();
        sp.append(&batch(7)).unwrap();
        sp.close();
        let first = crate::spool::list_segments(dir.path()).unwrap().remove(0);
        std::fs::remove_file(&first.path).unwrap();
        std::fs::create_dir(&first.path).unwrap();
        let ch = ClickHouseConfig {
            retry_backoff_max: Duration::from_millis(20),
            ..ch_at("http://127.0.0.1:9")
        };
        let shared = writing(Some(&ch), sp, None, &metrics);
        let (stop, stop_rx) = watch::channel(false);
        let replayer = tokio::spawn(run_replayer(shared.clone(), stop_rx));
        let aside = first.path.with_extension("seg.unreadable");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !aside.exists() {
            assert!(Instant::now() < deadline, "never set aside");
            sleep(Duration::from_millis(20)).await;
        }
        // Then segment 2 is the one under replay, and 1 is out of the spool.
        assert_eq!(lock(&shared.spool).sealed_seqs(), [first.seq + 1]);
        assert_eq!(metrics.dropped_rows(DropReason::Corrupt), 5);
        stop.send(true).unwrap();
        replayer.await.unwrap();
    }

    fn uint_row(itemid: u64) -> Row {
        Row {
            itemid,
            clock: 1_720_000_000,
            ns: 0,
            hostname: "h".into(),
            itemname: "k".into(),
            value: crate::RowValue::Uint(itemid),
        }
    }

    #[tokio::test]
    async fn a_batcher_that_panics_counts_the_rows_it_held_and_its_inserts_still_end() {
        // The batcher panics (a bug; the test hook stands for it) on item 9. Rows 0-3
        // are an INSERT task's batch, 4-7 a queued batch (one INSERT at a time), 8 is
        // pending, 9 and 10 the message being taken, 11 still in the channel. The
        // batches of the task and of the queue are spooled (ClickHouse never answers);
        // rows 8-11 are counted lost. The panic lost all twelve uncounted: the
        // channel, the pending rows and the queue dropped, the INSERT task aborted.
        let dir = tempfile::tempdir().unwrap();
        let (sp, metrics) = spool_in(dir.path(), Duration::from_secs(1));
        let (url, _held) = hung_server_on("127.0.52.1");
        let ch = ClickHouseConfig {
            max_attempts: 1,
            request_timeout: Duration::from_millis(300),
            ..ch_at(&url)
        };
        let shared = writing(Some(&ch), sp, None, &metrics);
        shared.panic_on_item.store(9, Ordering::SeqCst);
        let (tx, rx) = mpsc::channel(16);
        for i in 0..9 {
            tx.send(Msg::One(Table::Uint, uint_row(i))).await.unwrap();
        }
        let two = vec![(Table::Uint, uint_row(9)), (Table::Uint, uint_row(10))];
        tx.send(Msg::Many(two)).await.unwrap();
        tx.send(Msg::One(Table::Uint, uint_row(11))).await.unwrap();
        let limits = Limits {
            rows: 4,
            bytes: 1 << 20,
            age: Duration::from_secs(60),
        };
        let (_stop, stop_rx) = watch::channel(false);
        let batcher = tokio::spawn(run_batcher(shared.clone(), rx, limits, 1, stop_rx));
        assert!(batcher.await.unwrap_err().is_panic());
        assert_eq!(metrics.dropped_rows(DropReason::Internal), 4);
        // What the stop does after the batcher ended.
        join_orphans(&shared).await;
        assert_eq!(metrics.spooled_rows(), 8);
        assert_eq!(metrics.dropped_rows(DropReason::Internal), 4);
        assert!(
            tx.send(Msg::One(Table::Uint, uint_row(12))).await.is_err(),
            "new rows are refused, not left in a channel nobody reads"
        );
    }

    #[tokio::test]
    async fn the_end_of_the_grace_ends_the_waits_started_after_it_with_none_waiting_then() {
        // The grace ends while nothing waits on ClickHouse (the INSERT tasks appending
        // to the spool, the replayer reading a segment): an INSERT started afterwards
        // must not wait for the server either.
        let dir = tempfile::tempdir().unwrap();
        let (sp, metrics) = spool_in(dir.path(), Duration::from_secs(1));
        let shared = Shared::new(None, sp, None, metrics, file_only_health(), 1);
        shared.stop_waiting();
        assert!(
            *shared.give_up.borrow(),
            "the end of the grace was not kept"
        );
        let never = std::future::pending::<()>();
        assert_eq!(shared.unless_given_up(never).await, None);
    }

    #[tokio::test]
    async fn a_batch_the_reject_spool_cannot_keep_is_counted_lost_and_fails_the_health() {
        // ClickHouse refused a batch as bad data and `rejected/` cannot take it (a file
        // where its directory was, as a broken disk would have it: root ignores
        // permissions). The rows are lost: counted as such, and the health says so,
        // as for the data spool (it stayed `Writing`, `/healthz` answering OK).
        let dir = tempfile::tempdir().unwrap();
        let (sp, metrics) = spool_in(dir.path(), Duration::from_secs(1));
        let rejected = dir.path().join("rejected");
        let rc = spool_cfg(&rejected, Duration::from_secs(1));
        let rejects = Spool::open_rejects(&rc, metrics.clone()).unwrap();
        std::fs::remove_dir_all(&rejected).unwrap();
        std::fs::write(&rejected, b"not a directory").unwrap();
        let shared = writing(None, sp, Some(rejects), &metrics);
        let bad_data = InsertError {
            class: crate::metrics::ErrorClass::Data,
            message: "Code: 53. DB::Exception: Type mismatch".into(),
            ..refused()
        };
        reject(&shared, batch(3), &bad_data, Refusal::BadData).await;
        assert_eq!(metrics.dropped_rows(DropReason::SpoolWrite), 3);
        assert_eq!(metrics.rejected_rows(), 0);
        assert!(
            matches!(shared.health(), Health::Failing { ref reason } if reason.starts_with("reject spool write failed")),
            "{:?}",
            shared.health()
        );
    }

    #[tokio::test]
    async fn an_append_is_fsynced_within_the_interval_with_no_traffic_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let fsync = Duration::from_secs(1);
        let (sp, metrics) = spool_in(dir.path(), fsync);
        let shared = Arc::new(Shared::new(None, sp, None, metrics, file_only_health(), 1));
        let (_tx, rx) = mpsc::channel(1);
        let (_stop, stop_rx) = watch::channel(false);
        let limits = Limits {
            rows: 1000,
            bytes: 1 << 20,
            age: Duration::from_secs(60),
        };
        tokio::spawn(run_batcher(shared.clone(), rx, limits, 1, stop_rx.clone()));
        tokio::spawn(run_fsyncer(shared.clone(), fsync, stop_rx));
        // The second append comes right after an fsync: it waits for the fsync task's
        // timer (an append fsyncs itself only when the last fsync is 1 s old).
        spool_batch(&shared, batch(1), "test").await;
        lock(&shared.spool).sync();
        spool_batch(&shared, batch(2), "test").await;
        assert!(lock(&shared.spool).unsynced());
        let deadline = Instant::now() + Duration::from_secs(5);
        while lock(&shared.spool).unsynced() {
            assert!(Instant::now() < deadline, "the append was never fsynced");
            sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_append_is_fsynced_in_time_while_the_batcher_waits_for_an_insert() {
        // ClickHouse holds every INSERT (a hung server): with one INSERT slot, two
        // batches queued and a fourth to place, the batcher waits for a slot (up to
        // flush_interval, 10 s here). An append meanwhile (the replayer's, an INSERT
        // task's) is still fsynced within the interval: the timer was the batcher's.
        let (url, held) = hung_server();
        let ch = ClickHouseConfig {
            max_inflight_inserts: 1,
            batch_rows: 1,
            flush_interval: Duration::from_secs(10),
            request_timeout: Duration::from_secs(60),
            ..ch_at(&url)
        };
        let (sink, handle, _dir) = settled_sink(ch, Duration::from_millis(100)).await;
        for i in 0..4 {
            let row = Row {
                itemid: i,
                clock: 1_720_000_000,
                ns: 0,
                hostname: "h".into(),
                itemname: "k".into(),
                value: crate::RowValue::Uint(i),
            };
            handle.send(row, Table::Uint).await.unwrap();
        }
        sleep(Duration::from_millis(500)).await;
        append(&sink.shared, false, batch(1)).await.unwrap();
        lock(&sink.shared.spool).sync();
        append(&sink.shared, false, batch(2)).await.unwrap();
        assert!(lock(&sink.shared.spool).unsynced());
        let t0 = Instant::now();
        while lock(&sink.shared.spool).unsynced() {
            assert!(
                t0.elapsed() < Duration::from_secs(3),
                "not fsynced while the batcher waited"
            );
            sleep(Duration::from_millis(20)).await;
        }
        assert!(
            !held.lock().unwrap().is_empty(),
            "no INSERT reached the server"
        );
        drop(handle);
        sink.shutdown().await.unwrap();
    }

    /// A server on loopback that accepts connections and never answers (a hung
    /// ClickHouse, a stalled load balancer): its URL and the connections it holds.
    fn hung_server() -> (String, Arc<Mutex<Vec<std::net::TcpStream>>>) {
        hung_server_on("127.0.0.1")
    }

    /// [`hung_server`] on loopback address `ip`.
    fn hung_server_on(ip: &str) -> (String, Arc<Mutex<Vec<std::net::TcpStream>>>) {
        let listener = std::net::TcpListener::bind((ip, 0)).unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let held = Arc::new(Mutex::new(Vec::new()));
        let h = held.clone();
        std::thread::spawn(move || {
            for c in listener.incoming().flatten() {
                h.lock().unwrap().push(c);
            }
        });
        (url, held)
    }

    /// ClickHouse at `url`, quick retries.
    fn ch_at(url: &str) -> ClickHouseConfig {
        ClickHouseConfig {
            url: Some(url.into()),
            retry_backoff: Duration::from_millis(50),
            ..ClickHouseConfig::default()
        }
    }

    /// A sink writing to `ch`, its spool fsynced every `fsync`, started and settled
    /// (the replayer's first look at the spool done).
    async fn settled_sink(
        ch: ClickHouseConfig,
        fsync: Duration,
    ) -> (crate::Sink, crate::SinkHandle, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let cfg = spool_cfg(dir.path(), fsync);
        let metrics = Arc::new(SinkMetrics::default());
        let (sink, handle) = crate::Sink::start(Some(ch), cfg, metrics).await.unwrap();
        sleep(Duration::from_millis(300)).await;
        (sink, handle, dir)
    }

    /// The services' ClickHouse (`scripts/services.sh up`).
    fn services_ch() -> String {
        std::env::var("NETPOLLER_CH_URL").unwrap_or_else(|_| "http://127.0.0.1:8123".into())
    }

    fn refused() -> InsertError {
        InsertError {
            url: "test".into(),
            table: "history_uint",
            class: crate::metrics::ErrorClass::Network,
            message: "connection refused".into(),
        }
    }

    #[test]
    fn a_replay_that_waited_through_an_outage_is_timed_from_clickhouse_back() {
        // A soak's 90 s outages each ended in `spool: replayed ... took=1m 29s` for a
        // replay of 0.2 s: the replayer checks out the outage's first segment at once
        // and retries its first record until ClickHouse answers. Its drain begins when
        // ClickHouse answered, and a segment checked out later at its checkout.
        let dir = tempfile::tempdir().unwrap();
        let (sp, metrics) = spool_in(dir.path(), Duration::from_secs(1));
        let shared = writing(None, sp, None, &metrics);
        let first = Instant::now();
        assert_eq!(shared.replay_began(first), first, "no outage yet");
        shared.set_unhealthy(&refused());
        let checked_out = Instant::now();
        let before_back = Instant::now();
        shared.set_ok();
        let after_back = Instant::now();
        let began = shared.replay_began(checked_out);
        assert!(
            began >= before_back && began <= after_back,
            "checked out during the outage: from when ClickHouse answered again"
        );
        let later = Instant::now();
        assert_eq!(shared.replay_began(later), later, "checked out after it");
    }

    #[tokio::test]
    async fn a_stop_does_not_wait_for_a_probe_of_a_server_that_never_answers() {
        // A server that accepts and never answers (hung, or a stalled load balancer),
        // probed by the replayer with a 120 s request timeout: a stop waits the
        // shutdown grace at most, not the probe's timeout (systemd's SIGKILL comes first).
        let (url, held) = hung_server();
        let ch = ClickHouseConfig {
            request_timeout: Duration::from_secs(120),
            ..ch_at(&url)
        };
        let (sink, _handle, _dir) = settled_sink(ch, Duration::from_secs(1)).await;
        sink.shared.set_unhealthy(&refused());
        let deadline = Instant::now() + Duration::from_secs(5);
        while held.lock().unwrap().is_empty() {
            assert!(Instant::now() < deadline, "the replayer never probed");
            sleep(Duration::from_millis(20)).await;
        }
        let t0 = Instant::now();
        let limit = crate::SHUTDOWN_GRACE + Duration::from_secs(10);
        tokio::time::timeout(limit, sink.shutdown())
            .await
            .expect("the stop waited for the probe")
            .unwrap();
        assert!(t0.elapsed() >= crate::SHUTDOWN_GRACE - Duration::from_secs(1));
    }

    #[tokio::test]
    async fn an_unhealthy_sink_with_an_empty_spool_probes_until_clickhouse_answers() {
        // An INSERT failed and its batch did not reach the spool (a full disk): the
        // replayer, idle on an empty spool, must still find out that ClickHouse is
        // back, or the sink stays "spooling" (and dropping) for good.
        let ch = ch_at(&services_ch());
        let (sink, _handle, _dir) = settled_sink(ch, Duration::from_secs(1)).await;
        sink.shared.set_unhealthy(&refused());
        assert!(matches!(sink.health(), Health::Spooling { .. }));
        let deadline = Instant::now() + Duration::from_secs(10);
        while !matches!(sink.health(), Health::Writing) {
            assert!(
                Instant::now() < deadline,
                "never probed: {:?}",
                sink.health()
            );
            sleep(Duration::from_millis(50)).await;
        }
        sink.shutdown().await.unwrap();
    }

    #[tokio::test]
    async fn an_idle_sink_does_not_wake_up() {
        // Nothing is sent to this address: an idle sink does not contact ClickHouse.
        let ch = ch_at("http://127.0.0.1:9");
        let (sink, _handle, _dir) = settled_sink(ch, Duration::from_millis(100)).await;
        let before = wake_ups();
        sleep(Duration::from_secs(3)).await;
        // The sleep itself wakes this thread once (a page fault might add one). An
        // fsync timer ticking with nothing to sync woke it every 100 ms here (every
        // second with the defaults), and a replayer polling the spool twice a poll,
        // every second (its look at the spool goes to a blocking-pool thread), for the
        // life of the daemon.
        let woken = wake_ups() - before;
        assert!(
            woken <= 3,
            "an idle sink woke its thread {woken} times in 3 s"
        );
        sink.shutdown().await.unwrap();
    }
}
