//! SNMPv3 messages (RFC 3412) with the User-based Security Model (RFC 3414; AES from
//! RFC 3826, SHA-2 from RFC 7860, AES-192/256 from the Blumenthal and Reeder drafts): users, discovered engines, encoding and checked
//! decoding. The PDUs inside are v2c's ([`crate::Message`]).
//!
//! ```text
//! SNMPv3Message ::= SEQUENCE { msgVersion INTEGER (3),
//!     msgGlobalData SEQUENCE { msgID INTEGER, msgMaxSize INTEGER,
//!                              msgFlags OCTET STRING (SIZE(1)), msgSecurityModel INTEGER (3) },
//!     msgSecurityParameters OCTET STRING (an encoded UsmSecurityParameters),
//!     msgData CHOICE { plaintext ScopedPDU, encryptedPDU OCTET STRING } }
//! UsmSecurityParameters ::= SEQUENCE { msgAuthoritativeEngineID OCTET STRING,
//!     msgAuthoritativeEngineBoots INTEGER, msgAuthoritativeEngineTime INTEGER,
//!     msgUserName OCTET STRING, msgAuthenticationParameters OCTET STRING,
//!     msgPrivacyParameters OCTET STRING }
//! ScopedPDU ::= SEQUENCE { contextEngineID OCTET STRING, contextName OCTET STRING, data PDU }
//! ```
//!
//! Invariants:
//! * Decoding never panics and never trusts a length: [`V3Message::decode`] validates the
//!   envelope; the PDU is validated whole by [`decode_scoped_pdu`] only after the caller
//!   has checked the message's authenticity ([`V3Message::verify`]) and decrypted it.
//! * A reply is taken or refused by one rule, [`V3Message::answer`] (authentication,
//!   decryption, PDU type, level, time window, request-id, in that order), which the
//!   engine and the CLI's walker both call: they take the same replies and say the
//!   same of those they refuse.
//! * Passphrases are turned into keys (Ku, ~1 MiB of hashing) once per [`UsmUser`],
//!   whose users of other contexts share them; keys are localized to an agent's engine
//!   once per discovery and credentials ([`Engine`]; the context is no part of a key).
//!   No key or passphrase is ever printed (`Debug` redacts them).
//! * Every encrypted message takes a fresh salt from a counter the caller keeps per
//!   agent ([`encode_request`]; the engine's is per address, starting at a random
//!   value), so no IV repeats under one key.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use crate::ber::*;
use crate::message::{request_fields, Message, PduBody, PduType, RequestKind, Version};
use crate::oid::{Oid, OidRef};
use crate::usm::{self, AuthProtocol, PrivProtocol};
use crate::value::ValueRef;
use crate::DecodeError;

/// msgFlags bits.
pub const FLAG_AUTH: u8 = 0x01;
pub const FLAG_PRIV: u8 = 0x02;
pub const FLAG_REPORTABLE: u8 = 0x04;
/// msgSecurityModel of USM.
const SECURITY_MODEL_USM: i64 = 3;
/// The msgMaxSize we announce: the largest UDP payload over IPv4.
pub const MAX_MESSAGE_SIZE: i64 = 65507;
/// RFC 3414's time window (§2.2.3): 150 s either side.
pub const TIME_WINDOW: u32 = 150;
/// RFC 3414 asks for passphrases of at least 8 characters (net-snmp refuses shorter).
pub const MIN_PASSPHRASE_LEN: usize = 8;

/// How a user's messages are protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SecurityLevel {
    NoAuthNoPriv,
    AuthNoPriv,
    AuthPriv,
}

impl SecurityLevel {
    /// net-snmp's spelling (`-l`).
    pub fn as_str(self) -> &'static str {
        match self {
            SecurityLevel::NoAuthNoPriv => "noAuthNoPriv",
            SecurityLevel::AuthNoPriv => "authNoPriv",
            SecurityLevel::AuthPriv => "authPriv",
        }
    }

    /// The msgFlags bits of this level (without reportable).
    pub fn flags(self) -> u8 {
        match self {
            SecurityLevel::NoAuthNoPriv => 0,
            SecurityLevel::AuthNoPriv => FLAG_AUTH,
            SecurityLevel::AuthPriv => FLAG_AUTH | FLAG_PRIV,
        }
    }

    /// Every spelling [`SecurityLevel::from_str`](std::str::FromStr) takes, in lower
    /// case (it compares in any case): `noAuthNoPriv`, `authNoPriv`, `authPriv`
    /// (net-snmp's `-l`, Zabbix's security level) and net-snmp's short `noauth`, `auth`,
    /// `priv`.
    pub const SPELLINGS: [(&'static str, SecurityLevel); 6] = [
        ("noauthnopriv", SecurityLevel::NoAuthNoPriv),
        ("noauth", SecurityLevel::NoAuthNoPriv),
        ("authnopriv", SecurityLevel::AuthNoPriv),
        ("auth", SecurityLevel::AuthNoPriv),
        ("authpriv", SecurityLevel::AuthPriv),
        ("priv", SecurityLevel::AuthPriv),
    ];

    /// Why `s` is no security level, with the name it is a typo of when the caller
    /// knows one (`nearest`); `s` quoted only when shorter than a passphrase (one typed
    /// into the wrong field must not reach a log).
    pub fn unknown(s: &str, nearest: Option<&str>) -> String {
        format!(
            "unknown SNMPv3 security level{}: use noAuthNoPriv, authNoPriv or authPriv",
            crate::usm::refused(s, nearest)
        )
    }
}

