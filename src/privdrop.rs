//! Privileges once the ICMP sockets are open: from then on the daemon holds no
//! CAP_NET_RAW, and after `--user` no capability at all.
//!
//! **Why nothing needs CAP_NET_RAW later** (checked against poller's ICMP and SNMP
//! drivers and `netpoller run`; keep it true): the raw ICMP sockets are opened once, at
//! start, before the calls here, and never again. A reload opens none: more sockets
//! (`daemon.icmp_concurrent_sweeps`) or engine threads apply at the next start, and the
//! reload warns so; an ICMPv6 socket that did not open stays closed until a restart.
//! The kernel checks CAP_NET_RAW when a raw socket is created (`socket(2)`), not when an
//! open one is used, and nothing done to the open sockets needs a capability: the
//! sweeps' `sendmmsg`/`recvmmsg` (no control message is sent), the identifier filter
//! attached per sweep (`SO_ATTACH_FILTER`, classic BPF), `IP_MTU_DISCOVER` per sweep,
//! `getsockopt` (`SO_RCVBUF`, `SO_MEMINFO`). `ICMP_FILTER`, `SO_TIMESTAMPNS`, the
//! receive buffer (`SO_RCVBUFFORCE`, which needs CAP_NET_ADMIN, not CAP_NET_RAW) and the
//! source address are set when a socket opens; nothing sets `SO_MARK`,
//! `SO_BINDTODEVICE`, `IP_TRANSPARENT` or `IP_HDRINCL`. The SNMP sockets opened later
//! for slow devices are UDP. A daemon that kept CAP_NET_RAW could, if compromised, open
//! raw and packet sockets to read and forge any traffic of the host.
//!
//! Two ways to give it up, both called from `main` before any other thread exists:
//!
//! [`drop_privileges`] (`run --user`, `daemon.user`): switch to a user, holding no
//! capability. Order of operations (each step checked, the first failure is returned by
//! name):
//! 1. look the user up (`getpwnam_r`);
//! 2. empty the bounding set (best effort: needs CAP_SETPCAP), so that executing a
//!    set-user-ID-root or file-capability program gives no capability back;
//! 3. `setgroups([])`, `setresgid(gid)`, `setresuid(uid)` (all of real/effective/saved, so
//!    root cannot be regained), skipped when the process already runs as that user
//!    (e.g. systemd `User=` + `AmbientCapabilities=CAP_NET_RAW`, whose `initgroups`
//!    lists the primary group as the only supplementary one: no extra group);
//! 4. `capset`: effective = permitted = inheritable = {}; the ambient set is cleared
//!    (the daemon never executes programs, and children must not inherit rights);
//! 5. verify from `/proc/thread-self/status` (uids, gids, groups, CapEff, CapPrm, CapInh,
//!    CapAmb) and that `setuid(0)` now fails.
//!
//! [`shed_net_raw`] (no user to switch to: systemd's `User=` +
//! `AmbientCapabilities=CAP_NET_RAW`, or a `setcap cap_net_raw+ep` binary): a process
//! that is not root gives up CAP_NET_RAW from its effective, permitted, inheritable and
//! ambient sets, and keeps any other capability it was given (the operator's choice,
//! for work that comes later: a metrics port below 1024 is bound after this, SNMP
//! sockets opened for slow devices set their receive buffer then). Root is left as it
//! is: root without capabilities still owns every root-owned file (the binary, `/etc`)
//! and gets them all back by executing a program, so shedding them would not make it
//! safe; `--user` is the way to run a daemon started as root.
//!
//! **Threads.** Capabilities are per thread. glibc's `setgroups`/`setresgid`/`setresuid`
//! apply the ids to every thread of the process, but `capset` affects only the calling
//! thread. Hence the calls from `main` **before** the tokio runtime or any thread is
//! started (and after opening the raw sockets, which stay usable: a descriptor keeps
//! the rights it was opened with). Verification reads the calling thread's status,
//! which in a single-threaded process is the process's.
//!
//! Opening sockets is not done here: the caller opens them (poller's ICMP driver, whose
//! error already explains how to grant CAP_NET_RAW) before calling either function.

use anyhow::{bail, Context as _};
use std::ffi::CString;
use std::io;

