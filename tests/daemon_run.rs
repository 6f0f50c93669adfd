//! `netpoller run` end to end against the real services: loopback hosts (ICMP), the
//! local snmpd agents (SNMP) and the local ClickHouse server; SIGHUP reloads, SIGTERM
//! flushes; `--shard i/N` splits hosts with no overlap and no gap.
//!
//! Traffic goes only to 127.0.0.0/8.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use common::{
    ch, fake_agent, line_of, netpoller, poll_once_json, scratch, service_env, succeeds, Daemon,
};
use snmp::VarValue;

fn snmpd_addrs() -> Vec<String> {
    service_env("NETPOLLER_SNMPD_ADDRS")
        .split(',')
        .map(str::to_string)
        .collect()
}

/// `[daemon]` (spool in `spool`, metrics on `metrics_listen`, `""`: none) and
/// `[clickhouse]` (the services' server, database `db`, quick flushes).
fn daemon_and_clickhouse(db: &str, spool: &std::path::Path, metrics_listen: &str) -> String {
    format!(
        r#"
[daemon]
metrics_listen = "{metrics_listen}"
spool_dir = "{spool}"

[clickhouse]
url = "{ch_url}"
database = "{db}"
flush_interval = "500ms"
compression = "none"
"#,
        spool = spool.display(),
        ch_url = service_env("NETPOLLER_CH_URL"),
    )
}

/// A config polling `icmp_hosts` loopback addresses (ICMP, every 2 s) and the first
/// three snmpd agents (SNMP, every 2 s), into database `db`.
fn config(db: &str, spool: &std::path::Path, icmp_hosts: &[&str], extra: &str) -> String {
    let agents = snmpd_addrs();
    let mut s = daemon_and_clickhouse(db, spool, "")
        + r#"
[icmp]
timeout = "500ms"

[snmp]
timeout = "1s"

[[templates]]
name = "icmp"
items = [
  { key = "icmpping", interval = "2s" },
  { key = "icmppingloss", interval = "2s" },
  { key = "icmppingsec", interval = "2s" },
]

[[templates]]
name = "snmp"
items = [
  { key = "sysUpTime", oid = "1.3.6.1.2.1.1.3.0", type = "uint", interval = "2s" },
  { key = "sysDescr", oid = "1.3.6.1.2.1.1.1.0", type = "str", interval = "2s" },
  { key = "missing", oid = "1.3.6.1.2.1.1.99.0", type = "uint", interval = "2s" },
]
"#;
    for (i, a) in agents.iter().take(3).enumerate() {
        s += &format!("\n[[hosts]]\nname = \"agent-{i}\"\nip = \"{a}\"\ntemplates = [\"snmp\"]\n");
    }
    for (i, ip) in icmp_hosts.iter().enumerate() {
        s += &format!("\n[[hosts]]\nname = \"ping-{i}\"\nip = \"{ip}\"\ntemplates = [\"icmp\"]\n");
    }
    s + extra
}

/// Rows per hostname in every history table of `db`.
fn rows_by_host(db: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for t in ["history_dbl", "history_uint", "history_str"] {
        let body = ch(&format!(
            "SELECT hostname, count() FROM {db}.{t} GROUP BY hostname FORMAT TSV"
        ));
        for line in body.lines() {
            let (h, n) = line.split_once('\t').unwrap();
            *out.entry(h.to_string()).or_default() += n.parse::<u64>().unwrap();
        }
    }
    out
}

/// Writes `dir/c.toml`: `[daemon]`/`[clickhouse]` as [`daemon_and_clickhouse`] and one
/// host, `agent`, the first snmpd, with `items` (the inside of `items = [ ... ]`).
fn one_agent(
    dir: &std::path::Path,
    db: &str,
    metrics_listen: &str,
    items: &str,
) -> std::path::PathBuf {
    let agent = &snmpd_addrs()[0];
    let path = dir.join("c.toml");
    let host = format!(
        "\n[[hosts]]\nname = \"agent\"\nip = \"{agent}\"\nsnmp = {{ community = \"public\" }}\nitems = [{items}]\n"
    );
    std::fs::write(
        &path,
        daemon_and_clickhouse(db, &dir.join("spool"), metrics_listen) + &host,
    )
    .unwrap();
    path
}

fn values_in_log(log: &str) -> u64 {
    log.lines()
        .filter(|l| l.contains(" iteration") && l.contains("values="))
        .map(|l| {
            let v = l.split("values=").nth(1).unwrap();
            v.split(|c: char| !c.is_ascii_digit())
                .next()
                .unwrap()
                .parse::<u64>()
                .unwrap()
        })
        .sum()
}

#[test]
fn run_polls_reloads_and_flushes_on_sigterm() {
    let dir = scratch("daemon-run");
    let db = format!("nptest_run_{}", std::process::id());
    let cfg_path = dir.join("netpoller.toml");
    std::fs::write(
        &cfg_path,
        config(&db, &dir.join("spool"), &["127.0.70.1", "127.0.70.2"], ""),
    )
    .unwrap();

    let d = Daemon::start(&cfg_path, &[], dir.join("run.log"));
    d.expect_log("started", Duration::from_secs(20));
    std::thread::sleep(Duration::from_secs(5));

    // SIGHUP with a valid config that adds a host, and changes two settings that only
    // apply at start: the hosts are reloaded, and the log says what was not.
    let changed = config(
        &db,
        &dir.join("spool"),
        &["127.0.70.1", "127.0.70.2", "127.0.70.3"],
        "",
    )
    .replace("flush_interval = \"500ms\"", "flush_interval = \"700ms\"")
    .replace("[icmp]\n", "[icmp]\nmax_pps = 5000\n");
    std::fs::write(&cfg_path, changed).unwrap();
    d.signal(libc::SIGHUP);
    // The line says what changed: one host of the ICMP template's three items.
    let reloaded = d.expect_log("configuration reloaded", Duration::from_secs(10));
    let log = d.log_text();
    assert!(
        reloaded.contains(
            "hosts_added=1 hosts_removed=0 hosts_changed=0 items_added=3 items_removed=0 items_changed=0"
        ) && reloaded.contains("added: ping-2"),
        "{reloaded}"
    );
    let warned = log
        .lines()
        .find(|l| l.contains("apply only at start"))
        .unwrap_or_else(|| panic!("no warning about restart-only settings:\n{log}"));
    assert!(
        warned.contains("[clickhouse], icmp.max_pps") && !warned.contains("daemon."),
        "{warned}"
    );
    std::thread::sleep(Duration::from_secs(5));

    // SIGHUP with an invalid config: rejected, the old one keeps running.
    std::fs::write(&cfg_path, "[daemon]\nshardz = 1\n").unwrap();
    d.signal(libc::SIGHUP);
    d.expect_log("new configuration rejected", Duration::from_secs(10));
    assert!(
        d.log_text().contains("shardz"),
        "the rejection names the problem:\n{}",
        d.log_text()
    );
    let before_invalid = values_in_log(&d.log_text());
    std::thread::sleep(Duration::from_secs(4));
    assert!(
        values_in_log(&d.log_text()) > before_invalid,
        "polling stopped after an invalid reload"
    );

    let log_path = d.log.clone();
    let status = d.stop();
    assert!(status.success(), "exit status {status:?}");
    let log = std::fs::read_to_string(log_path).unwrap();
    assert!(log.contains("netpoller stopped"), "{log}");

    // Everything polled before SIGTERM is in ClickHouse: rows == values logged.
    let rows = rows_by_host(&db);
    let total: u64 = rows.values().sum();
    let polled = values_in_log(&log);
    assert_eq!(
        total, polled,
        "rows in ClickHouse vs values polled (log):\n{log}"
    );

    // Every host was polled on schedule: 2 s interval over ~14 s.
    for h in ["agent-0", "agent-1", "agent-2", "ping-0", "ping-1"] {
        let n = rows.get(h).copied().unwrap_or(0);
        // ICMP hosts: 3 items; agents: 2 values (the third item is unsupported).
        let per = if h.starts_with("ping") { 3 } else { 2 };
        assert!(
            n >= per * 5 && n <= per * 9,
            "{h}: {n} rows in ~14 s at 2 s ({rows:?})"
        );
    }
    // The host added by the reload got polled, but only after it.
    let added = rows.get("ping-2").copied().unwrap_or(0);
    assert!(
        added >= 3 * 3 && added < rows["ping-0"],
        "ping-2: {added} ({rows:?})"
    );

    // Unsupported SNMP items produce no row, never a fake 0.
    let missing = ch(&format!(
        "SELECT count() FROM {db}.history_uint WHERE itemname = 'missing' FORMAT TSV"
    ));
    assert_eq!(missing.trim(), "0");
    // Values are what the agents hold.
    let descr = ch(&format!(
        "SELECT any(value) FROM {db}.history_str WHERE itemname = 'sysDescr' FORMAT TSV"
    ));
    assert!(descr.contains("netpoller test agent"), "sysDescr {descr:?}");
    // No (itemid, clock, ns) twice.
    let dups = ch(&format!(
        "SELECT count() FROM (SELECT itemid, clock, ns, count() c FROM {db}.history_dbl GROUP BY itemid, clock, ns HAVING c > 1) FORMAT TSV"
    ));
    assert_eq!(dups.trim(), "0");
    ch(&format!("DROP DATABASE IF EXISTS {db}"));
}

