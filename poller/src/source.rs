//! The local addresses requests leave from (Zabbix's `SourceIP`): devices commonly
//! accept SNMP (and answer pings) only from a management address, and a poller with
//! several addresses must send from that one, whatever the route says.
//!
//! Invariant: a socket of a family with a source address is bound to it before its
//! first send, so every datagram and probe it sends carries it; a family without one is
//! left to the kernel (the route's preferred source).

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// A block of addresses no device has: its family, first and last address (IPv4 in
/// the low 32 bits), what one address of it is, and what a range holding some of it
/// holds (`None`: not checked in ranges).
struct Block {
    v6: bool,
    first: u128,
    last: u128,
    one: &'static str,
    some: Option<&'static str>,
}

/// The blocks [`check_address`] and [`check_range`] refuse, the narrower first.
const NOT_DEVICES: [Block; 6] = [
    Block {
        v6: false,
        first: 0,
        last: 0,
        one: "the unspecified address",
        some: None,
    },
    Block {
        v6: false,
        first: 0,
        last: 0x00ff_ffff,
        one: "of 0.0.0.0/8 (\"this network\")",
        some: Some("addresses of 0.0.0.0/8 (\"this network\")"),
    },
    Block {
        v6: false,
        first: 0xe000_0000,
        last: 0xefff_ffff,
        one: "a multicast address",
        some: Some("multicast addresses"),
    },
    Block {
        v6: false,
        first: 0xffff_ffff,
        last: 0xffff_ffff,
        one: "the broadcast address",
        some: Some("the broadcast address 255.255.255.255"),
    },
    Block {
        v6: true,
        first: 0,
        last: 0,
        one: "the unspecified address",
        // A range's network address is left out (Subnet-Router anycast) but for /127.
        some: Some("the unspecified address ::"),
    },
    Block {
        v6: true,
        first: 0xff << 120,
        last: u128::MAX,
        one: "a multicast address",
        some: Some("multicast addresses"),
    },
];

/// `ip` if probes and requests may be addressed to it: one device's address.
/// * Not an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`). RFC 4291 keeps those off the
///   wire, but the kernel sends to one as IPv6, through the IPv6 default route, to an
///   address no host has; the user meant `a.b.c.d`, which the error says.
/// * Not link-local (fe80::/10): such an address names a device only with an interface,
///   which targets do not carry (`LINK_LOCAL_WHY`).
/// * Not in one of `NOT_DEVICES`: the unspecified address (`0.0.0.0`, `::`: a
///   placeholder of exports, which Linux delivers to this host), 0.0.0.0/8, a
///   multicast or the broadcast address (many hosts or none would answer for one
///   device).
pub fn check_address(ip: IpAddr) -> Result<IpAddr, String> {
    if let Some(v4) = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped(),
        IpAddr::V4(_) => None,
    } {
        return Err(format!(
            "{ip} is the IPv4 address {v4} written as IPv6 (IPv4-mapped: never sent as \
             such); write {v4}"
        ));
    }
    if matches!(ip, IpAddr::V6(a) if a.is_unicast_link_local()) {
        return Err(format!("{ip} is {LINK_LOCAL_WHY}"));
    }
    let n = bits(ip);
    match NOT_DEVICES
        .iter()
        .find(|b| b.v6 == ip.is_ipv6() && (b.first..=b.last).contains(&n))
    {
        Some(b) => Err(format!(
            "{ip} is {}, not a device's address (ICMP and SNMP items poll one device)",
            b.one
        )),
        None => Ok(ip),
    }
}