/// Capability number of CAP_NET_RAW (`linux/capability.h`).
pub const CAP_NET_RAW: u32 = 13;
const CAP_SETPCAP: u32 = 8;

/// Identity and capability sets of the calling thread (from `/proc/thread-self/status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caps {
    /// Real, effective, saved and filesystem uid.
    pub uids: [u32; 4],
    /// Real, effective, saved and filesystem gid.
    pub gids: [u32; 4],
    /// Supplementary groups.
    pub groups: Vec<u32>,
    /// `CapInh`, bit `n` = capability `n`.
    pub inheritable: u64,
    /// `CapPrm`.
    pub permitted: u64,
    /// `CapEff`.
    pub effective: u64,
    /// `CapBnd`.
    pub bounding: u64,
    /// `CapAmb` (0 on kernels before 4.3, which lack the line).
    pub ambient: u64,
}

impl Caps {
    /// Whether capability `cap` is effective.
    pub fn has_effective(&self, cap: u32) -> bool {
        self.effective & (1u64 << cap) != 0
    }

    /// The capabilities in any of the effective, permitted, inheritable and ambient
    /// sets: what the process can use or pass on (the bounding set only limits).
    pub fn held(&self) -> u64 {
        self.effective | self.permitted | self.inheritable | self.ambient
    }

    fn parse(status: &str) -> anyhow::Result<Caps> {
        fn field<'a>(status: &'a str, name: &str) -> Option<&'a str> {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
        }
        fn ids(status: &str, name: &str) -> anyhow::Result<[u32; 4]> {
            let v = field(status, name).with_context(|| format!("no {name} line"))?;
            let parsed: Vec<u32> = v
                .split_whitespace()
                .map(str::parse)
                .collect::<Result<_, _>>()?;
            parsed
                .try_into()
                .map_err(|v| anyhow::anyhow!("{name}: expected 4 ids, got {v:?}"))
        }
        fn mask(status: &str, name: &str, required: bool) -> anyhow::Result<u64> {
            match field(status, name) {
                Some(v) => u64::from_str_radix(v, 16).with_context(|| format!("{name}: {v:?}")),
                None if !required => Ok(0),
                None => bail!("no {name} line"),
            }
        }
        let groups = field(status, "Groups").unwrap_or("");
        Ok(Caps {
            uids: ids(status, "Uid")?,
            gids: ids(status, "Gid")?,
            groups: groups
                .split_whitespace()
                .map(str::parse)
                .collect::<Result<_, _>>()?,
            inheritable: mask(status, "CapInh", true)?,
            permitted: mask(status, "CapPrm", true)?,
            effective: mask(status, "CapEff", true)?,
            bounding: mask(status, "CapBnd", true)?,
            ambient: mask(status, "CapAmb", false)?,
        })
    }
}

/// Reads the calling thread's ids and capability sets. In a single-threaded process
/// (where [`drop_privileges`] belongs) this is the process's state.
pub fn current_caps() -> anyhow::Result<Caps> {
    let text = std::fs::read_to_string("/proc/thread-self/status")
        .or_else(|_| std::fs::read_to_string("/proc/self/status")) // kernels before 3.17
        .context("reading /proc/thread-self/status")?;
    Caps::parse(&text).context("parsing /proc/thread-self/status")
}

