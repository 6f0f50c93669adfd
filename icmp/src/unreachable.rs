//! ICMP errors that end a datagram's way, read by type and code.
//!
//! One table for every driver that hears them: the SNMP driver (a request's error,
//! its UDP socket's error queue) and the ICMP sweep (an echo request's,
//! [`crate::Sweep::handle_error`]). Errors that do not end the way (the path MTU's
//! "fragmentation needed" and "packet too big", redirects, source quench) are none:
//! the kernel acts on those itself.

use std::net::IpAddr;

/// An ICMP error that came back for a datagram instead of an answer (read off its
/// socket's error queue: `IP_RECVERR`), as [`Unreachable::from_icmp`] words it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unreachable {
    /// What it says.
    pub kind: UnreachableKind,
    /// Who sent it: the host itself (a closed port, a host firewall) or a router on
    /// the way (no route, no answer to its ARP or neighbour solicitation).
    pub from: IpAddr,
}

/// What an [`Unreachable`] says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnreachableKind {
    /// Nothing listens on the UDP port (ICMP type 3 code 3, ICMPv6 type 1 code 4).
    Port,
    /// The host does not answer on its link (ICMP type 3 codes 1, 7, 12; ICMPv6
    /// address unreachable).
    Host,
    /// No route to it (ICMP type 3 codes 0, 6, 11; ICMPv6 no route, beyond scope).
    Network,
    /// A firewall rejects the datagram (ICMP type 3 codes 9, 10, 13; ICMPv6 codes 1,
    /// 5, 6: what an `reject with icmp admin-prohibited` rule sends).
    Prohibited,
    /// The hop limit ran out on the way (ICMP type 11, ICMPv6 type 3, code 0): a
    /// routing loop, or a path longer than the TTL.
    TimeExceeded,
    /// Another error that ends the datagram's way (a parameter problem, a protocol
    /// unreachable, fragment reassembly timed out): its type and code.
    Other {
        /// ICMPv6 rather than ICMP.
        v6: bool,
        /// The ICMP type.
        icmp_type: u8,
        /// The ICMP code.
        code: u8,
    },
}

impl UnreachableKind {
    /// A short name for machine-readable output (`sweep --json`).
    pub fn name(self) -> &'static str {
        match self {
            UnreachableKind::Port => "port-unreachable",
            UnreachableKind::Host => "host-unreachable",
            UnreachableKind::Network => "network-unreachable",
            UnreachableKind::Prohibited => "admin-prohibited",
            UnreachableKind::TimeExceeded => "time-exceeded",
            UnreachableKind::Other { .. } => "other",
        }
    }
}

impl Unreachable {
    /// From an ICMP (`v6`: ICMPv6) error's type and code, sent by `from`. `None` for
    /// those that do not end a datagram's way: fragmentation needed and packet too
    /// big (the kernel learns the path MTU from them), redirects, source quench.
    pub fn from_icmp(v6: bool, icmp_type: u8, code: u8, from: IpAddr) -> Option<Self> {
        use UnreachableKind::*;
        let kind = match (v6, icmp_type, code) {
            (false, 3, 3) | (true, 1, 4) => Port,
            (false, 3, 1 | 7 | 12) | (true, 1, 3) => Host,
            (false, 3, 0 | 6 | 11) | (true, 1, 0 | 2) => Network,
            (false, 3, 9 | 10 | 13) | (true, 1, 1 | 5 | 6) => Prohibited,
            (false, 11, 0) | (true, 3, 0) => TimeExceeded,
            (false, 3, 4) | (false, 4 | 5, _) | (true, 2, _) => return None,
            (false, 3 | 11 | 12, _) | (true, 1 | 3 | 4, _) => Other {
                v6,
                icmp_type,
                code,
            },
            _ => return None,
        };
        Some(Unreachable { kind, from })
    }
}

impl std::fmt::Display for Unreachable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let from = self.from;
        match self.kind {
            UnreachableKind::Port => write!(
                f,
                "ICMP port unreachable from {from}: nothing listens on that UDP port (the agent stopped, or listens on another port or address?)"
            ),
            UnreachableKind::Host => write!(
                f,
                "ICMP host unreachable from {from} (the host is down or not on its link)"
            ),
            UnreachableKind::Network => {
                write!(f, "ICMP network unreachable from {from} (no route to the host)")
            }
            UnreachableKind::Prohibited => write!(
                f,
                "ICMP administratively prohibited from {from} (a firewall rejects the requests)"
            ),
            UnreachableKind::TimeExceeded => write!(
                f,
                "ICMP time exceeded from {from} (the TTL ran out on the way: a routing loop?)"
            ),
            UnreachableKind::Other {
                v6,
                icmp_type,
                code,
            } => write!(
                f,
                "ICMP{} error type {icmp_type} code {code} from {from}",
                if v6 { "v6" } else { "" }
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ICMP and ICMPv6 errors by what they say of the way; those that do not end it
    /// (the path MTU's, redirects) are none.
    #[test]
    fn icmp_errors_are_read_by_type_and_code() {
        use UnreachableKind::*;
        let from: IpAddr = "192.0.2.1".parse().unwrap();
        let kind = |v6, t, c| Unreachable::from_icmp(v6, t, c, from).map(|u| u.kind);
        assert_eq!(kind(false, 3, 3), Some(Port));
        assert_eq!(kind(true, 1, 4), Some(Port));
        assert_eq!(kind(false, 3, 1), Some(Host));
        assert_eq!(kind(true, 1, 3), Some(Host));
        assert_eq!(kind(false, 3, 0), Some(Network));
        assert_eq!(kind(true, 1, 0), Some(Network));
        assert_eq!(kind(false, 3, 13), Some(Prohibited));
        assert_eq!(kind(true, 1, 1), Some(Prohibited));
        assert_eq!(kind(false, 11, 0), Some(TimeExceeded));
        assert_eq!(kind(true, 3, 0), Some(TimeExceeded));
        assert_eq!(
            kind(false, 11, 1),
            Some(Other {
                v6: false,
                icmp_type: 11,
                code: 1
            }),
            "fragment reassembly time exceeded"
        );
        assert_eq!(kind(false, 3, 4), None, "fragmentation needed");
        assert_eq!(kind(true, 2, 0), None, "packet too big");
        assert_eq!(kind(false, 5, 1), None, "redirect");
        assert_eq!(kind(false, 0, 0), None, "an echo reply is no error");
        let u = Unreachable::from_icmp(true, 4, 1, "2001:db8::1".parse().unwrap()).unwrap();
        assert_eq!(u.to_string(), "ICMPv6 error type 4 code 1 from 2001:db8::1");
        let u = Unreachable::from_icmp(false, 11, 0, from).unwrap();
        assert!(
            u.to_string()
                .starts_with("ICMP time exceeded from 192.0.2.1 "),
            "{u}"
        );
    }
}
