//! `netpoller schema` and `netpoller spool` against the real ClickHouse server
//! (scripts/services.sh; `NETPOLLER_CH_URL` or `.services/env`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;

mod common;

fn ch_url() -> String {
    if let Ok(u) = std::env::var("NETPOLLER_CH_URL") {
        return u;
    }
    let env = Path::new(env!("CARGO_MANIFEST_DIR")).join(".services/env");
    let text = std::fs::read_to_string(&env)
        .expect("no ClickHouse: run scripts/services.sh or set NETPOLLER_CH_URL");
    text.lines()
        .find_map(|l| {
            l.trim()
                .trim_start_matches("export ")
                .strip_prefix("NETPOLLER_CH_URL=")
                .map(|v| v.trim_matches('"').to_string())
        })
        .expect("NETPOLLER_CH_URL in .services/env")
}

/// POSTs `sql`; returns the body, panicking on a non-200 answer.
fn q(url: &str, sql: &str) -> String {
    let hostport = url.trim_start_matches("http://").trim_end_matches('/');
    let mut s = TcpStream::connect(hostport).unwrap();
    write!(
        s,
        "POST / HTTP/1.0\r\nHost: {hostport}\r\nContent-Length: {}\r\n\r\n{sql}",
        sql.len()
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    assert!(
        head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200"),
        "{sql}: {raw}"
    );
    body.to_string()
}

struct Db(String, String);
impl Drop for Db {
    fn drop(&mut self) {
        let _ =
            std::panic::catch_unwind(|| q(&self.0, &format!("DROP DATABASE IF EXISTS {}", self.1)));
    }
}

fn netpoller(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_netpoller"))
        .args(args)
        .output()
        .unwrap()
}

fn config(dir: &Path, url: &str, db: &str) -> std::path::PathBuf {
    let p = dir.join("np.toml");
    std::fs::write(
        &p,
        format!(
            "[daemon]\nspool_dir = \"{}\"\n\n[clickhouse]\nurl = \"{url}\"\ndatabase = \"{db}\"\nretention = \"30days\"\n",
            dir.join("spool").display()
        ),
    )
    .unwrap();
    p
}

#[test]
fn schema_prints_ddl_by_server_version() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), "http://127.0.0.1:1", "glaber");
    let old = netpoller(&[
        "schema",
        "-c",
        cfg.to_str().unwrap(),
        "--server-version",
        "18.16",
    ]);
    assert!(old.status.success());
    let old = String::from_utf8(old.stdout).unwrap();
    assert_eq!(
        old.matches("CREATE TABLE IF NOT EXISTS glaber.history_")
            .count(),
        4
    );
    assert!(!old.contains("TTL"));
    let new = netpoller(&[
        "schema",
        "-c",
        cfg.to_str().unwrap(),
        "--server-version",
        "25.8",
    ]);
    let new = String::from_utf8(new.stdout).unwrap();
    assert_eq!(
        new.matches("TTL day + INTERVAL 30 DAY\nSETTINGS ttl_only_drop_parts = 1;")
            .count(),
        4,
        "{new}"
    );
    // Unreachable server without --server-version: a clear error, not a guess.
    let e = netpoller(&["schema", "-c", cfg.to_str().unwrap()]);
    assert!(!e.status.success());
    assert!(String::from_utf8_lossy(&e.stderr).contains("--server-version"));
}

/// Without `[clickhouse]`, `--apply` and `--check` say what they need; the hint to use
/// `--server-version` (which cannot go with them) is for printing the DDL only, which
/// needs no file.
#[test]
fn schema_without_clickhouse_section_says_what_each_mode_needs() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("np.toml");
    std::fs::write(&cfg, "[[hosts]]\nname = \"a\"\nip = \"127.0.188.1\"\n").unwrap();
    let cfg = cfg.to_str().unwrap();
    for flag in ["--apply", "--check"] {
        let out = netpoller(&["schema", "-c", cfg, flag]);
        assert_eq!(out.status.code(), Some(2), "{flag}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!(
                "no [clickhouse] section: {flag} needs the server (add [clickhouse] with its url)"
            )),
            "{flag}: {err}"
        );
        assert!(!err.contains("--server-version"), "{flag}: {err}");
    }
    let out = netpoller(&["schema", "-c", cfg]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("use --server-version X.Y"));
    let out = netpoller(&["schema", "-c", cfg, "--server-version", "18.16"]);
    assert!(out.status.success());
    // --server-version needs no file at all: the defaults' DDL, as of a file without
    // [clickhouse] (clap asked for --config).
    let bare = netpoller(&["schema", "--server-version", "18.16"]);
    assert!(
        bare.status.success(),
        "{}",
        String::from_utf8_lossy(&bare.stderr)
    );
    assert_eq!(bare.stdout, out.stdout);
    assert!(String::from_utf8_lossy(&bare.stdout)
        .contains("CREATE TABLE IF NOT EXISTS glaber.history_uint"));
    // Anything else still needs the file.
    assert_eq!(netpoller(&["schema", "--check"]).status.code(), Some(2));
}

