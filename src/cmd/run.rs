//! `netpoller run`: the daemon.
//!
//! Start-up order matters: the config is loaded and the raw ICMP sockets are opened
//! while the process is still single-threaded and privileged; then privileges are
//! dropped (`--user`: every capability; else CAP_NET_RAW, unless root), and only then
//! is the tokio runtime (its threads) started — so the capability change applies to
//! every thread the daemon will ever run.
//!
//! Signals: SIGTERM / SIGINT stop taking new work, let running iterations end at their
//! deadline, save the trends hours still open for the next start (or write them, if
//! they cannot be saved), flush the sink (insert or spool) and exit 0. SIGHUP reloads
//! the config: a valid new config takes effect at each item's next slot; an invalid one
//! is logged with all its errors and the old one keeps running. Either, coming while a
//! discovery re-plan plans, cuts it short after its plan in progress (see `Plans`); a
//! stop coming while a reload plans is taken at once too, and cuts the reload short
//! (nothing more of it loaded, nothing of it swapped in). SIGUSR1 has the sink send its
//! reject spool again ([`sink::RejectsRetry`]); the loop does not wait for it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use poller::daemon::{run_engine, Clock, Drivers, Shared};
use poller::engine::{Sample, Samples};
use poller::plan::{Engine, Plan};
use poller::preprocess::{Outcome, Preprocessor};
use poller::states::{Changes, ItemStates};
use poller::trends::{SavedBy, TrendRow, TrendStats, Trends};
use tokio::sync::{mpsc, watch};

use crate::config::{Config, Found};
use crate::discovery::DiscoveryMetrics;

/// Arguments of `netpoller run`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    #[command(flatten)]
    pub plan: super::PlanArgs,
    /// After opening the raw ICMP sockets, switch to this user, holding no
    /// capability. Overrides `daemon.user`.
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,
    #[command(flatten)]
    pub daemon: super::DaemonOverrides,
}

impl Args {
    /// Tests: `run -c config`, with no `--user`.
    #[cfg(test)]
    fn of(config: PathBuf) -> Args {
        Args {
            plan: super::PlanArgs::of(config),
            user: None,
            daemon: super::DaemonOverrides::default(),
        }
    }
}

pub fn run(mut args: Args) -> anyhow::Result<ExitCode> {
    // SIGHUP is held back already: `main` holds it before it reads the command line.
    args.plan.daemon = args.daemon.clone();
    let super::Loaded {
        cfg,
        plan,
        text,
        found,
    } = match args.plan.load(None)? {
        Ok(loaded) => loaded,
        Err(e) => {
            eprint!("{e}");
            return Ok(ExitCode::from(1));
        }
    };
    super::warn_of(&cfg, &plan, cfg.process_shard(args.plan.shard));
    // The engines' sweeps are of this size until a restart: so are a reload's groups.
    args.plan.started_icmp_batch_hosts = Some(cfg.daemon.icmp_batch_hosts);
    // Before any socket: every request leaves from the source address.
    crate::cmd::check_sources(&cfg)?;
    let has_icmp = plan.tasks.iter().any(|t| t.engine == Engine::Icmp);
    // Raw sockets first, while privileged and single-threaded.
    let icmp_drivers =
        crate::cmd::open_icmp_drivers(&cfg, cfg.daemon.icmp_concurrent_sweeps, has_icmp)?;
    // The SNMP sockets too: privileged, they get the receive buffer asked for beyond
    // net.core.rmem_max (SO_RCVBUFFORCE); only extras opened later are capped by it.
    let snmp_drivers = crate::cmd::open_snmp_drivers(&cfg)?;
    // The raw sockets are open, and nothing opens one again (privdrop's module docs):
    // from here on the daemon holds no CAP_NET_RAW, unless it is root.
    let user = args.user.clone().or_else(|| cfg.daemon.user.clone());
    if let Some(user) = &user {
        crate::privdrop::drop_privileges(user)
            .with_context(|| format!("dropping privileges to {user:?}"))?;
        tracing::info!(user = %user, "dropped privileges (no capability left)");
    } else {
        use crate::privdrop::Shed;
        match crate::privdrop::shed_net_raw() {
            Ok(Shed::Dropped) => tracing::info!(
                "dropped CAP_NET_RAW: the ICMP sockets are open (more of them need a restart)"
            ),
            Ok(Shed::NotHeld | Shed::Root) => {}
            // Not fatal: holding it is an exposure, not a fault, and a seccomp filter
            // that refuses capset (a container's) should not stop the polling.
            Err(e) => tracing::warn!(
                error = %format!("{e:#}"),
                "could not drop CAP_NET_RAW: the daemon keeps it"
            ),
        }
    }
    // The engines run on threads of their own (engine_thread); what is left here (the
    // sink, its ClickHouse client, the HTTP endpoint, signals) takes ~4% of a core at
    // 100k values/s, and one thread spares the hand-overs between worker threads, which
    // were most of its wake-ups.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_name("netpoller")
        .build()
        .context("starting the async runtime")?;
    let drivers = (icmp_drivers, snmp_drivers);
    rt.block_on(daemon(args, cfg, plan, (text, found), drivers))
}

/// What to do about a spool the daemon may not use once `--user` (or `daemon.user`)
/// switched it to `user`: one made by a start as root, or by a `spool replay` run as
/// root, is root's, and one that does not exist may be in a directory the user cannot
/// write (`spool.lock: opening lock file: Permission denied` said nothing of the user).
/// `None` for other errors, and without a switch of user.
fn spool_not_the_users(e: &sink::SinkError, user: Option<&str>, dir: &Path) -> Option<String> {
    use sink::spool::SpoolError;
    let user = user?;
    match e {
        sink::SinkError::Spool(SpoolError::Io { cause, .. })
            if cause.kind() == std::io::ErrorKind::PermissionDenied =>
        {
            let fix = match dir.exists() {
                true => format!(
                    "it is another user's (made by a start without --user, or by a spool replay, as root?): `chown -R {user} {}`",
                    dir.display()
                ),
                false => format!(
                    "it cannot create it there: `install -d -o {user} {}`",
                    dir.display()
                ),
            };
            Some(format!(
                "the daemon runs as {user:?} once its sockets are open (--user, daemon.user), and {user:?} may not use the spool: {fix}"
            ))
        }
        _ => None,
    }
}

/// Holds SIGHUP and SIGUSR1 back on this thread and the threads it starts (`true`), or
/// lets them through again. Their default action ends the process: until the handlers
/// are installed (after the config, the ClickHouse schema check, the sockets: 18 s
/// against a slow server), a `systemctl reload` right after a start killed the daemon,
/// with a status systemd does not restart. Held back, each is taken once the handlers
/// are in place. `main` holds them first thing, before the command line is parsed, and
/// lets them through again for the other commands; [`daemon`] once its handlers are in.
pub(crate) fn hold_control_signals(hold: bool) {
    // SAFETY: a signal set on the stack, initialised by sigemptyset before use.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGHUP);
        libc::sigaddset(&mut set, libc::SIGUSR1);
        let how = if hold {
            libc::SIG_BLOCK
        } else {
            libc::SIG_UNBLOCK
        };
        libc::pthread_sigmask(how, &set, std::ptr::null_mut());
    }
}

async fn daemon(
    args: Args,
    cfg: Config,
    plan: Plan,
    (text, found): (Arc<str>, Found),
    (icmp_drivers, snmp): (
        Vec<poller::icmp_driver::IcmpDriver>,
        poller::daemon::SnmpDrivers,
    ),
) -> anyhow::Result<ExitCode> {
    // Shared with the reloads, which run off this thread.
    let cfg = Arc::new(cfg);
    let (hosts, items) = (plan.hosts.len(), plan.items.len());
    let probe_rate = plan.icmp_probe_rate();
    let sink_metrics = Arc::new(sink::SinkMetrics::default());
    let mut clickhouse = cfg.clickhouse.clone();
    if let Some(ch) = &mut clickhouse {
        ch.trends &= schema_at_start(ch).await?;
    }
    let spool = crate::cmd::spool_config(&cfg);
    let spool_dir = spool.dir.clone();
    let (sink, sink_handle) = sink::Sink::start(clickhouse.clone(), spool, sink_metrics.clone())
        .await
        .map_err(|e| {
            let user = args.user.as_deref().or(cfg.daemon.user.as_deref());
            match spool_not_the_users(&e, user, &spool_dir) {
                Some(hint) => anyhow::anyhow!("{e}; {hint}"),
                None => anyhow::Error::new(e),
            }
        })
        .context("starting the sink")?;
    let shared = Shared::new(plan, cfg.daemon.shards, Clock::new(), super::limits(&cfg));
    // Bound before "started" is logged: a port in use is a failed start, not one that
    // said it started.
    let metrics_listener = if cfg.daemon.metrics_listen.is_empty() {
        None
    } else {
        Some(crate::http::bind(&cfg.daemon.metrics_listen).await?)
    };
    tracing::info!(
        hosts,
        items,
        shards = cfg.daemon.shards,
        icmp_sockets = icmp_drivers.len(),
        clickhouse = cfg.clickhouse.is_some(),
        "netpoller {} started",
        env!("CARGO_PKG_VERSION")
    );

    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    // An engine that failed (an iteration panicked, or its thread did) stops the daemon.
    let (failed_tx, mut failed_rx) = mpsc::unbounded_channel::<String>();
    let (tx, rx) = poller::engine::channel(cfg.daemon.channel_capacity);

    // Discovery: walks the hosts' tables in the background and asks for a re-plan
    // (below, with the SIGHUP reloads: one place changes the plan, `Plans`) when rows
    // change. `applied`: the rows of the running plan; `found`: those discovery found
    // since; `targets_tx` holds the running plan's targets, what its rows were found for.
    let applied = found.clone();
    // The rows discovery finds are saved where this start read them, until a restart.
    let discovery_file = cfg.discovery_file(args.plan.shard);
    if !found.0.is_empty() && !discovery_file.exists() {
        // Rows of the other shares' files (the shares changed): saved under this
        // share's name now, not only once a walk changes them (the next start of this
        // share finds them, whatever becomes of the others' files).
        if let Err(e) = crate::discovery::write_file(&discovery_file, &found, &cfg.discovery) {
            tracing::warn!(error = %format!("{e:#}"), "discovery: the rows found could not be saved (a restart walks every host again)");
        }
    }
    let found = Arc::new(Mutex::new(found));
    let discovery_metrics = Arc::new(DiscoveryMetrics::default());
    let (targets_tx, targets_rx) = watch::channel(cfg.discovery.clone());
    let (replan_tx, mut replan_rx) = mpsc::channel(1);
    let discovery = tokio::spawn(crate::discovery::run(
        targets_rx,
        found.clone(),
        replan_tx,
        discovery_metrics.clone(),
        shutdown_rx.clone(),
    ));

    // Metrics endpoint.
    let http = if let Some(listener) = metrics_listener {
        let (s1, s2, sm) = (shared.clone(), shared.clone(), sink_metrics.clone());
        let dm = discovery_metrics.clone();
        let sink2 = sink.health_reader();
        let render = Arc::new(move || render_metrics(&s1, &dm, &sm));
        let with_clickhouse = clickhouse.is_some();
        let health = Arc::new(move || {
            s2.health(Duration::from_secs(30))?;
            match sink2.health() {
                sink::Health::Failing { reason } => Err(format!("sink failing: {reason}")),
                // Healthy (nothing is lost), but say what the sink is doing about a
                // ClickHouse that does not take the rows (without one, spooling is
                // the design, not news).
                sink::Health::Spooling { reason } if with_clickhouse => {
                    Ok(format!("ok: spooling ({reason})"))
                }
                _ => Ok("ok".to_string()),
            }
        });
        Some(tokio::spawn(crate::http::serve(
            listener,
            render,
            health,
            shutdown_rx.clone(),
        )))
    } else {
        None
    };

    // The engines run on threads with single-threaded runtimes of their own. SNMP: when
    // the ICMP sweeps saturate a shared runtime (long send bursts), the cheap SNMP
    // iterations are not queued behind them (BENCHMARKS.md, problem 4: SNMP started up
    // to 21 s late on shared workers). ICMP: a sweep wakes up to ~1,000 times a second;
    // on a work-stealing runtime those wake-ups hopped between workers (futex wake-ups,
    // context switches: 12% more CPU per value). One ICMP thread per core, at most one
    // per sweep socket, each taking due hosts from the same scheduler, so that the
    // kernel's send path (most of a sweep's CPU) can use every core — but only as many as
    // the configured rate needs (see `icmp_thread_count`).
    let mut engines = Vec::new();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let icmp_sockets = icmp_drivers.len();
    let icmp_threads = icmp_thread_count(probe_rate, icmp_sockets, cores);
    tracing::info!(
        icmp_threads,
        probes_per_second = rate_field(probe_rate),
        "ICMP engine: one thread per {PROBES_PER_ICMP_THREAD} probes/s configured, up to one per core and socket"
    );
    let mut groups: Vec<Vec<_>> = (0..icmp_threads).map(|_| Vec::new()).collect();
    for (i, d) in icmp_drivers.into_iter().enumerate() {
        groups[i % icmp_threads].push(d);
    }
    for (i, group) in groups.into_iter().enumerate() {
        engines.push(engine_thread(
            format!("netpoller-icmp{i}"),
            Engine::Icmp,
            Drivers::Icmp(group),
            &shared,
            &tx,
            (&shutdown_rx, &failed_tx),
        )?);
    }
    engines.push(engine_thread(
        "netpoller-snmp".into(),
        Engine::Snmp,
        Drivers::Snmp(snmp),
        &shared,
        &tx,
        (&shutdown_rx, &failed_tx),
    )?);
    drop((tx, failed_tx));

    // Signals.
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    let mut usr1 = signal(SignalKind::user_defined1())?;
    hold_control_signals(false);
    let rejects = sink.rejects_retry();

    // Sink consumer: runs the items' preprocessing (counting what it keeps back or
    // fails), follows the items' states (logged, and a gauge), and hands values as rows
    // to the sink. Started last, once nothing else can fail the start: it takes back
    // the trends hours the last stop (or checkpoint) saved, removing the stop's file,
    // which only its own stop saves again. (The engines' first values wait in the
    // channel meanwhile.)
    let trends = clickhouse.as_ref().is_none_or(|c| c.trends);
    let files =
        trends.then(|| OpenHoursFiles::new(&cfg.daemon.spool_dir, cfg.daemon.trends_checkpoint));
    let mut consumer = tokio::spawn(consume(rx, sink_handle, shared.clone(), trends, files));
    let mut plans = Plans {
        args,
        cfg,
        shared: shared.clone(),
        text,
        icmp: (icmp_threads, icmp_sockets, cores),
        applied,
        found,
        targets: targets_tx,
        discovery_file,
        metrics: discovery_metrics,
        round: None,
        reload_due: false,
        replan_again: None,
    };
    let signals = async || loop {
        tokio::select! {
            _ = term.recv() => return Signal::Term,
            _ = int.recv() => return Signal::Int,
            _ = hup.recv() => return Signal::Hup,
            // The sink's alone: it moves the reject spool into the spool, whose replay
            // loads it (and logs what moved); the loop waits on.
            _ = usr1.recv() => {
                tracing::info!("SIGUSR1: the batches ClickHouse refused (rejected/) are tried again");
                let rejects = rejects.clone();
                tokio::spawn(async move {
                    if rejects.retry().await.is_none() {
                        tracing::info!("SIGUSR1: no reject spool here (no [clickhouse]), or the daemon is stopping: nothing tried again");
                    }
                });
            }
        }
    };
    // Started: the signals are handled, the engines poll. (`Type=notify`: a `systemctl
    // start` returns now, and a reload after it finds the handler.)
    notify_ready(&shared);
    // The consumer's result, should it end before the stop (it panicked: nothing would
    // read the engines' values any more).
    let (mut exit, consumer_ended) = serve(
        &mut plans,
        signals,
        &mut consumer,
        &mut failed_rx,
        &mut replan_rx,
    )
    .await;
    crate::sdnotify::notify("STOPPING=1\nSTATUS=stopping: iterations end, the sink flushes");
    let _ = shutdown_tx.send(true);
    // A re-plan round the stop came in: cut, its plan in progress awaited (the engines
    // wind down meanwhile), its rows applied and saved for the next start.
    plans.stop().await;
    let _ = discovery.await;
    // Engines end once their running iterations reached their deadline.
    for (engine, thread) in engines {
        match tokio::task::spawn_blocking(move || thread.join()).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => {
                tracing::error!(engine = engine.as_str(), error = %e, "engine runtime failed");
                exit = ExitCode::FAILURE;
            }
            _ => {
                tracing::error!(engine = engine.as_str(), "engine thread panicked");
                exit = ExitCode::FAILURE;
            }
        }
    }
    // An engine that failed while the daemon was stopping (its iterations cut short,
    // or a failure that came with the signal): the loop above no longer read it, and
    // the exit said all was well.
    while let Ok(why) = failed_rx.try_recv() {
        tracing::error!(error = %why, "an engine failed while stopping: exit status 1 (a bug: please report it with this log)");
        exit = ExitCode::FAILURE;
    }
    // A consumer that failed still leaves the sink to flush what it was given.
    let delivered = match consumer_ended {
        Some(r) => r,
        None => consumer.await,
    }
    .unwrap_or_else(|e| {
        tracing::error!(error = %e, "the sink consumer failed");
        exit = ExitCode::FAILURE;
        0
    });
    if let Some(h) = http {
        let _ = h.await;
    }
    let report = sink.shutdown().await.context("flushing the sink")?;
    tracing::info!(
        values = delivered,
        rows_written = report.rows_written,
        rows_spooled = report.rows_spooled,
        rows_rejected = report.rows_rejected,
        rows_dropped = report.rows_dropped,
        spool_bytes = report.spool_bytes,
        "netpoller stopped"
    );
    Ok(exit)
}