/// Runs the daemon (ICMP and SNMP hosts, into database `db`) with the debug build's
/// failpoint `NETPOLLER_TEST_PANIC=panic` until it stops by itself (at most 30 s):
/// its exit status and log.
fn run_until_it_stops(panic: &str, db: &str) -> (std::process::ExitStatus, String) {
    let dir = scratch(&format!("daemon-panic-{panic}"));
    let cfg_path = dir.join("netpoller.toml");
    std::fs::write(
        &cfg_path,
        config(db, &dir.join("spool"), &["127.0.76.13", "127.0.76.14"], ""),
    )
    .unwrap();
    let log = dir.join("run.log");
    let mut child = netpoller()
        .env("NETPOLLER_TEST_PANIC", panic)
        .args(["--log-level", "info", "run", "-c"])
        .arg(&cfg_path)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let t = std::time::Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "still running 30 s after start:\n{}",
                std::fs::read_to_string(&log).unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    (status, std::fs::read_to_string(&log).unwrap())
}

/// An engine whose iteration panics (a bug; a debug build's failpoint here) stops the
/// daemon with exit status 1, for the service manager to start it again, instead of
/// polling on without the panicked iteration's driver and items; what was polled until
/// then is written. So does a sink consumer that panics, which left the engines
/// polling into a channel nobody read.
#[test]
fn a_part_that_panics_stops_the_daemon_with_status_1_after_writing_what_it_polled() {
    let db = format!("nptest_panic_{}", std::process::id());
    let (status, log) = run_until_it_stops("icmp", &db);
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        log.contains("icmp iteration panicked: NETPOLLER_TEST_PANIC=icmp")
            && log.contains("stopping with exit status 1"),
        "{log}"
    );
    // The first ICMP iteration's values, and every SNMP value, are in ClickHouse.
    let rows = rows_by_host(&db);
    let pings: u64 = rows
        .iter()
        .filter(|(h, _)| h.starts_with("ping-"))
        .map(|(_, n)| n)
        .sum();
    assert!(pings >= 3, "{rows:?}\n{log}");
    assert_eq!(rows.values().sum::<u64>(), values_in_log(&log), "{log}");
    ch(&format!("DROP DATABASE IF EXISTS {db}"));

    let db = format!("nptest_panic_consumer_{}", std::process::id());
    let (status, log) = run_until_it_stops("consumer", &db);
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        log.contains("the sink consumer ended: stopping with exit status 1"),
        "{log}"
    );
    assert!(
        log.contains("netpoller stopped"),
        "the sink was shut down\n{log}"
    );
    ch(&format!("DROP DATABASE IF EXISTS {db}"));
}

/// A device that needs 20 requests in series at 0.25 s each (5 s) shares an iteration
/// with a healthy agent polled every second (`batch_window` merges them), with one
/// SNMP driver: the healthy host is rescheduled when it is done, not when the slow one
/// is, and an extra driver polls it every second meanwhile (it got one value in 5 s
/// when the iteration held it, and held the only driver). A third device ignores
/// requests of more than 2 OIDs: its 4 items get values, and /metrics counts the
/// silence and the extra driver. SIGTERM does not wait for the slow device's iteration.
#[test]
fn a_slow_device_does_not_hold_back_the_hosts_of_its_iteration() {
    let dir = scratch("daemon-slow-device");
    let db = format!("nptest_slow_{}", std::process::id());
    // A slow device: answers every GET after 0.25 s.
    let port = fake_agent(|m| {
        std::thread::sleep(Duration::from_millis(250));
        Some(
            m.varbinds()
                .map(|vb| (vb.oid.to_owned(), VarValue::Integer(7)))
                .collect(),
        )
    });
    let items: Vec<String> = (1..=20)
        .map(|i| format!("{{ key = \"m{i}\", oid = \"1.3.6.1.4.1.99999.{i}.0\", type = \"uint\", interval = \"1s\" }}"))
        .collect();
    let picky = fake_agent(|m| {
        (m.varbind_count() <= 2).then(|| {
            m.varbinds()
                .map(|vb| (vb.oid.to_owned(), VarValue::Integer(7)))
                .collect()
        })
    });
    let picky_items: Vec<String> = (1..=4)
        .map(|i| format!("{{ key = \"p{i}\", oid = \"1.3.6.1.4.1.99999.{i}.0\", type = \"uint\", interval = \"1s\" }}"))
        .collect();
    let agent = &snmpd_addrs()[0];
    let metrics_port = common::free_port();
    let text = daemon_and_clickhouse(&db, &dir.join("spool"), &format!("127.0.0.1:{metrics_port}"))
        .replace(
            "[daemon]\n",
            "[daemon]\nbatch_window = \"1s\"\nsnmp_concurrent_iterations = 1\n",
        )
        + &format!(
            "\n[[hosts]]\nname = \"slow\"\nip = \"127.0.0.1\"\nsnmp = {{ community = \"public\", port = {port}, max_oids_per_request = 1, timeout = \"1s\", retries = 0 }}\nitems = [ {} ]\n\n[[hosts]]\nname = \"good\"\nip = \"{agent}\"\nsnmp = {{ community = \"public\" }}\nitems = [ {{ key = \"up\", oid = \"1.3.6.1.2.1.1.3.0\", type = \"uint\", interval = \"1s\" }} ]\n",
            items.join(", ")
        )
        + &format!(
            "\n[[hosts]]\nname = \"picky\"\nip = \"127.0.0.1\"\nsnmp = {{ community = \"public\", port = {picky}, timeout = \"300ms\" }}\nitems = [ {} ]\n",
            picky_items.join(", ")
        );
    let cfg_path = dir.join("c.toml");
    std::fs::write(&cfg_path, text).unwrap();
    let d = Daemon::start(&cfg_path, &[], dir.join("run.log"));
    d.expect_log("started", Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(5500));
    let (_, metrics) = common::http_get(metrics_port, "/metrics").expect("/metrics");
    let value = |series: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {series} in\n{metrics}"))
    };
    assert_eq!(value("netpoller_snmp_extra_drivers"), 1.0);
    assert!(value("netpoller_snmp_size_cuts_total{reason=\"silent\"}") >= 1.0);
    // The slow device's iteration (5 s) is running: the stop waits for its request in
    // flight (0.25 s), not for the rest of its requests.
    let t = std::time::Instant::now();
    let stopped = d.stop();
    let took = t.elapsed();
    let log = std::fs::read_to_string(dir.join("run.log")).unwrap_or_default();
    assert!(stopped.success(), "{log}");
    assert!(
        took < Duration::from_secs(3),
        "stopped after {took:?}\n{log}"
    );
    let rows = rows_by_host(&db);
    let good = rows.get("good").copied().unwrap_or(0);
    assert!(
        good >= 4,
        "the healthy host got {good} values in 5.5 s: {rows:?}\n{log}"
    );
    assert!(rows.get("slow").copied().unwrap_or(0) >= 20, "{rows:?}");
    assert!(rows.get("picky").copied().unwrap_or(0) >= 4, "{rows:?}");
    assert!(
        log.contains("every SNMP iteration is held by slow devices"),
        "{log}"
    );
    ch(&format!("DROP DATABASE IF EXISTS {db}"));
}

