//! Against the real ClickHouse server (scripts/services.sh): every value type column by
//! column, Glaber's read queries, schema verification, rejected data, round-robin.

mod common;

use common::{ch_url, q, wait_until, PrivateServer, TestDb};
use sink::{
    schema, ClickHouseConfig, Compression, Row, RowValue, Sink, SinkMetrics, SpoolConfig, Table,
    Trend,
};
use std::sync::Arc;
use std::time::Duration;

fn cfg(url: &str, db: &str, compression: Compression) -> ClickHouseConfig {
    ClickHouseConfig {
        url: Some(url.to_string()),
        database: db.to_string(),
        batch_rows: 7, // several batches per table
        flush_interval: Duration::from_millis(100),
        compression,
        max_attempts: 2,
        retry_backoff: Duration::from_millis(50),
        retry_backoff_max: Duration::from_millis(500),
        ..ClickHouseConfig::default()
    }
}

/// Item `itemid`'s value `v` at one fixed clock, host "h", key "k".
fn uint_row(itemid: u64, v: u64) -> Row {
    Row {
        itemid,
        clock: 1_700_000_000,
        ns: 0,
        hostname: "h".into(),
        itemname: "k".into(),
        value: RowValue::Uint(v),
    }
}

fn strings() -> Vec<String> {
    vec![
        String::new(),
        "plain".into(),
        "single ' quote and double \" quote".into(),
        "tab\there".into(),
        "new\nline\r\n".into(),
        "back\\slash \\t not a tab".into(),
        "UTF-8: ünïcödé, 日本語, emoji 🚀".into(),
        "nul \0 byte".into(),
        "x".repeat(1000),
    ]
}

fn floats() -> Vec<f64> {
    vec![
        0.0,
        -0.0,
        -1.5,
        0.1,
        f64::MAX,
        f64::MIN,
        f64::MIN_POSITIVE,
        1e-300,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ]
}

fn uints() -> Vec<u64> {
    vec![
        0,
        1,
        255,
        65_536,
        u64::from(u32::MAX) + 1,
        1 << 63,
        u64::MAX - 1,
        u64::MAX,
    ]
}

/// Rows for every table; itemid encodes (table, index).
fn rows() -> Vec<(Table, Row)> {
    let clock0 = 1_700_000_000u32;
    let mut out = Vec::new();
    let mut push = |table: Table, i: usize, value: RowValue| {
        let host = strings()[i % strings().len()].clone();
        out.push((
            table,
            Row {
                itemid: (table.code() as u64) << 32 | i as u64,
                clock: clock0 + i as u32 * 3600,
                ns: if table.is_trends() {
                    0
                } else {
                    999_999_999 - i as u32
                },
                hostname: format!("host «{host}»").into(),
                itemname: format!("icmppingsec[,3,,,,avg]\t{i}").into(),
                value,
            },
        ));
    };
    for (i, v) in floats().into_iter().enumerate() {
        push(Table::Dbl, i, RowValue::Float(v));
    }
    for (i, v) in uints().into_iter().enumerate() {
        push(Table::Uint, i, RowValue::Uint(v));
    }
    for (i, v) in strings().into_iter().enumerate() {
        push(Table::Str, i, RowValue::Str(v.clone()));
        push(Table::Log, i, RowValue::Str(v));
    }
    for (i, v) in floats().into_iter().enumerate() {
        let t = Trend {
            min: v,
            max: -v,
            avg: v / 3.0,
            count: i as u32 * 1000,
        };
        push(Table::TrendsDbl, i, RowValue::FloatTrend(t));
    }
    for (i, v) in uints().into_iter().enumerate() {
        let v = v as i64;
        let t = Trend {
            min: v,
            max: v.wrapping_neg(),
            avg: v / 3,
            count: u32::MAX - i as u32,
        };
        push(Table::TrendsUint, i, RowValue::UintTrend(t));
    }
    out
}