/// Tells the service manager the daemon polls (`READY=1`, at the start and when a
/// reload has ended), with what the running plan polls (`STATUS=`, which `systemctl
/// status` shows).
fn notify_ready(shared: &Shared) {
    let plan = shared.plan();
    crate::sdnotify::notify(&format!(
        "READY=1\nSTATUS=polling {} hosts, {} items",
        plan.hosts.len(),
        plan.items.len()
    ));
}

/// What the daemon's loop takes from its signals.
#[derive(Debug, Clone, Copy)]
enum Signal {
    Term,
    Int,
    Hup,
}

/// The daemon's loop, until a stop: SIGTERM or SIGINT (from `signal`), an engine that
/// failed (`failed`), a sink consumer that ended. A SIGHUP reloads; discovery's asks
/// (`replan`) and the rows a round left untried start re-plan rounds ([`Plans`]).
///
/// A round (a re-plan, or a SIGHUP's reload) plans [`off_thread`] (0.35 s at a million
/// items, seconds when rows are refused) and is awaited here among the rest, not
/// inside an arm: a stop, a failed engine or consumer is taken at once (the caller
/// then cuts the round, [`Plans::stop`]), and so is a SIGHUP ([`Plans::hangup`]).
/// Returns the exit status and the consumer's result, if it ended.
async fn serve(
    plans: &mut Plans,
    mut signal: impl AsyncFnMut() -> Signal,
    consumer: &mut tokio::task::JoinHandle<u64>,
    failed: &mut mpsc::UnboundedReceiver<String>,
    replan: &mut mpsc::Receiver<()>,
) -> (ExitCode, Option<Result<u64, tokio::task::JoinError>>) {
    loop {
        // One round at a time: discovery's ask waits in its channel while one plans.
        let idle = plans.round.is_none();
        let untried = plans.replan_again;
        tokio::select! {
            r = &mut *consumer => {
                tracing::error!(error = ?r.as_ref().err(), "the sink consumer ended: stopping with exit status 1 so that the service manager starts netpoller again (a bug: please report it with this log)");
                return (ExitCode::FAILURE, Some(r));
            }
            Some(why) = failed.recv() => {
                tracing::error!(error = %why, "stopping with exit status 1 so that the service manager starts netpoller again (a bug: please report it with this log); the values polled so far are written or spooled");
                return (ExitCode::FAILURE, None);
            }
            s = signal() => match s {
                Signal::Term => { tracing::info!("SIGTERM: stopping"); break; }
                Signal::Int => { tracing::info!("SIGINT: stopping"); break; }
                Signal::Hup => plans.hangup(),
            },
            ended = round_end(&mut plans.round) => {
                if plans.round_ended(ended).await.is_none() {
                    break;
                }
            }
            // Discovery found other rows, or a round left rows untried (one host's
            // refusal among many pending) and their time came.
            () = async {
                tokio::select! {
                    Some(()) = replan.recv() => {}
                    () = sleep_until_some(untried) => {}
                }
            }, if idle => plans.start_round(),
        }
    }
    (ExitCode::SUCCESS, None)
}

/// What changes the running plan: SIGHUP reloads and discovery re-plan rounds. Both
/// plan [`off_thread`], one at a time, as a [`Round`] (a reload is a round of one
/// plan): both plan from the rows of the running plan (`applied`) and swap their plan
/// in, so that one beside the other would swap in a plan without the other's changes.
///
/// Invariants: `applied` is the rows of the plan running, but while a round plans (it
/// swaps in each plan it makes; its rows are applied when it ends, however it ends,
/// and a re-plan's saved); the rows a round did not plan stay pending in `found`
/// (discovery's, which only a reload prunes); a round is never dropped before it ends
/// (it would leave a plan swapped in that `applied` and the file do not have).
struct Plans {
    args: Args,
    /// The config the daemon started with: a reload names what differs from it and
    /// needs a restart.
    cfg: Arc<Config>,
    shared: Arc<Shared>,
    /// The running config's text, which a round plans again with other rows.
    text: Arc<str>,
    /// ICMP threads started, sweep sockets, cores: what a reload's rate is held to.
    icmp: (usize, usize, usize),
    applied: Found,
    found: Arc<Mutex<Found>>,
    /// The running plan's targets, what its rows were found for (discovery's).
    targets: watch::Sender<Vec<crate::config::DiscoveryTarget>>,
    /// Where the rows planned are saved ([`Plans::replan_found`]).
    discovery_file: PathBuf,
    metrics: Arc<DiscoveryMetrics>,
    /// The round planning (a re-plan or a reload), if one is.
    round: Option<Round>,
    /// A SIGHUP came while a round planned: the reload comes once it has ended.
    reload_due: bool,
    /// When to plan again the rows a round left untried.
    replan_again: Option<tokio::time::Instant>,
}

/// A change of the running plan planning [`off_thread`]: a discovery re-plan round
/// ([`Plans::start_round`]) or a SIGHUP's reload ([`Plans::start_reload`]).
struct Round {
    /// Set to make no plan past the one in progress ([`crate::discovery::plan_rows`]);
    /// a reload's, to load no more and swap nothing in ([`reload`]).
    cut: Arc<AtomicBool>,
    /// What cut it, if anything did.
    cut_by: Option<Cut>,
    /// A reload's, not a re-plan's.
    reload: bool,
    started: std::time::Instant,
    /// The round's end: what it made (`None` only when the runtime shuts down).
    planning: std::pin::Pin<Box<dyn std::future::Future<Output = Option<Made>> + Send>>,
}

/// What a round made.
enum Made {
    /// A re-plan's ([`Planned`]).
    Rows(Planned),
    /// A reload's.
    Reload(Box<Reloaded>),
}

/// A round's result: the rows of the last plan it took (`applied`, or as they were),
/// what it settled, and the targets of the last plan taken.
type Planned = (
    Found,
    crate::discovery::Settled,
    Option<Vec<crate::config::DiscoveryTarget>>,
);

/// What cut a round short.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Cut {
    Reload,
    Stop,
}

/// A round that ended ([`round_end`]).
struct Ended {
    started: std::time::Instant,
    cut_by: Option<Cut>,
    made: Option<Made>,
}

impl Round {
    /// Starts `planning` ([`off_thread`]), which stops early once `cut` is set.
    fn new(
        reload: bool,
        cut: Arc<AtomicBool>,
        planning: impl std::future::Future<Output = Option<Made>> + Send + 'static,
    ) -> Round {
        Round {
            cut,
            cut_by: None,
            reload,
            started: std::time::Instant::now(),
            planning: Box::pin(planning),
        }
    }

    fn cut(&mut self, by: Cut) {
        self.cut.store(true, std::sync::atomic::Ordering::Relaxed);
        // A stop after a SIGHUP's cut: the rows are not planned after a reload.
        if self.cut_by != Some(Cut::Stop) {
            self.cut_by = Some(by);
        }
    }
}

/// The end of the round in `slot` (taken out of it); without one, never. Cancel-safe:
/// the round goes on when this is dropped before it ends.
async fn round_end(slot: &mut Option<Round>) -> Ended {
    let Some(round) = slot else {
        return std::future::pending().await;
    };
    let made = round.planning.as_mut().await;
    let ended = Ended {
        started: round.started,
        cut_by: round.cut_by,
        made,
    };
    *slot = None;
    ended
}

impl Plans {
    /// SIGHUP: the reload ([`Plans::start_reload`]); while a round plans, once it has
    /// ended, and a re-plan cut short. Waiting for the round is needed (both swap in
    /// plans of `applied`), but not for all of a re-plan: the rest of its plans (up to
    /// ~5 s at a million items when rows are refused) would plan rows with the config
    /// text the reload replaces. Dropping it would be wrong: its thread swaps plans in
    /// as it goes, and `applied` (and the file) would then lack the rows of the plan
    /// running. Cut, it ends after the plan in progress (its rows applied and saved as
    /// any round's); the rows it did not plan stay pending in `found`, and are planned
    /// by a round of their own, with the new text, as any rows a round leaves untried
    /// (the reload plans `applied`, as it always does). A reload in progress is not
    /// cut: it may have read the file before its last change, so another comes after.
    fn hangup(&mut self) {
        // The manager's reload job waits for the READY=1 that ends the last reload
        // asked for ([`Plans::round_ended`]): announced by the first SIGHUP of those.
        if !self.reload_asked() {
            crate::sdnotify::notify(&crate::sdnotify::reloading());
        }
        let Some(round) = &mut self.round else {
            return self.start_reload();
        };
        self.reload_due = true;
        if round.reload {
            tracing::info!(
                "SIGHUP: a reload is in progress; the configuration is reloaded again once it ends"
            );
            return;
        }
        round.cut(Cut::Reload);
        tracing::info!("SIGHUP: the discovery re-plan in progress is cut short; the configuration is reloaded once its plan in progress ends");
    }

    /// A SIGHUP asked for a reload that has not ended: one plans, or comes once the
    /// round planning has ended. (Every reload is a SIGHUP's.)
    fn reload_asked(&self) -> bool {
        self.reload_due || self.round.as_ref().is_some_and(|r| r.reload)
    }

    /// Starts a reload ([`reload_off_thread`]), a round of its own: the loop takes
    /// what it loaded once it ends ([`Plans::took`]), and a stop meanwhile at once.
    fn start_reload(&mut self) {
        let (started, sockets, cores) = self.icmp;
        let wanted = move |rate| icmp_thread_count(rate, sockets, cores);
        let cut = Arc::new(AtomicBool::new(false));
        let rows = (&self.applied, &self.targets, cut.clone());
        let reloading =
            reload_off_thread(&self.args, &self.cfg, &self.shared, started, wanted, rows);
        self.round = Some(Round::new(true, cut, async {
            reloading.await.map(|r| Made::Reload(Box::new(r)))
        }));
    }

    /// Starts a round of the rows discovery found ([`crate::discovery::plan_rows`]):
    /// it swaps in each plan the loader takes. It plans [`off_thread`] (when rows are
    /// refused, up to log2(pending) + 1 + [`crate::discovery::SPLIT_PLANS`] plans),
    /// from a copy of `found`: rows the discovery task finds meanwhile stay in `found`
    /// for the next round, which it asks for.
    fn start_round(&mut self) {
        let cut = Arc::new(AtomicBool::new(false));
        let plan_args = self.args.plan.clone();
        let (shared, text, until) = (self.shared.clone(), self.text.clone(), cut.clone());
        let tried = self.found.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut applied = self.applied.clone();
        let planning = off_thread(move || {
            // The targets of the last plan taken, whose rows are saved.
            let mut targets = None;
            let settled = crate::discovery::plan_rows(&mut applied, &tried, &until, |rows| {
                let mut l = plan_args.replan(text.clone(), rows)?;
                shared.replace_plan(std::mem::take(&mut l.plan));
                targets = Some(std::mem::take(&mut l.cfg.discovery));
                Ok(())
            });
            Made::Rows((applied, settled, targets))
        });
        self.round = Some(Round::new(false, cut, planning));
    }

    /// The loop's: a round `ended`, taken ([`Plans::took`]), then the reload a SIGHUP
    /// asked for meanwhile. `None` only when the runtime shuts down.
    async fn round_ended(&mut self, ended: Ended) -> Option<()> {
        let a_reload = matches!(ended.made, Some(Made::Reload(_)));
        self.took(ended).await?;
        if std::mem::take(&mut self.reload_due) {
            self.start_reload();
        } else if a_reload {
            // Every SIGHUP taken: the config that runs now is the last one asked for
            // (or the one a refused reload left running, which the log says).
            notify_ready(&self.shared);
        }
        Some(())
    }

    /// What a round that `ended` made, taken: a re-plan's rows applied and saved
    /// ([`Plans::replan_found`]), a reload's config ([`Reloaded::take`]). `None` only
    /// when the runtime shuts down.
    async fn took(&mut self, ended: Ended) -> Option<()> {
        match ended.made? {
            Made::Rows(planned) => {
                let more = self
                    .replan_found(ended.started, ended.cut_by, planned)
                    .await;
                self.replan_again =
                    more.then(|| tokio::time::Instant::now() + crate::discovery::REPLAN_EVERY);
            }
            Made::Reload(reloaded) => {
                let rows = (&*self.found, &mut self.applied, &self.targets);
                if let Some(text) = reloaded.take(&self.cfg, rows) {
                    self.text = text;
                }
            }
        }
        Some(())
    }

    /// At stop: the round planning, if any, cut and awaited (the plan in progress,
    /// ~0.35 s at a million items, not the rest of the round), and taken
    /// ([`Plans::took`]): a re-plan's rows applied and saved for the next start. The
    /// rows it did not plan are not saved (as rows found but not planned yet never
    /// are): their hosts' next walks find them again. A reload cut swaps nothing in
    /// (the daemon ends: nothing of its file would be polled); one that did before the
    /// cut is taken as any, its rows not saved (a reload never saves them).
    async fn stop(&mut self) {
        let Some(round) = &mut self.round else {
            return;
        };
        round.cut(Cut::Stop);
        let ended = round_end(&mut self.round).await;
        self.took(ended).await;
    }

    /// The end of a re-plan round ([`Plans::start_round`]), `started` then and cut
    /// short by `cut_by`, if by anything: the rows of the plans it took are `applied`
    /// and saved; the host's rules whose rows it refuses get back the running plan's
    /// rows (`applied`), so that a reload does not take them either, and are logged
    /// with the loader's reasons. Returns whether rows are still pending (not tried
    /// this round).
    async fn replan_found(
        &mut self,
        started: std::time::Instant,
        cut_by: Option<Cut>,
        (now_applied, settled, targets): Planned,
    ) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        self.applied = now_applied;
        crate::discovery::put_back(
            &mut self.found.lock().unwrap_or_else(|e| e.into_inner()),
            &self.applied,
            &settled.refused,
        );
        let seconds = started.elapsed().as_secs_f64();
        if settled.planned > 0 {
            self.metrics.replans_ok.fetch_add(1, Relaxed);
            let plan = self.shared.plan();
            tracing::info!(
                hosts = plan.hosts.len(),
                items = plan.items.len(),
                seconds,
                "discovery: plan rebuilt for the rows found"
            );
        }
        if !settled.refused.is_empty() || settled.unexplained.is_some() {
            self.metrics.replans_refused.fetch_add(1, Relaxed);
        }
        // Each host's rule refused, with the loader's reasons (a limit hit by many is
        // logged for the first few).
        const NAMED: usize = 5;
        for r in settled.refused.iter().take(NAMED) {
            let rows = r.rows.as_deref().cloned().unwrap_or_default();
            tracing::error!(
                host = %r.host,
                rule = %r.rule,
                rows = rows.len(),
                indices = %rows,
                "discovery: the rows found on this host were refused (other hosts' rows are planned); its items stay as they were until its next walk tries again:\n{}",
                r.why
            );
        }
        if settled.refused.len() > NAMED {
            tracing::error!(
                refused = settled.refused.len(),
                "discovery: rows of {} more host rules were refused, as above",
                settled.refused.len() - NAMED
            );
        }
        if let Some(why) = &settled.unexplained {
            tracing::error!("discovery: the plan could not be rebuilt, it stays as it was:\n{why}");
        }
        let again = crate::discovery::REPLAN_EVERY.as_secs();
        match (settled.untried, cut_by) {
            (0, _) => {}
            (untried, None) => tracing::warn!(
                untried,
                "discovery: rows of host rules not yet planned (the plans of this round are spent): tried again in {again}s"
            ),
            (untried, Some(Cut::Reload)) => tracing::info!(
                untried,
                "discovery: rows of host rules not yet planned (the reload cut the re-plan short): tried again in {again}s"
            ),
            (untried, Some(Cut::Stop)) => tracing::info!(
                untried,
                "discovery: rows of host rules not yet planned (the stop cut the re-plan short): not saved, their hosts' next walks find them again"
            ),
        }
        if let Some(targets) = targets {
            // Saved once planned: a restart takes them as they are.
            // Where the daemon read them at its start: `daemon.discovery_file`
            // applies at the next start (a reload says so), and that start reads it.
            let path = self.discovery_file.clone();
            let rows = self.applied.clone();
            let save = move || crate::discovery::write_file(&path, &rows, &targets);
            match tokio::task::spawn_blocking(save).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %format!("{e:#}"), "discovery: the rows found could not be saved (a restart walks every host again)")
                }
                Err(e) => tracing::warn!(error = %e, "discovery: saving the rows failed"),
            }
        }
        settled.untried > 0
    }
}

