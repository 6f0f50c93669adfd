//! `netpoller poll-once`: poll every item of a config exactly once and print the results.
//!
//! This is how an engineer tests a config before deploying it: no ClickHouse, no
//! schedule, the same engines, value conversion and preprocessing as the daemon (a
//! value the daemon would not store shows as polled, marked with the reason: one poll
//! gives a change step nothing to compare with; a step's error handler may discard
//! it). Discovery rules are walked first, so their items stand for the rows each host
//! has now; a host's rows the loader refuses (past a limit) are left out as the daemon
//! leaves them out, named on stderr, and the rest polled, with exit status 1.

use std::io::Write as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context as _;
use poller::engine::{PipelineCounters, Sample};
use poller::plan::Engine;
use poller::preprocess::{Outcome, Preprocessor, Why};
use poller::value::Value;

use crate::discovery::Refused;

/// Arguments of `netpoller poll-once`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub plan: super::PlanArgs,
    /// One JSON object per line (default: aligned text).
    #[arg(long)]
    pub json: bool,
    /// Poll only this host: its name, its address, or a pattern where `*` stands for
    /// any text (`sw-core-*`, `cpe-192.0.2.*`); repeat for more. Its discovery rules
    /// alone are walked. To try one device of a large file without polling them all.
    #[arg(long = "host", value_name = "NAME|IP|PATTERN")]
    pub hosts: Vec<String>,
}

