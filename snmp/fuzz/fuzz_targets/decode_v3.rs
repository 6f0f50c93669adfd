//! Hostile SNMPv3 datagrams: the envelope decoder, the MAC check and the decryption must
//! never panic, and the engine must accept nothing that does not authenticate with the
//! user's key (a fuzzer cannot forge an HMAC), whether it is discovering the agent's
//! engine or polling it.
#![no_main]

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use libfuzzer_sys::fuzz_target;
use snmp::engine::Received;
use snmp::usm::{AuthProtocol, PrivProtocol};
use snmp::v3::{Engine, UsmUser, V3Message};
use snmp::{HostJob, HostMemory, Iteration, IterationOptions};

/// Users and their engines are made once (1 MiB of hashing per key, more for a Reeder
/// extension), not per input.
fn engines() -> &'static [Engine; 3] {
    static ENGINES: OnceLock<[Engine; 3]> = OnceLock::new();
    ENGINES.get_or_init(|| {
        let engine = |name, a, p| {
            let user = UsmUser::new(name, Some((a, "np-auth-pass")), Some((p, "np-priv-pass")));
            Engine::new(Arc::new(user.unwrap()), ENGINE_ID, 1, 18, Instant::now())
        };
        [
            engine("np-shaaes", AuthProtocol::Sha1, PrivProtocol::Aes128),
            engine("np-md5des", AuthProtocol::Md5, PrivProtocol::Des),
            engine("np-aes256", AuthProtocol::Md5, PrivProtocol::Aes256C),
        ]
    })
}

const ENGINE_ID: &[u8] = b"\x80\x00\x1f\x88\x04netpoller-agent-1";

fuzz_target!(|data: &[u8]| {
    let now = Instant::now();
    let src: SocketAddr = "127.0.20.1:161".parse().unwrap();
    for engine in engines() {
        let user = engine.user();
        if let Ok(m) = V3Message::decode(data) {
            let _ = m.level();
            let _ = m.verify(data, engine, &mut Vec::new());
            if let Ok(s) = m.scoped_pdu(Some(engine), &mut Vec::new()) {
                assert_eq!(s.pdu.varbinds().count(), s.pdu.varbind_count());
                let _ = snmp::v3::ReportKind::of(&s.pdu);
            }
        }
        // Discovering (msgID 1 in flight), then polling with a known engine (msgID 2).
        let jobs = [HostJob::new_v3(src, user.clone(), vec!["1.3.6.1.2.1.1.5.0".parse().unwrap()])];
        let mut known = HostMemory::default();
        known.remember_engine(src, engine.clone());
        for (memory, id) in [(HostMemory::default(), 1), (known, 2)] {
            let opts = IterationOptions { first_request_id: id, ..Default::default() };
            let mut it = Iteration::new(&jobs, &memory, opts);
            it.poll_transmit(now, &mut Vec::new()).unwrap();
            let r = it.handle_datagram(src, data, now);
            if id == 2 {
                // Only an authentic message of this user counts, and the fuzzer has no key.
                assert!(
                    !matches!(r, Received::Matched),
                    "an unauthenticated datagram was taken as a response"
                );
            }
            while it.poll_event().is_some() {}
        }
    }
});
