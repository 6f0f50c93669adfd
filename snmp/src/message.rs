//! SNMP v1/v2c messages: request encoding and checked, zero-copy decoding.
//!
//! ```text
//! Message ::= SEQUENCE { version INTEGER, community OCTET STRING, data PDU }
//! PDU     ::= [tag] SEQUENCE { request-id, error-status | non-repeaters,
//!                              error-index | max-repetitions, SEQUENCE OF VarBind }
//! VarBind ::= SEQUENCE { name OBJECT IDENTIFIER, value }
//! ```
//!
//! [`Message::decode`] validates the whole datagram, every varbind included, before it
//! returns; afterwards iterating the varbinds cannot fail. Trap-v1 PDUs (a different
//! layout) are rejected with a typed error, and so is SNMPv3 here: [`crate::v3`] decodes
//! its envelope and hands the (decrypted) PDU to the same validation.

use std::fmt;

use crate::ber::*;
use crate::oid::{Oid, OidRef};
use crate::value::ValueRef;
use crate::DecodeError;

/// SNMP protocol version (the `version` field: 0 for v1, 1 for v2c, 3 for v3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Version {
    V1,
    /// Default: what every device deployed in the last 20 years speaks.
    #[default]
    V2c,
    /// SNMPv3 with the User-based Security Model ([`crate::v3`]); its PDUs are v2c's.
    V3,
}

impl Version {
    /// Every spelling [`Version::from_str`](std::str::FromStr) takes: net-snmp's `-v`
    /// ones (`"1"`, `"2c"`, `"3"`), `"2"` for v2c, and each with a leading `v`
    /// (`"v2c"`). The one list the parser and the README's config reference follow.
    pub const SPELLINGS: [(&'static str, Version); 7] = [
        ("1", Version::V1),
        ("v1", Version::V1),
        ("2c", Version::V2c),
        ("v2c", Version::V2c),
        ("2", Version::V2c),
        ("3", Version::V3),
        ("v3", Version::V3),
    ];

    pub fn wire(self) -> i64 {
        match self {
            Version::V1 => 0,
            Version::V2c => 1,
            Version::V3 => 3,
        }
    }

    /// "1", "2c" or "3", as net-snmp's `-v` spells them.
    pub fn as_str(self) -> &'static str {
        match self {
            Version::V1 => "1",
            Version::V2c => "2c",
            Version::V3 => "3",
        }
    }
}

impl std::str::FromStr for Version {
    type Err = String;

    /// One of [`Version::SPELLINGS`], in any case (`"V3"`, `"2C"`), as the security
    /// levels and protocols are read.
    fn from_str(s: &str) -> Result<Version, String> {
        crate::usm::spelled(s, &Version::SPELLINGS)
            .ok_or_else(|| format!("unsupported SNMP version {s:?} (use 1, 2c or 3)"))
    }
}

/// PDU tags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PduType {
    GetRequest,
    GetNextRequest,
    Response,
    SetRequest,
    GetBulkRequest,
    InformRequest,
    TrapV2,
    Report,
}

impl PduType {
    pub fn tag(self) -> u8 {
        match self {
            PduType::GetRequest => 0xa0,
            PduType::GetNextRequest => 0xa1,
            PduType::Response => 0xa2,
            PduType::SetRequest => 0xa3,
            PduType::GetBulkRequest => 0xa5,
            PduType::InformRequest => 0xa6,
            PduType::TrapV2 => 0xa7,
            PduType::Report => 0xa8,
        }
    }

    fn from_tag(tag: u8) -> Result<PduType, DecodeError> {
        Ok(match tag {
            0xa0 => PduType::GetRequest,
            0xa1 => PduType::GetNextRequest,
            0xa2 => PduType::Response,
            0xa3 => PduType::SetRequest,
            0xa5 => PduType::GetBulkRequest,
            0xa6 => PduType::InformRequest,
            0xa7 => PduType::TrapV2,
            0xa8 => PduType::Report,
            found => return Err(DecodeError::UnsupportedPdu { found }),
        })
    }
}

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    Get,
    GetNext,
    /// v2c and v3. `max_repetitions` is how many successors of each repeater to return.
    GetBulk {
        non_repeaters: u32,
        max_repetitions: u32,
    },
}

/// The error-status of a response (RFC 3416 §3; 0..=5 are v1's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ErrorStatus(pub u32);

