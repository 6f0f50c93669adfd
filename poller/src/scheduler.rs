//! The lock-sharded scheduler: per engine, `N` due-queues, each behind its own lock.
//!
//! Time is an input: every call takes `now_ms` (milliseconds of Unix time on the daemon's
//! monotonic clock), so tests run on a virtual clock.
//!
//! Invariants:
//! * A task is in at most one queue, at most once. [`Scheduler::take_due`] removes it;
//!   only [`Scheduler::complete`] puts it back, for its next slot. So an item whose poll is
//!   still running is never queued twice, and concurrent takers never get the same task.
//!   (A reload queues every task of the new plan, those in flight included; for SNMP,
//!   the next slot of one still running waits for it, see below.)
//! * An SNMP host's tasks (one per interval) are in flight in one iteration at a time:
//!   a device gets its requests one after another. A task that comes due while another
//!   task of its host, taken by an earlier [`Scheduler::take_due`], is in flight waits
//!   (out of the queue, still counted) until the last of them completes, then is
//!   released: due from then on, for the slot it waited on (or, a task in flight at a
//!   reload whose poll completed meanwhile, queued for the slot that completion put it
//!   on: see below); tasks of one host taken by one call go to one iteration, which
//!   merges them into one chain of requests. This holds across reloads: what is in
//!   flight and what waits is carried into the new queues (what was released and not
//!   taken yet stays released, due since its release).
//! * The wait for a host is the device's, not the engine's: the slots it costs are
//!   counted as skipped when the task's poll ends ([`Rescheduled`]), the tasks waiting
//!   are counted apart ([`Scheduler::waiting`], not in [`Scheduler::due_counts`]), and
//!   a released task is ready for the engine from its release, not its slot
//!   ([`Due::ready_ms`], [`Scheduler::next_due`]: what lateness and the health's lag
//!   are measured from). Its slot ([`Due::due_ms`], the value's, and where its next
//!   is counted from) does not change. Released tasks are kept apart from the buckets
//!   and offered first: a take without any costs one look at an empty `Vec`.
//! * Slots are `phase + k * interval` (ms of Unix time). The phase is a stable hash of
//!   the task (host, engine, interval, probe; an SNMP task's of its host alone, so that
//!   a host's tasks of intervals that divide one another share slots and are polled
//!   together), so a restart or a reload keeps every
//!   unchanged task on exactly the same slots, and tasks of one interval are spread over
//!   the whole interval rather than fired together at second 0; ICMP tasks are then
//!   gathered onto one phase per sweep ([`Plan::group_icmp_phases`]; a reload that
//!   changes how many sweeps an interval needs moves them).
//! * A task that completes late is put on its first slot at or after `now` (one at `now`
//!   is still due, not missed), never on a slot in the past: the schedule catches up by
//!   skipping (and counting) missed slots, without a burst of back-to-back polls.
//! * A reload replaces the queues; completions of tasks taken from a queue it replaced
//!   carry an older generation than the queue they meet and queue nothing more (the new
//!   queues already hold their next slot), though they still end their host's time in
//!   flight, and count as skipped the slots of their task that no poll gets (those
//!   before the slot the reload after their take put it on: [`Rescheduled::Stale`]).
//!   A take or a completion during a reload goes by the generation of the queue it
//!   meets, not the scheduler's, which moves first. No slot is handed out twice across
//!   a reload (tasks go to their first slot after what the engines took, batch window
//!   included) and none still queued is lost (an
//!   unchanged task keeps a slot the old queues had not handed out yet, overdue or not):
//!   see [`Scheduler::install`]. A task new to the plan starts after that too, up to one
//!   batch window later than it could. A task in flight at a reload gets back, when
//!   its poll completes, the next slot it would have had without the reload, however
//!   many reloads came before that completion (up to `RELOADS_KEPT`, 64): each queue
//!   keeps, per reload it descends from, how far the engines had been served then,
//!   which says on which slot that reload put the task; still there, the task was not
//!   handed out since (`DueQueue::resume`). Only reloads and such completions read or
//!   write it: a take or a completion of the current plan does nothing more for it.
//!   (Two ICMP probes of a host on one phase look alike in the queues: one in flight
//!   keeps the slot the reload gave it.)
//! * A queue entry is 24 bytes (due time, task index, interval, phase, host key) and
//!   carries all
//!   that [`Scheduler::complete`] needs, so putting a task back touches only its own
//!   shard's lock: there is no scheduler-wide lock or table on the poll path. Tasks
//!   group a host's items, so the scheduler's memory per item is at most that.

use std::collections::hash_map::Entry as Entry_;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::plan::{Engine, ItemKind, Plan, Task};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    due: u64,
    task: u32,
    /// Interval and phase in ms (intervals are at most a day: fits in 32 bits).
    interval_ms: u32,
    phase_ms: u32,
    /// The host's key ([`host_key`]), with [`MULTI`] when it has other tasks of the
    /// engine, for engines that poll a host's tasks one at a time.
    host: u32,
}

// The module docs' 24 bytes: the host key fills what was padding.
const _: () = assert!(std::mem::size_of::<Entry>() == 24);

/// A host's key in the queues: 31 high bits of its stable name hash (the low bits
/// choose its shard). It outlives reloads, as the hash does; two hosts of one shard
/// sharing a key (about 230 / shards pairs at a million hosts) may be polled one after
/// the other.
fn host_key(hash: u64) -> u32 {
    (hash >> 33) as u32
}

/// Flag of [`Entry::host`]: the host has other tasks of this engine. Only such hosts
/// are followed while in flight ([`Serial`]); a host with one task cannot meet itself,
/// except across a reload, which marks those in flight then ([`Scheduler::install`]).
/// The queues' hot path then costs nothing for the usual host with one interval.
/// ICMP, which follows no host, sets it only on a task with another of its host on the
/// same slots (other probes grouped on one phase): the entries cannot tell them apart
/// ([`DueQueue::resume`]).
const MULTI: u32 = 1 << 31;

/// A task handed to an engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Due {
    /// Index into [`Plan::tasks`] of the plan of `generation`.
    pub task: u32,
    /// The slot this poll is for.
    pub due_ms: u64,
    /// When the engine could first take it: its slot, or, for a task that waited for
    /// its host (see the module docs), when the host was free, if later. How late the
    /// engine is with it counts from here: the wait was the device's.
    pub ready_ms: u64,
    /// Plan generation the task index refers to.
    pub generation: u64,
    shard: u32,
    engine: Engine,
    interval_ms: u32,
    phase_ms: u32,
    host: u32,
    /// Counted in its host's time in flight ([`Serial::busy`]) when taken; else its
    /// in-flight bit was set ([`Serial::in_flight`]).
    followed: bool,
}

/// Outcome of putting a task back after its poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rescheduled {
    /// Queued for `next_ms`; `skipped` slots were missed because the poll finished late.
    At { next_ms: u64, skipped: u64 },
    /// The plan was reloaded since the task was taken; nothing was queued (the new
    /// queues hold its next slot, if the new plan has it). `skipped`: the task's slots
    /// after the one polled that no poll gets: those before the slot the reload after
    /// the take put it on (the reload took them as served, and the task, if the new
    /// plan has it, is polled from there on; one the new plan no longer has, or has
    /// on other slots, had no slot after that reload).
    Stale { skipped: u64 },
}

impl Rescheduled {
    /// Slots the task will never be polled for, of those up to its next (see the
    /// variants): what `netpoller_skipped_slots_total` counts.
    pub fn skipped(&self) -> u64 {
        match *self {
            Rescheduled::At { skipped, .. } | Rescheduled::Stale { skipped } => skipped,
        }
    }
}

/// Width of a queue bucket in ms (power of two). Entries are kept per bucket, unsorted
/// inside it: pushing is a map lookup plus a `Vec` push and taking a due bucket is a
/// drain, instead of `O(log n)` cache-missing heap steps per task (measured: a 1 M-entry
/// binary heap managed ~0.6 M take+complete cycles/s on one core; see BENCHMARKS.md).
const BUCKET_SHIFT: u32 = 4;

/// Width of a far bucket in ms (2^14 = 16.4 s). Fine 16 ms buckets are dense for short
/// intervals but nearly empty for long ones (an hourly task alone in its bucket paid for
/// a map slot and a `Vec` allocation: ~116 bytes per task at 1 M items instead of 24), so
/// entries due beyond the current far window wait in coarse buckets and move into fine
/// ones, once each, when their window starts.
const FAR_SHIFT: u32 = 14;

/// One engine's due-queue in one shard: a calendar of 16 ms buckets for the current
/// 16.4 s window and 16.4 s buckets beyond it.
///
/// Invariant: every entry with `due < horizon` is in `near`, every other one in `far`;
/// `take` first moves the far buckets that `now` has reached into `near`, so all due
/// entries are in `near` when it scans.
#[derive(Default)]
struct DueQueue {
    near: BTreeMap<u64, Vec<Entry>>,
    far: BTreeMap<u64, Vec<Entry>>,
    /// End (exclusive, ms) of the window `near` covers.
    horizon: u64,
    /// Entries queued, those waiting in `serial` included.
    len: usize,
    /// For an engine that polls each host's tasks in one iteration at a time (SNMP:
    /// requests to a device go one after another), its hosts with tasks in flight.
    serial: Option<Serial>,
    /// The plan generation its task indices (and in-flight bits) refer to: a take or a
    /// completion while a reload is under way, the generation moved but this queue
    /// not yet replaced, belongs to the queue it meets.
    generation: u64,
    /// For the reload that installed this queue and those before it, [`RELOADS_KEPT`]
    /// at most, newest last (the one that installed generation `generation - i` at
    /// `len - 1 - i`): the time up to which the engines had been served then. Tasks
    /// that reload did not find queued (new, or in flight) start on their first slot
    /// after it; a completion of an older plan reads there where its task was put
    /// ([`DueQueue::resume`]). Touched by reloads and stale completions only.
    served_to: VecDeque<u64>,
}

/// How many reloads back a completion can still get its next slot back
/// ([`DueQueue::served_after`]): 8 bytes per queue each. A poll that outlasts more
/// completes as [`Rescheduled::Stale`], counting as skipped what its lateness missed.
const RELOADS_KEPT: usize = 64;

/// The hosts of a [`DueQueue`] with tasks in flight that are followed: those with
/// several tasks ([`MULTI`]), and those with one that a reload found in flight.
#[derive(Default)]
struct Serial {
    /// Calls of [`DueQueue::take`] so far (wrapping): tasks of one host taken by one
    /// call go to one iteration, which merges them.
    takes: u32,
    /// Hosts with tasks in flight: (tasks taken and not yet completed, the call of
    /// [`DueQueue::take`] that took them last). Touched twice per task polled, so
    /// small and quickly hashed.
    busy: HashMap<u32, (u32, u32), KeyHash>,
    /// Entries of busy hosts that came due meanwhile, released when their host's
    /// last task in flight completes.
    waiting: HashMap<u32, Vec<Entry>, KeyHash>,
    /// Entries released by their host, each with when, until taken (across reloads
    /// too): due since then, or from their slot if later (one taken a batch window
    /// ahead), their slot unchanged. In no order: every look reads them all (few:
    /// taken by the next take). Kept apart from the buckets,
    /// which know only slots, so that [`DueQueue::next_due`] and [`Due::ready_ms`]
    /// count from the release: the wait was the device's, not the engine's.
    released: Vec<(u64, Entry)>,
    /// A bit per task of the queue's plan (by index, shared by every shard's queue of
    /// the plan, each writing only its own tasks' bits): taken and not completed, for
    /// tasks of hosts with one task. How a reload finds those in flight without a look
    /// at each entry.
    in_flight: Arc<[AtomicU64]>,
}

/// Hashing of [`host_key`]s, which are already uniform: one multiply spreads them over
/// the high bits too (the map's tags) at a fraction of SipHash's cost.
type KeyHash = std::hash::BuildHasherDefault<KeyHasher>;

