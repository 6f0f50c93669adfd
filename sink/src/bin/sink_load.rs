//! `sink_load`: drives the sink with synthetic rows. Used by the sink's integration
//! tests (as a subprocess that can be `kill -9`ed) and by `benches/sink_throughput.sh`.
//!
//! Arguments are `key=value`:
//! * `url=http://127.0.0.1:8123` — ClickHouse (absent: file sink into `spool`)
//! * `database=glaber`, `spool=DIR` (required), `spool_max_bytes=N`
//! * `rows=N` (default 100000), `rate=R` rows/s (0 = as fast as possible, default)
//! * `table=dbl|uint|str|mixed|trends` (default mixed; `trends` alternates the two
//!   trends tables, rows at whole hours), `base_clock=UNIX` (default now)
//! * `batch_rows=N`, `batch_bytes=N`, `flush_ms=N`, `compression=none|lz4`, `inflight=N`,
//!   `attempts=N`, `backoff_ms=N`, `backoff_max_ms=N`
//! * `items=K` — itemid `i % K`, clock `base_clock + i / K` (one row per item and
//!   second, as a poller writes) instead of the default below
//! * `drain=1` — before exiting, wait until the spool is empty (replayed)
//! * `hold_ms=N` — keep running N ms after the last row before shutdown
//!
//! Row `i` has itemid `i`, clock `base_clock + i / 1000`, ns `i % 1000`, so a test can
//! check exactly which rows arrived. Prints `progress ...` lines every 100 ms and one
//! `result ...` line with rows/s and CPU seconds per million rows.

