//! Discovery (`[[templates.discovery]]`) against net-snmp's snmpd: the rows a host's
//! agent has become items, in `poll-once` and in the daemon, which saves them and
//! starts from them after a restart. Only loopback agents are walked (snmpd on
//! 127.0.20.x; 127.0.20.250 has nothing listening: a host that does not answer).

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{line_of, netpoller, poll_once_json, scratch, service_env, succeeds, Daemon};

const DEAD: &str = "127.0.20.250";

fn agent() -> String {
    service_env("NETPOLLER_SNMPD_ADDRS")
        .split(',')
        .next()
        .unwrap()
        .to_string()
}

const IF_DESCR: &str = "1.3.6.1.2.1.2.2.1.2";
const IF_TYPE: &str = "1.3.6.1.2.1.2.2.1.3";
const IF_OPER_STATUS: &str = "1.3.6.1.2.1.2.2.1.8";

/// The rows of ifDescr on `agent`, as `netpoller snmp walk --indices` reads them
/// (itself checked against snmpbulkwalk in snmp_cli.rs).
fn if_rows(agent: &str, matches: Option<&str>) -> Vec<u32> {
    rows_of(agent, IF_DESCR, matches)
}

/// The rows of `column` on `agent` whose value `matches`.
fn rows_of(agent: &str, column: &str, matches: Option<&str>) -> Vec<u32> {
    let mut cmd = netpoller();
    cmd.args(["snmp", "walk", "--indices", "--json", agent, column]);
    if let Some(m) = matches {
        cmd.args(["--matches", m]);
    }
    let v: serde_json::Value = serde_json::from_str(&succeeds(&mut cmd).0).unwrap();
    expand(v["indices"].as_str().unwrap())
}

/// The rows of an `indices` value (`"1-3,7"`; `""`: none).
fn expand(indices: &str) -> Vec<u32> {
    let mut rows = Vec::new();
    for part in indices.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => rows.extend(a.parse::<u32>().unwrap()..=b.parse().unwrap()),
            None => rows.push(part.parse().unwrap()),
        }
    }
    rows
}

/// Writes `dir/netpoller.toml`: a `[daemon]` section whose files are in `dir`, with
/// `daemon` (more of its keys), then `body`.
fn write_config(dir: &Path, daemon: &str, body: &str) -> std::path::PathBuf {
    let cfg = dir.join("netpoller.toml");
    let d = dir.display();
    let text = format!(
        "[daemon]\ndiscovery_file = \"{d}/discovered.json\"\nspool_dir = \"{d}/spool\"\n{daemon}\n\n{body}"
    );
    std::fs::write(&cfg, text).unwrap();
    cfg
}

/// A config of two hosts (the agent, a silent one) using an interface template whose
/// items stand for discovered rows; `extra` goes into `[daemon]`.
fn config(dir: &Path, agent: &str, extra: &str) -> std::path::PathBuf {
    let body = format!(
        r#"[[templates]]
name = "interfaces"
discovery = [
  {{ name = "if", oid = "1.3.6.1.2.1.2.2.1.2" }},
  {{ name = "if-lo", oid = ".1.3.6.1.2.1.2.2.1.2", matches = "^lo$", interval = "10m" }},
  # Up, and not the software loopback (ifType 24).
  {{ name = "up", oid = "1.3.6.1.2.1.2.2.1.2", filter = [
    {{ oid = "{IF_TYPE}", not_matches = "^24$" }},
    {{ oid = "{IF_OPER_STATUS}", matches = "^1$" }},
  ] }},
]
items = [
  {{ key = "sysName", oid = "1.3.6.1.2.1.1.5.0", type = "str", interval = "10s" }},
  {{ key = "ifDescr[{{#SNMPINDEX}}]", oid = "1.3.6.1.2.1.2.2.1.2.{{#SNMPINDEX}}", type = "str", interval = "10s", discovery = "if" }},
  {{ key = "ifInOctets[{{#SNMPINDEX}}]", oid = "1.3.6.1.2.1.2.2.1.10.{{#SNMPINDEX}}", type = "uint", interval = "10s", discovery = "if-lo" }},
  {{ key = "ifOutOctets[{{#SNMPINDEX}}]", oid = "1.3.6.1.2.1.2.2.1.16.{{#SNMPINDEX}}", type = "uint", interval = "10s", discovery = "up" }},
]

[[hosts]]
name = "agent"
ip = "{agent}"
templates = ["interfaces"]

[[hosts]]
name = "silent"
ip = "{DEAD}"
templates = ["interfaces"]
snmp = {{ timeout = "100ms", retries = 0 }}
"#
    );
    write_config(dir, extra, &body)
}