#[derive(Default)]
struct KeyHasher(u64);

impl std::hash::Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u32(u32::from(b) ^ (self.0 as u32).rotate_left(8));
        }
    }
    fn write_u32(&mut self, i: u32) {
        self.0 = u64::from(i).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// What [`DueQueue::take`] did with an entry due.
enum Offered {
    /// Put to wait for its host ([`Serial::waiting`]): the caller drops its copy.
    Waits,
    /// Accepted: the caller removes it (it is in flight).
    Taken,
    /// Refused (a batch full): the caller keeps it and stops.
    Refused,
}

/// Offers `e`, due, to `accept` for [`DueQueue::take`]'s call `call`, `serial` being
/// the queue's (if it follows hosts), `ready` when it could first be taken
/// ([`Due::ready_ms`]).
#[inline(always)]
fn offer(
    serial: Option<&mut Serial>,
    call: u32,
    e: &Entry,
    ready: u64,
    accept: &mut impl FnMut(&Entry, bool, u64) -> bool,
) -> Offered {
    let Some(s) = serial else {
        return match accept(e, false, ready) {
            true => Offered::Taken,
            false => Offered::Refused,
        };
    };
    // At most one look-up of the host per entry, none for a host with one task while
    // no host is followed: it is the hot path.
    let (host, multi) = (e.host & !MULTI, e.host & MULTI != 0);
    let busy = match multi || !s.busy.is_empty() {
        true => match s.busy.entry(host) {
            Entry_::Occupied(b) if b.get().1 != call => {
                s.waiting.entry(host).or_default().push(*e);
                return Offered::Waits;
            }
            b @ Entry_::Occupied(_) => Some(b),
            b => multi.then_some(b),
        },
        false => None,
    };
    if !accept(e, busy.is_some(), ready) {
        return Offered::Refused;
    }
    match busy {
        Some(b) => {
            let b = b.or_insert((0, call));
            *b = (b.0 + 1, call);
        }
        None => {
            s.in_flight[e.task as usize / 64].fetch_or(1 << (e.task % 64), Ordering::Relaxed);
        }
    }
    Offered::Taken
}

impl DueQueue {
    /// An empty queue for `engine`'s tasks of a plan whose [`Serial::in_flight`] bits
    /// are `in_flight`.
    fn new(engine: Engine, in_flight: &Arc<[AtomicU64]>) -> DueQueue {
        DueQueue {
            serial: (engine == Engine::Snmp).then(|| Serial {
                in_flight: in_flight.clone(),
                ..Serial::default()
            }),
            ..DueQueue::default()
        }
    }

    fn push(&mut self, e: Entry) {
        let (map, key) = if e.due < self.horizon {
            (&mut self.near, e.due >> BUCKET_SHIFT)
        } else {
            (&mut self.far, e.due >> FAR_SHIFT)
        };
        map.entry(key).or_default().push(e);
        self.len += 1;
    }

    /// Move the far buckets that `now_ms` has reached into `near`.
    fn advance(&mut self, now_ms: u64) {
        while let Some(first) = self.far.first_entry() {
            if *first.key() > now_ms >> FAR_SHIFT {
                break;
            }
            self.horizon = self.horizon.max((*first.key() + 1) << FAR_SHIFT);
            for e in first.remove() {
                self.near.entry(e.due >> BUCKET_SHIFT).or_default().push(e);
            }
        }
    }

    /// Earliest time an entry can be taken: its due time, or for one released by its
    /// host, when that was, if later ([`Due::ready_ms`]). Scans one bucket (`near`'s
    /// entries all precede `far`'s) and what was released.
    fn next_due(&self) -> Option<u64> {
        let queued = self
            .near
            .first_key_value()
            .or_else(|| self.far.first_key_value())
            .and_then(|(_, v)| v.iter().map(|e| e.due).min());
        let released = self.serial.iter().flat_map(|s| &s.released);
        queued
            .into_iter()
            .chain(released.map(|&(at, e)| at.max(e.due)))
            .min()
    }

    /// Remove entries due at `now_ms` while `accept` says yes (it sees each entry once,
    /// whether its host is followed in flight, see [`Due::followed`], and when it could
    /// first be taken, see [`Due::ready_ms`]; returning false stops the scan and keeps
    /// that entry). In a serial queue, an entry whose host has tasks in flight from an
    /// earlier call waits for them ([`Serial::waiting`]) and is not offered; those
    /// released since are offered first.
    fn take(&mut self, now_ms: u64, mut accept: impl FnMut(&Entry, bool, u64) -> bool) -> bool {
        self.advance(now_ms);
        let call = self.serial.as_mut().map_or(RELOADED, |s| {
            s.takes = s.takes.checked_add(1).unwrap_or(RELOADED + 1);
            s.takes
        });
        // One look at an empty `Vec` per call: none per entry on the hot path.
        if let Some(s) = self.serial.as_mut().filter(|s| !s.released.is_empty()) {
            // Out of `s` while `offer` has it, then back: its buffer serves every take
            // (and the releases between), not one allocation each.
            let mut released = std::mem::take(&mut s.released);
            let mut refused = false;
            // In order; what is not due, or after a refusal, stays, in its order.
            released.retain(|&(at, e)| {
                if refused || e.due > now_ms {
                    return true;
                }
                match offer(Some(&mut *s), call, &e, at.max(e.due), &mut accept) {
                    Offered::Waits => false,
                    Offered::Taken => {
                        self.len -= 1;
                        false
                    }
                    Offered::Refused => {
                        refused = true;
                        true
                    }
                }
            });
            debug_assert!(s.released.is_empty(), "`offer` releases nothing");
            s.released = released;
            if refused {
                return false;
            }
        }
        while let Some(mut first) = self.near.first_entry() {
            if *first.key() > now_ms >> BUCKET_SHIFT {
                return true;
            }
            let v = first.get_mut();
            let mut i = 0;
            while i < v.len() {
                if v[i].due > now_ms {
                    i += 1;
                    continue;
                }
                match offer(self.serial.as_mut(), call, &v[i], v[i].due, &mut accept) {
                    Offered::Waits => {}
                    Offered::Taken => self.len -= 1,
                    Offered::Refused => return false,
                }
                v.swap_remove(i);
            }
            if v.is_empty() {
                first.remove();
            } else {
                // Only entries due later than `now_ms` are left in this bucket.
                return true;
            }
        }
        true
    }

    /// Moves entries to other slots: `want` maps (due time, identity) of an entry to its
    /// new due time and, for one its host had released ([`Serial::released`], a serial
    /// queue's), when: it goes there, not to the buckets. `ident` gives an entry's
    /// identity from its task. Each bucket holding
    /// a wanted due time is scanned once, whatever the number wanted (a search per entry
    /// was quadratic: 17 s for a reload of 1 M tasks half overdue), and an entry's
    /// identity is looked up only when its due time is wanted.
    /// Returns how many it moved.
    fn retarget<I: Eq + std::hash::Hash>(
        &mut self,
        mut want: HashMap<(u64, I), (u64, Option<u64>)>,
        ident: impl Fn(&Entry) -> I,
    ) -> usize {
        let dues: std::collections::HashSet<u64> = want.keys().map(|k| k.0).collect();
        let mut keys: Vec<(bool, u64)> = dues
            .iter()
            .map(|&due| match due < self.horizon {
                true => (true, due >> BUCKET_SHIFT),
                false => (false, due >> FAR_SHIFT),
            })
            .collect();
        keys.sort_unstable();
        keys.dedup();
        let mut moved = Vec::new();
        for (near, key) in keys {
            let map = if near { &mut self.near } else { &mut self.far };
            let Some(v) = map.get_mut(&key) else {
                continue;
            };
            let mut i = 0;
            while i < v.len() {
                let e = v[i];
                let hit = match dues.contains(&e.due) {
                    true => want.remove(&(e.due, ident(&e))),
                    false => None,
                };
                match hit {
                    Some((due, released)) => {
                        v.swap_remove(i);
                        moved.push((Entry { due, ..e }, released));
                    }
                    None => i += 1,
                }
            }
            if v.is_empty() {
                map.remove(&key);
            }
        }
        self.len -= moved.len();
        let n = moved.len();
        for (e, released) in moved {
            match (released, self.serial.as_mut()) {
                (Some(at), Some(s)) => {
                    s.released.push((at, e));
                    self.len += 1;
                }
                _ => self.push(e),
            }
        }
        n
    }

    /// The time up to which the engines had been served when the reload that replaced
    /// the queue of `generation` installed its successor, if that reload is one this
    /// queue remembers ([`Self::served_to`]).
    fn served_after(&self, generation: u64) -> Option<u64> {
        let back = self.generation.checked_sub(generation.checked_add(1)?)?;
        let i = (self.served_to.len() as u64).checked_sub(back + 1)?;
        self.served_to.get(i as usize).copied()
    }

    /// `due`, of an older plan and in flight when the reload after its take replaced
    /// that plan, is done; its next slot is `next` ([`Scheduler::complete`]'s, missed
    /// slots skipped). That reload queued its task (if the new plan has it unchanged:
    /// same host, interval and phase) on `placed`, its first slot after what the
    /// engines had been served then, as if the slots before had been handed out, though
    /// this task's were not: it was in flight. An entry of the task still on `placed`
    /// here means no queue has handed the task out since: every later reload keeps it
    /// there (unserved, or its first slot after that reload's own serving), and a take
    /// of it puts its next entry after the slot taken, which is `placed` or later. That
    /// entry (queued, or waiting for its host: [`Serial::waiting`]) goes to `next`, as
    /// the completion would have put it without the reloads (else every slot of the
    /// task in the batch window taken ahead of the reload was lost, and one waiting
    /// for its host was polled, once the host was free, for a slot already past).
    /// Whether the entry was found (not found: the task is gone, changed, or handed
    /// out since).
    fn resume(&mut self, due: &Due, placed: u64, next: u64) -> bool {
        if due.engine == Engine::Icmp && due.host & MULTI != 0 {
            // Another task of its host has the same identity here: the entry found
            // could be that one's, whose slot `next` may have been handed out.
            return false;
        }
        let ident = |host: u32, iv: u32, ph: u32| (host & !MULTI, iv, ph);
        let own = |e: &Entry| {
            e.due == placed
                && ident(e.host, e.interval_ms, e.phase_ms)
                    == ident(due.host, due.interval_ms, due.phase_ms)
        };
        if let Some(s) = self.serial.as_mut() {
            // Come due while another task of its host is in flight, it waits for that
            // one (still counted in `len`): it waits for `next` now.
            let waiting = s.waiting.get_mut(&(due.host & !MULTI));
            if let Some(e) = waiting.and_then(|w| w.iter_mut().find(|e| own(e))) {
                e.due = next;
                return true;
            }
            // Released by its host since: due no more, back to the buckets for `next`.
            if let Some(i) = s.released.iter().position(|(_, e)| own(e)) {
                let (_, e) = s.released.remove(i);
                self.len -= 1;
                self.push(Entry { due: next, ..e });
                return true;
            }
        }
        // Into fine buckets (as `take` would once its window starts, each entry once):
        // one 16 ms bucket to scan, not a 16.4 s one.
        self.advance(placed);
        let mut want = HashMap::with_capacity(1);
        want.insert(
            (placed, ident(due.host, due.interval_ms, due.phase_ms)),
            (next, None),
        );
        self.retarget(want, |e| ident(e.host, e.interval_ms, e.phase_ms)) == 1
    }

    /// The entries due at or before `t`, left where they are (for a queue about to be
    /// dropped: `take` would first move a whole far bucket into fine ones, ~1 M pushes
    /// at a million tasks).
    fn due_by(&self, t: u64) -> impl Iterator<Item = &Entry> {
        let near = self.near.range(..=t >> BUCKET_SHIFT);
        let far = self.far.range(..=t >> FAR_SHIFT);
        near.chain(far)
            .flat_map(|(_, v)| v)
            .filter(move |e| e.due <= t)
    }

    /// Moves every entry due at or before `t` to its first slot after `t`.
    fn move_past(&mut self, t: u64) {
        let mut passed = Vec::new();
        // Moved, not taken: nothing is in flight for it.
        let serial = self.serial.take();
        self.take(t, |e, _, _| {
            passed.push(*e);
            true
        });
        self.serial = serial;
        for mut e in passed {
            let (iv, ph) = (u64::from(e.interval_ms), u64::from(e.phase_ms));
            e.due = next_slot_after(t, iv, ph);
            self.push(e);
        }
    }

    /// A task of this queue's plan that was not followed ([`Due::followed`]) is done:
    /// its in-flight bit goes.
    fn landed(&mut self, task: u32) {
        if let Some(s) = self.serial.as_ref() {
            s.in_flight[task as usize / 64].fetch_and(!(1 << (task % 64)), Ordering::Relaxed);
        }
    }

    /// A task of host `host` counted in flight is done at `now_ms`: once none of its
    /// host's is left in flight, what waited for them is released, due since `now_ms`
    /// for the slot it waited on ([`Serial::released`]).
    fn done_with(&mut self, host: u32, now_ms: u64) {
        let Some(s) = self.serial.as_mut().filter(|s| !s.busy.is_empty()) else {
            return;
        };
        let host = host & !MULTI;
        let Entry_::Occupied(mut b) = s.busy.entry(host) else {
            return;
        };
        b.get_mut().0 -= 1;
        if b.get().0 > 0 {
            return;
        }
        b.remove();
        if s.waiting.is_empty() {
            return;
        }
        let waiting = s.waiting.remove(&host).unwrap_or_default();
        // Still counted in `len`.
        s.released.extend(waiting.into_iter().map(|e| (now_ms, e)));
    }

    /// Entries the engine could take at `now_ms`: due, and not waiting for their host.
    fn due_count(&self, now_ms: u64) -> usize {
        let near = self.near.range(..=now_ms >> BUCKET_SHIFT);
        let far = self.far.range(..=now_ms >> FAR_SHIFT);
        let queued = near.chain(far).flat_map(|(_, v)| v);
        let released = self.serial.iter().flat_map(|s| &s.released).map(|(_, e)| e);
        queued.chain(released).filter(|e| e.due <= now_ms).count()
    }

    /// Entries waiting for their host ([`Serial::waiting`]).
    fn waiting_count(&self) -> usize {
        let waiting = self.serial.iter().flat_map(|s| s.waiting.values());
        waiting.map(Vec::len).sum()
    }
}

struct Shard {
    queues: [Mutex<DueQueue>; 2],
}

/// Queues for a new plan, built by [`Scheduler::prepare`] outside any lock.
pub struct Prepared {
    queues: Vec<[DueQueue; 2]>,
    /// The `now_ms` they were prepared for: every entry is due after it.
    at: u64,
}

/// See the module docs.
pub struct Scheduler {
    shards: Box<[Shard]>,
    generation: AtomicU64,
    /// Per engine: the furthest `now_ms` [`Self::take_due`] was called with (an engine
    /// takes tasks up to a batch window early). Every slot up to it was handed out, or
    /// its entry is still queued.
    taken_to: [AtomicU64; 2],
    /// Per engine: where its next `take_due` starts, so no shard is always served last.
    /// One per engine: a shared one, with the engines' takes alternating and an even
    /// number of shards, started each engine on the same shards every time.
    cursor: [AtomicUsize; 2],
    /// Serialises reloads (never taken on the poll path).
    reload: Mutex<()>,
}

/// The call number of hosts a reload found in flight ([`Serial::busy`]): no take's
/// (calls count from 1 and skip it).
const RELOADED: u32 = 0;

/// Per task of `plan`: whether its entries are [`MULTI`]. An SNMP task of a host with
/// other SNMP tasks (whose requests go one at a time), or an ICMP task with another
/// ICMP task of its host on the same interval and phase (other probes, grouped on one
/// sweep's phase): tasks that the host alone does not tell apart.
///
/// Such tasks are in one run of equal [`multi_run`] keys once the tasks are in its
/// order, which [`Plan::build`]'s already is (a host's tasks together, by engine, then
/// interval): a pass checks it and marks the runs, with no hashing (a map of every
/// task cost tens of ms per reload at a few 100k tasks). Tasks in any other order (a
/// plan made or changed by hand) are sorted by it first, so the result never depends
/// on the order. ICMP phases are not in order within a run (grouping moves them): a
/// run's few tasks (the host's probes on that interval) are sorted by phase there.
fn multi_tasks(plan: &Plan) -> Vec<bool> {
    let tasks = &plan.tasks;
    let key = |i: &u32| multi_run(&tasks[*i as usize]);
    let mut order: Vec<u32> = (0..tasks.len() as u32).collect();
    if !order.is_sorted_by_key(key) {
        order.sort_by_key(key);
    }
    let mut multi = vec![false; tasks.len()];
    // Tasks that share a run (SNMP) or a run and phase (ICMP): not told apart.
    let mut mark = |same: &[u32]| {
        if same.len() > 1 {
            same.iter().for_each(|&i| multi[i as usize] = true);
        }
    };
    let phase = |i: &u32| tasks[*i as usize].phase_ms;
    for run in order.chunk_by_mut(|a, b| key(a) == key(b)) {
        match tasks[run[0] as usize].engine {
            Engine::Snmp => mark(run),
            Engine::Icmp => {
                run.sort_unstable_by_key(phase);
                run.chunk_by(|a, b| phase(a) == phase(b))
                    .for_each(&mut mark);
            }
        }
    }
    multi
}

/// What the tasks [`multi_tasks`] tells apart share: host and engine, and for ICMP the
/// interval (an SNMP host's tasks of every interval are followed together).
fn multi_run(t: &Task) -> (u32, Engine, u64) {
    match t.engine {
        Engine::Snmp => (t.host, t.engine, 0),
        Engine::Icmp => (t.host, t.engine, t.interval_ms),
    }
}

/// First slot strictly after `t`.
pub fn next_slot_after(t: u64, interval_ms: u64, phase_ms: u64) -> u64 {
    if t < phase_ms {
        return phase_ms;
    }
    ((t - phase_ms) / interval_ms + 1) * interval_ms + phase_ms
}

impl Scheduler {
    /// Build `shards` queues per engine and queue every task of `plan` at its first slot
    /// after `now_ms`.
    pub fn new(plan: &Plan, shards: usize, now_ms: u64) -> Scheduler {
        let shards = shards.max(1);
        let s = Scheduler {
            shards: (0..shards)
                .map(|_| Shard {
                    queues: Engine::ALL.map(|e| Mutex::new(DueQueue::new(e, &Arc::from([])))),
                })
                .collect(),
            generation: AtomicU64::new(0),
            taken_to: [AtomicU64::new(0), AtomicU64::new(0)],
            cursor: [AtomicUsize::new(0), AtomicUsize::new(0)],
            reload: Mutex::new(()),
        };
        s.load(plan, now_ms);
        s
    }

    /// Current plan generation.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn load(&self, plan: &Plan, now_ms: u64) {
        self.install(self.prepare(plan, now_ms), now_ms, None);
    }

    /// The queues of `plan` as of `now_ms`, built without touching the live ones (the
    /// slow part of a reload: one entry per task), to be swapped in by [`Self::install`].
    pub fn prepare(&self, plan: &Plan, now_ms: u64) -> Prepared {
        let n = self.shards.len() as u64;
        let in_flight: Arc<[AtomicU64]> = (0..plan.tasks.len().div_ceil(64))
            .map(|_| AtomicU64::new(0))
            .collect();
        let mut fresh: Vec<[DueQueue; 2]> = (0..n)
            .map(|_| Engine::ALL.map(|e| DueQueue::new(e, &in_flight)))
            .collect();
        let multi = multi_tasks(plan);
        for (i, t) in plan.tasks.iter().enumerate() {
            let t: &Task = t;
            let shard = (plan.hosts[t.host as usize].hash % n) as usize;
            let interval_ms =
                u32::try_from(t.interval_ms).expect("intervals are validated to at most a day");
            let due = next_slot_after(now_ms, t.interval_ms, t.phase_ms);
            fresh[shard][t.engine as usize].push(Entry {
                due,
                task: i as u32,
                interval_ms,
                phase_ms: t.phase_ms as u32,
                host: host_key(plan.hosts[t.host as usize].hash) | if multi[i] { MULTI } else { 0 },
            });
        }
        Prepared {
            queues: fresh,
            at: now_ms,
        }
    }

    /// Swaps in queues made by [`Self::prepare`] on this scheduler, as of `now_ms`, for
    /// a plan that replaces `plans.0` by `plans.1` (none at the start). No slot is
    /// polled twice and none an engine has not served is lost:
    /// * every task is put on its first slot after what the engines have taken (`now_ms`,
    ///   or the batch window they took ahead of it): a task taken early for a slot still
    ///   ahead, whose poll is running, is not polled for that slot again (its completion
    ///   belongs to the old generation and is dropped);
    /// * an unchanged task (same host, engine, interval and phase, hence the same slots)
    ///   whose slot is still queued there, not served (an engine behind, a batch full),
    ///   keeps that slot, overdue or not.
    ///
    /// Work under the locks is in the entries due by then only; cheap enough for the
    /// caller to hold its plan lock across it.
    pub fn install(&self, prepared: Prepared, now_ms: u64, plans: Option<(&Plan, &Plan)>) {
        assert_eq!(
            prepared.queues.len(),
            self.shards.len(),
            "prepared by another scheduler"
        );
        debug_assert!(prepared.at <= now_ms);
        // The generation moves first, then each queue is replaced under its own lock: a
        // completion of an older generation either sees the new generation (and is
        // dropped) or lands in a queue about to be replaced.
        let one_reload_at_a_time = self.reload.lock().unwrap_or_else(|e| e.into_inner());
        self.generation.fetch_add(1, Ordering::AcqRel);
        // A task's identity across plans. Two ICMP tasks of a host can share their
        // slots (other probes grouped on one phase): the probe tells them apart, or one
        // got the other's unserved slot again (polled twice) and the other lost it.
        let ident = |plan: &Plan, task: u32| {
            let t = &plan.tasks[task as usize];
            let probe = plan.task_items(t).first().and_then(|i| match i.kind {
                ItemKind::Icmp { probe, .. } => Some(probe),
                ItemKind::Snmp { .. } => None,
            });
            (
                plan.hosts[t.host as usize].hash,
                t.engine,
                t.interval_ms,
                t.phase_ms,
                probe,
            )
        };
        let n = self.shards.len() as u64;
        let mut old = Vec::with_capacity(prepared.queues.len() * 2);
        for (k, (shard, qs)) in self.shards.iter().zip(prepared.queues).enumerate() {
            for (e, mut q) in Engine::ALL.into_iter().zip(qs) {
                let mut live = shard.queues[e as usize]
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                // Read under the lock: a take of this queue moves it first.
                let served_to = now_ms.max(self.taken_to[e as usize].load(Ordering::Acquire));
                // The hosts in flight stay so; what waits for them is queued again in
                // the new plan's terms, as unserved.
                // What was released and not taken yet stays so, due since its release
                // (queued as due from its slot, it read as the engine behind): with when.
                let mut waited = Vec::new();
                if let Some(s) = live.serial.as_mut() {
                    waited.extend(s.waiting.drain().flat_map(|(_, v)| v).map(|e| (e, None)));
                    waited.extend(s.released.drain(..).map(|(at, e)| (e, Some(at))));
                }
                // Hosts with one task in flight are followed from now on: their
                // next slot, queued below, waits for the poll that runs. (This shard's
                // bits do not change while its lock is held.)
                if let (Some((was, _)), Some(s)) = (plans, live.serial.as_mut()) {
                    for (w, bits) in s.in_flight.iter().enumerate() {
                        let mut bits = bits.load(Ordering::Relaxed);
                        while bits != 0 {
                            let t = w * 64 + bits.trailing_zeros() as usize;
                            bits &= bits - 1;
                            let hash = was.hosts[was.tasks[t].host as usize].hash;
                            if hash % n == k as u64 {
                                s.busy.entry(host_key(hash)).or_insert((0, RELOADED)).0 += 1;
                            }
                        }
                    }
                }
                let in_flight = q.serial.as_ref().map(|s| s.in_flight.clone());
                q.serial = live.serial.take();
                q.generation = self.generation();
                q.served_to = std::mem::take(&mut live.served_to);
                if q.served_to.len() == RELOADS_KEPT {
                    q.served_to.pop_front();
                }
                q.served_to.push_back(served_to);
                if let (Some(s), Some(bits)) = (q.serial.as_mut(), in_flight) {
                    // Of the new plan: nothing of it is in flight yet.
                    s.in_flight = bits;
                }
                let unserved: Vec<(Entry, Option<u64>)> = match plans {
                    Some(_) => live
                        .due_by(served_to)
                        .map(|&e| (e, None))
                        .chain(waited)
                        .collect(),
                    None => Vec::new(),
                };
                if served_to > prepared.at {
                    // Prepared entries are all due after `prepared.at`.
                    q.move_past(served_to);
                }
                if let (Some((was, is)), false) = (plans, unserved.is_empty()) {
                    // The same task of the new plan is where `move_past` put it.
                    let mut want = HashMap::with_capacity(unserved.len());
                    for (u, released) in unserved {
                        let (iv, ph) = (u64::from(u.interval_ms), u64::from(u.phase_ms));
                        let at = next_slot_after(served_to, iv, ph);
                        // Identities are unique in a plan (a host's tasks are one per
                        // engine, interval and probe).
                        want.insert((at, ident(was, u.task)), (u.due, released));
                    }
                    q.retarget(want, |e| ident(is, e.task));
                }
                old.push(std::mem::replace(&mut *live, q));
            }
        }
        drop(one_reload_at_a_time);
        // The old queues are freed here, outside every lock.
        drop(old);
    }

    /// Replace plan `old` by `new` (see [`Self::install`]: unchanged tasks keep their
    /// slots, see the module docs).
    pub fn reload(&self, old: &Plan, new: &Plan, now_ms: u64) {
        self.install(self.prepare(new, now_ms), now_ms, Some((old, new)));
    }

    /// Take tasks of `engine` due at `now_ms` (16 ms buckets in due order, any order
    /// within a bucket), until
    /// the summed `cost` reaches `max_cost` (at least one task is taken when any is due).
    /// Appends to `out`; returns the number taken.
    pub fn take_due(
        &self,
        engine: Engine,
        now_ms: u64,
        max_cost: u64,
        mut cost: impl FnMut(u32) -> u64,
        out: &mut Vec<Due>,
    ) -> usize {
        let n = self.shards.len();
        self.taken_to[engine as usize].fetch_max(now_ms, Ordering::AcqRel);
        let start = self.cursor[engine as usize].fetch_add(1, Ordering::Relaxed) % n;
        let mut spent = 0u64;
        let mut taken = 0;
        for k in 0..n {
            let si = (start + k) % n;
            let shard = &self.shards[si];
            let mut q = shard.queues[engine as usize]
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            // The queue's own: a reload replaces this queue under the same lock.
            let generation = q.generation;
            let full = !q.take(now_ms, |e, followed, ready_ms| {
                let c = cost(e.task);
                if taken > 0 && spent + c > max_cost {
                    return false;
                }
                spent += c;
                taken += 1;
                out.push(Due {
                    task: e.task,
                    due_ms: e.due,
                    ready_ms,
                    generation,
                    shard: si as u32,
                    engine,
                    interval_ms: e.interval_ms,
                    phase_ms: e.phase_ms,
                    host: e.host,
                    followed,
                });
                true
            });
            if full {
                return taken;
            }
        }
        taken
    }

    /// Earliest time `engine` can take a task, over all shards: a due time, or for a
    /// task that waited for its host, its release if later ([`Due::ready_ms`]). Past,
    /// it says how far behind the engine is.
    pub fn next_due(&self, engine: Engine) -> Option<u64> {
        self.shards
            .iter()
            .filter_map(|s| {
                s.queues[engine as usize]
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .next_due()
            })
            .min()
    }

    /// Number of queued tasks of `engine` due at `now_ms` that it could take (per
    /// shard): those waiting for their host are not ([`Self::waiting`]). Above 0 for
    /// long, the engine is behind.
    pub fn due_counts(&self, engine: Engine, now_ms: u64) -> Vec<usize> {
        self.per_queue(engine, |q| q.due_count(now_ms))
    }

    /// Number of queued tasks of `engine` waiting for another task of their host to
    /// complete (per shard): a device slower than its shortest interval, not the
    /// engine behind.
    pub fn waiting(&self, engine: Engine) -> Vec<usize> {
        self.per_queue(engine, DueQueue::waiting_count)
    }

    /// `f` of each shard's queue of `engine`, under its lock.
    fn per_queue<T>(&self, engine: Engine, f: impl Fn(&DueQueue) -> T) -> Vec<T> {
        self.shards
            .iter()
            .map(|s| {
                f(&s.queues[engine as usize]
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()))
            })
            .collect()
    }

    /// Number of queued tasks per shard for `engine`.
    pub fn queued(&self, engine: Engine) -> Vec<usize> {
        self.per_queue(engine, |q| q.len)
    }

    /// Put a polled task back on its next slot (see the module docs for catch-up).
    pub fn complete(&self, due: Due, now_ms: u64) -> Rescheduled {
        let (interval, phase) = (u64::from(due.interval_ms), u64::from(due.phase_ms));
        let first = next_slot_after(due.due_ms, interval, phase);
        let (mut next, mut skipped) = (first, 0);
        // A slot at `now_ms` itself is due, not missed: `take` hands out `due <= now`.
        if next < now_ms {
            // The first slot at or after `now_ms` (> 0 here: `next < now_ms`).
            let after_now = next_slot_after(now_ms - 1, interval, phase);
            skipped = (after_now - next) / interval;
            next = after_now;
        }
        let mut q = self.shards[due.shard as usize].queues[due.engine as usize]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let current = due.generation == q.generation;
        // Only what was counted in flight is counted out: a followed take, or one of an
        // older plan (those in flight at a reload were counted then). A host with one
        // task sharing a key with a followed one must not count that one out.
        if due.followed || !current {
            q.done_with(due.host, now_ms);
        }
        if current && !due.followed {
            q.landed(due.task);
        }
        if !current {
            // Where the reload after its take put its task, if that one is remembered
            // (none for a one-shot's, of no plan).
            let placed = q
                .served_after(due.generation)
                .map(|served| next_slot_after(served, interval, phase));
            let skipped = match placed {
                Some(placed) if q.resume(&due, placed, next) => {
                    return Rescheduled::At {
                        next_ms: next,
                        skipped,
                    };
                }
                // The task (if still there) is on `placed` or was handed out for it.
                Some(placed) => placed.saturating_sub(first) / interval,
                // Outlasted the reloads kept: what it missed by its own lateness, as
                // without a reload (an estimate: where the reload put it is forgotten).
                None if due.generation < q.generation => skipped,
                // A one-shot's: outside the schedule.
                None => 0,
            };
            return Rescheduled::Stale { skipped };
        }
        q.push(Entry {
            due: next,
            task: due.task,
            interval_ms: due.interval_ms,
            phase_ms: due.phase_ms,
            host: due.host,
        });
        Rescheduled::At {
            next_ms: next,
            skipped,
        }
    }

    /// A due entry for `task` of the current plan (for one-shot polling outside the
    /// schedule, e.g. `poll-once`): completing it is a no-op.
    pub fn one_shot(task: u32) -> Due {
        Due {
            task,
            due_ms: 0,
            ready_ms: 0,
            generation: u64::MAX,
            shard: 0,
            engine: Engine::Icmp,
            interval_ms: 1,
            phase_ms: 0,
            host: 0,
            followed: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{HostSpec, ItemKind, ItemSpec};
    use crate::value::ValueType;
    use std::collections::HashMap;
    use std::sync::Arc;

    fn plan(hosts: usize, intervals: &[u64]) -> Plan {
        Plan::build(
            (0..hosts)
                .map(|h| host(h, &format!("h{h}"), intervals))
                .collect(),
        )
    }

    /// Host `name`, the `h`-th, with one SNMP item per interval (seconds).
    pub(super) fn host(h: usize, name: &str, intervals: &[u64]) -> HostSpec {
        HostSpec {
            name: name.into(),
            ip: "127.0.0.1".parse().unwrap(),
            snmp: None,
            items: intervals
                .iter()
                .enumerate()
                .map(|(i, &iv)| ItemSpec {
                    itemid: (h * 100 + i) as u64,
                    key: format!("k{i}").into(),
                    value_type: ValueType::Uint,
                    interval_ms: iv as u32 * 1000,
                    kind: ItemKind::Snmp {
                        oid: snmp::Oid::from_arcs(&[1, 3, 6, i as u32]).unwrap(),
                    },
                    pre: None,
                })
                .collect(),
        }
    }

    #[test]
    fn long_intervals_use_coarse_buckets_and_still_fire_on_their_slots() {
        // 5,000 hourly tasks: one 16 ms bucket each would be ~5,000 buckets; far buckets
        // of 16.4 s hold them in at most 3,600 / 16.4 + 2.
        let p = plan(5_000, &[3600]);
        let t0 = 1_000_000_000;
        let s = Scheduler::new(&p, 1, t0);
        let buckets = |s: &Scheduler| {
            let q = s.shards[0].queues[Engine::Snmp as usize].lock().unwrap();
            (q.near.len(), q.far.len())
        };
        let (near, far) = buckets(&s);
        assert!(near + far <= 222, "{near} + {far} buckets");
        assert_eq!(s.queued(Engine::Snmp), vec![5_000]);
        // Counting and taking cross the far windows: every task fires once, on its slot.
        let mut out = Vec::new();
        let mut now = t0;
        let mut fired = 0;
        while now < t0 + 3_600_000 {
            now += 1_000;
            let counted = s.due_counts(Engine::Snmp, now)[0];
            out.clear();
            s.take_due(Engine::Snmp, now, u64::MAX, |_| 1, &mut out);
            assert_eq!(out.len(), counted);
            for d in &out {
                assert!(d.due_ms <= now && now - d.due_ms < 1_000);
                assert_eq!(p.tasks[d.task as usize].phase_ms, d.due_ms % 3_600_000);
                s.complete(*d, now);
            }
            fired += out.len();
            let (near, _) = buckets(&s);
            // Only the current window is kept in fine buckets (≤ 16.4 s / 16 ms + 1).
            assert!(near <= 1_025, "{near} fine buckets");
        }
        assert_eq!(fired, 5_000);
        assert_eq!(s.queued(Engine::Snmp), vec![5_000]);
        let (near, far) = buckets(&s);
        assert!(near + far <= 222, "{near} + {far} buckets after an hour");
    }

    #[test]
    fn slot_arithmetic() {
        assert_eq!(next_slot_after(0, 10, 3), 3);
        assert_eq!(next_slot_after(3, 10, 3), 13);
        assert_eq!(next_slot_after(12, 10, 3), 13);
        assert_eq!(next_slot_after(13, 10, 3), 23);
    }

    /// Drive the scheduler on a virtual clock: every task fires exactly once per interval,
    /// on its slot, over many intervals.
    #[test]
    fn every_task_fires_once_per_interval_on_its_slot() {
        let p = plan(200, &[10, 30, 60]);
        let s = Scheduler::new(&p, 4, 1_000_000);
        let mut fired: HashMap<u32, Vec<u64>> = HashMap::new();
        let mut out = Vec::new();
        let end = 1_000_000 + 600_000;
        let mut now = 1_000_000;
        while now < end {
            now += 100; // 100 ms ticks
            for e in Engine::ALL {
                out.clear();
                s.take_due(e, now, u64::MAX, |_| 1, &mut out);
                for d in &out {
                    assert!(
                        d.due_ms <= now && now - d.due_ms < 100,
                        "fired late: {} at {}",
                        d.due_ms,
                        now
                    );
                    fired.entry(d.task).or_default().push(d.due_ms);
                    assert!(matches!(
                        s.complete(*d, now),
                        Rescheduled::At { skipped: 0, .. }
                    ));
                }
            }
        }
        assert_eq!(fired.len(), p.tasks.len());
        for (task, times) in fired {
            let t = &p.tasks[task as usize];
            let expected = 600_000 / t.interval_ms;
            assert!(
                times.len() as u64 == expected || times.len() as u64 == expected + 1,
                "{}",
                times.len()
            );
            for w in times.windows(2) {
                assert_eq!(w[1] - w[0], t.interval_ms);
            }
            assert_eq!(times[0] % t.interval_ms, t.phase_ms % t.interval_ms);
        }
    }

    /// Tasks of one interval are spread over it: no 1-second bucket holds much more than
    /// its share.
    #[test]
    fn tasks_are_spread_over_the_interval() {
        let p = plan(10_000, &[10]);
        let mut buckets = [0usize; 10];
        for t in &p.tasks {
            buckets[(t.phase_ms / 1000) as usize] += 1;
        }
        for b in buckets {
            assert!((800..1200).contains(&b), "{buckets:?}");
        }
    }

    #[test]
    fn late_completion_skips_missed_slots_without_burst() {
        let p = plan(1, &[10]);
        let s = Scheduler::new(&p, 1, 0);
        let mut out = Vec::new();
        let first = s.next_due(Engine::Snmp).unwrap();
        s.take_due(Engine::Snmp, first, u64::MAX, |_| 1, &mut out);
        assert_eq!(out.len(), 1);
        // Nothing is due while the poll runs, however long it takes.
        let mut more = Vec::new();
        assert_eq!(
            s.take_due(Engine::Snmp, first + 35_000, u64::MAX, |_| 1, &mut more),
            0
        );
        // It finished 35 s late: slots +10, +20, +30 were missed, next is +40.
        let r = s.complete(out[0], first + 35_000);
        assert_eq!(
            r,
            Rescheduled::At {
                next_ms: first + 40_000,
                skipped: 3
            }
        );
    }

    #[test]
    fn a_poll_ending_on_its_next_slot_skips_nothing() {
        // A poll that ends exactly on its next slot (a 10 s sweep whose timeout is the
        // interval, on a paused clock): that slot can still be polled on time. It was
        // counted as skipped and the task put a whole interval later.
        let p = plan(1, &[10]);
        let s = Scheduler::new(&p, 1, 0);
        let first = s.next_due(Engine::Snmp).unwrap();
        let out = take_all(&s, first);
        assert_eq!(out.len(), 1);
        assert_eq!(
            s.complete(out[0], first + 10_000),
            Rescheduled::At {
                next_ms: first + 10_000,
                skipped: 0
            }
        );
        // One ending late, on a later slot: the slots before are skipped, not that one.
        let out = take_all(&s, first + 10_000);
        assert_eq!(out.len(), 1);
        assert_eq!(
            s.complete(out[0], first + 30_000),
            Rescheduled::At {
                next_ms: first + 30_000,
                skipped: 1
            }
        );
    }

    #[test]
    fn cost_limit_bounds_a_batch() {
        let p = plan(100, &[10]);
        let s = Scheduler::new(&p, 4, 0);
        let mut out = Vec::new();
        let n = s.take_due(Engine::Snmp, 20_000, 30, |_| 1, &mut out);
        assert_eq!(n, 30);
        let n2 = s.take_due(Engine::Snmp, 20_000, u64::MAX, |_| 1, &mut out);
        assert_eq!(n2, 70);
        assert_eq!(
            s.take_due(Engine::Icmp, 20_000, u64::MAX, |_| 1, &mut out),
            0
        );
    }

    #[test]
    fn every_shard_leads_in_turn_whatever_the_other_engine_takes() {
        // Behind schedule (every task overdue, batches of one), the engines' takes
        // alternating: SNMP's batches came from every shard in turn. The cursor was
        // shared by both engines, so with two shards the SNMP takes all started on shard
        // 1 and shard 0's tasks waited until shard 1 had none due.
        let p = plan(200, &[10]);
        let s = Scheduler::new(&p, 2, 0);
        let mut shards = std::collections::HashSet::new();
        let mut out = Vec::new();
        for _ in 0..10 {
            s.take_due(Engine::Icmp, 20_000, 1, |_| 1, &mut out);
            out.clear();
            assert_eq!(s.take_due(Engine::Snmp, 20_000, 1, |_| 1, &mut out), 1);
            shards.insert(out[0].shard);
        }
        assert_eq!(shards.len(), 2, "SNMP served from shards {shards:?} only");
    }

    #[test]
    fn concurrent_takers_never_share_a_task() {
        let p = plan(5_000, &[10]);
        let s = Arc::new(Scheduler::new(&p, 8, 0));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let s = s.clone();
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    loop {
                        let mut out = Vec::new();
                        if s.take_due(Engine::Snmp, 10_000, 37, |_| 1, &mut out) == 0 {
                            break;
                        }
                        got.extend(out.iter().map(|d| d.task));
                    }
                    got
                })
            })
            .collect();
        let mut all: Vec<u32> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        all.sort_unstable();
        let n = all.len();
        all.dedup();
        assert_eq!(n, all.len(), "a task was taken twice");
        assert_eq!(n, p.tasks.len());
    }

    #[test]
    fn reload_adds_removes_and_keeps_slots() {
        let p1 = plan(100, &[10]);
        let s = Scheduler::new(&p1, 4, 0);
        let mut out = Vec::new();
        s.take_due(Engine::Snmp, 5_000, u64::MAX, |_| 1, &mut out);
        let taken_before = out.clone();
        // Reload with 150 hosts (50 new) and a second interval.
        let p2 = plan(150, &[10, 60]);
        s.reload(&p1, &p2, 5_000);
        // Completions from the old generation queue nothing more: the new queues hold
        // their tasks' next slots already (which the completions confirm).
        for d in &taken_before {
            let next = next_slot_after(5_000, 10_000, u64::from(d.phase_ms));
            assert_eq!(
                s.complete(*d, 5_001),
                Rescheduled::At {
                    next_ms: next,
                    skipped: 0
                }
            );
        }
        assert_eq!(s.queued(Engine::Snmp).iter().sum::<usize>(), p2.tasks.len());
        // Over the next 60 s every new task fires, the same host keeps its slot phase.
        let mut fired = std::collections::HashSet::new();
        for now in (5_000..=65_000).step_by(50) {
            out.clear();
            s.take_due(Engine::Snmp, now, u64::MAX, |_| 1, &mut out);
            for d in &out {
                fired.insert(d.task);
                let t = &p2.tasks[d.task as usize];
                assert_eq!(d.due_ms % t.interval_ms, t.phase_ms);
                s.complete(*d, now);
            }
        }
        assert_eq!(fired.len(), p2.tasks.len());
        // Shrinking removes tasks.
        let p3 = plan(10, &[10]);
        s.reload(&p2, &p3, 70_000);
        assert_eq!(s.queued(Engine::Snmp).iter().sum::<usize>(), 10);
    }

    #[test]
    fn a_reload_prepared_earlier_polls_no_slot_twice() {
        // The queues are prepared at 5 s; before they are installed at 8 s the old
        // queues serve every slot in (5 s, 8 s]. Installing must move those tasks to
        // their next slot after 8 s, or each would be polled twice for one slot.
        let p = plan(200, &[10]);
        let s = Scheduler::new(&p, 4, 0);
        let mut out = Vec::new();
        s.take_due(Engine::Snmp, 5_000, u64::MAX, |_| 1, &mut out);
        let prepared = s.prepare(&p, 5_000);
        out.clear();
        s.take_due(Engine::Snmp, 8_000, u64::MAX, |_| 1, &mut out);
        let served: std::collections::HashSet<u32> = out.iter().map(|d| d.task).collect();
        assert!(!served.is_empty());
        s.install(prepared, 8_000, Some((&p, &p)));
        assert_eq!(s.queued(Engine::Snmp).iter().sum::<usize>(), p.tasks.len());
        out.clear();
        s.take_due(Engine::Snmp, 8_000, u64::MAX, |_| 1, &mut out);
        assert!(
            out.is_empty(),
            "slots before the install handed out again: {out:?}"
        );
        // Each of them comes back one interval later, exactly on its slot.
        for now in (8_050..=18_000).step_by(50) {
            out.clear();
            s.take_due(Engine::Snmp, now, u64::MAX, |_| 1, &mut out);
            for d in &out {
                let t = &p.tasks[d.task as usize];
                assert!(d.due_ms > 8_000 && d.due_ms % t.interval_ms == t.phase_ms);
                if served.contains(&d.task) {
                    assert!(d.due_ms > 15_000, "task {} at {}", d.task, d.due_ms);
                }
            }
        }
    }

    #[test]
    fn reloads_neither_repeat_nor_lose_a_slot_taken_ahead() {
        // Engines take a batch window (1 s) ahead every 250 ms and their polls take 120 ms;
        // the same plan is reloaded every 3.3 s (a SIGHUP, a discovery re-plan). Every
        // task is handed out exactly once per slot: a reload queued tasks taken ahead
        // (for a slot still after the reload) for that slot again, and they were polled
        // twice in 0.2 s.
        let p = plan(1_000, &[10]);
        let s = Scheduler::new(&p, 4, 0);
        let mut handed: HashMap<(u32, u64), u32> = HashMap::new();
        let mut running: Vec<(u64, Due)> = Vec::new();
        let mut out = Vec::new();
        for now in (0..60_000u64).step_by(50) {
            running.retain(|&(end, d)| {
                if end <= now {
                    s.complete(d, now);
                }
                end > now
            });
            if now % 3_300 == 0 && now > 0 {
                s.reload(&p, &p, now);
            }
            if now % 250 == 0 {
                out.clear();
                s.take_due(Engine::Snmp, now + 1_000, u64::MAX, |_| 1, &mut out);
                for d in &out {
                    *handed.entry((d.task, d.due_ms)).or_default() += 1;
                    running.push((now + 120, *d));
                }
            }
        }
        let twice: Vec<_> = handed.iter().filter(|(_, &n)| n > 1).collect();
        assert!(twice.is_empty(), "{} slots handed out twice", twice.len());
        // And none was lost: each task has every slot from its first to its last.
        let mut slots: HashMap<u32, Vec<u64>> = HashMap::new();
        for &(t, due) in handed.keys() {
            slots.entry(t).or_default().push(due);
        }
        for (t, mut v) in slots {
            v.sort_unstable();
            assert!(
                v.windows(2).all(|w| w[1] - w[0] == 10_000),
                "task {t}: {v:?}"
            );
            assert!(v.len() >= 5, "task {t}: {v:?}");
        }
    }

    #[test]
    fn a_reload_while_behind_keeps_the_overdue_slots() {
        // Nothing taken since 20 s (the drivers are busy), reloaded at 23 s: the tasks
        // whose slots fell in (20 s, 23 s] are still due at 23 s, not moved to 33 s
        // (those polls were lost, and not even counted as skipped).
        let p = plan(300, &[10]);
        let s = Scheduler::new(&p, 4, 10_000);
        let mut out = Vec::new();
        s.take_due(Engine::Snmp, 20_000, u64::MAX, |_| 1, &mut out);
        for d in &out {
            s.complete(*d, 20_000);
        }
        let overdue = s.due_counts(Engine::Snmp, 23_000).iter().sum::<usize>();
        assert!(overdue > 50, "{overdue}");
        s.reload(&p, &p, 23_000);
        out.clear();
        s.take_due(Engine::Snmp, 23_000, u64::MAX, |_| 1, &mut out);
        assert_eq!(out.len(), overdue);
        assert!(out.iter().all(|d| (20_000..=23_000).contains(&d.due_ms)));
    }

    #[test]
    fn a_reload_during_a_poll_keeps_the_next_slot_taken_ahead_of() {
        // A 1 s task is polled for its slot; an engine then takes up to a batch window
        // ahead (1 s) and the plan is reloaded while the poll still runs. Its next slot
        // falls in that window, but was never handed out: the task was in flight. The
        // new queues put it past the window and the poll's completion (of the old plan)
        // was dropped, so that slot was never polled. Then so with two or three reloads
        // (a discovery re-plan after a SIGHUP) before the poll completes: its completion
        // met a queue two generations on and was dropped.
        let p = plan(1, &[1]);
        for reloads in 1..=3 {
            let s = Scheduler::new(&p, 1, 0);
            let first = s.next_due(Engine::Snmp).unwrap();
            let running = take_all(&s, first);
            assert_eq!(running.len(), 1);
            assert!(take_all(&s, first + 100 + 1_000).is_empty());
            for i in 0..reloads {
                s.reload(&p, &p, first + 200 + i * 50);
            }
            let done = s.complete(running[0], first + 300);
            assert_eq!(
                done,
                Rescheduled::At {
                    next_ms: first + 1_000,
                    skipped: 0
                },
                "after {reloads} reloads"
            );
            let out = take_all(&s, first + 1_000);
            assert_eq!(out.len(), 1, "slot {} lost", first + 1_000);
            assert_eq!(out[0].due_ms, first + 1_000);
            assert_eq!(s.queued(Engine::Snmp), vec![0]);
        }
    }

    #[test]
    fn a_poll_gets_its_slot_back_across_as_many_reloads_as_are_kept() {
        // The queues remember RELOADS_KEPT reloads (8 bytes each), not every one: a
        // discovery re-planning all day would grow them without end.
        let p = plan(1, &[1]);
        let s = Scheduler::new(&p, 1, 0);
        for (reloads, kept) in [(RELOADS_KEPT, true), (RELOADS_KEPT + 1, false)] {
            let now = s.next_due(Engine::Snmp).unwrap();
            let running = take_all(&s, now);
            assert_eq!(running.len(), 1);
            assert!(take_all(&s, now + 1_500).is_empty());
            for i in 0..reloads as u64 {
                s.reload(&p, &p, now + 100 + i);
            }
            let done = s.complete(running[0], now + 500);
            assert_eq!(
                matches!(done, Rescheduled::At { next_ms, .. } if next_ms == now + 1_000),
                kept,
                "{done:?} after {reloads} reloads"
            );
            let q = s.shards[0].queues[Engine::Snmp as usize].lock().unwrap();
            assert_eq!(q.served_to.len(), RELOADS_KEPT);
            drop(q);
            // The slot the lost one skipped to, and then on.
            for d in take_all(&s, now + 3_000) {
                s.complete(d, now + 3_000);
            }
        }
    }

    #[test]
    fn a_completion_after_two_reloads_moves_no_slot_handed_out_between() {
        // One probe (ICMP follows no host in flight), every 1 s. Its poll for `first`
        // outlasts a reload, after which an engine taking ahead gets the task again for
        // its next slot (the first after what had been served) and completes it, then
        // another reload. The first poll's completion must not move the task back onto
        // the slot handed out between (the newest queue's own placement says nothing
        // of that one).
        let p = probes_on_one_phase(&["icmpping"], 1);
        let s = Scheduler::new(&p, 1, 0);
        let take = |now| {
            let mut out = Vec::new();
            s.take_due(Engine::Icmp, now, u64::MAX, |_| 1, &mut out);
            out
        };
        let first = s.next_due(Engine::Icmp).unwrap();
        let slow = take(first);
        assert_eq!(slow.len(), 1);
        s.reload(&p, &p, first + 100);
        let again = take(first + 1_000);
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].due_ms, first + 1_000);
        s.complete(again[0], first + 300);
        s.reload(&p, &p, first + 400);
        s.complete(slow[0], first + 500);
        let mut handed = vec![first, first + 1_000];
        for now in (first + 500..first + 5_000).step_by(100) {
            for d in take(now) {
                handed.push(d.due_ms);
                s.complete(d, now);
            }
        }
        let mut once = handed.clone();
        once.dedup();
        assert_eq!(handed, once, "a slot handed out twice");
    }

    #[test]
    fn reloads_during_long_polls_neither_repeat_nor_lose_a_slot() {
        // 2 s tasks; takes a batch window (1 s) ahead every 50 ms to 950 ms; a reload
        // every 3 s to 4 s or at the next step, one to three at once (bursts: a SIGHUP,
        // then discovery's re-plans; polls outlast two reloads and more). Both engines:
        // ICMP follows no host in flight, and the two probes of an even host, when
        // grouped on one phase, share their slots (a completion cannot tell which entry
        // is its own: those may lose a slot, counted as skipped, never poll one twice).
        // Each slot of a task, from its first on, is handed out once, in order, or
        // counted as skipped, never both. With polls of 1 s to 1.9 s (short of the slot
        // after next) and batches unbounded, no slot of a task its entries tell apart
        // is lost to a reload; with polls up to 4.9 s and batches of 1 to 40 tasks
        // (some left unserved at a reload), some are (an ICMP task is handed out
        // again while its poll runs), but counted. An SNMP task is never polled for a
        // slot that had passed when its poll before ended.
        // Every third host has SNMP items at 4 s too: its two tasks wait for each other.
        let intervals: [&[u64]; 2] = [&[2, 4], &[2]];
        let mut hosts: Vec<HostSpec> = (0..50)
            .map(|h| host(h, &format!("h{h}"), intervals[usize::from(h % 3 > 0)]))
            .collect();
        for (i, h) in hosts.iter_mut().enumerate() {
            for key in ["icmpping", "icmpping[,4]"].iter().take(1 + (i + 1) % 2) {
                h.items.push(crate::plan::tests::icmp_item(&h.name, key, 2));
            }
        }
        let mut p = Plan::build(hosts);
        p.group_icmp_phases(16);
        // ICMP tasks sharing their host's slots with another probe.
        let shared: Vec<bool> = (p.tasks.iter().zip(multi_tasks(&p)))
            .map(|(t, m)| m && t.engine == Engine::Icmp)
            .collect();
        assert!(shared.iter().any(|&x| x));
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut rand = |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        for (polls_past, batch) in [(900, None), (3_900, Some(40))] {
            let s = Scheduler::new(&p, 3, 0);
            // Per task: the slots handed out, and those counted as skipped (a
            // completion's are the slots right after the one polled), with whether a
            // stale completion counted them (a reload took them as served).
            let mut handed: HashMap<u32, Vec<u64>> = HashMap::new();
            let mut skipped: HashMap<u32, Vec<(u64, bool)>> = HashMap::new();
            // Per task: (slot, when its poll ended).
            let mut polls: HashMap<u32, Vec<(u64, u64)>> = HashMap::new();
            let mut finish = |d: Due, end: u64| {
                polls.entry(d.task).or_default().push((d.due_ms, end));
                let r = s.complete(d, end);
                let stale = matches!(r, Rescheduled::Stale { .. });
                let iv = u64::from(d.interval_ms);
                let slots = (1..=r.skipped()).map(|k| (d.due_ms + k * iv, stale));
                skipped.entry(d.task).or_default().extend(slots);
            };
            let mut running: Vec<(u64, Due)> = Vec::new();
            let (mut now, mut reload_at, mut reloaded_at) = (0u64, 1_000u64, 0u64);
            // Reloads, and those within the batch window of the one before; tasks
            // taken after waiting for their host, ready since it was free.
            let (mut reloads, mut bursts, mut released) = (0, 0, 0);
            while now < 120_000 {
                now += 50 + rand(900);
                for (end, d) in std::mem::take(&mut running) {
                    if end > now {
                        running.push((end, d));
                    } else {
                        finish(d, end);
                    }
                }
                if now >= reload_at {
                    for _ in 0..1 + rand(3) {
                        s.reload(&p, &p, now);
                        bursts += usize::from(now - reloaded_at < 1_000);
                        reloaded_at = now;
                        reloads += 1;
                    }
                    reload_at = now + [0, 3_000 + rand(1_000)][usize::from(rand(3) > 0)];
                }
                for e in Engine::ALL {
                    let mut out = Vec::new();
                    let max = batch.map_or(u64::MAX, |b| 1 + rand(b));
                    s.take_due(e, now + 1_000, max, |_| 1, &mut out);
                    for d in out {
                        assert!(d.due_ms <= d.ready_ms && d.ready_ms <= now + 1_000);
                        released += usize::from(d.ready_ms > d.due_ms);
                        handed.entry(d.task).or_default().push(d.due_ms);
                        running.push((now + 1_000 + rand(polls_past), d));
                    }
                }
            }
            // The polls still running end too: what they skipped is counted then.
            for (end, d) in running {
                finish(d, end);
            }
            assert!(
                reloads > 30 && bursts > 5 && released > 0,
                "{reloads} reloads, {bursts} in bursts, {released} released"
            );
            assert_eq!(handed.len(), p.tasks.len());
            let mut lost = 0;
            for (t, v) in &handed {
                assert!(v.windows(2).all(|w| w[0] < w[1]), "task {t}: {v:?}");
                let skips = skipped.remove(t).unwrap_or_default();
                let mut all: Vec<u64> =
                    v.iter().copied().chain(skips.iter().map(|s| s.0)).collect();
                all.sort_unstable();
                assert!(
                    all.windows(2)
                        .all(|w| w[1] - w[0] == p.tasks[*t as usize].interval_ms),
                    "task {t}: polled {v:?}, skipped {skips:?}"
                );
                if !shared[*t as usize] {
                    lost += skips.iter().filter(|s| s.1).count();
                }
            }
            if batch.is_none() {
                assert_eq!(lost, 0, "{lost} slots lost over {reloads} reloads");
            }
            // An SNMP task (its host followed in flight) is polled for no slot that had
            // passed when its poll before ended: no back-to-back catch-up.
            for (t, mut v) in polls {
                v.sort_unstable();
                let snmp = p.tasks[t as usize].engine == Engine::Snmp;
                let burst = v.windows(2).find(|w| snmp && w[1].0 < w[0].1);
                assert!(burst.is_none(), "task {t}: {burst:?}");
            }
        }
    }

    #[test]
    fn a_reload_tells_apart_the_probes_of_a_host_on_one_phase() {
        // Two probes of one host, every 10 s, grouped on one phase: two tasks on the
        // same slots. One is polled for a slot, the other still queued for it (a full
        // batch) when the plan is reloaded. The slot kept for the unserved one went to
        // the polled one (the reload matched tasks by host, interval and phase only):
        // it was polled twice for the slot, the other not at all.
        let p = two_probes_on_one_phase();
        let s = Scheduler::new(&p, 1, 0);
        let due = s.next_due(Engine::Icmp).unwrap();
        let mut polled = Vec::new();
        s.take_due(Engine::Icmp, due, 1, |_| 1, &mut polled);
        assert_eq!(polled.len(), 1);
        s.reload(&p, &p, due + 100);
        let mut out = Vec::new();
        s.take_due(Engine::Icmp, due + 100, u64::MAX, |_| 1, &mut out);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_ne!(out[0].task, polled[0].task, "polled twice for {due}");
        assert_eq!(out[0].due_ms, due);
    }

    /// The tasks [`multi_tasks`] marks are those a host does not tell apart, in any
    /// order of the plan's tasks: as built (a host's tasks together, ICMP phases in no
    /// order within an interval) and with every host's tasks apart.
    #[test]
    fn multi_tasks_marks_the_same_tasks_in_any_order() {
        // Host "a": SNMP every 2 s and 4 s; probes every 2 s on phases 100, 200, 100
        // (as built), and one every 4 s on 100. Host "b": one SNMP task and one probe
        // every 2 s on 100.
        let icmp = crate::plan::tests::icmp_item;
        let mut a = host(0, "a", &[2, 4]);
        for key in ["icmpping", "icmpping[,4]", "icmpping[,5]"] {
            a.items.push(icmp("a", key, 2));
        }
        a.items.push(icmp("a", "icmpping[,6]", 4));
        let mut b = host(1, "b", &[2]);
        b.items.push(icmp("b", "icmpping", 2));
        let mut p = Plan::build(vec![a, b]);
        let mut two_s = [100, 200, 100].into_iter();
        for t in p.tasks.iter_mut().filter(|t| t.engine == Engine::Icmp) {
            t.phase_ms = if t.host == 0 && t.interval_ms == 2_000 {
                two_s.next().unwrap()
            } else {
                100
            };
        }
        assert_eq!(two_s.next(), None);
        // The marked tasks by host, engine, interval and ICMP phase (SNMP phases are
        // hashed).
        let marked = |p: &Plan| -> Vec<(u32, Engine, u64, u64)> {
            let mut m: Vec<_> = (p.tasks.iter().zip(multi_tasks(p)))
                .filter(|(_, m)| *m)
                .map(|(t, _)| {
                    let phase = if t.engine == Engine::Icmp {
                        t.phase_ms
                    } else {
                        0
                    };
                    (t.host, t.engine, t.interval_ms, phase)
                })
                .collect();
            m.sort_unstable();
            m
        };
        let expected = vec![
            (0, Engine::Icmp, 2_000, 100),
            (0, Engine::Icmp, 2_000, 100),
            (0, Engine::Snmp, 2_000, 0),
            (0, Engine::Snmp, 4_000, 0),
        ];
        assert_eq!(marked(&p), expected);
        // The tasks at even places first: one of "b"'s between "a"'s.
        let (even, odd): (Vec<_>, Vec<_>) =
            p.tasks.drain(..).enumerate().partition(|(i, _)| i % 2 == 0);
        p.tasks = even.into_iter().chain(odd).map(|(_, t)| t).collect();
        assert!(p
            .tasks
            .windows(3)
            .any(|w| w[0].host == 0 && w[1].host == 1 && w[2].host == 0));
        assert_eq!(marked(&p), expected);
        p.tasks.reverse();
        assert_eq!(marked(&p), expected);
    }

    /// One host pinged with two probes every 10 s, grouped on one phase.
    fn two_probes_on_one_phase() -> Plan {
        let p = probes_on_one_phase(&["icmpping", "icmpping[,4]"], 10);
        assert_eq!(p.tasks.len(), 2);
        assert_eq!(p.tasks[0].phase_ms, p.tasks[1].phase_ms);
        p
    }

    /// One host pinged with the probes of `keys` every `interval_s`, grouped on one
    /// phase.
    fn probes_on_one_phase(keys: &[&str], interval_s: u64) -> Plan {
        let mut p = Plan::build(vec![HostSpec {
            name: "pinged".into(),
            ip: "127.0.0.1".parse().unwrap(),
            snmp: None,
            items: (keys.iter())
                .map(|k| crate::plan::tests::icmp_item("pinged", k, interval_s))
                .collect(),
        }]);
        p.group_icmp_phases(16);
        p
    }

    #[test]
    fn a_completion_after_a_reload_moves_no_other_probes_slot() {
        // Probe A's poll outlasts a slot that probe B was polled for (taken ahead) when
        // the plan is reloaded; both are queued on the next slot after that. A's
        // completion must not take B's entry for its own (they look alike): B would be
        // polled twice for the slot it was already polled for.
        let p = two_probes_on_one_phase();
        let s = Scheduler::new(&p, 1, 0);
        let due = s.next_due(Engine::Icmp).unwrap();
        let mut out = Vec::new();
        s.take_due(Engine::Icmp, due, u64::MAX, |_| 1, &mut out);
        assert_eq!(out.len(), 2);
        let (b, a) = (out[0], out[1]);
        s.complete(b, due + 10);
        out.clear();
        s.take_due(Engine::Icmp, due + 10_500, u64::MAX, |_| 1, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].task, out[0].due_ms), (b.task, due + 10_000));
        s.complete(out[0], due + 9_600);
        s.reload(&p, &p, due + 9_700);
        s.complete(a, due + 9_800);
        out.clear();
        s.take_due(Engine::Icmp, due + 10_500, u64::MAX, |_| 1, &mut out);
        assert!(
            !out.iter()
                .any(|d| d.task == b.task && d.due_ms == due + 10_000),
            "{out:?}: B polled twice for {}",
            due + 10_000
        );
    }

    #[test]
    fn a_stale_completion_counts_the_slots_no_poll_gets() {
        // Polls for a slot that outlast the next two, with a reload 25 s in: the
        // completion is stale, and the task's slots at 10 s and 20 s are polled by no
        // one (nothing ran them, and the reload took them as served). They went
        // uncounted: netpoller_skipped_slots_total missed them.
        // A task the reload removes: it had those slots, and no more after it.
        let p = plan(1, &[10]);
        let s = Scheduler::new(&p, 1, 0);
        let due = s.next_due(Engine::Snmp).unwrap();
        let running = take_all(&s, due);
        s.reload(&p, &plan(0, &[]), due + 25_000);
        assert_eq!(
            s.complete(running[0], due + 28_000),
            Rescheduled::Stale { skipped: 2 }
        );
        // Two probes of a host on one phase: the reload keeps a slot for each, on
        // which the completion cannot tell its own (the task is polled from 30 s on).
        let p = two_probes_on_one_phase();
        let s = Scheduler::new(&p, 1, 0);
        let due = s.next_due(Engine::Icmp).unwrap();
        let mut running = Vec::new();
        s.take_due(Engine::Icmp, due, u64::MAX, |_| 1, &mut running);
        assert_eq!(running.len(), 2);
        s.reload(&p, &p, due + 25_000);
        for d in running {
            assert_eq!(
                s.complete(d, due + 28_000),
                Rescheduled::Stale { skipped: 2 }
            );
        }
        let mut out = Vec::new();
        s.take_due(Engine::Icmp, due + 30_000, u64::MAX, |_| 1, &mut out);
        assert!(out.len() == 2 && out.iter().all(|d| d.due_ms == due + 30_000));
        // A one-shot poll, outside the schedule, skips nothing.
        assert_eq!(
            s.complete(Scheduler::one_shot(0), due + 28_000),
            Rescheduled::Stale { skipped: 0 }
        );
    }

    #[test]
    fn phases_survive_a_reload() {
        let p1 = plan(50, &[10]);
        let p2 = plan(60, &[10]);
        for (a, b) in p1.tasks.iter().zip(&p2.tasks) {
            assert_eq!(
                p1.hosts[a.host as usize].name,
                p2.hosts[b.host as usize].name
            );
            assert_eq!(a.phase_ms, b.phase_ms);
        }
    }

    /// Takes everything of `s` due at `now` (SNMP).
    pub(super) fn take_all(s: &Scheduler, now: u64) -> Vec<Due> {
        let mut out = Vec::new();
        s.take_due(Engine::Snmp, now, u64::MAX, |_| 1, &mut out);
        out
    }

    /// The first time in `from..` (100 ms steps) when `s` hands out something (SNMP),
    /// and the one task it hands out (a batch full after it).
    fn first_taken(s: &Scheduler, from: u64) -> (u64, Due) {
        (from..from + 100_000)
            .step_by(100)
            .find_map(|now| {
                let mut out = Vec::new();
                s.take_due(Engine::Snmp, now, 1, |_| 1, &mut out);
                out.pop().map(|d| (now, d))
            })
            .expect("something comes due")
    }

    #[test]
    fn a_hosts_task_waits_while_another_of_its_tasks_is_polled() {
        // One device with items at 10 s and 15 s: two tasks, on the same first slot
        // (an SNMP host's phase does not depend on the interval), but the batch is full
        // after the first. While its poll runs, the other is not handed to another
        // iteration (the device would get two chains of requests at once).
        let p = plan(1, &[10, 15]);
        assert_eq!(p.tasks.len(), 2);
        assert_eq!(p.tasks[0].phase_ms, p.tasks[1].phase_ms);
        let s = Scheduler::new(&p, 1, 0);
        let (t0, first) = first_taken(&s, 0);
        for now in (t0..t0 + 60_000).step_by(100) {
            let out = take_all(&s, now);
            assert!(
                out.is_empty(),
                "{out:?} handed out at {now} while {first:?} runs"
            );
        }
        // Once it is done, what waited is handed out at once, for its slot.
        let done_at = t0 + 60_000;
        s.complete(first, done_at);
        let out = take_all(&s, done_at);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_ne!(out[0].task, first.task);
        assert_eq!(out[0].due_ms, first.due_ms);
        assert_eq!(s.queued(Engine::Snmp), vec![1]);
    }

    #[test]
    fn tasks_of_a_host_taken_together_go_together() {
        // Due on one slot and taken by one call: one iteration gets both (it merges
        // them into one chain of requests).
        let p = plan(1, &[10, 15]);
        let s = Scheduler::new(&p, 1, 0);
        let due = s.next_due(Engine::Snmp).unwrap();
        assert_eq!(take_all(&s, due).len(), 2);
    }

    #[test]
    fn a_reload_never_hands_out_a_task_whose_poll_is_still_running() {
        // A reload (a SIGHUP, a discovery re-plan) 2 s into a poll that outlasts the
        // interval (a slow device, its retries): the new queues hold the task's next
        // slot, which must wait for the running poll, not start a second one.
        let p = plan(1, &[10]);
        let s = Scheduler::new(&p, 1, 0);
        let (t0, running) = first_taken(&s, 0);
        s.reload(&p, &p, t0 + 2_000);
        for now in (t0 + 2_000..t0 + 30_000).step_by(100) {
            let out = take_all(&s, now);
            assert!(out.is_empty(), "{out:?} at {now} while {running:?} runs");
        }
        // Its completion (of the old generation) puts it on its first slot from then
        // on, the slots the poll outlasted skipped, as without the reload.
        let next = next_slot_after(t0 + 30_000 - 1, 10_000, u64::from(running.phase_ms));
        assert_eq!(
            s.complete(running, t0 + 30_000),
            Rescheduled::At {
                next_ms: next,
                skipped: (next - running.due_ms) / 10_000 - 1
            }
        );
        let out = take_all(&s, next);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].due_ms, next);
    }

    #[test]
    fn what_waits_for_a_busy_host_survives_a_reload() {
        let p = plan(1, &[10, 15]);
        let s = Scheduler::new(&p, 1, 0);
        let (t0, first) = first_taken(&s, 0);
        let now = t0 + 40_000;
        assert!(take_all(&s, now).is_empty());
        s.reload(&p, &p, now);
        assert!(take_all(&s, now).is_empty());
        // The running one goes to its first slot from `now` on, as without the reload.
        assert!(matches!(
            s.complete(first, now),
            Rescheduled::At { next_ms, .. } if next_ms >= now
        ));
        let out = take_all(&s, now);
        // The task that waited, for the slot it waited on.
        assert_eq!(out.len(), 1, "{out:?}");
        assert_ne!(out[0].task, first.task);
        assert_eq!(out[0].due_ms, first.due_ms);
        assert_eq!(s.queued(Engine::Snmp), vec![1]);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Random hosts, intervals, clock steps and poll durations: a task is never handed
        /// out twice while outstanding, nor while a task of its host taken by another call
        /// is (SNMP), is never taken before its slot nor ready after the take, and every
        /// task keeps firing.
        #[test]
        fn random_schedules_keep_their_invariants(
            hosts in 1usize..40,
            intervals in proptest::collection::vec(1u64..30, 1..4),
            shards in 1usize..6,
            steps in proptest::collection::vec((1u64..700, 0usize..3, 1u64..3000), 50..200),
        ) {
            let p = plan(hosts, &intervals);
            let s = Scheduler::new(&p, shards, 1_000);
            let mut now = 1_000u64;
            // (due, finishes at, the call that took it)
            let mut outstanding: Vec<(Due, u64, usize)> = Vec::new();
            let mut fired = vec![0u32; p.tasks.len()];
            let mut out = Vec::new();
            for (call, (step, finish_some, poll_ms)) in steps.into_iter().enumerate() {
                now += step;
                // Finish polls whose time has come.
                let (done, rest): (Vec<_>, Vec<_>) =
                    outstanding.into_iter().partition(|(_, end, _)| *end <= now || finish_some == 0);
                outstanding = rest;
                for (d, _, _) in done {
                    let r = s.complete(d, now);
                    proptest::prop_assert!(matches!(r, Rescheduled::At { .. }), "{:?}", r);
                }
                out.clear();
                s.take_due(Engine::Snmp, now, 50, |_| 1, &mut out);
                for d in &out {
                    proptest::prop_assert!(d.due_ms <= now);
                    // Ready since its slot, or since its host was free, if later.
                    proptest::prop_assert!(d.due_ms <= d.ready_ms && d.ready_ms <= now);
                    proptest::prop_assert!(!outstanding.iter().any(|(o, _, _)| o.task == d.task), "task {} taken twice", d.task);
                    let t = &p.tasks[d.task as usize];
                    let busy = outstanding
                        .iter()
                        .any(|(o, _, c)| p.tasks[o.task as usize].host == t.host && *c != call);
                    proptest::prop_assert!(!busy, "task {} while its host is polled", d.task);
                    proptest::prop_assert_eq!(d.due_ms % t.interval_ms, t.phase_ms);
                    fired[d.task as usize] += 1;
                    outstanding.push((*d, now + poll_ms, call));
                }
            }
            // Queued + outstanding = every task, exactly once.
            let queued: usize = s.queued(Engine::Snmp).iter().sum();
            proptest::prop_assert_eq!(queued + outstanding.len(), p.tasks.len());
        }
    }
}