/// [`check_address`] for a range of addresses, `first..=last` (a CIDR's network to
/// broadcast address, of one family): none IPv4-mapped, and none in the blocks of
/// `NOT_DEVICES` that ranges are checked for.
pub fn check_range(first: IpAddr, last: IpAddr) -> Result<(), String> {
    const MAPPED: (u128, u128) = (0xffff_0000_0000, 0xffff_ffff_ffff);
    let (a, b) = (bits(first), bits(last));
    let held = NOT_DEVICES
        .iter()
        .find(|k| k.v6 == first.is_ipv6() && k.some.is_some() && a <= k.last && b >= k.first);
    if let Some(what) = held.and_then(|k| k.some) {
        return Err(format!(
            "{first}..{last} holds {what}, not devices' addresses (ICMP and SNMP items poll one device)"
        ));
    }
    if first.is_ipv6() && a <= MAPPED.1 && b >= MAPPED.0 {
        return Err(format!(
            "{first}..{last} holds IPv4-mapped IPv6 addresses (::ffff:0:0/96, never sent as such); \
             write the IPv4 range"
        ));
    }
    if first.is_ipv6() && a <= LINK_LOCAL.1 && b >= LINK_LOCAL.0 {
        return Err(format!(
            "{first}..{last} holds addresses that are {LINK_LOCAL_WHY}"
        ));
    }
    Ok(())
}

/// fe80::/10, first and last address.
const LINK_LOCAL: (u128, u128) = (0xfe80 << 112, (0xfec0 << 112) - 1);

/// Why a link-local target is refused: an address of fe80::/10 names a host only
/// together with a link (`fe80::1%eth0`), and items and targets carry none. Sent
/// without one, Linux picks a link by its routes (the only one with an fe80::/64 route,
/// say): the probe leaves whatever interface that is, and the device reads as down on
/// a poller with several links.
const LINK_LOCAL_WHY: &str = "link-local (fe80::/10): it names a device only together with \
    an interface (fe80::1%eth0), which netpoller does not take; poll the device by a \
    global or unique-local address";

/// An address as a number (IPv4 in the low 32 bits).
pub fn bits(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

/// At most one source address per family; `Default`: none (the kernel chooses).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SourceAddrs {
    pub v4: Option<Ipv4Addr>,
    pub v6: Option<Ipv6Addr>,
}

/// One address: the source of its family.
impl From<IpAddr> for SourceAddrs {
    fn from(ip: IpAddr) -> SourceAddrs {
        match ip {
            IpAddr::V4(a) => SourceAddrs {
                v4: Some(a),
                v6: None,
            },
            IpAddr::V6(a) => SourceAddrs {
                v4: None,
                v6: Some(a),
            },
        }
    }
}

impl SourceAddrs {
    /// The sources `ips` name (`daemon.source_ip`, `--source`): each a possible source
    /// ([`unusable`]), at most one per family; else what is wrong with them, each said.
    pub fn of(ips: impl IntoIterator<Item = IpAddr>) -> Result<SourceAddrs, Vec<String>> {
        let (mut out, mut wrong) = (SourceAddrs::default(), Vec::new());
        let mut twice = false;
        for ip in ips {
            if let Some(why) = unusable(ip) {
                wrong.push(format!("{ip}: {why}"));
            }
            twice |= match ip {
                IpAddr::V4(a) => out.v4.replace(a).is_some(),
                IpAddr::V6(a) => out.v6.replace(a).is_some(),
            };
        }
        if twice {
            wrong.push(
                "at most one address per family (requests of a family leave from one address)"
                    .into(),
            );
        }
        if wrong.is_empty() {
            Ok(out)
        } else {
            Err(wrong)
        }
    }

    /// The source for targets of this family, if one is set.
    pub fn for_family(&self, v6: bool) -> Option<IpAddr> {
        match v6 {
            false => self.v4.map(IpAddr::V4),
            true => self.v6.map(IpAddr::V6),
        }
    }

    /// What a socket of this family binds to: the source (any port), or the unspecified
    /// address.
    pub fn bind_addr(&self, v6: bool) -> SocketAddr {
        let ip = self.for_family(v6).unwrap_or(match v6 {
            false => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            true => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        });
        SocketAddr::new(ip, 0)
    }

    /// The sources, IPv4 first.
    pub fn iter(&self) -> impl Iterator<Item = IpAddr> {
        [self.v4.map(IpAddr::V4), self.v6.map(IpAddr::V6)]
            .into_iter()
            .flatten()
    }

    /// Whether this host has the sources: a UDP socket of each family binds to its
    /// source as the engines' will (IPv6 sockets IPv6 only). Nothing is sent.
    pub fn check(&self) -> io::Result<()> {
        for ip in self.iter() {
            self.udp_socket(ip.is_ipv6())?;
        }
        Ok(())
    }

