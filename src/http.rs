//! The daemon's tiny HTTP/1.1 endpoint: `GET /metrics` (Prometheus text) and
//! `GET /healthz`, on `daemon.metrics_listen` (loopback by default).
//!
//! Deliberately minimal (no hyper, no TLS): one request per connection, then close.
//!
//! Invariants and limits:
//! * A request head larger than [`MAX_REQUEST_BYTES`] (8 KiB) gets `431` and is closed; a
//!   head not complete within [`READ_TIMEOUT`] (5 s, one deadline for the whole head, not
//!   per read, so a slowloris client cannot stretch it) gets `408`. Writing the response
//!   is bounded by the same timeout, so a client that stops reading cannot pin a task.
//! * At most [`MAX_CONNECTIONS`] connections are served at once, so a flood cannot
//!   exhaust memory or descriptors. When they are all taken, a new connection closes
//!   the oldest one open for at least [`MIN_AGE`] (100 ms: a scrape is answered
//!   sooner) and takes its place; when every one is younger, it gets `503` and is
//!   closed (its head read as a served connection's, under the same limits, so that
//!   a `HEAD` gets no body; at most [`MAX_CONNECTIONS`] of those at once as well; more
//!   are closed unanswered). So idle or slow connections (a client that sends nothing, or
//!   reads nothing) cannot keep scrapes out: to do so, they would have to be
//!   replaced faster than a scrape is answered (each connection is its own task, so a slow
//!   client never blocks another either).
//! * Empty lines before the request line are skipped (RFC 9112 2.2), counted in the
//!   request head's size: a client that sends only empty lines gets `431` at the limit
//!   (or `408`).
//! * A request that breaks RFC 9112's rules for a server gets `400` with the rule broken:
//!   an HTTP/1.1 request without a `Host` header (HTTP/1.0 may omit it), more than one
//!   `Host`, a `Host` that is not `host[:port]`, a header line that is not
//!   `token ":" value` (whitespace before the colon, folded lines), a request line that
//!   is not `method SP target SP HTTP/1.x`, an `http://` or `https://` target whose
//!   authority is empty or not `host[:port]` (userinfo included: RFC 9110 4.2). Other
//!   headers are not read: a body a request announces is never read as a request (one
//!   request per connection).
//! * Only `GET` and `HEAD` (`405` otherwise). `/metrics` → `200 text/plain;
//!   version=0.0.4` with the body of the render callback; `/healthz` → `200 "ok\n"` or
//!   `503` with the reason from the health callback; anything else `404`. The query
//!   string is ignored; a target in absolute form (`http://` or `https://`, any case) is
//!   routed by its path, and one of another scheme is no path of this endpoint (`404`). A `HEAD` gets, whatever the status (`503` refusal, `408`, `431`
//!   and `400` included), the head a `GET` would get (`Content-Length` too) and no body.
//! * Stop: when the shutdown value becomes `true` (or its sender is dropped) the listener
//!   is closed at once; connections in progress get [`SHUTDOWN_GRACE`] to finish and are
//!   then aborted.
//! * Callbacks run on the connection task and must be quick (render from atomics).

use anyhow::Context as _;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify, Semaphore};
use tokio::task::JoinSet;
use tokio::time::{timeout, timeout_at, Instant};

/// Largest accepted request head (request line + headers), bytes.
pub const MAX_REQUEST_BYTES: usize = 8 * 1024;
/// Deadline for receiving a complete request head, and for sending the response.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections served concurrently; more close the oldest (see [`MIN_AGE`]).
pub const MAX_CONNECTIONS: usize = 64;
/// Age from which a connection is closed to make room for a new one when all
/// [`MAX_CONNECTIONS`] are taken; more connections, all younger, are answered `503`.
pub const MIN_AGE: Duration = Duration::from_millis(100);
/// Time connections in progress get to finish after shutdown.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// Renders the `/metrics` body (Prometheus text format 0.0.4).
pub type RenderFn = Arc<dyn Fn() -> String + Send + Sync>;
/// Says whether the daemon is healthy: `Ok(note)` answers 200 with the note (`ok`, or
/// what a healthy daemon is doing about a fault, such as spooling), `Err(reason)` 503.
pub type HealthFn = Arc<dyn Fn() -> Result<String, String> + Send + Sync>;

const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
const TEXT_CONTENT_TYPE: &str = "text/plain; charset=utf-8";

/// Binds the metrics listener on `addr` (`IP:port`, e.g. `127.0.0.1:9464`; IP literals
/// only, so that a typo never resolves to some other interface). The error says what
/// to do when the port is taken or privileged.
pub async fn bind(addr: &str) -> anyhow::Result<TcpListener> {
    let sa: SocketAddr = addr.parse().with_context(|| {
        format!("metrics_listen {addr:?}: expected IP:port, e.g. 127.0.0.1:9464 or [::1]:9464")
    })?;
    TcpListener::bind(sa).await.map_err(|e| {
        let hint = match e.kind() {
            std::io::ErrorKind::AddrInUse => {
                ": address already in use (another netpoller or exporter on this port? \
                 choose another daemon.metrics_listen, or run --metrics-listen for one \
                 of several processes sharing the file)"
            }
            std::io::ErrorKind::PermissionDenied => {
                ": permission denied (ports below 1024 need CAP_NET_BIND_SERVICE)"
            }
            std::io::ErrorKind::AddrNotAvailable => {
                ": address not available (not an address of this host)"
            }
            _ => "",
        };
        anyhow::Error::new(e).context(format!("cannot listen for metrics on {sa}{hint}"))
    })
}

/// Serves `/metrics` and `/healthz` on `listener` until `shutdown` turns `true` (or its
/// sender is dropped). See the module docs for limits.
pub async fn serve(
    listener: TcpListener,
    render: RenderFn,
    health: HealthFn,
    shutdown: watch::Receiver<bool>,
) {
    serve_with(listener, render, health, shutdown, Limits::default()).await;
}

#[derive(Clone, Copy, Debug)]
struct Limits {
    max_request: usize,
    read_timeout: Duration,
    max_connections: usize,
    min_age: Duration,
    grace: Duration,
    /// How long a connection is read from after its response (see [`finish`]).
    linger: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_request: MAX_REQUEST_BYTES,
            read_timeout: READ_TIMEOUT,
            max_connections: MAX_CONNECTIONS,
            min_age: MIN_AGE,
            grace: SHUTDOWN_GRACE,
            linger: Duration::from_millis(500),
        }
    }
}