/// The keys of `host`'s lines.
fn keys_of(lines: &[serde_json::Value], host: &str) -> Vec<String> {
    let mut k: Vec<String> = lines
        .iter()
        .filter(|l| l["host"] == host)
        .map(|l| l["key"].as_str().unwrap().to_string())
        .collect();
    k.sort();
    k
}

/// `poll-once --json` on `cfg`: its lines, and what it said on stderr (discovery).
fn poll_once_said(cfg: &Path) -> (Vec<serde_json::Value>, String) {
    let (out, err) = succeeds(
        netpoller()
            .args(["poll-once", "--json", "--quiet", "-c"])
            .arg(cfg),
    );
    let lines = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (lines, err)
}

#[test]
fn poll_once_polls_the_rows_each_agent_has() {
    let dir = scratch("discovery-poll-once");
    let agent = agent();
    let cfg = config(&dir, &agent, "");
    let rows = if_rows(&agent, None);
    let lo = if_rows(&agent, Some("^lo$"));
    assert!(rows.len() >= 2 && lo.len() == 1, "{rows:?} {lo:?}");
    let loopback = rows_of(&agent, IF_TYPE, Some("^24$"));
    let oper_up = rows_of(&agent, IF_OPER_STATUS, Some("^1$"));
    let up: Vec<u32> = rows
        .iter()
        .copied()
        .filter(|r| !loopback.contains(r) && oper_up.contains(r))
        .collect();
    // The agent's table has rows the filter leaves out, and rows it keeps.
    assert!(
        !up.is_empty() && up.len() < rows.len(),
        "{up:?} of {rows:?}"
    );

    let (said, _) = succeeds(netpoller().args(["check-config", "-c"]).arg(&cfg));
    assert!(
        said.contains("2 hosts (2 with SNMP), 2 items")
            && said.contains("discovery: 3 rule(s) walked (if on 2 host(s), if-lo on 2, up on 2)"),
        "{said}"
    );

    let (lines, err) = poll_once_said(&cfg);
    assert!(
        err.contains(&format!("discovery agent if: {} rows", rows.len())),
        "{err}"
    );
    assert!(err.contains("discovery silent if: walk failed"), "{err}");
    assert!(
        err.contains("no rows known: its items are not polled"),
        "{err}"
    );

    // One ifDescr per row, the filter's one ifInOctets, and the plain item.
    let mut want: Vec<String> = rows.iter().map(|i| format!("ifDescr[{i}]")).collect();
    want.push(format!("ifInOctets[{}]", lo[0]));
    want.extend(up.iter().map(|i| format!("ifOutOctets[{i}]")));
    want.push("sysName".into());
    want.sort();
    assert_eq!(keys_of(&lines, "agent"), want);
    assert_eq!(
        line_of(&lines, &format!("ifDescr[{}]", lo[0]))["value"],
        "lo"
    );
    assert!(line_of(&lines, &format!("ifInOctets[{}]", lo[0]))["value"].is_u64());
    // The silent host: no rows known, only its plain item (which fails).
    assert_eq!(keys_of(&lines, "silent"), ["sysName"]);
    // poll-once does not write the daemon's file.
    assert!(!dir.join("discovered.json").exists());

    // Rows `run` saved for a host that does not answer are polled (and fail as the
    // host does); an agent's saved rows are replaced by what its walk finds. (The
    // rule's fingerprint as `run` writes it: its column and filters.)
    let saved = |fingerprint: &str| {
        let text = format!(
            r#"{{"rules": {{"if": "{fingerprint}"}}, "hosts": {{"silent": {{"if": "7-8"}}, "agent": {{"if": "9000"}}}}, "at": {{"silent": "{DEAD}:161", "agent": "{agent}:161"}}}}"#
        );
        std::fs::write(dir.join("discovered.json"), text).unwrap();
    };
    // Rows found with the rule as it was before, or at another address, are not used.
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, text.replace(DEAD, "127.0.20.251")).unwrap();
    saved(".1.3.6.1.2.1.2.2.1.2 None None");
    assert_eq!(keys_of(&poll_once_json(&cfg, &[]), "silent"), ["sysName"]);
    std::fs::write(
        &cfg,
        std::fs::read_to_string(&cfg)
            .unwrap()
            .replace("127.0.20.251", DEAD),
    )
    .unwrap();
    saved(".1.3.6.1.2.1.2.2.1.2 Some(\\\"^lo$\\\") None");
    assert_eq!(keys_of(&poll_once_json(&cfg, &[]), "silent"), ["sysName"]);
    saved(".1.3.6.1.2.1.2.2.1.2 None None");
    let lines = poll_once_json(&cfg, &[]);
    assert_eq!(
        keys_of(&lines, "silent"),
        ["ifDescr[7]", "ifDescr[8]", "sysName"]
    );
    assert!(line_of(&lines, "ifDescr[7]")["error"].is_string());
    assert!(keys_of(&lines, "agent")
        .iter()
        .all(|k| k != "ifDescr[9000]"));

    // A listed row wins over a discovered one: a host's own item with indices.
    let text = std::fs::read_to_string(&cfg).unwrap().replace(
        "templates = [\"interfaces\"]\n\n[[hosts]]\nname = \"silent\"",
        "templates = [\"interfaces\"]\nitems = [{ key = \"ifDescr[{#SNMPINDEX}]\", indices = \"1\" }]\n\n[[hosts]]\nname = \"silent\"",
    );
    std::fs::write(&cfg, text).unwrap();
    let lines = poll_once_json(&cfg, &[]);
    let descr: Vec<String> = keys_of(&lines, "agent")
        .into_iter()
        .filter(|k| k.starts_with("ifDescr"))
        .collect();
    assert_eq!(descr, ["ifDescr[1]"]);
}

