//! Runs of addresses: a `[[host_ranges]]` entry's `cidr` or `range`, and `sweep`'s
//! targets. One type serves both, so that a CIDR or a range means the same addresses
//! to the daemon and to the sweep that checks it by hand.
//!
//! Invariant: a span's addresses are one unbroken run, from [`Span::bounds`]'s first to
//! its last, both included, of one address family: what the config's overlap checks
//! (intervals) and [`Span::hosts`] (counting, then expanding) rely on.

use poller::source::bits;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A run of addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Span {
    /// A prefix's device addresses: all but the network and broadcast addresses of an
    /// IPv4 prefix shorter than /31, and all but the network address (the Subnet-Router
    /// anycast address, RFC 4291, answered by a router of the subnet) of an IPv6 prefix
    /// shorter than /127. /31 and /127 are point-to-point links (RFC 3021, RFC 6164):
    /// both addresses. `fping -g` expands a CIDR so too.
    Net(ipnet::IpNet),
    /// Every address from the first to the last, both included, as `fping -g FIRST
    /// LAST` and Zabbix's discovery ranges: network and broadcast addresses too, the
    /// range says which.
    Range(IpAddr, IpAddr),
}

impl Span {
    /// The first and last of its addresses.
    pub fn bounds(self) -> (IpAddr, IpAddr) {
        match self {
            Span::Range(first, last) => (first, last),
            Span::Net(net) => {
                let host_bits = net.max_prefix_len() - net.prefix_len();
                let (lo, hi) = (bits(net.network()), bits(net.broadcast()));
                let (skip_lo, skip_hi) = match net {
                    ipnet::IpNet::V4(_) if host_bits >= 2 => (1, 1),
                    ipnet::IpNet::V6(_) if host_bits >= 2 => (1, 0),
                    _ => (0, 0),
                };
                let v4 = net.addr().is_ipv4();
                (from_bits(v4, lo + skip_lo), from_bits(v4, hi - skip_hi))
            }
        }
    }

    /// How many addresses (`u128::MAX` for all of IPv6's), and they, in order.
    pub fn hosts(self) -> (u128, impl Iterator<Item = IpAddr>) {
        let (first, last) = self.bounds();
        let (lo, hi) = (bits(first), bits(last));
        let v4 = first.is_ipv4();
        (
            (hi - lo).saturating_add(1),
            (lo..=hi).map(move |v| from_bits(v4, v)),
        )
    }

    /// Whether `ip` is one of its addresses.
    pub fn holds(self, ip: IpAddr) -> bool {
        let (first, last) = self.bounds();
        // `IpAddr` orders every IPv4 address before every IPv6 one: an address of the
        // other family is outside.
        first <= ip && ip <= last
    }

    /// The key of a `[[host_ranges]]` entry that gives a span of this kind.
    pub fn key(self) -> &'static str {
        match self {
            Span::Net(_) => "cidr",
            Span::Range(..) => "range",
        }
    }
}

/// As written in the config: `198.51.100.0/24`, `198.51.100.10-198.51.100.99`.
impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Span::Net(net) => write!(f, "{net}"),
            Span::Range(first, last) => write!(f, "{first}-{last}"),
        }
    }
}

/// A span's addresses less some of them (a `[[host_ranges]]` entry's `exclude`): runs of
/// addresses, in order and apart, none empty but for a span with every address left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Addresses {
    pub span: Span,
    /// The runs kept, first and last address as numbers ([`bits`]), ascending.
    kept: Vec<(u128, u128)>,
}

