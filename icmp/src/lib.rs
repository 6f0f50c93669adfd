//! Sans-IO ICMP echo sweep engine.
//!
//! No sockets, no clock: bytes and instants go in, packets and events come out. The
//! `poller` crate's `icmp_driver` owns the socket and the timers.
//!
//! * [`wire`]: echo request/reply wire format (checked view + typed repr) over
//!   `pnet_packet`, and reply parsing for raw IPv4 sockets (IP header included) and for
//!   header-less ICMP/ICMPv6 sockets.
//! * [`tag`]: the keyed payload tag that proves a reply answers one of our requests.
//! * [`sweep`]: the per-iteration state machine: in-flight table keyed by
//!   (address, identifier, sequence), pacing, per-host spacing, one deadline,
//!   per-host completion events, counters of everything ignored.
//! * [`pace`]: the send-rate token bucket a sweep paces itself with, also shared by
//!   several sweeps' sockets.
//! * [`unreachable`](mod@unreachable): the ICMP errors that end a datagram's way, by type and code
//!   (the SNMP driver's too).
//! * [`stats`]: per-host [`PingStats`] with Zabbix `icmpping*` semantics.

pub mod pace;
pub mod stats;
pub mod sweep;
pub mod tag;
pub mod unreachable;
pub mod wire;

pub use pace::{SharedPacer, Slots};
pub use stats::{PingStats, RttMode, MIN_RTT_SECONDS};
pub use sweep::{
    Event, IgnoreReason, Job, ProbeToken, ReplyOutcome, Retry, Rtts, SocketKind, Sweep,
    SweepConfig, SweepCounters, SweepError, SweepSpace, Transmit, MAX_JOB_WAIT, MAX_PAYLOAD_V4,
    MAX_PAYLOAD_V6, MIN_PAYLOAD,
};
pub use tag::TagKey;
pub use unreachable::{Unreachable, UnreachableKind};
pub use wire::{EchoKind, EchoPacket, EchoRepr, Family, Framing, ReceivedEcho, WireError};

#[cfg(test)]
mod tests_sweep;
#[cfg(test)]
mod tests_wire;