/// A file in a scratch folder of `name` whose one `[[host_ranges]]` entry has
/// `addresses` (`cidr = ...` or `range = ...`), its hosts named `{prefix}-{ip}`, each
/// pinged once by `icmpping` (300 ms timeout).
fn pinged_range(name: &str, addresses: &str, prefix: &str) -> std::path::PathBuf {
    let dir = scratch(name);
    let cfg_path = dir.join("c.toml");
    std::fs::write(
        &cfg_path,
        format!(
            "[daemon]\nspool_dir = \"{}\"\n[icmp]\ntimeout = \"300ms\"\npackets = 1\n\
             [[host_ranges]]\n{addresses}\nname = \"{prefix}-{{ip}}\"\n\
             items = [ {{ key = \"icmpping\", interval = \"10s\" }} ]\n",
            dir.join("spool").display()
        ),
    )
    .unwrap();
    cfg_path
}

#[test]
fn process_shards_poll_every_host_exactly_once() {
    let cfg_path = pinged_range("daemon-shards", "cidr = \"127.0.71.0/26\"", "cpe");
    let mut seen: Vec<HashSet<String>> = Vec::new();
    for shard in ["0/2", "1/2"] {
        let hosts: HashSet<String> = poll_once_json(&cfg_path, &["--shard", shard])
            .iter()
            .map(|v| {
                assert_eq!(v["value"], 1, "loopback answers: {v}");
                v["host"].as_str().unwrap().to_string()
            })
            .collect();
        assert!(!hosts.is_empty(), "shard {shard} polled nothing");
        seen.push(hosts);
    }
    assert!(
        seen[0].is_disjoint(&seen[1]),
        "a host was polled by both shards"
    );
    assert_eq!(
        seen[0].len() + seen[1].len(),
        62,
        "a /26 has 62 host addresses"
    );
}