#[cfg(test)]
mod reload_and_collision_tests {
    //! Races of a reload with takes and completions, and hosts sharing a key.
    use super::tests::{host, take_all};
    use super::*;

    /// A host with one task is in flight when a reload starts; its poll completes after
    /// the generation moved but before the reload reached its shard's SNMP queue. It
    /// was taken as stale, so its in-flight bit stayed; the reload then marked the host
    /// busy with no completion left to come: it was never polled again.
    #[test]
    fn a_completion_during_a_reload_does_not_block_its_host_forever() {
        let p = Arc::new(Plan::build(vec![host(0, "solo", &[10])]));
        let s = Arc::new(Scheduler::new(&p, 1, 0));
        let due = s.next_due(Engine::Snmp).unwrap();
        let running = take_all(&s, due);
        assert_eq!(running.len(), 1);
        let gen0 = s.generation();
        // Hold the reload at shard 0's ICMP queue (it replaces ICMP, then SNMP).
        let guard = s.shards[0].queues[Engine::Icmp as usize].lock().unwrap();
        let (s2, p2) = (s.clone(), p.clone());
        let t = std::thread::spawn(move || s2.reload(&p2, &p2, due + 1_000));
        let spin = std::time::Instant::now();
        while s.generation() == gen0 {
            assert!(spin.elapsed() < std::time::Duration::from_secs(10));
            std::thread::yield_now();
        }
        s.complete(running[0], due + 1_000);
        drop(guard);
        t.join().unwrap();
        let mut handed = 0;
        for now in (due + 1_000..due + 100_000).step_by(100) {
            for d in take_all(&s, now) {
                s.complete(d, now);
                handed += 1;
            }
        }
        assert!(
            handed >= 9,
            "the host was polled {handed} times in 99 s (interval 10 s)"
        );
    }

