//! ClickHouse outages: a private clickhouse-server killed and restarted under a running
//! sink, and a sink process killed with SIGKILL while spooling, then restarted.

mod common;

use common::{ch_url, free_port, q, wait_until, PrivateServer, TestDb};
use sink::{
    schema, ClickHouseConfig, Compression, Health, Row, RowValue, Sink, SinkMetrics, SpoolConfig,
    Table,
};
use std::io::BufRead;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const BASE: u32 = 1_720_000_000;

fn row(i: u64) -> Row {
    Row {
        itemid: i,
        clock: BASE + (i / 100) as u32,
        ns: (i % 100) as u32,
        hostname: "edge-1".into(),
        itemname: "icmpping[,3]".into(),
        value: RowValue::Uint(i),
    }
}

fn written(m: &SinkMetrics) -> u64 {
    Table::ALL.iter().map(|t| m.rows_written(*t)).sum()
}

/// Sends rows `from..` at ~`rate`/s for `secs`; returns the next index.
async fn send_for(h: &sink::SinkHandle, from: u64, rate: u64, secs: f64) -> u64 {
    let t0 = Instant::now();
    let mut i = from;
    while t0.elapsed().as_secs_f64() < secs {
        for _ in 0..rate / 20 {
            h.send(row(i), Table::Uint).await.unwrap();
            i += 1;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    i
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_loses_nothing_and_duplicates_nothing() {
    common::init_logs();
    let mut server = PrivateServer::new();
    server.start();
    let url = server.url();
    let cfg = ClickHouseConfig {
        url: Some(url.clone()),
        database: "glaber".into(),
        batch_rows: 1000,
        flush_interval: Duration::from_millis(200),
        compression: Compression::Lz4,
        max_attempts: 2,
        retry_backoff: Duration::from_millis(50),
        retry_backoff_max: Duration::from_millis(400),
        request_timeout: Duration::from_secs(5),
        ..ClickHouseConfig::default()
    };
    schema::apply(&cfg).await.unwrap();
    let spool = tempfile::tempdir().unwrap();
    let metrics = Arc::new(SinkMetrics::default());
    let (sink, h) = Sink::start(Some(cfg), SpoolConfig::new(spool.path()), metrics.clone())
        .await
        .unwrap();

    // Phase A: healthy. Wait until everything is confirmed, so the kill below cannot
    // hit an INSERT in flight (the only documented source of duplicates).
    let mut next = send_for(&h, 0, 2000, 0.6).await;
    assert!(
        wait_until(Duration::from_secs(20), || written(&metrics) == next),
        "phase A not written"
    );
    assert_eq!(sink.health(), Health::Writing);

    // Phase B: ClickHouse down for many flush intervals.
    server.kill();
    next = send_for(&h, next, 2000, 2.0).await;
    assert!(
        matches!(sink.health(), Health::Spooling { .. }),
        "{:?}",
        sink.health()
    );
    assert!(metrics.spooled_rows() > 0);
    let during = next;

    // Phase C: back up; new rows flow while the spool replays.
    server.start();
    next = send_for(&h, next, 2000, 1.0).await;
    let total = next;
    let ok = wait_until(Duration::from_secs(60), || {
        written(&metrics) >= total && metrics.spool_bytes() == 0
    });
    assert!(
        ok,
        "written {} of {total}, spool {} bytes",
        written(&metrics),
        metrics.spool_bytes()
    );
    assert_eq!(sink.health(), Health::Writing);
    drop(h);
    let report = sink.shutdown().await.unwrap();
    assert_eq!(report.rows_dropped, 0);
    assert!(metrics.replayed_rows() > 0 && metrics.replayed_rows() <= during);

    let got = q(&url, "SELECT count(), uniqExact(itemid, clock, ns), min(itemid), max(itemid), countIf(value != itemid) FROM glaber.history_uint FORMAT TSV");
    assert_eq!(
        got.trim(),
        format!("{total}\t{total}\t0\t{}\t0", total - 1),
        "count, distinct, min, max, bad values"
    );
}

fn sink_load() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sink_load"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_while_spooling_then_restart_replays() {
    let url = ch_url();
    let db = TestDb::new(&url);
    let cfg = ClickHouseConfig {
        url: Some(url.clone()),
        database: db.name.clone(),
        ..ClickHouseConfig::default()
    };
    schema::apply(&cfg).await.unwrap();
    let spool = tempfile::tempdir().unwrap();
    let dead = format!("http://127.0.0.1:{}", free_port());

    // A sink process whose ClickHouse is unreachable: it spools.
    let mut child = sink_load()
        .args([
            format!("url={dead}"),
            format!("database={}", db.name),
            format!("spool={}", spool.path().display()),
            "rows=1000000".into(),
            "rate=20000".into(),
            "table=uint".into(),
            "flush_ms=100".into(),
            "attempts=1".into(),
            "backoff_ms=50".into(),
            "backoff_max_ms=200".into(),
            format!("base_clock={BASE}"),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut spooled = 0u64;
    for line in stdout.lines() {
        let line = line.unwrap();
        if let Some(v) = line
            .split_whitespace()
            .find_map(|f| f.strip_prefix("spooled="))
        {
            spooled = v.parse().unwrap();
            if spooled >= 20_000 {
                break;
            }
        }
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert!(spooled >= 20_000);
    assert!(!sink::spool::list_segments(spool.path()).unwrap().is_empty());

    // Restart against the live server; it replays and exits once the spool is empty.
    let out = sink_load()
        .args([
            format!("url={url}"),
            format!("database={}", db.name),
            format!("spool={}", spool.path().display()),
            "rows=0".into(),
            "drain=1".into(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = q(&url, &format!("SELECT count(), uniqExact(itemid), min(itemid), max(itemid) FROM {}.history_uint FORMAT TSV", db.name));
    let f: Vec<u64> = got.trim().split('\t').map(|x| x.parse().unwrap()).collect();
    // Every row reported spooled before the kill arrived (more may have been spooled
    // after the last progress line), none twice, and they are a prefix of the input.
    assert!(f[0] >= spooled, "{got}");
    assert_eq!(f[0], f[1], "duplicates: {got}");
    assert_eq!((f[2], f[3]), (0, f[0] - 1), "{got}");
    assert!(sink::spool::list_segments(spool.path()).unwrap().is_empty());
}
