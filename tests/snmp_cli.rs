//! `netpoller snmp get|walk` against the real agents (scripts/services.sh): output equal
//! to net-snmp's `snmpget -On -Oe` / `snmpbulkwalk -On -Oe`, JSON lines, and the
//! community never shown.

mod common;

use std::net::SocketAddr;
use std::process::{Command, Output};

use common::{netpoller, service_env, V3_OPTIONS};

/// The first snmpd agent's address and community.
fn first_agent() -> (String, String) {
    let addr = snmpd_agent(0);
    let community = service_env("NETPOLLER_SNMPD_COMMUNITIES")
        .split(',')
        .next()
        .unwrap()
        .to_string();
    (addr, community)
}

/// The address (`IP:PORT`, loopback) of snmpd agent `n` (from 0).
fn snmpd_agent(n: usize) -> String {
    let addr = service_env("NETPOLLER_SNMPD_ADDRS")
        .split(',')
        .nth(n)
        .unwrap()
        .to_string();
    let port = service_env("NETPOLLER_SNMPD_PORT");
    let a: SocketAddr = format!("{addr}:{port}").parse().unwrap();
    assert!(a.ip().is_loopback());
    a.to_string()
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn net_snmp(tool: &str, args: &[&str]) -> String {
    let o = Command::new(tool)
        .args(["-m", "", "-On", "-Oe"])
        .args(args)
        .output()
        .expect("net-snmp tools installed");
    assert!(
        o.status.success(),
        "{tool}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    text(&o)
}

const STATIC_OIDS: [&str; 9] = [
    ".1.3.6.1.2.1.1.1.0",
    ".1.3.6.1.2.1.1.2.0",
    ".1.3.6.1.2.1.1.5.0",
    ".1.3.6.1.2.1.2.2.1.6.1",
    ".1.3.6.1.4.1.8072.9999.9999.1.0",
    ".1.3.6.1.4.1.8072.9999.9999.2.0",
    ".1.3.6.1.4.1.8072.9999.9999.3.0",
    ".1.3.6.1.4.1.8072.9999.9999.5.0",
    ".1.3.6.1.4.1.8072.9999.9999.7.0",
];

#[test]
fn get_prints_what_snmpget_prints() {
    let (addr, community) = first_agent();
    for version in ["2c", "1"] {
        let oids: Vec<&str> = if version == "1" {
            STATIC_OIDS[..8].to_vec()
        } else {
            STATIC_OIDS.to_vec()
        };
        let o = netpoller()
            .args(["snmp", "get", "-v", version, "-c", &community, &addr])
            .args(&oids)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let mut args = vec!["-v", version, "-c", &community, &addr];
        args.extend(&oids);
        assert_eq!(text(&o), net_snmp("snmpget", &args), "v{version}");
    }
}

/// Values of a recorded device as net-snmp prints them: octets with a NUL in hex (a
/// lone `00`, `60 00`), an Opaque float as its number (`laLoadFloat`).
#[test]
fn recorded_nul_octets_and_opaque_floats_print_as_snmpget_prints_them() {
    let sim = service_env("NETPOLLER_SNMPSIM_ADDR");
    let oids = [
        ".1.3.6.1.4.1.9.5.1.19.1.1.4.3.1",
        ".1.3.6.1.2.1.16.19.16.0",
        ".1.3.6.1.2.1.1.5.0",
    ];
    let o = netpoller()
        .args(["snmp", "get", "-c", "cisco_16_switch", &sim])
        .args(oids)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut args = vec!["-v", "2c", "-c", "cisco_16_switch", &sim];
    args.extend(oids);
    let theirs = net_snmp("snmpget", &args);
    assert!(theirs.contains("Hex-STRING: 60 00"), "{theirs}");
    assert_eq!(text(&o), theirs);
    // The agent's load, a float that moves: the same shape, and the same number in
    // JSON as in text.
    let (addr, community) = first_agent();
    let load = ".1.3.6.1.4.1.2021.10.1.6.1";
    let ours = |json: bool| {
        let o = netpoller()
            .args(["snmp", "get", "-c", &community, &addr, load])
            .args(json.then_some("--json"))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        text(&o)
    };
    let line = ours(false);
    let theirs = net_snmp("snmpget", &["-v", "2c", "-c", &community, &addr, load]);
    let shape = |s: &str| s.split("Float: ").next().unwrap_or_default().to_string();
    assert!(
        line.starts_with(&format!("{load} = Opaque: Float: ")),
        "{line}"
    );
    assert_eq!(shape(&line), shape(&theirs));
    let json: serde_json::Value = serde_json::from_str(ours(true).trim()).unwrap();
    assert!(json["value"].as_f64().is_some_and(|v| v >= 0.0), "{json}");
}

/// A walk of an OID with nothing under it GETs the OID itself, as snmpwalk does: a
/// scalar's instance prints its value, an OID the agent lacks its "No Such Object".
#[test]
fn a_walk_of_a_scalar_instance_prints_it_as_snmpwalk_does() {
    let (addr, community) = first_agent();
    for (oid, same_text) in [(".1.3.6.1.2.1.1.3.0", false), (".1.3.6.1.2.1.1.99.0", true)] {
        let o = netpoller()
            .args(["snmp", "walk", "-c", &community, &addr, oid])
            .output()
            .unwrap();
        let theirs = net_snmp("snmpwalk", &["-v", "2c", "-c", &community, &addr, oid]);
        let ours = text(&o);
        if same_text {
            assert!(theirs.contains("No Such Object"), "{theirs}");
            assert_eq!(ours, theirs);
        } else {
            // Timeticks move between the two: the OID and the type.
            let head = |s: &str| s.split(": (").next().unwrap_or_default().to_string();
            assert!(ours.starts_with(&format!("{oid} = Timeticks: (")), "{ours}");
            assert_eq!(head(&ours), head(&theirs));
        }
    }
}

/// A walk that finds nothing under its OID GETs the OID itself, and only that: the
/// agent has just answered, so no closed-port probe goes beside the GET (it did, one
/// request more to the agent).
#[test]
fn an_empty_walk_gets_its_oid_without_a_probe() {
    use snmp::PduType::{GetBulkRequest, GetRequest};
    let root: snmp::Oid = ".1.3.6.1.4.1.99999.8.0".parse().unwrap();
    let past: snmp::Oid = ".1.3.6.1.4.1.99999.9.0".parse().unwrap();
    // The test's own word to the agent, after the command: every request before it
    // has been seen once it is (one socket's datagrams come in order).
    let sentinel: snmp::Oid = ".1.3.6.1.4.1.99999.10.0".parse().unwrap();
    let (seen, requests) = std::sync::mpsc::channel();
    let agent = common::raw_agent("127.0.202.1:0".parse().unwrap(), None, move |m, _| {
        let Some(asked) = m.varbinds().next().map(|vb| vb.oid.to_owned()) else {
            return Vec::new();
        };
        let _ = seen.send((m.pdu_type, asked.clone()));
        let value = match m.pdu_type {
            // Nothing under the root: the walk's answer is past it.
            GetBulkRequest => (past.clone(), snmp::VarValue::Integer(1)),
            // Answered late, so that a probe sent beside the GET is on its way (one
            // that was not would not fail this test).
            GetRequest => {
                std::thread::sleep(std::time::Duration::from_millis(300));
                (asked, snmp::VarValue::Integer(7))
            }
            _ => return Vec::new(),
        };
        vec![common::response(m, &[value])]
    })
    .to_string();
    let o = netpoller()
        .args(["snmp", "walk", "-r", "0", "-c", "public", &agent])
        .arg(root.to_string())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert_eq!(text(&o), format!("{root} = INTEGER: 7\n"));
    let sock = std::net::UdpSocket::bind("127.0.202.1:0").unwrap();
    let mut req = Vec::new();
    let oids = std::iter::once(&sentinel);
    snmp::encode_request(
        &mut req,
        snmp::Version::V2c,
        b"public",
        1,
        snmp::RequestKind::Get,
        oids,
    );
    sock.send_to(&req, &agent).unwrap();
    let mut asked = Vec::new();
    loop {
        let (pdu, oid) = requests
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the agent sees the test's request");
        if oid == sentinel {
            break;
        }
        asked.push((pdu, oid));
    }
    assert_eq!(asked, [(GetBulkRequest, root.clone()), (GetRequest, root)]);
}

/// SNMPv1 has no "No Such Object": a walk of an empty subtree prints nothing and exits
/// 0, as snmpwalk -v1 does (its GET's noSuchName means nothing there). A walk that
/// times out exits 1, as snmpwalk does, and says why, in --json as an object.
#[test]
fn walks_exit_as_snmpwalk_does() {
    let (addr, community) = first_agent();
    let oid = ".1.3.6.1.2.1.1.99.0";
    let (mut ours, mut theirs) = (netpoller(), Command::new("snmpwalk"));
    ours.args(["snmp", "walk"]);
    theirs.args(["-m", "", "-On"]);
    for cmd in [&mut ours, &mut theirs] {
        let o = cmd
            .args(["-v", "1", "-c", &community, &addr, oid])
            .output()
            .unwrap();
        let nothing = (Some(0), String::new());
        assert_eq!((o.status.code(), text(&o)), nothing, "{o:?}");
    }
    // A silent address (loopback, no agent there).
    for json in [false, true] {
        let mut cmd = netpoller();
        cmd.args(["snmp", "walk", "-t", "100ms", "-r", "0", "-c", "public"]);
        if json {
            cmd.arg("--json");
        }
        let o = cmd
            .args(["127.0.99.1:16199", ".1.3.6.1.2.1.1"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{o:?}");
        if json {
            let j: serde_json::Value = serde_json::from_str(text(&o).trim()).unwrap();
            assert_eq!(j["oid"], ".1.3.6.1.2.1.1");
            assert!(j["error"].as_str().is_some_and(|e| !e.is_empty()), "{j}");
        } else {
            assert!(!String::from_utf8_lossy(&o.stderr).is_empty());
        }
    }
}

/// `get` and `walk` name an OID alike, with net-snmp `-On`'s leading dot as every row
/// is printed, however it was typed: a walk's error (here: no agent at the address)
/// gave the OID as typed, `1.3.6.1.2.1.1.3.0` beside `get`'s `.1.3.6.1.2.1.1.3.0`.
#[test]
fn get_and_walk_name_the_oid_of_an_error_alike() {
    // Loopback, no agent there: the port is unreachable.
    let silent = "127.0.59.4:16199";
    let oid = "1.3.6.1.2.1.1.3.0";
    for cmd in ["get", "walk"] {
        let run = |json: bool| {
            let mut c = netpoller();
            c.args(["snmp", cmd, "-t", "100ms", "-r", "0", "-c", "public"]);
            if json {
                c.arg("--json");
            }
            let o = c.args([silent, oid]).output().unwrap();
            assert_eq!(o.status.code(), Some(1), "{cmd} {o:?}");
            o
        };
        let j: serde_json::Value = serde_json::from_str(text(&run(true)).trim()).unwrap();
        assert_eq!(j["oid"], format!(".{oid}"), "{cmd}: {j}");
        let err = String::from_utf8_lossy(&run(false).stderr).into_owned();
        assert!(err.starts_with(&format!(".{oid}: ")), "{cmd}: {err}");
    }
}

/// An agent that loops within an answer (each GETBULK at `root.N` gets `root.N+1`,
/// `root.N+2`, `root.N+1`): the rows before the repeated OID are printed, then the walk
/// fails, exit 1, as snmpwalk's "OID not increasing". (snmpbulkwalk checks only each
/// answer's last OID: it prints the repeats and walks on, forever, with this agent.)
#[test]
fn rows_before_a_looping_oid_are_printed_then_the_walk_fails() {
    let root = ".1.3.6.1.4.1.99999.7";
    let base: snmp::Oid = root.parse().unwrap();
    let port = common::fake_agent(move |m| {
        let asked = m.varbinds().next()?.oid.to_owned();
        let n = asked.arcs().nth(base.arcs().count()).unwrap_or(0);
        let row = |i: u32| {
            let oid = format!("{base}.{i}").parse().unwrap();
            (oid, snmp::VarValue::Integer(i as i64))
        };
        Some(vec![row(n + 1), row(n + 2), row(n + 1)])
    });
    let addr = format!("127.0.0.1:{port}");
    let o = netpoller()
        .args([
            "snmp", "walk", "-t", "1s", "-r", "0", "-c", "public", &addr, root,
        ])
        .output()
        .unwrap();
    assert_eq!(
        text(&o),
        format!("{root}.1 = INTEGER: 1\n{root}.2 = INTEGER: 2\n"),
        "{o:?}"
    );
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("does not follow"), "{err}");
    // In --json the rows, then the error as an object of its own.
    let o = netpoller()
        .args([
            "snmp", "walk", "--json", "-t", "1s", "-r", "0", "-c", "public",
        ])
        .args([&addr, root])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let lines: Vec<serde_json::Value> = text(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(lines[1]["oid"], format!("{root}.2"));
    assert!(lines[2]["error"]
        .as_str()
        .is_some_and(|e| e.contains("does not follow")));
    // No polled item fails so: no class of one.
    assert_eq!(lines[2].get("reason"), None, "{}", lines[2]);
}

/// `snmp walk --indices` exits as a walk does: 1 when the walk fails (a timeout) and
/// when it finds no row, which no `indices` value can say; in --json the error as an
/// object, as a walk's.
#[test]
fn walk_indices_exits_1_when_the_walk_fails_or_finds_no_row() {
    let (addr, community) = first_agent();
    let if_descr = ".1.3.6.1.2.1.2.2.1.2";
    let silent = format!("127.0.0.1:{}", common::fake_agent(|_| None));
    let silent = ["-t", "100ms", "-r", "0", "-c", "public", &silent, if_descr];
    let no_rows = ["-c", &community, &addr, ".1.3.6.1.4.1.99999.1.1"];
    let none_match = [
        "--matches",
        "^no such interface$",
        "-c",
        &community,
        &addr,
        if_descr,
    ];
    for (args, error) in [
        (&silent[..], "Timeout while connecting"),
        (&no_rows[..], "no rows"),
        (&none_match[..], "no rows whose value matches"),
    ] {
        for json in [false, true] {
            let mut cmd = netpoller();
            cmd.args(["snmp", "walk", "--indices"]).args(args);
            if json {
                cmd.arg("--json");
            }
            let o = cmd.output().unwrap();
            assert_eq!(o.status.code(), Some(1), "{args:?} {o:?}");
            if json {
                let j: serde_json::Value = serde_json::from_str(text(&o).trim()).unwrap();
                assert!(j["oid"].is_string(), "{j}");
                assert!(
                    j["error"].as_str().is_some_and(|e| e.contains(error)),
                    "{j}"
                );
            } else {
                assert_eq!(text(&o), "");
                let err = String::from_utf8_lossy(&o.stderr);
                assert!(err.contains(error), "{err}");
            }
        }
    }
}

/// A top arc with nothing under it (snmpd has nothing under 0 or 2) is an empty walk:
/// nothing printed, exit 0, with either version. It has no OID to GET then (an OID has
/// two arcs at least); net-snmp's snmpwalk reads `2` as `.0.2` and prints that GET's
/// "No Such Object".
#[test]
fn a_walk_of_an_empty_top_arc_prints_nothing() {
    let (addr, community) = first_agent();
    for root in ["0", "2", ".2"] {
        for version in ["1", "2c"] {
            let o = netpoller()
                .args(["snmp", "walk", "-v", version, "-c", &community, &addr, root])
                .output()
                .unwrap();
            assert_eq!(
                (o.status.code(), text(&o)),
                (Some(0), String::new()),
                "{o:?}"
            );
            assert!(o.stderr.is_empty(), "{o:?}");
        }
    }
}

/// `snmp get` and `snmp walk` of `oid` with `args` (options and the target): each
/// exits 1 saying `error` once, after the OID, on stderr with nothing on stdout, and
/// in --json as `{"oid","error","reason"}` on stdout, `reason` a polled item's class
/// (`poll-once --json`'s; none for a failure no item has).
fn get_and_walk_fail_saying(args: &[&str], oid: &str, error: &str, reason: Option<&str>) {
    for cmd in ["get", "walk"] {
        let run = |json: bool| {
            let o = netpoller()
                .args(["snmp", cmd])
                .args(args)
                .args(json.then_some("--json"))
                .arg(oid)
                .output()
                .unwrap();
            assert_eq!(o.status.code(), Some(1), "{cmd} {args:?}: {o:?}");
            o
        };
        let o = run(false);
        let said = (String::from_utf8_lossy(&o.stderr), text(&o));
        assert_eq!(said.0, format!("{oid}: {error}\n"), "{cmd} {args:?}");
        assert_eq!(said.1, "", "{cmd} {args:?}");
        let j: serde_json::Value = serde_json::from_str(text(&run(true)).trim()).unwrap();
        let mut want = serde_json::json!({ "oid": oid, "error": error });
        if let Some(r) = reason {
            want["reason"] = r.into();
        }
        assert_eq!(j, want, "{cmd} {args:?}");
    }
}

/// An agent that answers nothing: `get` and `walk` say the same timeout, with the
/// attempts made, once (the walk said `timeout: no response from ADDR`, the get `no
/// SNMP response from ADDR after 2 attempt(s)`; then both `timeout: Timeout while
/// connecting`, the item's class before its text).
#[test]
fn get_and_walk_time_out_alike() {
    let silent = common::raw_agent("127.0.188.9:0".parse().unwrap(), None, |_, _| Vec::new());
    let silent = silent.to_string();
    let args = ["-t", "100ms", "-r", "1", "-c", "public", &silent];
    let error =
        format!("Timeout while connecting to \"{silent}\". No SNMP response after 2 attempt(s)");
    get_and_walk_fail_saying(&args, ".1.3.6.1.2.1.1.3.0", &error, Some("timeout"));
}

/// Nothing listens at the port: `get` says so at once, as `walk` does, in v2c and v3
/// alike, exit 1; it timed out, its requests going out on a socket that never hears
/// of the ICMP port unreachable.
#[test]
fn get_says_a_closed_port_is_unreachable_as_walk_does() {
    // In this test's own range; nothing listens there.
    let closed = "127.0.195.1:16161";
    let error = format!("{closed}: port unreachable (nothing listens there)");
    // A timeout long enough that a get that waits for it is not mistaken for one told
    // at once (its text would say Timeout).
    let v2c = ["-t", "5s", "-r", "0", closed];
    let v3 = ["-v", "3", "-u", "np-sha", "-a", "SHA", "-A", "np-auth-pass"];
    for args in [v2c.to_vec(), [&v2c[..], &v3[..]].concat()] {
        get_and_walk_fail_saying(&args, ".1.3.6.1.2.1.1.3.0", &error, None);
    }
}

/// An agent's refusal reads the same from `get` and `walk`, in the words of the
/// polled item's error (Zabbix's first): an error-status (the walk said `ADDR: agent
/// returned error-status genErr(5) (index 1)`) and an SNMPv3 Report (the walk said
/// `ADDR: SNMPv3 unknown user name (usmStatsUnknownUserNames)`).
#[test]
fn get_and_walk_say_an_agents_refusal_alike() {
    // Every request answered with genErr (index 1), in this test's own range.
    let gen_err = common::raw_agent("127.0.195.2:0".parse().unwrap(), None, |m, _| {
        let mut out = Vec::new();
        let vbs = m.varbinds().map(|vb| (vb.oid, snmp::ValueRef::Null));
        snmp::encode_message(
            &mut out,
            m.version,
            m.community,
            snmp::PduType::Response,
            m.request_id,
            5,
            1,
            vbs,
        );
        vec![out]
    })
    .to_string();
    let oid = ".1.3.6.1.2.1.1.3.0";
    let error = "SNMP error: (genError) A general failure occured (error-status genErr(5))";
    let args = ["-r", "0", "-c", "public", &gen_err];
    get_and_walk_fail_saying(&args, oid, error, Some("unsupported"));
    let (agent, _) = first_agent();
    let error = format!("Cannot connect to \"{agent}\": Unknown user name. (the SNMPv3 agent refused the request with a Report: usmStatsUnknownUserNames)");
    let unknown_user = ["-v", "3", "-u", "np-nosuchuser", "-r", "0", &agent];
    get_and_walk_fail_saying(&unknown_user, oid, &error, Some("unsupported"));
}

/// An SNMPv3 authPriv request the agent cannot decrypt is dropped without a word:
/// `get` and `walk` time out alike, with the hint that a wrong privacy passphrase or
/// protocol looks so (snmpd agent 4, which tells its engine; the walk's timeout said
/// nothing of it). An agent that answers nothing, its engine discovery included,
/// times out without the hint, in `get` as in `walk` (`get`, the daemon's item, gave
/// it: no key is at fault when the discovery, which carries none, goes unanswered).
#[test]
fn an_authpriv_timeout_hints_at_the_privacy_key_once_the_engine_answered() {
    let silent = common::udp_agent("127.0.202.2:0".parse().unwrap(), None, |_, _| Vec::new());
    let silent = silent.to_string();
    let agent4 = snmpd_agent(3);
    // np-shaaes (authPriv, AES) without its privacy passphrase: each case gives one.
    let user = &V3_OPTIONS[0][..V3_OPTIONS[0].len() - 2];
    let v3 = [&["-v", "3", "-t", "200ms", "-r", "0"][..], user].concat();
    let timeout = |at: &str| {
        format!("Timeout while connecting to \"{at}\". No SNMP response after 1 attempt(s)")
    };
    let args = [&v3[..], &["-X", "np-priv-pass", &silent]].concat();
    let sys_name = ".1.3.6.1.2.1.1.5.0";
    let unanswered = " (SNMPv3: the engine discovery, which needs no passphrase, went unanswered)";
    let error = timeout(&silent) + unanswered;
    get_and_walk_fail_saying(&args, sys_name, &error, Some("timeout"));
    let hint = " (SNMPv3 authPriv: a wrong privacy passphrase or protocol looks the same)";
    let args = [&v3[..], &["-X", "not-the-priv-pass", &agent4]].concat();
    let error = timeout(&agent4) + hint;
    get_and_walk_fail_saying(&args, sys_name, &error, Some("timeout"));
}

/// An SNMPv3 agent on `addr` (port 0: any) that tells its engine to each client (a
/// source address and port: each command's socket) until that client sends a request
/// under it, and then answers that client nothing: an agent that went down once its
/// engine was discovered. Returns its address and how many discoveries it left
/// unanswered (each sent after a request: the one beside a retry).
fn v3_agent_gone_silent_once_asked(
    addr: &str,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};
    let user = snmp::v3::UsmUser::new(
        "np-shaaes",
        Some(("SHA".parse().unwrap(), "np-auth-pass")),
        Some(("AES".parse().unwrap(), "np-priv-pass")),
    )
    .unwrap();
    let engine = snmp::v3::Engine::new(user.into(), b"np-gone", 1, 0, Instant::now());
    let unanswered = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = unanswered.clone();
    let mut asked = Vec::new();
    let until = Some(Duration::from_secs(10));
    let at = common::udp_agent(addr.parse().unwrap(), until, move |d, from| {
        let Ok(m) = snmp::v3::V3Message::decode(d) else {
            return Vec::new();
        };
        match (m.engine_id.is_empty(), asked.contains(&from)) {
            (true, false) => vec![common::discovery_report(&engine, &m, Instant::now())],
            (true, true) => {
                counted.fetch_add(1, Ordering::SeqCst);
                Vec::new()
            }
            (false, _) => {
                asked.push(from);
                Vec::new()
            }
        }
    });
    (at.to_string(), unanswered)
}

/// `-v 3` options of np-shaaes (authPriv, AES) with privacy passphrase `privacy`, a
/// 300 ms timeout and one retry: what the engine discovery beside it needs.
fn authpriv_with_a_retry(privacy: &str) -> Vec<&str> {
    let user = &V3_OPTIONS[0][..V3_OPTIONS[0].len() - 2];
    [
        &["-v", "3", "-t", "300ms", "-r", "1"][..],
        user,
        &["-X", privacy],
    ]
    .concat()
}

/// With a retry, an authPriv timeout tells a wrong privacy passphrase from an agent
/// gone down, in `walk` as in `get` (the daemon's item): the engine discovery sent
/// beside the first retry (it carries no key) is answered by snmpd agent 4, which
/// cannot decrypt the requests, so the timeout says so. The walk sent none and said
/// "a wrong privacy passphrase or protocol looks the same".
#[test]
fn an_authpriv_walk_says_an_agent_dropping_its_requests_answers_its_discovery() {
    let agent4 = snmpd_agent(3);
    let args = [authpriv_with_a_retry("wrong-priv-pass"), vec![&agent4]].concat();
    let error = format!(
        "Timeout while connecting to \"{agent4}\". No SNMP response after 2 attempt(s) (SNMPv3 authPriv: the agent answers its engine discovery: a wrong privacy passphrase or protocol?)"
    );
    get_and_walk_fail_saying(&args, ".1.3.6.1.2.1.1.5.0", &error, Some("timeout"));
}

/// The other case: an agent that told its engine and then went silent (127.0.221.1)
/// leaves the discovery beside the retry unanswered, and the timeout of `walk`, as of
/// `get`, says so (the agent is down, whatever the keys), one discovery per command.
/// The walk sent none and blamed a wrong privacy passphrase or protocol as well.
#[test]
fn an_authpriv_walk_says_an_agent_gone_silent_leaves_its_discovery_unanswered() {
    use std::sync::atomic::Ordering;
    let (gone, unanswered) = v3_agent_gone_silent_once_asked("127.0.221.1:0");
    let args = [authpriv_with_a_retry("np-priv-pass"), vec![&gone]].concat();
    let error = format!(
        "Timeout while connecting to \"{gone}\". No SNMP response after 2 attempt(s) (SNMPv3: the engine discovery, which needs no passphrase, went unanswered)"
    );
    get_and_walk_fail_saying(&args, ".1.3.6.1.2.1.1.5.0", &error, Some("timeout"));
    // The discovery beside the retry of each of the four commands (get, walk, each also
    // with --json), once: not the first, which each had answered.
    assert_eq!(unanswered.load(Ordering::SeqCst), 4);
}

/// A context the agent does not serve (`-n`, `context_name`: a Cisco `vlan-10` asked of
/// another agent) is dropped unanswered by net-snmp's snmpd at every level, as
/// `snmpget -n` shows (a timeout); `get` and `walk` say that it looks the same, naming
/// it: the authPriv timeout blamed the privacy passphrase alone, which was right, and
/// an authNoPriv one said nothing.
#[test]
fn a_timeout_of_a_user_with_a_context_says_an_unserved_context_looks_the_same() {
    let agent4 = snmpd_agent(3);
    let timeout =
        format!("Timeout while connecting to \"{agent4}\". No SNMP response after 1 attempt(s)");
    let sys_name = ".1.3.6.1.2.1.1.5.0";
    // np-shaaes (authPriv) and np-sha (authNoPriv).
    let (auth_priv, auth) = (V3_OPTIONS[0], V3_OPTIONS[3]);
    for (user, hint) in [
        (auth_priv, " (SNMPv3 authPriv: a wrong privacy passphrase or protocol, or a context_name \"vlan-10\" the agent does not serve, looks the same)"),
        (auth, " (SNMPv3: a context_name \"vlan-10\" the agent does not serve looks the same: agents drop such requests unanswered)"),
    ] {
        // The user's own requests are answered in the default context.
        let ok = netpoller()
            .args(["snmp", "get", "-v", "3"])
            .args(user)
            .args([&agent4, sys_name])
            .output()
            .unwrap();
        assert!(ok.status.success(), "{user:?}: {ok:?}");
        // net-snmp's own client gets no answer either: the agent's silence, not ours.
        let theirs = Command::new("snmpget")
            .args(["-m", "", "-On", "-v3", "-t", "0.2", "-r", "1", "-n", "vlan-10"])
            .args(user)
            .args([&agent4, sys_name])
            .output()
            .unwrap();
        assert!(
            !theirs.status.success() && String::from_utf8_lossy(&theirs.stderr).contains("Timeout"),
            "{user:?}: {theirs:?}"
        );
        let args = [&["-v", "3", "-t", "200ms", "-r", "0", "-n", "vlan-10"][..], user, &[&agent4]].concat();
        get_and_walk_fail_saying(&args, sys_name, &(timeout.clone() + hint), Some("timeout"));
    }
}

/// `poll-once` says an item's failure once, in the words the daemon has for it
/// (Zabbix's first), and in --json its class apart, as the daemon's log gives them
/// (`reason=... error=...`): it printed `ERROR timeout: Timeout while connecting`,
/// the class before the text.
#[test]
fn poll_once_says_each_failure_once() {
    let (agent, community) = first_agent();
    let agent: SocketAddr = agent.parse().unwrap();
    // Nothing listens there: the daemon's requests time out, saying what came back.
    let silent = "127.0.195.3";
    let dir = common::scratch("cli-poll-once-failures");
    let cfg = dir.join("netpoller.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"[snmp]
port = {port}
timeout = "100ms"
retries = 0

[[hosts]]
name = "agent"
ip = "{ip}"
snmp = {{ community = "{community}" }}
items = [{{ key = "missing", oid = ".1.3.6.1.2.1.1.99.0", type = "str", interval = "1m" }}]

[[hosts]]
name = "silent"
ip = "{silent}"
items = [{{ key = "sysName", oid = ".1.3.6.1.2.1.1.5.0", type = "str", interval = "1m" }}]
"#,
            port = agent.port(),
            ip = agent.ip(),
        ),
    )
    .unwrap();
    let timeout = format!(
        "Timeout while connecting to \"{silent}:{}\". No SNMP response after 1 attempt(s): ICMP port unreachable from {silent}: nothing listens on that UDP port (the agent stopped, or listens on another port or address?)",
        agent.port()
    );
    let missing = "No Such Object available on this agent at this OID (noSuchObject)";
    let (out, _) = common::succeeds(netpoller().args(["poll-once", "--quiet", "-c"]).arg(&cfg));
    let line = |host: &str| {
        out.lines()
            .find(|l| l.starts_with(&format!("{host} ")))
            .unwrap_or_else(|| panic!("{host}: {out}"))
            .to_string()
    };
    assert!(
        line("silent").ends_with(&format!(" ERROR {timeout}")),
        "{out}"
    );
    assert!(
        line("agent").ends_with(&format!(" ERROR {missing}")),
        "{out}"
    );
    let lines = common::poll_once_json(&cfg, &[]);
    for (key, error, reason) in [
        ("sysName", &*timeout, "timeout"),
        ("missing", missing, "unsupported"),
    ] {
        let l = common::line_of(&lines, key);
        assert_eq!(
            (l["error"].as_str(), l["reason"].as_str()),
            (Some(error), Some(reason)),
            "{l}"
        );
    }
}

/// A MIB name for an OID is told how to get its number by `get`, `walk` and
/// `walk --indices` alike, before anything is sent, a usage error (exit 2, on stderr,
/// with --json too); `--indices` said only that the name was `not a table column to
/// walk`, and a plain walk said it as the walk's failure, exit 1 (in --json on
/// stdout). A walk's top arc past 2 is refused so too (the walk failed on it).
#[test]
fn a_name_oid_is_told_how_to_get_its_number_by_every_command() {
    // In this test's own range; nothing is sent.
    let target = "127.0.195.1:16161";
    let name = "IF-MIB::ifDescr";
    let hint = "\"IF-MIB::ifDescr\" is a name, not a numeric OID like 1.3.6.1.2.1.1.1.0: netpoller reads no MIBs (`snmptranslate -On IF-MIB::ifDescr` gives the number)";
    let top = "the first arc must be 0, 1 or 2";
    for (args, said) in [
        (&["get", target, name][..], hint),
        (&["walk", target, name][..], hint),
        (&["walk", "--json", target, name][..], hint),
        (&["walk", "--indices", target, name][..], hint),
        (&["walk", target, "3"][..], top),
    ] {
        let o = netpoller().arg("snmp").args(args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(said), "{args:?}: {err}");
        assert_eq!(text(&o), "", "{args:?}");
    }
}

/// `walk --help` says --max-repetitions serves SNMPv3 walks too (they are GETBULKs
/// as v2c's are); it said `(v2c)`, which an operator of a v3 agent reads as "not
/// mine".
#[test]
fn walk_help_says_max_repetitions_serves_v3_too() {
    let o = netpoller()
        .args(["snmp", "walk", "--help"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let help = text(&o);
    assert!(
        help.contains("GETBULK max-repetitions (v2c and v3; v1 has no GETBULK"),
        "{help}"
    );
}

/// `--help` of `snmp get`, `snmp walk` and `poll-once` says what the exit status
/// tells, and where a failure is said: a script checking `snmp get`'s status learnt
/// only from the README that an OID without a value is 1 and a wrong option 2, and
/// that `poll-once` exits 0 with items in error.
#[test]
fn help_says_what_the_exit_status_tells() {
    for (cmd, says) in [
        (&["snmp", "get"][..], "1 when one has none: its error, in the words of a polled item's, on stderr (with --json as {\"oid\",\"error\",\"reason\"} on stdout), the others printed; 2 for a wrong option, TARGET or OID, before anything is sent"),
        (&["snmp", "walk"][..], "1 when it fails (or --indices finds no row): the rows printed so far stay, the error follows on stderr (with --json as {\"oid\",\"error\",\"reason\"} on stdout); 2 for a wrong option, TARGET or OID"),
        (&["poll-once"][..], "An item that gets no value is a result, not a failed command"),
    ] {
        let o = netpoller().args(cmd).arg("--help").output().unwrap();
        assert!(o.status.success(), "{o:?}");
        // As read, whatever the width the lines are wrapped to.
        let help = text(&o).split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(help.contains(says), "{cmd:?}: {help}");
    }
}

/// Port 0, of the TARGET or `-p`, is refused before anything is sent, as the config
/// refuses it, exit 2; `get` said `Invalid argument (os error 22)` and `walk`
/// `Transport endpoint is not connected (os error 107)`, as the OID's failure, exit 1.
#[test]
fn port_0_is_refused_as_the_config_refuses_it() {
    for cmd in ["get", "walk"] {
        for target in [&["127.0.195.1:0"][..], &["-p", "0", "127.0.195.1"][..]] {
            let o = netpoller()
                .args(["snmp", cmd, "-t", "100ms", "-r", "0"])
                .args(target)
                .arg(".1.3.6.1.2.1.1.5.0")
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{cmd} {target:?}: {err}");
            assert_eq!(
                err, "netpoller: target 127.0.195.1:0: UDP port 0 cannot be sent to\n",
                "{cmd} {target:?}"
            );
        }
    }
}

/// A target that is not an IP address is refused before anything is sent: no DNS
/// query for a typo. (`.invalid` can never resolve, should a lookup happen.)
#[test]
fn targets_are_ip_addresses_never_names() {
    for target in ["127.0.20.1:abc", "agent.invalid", "[::1]:x"] {
        let o = netpoller()
            .args(["snmp", "get", target, ".1.3.6.1.2.1.1.5.0"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{target}: {err}");
        assert!(err.contains("is not an IP address"), "{target}: {err}");
    }
    // An IPv6 literal in brackets without a port takes -p.
    let o = netpoller()
        .args([
            "snmp",
            "get",
            "-p",
            "161",
            "-t",
            "200ms",
            "-r",
            "0",
            "[::1]",
            ".1.3.6.1.2.1.1.5.0",
        ])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&o.stderr).contains("is not an IP address"));
}

/// `-t` takes what the config's `snmp.timeout` takes: 10 ms..10 min.
#[test]
fn timeouts_outside_the_configs_range_are_refused() {
    for (t, want) in [
        ("0s", "0s is outside 10ms..10m"),
        ("11m", "11m is outside 10ms..10m"),
        ("200years", "longer than 100 years"),
    ] {
        let o = netpoller()
            .args(["snmp", "get", "-t", t, "127.0.20.1", ".1.3.6.1.2.1.1.5.0"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{t}: {err}");
        assert!(err.contains(want), "{t}: {err}");
    }
}

/// `netpoller snmp walk … | head -1`: the walk ends when the reader goes, quietly.
#[test]
fn a_reader_that_goes_away_ends_a_walk_quietly() {
    use std::io::BufRead as _;
    use std::os::unix::process::ExitStatusExt as _;
    let (addr, community) = first_agent();
    let mut child = netpoller()
        .args(["snmp", "walk", "-c", &community, &addr, ".1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with(".1.3.6.1."), "{first}");
    // The reader is dropped here; the walk (far more than a pipe holds) goes on
    // writing into nothing.
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        o.status.signal(),
        Some(libc::SIGPIPE),
        "{:?}: {err}",
        o.status
    );
    assert!(err.is_empty(), "{err}");
}

#[test]
fn get_json_lines() {
    let (addr, community) = first_agent();
    let o = netpoller()
        .args([
            "snmp",
            "get",
            "--json",
            "-c",
            &community,
            &addr,
            ".1.3.6.1.4.1.8072.9999.9999.1.0",
            "1.3.6.1.4.1.8072.9999.9999.4.0",
            ".1.3.6.1.4.1.8072.9999.9999.7.0",
        ])
        .output()
        .unwrap();
    let lines: Vec<serde_json::Value> = text(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines[0],
        serde_json::json!({"oid": ".1.3.6.1.4.1.8072.9999.9999.1.0", "type": "INTEGER", "value": -42})
    );
    assert_eq!(
        lines[1],
        serde_json::json!({"oid": ".1.3.6.1.4.1.8072.9999.9999.4.0", "type": "STRING", "value": "fixture agent 1"})
    );
    assert_eq!(
        lines[2],
        serde_json::json!({
            "oid": ".1.3.6.1.4.1.8072.9999.9999.7.0",
            "error": "No Such Object available on this agent at this OID (noSuchObject)",
            "reason": "unsupported",
        })
    );
}

#[test]
fn walk_prints_what_snmpbulkwalk_prints() {
    let sim: SocketAddr = service_env("NETPOLLER_SNMPSIM_ADDR").parse().unwrap();
    assert!(sim.ip().is_loopback());
    let sim = sim.to_string();
    // snmpsim recordings: cisco's subtree has Hex-STRINGs wrapped over several lines.
    for (community, root) in [
        ("cisco_16_switch", ".1.3.6.1.4.1.9.5.1.3"),
        ("bgp", ".1"),
        ("hp_perf", ".1"),
    ] {
        let o = netpoller()
            .args(["snmp", "walk", "-c", community, &sim, root])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let ours = text(&o);
        assert!(ours.lines().count() > 10, "{community}");
        // At the very end of an agent's MIB, snmpbulkwalk also prints the endOfMibView
        // varbinds of the last GETBULK; we stop at the first one and print none.
        let theirs: String = net_snmp("snmpbulkwalk", &["-v2c", "-c", community, &sim, root])
            .split_inclusive('\n')
            .filter(|l| !l.contains(" = No more variables left in this MIB View"))
            .collect();
        assert_eq!(ours, theirs, "{community} {root}");
    }
    // v1 GETNEXT walk of a real snmpd, minus the ticking sysUpTime.
    let (addr, community) = first_agent();
    let strip = |s: String| {
        s.lines()
            .filter(|l| !l.starts_with(".1.3.6.1.2.1.1.3.0 "))
            .map(|l| format!("{l}\n"))
            .collect::<String>()
    };
    let o = netpoller()
        .args([
            "snmp",
            "walk",
            "-v",
            "1",
            "-c",
            &community,
            &addr,
            ".1.3.6.1.2.1.1",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        strip(text(&o)),
        strip(net_snmp(
            "snmpwalk",
            &["-v1", "-c", &community, &addr, ".1.3.6.1.2.1.1"]
        ))
    );
}

/// `snmp walk --indices` warns of a walk whose rows look like a table's columns × rows
/// (a table or its entry whose columns share one type) and not of one column indexed by
/// several arcs whose every first arc has the same rest: snmpsim's recording of a Cisco
/// switch has both.
#[test]
fn walk_indices_warns_of_a_tables_walk_not_of_a_multi_arc_column() {
    let sim: SocketAddr = service_env("NETPOLLER_SNMPSIM_ADDR").parse().unwrap();
    assert!(sim.ip().is_loopback());
    let sim = sim.to_string();
    let warned = |oid: &str| {
        let o = netpoller()
            .args([
                "snmp",
                "walk",
                "--indices",
                "-c",
                "cisco_16_switch",
                &sim,
                oid,
            ])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(text(&o).starts_with("indices = "), "{}", text(&o));
        String::from_utf8_lossy(&o.stderr).contains("look like a table's columns")
    };
    // Columns of Cisco's MIBs (enterprises.9.9.189, .362) of rows ifIndex.a.b and
    // ifIndex.a, the same a.b for each of the 104 ports; the last is its table's first
    // column (its OID ends in 1, as an entry's does).
    for column in [
        ".1.3.6.1.4.1.9.9.189.1.3.5.1.3",
        ".1.3.6.1.4.1.9.9.189.1.3.2.1.7",
        ".1.3.6.1.4.1.9.9.189.1.3.8.1.2",
        ".1.3.6.1.4.1.9.9.362.1.2.1.1.2",
        ".1.3.6.1.4.1.9.9.362.1.2.1.1.1",
    ] {
        assert!(!warned(column), "{column}");
    }
    // An entry of two INTEGER columns (2, 3) of the same 20 rows; ifRcvAddressTable, a
    // table of two INTEGER columns.
    for table in [".1.3.6.1.4.1.9.9.68.1.2.1.1", ".1.3.6.1.2.1.31.1.4"] {
        assert!(warned(table), "{table}");
    }
}

/// `snmp walk --indices` of a column: the rows net-snmp's walk shows, as an `indices`
/// value; `--matches` keeps the rows whose value matches, as a discovery filter; a
/// table indexed by more than one arc is refused with the reason.
#[test]
fn walk_indices_lists_a_columns_rows() {
    let (addr, community) = first_agent();
    let if_descr = ".1.3.6.1.2.1.2.2.1.2";
    // net-snmp's view: `.1.3.6.1.2.1.2.2.1.2.N = STRING: "name"`.
    let theirs: Vec<(u32, String)> =
        net_snmp("snmpbulkwalk", &["-v2c", "-c", &community, &addr, if_descr])
            .lines()
            .map(|l| {
                let (oid, value) = l.split_once(" = STRING: ").unwrap();
                let row = oid.rsplit('.').next().unwrap().parse().unwrap();
                (row, value.trim_matches('"').to_string())
            })
            .collect();
    assert!(!theirs.is_empty(), "lo at least: {theirs:?}");
    let indices = |extra: &[&str]| {
        let o = netpoller()
            .args(["snmp", "walk", "--indices", "-c", &community, "--json"])
            .args(extra)
            .args([&addr, if_descr])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_str(&text(&o)).unwrap();
        v["indices"].as_str().unwrap().to_string()
    };
    // Written as ranges: expand them to compare.
    let rows = |s: String| -> Vec<u32> {
        s.split(',')
            .flat_map(|p| match p.split_once('-') {
                Some((a, b)) => a.parse().unwrap()..=b.parse().unwrap(),
                None => p.parse().unwrap()..=p.parse().unwrap(),
            })
            .collect()
    };
    let all: Vec<u32> = theirs.iter().map(|(r, _)| *r).collect();
    assert_eq!(rows(indices(&[])), all);
    let lo: Vec<u32> = theirs
        .iter()
        .filter(|(_, name)| name == "lo")
        .map(|(r, _)| *r)
        .collect();
    assert_eq!(lo.len(), 1, "{theirs:?}");
    assert_eq!(rows(indices(&["--matches", "^lo$"])), lo);
    // The plain form is a line to paste.
    let o = netpoller()
        .args(["snmp", "walk", "--indices", "--matches", "^lo$", "-c"])
        .args([&community, &addr, if_descr])
        .output()
        .unwrap();
    assert_eq!(text(&o), format!("indices = \"{}\"  # 1 row\n", lo[0]));
    // ipAdEntAddr is indexed by an address: rows of four arcs, each listed, in the
    // agent's (OID) order, as net-snmp names them.
    let ip_ad_ent_addr = ".1.3.6.1.2.1.4.20.1.1";
    let theirs: Vec<String> = net_snmp(
        "snmpbulkwalk",
        &["-v2c", "-c", &community, &addr, ip_ad_ent_addr],
    )
    .lines()
    .map(|l| {
        let (oid, _) = l.split_once(" = ").unwrap();
        oid.strip_prefix(ip_ad_ent_addr).unwrap()[1..].to_string()
    })
    .collect();
    assert!(theirs.iter().any(|r| r == "127.0.0.1"), "{theirs:?}");
    let o = netpoller()
        .args(["snmp", "walk", "--indices", "-c", &community, &addr])
        .arg(ip_ad_ent_addr)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let n = theirs.len();
    let s = if n == 1 { "" } else { "s" };
    assert_eq!(
        text(&o),
        format!("indices = \"{}\"  # {n} row{s}\n", theirs.join(","))
    );
    // A table or its entry is not a column: its "rows" would be column.row pairs. Its
    // values are of several types, which one column's never are.
    for not_a_column in [".1.3.6.1.2.1.2.2", ".1.3.6.1.2.1.2.2.1"] {
        let o = netpoller()
            .args(["snmp", "walk", "--indices", "-c", &community, &addr])
            .arg(not_a_column)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(&format!("{not_a_column} is not one column of a table"))
                && err.contains("(INTEGER, STRING)"),
            "{err}"
        );
    }
}

#[test]
fn community_never_shown() {
    let secret = "Sup3r-S3cret-c0mmunity";
    let o = netpoller()
        .env("NETPOLLER_SNMP_COMMUNITY", secret)
        .args(["snmp", "get", "--help"])
        .output()
        .unwrap();
    assert!(o.status.success());
    assert!(text(&o).contains("--community"));
    assert!(!text(&o).contains(secret), "--help shows the community");
    // Silent address (nothing listens), most verbose logging: not in errors or logs.
    for args in [
        vec![
            "--log-level",
            "trace",
            "snmp",
            "get",
            "-t",
            "200ms",
            "-r",
            "0",
            "127.0.122.9",
            ".1.3.6.1.2.1.1.1.0",
        ],
        vec![
            "--log-level",
            "trace",
            "snmp",
            "walk",
            "-t",
            "200ms",
            "-r",
            "0",
            "127.0.122.9",
            ".1.3.6.1.2.1.1",
        ],
        vec!["snmp", "get", "127.0.122.9", "not-an-oid"],
    ] {
        let o = netpoller()
            .env("NETPOLLER_SNMP_COMMUNITY", secret)
            .args(&args)
            .output()
            .unwrap();
        assert!(!o.status.success(), "{args:?} must fail");
        let all = format!("{}{}", text(&o), String::from_utf8_lossy(&o.stderr));
        assert!(!all.is_empty());
        assert!(
            !all.contains(secret),
            "{args:?} printed the community:\n{all}"
        );
    }
}

#[test]
fn snmpv3_get_and_walk_print_what_net_snmp_prints() {
    let (addr, _) = first_agent();
    for opts in V3_OPTIONS {
        let o = netpoller()
            .args(["snmp", "get", "-v", "3"])
            .args(opts)
            .arg(&addr)
            .args(STATIC_OIDS)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{opts:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let mut args = vec!["-v3"];
        args.extend(opts);
        args.push(&addr);
        let theirs = net_snmp("snmpget", &[&args[..], &STATIC_OIDS[..]].concat());
        assert_eq!(text(&o), theirs, "{opts:?}");

        let root = ".1.3.6.1.2.1.2";
        let o = netpoller()
            .args(["snmp", "walk", "-v", "3"])
            .args(opts)
            .args([&addr, root])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{opts:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        // Interface counters tick between the two walks: compare the OIDs and types.
        let shape = |s: &str| -> Vec<String> {
            s.lines()
                .filter_map(|l| l.split_once(": ").map(|(head, _)| head.to_string()))
                .collect()
        };
        let theirs = net_snmp("snmpbulkwalk", &[&args[..], &[root][..]].concat());
        assert!(shape(&theirs).len() > 20, "{theirs}");
        assert_eq!(shape(&text(&o)), shape(&theirs), "{opts:?}");
    }
}

#[test]
fn passphrases_in_the_environment_serve_only_where_the_level_wants_them() {
    // Exported for the v3 agents (examples/snmpd/agent.conf.in), they leave a v2c
    // query alone and a lower level too, and fill in what the command line lacks.
    let (addr, _) = first_agent();
    let get = |args: &[&str]| {
        let o = netpoller()
            .env("NETPOLLER_SNMP_AUTH_PASSPHRASE", "np-auth-pass")
            .env("NETPOLLER_SNMP_PRIV_PASSPHRASE", "np-priv-pass")
            .args(["snmp", "get"])
            .args(args)
            .args([&addr, ".1.3.6.1.2.1.1.5.0"])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(text(&o).contains("STRING: \"agent1\""), "{}", text(&o));
    };
    get(&[]);
    get(&["-v", "3", "-u", "np-sha", "-a", "SHA", "-l", "authNoPriv"]);
    get(&["-v", "3", "-u", "np-shaaes", "-a", "SHA", "-x", "AES"]);
    // No level and no protocol: noAuthNoPriv, as net-snmp's default.
    get(&["-v", "3", "-u", "np-noauth"]);
}

#[test]
fn snmpv3_passphrases_are_checked_and_never_shown() {
    let (addr, _) = first_agent();
    let auth = "Auth-S3cret-passphrase";
    let o = netpoller()
        .env("NETPOLLER_SNMP_AUTH_PASSPHRASE", auth)
        .args(["snmp", "get", "--help"])
        .output()
        .unwrap();
    assert!(text(&o).contains("--auth-passphrase") && !text(&o).contains(auth));
    // A wrong passphrase: the agent's report, at once, without the passphrase.
    let o = netpoller()
        .args([
            "--log-level",
            "trace",
            "snmp",
            "get",
            "-v",
            "3",
            "-u",
            "np-sha256",
        ])
        .args(["-a", "SHA-256", "-A", auth, &addr, ".1.3.6.1.2.1.1.5.0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("usmStatsWrongDigests"), "{err}");
    assert!(!err.contains(auth) && !text(&o).contains(auth), "{err}");
    // Checked before anything is sent, as the config is.
    let o = netpoller()
        .args([
            "snmp",
            "get",
            "-v",
            "3",
            "-u",
            "np-sha256",
            "-l",
            "authNoPriv",
            // Long enough: a value wrong by itself (a short one, below) is told first.
            "-A",
            "long enough",
        ])
        .args([&addr, ".1.3.6.1.2.1.1.5.0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("-a (auth protocol)"), "{err}");
    let o = netpoller()
        .args([
            "snmp",
            "get",
            "-v",
            "3",
            "-u",
            "np-sha256",
            "-a",
            "SHA",
            "-A",
            "short",
        ])
        .args([&addr, ".1.3.6.1.2.1.1.5.0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("at least 8 characters") && !err.contains("short"),
        "{err}"
    );
    // v3 options without -v 3 are a mistake, not a v2c "public" poll.
    let o = netpoller()
        .args([
            "snmp",
            "get",
            "-u",
            "np-sha256",
            &addr,
            ".1.3.6.1.2.1.1.5.0",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("need -v 3"), "{err}");
}

#[test]
fn poll_once_polls_snmpv3_hosts_of_a_config() {
    let (addr, _) = first_agent();
    let sa: SocketAddr = addr.parse().unwrap();
    let dir = std::env::temp_dir().join(format!("netpoller-v3-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("v3.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"[snmp]
version = "3"
port = {port}
security_name = "np-shaaes"
auth_protocol = "SHA"
auth_passphrase = "np-auth-pass"
priv_protocol = "AES"
priv_passphrase = "np-priv-pass"
timeout = "1s"

[[templates]]
name = "sys"
items = [
  {{ key = "sysName", oid = ".1.3.6.1.2.1.1.5.0", type = "str", interval = "1m" }},
  {{ key = "fixture", oid = ".1.3.6.1.4.1.8072.9999.9999.3.0", type = "uint", interval = "1m" }},
]

[[hosts]]
name = "v3-host"
ip = "{ip}"
templates = ["sys"]

[[hosts]]
name = "v3-md5des"
ip = "{ip}"
templates = ["sys"]
snmp = {{ security_name = "np-md5des", auth_protocol = "MD5", priv_protocol = "DES" }}

[[hosts]]
name = "v3-wrong-key"
ip = "{ip}"
templates = ["sys"]
snmp = {{ auth_passphrase = "not-the-passphrase" }}
"#,
            port = sa.port(),
            ip = sa.ip()
        ),
    )
    .unwrap();
    let o = netpoller()
        .args(["--log-level", "debug", "poll-once", "--json", "-c"])
        .arg(&cfg)
        .output()
        .unwrap();
    let out = text(&o);
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 6, "{out}");
    let get = |host: &str, key: &str| {
        lines
            .iter()
            .find(|l| l["host"] == host && l["key"] == key)
            .unwrap_or_else(|| panic!("{host} {key}: {out}"))
            .clone()
    };
    for host in ["v3-host", "v3-md5des"] {
        assert_eq!(get(host, "sysName")["value"], "agent1", "{out}");
        assert_eq!(get(host, "fixture")["value"], 123456, "{out}");
    }
    let e = get("v3-wrong-key", "sysName");
    assert!(
        e["error"]
            .as_str()
            .unwrap()
            .contains("usmStatsWrongDigests"),
        "{e}"
    );
    let all = format!("{out}{}", String::from_utf8_lossy(&o.stderr));
    for secret in ["np-auth-pass", "np-priv-pass", "not-the-passphrase"] {
        assert!(!all.contains(secret), "{secret} shown:\n{all}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An agent that drops a request whose SNMPv3 msgID it has seen (RFC 3412 §6.2 has a
/// retransmission take a new one, as net-snmp's do): a walk whose first GETBULK is
/// lost goes on with its retry. The retry was the same bytes under the same msgID,
/// dropped too, and the walk failed on a timeout.
#[test]
fn an_snmpv3_walk_retries_under_a_new_msg_id() {
    use std::net::UdpSocket;
    use std::time::{Duration, Instant};
    let (agent, _) = first_agent();
    // A relay on loopback in front of the real agent: it drops the second datagram
    // (the first GETBULK, after the engine's discovery) and any msgID seen before.
    let front = UdpSocket::bind("127.0.46.1:0").unwrap();
    let back = UdpSocket::bind("127.0.46.1:0").unwrap();
    back.connect(&agent).unwrap();
    let addr = front.local_addr().unwrap();
    let relay = std::thread::spawn(move || {
        let until = Instant::now() + Duration::from_secs(30);
        let (mut seen, mut n, mut dropped) = (Vec::new(), 0, 0);
        front.set_nonblocking(true).unwrap();
        back.set_nonblocking(true).unwrap();
        let mut client = None;
        let mut buf = [0u8; 65_536];
        let mut quiet = Instant::now();
        // Ends 3 s after the last datagram (the walk is over), at most at `until`.
        while Instant::now() < until && quiet.elapsed() < Duration::from_secs(3) {
            if let Ok((len, from)) = front.recv_from(&mut buf) {
                quiet = Instant::now();
                client = Some(from);
                n += 1;
                let id = snmp::v3::V3Message::decode(&buf[..len]).unwrap().msg_id;
                if n == 2 || seen.contains(&id) {
                    dropped += 1;
                } else {
                    back.send(&buf[..len]).unwrap();
                }
                seen.push(id);
            } else if let (Ok(len), Some(c)) = (back.recv(&mut buf), client) {
                quiet = Instant::now();
                front.send_to(&buf[..len], c).unwrap();
            } else {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        dropped
    });
    let o = netpoller()
        .args(["snmp", "walk", "-v", "3", "-t", "1s", "-r", "1"])
        .args(V3_OPTIONS[0])
        .args([&addr.to_string(), ".1.3.6.1.2.1.1"])
        .output()
        .unwrap();
    let dropped = relay.join().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(text(&o).contains("STRING: \"agent1\""), "{}", text(&o));
    assert_eq!(dropped, 1, "the first GETBULK, and no retry");
}

/// `snmp walk -v 3` against agents whose replies fail the USM's checks (signed with
/// another authentication key; authentic but encrypted under another privacy key;
/// authentic and readable, but not a Response) times out saying which check they
/// failed, as a polled item's timeout does, not "no response" (an agent that answers
/// would read as a dead one), without telling any key; `snmp get` (the engine's path)
/// says the same of the last.
#[test]
fn snmpv3_walks_of_replies_failing_the_usm_say_why_on_timeout() {
    use snmp::v3::UsmUser;
    use snmp::PduType::{GetRequest, Response};
    let user = |auth: &str, privacy: Option<&str>| {
        UsmUser::new(
            "np-shaaes",
            Some(("SHA".parse().unwrap(), auth)),
            privacy.map(|p| ("AES".parse().unwrap(), p)),
        )
        .unwrap()
    };
    let signed = std::sync::Arc::new(user("np-auth-pass", None));
    let private = std::sync::Arc::new(user("np-auth-pass", Some("np-priv-pass")));
    let agent = |ip: &str, user, answer_as, pdu| {
        common::v3_agent_answering_as(&format!("{ip}:0"), user, answer_as, pdu).to_string()
    };
    let wrong_mac = agent(
        "127.0.186.2",
        &signed,
        user("another-auth-pass", None),
        Response,
    );
    let wrong_privacy = agent(
        "127.0.186.3",
        &private,
        user("np-auth-pass", Some("another-priv-pass")),
        Response,
    );
    let echo = agent(
        "127.0.186.4",
        &private,
        user("np-auth-pass", Some("np-priv-pass")),
        GetRequest,
    );
    let auth = V3_OPTIONS[3];
    let privacy = V3_OPTIONS[0];
    let root = ".1.3.6.1.2.1.1";
    let run = |cmd: &str, opts: &[&str], addr: &str| {
        let o = netpoller()
            .args(["snmp", cmd, "-v", "3", "-t", "200ms", "-r", "1"])
            .args(opts)
            .args([addr, root])
            .output()
            .unwrap();
        assert!(!o.status.success(), "{cmd} {addr}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(!err.contains("pass"), "a secret in {err}");
        err
    };
    for (opts, addr, why) in [
        (auth, &wrong_mac, "replies failed SNMPv3 authentication (another authentication key or protocol, or another agent with the same engine ID?), not taken"),
        (privacy, &wrong_privacy, "replies authenticated but could not be decrypted (another privacy key or protocol?), not taken"),
        (privacy, &echo, "replies were GetRequest PDUs instead of Responses, not taken"),
    ] {
        let err = run("walk", opts, addr);
        assert_eq!(
            err.trim_end(),
            format!("{root}: Timeout while connecting to \"{addr}\". No SNMP response taken after 2 attempt(s): {why}")
        );
    }
    let err = run("get", privacy, &echo);
    assert_eq!(
        err.trim_end(),
        format!("{root}: Timeout while connecting to \"{echo}\". No SNMP response taken after 2 attempt(s): replies were GetRequest PDUs instead of Responses, not taken")
    );
}

/// `snmp walk` names the ICMP error that came back for its requests, as `snmp get` and
/// the daemon's items do: a router's host unreachable (a connected socket is not told
/// of it otherwise: a bare timeout) and a firewall's reject (which failed the walk at
/// once with "receiving: No route to host"), its attempts waited out. v1/v2c and an
/// SNMPv3 user's engine discovery alike. (nft rejects on input, as a router's or a
/// firewall's on the way.)
#[test]
fn walks_name_the_icmp_error_that_came_back() {
    let _nft = common::NftTable::create(
        "chain input {\n type filter hook input priority -10; policy accept;\n \
         ip daddr 127.0.229.1 udp dport 161 reject with icmp type host-unreachable\n \
         ip daddr 127.0.229.2 udp dport 161 reject with icmp type admin-prohibited\n}",
    );
    let walk = |addr: &str, extra: &[&str]| {
        let o = netpoller()
            .args(["snmp", "walk", "-t", "200ms", "-r", "1"])
            .args(extra)
            .args([addr, "1.3.6.1.2.1.1"])
            .output()
            .unwrap();
        assert!(!o.status.success(), "{o:?}");
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let host = walk("127.0.229.1", &[]);
    assert!(
        host.contains("No SNMP response after 2 attempt(s): ICMP host unreachable from 127.0.229.1 (the host is down"),
        "{host}"
    );
    let firewall = walk("127.0.229.2", &["-v", "1"]);
    assert!(
        firewall.contains("No SNMP response after 2 attempt(s): ICMP administratively prohibited from 127.0.229.2"),
        "{firewall}"
    );
    let v3 = walk(
        "127.0.229.1",
        &["-v", "3", "-u", "nobody", "-l", "noAuthNoPriv"],
    );
    assert!(
        v3.contains("ICMP host unreachable from 127.0.229.1") && !v3.contains("discovery"),
        "{v3}"
    );
}