impl ErrorStatus {
    pub const NO_ERROR: ErrorStatus = ErrorStatus(0);
    pub const TOO_BIG: ErrorStatus = ErrorStatus(1);
    /// v1 only: one of the requested OIDs does not exist (error-index says which).
    pub const NO_SUCH_NAME: ErrorStatus = ErrorStatus(2);
    pub const GEN_ERR: ErrorStatus = ErrorStatus(5);

    /// RFC 3416's name (`tooBig`, `noSuchName`, `genErr`, ...).
    pub fn name(self) -> &'static str {
        const NAMES: [&str; 19] = [
            "noError",
            "tooBig",
            "noSuchName",
            "badValue",
            "readOnly",
            "genErr",
            "noAccess",
            "wrongType",
            "wrongLength",
            "wrongEncoding",
            "wrongValue",
            "noCreation",
            "inconsistentValue",
            "resourceUnavailable",
            "commitFailed",
            "undoFailed",
            "authorizationError",
            "notWritable",
            "inconsistentName",
        ];
        NAMES
            .get(self.0 as usize)
            .copied()
            .unwrap_or("unknownError")
    }

    /// net-snmp's `snmp_errstring()` text (snmplib/snmp_client.c), typos included:
    /// what Zabbix shows after `SNMP error: ` for an error-status (checks_snmp.c,
    /// `zbx_get_snmp_response_error`), so an operator comparing the two reads the same
    /// words.
    pub fn net_snmp_text(self) -> &'static str {
        const TEXTS: [&str; 19] = [
            "(noError) No Error",
            "(tooBig) Response message would have been too large.",
            "(noSuchName) There is no such variable name in this MIB.",
            "(badValue) The value given has the wrong type or length.",
            "(readOnly) The two parties used do not have access to use the specified SNMP PDU.",
            "(genError) A general failure occured",
            "noAccess",
            "wrongType (The set datatype does not match the data type the agent expects)",
            "wrongLength (The set value has an illegal length from what the agent expects)",
            "wrongEncoding",
            "wrongValue (The set value is illegal or unsupported in some way)",
            "noCreation (That table does not support row creation or that object can not ever be created)",
            "inconsistentValue (The set value is illegal or unsupported in some way)",
            "resourceUnavailable (This is likely a out-of-memory failure within the agent)",
            "commitFailed",
            "undoFailed",
            "authorizationError (access denied to that object)",
            "notWritable (That object does not support modification)",
            "inconsistentName (That object can not currently be created)",
        ];
        TEXTS
            .get(self.0 as usize)
            .copied()
            .unwrap_or("Unknown Error")
    }
}

impl fmt::Display for ErrorStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", self.name(), self.0)
    }
}

/// Encodes a request whose varbinds carry NULL values. `oids` is walked twice (sizes,
/// then bytes), hence `Clone`. Appends to `out`; returns the number of bytes written.
pub fn encode_request<'o, I>(
    out: &mut Vec<u8>,
    version: Version,
    community: &[u8],
    request_id: i32,
    kind: RequestKind,
    oids: I,
) -> usize
where
    I: Iterator<Item = &'o Oid> + Clone,
{
    let (pdu, f1, f2) = request_fields(kind);
    encode_message(
        out,
        version,
        community,
        pdu,
        request_id,
        f1,
        f2,
        oids.map(|o| (o.as_ref(), ValueRef::Null)),
    )
}

/// Encodes any v1/v2c message (responses too: agents in tests use this).
#[allow(clippy::too_many_arguments)]
pub fn encode_message<'v, I>(
    out: &mut Vec<u8>,
    version: Version,
    community: &[u8],
    pdu: PduType,
    request_id: i32,
    field1: i64,
    field2: i64,
    varbinds: I,
) -> usize
where
    I: Iterator<Item = (OidRef<'v>, ValueRef<'v>)> + Clone,
{
    let start = out.len();
    let body = PduBody::new(pdu, request_id, field1, field2, varbinds);
    let msg_len = 3 + tlv_len(community.len()) + body.encoded_len();
    out.reserve(tlv_len(msg_len));
    write_header(out, TAG_SEQUENCE, msg_len);
    write_int(out, TAG_INTEGER, version.wire());
    write_header(out, TAG_OCTET_STRING, community.len());
    out.extend_from_slice(community);
    body.write(out);
    debug_assert_eq!(out.len() - start, tlv_len(msg_len));
    out.len() - start
}

/// Encodes the Response of an agent that answers `request` with `varbinds` (no error):
/// what fake agents in tests send.
pub fn encode_response<'v, I>(out: &mut Vec<u8>, request: &Message<'_>, varbinds: I) -> usize
where
    I: Iterator<Item = (OidRef<'v>, ValueRef<'v>)> + Clone,
{
    encode_message(
        out,
        request.version,
        request.community,
        PduType::Response,
        request.request_id,
        0,
        0,
        varbinds,
    )
}

