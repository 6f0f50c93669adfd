//! The SNMP driver against real agents on loopback: the net-snmp `snmpd` agents and the
//! snmpsim recordings started by `scripts/services.sh up` (addresses in .services/env),
//! plus agents and firewall rules this file starts itself (removed on drop).
//!
//! Values are compared with what net-snmp's own `snmpget -On -Oe` prints for the same
//! OIDs at the same moment (OIDs whose value changes between two snmpget runs, such as
//! sysUpTime, are compared by type only).

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{service_env, V3_AUTH_PASS, V3_OPTIONS, V3_PRIV_PASS};
use poller::snmp_driver::{SnmpDriver, SnmpDriverOptions, SnmpHostJob, SnmpIterationReport};
use poller::value::{ErrorReason, ItemError};
use snmp::{Oid, VarValue, Version};

/// The snmpd agents: (address, community).
fn snmpd_agents() -> Vec<(SocketAddr, String)> {
    let addrs = service_env("NETPOLLER_SNMPD_ADDRS");
    let port: u16 = service_env("NETPOLLER_SNMPD_PORT").parse().unwrap();
    let comms = service_env("NETPOLLER_SNMPD_COMMUNITIES");
    let agents: Vec<(SocketAddr, String)> = addrs
        .split(',')
        .zip(comms.split(','))
        .map(|(a, c)| (SocketAddr::new(a.parse().unwrap(), port), c.to_string()))
        .collect();
    assert!(agents.len() >= 2 && agents.iter().all(|(a, _)| a.ip().is_loopback()));
    agents
}

fn snmpsim_addr() -> SocketAddr {
    let a: SocketAddr = service_env("NETPOLLER_SNMPSIM_ADDR").parse().unwrap();
    assert!(a.ip().is_loopback());
    a
}

/// net-snmp's options for a v1/v2c community.
fn community_args(version: Version, community: &str) -> Vec<String> {
    ["-v", version.as_str(), "-c", community]
        .map(String::from)
        .to_vec()
}

