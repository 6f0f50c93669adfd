//! Helpers shared by the integration tests: service addresses, ClickHouse over HTTP,
//! and running the `netpoller` binary as a child process.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Writes `rows` to spool segments in `dir`, as a file sink (no ClickHouse) does: a
/// spool, or the reject spool a run before left (their segments are alike).
pub fn spool_rows(dir: &Path, rows: Vec<(sink::Table, sink::Row)>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let metrics = std::sync::Arc::new(sink::SinkMetrics::default());
        let (s, h) = sink::Sink::start(None, sink::SpoolConfig::new(dir), metrics)
            .await
            .unwrap();
        for (table, row) in rows {
            h.send(row, table).await.unwrap();
        }
        drop(h);
        s.shutdown().await.unwrap();
    });
}

/// A `history_str` row of item `itemid` at `clock`.`ns`.
pub fn str_row(
    (itemid, clock, ns): (u64, u32, u32),
    hostname: &str,
    itemname: &str,
    value: String,
) -> (sink::Table, sink::Row) {
    let row = sink::Row {
        itemid,
        clock,
        ns,
        hostname: hostname.into(),
        itemname: itemname.into(),
        value: sink::RowValue::Str(value),
    };
    (sink::Table::Str, row)
}

/// A variable written by `scripts/services.sh up`, or a failure saying how to get it.
/// Never a skip: a silent skip would let CI pass without a real server.
pub fn service_env(name: &str) -> String {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => v,
        _ => panic!(
            "{name} is not set: start the services and load their addresses first:\n  \
             scripts/services.sh up && . .services/env\n(scripts/test.sh does both)"
        ),
    }
}

/// ClickHouse HTTP address from `NETPOLLER_CH_URL`.
pub fn clickhouse_addr() -> SocketAddr {
    let url = service_env("NETPOLLER_CH_URL");
    let addr: SocketAddr = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .expect("NETPOLLER_CH_URL must be http://IP:PORT");
    assert!(addr.ip().is_loopback(), "test services must be on loopback");
    addr
}

/// POST `query`; returns the body, panicking on a non-200 answer.
pub fn ch(query: &str) -> String {
    let addr = clickhouse_addr();
    let mut s =
        TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect ClickHouse");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let req = format!(
        "POST / HTTP/1.0\r\nHost: {addr}\r\nContent-Length: {}\r\n\r\n{query}",
        query.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).unwrap();
    let resp = String::from_utf8_lossy(&resp).into_owned();
    let (head, body) = resp.split_once("\r\n\r\n").expect("HTTP response");
    assert!(
        head.lines().next().unwrap_or("").contains(" 200 "),
        "ClickHouse said {head}\n{body}\nfor {query}"
    );
    body.to_string()
}

/// A fresh scratch directory under the target dir (kept on failure for inspection).
pub fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub fn netpoller() -> Command {
    Command::new(env!("CARGO_BIN_EXE_netpoller"))
}