impl std::str::FromStr for SecurityLevel {
    type Err = String;

    /// One of [`SecurityLevel::SPELLINGS`], in any case; else
    /// [`SecurityLevel::unknown`].
    fn from_str(s: &str) -> Result<SecurityLevel, String> {
        crate::usm::spelled(s, &SecurityLevel::SPELLINGS)
            .ok_or_else(|| SecurityLevel::unknown(s, None))
    }
}

/// A USM user: its name, context and protocols, with the passphrases already turned
/// into keys (Ku). Equal users compare equal whatever `Arc` holds them.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct UsmUser {
    /// What the keys are made of, and the user's keys (Ku): shared by the users
    /// [`UsmUser::with_context`] makes of one.
    keys: Arc<Credentials>,
    context: Box<[u8]>,
}

/// A user's name and protocols, with the passphrases turned into keys (Ku): all that
/// its keys, and those localized to an engine, depend on (the context does not).
#[derive(PartialEq, Eq, Hash)]
struct Credentials {
    name: Box<[u8]>,
    auth: Option<(AuthProtocol, Box<[u8]>)>,
    privacy: Option<(PrivProtocol, Box<[u8]>)>,
}

impl fmt::Debug for UsmUser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UsmUser")
            .field("name", &String::from_utf8_lossy(&self.keys.name))
            .field("level", &self.level())
            .field("auth", &self.auth_protocol())
            .field("privacy", &self.priv_protocol())
            .field("context", &String::from_utf8_lossy(&self.context))
            .finish_non_exhaustive()
    }
}

impl UsmUser {
    /// A user at the level its arguments imply: privacy needs authentication, and every
    /// passphrase needs at least [`MIN_PASSPHRASE_LEN`] characters. Derives the keys
    /// (about a millisecond per passphrase): build a user once, share it in an `Arc`.
    pub fn new(
        name: &str,
        auth: Option<(AuthProtocol, &str)>,
        privacy: Option<(PrivProtocol, &str)>,
    ) -> Result<UsmUser, String> {
        if name.is_empty() {
            return Err("an SNMPv3 user needs a security name".into());
        }
        if name.len() > 32 {
            return Err(format!(
                "security name {name:?} is longer than 32 characters (RFC 3414 allows 1..32)"
            ));
        }
        let short = |what: &str, p: &str| {
            (p.len() < MIN_PASSPHRASE_LEN).then(|| {
                format!("the {what} passphrase must have at least {MIN_PASSPHRASE_LEN} characters")
            })
        };
        let auth = match auth {
            Some((proto, pass)) => {
                if let Some(e) = short("authentication", pass) {
                    return Err(e);
                }
                Some((proto, usm::password_to_key(proto, pass.as_bytes()).into()))
            }
            None => None,
        };
        let privacy = match (privacy, &auth) {
            (None, _) => None,
            (Some(_), None) => {
                return Err("privacy needs authentication (authPriv: give both protocols)".into())
            }
            (Some((proto, pass)), Some((auth_proto, _))) => {
                if let Some(e) = short("privacy", pass) {
                    return Err(e);
                }
                // The privacy key is derived with the authentication hash (RFC 3414 §2.6).
                Some((
                    proto,
                    usm::password_to_key(*auth_proto, pass.as_bytes()).into(),
                ))
            }
        };
        Ok(UsmUser {
            keys: Arc::new(Credentials {
                name: name.as_bytes().into(),
                auth,
                privacy,
            }),
            context: Box::default(),
        })
    }

    /// Sets the context name (default empty, the agent's default context). The keys
    /// stay those derived for `self`: a user of another context derives none.
    pub fn with_context(mut self, context: &str) -> UsmUser {
        self.context = context.as_bytes().into();
        self
    }

    pub fn name(&self) -> &[u8] {
        &self.keys.name
    }

    pub fn context(&self) -> &[u8] {
        &self.context
    }

    pub fn auth_protocol(&self) -> Option<AuthProtocol> {
        self.keys.auth.as_ref().map(|a| a.0)
    }

    pub fn priv_protocol(&self) -> Option<PrivProtocol> {
        self.keys.privacy.as_ref().map(|p| p.0)
    }

    pub fn level(&self) -> SecurityLevel {
        match (&self.keys.auth, &self.keys.privacy) {
            (None, _) => SecurityLevel::NoAuthNoPriv,
            (Some(_), None) => SecurityLevel::AuthNoPriv,
            (Some(_), Some(_)) => SecurityLevel::AuthPriv,
        }
    }
}

/// An agent's SNMP engine as discovered (RFC 3414 §4), with one user's keys localized
/// to it and the engine's clock as last seen.
#[derive(Clone)]
pub struct Engine {
    id: Box<[u8]>,
    boots: u32,
    time: u32,
    at: Instant,
    user: Arc<UsmUser>,
    auth_key: Box<[u8]>,
    priv_key: Box<[u8]>,
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Engine")
            .field("id", &crate::value::hex_string(&self.id))
            .field("boots", &self.boots)
            .field("time", &self.time)
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// The engine `id` whose clock read `boots` / `time` at `at`; `user`'s keys are
    /// localized to it.
    pub fn new(user: Arc<UsmUser>, id: &[u8], boots: u32, time: u32, at: Instant) -> Engine {
        let (auth_key, priv_key): (Box<[u8]>, Box<[u8]>) =
            match (&user.keys.auth, &user.keys.privacy) {
                (Some((a, ku)), p) => (
                    usm::localize_key(*a, ku, id).into(),
                    p.as_ref()
                        .map(|(p, k)| usm::localize_priv_key(*a, *p, k, id).into())
                        .unwrap_or_default(),
                ),
                (None, _) => Default::default(),
            };
        Engine {
            id: id.into(),
            boots,
            time,
            at,
            user,
            auth_key,
            priv_key,
        }
    }