/// A `[[host_ranges]]` entry of `range` polls every address from its first to its
/// last, network- and broadcast-like ones too (.255, .0: the range says which), each a
/// host named by the pattern (loopback answers them all); but those its `exclude`
/// leaves out.
#[test]
fn a_range_entry_polls_every_address_of_it_but_those_it_excludes() {
    let polled_of = |addresses: &str, args: &[&str]| -> Vec<String> {
        let cfg_path = pinged_range("daemon-range", addresses, "pool");
        let mut got: Vec<String> = poll_once_json(&cfg_path, args)
            .iter()
            .map(|v| {
                assert_eq!(v["value"], 1, "loopback answers: {v}");
                let (host, ip) = (v["host"].as_str().unwrap(), v["ip"].as_str().unwrap());
                assert_eq!(host, format!("pool-{ip}"));
                ip.to_string()
            })
            .collect();
        got.sort_by_key(|ip| ip.parse::<std::net::IpAddr>().unwrap());
        got
    };
    let polled = |addresses: &str| polled_of(addresses, &[]);
    let range = "range = \"127.0.231.254-127.0.232.1\"";
    // poll-once --host: those hosts alone, by name pattern or address.
    assert_eq!(
        polled_of(
            range,
            &["--host", "pool-127.0.231.*", "--host", "127.0.232.1"]
        ),
        ["127.0.231.254", "127.0.231.255", "127.0.232.1"]
    );
    let o = netpoller()
        .args(["poll-once", "--host", "sw-*", "-c"])
        .arg(pinged_range("daemon-range", range, "pool"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "netpoller: no host of the file polls anything that --host sw-* selects (4 hosts in it)\n"
    );
    assert_eq!(
        polled(range),
        [
            "127.0.231.254",
            "127.0.231.255",
            "127.0.232.0",
            "127.0.232.1"
        ]
    );
    assert_eq!(
        polled(&format!(
            "{range}\nexclude = [\"127.0.231.255-127.0.232.0\"]"
        )),
        ["127.0.231.254", "127.0.232.1"]
    );
}

/// Two process shards of ONE file on one machine, as packaging/netpoller@.service.d
/// runs them: each with its own spool (`--spool-dir`) and metrics port
/// (`--metrics-listen`, or `$NETPOLLER_METRICS_LISTEN` from a drop-in), the file's
/// left unused. Without the options the second one could not start (the first holds
/// the spool and the port; docs/production.md had said a drop-in per instance would
/// do, which no setting allowed).
#[test]
fn process_shards_of_one_file_take_their_spool_and_metrics_port_from_the_command_line() {
    use std::net::Ipv4Addr;
    let dir = scratch("daemon-shards-one-file");
    let ip = Ipv4Addr::new(127, 0, 212, 1);
    let [file_port, port_a, port_b] = [0; 3].map(|_| common::free_port_on(ip));
    let cfg_path = dir.join("shards.toml");
    std::fs::write(
        &cfg_path,
        format!(
            "[daemon]\nmetrics_listen = \"{ip}:{file_port}\"\nspool_dir = \"{}\"\ndiscovery_file = \"{}\"\n\
             [icmp]\ntimeout = \"300ms\"\npackets = 1\n\
             [[host_ranges]]\ncidr = \"127.0.212.16/28\"\nname = \"cpe-{{ip}}\"\n\
             items = [ {{ key = \"icmpping\", interval = \"1s\" }} ]\n",
            dir.join("spool").display(),
            dir.join("discovered.json").display(),
        ),
    )
    .unwrap();
    let spool = |s: &str| dir.join(format!("spool-{s}"));
    let (a_spool, b_spool) = (spool("a"), spool("b"));
    let a = Daemon::start(
        &cfg_path,
        &[
            "--shard",
            "0/2",
            "--spool-dir",
            a_spool.to_str().unwrap(),
            "--metrics-listen",
            &format!("{ip}:{port_a}"),
        ],
        dir.join("a.log"),
    );
    let b_listen = format!("{ip}:{port_b}");
    let b = Daemon::start_env(
        &cfg_path,
        &["--shard", "1/2", "--spool-dir", b_spool.to_str().unwrap()],
        dir.join("b.log"),
        &[("NETPOLLER_METRICS_LISTEN", b_listen.as_ref())],
    );
    for d in [&a, &b] {
        d.expect_log("started", Duration::from_secs(20));
    }
    // A few sweeps of each share.
    std::thread::sleep(Duration::from_secs(3));
    for port in [port_a, port_b] {
        let (code, body) = common::http_get_from(ip, port, "/metrics")
            .unwrap_or_else(|| panic!("nothing answers on {ip}:{port}"));
        assert_eq!(code, 200, "{body}");
        assert!(body.contains("netpoller_values_total"), "{body}");
    }
    assert!(
        common::http_get_from(ip, file_port, "/metrics").is_none(),
        "the file's metrics_listen is not used"
    );
    for d in [a, b] {
        let log = d.log_text();
        assert!(d.stop().success(), "{log}");
    }
    assert!(
        !dir.join("spool").exists(),
        "the file's spool_dir is not used"
    );
    // Each spool holds its share's values, the two every host.
    let hosts = |spool: &std::path::Path| -> HashSet<String> {
        let (out, _) = succeeds(
            netpoller()
                .args(["spool", "dump", "-c"])
                .arg(&cfg_path)
                .arg("--dir")
                .arg(spool),
        );
        out.lines()
            .map(|l| l.split('\t').nth(4).unwrap().to_string())
            .collect()
    };
    let (in_a, in_b) = (hosts(&a_spool), hosts(&b_spool));
    assert!(!in_a.is_empty() && !in_b.is_empty(), "{in_a:?} {in_b:?}");
    assert!(in_a.is_disjoint(&in_b), "{in_a:?} {in_b:?}");
    assert_eq!(in_a.len() + in_b.len(), 14, "a /28 has 14 host addresses");
}

#[test]
fn hosts_the_driver_cannot_probe_get_unsupported_items_not_zeros() {
    // One sweep can hold at most 65,536 probes to one address (their sequence numbers
    // would repeat): seven 10,000-packet tasks to 127.0.71.200 cannot be probed at all,
    // while the host beside it is. Its items are "not supported" with the reason, as
    // Zabbix reports an item it cannot check, never icmpping 0 with 0% loss.
    let dir = scratch("daemon-unprobed");
    let cfg_path = dir.join("c.toml");
    let mut items: Vec<String> = (24..31)
        .map(|size| format!("{{ key = \"icmpping[,10000,,{size},100]\", interval = \"1h\" }}"))
        .collect();
    items.push("{ key = \"icmppingloss[,10000,,24,100]\", interval = \"1h\" }".into());
    std::fs::write(
        &cfg_path,
        format!(
            "[daemon]\nspool_dir = \"{}\"\n[icmp]\ntimeout = \"300ms\"\n[[templates]]\nname = \"many\"\nitems = [ {} ]\n[[templates]]\nname = \"one\"\nitems = [ {{ key = \"icmpping\", interval = \"10s\" }} ]\n[[hosts]]\nname = \"flooded\"\nip = \"127.0.71.200\"\ntemplates = [\"many\"]\n[[hosts]]\nname = \"normal\"\nip = \"127.0.71.201\"\ntemplates = [\"one\"]\n",
            dir.join("spool").display(),
            items.join(", ")
        ),
    )
    .unwrap();
    let lines = poll_once_json(&cfg_path, &[]);
    let flooded: Vec<_> = lines.iter().filter(|v| v["host"] == "flooded").collect();
    assert_eq!(flooded.len(), 8, "{lines:#?}");
    for v in flooded {
        assert!(
            v.get("value").is_none(),
            "a value for a host never probed: {v}"
        );
        let e = v["error"].as_str().unwrap();
        assert!(
            e.contains("not probed") && e.contains("127.0.71.200"),
            "{e}"
        );
    }
    let normal: Vec<_> = lines.iter().filter(|v| v["host"] == "normal").collect();
    assert_eq!(normal.len(), 1);
    assert_eq!(normal[0]["value"], 1, "{}", normal[0]);
}

#[test]
fn icmppingretry_items_say_whether_a_host_answered_one_of_its_tries() {
    // Zabbix 7.4's icmppingretry from config to value: 1 for a host that answers, 0 for
    // one whose echo requests nft drops (after its 100 + 200 ms of tries), uint.
    let _nft = common::NftTable::silencing("127.0.71.221");
    let dir = scratch("daemon-icmppingretry");
    let cfg_path = dir.join("c.toml");
    std::fs::write(
        &cfg_path,
        format!(
            "[daemon]\nspool_dir = \"{}\"\n[[templates]]\nname = \"r\"\nitems = [ {{ key = \"icmppingretry[,1,2.0,,100]\", interval = \"10s\" }}, {{ key = \"icmppingretry\", interval = \"10s\" }} ]\n[[hosts]]\nname = \"up\"\nip = \"127.0.71.220\"\ntemplates = [\"r\"]\n[[hosts]]\nname = \"down\"\nip = \"127.0.71.221\"\ntemplates = [\"r\"]\n",
            dir.join("spool").display(),
        ),
    )
    .unwrap();
    let lines = poll_once_json(&cfg_path, &[]);
    assert_eq!(lines.len(), 4, "{lines:#?}");
    for v in &lines {
        let want = if v["host"] == "up" { 1 } else { 0 };
        assert_eq!(v["value"], want, "{v}");
        assert_eq!(v["type"], "uint", "{v}");
    }
}

#[test]
fn preprocessing_turns_a_counter_into_a_rate_in_clickhouse() {
    // sysUpTime counts hundredths of a second: CHANGE_PER_SECOND gives ~100 per second,
    // and a MULTIPLIER of 0.01 ~1.0. The first poll gives the change step nothing to
    // compare with: no row, counted as discarded; every later poll one row.
    let dir = scratch("daemon-preprocessing");
    let db = format!("nptest_pre_{}", std::process::id());
    let port = common::free_port();
    let cfg_path = one_agent(
        &dir,
        &db,
        &format!("127.0.0.1:{port}"),
        r#"
  { key = "uptime", oid = "1.3.6.1.2.1.1.3.0", type = "uint", interval = "1s" },
  { key = "uptime.rate", oid = "1.3.6.1.2.1.1.3.0", type = "uint", interval = "1s",
     preprocessing = [{ type = "CHANGE_PER_SECOND" }] },
  { key = "uptime.seconds_per_second", oid = "1.3.6.1.2.1.1.3.0", type = "float", interval = "1s",
     preprocessing = [{ type = "CHANGE_PER_SECOND" }, { type = "MULTIPLIER", parameters = ["0.01"] }] },
  { key = "uptime.seconds", oid = "1.3.6.1.2.1.1.3.0", type = "float", interval = "1s",
     preprocessing = [{ type = "MULTIPLIER", parameters = ["0.01"] }] },
"#,
    );
    // poll-once shows what would be stored: the multiplied value, and the change steps'
    // first values as polled, marked as not stored.
    let lines = poll_once_json(&cfg_path, &[]);
    let by_key = |k: &str| line_of(&lines, k);
    let ticks = by_key("uptime")["value"].as_f64().unwrap();
    let seconds = by_key("uptime.seconds")["value"].as_f64().unwrap();
    assert!(
        (seconds - ticks / 100.0).abs() < 2.0,
        "{ticks} ticks, {seconds} s"
    );
    assert!(by_key("uptime.seconds").get("preprocessing").is_none());
    for k in ["uptime.rate", "uptime.seconds_per_second"] {
        let v = by_key(k);
        assert!(
            v["preprocessing"].as_str().unwrap().contains("two polls"),
            "{v}"
        );
        assert!(v["value"].as_f64().unwrap() >= ticks, "as polled: {v}");
    }
    // Out of its range, discarded by the step's error handler: said so, not blamed on a
    // change step.
    let discarding = one_agent(
        &scratch("daemon-preprocessing-discard"),
        &db,
        "",
        r#"
  { key = "uptime.small", oid = "1.3.6.1.2.1.1.3.0", type = "uint", interval = "1s",
     preprocessing = [{ type = "IN_RANGE", parameters = ["0", "1"], error_handler = "DISCARD_VALUE" }] },
"#,
    );
    let small = line_of(&poll_once_json(&discarding, &[]), "uptime.small");
    assert!(
        small["preprocessing"]
            .as_str()
            .unwrap()
            .contains("its error handler discards"),
        "{small}"
    );
    assert!(
        small["value"].as_f64().unwrap() >= ticks,
        "as polled: {small}"
    );

    let d = Daemon::start(&cfg_path, &[], dir.join("run.log"));
    std::thread::sleep(Duration::from_secs(7));
    let metrics = common::http_get(port, "/metrics")
        .map(|r| r.1)
        .unwrap_or_default();
    assert!(d.stop().success());
    assert!(
        metrics.contains("netpoller_preprocessing_discarded_total 2"),
        "one first value per item with a change step:\n{metrics}"
    );
    let rows = |key: &str| -> Vec<f64> {
        let table = if key.ends_with("second") {
            "history_dbl"
        } else {
            "history_uint"
        };
        ch(&format!(
            "SELECT value FROM {db}.{table} WHERE itemname = '{key}' ORDER BY clock, ns FORMAT TSV"
        ))
        .lines()
        .map(|l| l.parse().unwrap())
        .collect()
    };
    let raw = rows("uptime");
    let rate = rows("uptime.rate");
    let sps = rows("uptime.seconds_per_second");
    assert!(raw.len() >= 4, "raw {raw:?}");
    assert_eq!(rate.len(), raw.len() - 1, "raw {raw:?} rate {rate:?}");
    assert_eq!(sps.len(), raw.len() - 1, "raw {raw:?} per second {sps:?}");
    for r in &rate {
        assert!((80.0..=120.0).contains(r), "ticks per second {rate:?}");
        assert_eq!(r.fract(), 0.0, "a uint item keeps the integer part");
    }
    for s in &sps {
        assert!((0.8..=1.2).contains(s), "seconds per second {sps:?}");
    }
    ch(&format!("DROP DATABASE IF EXISTS {db}"));
}

/// Per item and UTC hour of `db`'s history table `t`, as the trends rows of that hour
/// must add up: `itemid, hour, min, max, count, sum` (text, TSV order by item and hour).
fn history_by_hour(db: &str, t: &str) -> Vec<Vec<String>> {
    tsv(&format!(
        "SELECT itemid, intDiv(toUInt32(clock), 3600) * 3600 h, hostname, itemname, \
         toString(min(value)), toString(max(value)), count(), sum(value) \
         FROM {db}.{t} GROUP BY itemid, h, hostname, itemname ORDER BY itemid, h FORMAT TSV"
    ))
}

/// The same from the trends table `t`, several rows of one hour aggregated as readers do.
fn trends_by_hour(db: &str, t: &str) -> Vec<Vec<String>> {
    tsv(&format!(
        "SELECT itemid, toUInt32(clock) h, hostname, itemname, \
         toString(min(value_min)), toString(max(value_max)), sum(count), sum(value_avg * count) \
         FROM {db}.{t} GROUP BY itemid, h, hostname, itemname ORDER BY itemid, h FORMAT TSV"
    ))
}

fn tsv(query: &str) -> Vec<Vec<String>> {
    ch(query)
        .lines()
        .map(|l| l.split('\t').map(str::to_string).collect())
        .collect()
}

/// Unix hour now.
fn hour_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 3600
}