/// Switches the process to `user` (its primary group, no supplementary groups) holding
/// no capability. Sockets opened before stay usable. Must run before any other thread
/// exists (see the module docs). Errors name the step that failed; the process should
/// then exit.
pub fn drop_privileges(user: &str) -> anyhow::Result<()> {
    let (uid, gid) = lookup_user(user)?;
    let before = current_caps()?;
    warn_if_threaded();
    let switch =
        before.uids != [uid; 4] || before.gids != [gid; 4] || other_groups(&before.groups, gid);

    // SAFETY (all blocks below): plain syscalls on integers / valid pointers to locals.
    (|| {
        if before.has_effective(CAP_SETPCAP) {
            for cap in 0..=last_cap() {
                if before.bounding & (1 << cap) != 0 {
                    prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong)
                        .with_context(|| format!("prctl(PR_CAPBSET_DROP, {cap})"))?;
                }
            }
        }
        if switch {
            if unsafe { libc::setgroups(0, std::ptr::null()) } != 0 {
                return Err(with_hint(
                    io::Error::last_os_error(),
                    "setgroups([])",
                    "CAP_SETGID",
                ));
            }
            if unsafe { libc::setresgid(gid, gid, gid) } != 0 {
                return Err(with_hint(
                    io::Error::last_os_error(),
                    &format!("setresgid({gid})"),
                    "CAP_SETGID",
                ));
            }
            // Leaving uid 0 clears the effective, permitted and ambient sets (no
            // PR_SET_KEEPCAPS: nothing is kept); the inheritable set stays, and a
            // process already the user keeps all: the capset below empties them.
            if unsafe { libc::setresuid(uid, uid, uid) } != 0 {
                return Err(with_hint(
                    io::Error::last_os_error(),
                    &format!("setresuid({uid})"),
                    "CAP_SETUID",
                ));
            }
        }
        capset(0, 0, 0).context("capset(effective=permitted=inheritable=0)")?;
        // Ambient capabilities exist since Linux 4.3; EINVAL before that means "none".
        if let Err(e) = prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
        ) {
            if e.raw_os_error() != Some(libc::EINVAL) {
                return Err(anyhow::Error::new(e).context("prctl(PR_CAP_AMBIENT_CLEAR_ALL)"));
            }
        }
        Ok(())
    })()
    .with_context(|| format!("dropping privileges to user {user:?} (uid {uid}, gid {gid})"))?;
    verify(uid, gid).with_context(|| format!("verifying the switch to user {user:?}"))
}

fn verify(uid: u32, gid: u32) -> anyhow::Result<()> {
    let now = current_caps()?;
    if now.uids != [uid; 4] {
        bail!("uids are {:?}, expected {uid}", now.uids);
    }
    if now.gids != [gid; 4] {
        bail!("gids are {:?}, expected {gid}", now.gids);
    }
    if other_groups(&now.groups, gid) {
        bail!("supplementary groups {:?} remain", now.groups);
    }
    none_held(&now, u64::MAX)?;
    if uid != 0 {
        // SAFETY: a failing setuid changes nothing; success would be the bug we check for.
        if unsafe { libc::setuid(0) } == 0 {
            bail!("setuid(0) succeeded after the drop: root can be regained");
        }
    }
    Ok(())
}

/// What [`shed_net_raw`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shed {
    /// CAP_NET_RAW was held and is now in none of the sets.
    Dropped,
    /// The process did not hold it (ping sockets, or it was never granted).
    NotHeld,
    /// The process is root (a real, effective or saved uid of 0): left as it is.
    Root,
}

/// Gives up CAP_NET_RAW once the sockets are open, in a process that is not root and
/// has no user to switch to; any other capability stays, and root is left as it is
/// (see the module docs). Must run before any other thread exists. An error says what
/// failed; the process is then as it was.
pub fn shed_net_raw() -> anyhow::Result<Shed> {
    let before = current_caps()?;
    if before.uids[..3].contains(&0) {
        return Ok(Shed::Root);
    }
    let raw = 1 << CAP_NET_RAW;
    if before.held() & raw == 0 {
        return Ok(Shed::NotHeld);
    }
    warn_if_threaded();
    // Lowering needs no privilege. The kernel keeps the ambient set within permitted
    // and inheritable, so it loses CAP_NET_RAW with them.
    capset(
        before.effective & !raw,
        before.permitted & !raw,
        before.inheritable & !raw,
    )
    .context("capset without CAP_NET_RAW")?;
    none_held(&current_caps()?, raw).context("verifying that CAP_NET_RAW is gone")?;
    Ok(Shed::Dropped)
}

/// Fails naming the sets when `now` holds any capability of `mask` in its effective,
/// permitted, inheritable or ambient set.
fn none_held(now: &Caps, mask: u64) -> anyhow::Result<()> {
    if now.held() & mask != 0 {
        bail!(
            "CapEff={:016x} CapPrm={:016x} CapInh={:016x} CapAmb={:016x}, expected none of \
             {mask:016x}",
            now.effective,
            now.permitted,
            now.inheritable,
            now.ambient
        );
    }
    Ok(())
}

