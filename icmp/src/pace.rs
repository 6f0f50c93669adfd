//! Send pacing: a token bucket of `max_pps` probes per second with bounded bursts.
//!
//! The ICMP pacing of both kinds of user: a [`crate::Sweep`] that paces itself
//! (`SweepConfig::max_pps`, the library's own use) and the daemon's sockets that share
//! one rate (the driver takes slots before it asks the sweep for probes; its sweeps run
//! unpaced). (The SNMP driver paces with a token bucket of its own, a float one that
//! needs no shared state.) Invariants: over any span the slots handed
//! out never exceed the rate, plus at most `burst` worth after an idle spell; a slot's
//! instant is fixed when it is taken (so a probe's send instant is exact); slots given
//! back return only when nobody took later ones. Lock-free (one atomic), no clock: the
//! caller passes every instant.

use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

/// A send rate shared by several drivers: one `max_pps` for the whole process however
/// many sweeps run at once, so a sweep running alone gets all of it (splitting the rate
/// statically left each of two sockets at half the rate even when the other was idle).
/// Slots are handed out before probes leave the sweep (a probe's send instant is taken
/// when it is handed out), at most `burst` worth at once after an idle spell.
#[derive(Debug)]
pub struct SharedPacer {
    base: Instant,
    gap_ns: u64,
    burst_ns: u64,
    /// Next free slot, ns since `base`.
    next: AtomicU64,
}

impl SharedPacer {
    /// `max_pps` probes per second in total (1 if 0; at most 10⁹, one per nanosecond,
    /// the clock's grain), bursts of at most `burst`; the first slot is at `start`,
    /// with no burst credit before it.
    pub fn new(max_pps: u32, burst: Duration, start: Instant) -> Self {
        SharedPacer {
            base: start,
            gap_ns: (1_000_000_000 / u64::from(max_pps.max(1))).max(1),
            burst_ns: burst.as_nanos() as u64,
            next: AtomicU64::new(0),
        }
    }

    /// A pacer of `max_pps` starting now, to share between drivers; `None` for 0
    /// (unpaced).
    pub fn shared(max_pps: u32, burst: Duration) -> Option<std::sync::Arc<SharedPacer>> {
        (max_pps > 0).then(|| std::sync::Arc::new(SharedPacer::new(max_pps, burst, Instant::now())))
    }

    fn ns(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.base).as_nanos() as u64
    }

    /// Takes up to `want` slots due at `now`.
    pub fn take(&self, now: Instant, want: usize) -> Slots {
        use std::sync::atomic::Ordering::{AcqRel, Acquire};
        let t = self.ns(now);
        let mut next = self.next.load(Acquire);
        loop {
            let start = next.max(t.saturating_sub(self.burst_ns));
            if start > t || want == 0 {
                return Slots { n: 0, end: next };
            }
            let n = (((t - start) / self.gap_ns + 1) as usize).min(want);
            let end = start + n as u64 * self.gap_ns;
            match self.next.compare_exchange_weak(next, end, AcqRel, Acquire) {
                Ok(_) => return Slots { n, end },
                Err(cur) => next = cur,
            }
        }
    }

    /// Returns the slots of `taken` beyond the first `used`, unless another driver took
    /// slots after them (then they stay spent: the rate is never exceeded).
    pub fn give_back(&self, taken: Slots, used: usize) {
        use std::sync::atomic::Ordering::{AcqRel, Acquire};
        let unused = taken.n.saturating_sub(used) as u64;
        if unused > 0 {
            let back = taken.end - unused * self.gap_ns;
            let _ = self.next.compare_exchange(taken.end, back, AcqRel, Acquire);
        }
    }

    /// The rate, probes per second.
    pub fn max_pps(&self) -> u64 {
        1_000_000_000 / self.gap_ns
    }

    /// When the next slot is free.
    pub fn next_slot(&self) -> Instant {
        self.base + Duration::from_nanos(self.next.load(std::sync::atomic::Ordering::Acquire))
    }
}

/// Slots granted by [`SharedPacer::take`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slots {
    /// How many.
    pub n: usize,
    /// End of the granted run (ns since the pacer's base).
    end: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lone_taker_gets_the_whole_rate_in_bounded_bursts() {
        let p = SharedPacer::new(1000, Duration::from_millis(5), Instant::now()); // 1 slot per ms
        let t0 = p.base;
        assert_eq!(p.take(t0, 100).n, 1, "no credit before the start");
        // After an idle spell: the burst (5 ms) plus the current slot, not more.
        assert_eq!(p.take(t0 + Duration::from_millis(50), 100).n, 6);
        // Then the rate: 1,000 more slots in the next second, taken every 3 ms.
        let mut got = 0;
        for k in 1..=334u64 {
            got += p.take(t0 + Duration::from_millis(50 + 3 * k), 100).n;
        }
        assert!((1000..=1003).contains(&got), "{got}");
    }

    #[test]
    fn a_rate_beyond_the_clocks_grain_is_one_slot_per_nanosecond() {
        // u32::MAX probes/s would be a gap of 0 ns: a division by zero in `take`.
        for pps in [1_000_000_001, u32::MAX] {
            let p = SharedPacer::new(pps, Duration::from_millis(5), Instant::now());
            assert_eq!(p.max_pps(), 1_000_000_000);
            let n = p.take(p.base + Duration::from_micros(1), 10_000).n;
            assert_eq!(n, 1_001, "1 µs of slots and the current one");
        }
    }

    #[test]
    fn two_takers_share_the_rate_and_unused_slots_come_back() {
        let p = SharedPacer::new(1000, Duration::from_millis(5), Instant::now());
        let t0 = p.base;
        let (mut a, mut b) = (0, 0);
        for ms in 0..1000u64 {
            let now = t0 + Duration::from_millis(ms);
            a += p.take(now, 64).n;
            b += p.take(now, 64).n;
        }
        assert!(a + b <= 1000, "{a} + {b}");
        assert!(a + b >= 995, "{a} + {b}");
        // Giving back unused slots makes them available again at once...
        let now = t0 + Duration::from_millis(2000);
        let s = p.take(now, 10);
        assert_eq!(s.n, 6);
        p.give_back(s, 2);
        assert_eq!(p.take(now, 10).n, 4);
        // ...unless someone took slots after them: then they stay spent.
        let now = t0 + Duration::from_millis(3000);
        let s1 = p.take(now, 3);
        let s2 = p.take(now, 3);
        assert_eq!((s1.n, s2.n), (3, 3));
        p.give_back(s1, 0);
        assert_eq!(p.take(now, 10).n, 0, "the rate is never exceeded");
    }
}
