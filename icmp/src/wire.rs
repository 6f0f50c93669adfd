//! ICMP echo wire format in two levels (smoltcp style), built on `pnet_packet`.
//!
//! * [`EchoPacket`] is a checked zero-copy view over a byte buffer: once
//!   [`EchoPacket::new_checked`] succeeded, every accessor is in bounds.
//! * [`EchoRepr`] is the typed representation with [`EchoRepr::parse`],
//!   [`EchoRepr::buffer_len`] and [`EchoRepr::emit`].
//! * [`parse_reply`] turns what a socket hands out (a raw IPv4 datagram with its IP header,
//!   or a bare ICMP/ICMPv6 message from a datagram or raw ICMPv6 socket) into a
//!   [`ReceivedEcho`].
//!
//! Invariant: nothing in this module panics on any input; malformed input is an
//! [`WireError`]. ICMPv6 checksums cover an IPv6 pseudo-header and Linux computes and
//! verifies them for ICMPv6 sockets, so only ICMPv4 checksums are computed here.

use std::net::{IpAddr, Ipv4Addr};

use pnet_packet::icmp::echo_request::{EchoRequestPacket, MutableEchoRequestPacket};
use pnet_packet::ipv4::Ipv4Packet;

/// Length of the ICMP echo header: type, code, checksum, identifier, sequence.
pub const HEADER_LEN: usize = 8;
/// IANA protocol number of ICMP in the IPv4 header.
pub const IPPROTO_ICMP: u8 = 1;

/// Address family of an echo message; it decides the type numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// ICMP (RFC 792): request 8, reply 0.
    V4,
    /// ICMPv6 (RFC 4443): request 128, reply 129.
    V6,
}

impl Family {
    /// Family of an address.
    pub fn of(addr: IpAddr) -> Self {
        match addr {
            IpAddr::V4(_) => Family::V4,
            IpAddr::V6(_) => Family::V6,
        }
    }

    /// ICMP type number of `kind` in this family.
    pub fn type_of(self, kind: EchoKind) -> u8 {
        match (self, kind) {
            (Family::V4, EchoKind::Request) => 8,
            (Family::V4, EchoKind::Reply) => 0,
            (Family::V6, EchoKind::Request) => 128,
            (Family::V6, EchoKind::Reply) => 129,
        }
    }

    /// Echo kind of an ICMP type number, `None` for every other message type.
    pub fn kind_of(self, icmp_type: u8) -> Option<EchoKind> {
        match (self, icmp_type) {
            (Family::V4, 8) | (Family::V6, 128) => Some(EchoKind::Request),
            (Family::V4, 0) | (Family::V6, 129) => Some(EchoKind::Reply),
            _ => None,
        }
    }
}

/// Echo request or echo reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EchoKind {
    /// Echo request (ping).
    Request,
    /// Echo reply (pong).
    Reply,
}

/// How the bytes handed out by a socket are framed; fixed by the socket kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Framing {
    /// Raw `AF_INET` socket: an IPv4 header precedes the ICMP message.
    Ipv4Header,
    /// Datagram ping socket, or raw `AF_INET6` socket: the bare ICMP message.
    IcmpOnly,
}

/// Why bytes are not a usable echo message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Fewer bytes than the header that must be there.
    #[error("truncated packet: {len} bytes, need at least {need}")]
    Truncated {
        /// Bytes available.
        len: usize,
        /// Bytes needed.
        need: usize,
    },
    /// The IPv4 header is inconsistent (version, header length, total length).
    #[error("malformed IPv4 header")]
    BadIpHeader,
    /// The IPv4 payload is not ICMP.
    #[error("IPv4 protocol {0} is not ICMP")]
    NotIcmp(u8),
    /// The ICMP checksum does not verify.
    #[error("bad ICMP checksum")]
    BadChecksum,
    /// A well-formed ICMP message that is not an echo request/reply (type given).
    #[error("ICMP type {0} is not an echo message")]
    NotEcho(u8),
    /// An echo request with a non-zero code (a reply's code is not checked).
    #[error("echo request with code {0}")]
    BadCode(u8),
}

/// Checked zero-copy view of an ICMP echo message (request or reply, v4 or v6).
#[derive(Debug, Clone, Copy)]
pub struct EchoPacket<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EchoPacket<T> {
    /// Wraps `buffer` without checking its length; accessors may then see short fields
    /// as zero (pnet is bounds-safe) but never panic. Prefer [`Self::new_checked`].
    pub fn new_unchecked(buffer: T) -> Self {
        EchoPacket { buffer }
    }

