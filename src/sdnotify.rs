//! The service manager's readiness protocol (systemd's `sd_notify`, `Type=notify`):
//! `run` says when it has started (`READY=1`), when a SIGHUP's reload begins
//! (`RELOADING=1`) and has ended (`READY=1` again), when it stops (`STOPPING=1`), and
//! what it polls (`STATUS=`, which `systemctl status` shows).
//!
//! Why: with `Type=simple`, `systemctl start` returns once the process is forked, so a
//! `systemctl reload` right after it could reach the process before its SIGHUP handler
//! was in place (the first millisecond after the exec, before any of netpoller's code
//! runs, when SIGHUP's default action ends the process), and a start that fails at the
//! ClickHouse schema check read as started. With `Type=notify` the start returns when
//! the daemon polls, and a reload when the new config runs (or was refused).
//!
//! Invariants: nothing is sent unless `$NOTIFY_SOCKET` names a socket (a daemon run by
//! hand, or by another manager, sends nothing); a send never blocks and never fails
//! the daemon (the manager not listening is its own concern: logged at debug).

use std::io;
use std::os::unix::net::UnixDatagram;

/// Sends `state` (`KEY=value` lines) to the socket `$NOTIFY_SOCKET` names: a path, or
/// `@name` for an abstract socket. Nothing without `$NOTIFY_SOCKET`.
pub fn notify(state: &str) {
    let Some(to) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    if let Err(e) = send(&to, state) {
        tracing::debug!(socket = ?to, error = %e, "sd_notify: not sent");
    }
}

fn send(to: &std::ffi::OsStr, state: &str) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt as _;
    let socket = UnixDatagram::unbound()?;
    socket.set_nonblocking(true)?;
    let to = to.as_bytes();
    match to.strip_prefix(b"@") {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt as _;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
            socket.send_to_addr(state.as_bytes(), &addr)?;
        }
        None => {
            socket.send_to(state.as_bytes(), std::ffi::OsStr::from_bytes(to))?;
        }
    }
    Ok(())
}

/// `RELOADING=1` with the monotonic time it began, which `Type=notify-reload`
/// (systemd 253+) asks for and older managers ignore.
pub fn reloading() -> String {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime fills the timespec on the stack.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    let usec = t.tv_sec as u64 * 1_000_000 + t.tv_nsec as u64 / 1_000;
    format!("RELOADING=1\nMONOTONIC_USEC={usec}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both forms of `$NOTIFY_SOCKET` are reached: a path and an abstract name
    /// (systemd gives a path; other managers, and `systemd-notify`'s tests, `@`).
    #[test]
    fn a_state_reaches_a_path_socket_and_an_abstract_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let listener = UnixDatagram::bind(&path).unwrap();
        send(path.as_os_str(), "READY=1").unwrap();
        let mut buf = [0u8; 256];
        let n = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");

        use std::os::linux::net::SocketAddrExt as _;
        let name = format!("netpoller-sdnotify-test-{}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let abstract_listener = UnixDatagram::bind_addr(&addr).unwrap();
        send(std::ffi::OsStr::new(&format!("@{name}")), "STOPPING=1").unwrap();
        let n = abstract_listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"STOPPING=1");
    }
}