/// Runs `f` (a reload, a re-plan: they parse the whole file, 0.35 s at a million items)
/// on a thread of the blocking pool, started at once, so that the daemon's thread runs
/// the sink, its ClickHouse client, the HTTP endpoint (whose `/healthz` a supervisor may
/// probe), the discovery walks and its signals meanwhile; the future returned is its
/// end. A panic in `f` goes on there; `None` only when the runtime shuts down.
fn off_thread<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> impl std::future::Future<Output = Option<T>> + Send + 'static {
    // Its logs go where this thread's go (the global subscriber; a test's own).
    let logs = tracing::dispatcher::get_default(|d| d.clone());
    let task = tokio::task::spawn_blocking(move || tracing::dispatcher::with_default(&logs, f));
    async move {
        match task.await {
            Ok(done) => Some(done),
            // A bug in the loader: as if it had panicked here.
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => None,
        }
    }
}

/// Echo requests per second one ICMP engine thread is given before another is started.
/// At ~7–10 µs of CPU per probe (BENCHMARKS.md) that is 0.15–0.2 of a core: far from
/// saturating one thread, which at ~100k probes/s fell behind on a 2-core VM, while
/// at low rates one thread was ~15% cheaper per value than two (A/B, 4,096 hosts every
/// 10 s: each thread pays its own wake-ups and cold caches for small sweeps).
const PROBES_PER_ICMP_THREAD: f64 = 20_000.0;

/// The `/metrics` text: build information, then the poller's, discovery's and the
/// sink's metrics.
fn render_metrics(
    shared: &Shared,
    discovery: &DiscoveryMetrics,
    sink: &sink::SinkMetrics,
) -> String {
    let mut out = poller::metrics::Exposition::new();
    out.gauge(
        "netpoller_build_info",
        "Build information.",
        &[("version", env!("CARGO_PKG_VERSION"))],
        1.0,
    );
    shared.render(&mut out);
    discovery.render(&mut out);
    sink.render(&mut out);
    out.finish()
}

/// Creates what is missing of the schema and verifies what exists. History that does
/// not match is worth stopping for; an unreachable server is not (values go to the
/// spool until it answers). If the whole schema fails but the history tables alone do
/// not (a trends table of another shape, no right to create one), the daemon runs
/// without trends and says so. Returns whether trends can be written.
///
/// A server that does not answer (refused, reset, no answer within
/// `clickhouse.request_timeout`) is not asked again for the history tables alone: that
/// second try timed out too and held the start (polling, `/healthz`) for twice
/// `request_timeout`. One that answered with an error is, with a `request_timeout` of
/// its own (each [`sink::schema::apply`] has one per endpoint): sharing the first's, a
/// server slower than half of it kept trends on although it had said they cannot be
/// used.
async fn schema_at_start(ch: &sink::ClickHouseConfig) -> anyhow::Result<bool> {
    let unanswered = |why: &dyn std::fmt::Display| {
        tracing::warn!(error = %why, "ClickHouse schema could not be checked at start; spooling until it answers");
        Ok(ch.trends)
    };
    let history_failed = |e: sink::SchemaError| match e {
        sink::SchemaError::Query { .. } => unanswered(&e),
        e => Err(e).context("ClickHouse schema check (see `netpoller schema -c FILE`)"),
    };
    let with_trends = match sink::schema::apply(ch).await {
        Ok(applied) => {
            schema_verified(&applied);
            return Ok(ch.trends);
        }
        Err(e) if ch.trends && !unreachable(&e) => e,
        Err(e) => return history_failed(e),
    };
    // Only when something failed, and the server answered: is it the history part?
    let history = sink::ClickHouseConfig {
        trends: false,
        ..ch.clone()
    };
    match sink::schema::apply(&history).await {
        Ok(applied) => {
            schema_verified(&applied);
            tracing::warn!(error = %with_trends, "trends are off: the trends tables cannot be used (fix them, or set clickhouse.trends = false to silence this)");
            Ok(false)
        }
        Err(e) => history_failed(e),
    }
}

/// Logs the schema found good at start, naming the tables the start created: on a
/// first deployment an operator (or the DBA) reads who made the database and its
/// tables, which the log had called only "verified".
fn schema_verified(applied: &[sink::schema::Applied]) {
    let created: Vec<String> = applied
        .iter()
        .filter(|a| !a.created.is_empty())
        .map(|a| format!("{}: {}", a.url, a.created.join(", ")))
        .collect();
    if created.is_empty() {
        tracing::info!("ClickHouse schema verified");
    } else {
        tracing::info!(
            created = %created.join("; "),
            "ClickHouse schema verified; created what was missing"
        );
    }
}

/// `e` says a server did not answer (connection refused or reset, timed out), as
/// opposed to one that answered with an error.
fn unreachable(e: &sink::SchemaError) -> bool {
    matches!(e, sink::SchemaError::Query { cause, .. }
        if matches!(sink::writer::classify(cause), sink::ErrorClass::Network | sink::ErrorClass::Timeout))
}

/// A rate as a log field: whole from 10 up, two significant digits below (a lab's one
/// host pinged every 10 s is 0.3 probes/s, which rounding to whole logged as 0.0), and
/// still a number in JSON logs.
fn rate_field(r: f64) -> f64 {
    if !r.is_finite() || r <= 0.0 || r >= 10.0 {
        return r.round();
    }
    let scale = 10f64.powi(1 - r.log10().floor() as i32);
    (r * scale).round() / scale
}

/// ICMP engine threads for `probe_rate` echo requests per second over `sockets` sweep
/// sockets: one per [`PROBES_PER_ICMP_THREAD`], at least one, at most one per core and
/// per socket (a socket's sweeps run on one thread); none without sockets.
fn icmp_thread_count(probe_rate: f64, sockets: usize, cores: usize) -> usize {
    let want = (probe_rate / PROBES_PER_ICMP_THREAD).ceil().max(1.0) as usize;
    want.min(sockets).min(cores.max(1))
}

/// SIGHUP: [`reload`] [`off_thread`] with the rows of the running plan (`applied`), not
/// with the rows discovery `found` since, which wait for their own re-plan (due: the
/// discovery task asks for it, [`Plans::start_round`] plans what the loader takes): planned
/// by the reload, they were counted in its log line as what the new file added and
/// changed, and rows the loader refuses had the new file refused. Both lose the rows of
/// what the reload changed (which were found for the discovery task's `targets`).
///
/// Those are dropped from `found` back on the daemon's thread, and the discovery task
/// gets its new targets right after, with no await between: a walk of a job the reload
/// changed (another address, another rule) that ends meanwhile is then either pruned
/// with the rest or, once the task has its new targets, not taken. Pruned on the
/// reload's thread, such a walk ending before the targets were sent put back the rows
/// just dropped, and the next re-plan polled them at the new address
/// ([`Reloaded::take`]).
///
/// Started at once; the future returned is the end of the reload's thread, which loads
/// no more and swaps nothing in once `cut` is set ([`reload`]). `None` only when the
/// runtime shuts down.
fn reload_off_thread(
    args: &Args,
    running_cfg: &Arc<Config>,
    shared: &Arc<Shared>,
    icmp_threads: usize,
    wanted: impl Fn(f64) -> usize + Send + 'static,
    (applied, targets, cut): (
        &Found,
        &watch::Sender<Vec<crate::config::DiscoveryTarget>>,
        Arc<AtomicBool>,
    ),
) -> impl std::future::Future<Output = Option<Reloaded>> + Send + 'static {
    let running = targets.borrow().clone();
    let (args, cfg) = (args.clone(), running_cfg.clone());
    let (shared, mut rows) = (shared.clone(), applied.clone());
    off_thread(move || {
        // `rows` is a copy: a refused reload leaves `applied` as it was.
        let with = (&mut rows, &running[..]);
        let loaded = reload(&args, &cfg, &shared, icmp_threads, wanted, &cut, with);
        Reloaded {
            loaded,
            rows,
            running,
        }
    })
}

/// The end of a reload's thread ([`reload_off_thread`]).
struct Reloaded {
    /// What it loaded and swapped in; `None` when it was refused or cut.
    loaded: Option<super::Loaded>,
    /// The rows of the plan it swapped in.
    rows: Found,
    /// The discovery targets of the plan it replaced.
    running: Vec<crate::config::DiscoveryTarget>,
}

impl Reloaded {
    /// Takes a reload that swapped its plan in, on the daemon's thread: its rows are
    /// `applied`, those of what it changed dropped from `found`, and the discovery
    /// task gets its new targets (module docs of [`reload_off_thread`]; the daemon's
    /// config `running_cfg` gives their source address). Returns the new config's
    /// text, if it was taken.
    fn take(
        self,
        running_cfg: &Config,
        (found, applied, targets): (
            &Mutex<Found>,
            &mut Found,
            &watch::Sender<Vec<crate::config::DiscoveryTarget>>,
        ),
    ) -> Option<Arc<str>> {
        let l = self.loaded?;
        *applied = self.rows;
        let mut new_targets = l.cfg.discovery;
        // (Not async: no await from the thread's end on, see reload_off_thread.)
        let mut found = found.lock().unwrap_or_else(|e| e.into_inner());
        crate::discovery::prune(&mut found, &self.running, &new_targets);
        drop(found);
        // Walks leave from where the engines' sockets do: the start's source_ip (a new
        // one needs a restart, as the warning says).
        let source = running_cfg.daemon.source_addrs();
        for t in &mut new_targets {
            t.source = source;
        }
        targets.send_replace(new_targets);
        Some(l.text)
    }
}

/// Loads the config again and swaps the plan in; the ICMP thread count stays (threads
/// are started once): `wanted(rate)` says how many the new rate would have started.
/// Rows found for what the new config changed are dropped from `found` (which were
/// found for `targets`). Returns what was loaded (the plan moved out), or `None` when
/// the reload failed or a stop `cut` it: set before it starts, nothing is loaded; set
/// before the plan is swapped in, it is not (the daemon ends: a stop waits for no
/// more than the loads in progress).
fn reload(
    args: &Args,
    running: &Config,
    shared: &Shared,
    icmp_threads: usize,
    wanted: impl Fn(f64) -> usize,
    cut: &AtomicBool,
    (found, targets): (&mut Found, &[crate::config::DiscoveryTarget]),
) -> Option<super::Loaded> {
    // `None` (logged) once a stop has cut the reload: each `not_stopped()?` is a point
    // past which nothing more is loaded, planned or swapped in.
    let not_stopped = || {
        if !cut.load(std::sync::atomic::Ordering::Relaxed) {
            return Some(());
        }
        tracing::info!("SIGHUP: the stop cut the reload short; the configuration is not reloaded");
        None
    };
    not_stopped()?;
    let mut load = args.plan.load(Some(found));
    // A stop meanwhile: nothing more is loaded or planned. (What follows takes up to
    // three more plans, each as long as the load, which the stop waited for.)
    not_stopped()?;
    if matches!(load, Ok(Err(_))) && !found.0.is_empty() {
        // Refused with the rows found, maybe for rows the new file does not take (of a
        // rule it changed, past its item limit with its new items): which those are is
        // known from the file loaded without rows; planned again without them.
        if let Ok(Ok(bare)) = args.plan.load(Some(&Found::default())) {
            not_stopped()?;
            if crate::discovery::prune(found, targets, &bare.cfg.discovery) {
                let text = bare.text.clone();
                // (Not two plans at once.)
                drop(bare);
                if let Ok(l) = args.plan.replan(text, found) {
                    load = Ok(Ok(l));
                }
            }
        }
    }
    match load {
        Ok(Ok(mut loaded)) => {
            // Rows found for what the new config changed (a rule, a host's address, a
            // host or rule gone) are not its: planned again without them.
            if crate::discovery::prune(found, targets, &loaded.cfg.discovery) {
                not_stopped()?;
                // (Not three plans at once.)
                drop(std::mem::take(&mut loaded.plan));
                match args.plan.replan(loaded.text.clone(), found) {
                    Ok(l) => loaded = l,
                    Err(e) => {
                        shared.reload_failed();
                        tracing::error!(
                            "SIGHUP: new configuration rejected, the old one keeps running:\n{e}"
                        );
                        return None;
                    }
                }
            }
            not_stopped()?;
            let cfg = &loaded.cfg;
            let plan = std::mem::take(&mut loaded.plan);
            let (h, i) = (plan.hosts.len(), plan.items.len());
            let old = shared.plan();
            let before = old.hosts.len();
            if h == 0 && before > 0 {
                // A file caught empty or half-written (an editor, a deployment tool) by
                // the reload would stop all polling without a word. (Checked before
                // the settings that need a restart: an empty file's defaults are no
                // change to warn of.)
                shared.reload_failed();
                tracing::error!(
                    hosts_before = before,
                    "SIGHUP: new configuration rejected, the old one keeps running: it has no hosts (an empty or half-written file?); to poll nothing, stop the daemon"
                );
                return None;
            }
            super::warn_of(cfg, &plan, cfg.process_shard(args.plan.shard));
            let fixed = restart_only_changes(running, cfg);
            if !fixed.is_empty() {
                tracing::warn!(
                    keys = %fixed.join(", "),
                    "SIGHUP: these settings changed but apply only at start; restart to use them (hosts and items are reloaded)"
                );
            }
            if let Some((i, n)) = args.plan.shard {
                let file = cfg.process_shard(None);
                if file != running.process_shard(None) {
                    tracing::warn!(
                        "SIGHUP: daemon.shard changed to \"{}/{}\", but this process keeps --shard {i}/{n} (the command line overrides the file)",
                        file.0,
                        file.1
                    );
                }
            }
            let rate = plan.icmp_probe_rate();
            let wanted = wanted(rate);
            if wanted > icmp_threads {
                tracing::warn!(
                    icmp_threads,
                    wanted,
                    probes_per_second = rate_field(rate),
                    "SIGHUP: the new configuration asks for more ICMP threads than were started; restart to use them"
                );
            }
            let items_before = old.items.len();
            let diff = poller::plan_diff::PlanDiff::between(&old, &plan);
            // Not kept alive past the swap: the old plan is freed where it always was.
            drop(old);
            // (The diff takes a while at a million items: a stop meanwhile is taken.)
            not_stopped()?;
            shared.set_restart_pending(!fixed.is_empty() || wanted > icmp_threads);
            shared.reload(plan);
            tracing::info!(
                hosts = h,
                items = i,
                hosts_before = before,
                items_before,
                hosts_added = diff.hosts_added,
                hosts_removed = diff.hosts_removed,
                hosts_changed = diff.hosts_changed,
                items_added = diff.items_added,
                items_removed = diff.items_removed,
                items_changed = diff.items_changed,
                hosts_moved = diff.hosts_moved,
                changes = %diff,
                "SIGHUP: configuration reloaded"
            );
            Some(loaded)
        }
        Ok(Err(e)) => {
            shared.reload_failed();
            tracing::error!("SIGHUP: new configuration rejected, the old one keeps running:\n{e}");
            None
        }
        Err(e) => {
            shared.reload_failed();
            tracing::error!(error = %e, "SIGHUP: reload failed, the old configuration keeps running");
            None
        }
    }
}

