//! Hostile datagrams: the decoder must never panic, whatever it accepts must re-encode to
//! the same message, and the engine must drop anything that is not an answer to one of
//! its requests.
#![no_main]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use libfuzzer_sys::fuzz_target;
use snmp::{
    encode_message, HostJob, HostMemory, Iteration, IterationOptions, Message, Oid, Version, Walk,
};

fuzz_target!(|data: &[u8]| {
    let _ = snmp::peek_request_id(data);
    if let Ok(m) = Message::decode(data) {
        assert_eq!(m.varbinds().count(), m.varbind_count());
        let vbs: Vec<(Oid, snmp::VarValue)> = m
            .varbinds()
            .map(|vb| (vb.oid.to_owned(), vb.value.to_owned()))
            .collect();
        for (o, v) in &vbs {
            let _ = format!("{o} = {v}");
            // Display output parses back to the same OID.
            assert_eq!(&o.to_string().parse::<Oid>().unwrap(), o);
        }
        let mut out = Vec::new();
        encode_message(
            &mut out,
            m.version,
            m.community,
            m.pdu_type,
            m.request_id,
            m.error_status.0 as i64,
            m.error_index as i64,
            vbs.iter().map(|(o, v)| (o.as_ref(), v.as_ref())),
        );
        let again = Message::decode(&out).expect("re-encoded message decodes");
        assert_eq!(again.request_id, m.request_id);
        assert_eq!(again.community, m.community);
        let vbs2: Vec<(Oid, snmp::VarValue)> = again
            .varbinds()
            .map(|vb| (vb.oid.to_owned(), vb.value.to_owned()))
            .collect();
        assert_eq!(vbs, vbs2);

        let mut w = Walk::new("1.3.6.1.2.1".parse().unwrap(), m.version, 10);
        w.next_request(&mut Vec::new(), m.community, m.request_id);
        let _ = w.handle_response(&m, &mut Vec::new());
    }
    // The engine with one request in flight: a fuzzed datagram may match only if it
    // carries that request-id, community and source.
    let src: SocketAddr = "127.0.0.1:161".parse().unwrap();
    // One job of these OIDs, its first request-id 1.
    let job = |oids: &[&str]| {
        let oids = oids.iter().map(|o| o.parse().unwrap()).collect();
        [HostJob::new(src, Arc::from("public"), oids)]
    };
    let opts = || IterationOptions {
        first_request_id: 1,
        ..Default::default()
    };
    let jobs = job(&["1.3.6.1.2.1.1.3.0"]);
    let mut it = Iteration::new(&jobs, &HostMemory::default(), opts());
    let now = Instant::now();
    let mut buf = Vec::new();
    it.poll_transmit(now, &mut buf).unwrap();
    let r = it.handle_datagram(src, data, now);
    if r == snmp::engine::Received::Matched {
        let m = Message::decode(data).unwrap();
        assert_eq!(
            (m.request_id, m.community, m.version),
            (1, &b"public"[..], Version::V2c)
        );
    }
    while it.poll_event().is_some() {}

    // A request of three OIDs whose first attempt timed out: its retry and the one-OID
    // probe beside it are in flight (request-ids 1 and 2). A fuzzed datagram matches
    // one of them or nothing, and every item still gets exactly one event.
    let jobs = job(&["1.3.6.1.2.1.1.3.0", "1.3.6.1.2.1.1.5.0", "1.3.6.1.2.1.1.6.0"]);
    let mut it = Iteration::new(&jobs, &HostMemory::default(), opts());
    it.poll_transmit(now, &mut buf).unwrap();
    let later = now + jobs[0].timeout;
    it.handle_timeout(later);
    while it.poll_transmit(later, &mut buf).is_some() {}
    if it.handle_datagram(src, data, later) == snmp::engine::Received::Matched {
        let m = Message::decode(data).unwrap();
        assert!(m.request_id == 1 || m.request_id == 2, "{}", m.request_id);
    }
    let mut t = later;
    while !it.is_done() {
        t = it.poll_timeout().map_or(t, |d| d.max(t));
        it.handle_timeout(t);
        while it.poll_transmit(t, &mut buf).is_some() {}
    }
    let mut items = [0u32; 3];
    while let Some(e) = it.poll_event() {
        if let snmp::Event::Item { item, .. } = e {
            items[item] += 1;
        }
    }
    assert_eq!(items, [1, 1, 1]);
});