/// Hostnames of the trends rows of `db` whose hour is `hour` or later.
fn trends_hosts_since(db: &str, hour: u64) -> Vec<String> {
    let mut hosts: Vec<String> = ["trends_dbl", "trends_uint"]
        .iter()
        .flat_map(|t| {
            tsv(&format!(
                "SELECT hostname FROM {db}.{t} WHERE toUInt32(clock) >= {} FORMAT TSV",
                hour * 3600
            ))
        })
        .map(|row| row[0].clone())
        .collect();
    hosts.sort();
    hosts.dedup();
    hosts
}

/// Runs the daemon (config `cfg_path`, spool in `dir/spool`) once more with none of the
/// items the last stop saved open hours of: its start writes them all.
fn write_saved_hours(db: &str, dir: &std::path::Path, cfg_path: &std::path::Path) {
    let silent = daemon_and_clickhouse(db, &dir.join("spool"), "")
        + "[[hosts]]\nname = \"silent\"\nip = \"127.0.20.250\"\nsnmp = { timeout = \"100ms\", retries = 0 }\n\
           items = [{ key = \"sysUpTime\", oid = \"1.3.6.1.2.1.1.3.0\", type = \"uint\", interval = \"1h\" }]\n";
    std::fs::write(cfg_path, silent).unwrap();
    let d = Daemon::start(cfg_path, &[], dir.join("run3.log"));
    d.expect_log(
        "hours the last stop saved are taken back",
        Duration::from_secs(20),
    );
    let log = d.log_text();
    assert!(d.stop().success(), "{log}");
}

#[test]
fn trends_add_up_to_history_per_item_and_hour() {
    // The daemon polls ICMP and SNMP items for a few seconds, a reload drops the first
    // ICMP host (the others' items move in the plan), and the stop saves the hours
    // still open; a second run within the hour continues them (the dropped host's hour
    // is written at its start), and a third without any of these items writes them.
    // For every numeric item and hour, one trends row holds exactly history's min, max
    // and count, and its sum (uint: minus the truncation of the row's average); text
    // items have no trends.
    let dir = scratch("daemon-trends");
    let db = format!("nptest_trends_{}", std::process::id());
    let cfg_path = dir.join("netpoller.toml");
    // Named by address, so that the reload keeps the others' itemids.
    let hosts: Vec<String> = (1..=3)
        .map(|i| {
            format!(
                "\n[[hosts]]\nname = \"ping-{i}\"\nip = \"127.0.76.{i}\"\ntemplates = [\"icmp\"]\n"
            )
        })
        .collect();
    let write = |hosts: &[String]| {
        let cfg = config(&db, &dir.join("spool"), &[], &hosts.concat());
        std::fs::write(&cfg_path, cfg).unwrap();
    };
    write(&hosts);
    let d = Daemon::start(&cfg_path, &[], dir.join("run.log"));
    d.expect_log("started", Duration::from_secs(20));
    std::thread::sleep(Duration::from_secs(5));
    write(&hosts[1..]);
    d.signal(libc::SIGHUP);
    d.expect_log("configuration reloaded", Duration::from_secs(10));
    std::thread::sleep(Duration::from_secs(5));
    let log = d.log_text();
    let hour = hour_now();
    assert!(d.stop().success(), "{log}");
    let open = dir.join("spool").join("trends-open-hours");
    assert!(open.exists(), "{log}");
    // Nothing of the hour the stop saved is written (an hour that ended during the run
    // is).
    assert_eq!(trends_hosts_since(&db, hour), Vec::<String>::new());

    // The second run takes them back: ping-1, gone since the reload, is written now;
    // the others go on.
    let first_hour = hour;
    let d = Daemon::start(&cfg_path, &[], dir.join("run2.log"));
    d.expect_log(
        "hours the last stop saved are taken back",
        Duration::from_secs(20),
    );
    std::thread::sleep(Duration::from_secs(4));
    let log = d.log_text();
    let hour = hour_now();
    assert!(d.stop().success(), "{log}");
    assert!(open.exists(), "{log}");
    let written = trends_hosts_since(&db, hour);
    // Exactly ping-1's, unless an hour ended since the first run's stop (then every
    // saved hour was rightly written at this start, before `hour`).
    if hour == first_hour {
        assert_eq!(written, ["ping-1"]);
    } else {
        assert!(written.iter().all(|h| h == "ping-1"), "{written:?}");
    }

    // A third run polls nothing of these: every saved hour is written at its start.
    write_saved_hours(&db, &dir, &cfg_path);

    let history = history_by_hour(&db, "history_dbl");
    let trends = trends_by_hour(&db, "trends_dbl");
    // 3 hosts × icmppingloss, icmppingsec: 6 float items, in one or two hours each.
    assert!(history.len() >= 6, "{history:?}");
    assert_eq!(trends.len(), history.len(), "{trends:?}\nvs\n{history:?}");
    for (t, h) in trends.iter().zip(&history) {
        assert_eq!(t[..7], h[..7], "itemid, hour, names, min, max, count");
        let (ts, hs): (f64, f64) = (t[7].parse().unwrap(), h[7].parse().unwrap());
        assert!(
            (ts - hs).abs() <= 1e-9 * hs.abs().max(1.0),
            "sum {t:?} vs {h:?}"
        );
    }
    let history = history_by_hour(&db, "history_uint");
    let trends = trends_by_hour(&db, "trends_uint");
    // 3 × icmpping + 3 agents' sysUpTime (`missing` has no values).
    assert!(history.len() >= 6, "{history:?}");
    assert_eq!(trends.len(), history.len(), "{trends:?}\nvs\n{history:?}");
    for (t, h) in trends.iter().zip(&history) {
        assert_eq!(t[..7], h[..7], "itemid, hour, names, min, max, count");
        let (ts, hs): (u64, u64) = (t[7].parse().unwrap(), h[7].parse().unwrap());
        let count: u64 = h[6].parse().unwrap();
        assert!(ts <= hs && hs - ts < count, "sum {t:?} vs {h:?}");
    }
    // The dropped host's items were written, with what it polled before the reload.
    assert!(trends.iter().any(|t| t[2] == "ping-1"), "{trends:?}");
    // One row per item and hour: three runs, no hour split.
    for t in ["trends_dbl", "trends_uint"] {
        let rows = ch(&format!("SELECT count() FROM {db}.{t} FORMAT TSV"));
        let hours = ch(&format!(
            "SELECT count() FROM (SELECT DISTINCT itemid, clock FROM {db}.{t}) FORMAT TSV"
        ));
        assert_eq!(rows, hours, "{t}");
    }
    ch(&format!("DROP DATABASE IF EXISTS {db}"));
}