/// The keys whose value differs between `running` and `new` but that only take effect at
/// start: the sockets, threads, scheduler shards, sink and HTTP endpoint are built once.
/// (Hosts, items, `[icmp]`/`[snmp]` key defaults, `daemon.shard` and
/// `daemon.icmp_phases` are reloaded.) The reload warns of them, and `check-config
/// --against` lists them.
pub(super) fn restart_only_changes(running: &Config, new: &Config) -> Vec<&'static str> {
    // Destructured so that a new `[daemon]` key cannot be left out of this list.
    let crate::config::DaemonSection {
        shards,
        shard: _,
        metrics_listen,
        spool_dir,
        spool_max_bytes,
        spool_fsync_interval,
        channel_capacity,
        icmp_batch_hosts,
        snmp_batch_requests,
        batch_window,
        icmp_phases: _,
        icmp_concurrent_sweeps,
        snmp_concurrent_iterations,
        user,
        discovery_file,
        trends_checkpoint,
        source_ip: _,
    } = &running.daemon;
    let n = &new.daemon;
    [
        ("daemon.shards", *shards != n.shards),
        ("daemon.metrics_listen", *metrics_listen != n.metrics_listen),
        ("daemon.spool_dir", *spool_dir != n.spool_dir),
        (
            "daemon.spool_max_bytes",
            *spool_max_bytes != n.spool_max_bytes,
        ),
        (
            "daemon.spool_fsync_interval",
            *spool_fsync_interval != n.spool_fsync_interval,
        ),
        (
            "daemon.channel_capacity",
            *channel_capacity != n.channel_capacity,
        ),
        (
            "daemon.icmp_batch_hosts",
            *icmp_batch_hosts != n.icmp_batch_hosts,
        ),
        (
            "daemon.snmp_batch_requests",
            *snmp_batch_requests != n.snmp_batch_requests,
        ),
        ("daemon.batch_window", *batch_window != n.batch_window),
        (
            "daemon.icmp_concurrent_sweeps",
            *icmp_concurrent_sweeps != n.icmp_concurrent_sweeps,
        ),
        (
            "daemon.snmp_concurrent_iterations",
            *snmp_concurrent_iterations != n.snmp_concurrent_iterations,
        ),
        ("daemon.user", *user != n.user),
        ("daemon.discovery_file", *discovery_file != n.discovery_file),
        (
            "daemon.trends_checkpoint",
            *trends_checkpoint != n.trends_checkpoint,
        ),
        // The addresses, not how they were written.
        (
            "daemon.source_ip",
            running.daemon.source_addrs() != n.source_addrs(),
        ),
        ("[clickhouse]", running.clickhouse != new.clickhouse),
        ("icmp.max_pps", running.icmp.max_pps != new.icmp.max_pps),
        ("snmp.max_pps", running.snmp.max_pps != new.snmp.max_pps),
    ]
    .into_iter()
    .filter_map(|(key, changed)| changed.then_some(key))
    .collect()
}

/// How long after a reload the consumer forgets removed items a second time, at the
/// earliest ([`StalePlans`]).
const PRUNE_AGAIN_AFTER: Duration = Duration::from_secs(60);
/// After the last iteration of an older plan has ended, how long its last samples get
/// to come through the channel before the consumer forgets what only they could name.
const PRUNE_SETTLE: Duration = Duration::from_secs(5);

/// When the consumer can forget, a second time, the items a reload removed (their
/// states, previous values and trends lookup): once no iteration that started on an
/// older plan can still deliver. An iteration holds its plan until it ends, so the
/// older plans' reference counts say it; time alone did not (an SNMP iteration has no
/// deadline: a device with many requests, long timeouts and retries went on past the
/// minute that was allowed, and its late values were left out of trends).
#[derive(Default)]
struct StalePlans {
    /// The plans replaced since the last pruning, while anything holds them.
    old: Vec<std::sync::Weak<Plan>>,
    /// When to look again; `None`: nothing to prune.
    next: Option<tokio::time::Instant>,
    /// No older plan was held at the last look (the next look prunes).
    ended: bool,
}

impl StalePlans {
    /// The plans `old` were replaced, seen at `now`.
    fn replaced(&mut self, old: Vec<std::sync::Weak<Plan>>, now: tokio::time::Instant) {
        self.old.extend(old);
        self.next = Some(now + PRUNE_AGAIN_AFTER);
        self.ended = false;
    }

    /// Whether to prune at `now`: at least [`PRUNE_AGAIN_AFTER`] after the last reload
    /// and [`PRUNE_SETTLE`] after the older plans were last seen in use.
    fn due(&mut self, now: tokio::time::Instant) -> bool {
        if self.next.is_none_or(|t| now < t) {
            return false;
        }
        self.old.retain(|p| p.strong_count() > 0);
        if self.ended && self.old.is_empty() {
            *self = StalePlans::default();
            return true;
        }
        self.ended = self.old.is_empty();
        self.next = Some(now + PRUNE_SETTLE);
        false
    }
}

#[cfg(test)]
thread_local! {
    /// Tests: how many times this thread's consumer gave the heap back
    /// ([`give_back_replaced_plans`]).
    static HEAP_GIVEN_BACK: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Gives the memory of the plans replaced since the last pruning back to the system
/// ([`super::trim_heap`], on a thread of the blocking pool: it walks the whole heap),
/// once it is free: no iteration holds them and the removed items' lookup is dropped
/// ([`StalePlans`]). glibc keeps what is freed in its arenas, and a reload builds its
/// plan on a thread of the blocking pool, in an arena of that thread, while the plan it
/// replaces is freed in another: without this the old plan's memory stayed resident.
/// At 786,240 ICMP items a daemon of 167 MB went to 244 MB after one reload of the same
/// file and to 290 MB after three (BENCHMARKS.md, "Reloads at 262,080 hosts").
fn give_back_replaced_plans() {
    #[cfg(test)]
    HEAP_GIVEN_BACK.with(|n| n.set(n.get() + 1));
    let t0 = std::time::Instant::now();
    drop(tokio::task::spawn_blocking(move || {
        super::trim_heap();
        tracing::debug!(took = ?t0.elapsed(), "the replaced plans' memory is given back");
    }));
}

/// Forgets the states and previous values of items the current plan does not have.
fn forget_removed(shared: &Shared, states: &mut ItemStates, pre: &mut Preprocessor) {
    let plan = shared.plan();
    states.retain(plan.items.iter().map(|i| i.itemid));
    pre.retain(plan.items.iter().map(|i| (i.itemid, plan.steps(i))));
}

/// Sample → history row; only values become rows.
pub fn to_row(s: Sample) -> Option<(sink::Table, sink::Row)> {
    use poller::value::Value;
    let (table, value) = match s.result.ok()? {
        Value::Float(f) => (sink::Table::Dbl, sink::RowValue::Float(f)),
        Value::Uint(u) => (sink::Table::Uint, sink::RowValue::Uint(u)),
        Value::Str(t) => (sink::Table::Str, sink::RowValue::Str(t)),
    };
    Some((
        table,
        sink::Row {
            itemid: s.itemid,
            clock: s.clock,
            ns: s.ns,
            hostname: s.host,
            itemname: s.key,
            value,
        },
    ))
}

/// The sink's form of the same aggregate.
fn sink_trend<T>(s: poller::trends::Stats<T>) -> sink::Trend<T> {
    sink::Trend {
        min: s.min,
        max: s.max,
        avg: s.avg,
        count: s.count,
    }
}

/// Trend → trends row. `trends_uint` is `Int64` in Glaber's schema: unsigned values
/// above `i64::MAX` are stored as `i64::MAX`.
pub(crate) fn trend_row(t: TrendRow) -> (sink::Table, sink::Row) {
    let int = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let (table, value) = match t.stats {
        TrendStats::Float(s) => (
            sink::Table::TrendsDbl,
            sink::RowValue::FloatTrend(sink_trend(s)),
        ),
        TrendStats::Uint(s) => (
            sink::Table::TrendsUint,
            sink::RowValue::UintTrend(sink_trend(s.map(int))),
        ),
    };
    let row = sink::Row {
        itemid: t.itemid,
        clock: t.clock,
        ns: 0,
        hostname: t.host,
        itemname: t.key,
        value,
    };
    (table, row)
}

/// What woke the consumer.
enum Wake {
    /// This many batches arrived (0: every engine has stopped).
    Batches(usize),
    /// Time for the hourly trends sweep.
    Sweep,
    /// Time to save the open trends hours (`daemon.trends_checkpoint`).
    Checkpoint,
}

/// Sleeps until `at`; without one, forever.
async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Unix seconds now.
fn unix_now() -> u32 {
    poller::engine::clock_now().0
}

/// Where, in the spool folder, a stop leaves the trends hours still open for the next
/// start ([`poller::trends::Trends::save_open`]).
pub const OPEN_HOURS_FILE: &str = "trends-open-hours";

/// Where, in the spool folder, the checkpoints of the open trends hours are
/// (`daemon.trends_checkpoint`): what a start after a crash takes back.
pub const CHECKPOINT_FILE: &str = "trends-checkpoint";

/// The files that carry the open trends hours from one process to the next.
///
/// Invariants: a stop's save is read once (removed as it is read: a crash later must not
/// count it twice); a checkpoint is taken back only when there is no stop's save (the
/// stop removes it before it saves or writes its hours), and only in part
/// ([`SavedBy::Checkpoint`]): the process that took it may have written any of its
/// hours afterwards. Only one checkpoint is written at a time.
struct OpenHoursFiles {
    at_stop: PathBuf,
    checkpoint: PathBuf,
    /// How often a checkpoint is taken (none: never).
    every: Option<Duration>,
    /// When the next is due.
    next: tokio::time::Instant,
    /// The last one's commit (sync and rename), on a blocking thread.
    writing: Option<tokio::task::JoinHandle<()>>,
}

impl OpenHoursFiles {
    /// In folder `dir` (the spool's), a checkpoint `every` so often (zero: never).
    fn new(dir: &Path, every: Duration) -> OpenHoursFiles {
        OpenHoursFiles {
            at_stop: dir.join(OPEN_HOURS_FILE),
            checkpoint: dir.join(CHECKPOINT_FILE),
            every: Some(every).filter(|e| !e.is_zero()),
            // The first at once: it replaces what the start took back.
            next: tokio::time::Instant::now(),
            writing: None,
        }
    }

    /// When the next checkpoint is due, if checkpoints are taken.
    fn due(&self) -> Option<tokio::time::Instant> {
        self.every.map(|_| self.next)
    }

    /// At start: takes back into `t` the hours the last stop saved (removing its file),
    /// or, without those, what the last checkpoint saved; the hours a stop saved that
    /// cannot continue go to `out`.
    fn take_back(&self, t: &mut Trends, out: &mut Vec<TrendRow>) {
        let hour = unix_now() / 3600;
        if let Some(bytes) = read_saved(&self.at_stop, "the last stop saved") {
            if let Err(e) = crate::fsutil::remove(&self.at_stop) {
                tracing::warn!(path = %self.at_stop.display(), error = %e, "trends: the hours the last stop saved are not used: the file cannot be removed (and would be used again)");
                return;
            }
            match t.restore_open(&bytes, hour, SavedBy::Stop, out) {
                Ok(r) => tracing::info!(
                    continued = r.continued,
                    written = r.written,
                    "trends: the hours the last stop saved are taken back (continued: this hour's; written: ended ones, and of items this start does not poll: removed, not discovered yet, or of another process shard)"
                ),
                Err(e) => tracing::warn!(path = %self.at_stop.display(), error = %e, "trends: the hours the last stop saved are lost"),
            }
        } else if let Some(bytes) = read_saved(&self.checkpoint, "the last checkpoint saved") {
            match t.restore_open(&bytes, hour, SavedBy::Checkpoint, out) {
                Ok(r) => tracing::warn!(
                    continued = r.continued,
                    dropped = r.dropped,
                    "trends: the last run did not stop (a crash?): the hours of its last checkpoint are taken back (continued: this hour's, without the values after the checkpoint; dropped: ended ones, items gone, which it may have written)"
                ),
                Err(e) => tracing::warn!(path = %self.checkpoint.display(), error = %e, "trends: the hours the last checkpoint saved are lost"),
            }
        }
        if self.every.is_none() {
            // Not replaced by checkpoints of this run: must not be taken back again.
            self.remove_checkpoint();
        }
    }

    /// Saves `t`'s open hours to the checkpoint file (written here, synced and renamed
    /// on a blocking thread), unless the last one is still being synced.
    fn take(&mut self, t: &Trends) {
        let Some(every) = self.every else { return };
        self.next = tokio::time::Instant::now() + every;
        if self.writing.as_ref().is_some_and(|w| !w.is_finished()) {
            tracing::debug!(
                "trends: the last checkpoint is still being written; this one is skipped"
            );
            return;
        }
        let failed = |e: anyhow::Error| {
            tracing::warn!(error = %format!("{e:#}"), "trends: the checkpoint could not be saved (a crash would lose more of the open hours)");
        };
        match crate::fsutil::stage(&self.checkpoint, |w| t.save_open(w)) {
            Ok((staged, hours)) => {
                self.writing = Some(tokio::task::spawn_blocking(move || match staged.commit() {
                    Ok(()) => tracing::debug!(hours, "trends: checkpoint saved"),
                    Err(e) => failed(e),
                }));
            }
            Err(e) => failed(e),
        }
    }

    /// At stop, before the open hours are saved or written: no checkpoint may outlive
    /// the stop (the next start would take back hours the stop wrote).
    async fn finish(&mut self) {
        if let Some(w) = self.writing.take() {
            let _ = w.await;
        }
        self.remove_checkpoint();
    }

    fn remove_checkpoint(&self) {
        match crate::fsutil::remove(&self.checkpoint) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::error!(path = %self.checkpoint.display(), error = %e, "trends: the checkpoint cannot be removed; remove it by hand before the next start, which would take back hours already written")
            }
        }
    }
}

/// The bytes of the saved open hours at `path`, if there are any.
fn read_saved(path: &Path, what: &str) -> Option<Vec<u8>> {
    match std::fs::read(path) {
        Ok(b) => Some(b),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "trends: the hours {what} cannot be read; they are lost");
            None
        }
    }
}

/// The engines' channel as the consumer holds it, with the batches it took from it
/// and has not yet delivered. Should the consumer panic (a bug), the values of both
/// are counted lost with the sink's (`netpoller_sink_dropped_rows_total{reason=
/// "internal"}`) as they are dropped: they went uncounted. Values already being
/// delivered when it panicked, and those the engines park after it (refused by the
/// closed channel), are not counted.
struct Input {
    rx: mpsc::Receiver<Samples>,
    batches: Vec<Samples>,
    sink: sink::SinkHandle,
}

impl Drop for Input {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        self.rx.close();
        let mut left = std::mem::take(&mut self.batches);
        while let Ok(b) = self.rx.try_recv() {
            left.push(b);
        }
        // A value is a history row; a failed poll is none.
        let values = left.iter().flatten().filter(|s| s.result.is_ok()).count() as u64;
        tracing::error!(
            values,
            "the sink consumer failed: the values in its channel are lost (a bug: please report it with this log)"
        );
        self.sink.lost(values);
    }
}

/// Tests: the consumer panics on a sample of this key (a bug's stand-in).
#[cfg(test)]
const TEST_PANIC_KEY: &str = "test-panic";

