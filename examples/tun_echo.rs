//! A remote host for benchmarks: answers ICMPv4 echo requests that arrive on TUN device
//! DEV, in this process, so that the target's work is not charged to the pinger (see
//! `poller::tun_echo` for why and how). benches/tun_rig.sh creates the namespace, the
//! device and its route, and runs this inside that namespace:
//!
//! ```text
//! ip netns exec NS target/release/examples/tun_echo npt0 --silent-mask 3 --max-seconds 600
//! ```
//!
//! Addresses with `dst & mask == mask` are silent. When the device's queue is empty the
//! process naps `--coalesce-us` (default 500) before reading again, as a NIC coalesces
//! interrupts; give the device a long queue (`ip link set DEV txqueuelen 100000`). It
//! stops after `--max-seconds` or on SIGTERM/SIGINT and prints what it did to stderr.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

const USAGE: &str = "usage: tun_echo DEV [--silent-mask N] [--max-seconds S] [--coalesce-us U]";

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let mut dev = None;
    let mut silent_mask = 0u32;
    let mut max = Duration::from_secs(3600);
    let mut coalesce = Duration::from_micros(500);
    while let Some(a) = args.next() {
        let mut value = |what: &str| args.next().with_context(|| format!("{a} needs {what}"));
        match a.as_str() {
            "--silent-mask" => silent_mask = value("a mask")?.parse()?,
            "--max-seconds" => max = Duration::from_secs(value("seconds")?.parse()?),
            "--coalesce-us" => coalesce = Duration::from_micros(value("microseconds")?.parse()?),
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            _ if dev.is_none() && !a.starts_with('-') => dev = Some(a),
            _ => bail!("unexpected argument {a:?}\n{USAGE}"),
        }
    }
    let dev = dev.context(USAGE)?;
    let fd =
        poller::tun_echo::open(&dev).with_context(|| format!("attaching to TUN device {dev}"))?;
    // SAFETY: installs an async-signal-safe handler (one atomic store).
    unsafe {
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
    }
    eprintln!("tun_echo: answering on {dev} (silent mask {silent_mask}) for at most {max:?}");
    let start = Instant::now();
    let c = poller::tun_echo::serve(&fd, silent_mask, coalesce, &STOP, max)
        .with_context(|| format!("serving {dev}"))?;
    eprintln!(
        "tun_echo: {} answered, {} silenced, {} other packets ignored in {:.1} s",
        c.answered,
        c.silenced,
        c.ignored,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