    /// Wraps `buffer` after checking it holds at least the 8-byte echo header.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let len = buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(WireError::Truncated {
                len,
                need: HEADER_LEN,
            });
        }
        Ok(EchoPacket { buffer })
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn view(&self) -> Option<EchoRequestPacket<'_>> {
        // Echo request and reply share one layout; pnet's view only reads fields.
        EchoRequestPacket::new(self.buffer.as_ref())
    }

    /// ICMP type.
    pub fn msg_type(&self) -> u8 {
        self.view().map_or(0, |v| v.get_icmp_type().0)
    }

    /// ICMP code (0 in echo messages we send; a reply's is not checked).
    pub fn code(&self) -> u8 {
        self.view().map_or(0, |v| v.get_icmp_code().0)
    }

    /// Checksum field as sent.
    pub fn checksum(&self) -> u16 {
        self.view().map_or(0, |v| v.get_checksum())
    }

    /// Identifier field.
    pub fn ident(&self) -> u16 {
        self.view().map_or(0, |v| v.get_identifier())
    }

    /// Sequence number field.
    pub fn seq(&self) -> u16 {
        self.view().map_or(0, |v| v.get_sequence_number())
    }

    /// Data after the header.
    pub fn payload(&self) -> &[u8] {
        self.buffer.as_ref().get(HEADER_LEN..).unwrap_or(&[])
    }

    /// Whether the ICMPv4 checksum (over the whole message) verifies: the message, its
    /// checksum field included, sums to all ones. Comparing the field with a value
    /// computed afresh would refuse 0xFFFF, the other way to write a sum of 0x0000
    /// (RFC 1624), which responders that update checksums incrementally send.
    pub fn verify_checksum_v4(&self) -> bool {
        let data = self.buffer.as_ref();
        data.len() >= HEADER_LEN && pnet_packet::util::checksum(data, usize::MAX) == 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EchoPacket<T> {
    fn view_mut(&mut self) -> Option<MutableEchoRequestPacket<'_>> {
        MutableEchoRequestPacket::new(self.buffer.as_mut())
    }

    /// Sets the ICMP type.
    pub fn set_msg_type(&mut self, value: u8) {
        if let Some(mut v) = self.view_mut() {
            v.set_icmp_type(pnet_packet::icmp::IcmpType(value));
        }
    }

    /// Sets the ICMP code.
    pub fn set_code(&mut self, value: u8) {
        if let Some(mut v) = self.view_mut() {
            v.set_icmp_code(pnet_packet::icmp::IcmpCode(value));
        }
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, value: u16) {
        if let Some(mut v) = self.view_mut() {
            v.set_checksum(value);
        }
    }

    /// Sets the identifier.
    pub fn set_ident(&mut self, value: u16) {
        if let Some(mut v) = self.view_mut() {
            v.set_identifier(value);
        }
    }

    /// Sets the sequence number.
    pub fn set_seq(&mut self, value: u16) {
        if let Some(mut v) = self.view_mut() {
            v.set_sequence_number(value);
        }
    }

    /// Mutable data after the header.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        self.buffer
            .as_mut()
            .get_mut(HEADER_LEN..)
            .unwrap_or(&mut [])
    }

    /// Computes and stores the ICMPv4 checksum over the whole buffer.
    pub fn fill_checksum_v4(&mut self) {
        // Per probe: sum around the field (word 1) instead of zeroing it first.
        let sum = pnet_packet::util::checksum(self.buffer.as_ref(), 1);
        self.set_checksum(sum);
    }
}

/// The Internet checksum (RFC 1071) of `data` whose checksum field is zero, as it goes
/// into that field (an IPv4 header's, say; echo messages use `fill_checksum_v4`).
pub fn internet_checksum(data: &[u8]) -> u16 {
    // pnet skips one 16-bit word (the field); ours is zero, so skip none.
    pnet_packet::util::checksum(data, usize::MAX)
}

/// Typed representation of an echo request or reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EchoRepr<'a> {
    /// ICMP or ICMPv6.
    pub family: Family,
    /// Request or reply.
    pub kind: EchoKind,
    /// Identifier (on Linux datagram sockets the kernel replaces it by the socket's port).
    pub ident: u16,
    /// Sequence number.
    pub seq: u16,
    /// Data.
    pub payload: &'a [u8],
}