/// Move values from the engines' channel into the sink, up to 4,096 values (whole
/// batches of the engines) per message, with the trends rows they close (`trends`).
/// With `files`, the hours still open at stop are saved there rather than written,
/// and those saved by the process before are taken back at start: a restart within an
/// hour makes one trends row of it, not two; checkpoints keep most of them over a
/// crash. Returns the values delivered.
async fn consume(
    rx: mpsc::Receiver<Samples>,
    sink: sink::SinkHandle,
    shared: Arc<Shared>,
    trends: bool,
    mut files: Option<OpenHoursFiles>,
) -> u64 {
    const BATCHES: usize = 4096 / poller::engine::EMIT_BATCH;
    // `recv_many` with a limit of 0 returns 0, which means "every engine stopped".
    const _: () = assert!(BATCHES > 0);
    let mut n = 0;
    let mut input = Input {
        rx,
        batches: Vec::with_capacity(BATCHES),
        sink: sink.clone(),
    };
    let mut states = ItemStates::new(shared.failing.clone());
    let mut pre = Preprocessor::default();
    // The generation before the plan: a reload in between is then seen at once.
    let mut generation = shared.generation();
    let mut trends = trends.then(|| Trends::new(shared.plan()));
    let mut closed = Vec::new();
    if let (Some(t), Some(f)) = (&mut trends, &files) {
        f.take_back(t, &mut closed);
    }
    let checkpoint_at = |files: &Option<OpenHoursFiles>| files.as_ref().and_then(|f| f.due());
    let sweep_in = || Duration::from_secs(poller::trends::secs_to_sweep(unix_now()).into());
    let mut sweep_at = tokio::time::Instant::now() + sweep_in();
    // Iterations that started on the old plan still deliver after a reload, and may
    // bring back items it removed: forget them again once those have ended.
    let mut stale = StalePlans::default();
    loop {
        let wake = tokio::select! {
            got = input.rx.recv_many(&mut input.batches, BATCHES) => Wake::Batches(got),
            _ = tokio::time::sleep_until(sweep_at), if trends.is_some() => Wake::Sweep,
            _ = sleep_until_some(checkpoint_at(&files)), if trends.is_some() => Wake::Checkpoint,
        };
        let now = tokio::time::Instant::now();
        let mut rows = Vec::new();
        match wake {
            Wake::Batches(0) => break,
            Wake::Checkpoint => {
                if let (Some(t), Some(f)) = (&trends, &mut files) {
                    f.take(t);
                }
            }
            Wake::Sweep => {
                sweep_at = now + sweep_in();
                if let Some(t) = &mut trends {
                    t.close_before(unix_now() / 3600, &mut closed);
                }
            }
            Wake::Batches(_) => {
                #[cfg(test)]
                if input
                    .batches
                    .iter()
                    .flatten()
                    .any(|s| &*s.key == TEST_PANIC_KEY)
                {
                    panic!("test: the sink consumer panics");
                }
                #[cfg(debug_assertions)]
                poller::daemon::test_failpoint("consumer");
                if shared.generation() != generation {
                    generation = shared.generation();
                    let plan = shared.plan();
                    stale.replaced(shared.take_replaced(), now);
                    forget_removed(&shared, &mut states, &mut pre);
                    if let Some(t) = &mut trends {
                        t.rebase(plan.clone(), &mut closed);
                    }
                    // The checkpoint before the reload holds the items it removed as
                    // the plan's (a start with that plan would continue their hours,
                    // which the reload's minute writes): the next one, as removed.
                    if let Some(f) = &mut files {
                        f.next = f.next.min(now);
                    }
                } else if stale.due(now) {
                    forget_removed(&shared, &mut states, &mut pre);
                    if let Some(t) = &mut trends {
                        t.forget_lookup(&mut closed);
                    }
                    give_back_replaced_plans();
                }
                n += deliver(
                    &mut input.batches,
                    &mut pre,
                    &mut states,
                    trends.as_mut().map(|t| (t, &mut closed)),
                    &shared,
                    &mut rows,
                );
            }
        }
        if !send(&sink, rows, &mut closed).await {
            tracing::error!("sink stopped while values were still arriving");
            return n;
        }
    }
    if let Some(t) = &mut trends {
        // At stop, the open hours: saved for the next start if they can be, else written
        // (a start within the same hour then adds a second row).
        if let Some(f) = &mut files {
            f.finish().await;
        }
        let saved = files.as_ref().map(|f| {
            crate::fsutil::replace(&f.at_stop, |w| t.save_open(w)).map(|hours| (&f.at_stop, hours))
        });
        match saved {
            Some(Ok((path, hours))) => tracing::info!(
                hours,
                path = %path.display(),
                "trends: the hours still open are saved for the next start"
            ),
            saved => {
                if let Some(Err(e)) = saved {
                    tracing::warn!(error = %format!("{e:#}"), "trends: the hours still open could not be saved; they are written now (a start within the hour adds a second row)");
                }
                t.drain(&mut closed);
            }
        }
        if !send(&sink, Vec::new(), &mut closed).await {
            tracing::error!("sink stopped before the trends of the open hours were written");
        }
    }
    n
}

/// Most trends rows per message to the sink: the hourly sweep (or a stop) closes every
/// item's hour at once, a million rows at a million items.
const TREND_CHUNK: usize = 16_384;

/// Sends `rows` and the trends rows of `closed` (emptied; its memory given back down to
/// one chunk), at most [`TREND_CHUNK`] of them per message. `false`: the sink stopped.
async fn send(
    sink: &sink::SinkHandle,
    mut rows: Vec<(sink::Table, sink::Row)>,
    closed: &mut Vec<TrendRow>,
) -> bool {
    loop {
        // From the back: a front drain would move the rest each time.
        let n = closed.len().min(TREND_CHUNK);
        rows.extend(closed.drain(closed.len() - n..).map(trend_row));
        if !rows.is_empty() && sink.send_many(rows).await.is_err() {
            return false;
        }
        if closed.is_empty() {
            closed.shrink_to(TREND_CHUNK);
            return true;
        }
        rows = Vec::with_capacity(TREND_CHUNK);
    }
}

/// One pass per sample of `batches`: preprocessing, its item's state, its trend, its
/// history row (into `rows`). Returns the values that became rows.
fn deliver(
    batches: &mut Vec<Samples>,
    pre: &mut Preprocessor,
    states: &mut ItemStates,
    mut trends: Option<(&mut Trends, &mut Vec<TrendRow>)>,
    shared: &Shared,
    rows: &mut Vec<(sink::Table, sink::Row)>,
) -> u64 {
    let (mut discarded, mut failed) = (0, 0);
    let mut changes = Changes::default();
    let plan = shared.plan();
    for s in batches.drain(..).flatten() {
        let had_value = s.pre.is_some() && s.result.is_ok();
        match pre.apply(s) {
            Outcome::Keep(s) => {
                failed += u64::from(had_value && s.result.is_err());
                // A failure from an iteration that began before a reload, of an item
                // that is not where it was in the current plan (removed, or moved: its
                // next poll says), changes no state: removed hosts' timeouts were logged
                // as newly failing and counted until the second pruning.
                let current = || {
                    plan.items
                        .get(s.item as usize)
                        .is_some_and(|i| i.itemid == s.itemid)
                };
                if s.result.is_ok() || current() {
                    states.record(&s, &mut changes);
                }
                if let Some((t, closed)) = &mut trends {
                    t.record(&s, closed);
                }
                rows.extend(to_row(s));
            }
            Outcome::Discarded(s, _) => {
                discarded += 1;
                states.answered(&s, &mut changes);
            }
        }
    }
    ItemStates::report(changes);
    use std::sync::atomic::Ordering::Relaxed;
    if discarded + failed > 0 {
        let c = &shared.pipeline;
        c.preprocessing_discarded.fetch_add(discarded, Relaxed);
        c.preprocessing_errors.fetch_add(failed, Relaxed);
    }
    rows.len() as u64
}

/// Starts `engine` (with `drivers`) on a thread with a single-threaded runtime of its
/// own; several may run for one engine, sharing its scheduler. The thread ends when the
/// engine does (after shutdown, once its iterations have finished, or when it failed:
/// then, or if the thread panics, why is sent on `failed`).
fn engine_thread(
    name: String,
    engine: Engine,
    drivers: Drivers,
    shared: &Arc<Shared>,
    tx: &mpsc::Sender<Samples>,
    (shutdown, failed): (&watch::Receiver<bool>, &mpsc::UnboundedSender<String>),
) -> anyhow::Result<(Engine, std::thread::JoinHandle<std::io::Result<()>>)> {
    let (shared, tx, shutdown) = (shared.clone(), tx.clone(), shutdown.clone());
    let failed = OnFailure(engine, failed.clone());
    let thread = std::thread::Builder::new()
        .name(name)
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = failed
                        .1
                        .send(format!("the {} engine's runtime: {e}", engine.as_str()));
                    return Err(e);
                }
            };
            if let Err(e) = rt.block_on(run_engine(shared, engine, drivers, tx, shutdown)) {
                let _ = failed.1.send(e.to_string());
            }
            Ok(())
        })
        .with_context(|| format!("starting the {} engine thread", engine.as_str()))?;
    Ok((engine, thread))
}

/// Tells the main loop when an engine's thread unwinds (a panic outside an iteration).
struct OnFailure(Engine, mpsc::UnboundedSender<String>);

impl Drop for OnFailure {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = self
                .1
                .send(format!("the {} engine's thread panicked", self.0.as_str()));
        }
    }
}

#[cfg(test)]
mod docs_drift;

#[cfg(test)]
mod tests {
    use super::*;
    use poller::daemon::{Clock, Limits};
    use poller::value::{ErrorReason, ItemError};
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    /// The plan of a config with SNMP hosts `names`, one item `k` each.
    fn plan_of(names: &[&str]) -> Plan {
        let mut text = String::new();
        for (i, n) in names.iter().enumerate() {
            text += &format!(
                "[[hosts]]\nname = \"{n}\"\nip = \"127.0.20.{}\"\nsnmp = {{ community = \"public\" }}\nitems = [{{ key = \"k\", oid = \"1.3.6.1.2.1.1.3.0\", type = \"uint\", interval = \"10s\" }}]\n",
                i + 1
            );
        }
        crate::config::parse(&text)
            .unwrap_or_else(|e| panic!("{e:?}"))
            .take_plan(None, || {})
    }

    /// A sample of `host`'s item `k`, indexed in `plan`.
    fn one(
        plan: &Plan,
        host: &str,
        clock: (u32, u32),
        result: Result<poller::value::Value, ItemError>,
    ) -> Samples {
        let h = plan.hosts.iter().position(|h| &*h.name == host).unwrap();
        let task = plan.tasks.iter().find(|t| t.host as usize == h).unwrap();
        let (host, item) = (&plan.hosts[h], task.items.start);
        vec![Sample::new(plan, host, item, clock, result)]
    }

    /// A timeout of `host`'s item `k`, indexed in `plan`.
    fn timeout(plan: &Plan, host: &str) -> Samples {
        let err = ItemError::new(ErrorReason::Timeout, "timeout");
        one(plan, host, (1, 0), Err(err))
    }

    /// A consumer of samples into a sink that spools (no ClickHouse), trends on.
    struct Consuming {
        consumer: tokio::task::JoinHandle<u64>,
        sink: sink::Sink,
        _spool: tempfile::TempDir,
    }

    impl Consuming {
        /// Started on `shared`: its channel and the sink's metrics.
        async fn start(
            shared: &Arc<Shared>,
        ) -> (mpsc::Sender<Samples>, Arc<sink::SinkMetrics>, Consuming) {
            Consuming::start_after(shared, Vec::new()).await
        }

        /// [`Consuming::start`], the consumer spawned once `sent` is in its channel
        /// (it then takes them in one go).
        async fn start_after(
            shared: &Arc<Shared>,
            sent: Vec<Samples>,
        ) -> (mpsc::Sender<Samples>, Arc<sink::SinkMetrics>, Consuming) {
            let spool = tempfile::tempdir().unwrap();
            let metrics = Arc::new(sink::SinkMetrics::default());
            let (sink, handle) =
                sink::Sink::start(None, sink::SpoolConfig::new(spool.path()), metrics.clone())
                    .await
                    .unwrap();
            let (tx, rx) = mpsc::channel(sent.len().max(4));
            for b in sent {
                tx.send(b).await.unwrap();
            }
            let consumer = tokio::spawn(consume(rx, handle, shared.clone(), true, None));
            let running = Consuming {
                consumer,
                sink,
                _spool: spool,
            };
            (tx, metrics, running)
        }

        /// The channel closed, the consumer ended, the sink stopped.
        async fn stop(self, tx: mpsc::Sender<Samples>) {
            drop(tx);
            self.consumer.await.unwrap();
            self.sink.shutdown().await.unwrap();
        }
    }