/// Capabilities are per thread: the calls here change (and verify) the calling
/// thread's only, so other threads would be left as they were.
fn warn_if_threaded() {
    if let Ok(threads) = thread_count() {
        if threads > 1 {
            tracing::warn!(
                threads,
                "changing capabilities in a multi-threaded process: they are per thread, \
                 and only this thread's are changed (call it before starting the runtime)"
            );
        }
    }
}

/// Whether `groups` (supplementary) grant anything beyond the primary group `gid`. A
/// process started as the user by `initgroups` (systemd's `User=`, login, su) lists its
/// primary group there too: that is no extra group, and without CAP_SETGID it could not
/// be cleared anyway.
fn other_groups(groups: &[u32], gid: u32) -> bool {
    groups.iter().any(|&g| g != gid)
}

/// `(uid, primary gid)` of `user`, via `getpwnam_r` (NSS: files, LDAP, systemd's dynamic
/// users).
pub fn lookup_user(user: &str) -> anyhow::Result<(u32, u32)> {
    let name = CString::new(user).with_context(|| format!("user name {user:?} contains NUL"))?;
    let mut buf = vec![0 as libc::c_char; 1024];
    loop {
        // SAFETY: zeroed passwd is a valid out-parameter; buf outlives the call and its
        // length is passed; result points into pwd or is null.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        let rc = unsafe {
            libc::getpwnam_r(
                name.as_ptr(),
                &mut pwd,
                buf.as_mut_ptr(),
                buf.len(),
                &mut result,
            )
        };
        if rc == libc::ERANGE && buf.len() < 1 << 20 {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc))
                .with_context(|| format!("looking up user {user:?}"));
        }
        if result.is_null() {
            bail!("no such user {user:?} (see getent passwd {user})");
        }
        return Ok((pwd.pw_uid, pwd.pw_gid));
    }
}

fn thread_count() -> anyhow::Result<u32> {
    let text = std::fs::read_to_string("/proc/self/status")?;
    let v = text
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .context("no Threads line")?;
    Ok(v.trim().parse()?)
}

fn last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(40)
        .min(63)
}

fn with_hint(e: io::Error, what: &str, cap: &str) -> anyhow::Error {
    let hint = if e.raw_os_error() == Some(libc::EPERM) {
        format!(" (needs {cap}: start as root to use --user, or run as the target user directly)")
    } else {
        String::new()
    };
    anyhow::Error::new(e).context(format!("{what} failed{hint}"))
}

