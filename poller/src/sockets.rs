//! What the ICMP and SNMP socket drivers share: socket options, and when a receive turn
//! lets timeouts be handled.
//!
//! A driver reads its sockets in bounded turns, then expires what timed out. A request
//! or probe expires as of when the turn began: any reply that came by then has been
//! read and counted, so none that arrived in time is judged late. A turn cut short by
//! its budget leaves replies unread, so expiries wait for a turn that reads the
//! sockets empty; after [`MAX_CUT_TURNS`] cut turns in a row they go ahead all the
//! same, so that a flood of datagrams cannot hold an iteration past its deadline.

use std::io;
use std::os::fd::{AsRawFd, RawFd};

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