    /// The same engine and clock with `user`'s keys (a reloaded config may change them).
    /// Keys are localized again only when `user`'s credentials differ from this
    /// engine's user's: localizing costs a hash (and 1 MiB of hashing for a privacy
    /// protocol of Reeder's key extension), and hosts at one address that differ only
    /// in their context (one per VLAN) each take the engine in turn at every
    /// iteration.
    pub fn for_user(&self, user: &Arc<UsmUser>) -> Engine {
        if self.user.keys != user.keys {
            return Engine::new(user.clone(), &self.id, self.boots, self.time, self.at);
        }
        Engine {
            user: user.clone(),
            ..self.clone()
        }
    }

    pub fn id(&self) -> &[u8] {
        &self.id
    }

    pub fn user(&self) -> &Arc<UsmUser> {
        &self.user
    }

    /// The engine's boots and time at `now`, counted on from the last authentic message
    /// (time saturates at 2^31 - 1, as the agent's own would stop there).
    pub fn clock(&self, now: Instant) -> (u32, u32) {
        let elapsed = now.saturating_duration_since(self.at).as_secs();
        let time = (u64::from(self.time) + elapsed).min(i32::MAX as u64) as u32;
        (self.boots, time)
    }

    /// Takes the clock of an authentic message from the engine (RFC 3414 §3.2 step 7b):
    /// when it rebooted since, or its time is later than the latest one received. The
    /// comparison is with what the engine last said, not with our estimate, so an agent
    /// whose clock runs slower than ours pulls the estimate back with every answer
    /// instead of drifting out of the 150 s window.
    pub fn update_clock(&mut self, boots: u32, time: u32, now: Instant) {
        if boots > self.boots || (boots == self.boots && time > self.time) {
            self.boots = boots;
            self.time = time;
            self.at = now;
        }
    }

    /// RFC 3414 §3.2 step 7b for a non-authoritative receiver: an authentic message is
    /// outside the time window if the engine's boots are at their maximum (2^31 - 1),
    /// older than the latest received, or equal with a time more than 150 s before the
    /// latest received.
    pub fn is_timely(&self, boots: u32, time: u32) -> bool {
        boots < i32::MAX as u32
            && (boots > self.boots
                || (boots == self.boots && time.saturating_add(TIME_WINDOW) >= self.time))
    }

    /// Sets the clock whatever it was: a `notInTimeWindow` report that authenticated is
    /// the engine saying what its clock is.
    pub fn set_clock(&mut self, boots: u32, time: u32, now: Instant) {
        self.boots = boots;
        self.time = time;
        self.at = now;
    }

    /// A message of this engine's user about this engine at `now`, encrypted (if the
    /// user has privacy) with `salt` (requests take a fresh one through
    /// [`encode_request`]; agents in tests answer with this).
    pub fn outgoing(&self, msg_id: i32, reportable: bool, salt: u64, now: Instant) -> Outgoing<'_> {
        let (boots, time) = self.clock(now);
        Outgoing {
            msg_id,
            reportable,
            engine_id: &self.id,
            boots,
            time,
            user_name: &self.user.keys.name,
            auth: self.auth(),
            privacy: self.privacy(),
            salt,
            context_engine_id: &self.id,
            context_name: &self.user.context,
        }
    }

    fn auth(&self) -> Option<(AuthProtocol, &[u8])> {
        self.user
            .keys
            .auth
            .as_ref()
            .map(|(p, _)| (*p, &*self.auth_key))
    }

    fn privacy(&self) -> Option<(PrivProtocol, &[u8])> {
        self.user
            .keys
            .privacy
            .as_ref()
            .map(|(p, _)| (*p, &*self.priv_key))
    }
}

/// Everything of an outgoing v3 message but its PDU. `Debug` shows no key.
#[derive(Clone, Copy)]
pub struct Outgoing<'a> {
    pub msg_id: i32,
    /// Ask for a Report on errors (requests: yes; responses and reports: no).
    pub reportable: bool,
    pub engine_id: &'a [u8],
    pub boots: u32,
    pub time: u32,
    pub user_name: &'a [u8],
    /// Localized authentication key; `None` sends without authentication.
    pub auth: Option<(AuthProtocol, &'a [u8])>,
    /// Localized privacy key; needs `auth`.
    pub privacy: Option<(PrivProtocol, &'a [u8])>,
    /// Must not repeat under one privacy key.
    pub salt: u64,
    pub context_engine_id: &'a [u8],
    pub context_name: &'a [u8],
}

impl fmt::Debug for Outgoing<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Outgoing")
            .field("msg_id", &self.msg_id)
            .field("engine_id", &crate::value::hex_string(self.engine_id))
            .field("boots", &self.boots)
            .field("time", &self.time)
            .field("user_name", &String::from_utf8_lossy(self.user_name))
            .field("auth", &self.auth.map(|a| a.0))
            .field("privacy", &self.privacy.map(|p| p.0))
            .finish_non_exhaustive()
    }
}