    /// A UDP socket of this family (an IPv6 one IPv6 only), bound as [`Self::bind_any`]
    /// binds.
    pub fn udp_socket(&self, v6: bool) -> io::Result<std::net::UdpSocket> {
        let domain = if v6 {
            socket2::Domain::IPV6
        } else {
            socket2::Domain::IPV4
        };
        let sock = socket2::Socket::new(domain, socket2::Type::DGRAM, None)?;
        if v6 {
            sock.set_only_v6(true)?;
        }
        self.bind_any(&sock, v6)?;
        Ok(sock.into())
    }

    /// Binds `sock` (of this family) to the family's source, if one is set; an address
    /// this host does not have is said so, by address. (ICMP sockets: without a source
    /// they stay unbound.)
    pub fn bind(&self, sock: &socket2::Socket, v6: bool) -> io::Result<()> {
        match self.for_family(v6) {
            Some(_) => self.bind_any(sock, v6),
            None => Ok(()),
        }
    }

    /// Binds `sock` (a UDP socket of this family) to [`Self::bind_addr`]: the source, or
    /// the unspecified address; a source this host does not have is said so.
    pub fn bind_any(&self, sock: &socket2::Socket, v6: bool) -> io::Result<()> {
        sock.bind(&self.bind_addr(v6).into())
            .map_err(|e| match self.for_family(v6) {
                Some(ip) => explain(ip, e),
                None => e,
            })
    }
}

/// Why `ip` can never be a source address (`None`: it can, if this host has it).
pub fn unusable(ip: IpAddr) -> Option<&'static str> {
    match ip {
        _ if ip.is_unspecified() => Some("the unspecified address is no source: give one of this host's addresses"),
        _ if ip.is_multicast() => Some("a multicast address is no source: give one of this host's addresses"),
        IpAddr::V4(a) if a.is_broadcast() => Some("the broadcast address is no source: give one of this host's addresses"),
        IpAddr::V6(a) if a.to_ipv4_mapped().is_some() => {
            Some("an IPv4-mapped IPv6 address: give the IPv4 address itself")
        }
        IpAddr::V6(a) if a.is_unicast_link_local() => Some(
            "a link-local IPv6 address needs an interface, which a source address cannot name: give a global or unique-local one",
        ),
        _ => None,
    }
}