#[test]
fn schema_apply_creates_then_reports_wrong_types() {
    let url = ch_url();
    let name = format!("nptest_{:016x}", fastrand_u64());
    let _db = Db(url.clone(), name.clone());
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), &url, &name);
    let out = netpoller(&["schema", "-c", cfg.to_str().unwrap(), "--apply"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("created {name}.history_dbl")));
    assert!(
        netpoller(&["schema", "-c", cfg.to_str().unwrap(), "--check"])
            .status
            .success()
    );
    // Break one table: recreate history_log with a numeric value column.
    q(&url, &format!("DROP TABLE {name}.history_log"));
    q(
        &url,
        &format!(
            "CREATE TABLE {name}.history_log (day Date, itemid UInt64, clock DateTime, hostname String, itemname String, ns UInt32, value UInt8) \
             ENGINE = MergeTree() PARTITION BY toYYYYMM(day) ORDER BY (itemid, clock)"
        ),
    );
    for flag in ["--apply", "--check"] {
        let out = netpoller(&["schema", "-c", cfg.to_str().unwrap(), flag]);
        assert_eq!(out.status.code(), Some(1), "{flag}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!(
                "table {name}.history_log: column `value` has type UInt8, expected String"
            )),
            "{err}"
        );
    }
    let ty = q(&url, &format!("SELECT type FROM system.columns WHERE database='{name}' AND table='history_log' AND name='value'"));
    assert_eq!(ty.trim(), "UInt8", "not overwritten");
}

/// `spool dump` and `spool replay` of a spool that is not there say where a relative
/// `spool_dir` was looked for: under the current directory, which is neither the
/// config file's nor the daemon's (`./spool` run from `/` said only `spool ./spool:
/// opening spool: No such file or directory`), and how to name the daemon's.
#[test]
fn spool_commands_say_where_a_missing_spool_was_looked_for() {
    let tmp = tempfile::tempdir().unwrap();
    let cwd = tmp.path().join("elsewhere");
    std::fs::create_dir(&cwd).unwrap();
    let cfg = tmp.path().join("np.toml");
    // Port 1 of loopback: nothing is sent, the spool is checked first.
    std::fs::write(
        &cfg,
        "[daemon]\nspool_dir = \"./spool\"\n[clickhouse]\nurl = \"http://127.0.0.1:1\"\n",
    )
    .unwrap();
    let cfg = cfg.to_str().unwrap();
    for cmd in ["dump", "replay"] {
        let out = Command::new(env!("CARGO_BIN_EXE_netpoller"))
            .args(["spool", cmd, "-c", cfg])
            .current_dir(&cwd)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{cmd}");
        let err = String::from_utf8_lossy(&out.stderr);
        let want = format!(
            "netpoller: spool ./spool: opening spool: No such file or directory (os error 2) (relative to the current directory, {}; the daemon's spool is under the directory it runs in: name it with --dir DIR)\n",
            cwd.display()
        );
        assert_eq!(err, want, "{cmd}");
    }
    let missing = tmp.path().join("none");
    let out = netpoller(&["spool", "dump", "--dir", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr)
        .ends_with("(the daemon creates it when it starts; --dir DIR names another spool)\n"));
}