fn prctl(option: libc::c_int, arg: libc::c_ulong) -> io::Result<()> {
    // SAFETY: the options used here take integer arguments only.
    if unsafe {
        libc::prctl(
            option,
            arg,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    } == 0
    {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `capset(2)` for the calling thread, 64-bit masks (`_LINUX_CAPABILITY_VERSION_3`).
fn capset(effective: u64, permitted: u64, inheritable: u64) -> io::Result<()> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let split = |m: u64| (m as u32, (m >> 32) as u32);
    let (e, p, i) = (split(effective), split(permitted), split(inheritable));
    let data = [
        Data {
            effective: e.0,
            permitted: p.0,
            inheritable: i.0,
        },
        Data {
            effective: e.1,
            permitted: p.1,
            inheritable: i.1,
        },
    ];
    // SAFETY: header and two data structs as the v3 ABI requires, alive for the call.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &mut header as *mut Header, data.as_ptr()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use socket2::{Domain, Protocol, SockAddr, Socket, Type};
    use std::mem::MaybeUninit;
    use std::net::{Ipv4Addr, SocketAddrV4};
    use std::time::{Duration, Instant};

    const CHILD_ENV: &str = "NETPOLLER_PRIVDROP_TEST_CHILD";
    const CHILD_OK: &str = "PRIVDROP-CHILD-OK";

    const STATUS: &str = "Name:\tnetpoller\nUmask:\t0022\nState:\tR (running)\nTgid:\t7\n\
        Uid:\t65534\t65534\t65534\t65534\nGid:\t65533\t65533\t65533\t65533\nFDSize:\t64\nGroups:\t\n\
        Threads:\t1\nCapInh:\t0000000000000000\nCapPrm:\t0000000000002000\nCapEff:\t0000000000002000\n\
        CapBnd:\t000001ffffffffff\nCapAmb:\t0000000000000000\nNoNewPrivs:\t0\n";

    #[test]
    fn parses_proc_status() {
        let c = Caps::parse(STATUS).unwrap();
        assert_eq!(c.uids, [65534; 4]);
        assert_eq!(c.gids, [65533; 4]);
        assert!(c.groups.is_empty());
        assert_eq!(
            (c.effective, c.permitted, c.inheritable, c.ambient),
            (1 << 13, 1 << 13, 0, 0)
        );
        assert_eq!(c.bounding, 0x1ff_ffff_ffff);
        assert!(c.has_effective(CAP_NET_RAW) && !c.has_effective(CAP_SETPCAP));
        let with_groups = STATUS
            .replace("Groups:\t\n", "Groups:\t4 24 27 \n")
            .replace("CapAmb:\t0000000000000000\n", "");
        let c = Caps::parse(&with_groups).unwrap();
        assert_eq!(c.groups, [4, 24, 27]);
        assert_eq!(c.ambient, 0); // old kernels without the line
        assert!(Caps::parse(&STATUS.replace("CapEff", "CapXXX")).is_err());
        assert!(Caps::parse(&STATUS.replace("Uid:\t65534\t", "Uid:\t")).is_err());
    }

    #[test]
    fn current_caps_reads_this_process() {
        let c = current_caps().unwrap();
        // SAFETY: getters without side effects.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        assert_eq!((c.uids[1], c.gids[1]), (uid, gid));
        assert_eq!(
            c.effective & !c.permitted,
            0,
            "effective is a subset of permitted"
        );
    }

    #[test]
    fn looks_up_users_and_rejects_unknown_ones_before_changing_anything() {
        assert_eq!(lookup_user("root").unwrap(), (0, 0));
        let before = current_caps().unwrap();
        let e = format!(
            "{:#}",
            drop_privileges("no-such-user-netpoller").unwrap_err()
        );
        assert!(e.contains("no such user \"no-such-user-netpoller\""), "{e}");
        assert!(format!("{:#}", lookup_user("a\0b").unwrap_err()).contains("NUL"));
        assert_eq!(current_caps().unwrap(), before);
    }

    /// Runs this test's body in a fresh copy of the test binary (the drop is
    /// irreversible), as root. Returns true in the child, which then does the work.
    fn in_child(test: &str, mode: &str) -> bool {
        if let Ok(m) = std::env::var(CHILD_ENV) {
            assert_eq!(m, mode, "child started for another mode");
            return true;
        }
        // SAFETY: getter.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipping {test}: needs root to drop privileges (run the suite as root)");
            return false;
        }
        // libtest names tests without the crate: `privdrop::tests::name`.
        let module = module_path!()
            .split_once("::")
            .map_or(module_path!(), |(_, m)| m);
        let name = format!("{module}::{test}");
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([name.as_str(), "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, mode)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "child failed: {}\n{stdout}\n{stderr}",
            out.status
        );
        assert!(
            stdout.contains(CHILD_OK) || stderr.contains(CHILD_OK),
            "child did not run {name}: {stdout}\n{stderr}"
        );
        false
    }

    fn raw_icmp() -> io::Result<Socket> {
        Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::ICMPV4))
    }

    fn checksum(b: &[u8]) -> u16 {
        let mut sum = 0u32;
        for c in b.chunks(2) {
            sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
        }
        while sum >> 16 != 0 {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        !(sum as u16)
    }

    /// Where the tests' echo requests go: loopback, in the range kept for these tests.
    const ECHO_TO: Ipv4Addr = Ipv4Addr::new(127, 0, 151, 1);

    /// Sends one echo request to [`ECHO_TO`] on `sock` and waits (bounded) for its reply.
    fn echo_loopback(sock: &Socket, ident: u16) {
        let mut pkt = vec![8u8, 0, 0, 0];
        pkt.extend_from_slice(&ident.to_be_bytes());
        pkt.extend_from_slice(&1u16.to_be_bytes());
        pkt.extend_from_slice(b"netpoller-privdrop-test");
        let c = checksum(&pkt);
        pkt[2..4].copy_from_slice(&c.to_be_bytes());
        let dst = SockAddr::from(SocketAddrV4::new(ECHO_TO, 0));
        sock.send_to(&pkt, &dst)
            .expect("send echo request on the raw socket opened before");
        sock.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(3);
        let mut buf = [MaybeUninit::<u8>::uninit(); 1500];
        while Instant::now() < deadline {
            let Ok(n) = sock.recv(&mut buf) else { continue };
            // SAFETY: recv initialised the first n bytes.
            let b: Vec<u8> = buf[..n]
                .iter()
                .map(|x| unsafe { x.assume_init() })
                .collect();
            let ihl = usize::from(b[0] & 0x0f) * 4;
            let icmp = &b[ihl..];
            if icmp.len() >= 8 && icmp[0] == 0 && icmp[4..6] == ident.to_be_bytes() {
                return;
            }
        }
        panic!("no echo reply from {ECHO_TO} within 3 s");
    }

    fn expected_nobody() -> (u32, u32) {
        lookup_user("nobody").expect("user nobody exists")
    }

    const NET_RAW: u64 = 1 << CAP_NET_RAW;
    /// CAP_NET_BIND_SERVICE: a capability besides CAP_NET_RAW that an operator may grant.
    const NET_BIND_SERVICE: u64 = 1 << 10;

    /// Puts this (child) process in the state systemd's `User=nobody` +
    /// `AmbientCapabilities=` starts it in: the ids of `nobody`, the supplementary
    /// `groups`, and `caps` in its effective, permitted, inheritable and ambient sets.
    fn become_nobody_with(groups: &[u32], caps: u64) -> (u32, u32) {
        let (uid, gid) = expected_nobody();
        // SAFETY: plain syscalls on integers and a pointer to a live slice.
        unsafe {
            assert_eq!(libc::prctl(libc::PR_SET_KEEPCAPS, 1, 0, 0, 0), 0);
            assert_eq!(libc::setgroups(groups.len(), groups.as_ptr()), 0);
            assert_eq!(libc::setresgid(gid, gid, gid), 0);
            assert_eq!(libc::setresuid(uid, uid, uid), 0);
            assert_eq!(libc::prctl(libc::PR_SET_KEEPCAPS, 0, 0, 0, 0), 0);
        }
        capset(caps, caps, caps).unwrap();
        for cap in (0..64u32).filter(|c| caps & (1 << c) != 0) {
            // SAFETY: integer arguments only.
            let rc = unsafe {
                libc::prctl(
                    libc::PR_CAP_AMBIENT,
                    libc::PR_CAP_AMBIENT_RAISE as libc::c_ulong,
                    libc::c_ulong::from(cap),
                    0 as libc::c_ulong,
                    0 as libc::c_ulong,
                )
            };
            assert_eq!(rc, 0, "raising {cap}: {}", io::Error::last_os_error());
        }
        let c = current_caps().unwrap();
        assert_eq!((c.uids, c.gids), ([uid; 4], [gid; 4]));
        assert_eq!(
            (c.effective, c.permitted, c.inheritable, c.ambient),
            (caps, caps, caps, caps)
        );
        (uid, gid)
    }

    #[test]
    fn drop_to_nobody_keeps_the_open_raw_socket_and_no_capability() {
        if !in_child(
            "drop_to_nobody_keeps_the_open_raw_socket_and_no_capability",
            "drop",
        ) {
            return;
        }
        let opened = raw_icmp().expect("raw socket as root");
        drop_privileges("nobody").unwrap();
        let (uid, gid) = expected_nobody();
        let c = current_caps().unwrap();
        assert_eq!(c.uids, [uid; 4]);
        assert_eq!(c.gids, [gid; 4]);
        assert!(c.groups.is_empty(), "{:?}", c.groups);
        assert_eq!(
            (c.effective, c.permitted, c.inheritable, c.ambient),
            (0, 0, 0, 0),
            "CapEff, CapPrm, CapInh, CapAmb"
        );
        assert_eq!(c.bounding, 0, "bounding set emptied too");
        // The socket opened before still sends and receives ...
        echo_loopback(&opened, 0x5e01);
        // ... but no new raw socket: CAP_NET_RAW is gone.
        assert_eq!(raw_icmp().unwrap_err().raw_os_error(), Some(libc::EPERM));
        // Everything else is gone too: privileged port, root, chown.
        let port80 = std::net::TcpListener::bind((ECHO_TO, 80));
        assert_eq!(port80.unwrap_err().kind(), io::ErrorKind::PermissionDenied);
        // SAFETY: failing calls change nothing.
        assert_eq!(unsafe { libc::setuid(0) }, -1);
        assert_eq!(unsafe { libc::setgid(0) }, -1);
        println!("{CHILD_OK}");
    }

    /// systemd's `User=nobody` + `AmbientCapabilities=CAP_NET_RAW` starts the process
    /// with `initgroups("nobody", gid)`: its primary group is its one supplementary group,
    /// which it cannot clear (no CAP_SETGID). That is the user already, nothing to
    /// switch: `daemon.user = "nobody"` there was refused with `setgroups([]) failed`.
    #[test]
    fn already_the_user_with_its_primary_group_as_supplementary_group() {
        if !in_child(
            "already_the_user_with_its_primary_group_as_supplementary_group",
            "initgroups",
        ) {
            return;
        }
        let (uid, gid) = expected_nobody();
        become_nobody_with(&[gid], NET_RAW);
        drop_privileges("nobody").unwrap();
        let c = current_caps().unwrap();
        assert_eq!(
            (c.uids, c.gids, c.groups.clone()),
            ([uid; 4], [gid; 4], vec![gid])
        );
        assert_eq!(c.held(), 0);
        println!("{CHILD_OK}");
    }

    #[test]
    fn already_the_user_drops_its_capabilities_without_setuid() {
        if !in_child(
            "already_the_user_drops_its_capabilities_without_setuid",
            "already",
        ) {
            return;
        }
        let (uid, gid) = become_nobody_with(&[], NET_RAW | NET_BIND_SERVICE);
        // Dropping every capability needs no CAP_SETUID/SETGID.
        drop_privileges("nobody").unwrap();
        let c = current_caps().unwrap();
        assert_eq!((c.uids, c.gids, c.held()), ([uid; 4], [gid; 4], 0));
        // A second call is a no-op and still verifies.
        drop_privileges("nobody").unwrap();
        // Switching to another user is now impossible and says why.
        let e = format!("{:#}", drop_privileges("root").unwrap_err());
        assert!(e.contains("failed") && e.contains("needs CAP_SET"), "{e}");
        println!("{CHILD_OK}");
    }

    /// systemd's unit (`User=` + `AmbientCapabilities=CAP_NET_RAW`, no `--user`):
    /// CAP_NET_RAW goes from every set once the sockets are open, the open raw socket
    /// still works, and a capability the operator also granted stays.
    #[test]
    fn the_user_with_ambient_net_raw_sheds_it_and_keeps_the_rest() {
        if !in_child(
            "the_user_with_ambient_net_raw_sheds_it_and_keeps_the_rest",
            "shed",
        ) {
            return;
        }
        let opened = raw_icmp().expect("raw socket as root");
        let (uid, _) = become_nobody_with(&[], NET_RAW | NET_BIND_SERVICE);
        assert_eq!(shed_net_raw().unwrap(), Shed::Dropped);
        let c = current_caps().unwrap();
        assert_eq!(c.uids, [uid; 4]);
        assert_eq!(
            (c.effective, c.permitted, c.inheritable, c.ambient),
            (
                NET_BIND_SERVICE,
                NET_BIND_SERVICE,
                NET_BIND_SERVICE,
                NET_BIND_SERVICE
            ),
            "CapEff, CapPrm, CapInh, CapAmb"
        );
        echo_loopback(&opened, 0x5e02);
        assert_eq!(raw_icmp().unwrap_err().raw_os_error(), Some(libc::EPERM));
        // Nothing left to shed.
        assert_eq!(shed_net_raw().unwrap(), Shed::NotHeld);
        println!("{CHILD_OK}");
    }

    /// Root without `--user`: shedding capabilities would not make it safe (module
    /// docs), so it keeps them, CAP_NET_RAW included.
    #[test]
    fn root_without_a_user_keeps_its_capabilities() {
        if !in_child("root_without_a_user_keeps_its_capabilities", "root") {
            return;
        }
        let before = current_caps().unwrap();
        assert_ne!(before.held() & NET_RAW, 0, "root holds CAP_NET_RAW");
        assert_eq!(shed_net_raw().unwrap(), Shed::Root);
        assert_eq!(current_caps().unwrap(), before);
        println!("{CHILD_OK}");
    }
}