impl Outgoing<'static> {
    /// The envelope of a discovery request: no engine, no user, no security.
    pub fn discovery(msg_id: i32) -> Outgoing<'static> {
        Outgoing {
            msg_id,
            reportable: true,
            engine_id: &[],
            boots: 0,
            time: 0,
            user_name: &[],
            auth: None,
            privacy: None,
            salt: 0,
            context_engine_id: &[],
            context_name: &[],
        }
    }
}

/// Writes a v3 message (either side: agents in tests answer with it), authenticated and
/// encrypted as `o` says. Appends to `out` and returns the bytes written, or `None` when
/// a privacy key is too short for its cipher (keys localized by [`Engine`] never are).
#[allow(clippy::too_many_arguments)]
pub fn encode_message<'v, I>(
    out: &mut Vec<u8>,
    o: &Outgoing<'_>,
    pdu: PduType,
    request_id: i32,
    field1: i64,
    field2: i64,
    varbinds: I,
) -> Option<usize>
where
    I: Iterator<Item = (OidRef<'v>, ValueRef<'v>)> + Clone,
{
    let start = out.len();
    let body = PduBody::new(pdu, request_id, field1, field2, varbinds);
    let scoped_len =
        tlv_len(o.context_engine_id.len()) + tlv_len(o.context_name.len()) + body.encoded_len();
    let mut scoped = Vec::with_capacity(tlv_len(scoped_len));
    write_header(&mut scoped, TAG_SEQUENCE, scoped_len);
    write_octets(&mut scoped, o.context_engine_id);
    write_octets(&mut scoped, o.context_name);
    body.write(&mut scoped);

    let auth = o.auth;
    let privacy = if auth.is_some() { o.privacy } else { None };
    let (data, priv_params) = match privacy {
        Some((proto, key)) => {
            let (cipher, params) = usm::encrypt(proto, key, o.boots, o.time, o.salt, &scoped)?;
            let mut d = Vec::with_capacity(tlv_len(cipher.len()));
            write_octets(&mut d, &cipher);
            (d, Some(params))
        }
        None => (scoped, None),
    };
    let mac_len = auth.map_or(0, |(p, _)| p.mac_len());
    let pp_len = priv_params.map_or(0, |p| p.len());
    let sp_inner = tlv_len(o.engine_id.len())
        + 2
        + int_len(o.boots as i64)
        + 2
        + int_len(o.time as i64)
        + tlv_len(o.user_name.len())
        + tlv_len(mac_len)
        + tlv_len(pp_len);
    let sp_len = tlv_len(sp_inner);
    let mut flags = 0;
    if auth.is_some() {
        flags |= FLAG_AUTH;
    }
    if privacy.is_some() {
        flags |= FLAG_PRIV;
    }
    if o.reportable {
        flags |= FLAG_REPORTABLE;
    }
    let global_inner = 2
        + int_len(o.msg_id as i64)
        + 2
        + int_len(MAX_MESSAGE_SIZE)
        + tlv_len(1)
        + 2
        + int_len(SECURITY_MODEL_USM);
    let msg_len = 3 + tlv_len(global_inner) + tlv_len(sp_len) + data.len();
    out.reserve(tlv_len(msg_len));
    write_header(out, TAG_SEQUENCE, msg_len);
    write_int(out, TAG_INTEGER, Version::V3.wire());
    write_header(out, TAG_SEQUENCE, global_inner);
    write_int(out, TAG_INTEGER, o.msg_id as i64);
    write_int(out, TAG_INTEGER, MAX_MESSAGE_SIZE);
    write_octets(out, &[flags]);
    write_int(out, TAG_INTEGER, SECURITY_MODEL_USM);
    write_header(out, TAG_OCTET_STRING, sp_len);
    write_header(out, TAG_SEQUENCE, sp_inner);
    write_octets(out, o.engine_id);
    write_int(out, TAG_INTEGER, o.boots as i64);
    write_int(out, TAG_INTEGER, o.time as i64);
    write_octets(out, o.user_name);
    write_header(out, TAG_OCTET_STRING, mac_len);
    let mac_at = out.len();
    out.resize(mac_at + mac_len, 0);
    write_octets(out, priv_params.as_ref().map_or(&[][..], |p| &p[..]));
    out.extend_from_slice(&data);
    debug_assert_eq!(out.len() - start, tlv_len(msg_len));
    if let Some((proto, key)) = auth {
        // The MAC covers the whole message with its own field zeroed (RFC 3414 §6.3.1).
        let mac = usm::auth_mac(proto, key, &out[start..]);
        out[mac_at..mac_at + mac_len].copy_from_slice(&mac[..mac_len]);
    }
    Some(out.len() - start)
}

fn write_octets(out: &mut Vec<u8>, bytes: &[u8]) {
    write_header(out, TAG_OCTET_STRING, bytes.len());
    out.extend_from_slice(bytes);
}

/// The discovery request (RFC 3414 §4): noAuthNoPriv, reportable, no engine ID, no
/// user, an empty GET. The agent answers with a Report that names its engine ID, boots
/// and time.
pub fn encode_discovery(out: &mut Vec<u8>, msg_id: i32) -> usize {
    let o = Outgoing::discovery(msg_id);
    // Without privacy there is no cipher to refuse a key.
    encode_message(
        out,
        &o,
        PduType::GetRequest,
        msg_id,
        0,
        0,
        std::iter::empty(),
    )
    .unwrap_or(0)
}