    /// Host A (one task) and host B (two tasks) share a host key (a collision the
    /// module docs accept as "polled one after the other"). A's completion counted B's
    /// out, so B's next task was handed out while B's other task still ran.
    #[test]
    fn a_colliding_hosts_completion_does_not_free_another_busy_host() {
        let mut p = Plan::build(vec![host(0, "a", &[10]), host(1, "b", &[10, 20])]);
        p.hosts[0].hash = p.hosts[1].hash ^ 1; // same key (31 high bits), one shard
        for t in &mut p.tasks {
            t.phase_ms = if t.host == 0 { 1_000 } else { 5_000 };
        }
        let s = Scheduler::new(&p, 1, 0);
        let a = take_all(&s, 1_000);
        assert_eq!(a.len(), 1);
        assert_eq!(p.tasks[a[0].task as usize].host, 0);
        let b = take_all(&s, 5_000);
        assert_eq!(b.len(), 2, "{b:?}");
        s.complete(a[0], 6_000);
        let b10 = *b
            .iter()
            .find(|d| p.tasks[d.task as usize].interval_ms == 10_000)
            .unwrap();
        s.complete(b10, 6_000);
        // B's 20 s task is still polled: its 10 s task must wait for it.
        let out: Vec<Due> = take_all(&s, 15_000)
            .into_iter()
            .filter(|d| p.tasks[d.task as usize].host == 1)
            .collect();
        assert!(
            out.is_empty(),
            "{out:?} handed out while B's 20 s task runs"
        );
    }