/// Runs net-snmp's snmpget (numeric output, no MIBs) with `security` (its `-v`, `-c`
/// or `-u -l -a -A -x -X` options) and parses `OID = VALUE` records (values may span
/// lines: Hex-STRING wraps after 16 octets).
fn net_snmp_get(addr: SocketAddr, security: &[String], oids: &[Oid]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for chunk in oids.chunks(20) {
        let o = Command::new("snmpget")
            .args(["-m", "", "-On", "-Oe", "-t", "2", "-r", "1"])
            .args(security)
            .arg(addr.to_string())
            .args(chunk.iter().map(|o| o.to_string()))
            .output()
            .expect("run snmpget (apt-get install snmp)");
        assert!(
            o.status.success(),
            "snmpget failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        parse_records(&String::from_utf8_lossy(&o.stdout), &mut out);
    }
    out
}

fn parse_records(text: &str, out: &mut BTreeMap<String, String>) {
    let mut last: Option<String> = None;
    for line in text.split_inclusive('\n') {
        let is_record = line.starts_with('.') && line.contains(" = ");
        if is_record {
            let (oid, val) = line.split_once(" = ").unwrap();
            out.insert(oid.to_string(), val.trim_end_matches('\n').to_string());
            last = Some(oid.to_string());
        } else if let Some(k) = &last {
            let v = out.get_mut(k).unwrap();
            v.push('\n');
            v.push_str(line.trim_end_matches('\n'));
        }
    }
}

/// All OIDs a walk of `root` returns (net-snmp's snmpbulkwalk).
fn net_snmp_walk_oids(addr: SocketAddr, community: &str, root: &str) -> Vec<Oid> {
    let o = Command::new("snmpbulkwalk")
        .args([
            "-m", "", "-On", "-Oe", "-t", "3", "-r", "1", "-v2c", "-c", community,
        ])
        .arg(addr.to_string())
        .arg(root)
        .output()
        .expect("run snmpbulkwalk");
    assert!(
        o.status.success(),
        "snmpbulkwalk failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let mut m = BTreeMap::new();
    parse_records(&String::from_utf8_lossy(&o.stdout), &mut m);
    let mut v: Vec<Oid> = m.keys().map(|k| k.parse().unwrap()).collect();
    v.sort();
    v
}

fn job(addr: SocketAddr, community: &str, oids: Vec<Oid>) -> SnmpHostJob {
    let mut j = SnmpHostJob::new(addr, Arc::from(community), oids);
    j.timeout = Duration::from_secs(2);
    j.retries = 1;
    j
}

type Results = Vec<BTreeMap<usize, Result<VarValue, ItemError>>>;

async fn run(driver: &mut SnmpDriver, jobs: &[SnmpHostJob]) -> (Results, SnmpIterationReport) {
    let mut res: Results = vec![BTreeMap::new(); jobs.len()];
    let report = driver
        .run_iteration(jobs, |j, i, r| {
            assert!(res[j].insert(i, r).is_none(), "item {j}/{i} reported twice");
        })
        .await;
    for (j, r) in res.iter().enumerate() {
        assert_eq!(r.len(), jobs[j].oids.len(), "job {j}: every item reported");
    }
    (res, report)
}

/// Compares our results with snmpget's output taken just `before` and `after` our
/// iteration; returns how many were compared exactly.
fn compare_with_net_snmp(
    job: &SnmpHostJob,
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
    ours: &BTreeMap<usize, Result<VarValue, ItemError>>,
) -> usize {
    let first = before;
    let volatile: HashSet<&String> = first
        .keys()
        .filter(|k| first.get(*k) != after.get(*k))
        .collect();
    let mut exact = 0;
    for (i, oid) in job.oids.iter().enumerate() {
        let key = oid.to_string();
        let theirs = first
            .get(&key)
            .unwrap_or_else(|| panic!("snmpget printed nothing for {key}"));
        let v = match &ours[&i] {
            Ok(v) => v,
            Err(e) => panic!("{key}: we got {e}, net-snmp got {theirs}"),
        };
        let mine = v.to_string();
        if volatile.contains(&key) {
            let ty = |s: &str| s.split(':').next().unwrap_or("").to_string();
            assert_eq!(ty(&mine), ty(theirs), "{key}: type differs");
        } else {
            assert_eq!(&mine, theirs, "{key}: value differs from net-snmp's");
            exact += 1;
        }
    }
    exact
}

const PLAYPEN: &str = "1.3.6.1.4.1.8072.9999.9999";

fn agent_oids() -> Vec<Oid> {
    let mut v: Vec<Oid> = [
        "1.3.6.1.2.1.1.1.0",
        "1.3.6.1.2.1.1.2.0",
        "1.3.6.1.2.1.1.3.0",
        "1.3.6.1.2.1.1.4.0",
        "1.3.6.1.2.1.1.5.0",
        "1.3.6.1.2.1.1.6.0",
        "1.3.6.1.2.1.1.7.0",
        "1.3.6.1.2.1.2.1.0",
        "1.3.6.1.2.1.2.2.1.2.1",
        "1.3.6.1.2.1.2.2.1.6.1",
        "1.3.6.1.2.1.2.2.1.10.1",
        "1.3.6.1.2.1.31.1.1.1.6.1",
        "1.3.6.1.2.1.4.20.1.1.127.0.0.1",
        "1.3.6.1.2.1.1.9.1.2.1",
        "1.3.6.1.2.1.1.99.0",
    ]
    .iter()
    .map(|s| s.parse().unwrap())
    .collect();
    for i in 1..=7 {
        v.push(format!("{PLAYPEN}.{i}.0").parse().unwrap());
    }
    v
}

/// Polls `jobs` once between two snmpget snapshots (each job's net-snmp `security`
/// options) and compares every value.
async fn poll_and_compare(
    driver: &mut SnmpDriver,
    jobs: &[SnmpHostJob],
    security: &[Vec<String>],
) -> (Results, SnmpIterationReport, usize) {
    let snapshot = || -> Vec<_> {
        jobs.iter()
            .zip(security)
            .map(|(j, s)| net_snmp_get(j.addr, s, &j.oids))
            .collect()
    };
    let before = snapshot();
    let (res, report) = run(driver, jobs).await;
    let after = snapshot();
    let mut exact = 0;
    for (k, j) in jobs.iter().enumerate() {
        exact += compare_with_net_snmp(j, &before[k], &after[k], &res[k]);
    }
    (res, report, exact)
}

#[tokio::test(flavor = "current_thread")]
async fn snmpd_values_equal_net_snmp_v2c_and_v1() {
    let mut driver = SnmpDriver::open(SnmpDriverOptions::default()).unwrap();
    let agents = snmpd_agents();
    let communities: Vec<Vec<String>> = agents
        .iter()
        .map(|(_, c)| community_args(Version::V2c, c))
        .collect();
    let mut jobs: Vec<SnmpHostJob> = agents
        .iter()
        .map(|(a, c)| job(*a, c, agent_oids()))
        .collect();
    // Several requests per host: exercises chains.
    for j in &mut jobs {
        j.max_oids = 4;
    }
    let (res, report, exact) = poll_and_compare(&mut driver, &jobs, &communities).await;
    assert_eq!(report.stats.hosts_timed_out, 0, "{report:?}");
    assert!(
        exact >= 15 * jobs.len(),
        "most values compare exactly ({exact})"
    );
    // Typed fixtures of agent 1, explicitly.
    let r = &res[0];
    let base = agent_oids()
        .iter()
        .position(|o| o.to_string() == format!(".{PLAYPEN}.1.0"))
        .unwrap();
    assert_eq!(r[&base], Ok(VarValue::Integer(-42)));
    assert_eq!(r[&(base + 1)], Ok(VarValue::Gauge32(4_000_000_000)));
    assert_eq!(r[&(base + 2)], Ok(VarValue::Counter32(123_456)));
    assert_eq!(
        r[&(base + 3)],
        Ok(VarValue::OctetString(b"fixture agent 1".to_vec()))
    );
    assert_eq!(
        r[&(base + 4)],
        Ok(VarValue::Oid(".1.3.6.1.4.1.8072.3.2.10".parse().unwrap()))
    );
    assert_eq!(r[&(base + 6)], Ok(VarValue::NoSuchObject));

    // v1: OIDs that are exceptions in v2c, and Counter64 values (v1 has no such type),
    // make a v1 agent answer noSuchName; exactly those items fail, the rest is asked
    // again and equals net-snmp's.
    let missing: Vec<usize> = r
        .iter()
        .filter(
            |(_, v)| matches!(v, Ok(v) if v.is_exception() || matches!(v, VarValue::Counter64(_))),
        )
        .map(|(i, _)| *i)
        .collect();
    assert!(missing.len() >= 3, "{missing:?}");
    let (addr, community) = agents[0].clone();
    let all = agent_oids();
    let mut v1 = job(addr, &community, all.clone());
    v1.version = Version::V1;
    let (res, report) = run(&mut driver, std::slice::from_ref(&v1)).await;
    for (i, r) in &res[0] {
        if missing.contains(i) {
            let e = r.clone().unwrap_err();
            assert_eq!(e.reason, ErrorReason::Unsupported);
            assert!(e.text.contains("noSuchName"), "{}", e.text);
        } else {
            assert!(r.is_ok(), "v1 item {i}: {r:?}");
        }
    }
    assert!(
        report.stats.requests > missing.len() as u64,
        "the rest was re-sent: {report:?}"
    );
    let present: Vec<Oid> = all
        .iter()
        .enumerate()
        .filter(|(i, _)| !missing.contains(i))
        .map(|(_, o)| o.clone())
        .collect();
    let mut v1ok = job(addr, &community, present);
    v1ok.version = Version::V1;
    let (_, _, exact) = poll_and_compare(
        &mut driver,
        std::slice::from_ref(&v1ok),
        &[community_args(Version::V1, &community)],
    )
    .await;
    assert!(exact >= 15);
}

#[tokio::test(flavor = "current_thread")]
async fn wrong_community_is_a_timeout_not_a_value() {
    let agents = snmpd_agents();
    let (addr, community) = agents
        .iter()
        .find(|(_, c)| c != "public")
        .cloned()
        .expect("one agent with another community");
    let mut driver = SnmpDriver::open(SnmpDriverOptions::default()).unwrap();
    let mut wrong = job(addr, "public", vec!["1.3.6.1.2.1.1.5.0".parse().unwrap()]);
    wrong.timeout = Duration::from_millis(300);
    let right = job(addr, &community, vec!["1.3.6.1.2.1.1.5.0".parse().unwrap()]);
    let (res, _) = run(&mut driver, &[wrong, right]).await;
    assert_eq!(res[0][&0].clone().unwrap_err().reason, ErrorReason::Timeout);
    assert!(matches!(res[1][&0], Ok(VarValue::OctetString(_))));
}

/// An agent that never answers a request of more than 3 OIDs (instead of tooBig, as
/// some devices do): the driver still gets every value (the probe beside the first
/// retry shows the agent answers one OID: the size is halved, not the host given up),
/// and the next iteration asks at the learned size without a single timeout.
#[tokio::test(flavor = "current_thread")]
async fn an_agent_that_ignores_big_requests_gets_smaller_ones() {
    let port = common::fake_agent(|m| {
        (m.varbind_count() <= 3).then(|| {
            m.varbinds()
                .map(|vb| {
                    let last = vb.oid.to_owned().arcs().last().unwrap_or(0);
                    (vb.oid.to_owned(), VarValue::Integer(last.into()))
                })
                .collect()
        })
    });
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let oids: Vec<Oid> = (1..=8)
        .map(|i| format!("1.3.6.1.4.1.99999.{i}").parse().unwrap())
        .collect();
    let mut j = job(addr, "public", oids);
    j.timeout = Duration::from_millis(300);
    j.max_oids = 8;
    let jobs = [j];
    let mut driver = SnmpDriver::open(SnmpDriverOptions::default()).unwrap();
    for round in 0..2 {
        let (res, report) = run(&mut driver, &jobs).await;
        for (i, r) in &res[0] {
            assert_eq!(r, &Ok(VarValue::Integer(*i as i64 + 1)), "round {round}");
        }
        let st = report.stats;
        if round == 0 {
            assert!(st.silent_too_big >= 1 && st.probes_answered >= 1, "{st:?}");
        } else {
            assert_eq!((st.timeouts, st.probes), (0, 0), "{st:?}");
        }
    }
}

/// A v1 trap from 127.0.164.1 (a different PDU layout: refused by the decoder).
fn trap_v1() -> Vec<u8> {
    fn tlv(tag: u8, parts: &[&[u8]]) -> Vec<u8> {
        let body = parts.concat();
        assert!(body.len() < 128, "short form only");
        [&[tag, body.len() as u8][..], &body].concat()
    }
    let enterprise: Oid = "1.3.6.1.4.1.99999".parse().unwrap();
    let pdu = tlv(
        0xa4,
        &[
            &tlv(0x06, &[enterprise.as_ber()]),
            &tlv(0x40, &[&[127, 0, 164, 1]]),
            &tlv(0x02, &[&[6]]),
            &tlv(0x02, &[&[1]]),
            &tlv(0x43, &[&[0]]),
            &tlv(0x30, &[]),
        ],
    );
    tlv(0x30, &[&tlv(0x02, &[&[0]]), &tlv(0x04, &[b"public"]), &pdu])
}

/// A message of `version`, `community`, `pdu` and request-id `id` with `varbinds`.
fn crafted(
    version: Version,
    community: &[u8],
    pdu: snmp::PduType,
    id: i32,
    varbinds: &[(Oid, VarValue)],
) -> Vec<u8> {
    let mut out = Vec::new();
    snmp::encode_message(
        &mut out,
        version,
        community,
        pdu,
        id,
        0,
        0,
        varbinds.iter().map(|(o, v)| (o.as_ref(), v.as_ref())),
    );
    out
}

/// `n` OIDs of a private enterprise arc, `1.3.6.1.4.1.99999.<i><instance>`.
fn private_oids(n: u32, instance: &str) -> Vec<Oid> {
    (1..=n)
        .map(|i| format!("1.3.6.1.4.1.99999.{i}{instance}").parse().unwrap())
        .collect()
}

/// The value fake agents answer a [`private_oids`] OID with: its `<i>`.
fn value_of(o: &Oid) -> VarValue {
    VarValue::Integer(o.arcs().nth(7).unwrap().into())
}

/// A hostile agent on 127.0.164.1 answers only every second request it gets (a retry
/// gets what its first attempt did not), each answer with its varbinds in reverse
/// order, sent twice, after a copy from another port of its address; and with every
/// request it sends the poller garbage, a truncated answer, a v1 trap, the request
/// echoed, answers of another community, version or PDU (Report), one of an unknown
/// request-id, and its previous answer again (a late reply: of an earlier request, or
/// of the previous iteration). Beside it, a host whose port is closed (ICMP port
/// unreachable) and one whose agent answers in another community only. Two
/// iterations: every item of the hostile agent gets its own value once, the others
/// fail with the reason seen, and each counter saw its datagrams.
#[tokio::test(flavor = "current_thread")]
async fn hostile_datagrams_neither_panic_nor_misattribute_nor_starve() {
    use snmp::PduType;
    let oids = private_oids(6, ".0");
    let until = Some(Duration::from_secs(10));
    let other_port = std::net::UdpSocket::bind("127.0.164.1:0").unwrap();
    let (mut count, mut last) = (0usize, None::<Vec<u8>>);
    let hostile = common::raw_agent("127.0.164.1:0".parse().unwrap(), until, move |m, from| {
        count += 1;
        let id = m.request_id;
        let mut vbs: Vec<(Oid, VarValue)> = m
            .varbinds()
            .map(|vb| (vb.oid.to_owned(), value_of(&vb.oid.to_owned())))
            .collect();
        vbs.reverse();
        let good = crafted(Version::V2c, b"public", PduType::Response, id, &vbs);
        let mut out = vec![
            b"\x30\x03garbage".to_vec(),
            good[..good.len() / 2].to_vec(),
            trap_v1(),
            crafted(Version::V2c, b"public", PduType::GetRequest, id, &vbs),
            crafted(Version::V2c, b"private", PduType::Response, id, &vbs),
            crafted(Version::V1, b"public", PduType::Response, id, &vbs),
            crafted(Version::V2c, b"public", PduType::Report, id, &vbs),
            crafted(
                Version::V2c,
                b"public",
                PduType::Response,
                id ^ 0x4000_0000,
                &vbs,
            ),
        ];
        out.extend(last.take());
        if count % 2 == 0 {
            other_port.send_to(&good, from).unwrap();
            out.extend([good.clone(), good.clone()]);
            last = Some(good);
        }
        out
    });
    // Bound, then closed: nobody listens there.
    let closed = std::net::UdpSocket::bind("127.0.164.2:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let other_community = common::raw_agent("127.0.164.3:0".parse().unwrap(), until, |m, _| {
        let vbs: Vec<(Oid, VarValue)> = m
            .varbinds()
            .map(|vb| (vb.oid.to_owned(), VarValue::Integer(0)))
            .collect();
        vec![crafted(
            Version::V2c,
            b"private",
            PduType::Response,
            m.request_id,
            &vbs,
        )]
    });
    let mut jobs: Vec<SnmpHostJob> = [hostile, closed, other_community]
        .into_iter()
        .map(|a| job(a, "public", oids.clone()))
        .collect();
    for j in &mut jobs {
        j.timeout = Duration::from_millis(300);
        j.max_oids = 3;
    }
    let mut driver = SnmpDriver::open(SnmpDriverOptions::default()).unwrap();
    for round in 0..2 {
        let (res, report) = run(&mut driver, &jobs).await;
        for (i, r) in &res[0] {
            assert_eq!(r, &Ok(value_of(&oids[*i])), "round {round} item {i}");
        }
        let texts = [
            format!("Timeout while connecting to \"{closed}\". No SNMP response after 2 attempt(s): ICMP port unreachable from 127.0.164.2: nothing listens on that UDP port (the agent stopped, or listens on another port or address?)"),
            format!("Timeout while connecting to \"{other_community}\". No SNMP response taken after 2 attempt(s): replies carried another community, not taken"),
        ];
        for (r, text) in res[1..].iter().zip(texts) {
            for e in r.values() {
                let e = e.as_ref().unwrap_err();
                assert_eq!((e.reason, &e.text), (ErrorReason::Timeout, &text));
            }
        }
        let st = report.stats;
        assert_eq!(st.hosts_timed_out, 2, "round {round}: {st:?}");
        assert!(
            st.malformed >= 3
                && st.not_response >= 2
                && st.wrong_source >= 1
                && st.wrong_community >= 2
                && st.wrong_version >= 1
                && st.unknown_request_id >= 1
                && st.stale >= 1,
            "round {round}: {st:?}"
        );
    }
}

/// Fake agents on 127.0.194.x that answer GETs with varbinds other than those asked,
/// each request as it comes: one names every OID it answers with one more arc (`.0`),
/// one does so and adds a varbind not asked, one answers with no varbind. As in Zabbix
/// (which halves each request down to one OID and judges that answer): the first's
/// items get their values, each asked alone; the others' fail, not supported, in
/// Zabbix's words (too many, too few variable bindings). Before, the first's failed
/// with the OID its answer named, and the others' texts had no word of Zabbix's.
#[tokio::test(flavor = "current_thread")]
async fn answers_naming_other_oids_or_of_too_few_or_many_varbinds_go_as_in_zabbix() {
    let oids = private_oids(4, "");
    let renamed = |o: &Oid| -> Oid { format!("{o}.0").parse().unwrap() };
    let until = Some(Duration::from_secs(10));
    // `extra`: a varbind not asked after the others; `none`: no varbind at all.
    let agent = |at: &str, extra: bool, none: bool| {
        common::raw_agent(at.parse().unwrap(), until, move |m, _| {
            let mut vbs: Vec<(Oid, VarValue)> = m
                .varbinds()
                .map(|vb| {
                    let o = vb.oid.to_owned();
                    (renamed(&o), value_of(&o))
                })
                .collect();
            if extra {
                vbs.push(("1.3.6.1.2.1.1.3.0".parse().unwrap(), VarValue::TimeTicks(1)));
            }
            if none {
                vbs.clear();
            }
            vec![common::response(m, &vbs)]
        })
    };
    let agents = [
        agent("127.0.194.1:0", false, false),
        agent("127.0.194.2:0", true, false),
        agent("127.0.194.3:0", false, true),
    ];
    let jobs: Vec<SnmpHostJob> = agents
        .iter()
        .map(|&a| {
            let mut j = job(a, "public", oids.clone());
            j.max_oids = 4;
            j
        })
        .collect();
    let mut driver = SnmpDriver::open(SnmpDriverOptions::default()).unwrap();
    let (res, report) = run(&mut driver, &jobs).await;
    for (i, r) in &res[0] {
        assert_eq!(r, &Ok(value_of(&oids[*i])), "item {i}");
    }
    for (i, r) in &res[1] {
        let e = r.as_ref().unwrap_err();
        let text = format!(
            "Invalid SNMP response: too many variable bindings. (2 varbinds in the answer to this OID alone, none of them this OID: the first is {})",
            renamed(&oids[*i])
        );
        assert_eq!((e.reason, &e.text), (ErrorReason::Unsupported, &text));
    }
    for r in res[2].values() {
        let e = r.as_ref().unwrap_err();
        assert_eq!(
            (e.reason, e.text.as_str()),
            (
                ErrorReason::Unsupported,
                "Invalid SNMP response: too few variable bindings. (no varbind in the answer to this OID alone)"
            )
        );
    }
    let st = report.stats;
    assert_eq!(st.renamed, 4, "{st:?}");
    assert_eq!((st.items_ok, st.items_failed), (4, 8), "{st:?}");
    assert_eq!(st.hosts_timed_out, 0, "{st:?}");
}

#[tokio::test(flavor = "current_thread")]
async fn snmpsim_recordings_equal_net_snmp() {
    let addr = snmpsim_addr();
    let mut driver = SnmpDriver::open(SnmpDriverOptions::default()).unwrap();
    // community = recording name; cisco's private subtree has wrapped Hex-STRINGs.
    let plan = [
        ("public", ".1"),
        ("hp_perf", ".1"),
        ("bgp", ".1"),
        ("cisco_16_switch", ".1.3.6.1.4.1.9.5.1.3"),
    ];
    let mut jobs = Vec::new();
    let communities: Vec<Vec<String>> = plan
        .iter()
        .map(|(c, _)| community_args(Version::V2c, c))
        .collect();
    for (community, root) in plan {
        let oids = net_snmp_walk_oids(addr, community, root);
        assert!(oids.len() >= 10, "{community}: recording has data");
        let mut j = job(addr, community, oids);
        j.max_oids = 10;
        jobs.push(j);
    }
    let (_, report, exact) = poll_and_compare(&mut driver, &jobs, &communities).await;
    assert_eq!(report.stats.hosts_timed_out, 0, "{report:?}");
    assert!(exact > 1000, "compared {exact} values exactly");
}

/// Two drivers sharing one pacer stay under its rate together: 2 × 40 requests at 40
/// per second take about 2 s (each on a pacer of its own: about 1 s, the daemon's
/// `snmp.max_pps` doubled by `snmp_concurrent_iterations = 2`). A lower bound: a rate
/// cap cannot be beaten by a fast machine.
#[tokio::test(flavor = "current_thread")]
async fn drivers_sharing_a_pacer_share_its_rate() {
    let (addr, community) = snmpd_agents()[0].clone();
    let oids: Vec<Oid> = (0..40)
        .map(|_| "1.3.6.1.2.1.1.3.0".parse().unwrap())
        .collect();
    let mut j = job(addr, &community, oids);
    j.max_oids = 1;
    let jobs = [j];
    let opts = SnmpDriverOptions {
        max_pps: 40,
        ..Default::default()
    };
    let pacer = Arc::new(poller::icmp_driver::SharedPacer::new(
        40,
        poller::snmp_driver::SEND_BURST,
        Instant::now(),
    ));
    let mut a = SnmpDriver::open(opts).unwrap();
    let mut b = SnmpDriver::open(opts).unwrap();
    a.share_pacer(pacer.clone());
    b.share_pacer(pacer);
    let t = Instant::now();
    let ((ra, _), (rb, _)) = tokio::join!(run(&mut a, &jobs), run(&mut b, &jobs));
    let took = t.elapsed();
    assert!(ra[0].values().chain(rb[0].values()).all(Result::is_ok));
    assert!(
        took >= Duration::from_millis(1900),
        "80 requests at 40/s in {took:?}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn silent_hosts_cost_one_timeout_and_are_reported_once() {
    // Dropped on the input hook: the datagram leaves our socket (an output-hook drop
    // would fail sendto with EPERM instead) and nothing ever comes back.
    let _hole = common::NftTable::create(
        "chain in {\n type filter hook input priority 0; policy accept;\n \
         ip daddr 127.0.123.0/24 udp dport 161 drop\n}",
    );
    let agents = snmpd_agents();
    let mut driver = SnmpDriver::open(SnmpDriverOptions::default()).unwrap();
    let timeout = Duration::from_millis(1000);
    let retries = 1;
    let oids: Vec<Oid> = (1..=6)
        .map(|i| format!("{PLAYPEN}.{i}.0").parse().unwrap())
        .collect();
    let mut jobs = Vec::new();
    for (a, c) in &agents {
        jobs.push(job(*a, c, oids.clone()));
    }
    // Nothing listens: ICMP port unreachable comes back (ECONNREFUSED territory).
    for i in 1..=10u8 {
        jobs.push(job(
            SocketAddr::from(([127, 0, 122, i], 161)),
            "public",
            oids.clone(),
        ));
    }
    // Black-holed: no answer of any kind.
    for i in 1..=10u8 {
        jobs.push(job(
            SocketAddr::from(([127, 0, 123, i], 161)),
            "public",
            oids.clone(),
        ));
    }
    for j in &mut jobs {
        j.timeout = timeout;
        j.retries = retries;
        j.max_oids = 1; // 6 requests per live host, but a dead host only ever costs one
    }
    let live = agents.len();
    let t0 = Instant::now();
    let (res, report) = run(&mut driver, &jobs).await;
    let wall = t0.elapsed();
    let bound = timeout * (retries + 1);
    assert!(
        wall >= bound,
        "dead hosts waited their full timeout: {wall:?}"
    );
    assert!(
        wall <= bound + bound / 10 + Duration::from_millis(250),
        "iteration took {wall:?}, bound {bound:?}"
    );
    for (j, r) in res.iter().enumerate() {
        for (i, v) in r {
            if j < live {
                assert!(v.is_ok(), "live host {j} item {i}: {v:?}");
            } else {
                assert_eq!(
                    v.as_ref().unwrap_err().reason,
                    ErrorReason::Timeout,
                    "dead host {j}"
                );
            }
        }
    }
    assert_eq!(report.stats.hosts_timed_out, 20);
    // One request per dead host, plus its retry: not one per item.
    assert_eq!(report.stats.requests, (live * 6 + 20) as u64, "{report:?}");
    assert_eq!(report.stats.retries, 20);
}

/// A real snmpd started by the test (v4 or v6 address) whose `pass` script under
/// .1.3.6.1.4.1.8072.9999.8888 sleeps before answering: a slow device.
struct SlowAgent {
    child: Child,
    dir: PathBuf,
}

impl SlowAgent {
    fn start(addr: SocketAddr, delay: &str) -> SlowAgent {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "own-snmpd-{}-{}",
            std::process::id(),
            addr.port()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("slow.sh");
        std::fs::write(
            &script,
            format!("#!/bin/sh\nsleep {delay}\necho \"$2\"\necho integer\necho 7\n"),
        )
        .unwrap();
        Command::new("chmod")
            .arg("755")
            .arg(&script)
            .status()
            .unwrap();
        let conf = dir.join("snmpd.conf");
        std::fs::write(
            &conf,
            format!(
                "rocommunity public 127.0.0.0/8\nrocommunity6 public ::1/128\nmaster no\n\
                 pass .1.3.6.1.4.1.8072.9999.8888 {}\n",
                script.display()
            ),
        )
        .unwrap();
        let child = Command::new("/usr/sbin/snmpd")
            .args(["-f", "-Lf"])
            .arg(dir.join("snmpd.log"))
            .args(["-C", "-c"])
            .arg(&conf)
            .args(["-p"])
            .arg(dir.join("snmpd.pid"))
            .arg(if addr.is_ipv6() {
                format!("udp6:{addr}")
            } else {
                format!("udp:{addr}")
            })
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start snmpd");
        let agent = SlowAgent { child, dir };
        // Ready when it answers a plain GET (bounded wait).
        let t = Instant::now();
        loop {
            let ok = Command::new("snmpget")
                .args(["-m", "", "-t", "0.3", "-r", "0", "-v2c", "-c", "public"])
                .arg(if addr.is_ipv6() {
                    format!("udp6:{addr}")
                } else {
                    addr.to_string()
                })
                .arg(".1.3.6.1.2.1.1.3.0")
                .output()
                .map(|o| o.status.success())
                .unwrap_or(false);
            if ok {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "own snmpd on {addr} did not start"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        agent
    }
}

impl Drop for SlowAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test(flavor = "current_thread")]
async fn one_slow_host_does_not_delay_the_others() {
    let slow_addr = SocketAddr::from(([127, 0, 124, 1], 16161));
    let _slow = SlowAgent::start(slow_addr, "1");
    let agents = snmpd_agents();
    let mut driver = SnmpDriver::open(SnmpDriverOptions::default()).unwrap();
    let mut jobs = vec![job(
        slow_addr,
        "public",
        vec!["1.3.6.1.4.1.8072.9999.8888.1.0".parse().unwrap()],
    )];
    jobs[0].timeout = Duration::from_secs(3);
    let fast_oids: Vec<Oid> = (1..=6)
        .map(|i| format!("{PLAYPEN}.{i}.0").parse().unwrap())
        .collect();
    for (a, c) in &agents {
        let mut j = job(*a, c, fast_oids.clone());
        j.max_oids = 1; // a chain of 6 sequential requests per fast host
        jobs.push(j);
    }
    let t0 = Instant::now();
    let mut arrival: HashMap<(usize, usize), Duration> = HashMap::new();
    let mut slow_value = None;
    let report = driver
        .run_iteration(&jobs, |j, i, r| {
            arrival.insert((j, i), t0.elapsed());
            if j == 0 {
                slow_value = Some(r);
            }
        })
        .await;
    assert_eq!(slow_value, Some(Ok(VarValue::Integer(7))), "{report:?}");
    let slow_at = arrival[&(0, 0)];
    assert!(
        slow_at >= Duration::from_millis(900),
        "slow agent answered after its sleep: {slow_at:?}"
    );
    let last_fast = arrival
        .iter()
        .filter(|((j, _), _)| *j != 0)
        .map(|(_, t)| *t)
        .max()
        .unwrap();
    assert_eq!(arrival.len(), 1 + 6 * agents.len());
    assert!(
        last_fast < slow_at,
        "all fast chains ({last_fast:?}) finished before the slow host ({slow_at:?})"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn ipv6_agent_through_the_v6_socket() {
    let v6: SocketAddr = "[::1]:16163".parse().unwrap();
    let _agent = SlowAgent::start(v6, "0");
    let mut driver = SnmpDriver::open(SnmpDriverOptions::default()).unwrap();
    assert!(
        driver.local_addrs().iter().any(|a| a.is_ipv6()),
        "a v6 socket is open"
    );
    let oids: Vec<Oid> = vec![
        "1.3.6.1.2.1.1.5.0".parse().unwrap(),
        "1.3.6.1.4.1.8072.9999.8888.1.0".parse().unwrap(),
    ];
    let jobs = [job(v6, "public", oids)];
    let before = net_snmp_get_v6(v6, &jobs[0].oids);
    let (res, report) = run(&mut driver, &jobs).await;
    assert_eq!(report.stats.hosts_timed_out, 0, "{report:?}");
    assert_eq!(res[0][&1], Ok(VarValue::Integer(7)));
    assert_eq!(
        format!("{}", res[0][&0].clone().unwrap()),
        before[".1.3.6.1.2.1.1.5.0"]
    );
}

fn net_snmp_get_v6(addr: SocketAddr, oids: &[Oid]) -> BTreeMap<String, String> {
    let o = Command::new("snmpget")
        .args([
            "-m", "", "-On", "-Oe", "-t", "2", "-r", "1", "-v2c", "-c", "public",
        ])
        .arg(format!("udp6:{addr}"))
        .args(oids.iter().map(|o| o.to_string()))
        .output()
        .expect("run snmpget");
    assert!(
        o.status.success(),
        "snmpget failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let mut out = BTreeMap::new();
    parse_records(&String::from_utf8_lossy(&o.stdout), &mut out);
    out
}

/// The SNMPv3 users of examples/snmpd/agent.conf.in (every agent has them):
/// (name, authentication, privacy), protocols as net-snmp spells them.
const V3_USERS: [(&str, Option<&str>, Option<&str>); 8] = [
    ("np-noauth", None, None),
    ("np-sha", Some("SHA"), None),
    ("np-md5des", Some("MD5"), Some("DES")),
    ("np-shaaes", Some("SHA"), Some("AES")),
    ("np-sha256", Some("SHA-256"), Some("AES")),
    ("np-sha512", Some("SHA-512"), Some("AES")),
    ("np-aes192", Some("SHA"), Some("AES-192")),
    ("np-aes256", Some("MD5"), Some("AES-256")),
];

/// A v3 job for `name`, with net-snmp's options for the same user.
fn v3_job(
    addr: SocketAddr,
    (name, auth, privacy): (&str, Option<&str>, Option<&str>),
    auth_pass: &str,
    oids: Vec<Oid>,
) -> (SnmpHostJob, Vec<String>) {
    let user = snmp::v3::UsmUser::new(
        name,
        auth.map(|a| (a.parse().unwrap(), auth_pass)),
        privacy.map(|p| (p.parse().unwrap(), V3_PRIV_PASS)),
    )
    .unwrap();
    let mut j = SnmpHostJob::new_v3(addr, Arc::new(user.clone()), oids);
    j.timeout = Duration::from_secs(2);
    j.retries = 1;
    let mut args: Vec<String> = vec!["-v3".into(), "-u".into(), name.into()];
    args.extend(["-l".into(), user.level().as_str().into()]);
    if let Some(a) = auth {
        args.extend(["-a".into(), a.into(), "-A".into(), auth_pass.into()]);
    }
    if let Some(p) = privacy {
        args.extend(["-x".into(), p.into(), "-X".into(), V3_PRIV_PASS.into()]);
    }
    (j, args)
}

#[tokio::test(flavor = "current_thread")]
async fn snmpv3_at_every_level_and_protocol_equals_net_snmp() {
    let mut driver = SnmpDriver::open(SnmpDriverOptions::default()).unwrap();
    let agents = snmpd_agents();
    // Every user on its own agent (the daemon polls a host as one user), round robin.
    let (jobs, security): (Vec<SnmpHostJob>, Vec<Vec<String>>) = V3_USERS
        .iter()
        .enumerate()
        .map(|(i, u)| {
            let (mut j, s) = v3_job(agents[i % agents.len()].0, *u, V3_AUTH_PASS, agent_oids());
            j.max_oids = 4;
            (j, s)
        })
        .unzip();
    let (res, report, exact) = poll_and_compare(&mut driver, &jobs, &security).await;
    let st = &report.stats;
    assert_eq!((st.hosts_timed_out, st.not_authentic), (0, 0), "{report:?}");
    assert!(
        exact >= 15 * jobs.len(),
        "most values compare exactly ({exact})"
    );
    for (k, r) in res.iter().enumerate() {
        let fixture = format!("fixture agent {}", k % agents.len() + 1);
        assert!(
            r.values()
                .any(|v| v == &Ok(VarValue::OctetString(fixture.clone().into_bytes()))),
            "{}: {r:?}",
            V3_USERS[k].0
        );
    }
    // One discovery per agent's engine, then the requests (several per host).
    assert_eq!(st.discoveries, jobs.len() as u64);
    assert!(st.requests >= 6 * jobs.len() as u64, "{report:?}");
    for j in &jobs {
        let e = driver.memory().engine(&j.addr).expect("engine kept");
        let n = agents.iter().position(|(a, _)| *a == j.addr).unwrap() + 1;
        let mut want = b"\x80\x00\x1f\x88\x04".to_vec();
        want.extend(format!("netpoller-agent-{n}").bytes());
        assert_eq!(
            e.id(),
            &want[..],
            "net-snmp's engine ID for `engineID netpoller-agent-{n}`"
        );
    }
    // The next iteration needs no discovery: the engines and clocks were kept.
    let (res2, report2) = run(&mut driver, &jobs).await;
    assert_eq!(report2.stats.discoveries, 0, "{report2:?}");
    for (first, again) in res.iter().zip(&res2) {
        let ok = |r: &BTreeMap<usize, Result<VarValue, ItemError>>| {
            r.iter().map(|(i, v)| (*i, v.is_ok())).collect::<Vec<_>>()
        };
        assert_eq!(ok(first), ok(again));
    }
    assert_eq!(report2.stats.hosts_timed_out, 0);
}

#[tokio::test(flavor = "current_thread")]
async fn snmpv3_refusals_fail_the_items_with_the_agents_reason_without_waiting() {
    let mut driver = SnmpDriver::open(SnmpDriverOptions::default()).unwrap();
    let addr = snmpd_agents()[0].0;
    let oids = || agent_oids()[..6].to_vec();
    let (wrong_key, _) = v3_job(addr, V3_USERS[3], "not-the-auth-pass", oids());
    let (unknown, _) = v3_job(addr, ("np-nobody", Some("SHA"), None), V3_AUTH_PASS, oids());
    // np-sha has no privacy key on the agent: asked at authPriv, it refuses the level.
    let (too_high, _) = v3_job(
        addr,
        ("np-sha", Some("SHA"), Some("AES")),
        V3_AUTH_PASS,
        oids(),
    );
    let jobs = [wrong_key, unknown, too_high];
    let t = Instant::now();
    let (res, report) = run(&mut driver, &jobs).await;
    let counters = [
        "usmStatsWrongDigests",
        "usmStatsUnknownUserNames",
        "usmStatsUnsupportedSecLevels",
    ];
    for (r, counter) in res.iter().zip(counters) {
        for v in r.values() {
            let e = v.clone().unwrap_err();
            assert_eq!(e.reason, ErrorReason::Unsupported);
            assert!(e.text.contains(counter), "{counter}: {}", e.text);
            // The passphrases, not "pass": net-snmp's words for a wrong digest, which
            // the text starts with as Zabbix's does, say "incorrect password".
            for secret in ["not-the-auth-pass", V3_AUTH_PASS, V3_PRIV_PASS] {
                assert!(!e.text.contains(secret), "no secret in {}", e.text);
            }
        }
    }
    assert_eq!(report.stats.hosts_timed_out, 0, "{report:?}");
    // The agent's report ends the host: no timeout (2 s) is waited for.
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
}

/// The SHA/AES user of the agents with a privacy passphrase not theirs.
fn wrong_privacy_user() -> Arc<snmp::v3::UsmUser> {
    let (name, auth, privacy) = V3_USERS[3];
    let user = snmp::v3::UsmUser::new(
        name,
        auth.map(|a| (a.parse().unwrap(), V3_AUTH_PASS)),
        privacy.map(|p| (p.parse().unwrap(), "not-the-priv-pass")),
    )
    .unwrap();
    Arc::new(user)
}

#[tokio::test(flavor = "current_thread")]
async fn a_wrong_privacy_passphrase_times_out_and_says_it_may_be_that() {
    // snmpd drops a request it cannot decrypt, without a Report (net-snmp's snmpget
    // shows "Timeout" too): the item's error names the likely cause.
    let mut driver = SnmpDriver::open(SnmpDriverOptions::default()).unwrap();
    let addr = snmpd_agents()[0].0;
    let user = wrong_privacy_user();
    let mut j = SnmpHostJob::new_v3(addr, user, agent_oids()[..2].to_vec());
    j.timeout = Duration::from_millis(300);
    j.retries = 0;
    let (res, report) = run(&mut driver, &[j]).await;
    assert_eq!(report.stats.hosts_timed_out, 1, "{report:?}");
    for v in res[0].values() {
        let e = v.clone().unwrap_err();
        assert_eq!(e.reason, ErrorReason::Timeout);
        assert!(e.text.contains("wrong privacy passphrase"), "{}", e.text);
        assert!(
            !e.text.contains("not-the-priv-pass"),
            "no secret in {}",
            e.text
        );
    }
}

/// An authPriv agent drops a request it cannot decrypt as a down one drops all: the
/// engine discovery sent beside the retry (it carries no key) tells them apart. snmpd
/// with a wrong privacy passphrase answers it: the hint, made certain; a fake agent on
/// 127.0.205.1 that answered the first discovery and then goes silent does not: the
/// timeout says the discovery went unanswered, no hint. Both had the same uncertain
/// hint.
#[tokio::test(flavor = "current_thread")]
async fn a_wrong_privacy_passphrase_is_told_from_an_agent_gone_silent() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let mut driver = SnmpDriver::open(SnmpDriverOptions::default()).unwrap();
    let agent = snmpd_agents()[0].0;
    let user = wrong_privacy_user();
    let answering = Arc::new(AtomicBool::new(true));
    let engine = snmp::v3::Engine::new(user.clone(), b"np-v3probe", 1, 0, Instant::now());
    let fake =
        common::v3_agent_answering_discovery_only("127.0.205.1:0", engine, answering.clone());
    let jobs: Vec<SnmpHostJob> = [agent, fake]
        .into_iter()
        .map(|addr| {
            let mut j = SnmpHostJob::new_v3(addr, user.clone(), agent_oids()[..2].to_vec());
            j.timeout = Duration::from_millis(300);
            j.retries = 1;
            j
        })
        .collect();
    let timeout = |at: SocketAddr| {
        format!("Timeout while connecting to \"{at}\". No SNMP response after 2 attempt(s)")
    };
    let answered =
        " (SNMPv3 authPriv: the agent answers its engine discovery: a wrong privacy passphrase or protocol?)";
    let unanswered = " (SNMPv3: the engine discovery, which needs no passphrase, went unanswered)";
    // Both answer the discovery beside the retry; then, its engine known, the fake
    // agent goes silent.
    for (fake_says, answered_probes) in [(answered, 2), (unanswered, 1)] {
        let (res, report) = run(&mut driver, &jobs).await;
        assert_eq!(report.stats.engine_probes, 2, "{report:?}");
        assert_eq!(
            report.stats.engine_probes_answered, answered_probes,
            "{report:?}"
        );
        let wants = [timeout(agent) + answered, timeout(fake) + fake_says];
        for (items, want) in res.iter().zip(wants) {
            for v in items.values() {
                let got = v.clone().unwrap_err();
                assert_eq!(got, ItemError::new(ErrorReason::Timeout, &want));
            }
        }
        answering.store(false, Ordering::SeqCst);
    }
}

/// SNMPv3 answers that fail the poller's checks (signed with another authentication
/// key: a wrong MAC; authentic but encrypted under another privacy key; authentic and
/// readable, but not a Response) are not taken, and the host's timeout says which check
/// they failed, not "no response" (an agent that answers would read as a dead one),
/// without telling any key.
#[tokio::test(flavor = "current_thread")]
async fn snmpv3_replies_failing_authentication_or_decryption_say_so_on_timeout() {
    use snmp::PduType::{GetRequest, Response};
    let user = |auth: &str, privacy: Option<&str>| {
        snmp::v3::UsmUser::new(
            "np-shaaes",
            Some(("SHA".parse().unwrap(), auth)),
            privacy.map(|p| ("AES".parse().unwrap(), p)),
        )
        .unwrap()
    };
    let signed = Arc::new(user(V3_AUTH_PASS, None));
    let wrong_mac = common::v3_agent_answering_as(
        "127.0.181.1:0",
        &signed,
        user("another-auth-pass", None),
        Response,
    );
    let private = Arc::new(user(V3_AUTH_PASS, Some(V3_PRIV_PASS)));
    let wrong_privacy = common::v3_agent_answering_as(
        "127.0.181.2:0",
        &private,
        user(V3_AUTH_PASS, Some("another-priv-pass")),
        Response,
    );
    // The request echoed, in effect: authentic and readable, but no Response.
    let echo = common::v3_agent_answering_as(
        "127.0.186.1:0",
        &private,
        user(V3_AUTH_PASS, Some(V3_PRIV_PASS)),
        GetRequest,
    );
    let jobs: Vec<SnmpHostJob> = [(wrong_mac, signed), (wrong_privacy, private.clone())]
        .into_iter()
        .chain([(echo, private)])
        .map(|(addr, user)| {
            let mut j = SnmpHostJob::new_v3(addr, user, agent_oids()[..2].to_vec());
            j.timeout = Duration::from_millis(300);
            j.retries = 1;
            j
        })
        .collect();
    let mut driver = SnmpDriver::open(SnmpDriverOptions::default()).unwrap();
    let (res, report) = run(&mut driver, &jobs).await;
    let texts = [
        format!("Timeout while connecting to \"{wrong_mac}\". No SNMP response taken after 2 attempt(s): replies failed SNMPv3 authentication (another authentication key or protocol, or another agent with the same engine ID?), not taken"),
        format!("Timeout while connecting to \"{wrong_privacy}\". No SNMP response taken after 2 attempt(s): replies authenticated but could not be decrypted (another privacy key or protocol?), not taken"),
        format!("Timeout while connecting to \"{echo}\". No SNMP response taken after 2 attempt(s): replies were GetRequest PDUs instead of Responses, not taken"),
    ];
    for (r, text) in res.iter().zip(texts) {
        for e in r.values() {
            let e = e.as_ref().unwrap_err();
            assert_eq!((e.reason, &e.text), (ErrorReason::Timeout, &text));
            assert!(!e.text.contains("pass"), "no secret in {}", e.text);
        }
    }
    let st = report.stats;
    assert_eq!(st.hosts_timed_out, 3, "{st:?}");
    // Each attempt was answered: dropped as not authentic (the wrong MAC), as
    // unreadable (what another privacy key decrypts to) or as not a Response.
    assert!(st.not_authentic >= 2 && st.malformed >= 2, "{st:?}");
    assert!(st.not_response >= 2, "{st:?}");
}

/// A real snmpd of the test's own that keeps its state as a device does: engine ID,
/// snmpEngineBoots and its users' localized keys in a persistent folder it reads back
/// at each start (no `-C`; `SNMPCONFPATH` names only its config and that folder), so a
/// restart is a reboot (boots + 1, engineTime from 0) and a restart without the folder
/// a replacement (a new engine ID). Killed, its folder removed, on drop.
struct RebootingAgent {
    addr: SocketAddr,
    dir: PathBuf,
    child: Option<Child>,
}

impl RebootingAgent {
    fn new(addr: SocketAddr) -> RebootingAgent {
        // Its address in the name: several agents of one test process (cargo test runs
        // the tests as its threads) have a folder each.
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "rebooting-snmpd-{}-{}-{}",
            std::process::id(),
            addr.ip(),
            addr.port()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("conf")).unwrap();
        std::fs::write(
            dir.join("conf/snmpd.conf"),
            format!(
                "rocommunity public 127.0.0.0/8\nmaster no\n\
                 createUser np-shaaes SHA {V3_AUTH_PASS} AES {V3_PRIV_PASS}\n\
                 createUser np-md5 MD5 {V3_AUTH_PASS}\n\
                 rouser np-shaaes priv .1\nrouser np-md5 auth .1\n"
            ),
        )
        .unwrap();
        RebootingAgent {
            addr,
            dir,
            child: None,
        }
    }

    fn start(&mut self) {
        let state = self.dir.join("state");
        let child = Command::new("/usr/sbin/snmpd")
            .env(
                "SNMPCONFPATH",
                format!("{}:{}", self.dir.join("conf").display(), state.display()),
            )
            .env("SNMP_PERSISTENT_DIR", &state)
            .args(["-f", "-Lf"])
            .arg(self.dir.join("snmpd.log"))
            .arg("-p")
            .arg(self.dir.join("snmpd.pid"))
            .arg(format!("udp:{}", self.addr))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start snmpd");
        self.child = Some(child);
        // Ready when it answers a plain GET (bounded wait).
        let t = Instant::now();
        while !Command::new("snmpget")
            .args(["-m", "", "-t", "0.3", "-r", "0", "-v2c", "-c", "public"])
            .arg(self.addr.to_string())
            .arg(".1.3.6.1.2.1.1.3.0")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "own snmpd on {} did not start",
                self.addr
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGTERM, as a shutdown: snmpd saves its state, and is waited for.
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) on the pid of a child not waited for yet.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            child.wait().unwrap();
        }
    }

    /// The device reboots: its state kept, so the same engine ID and one boot more.
    fn reboot(&mut self) {
        self.stop();
        self.start();
    }

    /// The device is replaced: its successor has no state, so another engine ID.
    fn replace(&mut self) {
        self.stop();
        std::fs::remove_dir_all(self.dir.join("state")).unwrap();
        self.start();
    }
}

impl Drop for RebootingAgent {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One iteration of `jobs` (snmpEngineID.0, snmpEngineBoots.0, sysUpTime.0 each), every
/// value read: the engine ID and boots they all read alike, and the iteration's stats.
async fn engine_and_boots(
    driver: &mut SnmpDriver,
    jobs: &[SnmpHostJob],
) -> ((Vec<u8>, i64), snmp::Stats) {
    let (res, report) = run(driver, jobs).await;
    let read: Vec<(Vec<u8>, i64)> = res
        .iter()
        .map(|r| match (&r[&0], &r[&1], &r[&2]) {
            (
                Ok(VarValue::OctetString(id)),
                Ok(VarValue::Integer(boots)),
                Ok(VarValue::TimeTicks(_)),
            ) => (id.clone(), *boots),
            other => panic!("{other:?} ({report:?})"),
        })
        .collect();
    assert!(read.iter().all(|r| *r == read[0]), "{read:?}");
    assert_eq!(report.stats.hosts_timed_out, 0, "{report:?}");
    (read[0].clone(), report.stats)
}

/// A real net-snmp agent rebooted (its state kept: snmpEngineBoots + 1, engineTime
/// from 0) and then replaced (a new engine ID) between iterations: the driver's next
/// iteration gets every value, v3 (authPriv SHA + AES, authNoPriv MD5) as v2c, from the
/// agent's Reports (notInTimeWindow: its clock is taken; unknownEngineID: it is
/// discovered again), with the engine it kept in between.
#[tokio::test(flavor = "current_thread")]
async fn snmpv3_polls_resume_after_the_agent_reboots_or_is_replaced() {
    let addr = SocketAddr::from(([127, 0, 124, 12], 16161));
    let mut agent = RebootingAgent::new(addr);
    agent.start();
    // snmpEngineID.0, snmpEngineBoots.0, sysUpTime.0
    let oids: Vec<Oid> = [
        "1.3.6.1.6.3.10.2.1.1.0",
        "1.3.6.1.6.3.10.2.1.2.0",
        "1.3.6.1.2.1.1.3.0",
    ]
    .iter()
    .map(|o| o.parse().unwrap())
    .collect();
    let jobs = [
        v3_job(addr, V3_USERS[3], V3_AUTH_PASS, oids.clone()).0,
        v3_job(
            addr,
            ("np-md5", Some("MD5"), None),
            V3_AUTH_PASS,
            oids.clone(),
        )
        .0,
        job(addr, "public", oids),
    ];
    let mut driver = SnmpDriver::open(SnmpDriverOptions::default()).unwrap();
    let not_in_time = snmp::v3::ReportKind::NotInTimeWindow.index();
    let unknown_engine = snmp::v3::ReportKind::UnknownEngineId.index();

    let ((engine, boots), st) = engine_and_boots(&mut driver, &jobs).await;
    assert_eq!(st.discoveries, 2, "{st:?}");

    // Rebooted: the same engine, one boot more; each user's request is out of its time
    // window, and the authenticated Report's clock lets it through. No discovery.
    agent.reboot();
    let ((engine2, boots2), st) = engine_and_boots(&mut driver, &jobs).await;
    assert_eq!((&engine2, boots2), (&engine, boots + 1));
    assert_eq!(st.discoveries, 0, "{st:?}");
    assert_eq!(st.refusals[not_in_time], 2, "{st:?}");

    // Replaced: another engine ID, boots from 1; each user discovers it again.
    agent.replace();
    let ((engine3, boots3), st) = engine_and_boots(&mut driver, &jobs).await;
    assert_ne!(engine3, engine);
    assert_eq!(boots3, 1);
    assert_eq!(st.refusals[unknown_engine], 2, "{st:?}");
    assert_eq!(st.discoveries, 2, "{st:?}");
    let kept = driver.memory().engine(&addr).expect("engine kept");
    assert_eq!(kept.id(), &engine3[..]);

    // And the iteration after goes straight through: no Report, no discovery.
    let (_, st) = engine_and_boots(&mut driver, &jobs).await;
    assert_eq!((st.reports, st.discoveries), (0, 0), "{st:?}");
}

/// A UDP relay from a port of its own to `agent`, two threads of the test: each
/// datagram of its client goes on to the agent (`before(n)` called first for the
/// client's `n`th, from 1: the datagram waits for it) and each of the agent's back to
/// the client. A client's datagram whose agent is down (restarting) is lost as it
/// would be on the wire. Its threads end on drop.
struct Relay {
    addr: SocketAddr,
    /// The client's datagrams so far.
    sent: Arc<std::sync::atomic::AtomicUsize>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Relay {
    fn new(
        at: std::net::IpAddr,
        agent: SocketAddr,
        mut before: impl FnMut(usize) + Send + 'static,
    ) -> Relay {
        use std::sync::atomic::Ordering::Relaxed;
        use std::sync::Mutex;
        assert!(at.is_loopback() && agent.ip().is_loopback());
        // Unconnected: an ICMP port unreachable from an agent restarting is not told
        // to the next send, which it would fail.
        let front = Arc::new(std::net::UdpSocket::bind((at, 0)).unwrap());
        let back = Arc::new(std::net::UdpSocket::bind((at, 0)).unwrap());
        for s in [&front, &back] {
            s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        }
        let addr = front.local_addr().unwrap();
        let client: Arc<Mutex<Option<SocketAddr>>> = Arc::default();
        let sent: Arc<std::sync::atomic::AtomicUsize> = Arc::default();
        let stop: Arc<std::sync::atomic::AtomicBool> = Arc::default();
        let requests = {
            let (front, back) = (front.clone(), back.clone());
            let (client, sent, stop) = (client.clone(), sent.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut buf = [0u8; 65_536];
                while !stop.load(Relaxed) {
                    let Ok((n, from)) = front.recv_from(&mut buf) else {
                        continue;
                    };
                    *client.lock().unwrap() = Some(from);
                    before(sent.fetch_add(1, Relaxed) + 1);
                    let _ = back.send_to(&buf[..n], agent);
                }
            })
        };
        let answers = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 65_536];
                while !stop.load(Relaxed) {
                    let Ok((n, from)) = back.recv_from(&mut buf) else {
                        continue;
                    };
                    let to = *client.lock().unwrap();
                    if let (true, Some(to)) = (from == agent, to) {
                        let _ = front.send_to(&buf[..n], to);
                    }
                }
            })
        };
        Relay {
            addr,
            sent,
            stop,
            threads: vec![requests, answers],
        }
    }

    fn sent(&self) -> usize {
        self.sent.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// `netpoller snmp walk` of the system group through `relay` (two rows per GETBULK) as
/// SNMPv3 user `security` (net-snmp's options): its lines, a TimeTicks value cut to its
/// type (sysUpTime and sysORUpTime move; the rows and other values do not).
fn walk_system_group(relay: &Relay, security: &[&str]) -> Vec<String> {
    let mut cmd = common::netpoller();
    // A long timeout and no retry: the datagram the relay holds while the agent
    // restarts is answered in one attempt, so the requests are counted exactly.
    cmd.args(["snmp", "walk", "-v", "3", "-t", "60s", "-r", "0"])
        .args(["--max-repetitions", "2"])
        .args(security)
        .arg(relay.addr.to_string())
        .arg("1.3.6.1.2.1.1");
    let (out, _) = common::succeeds(&mut cmd);
    out.lines()
        .map(|l| match l.split_once("Timeticks: ") {
            Some((head, _)) => format!("{head}Timeticks"),
            None => l.to_string(),
        })
        .collect()
}

/// A real net-snmp agent rebooted (its state kept: engineBoots + 1), and then replaced
/// (a new engine ID), in the middle of a `netpoller snmp walk` over SNMPv3 (authPriv
/// SHA + AES, authNoPriv MD5): each walk ends with the rows of a walk of the untouched
/// agent, the request the agent refused sent again after its clock was taken from its
/// notInTimeWindow Report (one request more) or its engine discovered again after its
/// unknownEngineID Report (a discovery and the request: two more). Deterministic: a
/// relay holds the walk's fourth datagram (its third GETBULK) while the agent restarts.
/// Before the walker rediscovered an engine, the replaced agent's Report failed the walk.
#[test]
fn snmpv3_walks_resume_after_the_agent_reboots_or_is_replaced_mid_walk() {
    use std::sync::Mutex;
    let addr = SocketAddr::from(([127, 0, 215, 1], 16161));
    let agent = Arc::new(Mutex::new(RebootingAgent::new(addr)));
    agent.lock().unwrap().start();
    // What the relay does to the agent before its datagram number N (counted from its
    // start): the walk in progress's 4th.
    type Restart = Option<(usize, fn(&mut RebootingAgent))>;
    let restart: Arc<Mutex<Restart>> = Arc::default();
    let relay = {
        let (agent, restart) = (agent.clone(), restart.clone());
        Relay::new([127, 0, 215, 2].into(), addr, move |n| {
            let planned = restart.lock().unwrap().take_if(|(at, _)| *at == n);
            if let Some((_, restart)) = planned {
                restart(&mut agent.lock().unwrap());
            }
        })
    };
    let users: [&[&str]; 2] = [
        V3_OPTIONS[0],
        &[
            "-u",
            "np-md5",
            "-l",
            "authNoPriv",
            "-a",
            "MD5",
            "-A",
            V3_AUTH_PASS,
        ],
    ];
    for security in users {
        // The untouched agent's rows, and the walk's datagrams: its discovery and a
        // GETBULK per two rows.
        let walk = |what: Option<fn(&mut RebootingAgent)>| {
            let before = relay.sent();
            *restart.lock().unwrap() = what.map(|f| (before + 4, f));
            let rows = walk_system_group(&relay, security);
            (rows, relay.sent() - before)
        };
        let (rows, requests) = walk(None);
        assert!(
            rows.len() > 10 && rows[0].starts_with(".1.3.6.1.2.1.1.1.0 = STRING: "),
            "{rows:#?}"
        );
        assert!(requests > 4, "{requests}: the 4th datagram is in the walk");
        let (rebooted, n) = walk(Some(RebootingAgent::reboot));
        assert_eq!(rebooted, rows, "rebooted: {security:?}");
        assert_eq!(n, requests + 1, "rebooted: {security:?}");
        let (replaced, n) = walk(Some(RebootingAgent::replace));
        assert_eq!(replaced, rows, "replaced: {security:?}");
        assert_eq!(n, requests + 2, "replaced: {security:?}");
    }
}

/// A plan of one SNMP item per host, `h0`, `h1`, ... for `hosts` (agent address,
/// community, OID, timeout), each due once.
fn snmp_plan(
    hosts: &[(SocketAddr, &str, &str, Duration)],
) -> (poller::plan::Plan, Vec<poller::scheduler::Due>) {
    use poller::plan::{HostSpec, ItemKind, ItemSpec, SnmpParams, SnmpVersion};
    let specs = hosts
        .iter()
        .enumerate()
        .map(|(i, (addr, community, oid, timeout))| {
            let name = format!("h{i}");
            let key = format!("snmp[{oid}]");
            HostSpec {
                name: name.as_str().into(),
                ip: addr.ip(),
                snmp: Some(Arc::new(SnmpParams {
                    version: SnmpVersion::V2c,
                    community: (*community).into(),
                    usm: None,
                    port: addr.port(),
                    timeout: *timeout,
                    retries: 0,
                    max_oids_per_request: 16,
                    max_inflight_per_host: 1,
                })),
                items: vec![ItemSpec {
                    itemid: poller::plan::derive_itemid(&name, &key),
                    key: key.as_str().into(),
                    value_type: poller::value::ValueType::Str,
                    interval_ms: 60_000,
                    kind: ItemKind::Snmp {
                        oid: oid.parse().unwrap(),
                    },
                    pre: None,
                }],
            }
        })
        .collect();
    common::plan_due_once(specs)
}

/// One SNMP iteration, with the daemon's code, of [`snmp_plan`]'s hosts, its samples
/// sent to `tx`; `host_done` gets the names of the hosts handed back while it runs.
async fn snmp_iterate(
    hosts: &[(SocketAddr, &str, &str, Duration)],
    tx: tokio::sync::mpsc::Sender<poller::engine::Samples>,
    host_done: &mut (dyn FnMut(Vec<String>) + Send),
) -> poller::engine::Emitter {
    let (emitter, sum) = snmp_iterate_until(hosts, tx, host_done, std::future::pending()).await;
    assert_eq!(sum.items, hosts.len());
    emitter
}

/// [`snmp_iterate`], the daemon stopping when `stop` completes; and its summary.
async fn snmp_iterate_until(
    hosts: &[(SocketAddr, &str, &str, Duration)],
    tx: tokio::sync::mpsc::Sender<poller::engine::Samples>,
    host_done: &mut (dyn FnMut(Vec<String>) + Send),
    stop: impl std::future::Future<Output = ()>,
) -> (poller::engine::Emitter, poller::daemon::IterationSummary) {
    let (plan, dues) = snmp_plan(hosts);
    let mut driver = SnmpDriver::open(SnmpDriverOptions::default()).unwrap();
    let mut emitter = poller::engine::Emitter::new(tx, Default::default());
    let metrics = poller::daemon::EngineMetrics::default();
    let mut done = |idxs: &[usize]| host_done(common::due_host_names(&plan, &dues, idxs));
    let sum = poller::daemon::snmp_iteration(
        &mut driver,
        &plan,
        &dues,
        &metrics,
        &mut emitter,
        &mut done,
        stop,
    )
    .await;
    (emitter, sum)
}

/// The quick host of an SNMP iteration and the host that answers a second later.
fn quick_and_slow(slow: SocketAddr) -> Vec<(SocketAddr, &'static str, &'static str, Duration)> {
    let (quick, community) = snmpd_agents().remove(0);
    let community: &'static str = community.leak();
    vec![
        (
            quick,
            community,
            "1.3.6.1.2.1.1.5.0",
            Duration::from_secs(3),
        ),
        (
            slow,
            "public",
            "1.3.6.1.4.1.8072.9999.8888.1.0",
            Duration::from_secs(3),
        ),
    ]
}

/// A host done early in a slow SNMP iteration is handed back (for its next poll) before
/// the iteration ends, once its sample is in the channel.
#[tokio::test(flavor = "current_thread")]
async fn hosts_done_are_handed_back_while_a_slow_snmp_host_goes_on() {
    let slow = SocketAddr::from(([127, 0, 124, 2], 16161));
    let _agent = SlowAgent::start(slow, "1");
    let (tx, mut rx) = tokio::sync::mpsc::channel(16);
    let mut reported: Vec<(Vec<String>, usize)> = Vec::new();
    snmp_iterate(&quick_and_slow(slow), tx, &mut |names| {
        let mut got = 0;
        while rx.try_recv().map(|b| got += b.len()).is_ok() {}
        reported.push((names, got));
    })
    .await;
    assert_eq!(reported, [(vec!["h0".to_string()], 1)]);
}

/// Hosts whose samples wait for a full channel (the sink behind) are not handed back
/// early: their next poll, by another iteration, could reach the consumer before them.
#[tokio::test(flavor = "current_thread")]
async fn snmp_hosts_whose_samples_wait_for_the_channel_are_not_handed_back() {
    let slow = SocketAddr::from(([127, 0, 124, 3], 16161));
    let _agent = SlowAgent::start(slow, "1");
    let (tx, mut rx) = tokio::sync::mpsc::channel(1);
    tx.try_send(Vec::new()).unwrap();
    let mut reported = Vec::new();
    let emitter = snmp_iterate(&quick_and_slow(slow), tx, &mut |names| {
        reported.extend(names)
    })
    .await;
    assert_eq!(reported, Vec::<String>::new());
    assert!(emitter.parked() > 0);
    assert!(rx.try_recv().is_ok());
}

/// An SNMP agent on 127.0.0.1 that answers each request `delay` after it came, every
/// request on a thread of its own (a device that works on several at once), with
/// Integer 1 for each OID. Returns its port and the most requests it held at once.
fn concurrent_slow_agent(delay: Duration) -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let sock = Arc::new(std::net::UdpSocket::bind("127.0.0.1:0").unwrap());
    let port = sock.local_addr().unwrap().port();
    let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let most2 = most.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 65_536];
        while let Ok((n, from)) = sock.recv_from(&mut buf) {
            let req = buf[..n].to_vec();
            let (sock, now, most) = (sock.clone(), now.clone(), most2.clone());
            std::thread::spawn(move || {
                most.fetch_max(now.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                std::thread::sleep(delay);
                now.fetch_sub(1, Ordering::SeqCst);
                let Ok(m) = snmp::Message::decode(&req) else {
                    return;
                };
                let vbs: Vec<(Oid, VarValue)> = m
                    .varbinds()
                    .map(|vb| (vb.oid.to_owned(), VarValue::Integer(1)))
                    .collect();
                let _ = sock.send_to(&common::response(&m, &vbs), from);
            });
        }
    });
    (port, most)
}