/// A request from `engine`'s user to `engine` under `(msgID, request-id)` (the same
/// number but for a retransmission, which takes a new msgID: RFC 3412 §6.2), at the
/// user's level; takes a fresh salt from `salt` when it encrypts.
pub fn encode_request<'o, I>(
    out: &mut Vec<u8>,
    engine: &Engine,
    salt: &mut u64,
    now: Instant,
    (msg_id, request_id): (i32, i32),
    kind: RequestKind,
    oids: I,
) -> Option<usize>
where
    I: Iterator<Item = &'o Oid> + Clone,
{
    let (pdu, f1, f2) = request_fields(kind);
    let o = engine.outgoing(msg_id, true, *salt, now);
    encode_message(
        out,
        &o,
        pdu,
        request_id,
        f1,
        f2,
        oids.map(|o| (o.as_ref(), ValueRef::Null)),
    )
    .inspect(|_| {
        if engine.user.keys.privacy.is_some() {
            *salt = salt.wrapping_add(1);
        }
    })
}

/// The version field of any SNMP message, without validating the rest: what decides
/// between [`Message::decode`] and [`V3Message::decode`].
pub fn peek_version(buf: &[u8]) -> Option<i64> {
    let mut outer = Reader::new(buf);
    Reader::new(outer.read_expect(TAG_SEQUENCE).ok()?)
        .read_i64()
        .ok()
}

/// A v3 message's envelope, checked, borrowing from the datagram. Its PDU is reached
/// through [`Self::scoped_pdu`] after [`Self::verify`].
#[derive(Debug, Clone)]
pub struct V3Message<'a> {
    pub msg_id: i32,
    pub max_size: i64,
    pub flags: u8,
    pub engine_id: &'a [u8],
    pub boots: u32,
    pub time: u32,
    pub user_name: &'a [u8],
    pub auth_params: &'a [u8],
    pub priv_params: &'a [u8],
    /// Offset of `auth_params` in the datagram (zeroed to verify the MAC).
    auth_at: usize,
    /// The ScopedPDU's contents when plaintext, else the ciphertext.
    data: &'a [u8],
}

/// Why a v3 message's PDU could not be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum V3Error {
    #[error(transparent)]
    Decode(#[from] DecodeError),
    #[error("encrypted message without a privacy key")]
    NoPrivacyKey,
    #[error("decryption failed")]
    Decrypt,
}

fn read_u31(r: &mut Reader<'_>) -> Result<u32, DecodeError> {
    u32::try_from(r.read_i64()?)
        .ok()
        .filter(|&v| v <= i32::MAX as u32)
        .ok_or(DecodeError::IntegerRange)
}

impl<'a> V3Message<'a> {
    /// Decodes and checks the envelope of a whole datagram: version 3, USM, field
    /// types and ranges, no trailing bytes, privacy only with authentication.
    pub fn decode(buf: &'a [u8]) -> Result<V3Message<'a>, DecodeError> {
        let mut outer = Reader::new(buf);
        let body = outer.read_expect(TAG_SEQUENCE)?;
        if !outer.is_empty() {
            return Err(DecodeError::TrailingBytes);
        }
        let mut r = Reader::new(body);
        let version = r.read_i64()?;
        if version != Version::V3.wire() {
            return Err(DecodeError::UnsupportedVersion { version });
        }
        let mut g = Reader::new(r.read_expect(TAG_SEQUENCE)?);
        let msg_id = i32::try_from(read_u31(&mut g)?).map_err(|_| DecodeError::IntegerRange)?;
        let max_size = g.read_i64()?;
        let flags = match g.read_expect(TAG_OCTET_STRING)? {
            [f] => *f,
            _ => return Err(DecodeError::BadLength),
        };
        let model = g.read_i64()?;
        if !g.is_empty() {
            return Err(DecodeError::TrailingBytes);
        }
        if model != SECURITY_MODEL_USM {
            return Err(DecodeError::UnsupportedSecurityModel { model });
        }
        if flags & (FLAG_AUTH | FLAG_PRIV) == FLAG_PRIV {
            // RFC 3412 §7.2 step 5: privacy without authentication is invalid.
            return Err(DecodeError::BadFlags { flags });
        }
        let mut sp = Reader::new(r.read_expect(TAG_OCTET_STRING)?);
        let mut u = Reader::new(sp.read_expect(TAG_SEQUENCE)?);
        if !sp.is_empty() {
            return Err(DecodeError::TrailingBytes);
        }
        let engine_id = u.read_expect(TAG_OCTET_STRING)?;
        let boots = read_u31(&mut u)?;
        let time = read_u31(&mut u)?;
        let user_name = u.read_expect(TAG_OCTET_STRING)?;
        let auth_params = u.read_expect(TAG_OCTET_STRING)?;
        let priv_params = u.read_expect(TAG_OCTET_STRING)?;
        if !u.is_empty() {
            return Err(DecodeError::TrailingBytes);
        }
        let data = if flags & FLAG_PRIV != 0 {
            r.read_expect(TAG_OCTET_STRING)?
        } else {
            r.read_expect(TAG_SEQUENCE)?
        };
        if !r.is_empty() {
            return Err(DecodeError::TrailingBytes);
        }
        // Both slices point into `buf`: the difference of their addresses is an offset.
        let auth_at = auth_params.as_ptr() as usize - buf.as_ptr() as usize;
        Ok(V3Message {
            msg_id,
            max_size,
            flags,
            engine_id,
            boots,
            time,
            user_name,
            auth_params,
            priv_params,
            auth_at,
            data,
        })
    }

    /// The level the message claims by its flags.
    pub fn level(&self) -> SecurityLevel {
        match self.flags & (FLAG_AUTH | FLAG_PRIV) {
            0 => SecurityLevel::NoAuthNoPriv,
            FLAG_AUTH => SecurityLevel::AuthNoPriv,
            _ => SecurityLevel::AuthPriv,
        }
    }

    /// True when the message claims authentication and its MAC is `engine`'s user's,
    /// for `engine` and that user. `buf` is the datagram `self` was decoded from;
    /// `scratch` holds its copy with the MAC zeroed.
    pub fn verify(&self, buf: &[u8], engine: &Engine, scratch: &mut Vec<u8>) -> bool {
        let Some((proto, key)) = engine.auth() else {
            return false;
        };
        if self.flags & FLAG_AUTH == 0
            || self.engine_id != engine.id()
            || self.user_name != engine.user.name()
            || self.auth_params.len() != proto.mac_len()
        {
            return false;
        }
        let Some(end) = self.auth_at.checked_add(self.auth_params.len()) else {
            return false;
        };
        if end > buf.len() {
            return false;
        }
        scratch.clear();
        scratch.extend_from_slice(buf);
        scratch[self.auth_at..end].fill(0);
        usm::verify_mac(proto, key, scratch, self.auth_params)
    }

    /// The ScopedPDU: the plaintext one as it is, or the encrypted one decrypted with
    /// `engine`'s privacy key into `scratch`. Call after [`Self::verify`].
    pub fn scoped_pdu<'s>(
        &self,
        engine: Option<&Engine>,
        scratch: &'s mut Vec<u8>,
    ) -> Result<ScopedPdu<'s>, V3Error>
    where
        'a: 's,
    {
        if self.flags & FLAG_PRIV == 0 {
            return Ok(decode_scoped_contents(self.data)?);
        }
        let Some((proto, key)) = engine.and_then(Engine::privacy) else {
            return Err(V3Error::NoPrivacyKey);
        };
        let plain = usm::decrypt(
            proto,
            key,
            self.boots,
            self.time,
            self.priv_params,
            self.data,
        )
        .map_err(|_| V3Error::Decrypt)?;
        *scratch = plain;
        Ok(decode_scoped_pdu(scratch)?)
    }
}