    /// take_due during a reload, after the generation moved and before the queue it
    /// takes from is replaced: the Due carried the new generation with an index of the
    /// old queue, so its completion was taken as current and the task queued twice.
    #[test]
    fn a_take_during_a_reload_does_not_queue_the_task_twice() {
        let p = Arc::new(Plan::build(vec![host(0, "solo", &[10])]));
        let s = Arc::new(Scheduler::new(&p, 1, 0));
        let due = s.next_due(Engine::Snmp).unwrap();
        let gen0 = s.generation();
        let guard = s.shards[0].queues[Engine::Icmp as usize].lock().unwrap();
        let (s2, p2) = (s.clone(), p.clone());
        let t = std::thread::spawn(move || s2.reload(&p2, &p2, due - 1));
        let spin = std::time::Instant::now();
        while s.generation() == gen0 {
            assert!(spin.elapsed() < std::time::Duration::from_secs(10));
            std::thread::yield_now();
        }
        let taken = take_all(&s, due);
        assert_eq!(taken.len(), 1);
        drop(guard);
        t.join().unwrap();
        s.complete(taken[0], due + 100);
        assert_eq!(s.queued(Engine::Snmp), vec![1], "the task is queued twice");
    }

    /// A host with tasks every 1 s and 2 s, both polled for one slot when a reload
    /// comes. The 1 s task's next slot comes while the 2 s one still runs: its entry
    /// waits for the host. The 1 s poll then completes late, past that slot: without
    /// the reload it would have been put on the first slot from then on (the one
    /// passed skipped); its entry was not found where the reload put it (it waited),
    /// so it was polled again at once when the host was free, for a slot already
    /// past, right after the poll that ran over it.
    #[test]
    fn a_late_completion_after_a_reload_moves_its_task_waiting_for_the_host() {
        let p = Plan::build(vec![host(0, "m", &[1, 2])]);
        let s = Scheduler::new(&p, 1, 0);
        let due = s.next_due(Engine::Snmp).unwrap();
        let running = take_all(&s, due);
        assert_eq!(running.len(), 2);
        let (one, two) = match running[0].interval_ms {
            1_000 => (running[0], running[1]),
            _ => (running[1], running[0]),
        };
        s.reload(&p, &p, due + 200);
        assert!(take_all(&s, due + 1_000).is_empty());
        assert_eq!(
            s.complete(one, due + 1_500),
            Rescheduled::At {
                next_ms: due + 2_000,
                skipped: 1
            }
        );
        s.complete(two, due + 1_600);
        assert!(take_all(&s, due + 1_600).is_empty());
        let out = take_all(&s, due + 2_000);
        assert_eq!(out.len(), 2, "{out:?}");
        assert!(out.iter().all(|d| d.due_ms == due + 2_000), "{out:?}");
    }

