//! The metrics endpoint's request handling on arbitrary bytes: never panics, always
//! answers once the head is complete or the size limit is reached, and every answer is
//! a well-formed HTTP/1.1 response whose Content-Length matches its body, or, whatever
//! the status, has no body for a HEAD (empty lines before its request line included).
#![no_main]

#[allow(dead_code)]
#[path = "../../src/http.rs"]
mod http;

use libfuzzer_sys::fuzz_target;
use std::sync::Arc;

/// Below libFuzzer's default `-max_len` (4096), so that inputs reach the limit and its
/// 431 (at the daemon's 8 KiB none did).
const LIMIT: usize = 1024;

fuzz_target!(|data: &[u8]| {
    let render: http::RenderFn = Arc::new(|| "# TYPE up gauge\nup 1\n".to_string());
    let health: http::HealthFn = Arc::new(|| Err("behind \"schedule\"".to_string()));
    let Some(resp) = http::respond(data, LIMIT, &render, &health) else {
        assert!(data.len() < LIMIT, "must answer at the size limit");
        return;
    };
    let text = std::str::from_utf8(&resp).expect("responses are UTF-8");
    assert!(text.starts_with("HTTP/1.1 "), "{text:?}");
    let (head, body) = text.split_once("\r\n\r\n").expect("head terminated");
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .expect("Content-Length")
        .parse()
        .unwrap();
    // A HEAD, after the empty lines a request line may follow (RFC 9112 2.2).
    let mut request = data;
    while let Some(rest) = request
        .strip_prefix(b"\n")
        .or_else(|| request.strip_prefix(b"\r\n"))
    {
        request = rest;
    }
    let sent = if request.starts_with(b"HEAD ") { 0 } else { len };
    assert_eq!(body.len(), sent, "{text:?}");
    assert!(head.contains("Connection: close"));
});