/// Whether `text` is `pattern`, where each `*` stands for any text (none included).
fn glob_matches(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// Whether `--host` selects the host of `name` at `ip` (all hosts without `--host`).
fn selected(patterns: &[String], name: &str, ip: std::net::IpAddr) -> bool {
    if patterns.is_empty() {
        return true;
    }
    let ip = ip.to_string();
    patterns.iter().any(|p| glob_matches(p, name) || *p == ip)
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
/// `{"host","ip","itemid","key","clock","ns","type","value"}` or with `"error"` and
/// `"reason"` instead of `"value"`: the item's error text as the daemon has it (Zabbix's
/// words first) and its class as the metrics count it (`timeout`, `unsupported`,
/// `decode`, `send`), as the daemon's log gives them (`reason=... error=...`); the
/// caller adds `"preprocessing"` to a value the daemon would not store.
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
        Err(e) => {
            o["error"] = serde_json::json!(e.text);
            o["reason"] = serde_json::json!(e.reason.as_str());
        }
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
        // The text alone: it says what failed in Zabbix's words (`Timeout while
        // connecting to ...`); the class before it said it twice (`timeout: Timeout`).
        Err(e) => format!("ERROR {}", e.text),
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
/// the daemon's. Returns the host's rules whose rows the loader refused (said on
/// stderr too): their items are left out or keep the saved rows, and the rest is
/// polled ([`plan_found`]).
fn discover(
    plan: &super::PlanArgs,
    loaded: super::Loaded,
    hosts: &[String],
) -> Result<(super::Loaded, Vec<Refused>), crate::config::ConfigErrors> {
    let super::Loaded {
        mut cfg,
        plan: before,
        text,
        mut found,
    } = loaded;
    cfg.discovery.retain(|t| selected(hosts, &t.host, t.ip));
    // Planned again below: not two plans at once.
    drop(before);
    // The rows the loaded plan stood for (those saved by `run`): the loader took them.
    let applied = found.clone();
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
    drop(cfg);
    let (loaded, refused) = plan_found(plan, text, applied, found)?;
    for r in &refused {
        eprint!("{}", refusal(r, &loaded.found));
    }
    Ok((loaded, refused))
}

/// What stderr says of a host's rule whose rows the loader refused, with its reasons;
/// `planned`: the rows the plan stands for (the refused rule's, if any, are those `run`
/// saved).
fn refusal(r: &Refused, planned: &crate::config::Found) -> String {
    let n = r.rows.as_ref().map_or(0, |rows| rows.len());
    let s = if n == 1 { "" } else { "s" };
    let kept = match planned.rows(&r.host, &r.rule) {
        Some(saved) => format!("the rows `run` saved are polled ({saved})"),
        None => "its items are not polled".into(),
    };
    let mut line = format!(
        "discovery {} {}: {n} row{s} found, refused by the loader (the rest is polled); {kept}:\n{}",
        r.host, r.rule, r.why
    );
    if !line.ends_with('\n') {
        line.push('\n');
    }
    line
}

/// Plans the rows `found` (walked now) with the config `text`, whose rows `applied`
/// (saved by `run`) the loader took: the rows of a host's rule the loader refuses (past
/// a limit, an itemid taken) are left out, as the daemon's re-plan leaves them out
/// ([`crate::discovery::plan_rows`]), and the other hosts' rows planned; a refused
/// host's rule keeps its `applied` rows. Returns the plan and the refusals. An error:
/// the `applied` rows themselves were refused (not expected, the loader took them).
fn plan_found(
    args: &super::PlanArgs,
    text: Arc<str>,
    mut applied: crate::config::Found,
    mut found: crate::config::Found,
) -> Result<(super::Loaded, Vec<Refused>), crate::config::ConfigErrors> {
    // The config of the last rows taken (`applied`): planned once, below.
    let (cfg, refused) = args.plan_all_rows(&text, &mut applied, &mut found);
    let loaded = match cfg {
        Some(cfg) => args.plan(cfg, text, applied),
        // Nothing taken: the rows it was loaded with.
        None => args.replan(text, &applied)?,
    };
    Ok((loaded, refused))
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (loaded, refused) = match args.plan.load(None)? {
        Ok(loaded) => {
            let shard = loaded.cfg.process_shard(args.plan.shard);
            super::warn_of(&loaded.cfg, &loaded.plan, shard);
            // Before anything is sent: walks and polls leave from the source address.
            super::check_sources(&loaded.cfg)?;
            if loaded.cfg.discovery.is_empty() {
                (loaded, Vec::new())
            } else {
                match discover(&args.plan, loaded, &args.hosts) {
                    Ok(found) => found,
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
    let super::Loaded { cfg, mut plan, .. } = loaded;
    if !args.hosts.is_empty() {
        let hosts = &plan.hosts;
        plan.tasks.retain(|t| {
            let h = &hosts[t.host as usize];
            selected(&args.hosts, &h.name, h.ip)
        });
        if plan.tasks.is_empty() {
            eprintln!(
                "netpoller: no host of the file polls anything that --host {} selects ({} hosts in it{})",
                args.hosts.join(", --host "),
                plan.hosts.len(),
                super::shard_words("in", cfg.process_shard(args.plan.shard)),
            );
            return Ok(ExitCode::from(1));
        }
    }
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
        let total: usize = plan.tasks.iter().map(|t| t.items.len()).sum();
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
        let icmp_errors = poll
            .await
            .context("poll task")?
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        for line in icmp_error_lines(&plan, &icmp_errors) {
            eprintln!("{line}");
        }
        let refused = match refused.len() {
            0 => String::new(),
            n => format!("; discovery rows of {n} host rule(s) refused, their items left out (above)"),
        };
        eprintln!(
            "{} items, {values} values, {errors} errors, {kept_back} not stored in {:.3} s{refused}",
            values + errors + kept_back,
            started.elapsed().as_secs_f64()
        );
        // Something the config asks for was not polled: a script checking the status
        // must not take the output for the whole of it (1, as for a config refused).
        Ok(if refused.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        })
    })
}

/// Hosts named in full by [`icmp_error_lines`]; the others are counted.
const LISTED_ICMP_ERRORS: usize = 10;

/// What poll-once says of the hosts an ICMP error came back for (a router's host or
/// network unreachable, a firewall's reject): why their ping items read as down, which
/// their values alone do not say (`netpoller sweep` says it per host too). The first
/// [`LISTED_ICMP_ERRORS`] named, the others counted: a subnet behind a dead router is
/// one problem.
fn icmp_error_lines(plan: &poller::plan::Plan, errors: &[(u32, icmp::Unreachable)]) -> Vec<String> {
    if errors.is_empty() {
        return Vec::new();
    }
    let mut lines = vec![format!(
        "ICMP errors came back for the echo requests of {} host(s), instead of replies (the last for each):",
        errors.len()
    )];
    for (host, error) in errors.iter().take(LISTED_ICMP_ERRORS) {
        let h = &plan.hosts[*host as usize];
        lines.push(format!("  {} ({}): {error}", h.name, h.ip));
    }
    if errors.len() > LISTED_ICMP_ERRORS {
        lines.push(format!("  and {} more", errors.len() - LISTED_ICMP_ERRORS));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Found;

    /// `--host` patterns: `*` stands for any text, none included; the rest is literal.
    #[test]
    fn host_patterns_match_as_shell_globs_do() {
        for (pattern, text, want) in [
            ("sw-1", "sw-1", true),
            ("sw-1", "sw-10", false),
            ("sw-*", "sw-10", true),
            ("sw-*", "sw-", true),
            ("*-core-*", "dc1-core-2", true),
            ("*-core-*", "dc1-edge-2", false),
            ("cpe-192.0.2.*", "cpe-192.0.2.17", true),
            ("cpe-192.0.2.*", "cpe-192.0.20.1", false),
            ("a*b*a", "aba", true),
            ("a*a", "a", false),
            ("*", "", true),
        ] {
            assert_eq!(glob_matches(pattern, text), want, "{pattern} {text}");
        }
        let ip = "192.0.2.9".parse().unwrap();
        assert!(selected(&[], "any", ip), "no --host: all");
        assert!(selected(&["192.0.2.9".into()], "sw-9", ip), "by address");
        assert!(
            !selected(&["192.0.2.*".into()], "sw-9", ip),
            "a pattern matches names"
        );
    }

    /// The hosts an ICMP error came back for: the first ten named with their error,
    /// the others counted; none, no line.
    #[test]
    fn icmp_errors_name_ten_hosts_and_count_the_rest() {
        let mut cfg = crate::config::parse(
            "[[host_ranges]]\ncidr = \"192.0.2.0/28\"\nname = \"cpe-{ip}\"\nitems = [ { key = \"icmpping\", interval = \"1m\" } ]\n",
        )
        .unwrap();
        let plan = cfg.take_plan(None, || {});
        let error = icmp::Unreachable {
            kind: icmp::UnreachableKind::Host,
            from: "192.0.2.254".parse().unwrap(),
        };
        assert!(icmp_error_lines(&plan, &[]).is_empty());
        let errors: Vec<(u32, icmp::Unreachable)> = (0..12).map(|h| (h, error)).collect();
        let lines = icmp_error_lines(&plan, &errors);
        assert_eq!(lines.len(), 12, "{lines:#?}");
        assert_eq!(lines[0], "ICMP errors came back for the echo requests of 12 host(s), instead of replies (the last for each):");
        let first = &plan.hosts[0];
        assert_eq!(
            lines[1],
            format!("  {} ({}): {error}", first.name, first.ip)
        );
        assert!(lines[1].starts_with("  cpe-192.0.2."), "{}", lines[1]);
        assert_eq!(lines[11], "  and 2 more");
    }

    /// One host's walked rows that take the file past the loader's item limit are
    /// left out, named with the loader's reason; the other host's rows are planned and
    /// polled (the whole command stopped with the loader's error, polling nothing).
    #[test]
    fn rows_the_loader_refuses_leave_out_their_host_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("netpoller.toml");
        std::fs::write(&path, crate::test_util::one_host_past_the_item_limit("")).unwrap();
        let args = super::super::PlanArgs::of(path);
        // Loaded as `run` would with the rows it `saved`, then planned with what the
        // walks found: `big` 65,536 rows of 129 items, past the limit.
        let walk = |saved: &Found| {
            let loaded = args
                .load(Some(saved))
                .unwrap()
                .unwrap_or_else(|e| panic!("{e}"));
            let (text, applied) = (loaded.text.clone(), loaded.found.clone());
            drop(loaded);
            let walked =
                crate::test_util::found(&[("big", "if", "1-65536"), ("small", "if", "1-3")]);
            plan_found(&args, text, applied, walked).unwrap_or_else(|e| panic!("{e}"))
        };
        // No rows saved.
        let (loaded, refused) = walk(&Found::default());
        assert_eq!(loaded.plan.items.len(), 129 * 3);
        assert_eq!(
            loaded.found,
            crate::test_util::found(&[("small", "if", "1-3")])
        );
        let [r] = &refused[..] else {
            panic!("{refused:?}")
        };
        assert_eq!((&*r.host, &*r.rule), ("big", "if"));
        assert_eq!(r.rows.as_ref().map(|r| r.len()), Some(65536));
        assert!(r.why.contains("past the"), "{}", r.why);
        let said = refusal(r, &loaded.found);
        assert!(
            said.starts_with("discovery big if: 65536 rows found, refused by the loader (the rest is polled); its items are not polled:\n")
                && said.contains("past the"),
            "{said}"
        );

        // Rows `run` saved for it (planned at the load): it keeps them.
        let (loaded, refused) = walk(&crate::test_util::found(&[("big", "if", "1-3")]));
        assert_eq!(loaded.plan.items.len(), 129 * 6);
        let both = crate::test_util::found(&[("big", "if", "1-3"), ("small", "if", "1-3")]);
        assert_eq!(loaded.found, both);
        let [r] = &refused[..] else {
            panic!("{refused:?}")
        };
        let said = refusal(r, &loaded.found);
        assert!(
            said.contains("; the rows `run` saved are polled (1-3):\n"),
            "{said}"
        );
    }
}