/// The fields of a request's PDU: `kind` as the PDU tag and its two integer fields.
pub(crate) fn request_fields(kind: RequestKind) -> (PduType, i64, i64) {
    match kind {
        RequestKind::Get => (PduType::GetRequest, 0, 0),
        RequestKind::GetNext => (PduType::GetNextRequest, 0, 0),
        RequestKind::GetBulk {
            non_repeaters,
            max_repetitions,
        } => (
            PduType::GetBulkRequest,
            non_repeaters as i64,
            max_repetitions as i64,
        ),
    }
}

/// A PDU about to be written: its sizes are computed once, for the enclosing headers
/// (a v1/v2c message, or a v3 scopedPDU).
pub(crate) struct PduBody<I> {
    pdu: PduType,
    request_id: i32,
    field1: i64,
    field2: i64,
    varbinds: I,
    vb_len: usize,
    pdu_len: usize,
}

impl<'v, I> PduBody<I>
where
    I: Iterator<Item = (OidRef<'v>, ValueRef<'v>)> + Clone,
{
    pub(crate) fn new(
        pdu: PduType,
        request_id: i32,
        field1: i64,
        field2: i64,
        varbinds: I,
    ) -> PduBody<I> {
        let vb_len: usize = varbinds
            .clone()
            .map(|(o, v)| tlv_len(tlv_len(o.as_ber().len()) + v.encoded_len()))
            .sum();
        let pdu_len = 2
            + int_len(request_id as i64)
            + 2
            + int_len(field1)
            + 2
            + int_len(field2)
            + tlv_len(vb_len);
        PduBody {
            pdu,
            request_id,
            field1,
            field2,
            varbinds,
            vb_len,
            pdu_len,
        }
    }

    /// Bytes [`Self::write`] appends (tag and length included).
    pub(crate) fn encoded_len(&self) -> usize {
        tlv_len(self.pdu_len)
    }

    pub(crate) fn write(self, out: &mut Vec<u8>) {
        write_header(out, self.pdu.tag(), self.pdu_len);
        write_int(out, TAG_INTEGER, self.request_id as i64);
        write_int(out, TAG_INTEGER, self.field1);
        write_int(out, TAG_INTEGER, self.field2);
        write_header(out, TAG_SEQUENCE, self.vb_len);
        for (o, v) in self.varbinds {
            write_header(
                out,
                TAG_SEQUENCE,
                tlv_len(o.as_ber().len()) + v.encoded_len(),
            );
            write_header(out, TAG_OID, o.as_ber().len());
            out.extend_from_slice(o.as_ber());
            v.write(out);
        }
    }
}

/// A decoded, fully validated v1/v2c message borrowing from the datagram, or the PDU of
/// a v3 scopedPDU ([`crate::v3::ScopedPdu`]: `version` v3, `community` empty).
#[derive(Debug, Clone)]
pub struct Message<'a> {
    pub version: Version,
    pub community: &'a [u8],
    pub pdu_type: PduType,
    pub request_id: i32,
    /// error-status (non-repeaters in a GetBulk request).
    pub error_status: ErrorStatus,
    /// error-index, 1-based (max-repetitions in a GetBulk request).
    pub error_index: u32,
    varbinds: &'a [u8],
    count: usize,
}

/// Why a v1/v2c message carrying a request's request-id is not that request's answer
/// ([`Message::refusal`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not a Response PDU (a Report to a v1/v2c request, the request echoed).
    NotResponse(PduType),
    /// Another community than the request's (not told: a secret).
    WrongCommunity,
    /// Of this SNMP version, not the request's.
    WrongVersion(Version),
}

/// One decoded varbind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VarBind<'a> {
    pub oid: OidRef<'a>,
    pub value: ValueRef<'a>,
}