impl<'a> EchoRepr<'a> {
    /// Parses a checked packet. `verify_checksum` applies to ICMPv4 only (see module docs).
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        packet: &EchoPacket<&'a T>,
        family: Family,
        verify_checksum: bool,
    ) -> Result<Self, WireError> {
        let buffer: &'a T = packet.buffer;
        let data: &'a [u8] = buffer.as_ref();
        if data.len() < HEADER_LEN {
            return Err(WireError::Truncated {
                len: data.len(),
                need: HEADER_LEN,
            });
        }
        let kind = family
            .kind_of(packet.msg_type())
            .ok_or(WireError::NotEcho(packet.msg_type()))?;
        // RFC 792 and 4443 say code 0, but a reply's code is not checked: iputils ping and
        // fping (which Zabbix's icmpping items run) take any echo reply by its type alone,
        // and hosts or middleboxes that answer with another code are alive all the same;
        // refusing them made such a host read as down here and up in Zabbix. A reply is
        // still ours only by its tag. A request (never a result) keeps RFC 792's code 0.
        if kind == EchoKind::Request && packet.code() != 0 {
            return Err(WireError::BadCode(packet.code()));
        }
        if verify_checksum && family == Family::V4 && !packet.verify_checksum_v4() {
            return Err(WireError::BadChecksum);
        }
        Ok(EchoRepr {
            family,
            kind,
            ident: packet.ident(),
            seq: packet.seq(),
            payload: data.get(HEADER_LEN..).unwrap_or(&[]),
        })
    }

    /// Bytes that [`Self::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload.len()
    }

    /// Writes this message into `packet`, whose buffer must be exactly
    /// [`Self::buffer_len`] bytes long (checked: a wrong length is `Truncated`).
    /// The ICMPv4 checksum is filled in; ICMPv6 leaves it 0 for the kernel.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut EchoPacket<T>,
    ) -> Result<(), WireError> {
        let len = packet.buffer.as_ref().len();
        if len != self.buffer_len() {
            return Err(WireError::Truncated {
                len,
                need: self.buffer_len(),
            });
        }
        packet.set_msg_type(self.family.type_of(self.kind));
        packet.set_code(0);
        packet.set_checksum(0);
        packet.set_ident(self.ident);
        packet.set_seq(self.seq);
        packet.payload_mut().copy_from_slice(self.payload);
        if self.family == Family::V4 {
            packet.fill_checksum_v4();
        }
        Ok(())
    }
}

/// An echo message as received, with the address it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceivedEcho<'a> {
    /// Source: the IPv4 header's source for [`Framing::Ipv4Header`], else the socket's
    /// peer address.
    pub src: IpAddr,
    /// The echo message.
    pub echo: EchoRepr<'a>,
}

/// Extracts the ICMP message and its source from a raw IPv4 datagram (header included).
/// Linux hands raw sockets the header as on the wire; the total length field may be
/// smaller than the buffer (padding) but never larger.
pub fn strip_ipv4_header(buf: &[u8]) -> Result<(Ipv4Addr, &[u8]), WireError> {
    let (src, icmp) = ipv4_icmp_range(buf)?;
    Ok((src, &buf[icmp]))
}

/// [`strip_ipv4_header`] as a range of `buf`, for callers that rewrite the datagram in
/// place (the test rig's echo responder).
pub fn ipv4_icmp_range(buf: &[u8]) -> Result<(Ipv4Addr, std::ops::Range<usize>), WireError> {
    let ip = Ipv4Packet::new(buf).ok_or(WireError::Truncated {
        len: buf.len(),
        need: Ipv4Packet::minimum_packet_size(),
    })?;
    if ip.get_version() != 4 {
        return Err(WireError::BadIpHeader);
    }
    let header_len = usize::from(ip.get_header_length()) * 4;
    let total_len = usize::from(ip.get_total_length());
    if header_len < 20 || header_len > buf.len() || total_len < header_len {
        return Err(WireError::BadIpHeader);
    }
    if total_len > buf.len() {
        return Err(WireError::Truncated {
            len: buf.len(),
            need: total_len,
        });
    }
    let proto = ip.get_next_level_protocol().0;
    if proto != IPPROTO_ICMP {
        return Err(WireError::NotIcmp(proto));
    }
    Ok((ip.get_source(), header_len..total_len))
}

/// Parses what a socket returned into an echo message.
///
/// `from` is the peer address the socket reported (used for [`Framing::IcmpOnly`]; with
/// [`Framing::Ipv4Header`] the header's source wins). ICMPv4 checksums are verified
/// because raw sockets also see packets the kernel would drop.
pub fn parse_reply(
    buf: &[u8],
    framing: Framing,
    from: IpAddr,
) -> Result<ReceivedEcho<'_>, WireError> {
    let (src, icmp) = match framing {
        Framing::Ipv4Header => {
            let (src, icmp) = strip_ipv4_header(buf)?;
            (IpAddr::V4(src), icmp)
        }
        Framing::IcmpOnly => (from, buf),
    };
    let packet = EchoPacket::new_checked(icmp)?;
    let echo = EchoRepr::parse(&packet, Family::of(src), true)?;
    Ok(ReceivedEcho { src, echo })
}