/// `got` (ClickHouse's text of a Float64) is `want`, bit for bit (any NaN for NaN).
fn same_float(got: &str, want: f64, what: &str) {
    let parsed: f64 = got
        .parse()
        .unwrap_or_else(|_| panic!("{what}: float {got:?}"));
    if want.is_nan() {
        assert!(parsed.is_nan(), "{what}: NaN, got {got}");
    } else {
        assert_eq!(parsed.to_bits(), want.to_bits(), "{what}: {got} vs {want}");
    }
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02X}")).collect()
}

/// A sink to `cfg` with a spool of its own: the sink, its handle, its metrics and its
/// spool's directory.
async fn started(
    cfg: ClickHouseConfig,
) -> (Sink, sink::SinkHandle, Arc<SinkMetrics>, tempfile::TempDir) {
    let spool = tempfile::tempdir().unwrap();
    let metrics = Arc::new(SinkMetrics::default());
    let (sink, h) = Sink::start(Some(cfg), SpoolConfig::new(spool.path()), metrics.clone())
        .await
        .unwrap();
    (sink, h, metrics, spool)
}

async fn write_all(
    cfg: ClickHouseConfig,
    rows: &[(Table, Row)],
) -> (sink::ShutdownReport, Arc<SinkMetrics>) {
    let (sink, handle, metrics, _spool) = started(cfg).await;
    for (t, r) in rows {
        handle.send(r.clone(), *t).await.unwrap();
    }
    drop(handle);
    let report = sink.shutdown().await.unwrap();
    (report, metrics)
}