#[test]
fn a_crash_loses_only_the_trends_values_after_the_last_checkpoint() {
    // A run with checkpoints every second is killed (SIGKILL: no stop); the next start
    // takes the checkpoint back and continues each item's hour, and its stop saves it
    // (the checkpoint gone: no start may take back hours a stop has handled); a third
    // start writes them. Each item's one trends row then counts the first run's values
    // too, all but those of the last second or so before the kill.
    let dir = scratch("daemon-trends-crash");
    let db = format!("nptest_trends_crash_{}", std::process::id());
    let cfg_path = dir.join("netpoller.toml");
    let cfg = config(&db, &dir.join("spool"), &["127.0.76.11", "127.0.76.12"], "")
        .replace("[daemon]\n", "[daemon]\ntrends_checkpoint = \"1s\"\n");
    std::fs::write(&cfg_path, &cfg).unwrap();
    let spool = dir.join("spool");
    let (checkpoint, at_stop) = (
        spool.join("trends-checkpoint"),
        spool.join("trends-open-hours"),
    );
    let hour = hour_now();

    let mut d = Daemon::start(&cfg_path, &[], dir.join("run1.log"));
    d.expect_log("started", Duration::from_secs(20));
    std::thread::sleep(Duration::from_secs(11));
    d.signal(libc::SIGKILL);
    d.child.wait().unwrap();
    let killed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(checkpoint.exists(), "{}", d.log_text());
    assert!(!at_stop.exists());
    // The second run's values are in later seconds than the first's.
    std::thread::sleep(Duration::from_millis(1100));

    let d = Daemon::start(&cfg_path, &[], dir.join("run2.log"));
    d.expect_log(
        "the hours of its last checkpoint are taken back",
        Duration::from_secs(20),
    );
    std::thread::sleep(Duration::from_secs(4));
    let log = d.log_text();
    assert!(d.stop().success(), "{log}");
    assert!(at_stop.exists(), "{log}");
    assert!(!checkpoint.exists(), "a stop leaves no checkpoint\n{log}");

    write_saved_hours(&db, &dir, &cfg_path);
    if hour_now() != hour {
        // An hour ended during the test: its rows were rightly split by the sweep.
        ch(&format!("DROP DATABASE IF EXISTS {db}"));
        return;
    }

    // Per ICMP item: values of the first run, of the second, and the trends count.
    let mut checked = 0;
    for (history, trends) in [
        ("history_uint", "trends_uint"),
        ("history_dbl", "trends_dbl"),
    ] {
        let rows = tsv(&format!(
            "SELECT itemid, countIf(toUInt32(clock) <= {killed}), countIf(toUInt32(clock) > {killed}) \
             FROM {db}.{history} WHERE hostname LIKE 'ping-%' GROUP BY itemid ORDER BY itemid FORMAT TSV"
        ));
        let counts: BTreeMap<String, String> = tsv(&format!(
            "SELECT itemid, count(), sum(count) FROM {db}.{trends} GROUP BY itemid FORMAT TSV"
        ))
        .into_iter()
        .map(|r| {
            assert_eq!(r[1], "1", "one row per item and hour: {r:?}");
            (r[0].clone(), r[2].clone())
        })
        .collect();
        for r in rows {
            let n = |s: &str| s.parse::<i64>().unwrap();
            let (first, second) = (n(&r[1]), n(&r[2]));
            let trend = n(&counts[&r[0]]);
            assert!(first >= 4 && second >= 1, "{r:?}");
            // Without the checkpoint the first run's hour would be lost: trend == second.
            assert!(
                (trend - (first + second)).abs() <= 2,
                "item {}: trends count {trend}, history {first} + {second}",
                r[0]
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 6, "2 hosts × 3 ICMP items");
    ch(&format!("DROP DATABASE IF EXISTS {db}"));
}

#[test]
fn spool_replay_open_hours_writes_the_hours_a_process_left_behind() {
    // The spool folder of a process that will not start again (a process shard gone
    // when fewer processes are started) keeps the trends hours its stop saved, which
    // only a start on that folder takes back. `spool replay` leaves them (its process
    // may start again); with `--open-hours` it writes them: every value history has of
    // each item is in trends, in one row per item and hour.
    let dir = scratch("daemon-trends-left");
    let db = format!("nptest_trends_left_{}", std::process::id());
    let cfg_path = dir.join("netpoller.toml");
    let cfg = config(&db, &dir.join("spool"), &["127.0.76.31", "127.0.76.32"], "");
    std::fs::write(&cfg_path, cfg).unwrap();
    let d = Daemon::start(&cfg_path, &["--shard", "0/1"], dir.join("run.log"));
    d.expect_log("started", Duration::from_secs(20));
    std::thread::sleep(Duration::from_secs(5));
    let log = d.log_text();
    let hour = hour_now();
    assert!(d.stop().success(), "{log}");
    let open = dir.join("spool").join("trends-open-hours");
    assert!(open.exists(), "{log}");

    let replay = |extra: &[&str]| {
        succeeds(
            netpoller()
                .args(["spool", "replay", "-c"])
                .arg(&cfg_path)
                .args(extra),
        )
        .1
    };
    let err = replay(&[]);
    assert!(open.exists(), "{err}");
    assert!(err.contains("--open-hours"), "{err}");
    assert_eq!(trends_hosts_since(&db, hour), Vec::<String>::new());

    let err = replay(&["--open-hours"]);
    assert!(!open.exists(), "{err}");
    assert!(
        err.contains("open trends hour(s) moved into the spool"),
        "{err}"
    );
    for (h, t) in [
        ("history_uint", "trends_uint"),
        ("history_dbl", "trends_dbl"),
    ] {
        let history = history_by_hour(&db, h);
        let trends = trends_by_hour(&db, t);
        assert!(!history.is_empty(), "{h}");
        assert_eq!(trends.len(), history.len(), "{trends:?}\nvs\n{history:?}");
        for (t, h) in trends.iter().zip(&history) {
            assert_eq!(t[..7], h[..7], "itemid, hour, names, min, max, count");
        }
        let rows = ch(&format!("SELECT count() FROM {db}.{t} FORMAT TSV"));
        assert_eq!(
            rows.trim(),
            trends.len().to_string(),
            "{t}: one row per hour"
        );
    }
    // Written once: a second replay finds none.
    let err = replay(&["--open-hours"]);
    assert!(err.contains("no open trends hours saved"), "{err}");
    ch(&format!("DROP DATABASE IF EXISTS {db}"));
}

#[test]
fn text_steps_extract_and_discard_unchanged_keeps_one_row_until_the_heartbeat() {
    // sysDescr every second: as polled (one row per poll), DISCARD_UNCHANGED (the first
    // row only), and with a 3 s heartbeat (a row at least 3 s after the last one stored);
    // the agent's number taken out of it by REGEX (after a TRIM), and stored once; the
    // same number in a uint item, scaled by MULTIPLIER.
    let dir = scratch("daemon-throttle");
    let db = format!("nptest_throttle_{}", std::process::id());
    let cfg_path = one_agent(
        &dir,
        &db,
        "",
        r##"
  { key = "descr", oid = "1.3.6.1.2.1.1.1.0", type = "str", interval = "1s" },
  { key = "descr.unchanged", oid = "1.3.6.1.2.1.1.1.0", type = "str", interval = "1s",
     preprocessing = [{ type = "DISCARD_UNCHANGED" }] },
  { key = "descr.heartbeat", oid = "1.3.6.1.2.1.1.1.0", type = "str", interval = "1s",
     preprocessing = [{ type = "DISCARD_UNCHANGED_HEARTBEAT", parameters = ["3s"] }] },
  { key = "descr.agent", oid = "1.3.6.1.2.1.1.1.0", type = "str", interval = "1s",
     preprocessing = [{ type = "RTRIM", parameters = [" \n"] },
                      { type = "REGEX", parameters = ["agent ([0-9]+)$", "#\\1"] },
                      { type = "DISCARD_UNCHANGED" }] },
  { key = "descr.version", oid = "1.3.6.1.2.1.1.1.0", type = "str", interval = "1s",
     preprocessing = [{ type = "REGEX", parameters = ["Version ([^,]+),", "\\1"],
                        error_handler = "CUSTOM_VALUE", error_handler_params = "none" },
                      { type = "DISCARD_UNCHANGED" }] },
  { key = "descr.agent.x10", oid = "1.3.6.1.2.1.1.1.0", type = "uint", interval = "1s",
     preprocessing = [{ type = "REGEX", parameters = ["agent ([0-9]+)", "\\1"] },
                      { type = "MULTIPLIER", parameters = ["10"] },
                      { type = "DISCARD_UNCHANGED" }] },
  { key = "descr.short", oid = "1.3.6.1.2.1.1.1.0", type = "str", interval = "1s",
     preprocessing = [{ type = "STR_REPLACE", parameters = ["netpoller\\stest\\s", ""] },
                      { type = "DISCARD_UNCHANGED" }] },
  { key = "descr.scaled", oid = "1.3.6.1.2.1.1.1.0", type = "float", interval = "1s",
     preprocessing = [{ type = "MULTIPLIER", parameters = ["2"],
                        error_handler = "CUSTOM_VALUE", error_handler_params = "-1" },
                      { type = "DISCARD_UNCHANGED" }] },
  { key = "absent", oid = "1.3.6.1.2.1.1.99.0", type = "uint", interval = "1s",
     preprocessing = [{ type = "CHECK_NOT_SUPPORTED", error_handler = "CUSTOM_VALUE",
                        error_handler_params = "7" },
                      { type = "DISCARD_UNCHANGED" }] },
"##,
    );
    let d = Daemon::start(&cfg_path, &[], dir.join("run.log"));
    std::thread::sleep(Duration::from_secs(8));
    assert!(d.stop().success());
    let clocks = |key: &str| -> Vec<u32> {
        ch(&format!(
            "SELECT toUInt32(clock) FROM {db}.history_str WHERE itemname = '{key}' ORDER BY clock FORMAT TSV"
        ))
        .lines()
        .map(|l| l.parse().unwrap())
        .collect()
    };
    let raw = clocks("descr");
    let unchanged = clocks("descr.unchanged");
    let heartbeat = clocks("descr.heartbeat");
    assert!(raw.len() >= 6, "as polled: {raw:?}");
    assert_eq!(unchanged.len(), 1, "{unchanged:?} (as polled: {raw:?})");
    assert_eq!(unchanged[0], raw[0], "the first value is stored");
    assert!(
        heartbeat.len() >= 2 && heartbeat.len() < raw.len(),
        "{heartbeat:?} (as polled: {raw:?})"
    );
    for w in heartbeat.windows(2) {
        assert!(
            w[1] - w[0] >= 3,
            "rows less than a heartbeat apart: {heartbeat:?}"
        );
    }
    let agent = ch(&format!(
        "SELECT value FROM {db}.history_str WHERE itemname = 'descr.agent' FORMAT TSV"
    ));
    assert_eq!(
        agent, "#1\n",
        "sysDescr \"netpoller test agent 1\" → \"#1\", once"
    );
    let version = ch(&format!(
        "SELECT value FROM {db}.history_str WHERE itemname = 'descr.version' FORMAT TSV"
    ));
    assert_eq!(
        version, "none\n",
        "no version in sysDescr: the custom value, once"
    );
    let absent = ch(&format!(
        "SELECT value FROM {db}.history_uint WHERE itemname = 'absent' FORMAT TSV"
    ));
    assert_eq!(absent, "7\n", "noSuchObject: the custom value, once");
    // Zabbix's order: the steps on the text answer, the result in the uint item.
    let number = ch(&format!(
        "SELECT value FROM {db}.history_uint WHERE itemname = 'descr.agent.x10' FORMAT TSV"
    ));
    assert_eq!(number, "10\n", "\"agent 1\" → 1 × 10, once");
    let short = ch(&format!(
        "SELECT value FROM {db}.history_str WHERE itemname = 'descr.short' FORMAT TSV"
    ));
    assert_eq!(short, "agent 1\n", "STR_REPLACE with Zabbix's \\s, once");
    let scaled = ch(&format!(
        "SELECT value FROM {db}.history_dbl WHERE itemname = 'descr.scaled' FORMAT TSV"
    ));
    assert_eq!(
        scaled, "-1\n",
        "no number in sysDescr: MULTIPLIER's custom value, once"
    );
    ch(&format!("DROP DATABASE IF EXISTS {db}"));
}

#[test]
fn trends_tables_it_cannot_use_turn_trends_off_not_the_daemon() {
    // A database whose trends_uint is not Glaber's (count as text): before trends, the
    // daemon never looked at it; it must not refuse to start over it now.
    let dir = scratch("daemon-trends-off");
    let db = format!("nptest_trends_off_{}", std::process::id());
    ch(&format!("CREATE DATABASE {db}"));
    ch(&format!(
        "CREATE TABLE {db}.trends_uint (day Date, itemid UInt64, clock DateTime, value_min Int64, \
         value_max Int64, value_avg Int64, count String, hostname String, itemname String) \
         ENGINE = MergeTree() PARTITION BY toYYYYMM(day) ORDER BY (itemid, clock)"
    ));
    let cfg_path = dir.join("netpoller.toml");
    std::fs::write(
        &cfg_path,
        config(&db, &dir.join("spool"), &["127.0.78.1"], ""),
    )
    .unwrap();
    let d = Daemon::start(&cfg_path, &[], dir.join("run.log"));
    d.expect_log("trends are off", Duration::from_secs(20));
    d.expect_log("started", Duration::from_secs(10));
    std::thread::sleep(Duration::from_secs(3));
    let log = d.log_text();
    assert!(d.stop().success(), "{log}");
    assert!(
        log.contains("column `count`"),
        "the warning names the problem:\n{log}"
    );
    assert!(rows_by_host(&db).values().sum::<u64>() > 0, "history flows");
    let trends = ch(&format!("SELECT count() FROM {db}.trends_uint FORMAT TSV"));
    assert_eq!(trends.trim(), "0");
    ch(&format!("DROP DATABASE IF EXISTS {db}"));
}

/// A first start (a database not there yet) logs the tables it created, with the
/// node: the log had said only "ClickHouse schema verified", so that nobody could
/// tell from it who made the database. A start that finds them says only that.
#[test]
fn the_start_log_names_the_tables_it_created() {
    let dir = scratch("daemon-created");
    let db = format!("nptest_created_{}", std::process::id());
    let cfg_path = dir.join("netpoller.toml");
    std::fs::write(&cfg_path, config(&db, &dir.join("spool"), &[], "")).unwrap();
    for first in [true, false] {
        let d = Daemon::start(&cfg_path, &[], dir.join(format!("run-{first}.log")));
        d.expect_log("started", Duration::from_secs(20));
        let log = d.log_text();
        assert!(d.stop().success(), "{log}");
        let line = log
            .lines()
            .find(|l| l.contains("ClickHouse schema verified"))
            .unwrap_or_else(|| panic!("{log}"));
        if first {
            let url = service_env("NETPOLLER_CH_URL");
            let tables = ["history_dbl", "history_uint", "history_str", "history_log"]
                .into_iter()
                .chain(["trends_dbl", "trends_uint"])
                .map(|t| format!("{db}.{t}"))
                .collect::<Vec<_>>()
                .join(", ");
            assert!(
                line.ends_with(&format!(
                    "ClickHouse schema verified; created what was missing created={url}: {tables}"
                )),
                "{line}"
            );
        } else {
            assert!(line.ends_with("ClickHouse schema verified"), "{line}");
        }
    }
    ch(&format!("DROP DATABASE IF EXISTS {db}"));
}

#[test]
fn indices_poll_one_item_per_table_row() {
    // ifDescr and ifIndex of rows 1 (the agent host's loopback) and 999 (no such row):
    // four items from two, each row its own key, value or error.
    let dir = scratch("daemon-indices");
    let db = format!("nptest_indices_{}", std::process::id());
    let cfg_path = one_agent(
        &dir,
        &db,
        "",
        r##"
  { key = "net.if.name[ifDescr.{#SNMPINDEX}]", oid = "1.3.6.1.2.1.2.2.1.2.{#SNMPINDEX}",
    type = "str", interval = "1m", indices = "1,999" },
  { key = "net.if.index[{#SNMPINDEX}]", oid = "1.3.6.1.2.1.2.2.1.1.{#SNMPINDEX}",
    type = "uint", interval = "1m", indices = "1,999" },
"##,
    );
    let lines = poll_once_json(&cfg_path, &[]);
    let by_key = |k: &str| line_of(&lines, k);
    assert_eq!(lines.len(), 4, "{lines:#?}");
    assert_eq!(by_key("net.if.name[ifDescr.1]")["value"], "lo");
    assert_eq!(by_key("net.if.index[1]")["value"], 1);
    for k in ["net.if.name[ifDescr.999]", "net.if.index[999]"] {
        let e = by_key(k)["error"].as_str().unwrap().to_string();
        assert!(e.contains("noSuchInstance"), "{k}: {e}");
    }
    let ids: std::collections::HashSet<u64> = lines
        .iter()
        .map(|v| v["itemid"].as_u64().unwrap())
        .collect();
    assert_eq!(ids.len(), 4, "an itemid per row");
}

/// A TCP proxy to the services' ClickHouse on 127.0.0.1, which the test takes down
/// (connections refused, those open cut) and brings back on the same port: an outage
/// without touching the shared server. Its thread ends once the proxy is dropped.
struct ChProxy {
    port: u16,
    up: std::sync::Arc<std::sync::atomic::AtomicBool>,
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl ChProxy {
    fn start() -> ChProxy {
        use std::net::{TcpListener, TcpStream};
        use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
        use std::sync::Arc;
        let listen = |port: u16| {
            let l = TcpListener::bind(("127.0.0.1", port)).unwrap();
            l.set_nonblocking(true).unwrap();
            l
        };
        let first = listen(0);
        let port = first.local_addr().unwrap().port();
        let (up, done) = (
            Arc::new(AtomicBool::new(true)),
            Arc::new(AtomicBool::new(false)),
        );
        let (up2, done2) = (up.clone(), done.clone());
        std::thread::spawn(move || {
            let mut listener = Some(first);
            let mut open: Vec<TcpStream> = Vec::new();
            while !done2.load(Relaxed) {
                match (&listener, up2.load(Relaxed)) {
                    (Some(_), false) => {
                        listener = None;
                        for s in open.drain(..) {
                            let _ = s.shutdown(std::net::Shutdown::Both);
                        }
                    }
                    (None, true) => listener = Some(listen(port)),
                    (Some(l), true) => {
                        if let Ok((client, _)) = l.accept() {
                            client.set_nonblocking(false).unwrap();
                            let server = TcpStream::connect(common::clickhouse_addr()).unwrap();
                            for (mut from, mut to) in [
                                (client.try_clone().unwrap(), server.try_clone().unwrap()),
                                (server.try_clone().unwrap(), client.try_clone().unwrap()),
                            ] {
                                std::thread::spawn(move || {
                                    let _ = std::io::copy(&mut from, &mut to);
                                    let _ = to.shutdown(std::net::Shutdown::Both);
                                });
                            }
                            open.extend([client, server]);
                            continue;
                        }
                    }
                    (None, false) => {}
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            for s in open {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
        });
        ChProxy { port, up, done }
    }

    fn set_up(&self, up: bool) {
        self.up.store(up, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Drop for ChProxy {
    fn drop(&mut self) {
        self.done.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Reloads while ClickHouse is down (the values spooled) and as it comes back (the
/// spool replayed) lose no row and write none twice: the rows in ClickHouse are the
/// values polled, each (itemid, clock, ns) once, and the spool is empty at the end.
#[test]
fn reloads_during_a_clickhouse_outage_and_its_replay_lose_and_repeat_no_row() {
    let dir = scratch("daemon-outage-reload");
    let db = format!("nptest_outage_{}", std::process::id());
    let proxy = ChProxy::start();
    let cfg_path = dir.join("netpoller.toml");
    let write = |icmp: &[&str]| {
        let text = config(&db, &dir.join("spool"), icmp, "").replace(
            &service_env("NETPOLLER_CH_URL"),
            &format!("http://127.0.0.1:{}", proxy.port),
        );
        std::fs::write(&cfg_path, text).unwrap();
    };
    write(&["127.0.79.1", "127.0.79.2"]);
    let d = Daemon::start(&cfg_path, &[], dir.join("run.log"));
    d.expect_log("started", Duration::from_secs(20));
    std::thread::sleep(Duration::from_secs(2));
    proxy.set_up(false);
    d.expect_log("ClickHouse unavailable, spooling", Duration::from_secs(20));
    // During the outage: a host added.
    write(&["127.0.79.1", "127.0.79.2", "127.0.79.3"]);
    d.signal(libc::SIGHUP);
    let reloads = |n: usize| {
        move |d: &Daemon| {
            let t = std::time::Instant::now();
            while d.log_text().matches("configuration reloaded").count() < n {
                assert!(t.elapsed() < Duration::from_secs(10), "{}", d.log_text());
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    };
    reloads(1)(&d);
    std::thread::sleep(Duration::from_secs(2));
    proxy.set_up(true);
    // As it comes back, the spool replaying: the host removed again.
    d.expect_log("accepts inserts again", Duration::from_secs(20));
    write(&["127.0.79.1", "127.0.79.2"]);
    d.signal(libc::SIGHUP);
    reloads(2)(&d);
    d.expect_log("spool: replayed", Duration::from_secs(20));
    std::thread::sleep(Duration::from_secs(1));
    let log_path = d.log.clone();
    assert!(d.stop().success());
    let log = std::fs::read_to_string(log_path).unwrap();
    let total: u64 = rows_by_host(&db).values().sum();
    assert_eq!(total, values_in_log(&log), "rows vs values polled:\n{log}");
    for t in ["history_dbl", "history_uint", "history_str"] {
        let twice = ch(&format!(
            "SELECT count() FROM (SELECT itemid, clock, ns, count() c FROM {db}.{t} GROUP BY itemid, clock, ns HAVING c > 1) FORMAT TSV"
        ));
        assert_eq!(twice.trim(), "0", "{t}");
    }
    let spooled = common::succeeds(netpoller().args(["spool", "dump", "-c"]).arg(&cfg_path));
    assert_eq!(spooled.0, "", "left in the spool: {}", spooled.1);
    ch(&format!("DROP DATABASE IF EXISTS {db}"));
}

/// SIGUSR1 sends the reject spool to ClickHouse again, once what it refused is fixed:
/// the batches in `rejected/` (here three rows a run before had refused) land, each
/// row once; the log says what moved and `/metrics` counts it; `rejected/` is left
/// without a segment. Without the signal the daemon leaves them there (it never
/// retries refused data by itself), and `spool replay` of them beside it is refused
/// with the daemon's pid to signal.
#[test]
fn sigusr1_tries_the_reject_spool_again() {
    let dir = scratch("daemon-usr1");
    let db = format!("nptest_usr1_{}", std::process::id());
    let rejected = dir.join("spool").join("rejected");
    let rows = (0..3u32).map(|i| {
        let at = (90 + u64::from(i), 1_700_000_000 + i, 7);
        common::str_row(at, "refused-once", "k", format!("v{i}"))
    });
    common::spool_rows(&rejected, rows.collect());
    let segments = |d: &std::path::Path| {
        std::fs::read_dir(d)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().extension() == Some("seg".as_ref()))
            .count()
    };
    assert_eq!(segments(&rejected), 1);
    let port = common::free_port();
    let cfg = one_agent(
        &dir,
        &db,
        &format!("127.0.0.1:{port}"),
        r#"{ key = "sysUpTime", oid = "1.3.6.1.2.1.1.3.0", type = "uint", interval = "10s" }"#,
    );
    let d = Daemon::start(&cfg, &[], dir.join("run.log"));
    d.expect_log("started", Duration::from_secs(20));
    let landed = || {
        ch(&format!(
            "SELECT groupArray(value) FROM (SELECT value FROM {db}.history_str \
             WHERE hostname = 'refused-once' ORDER BY itemid) FORMAT TSV"
        ))
    };
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(landed().trim(), "[]", "retried without being asked");
    // `spool replay` beside it is refused, naming the pid to signal.
    let pid = d.child.id();
    let o = netpoller()
        .args(["spool", "replay", "-c"])
        .arg(&cfg)
        .arg("--dir")
        .arg(&rejected)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("(pid {pid}: lock held on spool.lock)"))
            && err.contains(&format!("when sent SIGUSR1 (`kill -USR1 {pid}`")),
        "{err}"
    );
    d.signal(libc::SIGUSR1);
    let moved = d.expect_log("go back to the spool", Duration::from_secs(10));
    assert!(moved.contains("segments=1 rows=3"), "{moved}");
    let t = std::time::Instant::now();
    while landed().trim() != "['v0','v1','v2']" {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{}\n{}",
            landed(),
            d.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let (_, metrics) = common::http_get(port, "/metrics").expect("/metrics");
    assert!(
        metrics.contains("\nnetpoller_sink_retried_rejected_rows_total 3\n"),
        "{metrics}"
    );
    assert_eq!(segments(&rejected), 0);
    // Again, with nothing left: said so, nothing sent twice.
    d.signal(libc::SIGUSR1);
    d.expect_log("the reject spool is empty", Duration::from_secs(10));
    assert!(d.stop().success());
    assert_eq!(landed().trim(), "['v0','v1','v2']");
}