    /// A device with items at 10 s and 15 s, slow: one task is polled from the first
    /// slot (a batch full after it) and still runs 30 s later, the other's slot passed
    /// meanwhile: it waits. The plan, the scheduler, that slot and the running poll.
    fn a_task_waiting_for_a_slow_device() -> (Plan, Scheduler, u64, Due) {
        let p = Plan::build(vec![host(0, "m", &[10, 15])]);
        let s = Scheduler::new(&p, 1, 0);
        let due = s.next_due(Engine::Snmp).unwrap();
        let mut out = Vec::new();
        s.take_due(Engine::Snmp, due, 1, |_| 1, &mut out);
        assert_eq!(out.len(), 1);
        assert!(take_all(&s, due + 30_000).is_empty());
        (p, s, due, out[0])
    }

    /// What waits for the device is not the engine behind: `netpoller_scheduler_due`
    /// (alerted on when it stays > 0) counted it, and fired for one slow device; it is
    /// counted apart, as waiting (still queued).
    #[test]
    fn a_task_waiting_for_its_host_is_counted_as_waiting_not_due() {
        let (_, s, due, _) = a_task_waiting_for_a_slow_device();
        assert_eq!(s.queued(Engine::Snmp), vec![1]);
        assert_eq!(s.due_counts(Engine::Snmp, due + 30_000), vec![0]);
        assert_eq!(s.waiting(Engine::Snmp), vec![1]);
    }

