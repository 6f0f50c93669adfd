//! What the ICMP and SNMP socket drivers share: socket options, their error queues
//! (the ICMP errors that came back for what they sent; public for the walks' sockets
//! too), and when a receive turn lets timeouts be handled.
//!
//! A driver reads its sockets in bounded turns, then expires what timed out. A request
//! or probe expires as of when the turn began: any reply that came by then has been
//! read and counted, so none that arrived in time is judged late. A turn cut short by
//! its budget leaves replies unread, so expiries wait for a turn that reads the
//! sockets empty; after `MAX_CUT_TURNS` cut turns in a row they go ahead all the
//! same, so that a flood of datagrams cannot hold an iteration past its deadline.

use std::io;
use std::mem::size_of;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};

use icmp::Unreachable;

/// `setsockopt(fd, level, name, value)` with `value`'s size.
pub(crate) fn setsockopt<T>(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `value` points to a live `T` of the size passed.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (value as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sets `sock`'s receive buffer to `bytes`: past `net.core.rmem_max` when privileged
/// (`SO_RCVBUFFORCE`), else as far as the kernel allows (not an error).
pub(crate) fn set_recv_buffer(sock: &socket2::Socket, bytes: usize) -> io::Result<()> {
    let want = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    match setsockopt(
        sock.as_raw_fd(),
        libc::SOL_SOCKET,
        libc::SO_RCVBUFFORCE,
        &want,
    ) {
        Ok(()) => Ok(()),
        Err(_) => sock.set_recv_buffer_size(bytes),
    }
}

/// Asks for the ICMP errors of what `fd` sends on its error queue (`IP_RECVERR`,
/// `IPV6_RECVERR`), with the destination they came back for: the kernel tells an
/// unconnected socket nothing of them otherwise. Errors queued count against the
/// receive buffer: the owner must read them ([`read_error_queue`]), or they crowd out
/// its replies. With it on, the kernel also reports each error once as the socket's
/// pending error, the next receive's failure (then the error queue holds it).
pub fn set_recverr(fd: RawFd, v6: bool) -> io::Result<()> {
    let (level, name) = match v6 {
        false => (libc::SOL_IP, libc::IP_RECVERR),
        true => (libc::SOL_IPV6, libc::IPV6_RECVERR),
    };
    setsockopt(fd, level, name, &1 as &libc::c_int)
}

/// Most tries of a send whose first datagram failed ([`SendAttempts`]).
pub const SEND_ATTEMPTS: u32 = 4;

/// Whether a send whose first datagram failed goes again. With `IP_RECVERR` an ICMP
/// error that came back for an earlier datagram is also the socket's pending error,
/// which the next send on a datagram socket (UDP, an ICMP ping socket; not a raw one)
/// returns, whatever its own datagram, and so consumes: left at that, an unreachable
/// host's error failed the request to a live one sent after it. So a failed send is
/// tried again once in any case (a datagram's own error, no route, a firewall's EPERM,
/// fails it again) and again while the error queue held errors (more came meanwhile),
/// [`SEND_ATTEMPTS`] tries in all. One per datagram: a new one after each that went.
#[derive(Debug, Default)]
pub struct SendAttempts(u32);

impl SendAttempts {
    /// A try failed, after which the error queue held `errors_read` messages (now
    /// read): whether to try again.
    pub fn retry(&mut self, errors_read: usize) -> bool {
        self.0 += 1;
        self.0 < SEND_ATTEMPTS && (self.0 == 1 || errors_read > 0)
    }
}

/// What [`read_error_queue`] read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ErrorsRead {
    /// Messages taken off the queue (ICMP errors or not).
    pub messages: usize,
    /// The queue was read empty (or a read failed, which no retry would mend), not cut
    /// at the bound.
    pub emptied: bool,
}

/// Reads up to `max` messages off `fd`'s error queue, handing each ICMP error to `f`
/// with the destination of the datagram it came back for (when the kernel gives it)
/// and the start of that datagram as the sender quoted it, from the header after IP's
/// (the ICMP echo request of a probe, the UDP payload's start of a request: up to 64
/// bytes, enough for a probe's tag).
pub fn read_error_queue(
    fd: RawFd,
    max: usize,
    mut f: impl FnMut(Option<SocketAddr>, &[u8], Unreachable),
) -> ErrorsRead {
    let mut read = ErrorsRead::default();
    while read.messages < max {
        // SAFETY: plain C structs for which all-zero is valid.
        let mut name: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        let mut data = [0u8; 64];
        let mut iov = libc::iovec {
            iov_base: data.as_mut_ptr() as *mut libc::c_void,
            iov_len: data.len(),
        };
        // u64s: aligned for cmsghdr. One sock_extended_err and its offender's address.
        let mut control = [0u64; 32];
        msg.msg_name = &mut name as *mut libc::sockaddr_storage as *mut libc::c_void;
        msg.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = size_of_val(&control);
        // SAFETY: msg points at live buffers of the stated sizes, which outlive the call.
        let r = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
        if r < 0 {
            // EAGAIN: none left.
            read.emptied = true;
            break;
        }
        read.messages += 1;
        let quoted = &data[..(r as usize).min(data.len())];
        // A zeroed name (AF_UNSPEC) where the kernel gave none.
        let dst = sockaddr_to_std(&name);
        // SAFETY: the kernel filled msg's control buffer; the CMSG macros walk it within
        // msg_controllen, and each header's data lies within it.
        let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
        while !cmsg.is_null() {
            let (level, ty, len) =
                unsafe { ((*cmsg).cmsg_level, (*cmsg).cmsg_type, (*cmsg).cmsg_len) };
            let start = unsafe { libc::CMSG_DATA(cmsg) };
            let head = start as usize - cmsg as usize;
            let bytes = unsafe { std::slice::from_raw_parts(start, len.saturating_sub(head)) };
            let unspecified = IpAddr::from(Ipv4Addr::UNSPECIFIED);
            if let Some(u) = icmp_error(level, ty, bytes, dst.map_or(unspecified, |d| d.ip())) {
                f(dst, quoted, u);
            }
            cmsg = unsafe { libc::CMSG_NXTHDR(&msg, cmsg) };
        }
    }
    read
}

/// The ICMP error a control message of the error queue carries (`IP_RECVERR`,
/// `IPV6_RECVERR`: a `sock_extended_err`, then the address of who sent it), for a
/// datagram sent to `dst` (who sent it when the kernel gives no address). `None` for
/// another message, a local error (`SO_EE_ORIGIN_LOCAL`: the kernel's own, a send
/// error already reported), or an ICMP message that does not end the datagram's way.
/// Public for its fuzz target (poller/fuzz, `icmp_error`): what it reads came from the
/// network, whoever sent the ICMP error.
pub fn icmp_error(
    level: libc::c_int,
    ty: libc::c_int,
    data: &[u8],
    dst: IpAddr,
) -> Option<Unreachable> {
    if !matches!(
        (level, ty),
        (libc::SOL_IP, libc::IP_RECVERR) | (libc::SOL_IPV6, libc::IPV6_RECVERR)
    ) {
        return None;
    }
    // u32 ee_errno, u8 ee_origin, u8 ee_type, u8 ee_code, u8 pad, u32 info, u32 data.
    let (origin, icmp_type, code) = (*data.get(4)?, *data.get(5)?, *data.get(6)?);
    // The error's own family, whatever the socket's.
    let v6 = match origin {
        libc::SO_EE_ORIGIN_ICMP => false,
        libc::SO_EE_ORIGIN_ICMP6 => true,
        _ => return None,
    };
    // SO_EE_OFFENDER: the sockaddr right after the 16-byte struct.
    let offender = data.get(16..).and_then(|a| {
        let family = u16::from_ne_bytes(a.get(..2)?.try_into().ok()?);
        match libc::c_int::from(family) {
            libc::AF_INET => {
                let o: [u8; 4] = a.get(4..8)?.try_into().ok()?;
                Some(IpAddr::from(o))
            }
            libc::AF_INET6 => {
                let o: [u8; 16] = a.get(8..24)?.try_into().ok()?;
                Some(IpAddr::from(Ipv6Addr::from(o)).to_canonical())
            }
            _ => None,
        }
    });
    Unreachable::from_icmp(v6, icmp_type, code, offender.unwrap_or(dst))
}

/// The address and port in a `sockaddr_storage` the kernel filled, `None` for a family
/// other than IPv4 and IPv6.
pub(crate) fn sockaddr_to_std(ss: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match libc::c_int::from(ss.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says this storage holds a sockaddr_in, which fits.
            let sin =
                unsafe { &*(ss as *const libc::sockaddr_storage as *const libc::sockaddr_in) };
            let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            Some(SocketAddr::from((ip, u16::from_be(sin.sin_port))))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says this storage holds a sockaddr_in6, which fits.
            let sin6 =
                unsafe { &*(ss as *const libc::sockaddr_storage as *const libc::sockaddr_in6) };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::from((ip, u16::from_be(sin6.sin6_port))))
        }
        _ => None,
    }
}

