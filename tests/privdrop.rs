//! `netpoller run` holds no CAP_NET_RAW once its raw ICMP sockets are open:
//! * started as root with `--user nobody`, every thread of it runs as `nobody` holding
//!   no capability at all (bounding set emptied too);
//! * started as `nobody` with CAP_NET_RAW and CAP_NET_BIND_SERVICE ambient, as systemd's
//!   `User=` + `AmbientCapabilities=` starts it (here `setpriv` does), every thread sheds
//!   CAP_NET_RAW and keeps the other capability;
//!
//! and either way the raw socket opened before still works: values for 127.0.151.1 keep
//! coming (scraped from `/metrics`), the identifier filter attached to it per sweep
//! included. Also: the SNMP community never shows up in logs or metrics, and an unknown
//! user is a clear startup error.
//!
//! Needs root (skipped otherwise, with a message) and `setpriv` (util-linux). Traffic:
//! ICMP echo to 127.0.151.1 and the metrics endpoint on 127.0.151.1 only.

mod common;

use common::{free_port_on, http_get_from};
use std::net::Ipv4Addr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const COMMUNITY: &str = "privdrop-s3cret-community-7f3a";
/// The polled host and the metrics endpoint: loopback, in the range kept for this test.
const IP: Ipv4Addr = Ipv4Addr::new(127, 0, 151, 1);

fn is_root() -> bool {
    // SAFETY: getter without side effects.
    unsafe { libc::geteuid() == 0 }
}

/// uid and gid of `nobody`, from the passwd database.
fn nobody() -> (u32, u32) {
    let name = std::ffi::CString::new("nobody").unwrap();
    // SAFETY: getpwnam returns a pointer to static storage or null; read at once.
    unsafe {
        let p = libc::getpwnam(name.as_ptr());
        assert!(!p.is_null(), "user nobody exists");
        ((*p).pw_uid, (*p).pw_gid)
    }
}

fn metric(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Fields of /proc/<pid>/task/<tid>/status for every thread.
fn thread_statuses(pid: u32) -> Vec<String> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        if let Ok(s) = std::fs::read_to_string(t.unwrap().path().join("status")) {
            out.push(s);
        }
    }
    out
}

fn field<'a>(status: &'a str, name: &str) -> &'a str {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {name} in status"))
        .trim()
}

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        // Only our own child, by pid; harmless if it already exited.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The receive buffers (`ss`'s `rb`) of the UDP sockets of process `pid`.
fn udp_receive_buffers(pid: u32) -> Vec<u64> {
    let out = Command::new("ss").args(["-uanmp"]).output().expect("ss");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let mut bufs = Vec::new();
    let ours = format!("pid={pid},");
    while let Some(line) = lines.next() {
        if !line.contains(&ours) {
            continue;
        }
        // `skmem:(r0,rb16777216,...)`, on the line after the socket's.
        let mem = if line.contains("skmem:") {
            Some(line)
        } else {
            lines.next()
        };
        if let Some(rb) = mem
            .and_then(|m| m.split("rb").nth(1))
            .and_then(|r| r.split(',').next())
            .and_then(|n| n.parse().ok())
        {
            bufs.push(rb);
        }
    }
    bufs
}

fn write_config(dir: &Path, port: u16) -> std::path::PathBuf {
    let spool = dir.join("spool");
    std::fs::create_dir(&spool).unwrap();
    let (uid, gid) = nobody();
    let c = std::ffi::CString::new(spool.to_str().unwrap()).unwrap();
    // SAFETY: chown on a path we just created.
    assert_eq!(unsafe { libc::chown(c.as_ptr(), uid, gid) }, 0);
    // tempfile makes 0700 directories: nobody must reach the spool inside.
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cfg = dir.join("netpoller.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"
[daemon]
metrics_listen = "{IP}:{port}"
spool_dir = "{}"
# Two sweeps: each attaches its identifier filter to its raw socket, after the drop.
icmp_concurrent_sweeps = 2

[icmp]
timeout = "500ms"

[snmp]
community = "{COMMUNITY}"

[[templates]]
name = "icmp"
items = [ {{ key = "icmpping", interval = "1s" }} ]

[[hosts]]
name = "loopback"
ip = "{IP}"
templates = ["icmp"]
"#,
            spool.display()
        ),
    )
    .unwrap();
    cfg
}

/// What a daemon showed while it polled, and its log once it stopped.
struct Polled {
    /// `/proc/<pid>/task/<tid>/status` of each of its threads.
    statuses: Vec<String>,
    /// Receive buffers of its UDP (SNMP) sockets.
    udp_buffers: Vec<u64>,
    /// Its log.
    stderr: String,
}

