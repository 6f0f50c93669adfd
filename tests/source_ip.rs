//! `daemon.source_ip` (Zabbix's SourceIP) and the commands' `--source`: ICMP probes,
//! SNMP requests and discovery walks leave from the address given. Everything stays on
//! loopback: 127.0.0.9 is the source; 127.0.77.1 is an ICMP target that an nft table of
//! the test's own lets echo requests reach only from that source; a UDP socket of the
//! test stands for an agent and records where each request came from (it answers
//! nothing).

mod common;

use std::net::{IpAddr, UdpSocket};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{netpoller, scratch, NftTable};

const SOURCE: &str = "127.0.0.9";
const PINGED: &str = "127.0.77.1";

/// A silent agent: every datagram's source address, until dropped.
struct Listener {
    port: u16,
    seen: Arc<Mutex<Vec<IpAddr>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Listener {
    fn start() -> Listener {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let port = sock.local_addr().unwrap().port();
        let seen: Arc<Mutex<Vec<IpAddr>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (s2, st2) = (Arc::clone(&seen), Arc::clone(&stop));
        let thread = std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            while !st2.load(Ordering::Relaxed) {
                if let Ok((_, from)) = sock.recv_from(&mut buf) {
                    s2.lock().unwrap().push(from.ip());
                }
            }
        });
        Listener {
            port,
            seen,
            stop,
            thread: Some(thread),
        }
    }

    /// The sources seen since the last call.
    fn take(&self) -> Vec<IpAddr> {
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A config of the silent agent (an item and a discovery rule) and the ICMP target,
/// with `source` (a `source_ip = ...` line, or nothing) in `[daemon]`.
fn config(dir: &Path, port: u16, source: &str) -> std::path::PathBuf {
    let d = dir.display();
    let text = format!(
        r#"[daemon]
{source}
discovery_file = "{d}/discovered.json"
spool_dir = "{d}/spool"

[[templates]]
name = "agent"
discovery = [ {{ name = "if", oid = "1.3.6.1.2.1.2.2.1.2" }} ]
items = [
  {{ key = "sysName", oid = "1.3.6.1.2.1.1.5.0", type = "str", interval = "10s" }},
  {{ key = "ifDescr[{{#SNMPINDEX}}]", oid = "1.3.6.1.2.1.2.2.1.2.{{#SNMPINDEX}}", type = "str", interval = "10s", discovery = "if" }},
]

[[hosts]]
name = "agent"
ip = "127.0.0.1"
templates = ["agent"]
snmp = {{ port = {port}, timeout = "100ms", retries = 0 }}

[[hosts]]
name = "pinged"
ip = "{PINGED}"
items = [ {{ key = "icmpping[,1,,,300]", interval = "10s" }} ]
"#
    );
    let path = dir.join("netpoller.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `poll-once --json`: (icmpping of the target, stderr).
fn poll_once(cfg: &Path) -> (serde_json::Value, String) {
    let o = netpoller()
        .args(["poll-once", "--json", "--quiet", "-c"])
        .arg(cfg)
        .output()
        .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    );
    let ping = out
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|l| l["host"] == "pinged")
        .map(|l| l["value"].clone())
        .unwrap_or_default();
    (ping, err)
}

/// `check-config`'s stdout (it must succeed).
fn check_config(cfg: &Path) -> String {
    let o = netpoller()
        .args(["check-config", "-c"])
        .arg(cfg)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn probes_requests_and_walks_leave_from_the_source_address() {
    let dir = scratch("source-ip");
    let agent = Listener::start();
    let _nft = NftTable::create(&format!(
        "chain output {{\n type filter hook output priority -10; policy accept;\n \
         ip daddr {PINGED} ip saddr != {SOURCE} icmp type echo-request drop\n}}"
    ));

    // From the source: the target answers, and the agent sees the walk and the GET
    // come from it.
    let cfg = config(&dir, agent.port, &format!("source_ip = \"{SOURCE}\""));
    let said = check_config(&cfg);
    assert!(
        said.contains(&format!(
            "daemon.source_ip: requests leave from {SOURCE} (a loopback address: only this host's own addresses answer it)"
        )),
        "{said}"
    );
    let (ping, err) = poll_once(&cfg);
    assert_eq!(ping, 1, "{err}");
    assert!(err.contains("discovery agent if: walk failed"), "{err}");
    let seen = agent.take();
    let source: IpAddr = SOURCE.parse().unwrap();
    assert!(
        seen.len() >= 2 && seen.iter().all(|ip| *ip == source),
        "{seen:?}"
    );

    // Without it, the route's source (127.0.0.1): the nft rule drops the probe.
    let cfg = config(&dir, agent.port, "");
    let (ping, err) = poll_once(&cfg);
    assert_eq!(ping, 0, "{err}");
    let seen = agent.take();
    assert!(
        !seen.is_empty() && seen.iter().all(|ip| *ip != source),
        "{seen:?}"
    );

    // The commands' --source does the same.
    let o = netpoller()
        .args([
            "sweep", "-c", "1", "-t", "300ms", "--source", SOURCE, PINGED,
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains(&format!("{PINGED} alive")), "{text}");
    let target = format!("127.0.0.1:{}", agent.port);
    for cmd in [
        vec!["snmp", "get", "-t", "100ms", "-r", "0", "--source", SOURCE],
        vec!["snmp", "walk", "-t", "100ms", "-r", "0", "--source", SOURCE],
    ] {
        let _ = netpoller()
            .args(&cmd)
            .args([target.as_str(), "1.3.6.1.2.1.1"])
            .output()
            .unwrap();
        let seen = agent.take();
        assert!(
            !seen.is_empty() && seen.iter().all(|ip| *ip == source),
            "{cmd:?}: {seen:?}"
        );
    }

    // A --source of no target's family would answer from another address: refused.
    for cmd in [
        vec!["sweep", "-c", "1", "--source", "::1", PINGED],
        vec![
            "snmp",
            "get",
            "--source",
            "::1",
            target.as_str(),
            "1.3.6.1.2.1.1.5.0",
        ],
    ] {
        let o = netpoller().args(&cmd).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{cmd:?}");
        assert!(
            err.contains("--source ::1: no target of its family (IPv6)"),
            "{cmd:?}: {err}"
        );
    }
    assert!(agent.take().is_empty());

    // An address this host does not have (TEST-NET-1; nothing is sent to it): said at
    // once, by address, and nothing is polled.
    let cfg = config(&dir, agent.port, "source_ip = \"192.0.2.77\"");
    // check-config says so too, without failing (a config may be checked elsewhere).
    let said = check_config(&cfg);
    assert!(
        said.contains("192.0.2.77 (source address 192.0.2.77: not an address of this host"),
        "{said}"
    );
    let o = netpoller()
        .args(["poll-once", "--json", "-c"])
        .arg(&cfg)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("source address 192.0.2.77: not an address of this host"),
        "{err}"
    );
    assert!(agent.take().is_empty());
}