/// `netpoller poll-once --json [args] -c cfg`: its lines, parsed (the command must
/// succeed).
pub fn poll_once_json(cfg: &Path, args: &[&str]) -> Vec<serde_json::Value> {
    let (out, _) = succeeds(
        netpoller()
            .args(["poll-once", "--json", "--quiet"])
            .args(args)
            .arg("-c")
            .arg(cfg),
    );
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Runs `cmd`, which must succeed: its (stdout, stderr).
pub fn succeeds(cmd: &mut Command) -> (String, String) {
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{cmd:?} failed:\n{err}");
    (String::from_utf8(out.stdout).unwrap(), err)
}

/// The line of item `key` among poll-once's `lines`.
pub fn line_of(lines: &[serde_json::Value], key: &str) -> serde_json::Value {
    lines
        .iter()
        .find(|v| v["key"] == key)
        .unwrap_or_else(|| panic!("no {key} in {lines:#?}"))
        .clone()
}

/// A running `netpoller run`, killed on drop; stderr goes to a log file.
pub struct Daemon {
    pub child: Child,
    pub log: PathBuf,
}

impl Daemon {
    pub fn start(config: &Path, extra: &[&str], log: PathBuf) -> Daemon {
        Daemon::start_env(config, extra, log, &[])
    }

    /// [`Daemon::start`] with these environment variables set too.
    pub fn start_env(
        config: &Path,
        extra: &[&str],
        log: PathBuf,
        env: &[(&str, &std::ffi::OsStr)],
    ) -> Daemon {
        let err = std::fs::File::create(&log).unwrap();
        let child = netpoller()
            .args(["--log-level", "info", "run", "-c"])
            .arg(config)
            .args(extra)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .expect("spawn netpoller run");
        Daemon { child, log }
    }

    /// SIGHUP is held back: the daemon is still starting, or reading its command line.
    pub fn sighup_held(pid: u32) -> bool {
        Daemon::held(pid, libc::SIGHUP)
    }

    /// Signal `sig` is held back (blocked: bit `sig - 1` of the mask in /proc).
    pub fn held(pid: u32, sig: libc::c_int) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("SigBlk:"))
            .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
            .is_some_and(|m| m >> (sig - 1) & 1 == 1)
    }

    pub fn signal(&self, sig: libc::c_int) {
        // SAFETY: plain kill(2) on our own child's pid.
        assert_eq!(
            unsafe { libc::kill(self.child.id() as libc::pid_t, sig) },
            0
        );
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the log contains `needle`, and returns the first line that does;
    /// fails the test with the log after `timeout`.
    pub fn expect_log(&self, needle: &str, timeout: Duration) -> String {
        let t = Instant::now();
        while t.elapsed() < timeout {
            if let Some(line) = self.log_text().lines().find(|l| l.contains(needle)) {
                return line.to_string();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "no {needle:?} in the log within {timeout:?}:\n{}",
            self.log_text()
        );
    }

    /// SIGTERM and wait (bounded) for the exit status.
    pub fn stop(mut self) -> std::process::ExitStatus {
        self.signal(libc::SIGTERM);
        let t = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "netpoller did not stop within 30 s:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free TCP port on 127.0.0.1 (for a metrics endpoint).
pub fn free_port() -> u16 {
    free_port_on(Ipv4Addr::LOCALHOST)
}

/// A free TCP port on `ip` (a test's own loopback address).
pub fn free_port_on(ip: Ipv4Addr) -> u16 {
    std::net::TcpListener::bind((ip, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// GET `path` from 127.0.0.1:`port`: (status code, body); `None` if nothing answers yet.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    http_get_from(Ipv4Addr::LOCALHOST, port, path)
}

/// [`http_get`] from `ip`:`port`.
pub fn http_get_from(ip: Ipv4Addr, port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect((ip, port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {ip}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let (head, body) = buf.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body.to_string()))
}

/// An nft table of the test's own (`inet netpoller_test_<pid>_<n>`) holding `ruleset`
/// (its chains), deleted on drop. Needs root and nftables.
pub struct NftTable(String);

impl NftTable {
    pub fn create(ruleset: &str) -> Self {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "netpoller_test_{}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let script = format!("table inet {name} {{\n{ruleset}\n}}\n");
        let guard = NftTable(name);
        let st = Command::new("nft")
            .args(["-f", "-"])
            .stdin(Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                c.stdin.take().unwrap().write_all(script.as_bytes())?;
                c.wait()
            });
        assert!(
            matches!(st, Ok(s) if s.success()),
            "nft -f failed (run as root with nftables installed) for:\n{script}"
        );
        guard
    }

    /// A table whose rule drops the echo requests to `daddr` (an address or a
    /// prefix) as they arrive: hosts that stay silent.
    pub fn silencing(daddr: &str) -> Self {
        Self::create(&format!(
            "chain input {{\n type filter hook input priority -10; policy accept;\n \
             ip daddr {daddr} icmp type echo-request drop\n}}"
        ))
    }
}

impl NftTable {
    /// The packets each `counter` of the table has counted, in the order nft lists
    /// them.
    pub fn counters(&self) -> Vec<u64> {
        let out = Command::new("nft")
            .args(["list", "table", "inet", &self.0])
            .output()
            .expect("nft list table");
        let text = String::from_utf8_lossy(&out.stdout);
        let counted = text.split("counter packets ").skip(1);
        counted
            .map(|rest| rest.split(' ').next().unwrap().parse().unwrap())
            .collect()
    }
}

impl Drop for NftTable {
    fn drop(&mut self) {
        let _ = Command::new("nft")
            .args(["delete", "table", "inet", &self.0])
            .status();
    }
}

/// An SNMP agent on loopback, a thread of the test process: `answer` gets each request
/// (v1/v2c; undecodable datagrams are ignored) and gives the varbinds of its response,
/// or `None` to stay silent. Its port on 127.0.0.1; it lives until the process ends.
pub fn fake_agent<F>(answer: F) -> u16
where
    F: Fn(&snmp::Message<'_>) -> Option<Vec<(snmp::Oid, snmp::VarValue)>> + Send + 'static,
{
    let at = raw_agent("127.0.0.1:0".parse().unwrap(), None, move |m, _| {
        answer(m).map(|vbs| response(m, &vbs)).into_iter().collect()
    });
    at.port()
}

/// An SNMP agent bound to `addr` (port 0: any), a thread of the test process: `answer`
/// gets each request (v1/v2c; undecodable datagrams are ignored) and its sender, and
/// gives the datagrams sent back to the sender, in order (crafted or broken ones too). Without `until` it
/// lives until the process ends; with it, until that long passes without a request.
/// Returns its address.
pub fn raw_agent<F>(addr: SocketAddr, until: Option<Duration>, mut answer: F) -> SocketAddr
where
    F: FnMut(&snmp::Message<'_>, SocketAddr) -> Vec<Vec<u8>> + Send + 'static,
{
    udp_agent(addr, until, move |d, from| match snmp::Message::decode(d) {
        Ok(m) => answer(&m, from),
        Err(_) => Vec::new(),
    })
}

/// [`raw_agent`] for any datagram (an SNMPv3 agent decodes its own): `answer` gets each
/// one as received, and its sender.
pub fn udp_agent<F>(addr: SocketAddr, until: Option<Duration>, mut answer: F) -> SocketAddr
where
    F: FnMut(&[u8], SocketAddr) -> Vec<Vec<u8>> + Send + 'static,
{
    let sock = std::net::UdpSocket::bind(addr).unwrap();
    sock.set_read_timeout(until).unwrap();
    let at = sock.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 65_536];
        while let Ok((n, from)) = sock.recv_from(&mut buf) {
            for d in answer(&buf[..n], from) {
                let _ = sock.send_to(&d, from);
            }
        }
    });
    at
}

/// An SNMPv3 agent bound to `addr` (port 0: any) that tells its engine to a discovery
/// and answers each request of `user` (read with `user`'s keys) with a `pdu` (a
/// Response, or a PDU of another type) of its OIDs, all 0, encoded under `answer_as`'s
/// keys (the same user, with other passphrases or not), so that the answers fail the
/// poller's checks. Lives until 10 s pass without a request.
pub fn v3_agent_answering_as(
    addr: &str,
    user: &std::sync::Arc<snmp::v3::UsmUser>,
    answer_as: snmp::v3::UsmUser,
    pdu: snmp::PduType,
) -> SocketAddr {
    use snmp::v3::{encode_message, Engine, V3Message};
    use snmp::{Oid, ValueRef};
    use std::sync::Arc;
    let t0 = Instant::now();
    let id = b"\x80\x00\x1f\x88\x04np-hostile";
    let engine = Engine::new(user.clone(), id, 1, 0, t0);
    let other = Engine::new(Arc::new(answer_as), id, 1, 0, t0);
    let until = Some(Duration::from_secs(10));
    udp_agent(addr.parse().unwrap(), until, move |d, _| {
        let Ok(m) = V3Message::decode(d) else {
            return Vec::new();
        };
        let now = Instant::now();
        let mut out = Vec::new();
        if m.engine_id.is_empty() {
            return vec![discovery_report(&engine, &m, now)];
        }
        let mut plain = Vec::new();
        let Ok(scoped) = m.scoped_pdu(Some(&engine), &mut plain) else {
            return Vec::new();
        };
        let oids: Vec<Oid> = scoped.pdu.varbinds().map(|vb| vb.oid.to_owned()).collect();
        let o = other.outgoing(m.msg_id, false, m.msg_id as u64, now);
        let vbs = oids.iter().map(|o| (o.as_ref(), ValueRef::Integer(0)));
        let id = scoped.pdu.request_id;
        encode_message(&mut out, &o, pdu, id, 0, 0, vbs);
        vec![out]
    })
}

/// An agent's answer to discovery `m`: usmStatsUnknownEngineIDs, unauthenticated,
/// telling `engine`.
pub fn discovery_report(
    engine: &snmp::v3::Engine,
    m: &snmp::v3::V3Message<'_>,
    now: Instant,
) -> Vec<u8> {
    let mut o = engine.outgoing(m.msg_id, false, 0, now);
    (o.auth, o.privacy, o.user_name) = (None, None, m.user_name);
    let counter: snmp::Oid = "1.3.6.1.6.3.15.1.1.4.0".parse().unwrap();
    let vb = (counter.as_ref(), snmp::ValueRef::Counter32(1));
    let mut out = Vec::new();
    snmp::v3::encode_message(
        &mut out,
        &o,
        snmp::PduType::Report,
        0,
        0,
        0,
        std::iter::once(vb),
    );
    out
}

/// An SNMPv3 agent bound to `addr` (port 0: any) that answers discoveries with `engine`
/// while `answering` holds, and nothing else (an agent that drops every request: it
/// cannot decrypt them, or it went down once its engine was discovered). Lives until
/// 10 s pass without a request.
pub fn v3_agent_answering_discovery_only(
    addr: &str,
    engine: snmp::v3::Engine,
    answering: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> SocketAddr {
    use std::sync::atomic::Ordering;
    let until = Some(Duration::from_secs(10));
    udp_agent(
        addr.parse().unwrap(),
        until,
        move |d, _| match snmp::v3::V3Message::decode(d) {
            Ok(m) if m.engine_id.is_empty() && answering.load(Ordering::SeqCst) => {
                vec![discovery_report(&engine, &m, Instant::now())]
            }
            _ => Vec::new(),
        },
    )
}

/// The response to `request` with `varbinds`, encoded.
pub fn response(request: &snmp::Message<'_>, varbinds: &[(snmp::Oid, snmp::VarValue)]) -> Vec<u8> {
    let mut out = Vec::new();
    snmp::encode_response(
        &mut out,
        request,
        varbinds.iter().map(|(o, v)| (o.as_ref(), v.as_ref())),
    );
    out
}

/// The plan of `specs`, each of its tasks due once (as `poll-once` polls them).
pub fn plan_due_once(
    specs: Vec<poller::plan::HostSpec>,
) -> (poller::plan::Plan, Vec<poller::scheduler::Due>) {
    let plan = poller::plan::Plan::build(specs);
    let dues = (0..plan.tasks.len())
        .map(|t| poller::scheduler::Scheduler::one_shot(t as u32))
        .collect();
    (plan, dues)
}

/// The names of the hosts of `dues[i]`, for each `i` of `idxs` (what an iteration hands
/// back).
pub fn due_host_names(
    plan: &poller::plan::Plan,
    dues: &[poller::scheduler::Due],
    idxs: &[usize],
) -> Vec<String> {
    idxs.iter()
        .map(|&i| {
            plan.hosts[plan.tasks[dues[i].task as usize].host as usize]
                .name
                .to_string()
        })
        .collect()
}

/// The passphrases of the SNMPv3 users of examples/snmpd/agent.conf.in (and of the
/// agents tests start with users of their own).
pub const V3_AUTH_PASS: &str = "np-auth-pass";
pub const V3_PRIV_PASS: &str = "np-priv-pass";

/// net-snmp's options for the SNMPv3 users of examples/snmpd/agent.conf.in.
pub const V3_OPTIONS: [&[&str]; 4] = [
    &[
        "-u",
        "np-shaaes",
        "-l",
        "authPriv",
        "-a",
        "SHA",
        "-A",
        V3_AUTH_PASS,
        "-x",
        "AES",
        "-X",
        V3_PRIV_PASS,
    ],
    &[
        "-u",
        "np-md5des",
        "-l",
        "authPriv",
        "-a",
        "MD5",
        "-A",
        V3_AUTH_PASS,
        "-x",
        "DES",
        "-X",
        V3_PRIV_PASS,
    ],
    &[
        "-u",
        "np-sha512",
        "-l",
        "authPriv",
        "-a",
        "SHA-512",
        "-A",
        V3_AUTH_PASS,
        "-x",
        "AES",
        "-X",
        V3_PRIV_PASS,
    ],
    &[
        "-u",
        "np-sha",
        "-l",
        "authNoPriv",
        "-a",
        "SHA",
        "-A",
        V3_AUTH_PASS,
    ],
];
