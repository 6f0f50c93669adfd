//! What batches hold in memory while they live, counted by this test binary's own
//! allocator (one per binary: nothing else is measured here).

use sink::batch::{Limits, Pending};
use sink::{Row, RowValue, Table};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::Duration;

/// The system allocator, counting what each thread allocated and has not freed.
struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
}

// SAFETY: every call is passed on to the system allocator as it came; the count
// beside it allocates nothing (a const thread-local `Cell`).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = LIVE.try_with(|c| c.set(c.get() + layout.size() as isize));
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let _ = LIVE.try_with(|c| c.set(c.get() - layout.size() as isize));
        // SAFETY: `ptr` was allocated by `alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Bytes this thread holds allocated.
fn live() -> isize {
    LIVE.with(Cell::get)
}

fn row(i: u64) -> Row {
    Row {
        itemid: i,
        clock: 1_720_000_000,
        ns: 0,
        hostname: "a-127.0.206.1".into(),
        itemname: "icmpping".into(),
        value: RowValue::Uint(1),
    }
}

/// A soak's daemon, at a few hundred values per second, held 10 MB of heap in batches
/// of a few kilobytes: each reserved what a full batch may take at the default limits
/// (50,000 rows: 3.2 MB) and, a slice of that buffer, kept all of it while it lived,
/// queued or retried through an outage. Eight such batches live at once hold about
/// their own size.
#[test]
fn batches_alive_at_once_hold_about_their_own_size() {
    let limits = Limits {
        rows: 50_000,
        bytes: 16 << 20,
        age: Duration::from_secs(5),
    };
    let mut pending = Pending::new(Table::Uint);
    let before = live();
    let mut alive = Vec::new();
    for b in 0..8u64 {
        for i in 0..100 {
            pending.push(&row(b * 100 + i), tokio::time::Instant::now, &limits);
        }
        alive.push(pending.take().unwrap());
    }
    drop(pending);
    let data: usize = alive.iter().map(|b| b.data.len()).sum();
    let held = usize::try_from(live() - before).unwrap();
    assert!(
        held <= 4 * data + (64 << 10),
        "8 batches of {data} bytes in all hold {held} bytes"
    );
}