/// A device with items at 2 s and 3 s (two tasks) whose answers take 2.5 s, polled by
/// the daemon's SNMP engine with its default two concurrent iterations and no batch
/// window: one task's slot comes while the other's poll runs, and must wait for it. The device gets one
/// request at a time (`max_inflight_per_host = 1`), never two chains at once.
#[tokio::test(flavor = "current_thread")]
async fn two_tasks_of_one_host_are_never_polled_at_once() {
    use poller::daemon::{run_engine, Clock, Drivers, Limits, Shared, SnmpDrivers};
    use poller::plan::{Engine, HostSpec, ItemKind, ItemSpec, Plan, SnmpParams, SnmpVersion};
    let (port, most) = concurrent_slow_agent(Duration::from_millis(2_500));
    let params = Arc::new(SnmpParams {
        version: SnmpVersion::V2c,
        community: "public".into(),
        usm: None,
        port,
        timeout: Duration::from_secs(5),
        retries: 0,
        max_oids_per_request: 32,
        max_inflight_per_host: 1,
    });
    let item = |i: u32, interval_ms: u32| ItemSpec {
        itemid: u64::from(i),
        key: format!("k{i}").into(),
        value_type: poller::value::ValueType::Uint,
        interval_ms,
        kind: ItemKind::Snmp {
            oid: Oid::from_arcs(&[1, 3, 6, 1, 4, 1, 99999, i]).unwrap(),
        },
        pre: None,
    };
    let plan = Plan::build(vec![HostSpec {
        name: "slow-switch".into(),
        ip: "127.0.0.1".parse().unwrap(),
        snmp: Some(params),
        items: vec![item(1, 2_000), item(2, 3_000)],
    }]);
    assert_eq!(plan.tasks.len(), 2);
    // Nothing taken ahead of its slot: tasks a batch window apart would be merged.
    let limits = Limits {
        batch_window: Duration::ZERO,
        ..Limits::default()
    };
    let shared = Shared::new(plan, 1, Clock::new(), limits);
    let (tx, mut rx) = poller::engine::channel(4096);
    let drain = tokio::spawn(async move { while rx.recv().await.is_some() {} });
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let open = || SnmpDriver::open(SnmpDriverOptions::default());
    let drivers = Drivers::Snmp(SnmpDrivers {
        base: vec![open().unwrap(), open().unwrap()],
        extra: 0,
        open: Box::new(open),
    });
    let engine = tokio::spawn(run_engine(shared, Engine::Snmp, drivers, tx, stop_rx));
    tokio::time::sleep(Duration::from_secs(9)).await;
    stop_tx.send(true).unwrap();
    engine.await.unwrap().unwrap();
    drain.await.unwrap();
    assert_eq!(
        most.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the device got requests from two iterations at once"
    );
}