impl Addresses {
    /// `span` less the addresses of `left_out` (runs, each first and last address, of
    /// the span's family; those outside it leave out nothing).
    pub fn new(span: Span, left_out: &[(IpAddr, IpAddr)]) -> Addresses {
        let (first, last) = span.bounds();
        let (lo, hi) = (bits(first), bits(last));
        let mut holes: Vec<(u128, u128)> = left_out
            .iter()
            .filter(|(a, _)| a.is_ipv4() == first.is_ipv4())
            .map(|&(a, b)| (bits(a).max(lo), bits(b).min(hi)))
            .filter(|(a, b)| a <= b)
            .collect();
        holes.sort_unstable();
        let mut kept = Vec::new();
        let mut next = Some(lo);
        for (a, b) in holes {
            let Some(from) = next else { break };
            if a > from {
                kept.push((from, a - 1));
            }
            if b >= from {
                next = b.checked_add(1).filter(|&n| n <= hi);
            }
        }
        if let Some(from) = next {
            kept.push((from, hi));
        }
        Addresses { span, kept }
    }

    /// The runs kept, each a range of its own.
    fn runs(&self) -> impl Iterator<Item = Span> + '_ {
        let v4 = self.span.bounds().0.is_ipv4();
        (self.kept.iter()).map(move |&(a, b)| Span::Range(from_bits(v4, a), from_bits(v4, b)))
    }

    /// How many addresses.
    pub fn count(&self) -> u128 {
        self.runs()
            .map(|r| r.hosts().0)
            .fold(0, u128::saturating_add)
    }

    /// The addresses, in order.
    pub fn iter(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.runs().flat_map(|r| r.hosts().1)
    }

    /// Whether `ip` is one of them.
    pub fn holds(&self, ip: IpAddr) -> bool {
        let v = bits(ip);
        let after = self.kept.partition_point(|&(a, _)| a <= v);
        self.span.holds(ip) && after > 0 && v <= self.kept[after - 1].1
    }

    /// How many addresses both hold (of one family).
    pub fn shared(&self, other: &Addresses) -> u128 {
        if self.span.bounds().0.is_ipv4() != other.span.bounds().0.is_ipv4() {
            return 0;
        }
        let (mut i, mut j, mut n) = (0, 0, 0u128);
        while let (Some(&(a, b)), Some(&(c, d))) = (self.kept.get(i), other.kept.get(j)) {
            let (lo, hi) = (a.max(c), b.min(d));
            if lo <= hi {
                n = n.saturating_add((hi - lo).saturating_add(1));
            }
            match b < d {
                true => i += 1,
                false => j += 1,
            }
        }
        n
    }
}

/// A `[[host_ranges]]` entry's `exclude` value: an address, a CIDR (every address of
/// it: an exclusion says which, network and broadcast addresses included) or a range;
/// its first and last address.
pub fn parse_exclusion(text: &str) -> Result<(IpAddr, IpAddr), String> {
    if let Some(range) = parse_range(text) {
        return range.map(Span::bounds);
    }
    let t = text.trim();
    if let Ok(ip) = t.parse::<IpAddr>() {
        return Ok((ip, ip));
    }
    match t.parse::<ipnet::IpNet>() {
        // An interface's address pasted: the whole network was most likely not meant
        // (as a range's `cidr` refuses it).
        Ok(net) if net.addr() != net.network() => Err(format!(
            "{t} has host bits set: write the network, {}, or the address alone, {}",
            net.trunc(),
            net.addr()
        )),
        Ok(net) => Ok((net.network(), net.broadcast())),
        Err(_) => Err(format!(
            "{text:?} is not an address, a CIDR or a range (FIRST-LAST) to leave out"
        )),
    }
}

fn from_bits(v4: bool, v: u128) -> IpAddr {
    match v4 {
        true => IpAddr::V4(Ipv4Addr::from(v as u32)),
        false => IpAddr::V6(Ipv6Addr::from(v)),
    }
}