/// Runs `netpoller run -c CONFIG --log-format json` with `args` through `launcher` (a
/// program and its arguments, the daemon's command line appended; none: started
/// directly), until its raw socket has given ICMP values for [`IP`]; then reads its
/// threads' statuses and stops it with SIGTERM (exit status 0).
fn run_until_polled(launcher: &[String], args: &[&str]) -> Polled {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port_on(IP);
    let cfg = write_config(dir.path(), port);
    let (stdout_path, stderr_path) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let bin = env!("CARGO_BIN_EXE_netpoller");
    let mut cmd = match launcher.split_first() {
        Some((program, first)) => {
            let mut c = Command::new(program);
            c.args(first).arg(bin);
            c
        }
        None => Command::new(bin),
    };
    let child = cmd
        .args(["run", "-c", cfg.to_str().unwrap(), "--log-format", "json"])
        .args(args)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout_path).unwrap())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {cmd:?}: {e}"));
    let mut daemon = Daemon(child);
    let pid = daemon.0.id();

    // Values for the host prove the raw socket works after the drop.
    let deadline = Instant::now() + Duration::from_secs(20);
    let metrics = loop {
        if let Some(status) = daemon.0.try_wait().unwrap() {
            panic!(
                "daemon exited early ({status}): {}",
                std::fs::read_to_string(&stderr_path).unwrap()
            );
        }
        if let Some((200, body)) = http_get_from(IP, port, "/metrics") {
            if metric(&body, "netpoller_values_total{engine=\"icmp\"}").unwrap_or(0.0) >= 2.0 {
                break body;
            }
        }
        assert!(Instant::now() < deadline, "no ICMP values within 20 s");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(
        metric(
            &metrics,
            "netpoller_item_errors_total{engine=\"icmp\",reason=\"send\"}"
        ),
        Some(0.0)
    );
    let statuses = thread_statuses(pid);
    assert!(statuses.len() > 1, "the runtime's threads exist");
    let udp_buffers = udp_receive_buffers(pid);
    let (st, body_h) = http_get_from(IP, port, "/healthz").expect("healthz answers");
    assert_eq!((st, body_h.as_str()), (200, "ok\n"));

    // SAFETY: signalling our own child by pid.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) }, 0);
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = daemon.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "daemon did not stop within 30 s of SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let stderr = std::fs::read_to_string(&stderr_path).unwrap();
    let stdout = std::fs::read_to_string(&stdout_path).unwrap();
    assert!(status.success(), "exit {status}: {stderr}");
    // The per-sweep identifier filter needs no capability on the open socket.
    assert!(
        !stderr.contains("cannot attach the ICMP identifier filter"),
        "{stderr}"
    );
    for (what, text) in [
        ("stderr", &stderr),
        ("stdout", &stdout),
        ("/metrics", &metrics),
    ] {
        assert!(!text.contains(COMMUNITY), "community leaked to {what}");
    }
    Polled {
        statuses,
        udp_buffers,
        stderr,
    }
}

impl Polled {
    /// Asserts that every thread runs as `nobody` (no supplementary group) with the
    /// capability sets `caps` ([CapEff, CapPrm, CapInh, CapAmb], hex as in `status`).
    fn assert_threads(&self, caps: [&str; 4]) {
        let (uid, gid) = nobody();
        for s in &self.statuses {
            let ids = |name| {
                field(s, name)
                    .split_whitespace()
                    .map(|v| v.parse::<u32>().unwrap())
                    .collect::<Vec<_>>()
            };
            assert_eq!(ids("Uid"), [uid; 4], "{s}");
            assert_eq!(ids("Gid"), [gid; 4], "{s}");
            assert_eq!(field(s, "Groups"), "", "no supplementary groups");
            let sets = ["CapEff", "CapPrm", "CapInh", "CapAmb"].map(|set| field(s, set));
            assert_eq!(sets, caps, "CapEff, CapPrm, CapInh, CapAmb: {s}");
        }
    }

    /// The JSON log lines (every one an object with level and message) whose message
    /// contains `text`.
    fn logged(&self, text: &str) -> Vec<serde_json::Value> {
        let mut found = Vec::new();
        for line in self.stderr.lines() {
            let v: serde_json::Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
            assert!(v["level"].is_string() && v["message"].is_string(), "{line}");
            if v["message"].as_str().unwrap().contains(text) {
                found.push(v);
            }
        }
        found
    }
}

const NO_CAPS: &str = "0000000000000000";