/// A table indexed by more than one arc: udpTable (UDP-MIB), by local address and port.
/// Every snmpd of the tests listens on port 161 of its own address, so the agent's
/// socket is the row `ADDR.161`, found by the port's column and a filter on the address.
#[test]
fn rows_of_more_than_one_arc_are_discovered_and_polled() {
    let dir = scratch("discovery-arcs");
    let agent = agent();
    let body = format!(
        r#"[[templates]]
name = "udp"
discovery = [
  {{ name = "agent-socket", oid = "1.3.6.1.2.1.7.5.1.2", matches = "^161$", filter = [
    {{ oid = "1.3.6.1.2.1.7.5.1.1", matches = "^{}$" }},
  ] }},
]
items = [
  {{ key = "udp.port[{{#SNMPINDEX}}]", oid = "1.3.6.1.2.1.7.5.1.2.{{#SNMPINDEX}}", type = "uint", interval = "10s", discovery = "agent-socket" }},
  {{ key = "udp.addr[{{#SNMPINDEX}}]", oid = "1.3.6.1.2.1.7.5.1.1.{{#SNMPINDEX}}", type = "str", interval = "10s", discovery = "agent-socket" }},
]

[[hosts]]
name = "agent"
ip = "{agent}"
templates = ["udp"]
"#,
        agent.replace('.', "\\\\.")
    );
    let cfg = write_config(&dir, "", &body);
    let (lines, err) = poll_once_said(&cfg);
    let row = format!("{agent}.161");
    assert!(
        err.contains(&format!("discovery agent agent-socket: 1 row {row}")),
        "{err}"
    );
    assert_eq!(
        keys_of(&lines, "agent"),
        [format!("udp.addr[{row}]"), format!("udp.port[{row}]")]
    );
    assert_eq!(line_of(&lines, &format!("udp.port[{row}]"))["value"], 161);
    assert_eq!(line_of(&lines, &format!("udp.addr[{row}]"))["value"], agent);

    // The same rows listed: `snmp walk --indices` prints them as `indices` takes them.
    let (walked, _) = succeeds(netpoller().args([
        "snmp",
        "walk",
        "--indices",
        "--matches",
        "^161$",
        &agent,
        "1.3.6.1.2.1.7.5.1.2",
    ]));
    let indices = walked.split('"').nth(1).unwrap().to_string();
    assert!(indices.split(',').any(|r| r == row), "{walked}");
    let listed = body.replace(
        "templates = [\"udp\"]",
        &format!("templates = [\"udp\"]\nitems = [{{ key = \"udp.port[{{#SNMPINDEX}}]\", indices = \"{indices}\" }}]"),
    );
    let cfg = write_config(&dir, "", &listed);
    let lines = poll_once_json(&cfg, &[]);
    let ports: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| l["key"].as_str().unwrap().starts_with("udp.port["))
        .collect();
    assert_eq!(ports.len(), indices.split(',').count(), "{lines:#?}");
    assert!(ports.iter().all(|l| l["value"] == 161), "{ports:#?}");

    // A rule whose oid is a table's entry, not one of its columns, finds no rows: its
    // walk fails, and says why.
    let entry = body.replace(
        "oid = \"1.3.6.1.2.1.7.5.1.2\", matches",
        "oid = \"1.3.6.1.2.1.2.2.1\", matches",
    );
    let (lines, err) = poll_once_said(&write_config(&dir, "", &entry));
    assert!(
        err.contains("discovery agent agent-socket: walk failed")
            && err.contains(".1.3.6.1.2.1.2.2.1 is not one column of a table"),
        "{err}"
    );
    assert!(keys_of(&lines, "agent").is_empty(), "{lines:#?}");

    // Rows of different lengths in one table: snmpsim's recording of a router's BGP
    // peers (CISCO-BGP4-MIB cbgpPeer2Table, by address type, length and address: 6
    // arcs for an IPv4 peer, 18 for an IPv6 one), those whose last error is a hold
    // time that expired.
    let sim: std::net::SocketAddr = service_env("NETPOLLER_SNMPSIM_ADDR").parse().unwrap();
    let body = format!(
        r#"[[templates]]
name = "bgp"
discovery = [ {{ name = "peers-held", oid = "1.3.6.1.4.1.9.9.187.1.2.5.1.28", matches = "^hold time" }} ]
items = [
  {{ key = "bgp.error[{{#SNMPINDEX}}]", oid = "1.3.6.1.4.1.9.9.187.1.2.5.1.28.{{#SNMPINDEX}}", type = "str", interval = "10s", discovery = "peers-held" }},
]

[[hosts]]
name = "router"
ip = "{}"
templates = ["bgp"]
snmp = {{ community = "bgp", port = {} }}
"#,
        sim.ip(),
        sim.port()
    );
    let cfg = write_config(&dir, "", &body);
    let (lines, err) = poll_once_said(&cfg);
    let v6 = "2.16.42.1.72.96.0.1.0.1.0.0.0.0.0.0.0";
    let rows = format!(
        "1.4.192.168.1.1,1.4.192.168.1.2,1.4.192.168.1.4,1.4.192.168.1.5,1.4.192.168.1.6,{v6}.101,{v6}.102,{v6}.103"
    );
    assert!(
        err.contains(&format!("discovery router peers-held: 8 rows {rows}")),
        "{err}"
    );
    let want: Vec<String> = rows.split(',').map(|r| format!("bgp.error[{r}]")).collect();
    let mut got = keys_of(&lines, "router");
    got.sort_by_key(|k| want.iter().position(|w| w == k));
    assert_eq!(got, want);
    assert!(
        lines.iter().all(|l| l["value"] == "hold time expired"),
        "{lines:#?}"
    );
}