    /// Yields long enough for the consumer and the sink to handle what was sent.
    async fn settle() {
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_consumer_that_panics_counts_the_values_left_in_its_channel() {
        // The consumer panics (a bug; the test hook stands for it) on the first of six
        // batches, having taken four from the channel at once (4,096 values a take);
        // two wait in it. Their values are lost (a failed poll is no row): counted
        // with the sink's lost rows, where they went uncounted.
        let plan = plan_of(&["a"]);
        let shared = Shared::new(plan_of(&["a"]), 1, Clock::new(), Limits::default());
        let values = |n: usize| -> Samples {
            let v = || {
                one(
                    &plan,
                    "a",
                    (1_720_000_000, 0),
                    Ok(poller::value::Value::Uint(7)),
                )
            };
            (0..n).flat_map(|_| v()).collect()
        };
        let mut first = values(1);
        first[0].key = TEST_PANIC_KEY.into();
        let sent = vec![
            first,
            values(2),
            timeout(&plan, "a"),
            values(1),
            values(3),
            values(1),
        ];
        let (tx, metrics, running) = Consuming::start_after(&shared, sent).await;
        assert!(running.consumer.await.unwrap_err().is_panic());
        assert_eq!(metrics.dropped_rows(sink::DropReason::Internal), 8);
        assert!(tx.send(values(1)).await.is_err(), "the engines are told");
        running.sink.shutdown().await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn the_hourly_sweep_writes_the_hours_no_later_value_closed() {
        // An item polled less often than hourly (here: once, two hours ago) has its hour
        // written by the sweep a minute after the hour, not only at stop.
        let plan = plan_of(&["a"]);
        let host = &plan.hosts[0];
        let two_hours_ago = (unix_now() - 7_200, 0);
        let value = Sample::new(
            &plan,
            host,
            0,
            two_hours_ago,
            Ok(poller::value::Value::Uint(5)),
        );
        let shared = Shared::new(plan_of(&["a"]), 1, Clock::new(), Limits::default());
        let (tx, metrics, running) = Consuming::start(&shared).await;
        let trends_rows = || received_trends(&metrics);
        tx.send(vec![value]).await.unwrap();
        settle().await;
        assert_eq!(trends_rows(), 0, "the hour is open");
        tokio::time::advance(Duration::from_secs(3_601)).await;
        // The sink's spool writes run on blocking threads, in real time.
        for _ in 0..5_000 {
            if trends_rows() == 1 {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
            tokio::task::yield_now().await;
        }
        assert_eq!(trends_rows(), 1, "the sweep wrote it");
        running.stop(tx).await;
        assert_eq!(trends_rows(), 1, "and the stop not again");
    }

    /// Low rates keep two significant digits (they were rounded to 0.0); high ones
    /// are whole.
    #[test]
    fn rates_are_logged_with_the_digits_that_say_something() {
        for (r, want) in [
            (0.3, 0.3),
            (0.05, 0.05),
            (1.0 / 900.0, 0.0011),
            (3.456, 3.5),
            (9.96, 10.0),
            (12_345.6, 12_346.0),
            (0.0, 0.0),
        ] {
            assert_eq!(rate_field(r), want, "{r}");
        }
        assert_eq!(format!("{:?}", rate_field(3.0 / 10.0)), "0.3");
    }

    #[test]
    fn a_reload_names_the_settings_that_need_a_restart_by_what_they_mean() {
        let cfg = |daemon: &str| {
            crate::config::parse(&format!(
                "[daemon]\n{daemon}\n[[hosts]]\nname = \"a\"\nip = \"127.0.0.5\"\nitems = [{{ key = \"icmpping\", interval = \"10s\" }}]\n"
            ))
            .unwrap_or_else(|e| panic!("{e:?}"))
        };
        let running = cfg(r#"source_ip = "127.0.0.9""#);
        // Written otherwise, the same address: nothing to restart for.
        for same in [
            r#"source_ip = ["127.0.0.9"]"#,
            r#"source_ip = " 127.0.0.9 ""#,
        ] {
            assert!(
                restart_only_changes(&running, &cfg(same)).is_empty(),
                "{same}"
            );
        }
        assert_eq!(
            restart_only_changes(&running, &cfg(r#"source_ip = ["127.0.0.8", "::1"]"#)),
            ["daemon.source_ip"]
        );
        assert_eq!(
            restart_only_changes(&running, &cfg("shards = 8\nicmp_phases = \"spread\"")),
            ["daemon.shards", "daemon.source_ip"],
            "icmp_phases is reloaded"
        );
    }

    /// Trends rows the sink received (into `trends_uint`) so far.
    fn received_trends(metrics: &sink::SinkMetrics) -> u64 {
        metrics
            .render_text()
            .lines()
            .find(|l| l.starts_with("netpoller_sink_rows_received_total{table=\"trends_uint\"}"))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0)
    }

    /// [`received_trends`] once it stops changing (the sink's batcher, a task of its
    /// own, counts the rows when it runs).
    async fn trends_rows(metrics: &sink::SinkMetrics) -> u64 {
        let read = || received_trends(metrics);
        let mut last = read();
        for _ in 0..20 {
            tokio::time::sleep(Duration::from_millis(10)).await;
            let now = read();
            if now == last {
                break;
            }
            last = now;
        }
        last
    }

    #[tokio::test]
    async fn a_stop_saves_the_open_hours_and_the_next_start_continues_them() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(OPEN_HOURS_FILE);
        let checkpoint = dir.path().join(CHECKPOINT_FILE);
        let metrics = Arc::new(sink::SinkMetrics::default());
        let (sink, handle) = sink::Sink::start(
            None,
            sink::SpoolConfig::new(dir.path().join("spool")),
            metrics.clone(),
        )
        .await
        .unwrap();
        // One run of the consumer (open hours in `dir`, a checkpoint at its start): a
        // value of host `name`'s item now, then a stop.
        let run = |name: &'static str, dir: PathBuf| {
            let handle = handle.clone();
            async move {
                let shared = Shared::new(plan_of(&[name]), 1, Clock::new(), Limits::default());
                let plan = shared.plan();
                let now = poller::engine::clock_now();
                let v = Sample::new(
                    &plan,
                    &plan.hosts[0],
                    0,
                    now,
                    Ok(poller::value::Value::Uint(5)),
                );
                let (tx, rx) = mpsc::channel(4);
                let files = OpenHoursFiles::new(&dir, Duration::from_secs(60));
                let consumer = tokio::spawn(consume(rx, handle, shared.clone(), true, Some(files)));
                tx.send(vec![v]).await.unwrap();
                drop(tx);
                consumer.await.unwrap();
            }
        };
        // The runs take milliseconds; should an hour end among them, rows are rightly
        // written that this test does not expect, and it judges no further.
        let hour = unix_now() / 3600;
        let hour_ended = || unix_now() / 3600 != hour;
        let here = || dir.path().to_owned();
        run("a", here()).await;
        assert!(file.exists(), "saved at the stop");
        assert!(!checkpoint.exists(), "a stop leaves no checkpoint");
        let saved = std::fs::read(&file).unwrap();
        // A checkpoint the stop could not remove (it would hold this very hour) is not
        // taken back beside the stop's save.
        std::fs::write(&checkpoint, &saved).unwrap();
        run("a", here()).await;
        if hour_ended() {
            return;
        }
        assert_eq!(trends_rows(&metrics).await, 0, "still open: not written");
        // The count of the one saved hour (after the magic, itemid, type, index, hour):
        // the two runs' values, not the checkpoint's once more.
        let count = |b: &[u8]| u16::from_le_bytes([b[25], b[26]]);
        assert_eq!(count(&saved), 1);
        assert_eq!(count(&std::fs::read(&file).unwrap()), 2, "the hour went on");
        // A start whose plan has not the item writes its hour, once: the two runs' values.
        run("b", here()).await;
        if hour_ended() {
            return;
        }
        assert_eq!(trends_rows(&metrics).await, 1);
        // Where the hours cannot be saved they are written at stop (nothing to take
        // back there: no file).
        run("b", dir.path().join("no-such-folder")).await;
        if hour_ended() {
            return;
        }
        assert_eq!(trends_rows(&metrics).await, 2);
        drop(handle);
        sink.shutdown().await.unwrap();
    }

    /// A value of `host`'s item `k` now, indexed in `plan`.
    fn value(plan: &Plan, host: &str) -> Samples {
        let five = poller::value::Value::Uint(5);
        one(plan, host, poller::engine::clock_now(), Ok(five))
    }

    #[tokio::test(start_paused = true)]
    async fn a_reloads_removed_items_are_forgotten_once_old_iterations_end() {
        // An iteration that started before a reload delivers a removed item's failure
        // after the consumer forgot it: it changes no state (it was counted again, and
        // logged as newly failing, until the second pruning). The removed item's trends
        // hour waits for that iteration's values, however long it runs, and is written
        // at the second pruning.
        let before = plan_of(&["a", "b"]);
        let stale = timeout(&before, "b");
        let shared = Shared::new(before, 1, Clock::new(), Limits::default());
        let (tx, metrics, running) = Consuming::start(&shared).await;
        let failing = || shared.failing.get(ErrorReason::Timeout);
        // An iteration on the plan before the reload, still running after it.
        let iteration = shared.plan();
        tx.send(value(&iteration, "b")).await.unwrap();
        tx.send([timeout(&iteration, "a"), timeout(&iteration, "b")].concat())
            .await
            .unwrap();
        settle().await;
        assert_eq!(failing(), 2);
        shared.reload(plan_of(&["a"]));
        tx.send(stale.clone()).await.unwrap();
        settle().await;
        assert_eq!(failing(), 1, "the stale sample brought b back");
        // Long past the minute: the iteration still runs, b's hour still waits.
        for _ in 0..5 {
            tokio::time::advance(PRUNE_AGAIN_AFTER).await;
            tx.send(timeout(&shared.plan(), "a")).await.unwrap();
            settle().await;
        }
        assert_eq!(trends_rows(&metrics).await, 0, "b's hour kept");
        drop(iteration);
        for _ in 0..3 {
            tokio::time::advance(PRUNE_SETTLE + Duration::from_secs(1)).await;
            tx.send(timeout(&shared.plan(), "a")).await.unwrap();
            settle().await;
        }
        assert_eq!(
            trends_rows(&metrics).await,
            1,
            "b's hour written at the pruning"
        );
        assert_eq!(failing(), 1, "a is still failing");
        running.stop(tx).await;
    }

    /// The memory of a plan a reload replaced is given back to the system once it is
    /// free (the pruning), once per reload: glibc kept it resident.
    #[tokio::test(start_paused = true)]
    async fn a_replaced_plans_memory_is_given_back_once_it_is_pruned() {
        let given_back = || HEAP_GIVEN_BACK.with(|n| n.get());
        let shared = Shared::new(plan_of(&["a", "b"]), 1, Clock::new(), Limits::default());
        let (tx, _metrics, running) = Consuming::start(&shared).await;
        let before = given_back();
        tx.send(value(&shared.plan(), "a")).await.unwrap();
        settle().await;
        let iteration = shared.plan();
        shared.reload(plan_of(&["a"]));
        let batches = |n: usize, step: Duration| {
            let (tx, shared) = (&tx, &shared);
            async move {
                for _ in 0..n {
                    tokio::time::advance(step).await;
                    tx.send(value(&shared.plan(), "a")).await.unwrap();
                    settle().await;
                }
            }
        };
        batches(3, PRUNE_AGAIN_AFTER).await;
        assert_eq!(
            given_back(),
            before,
            "an iteration still holds the old plan"
        );
        drop(iteration);
        batches(3, PRUNE_SETTLE + Duration::from_secs(1)).await;
        assert_eq!(given_back(), before + 1, "given back at the pruning");
        batches(3, PRUNE_AGAIN_AFTER).await;
        assert_eq!(given_back(), before + 1, "once per reload");
        running.stop(tx).await;
    }

    /// A plan swapped in and out between two batches of the consumer (a discovery
    /// re-plan and a SIGHUP a moment apart) holds the pruning back too while an
    /// iteration runs on it: its late values of the items the next plan removed count.
    #[tokio::test(start_paused = true)]
    async fn an_iteration_of_a_plan_the_consumer_never_saw_holds_pruning() {
        let shared = Shared::new(plan_of(&["a"]), 1, Clock::new(), Limits::default());
        let (tx, metrics, running) = Consuming::start(&shared).await;
        tx.send(value(&shared.plan(), "a")).await.unwrap();
        settle().await;
        // Two plans swapped in before the consumer's next batch; an iteration took the
        // first (it holds it until it ends).
        shared.reload(plan_of(&["a", "c"]));
        let iteration = shared.plan();
        shared.reload(plan_of(&["a"]));
        for _ in 0..3 {
            tx.send(value(&shared.plan(), "a")).await.unwrap();
            settle().await;
            tokio::time::advance(PRUNE_AGAIN_AFTER).await;
        }
        // The iteration, still running, delivers c's value, then ends.
        tx.send(value(&iteration, "c")).await.unwrap();
        settle().await;
        drop(iteration);
        running.stop(tx).await;
        assert_eq!(received_trends(&metrics), 2, "a's hour and c's");
    }

    /// Removed items are forgotten a second time only once no iteration of an older
    /// plan can deliver: not while one holds its plan (an SNMP iteration with no
    /// deadline, past the minute), and only after its last samples had time to arrive.
    #[test]
    fn removed_items_are_forgotten_once_no_older_iteration_runs() {
        let t0 = tokio::time::Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut stale = StalePlans::default();
        assert!(!stale.due(at(1_000)), "no reload: nothing to prune");
        let (first, second) = (Arc::new(plan_of(&["a"])), Arc::new(plan_of(&["a", "b"])));
        // Two reloads; an iteration still holds the first plan, none the second.
        let iteration = first.clone();
        stale.replaced(vec![Arc::downgrade(&first)], at(0));
        drop(first);
        stale.replaced(vec![Arc::downgrade(&second)], at(10));
        drop(second);
        assert!(!stale.due(at(69)), "within the minute of the last reload");
        for s in [70, 300, 3_000] {
            assert!(!stale.due(at(s)), "the iteration still runs at {s} s");
        }
        drop(iteration);
        // Seen ended at the next look; pruned at the one after, PRUNE_SETTLE on.
        assert!(!stale.due(at(3_001)), "too early: last seen at 3,000 s");
        assert!(!stale.due(at(3_005)));
        assert!(
            !stale.due(at(3_006)),
            "its samples get PRUNE_SETTLE to arrive"
        );
        assert!(stale.due(at(3_011)));
        assert!(!stale.due(at(4_000)), "pruned once");
        // A plan nothing holds: pruned PRUNE_AGAIN_AFTER + PRUNE_SETTLE after the reload.
        let third = Arc::new(plan_of(&["c"]));
        stale.replaced(vec![Arc::downgrade(&third)], at(5_000));
        drop(third);
        assert!(!stale.due(at(5_060)));
        assert!(stale.due(at(5_065)));
    }

    #[test]
    fn icmp_threads_follow_the_configured_rate() {
        // 4,096 hosts × 3 packets every 10 s: one thread, however many cores and sockets.
        assert_eq!(icmp_thread_count(1_229.0, 2, 2), 1);
        assert_eq!(icmp_thread_count(0.0, 4, 8), 1);
        // 262,144 hosts × 3 packets every 8 s (98k/s): every core, but not more than sockets.
        assert_eq!(icmp_thread_count(98_304.0, 4, 2), 2);
        assert_eq!(icmp_thread_count(98_304.0, 2, 16), 2);
        assert_eq!(icmp_thread_count(98_304.0, 8, 16), 5);
        // Just over one thread's share: two.
        assert_eq!(icmp_thread_count(20_001.0, 4, 4), 2);
        // No ICMP sockets (no ICMP items): no thread.
        assert_eq!(icmp_thread_count(5_000.0, 0, 2), 0);
    }

    /// A ClickHouse that accepts connections and never answers (hung, a stalled load
    /// balancer) when the daemon starts: the start waits one `request_timeout` for it,
    /// then goes on and spools (trends stay on: nothing said they cannot be written).
    /// The schema was asked for again without trends and timed out again: twice
    /// `request_timeout` (60 s with the defaults) before polling began and `/healthz`
    /// was bound.
    #[tokio::test]
    async fn a_server_that_never_answers_holds_the_start_one_request_timeout() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for c in listener.incoming().flatten() {
                held.push(c);
            }
        });
        let limit = Duration::from_secs(3);
        let ch = sink::ClickHouseConfig {
            url: Some(url),
            request_timeout: limit,
            ..sink::ClickHouseConfig::default()
        };
        let t0 = std::time::Instant::now();
        let trends = schema_at_start(&ch).await.unwrap();
        let took = t0.elapsed();
        assert!(trends, "trends turned off by a server that never answered");
        assert!(
            took < 2 * limit,
            "the start waited {took:?} for a server that never answers ({limit:?} each time)"
        );
    }