    /// Once the device's poll is done, the task that waited for it is due from then
    /// on, for the slot it waited on. Its old due time read as the engine's lag
    /// (`/healthz`: "30 s behind") until it was taken.
    #[test]
    fn a_task_released_by_its_host_is_due_from_its_release() {
        let (p, s, due, running) = a_task_waiting_for_a_slow_device();
        let freed = due + 30_500;
        s.complete(running, freed);
        assert_eq!(s.next_due(Engine::Snmp), Some(freed));
        assert_eq!(s.due_counts(Engine::Snmp, freed), vec![1]);
        assert_eq!(s.waiting(Engine::Snmp), vec![0]);
        let taken = take_all(&s, freed);
        assert_eq!(taken.len(), 1, "{taken:?}");
        // The slot it waited on: its first (the plan started at 0).
        let slot = p.tasks[taken[0].task as usize].phase_ms;
        assert!(slot <= due + 30_000);
        assert_eq!(taken[0].due_ms, slot, "the slot it waited on");
        assert_eq!(taken[0].ready_ms, freed);
    }

    /// A take of what its host released keeps the released entries' buffer for the
    /// next (it allocated one at every take that found any).
    #[test]
    fn a_take_keeps_the_buffer_of_released_tasks() {
        let (_, s, due, running) = a_task_waiting_for_a_slow_device();
        let freed = due + 30_500;
        s.complete(running, freed);
        let buffer = |s: &Scheduler| {
            let q = s.shards[0].queues[Engine::Snmp as usize].lock().unwrap();
            let r = &q.serial.as_ref().unwrap().released;
            (r.len(), r.capacity(), r.as_ptr())
        };
        let (len, capacity, at) = buffer(&s);
        assert_eq!(len, 1);
        assert_eq!(take_all(&s, freed).len(), 1);
        assert_eq!(buffer(&s), (0, capacity, at));
    }

    /// A reload between the release and the take keeps the release: the task stays due
    /// from when its device was free. Queued again as due from its slot, it read as the
    /// engine 30 s behind (`/healthz` 503, a late iteration) until taken.
    #[test]
    fn a_reload_keeps_a_released_task_due_from_its_release() {
        let (p, s, due, running) = a_task_waiting_for_a_slow_device();
        let freed = due + 30_500;
        s.complete(running, freed);
        s.reload(&p, &p, freed);
        assert_eq!(s.next_due(Engine::Snmp), Some(freed));
        assert_eq!(s.queued(Engine::Snmp), vec![2]);
        let taken = take_all(&s, freed);
        assert_eq!(taken.len(), 1, "{taken:?}");
        let slot = p.tasks[taken[0].task as usize].phase_ms;
        assert_eq!(
            taken[0].due_ms, slot,
            "the slot it waited on, still unserved"
        );
        assert_eq!(taken[0].ready_ms, freed);
    }
}