/// Cut turns in a row after which timeouts are handled all the same.
pub(crate) const MAX_CUT_TURNS: u32 = 4;

/// Counts the receive turns cut short in a row (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct TimeoutGate {
    cut_in_a_row: u32,
}

impl TimeoutGate {
    /// A turn ended, `cut` short by its budget or not: whether timeouts may be handled
    /// now, as of when it began.
    pub(crate) fn after_turn(&mut self, cut: bool) -> bool {
        self.cut_in_a_row = if cut { self.cut_in_a_row + 1 } else { 0 };
        !cut || self.cut_in_a_row > MAX_CUT_TURNS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error queue's control message read: ICMP and ICMPv6 origins, the offender's
    /// address (the destination's when the kernel gives none), and what is not an ICMP
    /// error (a local one, another message, a cut one) read as none.
    #[test]
    fn error_queue_messages_are_read_defensively() {
        let ee = |origin: u8, t: u8, c: u8, offender: &[u8]| {
            let mut d = vec![0u8; 16];
            d[..4].copy_from_slice(&111u32.to_ne_bytes());
            d[4..7].copy_from_slice(&[origin, t, c]);
            d.extend_from_slice(offender);
            d
        };
        let mut sin = vec![0u8; 16];
        sin[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        sin[4..8].copy_from_slice(&[127, 0, 223, 9]);
        let dst: IpAddr = "127.0.223.1".parse().unwrap();
        let read = |level, ty, d: &[u8]| icmp_error(level, ty, d, dst);
        let port = read(
            libc::SOL_IP,
            libc::IP_RECVERR,
            &ee(libc::SO_EE_ORIGIN_ICMP, 3, 3, &sin),
        )
        .unwrap();
        assert_eq!(port.kind, icmp::UnreachableKind::Port);
        assert_eq!(port.from, "127.0.223.9".parse::<IpAddr>().unwrap());
        // No offender (AF_UNSPEC): the destination's address.
        let bare = ee(libc::SO_EE_ORIGIN_ICMP, 3, 1, &[0u8; 16]);
        let host = read(libc::SOL_IP, libc::IP_RECVERR, &bare).unwrap();
        assert_eq!((host.kind, host.from), (icmp::UnreachableKind::Host, dst));
        let mut sin6 = vec![0u8; 28];
        sin6[..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
        sin6[23] = 1;
        let v6 = read(
            libc::SOL_IPV6,
            libc::IPV6_RECVERR,
            &ee(libc::SO_EE_ORIGIN_ICMP6, 1, 4, &sin6),
        )
        .unwrap();
        assert_eq!(v6.from, "::1".parse::<IpAddr>().unwrap());
        let local = ee(libc::SO_EE_ORIGIN_LOCAL, 3, 3, &sin);
        assert_eq!(read(libc::SOL_IP, libc::IP_RECVERR, &local), None);
        let icmp = ee(libc::SO_EE_ORIGIN_ICMP, 3, 3, &sin);
        assert_eq!(read(libc::SOL_IP, libc::IP_PKTINFO, &icmp), None);
        for cut in 0..icmp.len() {
            // Never a panic; the error itself needs its first 7 bytes.
            let r = read(libc::SOL_IP, libc::IP_RECVERR, &icmp[..cut]);
            assert_eq!(r.is_some(), cut >= 7, "{cut}");
        }
    }

    /// A failed send goes again once (its error may have been an earlier datagram's),
    /// then only while errors kept coming, never past SEND_ATTEMPTS tries.
    #[test]
    fn a_failed_send_is_tried_again_while_errors_were_pending() {
        let mut a = SendAttempts::default();
        assert!(a.retry(0), "once, even with nothing read");
        assert!(!a.retry(0), "the datagram's own error");
        let mut a = SendAttempts::default();
        assert!((1..SEND_ATTEMPTS).all(|_| a.retry(3)));
        assert!(
            !a.retry(3),
            "a flood of errors cannot hold a datagram for good"
        );
    }

    #[test]
    fn cut_turns_hold_timeouts_a_few_turns_at_most() {
        let mut g = TimeoutGate::default();
        assert!(g.after_turn(false));
        assert!((0..MAX_CUT_TURNS).all(|_| !g.after_turn(true)));
        assert!(g.after_turn(true), "a flood cannot hold them for good");
        assert!(g.after_turn(false));
        assert!(
            !g.after_turn(true),
            "the count starts again after a full turn"
        );
    }
}
