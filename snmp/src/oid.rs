//! Object identifiers.
//!
//! An [`Oid`] stores its BER content octets (not the arcs): encoding a request is a copy
//! and matching a response varbind against the requested OID is a byte comparison, with
//! no decoding on the hot path. Invariants (checked by every constructor): at least two
//! arcs, first arc 0..=2, second arc < 40 unless the first is 2, every arc fits `u32`,
//! at most [`MAX_ARCS`] arcs, and the octets are in canonical (minimal) form. Because each
//! sub-identifier is self-delimiting, "`a` is an arc prefix of `b`" is the same as "`a`'s
//! octets are a byte prefix of `b`'s" ([`Oid::starts_with`]).

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use crate::DecodeError;

/// Longest OID accepted (RFC 2578 limits OIDs to 128 sub-identifiers).
pub const MAX_ARCS: usize = 128;

/// Why a dotted OID string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OidParseError {
    #[error("empty OID")]
    Empty,
    #[error("OID arc {0:?} is not a number in 0..=4294967295")]
    BadArc(String),
    #[error("OID needs at least two arcs")]
    TooShort,
    #[error("OID has more than {MAX_ARCS} arcs")]
    TooLong,
    #[error(
        "OID must start with 0, 1 or 2, and the second arc must be < 40 unless the first is 2"
    )]
    BadPrefix,
}

/// An owned object identifier (see the module docs for the representation).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Oid {
    ber: Box<[u8]>,
}

/// A borrowed, validated object identifier (BER content octets), e.g. from a response.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct OidRef<'a> {
    ber: &'a [u8],
}

impl Oid {
    /// Builds an OID from its arcs.
    pub fn from_arcs(arcs: &[u32]) -> Result<Oid, OidParseError> {
        if arcs.len() < 2 {
            return Err(OidParseError::TooShort);
        }
        if arcs.len() > MAX_ARCS {
            return Err(OidParseError::TooLong);
        }
        let (a, b) = (arcs[0], arcs[1]);
        if a > 2 || (a < 2 && b >= 40) {
            return Err(OidParseError::BadPrefix);
        }
        let mut ber = Vec::with_capacity(arcs.len() + 4);
        push_subid(&mut ber, a as u64 * 40 + b as u64);
        for &arc in &arcs[2..] {
            push_subid(&mut ber, arc as u64);
        }
        Ok(Oid {
            ber: ber.into_boxed_slice(),
        })
    }

    /// Validates BER content octets and copies them.
    pub fn from_ber(ber: &[u8]) -> Result<Oid, DecodeError> {
        OidRef::from_ber(ber).map(|r| r.to_owned())
    }

    /// The BER content octets (what goes after tag 0x06 and the length).
    pub fn as_ber(&self) -> &[u8] {
        &self.ber
    }

    pub fn as_ref(&self) -> OidRef<'_> {
        OidRef { ber: &self.ber }
    }

    /// The arcs, decoded.
    pub fn arcs(&self) -> Arcs<'_> {
        self.as_ref().arcs()
    }

    /// True when `prefix`'s arcs are a prefix of (or equal to) this OID's arcs.
    pub fn starts_with(&self, prefix: &Oid) -> bool {
        self.ber.starts_with(&prefix.ber)
    }

    /// A new OID with `arc` appended.
    pub fn child(&self, arc: u32) -> Oid {
        self.descendant(&[arc])
    }

    /// A new OID with `arcs` appended (a table's column and a row's index); the caller
    /// keeps it within [`MAX_ARCS`].
    pub fn descendant(&self, arcs: &[u32]) -> Oid {
        // A sub-identifier takes at most 5 octets.
        let mut ber = Vec::with_capacity(self.ber.len() + 5 * arcs.len());
        ber.extend_from_slice(&self.ber);
        for &arc in arcs {
            push_subid(&mut ber, arc as u64);
        }
        Oid {
            ber: ber.into_boxed_slice(),
        }
    }
}

impl<'a> OidRef<'a> {
    /// Validates BER content octets: non-empty, canonical sub-identifiers (no leading
    /// 0x80), each within `u32` (the first within 2*40 + u32), at most [`MAX_ARCS`] arcs.
    pub fn from_ber(ber: &'a [u8]) -> Result<OidRef<'a>, DecodeError> {
        if ber.is_empty() {
            return Err(DecodeError::BadOid);
        }
        // Fast path: every sub-identifier is one octet (the common case on the wire).
        if ber.iter().all(|&b| b < 0x80) {
            return if ber.len() < MAX_ARCS {
                Ok(OidRef { ber })
            } else {
                Err(DecodeError::BadOid)
            };
        }
        let mut subids = 0usize;
        let mut acc: u64 = 0;
        let mut start = true;
        for &b in ber {
            if start && b == 0x80 {
                return Err(DecodeError::BadOid);
            }
            acc = (acc << 7) | (b & 0x7f) as u64;
            let limit = if subids == 0 {
                80 + u32::MAX as u64
            } else {
                u32::MAX as u64
            };
            if acc > limit {
                return Err(DecodeError::BadOid);
            }
            start = b & 0x80 == 0;
            if start {
                subids += 1;
                acc = 0;
            }
        }
        if !start || subids + 1 > MAX_ARCS {
            return Err(DecodeError::BadOid);
        }
        Ok(OidRef { ber })
    }

    pub fn as_ber(&self) -> &'a [u8] {
        self.ber
    }