async fn serve_with(
    listener: TcpListener,
    render: RenderFn,
    health: HealthFn,
    mut shutdown: watch::Receiver<bool>,
    limits: Limits,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let refusals = Arc::new(Semaphore::new(limits.max_connections));
    let mut conns = JoinSet::new();
    // The connections let in, oldest first, with what closes each (an entry whose
    // task has ended holds the only reference left, and is pruned).
    let mut open: VecDeque<(Instant, Arc<Notify>)> = VecDeque::new();
    let local = listener.local_addr().ok();
    loop {
        if *shutdown.borrow_and_update() {
            break;
        }
        tokio::select! {
            changed = shutdown.changed() => {
                if changed.is_err() {
                    break; // sender gone: nobody can ask us to keep running
                }
            }
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    // Ended connections leave their entries behind (pruned once there
                    // are as many as slots, so the list stays short and, when every
                    // slot is taken, holds only connections still open).
                    if open.len() >= limits.max_connections {
                        open.retain(|(_, close)| Arc::strong_count(close) > 1);
                    }
                    let admitted = match slots.clone().try_acquire_owned() {
                        Ok(permit) => Some(Some(permit)),
                        Err(_) => {
                            match open.front() {
                                Some((since, _)) if since.elapsed() >= limits.min_age => {
                                    if let Some((_, close)) = open.pop_front() {
                                        tracing::debug!(%peer, "metrics endpoint full: closed the oldest connection to make room");
                                        close.notify_one();
                                    }
                                    // Its permit, once its task has ended.
                                    Some(None)
                                }
                                _ => None,
                            }
                        }
                    };
                    let (render, health, slots) = (render.clone(), health.clone(), slots.clone());
                    let Some(permit) = admitted else {
                        // A 503 lingers too (see `finish`), holding its descriptor: as many
                        // at once as connections served, so that a flood of connects
                        // cannot take every descriptor the daemon has (its sockets, spool
                        // files, ClickHouse connections); past that, closed unanswered.
                        let Ok(refusing) = refusals.clone().try_acquire_owned() else {
                            tracing::debug!(%peer, "metrics endpoint flooded: connection closed");
                            continue;
                        };
                        tracing::debug!(%peer, "metrics endpoint busy: connection refused with 503");
                        conns.spawn(async move {
                            let _refusing = refusing;
                            handle(stream, limits, |buf| refuse(buf, limits.max_request)).await;
                        });
                        continue;
                    };
                    let close = Arc::new(Notify::new());
                    open.push_back((Instant::now(), close.clone()));
                    #[cfg(test)]
                    tests::OPEN_ENTRIES.with(|n| n.set(open.len()));
                    conns.spawn(async move {
                        let serve = async {
                            let _permit = match permit {
                                Some(p) => p,
                                None => match timeout(limits.grace, slots.acquire_owned()).await {
                                    Ok(Ok(p)) => p,
                                    _ => return,
                                },
                            };
                            handle(stream, limits, |buf| {
                                respond(buf, limits.max_request, &render, &health)
                            })
                            .await;
                        };
                        tokio::select! {
                            _ = serve => {}
                            _ = close.notified() => {}
                        }
                    });
                }
                Err(e) => {
                    // EMFILE/ENFILE or a reset before accept: back off instead of spinning.
                    tracing::warn!(error = %e, "metrics endpoint: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            // Reap finished connection tasks so the set does not grow.
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    drop(listener);
    let grace = Instant::now() + limits.grace;
    while !conns.is_empty() {
        if timeout_at(grace, conns.join_next()).await.is_err() {
            conns.abort_all();
            break;
        }
    }
    tracing::debug!(addr = ?local, "metrics endpoint stopped");
}

/// Reads the request head until `answer` has the response to the bytes received so far
/// (it must have one at `limits.max_request` bytes), and sends it; `408` when the head is
/// not complete within `limits.read_timeout`.
async fn handle(mut stream: TcpStream, limits: Limits, answer: impl Fn(&[u8]) -> Option<Vec<u8>>) {
    let deadline = Instant::now() + limits.read_timeout;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    let resp = loop {
        if let Some(resp) = answer(&buf) {
            break resp;
        }
        let want = chunk.len().min(limits.max_request - buf.len());
        match timeout_at(deadline, stream.read(&mut chunk[..want])).await {
            Err(_) => {
                let resp = response(408, TEXT_CONTENT_TYPE, "request timeout\n", is_head(&buf));
                return finish(stream, &resp, limits).await;
            }
            Ok(Ok(0)) | Ok(Err(_)) => return, // client went away
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    finish(stream, &resp, limits).await;
}

/// The complete response to the bytes received so far, or `None` while the head is
/// incomplete and shorter than `max_request` (read more). Pure: the fuzz target
/// (`fuzz/fuzz_targets/http_request.rs`) drives it with arbitrary bytes.
pub(crate) fn respond(
    buf: &[u8],
    max_request: usize,
    render: &RenderFn,
    health: &HealthFn,
) -> Option<Vec<u8>> {
    let head_only = is_head(buf);
    match head_end(buf) {
        Some(end) if end <= max_request => {
            let head = &buf[request_start(buf)..end];
            Some(route(head, head_only, render, health))
        }
        Some(_) => Some(too_large(head_only)),
        None if buf.len() >= max_request => Some(too_large(head_only)),
        None => None,
    }
}

/// The `503` for a connection over [`MAX_CONNECTIONS`], once its head is complete (or
/// `max_request` long) like [`respond`]'s answers: only then is its method known, and a
/// response to `HEAD` must have no body (RFC 9110 9.3.2).
fn refuse(buf: &[u8], max_request: usize) -> Option<Vec<u8>> {
    let complete = head_end(buf).is_some() || buf.len() >= max_request;
    complete.then(|| {
        let body = "too many connections\n";
        response(503, TEXT_CONTENT_TYPE, body, is_head(buf))
    })
}

fn too_large(head_only: bool) -> Vec<u8> {
    response(431, TEXT_CONTENT_TYPE, "request too large\n", head_only)
}

/// Whether the request (complete or not) is a `HEAD`, whose every answer, error or not,
/// has the head a `GET` would get and no body (RFC 9110 9.3.2). Methods are
/// case-sensitive, and the request line's first space ends the method.
fn is_head(buf: &[u8]) -> bool {
    buf[request_start(buf)..].starts_with(b"HEAD ")
}

/// Index of the request line: past the empty lines (`\r\n` or `\n`) before it, which
/// RFC 9112 2.2 says a server should ignore (a client may send one after a previous
/// request's body). They count towards the size limit like the head's own bytes.
fn request_start(buf: &[u8]) -> usize {
    let mut rest = buf;
    while let Some(after) = rest
        .strip_prefix(b"\n")
        .or_else(|| rest.strip_prefix(b"\r\n"))
    {
        rest = after;
    }
    buf.len() - rest.len()
}

/// Index just past the blank line ending the head (the empty lines before the request
/// line do not end it: [`request_start`]). Lines end with LF, a CR before it
/// ignored (RFC 9112 2.2, as the request line is read in [`route`]): so `\r\n\r\n`,
/// `\n\n`, and the mixed `\r\n\n` of `echo -e 'GET /metrics HTTP/1.0\r\n' | nc`
/// or `\n\r\n` all end it.
fn head_end(buf: &[u8]) -> Option<usize> {
    let mut line_start = request_start(buf);
    for (i, &b) in buf.iter().enumerate().skip(line_start) {
        if b == b'\n' {
            if matches!(&buf[line_start..i], b"" | b"\r") {
                return Some(i + 1);
            }
            line_start = i + 1;
        }
    }
    None
}

/// The response to a complete `head`; `head_only`: it is a `HEAD` ([`is_head`]).
fn route(head: &[u8], head_only: bool, render: &RenderFn, health: &HealthFn) -> Vec<u8> {
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = std::str::from_utf8(line)
        .unwrap_or("")
        .trim_end_matches('\r');
    let mut parts = line.split(' ');
    let (method, target, version) = (parts.next(), parts.next(), parts.next());
    let (Some(method), Some(target), Some(version)) = (method, target, version) else {
        return response(400, TEXT_CONTENT_TYPE, "bad request\n", head_only);
    };
    // HTTP-version is "HTTP/" DIGIT "." DIGIT; a 1.x above 1.1 is served as 1.1.
    let minor = match version.strip_prefix("HTTP/1.").map(str::as_bytes) {
        Some(&[minor]) if minor.is_ascii_digit() => minor,
        _ => return response(400, TEXT_CONTENT_TYPE, "bad request\n", head_only),
    };
    if parts.next().is_some() {
        return response(400, TEXT_CONTENT_TYPE, "bad request\n", head_only);
    }
    if let Err(why) = check_fields(head, minor != b'0') {
        return response(400, TEXT_CONTENT_TYPE, why, head_only);
    }
    let path = match target_path(target) {
        Ok(path) => path,
        Err(why) => return response(400, TEXT_CONTENT_TYPE, why, head_only),
    };
    if !matches!(method, "GET" | "HEAD") {
        return response(405, TEXT_CONTENT_TYPE, "method not allowed\n", false);
    }
    match path {
        "/metrics" => response(200, METRICS_CONTENT_TYPE, &render(), head_only),
        "/healthz" => {
            let (status, mut body) = match health() {
                Ok(note) => (200, note),
                Err(reason) => (503, reason),
            };
            if !body.ends_with('\n') {
                body.push('\n');
            }
            response(status, TEXT_CONTENT_TYPE, &body, head_only)
        }
        _ => response(404, TEXT_CONTENT_TYPE, "not found\n", head_only),
    }
}

/// The path a request target names, its query and fragment left out. The origin form
/// (`/metrics?x`) as it is; the absolute form (`http://host:port/metrics`, from clients
/// that take this endpoint for a proxy), which RFC 9112 3.2.2 says a server must
/// accept, for the schemes `http` and `https` (case-insensitive, RFC 3986 3.1): what
/// follows its authority (`/`, `?` or `#` ends it). `Err`: the 400's body for such a
/// target whose authority RFC 9110 4.2 says to reject: an empty host (4.2.1), or one
/// that is not `host[:port]`, userinfo (`user@`, 4.2.4) included. A target of another
/// scheme (`ftp://host/metrics`) is no resource of this endpoint: taken as a path, it
/// matches none (404).
fn target_path(target: &str) -> Result<&str, &'static str> {
    let web =
        |scheme: &str| scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https");
    let path = match target.split_once("://") {
        Some((scheme, rest)) if web(scheme) => {
            let (authority, path) = rest.split_at(rest.find(['/', '?', '#']).unwrap_or(rest.len()));
            if authority.is_empty() || authority.starts_with(':') {
                return Err("bad request: an http(s) target without a host\n");
            }
            if !authority.bytes().all(is_host_char) {
                return Err(
                    "bad request: an http(s) target whose authority is not a host[:port]\n",
                );
            }
            path
        }
        _ => target,
    };
    Ok(path.split(['?', '#']).next().unwrap_or_default())
}

/// Whether `b` may appear in a `host[:port]`: uri-host (a reg-name, IPv4 or bracketed
/// IP literal: unreserved, pct-encoded, sub-delims, ':') and port (RFC 3986 3.2).
fn is_host_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~%!$&'()*+,;=:[]".contains(&b)
}

/// Checks the header field lines of `head` (after its request line, up to its empty
/// line) as RFC 9112 requires of a server, whatever they are for: each is
/// `name ":" value` with a token for name (no whitespace before the colon, 5.1; no
/// line folding, 5.2); and there is exactly one `Host` (names are case-insensitive),
/// whose value is a host and optional port, or none in HTTP/1.0 (`needs_host`
/// false; 3.2). The endpoint does not route by host, but a request that breaks these
/// rules is one that a proxy in front may have read otherwise, so it is refused
/// rather than guessed at. `Err`: the 400's body, saying which rule.
fn check_fields(head: &[u8], needs_host: bool) -> Result<(), &'static str> {
    // tchar (RFC 9110 5.6.2).
    let tchar = |b: &u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b);
    let mut hosts = 0;
    let lines = head.split(|&b| b == b'\n').skip(1);
    for line in lines.map(|l| l.strip_suffix(b"\r").unwrap_or(l)) {
        if line.is_empty() {
            break;
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            return Err("bad request: a header line without a colon (or folded)\n");
        };
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        if name.is_empty() || !name.iter().all(tchar) {
            return Err("bad request: a header name that is not a token (or folded)\n");
        }
        if name.eq_ignore_ascii_case(b"host") {
            hosts += 1;
            if !value.trim_ascii().iter().all(|&b| is_host_char(b)) {
                return Err("bad request: a Host header that is not a host[:port]\n");
            }
        }
    }
    match hosts {
        0 if needs_host => Err("bad request: an HTTP/1.1 request needs a Host header\n"),
        0 | 1 => Ok(()),
        _ => Err("bad request: more than one Host header\n"),
    }
}

fn response(status: u16, content_type: &str, body: &str, head_only: bool) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Error",
    };
    let allow = if status == 405 {
        "Allow: GET, HEAD\r\n"
    } else {
        ""
    };
    // RFC 9110 §6.6.1: a server with a clock sends the time of its response.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let date = http_date(now);
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\nDate: {date}\r\nContent-Type: {content_type}\r\n\
         Content-Length: {}\r\nCache-Control: no-store\r\n{allow}Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body.as_bytes());
    }
    out
}

