//! The real services started by `scripts/services.sh up` answer: ClickHouse over HTTP
//! and every net-snmp agent over SNMP. These tests prove that the install-and-start step
//! works on the machine that runs them (CI starts from a fresh Debian).
//!
//! They read the addresses from the environment that `.services/env` exports
//! (`scripts/test.sh` sources it). Without it they fail, never skip: a silent skip would
//! let CI pass without ever talking to a real server.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

/// Read a variable written by `scripts/services.sh up`, or fail with how to get it.
fn service_env(name: &str) -> String {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => v,
        _ => panic!(
            "{name} is not set: start the services and load their addresses first:\n  \
             scripts/services.sh up && . .services/env\n\
             (scripts/test.sh does both)"
        ),
    }
}

/// `http://127.0.0.1:8123` (optionally with a trailing `/`) -> socket address.
fn http_addr(url: &str) -> SocketAddr {
    let rest = url
        .strip_prefix("http://")
        .unwrap_or_else(|| panic!("NETPOLLER_CH_URL must be http://IP:PORT, got {url:?}"));
    let host_port = rest.trim_end_matches('/');
    host_port.parse().unwrap_or_else(|e| {
        panic!("NETPOLLER_CH_URL {url:?}: host must be an IP literal with a port: {e}")
    })
}

/// One HTTP/1.0 POST of `query` to ClickHouse; returns (status line, body).
fn clickhouse_query(addr: SocketAddr, query: &str) -> (String, String) {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("connect to ClickHouse at {addr}: {e}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
        .set_write_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let request = format!(
        "POST / HTTP/1.0\r\nHost: {addr}\r\nContent-Length: {}\r\n\r\n{query}",
        query.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .unwrap_or_else(|e| panic!("read ClickHouse response from {addr}: {e}"));
    let response = String::from_utf8(response).expect("ClickHouse answered non-UTF-8");
    let (head, body) = response
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("malformed HTTP response: {response:?}"));
    let status = head.lines().next().unwrap_or_default().to_owned();
    (status, body.to_owned())
}

#[test]
fn clickhouse_answers_select_version() {
    let addr = http_addr(&service_env("NETPOLLER_CH_URL"));
    assert!(
        addr.ip().is_loopback(),
        "test services must be on loopback, got {addr}"
    );

    let (status, body) = clickhouse_query(addr, "SELECT version()");
    assert!(
        status.contains(" 200 "),
        "SELECT version() failed: {status}\n{body}"
    );
    let version = body.trim();
    assert!(!version.is_empty(), "empty version");
    assert!(
        version.starts_with(|c: char| c.is_ascii_digit()) && version.contains('.'),
        "unexpected version string {version:?}"
    );

    // The server really evaluates queries (not a stub answering 200 to anything) and a
    // bad query is reported as an error, which is what the sink relies on.
    let (status, body) = clickhouse_query(addr, "SELECT 6 * 7");
    assert!(status.contains(" 200 "), "{status}\n{body}");
    assert_eq!(body.trim(), "42");
    let (status, body) = clickhouse_query(addr, "SELECT no_such_column FROM system.one");
    assert!(
        !status.contains(" 200 "),
        "a bad query must fail, got {status}: {body}"
    );
    assert!(
        body.contains("Code: 47"),
        "expected unknown identifier (47): {body}"
    );
}

/// `snmpget -v2c -c COMMUNITY -t 2 -r 1 -Oqv ADDR:PORT OID`; returns (success, stdout+stderr).
fn snmpget(addr: &str, port: &str, community: &str, oid: &str) -> (bool, String) {
    let out = Command::new("snmpget")
        .args(["-v2c", "-c", community, "-t", "2", "-r", "1", "-Oqv"])
        .arg(format!("udp:{addr}:{port}"))
        .arg(oid)
        // No MIB parsing: numeric OIDs only, and no warnings about missing MIB files.
        .env("MIBS", "")
        .output()
        .expect("run snmpget (Debian package `snmp`; scripts/services.sh up installs it)");
    // The value is stdout; stderr only explains a failure (a first run of the net-snmp
    // tools on a machine also prints "Created directory: /var/lib/snmp/..." there).
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        text += &String::from_utf8_lossy(&out.stderr);
    }
    (out.status.success(), text)
}

const SYS_DESCR_0: &str = "1.3.6.1.2.1.1.1.0";
const SYS_NAME_0: &str = "1.3.6.1.2.1.1.5.0";