/// A host done early is handed back while another host of its iteration stays silent
/// (no sample of it comes until its timeout: the hand-back waited for one).
#[tokio::test(flavor = "current_thread")]
async fn hosts_done_are_handed_back_while_a_silent_snmp_host_times_out() {
    let silent = SocketAddr::from(([127, 0, 124, 9], 16161)); // nothing listens
    let (tx, mut rx) = tokio::sync::mpsc::channel(16);
    let t0 = std::time::Instant::now();
    let mut reported: Vec<(Vec<String>, Duration)> = Vec::new();
    snmp_iterate(&quick_and_slow(silent), tx, &mut |names| {
        while rx.try_recv().is_ok() {}
        reported.push((names, t0.elapsed()));
    })
    .await;
    let (names, at) = reported
        .first()
        .cloned()
        .expect("h0 never handed back early");
    assert_eq!(names, ["h0"]);
    // Its 3 s timeout is what held it back.
    assert!(at < Duration::from_secs(2), "h0 handed back after {at:?}");
}

/// A stop ends an SNMP iteration at most STOP_GRACE later, however long its requests'
/// timeout (up to 10 minutes, beyond a service manager's stop timeout): the silent
/// host's item gets no sample, the answered one its value.
#[tokio::test(flavor = "current_thread")]
async fn a_stop_cuts_an_snmp_iteration_short_after_its_grace() {
    let silent = SocketAddr::from(([127, 0, 124, 11], 16161)); // nothing listens
    let mut hosts = quick_and_slow(silent);
    hosts[1].3 = Duration::from_secs(60);
    let (tx, mut rx) = tokio::sync::mpsc::channel(16);
    let t0 = std::time::Instant::now();
    let stop = tokio::time::sleep(Duration::from_millis(300));
    let (emitter, sum) = snmp_iterate_until(&hosts, tx, &mut |_| {}, stop).await;
    let took = t0.elapsed();
    let grace = poller::daemon::STOP_GRACE;
    assert!(
        took >= grace && took < grace + Duration::from_secs(3),
        "{took:?}"
    );
    assert_eq!(sum.items, 1, "{sum:?}");
    drop(emitter);
    let mut got = Vec::new();
    while let Some(b) = rx.recv().await {
        got.extend(
            b.into_iter()
                .map(|s| (s.host.to_string(), s.result.is_ok())),
        );
    }
    assert_eq!(got, [("h0".to_string(), true)]);
}