    /// `daemon.icmp_batch_hosts` raised in the file and reloaded (a setting the
    /// engines take only at start, as the reload's warning says): the reload's plan
    /// put 254 hosts on one phase for sweeps of 4,096, while the engines still took 64
    /// a sweep: four sweeps of each group's hosts came due at once, queued behind
    /// each other. Grouped for the engines' size, they are spread as before.
    #[test]
    fn a_reload_groups_icmp_sweeps_for_the_batch_the_engines_take() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("netpoller.toml");
        let text = |batch: usize| {
            format!(
                "[daemon]\nicmp_batch_hosts = {batch}\n\
                 [[templates]]\nname = \"icmp\"\nitems = [{{ key = \"icmpping\", interval = \"10s\" }}]\n\
                 [[host_ranges]]\ncidr = \"127.0.42.0/24\"\nname = \"p-{{ip}}\"\ntemplates = [\"icmp\"]\n"
            )
        };
        let phases = |args: &super::super::PlanArgs| {
            let plan = args
                .load(Some(&crate::config::Found::default()))
                .unwrap()
                .unwrap_or_else(|e| panic!("{e}"))
                .plan;
            let phases: std::collections::HashSet<u64> =
                plan.tasks.iter().map(|t| t.phase_ms).collect();
            (plan.tasks.len(), phases.len())
        };
        let mut args = super::super::PlanArgs::of(path.clone());
        std::fs::write(&path, text(64)).unwrap();
        let (tasks, at_start) = phases(&args);
        assert_eq!(tasks, 254);
        assert!(at_start > 1, "{at_start} sweeps of 64 for 254 hosts");
        args.started_icmp_batch_hosts = Some(64);
        std::fs::write(&path, text(4_096)).unwrap();
        assert_eq!(phases(&args), (254, at_start));
        // Without a running daemon's size (check-config, poll-once): the file's.
        args.started_icmp_batch_hosts = None;
        assert_eq!(phases(&args), (254, 1));
    }

    /// A daemon running a file of hosts `a` and `c` with a discovery rule and `b` with
    /// an ICMP item; `a` polls rows 1-2, `c` row 1, and discovery has found rows 1-4
    /// and 1-3 since. The file is then changed (not reloaded yet): `c` moved to
    /// 127.0.51.9, `b` got an item more.
    struct Moving {
        _dir: tempfile::TempDir,
        args: Args,
        running: Arc<Config>,
        shared: Arc<Shared>,
        applied: Found,
        found: Arc<Mutex<Found>>,
        targets: watch::Sender<Vec<crate::config::DiscoveryTarget>>,
    }

    impl Moving {
        fn new() -> Moving {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("netpoller.toml");
            let text = |b_items: &str, c_ip: &str| {
                format!(
                    "[[templates]]\nname = \"t\"\n\
                     discovery = [{{ name = \"if\", oid = \"1.3.6.1.2.1.2.2.1.2\" }}]\n\
                     items = [{{ key = \"d[{{#SNMPINDEX}}]\", oid = \"1.3.6.1.2.1.2.2.1.2.{{#SNMPINDEX}}\", type = \"str\", interval = \"1m\", discovery = \"if\" }}]\n\
                     [[hosts]]\nname = \"a\"\nip = \"127.0.51.1\"\ntemplates = [\"t\"]\nsnmp = {{ community = \"public\" }}\n\
                     [[hosts]]\nname = \"b\"\nip = \"127.0.51.2\"\nitems = [{b_items}]\n\
                     [[hosts]]\nname = \"c\"\nip = \"{c_ip}\"\ntemplates = [\"t\"]\nsnmp = {{ community = \"public\" }}\n"
                )
            };
            let ping = r#"{ key = "icmpping", interval = "10s" }"#;
            let rows = crate::test_util::found;
            let applied = rows(&[("a", "if", "1-2"), ("c", "if", "1")]);
            let found = rows(&[("a", "if", "1-4"), ("c", "if", "1-3")]);
            std::fs::write(&path, text(ping, "127.0.51.3")).unwrap();
            let args = Args::of(path.clone());
            let running = args.plan.load(Some(&applied)).unwrap().unwrap();
            assert_eq!(running.plan.items.len(), 2 + 1 + 1);
            let (targets, _) = watch::channel(running.cfg.discovery.clone());
            let shared = Shared::new(running.plan, 2, Clock::new(), Limits::default());
            let more = format!(r#"{ping}, {{ key = "icmppingsec", interval = "10s" }}"#);
            std::fs::write(&path, text(&more, "127.0.51.9")).unwrap();
            Moving {
                _dir: dir,
                args,
                running: Arc::new(running.cfg),
                shared,
                applied,
                found: Arc::new(Mutex::new(found)),
                targets,
            }
        }

        /// A SIGHUP's reload on a daemon's thread that runs `beside` too: whether the
        /// new file was taken, and the log.
        fn reload(
            &mut self,
            beside: impl std::future::Future<Output = ()> + Send + 'static,
        ) -> (bool, String) {
            let (args, running, shared) = (&self.args, &self.running, &self.shared);
            let (found, applied, targets) = (&*self.found, &mut self.applied, &self.targets);
            let (reloaded, text) = on_daemon_thread(beside, async {
                let cut = Arc::new(AtomicBool::new(false));
                let rows = (&*applied, targets, cut);
                let reloading = reload_off_thread(args, running, shared, 1, |_| 1, rows);
                // Taken as the daemon's loop does: no await after the thread's end.
                let rows = (found, applied, targets);
                reloading.await.map(|r| r.take(running, rows))
            });
            assert!(reloaded.is_some(), "the runtime shut down: {text}");
            (matches!(reloaded, Some(Some(_))), text)
        }
    }

    /// [`reload`] with one ICMP thread and no stop: whether the new file was taken.
    fn reloaded(
        args: &Args,
        running: &Config,
        shared: &Shared,
        rows: (&mut Found, &[crate::config::DiscoveryTarget]),
    ) -> bool {
        reload(
            args,
            running,
            shared,
            1,
            |_| 1,
            &AtomicBool::new(false),
            rows,
        )
        .is_some()
    }

    /// A reload plans the rows of the running plan, not those discovery found since
    /// (pending their re-plan, which is due): its log line counts what the file
    /// changed, here one item of `b`, and not `a`'s new rows as added by the file.
    /// Rows of what it changed are dropped from both, and counted: `c` moved, its item
    /// of a row is no longer polled (until its next walk at the new address).
    #[test]
    fn a_reload_counts_what_the_file_changed_not_rows_found_meanwhile() {
        let mut m = Moving::new();
        let mut targets = m.targets.subscribe();
        let (ran, counting) = counting();
        let (reloaded, text) = m.reload(counting);
        assert!(reloaded, "{text}");
        assert!(ran.load(Relaxed) > 0, "the daemon's thread ran meanwhile");
        for counted in [
            "items=4 ",
            "hosts_changed=2 ",
            "items_added=1 ",
            "items_removed=1 ",
            "items_changed=0 ",
            "changes=changed: b, c",
        ] {
            assert!(text.contains(counted), "{counted}: {text}");
        }
        let rows = crate::test_util::found;
        assert_eq!(m.applied, rows(&[("a", "if", "1-2")]));
        assert_eq!(
            *m.found.lock().unwrap(),
            rows(&[("a", "if", "1-4")]),
            "a's rows found still pending, c's dropped"
        );
        assert!(targets.has_changed().unwrap(), "discovery got its targets");
        let c = targets
            .borrow_and_update()
            .iter()
            .find(|t| &*t.host == "c")
            .unwrap()
            .ip;
        assert_eq!(c, "127.0.51.9".parse::<std::net::IpAddr>().unwrap());
    }

    /// A walk of `c` at its old address that ends once the reload's thread is done, but
    /// before the discovery task has its new targets (so it takes the walk's rows, as
    /// discovery::run does), must not put back the rows the reload dropped: they were
    /// pruned on the reload's thread, then the walk's rows came back, and the next
    /// re-plan polled the old device's rows at the new address.
    #[test]
    fn a_walk_ending_as_a_reload_ends_does_not_bring_back_the_rows_it_dropped() {
        let mut m = Moving::new();
        // Everything that holds the daemon's Shared but the reload's thread.
        let held = Arc::strong_count(&m.shared) + 1;
        let walk = {
            let (shared, found) = (m.shared.clone(), m.found.clone());
            let targets = m.targets.subscribe();
            async move {
                // Until the reload has handed its work to its thread.
                while Arc::strong_count(&shared) == held {
                    tokio::task::yield_now().await;
                }
                // Holding the daemon's thread, as a task between two awaits does:
                // the reload's thread runs to its end meanwhile.
                while Arc::strong_count(&shared) > held {
                    std::thread::yield_now();
                }
                // The task still walks for the old targets: it takes the rows.
                if !targets.has_changed().unwrap() {
                    let rows = crate::config::Indices::parse("1-3").unwrap();
                    found.lock().unwrap().set(&"c".into(), &"if".into(), rows);
                }
            }
        };
        let (reloaded, text) = m.reload(walk);
        assert!(reloaded, "{text}");
        assert_eq!(
            *m.found.lock().unwrap(),
            crate::test_util::found(&[("a", "if", "1-4")]),
            "c's rows of its old address"
        );
    }

    /// A reload logs what the file may well not mean (a host range inside another,
    /// whose addresses are polled twice), as `check-config` prints it: a daemon's
    /// operator reads its log, not always `check-config`'s output.
    #[test]
    fn a_reload_logs_the_files_warnings() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("netpoller.toml");
        let range = |cidr: &str, name: &str| {
            format!(
                "[[host_ranges]]\ncidr = \"{cidr}\"\nname = \"{name}-{{ip}}\"\n\
                 items = [{{ key = \"icmpping\", interval = \"10s\" }}]\n"
            )
        };
        let apart = format!(
            "{}{}",
            range("127.0.42.0/29", "a"),
            range("127.0.43.0/30", "b")
        );
        std::fs::write(&path, &apart).unwrap();
        let args = Args::of(path.clone());
        let mut running = args.plan.load(Some(&Found::default())).unwrap().unwrap();
        let plan = std::mem::take(&mut running.plan);
        let shared = Shared::new(plan, 1, Clock::new(), Limits::default());
        std::fs::write(&path, apart.replace("127.0.43.0/30", "127.0.42.4/30")).unwrap();
        let (reloaded, text) = crate::test_util::logged(|| {
            let rows = (&mut Found::default(), &[][..]);
            reloaded(&args, &running.cfg, &shared, rows)
        });
        assert!(reloaded, "{text}");
        assert!(
            text.contains("configuration: line 6: host_ranges[1].cidr: 127.0.42.4/30 is inside host_ranges[0]"),
            "{text}"
        );
    }

    /// A reload is not refused for rows it drops anyway: `big`'s rows of a rule the
    /// new file changes would take it past the item limit with its new items, but are
    /// not the new rule's (the load with them was refused, the old file kept running).
    #[test]
    fn a_reload_is_not_refused_for_rows_of_a_rule_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("netpoller.toml");
        let new = crate::test_util::one_host_past_the_item_limit("");
        // Walked another column, with one item per row.
        let old: String = new
            .lines()
            .map(|l| match l.starts_with("items = [") {
                true => r#"items = [{ key = "p[{#SNMPINDEX}]", oid = "1.3.6.1.2.1.2.2.1.10.{#SNMPINDEX}", type = "uint", interval = "1m", discovery = "if" }]"#,
                false => l,
            })
            .collect::<Vec<_>>()
            .join("\n")
            .replace(
                r#"oid = "1.3.6.1.2.1.2.2.1.2" }]"#,
                r#"oid = "1.3.6.1.2.1.2.2.1.3" }]"#,
            );
        assert_ne!(old, new);
        std::fs::write(&path, &old).unwrap();
        let args = Args::of(path.clone());
        let mut rows = crate::test_util::found(&[("big", "if", "1-65536")]);
        let running = args.plan.load(Some(&rows)).unwrap().unwrap();
        assert_eq!(running.cfg.discovery.len(), 2);
        assert_eq!(running.plan.items.len(), 65_536);
        let shared = Shared::new(running.plan, 2, Clock::new(), Limits::default());
        std::fs::write(&path, &new).unwrap();
        let (reloaded, text) = crate::test_util::logged(|| {
            let found = (&mut rows, &running.cfg.discovery[..]);
            reloaded(&args, &running.cfg, &shared, found)
        });
        assert!(reloaded, "{text}");
        assert!(text.contains("SIGHUP: configuration reloaded"), "{text}");
        assert_eq!(rows, Found::default());
    }

    /// A reload that finds the file empty is refused, and says only that: it warned
    /// first that `[clickhouse]`, `daemon.shards`, ... "changed but apply only at
    /// start; restart to use them" (the empty file's defaults), which a restart would
    /// have done, with no hosts.
    #[test]
    fn a_refused_empty_reload_names_no_settings_to_restart_for() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("netpoller.toml");
        let running = crate::config::parse(
            "[daemon]\nshards = 2\nmetrics_listen = \"127.0.42.1:9464\"\n\
             [[hosts]]\nname = \"h\"\nip = \"127.0.42.30\"\n\
             items = [{ key = \"icmpping\", interval = \"10s\" }]\n",
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
        let plan = plan_of(&["a"]);
        let shared = Shared::new(plan, 2, Clock::new(), Limits::default());
        std::fs::write(&path, "").unwrap();
        let args = Args::of(path);
        let (reloaded, text) = crate::test_util::logged(|| {
            let mut found = crate::config::Found::default();
            reloaded(&args, &running, &shared, (&mut found, &[]))
        });
        assert!(!reloaded);
        assert!(text.contains("it has no hosts"), "{text}");
        assert!(!text.contains("apply only at start"), "{text}");
    }

    /// A reload that changes `[clickhouse]` is not applied to it: its warning scrolls
    /// by, and /metrics said nothing of the restart it asks for. The gauge stays 1
    /// across a refused reload (the same config runs) and is 0 again once a reload
    /// takes the start's values back.
    #[test]
    fn a_reload_that_needs_a_restart_says_so_in_metrics_until_one_undoes_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("netpoller.toml");
        let file = |url: &str| {
            format!(
                "[clickhouse]\nurl = \"{url}\"\n\
                 [[hosts]]\nname = \"h\"\nip = \"127.0.201.30\"\n\
                 items = [{{ key = \"icmpping\", interval = \"10s\" }}]\n"
            )
        };
        let started = file("http://127.0.201.1:8123");
        std::fs::write(&path, &started).unwrap();
        let args = Args::of(path.clone());
        let mut running = args.plan.load(Some(&Found::default())).unwrap().unwrap();
        let plan = std::mem::take(&mut running.plan);
        let shared = Shared::new(plan, 1, Clock::new(), Limits::default());
        let pending = |shared: &Shared| {
            let text = render_metrics(
                shared,
                &DiscoveryMetrics::default(),
                &sink::SinkMetrics::default(),
            );
            text.lines()
                .find_map(|l| l.strip_prefix("netpoller_config_restart_pending "))
                .unwrap_or_else(|| panic!("no restart gauge:\n{text}"))
                .to_string()
        };
        assert_eq!(pending(&shared), "0");
        let reload = |text: &str| {
            std::fs::write(&path, text).unwrap();
            crate::test_util::logged(|| {
                reloaded(&args, &running.cfg, &shared, (&mut Found::default(), &[]))
            })
        };
        let (took, log) = reload(&file("http://127.0.201.2:8123"));
        assert!(took && log.contains("apply only at start"), "{log}");
        assert_eq!(pending(&shared), "1");
        let (took, log) = reload("[daemon]\nshardz = 1\n");
        assert!(!took, "{log}");
        assert_eq!(pending(&shared), "1", "the changed config still runs");
        let (took, log) = reload(&started);
        assert!(took && !log.contains("apply only at start"), "{log}");
        assert_eq!(pending(&shared), "0");
    }

    /// A reload that changes `daemon.shard` under `run --shard` changes nothing (the
    /// option overrides the file) and said nothing of it: the operator who moved a
    /// process's share by the file saw the reload taken and the hosts unmoved.
    #[test]
    fn a_reload_says_when_the_command_lines_shard_overrides_the_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("netpoller.toml");
        let file = |shard: &str| {
            format!(
                "[daemon]\n{shard}\n\
                 [[host_ranges]]\ncidr = \"127.0.201.32/28\"\nname = \"h-{{ip}}\"\n\
                 items = [{{ key = \"icmpping\", interval = \"10s\" }}]\n"
            )
        };
        let mut args = Args::of(path.clone());
        args.plan.shard = Some((0, 1));
        std::fs::write(&path, file("shard = \"0/2\"")).unwrap();
        let mut running = args.plan.load(Some(&Found::default())).unwrap().unwrap();
        let shared = Shared::new(
            std::mem::take(&mut running.plan),
            1,
            Clock::new(),
            Limits::default(),
        );
        let reload = |args: &Args, text: &str| {
            std::fs::write(&path, text).unwrap();
            crate::test_util::logged(|| {
                reloaded(args, &running.cfg, &shared, (&mut Found::default(), &[]))
            })
        };
        let said = "daemon.shard changed to \"1/2\", but this process keeps --shard 0/1";
        let (took, log) = reload(&args, &file("shard = \"1 / 2\""));
        assert!(took && log.contains(said), "{log}");
        // The same share however written, and no --shard: nothing to say.
        let (took, log) = reload(&args, &file("shard = \"0 /2\""));
        assert!(took && !log.contains("this process keeps"), "{log}");
        args.plan.shard = None;
        let (took, log) = reload(&args, &file("shard = \"1/2\""));
        assert!(took && !log.contains("this process keeps"), "{log}");
    }

    /// A daemon whose command line overrides `daemon.metrics_listen` and
    /// `daemon.spool_dir` compares a reloaded file's settings with its own as
    /// overridden: a file that changes them asks for no restart, which would change
    /// nothing (the command line's stand), and the reloaded config keeps them.
    #[test]
    fn a_reload_under_the_command_lines_daemon_settings_asks_for_no_restart_for_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("netpoller.toml");
        let file = |port: u16, spool: &str| {
            format!(
                "[daemon]\nmetrics_listen = \"127.0.201.1:{port}\"\nspool_dir = \"{spool}\"\n\
                 [[hosts]]\nname = \"h\"\nip = \"127.0.201.33\"\n\
                 items = [{{ key = \"icmpping\", interval = \"10s\" }}]\n"
            )
        };
        std::fs::write(&path, file(9464, "./spool")).unwrap();
        let mut args = Args::of(path.clone());
        args.plan.daemon = super::super::DaemonOverrides {
            metrics_listen: Some("127.0.201.1:9470".into()),
            spool_dir: Some(dir.path().join("own-spool")),
            discovery_file: None,
        };
        let mut running = args.plan.load(Some(&Found::default())).unwrap().unwrap();
        let shared = Shared::new(
            std::mem::take(&mut running.plan),
            1,
            Clock::new(),
            Limits::default(),
        );
        std::fs::write(&path, file(9465, "./other-spool")).unwrap();
        let (reloaded, log) = crate::test_util::logged(|| {
            reload(
                &args,
                &running.cfg,
                &shared,
                1,
                |_| 1,
                &AtomicBool::new(false),
                (&mut Found::default(), &[]),
            )
        });
        let reloaded = reloaded.unwrap_or_else(|| panic!("{log}"));
        assert!(!log.contains("apply only at start"), "{log}");
        assert_eq!(reloaded.cfg.daemon.metrics_listen, "127.0.201.1:9470");
        assert_eq!(reloaded.cfg.daemon.spool_dir, dir.path().join("own-spool"));
    }

    /// A daemon running [`crate::test_util::one_host_past_the_item_limit`]'s file with no
    /// rows planned yet, and discovery's rows `found` pending, for re-plans.
    struct Replanning {
        _dir: tempfile::TempDir,
        /// The running config's discovery targets.
        discovery: Vec<crate::config::DiscoveryTarget>,
        plans: Plans,
    }

    impl Replanning {
        fn new(found: Found) -> Replanning {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("netpoller.toml");
            std::fs::write(&path, crate::test_util::one_host_past_the_item_limit("")).unwrap();
            let args = Args::of(path);
            let mut running = args.plan.load(Some(&Found::default())).unwrap().unwrap();
            let plan = std::mem::take(&mut running.plan);
            let discovery = running.cfg.discovery.clone();
            let (targets, _) = watch::channel(discovery.clone());
            let plans = Plans {
                args,
                cfg: Arc::new(running.cfg),
                shared: Shared::new(plan, 2, Clock::new(), Limits::default()),
                text: running.text,
                icmp: (1, 1, 1),
                applied: Found::default(),
                found: Arc::new(Mutex::new(found)),
                targets,
                discovery_file: dir.path().join("discovered.json"),
                metrics: Arc::new(DiscoveryMetrics::default()),
                round: None,
                reload_due: false,
                replan_again: None,
            };
            Replanning {
                _dir: dir,
                discovery,
                plans,
            }
        }

        /// Where the rows planned are saved.
        fn file(&self) -> &Path {
            &self.plans.discovery_file
        }

        /// One whole round on a daemon's thread that runs `beside` too: whether rows
        /// were left untried, and the log.
        fn round(
            &mut self,
            beside: impl std::future::Future<Output = ()> + Send + 'static,
        ) -> (bool, String) {
            let plans = &mut self.plans;
            on_daemon_thread(beside, async {
                plans.start_round();
                let ended = round_end(&mut plans.round).await;
                plans.took(ended).await.expect("the round's end");
                plans.replan_again.is_some()
            })
        }

        /// [`serve`] on a daemon's thread with discovery's ask for a re-plan waiting
        /// (if `asked`), the thread's only blocking thread held
        /// ([`hold_the_blocking_thread`]): the round the loop starts (a re-plan, a
        /// reload) waits until `signals` releases it. `signals` gives the loop's
        /// signals, and may ask, release and fail an engine ([`Beside`]). Returns
        /// whether a round was still planning when the loop ended, the rows of the
        /// running plan then, and the log; the round (if any) then ends as at the
        /// daemon's stop ([`Plans::stop`]).
        fn serve(
            &mut self,
            asked: bool,
            signals: impl AsyncFnMut(&Beside) -> Signal,
        ) -> ((bool, Found), String) {
            let plans = &mut self.plans;
            on_daemon_thread(async {}, async {
                let release = hold_the_blocking_thread();
                let (ask, mut asks) = mpsc::channel(1);
                if asked {
                    ask.try_send(()).unwrap();
                }
                let (failing, mut failed) = mpsc::unbounded_channel();
                let beside = Beside {
                    ask,
                    release,
                    failing,
                };
                let mut signals = signals;
                let signal = async || signals(&beside).await;
                let mut consumer = tokio::spawn(std::future::pending::<u64>());
                serve(plans, signal, &mut consumer, &mut failed, &mut asks).await;
                let then = (plans.round.is_some(), plans.applied.clone());
                drop(beside);
                plans.stop().await;
                then
            })
        }
    }

    /// What the signals of [`Replanning::serve`] reach beside the daemon's loop.
    struct Beside {
        /// Discovery's asks for a re-plan: the slot comes back once the loop took one
        /// ([`until_taken`]).
        ask: mpsc::Sender<()>,
        /// Releases the blocking thread ([`hold_the_blocking_thread`]).
        release: std::sync::mpsc::Sender<()>,
        /// The engines' failures.
        failing: mpsc::UnboundedSender<String>,
    }

    /// Rows found for [`Replanning`]'s file: `big`'s, which the loader refuses (past the
    /// item limit), and `small`'s, which it takes.
    fn big_and_small() -> Found {
        crate::test_util::found(&[("big", "if", "1-65536"), ("small", "if", "1-3")])
    }

    /// Holds the one blocking thread of an [`on_daemon_thread`] runtime until the
    /// sender returned sends or is dropped, so that what the daemon plans
    /// [`off_thread`] meanwhile waits. (At most 20 s: a daemon that waits for its
    /// round then fails the test rather than hanging it.)
    fn hold_the_blocking_thread() -> std::sync::mpsc::Sender<()> {
        let (release, held) = std::sync::mpsc::channel::<()>();
        drop(tokio::task::spawn_blocking(move || {
            held.recv_timeout(Duration::from_secs(20))
        }));
        release
    }

    /// Until the daemon's loop took discovery's ask for a re-plan (`ask`'s slot is
    /// free again), and so started its round.
    async fn until_taken(ask: &mpsc::Sender<()>) {
        while ask.capacity() == 0 {
            tokio::task::yield_now().await;
        }
    }

    /// What `f` gives on a daemon's thread (a current-thread runtime) that runs the task
    /// `beside` too, and what both logged. What `f` hands [`off_thread`] waits until
    /// `beside` first ran (after `f`'s first await): else a thread preempted between
    /// `f`'s `spawn_blocking` and that await (a busy machine) could find the work done
    /// and never yield, and `beside` (e.g. [`counting`]) not run meanwhile.
    fn on_daemon_thread<T>(
        beside: impl std::future::Future<Output = ()> + Send + 'static,
        f: impl std::future::Future<Output = T>,
    ) -> (T, String) {
        // One blocking thread: a test can hold it ([`hold_the_blocking_thread`]).
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .max_blocking_threads(1)
            .build()
            .unwrap();
        crate::test_util::logged(|| {
            rt.block_on(async {
                let release = hold_the_blocking_thread();
                drop(tokio::spawn(async move {
                    drop(release);
                    beside.await
                }));
                f.await
            })
        })
    }

    /// A task for [`on_daemon_thread`] that counts the times it ran.
    fn counting() -> (Arc<AtomicUsize>, impl std::future::Future<Output = ()>) {
        let ran = Arc::new(AtomicUsize::new(0));
        let counter = ran.clone();
        (ran, async move {
            for _ in 0..1_000_000 {
                counter.fetch_add(1, Relaxed);
                tokio::task::yield_now().await;
            }
        })
    }

    /// A re-plan the loader refuses for one host's rows (here past the file's item
    /// limit) plans the rows found on the other hosts, saves them, names the refused
    /// host, and puts back only its rows (all rows were put back, none planned).
    #[test]
    fn a_refused_replan_plans_the_other_hosts_rows_and_names_the_refused_one() {
        let rows = crate::test_util::found;
        let mut r = Replanning::new(big_and_small());
        let (more, text) = r.round(async {});
        assert!(!more, "{text}");
        let p = &r.plans;
        assert_eq!(p.shared.plan().items.len(), 129 * 3, "{text}");
        assert_eq!(p.applied, rows(&[("small", "if", "1-3")]));
        assert_eq!(*p.found.lock().unwrap(), p.applied, "big's rows put back");
        assert!(
            text.contains("past the") && text.contains("host=big rule=if"),
            "{text}"
        );
        let counted = (
            p.metrics.replans_ok.load(Relaxed),
            p.metrics.replans_refused.load(Relaxed),
        );
        assert_eq!(counted, (1, 1));
        let saved = crate::discovery::read_file(r.file()).unwrap();
        assert_eq!(saved.for_rules(&r.discovery), p.applied);
    }

    /// A re-plan plans off the daemon's thread: its tasks (the sink, the HTTP endpoint,
    /// discovery) run while the loader parses, and rows discovery finds meanwhile for
    /// the host's rule refused stay for the next round (not replaced by the running
    /// plan's rows). Before, the whole round ran on the daemon's thread: at a million
    /// items, refused rows held it up to ~5 s.
    #[test]
    fn a_replan_plans_off_the_daemons_thread_and_keeps_rows_found_meanwhile() {
        let rows = crate::test_util::found;
        // Only rows the loader refuses: no plan is taken, nothing saved.
        let mut r = Replanning::new(rows(&[("big", "if", "1-65536")]));
        let found = r.plans.found.clone();
        // A task of the daemon's thread: finds other rows for big's rule, then counts
        // the times it ran.
        let (ran, counting) = counting();
        let task = {
            let found = found.clone();
            async move {
                *found.lock().unwrap() = rows(&[("big", "if", "1-2")]);
                counting.await
            }
        };
        let (more, text) = r.round(task);
        assert!(!more, "{text}");
        assert!(text.contains("host=big rule=if"), "refused: {text}");
        assert!(ran.load(Relaxed) > 0, "the daemon's thread ran meanwhile");
        assert_eq!(r.plans.applied, Found::default());
        let kept = rows(&[("big", "if", "1-2")]);
        assert_eq!(*found.lock().unwrap(), kept, "the rows found meanwhile");
        assert!(!r.file().exists());
    }

    /// A stop while a re-plan round plans (here a round whose thread has not even
    /// started: one planning for seconds is the same) is taken at once: the loop ends
    /// with the round still planning, and the stop then cuts it before its next plan.
    /// Nothing is half applied (the plan, `applied` and the file agree) and the rows
    /// found stay pending. Before, the loop awaited the round inside its arm: the stop
    /// waited for every plan of it (up to ~5 s at a million items when rows are
    /// refused), and so did a failed engine or consumer.
    #[test]
    fn a_stop_during_a_replan_is_taken_at_once_and_cuts_the_round() {
        let pending = big_and_small();
        let mut r = Replanning::new(pending.clone());
        let items = r.plans.shared.plan().items.len();
        let ((planning, applied), text) = r.serve(true, async |b| {
            until_taken(&b.ask).await;
            Signal::Term
        });
        assert!(planning, "the loop ended while its round planned: {text}");
        assert_eq!(applied, Found::default(), "{text}");
        // Cut before its first plan: none made, none saved, the rows still pending.
        assert!(text.contains("the stop cut the re-plan short"), "{text}");
        assert!(r.plans.round.is_none());
        assert_eq!(r.plans.shared.plan().items.len(), items);
        assert_eq!(r.plans.applied, Found::default());
        assert_eq!(*r.plans.found.lock().unwrap(), pending);
        assert!(!r.file().exists());
    }

    /// A SIGHUP while a re-plan round plans is taken at once too: it cuts the round
    /// (the rest of its plans would be of the text the reload replaces), and the
    /// reload comes once the plan in progress has ended, never beside it (both plan
    /// from `applied`). The rows the round did not plan stay pending, for a round of
    /// their own. Before, the round planned on and the reload waited for all of it.
    #[test]
    fn a_sighup_during_a_replan_cuts_the_round_and_reloads_once_it_ended() {
        let pending = big_and_small();
        let mut r = Replanning::new(pending.clone());
        let shared = r.plans.shared.clone();
        let (items, generation) = (shared.plan().items.len(), shared.generation());
        let mut hangup = true;
        let ((_, applied), text) = r.serve(true, async |b| {
            // (Changed once given: the loop drops a signal's future another arm beat.)
            if hangup {
                until_taken(&b.ask).await;
                hangup = false;
                return Signal::Hup;
            }
            // The loop took the SIGHUP: the round may go on (cut), then the reload.
            let _ = b.release.send(());
            while shared.generation() == generation {
                tokio::task::yield_now().await;
            }
            Signal::Term
        });
        let at = |line: &str| text.find(line).unwrap_or_else(|| panic!("{line}: {text}"));
        assert!(
            at("SIGHUP: the discovery re-plan in progress is cut short")
                < at("the reload cut the re-plan short")
                && at("the reload cut the re-plan short") < at("SIGHUP: configuration reloaded"),
            "the round cut, ended, then the reload: {text}"
        );
        // Cut before its first plan: the reload planned the running plan's rows, the
        // rows found still pending, for a round of their own.
        assert_eq!(applied, Found::default(), "{text}");
        assert_eq!(shared.plan().items.len(), items);
        assert_eq!(*r.plans.found.lock().unwrap(), pending);
        assert!(r.plans.replan_again.is_some());
        assert!(!r.plans.reload_due);
    }

    /// A stop while a SIGHUP's reload plans (here one whose thread has not even
    /// started: one parsing a million items for 0.35 s is the same) is taken at once,
    /// and so is an engine that fails (exit status 1, for the service manager to start
    /// the daemon again): the loop ends with the reload still planning, and the stop
    /// then cuts it: it loads nothing and swaps nothing in, `applied` and the rows
    /// found are as they were. Before, the loop awaited the reload inside its arm, and
    /// the stop waited for all of it (here until the blocking thread was let go: 20 s).
    #[test]
    fn a_stop_during_a_reload_is_taken_at_once_and_cuts_it() {
        for (fails, stopping) in [
            (false, "SIGTERM: stopping"),
            (true, "stopping with exit status 1"),
        ] {
            let pending = big_and_small();
            let mut r = Replanning::new(pending.clone());
            let shared = r.plans.shared.clone();
            let generation = shared.generation();
            let mut hangup = true;
            let ((planning, applied), text) = r.serve(false, async |b| {
                if std::mem::take(&mut hangup) {
                    return Signal::Hup;
                }
                if !fails {
                    return Signal::Term;
                }
                b.failing.send("an iteration panicked".into()).unwrap();
                std::future::pending().await
            });
            assert!(planning, "the loop ended while the reload planned: {text}");
            let at = |line: &str| text.find(line).unwrap_or_else(|| panic!("{line}: {text}"));
            assert!(
                at(stopping) < at("SIGHUP: the stop cut the reload short"),
                "{text}"
            );
            assert!(!text.contains("configuration reloaded"), "{text}");
            assert!(!text.contains("rejected"), "{text}");
            assert!(r.plans.round.is_none());
            assert_eq!(shared.generation(), generation, "nothing swapped in");
            assert_eq!(applied, Found::default());
            assert_eq!(r.plans.applied, Found::default());
            assert_eq!(*r.plans.found.lock().unwrap(), pending);
        }
    }

    /// A stop that comes while a reload loads the file cuts it once that load has
    /// ended: nothing more is loaded or planned. Here the load with the rows found is
    /// refused (`big`'s, past the item limit), after which the reload loads the file
    /// again without rows (to find the rows to leave out) and plans once more: it did
    /// both after the stop, which waited for them (a reload that changes a rule plans
    /// once more too, for the rows it drops). The file is a FIFO, so the test sees each
    /// read: the first is fed, the stop set before it ends; another waits for a writer.
    #[test]
    fn a_stop_during_a_reloads_load_plans_nothing_more() {
        use std::os::unix::ffi::OsStrExt as _;
        use std::sync::mpsc::RecvTimeoutError;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("netpoller.toml");
        let text = crate::test_util::one_host_past_the_item_limit("");
        std::fs::write(&path, &text).unwrap();
        let args = Args::of(path.clone());
        let mut running = args.plan.load(Some(&Found::default())).unwrap().unwrap();
        let plan = std::mem::take(&mut running.plan);
        let shared = Shared::new(plan, 2, Clock::new(), Limits::default());
        std::fs::remove_file(&path).unwrap();
        let fifo = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let cut = Arc::new(AtomicBool::new(false));
        let (done, ended) = std::sync::mpsc::channel::<()>();
        let writer = || std::fs::OpenOptions::new().write(true).open(&path);
        let read_again = std::thread::scope(|s| {
            let (cut, text) = (&cut, &text);
            let feeder = s.spawn(move || {
                // Opens once the reload opens the file.
                let mut w = writer().unwrap();
                std::io::Write::write_all(&mut w, text.as_bytes()).unwrap();
                // The stop, before the load has read the whole file.
                cut.store(true, Relaxed);
                drop(w);
                // A read after this one waits for a writer: it gets an empty file
                // (bounded: the test fails rather than hangs).
                match ended.recv_timeout(Duration::from_secs(20)) {
                    Err(RecvTimeoutError::Timeout) => {
                        drop(writer());
                        true
                    }
                    _ => false,
                }
            });
            let (reloaded, log) = crate::test_util::logged(|| {
                let mut rows = big_and_small();
                let found = (&mut rows, &running.cfg.discovery[..]);
                reload(&args, &running.cfg, &shared, 1, |_| 1, cut, found).is_some()
            });
            drop(done);
            assert!(!reloaded, "{log}");
            assert!(
                log.contains("SIGHUP: the stop cut the reload short"),
                "{log}"
            );
            assert!(!log.contains("rejected"), "{log}");
            (feeder.join().unwrap(), log)
        });
        assert!(
            !read_again.0,
            "the reload read the file again after the stop: {}",
            read_again.1
        );
    }

    /// A SIGHUP while a reload plans does not cut it (it reads the file after its
    /// change, maybe not the reload in progress): the configuration is reloaded again
    /// once the reload in progress has ended, never beside it.
    #[test]
    fn a_sighup_during_a_reload_reloads_again_once_it_ended() {
        let mut r = Replanning::new(Found::default());
        let shared = r.plans.shared.clone();
        let generation = shared.generation();
        let mut given = 0;
        let (_, text) = r.serve(false, async |b| {
            // (Counted once given: the loop drops a signal's future another arm beat.)
            if given < 2 {
                given += 1;
                return Signal::Hup;
            }
            let _ = b.release.send(());
            while shared.generation() < generation + 2 {
                tokio::task::yield_now().await;
            }
            Signal::Term
        });
        let at = |line: &str| text.find(line).unwrap_or_else(|| panic!("{line}: {text}"));
        assert!(
            at("SIGHUP: a reload is in progress") < at("SIGHUP: configuration reloaded"),
            "{text}"
        );
        assert_eq!(
            text.matches("SIGHUP: configuration reloaded").count(),
            2,
            "{text}"
        );
        assert_eq!(shared.generation(), generation + 2);
        assert!(!r.plans.reload_due);
    }
}
