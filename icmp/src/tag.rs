//! The payload tag that proves a reply answers one of our requests.
//!
//! Layout of every echo payload we send (big-endian):
//!
//! ```text
//! 0        4                    12         16                     size
//! | iter u32 | tag u64            | job u32  | filler 0x10 0x11 ... |
//! ```
//!
//! `tag = SipHash-2-4(secret, iter ‖ target address (16 bytes, IPv4 mapped) ‖ seq ‖ job)`.
//! The job (its index in the sweep) tells the sweep which host a reply answers without
//! a lookup by address; the tag vouches for it as for the rest.
//! The identifier is left out on purpose: Linux datagram ping sockets rewrite it.
//! A reply whose tag verifies under another `iter` is a late reply of an earlier
//! iteration (stale); one that does not verify at all was not built by us for this
//! address and sequence (foreign or spoofed), unless it verifies for the address of
//! the job it names: then it is our probe's, answered from another address
//! (redirected). The secret is 128 bits chosen by the
//! caller (the driver draws it at random once per process).

use std::net::IpAddr;

/// Bytes of payload the tag occupies; a probe's payload is never shorter.
pub const TAG_LEN: usize = 16;

/// 128-bit SipHash key.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct TagKey(pub [u64; 2]);

impl std::fmt::Debug for TagKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret.
        f.write_str("TagKey(..)")
    }
}

fn addr_bytes(addr: IpAddr) -> [u8; 16] {
    match addr {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}

/// Tag of the probe (`iter`, `addr`, `seq`, `job`) under `key`.
pub fn compute(key: TagKey, iter: u32, addr: IpAddr, seq: u16, job: u32) -> u64 {
    let mut msg = [0u8; 26];
    msg[..4].copy_from_slice(&iter.to_be_bytes());
    msg[4..20].copy_from_slice(&addr_bytes(addr));
    msg[20..22].copy_from_slice(&seq.to_be_bytes());
    msg[22..26].copy_from_slice(&job.to_be_bytes());
    siphash24(key.0[0], key.0[1], &msg)
}

/// Writes iteration, tag, job and filler into `payload` (which must be ≥ [`TAG_LEN`]
/// bytes; a shorter one only gets the filler and will never verify).
pub fn write_payload(payload: &mut [u8], key: TagKey, iter: u32, addr: IpAddr, seq: u16, job: u32) {
    for (i, b) in payload.iter_mut().enumerate() {
        *b = i as u8;
    }
    if payload.len() >= TAG_LEN {
        payload[..4].copy_from_slice(&iter.to_be_bytes());
        payload[4..12].copy_from_slice(&compute(key, iter, addr, seq, job).to_be_bytes());
        payload[12..16].copy_from_slice(&job.to_be_bytes());
    }
}

/// What the payload of a reply says about its origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TagCheck {
    /// Built by us for this address and sequence, in iteration `iter`, for job `job`.
    Valid {
        /// Iteration the probe belonged to.
        iter: u32,
        /// The job (host) of that iteration it was sent for.
        job: u32,
    },
    /// Not built by us for this address and sequence.
    Invalid,
}

/// The job a payload names, its tag unchecked: where to look for the address a reply
/// that does not verify for its source was built for ([`check`] it against that).
pub fn job_of(payload: &[u8]) -> Option<u32> {
    fields(payload).map(|(_, _, job)| job)
}

/// Checks the tag of a reply payload from `src` with sequence `seq`.
pub fn check(payload: &[u8], key: TagKey, src: IpAddr, seq: u16) -> TagCheck {
    match fields(payload) {
        Some((iter, tag, job)) if tag == compute(key, iter, src, seq, job) => {
            TagCheck::Valid { iter, job }
        }
        _ => TagCheck::Invalid,
    }
}

