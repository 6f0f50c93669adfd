//! Helpers for the sink's integration tests: the shared ClickHouse server from
//! `scripts/services.sh` (`NETPOLLER_CH_URL`, or `.services/env`), private
//! clickhouse-server instances on loopback ports for outage tests, per-test databases,
//! and a tiny blocking HTTP client for verification queries.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// URL of the shared ClickHouse server. Panics with instructions when none is
/// configured: these tests need a real server.
pub fn ch_url() -> String {
    if let Ok(u) = std::env::var("NETPOLLER_CH_URL") {
        return u;
    }
    let env = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.services/env");
    if let Ok(text) = std::fs::read_to_string(&env) {
        for line in text.lines() {
            let line = line.trim().trim_start_matches("export ");
            if let Some(v) = line.strip_prefix("NETPOLLER_CH_URL=") {
                return v.trim_matches('"').to_string();
            }
        }
    }
    panic!("no ClickHouse: run scripts/services.sh (writes .services/env) or set NETPOLLER_CH_URL");
}

/// POSTs `sql` to `url`; returns (HTTP status, body).
pub fn http(url: &str, sql: &str) -> std::io::Result<(u16, String)> {
    let hostport = url.trim_start_matches("http://").trim_end_matches('/');
    let mut s = TcpStream::connect(hostport)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let req = format!(
        "POST / HTTP/1.1\r\nHost: {hostport}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{sql}",
        sql.len()
    );
    s.write_all(req.as_bytes())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    Ok((status, body))
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// Runs `sql`, panicking with the server's message on failure.
pub fn q(url: &str, sql: &str) -> String {
    let (status, body) = http(url, sql).unwrap_or_else(|e| panic!("{url}: {e}"));
    assert_eq!(status, 200, "{sql}\n{body}");
    body
}

/// A database `nptest_<random>` dropped at the end of the test.
pub struct TestDb {
    pub url: String,
    pub name: String,
}

impl TestDb {
    pub fn new(url: &str) -> TestDb {
        let name = format!("nptest_{:016x}", fastrand::u64(..));
        TestDb {
            url: url.to_string(),
            name,
        }
    }

    /// The sink's defaults, writing to this database.
    pub fn config(&self) -> sink::ClickHouseConfig {
        sink::ClickHouseConfig {
            url: Some(self.url.clone()),
            database: self.name.clone(),
            ..sink::ClickHouseConfig::default()
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let _ = http(&self.url, &format!("DROP DATABASE IF EXISTS {}", self.name));
    }
}

/// A free TCP port on 127.0.0.1 (bound then released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A private clickhouse-server (the Debian 18.16 binary) on 127.0.0.1:<port>, with its
/// data in a temp dir; can be killed and started again on the same port and data.
pub struct PrivateServer {
    pub port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl PrivateServer {
    pub fn new() -> PrivateServer {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let d = dir.path().display();
        let cfg = format!(
            r#"<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><log>{d}/log/server.log</log><errorlog>{d}/log/err.log</errorlog><size>10M</size><count>1</count></logger>
  <http_port>{port}</http_port>
  <listen_host>127.0.0.1</listen_host>
  <max_connections>256</max_connections>
  <keep_alive_timeout>3</keep_alive_timeout>
  <max_concurrent_queries>100</max_concurrent_queries>
  <uncompressed_cache_size>67108864</uncompressed_cache_size>
  <mark_cache_size>67108864</mark_cache_size>
  <path>{d}/data/</path>
  <tmp_path>{d}/tmp/</tmp_path>
  <user_files_path>{d}/user_files/</user_files_path>
  <users_config>/etc/clickhouse-server/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <timezone>UTC</timezone>
  <mlock_executable>false</mlock_executable>
</yandex>
"#
        );
        for sub in ["log", "data", "tmp", "user_files"] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        std::fs::write(dir.path().join("config.xml"), cfg).unwrap();
        PrivateServer {
            port,
            dir,
            child: None,
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn start(&mut self) {
        assert!(self.child.is_none());
        let bin = ["/usr/bin/clickhouse-server", "/usr/sbin/clickhouse-server"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .expect("clickhouse-server not installed");
        let child = Command::new(bin)
            .arg(format!(
                "--config-file={}",
                self.dir.path().join("config.xml").display()
            ))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn clickhouse-server");
        self.child = Some(child);
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(30) {
            if matches!(http(&self.url(), "SELECT 1"), Ok((200, _))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "private clickhouse-server on port {} did not start",
            self.port
        );
    }

    /// SIGKILL (an outage as abrupt as a crash or a pulled cable).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Polls `f` until it returns true or `limit` passes.
pub fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    f()
}

/// Logs of the sink to the test's captured output (`RUST_LOG` to change the level).
pub fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_test_writer()
        .try_init();
}

/// One HTTP/1.1 request from `c`: its head (without the blank line) and its body as
/// sent (chunks included), whether sized by `Content-Length` or chunked.
pub fn read_request(c: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if c.read(&mut byte).ok()? == 0 {
            return None;
        }
        buf.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&buf[..buf.len() - 4]).to_string();
    let header = |name: &str| {
        head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    };
    let mut body = Vec::new();
    if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        loop {
            let mut line = Vec::new();
            while !line.ends_with(b"\r\n") {
                if c.read(&mut byte).ok()? == 0 {
                    return None;
                }
                line.push(byte[0]);
            }
            let size_text = String::from_utf8_lossy(&line[..line.len() - 2]).to_string();
            let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
            body.extend_from_slice(&line);
            let mut chunk = vec![0u8; size + 2];
            c.read_exact(&mut chunk).ok()?;
            body.extend_from_slice(&chunk);
            if size == 0 {
                break;
            }
        }
    } else if let Some(n) = header("content-length").and_then(|v| v.parse::<usize>().ok()) {
        body.resize(n, 0);
        c.read_exact(&mut body).ok()?;
    }
    Some((head, body))
}

/// A fake ClickHouse node on 127.0.41.1, one request per connection: each request is
/// read whole ([`read_request`]) and answered with what `answer` makes of its head and
/// body, an HTTP status (`"200 OK"`) and a body (ClickHouse's exception text for a
/// refusal). Returns its URL.
pub fn scripted_node(
    answer: impl Fn(&str, &[u8]) -> (&'static str, Vec<u8>) + Send + Sync + 'static,
) -> String {
    scripted_node_on("127.0.41.1", answer)
}

/// [`scripted_node`] on the loopback address `ip`, on a port of its own.
pub fn scripted_node_on(
    ip: &str,
    answer: impl Fn(&str, &[u8]) -> (&'static str, Vec<u8>) + Send + Sync + 'static,
) -> String {
    assert!(ip.starts_with("127."), "loopback only: {ip}");
    let listener = TcpListener::bind((ip, 0)).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let answer = std::sync::Arc::new(answer);
    std::thread::spawn(move || {
        for c in listener.incoming() {
            let Ok(mut c) = c else { continue };
            let answer = answer.clone();
            std::thread::spawn(move || {
                c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let Some((head, body)) = read_request(&mut c) else {
                    return;
                };
                let (status, text) = answer(&head, &body);
                let _ = write!(
                    c,
                    "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=UTF-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    text.len()
                );
                let _ = c.write_all(&text);
            });
        }
    });
    url
}
