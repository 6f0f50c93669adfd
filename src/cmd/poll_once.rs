//! `netpoller poll-once`: poll every item of a config exactly once and print the results.
//!
//! This is how an engineer tests a config before deploying it: no ClickHouse, no
//! schedule, the same engines, value conversion and preprocessing as the daemon (a
//! value the daemon would not store shows as polled, marked with the reason: one poll
//! gives a change step nothing to compare with; a step's error handler may discard
//! it). Discovery rules are walked first, so their items stand for the rows each host
//! has now.

use std::io::Write as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context as _;
use poller::engine::{PipelineCounters, Sample};
use poller::plan::Engine;
use poller::preprocess::{Outcome, Preprocessor, Why};
use poller::value::Value;

/// Arguments of `netpoller poll-once`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub plan: super::PlanArgs,
    /// One JSON object per line (default: aligned text).
    #[arg(long)]
    pub json: bool,
}

/// Why a value polled once would not be stored by the daemon (shown with the value as
/// polled).
fn not_stored(why: Why) -> &'static str {
    match why {
        Why::NoPrevious => "not stored: a change step needs two polls (the value as polled)",
        Why::HandlerDiscards => {
            "not stored: a step failed and its error handler discards the value (the value as polled)"
        }
        // A first poll has nothing stored to compare with: never here.
        Why::Unchanged => "not stored: unchanged (the value as polled)",
    }
}

/// One result as a JSON object (printed one per line):
/// `{"host","ip","itemid","key","clock","ns","type","value"}` or with `"error"` instead of
/// `"value"`; the caller adds `"preprocessing"` to a value the daemon would not store.
pub fn json_value(s: &Sample) -> serde_json::Value {
    let mut o = serde_json::json!({
        "host": &*s.host,
        "ip": s.ip.to_string(),
        "itemid": s.itemid,
        "key": &*s.key,
        "clock": s.clock,
        "ns": s.ns,
        "type": s.value_type.as_str(),
    });
    match &s.result {
        Ok(Value::Float(f)) => o["value"] = serde_json::json!(f),
        Ok(Value::Uint(u)) => o["value"] = serde_json::json!(u),
        Ok(Value::Str(t)) => o["value"] = serde_json::json!(t),
        Err(e) => o["error"] = serde_json::json!(e.to_string()),
    }
    o
}

/// The sample after its item's preprocessing, and why the daemon would not store it
/// (then the sample is the value as polled).
fn preprocessed(pre: &mut Preprocessor, s: Sample) -> (Sample, Option<Why>) {
    // The steps before the one that discarded may have changed the value in place.
    let raw = s.pre.is_some().then(|| s.clone());
    match pre.apply(s) {
        Outcome::Keep(s) => (s, None),
        Outcome::Discarded(_, why) => (
            raw.expect("only samples with steps are discarded"),
            Some(why),
        ),
    }
}

fn text_line(s: &Sample) -> String {
    let v = match &s.result {
        Ok(Value::Str(t)) => format!("{t:?}"),
        Ok(number) => number.to_string(),
        Err(e) => format!("ERROR {e}"),
    };
    format!(
        "{:<24} {:<15} {:<36} {:<5} {}",
        s.host,
        s.ip,
        s.key,
        s.value_type.as_str(),
        v
    )
}

/// Walks every discovery rule's table on its hosts now and plans their items for the
/// rows found (a host that does not answer keeps the rows saved by `run`, if any),
/// saying on stderr what each walk found. The discovery file is not written: that is
/// the daemon's.
fn discover(
    plan: &super::PlanArgs,
    loaded: super::Loaded,
) -> Result<super::Loaded, crate::config::ConfigErrors> {
    let super::Loaded {
        cfg,
        plan: before,
        text,
        mut found,
    } = loaded;
    // Planned again below: not two plans at once.
    drop(before);
    for (host, rule, rows) in crate::discovery::walk_all(&cfg.discovery) {
        match rows {
            Ok(rows) => {
                let n = rows.len();
                let s = if n == 1 { "" } else { "s" };
                let line = format!("discovery {host} {rule}: {n} row{s} {rows}");
                eprintln!("{}", line.trim_end());
                found.set(&host, &rule, rows);
            }
            Err(e) => {
                let kept = match found.rows(&host, &rule) {
                    Some(r) => format!("the rows `run` saved are polled ({r})"),
                    None => "no rows known: its items are not polled".into(),
                };
                eprintln!("discovery {host} {rule}: walk failed ({e:#}); {kept}");
            }
        }
    }
    plan.replan(text, &found)
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let loaded = match args.plan.load(None)? {
        Ok(loaded) => {
            // Before anything is sent: walks and polls leave from the source address.
            super::check_sources(&loaded.cfg)?;
            if loaded.cfg.discovery.is_empty() {
                loaded
            } else {
                match discover(&args.plan, loaded) {
                    Ok(loaded) => loaded,
                    Err(e) => {
                        eprint!("{e}");
                        return Ok(ExitCode::from(1));
                    }
                }
            }
        }
        Err(e) => {
            eprint!("{e}");
            return Ok(ExitCode::from(1));
        }
    };
    let super::Loaded { cfg, plan, .. } = loaded;
    let plan = Arc::new(plan);
    let has_icmp = plan.tasks.iter().any(|t| t.engine == Engine::Icmp);
    let has_snmp = plan.tasks.iter().any(|t| t.engine == Engine::Snmp);
    let mut icmp = super::open_icmp_drivers(&cfg, 1, has_icmp)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let snmp = if has_snmp {
            Some(super::open_snmp_driver(&cfg)?)
        } else {
            None
        };
        let total = plan.items.len();
        let started = Instant::now();
        let (tx, mut rx) = poller::engine::channel(4096);
        let limits = super::limits(&cfg);
        let counters = Arc::new(PipelineCounters::default());
        let poll = tokio::spawn(poller::daemon::poll_once(
            plan.clone(),
            icmp.pop(),
            snmp,
            limits,
            tx,
            counters,
        ));
        let mut progress = crate::progress::Progress::beside_results(
            total as u64,
            "polling",
            crate::telemetry::quiet(),
        );
        let live = crate::progress::stdout_is_tty();
        let (mut values, mut errors, mut kept_back) = (0usize, 0usize, 0usize);
        let stdout = std::io::stdout();
        let mut out = std::io::BufWriter::new(stdout.lock());
        let mut pre = Preprocessor::default();
        while let Some(batch) = rx.recv().await {
            for s in batch {
                let (s, why) = preprocessed(&mut pre, s);
                match (&s.result, why) {
                    (_, Some(_)) => kept_back += 1,
                    (Ok(_), None) => values += 1,
                    (Err(_), None) => errors += 1,
                }
                let line = match (args.json, why.map(not_stored)) {
                    (true, None) => json_value(&s).to_string(),
                    (true, Some(why)) => {
                        let mut o = json_value(&s);
                        o["preprocessing"] = serde_json::json!(why);
                        o.to_string()
                    }
                    (false, None) => text_line(&s),
                    (false, Some(why)) => format!("{}  ({why})", text_line(&s)),
                };
                writeln!(out, "{line}")?;
                if live {
                    out.flush()?;
                }
                progress.inc(1);
            }
        }
        out.flush()?;
        progress.finish();
        poll.await
            .context("poll task")?
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        eprintln!(
            "{} items, {values} values, {errors} errors, {kept_back} not stored in {:.3} s",
            values + errors + kept_back,
            started.elapsed().as_secs_f64()
        );
        Ok(ExitCode::SUCCESS)
    })
}