/// RFC 3414 §3.2's rule for a Response to `user`'s request, the one place both the
/// engine and the CLI apply it: the message is at the user's level and from the user
/// (an unauthenticated answer to an authenticated request is dropped, whatever it
/// says), and, authenticated, inside the time window of `engine`, whose clock then
/// follows it (step 7b). `authentic` is [`V3Message::verify`]'s verdict, which needs
/// the engine: with `engine` `None` only a noAuthNoPriv exchange can pass.
pub fn accept_response(
    user: &UsmUser,
    engine: Option<&mut Engine>,
    msg: &V3Message<'_>,
    authentic: bool,
    now: Instant,
) -> bool {
    if msg.level() != user.level() || msg.user_name != user.name() {
        return false;
    }
    match engine {
        Some(e) if authentic => {
            if !e.is_timely(msg.boots, msg.time) {
                return false;
            }
            e.update_clock(msg.boots, msg.time, now);
            true
        }
        _ => !authentic,
    }
}

/// What an SNMPv3 reply to a request gives its requester ([`V3Message::answer`]).
#[derive(Debug, Clone)]
pub enum Answer<'s> {
    /// A Response, taken: authentic (or as unauthenticated as the user), readable, at
    /// the user's level, in the time window (the engine's clock has followed it), and
    /// with the request's request-id.
    Response(Message<'s>),
    /// A Report: what it says, and whether it authenticated (only then may its clock
    /// be taken as the engine's).
    Report { kind: ReportKind, authentic: bool },
}

/// Why an SNMPv3 message under a request's msgID is not that request's answer
/// ([`V3Message::answer`]): the v3 counterpart of [`crate::Refusal`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum V3Refusal {
    /// It does not authenticate as the user's answer: a wrong MAC (another key, engine
    /// ID or user name), or a Response below the user's level, out of the engine's time
    /// window, or under a request-id other than the request's.
    NotAuthentic,
    /// Authentic and encrypted, but the user's privacy key cannot decrypt it (there is
    /// none, or the cipher refuses the ciphertext).
    NotDecrypted,
    /// Authentic and encrypted, but it decrypts to no ScopedPDU: what another privacy
    /// key gives (a broken PDU under the right key reads the same).
    Garbled(DecodeError),
    /// Its plaintext ScopedPDU does not decode.
    Undecodable(DecodeError),
    /// Neither a Response nor a Report (the request echoed), or a Response where only a
    /// Report answers (a discovery).
    NotResponse(PduType),
}