    /// For octets that [`OidRef::from_ber`] already accepted (re-reading a validated
    /// message): skips the validation.
    pub(crate) fn from_validated(ber: &'a [u8]) -> OidRef<'a> {
        OidRef { ber }
    }

    pub fn to_owned(&self) -> Oid {
        Oid {
            ber: self.ber.into(),
        }
    }

    pub fn arcs(&self) -> Arcs<'a> {
        Arcs {
            ber: self.ber,
            pending: None,
            first: true,
        }
    }

    /// True when `prefix`'s arcs are a prefix of (or equal to) this OID's arcs.
    pub fn starts_with(&self, prefix: &Oid) -> bool {
        self.ber.starts_with(&prefix.ber)
    }
}

fn push_subid(out: &mut Vec<u8>, v: u64) {
    let mut shift = 63 - (v | 1).leading_zeros() as i32;
    shift -= shift % 7;
    while shift > 0 {
        out.push(0x80 | (v >> shift) as u8 & 0x7f);
        shift -= 7;
    }
    out.push(v as u8 & 0x7f);
}

/// Iterator over the arcs of a validated OID.
#[derive(Clone)]
pub struct Arcs<'a> {
    ber: &'a [u8],
    pending: Option<u32>,
    first: bool,
}

impl Iterator for Arcs<'_> {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        if let Some(p) = self.pending.take() {
            return Some(p);
        }
        let mut acc: u64 = 0;
        loop {
            let (&b, rest) = self.ber.split_first()?;
            self.ber = rest;
            acc = (acc << 7) | (b & 0x7f) as u64;
            if b & 0x80 == 0 {
                break;
            }
        }
        if self.first {
            self.first = false;
            let (a, b) = match acc {
                0..=39 => (0, acc),
                40..=79 => (1, acc - 40),
                _ => (2, acc - 80),
            };
            self.pending = Some(b as u32);
            return Some(a);
        }
        Some(acc as u32)
    }
}

impl FromStr for Oid {
    type Err = OidParseError;

    /// Parses `1.3.6.1.2.1.1.1.0` or `.1.3.6.1.2.1.1.1.0` (net-snmp's numeric form).
    fn from_str(s: &str) -> Result<Oid, OidParseError> {
        let s = s.strip_prefix('.').unwrap_or(s);
        if s.is_empty() {
            return Err(OidParseError::Empty);
        }
        let mut arcs = Vec::with_capacity(16);
        for part in s.split('.') {
            if arcs.len() == MAX_ARCS {
                return Err(OidParseError::TooLong);
            }
            let ok = !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
            let arc = ok.then(|| part.parse::<u32>().ok()).flatten();
            arcs.push(arc.ok_or_else(|| OidParseError::BadArc(part.chars().take(24).collect()))?);
        }
        Oid::from_arcs(&arcs)
    }
}

fn fmt_arcs(arcs: Arcs<'_>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    for a in arcs {
        write!(f, ".{a}")?;
    }
    Ok(())
}

/// Net-snmp's `-On` form with the leading dot: `.1.3.6.1.2.1.1.1.0`.
impl fmt::Display for Oid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_arcs(self.arcs(), f)
    }
}

impl fmt::Debug for Oid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Oid({self})")
    }
}

impl fmt::Display for OidRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_arcs(self.arcs(), f)
    }
}

impl fmt::Debug for OidRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OidRef({self})")
    }
}

/// Lexicographic order of the arcs (the MIB order GETNEXT walks in).
impl Ord for Oid {
    fn cmp(&self, other: &Oid) -> Ordering {
        self.arcs().cmp(other.arcs())
    }
}

impl PartialOrd for Oid {
    fn partial_cmp(&self, other: &Oid) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parse_display_ber() {
        let o: Oid = ".1.3.6.1.2.1.1.1.0".parse().unwrap();
        assert_eq!(o.as_ber(), [0x2b, 6, 1, 2, 1, 1, 1, 0]);
        assert_eq!(o.to_string(), ".1.3.6.1.2.1.1.1.0");
        let o2: Oid = "1.3.6.1.2.1.1.1.0".parse().unwrap();
        assert_eq!(o, o2);
        let big: Oid = "1.3.6.1.4.1.2021.4294967295".parse().unwrap();
        assert_eq!(
            big.as_ber(),
            [0x2b, 6, 1, 4, 1, 0x8f, 0x65, 0x8f, 0xff, 0xff, 0xff, 0x7f]
        );
        assert_eq!(big.to_string(), ".1.3.6.1.4.1.2021.4294967295");
        let two: Oid = "2.999.3".parse().unwrap();
        assert_eq!(two.as_ber(), [0x88, 0x37, 0x03]);
        assert_eq!(two.to_string(), ".2.999.3");
    }