fn check_columns(url: &str, db: &str, rows: &[(Table, Row)]) {
    for table in Table::ALL {
        let (ns, value_expr) = match table {
            Table::Dbl | Table::Uint => ("ns", "toString(value)"),
            Table::Str | Table::Log => ("ns", "hex(value)"),
            Table::TrendsDbl | Table::TrendsUint => (
                "0",
                "toString(value_min), toString(value_max), toString(value_avg), count",
            ),
        };
        let body = q(
            url,
            &format!(
                "SELECT itemid, toUInt32(clock), {ns}, toUInt16(day), hex(hostname), hex(itemname), {value_expr} \
                 FROM {db}.{} ORDER BY itemid FORMAT TSV",
                table.name()
            ),
        );
        let got: Vec<Vec<&str>> = body.lines().map(|l| l.split('\t').collect()).collect();
        let want: Vec<&Row> = rows
            .iter()
            .filter(|(t, _)| *t == table)
            .map(|(_, r)| r)
            .collect();
        assert_eq!(got.len(), want.len(), "{table}: row count");
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g[0], w.itemid.to_string(), "{table} itemid");
            assert_eq!(g[1], w.clock.to_string(), "{table} clock");
            assert_eq!(g[2], w.ns.to_string(), "{table} ns");
            assert_eq!(g[3], (w.clock / 86_400).to_string(), "{table} day");
            assert_eq!(g[4], hex(&w.hostname), "{table} hostname");
            assert_eq!(g[5], hex(&w.itemname), "{table} itemname");
            let what = format!("{table} {}", w.itemid);
            match &w.value {
                RowValue::Float(v) => same_float(g[6], *v, &what),
                RowValue::Uint(v) => assert_eq!(g[6], v.to_string(), "{table} uint"),
                RowValue::Str(s) => assert_eq!(g[6], hex(s), "{table} string {s:?}"),
                RowValue::FloatTrend(t) => {
                    for (got, want) in g[6..9].iter().zip([t.min, t.max, t.avg]) {
                        same_float(got, want, &what);
                    }
                    assert_eq!(g[9], t.count.to_string(), "{what} count");
                }
                RowValue::UintTrend(t) => {
                    let want = [t.min, t.max, t.avg].map(|v| v.to_string());
                    assert_eq!(g[6..9], want, "{what}");
                    assert_eq!(g[9], t.count.to_string(), "{what} count");
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_value_type_column_by_column_both_compressions() {
    let url = ch_url();
    for compression in [Compression::None, Compression::Lz4] {
        let db = TestDb::new(&url);
        let c = cfg(&url, &db.name, compression);
        let applied = schema::apply(&c).await.unwrap();
        assert_eq!(applied[0].created.len(), 6);
        let rows = rows();
        let (report, metrics) = write_all(c.clone(), &rows).await;
        assert_eq!(report.rows_written, rows.len() as u64, "{report:?}");
        assert_eq!(report.rows_spooled, 0);
        assert_eq!(report.rows_dropped, 0);
        // batch_rows = 7: more than one INSERT per table.
        assert!(metrics.inserts(Table::Str) >= 2);
        check_columns(&url, &db.name, &rows);
        // Re-applying creates nothing and verifies clean.
        assert!(schema::apply(&c).await.unwrap()[0].created.is_empty());
        schema::verify(&c).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn glaber_read_queries_work_unchanged() {
    let url = ch_url();
    let db = TestDb::new(&url);
    let c = cfg(&url, &db.name, Compression::Lz4);
    schema::apply(&c).await.unwrap();
    let t0 = 1_750_000_000u32;
    let mut rows = Vec::new();
    for i in 0..15u32 {
        for (t, v) in [
            (Table::Dbl, RowValue::Float(f64::from(i) * 0.5)),
            (Table::Uint, RowValue::Uint(u64::from(i) * 10)),
        ] {
            rows.push((
                t,
                Row {
                    itemid: 4242,
                    clock: t0 + i * 60,
                    ns: 0,
                    hostname: "r1".into(),
                    itemname: "k".into(),
                    value: v,
                },
            ));
        }
    }
    // A different item that must not show up.
    rows.push((
        Table::Dbl,
        Row {
            itemid: 4243,
            clock: t0 + 999,
            ns: 0,
            hostname: "r1".into(),
            itemname: "k".into(),
            value: RowValue::Float(1.0),
        },
    ));
    write_all(c, &rows).await;
    let db = &db.name;
    let body = q(
        &url,
        &format!(
            "SELECT toUInt32(clock) clock, value FROM {db}.history_dbl WHERE itemid=4242 AND clock > {} ORDER BY clock DESC LIMIT 10 FORMAT JSON",
            t0 + 2 * 60
        ),
    );
    let j: serde_json::Value = serde_json::from_str(&body).unwrap();
    let data = j["data"].as_array().unwrap();
    assert_eq!(data.len(), 10);
    assert_eq!(j["rows"], 10);
    assert_eq!(data[0]["clock"], u64::from(t0 + 14 * 60));
    assert_eq!(data[0]["value"], 7.0);
    assert_eq!(data[9]["clock"], u64::from(t0 + 5 * 60));
    assert_eq!(data[9]["value"], 2.5);
    // history_uint: 64-bit integers are quoted in ClickHouse JSON.
    let body = q(
        &url,
        &format!("SELECT toUInt32(clock) clock, value FROM {db}.history_uint WHERE itemid=4242 AND clock > {t0} ORDER BY clock DESC LIMIT 10 FORMAT JSON"),
    );
    let j: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(j["data"][0]["value"], "140");
    assert_eq!(j["data"].as_array().unwrap().len(), 10);
    // Glaber's range query for graphs.
    let body = q(
        &url,
        &format!(
            "SELECT itemid, toUInt32(clock) clock, value FROM {db}.history_dbl WHERE itemid IN (4242,4243) AND clock BETWEEN {t0} AND {} ORDER BY clock FORMAT TSV",
            t0 + 10_000
        ),
    );
    assert_eq!(body.lines().count(), 16);
}

/// Glaber's server keeps its own log items in the `history_log` netpoller creates: it
/// INSERTs and SELECTs them with `logeventid`, `source` and `severity`, which the
/// table lacked (every log value of Glaber's lost, every read of one failed).
/// netpoller's own rows of it leave them to their defaults; a `history_log` created
/// before, without them, still passes the check and takes netpoller's rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn glaber_writes_and_reads_its_log_items_in_the_history_log_created_here() {
    let url = ch_url();
    let db = TestDb::new(&url);
    let c = cfg(&url, &db.name, Compression::None);
    schema::apply(&c).await.unwrap();
    let name = &db.name;
    // Glaber's history_clickhouse.c, its INSERT and SELECT of a log item (ns on).
    q(
        &url,
        &format!(
            "INSERT INTO {name}.history_log (day,itemid,clock,value,source,severity,logeventid,ns,hostname, itemname) VALUES (CAST(1750000000 as date) ,77,1750000000, 'disk full','kernel',4, 1234,5,'srv','log[/var/log/syslog]')"
        ),
    );
    let body = q(
        &url,
        &format!("SELECT  toUInt32(clock) clock,value,source,severity,logeventid,ns FROM {name}.history_log WHERE itemid=77 ORDER BY clock DESC format JSON"),
    );
    let j: serde_json::Value = serde_json::from_str(&body).unwrap();
    let row = &j["data"][0];
    assert_eq!(row["clock"], 1_750_000_000u64);
    assert_eq!(row["value"], "disk full");
    assert_eq!(row["source"], "kernel");
    assert_eq!(row["severity"], 4);
    assert_eq!(row["logeventid"], "1234");
    assert_eq!(row["ns"], 5);
    // A history_log of before (netpoller's columns only) is still good to write to.
    q(&url, &format!("DROP TABLE {name}.history_log"));
    q(
        &url,
        &format!("CREATE TABLE {name}.history_log AS {name}.history_str"),
    );
    schema::verify(&c).await.unwrap();
    let row = Row {
        value: RowValue::Str("line".into()),
        ..uint_row(78, 0)
    };
    let (report, _) = write_all(c, &[(Table::Log, row)]).await;
    assert_eq!(report.rows_spooled, 0, "{report:?}");
    let body = q(
        &url,
        &format!("SELECT value FROM {name}.history_log WHERE itemid=78 FORMAT TSV"),
    );
    assert_eq!(body, "line\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_column_type_is_reported_not_overwritten() {
    let url = ch_url();
    let db = TestDb::new(&url);
    let name = &db.name;
    q(&url, &format!("CREATE DATABASE {name}"));
    q(
        &url,
        &format!(
            "CREATE TABLE {name}.history_dbl (day Date, itemid UInt64, clock DateTime, hostname String, itemname String, ns UInt32, value Float32) \
             ENGINE = MergeTree() PARTITION BY toYYYYMM(day) ORDER BY (itemid, clock)"
        ),
    );
    q(
        &url,
        &format!(
            "CREATE TABLE {name}.history_uint (day Date, itemid UInt64, clock DateTime, hostname String, itemname String, value UInt64) \
             ENGINE = MergeTree() PARTITION BY toYYYYMM(day) ORDER BY (itemid, clock)"
        ),
    );
    let c = cfg(&url, name, Compression::None);
    let err = schema::apply(&c).await.unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains(&format!(
            "table {name}.history_dbl: column `value` has type Float32, expected Float64"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "table {name}.history_uint: column `ns` (UInt32) is missing"
        )),
        "{text}"
    );
    match &err {
        schema::SchemaError::Incompatible { problems, .. } => {
            assert_eq!(problems.len(), 2, "{problems:?}")
        }
        e => panic!("{e}"),
    }
    // Not overwritten: still Float32; the missing tables were created.
    let ty = q(&url, &format!("SELECT type FROM system.columns WHERE database='{name}' AND table='history_dbl' AND name='value'"));
    assert_eq!(ty.trim(), "Float32");
    assert_eq!(
        q(
            &url,
            &format!("SELECT count() FROM system.tables WHERE database='{name}'")
        )
        .trim(),
        "6"
    );
    assert!(schema::verify(&c).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_of_other_types_gets_no_rows_they_are_spooled() {
    // history_uint.value changed to Float64 (by hand, or while the daemon was away):
    // RowBinary carries no types, so ClickHouse took the UInt64 bytes as doubles
    // (sysUpTime stored as 3.9e-319). The writer's check finds the column first and
    // keeps the batches spooled until the table is fixed.
    let url = ch_url();
    let db = TestDb::new(&url);
    let c = cfg(&url, &db.name, Compression::None);
    schema::apply(&c).await.unwrap();
    q(
        &url,
        &format!(
            "ALTER TABLE {}.history_uint MODIFY COLUMN value Float64",
            db.name
        ),
    );
    let rows: Vec<(Table, Row)> = (1..=5)
        .map(|i| (Table::Uint, uint_row(i, 1_000 + i)))
        .collect();
    let (report, _) = write_all(c, &rows).await;
    assert_eq!(
        (report.rows_written, report.rows_spooled),
        (0, 5),
        "{report:?}"
    );
    let n = q(
        &url,
        &format!("SELECT count() FROM {}.history_uint", db.name),
    );
    assert_eq!(n.trim(), "0");
}

/// Makes `db`'s `history_dbl.value` of type `ty`.
fn alter_dbl(db: &TestDb, ty: &str) {
    q(
        &db.url,
        &format!(
            "ALTER TABLE {}.history_dbl MODIFY COLUMN value {ty}",
            db.name
        ),
    );
}

/// A sink writing into `db` (the schema created, then `history_dbl.value` made
/// `value_type`): the sink, its handle, its metrics and its spool's directory.
async fn dbl_sink(
    db: &TestDb,
    value_type: &str,
) -> (Sink, sink::SinkHandle, Arc<SinkMetrics>, tempfile::TempDir) {
    common::init_logs();
    let c = cfg(&db.url, &db.name, Compression::None);
    schema::apply(&c).await.unwrap();
    alter_dbl(db, value_type);
    started(c).await
}

/// Sends a `history_dbl` row (0.5) of each item of `items`.
async fn send_dbl(h: &sink::SinkHandle, items: std::ops::Range<u64>) {
    for i in items {
        let row = Row {
            value: RowValue::Float(0.5),
            ..uint_row(i, 0)
        };
        h.send(row, Table::Dbl).await.unwrap();
    }
}

/// A table altered while the sink writes to it (`history_dbl.value` made String by
/// hand): ClickHouse cannot read the batches' RowBinary and refuses them as bad data
/// (code 33). Each went to the reject spool, out of the replay, with an ERROR line of
/// its own, until the check every 5 minutes found the column. A refusal as bad data
/// has the table checked at once: its rows are spooled until the table is fixed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_altered_under_the_sink_has_its_rows_spooled_not_rejected() {
    let db = TestDb::new(&ch_url());
    let (sink, h, metrics, _spool) = dbl_sink(&db, "Float64").await;
    send_dbl(&h, 0..7).await;
    assert!(
        wait_until(Duration::from_secs(20), || metrics.rows_written(Table::Dbl)
            == 7),
        "{}",
        metrics.render_text()
    );
    alter_dbl(&db, "String");
    send_dbl(&h, 7..14).await;
    let m = metrics.clone();
    wait_until(Duration::from_secs(20), || {
        m.spooled_rows() + m.rejected_rows() == 7
    });
    drop(h);
    sink.shutdown().await.unwrap();
    assert_eq!(
        (metrics.spooled_rows(), metrics.rejected_rows()),
        (7, 0),
        "spooled, rejected"
    );
    assert!(metrics.spool_bytes() > 0, "kept for the replay");
}

/// A table of other columns, fixed while the sink runs: its spooled rows are replayed
/// and its new rows written within seconds. The check that found it wrong held for 5
/// minutes, like one that passed: the fixed table got nothing meanwhile, its rows
/// spooled, and the log said ClickHouse refused them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_fixed_under_the_sink_gets_its_spooled_rows_within_seconds() {
    let db = TestDb::new(&ch_url());
    let (sink, h, metrics, _spool) = dbl_sink(&db, "String").await;
    send_dbl(&h, 0..7).await;
    let m = metrics.clone();
    assert!(
        wait_until(Duration::from_secs(20), || m.spooled_rows() == 7),
        "{}",
        metrics.render_text()
    );
    alter_dbl(&db, "Float64");
    let m = metrics.clone();
    let replayed = wait_until(Duration::from_secs(30), || {
        m.rows_written(Table::Dbl) == 7 && m.spool_bytes() == 0
    });
    send_dbl(&h, 7..14).await;
    let m = metrics.clone();
    let written = wait_until(Duration::from_secs(20), || m.rows_written(Table::Dbl) == 14);
    drop(h);
    sink.shutdown().await.unwrap();
    assert!(replayed && written, "{}", metrics.render_text());
    assert_eq!(metrics.rejected_rows(), 0);
    let n = q(
        &db.url,
        &format!(
            "SELECT count(), uniqExact(itemid) FROM {}.history_dbl FORMAT TSV",
            db.name
        ),
    );
    assert_eq!(n.trim(), "14\t14");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_is_not_clickhouse_stores_nothing_and_the_rows_are_spooled() {
    // Something else on the configured port that answers 200 to every request (a
    // maintenance page, a wrong port): an INSERT's 200 meant "stored", and the rows
    // were gone. Loopback only.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for mut c in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                let _ = c.set_read_timeout(Some(Duration::from_millis(200)));
                while let Ok(n) = c.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    let body = "<html>maintenance</html>";
                    let _ = write!(
                        c,
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                }
            });
        }
    });
    let rows: Vec<(Table, Row)> = (1..=5).map(|i| (Table::Uint, uint_row(i, i))).collect();
    let (report, metrics) = write_all(cfg(&url, "glaber", Compression::None), &rows).await;
    assert_eq!(
        (report.rows_written, report.rows_spooled),
        (0, 5),
        "{report:?}"
    );
    let text = metrics.render_text();
    assert!(
        text.lines().any(|l| l.contains("insert_errors_total")
            && l.contains("class=\"server\"")
            && !l.ends_with(" 0")),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_errors_are_not_retried_and_go_to_the_reject_spool() {
    let url = ch_url();
    let db = TestDb::new(&url);
    let c = cfg(&url, &db.name, Compression::Lz4);
    schema::apply(&c).await.unwrap();
    // A record whose payload is cut inside a row: checksum fine, RowBinary bad.
    let dir = tempfile::tempdir().unwrap();
    let spool_cfg = SpoolConfig::new(dir.path());
    {
        let mut bytes = bytes::BytesMut::new();
        let row = uint_row(1, 5);
        sink::rowbinary::encode_row(&mut bytes, &row);
        let good = bytes.clone().freeze();
        let bad = bytes.freeze().slice(..20);
        let mut sp =
            sink::spool::Spool::open(&spool_cfg, Arc::new(SinkMetrics::default())).unwrap();
        sp.append(&sink::Batch {
            table: Table::Uint,
            rows: 1,
            first_clock: 0,
            data: bad,
        })
        .unwrap();
        sp.append(&sink::Batch {
            table: Table::Uint,
            rows: 1,
            first_clock: 0,
            data: good,
        })
        .unwrap();
        sp.close();
    }
    let w = sink::writer::Writer::new(&c);
    let report = sink::replay_spool(&c, &spool_cfg).await.unwrap();
    assert_eq!(
        (report.rows, report.rejected_rows, report.segments),
        (1, 1, 1),
        "{report:?}"
    );
    assert_eq!(
        q(
            &url,
            &format!("SELECT count() FROM {}.history_uint", db.name)
        )
        .trim(),
        "1"
    );
    // The bad batch is kept under rejected/, readable by `spool dump`.
    let mut out = Vec::new();
    let dump = sink::dump_tsv(&dir.path().join("rejected"), &mut out).unwrap();
    assert_eq!(dump.segments, 1);
    assert_eq!(
        dump.corrupt_records, 1,
        "the payload itself does not decode"
    );
    assert!(
        sink::spool::list_segments(dir.path()).unwrap().is_empty(),
        "replayed segment deleted"
    );
    // The writer classifies it as a data error directly too.
    let bad = sink::Batch {
        table: Table::Dbl,
        rows: 1,
        first_clock: 0,
        data: bytes::Bytes::from_static(&[1, 2, 3]),
    };
    let e = w.insert(&bad).await.unwrap_err();
    assert_eq!(e.class, sink::ErrorClass::Data, "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_urls_round_robin_over_nodes() {
    common::init_logs();
    let shared = ch_url();
    let mut other = PrivateServer::new();
    other.start();
    let db = TestDb::new(&shared);
    let c = ClickHouseConfig {
        url: None,
        urls: vec![shared.clone(), other.url()],
        max_inflight_inserts: 1,
        ..cfg(&shared, &db.name, Compression::Lz4)
    };
    let applied = schema::apply(&c).await.unwrap();
    assert_eq!(applied.len(), 2);
    let rows: Vec<_> = (0..70u64).map(|i| (Table::Uint, uint_row(i, i))).collect();
    let (report, _) = write_all(c, &rows).await;
    assert_eq!(report.rows_written, 70, "{report:?}");
    let a: u64 = q(
        &shared,
        &format!("SELECT count() FROM {}.history_uint", db.name),
    )
    .trim()
    .parse()
    .unwrap();
    let b: u64 = q(
        &other.url(),
        &format!("SELECT count() FROM {}.history_uint", db.name),
    )
    .trim()
    .parse()
    .unwrap();
    assert_eq!(a + b, 70);
    assert!(a >= 7 && b >= 7, "both nodes got batches: {a} / {b}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_spools_and_never_shows_the_password() {
    let url = ch_url();
    let secret = "hunter2-Secret-9f3a";
    let c = ClickHouseConfig {
        password: secret.into(),
        max_attempts: 1,
        ..cfg(&url, "glaber_nonexistent_db", Compression::Lz4)
    };
    assert!(!format!("{c:?}").contains(secret));
    let (sink, h, metrics, _spool) = started(c.clone()).await;
    let row = uint_row(1, 1);
    h.send(row, Table::Uint).await.unwrap();
    let t0 = std::time::Instant::now();
    while metrics.spooled_rows() == 0 && t0.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let health = sink.health();
    let sink::Health::Spooling { reason } = &health else {
        panic!("{health:?}")
    };
    assert!(
        reason.contains("193") || reason.to_lowercase().contains("password"),
        "{reason}"
    );
    assert!(!reason.contains(secret), "{reason}");
    // An authentication failure is not the data's fault: retried class, batch kept.
    assert!(metrics.insert_errors(sink::ErrorClass::Server) >= 1);
    assert_eq!(metrics.insert_errors(sink::ErrorClass::Data), 0);
    let err = schema::verify(&c).await.unwrap_err().to_string();
    assert!(!err.contains(secret), "{err}");
    drop(h);
    let report = sink.shutdown().await.unwrap();
    assert_eq!(
        (
            report.rows_spooled,
            report.rows_written,
            report.rows_dropped
        ),
        (1, 0, 0)
    );
}

/// Trends rows for a database without trends tables that the sink must not create
/// (`trends = false`, e.g. rows spooled before the switch): they go to the reject spool
/// after one repair attempt, instead of being retried for good ahead of the history
/// spooled behind them; history goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trends_rows_without_trends_tables_are_set_aside_and_history_flows() {
    let url = ch_url();
    let db = TestDb::new(&url);
    let c = ClickHouseConfig {
        trends: false,
        ..cfg(&url, &db.name, Compression::Lz4)
    };
    assert_eq!(schema::apply(&c).await.unwrap()[0].created.len(), 4);
    let rows: Vec<_> = rows()
        .into_iter()
        .filter(|(t, _)| matches!(t, Table::Uint | Table::TrendsDbl))
        .collect();
    let (report, metrics) = write_all(c, &rows).await;
    assert_eq!(metrics.rows_written(Table::Uint), uints().len() as u64);
    assert_eq!(metrics.rows_written(Table::TrendsDbl), 0);
    assert_eq!(metrics.rejected_rows(), floats().len() as u64, "{report:?}");
    assert_eq!((report.rows_spooled, report.rows_dropped), (0, 0));
    let trends = q(
        &url,
        &format!(
            "SELECT count() FROM system.tables WHERE database = '{}' AND name LIKE 'trends%'",
            db.name
        ),
    );
    assert_eq!(trends.trim(), "0", "trends = false creates no trends table");
}

/// The reject spool tried again once the cause is fixed (the daemon's SIGUSR1): trends
/// rows refused for want of their table land once it exists, with nothing lost or
/// written twice, and the reject spool is left empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_rows_land_when_tried_again_once_their_table_exists() {
    let url = ch_url();
    let db = TestDb::new(&url);
    let c = ClickHouseConfig {
        trends: false,
        ..cfg(&url, &db.name, Compression::Lz4)
    };
    schema::apply(&c).await.unwrap();
    let (sink, handle, metrics, spool) = started(c.clone()).await;
    let retry = sink.rejects_retry();
    let nothing = retry.retry().await.unwrap();
    assert_eq!((nothing.segments, nothing.rows), (0, 0));
    let trends: Vec<_> = rows()
        .into_iter()
        .filter(|(t, _)| *t == Table::TrendsDbl)
        .collect();
    let n = trends.len() as u64;
    for (t, r) in &trends {
        handle.send(r.clone(), *t).await.unwrap();
    }
    assert!(
        wait_until(Duration::from_secs(20), || metrics.rejected_rows() == n),
        "{}",
        metrics.render_text()
    );
    // The cause fixed: the trends tables made (as `schema --apply` with trends on).
    schema::apply(&ClickHouseConfig {
        trends: true,
        ..c.clone()
    })
    .await
    .unwrap();
    let moved = retry.retry().await.unwrap();
    assert_eq!((moved.rows, moved.left), (n, 0), "{moved:?}");
    assert!(moved.error.is_none());
    assert!(
        wait_until(Duration::from_secs(20), || metrics
            .rows_written(Table::TrendsDbl)
            == n),
        "{}",
        metrics.render_text()
    );
    assert_eq!(metrics.retried_rows(), n);
    assert_eq!(metrics.rejected_rows(), n, "none refused again");
    assert!(sink::spool::list_segments(&spool.path().join("rejected"))
        .unwrap()
        .is_empty());
    drop(handle);
    let report = sink.shutdown().await.unwrap();
    assert_eq!(
        (report.rows_spooled, report.rows_dropped),
        (0, 0),
        "{report:?}"
    );
    let stored = q(
        &url,
        &format!(
            "SELECT count() FROM {}.{}",
            db.name,
            Table::TrendsDbl.name()
        ),
    );
    assert_eq!(stored.trim(), n.to_string(), "each row once");
}

/// A node that lost the schema while 8 INSERTs were in flight (wiped, or rebuilt from
/// scratch): every one of them finds the database missing. One of them creates it; the
/// others wait for that repair, see it done, and only resend: one DDL run, not eight
/// (each of which checks and creates six tables on the node).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_inserts_that_find_the_schema_missing_repair_it_once() {
    let url = ch_url();
    let db = TestDb::new(&url);
    let cfg = db.config();
    let w = Arc::new(sink::writer::Writer::new(&cfg));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..8u64 {
        let mut bytes = bytes::BytesMut::new();
        let row = uint_row(i, i);
        sink::rowbinary::encode_row(&mut bytes, &row);
        let batch = sink::Batch {
            table: Table::Uint,
            rows: 1,
            first_clock: row.clock,
            data: bytes.freeze(),
        };
        let w = w.clone();
        tasks.spawn(async move { w.insert(&batch).await });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap().expect("every INSERT stored after the repair");
    }
    assert_eq!(w.schema_repairs(), 1, "one repair for eight INSERTs");
    let got = q(
        &url,
        &format!(
            "SELECT count(), sum(value) FROM {}.history_uint FORMAT TSV",
            db.name
        ),
    );
    assert_eq!(got.trim(), "8\t28");
}