#[test]
fn run_as_root_with_user_drops_every_capability() {
    if !is_root() {
        eprintln!("skipping: needs root to start the daemon privileged");
        return;
    }
    let polled = run_until_polled(&[], &["--user", "nobody"]);
    polled.assert_threads([NO_CAPS; 4]);
    for s in &polled.statuses {
        assert_eq!(field(s, "CapBnd"), NO_CAPS, "bounding set emptied: {s}");
    }

    // The SNMP sockets were opened before the drop: the receive buffer asked for, not
    // the unprivileged cap (2 × net.core.rmem_max), which they got when opened after it.
    let rmem_max: u64 = std::fs::read_to_string("/proc/sys/net/core/rmem_max")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let bufs = &polled.udp_buffers;
    assert!(!bufs.is_empty(), "the daemon's SNMP sockets");
    if 2 * rmem_max < 16 << 20 {
        assert!(
            bufs.iter().all(|&b| b > 2 * rmem_max),
            "{bufs:?}: capped at 2 × rmem_max ({rmem_max})"
        );
    }

    let dropped = polled.logged("dropped privileges (no capability left)");
    assert!(
        dropped.iter().any(|v| v["user"] == "nobody"),
        "privilege drop not logged: {}",
        polled.stderr
    );
}

/// systemd's unit: `User=` + `AmbientCapabilities=CAP_NET_RAW`, no `--user`. The
/// daemon sheds CAP_NET_RAW itself once its sockets are open; CAP_NET_BIND_SERVICE,
/// granted too, stays (the operator's, for what comes later).
#[test]
fn started_as_the_user_with_ambient_net_raw_sheds_it() {
    if !is_root() {
        eprintln!("skipping: needs root to start the daemon as nobody with capabilities");
        return;
    }
    let (uid, gid) = nobody();
    let caps = "+net_raw,+net_bind_service";
    let setpriv = [
        "setpriv".to_string(),
        format!("--reuid={uid}"),
        format!("--regid={gid}"),
        "--clear-groups".to_string(),
        format!("--inh-caps={caps}"),
        format!("--ambient-caps={caps}"),
        "--".to_string(),
    ];
    let polled = run_until_polled(&setpriv, &[]);
    // Bit 10, CAP_NET_BIND_SERVICE; bit 13 (0x2000), CAP_NET_RAW, gone.
    polled.assert_threads(["0000000000000400"; 4]);
    assert_eq!(
        polled.logged("dropped CAP_NET_RAW").len(),
        1,
        "{}",
        polled.stderr
    );
}

#[test]
fn unknown_user_is_a_clear_startup_error() {
    if !is_root() {
        eprintln!("skipping: needs root to start the daemon privileged");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), free_port_on(IP));
    let out = Command::new(env!("CARGO_BIN_EXE_netpoller"))
        .args([
            "run",
            "-c",
            cfg.to_str().unwrap(),
            "--user",
            "no-such-user-np",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("no such user \"no-such-user-np\""),
        "{stderr}"
    );
    assert!(!stderr.contains(COMMUNITY));
}

/// A spool made by root (a start without `--user`, a `spool replay` as root) is not
/// `nobody`'s, and one that is missing cannot be made by `nobody` in a directory of
/// root's: a start with `--user nobody` said only `spool.lock: opening lock file:
/// Permission denied`, nothing of the user it had switched to. It names the user and
/// the command that fixes each. (No ICMP is sent: the start ends before polling.)
#[test]
fn a_spool_the_user_may_not_use_names_the_user_and_the_fix() {
    if !is_root() {
        eprintln!("skipping: needs root to start the daemon privileged");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), free_port_on(IP));
    let spool = dir.path().join("spool");
    // As a start as root leaves it: root's, its lock file too.
    let c = std::ffi::CString::new(spool.to_str().unwrap()).unwrap();
    // SAFETY: chown on a path this test made.
    assert_eq!(unsafe { libc::chown(c.as_ptr(), 0, 0) }, 0);
    std::fs::write(spool.join("spool.lock"), "").unwrap();
    let start = || {
        Command::new(env!("CARGO_BIN_EXE_netpoller"))
            .args(["run", "-c", cfg.to_str().unwrap(), "--user", "nobody"])
            .output()
            .unwrap()
    };
    let out = start();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let want = format!(
        "netpoller: starting the sink: spool {0}/spool.lock: opening lock file: Permission denied (os error 13); the daemon runs as \"nobody\" once its sockets are open (--user, daemon.user), and \"nobody\" may not use the spool: it is another user's (made by a start without --user, or by a spool replay, as root?): `chown -R nobody {0}`\n",
        spool.display()
    );
    assert!(stderr.ends_with(&want), "{stderr}");
    // Gone, in a directory of root's (0755): nobody cannot make it.
    std::fs::remove_dir_all(&spool).unwrap();
    let out = start();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let want = format!(
        "and \"nobody\" may not use the spool: it cannot create it there: `install -d -o nobody {}`\n",
        spool.display()
    );
    assert!(stderr.ends_with(&want), "{stderr}");
}
