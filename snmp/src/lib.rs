//! Sans-IO SNMP v1/v2c/v3 client: BER codec, USM security, request-id matching,
//! per-host chains.
//!
//! Nothing here opens a socket or reads a clock: bytes and `now` go in, datagrams to send
//! and per-item results come out (see [`engine`]). The poller crate owns the sockets.
//!
//! * [`Oid`] parses `1.3.6…` / `.1.3.6…` and prints net-snmp's `-On` form.
//! * [`encode_request`] builds GET / GETNEXT / GETBULK messages; [`Message::decode`]
//!   validates a whole datagram (never panics, typed [`DecodeError`]) and then lends
//!   zero-copy varbinds.
//! * [`engine::Iteration`] runs one polling iteration over many hosts: hybrid async
//!   (bounded requests in flight per host, hosts in parallel), retries, tooBig splitting
//!   remembered across iterations in [`engine::HostMemory`].
//! * [`Walk`] walks a subtree (GETBULK, or GETNEXT for v1).
//! * [`v3`]: SNMPv3 messages with the User-based Security Model (MD5, SHA-1 and SHA-2
//!   authentication, DES and AES-128 privacy; the cryptography is in [`usm`]); the
//!   engine discovers each agent's engine ID and clock once and keeps them in
//!   [`engine::HostMemory`].
//!
//! Why our own codec rather than snmp2 or async-snmp: snmp2's request builders are
//! private and its decoder is lazy (a malformed varbind silently ends the iteration,
//! after the request was already matched); async-snmp brings its own tokio transport and
//! session, which does not fit a sans-IO engine driven over shared sockets. The subset
//! v1/v2c needs is ~1,100 lines without tests (BER, OID, values, messages), checked and
//! zero-copy on decode, fuzzed, and fixture-tested against net-snmp. Measured with
//! `cargo bench -p snmp --bench codec`: decoding net-snmp's 12-varbind response takes
//! about the time snmp2's `Pdu::from_bytes` takes, while validating every varbind first;
//! encoding a GET is ~0.1 µs; the whole engine costs ~1.1 µs per request.

mod ber;
pub mod engine;
mod message;
mod oid;
pub mod usm;
pub mod v3;
mod value;
pub mod walk;

pub use engine::{
    Dropped, Event, HostJob, HostMemory, ItemFailure, Iteration, IterationOptions, Stats, Transmit,
};
pub use icmp::{Unreachable, UnreachableKind};
pub use message::{
    encode_message, encode_request, encode_response, peek_request_id, ErrorStatus, Message,
    PduType, Refusal, RequestKind, VarBind, VarBinds, Version,
};
pub use oid::{Arcs, Oid, OidParseError, OidRef, MAX_ARCS};
pub use value::{
    hex_string, is_net_snmp_printable, opaque_number, uptime_string, OpaqueNumber, ValueRef,
    VarValue,
};
pub use walk::{Walk, WalkError};

/// Why a datagram could not be decoded. Cheap to construct (no allocation): malformed
/// datagrams are counted on the hot path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("truncated BER element")]
    Truncated,
    #[error("invalid BER length")]
    BadLength,
    #[error("unexpected BER tag 0x{found:02x}")]
    BadTag { found: u8 },
    #[error("integer out of range")]
    IntegerRange,
    #[error("invalid object identifier encoding")]
    BadOid,
    #[error("unsupported SNMP version {version}")]
    UnsupportedVersion { version: i64 },
    #[error("unsupported PDU type 0x{found:02x}")]
    UnsupportedPdu { found: u8 },
    #[error("trailing bytes after BER element")]
    TrailingBytes,
    #[error("unsupported SNMPv3 security model {model} (only USM, 3)")]
    UnsupportedSecurityModel { model: i64 },
    #[error("invalid SNMPv3 msgFlags 0x{flags:02x} (privacy without authentication)")]
    BadFlags { flags: u8 },
}