use sink::{
    ClickHouseConfig, Compression, Row, RowValue, Sink, SinkMetrics, SpoolConfig, Table, Trend,
};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn cpu_seconds() -> f64 {
    // utime + stime from /proc/self/stat, in clock ticks (USER_HZ = 100 on Linux).
    let Ok(s) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    let after = s.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

fn main() -> std::process::ExitCode {
    tracing_subscriber_init();
    let args: HashMap<String, String> = std::env::args()
        .skip(1)
        .filter_map(|a| {
            a.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect();
    let get = |k: &str| args.get(k).cloned();
    let num = |k: &str, d: u64| get(k).and_then(|v| v.parse().ok()).unwrap_or(d);
    let Some(spool_dir) = get("spool") else {
        eprintln!("sink_load: spool=DIR is required");
        return std::process::ExitCode::from(2);
    };
    let ch = get("url").map(|url| ClickHouseConfig {
        url: Some(url),
        database: get("database").unwrap_or_else(|| "glaber".into()),
        batch_rows: num("batch_rows", 50_000) as usize,
        batch_bytes: num("batch_bytes", 16 << 20) as usize,
        flush_interval: Duration::from_millis(num("flush_ms", 1000)),
        max_inflight_inserts: num("inflight", 4) as usize,
        compression: if get("compression").as_deref() == Some("none") {
            Compression::None
        } else {
            Compression::Lz4
        },
        max_attempts: num("attempts", 3) as u32,
        retry_backoff: Duration::from_millis(num("backoff_ms", 200)),
        retry_backoff_max: Duration::from_millis(num("backoff_max_ms", 5000)),
        request_timeout: Duration::from_secs(30),
        ..ClickHouseConfig::default()
    });
    let spool = SpoolConfig {
        dir: spool_dir.into(),
        max_bytes: num("spool_max_bytes", 1 << 30),
        fsync_interval: Duration::from_millis(num("fsync_ms", 200)),
    };
    let rows = num("rows", 100_000);
    let rate = num("rate", 0);
    let base_clock = num(
        "base_clock",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    ) as u32;
    let table = get("table").unwrap_or_else(|| "mixed".into());
    let drain = num("drain", 0) == 1;
    let items = num("items", 0);
    let hold = Duration::from_millis(num("hold_ms", 0));

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let metrics = Arc::new(SinkMetrics::default());
        let (sink, handle) = match Sink::start(ch, spool, metrics.clone()).await {
            Ok(x) => x,
            Err(e) => {
                eprintln!("sink_load: {e}");
                return std::process::ExitCode::from(1);
            }
        };
        let m2 = metrics.clone();
        let sent = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let sent2 = sent.clone();
        let progress = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let written: u64 = Table::ALL.iter().map(|t| m2.rows_written(*t)).sum();
                println!(
                    "progress sent={} spooled={} written={} replayed={} spool_bytes={}",
                    sent2.load(std::sync::atomic::Ordering::Relaxed),
                    m2.spooled_rows(),
                    written,
                    m2.replayed_rows(),
                    m2.spool_bytes()
                );
            }
        });
        let hosts: Vec<Arc<str>> = (0..1000).map(|h| Arc::from(format!("host-{h:04}.example"))).collect();
        let keys: [Arc<str>; 4] = [
            "icmppingsec[,3,,,,avg]".into(),
            "ifHCInOctets[Gi0/1]".into(),
            "sysDescr".into(),
            "log[/var/log/x]".into(),
        ];
        let cpu0 = cpu_seconds();
        let t0 = Instant::now();
        let chunk = 1000u64;
        let mut i = 0u64;
        while i < rows {
            let n = chunk.min(rows - i);
            let mut v = Vec::with_capacity(n as usize);
            for j in i..i + n {
                let t = match table.as_str() {
                    "dbl" => Table::Dbl,
                    "uint" => Table::Uint,
                    "str" => Table::Str,
                    "trends" => Table::ALL[4 + (j % 2) as usize],
                    _ => Table::ALL[(j % 3) as usize],
                };
                let x = j as f64 * 0.001;
                let value = match t {
                    Table::Dbl => RowValue::Float(x),
                    Table::Uint => RowValue::Uint(j),
                    Table::TrendsDbl => RowValue::FloatTrend(Trend {
                        min: x,
                        max: x + 1.0,
                        avg: x + 0.5,
                        count: j as u32,
                    }),
                    Table::TrendsUint => RowValue::UintTrend(Trend {
                        min: -(j as i64),
                        max: j as i64,
                        avg: 0,
                        count: j as u32,
                    }),
                    Table::Str | Table::Log => RowValue::Str(format!("value {j}")),
                };
                let (itemid, mut clock) = if items > 0 {
                    (j % items, base_clock + (j / items) as u32)
                } else {
                    (j, base_clock + (j / 1000) as u32)
                };
                if t.is_trends() {
                    clock = base_clock / 3600 * 3600 + (clock - base_clock) * 3600;
                }
                v.push((
                    t,
                    Row {
                        itemid,
                        clock,
                        ns: if t.is_trends() { 0 } else { (j % 1000) as u32 },
                        hostname: hosts[(j % 1000) as usize].clone(),
                        itemname: keys[t.index() % keys.len()].clone(),
                        value,
                    },
                ));
            }
            if handle.send_many(v).await.is_err() {
                break;
            }
            i += n;
            sent.store(i, std::sync::atomic::Ordering::Relaxed);
            if rate > 0 {
                let due = Duration::from_secs_f64(i as f64 / rate as f64);
                if let Some(wait) = due.checked_sub(t0.elapsed()) {
                    tokio::time::sleep(wait).await;
                }
            }
        }
        tokio::time::sleep(hold).await;
        if drain {
            while metrics.spool_bytes() > 0 || metrics.spooled_rows() > metrics.replayed_rows() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        drop(handle);
        let report = sink.shutdown().await;
        let secs = t0.elapsed().as_secs_f64();
        let cpu = cpu_seconds() - cpu0;
        progress.abort();
        match report {
            Ok(r) => {
                println!(
                    "result rows={rows} seconds={secs:.3} rows_per_s={:.0} cpu_s={cpu:.2} cpu_s_per_million={:.3} written={} spooled={} dropped={} spool_bytes={} inserts={}",
                    rows as f64 / secs,
                    cpu / (rows as f64 / 1e6),
                    r.rows_written,
                    r.rows_spooled,
                    r.rows_dropped,
                    r.spool_bytes,
                    Table::ALL.iter().map(|t| metrics.inserts(*t)).sum::<u64>(),
                );
                std::process::ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("sink_load: shutdown: {e}");
                std::process::ExitCode::from(1)
            }
        }
    })
}

fn tracing_subscriber_init() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .try_init();
}