/// The iteration, tag and job a payload carries, as [`write_payload`] lays them out.
fn fields(payload: &[u8]) -> Option<(u32, u64, u32)> {
    let head = payload.first_chunk::<TAG_LEN>()?;
    let word = |r: std::ops::Range<usize>| head[r].iter().fold(0u64, |w, &b| w << 8 | u64::from(b));
    Some((word(0..4) as u32, word(4..12), word(12..16) as u32))
}

/// SipHash-2-4 (Aumasson & Bernstein), 64-bit output.
fn siphash24(k0: u64, k1: u64, msg: &[u8]) -> u64 {
    let mut v0 = k0 ^ 0x736f_6d65_7073_6575;
    let mut v1 = k1 ^ 0x646f_7261_6e64_6f6d;
    let mut v2 = k0 ^ 0x6c79_6765_6e65_7261;
    let mut v3 = k1 ^ 0x7465_6462_7974_6573;
    macro_rules! round {
        () => {
            v0 = v0.wrapping_add(v1);
            v1 = v1.rotate_left(13);
            v1 ^= v0;
            v0 = v0.rotate_left(32);
            v2 = v2.wrapping_add(v3);
            v3 = v3.rotate_left(16);
            v3 ^= v2;
            v0 = v0.wrapping_add(v3);
            v3 = v3.rotate_left(21);
            v3 ^= v0;
            v2 = v2.wrapping_add(v1);
            v1 = v1.rotate_left(17);
            v1 ^= v2;
            v2 = v2.rotate_left(32);
        };
    }
    let mut chunks = msg.chunks_exact(8);
    for c in &mut chunks {
        let m = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        v3 ^= m;
        round!();
        round!();
        v0 ^= m;
    }
    let rest = chunks.remainder();
    let mut last = (msg.len() as u64 & 0xff) << 56;
    for (i, b) in rest.iter().enumerate() {
        last |= u64::from(*b) << (8 * i);
    }
    v3 ^= last;
    round!();
    round!();
    v0 ^= last;
    v2 ^= 0xff;
    round!();
    round!();
    round!();
    round!();
    v0 ^ v1 ^ v2 ^ v3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn siphash_reference_vectors() {
        // Vectors from the SipHash paper: key 00..0f, message 00..(n-1).
        let k0 = u64::from_le_bytes([0, 1, 2, 3, 4, 5, 6, 7]);
        let k1 = u64::from_le_bytes([8, 9, 10, 11, 12, 13, 14, 15]);
        let msg: Vec<u8> = (0u8..15).collect();
        assert_eq!(siphash24(k0, k1, &[]), 0x726f_db47_dd0e_0e31);
        assert_eq!(siphash24(k0, k1, &msg), 0xa129_ca61_49be_45e5);
    }

    #[test]
    fn tag_round_trip_and_rejections() {
        let key = TagKey([1, 2]);
        let addr: IpAddr = "127.77.0.9".parse().unwrap();
        let mut p = [0u8; 56];
        write_payload(&mut p, key, 7, addr, 42, 4_000);
        assert_eq!(
            check(&p, key, addr, 42),
            TagCheck::Valid {
                iter: 7,
                job: 4_000
            }
        );
        assert_eq!(check(&p, key, addr, 43), TagCheck::Invalid);
        assert_eq!(
            check(&p, key, "127.77.0.10".parse().unwrap(), 42),
            TagCheck::Invalid
        );
        assert_eq!(check(&p, TagKey([1, 3]), addr, 42), TagCheck::Invalid);
        assert_eq!(check(&p[..15], key, addr, 42), TagCheck::Invalid);
        assert_eq!(p[16], 16, "filler continues the byte index");
        let mut flipped = p;
        flipped[0] ^= 1; // another iteration number without the matching tag
        assert_eq!(check(&flipped, key, addr, 42), TagCheck::Invalid);
        // Another job without the matching tag: a forged reply cannot name a host.
        let mut other = p;
        other[15] ^= 1;
        assert_eq!(check(&other, key, addr, 42), TagCheck::Invalid);
    }
}