/// `text` as `FIRST-LAST` when it is written so: `None` when it is not a range at all
/// (no dash after an address: a name with a dash is a name), else the range or why it
/// is none. LAST may be an IPv4 address's last number alone (`192.0.2.1-254`, as nmap
/// and Zabbix's discovery ranges write it). Both ends must be devices' addresses and
/// the addresses between them too ([`poller::source::check_range`]).
pub fn parse_range(text: &str) -> Option<Result<Span, String>> {
    let (first, last) = text.trim().split_once('-')?;
    let first: IpAddr = first.trim().parse().ok()?;
    let last = last.trim();
    let bad = |why: &str| format!("invalid range {:?}: {why}", text.trim());
    Some((|| {
        let last: IpAddr = match (first, last.parse::<u8>()) {
            (IpAddr::V4(a), Ok(n)) => {
                let [x, y, z, _] = a.octets();
                IpAddr::from([x, y, z, n])
            }
            _ => last.parse().map_err(|_| {
                bad(&format!(
                    "{last:?} is neither an IP address nor an IPv4 address's last number (0-255)"
                ))
            })?,
        };
        if first.is_ipv4() != last.is_ipv4() {
            return Err(bad("its ends are of two address families"));
        }
        if last < first {
            return Err(bad("it runs backwards (write the lower address first)"));
        }
        for ip in [first, last] {
            poller::source::check_address(ip)?;
        }
        poller::source::check_range(first, last)?;
        Ok(Span::Range(first, last))
    })())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> Span {
        Span::Net(s.parse().unwrap())
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn all(s: Span) -> Vec<String> {
        s.hosts().1.map(|a| a.to_string()).collect()
    }

    #[test]
    fn a_networks_addresses_are_its_devices() {
        assert_eq!(all(net("127.1.0.0/30")), ["127.1.0.1", "127.1.0.2"]);
        assert_eq!(all(net("127.1.0.0/31")), ["127.1.0.0", "127.1.0.1"]);
        assert_eq!(all(net("127.1.0.7/32")), ["127.1.0.7"]);
        assert_eq!(
            all(net("2001:db8::/126")),
            ["2001:db8::1", "2001:db8::2", "2001:db8::3"]
        );
        assert_eq!(all(net("2001:db8::/127")), ["2001:db8::", "2001:db8::1"]);
        assert_eq!(net("127.0.0.0/8").hosts().0, (1 << 24) - 2);
        assert_eq!(net("::/0").hosts().0, u128::MAX);
        // The count is what the iterator gives.
        for s in ["127.1.0.0/27", "2001:db8::/120", "127.1.0.0/31"] {
            let (n, hosts) = net(s).hosts();
            assert_eq!(n, hosts.count() as u128, "{s}");
        }
    }

    #[test]
    fn holds_is_the_run_of_addresses() {
        let n = net("127.1.0.0/29");
        assert!(!n.holds(ip("127.1.0.0")), "the network address");
        assert!(n.holds(ip("127.1.0.1")) && n.holds(ip("127.1.0.6")));
        assert!(!n.holds(ip("127.1.0.7")), "the broadcast address");
        assert!(!n.holds(ip("::1")) && !net("::/1").holds(ip("127.1.0.1")));
        let r = parse_range("127.1.0.7-127.1.0.8").unwrap().unwrap();
        assert!(r.holds(ip("127.1.0.7")) && r.holds(ip("127.1.0.8")));
        assert!(!r.holds(ip("127.1.0.6")) && !r.holds(ip("127.1.0.9")));
        assert_eq!(r.bounds(), (ip("127.1.0.7"), ip("127.1.0.8")));
        assert_eq!(r.to_string(), "127.1.0.7-127.1.0.8");
        assert_eq!((r.key(), n.key()), ("range", "cidr"));
    }

    /// A span less what is left out: the runs kept, counted, expanded and held alike;
    /// what lies outside or is of the other family leaves out nothing; everything left
    /// out leaves nothing.
    #[test]
    fn addresses_are_a_span_less_what_is_left_out() {
        let out = |list: &[&str]| -> Vec<(IpAddr, IpAddr)> {
            list.iter().map(|t| parse_exclusion(t).unwrap()).collect()
        };
        let a = Addresses::new(
            net("127.1.0.0/28"),
            &out(&[
                "127.1.0.1",
                "127.1.0.4-5",
                "127.1.0.12/30",
                "127.1.1.0/24",
                "::1",
            ]),
        );
        let want = [
            "127.1.0.2",
            "127.1.0.3",
            "127.1.0.6",
            "127.1.0.7",
            "127.1.0.8",
            "127.1.0.9",
            "127.1.0.10",
            "127.1.0.11",
        ];
        assert_eq!(a.iter().map(|i| i.to_string()).collect::<Vec<_>>(), want);
        assert_eq!(a.count(), 8);
        for k in 0..=15u8 {
            let addr = IpAddr::from([127, 1, 0, k]);
            assert_eq!(
                a.holds(addr),
                want.contains(&addr.to_string().as_str()),
                "{addr}"
            );
        }
        // Overlapping holes, and one to the span's end.
        let b = Addresses::new(
            net("127.1.0.0/28"),
            &out(&["127.1.0.2-6", "127.1.0.3-9", "127.1.0.14"]),
        );
        assert_eq!(
            all_of(&b),
            [
                "127.1.0.1",
                "127.1.0.10",
                "127.1.0.11",
                "127.1.0.12",
                "127.1.0.13"
            ]
        );
        assert_eq!(a.shared(&b), 2, "10 and 11: both hold them");
        let none = Addresses::new(net("127.1.0.0/30"), &out(&["127.1.0.0/30"]));
        assert_eq!((none.count(), none.iter().count()), (0, 0));
        assert!(!none.holds(ip("127.1.0.1")));
        assert_eq!(a.shared(&none), 0);
        let v6 = Addresses::new(net("::1/128"), &[]);
        assert_eq!((v6.count(), a.shared(&v6)), (1, 0));
        assert_eq!(
            parse_exclusion("127.1.0.0/24"),
            Ok((ip("127.1.0.0"), ip("127.1.0.255"))),
            "every address of it"
        );
        assert_eq!(
            parse_exclusion("127.1.0.1/24").unwrap_err(),
            "127.1.0.1/24 has host bits set: write the network, 127.1.0.0/24, or the address alone, 127.1.0.1"
        );
        assert!(parse_exclusion("cpe-1")
            .unwrap_err()
            .contains("not an address, a CIDR or a range"));
    }

    fn all_of(a: &Addresses) -> Vec<String> {
        a.iter().map(|i| i.to_string()).collect()
    }

    #[test]
    fn ranges_parse_as_fping_and_zabbix_write_them() {
        let r = |s: &str| parse_range(s).unwrap();
        assert_eq!(
            all(r("127.1.0.254-127.1.1.1").unwrap()),
            ["127.1.0.254", "127.1.0.255", "127.1.1.0", "127.1.1.1"]
        );
        assert_eq!(r("127.1.2.1-3").unwrap().to_string(), "127.1.2.1-127.1.2.3");
        assert_eq!(r(" ::1 - ::1 ").unwrap().hosts().0, 1);
        // Not a range: a name with a dash, a CIDR, an address.
        for s in ["host-1", "127.1.0.0/24", "127.1.0.1"] {
            assert!(parse_range(s).is_none(), "{s}");
        }
        let err = |s: &str| r(s).unwrap_err();
        assert!(err("127.1.0.9-127.1.0.1").contains("runs backwards"));
        assert!(err("127.1.0.1-::1").contains("two address families"));
        assert!(err("127.1.0.1-256").contains("neither an IP address"));
        assert!(
            err("224.0.0.1-224.0.0.5").contains("multicast"),
            "{}",
            err("224.0.0.1-224.0.0.5")
        );
        assert!(
            err("0.0.0.1-0.0.0.3").contains("0.0.0.1"),
            "{}",
            err("0.0.0.1-0.0.0.3")
        );
    }
}