/// `e`, from binding to source `ip`, with what it most likely means.
fn explain(ip: IpAddr, e: io::Error) -> io::Error {
    let why = match e.raw_os_error() {
        Some(libc::EADDRNOTAVAIL) => "not an address of this host",
        _ => "cannot be bound",
    };
    io::Error::new(e.kind(), format!("source address {ip}: {why} ({e})"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use socket2::{Domain, Protocol, Socket, Type};

    #[test]
    fn ipv4_mapped_addresses_are_refused_with_the_address_meant() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let e = check_address(ip("::ffff:127.0.0.1")).unwrap_err();
        assert!(e.ends_with("write 127.0.0.1"), "{e}");
        for ok in ["127.0.0.1", "::1", "::127.0.0.1", "64:ff9b::7f00:1"] {
            assert_eq!(check_address(ip(ok)), Ok(ip(ok)));
        }
        // Ranges: any overlap with ::ffff:0:0/96.
        assert!(check_range(ip("::ffff:0:0"), ip("::ffff:0:ff")).is_err());
        assert!(check_range(ip("::"), ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")).is_err());
        assert!(check_range(ip("::ffff:ffff:ffff"), ip("::1:0:0:0")).is_err());
        assert_eq!(check_range(ip("::1"), ip("::ffff")), Ok(()));
        // `::` is no device's, in a range as alone (Linux delivers it to this host).
        let e = check_range(ip("::"), ip("::1")).unwrap_err();
        assert!(e.contains("the unspecified address ::"), "{e}");
        assert!(check_range(ip("::1:0:0:0"), ip("::1:0:0:ff")).is_ok());
        assert!(check_range(ip("127.0.0.0"), ip("127.0.0.255")).is_ok());
        // Multicast, 0.0.0.0/8 and the broadcast address: as one address is refused.
        for (a, b) in [
            ("224.0.0.0", "224.0.0.15"),
            ("223.255.255.0", "224.0.0.0"),
            ("0.0.0.0", "0.0.0.3"),
            ("255.255.255.0", "255.255.255.255"),
            ("ff02::", "ff02::3"),
        ] {
            assert!(check_range(ip(a), ip(b)).is_err(), "{a}..{b}");
        }
        for (a, b) in [
            ("1.0.0.0", "1.0.0.255"),
            ("240.0.0.0", "240.0.0.255"),
            ("fec0::", "fec0::ff"),
            (
                "fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ff00",
                "fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            ),
        ] {
            assert!(check_range(ip(a), ip(b)).is_ok(), "{a}..{b}");
        }
        // Link-local: any overlap with fe80::/10.
        for (a, b) in [
            ("fe80::", "fe80::ff"),
            (
                "febf:ffff:ffff:ffff:ffff:ffff:ffff:ff00",
                "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            ),
            ("fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "fe80::"),
        ] {
            let e = check_range(ip(a), ip(b)).unwrap_err();
            assert!(e.contains("link-local (fe80::/10)"), "{e}");
        }
    }

    #[test]
    fn only_one_devices_address_is_a_target() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        for (bad, what) in [
            ("0.0.0.0", "the unspecified address"),
            ("::", "the unspecified address"),
            ("255.255.255.255", "the broadcast address"),
            ("224.0.0.1", "a multicast address"),
            ("239.255.255.250", "a multicast address"),
            ("ff02::1", "a multicast address"),
        ] {
            let e = check_address(ip(bad)).unwrap_err();
            assert!(
                e.starts_with(&format!("{bad} is {what}, not a device")),
                "{e}"
            );
        }
        assert!(check_address(ip("0.0.0.1"))
            .unwrap_err()
            .contains("0.0.0.0/8"));
        for ok in [
            "1.0.0.0",
            "223.255.255.255",
            "240.0.0.1",
            "127.255.255.255",
            "fec0::1",
            "fd00::1",
        ] {
            assert_eq!(check_address(ip(ok)), Ok(ip(ok)));
        }
        // Link-local: without an interface, the kernel picks the link (one with an
        // fe80::/64 route) and the probe leaves there, whatever link the device is on.
        for bad in ["fe80::1", "febf::1", "fe80::1:2:3:4"] {
            let e = check_address(ip(bad)).unwrap_err();
            assert!(
                e.starts_with(&format!("{bad} is link-local (fe80::/10)")),
                "{e}"
            );
            assert!(e.ends_with("global or unique-local address"), "{e}");
        }
    }

    #[test]
    fn sockets_bind_to_their_familys_source_or_are_left_to_the_kernel() {
        let s = SourceAddrs {
            v4: Some(Ipv4Addr::new(127, 0, 0, 9)),
            v6: None,
        };
        assert_eq!(s.bind_addr(false), "127.0.0.9:0".parse().unwrap());
        assert_eq!(s.bind_addr(true), "[::]:0".parse().unwrap());
        let udp = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
        s.bind(&udp, false).unwrap();
        let local = udp.local_addr().unwrap().as_socket().unwrap();
        assert_eq!(local.ip(), IpAddr::V4(Ipv4Addr::new(127, 0, 0, 9)));
        // No source for IPv6: nothing bound (the socket has no address yet).
        let udp6 = Socket::new(Domain::IPV6, Type::DGRAM, Some(Protocol::UDP)).unwrap();
        s.bind(&udp6, true).unwrap();
        let local = udp6.local_addr().unwrap().as_socket().unwrap();
        assert_eq!(local, "[::]:0".parse().unwrap());
        // TEST-NET-1 is nobody's address here: said, by address.
        let gone = SourceAddrs {
            v4: Some(Ipv4Addr::new(192, 0, 2, 77)),
            v6: None,
        };
        let other = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
        let e = gone.bind(&other, false).unwrap_err().to_string();
        assert!(
            e.contains("source address 192.0.2.77: not an address of this host"),
            "{e}"
        );
    }
}