/// A router's "host unreachable" for one host must not fail the request sent to
/// another after it. With `IP_RECVERR` the error is also the socket's pending error,
/// which the next `sendmmsg` returns for its first datagram whatever that datagram:
/// a batch that left whole with a rejected host's request last made the next batch's
/// first request, a live agent's, fail with "No route to host". Jobs in runs of one
/// rejected host (127.0.228.x, a firewall rule's reject on input, as a router's) and
/// 63 live requests (one `sendmmsg` batch after the partial one) bring that about.
#[tokio::test(flavor = "current_thread")]
async fn an_unreachable_hosts_error_does_not_fail_the_next_hosts_request() {
    let _nft = common::NftTable::create(
        "chain input {\n type filter hook input priority -10; policy accept;\n \
         ip daddr 127.0.228.0/24 udp dport 161 reject with icmp type host-unreachable\n}",
    );
    let port = common::fake_agent(|m| {
        let vbs = m
            .varbinds()
            .map(|vb| (vb.oid.to_owned(), VarValue::Integer(7)));
        Some(vbs.collect())
    });
    let live: SocketAddr = ([127, 0, 0, 1], port).into();
    let oid: Oid = "1.3.6.1.2.1.1.3.0".parse().unwrap();
    let mut jobs = Vec::new();
    for r in 1..=3u8 {
        jobs.push(job(
            ([127, 0, 228, r], 161).into(),
            "public",
            vec![oid.clone()],
        ));
        jobs.extend((0..63).map(|_| job(live, "public", vec![oid.clone()])));
    }
    for j in &mut jobs {
        j.timeout = Duration::from_millis(500);
        j.retries = 0;
    }
    let mut driver = SnmpDriver::open(SnmpDriverOptions {
        sockets: 1,
        max_pps: 0,
        ..Default::default()
    })
    .unwrap();
    let (res, report) = run(&mut driver, &jobs).await;
    let failed: Vec<_> = (0..jobs.len())
        .filter(|&j| jobs[j].addr == live && res[j][&0] != Ok(VarValue::Integer(7)))
        .map(|j| (j, res[j][&0].clone()))
        .collect();
    assert!(failed.is_empty(), "{failed:?}\n{report:?}");
    assert_eq!(report.stats.unreachable, 3, "{report:?}");
    for j in [0, 64, 128] {
        let e = res[j][&0].as_ref().unwrap_err();
        assert!(
            e.text.contains("ICMP host unreachable from 127.0.228."),
            "{e:?}"
        );
    }
}