/// `spool replay` of a spool with nothing to reject says "0 row(s) rejected" and sends
/// the operator to no dump of them (it named `netpoller spool dump ... --rejected`, of
/// nothing; the command it names when rows are rejected: the unit tests of
/// `cmd::spool`). (Empty spools: nothing is sent to the URL.)
#[test]
fn spool_replay_names_no_dump_when_it_rejected_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), "http://127.0.201.1:1", "faults2_none");
    let rejected = tmp.path().join("spool").join("rejected");
    std::fs::create_dir_all(&rejected).unwrap();
    let cfg = cfg.to_str().unwrap();
    let by_dir = ["--dir", rejected.to_str().unwrap()];
    for flags in [&by_dir[..], &[]] {
        let out = netpoller(&[&["spool", "replay", "-c", cfg], flags].concat());
        assert!(out.status.success(), "{out:?}");
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(said.contains("; 0 row(s) rejected, 0 corrupted"), "{said}");
        assert!(!said.contains("spool dump"), "{said}");
    }
}

/// `spool replay --dir <spool>/rejected` beside the daemon that uses the spool: the
/// daemon holds the reject spool's lock too, and the refusal said "each netpoller needs
/// a spool_dir of its own (shards on one machine too)", advice for a second daemon. It
/// says what to do: send the daemon SIGUSR1. (The locks held as the daemon holds them,
/// by this process; nothing is sent to the URL.)
#[test]
fn spool_replay_beside_its_daemon_says_to_signal_it() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), "http://127.0.218.1:1", "rev_ops_none");
    let spool = tmp.path().join("spool");
    let rejected = spool.join("rejected");
    std::fs::create_dir_all(&rejected).unwrap();
    let locks: Vec<std::fs::File> = [&spool, &rejected]
        .iter()
        .map(|d| {
            let f = std::fs::File::create(d.join("spool.lock")).unwrap();
            f.try_lock().unwrap();
            f
        })
        .collect();
    let cfg = cfg.to_str().unwrap();
    for dir in [&rejected, &spool] {
        let out = netpoller(&["spool", "replay", "-c", cfg, "--dir", dir.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        let want = format!(
            "netpoller: spool {} is in use by a running netpoller (lock held on spool.lock): a daemon replays its spool itself once ClickHouse answers, and sends its reject spool (rejected/), which it holds too, again when sent SIGUSR1 (`kill -USR1 <pid>`, or `systemctl kill -s USR1 netpoller`): no need to stop it\n",
            dir.display()
        );
        assert_eq!(err, want);
    }
    drop(locks);
}

fn fastrand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos(),
    );
    h.finish()
}

#[test]
fn spool_dump_and_replay() {
    let url = ch_url();
    let name = format!("nptest_{:016x}", fastrand_u64());
    let _db = Db(url.clone(), name.clone());
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), &url, &name);
    // A file-sink run (no [clickhouse]) leaves spool segments.
    let rows = (0..3u32).map(|i| {
        let at = (10 + u64::from(i), 1_700_000_000 + i, 5);
        common::str_row(at, "core\t1", "ifAlias[2]", format!("uplink \"{i}\"\n"))
    });
    common::spool_rows(&tmp.path().join("spool"), rows.collect());
    let out = netpoller(&["spool", "dump", "-c", cfg.to_str().unwrap()]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "history_str\t10\t1700000000\t5\tcore\\t1\tifAlias[2]\tuplink \"0\"\\n\n\
         history_str\t11\t1700000001\t5\tcore\\t1\tifAlias[2]\tuplink \"1\"\\n\n\
         history_str\t12\t1700000002\t5\tcore\\t1\tifAlias[2]\tuplink \"2\"\\n\n"
    );
    assert!(
        netpoller(&["schema", "-c", cfg.to_str().unwrap(), "--apply"])
            .status
            .success()
    );
    let out = netpoller(&["spool", "replay", "-c", cfg.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("replayed 3 row(s) from 1 segment(s)"));
    assert_eq!(
        q(
            &url,
            &format!("SELECT itemid, value FROM {name}.history_str ORDER BY itemid FORMAT TSV")
        ),
        "10\tuplink \"0\"\\n\n11\tuplink \"1\"\\n\n12\tuplink \"2\"\\n\n"
    );
    // Nothing left: dump prints nothing, replay again loads nothing.
    assert!(netpoller(&[
        "spool",
        "dump",
        "--dir",
        tmp.path().join("spool").to_str().unwrap()
    ])
    .stdout
    .is_empty());
}