impl<'a> Message<'a> {
    /// Decodes and validates a whole datagram. Trailing bytes after the message are an
    /// error (a sign of a corrupt or hostile datagram).
    pub fn decode(buf: &'a [u8]) -> Result<Message<'a>, DecodeError> {
        let mut outer = Reader::new(buf);
        let body = outer.read_expect(TAG_SEQUENCE)?;
        if !outer.is_empty() {
            return Err(DecodeError::TrailingBytes);
        }
        let mut r = Reader::new(body);
        let version = match r.read_i64()? {
            0 => Version::V1,
            1 => Version::V2c,
            v => return Err(DecodeError::UnsupportedVersion { version: v }),
        };
        let community = r.read_expect(TAG_OCTET_STRING)?;
        let (tag, pdu) = r.read_tlv()?;
        if !r.is_empty() {
            return Err(DecodeError::TrailingBytes);
        }
        Message::from_pdu(version, community, tag, pdu)
    }

    /// Why this message, carrying the request-id of a request sent with `community` in
    /// `version`, is not its answer (checked in this order: the first that fails is
    /// told); `None` when it is. The one rule the engine and the CLI's walker take an
    /// answer by, so that both refuse the same replies and say the same of them.
    pub fn refusal(&self, community: &[u8], version: Version) -> Option<Refusal> {
        if self.pdu_type != PduType::Response {
            Some(Refusal::NotResponse(self.pdu_type))
        } else if self.community != community {
            Some(Refusal::WrongCommunity)
        } else if self.version != version {
            Some(Refusal::WrongVersion(self.version))
        } else {
            None
        }
    }

    /// Decodes and validates a PDU (`tag` and contents), as carried by a v1/v2c message
    /// or a v3 scopedPDU; `community` is empty for v3.
    pub(crate) fn from_pdu(
        version: Version,
        community: &'a [u8],
        tag: u8,
        pdu: &'a [u8],
    ) -> Result<Message<'a>, DecodeError> {
        let pdu_type = PduType::from_tag(tag)?;
        let mut p = Reader::new(pdu);
        let request_id = p.read_i32()?;
        let error_status = p.read_i64()?;
        let error_index = p.read_i64()?;
        let (error_status, error_index) =
            match (u32::try_from(error_status), u32::try_from(error_index)) {
                (Ok(s), Ok(i)) => (ErrorStatus(s), i),
                _ => return Err(DecodeError::IntegerRange),
            };
        let varbinds = p.read_expect(TAG_SEQUENCE)?;
        if !p.is_empty() {
            return Err(DecodeError::TrailingBytes);
        }
        let mut count = 0;
        let mut vr = Reader::new(varbinds);
        while !vr.is_empty() {
            decode_varbind(&mut vr, false)?;
            count += 1;
        }
        Ok(Message {
            version,
            community,
            pdu_type,
            request_id,
            error_status,
            error_index,
            varbinds,
            count,
        })
    }

    /// Number of varbinds.
    pub fn varbind_count(&self) -> usize {
        self.count
    }

    /// The varbinds in order.
    pub fn varbinds(&self) -> VarBinds<'a> {
        VarBinds {
            r: Reader::new(self.varbinds),
        }
    }
}

fn decode_varbind<'a>(r: &mut Reader<'a>, validated: bool) -> Result<VarBind<'a>, DecodeError> {
    let mut vb = Reader::new(r.read_expect(TAG_SEQUENCE)?);
    let raw = vb.read_expect(TAG_OID)?;
    // The second pass over a validated message need not re-check OID octets.
    let oid = if validated {
        OidRef::from_validated(raw)
    } else {
        OidRef::from_ber(raw)?
    };
    let (tag, c) = vb.read_tlv()?;
    // A value that does not decode fails its own varbind, not the message.
    let value = ValueRef::decode(tag, c).unwrap_or(ValueRef::Undecodable { tag, raw: c });
    if !vb.is_empty() {
        return Err(DecodeError::TrailingBytes);
    }
    Ok(VarBind { oid, value })
}

/// Iterator over a validated message's varbinds.
#[derive(Debug, Clone)]
pub struct VarBinds<'a> {
    r: Reader<'a>,
}

impl<'a> Iterator for VarBinds<'a> {
    type Item = VarBind<'a>;

    fn next(&mut self) -> Option<VarBind<'a>> {
        if self.r.is_empty() {
            return None;
        }
        // Validated by Message::decode; on the impossible error stop rather than panic.
        decode_varbind(&mut self.r, true).ok()
    }
}

/// Reads just the request-id of a v1/v2c message without validating the rest; for
/// counters and logs of datagrams that failed to decode.
pub fn peek_request_id(buf: &[u8]) -> Option<i32> {
    let mut outer = Reader::new(buf);
    let mut r = Reader::new(outer.read_expect(TAG_SEQUENCE).ok()?);
    r.read_i64().ok()?;
    r.read_expect(TAG_OCTET_STRING).ok()?;
    let (_, pdu) = r.read_tlv().ok()?;
    Reader::new(pdu).read_i32().ok()
}