fn wait_for(what: &str, d: &Daemon, timeout: Duration, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while t.elapsed() < timeout {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{what} within {timeout:?}:\n{}", d.log_text());
}

/// The spooled values' keys of `host` (`spool dump`: table, itemid, clock, ns, host,
/// key, value).
fn spooled_keys(cfg: &Path, host: &str) -> Vec<String> {
    let (out, _) = succeeds(netpoller().args(["spool", "dump", "-c"]).arg(cfg));
    let mut keys: Vec<String> = out
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f.get(4) == Some(&host)).then(|| f[5].to_string())
        })
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

#[test]
fn the_daemon_discovers_after_a_reload_saves_the_rows_and_starts_from_them() {
    let dir = scratch("discovery-daemon");
    let agent = agent();
    let rows = if_rows(&agent, None);
    // First without discovery: one plain item per host.
    let port = common::free_port();
    let cfg = write_config(
        &dir,
        &format!("metrics_listen = \"127.0.0.1:{port}\""),
        &format!(
            r#"[[hosts]]
name = "agent"
ip = "{agent}"
items = [{{ key = "sysName", oid = "1.3.6.1.2.1.1.5.0", type = "str", interval = "10s" }}]
"#
        ),
    );
    let d = Daemon::start(&cfg, &[], dir.join("run1.log"));
    d.expect_log("netpoller 0.1.0 started", Duration::from_secs(10));

    // A reload brings the template with discovery: the new hosts' tables are walked.
    config(
        &dir,
        &agent,
        &format!("metrics_listen = \"127.0.0.1:{port}\""),
    );
    d.signal(libc::SIGHUP);
    let file = dir.join("discovered.json");
    wait_for("no rows saved", &d, Duration::from_secs(20), || {
        std::fs::read_to_string(&file).is_ok_and(|t| t.contains("\"if-lo\""))
    });
    d.expect_log(
        "discovery: plan rebuilt for the rows found",
        Duration::from_secs(20),
    );
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let lo = if_rows(&agent, Some("^lo$"));
    assert_eq!(
        saved["hosts"]["agent"]["if-lo"],
        lo[0].to_string(),
        "{saved}"
    );
    assert!(saved["hosts"].get("silent").is_none(), "{saved}");
    let log = d.log_text();
    assert!(
        log.contains("discovery: walk failed; the host keeps the rows it had host=silent"),
        "{log}"
    );
    // Metrics: 3 rules on each of 2 hosts, the silent host's 3 failing.
    let scrape = || common::http_get(port, "/metrics").map_or(String::new(), |(_, m)| m);
    wait_for("no discovery metrics", &d, Duration::from_secs(10), || {
        let m = scrape();
        m.contains("\nnetpoller_discovery_rules 6\n")
            && m.contains("\nnetpoller_discovery_failing 3\n")
    });
    let m = scrape();
    assert!(
        m.contains("netpoller_discovery_walks_total{result=\"failed\"} "),
        "{m}"
    );
    assert!(!m.contains("netpoller_discovery_replans_total 0\n"), "{m}");
    // The discovered items are polled: an iteration with every row's value.
    let up = rows_of(&agent, IF_OPER_STATUS, Some("^1$"))
        .into_iter()
        .filter(|r| *r != lo[0] && rows.contains(r))
        .count();
    let n = rows.len() + 2 + up;
    d.expect_log(
        &format!("hosts=1 items={n} values={n} errors=0"),
        Duration::from_secs(25),
    );
    assert!(d.stop().success());
    let mut want: Vec<String> = rows.iter().map(|i| format!("ifDescr[{i}]")).collect();
    want.extend([format!("ifInOctets[{}]", lo[0]), "sysName".into()]);
    let saved_up = saved["hosts"]["agent"]["up"].as_str().unwrap();
    want.extend(expand(saved_up).iter().map(|i| format!("ifOutOctets[{i}]")));
    want.sort();
    assert_eq!(spooled_keys(&cfg, "agent"), want);

    // A restart plans the saved rows at once (their walks are spread over the
    // interval): 2 + rows items for the agent, 1 for the silent host.
    let d = Daemon::start(&cfg, &[], dir.join("run2.log"));
    d.expect_log(
        &format!("started hosts=2 items={}", n + 1),
        Duration::from_secs(10),
    );
    // A reload that changes a rule walks it again at once: every row now. It also
    // moves `discovery_file`, which applies at the next start, as the reload warns:
    // the rows found meanwhile are saved where the running daemon read them.
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace(r#"matches = "^lo$""#, r#"matches = ".""#)
        .replace("/discovered.json", "/moved.json");
    std::fs::write(&cfg, text).unwrap();
    d.signal(libc::SIGHUP);
    d.expect_log("daemon.discovery_file", Duration::from_secs(10));
    let all = format!(
        r#""if-lo": "{}""#,
        saved["hosts"]["agent"]["if"].as_str().unwrap()
    );
    wait_for(
        "the changed rule's rows not saved",
        &d,
        Duration::from_secs(20),
        || std::fs::read_to_string(&file).is_ok_and(|t| t.contains(&all)),
    );
    assert!(d.stop().success());
    assert!(!dir.join("moved.json").exists());

    // A restart with a rule changed meanwhile does not take its saved rows (the rest
    // it does): 2 x rows + 1 items for the agent, 1 for the silent host; then walks it.
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace(r#"not_matches = "^24$""#, r#"not_matches = "^999$""#)
        .replace("/moved.json", "/discovered.json");
    std::fs::write(&cfg, text).unwrap();
    let d = Daemon::start(&cfg, &[], dir.join("run3.log"));
    d.expect_log(
        &format!("started hosts=2 items={}", 2 * rows.len() + 2),
        Duration::from_secs(10),
    );
    d.expect_log(
        "discovery: plan rebuilt for the rows found",
        Duration::from_secs(20),
    );
    assert!(d.stop().success());
}

/// The template `t`: one discovery rule over ifDescr, and an item per row it finds
/// (which stands for the rows found).
fn if_template() -> String {
    format!(
        r#"[[templates]]
name = "t"
discovery = [{{ name = "if", oid = "{IF_DESCR}" }}]
items = [{{ key = "d[{{#SNMPINDEX}}]", oid = "{IF_DESCR}.{{#SNMPINDEX}}", type = "str", interval = "1m", discovery = "if" }}]
"#
    )
}

/// A config of one host `sw` at `ip` with `snmp = { ... }` and the template `t`
/// ([`if_template`]).
fn one_host(dir: &Path, ip: &str, snmp: &str) -> std::path::PathBuf {
    let body = format!(
        r#"{}[[hosts]]
name = "sw"
ip = "{ip}"
templates = ["t"]
snmp = {{ {snmp} }}
"#,
        if_template()
    );
    write_config(dir, "metrics_listen = \"\"", &body)
}

/// A walk that waits for an agent that never answers does not hold the daemon's stop
/// (its timeouts would take 30 s): it sees the stop within a fraction of a second.
#[test]
fn a_walk_in_flight_does_not_hold_the_stop() {
    let dir = scratch("discovery-stop");
    // An "agent" that takes datagrams and never answers (no port unreachable either).
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let cfg = one_host(
        &dir,
        "127.0.0.1",
        &format!("port = {port}, timeout = \"10s\", retries = 2"),
    );
    let d = Daemon::start(&cfg, &[], dir.join("run.log"));
    d.expect_log("netpoller 0.1.0 started", Duration::from_secs(10));
    // The walk's first request has arrived: it is waiting for the answer.
    silent
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut buf = [0u8; 1500];
    silent.recv(&mut buf).expect("the walk's request");
    let t = Instant::now();
    assert!(d.stop().success());
    let took = t.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "stopped after {took:?}: the walk held it"
    );
}

/// A reload that gives a host other credentials walks it at once (not at its retry,
/// minutes later).
#[test]
fn new_credentials_are_walked_at_once() {
    let dir = scratch("discovery-credentials");
    let agent = agent();
    let write = |community: &str| {
        let snmp = format!("community = \"{community}\", timeout = \"200ms\", retries = 0");
        one_host(&dir, &agent, &snmp)
    };
    let cfg = write("not-the-community");
    let d = Daemon::start(&cfg, &[], dir.join("run.log"));
    d.expect_log("discovery: walk failed", Duration::from_secs(10));
    write("public");
    d.signal(libc::SIGHUP);
    d.expect_log(
        "discovery: plan rebuilt for the rows found",
        Duration::from_secs(10),
    );
    assert!(d.stop().success());
}

/// A reload that moves a host to another address plans none of the rows found at the
/// old one (they are another device's), and saves none for it.
#[test]
fn a_moved_host_loses_its_rows_at_the_reload() {
    let dir = scratch("discovery-moved");
    let agent = agent();
    let rows = if_rows(&agent, None);
    let snmp = "timeout = \"200ms\", retries = 0";
    let cfg = one_host(&dir, &agent, snmp);
    let d = Daemon::start(&cfg, &[], dir.join("run.log"));
    d.expect_log(
        &format!(
            "discovery: plan rebuilt for the rows found hosts=1 items={}",
            rows.len()
        ),
        Duration::from_secs(10),
    );
    one_host(&dir, DEAD, snmp);
    d.signal(libc::SIGHUP);
    d.expect_log(
        "SIGHUP: configuration reloaded hosts=1 items=0",
        Duration::from_secs(10),
    );
    assert!(d.stop().success());
}

/// A reload that removes a host while its walk is in flight: the walk's rows, which
/// come after the reload, are not taken (the task's job is gone), so the re-plan that
/// follows (the other host's rows, waiting for the walks in flight to end) plans and
/// saves none of them. The walk is held by a fake agent that answers its request only
/// once the reload has been taken.
#[test]
fn a_host_removed_while_its_walk_is_in_flight_gets_none_of_its_rows() {
    let dir = scratch("discovery-removed-in-walk");
    let agent = agent();
    let kept = if_rows(&agent, None);
    let held = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    held.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let port = held.local_addr().unwrap().port();
    let write = |with_gone: bool| {
        let gone = format!(
            "[[hosts]]\nname = \"gone\"\nip = \"127.0.0.1\"\ntemplates = [\"t\"]\n\
             snmp = {{ port = {port}, timeout = \"10s\", retries = 0 }}\n"
        );
        let body = format!(
            r#"{}[[hosts]]
name = "kept"
ip = "{agent}"
templates = ["t"]
{}"#,
            if_template(),
            if with_gone { gone.as_str() } else { "" }
        );
        write_config(&dir, "metrics_listen = \"\"", &body)
    };
    let cfg = write(true);
    let d = Daemon::start(&cfg, &[], dir.join("run.log"));
    // The walk of `gone` is in flight: its first request is here, unanswered.
    let mut buf = [0u8; 1500];
    let (n, from) = held.recv_from(&mut buf).expect("the walk's request");
    write(false);
    d.signal(libc::SIGHUP);
    d.expect_log(
        "SIGHUP: configuration reloaded hosts=1 ",
        Duration::from_secs(10),
    );
    // (`kept`'s rows wait for the walk in flight: no re-plan yet.)
    assert!(!d.log_text().contains("plan rebuilt"), "{}", d.log_text());
    // The answer: two rows, then the next column (the walk ends).
    let request = snmp::Message::decode(&buf[..n]).unwrap();
    let oid = |o: String| o.parse::<snmp::Oid>().unwrap();
    let answer = common::response(
        &request,
        &[
            (
                oid(format!("{IF_DESCR}.1")),
                snmp::VarValue::OctetString(b"a".to_vec()),
            ),
            (
                oid(format!("{IF_DESCR}.2")),
                snmp::VarValue::OctetString(b"b".to_vec()),
            ),
            (oid(format!("{IF_TYPE}.1")), snmp::VarValue::Integer(6)),
        ],
    );
    held.send_to(&answer, from).unwrap();
    // The re-plan comes once no walk is in flight, after the walk's end was read.
    d.expect_log(
        &format!(
            "discovery: plan rebuilt for the rows found hosts=1 items={}",
            kept.len()
        ),
        Duration::from_secs(20),
    );
    let file = dir.join("discovered.json");
    wait_for("no rows saved", &d, Duration::from_secs(10), || {
        std::fs::read_to_string(&file).is_ok_and(|t| t.contains("\"kept\""))
    });
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert!(saved["hosts"].get("gone").is_none(), "{saved}");
    assert!(saved["at"].get("gone").is_none(), "{saved}");
    let log = d.log_text();
    assert!(!log.contains("host=gone"), "{log}");
    assert!(d.stop().success());
}