impl<'a> V3Message<'a> {
    /// RFC 3412/3414's whole rule for a reply to `user`'s request, the one place the
    /// engine and the CLI's walker take an SNMPv3 answer by (so both refuse the same
    /// replies and say the same of them). The caller has matched the msgID to its
    /// request; `bytes` is the datagram `self` was decoded from; `engine` the agent's,
    /// as known; `request_id` the request's (`None` for a discovery, which only a Report
    /// answers); `scratch` holds the MAC check's copy and the decrypted PDU. Checked in
    /// this order, the first that fails told: a claimed authentication, decryption, the
    /// PDU's type (a Report is handed back as it is: its kind is the caller's to act
    /// on), then [`accept_response`] and the request-id.
    pub fn answer<'s>(
        &self,
        bytes: &[u8],
        user: &UsmUser,
        mut engine: Option<&mut Engine>,
        request_id: Option<i32>,
        scratch: &'s mut (Vec<u8>, Vec<u8>),
        now: Instant,
    ) -> Result<Answer<'s>, V3Refusal>
    where
        'a: 's,
    {
        let (mac, plain) = scratch;
        let authentic = engine
            .as_deref()
            .is_some_and(|e| self.verify(bytes, e, mac));
        if self.flags & FLAG_AUTH != 0 && !authentic {
            // Claims authentication it does not have: forged, mangled or another key.
            return Err(V3Refusal::NotAuthentic);
        }
        let pdu = match self.scoped_pdu(engine.as_deref(), plain) {
            Ok(scoped) => scoped.pdu,
            // Encrypted (so authenticated: privacy needs authentication, and the MAC
            // passed) yet unreadable: a wrong privacy key decrypts to garbage.
            Err(V3Error::Decode(e)) if self.flags & FLAG_PRIV != 0 => {
                return Err(V3Refusal::Garbled(e))
            }
            Err(V3Error::Decode(e)) => return Err(V3Refusal::Undecodable(e)),
            Err(V3Error::NoPrivacyKey | V3Error::Decrypt) => return Err(V3Refusal::NotDecrypted),
        };
        match (pdu.pdu_type, request_id) {
            (PduType::Report, _) => Ok(Answer::Report {
                kind: ReportKind::of(&pdu),
                authentic,
            }),
            (PduType::Response, Some(id)) => {
                if pdu.request_id != id
                    || !accept_response(user, engine.take(), self, authentic, now)
                {
                    return Err(V3Refusal::NotAuthentic);
                }
                Ok(Answer::Response(pdu))
            }
            (other, _) => Err(V3Refusal::NotResponse(other)),
        }
    }
}

/// A decoded ScopedPDU.
#[derive(Debug, Clone)]
pub struct ScopedPdu<'a> {
    pub context_engine_id: &'a [u8],
    pub context_name: &'a [u8],
    /// The PDU, validated whole; `version` is [`Version::V3`], `community` empty.
    pub pdu: Message<'a>,
}

/// Decodes a decrypted ScopedPDU. Bytes after it are ignored: DES pads the plaintext
/// to its block size with bytes the receiver must skip (RFC 3414 §8.1.1.2).
pub fn decode_scoped_pdu(plain: &[u8]) -> Result<ScopedPdu<'_>, DecodeError> {
    let mut r = Reader::new(plain);
    decode_scoped_contents(r.read_expect(TAG_SEQUENCE)?)
}

fn decode_scoped_contents(body: &[u8]) -> Result<ScopedPdu<'_>, DecodeError> {
    let mut r = Reader::new(body);
    let context_engine_id = r.read_expect(TAG_OCTET_STRING)?;
    let context_name = r.read_expect(TAG_OCTET_STRING)?;
    let (tag, pdu) = r.read_tlv()?;
    if !r.is_empty() {
        return Err(DecodeError::TrailingBytes);
    }
    Ok(ScopedPdu {
        context_engine_id,
        context_name,
        pdu: Message::from_pdu(Version::V3, &[], tag, pdu)?,
    })
}

/// What a Report PDU says went wrong, by the counter it carries (RFC 3414 §3.2,
/// RFC 3412 §7.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReportKind {
    UnsupportedSecLevel,
    NotInTimeWindow,
    UnknownUserName,
    UnknownEngineId,
    WrongDigest,
    DecryptionError,
    /// snmpUnknownSecurityModels, snmpInvalidMsgs, snmpUnknownPDUHandlers, or any
    /// other counter.
    Other,
}

/// How a requester resynchronizes with an agent's engine after a Report
/// ([`ReportKind::resync`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resync {
    /// Take the engine's boots and time from the (authenticated) Report.
    Clock,
    /// Forget the engine and discover it again.
    Rediscover,
}

/// usmStats (1.3.6.1.6.3.15.1.1) as BER contents, without the last two arcs.
const USM_STATS: &[u8] = &[0x2b, 6, 1, 6, 3, 15, 1, 1];

impl ReportKind {
    /// Every kind, in [`Self::index`] order.
    pub const ALL: [ReportKind; 7] = [
        ReportKind::UnsupportedSecLevel,
        ReportKind::NotInTimeWindow,
        ReportKind::UnknownUserName,
        ReportKind::UnknownEngineId,
        ReportKind::WrongDigest,
        ReportKind::DecryptionError,
        ReportKind::Other,
    ];

    /// Position in [`Self::ALL`] (for counters kept in arrays).
    pub fn index(self) -> usize {
        self as usize
    }

    /// The kind of a Report PDU, from its first varbind.
    pub fn of(report: &Message<'_>) -> ReportKind {
        let Some(vb) = report.varbinds().next() else {
            return ReportKind::Other;
        };
        match vb.oid.as_ber() {
            [prefix @ .., n, 0] if prefix == USM_STATS => match n {
                1 => ReportKind::UnsupportedSecLevel,
                2 => ReportKind::NotInTimeWindow,
                3 => ReportKind::UnknownUserName,
                4 => ReportKind::UnknownEngineId,
                5 => ReportKind::WrongDigest,
                6 => ReportKind::DecryptionError,
                _ => ReportKind::Other,
            },
            _ => ReportKind::Other,
        }
    }