    #[test]
    fn parse_rejects() {
        assert_eq!("".parse::<Oid>(), Err(OidParseError::Empty));
        assert_eq!(".".parse::<Oid>(), Err(OidParseError::Empty));
        assert_eq!("1".parse::<Oid>(), Err(OidParseError::TooShort));
        assert_eq!("3.1".parse::<Oid>(), Err(OidParseError::BadPrefix));
        assert_eq!("1.40".parse::<Oid>(), Err(OidParseError::BadPrefix));
        assert!(matches!(
            "1.3..6".parse::<Oid>(),
            Err(OidParseError::BadArc(_))
        ));
        assert!(matches!(
            "1.3.4294967296".parse::<Oid>(),
            Err(OidParseError::BadArc(_))
        ));
        assert!(matches!(
            "1.3.+6".parse::<Oid>(),
            Err(OidParseError::BadArc(_))
        ));
        assert!(matches!(
            "sysDescr.0".parse::<Oid>(),
            Err(OidParseError::BadArc(_))
        ));
        let long = vec!["1"; MAX_ARCS + 1].join(".");
        assert_eq!(long.parse::<Oid>(), Err(OidParseError::TooLong));
    }

    #[test]
    fn ber_validation() {
        assert!(OidRef::from_ber(&[]).is_err());
        assert!(
            OidRef::from_ber(&[0x2b, 0x86]).is_err(),
            "unterminated sub-identifier"
        );
        assert!(
            OidRef::from_ber(&[0x2b, 0x80, 0x01]).is_err(),
            "non-canonical leading 0x80"
        );
        assert!(
            OidRef::from_ber(&[0x2b, 0x90, 0x80, 0x80, 0x80, 0x00]).is_err(),
            "arc > u32"
        );
        assert!(OidRef::from_ber(&[0x2b, 0x8f, 0xff, 0xff, 0xff, 0x7f]).is_ok());
    }

    #[test]
    fn ordering_and_prefix() {
        let a: Oid = "1.3.6.1.2.1.2.2.1.2".parse().unwrap();
        let b: Oid = "1.3.6.1.2.1.2.2.1.2.200".parse().unwrap();
        let c: Oid = "1.3.6.1.2.1.2.2.1.10".parse().unwrap();
        assert!(a < b && b < c);
        assert!(b.starts_with(&a) && !c.starts_with(&a));
        // 1.3.6.1.2.1.2.2.1.200 starts with byte 0x81: not a byte prefix issue.
        let d: Oid = "1.3.6.1.2.1.2.2.1.200".parse().unwrap();
        let e: Oid = "1.3.6.1.2.1.2.2.1.1".parse().unwrap();
        assert!(!d.starts_with(&e));
        assert_eq!(a.child(200), "1.3.6.1.2.1.2.2.1.2.200".parse().unwrap());
        // A row of more arcs (an address), each arc in its own sub-identifier.
        assert_eq!(
            a.descendant(&[1, 4, 192, 168, 1, 4_294_967_295]),
            "1.3.6.1.2.1.2.2.1.2.1.4.192.168.1.4294967295"
                .parse()
                .unwrap()
        );
        assert_eq!(a.descendant(&[]), a);
    }

    proptest! {
        #[test]
        fn arcs_round_trip(a in 0u32..3, b in 0u32..40, rest in proptest::collection::vec(any::<u32>(), 0..40)) {
            let mut arcs = vec![a, b];
            arcs.extend(rest);
            let o = Oid::from_arcs(&arcs).unwrap();
            prop_assert_eq!(o.arcs().collect::<Vec<_>>(), arcs.clone());
            let back: Oid = o.to_string().parse().unwrap();
            prop_assert_eq!(&back, &o);
            prop_assert_eq!(Oid::from_ber(o.as_ber()).unwrap(), o);
        }

        #[test]
        fn prefix_matches_arcs(x in proptest::collection::vec(0u32..300, 0..6), y in proptest::collection::vec(0u32..300, 0..6)) {
            let mut ax = vec![1, 3]; ax.extend(&x);
            let mut ay = vec![1, 3]; ay.extend(&y);
            let ox = Oid::from_arcs(&ax).unwrap();
            let oy = Oid::from_arcs(&ay).unwrap();
            prop_assert_eq!(ox.starts_with(&oy), ax.starts_with(&ay));
            prop_assert_eq!(ox.cmp(&oy), ax.cmp(&ay));
        }

        #[test]
        fn from_ber_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(o) = OidRef::from_ber(&bytes) {
                let back: Oid = o.to_string().parse().unwrap();
                prop_assert_eq!(back.as_ber(), o.as_ber());
            }
        }
    }
}