#[test]
fn every_snmpd_agent_answers_its_sys_descr() {
    let addrs = service_env("NETPOLLER_SNMPD_ADDRS");
    let port = service_env("NETPOLLER_SNMPD_PORT");
    let communities = service_env("NETPOLLER_SNMPD_COMMUNITIES");
    let addrs: Vec<&str> = addrs.split(',').collect();
    let communities: Vec<&str> = communities.split(',').collect();
    assert!(addrs.len() >= 2, "expected several agents, got {addrs:?}");
    assert_eq!(addrs.len(), communities.len(), "one community per agent");

    for (i, (addr, community)) in addrs.iter().zip(&communities).enumerate() {
        let ip: std::net::IpAddr = addr.parse().expect("agent address is an IP literal");
        assert!(
            ip.is_loopback(),
            "test agents must be on loopback, got {ip}"
        );
        let n = i + 1;

        let (ok, text) = snmpget(addr, &port, community, SYS_DESCR_0);
        assert!(ok, "snmpget sysDescr.0 from agent {n} at {addr}: {text}");
        assert_eq!(
            text.trim().trim_matches('"'),
            format!("netpoller test agent {n}")
        );

        let (ok, text) = snmpget(addr, &port, community, SYS_NAME_0);
        assert!(ok, "snmpget sysName.0 from agent {n} at {addr}: {text}");
        assert_eq!(text.trim().trim_matches('"'), format!("agent{n}"));
    }
}

#[test]
fn snmpd_agent_with_private_community_ignores_public() {
    let addrs = service_env("NETPOLLER_SNMPD_ADDRS");
    let port = service_env("NETPOLLER_SNMPD_PORT");
    let communities = service_env("NETPOLLER_SNMPD_COMMUNITIES");
    let (addr, community) = addrs
        .split(',')
        .zip(communities.split(','))
        .find(|(_, c)| *c != "public")
        .expect("one agent uses a non-public community");
    // A wrong community gets no answer at all from net-snmp: the request times out.
    let (ok, text) = snmpget(addr, &port, "public", SYS_DESCR_0);
    assert!(
        !ok,
        "agent {addr} (community {community}) answered community public: {text}"
    );
    assert!(text.contains("Timeout"), "expected a timeout, got: {text}");
}

#[test]
fn snmpsim_serves_recordings_by_community() {
    let sim = service_env("NETPOLLER_SNMPSIM_ADDR");
    let (addr, port) = sim
        .rsplit_once(':')
        .expect("NETPOLLER_SNMPSIM_ADDR is IP:PORT");
    let (ok, text) = snmpget(addr, port, "cisco_16_switch", SYS_DESCR_0);
    assert!(ok, "snmpget from snmpsimd at {sim}: {text}");
    assert!(
        text.contains("Cisco IOS Software"),
        "unexpected sysDescr: {text}"
    );
    let (ok, text) = snmpget(addr, port, "public", SYS_DESCR_0);
    assert!(ok, "snmpget from snmpsimd at {sim}: {text}");
    assert!(text.contains("Linux"), "unexpected sysDescr: {text}");
}

/// `snmpget` with type-tagged output (`Gauge32: 4000000000`), one line per OID.
fn snmpget_typed(addr: &str, port: &str, community: &str, oids: &[&str]) -> Vec<String> {
    let out = Command::new("snmpget")
        .args(["-v2c", "-c", community, "-t", "2", "-r", "1", "-Ov", "-On"])
        .arg(format!("udp:{addr}:{port}"))
        .args(oids)
        .env("MIBS", "")
        .output()
        .expect("run snmpget");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "snmpget {oids:?} from {addr}: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text.lines().map(str::to_owned).collect()
}

#[test]
fn snmpd_agents_serve_typed_fixtures() {
    // Values set by `override` lines in examples/snmpd/agent.conf.in; other tests rely
    // on them for value-type conversion, so their types are pinned here.
    let addrs = service_env("NETPOLLER_SNMPD_ADDRS");
    let port = service_env("NETPOLLER_SNMPD_PORT");
    let communities = service_env("NETPOLLER_SNMPD_COMMUNITIES");
    const BASE: &str = "1.3.6.1.4.1.8072.9999.9999";
    let oids: Vec<String> = (1..=7).map(|i| format!("{BASE}.{i}.0")).collect();
    let oids: Vec<&str> = oids.iter().map(String::as_str).collect();
    for (i, (addr, community)) in addrs.split(',').zip(communities.split(',')).enumerate() {
        let n = i + 1;
        let lines = snmpget_typed(addr, &port, community, &oids);
        let expected = [
            "INTEGER: -42".to_owned(),
            "Gauge32: 4000000000".to_owned(),
            "Counter32: 123456".to_owned(),
            format!("STRING: \"fixture agent {n}\""),
            "OID: .1.3.6.1.4.1.8072.3.2.10".to_owned(),
            format!("INTEGER: {n}"),
            "No Such Object available on this agent at this OID".to_owned(),
        ];
        assert_eq!(lines, expected, "agent {n} at {addr}");
    }
}