    /// What a requester does after this Report to a request of its own, when the
    /// agent `authentic`ated it (the engine's rule, [`crate::Iteration`]'s; the walker
    /// follows it): an authenticated notInTimeWindow tells the engine's clock (our
    /// estimate drifted, or the agent rebooted: take its boots and time); an
    /// unknownEngineID says the agent has another engine now (replaced, or its engine
    /// ID reset), and an unauthenticated notInTimeWindow that its clock differs without
    /// proof of it (against RFC 3414 §3.2 7a): discover the engine again, as a
    /// discovery's Report is taken unauthenticated anyway (kept, the stale clock would
    /// fail every later request the same way). Either way the request is sent again;
    /// any other Report (wrong user, key or level) would come back to every request.
    pub fn resync(self, authentic: bool) -> Option<Resync> {
        match self {
            ReportKind::NotInTimeWindow if authentic => Some(Resync::Clock),
            ReportKind::UnknownEngineId | ReportKind::NotInTimeWindow => Some(Resync::Rediscover),
            _ => None,
        }
    }

    /// The counter's name, as net-snmp prints it.
    pub fn counter(self) -> &'static str {
        match self {
            ReportKind::UnsupportedSecLevel => "usmStatsUnsupportedSecLevels",
            ReportKind::NotInTimeWindow => "usmStatsNotInTimeWindows",
            ReportKind::UnknownUserName => "usmStatsUnknownUserNames",
            ReportKind::UnknownEngineId => "usmStatsUnknownEngineIDs",
            ReportKind::WrongDigest => "usmStatsWrongDigests",
            ReportKind::DecryptionError => "usmStatsDecryptionErrors",
            ReportKind::Other => "report",
        }
    }

    /// net-snmp's text for the error a Report of this kind makes of a request
    /// (`snmp_api_errstring()`, snmplib/snmp_api.c): what Zabbix shows after `Cannot
    /// connect to "<addr>:<port>": ` (checks_snmp.c `zbx_get_snmp_response_error`, 6.0
    /// and 6.4; 7.0 words a wrong digest `Authentication failure (incorrect password,
    /// community, key or duplicate engineID)`, the last for net-snmp's state kept per
    /// engine ID, which devices sharing one confuse: netpoller keeps engines per address).
    pub fn net_snmp_text(self) -> &'static str {
        match self {
            ReportKind::UnsupportedSecLevel => "Unsupported security level",
            ReportKind::NotInTimeWindow => "Not in time window",
            ReportKind::UnknownUserName => "Unknown user name",
            ReportKind::UnknownEngineId => "Unknown engine ID",
            ReportKind::WrongDigest => {
                "Authentication failure (incorrect password, community or key)"
            }
            ReportKind::DecryptionError => "Decryption error",
            ReportKind::Other => "Unknown Report message",
        }
    }
}

impl fmt::Display for ReportKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self {
            ReportKind::UnsupportedSecLevel => "unsupported security level",
            ReportKind::NotInTimeWindow => "not in time window",
            ReportKind::UnknownUserName => "unknown user name",
            ReportKind::UnknownEngineId => "unknown engine ID",
            ReportKind::WrongDigest => "wrong digest (authentication failure)",
            ReportKind::DecryptionError => "decryption error",
            ReportKind::Other => "the agent refused the message",
        };
        write!(f, "{what} ({})", self.counter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usm::keys_derived;

    #[test]
    fn an_engine_keeps_its_keys_for_a_user_of_another_context() {
        // Hosts at one address that differ only in their context (one per VLAN) take
        // the address's engine in turn: its keys are the same for each (they depend
        // on the credentials and the engine id alone), and AES-256-C's key extension
        // alone hashes 1 MiB.
        let user = UsmUser::new(
            "np-ctx",
            Some((AuthProtocol::Sha1, "np-auth-pass")),
            Some((PrivProtocol::Aes256C, "np-priv-pass")),
        )
        .unwrap();
        let vlan = Arc::new(user.clone().with_context("vlan-10"));
        let (user, t0) = (Arc::new(user), Instant::now());
        let e = Engine::new(user.clone(), b"engine-a", 3, 100, t0);
        let before = keys_derived();
        let v = e.for_user(&vlan);
        assert_eq!(keys_derived(), before, "keys derived again for a context");
        assert_eq!(v.user().context(), b"vlan-10");
        let o = v.outgoing(1, true, 0, t0);
        assert_eq!(o.context_name, b"vlan-10");
        assert_eq!(
            (o.auth, o.privacy),
            (
                e.outgoing(1, true, 0, t0).auth,
                e.outgoing(1, true, 0, t0).privacy
            )
        );
        // Back to the first context, and to an equal user made anew (a reload): none
        // either.
        let again = Arc::new(
            UsmUser::new(
                "np-ctx",
                Some((AuthProtocol::Sha1, "np-auth-pass")),
                Some((PrivProtocol::Aes256C, "np-priv-pass")),
            )
            .unwrap(),
        );
        let before = keys_derived();
        v.for_user(&user).for_user(&again);
        assert_eq!(keys_derived(), before);
        // Another passphrase: its keys localized to the engine (auth, privacy and the
        // extension's).
        let other = Arc::new(
            UsmUser::new(
                "np-ctx",
                Some((AuthProtocol::Sha1, "np-auth-pass")),
                Some((PrivProtocol::Aes256C, "np-other-pass")),
            )
            .unwrap(),
        );
        let before = keys_derived();
        let o = e.for_user(&other);
        assert!(keys_derived() > before);
        assert_ne!(
            o.outgoing(1, true, 0, t0).privacy,
            e.outgoing(1, true, 0, t0).privacy
        );
    }
}
