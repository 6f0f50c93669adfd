//! Spool files against the real server: file sink (no `[clickhouse]`) + dump + replay,
//! and corrupted records (flipped byte, truncated tail) skipped with a log line and a
//! counter while the rest is replayed.

mod common;

use common::{ch_url, q, scripted_node, scripted_node_on, wait_until, TestDb};
use sink::{schema, Row, RowValue, Sink, SinkMetrics, SpoolConfig, Table};
use std::io::Write;
use std::sync::{Arc, Mutex};

/// Captures every log line of this test binary.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn logs() -> Captured {
    static LOGS: std::sync::OnceLock<Captured> = std::sync::OnceLock::new();
    LOGS.get_or_init(|| {
        let c = Captured::default();
        let w = c.clone();
        tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || w.clone())
            .with_max_level(tracing::Level::INFO)
            .init();
        c
    })
    .clone()
}

/// The log captured so far, and how many of its lines hold each of `parts`.
fn lines_with(logs: &Captured, parts: &[&str]) -> (usize, String) {
    let text = String::from_utf8_lossy(&logs.0.lock().unwrap()).to_string();
    let n = text
        .lines()
        .filter(|l| parts.iter().all(|p| l.contains(p)))
        .count();
    (n, text)
}

fn row(i: u64, s: &str) -> Row {
    Row {
        itemid: i,
        clock: 1_730_000_000 + i as u32,
        ns: 1,
        hostname: "h\tx".into(),
        itemname: "sysDescr".into(),
        value: RowValue::Str(s.to_string()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_sink_dump_and_replay() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = Arc::new(SinkMetrics::default());
    let (sink, h) = Sink::start(None, SpoolConfig::new(dir.path()), metrics.clone())
        .await
        .unwrap();
    assert!(matches!(sink.health(), sink::Health::Spooling { .. }));
    h.send(row(1, "a\tb\nc\\d"), Table::Str).await.unwrap();
    h.send(
        Row {
            value: RowValue::Float(f64::NAN),
            ..row(2, "")
        },
        Table::Dbl,
    )
    .await
    .unwrap();
    h.send(
        Row {
            value: RowValue::Uint(u64::MAX),
            ..row(3, "")
        },
        Table::Uint,
    )
    .await
    .unwrap();
    h.send(
        Row {
            value: RowValue::Uint(1),
            ..row(4, "")
        },
        Table::Dbl,
    )
    .await
    .unwrap(); // wrong table
    drop(h);
    let report = sink.shutdown().await.unwrap();
    assert_eq!(
        (
            report.rows_spooled,
            report.rows_written,
            report.rows_dropped
        ),
        (3, 0, 1)
    );
    assert_eq!(metrics.dropped_rows(sink::DropReason::WrongType), 1);

    let mut out = Vec::new();
    let d = sink::dump_tsv(dir.path(), &mut out).unwrap();
    assert_eq!(d.rows, 3);
    let mut lines: Vec<_> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort();
    assert_eq!(
        lines,
        vec![
            "history_dbl\t2\t1730000002\t1\th\\tx\tsysDescr\tnan",
            "history_str\t1\t1730000001\t1\th\\tx\tsysDescr\ta\\tb\\nc\\\\d",
            "history_uint\t3\t1730000003\t1\th\\tx\tsysDescr\t18446744073709551615",
        ]
    );

    // The same files load into ClickHouse.
    let url = ch_url();
    let db = TestDb::new(&url);
    let cfg = db.config();
    schema::apply(&cfg).await.unwrap();
    let r = sink::replay_spool(&cfg, &SpoolConfig::new(dir.path()))
        .await
        .unwrap();
    assert_eq!(r.rows, 3);
    assert_eq!(
        q(
            &url,
            &format!("SELECT value FROM {}.history_str FORMAT TSV", db.name)
        ),
        "a\\tb\\nc\\\\d\n"
    );
    assert_eq!(
        q(
            &url,
            &format!(
                "SELECT toString(value) FROM {}.history_uint FORMAT TSV",
                db.name
            )
        )
        .trim(),
        u64::MAX.to_string()
    );
    assert!(sink::spool::list_segments(dir.path()).unwrap().is_empty());
    // A second replay has nothing to do (no duplicates).
    assert_eq!(
        sink::replay_spool(&cfg, &SpoolConfig::new(dir.path()))
            .await
            .unwrap()
            .rows,
        0
    );
    assert_eq!(
        q(
            &url,
            &format!("SELECT count() FROM merge('{}', '^history_')", db.name)
        )
        .trim(),
        "3"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupted_records_are_skipped_logged_counted_rest_replayed() {
    let logs = logs();
    let dir = tempfile::tempdir().unwrap();
    let cfg_spool = SpoolConfig::new(dir.path());
    // Six records of 10 rows each in one segment.
    let starts: Vec<usize> = spool_of(dir.path(), 6)
        .into_iter()
        .map(|o| o as usize)
        .collect();
    let seg = sink::spool::list_segments(dir.path()).unwrap().remove(0);
    let mut bytes = std::fs::read(&seg.path).unwrap();
    bytes[starts[1] + 40] ^= 0x01; // flip one payload bit of record 2
    bytes.truncate(starts[5] + 30); // crash in the middle of appending record 6
    std::fs::write(&seg.path, &bytes).unwrap();

    let url = ch_url();
    let db = TestDb::new(&url);
    let cfg = db.config();
    schema::apply(&cfg).await.unwrap();
    let r = sink::replay_spool(&cfg, &cfg_spool).await.unwrap();
    assert_eq!((r.rows, r.corrupt_records, r.segments), (40, 2, 1), "{r:?}");
    let got = q(&url, &format!("SELECT intDiv(itemid, 10) r, count() FROM {}.history_str GROUP BY r ORDER BY r FORMAT TSV", db.name));
    assert_eq!(got, "0\t10\n2\t10\n3\t10\n4\t10\n");
    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    let skipped: Vec<_> = text
        .lines()
        .filter(|l| l.contains("skipping corrupted record"))
        .collect();
    assert_eq!(skipped.len(), 2, "{text}");
    assert!(
        skipped[0].contains(&format!("offset={}", starts[1])) && skipped[0].contains("Checksum"),
        "{}",
        skipped[0]
    );
    assert!(
        skipped[1].contains(&format!("offset={}", starts[5])) && skipped[1].contains("Truncated"),
        "{}",
        skipped[1]
    );
    assert!(skipped[0].contains(&seg.path.display().to_string()));
}

/// A spool of one segment of `records` records of 10 rows each (itemids 10r..10r+9);
/// the records' offsets.
fn spool_of(dir: &std::path::Path, records: u64) -> Vec<u64> {
    let mut sp =
        sink::spool::Spool::open(&SpoolConfig::new(dir), Arc::new(SinkMetrics::default())).unwrap();
    let mut offsets = Vec::new();
    let mut offset = 0;
    for r in 0..records {
        let mut buf = bytes::BytesMut::new();
        for i in 0..10 {
            sink::rowbinary::encode_row(&mut buf, &row(r * 10 + i, &format!("rec {r} row {i}")));
        }
        let batch = sink::Batch {
            table: Table::Str,
            rows: 10,
            first_clock: 0,
            data: buf.freeze(),
        };
        offsets.push(offset);
        offset += sink::record::encode(&batch).len() as u64;
        sp.append(&batch).unwrap();
    }
    sp.close();
    offsets
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirmation_that_cannot_be_noted_does_not_send_a_record_again() {
    // The .ack file cannot be written (a full disk; here a directory in its place):
    // each record confirmed is remembered in memory instead of failing the replay,
    // which then started over and inserted the first record again, without end.
    let dir = tempfile::tempdir().unwrap();
    spool_of(dir.path(), 3);
    let seg = sink::spool::list_segments(dir.path()).unwrap().remove(0);
    std::fs::create_dir(seg.ack_path()).unwrap();
    let url = ch_url();
    let db = TestDb::new(&url);
    let cfg = db.config();
    schema::apply(&cfg).await.unwrap();
    let r = sink::replay_spool(&cfg, &SpoolConfig::new(dir.path()))
        .await
        .unwrap_or_else(|(e, r)| panic!("{e}: {r:?}"));
    assert_eq!((r.rows, r.segments), (30, 1), "{r:?}");
    let got = q(
        &url,
        &format!(
            "SELECT count(), uniqExact(itemid) FROM {}.history_str FORMAT TSV",
            db.name
        ),
    );
    assert_eq!(got, "30\t30\n");
    assert!(!seg.path.exists(), "the segment is done with");
}

#[test]
fn dump_shows_what_is_left_to_load() {
    let dir = tempfile::tempdir().unwrap();
    let offsets = spool_of(dir.path(), 3);
    let seg = sink::spool::list_segments(dir.path()).unwrap().remove(0);
    // A replay had record 2 confirmed, then stopped.
    sink::spool::ack(&seg, offsets[1]).unwrap();
    let mut out = Vec::new();
    let r = sink::dump_tsv(dir.path(), &mut out).unwrap();
    assert_eq!((r.rows, r.confirmed_records), (20, 1), "{r:?}");
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("rec 0 row 0") && text.contains("rec 2 row 9"));
    assert!(!text.contains("rec 1 "), "{text}");
    // A directory that is not there is an error, not an empty spool.
    let missing = dir.path().join("typo");
    assert!(sink::dump_tsv(&missing, &mut Vec::new()).is_err());
}

#[test]
fn a_segment_deleted_after_it_was_listed_is_gone_not_unreadable() {
    // `spool dump` beside a daemon: a segment the daemon replayed (or the cap dropped)
    // between the listing and the read is skipped, not an error (exit 1).
    let dir = tempfile::tempdir().unwrap();
    spool_of(dir.path(), 1);
    let seg = sink::spool::list_segments(dir.path()).unwrap().remove(0);
    std::fs::remove_file(&seg.path).unwrap();
    let e = sink::spool::read_segment(&seg).unwrap_err();
    assert!(e.is_gone() && e.is_unreadable(), "{e}");
    // A segment that is there but cannot be read is not gone.
    std::fs::create_dir(&seg.path).unwrap();
    let e = sink::spool::read_segment(&seg).unwrap_err();
    assert!(!e.is_gone() && e.is_unreadable(), "{e}");
}

/// A damaged record is counted lost once, however often its segment is replayed: a
/// server that refuses every INSERT (read-only here) holds the segment, and the daemon
/// tries it again every `retry_backoff_max`, scanning it each time. Each pass counted
/// (and logged) the same damaged record again, so `dropped_rows_total{reason="corrupt"}`
/// grew for as long as the server refused, for rows lost once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_record_is_counted_once_however_often_its_segment_is_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let starts = spool_of(dir.path(), 2);
    let seg = sink::spool::list_segments(dir.path()).unwrap().remove(0);
    let mut bytes = std::fs::read(&seg.path).unwrap();
    bytes[starts[1] as usize + 40] ^= 0x01; // flip one payload bit of record 2
    std::fs::write(&seg.path, &bytes).unwrap();
    let readonly = "Code: 164, e.displayText() = DB::Exception: Cannot execute query in readonly mode, e.what() = DB::Exception\n";
    let url = scripted_node(|_, _| ("500 Internal Server Error", readonly.as_bytes().to_vec()));
    let cfg = sink::ClickHouseConfig {
        url: Some(url),
        retry_backoff: std::time::Duration::from_millis(10),
        retry_backoff_max: std::time::Duration::from_millis(20),
        ..sink::ClickHouseConfig::default()
    };
    let metrics = Arc::new(SinkMetrics::default());
    let (sink, h) = Sink::start(Some(cfg), SpoolConfig::new(dir.path()), metrics.clone())
        .await
        .unwrap();
    // The first pass tries the intact record 5 times; each later pass once.
    let passes = std::time::Instant::now();
    while metrics.insert_errors(sink::ErrorClass::Server) < 5 + 4 {
        assert!(
            passes.elapsed() < std::time::Duration::from_secs(60),
            "the segment was not tried again: {} errors",
            metrics.insert_errors(sink::ErrorClass::Server)
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    drop(h);
    sink.shutdown().await.unwrap();
    assert_eq!(metrics.corrupt_records(), 1);
    assert_eq!(metrics.dropped_rows(sink::DropReason::Corrupt), 10);
    // Nothing else went anywhere: the intact record waits in the spool.
    assert_eq!(metrics.rejected_rows(), 0);
    assert_eq!(sink::spool::list_segments(dir.path()).unwrap().len(), 1);
}

/// A spool that cannot be written while ClickHouse is down (a full disk; here a file
/// where its directory was): the rows are lost, counted. Each batch's loss was an
/// ERROR line of its own (one per table every flush interval, for as long as the disk
/// stayed full), and the line saying ClickHouse was back counted the rows spooled and
/// not those lost. The loss is logged when it begins and when it ends, with the rows
/// it cost, as is ClickHouse's return.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spool_that_cannot_be_written_is_logged_once_and_what_it_lost_when_it_ends() {
    let logs = logs();
    let up = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let cfg = node_down_until("127.0.197.2", up.clone());
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    let metrics = Arc::new(SinkMetrics::default());
    let (sink, h) = Sink::start(Some(cfg), SpoolConfig::new(&dir), metrics.clone())
        .await
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::write(&dir, b"not a directory").unwrap();
    let lost = |m: &SinkMetrics| m.dropped_rows(sink::DropReason::SpoolWrite);
    for b in 0..6u64 {
        for i in 0..5 {
            h.send(row(5 * b + i, "x"), Table::Str).await.unwrap();
        }
        let m = metrics.clone();
        assert!(
            wait_until(std::time::Duration::from_secs(10), || lost(&m)
                == 5 * (b + 1)),
            "{}",
            metrics.render_text()
        );
    }
    let (errors, text) = lines_with(&logs, &["ERROR", &dir.display().to_string()]);
    assert_eq!(errors, 1, "one line for the loss, 6 batches lost:\n{text}");

    // ClickHouse is back: the replayer's probe finds it, then a batch is stored.
    up.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(
        wait_until(std::time::Duration::from_secs(20), || sink.health()
            == sink::Health::Writing),
        "{:?}",
        sink.health()
    );
    for i in 30..35 {
        h.send(row(i, "x"), Table::Str).await.unwrap();
    }
    let m = metrics.clone();
    assert!(
        wait_until(std::time::Duration::from_secs(20), || m
            .rows_written(Table::Str)
            == 5),
        "{}",
        String::from_utf8_lossy(&logs.0.lock().unwrap())
    );
    drop(h);
    sink.shutdown().await.unwrap();
    let text = String::from_utf8_lossy(&logs.0.lock().unwrap()).to_string();
    let line = |what: &str| {
        text.lines()
            .find(|l| l.contains(what))
            .unwrap_or_else(|| panic!("no line with {what:?}:\n{text}"))
            .to_string()
    };
    assert!(
        line("ClickHouse accepts inserts again").contains("rows_dropped=30"),
        "{text}"
    );
    assert!(
        line("rows are kept again").contains("rows_dropped=30"),
        "{text}"
    );
}

/// A fake node on `ip`, down (every request refused) while `up` is not set, a server
/// whose `SELECT 1` answers 1 (RowBinary), whose schema check finds no columns, and
/// that stores every INSERT. Returns a config sending to it (its URL), with 5-row
/// batches flushed every 50 ms, one attempt each.
fn node_down_until(ip: &str, up: Arc<std::sync::atomic::AtomicBool>) -> sink::ClickHouseConfig {
    let url = scripted_node_on(ip, move |head, body| {
        if !up.load(std::sync::atomic::Ordering::SeqCst) {
            return ("503 Service Unavailable", b"down".to_vec());
        }
        let text = format!("{head}{}", String::from_utf8_lossy(body));
        if text.contains("SELECT 1") || text.contains("SELECT%201") {
            return ("200 OK", vec![1]);
        }
        ("200 OK", Vec::new())
    });
    sink::ClickHouseConfig {
        url: Some(url),
        batch_rows: 5,
        flush_interval: std::time::Duration::from_millis(50),
        max_attempts: 1,
        retry_backoff: std::time::Duration::from_millis(10),
        retry_backoff_max: std::time::Duration::from_millis(100),
        compression: sink::Compression::None,
        ..sink::ClickHouseConfig::default()
    }
}

/// Rows an earlier run left in the spool `dir` (a file sink's), as 5-row batches:
/// returns the bytes of its segments.
async fn spooled_by_an_earlier_run(dir: &std::path::Path, rows: u64) -> u64 {
    let (s, h) = Sink::start(
        None,
        SpoolConfig::new(dir),
        Arc::new(SinkMetrics::default()),
    )
    .await
    .unwrap();
    for i in 0..rows {
        h.send(row(1000 + i, "earlier"), Table::Str).await.unwrap();
    }
    drop(h);
    s.shutdown().await.unwrap();
    sink::spool::list_segments(dir)
        .unwrap()
        .iter()
        .map(|s| s.bytes)
        .sum()
}

/// The one line of the log with `what` (a panic if there are none or more).
fn the_line(logs: &Captured, what: &str) -> String {
    let (n, text) = lines_with(logs, &[what]);
    assert_eq!(n, 1, "{what:?}:\n{text}");
    text.lines().find(|l| l.contains(what)).unwrap().to_string()
}

/// The value of `field=` in a log line.
fn field(line: &str, field: &str) -> u64 {
    let at = format!(" {field}=");
    let v = line
        .split_once(&at)
        .unwrap_or_else(|| panic!("no {field} in {line}"))
        .1;
    v.split(' ').next().unwrap().parse().unwrap()
}

/// ClickHouse's return said `rows_spooled`, the rows this process spooled during the
/// outage: after a restart onto an earlier run's spool, "rows_spooled=5" read as all
/// the replay had to load, 25 rows. The line gives `spool_bytes` too: all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clickhouse_back_says_what_the_spool_holds_with_an_earlier_runs_rows() {
    let logs = logs();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    let earlier = spooled_by_an_earlier_run(&dir, 20).await;
    assert!(earlier > 0);
    let up = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let cfg = node_down_until("127.0.201.2", up.clone());
    let metrics = Arc::new(SinkMetrics::default());
    let (sink, h) = Sink::start(Some(cfg), SpoolConfig::new(&dir), metrics.clone())
        .await
        .unwrap();
    for i in 0..5 {
        h.send(row(i, "x"), Table::Str).await.unwrap();
    }
    let m = metrics.clone();
    assert!(
        wait_until(std::time::Duration::from_secs(10), || m.spooled_rows() == 5),
        "{}",
        metrics.render_text()
    );
    up.store(true, std::sync::atomic::Ordering::SeqCst);
    let m = metrics.clone();
    assert!(
        wait_until(std::time::Duration::from_secs(20), || m
            .rows_written(Table::Str)
            == 25),
        "{}",
        String::from_utf8_lossy(&logs.0.lock().unwrap())
    );
    drop(h);
    sink.shutdown().await.unwrap();
    let line = the_line(&logs, "ClickHouse accepts inserts again");
    assert_eq!(field(&line, "rows_spooled"), 5, "{line}");
    assert!(field(&line, "spool_bytes") > earlier, "{earlier}: {line}");
}

/// A replay logged an INFO line per segment replayed: after a long outage, hundreds.
/// It logs one line for the segments it replayed one after another (here the three
/// that three earlier runs left), with their rows; each segment is at debug.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_is_one_line_for_all_its_segments() {
    let logs = logs();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    // A run's segment is sealed at the next start: one segment per run.
    for _ in 0..3 {
        spooled_by_an_earlier_run(&dir, 5).await;
    }
    assert_eq!(sink::spool::list_segments(&dir).unwrap().len(), 3);
    let cfg = node_down_until("127.0.201.3", Arc::new(true.into()));
    let metrics = Arc::new(SinkMetrics::default());
    let (sink, h) = Sink::start(Some(cfg), SpoolConfig::new(&dir), metrics.clone())
        .await
        .unwrap();
    assert!(
        wait_until(std::time::Duration::from_secs(20), || lines_with(
            &logs,
            &["spool: replayed"]
        )
        .0 == 1),
        "{}",
        lines_with(&logs, &[]).1
    );
    drop(h);
    sink.shutdown().await.unwrap();
    assert_eq!(metrics.rows_written(Table::Str), 15);
    let line = the_line(&logs, "spool: replayed");
    assert!(line.contains(" INFO "), "{line}");
    assert_eq!(field(&line, "segments"), 3, "{line}");
    assert_eq!(field(&line, "rows"), 15, "{line}");
    assert!(line.contains("until=\"the spool is empty\""), "{line}");
    let (n, text) = lines_with(&logs, &["segment replayed"]);
    assert_eq!(n, 0, "{text}");
}

/// A table ClickHouse refuses for as long as it is broken (read-only here) holds its
/// spooled records, a segment per batch spooled meanwhile, each passed over at every
/// pass over the spool (every `retry_backoff_max`): a WARN line for each segment at
/// each pass was a flood for as long as the table stayed broken. It is logged once
/// (then when the refusal changes, or every 5 minutes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_refused_pass_after_pass_are_logged_once() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let logs = logs();
    let refused = Arc::new(AtomicU64::new(0));
    let r2 = refused.clone();
    let url = scripted_node_on("127.0.197.3", move |head, _| {
        if head.contains("history_str") {
            r2.fetch_add(1, Ordering::SeqCst);
            let readonly = "Code: 242, e.displayText() = DB::Exception: Table is in readonly mode, e.what() = DB::Exception\n";
            return ("500 Internal Server Error", readonly.as_bytes().to_vec());
        }
        ("200 OK", Vec::new())
    });
    let tmp = tempfile::tempdir().unwrap();
    let segments = 4;
    // Each opening of the spool writes a segment of its own.
    for _ in 0..segments {
        spool_of(tmp.path(), 1);
    }
    let cfg = sink::ClickHouseConfig {
        url: Some(url),
        retry_backoff: std::time::Duration::from_millis(10),
        retry_backoff_max: std::time::Duration::from_millis(50),
        compression: sink::Compression::None,
        ..sink::ClickHouseConfig::default()
    };
    let metrics = Arc::new(SinkMetrics::default());
    let (sink, h) = Sink::start(Some(cfg), SpoolConfig::new(tmp.path()), metrics.clone())
        .await
        .unwrap();
    // Three passes over every segment: 5 tries each at the first, 1 at the next two.
    let passes = wait_until(std::time::Duration::from_secs(30), || {
        refused.load(Ordering::SeqCst) >= segments * (5 + 1 + 1)
    });
    drop(h);
    sink.shutdown().await.unwrap();
    assert!(passes, "{} INSERTs refused", refused.load(Ordering::SeqCst));
    assert_eq!(metrics.rejected_rows(), 0);
    let shown = tmp.path().display().to_string();
    let (lines, text) = lines_with(&logs, &["refuses records of this segment", &shown]);
    assert_eq!(lines, 1, "{text}");
}