/// Unix seconds as an HTTP date (RFC 9110's IMF-fixdate: `Sun, 06 Nov 1994 08:49:37
/// GMT`); the calendar date from the day count by Howard Hinnant's `civil_from_days`.
fn http_date(unix_secs: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let (days, secs) = (unix_secs / 86_400, unix_secs % 86_400);
    // Days since 0000-03-01, in 400-year eras of 146,097 days.
    let z = days + 719_468;
    let (era, doe) = (z / 146_097, z % 146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{}, {day:02} {} {year} {:02}:{:02}:{:02} GMT",
        DAYS[(days % 7) as usize],
        MONTHS[(month - 1) as usize],
        secs / 3_600,
        secs / 60 % 60,
        secs % 60
    )
}

/// Sends `resp`, half-closes, then drains what the client still sends for a moment:
/// closing a socket with unread input makes the kernel send RST, which can destroy the
/// response before the client reads it (e.g. after a 431 for an oversized request).
async fn finish(mut stream: TcpStream, resp: &[u8], limits: Limits) {
    let sent = timeout(limits.read_timeout, async {
        stream.write_all(resp).await?;
        stream.shutdown().await
    })
    .await;
    if !matches!(sent, Ok(Ok(()))) {
        return;
    }
    let linger = Instant::now() + limits.linger;
    let mut sink = [0u8; 4096];
    let mut drained = 0usize;
    while drained < 64 * 1024 {
        match timeout_at(linger, stream.read(&mut sink)).await {
            Ok(Ok(n)) if n > 0 => drained += n,
            _ => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::time::Instant as StdInstant;

    /// The documents name the health check by the path it is served on: production.md
    /// said a supervisor's `/health` keeps answering during a reload, a path that
    /// answers 404.
    #[test]
    fn the_docs_name_the_health_check_by_its_path() {
        for path in ["README.md", "docs/production.md", "packaging/README.md"] {
            let text = crate::test_util::doc(path);
            for (at, _) in text.match_indices("/health") {
                let named = &text[at..];
                assert!(named.starts_with("/healthz"), "{path}: {:.40}", named);
            }
        }
    }

    /// This module's tests listen on their own loopback address (any port).
    const TEST_ADDR: &str = "127.0.155.1:0";

    /// Every response says when it was made (RFC 9110 §6.6.1: a server with a clock
    /// MUST, on 2xx and 4xx), in IMF-fixdate.
    #[test]
    fn responses_carry_an_http_date() {
        assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(http_date(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(http_date(951_782_400), "Tue, 29 Feb 2000 00:00:00 GMT");
        assert_eq!(http_date(4_107_542_399), "Sun, 28 Feb 2100 23:59:59 GMT");
        // 2100 is not a leap year.
        assert_eq!(http_date(4_107_542_400), "Mon, 01 Mar 2100 00:00:00 GMT");
        for status in [200, 404, 400, 503] {
            let head = String::from_utf8(response(status, "text/plain", "x", true)).unwrap();
            let date = head
                .lines()
                .find_map(|l| l.strip_prefix("Date: "))
                .unwrap_or_else(|| panic!("no Date: {head}"));
            assert!(date.ends_with(" GMT") && date.len() == 29, "{date}");
        }
    }

    struct Server {
        addr: SocketAddr,
        stop: watch::Sender<bool>,
        task: tokio::task::JoinHandle<()>,
        health: Arc<Mutex<Result<String, String>>>,
    }

    impl Server {
        /// Stops the server and waits for its task.
        async fn end(self) {
            self.stop.send(true).unwrap();
            self.task.await.unwrap();
        }
    }

    async fn start(limits: Limits) -> Server {
        let listener = bind(TEST_ADDR).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let health = Arc::new(Mutex::new(Ok("ok".to_string())));
        let h = health.clone();
        let (stop, rx) = watch::channel(false);
        let render: RenderFn = Arc::new(|| "# TYPE up gauge\nup 1\n".to_string());
        let task = tokio::spawn(serve_with(
            listener,
            render,
            Arc::new(move || h.lock().unwrap().clone()),
            rx,
            limits,
        ));
        Server {
            addr,
            stop,
            task,
            health,
        }
    }

    /// Sends `req` raw and reads until the server closes; returns (status, headers, body).
    async fn request(addr: SocketAddr, req: &[u8]) -> (u16, String, String) {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(req).await.unwrap();
        let mut resp = Vec::new();
        timeout(Duration::from_secs(10), s.read_to_end(&mut resp))
            .await
            .expect("server closes")
            .unwrap();
        parse(&resp)
    }

    /// Status, head and body. The Date header's value is masked: tests compare the
    /// heads of two responses, which may be a second apart.
    fn parse(resp: &[u8]) -> (u16, String, String) {
        let text = String::from_utf8(resp.to_vec()).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").expect("complete response");
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        let head: Vec<&str> = head
            .split("\r\n")
            .map(|l| match l.starts_with("Date: ") {
                true => "Date: (masked)",
                false => l,
            })
            .collect();
        (status, head.join("\r\n"), body.to_string())
    }

    async fn get(addr: SocketAddr, path: &str) -> (u16, String, String) {
        request(
            addr,
            format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
        )
        .await
    }

    #[tokio::test]
    async fn metrics_healthz_404_405_head() {
        let srv = start(Limits::default()).await;
        let (st, head, body) = get(srv.addr, "/metrics").await;
        assert_eq!(st, 200);
        assert!(
            head.contains("Content-Type: text/plain; version=0.0.4"),
            "{head}"
        );
        assert!(
            head.contains("Content-Length: 21\r\n") && head.contains("Connection: close"),
            "{head}"
        );
        assert_eq!(body, "# TYPE up gauge\nup 1\n");
        assert_eq!(get(srv.addr, "/metrics?name[]=up").await.2, body);

        let (st, head, body) = request(srv.addr, b"HEAD /metrics HTTP/1.0\r\n\r\n").await;
        assert_eq!((st, body.as_str()), (200, ""));
        assert!(head.contains("Content-Length: 21\r\n"), "{head}");

        let (st, _, body) = get(srv.addr, "/healthz").await;
        assert_eq!((st, body.as_str()), (200, "ok\n"));
        *srv.health.lock().unwrap() = Err("scheduler 42 s behind".into());
        let (st, _, body) = get(srv.addr, "/healthz").await;
        assert_eq!((st, body.as_str()), (503, "scheduler 42 s behind\n"));
        *srv.health.lock().unwrap() = Ok("ok: spooling (ClickHouse unavailable)".into());
        let (st, _, body) = get(srv.addr, "/healthz").await;
        assert_eq!(
            (st, body.as_str()),
            (200, "ok: spooling (ClickHouse unavailable)\n")
        );

        assert_eq!(get(srv.addr, "/").await.0, 404);
        assert_eq!(get(srv.addr, "/metricsx").await.0, 404);
        let (st, head, _) = request(
            srv.addr,
            b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
        )
        .await;
        assert_eq!(st, 405);
        assert!(head.contains("Allow: GET, HEAD"));
        assert_eq!(request(srv.addr, b"GARBAGE\r\n\r\n").await.0, 400);
        let (st, _, body) = request(srv.addr, b"GET /metrics HTTP/1.1\r\n\r\n").await;
        assert_eq!(
            (st, body.as_str()),
            (
                400,
                "bad request: an HTTP/1.1 request needs a Host header\n"
            )
        );
        // Bare-LF clients are tolerated.
        assert_eq!(
            request(srv.addr, b"GET /healthz HTTP/1.1\nHost: x\n\n")
                .await
                .0,
            200
        );
        srv.end().await;
    }

    #[tokio::test]
    async fn oversized_request_is_rejected() {
        let srv = start(Limits::default()).await;
        let mut req = b"GET /metrics HTTP/1.1\r\n".to_vec();
        while req.len() <= MAX_REQUEST_BYTES + 1024 {
            req.extend_from_slice(
                b"X-Filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n",
            );
        }
        req.extend_from_slice(b"\r\n");
        let (st, _, body) = request(srv.addr, &req).await;
        assert_eq!((st, body.as_str()), (431, "request too large\n"));
        // Just under the limit is fine.
        let mut req = b"GET /metrics HTTP/1.1\r\nHost: x\r\n".to_vec();
        while req.len() < MAX_REQUEST_BYTES - 200 {
            req.extend_from_slice(b"X-Filler: aaaa\r\n");
        }
        req.extend_from_slice(b"\r\n");
        assert_eq!(request(srv.addr, &req).await.0, 200);
        srv.end().await;
    }

    #[tokio::test]
    async fn slowloris_does_not_block_others_and_times_out() {
        let limits = Limits {
            read_timeout: Duration::from_millis(600),
            ..Limits::default()
        };
        let srv = start(limits).await;
        // Ten clients that send half a request line and then dribble, one byte at a time.
        let mut slow = Vec::new();
        for _ in 0..10 {
            let mut s = TcpStream::connect(srv.addr).await.unwrap();
            s.write_all(b"GET /met").await.unwrap();
            slow.push(s);
        }
        let t = StdInstant::now();
        for _ in 0..5 {
            assert_eq!(get(srv.addr, "/metrics").await.0, 200);
        }
        // Served while the slow ones hang; well below their timeout.
        assert!(t.elapsed() < limits.read_timeout, "{:?}", t.elapsed());
        // Dribbling does not extend the deadline: the whole head has one.
        let t = StdInstant::now();
        let mut s = slow.pop().unwrap();
        let mut resp = Vec::new();
        let mut got = [0u8; 256];
        for b in b"rics HTTP/1.1\r\nHost: x\r\n" {
            if s.write_all(&[*b]).await.is_err() {
                break;
            }
            // Stop dribbling as soon as the server answered.
            if let Ok(Ok(n)) = timeout(Duration::from_millis(100), s.read(&mut got)).await {
                resp.extend_from_slice(&got[..n]);
                break;
            }
        }
        let _ = timeout(Duration::from_secs(5), s.read_to_end(&mut resp))
            .await
            .expect("closed by server");
        assert_eq!(parse(&resp).0, 408);
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
        for mut s in slow {
            let mut resp = Vec::new();
            let _ = timeout(Duration::from_secs(5), s.read_to_end(&mut resp))
                .await
                .expect("closed by server");
            assert_eq!(parse(&resp).0, 408);
        }
        srv.end().await;
    }

    #[tokio::test]
    async fn connection_limit_answers_503() {
        // Connections younger than min_age are not closed for a new one.
        let limits = Limits {
            max_connections: 2,
            read_timeout: Duration::from_secs(3),
            min_age: Duration::from_secs(60),
            ..Limits::default()
        };
        let srv = start(limits).await;
        let mut held = Vec::new();
        for _ in 0..2 {
            held.push(TcpStream::connect(srv.addr).await.unwrap());
        }
        // Make sure the server has accepted both before the third arrives.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (st, get_head, body) = get(srv.addr, "/metrics").await;
        assert_eq!((st, body.as_str()), (503, "too many connections\n"));
        // Refused after its head is read, a HEAD gets the same head and no body.
        let (st, head, body) =
            request(srv.addr, b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert_eq!((st, head, body.as_str()), (503, get_head, ""));
        // Freed slots are reused.
        for mut s in held.drain(..) {
            s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                .await
                .unwrap();
            let mut resp = Vec::new();
            s.read_to_end(&mut resp).await.unwrap();
            assert_eq!(parse(&resp).0, 200);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(get(srv.addr, "/metrics").await.0, 200);
        srv.end().await;
    }

    /// The 503s are bounded too: each lingers after its answer (up to `linger`, here
    /// while the client keeps its end open), and a flood of connects when every slot was
    /// young held one descriptor per connect for up to 500 ms: 2,000 connects/s took the
    /// 1,024 a daemon started without the unit's LimitNOFILE may have.
    #[tokio::test]
    async fn refusals_are_bounded_like_the_connections_served() {
        let limits = Limits {
            max_connections: 1,
            read_timeout: Duration::from_secs(30),
            min_age: Duration::from_secs(60),
            linger: Duration::from_secs(30),
            ..Limits::default()
        };
        let srv = start(limits).await;
        // Accepted first (connections are accepted in order), it takes the one slot.
        let _held = TcpStream::connect(srv.addr).await.unwrap();
        // Each client sends a request, reads the answer and keeps its end open, as a
        // flood that never closes would: the server's refusal lingers on it.
        let mut answers = Vec::new();
        let mut kept = Vec::new();
        for _ in 0..3 {
            let mut s = TcpStream::connect(srv.addr).await.unwrap();
            // Closed unanswered, the connection may be reset under the request.
            let _ = s
                .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
                .await;
            let mut resp = Vec::new();
            let read = timeout(Duration::from_secs(10), s.read_to_end(&mut resp))
                .await
                .expect("answered or closed");
            answers.push(match read {
                Ok(_) if !resp.is_empty() => parse(&resp).0,
                _ => 0,
            });
            kept.push(s);
        }
        assert_eq!(answers, [503, 0, 0]);
        srv.end().await;
    }

    /// Connections that send nothing, or send a request and read nothing, do not keep
    /// a scrape out: it closes the oldest (64 idle sockets, re-opened every 5 s, kept
    /// every scrape at 503, Prometheus's `up == 0`, from any host that could reach it).
    #[tokio::test]
    async fn idle_and_unread_connections_do_not_keep_scrapes_out() {
        let limits = Limits {
            max_connections: 4,
            read_timeout: Duration::from_secs(30),
            linger: Duration::from_secs(30),
            ..Limits::default()
        };
        let srv = start(limits).await;
        let mut held = Vec::new();
        for k in 0..4 {
            let mut s = TcpStream::connect(srv.addr).await.unwrap();
            if k % 2 == 1 {
                // A complete request whose answer is never read.
                s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
                    .await
                    .unwrap();
            }
            held.push(s);
        }
        // Each scrape closes the oldest held connection (idle, or its answer unread),
        // and an idle one takes the place of the scrape's.
        for k in 0..4 {
            tokio::time::sleep(MIN_AGE + Duration::from_millis(50)).await;
            let (st, _, body) = get(srv.addr, "/metrics").await;
            assert_eq!(st, 200, "{body}");
            let mut rest = Vec::new();
            let read = timeout(Duration::from_secs(5), held[k].read_to_end(&mut rest)).await;
            assert!(read.is_ok(), "connection {k} still open");
            assert_eq!(rest.is_empty(), k % 2 == 0, "{k}");
            held.push(TcpStream::connect(srv.addr).await.unwrap());
        }
        srv.end().await;
    }

    /// A `HEAD` gets the head a `GET` of the same request gets, whatever the status, and
    /// no body (RFC 9110 9.3.2): the 400 and 431 had one (and the 408 and the 503
    /// refusal, checked over a socket). No `HEAD` gets a 405.
    #[test]
    fn head_gets_the_head_of_get_and_no_body_on_every_status() {
        let render: RenderFn = Arc::new(|| "# TYPE up gauge\nup 1\n".to_string());
        let healthy: HealthFn = Arc::new(|| Ok("ok: spooling (insert backlog)".into()));
        let unhealthy: HealthFn = Arc::new(|| Err("scheduler 42 s behind".into()));
        let filler = "X-Filler: aaaaaaaaaaaaaaaa\r\n".repeat(4);
        for (get, health, max_request, status) in [
            (
                "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".into(),
                &healthy,
                1024,
                200,
            ),
            (
                "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n".into(),
                &healthy,
                1024,
                200,
            ),
            (
                "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n".into(),
                &unhealthy,
                1024,
                503,
            ),
            (
                "GET /nothing?x=1 HTTP/1.0\r\n\r\n".into(),
                &healthy,
                1024,
                404,
            ),
            ("GET /metrics HTTP/2.0\r\n\r\n".into(), &healthy, 1024, 400),
            ("GET /metrics\r\n\r\n".into(), &healthy, 1024, 400),
            ("GET /metrics HTTP/1.1\r\n\r\n".into(), &healthy, 1024, 400),
            // Complete but too large, and still incomplete at the limit.
            (
                format!("GET /metrics HTTP/1.1\r\n{filler}\r\n"),
                &healthy,
                64,
                431,
            ),
            (
                format!("GET /metrics HTTP/1.1\r\n{filler}"),
                &healthy,
                64,
                431,
            ),
        ] {
            let head = get.replacen("GET ", "HEAD ", 1);
            let answer = |req: &str| respond(req.as_bytes(), max_request, &render, health);
            let (get_status, get_head, get_body) = parse(&answer(&get).unwrap());
            assert_eq!(get_status, status, "{get:?}");
            assert!(!get_body.is_empty(), "{get:?}");
            let (st, head_head, head_body) = parse(&answer(&head).unwrap());
            assert_eq!(
                (st, head_head, head_body.as_str()),
                (status, get_head, ""),
                "{head:?}"
            );
        }
    }

    /// A head not complete in time gets 408, with no body for a `HEAD`.
    #[tokio::test]
    async fn an_incomplete_head_gets_408_and_a_head_no_body() {
        let limits = Limits {
            read_timeout: Duration::from_millis(200),
            ..Limits::default()
        };
        let srv = start(limits).await;
        let (st, get_head, body) = request(srv.addr, b"GET /metrics HTTP/1.1\r\n").await;
        assert_eq!((st, body.as_str()), (408, "request timeout\n"));
        let (st, head, body) = request(srv.addr, b"HEAD /metrics HTTP/1.1\r\n").await;
        assert_eq!((st, head, body.as_str()), (408, get_head, ""));
        srv.end().await;
    }

    /// One request per connection: what follows the head, a body a GET announces (here
    /// shaped like a request) or a pipelined request, is drained, never answered.
    #[tokio::test]
    async fn a_body_or_pipelined_request_gets_no_second_answer() {
        let srv = start(Limits::default()).await;
        let req = b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 34\r\n\r\n\
                    GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n\
                    GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n";
        let (st, head, body) = request(srv.addr, req).await;
        assert_eq!((st, body.as_str()), (200, "# TYPE up gauge\nup 1\n"));
        assert!(head.contains("Connection: close"), "{head}");
        srv.end().await;
    }

    /// A head whose lines end in LF, some with a CR before it, ends at its first empty
    /// line: `echo -e 'GET /metrics HTTP/1.0\r\n' | nc` sends `\r\n\n`, which was
    /// never taken for the end, so the client got no answer (or a 408 after 5 s).
    #[test]
    fn a_head_with_mixed_line_ends_is_complete_at_its_empty_line() {
        let render: RenderFn = Arc::new(|| "up 1\n".to_string());
        let health: HealthFn = Arc::new(|| Ok("ok".into()));
        for (req, status) in [
            ("GET /metrics HTTP/1.0\r\n\n", 200),
            ("GET /metrics HTTP/1.1\nHost: x\n\r\n", 200),
            ("GET /healthz HTTP/1.1\r\nHost: x\r\n\n", 200),
            ("GET /nothing HTTP/1.0\r\n\n", 404),
            ("GET /metrics HTTP/1.0\r\n\r\n", 200),
            ("GET /metrics HTTP/1.0\n\n", 200),
        ] {
            let resp = respond(req.as_bytes(), MAX_REQUEST_BYTES, &render, &health);
            let resp = resp.unwrap_or_else(|| panic!("{req:?} taken for an incomplete head"));
            assert_eq!(parse(&resp).0, status, "{req:?}");
        }
        // Still incomplete: no empty line yet (a CR alone does not end a line).
        for req in [
            "GET /metrics HTTP/1.1\r\n",
            "GET /metrics HTTP/1.1\r\nHost: x\r\r",
        ] {
            assert!(respond(req.as_bytes(), MAX_REQUEST_BYTES, &render, &health).is_none());
        }
    }

    /// RFC 9112 3.2: a server must answer 400 to an HTTP/1.1 request without `Host`, and
    /// to any with more than one or an invalid one; 5.1: a field name followed by
    /// whitespace; 5.2: a folded line may be. Each was served as if well-formed. Header
    /// names are case-insensitive, HTTP/1.0 may omit `Host`, and other values are not
    /// looked at.
    #[test]
    fn host_and_header_lines_follow_rfc_9112() {
        let render: RenderFn = Arc::new(|| "up 1\n".to_string());
        let health: HealthFn = Arc::new(|| Ok("ok".into()));
        let host_needed = "bad request: an HTTP/1.1 request needs a Host header\n";
        let two_hosts = "bad request: more than one Host header\n";
        let bad_host = "bad request: a Host header that is not a host[:port]\n";
        let no_colon = "bad request: a header line without a colon (or folded)\n";
        let bad_name = "bad request: a header name that is not a token (or folded)\n";
        let (bad_line, served) = ("bad request\n", "up 1\n");
        let check = |req: &str, want: &str| {
            let resp = respond(req.as_bytes(), MAX_REQUEST_BYTES, &render, &health).unwrap();
            let status = if want == served { 200 } else { 400 };
            let (st, _, body) = parse(&resp);
            assert_eq!((st, body.as_str()), (status, want), "{req:?}");
        };
        // The header lines of `GET /metrics HTTP/1.1`.
        for (fields, want) in [
            ("", host_needed),
            ("User-Agent: x\r\n", host_needed),
            ("Host: a\r\nHost: a\r\n", two_hosts),
            ("Host: a b\r\n", bad_host),
            ("Host: a/b\r\n", bad_host),
            ("Host: a\rb\r\n", bad_host),
            ("Host : a\r\n", bad_name),
            (" Host: a\r\n", bad_name),
            ("Host: a\r\nX-A: b\r\n c\r\n", no_colon),
            ("Host: a\r\nnonsense\r\n", no_colon),
            // As Prometheus, curl and probes send them, and values not looked at.
            ("hOsT:127.0.0.1:9464 \r\n", served),
            ("Host: [::1]:9464\r\n", served),
            ("Host:\r\n", served),
            ("Host: a\r\nX-Y: caf\u{e9} \x01:\r\n", served),
            (
                "Host: a\r\nContent-Length: 3\r\nExpect: 100-continue\r\n",
                served,
            ),
        ] {
            check(&format!("GET /metrics HTTP/1.1\r\n{fields}\r\n"), want);
        }
        for (req, want) in [
            (
                "GET http://127.0.0.1:9464/metrics HTTP/1.1\r\n\r\n",
                host_needed,
            ),
            ("POST /metrics HTTP/1.1\r\n\r\n", host_needed),
            ("GET /metrics HTTP/1.2\r\n\r\n", host_needed),
            (
                "GET /metrics HTTP/1.0\r\nHost: a\r\nhost: b\r\n\r\n",
                two_hosts,
            ),
            ("GET /metrics HTTP/1.0\r\nConnection: close\r\n\r\n", served),
            ("GET /metrics HTTP/1.0\n\n", served),
            // The version is HTTP/1.DIGIT (HTTP/1.1x was served).
            ("GET /metrics HTTP/1.1x\r\nHost: a\r\n\r\n", bad_line),
            ("GET /metrics HTTP/1.\r\nHost: a\r\n\r\n", bad_line),
            ("GET /metrics HTTP/1.10\r\nHost: a\r\n\r\n", bad_line),
        ] {
            check(req, want);
        }
    }

    /// RFC 9112 3.2.2: a server must accept the absolute form (clients that take the
    /// endpoint for a proxy send it).
    #[test]
    fn a_request_target_in_absolute_form_is_routed_by_its_path() {
        let render: RenderFn = Arc::new(|| "up 1\n".to_string());
        let health: HealthFn = Arc::new(|| Ok("ok".into()));
        let nf = "not found\n";
        let no_host = "bad request: an http(s) target without a host\n";
        let bad_authority = "bad request: an http(s) target whose authority is not a host[:port]\n";
        for (req, status, body) in [
            ("GET http://127.0.0.1:9464/metrics HTTP/1.1", 200, "up 1\n"),
            ("GET HTTP://[::1]:9464/healthz?x=1 HTTP/1.1", 200, "ok\n"),
            ("GET http://127.0.0.1:9464 HTTP/1.1", 404, nf),
            ("GET http://127.0.0.1:9464?/metrics HTTP/1.1", 404, nf),
            ("GET /http://x/metrics HTTP/1.1", 404, nf),
            // https as http (it was taken for a path: 404).
            ("GET https://127.0.0.1:9464/metrics HTTP/1.1", 200, "up 1\n"),
            ("GET HTTPS://host/healthz#x HTTP/1.1", 200, "ok\n"),
            ("HEAD https://host/metrics HTTP/1.1", 200, ""),
            // A fragment ends the authority (`#/metrics` was served as the path).
            ("GET http://127.0.0.1:9464#/metrics HTTP/1.1", 404, nf),
            // Another scheme names no resource of this endpoint.
            ("GET ftp://127.0.0.1/metrics HTTP/1.1", 404, nf),
            ("GET httpx://127.0.0.1/metrics HTTP/1.1", 404, nf),
            // RFC 9110 4.2: an http(s) URI without a host, or with userinfo, is refused
            // (those of http were served by their path).
            ("GET http:///metrics HTTP/1.1", 400, no_host),
            ("GET https://:9464/metrics HTTP/1.1", 400, no_host),
            ("POST http:///metrics HTTP/1.1", 400, no_host),
            ("GET http://user:pw@h/metrics HTTP/1.1", 400, bad_authority),
            ("GET https://a\"b/metrics HTTP/1.1", 400, bad_authority),
        ] {
            let head = format!("{req}\r\nHost: 127.0.0.1\r\n\r\n");
            let resp = respond(head.as_bytes(), MAX_REQUEST_BYTES, &render, &health).unwrap();
            let (st, _, got) = parse(&resp);
            assert_eq!((st, got.as_str()), (status, body), "{req}");
        }
    }

    /// RFC 9112 2.2: a server should ignore at least one empty line before the request
    /// line; they got `400 bad request` (the empty line taken for the end of an empty
    /// head). They count towards the size limit, so that a client sending nothing else
    /// still gets its `431`.
    #[test]
    fn empty_lines_before_the_request_line_are_ignored() {
        let render: RenderFn = Arc::new(|| "up 1\n".to_string());
        let health: HealthFn = Arc::new(|| Ok("ok".into()));
        let answer = |req: &[u8], max_request: usize| respond(req, max_request, &render, &health);
        for (req, status, body) in [
            (
                "\r\nGET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
                200,
                "up 1\n",
            ),
            ("\n\r\n\nGET /healthz HTTP/1.0\n\n", 200, "ok\n"),
            ("\r\nHEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 200, ""),
            (
                "\r\nGET /nothing HTTP/1.1\r\nHost: x\r\n\r\n",
                404,
                "not found\n",
            ),
            ("\r\nHEAD /metrics HTTP/1.1\r\n\r\n", 400, ""),
        ] {
            let resp = answer(req.as_bytes(), MAX_REQUEST_BYTES)
                .unwrap_or_else(|| panic!("{req:?} taken for an incomplete head"));
            let (st, _, got) = parse(&resp);
            assert_eq!((st, got.as_str()), (status, body), "{req:?}");
        }
        // Empty lines alone, or a CR that may start one, are no request yet.
        for req in ["\r\n", "\n\n\r\n", "\r\n\r"] {
            assert!(
                answer(req.as_bytes(), MAX_REQUEST_BYTES).is_none(),
                "{req:?}"
            );
        }
        // Bounded: empty lines up to the limit, or pushing the head past it, get 431.
        let req = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
        assert_eq!(parse(&answer(&[b'\n'; 64], 64).unwrap()).0, 431);
        let pushed = format!("{}{req}", "\r\n".repeat(8));
        assert_eq!(
            parse(&answer(pushed.as_bytes(), req.len() + 15).unwrap()).0,
            431
        );
        assert_eq!(
            parse(&answer(pushed.as_bytes(), req.len() + 16).unwrap()).0,
            200
        );
    }

    #[tokio::test]
    async fn shutdown_stops_listening_and_bounds_open_connections() {
        let limits = Limits {
            grace: Duration::from_millis(300),
            ..Limits::default()
        };
        let srv = start(limits).await;
        assert_eq!(get(srv.addr, "/healthz").await.0, 200);
        // An idle connection (would wait READ_TIMEOUT = 5 s) must not delay the stop
        // beyond the grace period.
        let _idle = TcpStream::connect(srv.addr).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let t = StdInstant::now();
        srv.stop.send(true).unwrap();
        timeout(Duration::from_secs(3), srv.task)
            .await
            .expect("serve returns")
            .unwrap();
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        let e = TcpStream::connect(srv.addr).await.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused);
    }

    #[tokio::test]
    async fn dropped_sender_stops_and_already_true_returns_at_once() {
        let srv = start(Limits::default()).await;
        drop(srv.stop);
        timeout(Duration::from_secs(3), srv.task)
            .await
            .expect("serve returns")
            .unwrap();

        let listener = bind(TEST_ADDR).await.unwrap();
        let (_tx, rx) = watch::channel(true);
        let render: RenderFn = Arc::new(String::new);
        let health: HealthFn = Arc::new(|| Ok("ok".into()));
        timeout(Duration::from_secs(3), serve(listener, render, health, rx))
            .await
            .expect("returns");
    }

    #[tokio::test]
    async fn bind_errors_are_clear() {
        let first = bind(TEST_ADDR).await.unwrap();
        let addr = first.local_addr().unwrap().to_string();
        let e = format!("{:#}", bind(&addr).await.unwrap_err());
        assert!(e.contains("already in use") && e.contains(&addr), "{e}");
        let e = format!("{:#}", bind("localhost:9464").await.unwrap_err());
        assert!(e.contains("expected IP:port"), "{e}");
        let e = format!("{:#}", bind("192.0.2.1:9464").await.unwrap_err());
        assert!(e.contains("not available"), "{e}");
    }

    thread_local! {
        /// `serve_with`'s `open.len()` after each admission (tests run the server on
        /// their own thread).
        pub(super) static OPEN_ENTRIES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    /// Ended connections are not remembered by a server never full (pruned only when
    /// every slot was taken, it kept an entry per scrape and health probe for good).
    #[tokio::test]
    async fn finished_connections_are_not_remembered() {
        let limits = Limits {
            max_connections: 4,
            ..Limits::default()
        };
        let srv = start(limits).await;
        for _ in 0..50 {
            assert_eq!(get(srv.addr, "/healthz").await.0, 200);
        }
        let n = OPEN_ENTRIES.with(|n| n.get());
        assert!(n <= 2 * 4, "{n} entries kept for 50 finished connections");
        srv.end().await;
    }
}
